//! The daemon's connection threads: the thread that answered a command waits for the
//! next one instead of exiting, at most `IDLE_CONN_THREADS` of them wait, and a burst
//! of concurrent clients is served in full.

mod common;
use common::Env;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Thread ids of the daemon's connection threads.
fn conn_threads(pid: &str) -> BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim() == "conn").then(|| e.file_name().to_string_lossy().parse().ok())?
        })
        .collect()
}

/// Poll until `ok` holds for the daemon's connection threads (a thread decides to
/// wait or leave just after its answer is sent).
fn settle(pid: &str, ok: impl Fn(&BTreeSet<u64>) -> bool) -> BTreeSet<u64> {
    let t = Instant::now();
    loop {
        let now = conn_threads(pid);
        if ok(&now) || t.elapsed() > Duration::from_secs(10) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connection_threads_are_reused_and_their_number_is_bounded() {
    let env = Env::new();
    let v = env.vdev("a");
    env.zpool(&["create", "-O", "canmount=noauto", "-o", "size=64M", "tank", &v]).ok();
    let pid = std::fs::read_to_string(env.state().join("daemon.pid")).unwrap().trim().to_string();
    // One command at a time: the same thread answers each, and stays for the next.
    let first = settle(&pid, |t| t.len() == 1);
    assert_eq!(first.len(), 1, "one waiting thread after the first commands: {first:?}");
    for _ in 0..10 {
        assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "tank\n");
    }
    assert_eq!(settle(&pid, |t| *t == first), first, "sequential commands reuse the waiting thread");
    // Twelve clients at once: every one answered; afterwards at most four threads wait.
    std::thread::scope(|s| {
        let env = &env;
        let clients: Vec<_> = (0..12).map(|_| s.spawn(move || env.zpool(&["list", "-H", "-o", "name"]).ok().stdout)).collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), "tank\n");
        }
    });
    let after = settle(&pid, |t| t.len() <= tarn_cli::daemon::IDLE_CONN_THREADS);
    assert!(
        (1..=tarn_cli::daemon::IDLE_CONN_THREADS).contains(&after.len()),
        "{} threads wait after the burst: {after:?}",
        after.len()
    );
    env.zpool(&["destroy", "tank"]).ok();
}
