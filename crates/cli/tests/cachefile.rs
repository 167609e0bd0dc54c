//! End-to-end: pools come back after a daemon restart (issue 11 §5), as
//! `zfs-import-cache` and `zfs-mount` bring them back after a reboot.
//!
//! How: each test's daemon keeps its cachefile in the test directory
//! (`TARN_CACHEFILE`, set by [`common::Env`]); the tests read that file to see which
//! pools it lists after create, import, export, destroy and `zpool set cachefile`,
//! then `kill -9` the daemon and start a new one with no other command, and check
//! that the pool is imported and its file system mounted with its files.

mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

/// Pool names listed in a cachefile (empty when it does not exist).
fn listed(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// `kill -9` the daemon and wait until it is gone and its mounts with it, as an init
/// system would before starting it again (bounded: 20 s).
fn kill_daemon(env: &Env, mounts: &[&Path]) {
    kill_9_daemon(env);
    let t = Instant::now();
    while mounts.iter().any(|m| is_mounted(m)) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for m in mounts {
        assert!(!is_mounted(m), "{} still mounted after kill -9", m.display());
    }
}

#[test]
fn kill_9_and_restart_brings_the_pool_and_its_mounts_back() {
    let env = Env::new();
    if !fuse_usable("kill_9_and_restart_brings_the_pool_and_its_mounts_back") {
        return;
    }
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a]).ok();
    env.zfs(&["create", "tank/home"]).ok();
    std::fs::write(mnt.join("home/f"), b"still here").unwrap();
    env.zpool(&["sync", "tank"]).ok();
    assert_eq!(listed(&env.cachefile()), ["tank"]);
    kill_daemon(&env, &[&mnt.join("home"), &mnt]);
    // Start a daemon; it returns once the socket answers, which is after the
    // cachefile's pools were imported and mounted. No zpool command is typed.
    env.tarn(&["daemon"]).ok();
    assert!(is_mounted(&mnt) && is_mounted(&mnt.join("home")), "{}", env.daemon_log());
    assert_eq!(std::fs::read(mnt.join("home/f")).unwrap(), b"still here");
    assert_eq!(env.zpool(&["list", "-H", "-o", "name,health"]).ok().stdout, "tank\tONLINE\n");
    // A clean stop exports but keeps the list, so the next start imports again.
    env.tarn(&["daemon", "--stop"]).ok();
    assert_eq!(listed(&env.cachefile()), ["tank"]);
    env.tarn(&["daemon"]).ok();
    assert_eq!(std::fs::read(mnt.join("home/f")).unwrap(), b"still here");
}

#[test]
fn export_destroy_and_the_cachefile_property() {
    let env = Env::new();
    let [a, b] = ["a", "b"].map(|n| env.make_vdev(n, 128 * MB));
    let dir = env.vdir().display().to_string();
    let cache = env.cachefile();
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    env.zpool(&["create", "-m", "none", "-o", "cachefile=none", "solo", &b]).ok();
    assert_eq!(listed(&cache), ["tank"]);
    assert_eq!(
        env.zpool(&["get", "-H", "-o", "value,source", "cachefile", "solo"]).ok().stdout,
        "none\tlocal\n"
    );
    env.zpool(&["export", "tank"]).ok();
    assert!(listed(&cache).is_empty());
    env.zpool(&["import", "-d", &dir, "-o", "cachefile=none", "tank"]).ok();
    assert!(listed(&cache).is_empty());
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &dir, "tank"]).ok();
    assert_eq!(listed(&cache), ["tank"]);
    // Another file: listed there, no longer in the default one.
    let other = env.path().join("other.cache");
    env.zpool(&["set", &format!("cachefile={}", other.display()), "tank"]).ok();
    assert!(listed(&cache).is_empty());
    assert_eq!(listed(&other), ["tank"]);
    env.zpool(&["set", "cachefile=", "tank"]).ok();
    assert_eq!(listed(&cache), ["tank"]);
    assert!(listed(&other).is_empty());
    // A read-only import is never recorded (a restart must not bring it back
    // read-write).
    env.zpool(&["export", "solo"]).ok();
    env.zpool(&["import", "-d", &dir, "-o", "readonly=on", "solo"]).ok();
    assert_eq!(listed(&cache), ["tank"]);
    env.zpool(&["destroy", "tank"]).ok();
    assert!(listed(&cache).is_empty());
    // No temporary file is left beside it.
    assert!(!env.path().join("tarn.cache.tmp").exists());
}

/// `tarn daemon --foreground` under a supervisor (`contrib/systemd/tarn.service`,
/// `Type=notify`): READY=1 arrives on `$NOTIFY_SOCKET` only after the cachefile's
/// pools are imported, so units ordered after it find them.
#[test]
fn ready_is_notified_after_the_cachefile_import() {
    use std::os::unix::net::UnixDatagram;
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    env.tarn(&["daemon", "--stop"]).ok();
    assert_eq!(listed(&env.cachefile()), ["tank"]);
    let notify = env.path().join("notify.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut daemon = env
        .command(&["daemon", "--foreground"])
        .env("NOTIFY_SOCKET", &notify)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = rx.recv(&mut buf).expect("no READY=1 from the daemon");
    assert_eq!(&buf[..n], b"READY=1");
    // Asked right after READY: the pool is already there.
    assert_eq!(env.zpool(&["list", "-H", "-o", "name"]).ok().stdout, "tank\n");
    env.tarn(&["daemon", "--stop"]).ok();
    assert!(daemon.wait().unwrap().success());
}
