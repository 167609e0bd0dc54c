//! End-to-end crash consistency with the intent log: `kill -9` the daemon at random
//! moments while a client writes through the FUSE mount (OpenZFS has no direct
//! analogue; ztest kills itself the same way).
//!
//! The client, a thread of this test, repeats a publish/retire cycle:
//! 1. create `tmp{i}`, write its content, `fsync` it;
//! 2. rename it to `f{i}` and `fsync` the directory: from here on `f{i}` is
//!    *acknowledged*, recorded outside the pool;
//! 3. unlink `f{i-8}` (when it exists) and `fsync` the directory: that removal is
//!    acknowledged too.
//!
//! After each kill the mount must vanish by itself (auto_unmount) and a new daemon
//! must import the pool from its cachefile and mount it (replaying the log) with no
//! command typed. Then:
//! - every acknowledged `f{i}` that the client never tried to remove exists, intact;
//! - no acknowledged removal is undone;
//! - every `f{i}` present holds its full content (rename after fsync is all or
//!   nothing), every `tmp{i}` present a prefix of it — nothing half-applied, never
//!   garbage.
//!
//! Two layouts: the log on the main pool (a mirror), 100 kills; and a mirrored
//! separate log whose first leaf is overwritten with garbage before every kill, so
//! replay must read the log from the other side, 30 kills. TARN_KILL_ITERATIONS
//! overrides both counts.

mod common;
use common::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn content(i: u64) -> Vec<u8> {
    let len = (i.wrapping_mul(7919) % 200_000) as usize + 1;
    xorshift_bytes(len, i.wrapping_mul(0x9e3779b97f4a7c15))
}

/// What the client has been told is durable.
#[derive(Default)]
struct Acked {
    published: BTreeSet<u64>,
    /// Removals issued (acknowledged or not: an unacknowledged one may or may not stay).
    removing: BTreeSet<u64>,
    removed: BTreeSet<u64>,
}

/// Overwrite the data area of a log leaf with garbage (labels are left alone).
fn scribble(path: &str, seed: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut x = seed | 1;
    let junk: Vec<u8> = (0..(1 << 20))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    // The data area starts at 4 MiB; log blocks are allocated from its start.
    for k in 0..8u64 {
        f.seek(SeekFrom::Start((4 << 20) + k * (1 << 20))).unwrap();
        f.write_all(&junk).unwrap();
    }
    // The daemon is writing this file through O_DIRECT meanwhile. When one of its
    // direct writes overlaps these buffered pages, the kernel cannot drop them after
    // the write ("Page cache invalidation failure on direct I/O") and marks the file
    // with a write error, which this fsync (and the daemon's next one) reports. That
    // is part of the damage being simulated, not a failure of the test.
    if let Err(e) = f.sync_all() {
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "fsync of the scribbled log leaf: {e}");
    }
}

fn client(dir: std::path::PathBuf, start: u64, acked: Arc<Mutex<Acked>>, stop: Arc<AtomicBool>) -> u64 {
    use std::io::Write;
    let mut i = start;
    let dirf = || std::fs::File::open(&dir);
    while !stop.load(Ordering::SeqCst) {
        let tmp = dir.join(format!("tmp{i}"));
        let Ok(mut f) = std::fs::File::create(&tmp) else { break };
        if f.write_all(&content(i)).is_err() || f.sync_all().is_err() {
            break;
        }
        if std::fs::rename(&tmp, dir.join(format!("f{i}"))).is_err() {
            break;
        }
        let Ok(d) = dirf() else { break };
        if d.sync_all().is_err() {
            break;
        }
        acked.lock().unwrap().published.insert(i);
        if i >= 8 {
            let old = i - 8;
            acked.lock().unwrap().removing.insert(old);
            match std::fs::remove_file(dir.join(format!("f{old}"))) {
                Ok(()) => {
                    if d.sync_all().is_err() {
                        break;
                    }
                    acked.lock().unwrap().removed.insert(old);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
        }
        i += 1;
    }
    i
}

fn run(test: &str, with_slog: bool, default_iterations: u64) {
    if !fuse_usable(test) {
        return;
    }
    let iterations: u64 = std::env::var("TARN_KILL_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_iterations);
    let env = Env::new();
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a.img", 1 << 30);
    let b = env.make_vdev("b.img", 1 << 30);
    let (la, lb) = (env.make_vdev("la.img", 128 << 20), env.make_vdev("lb.img", 128 << 20));
    let mut args = vec!["create", "-m", mnt.to_str().unwrap(), "crashpool", "mirror", &a, &b];
    if with_slog {
        args.extend(["log", "mirror", &la, &lb]);
    }
    env.zpool(&args).ok();
    let dir = mnt.join("data");
    std::fs::create_dir(&dir).unwrap();
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let mut next = 0u64;
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut killed_mid_write = 0;
    let mut replayed = 0u64;
    for iter in 0..iterations {
        let stop = Arc::new(AtomicBool::new(false));
        let start = next;
        let writer = {
            let (dir, acked, stop) = (dir.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || client(dir, start, acked, stop))
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(100 + seed % 400));
        if with_slog {
            scribble(&la, seed);
        }
        // Kill, and wait until the process is gone, as an init system would.
        kill_9_daemon(&env);
        stop.store(true, Ordering::SeqCst);
        let reached = writer.join().unwrap();
        if reached > start {
            killed_mid_write += 1;
        }
        next = reached + 1;
        let t = Instant::now();
        while is_mounted(&mnt) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !is_mounted(&mnt),
            "{test} iteration {iter}: mount still present 10 s after kill -9 (auto_unmount)"
        );
        // A new daemon imports the pool from its cachefile (replaying the log at
        // mount) before it answers: no import is typed.
        let out = env.tarn(&["daemon"]);
        assert_eq!(
            out.code,
            0,
            "{test} iteration {iter}: daemon start after kill -9 failed: {out:?}\n{}",
            env.daemon_log()
        );
        let out = env.zpool(&["list", "-H", "-o", "name"]);
        assert_eq!(
            out.stdout,
            "crashpool\n",
            "{test} iteration {iter}: pool not back after kill -9: {out:?}\n{}",
            env.daemon_log()
        );
        let ack = acked.lock().unwrap();
        for &i in ack.published.difference(&ack.removing) {
            let got = std::fs::read(dir.join(format!("f{i}"))).unwrap_or_else(|e| {
                let mut names: Vec<String> = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                let log = env.daemon_log();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                panic!("{test} iteration {iter}: acknowledged f{i} lost: {e}\npresent: {names:?}\nlog tail: {tail:#?}")
            });
            assert!(
                got == content(i),
                "{test} iteration {iter}: acknowledged f{i} differs ({} bytes vs {})",
                got.len(),
                content(i).len()
            );
        }
        for &i in &ack.removed {
            assert!(
                !dir.join(format!("f{i}")).exists(),
                "{test} iteration {iter}: acknowledged removal of f{i} undone"
            );
        }
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let got = std::fs::read(e.path()).unwrap();
            if let Some(n) = name.strip_prefix("tmp") {
                let want = content(n.parse().unwrap());
                assert!(
                    got.len() <= want.len() && got[..] == want[..got.len()],
                    "{test} iteration {iter}: {name} holds bytes never written"
                );
            } else {
                let i: u64 = name[1..].parse().unwrap();
                assert!(
                    got == content(i),
                    "{test} iteration {iter}: {name} is half-applied ({} of {} bytes)",
                    got.len(),
                    content(i).len()
                );
            }
        }
        drop(ack);
        if env.daemon_log().matches("intent log replayed").count() as u64 > replayed {
            replayed += 1;
        }
    }
    assert!(
        killed_mid_write * 2 >= iterations,
        "{test}: only {killed_mid_write} of {iterations} kills landed during writes"
    );
    assert!(
        replayed * 2 >= iterations,
        "{test}: the log was replayed after only {replayed} of {iterations} kills"
    );
}

#[test]
fn kill_9_loses_no_acknowledged_change_log_on_main_pool() {
    run("kill_9_loses_no_acknowledged_change_log_on_main_pool", false, 100);
}

#[test]
fn kill_9_loses_no_acknowledged_change_with_a_damaged_mirrored_slog() {
    run("kill_9_loses_no_acknowledged_change_with_a_damaged_mirrored_slog", true, 30);
}
