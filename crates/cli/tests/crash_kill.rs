//! End-to-end crash consistency: `kill -9` the daemon at random moments while a writer
//! creates files through the FUSE mount (OpenZFS has no direct analogue; ztest kills
//! itself the same way).
//!
//! How: a mirror pool; a writer thread creates files with known content and calls
//! fsync on every other one, recording each acknowledged fsync outside the pool. After
//! a random delay the daemon is killed with SIGKILL. The FUSE mount must vanish by
//! itself (auto_unmount), `zpool import` must succeed, every acknowledged file must be
//! intact, and every file present must be a prefix of what was written to it (a txg
//! boundary), never garbage. 20 iterations (TARN_KILL_ITERATIONS overrides).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn content(i: u64) -> Vec<u8> {
    let len = (i.wrapping_mul(7919) % 300_000) as usize + 1;
    let mut x = i.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn mounted(p: &Path) -> bool {
    let s = p.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(s.as_str()))
}

fn daemon_pid(env: &Env) -> i32 {
    std::fs::read_to_string(env.state().join("daemon.pid")).unwrap().trim().parse().unwrap()
}

fn sigkill(pid: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: signalling the daemon this test started.
    unsafe { kill(pid, 9) };
}

#[test]
fn kill_9_during_writes_loses_no_fsynced_file() {
    if !fuse_usable("kill_9_during_writes_loses_no_fsynced_file") {
        return;
    }
    let iterations: u64 = std::env::var("TARN_KILL_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let env = Env::new();
    let mnt = env.path().join("mnt");
    // Sparse 2 GiB files: with the intent log, fsyncs are fast enough that a run writes
    // far more than the 256 MiB this test started with.
    let a = env.make_vdev("a.img", 2 << 30);
    let b = env.make_vdev("b.img", 2 << 30);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "crashpool", "mirror", &a, &b]).ok();
    let dir = mnt.join("data");
    std::fs::create_dir(&dir).unwrap();
    let acked: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let mut next = 0u64;
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut killed_mid_write = 0;
    for iter in 0..iterations {
        let stop = Arc::new(AtomicBool::new(false));
        let start = next;
        let writer = {
            let (dir, acked, stop) = (dir.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || -> u64 {
                use std::io::Write;
                let mut i = start;
                while !stop.load(Ordering::SeqCst) {
                    let p = dir.join(format!("f{i}"));
                    let Ok(mut f) = std::fs::File::create(&p) else { break };
                    if f.write_all(&content(i)).is_err() {
                        break;
                    }
                    if i.is_multiple_of(2) {
                        if f.sync_all().is_err() {
                            break;
                        }
                        acked.lock().unwrap().push(i);
                    }
                    i += 1;
                }
                i
            })
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 600));
        let pid = daemon_pid(&env);
        sigkill(pid);
        // Wait until the process is gone (kill(pid, 0) fails), as an init system would.
        let t = Instant::now();
        while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
            && t.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
        let reached = writer.join().unwrap();
        if reached > start {
            killed_mid_write += 1;
        }
        next = reached + 1;
        let t = Instant::now();
        while mounted(&mnt) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!mounted(&mnt), "iteration {iter}: mount still present 10 s after kill -9 (auto_unmount)");
        let out = env.zpool(&["import", "-d", env.vdir().to_str().unwrap(), "crashpool"]);
        assert_eq!(out.code, 0, "iteration {iter}: import after kill -9 failed: {out:?}\n{}", env.daemon_log());
        // Every acknowledged file is intact.
        for &i in acked.lock().unwrap().iter() {
            let got = std::fs::read(dir.join(format!("f{i}"))).unwrap_or_else(|e| panic!("iteration {iter}: fsynced f{i} lost: {e}"));
            assert!(
                got == content(i),
                "iteration {iter}: fsynced f{i} differs ({} bytes vs {})",
                got.len(),
                content(i).len()
            );
        }
        // Everything present is a prefix of what was written: no garbage.
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let i: u64 = name[1..].parse().unwrap();
            let got = std::fs::read(e.path()).unwrap();
            let want = content(i);
            assert!(
                got.len() <= want.len() && got[..] == want[..got.len()],
                "iteration {iter}: {name} holds bytes that were never written"
            );
        }
    }
    assert!(
        killed_mid_write * 2 >= iterations,
        "only {killed_mid_write} of {iterations} kills landed during writes"
    );
    let _: PathBuf = mnt;
}
