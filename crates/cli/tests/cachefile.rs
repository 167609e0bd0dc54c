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

/// Pool `tank` mounted at `<env>/mnt` with `tank/home` holding `f` ("still here"),
/// synced; returns the pool's mountpoint.
fn pool_with_a_file(env: &Env) -> std::path::PathBuf {
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a]).ok();
    env.zfs(&["create", "tank/home"]).ok();
    std::fs::write(mnt.join("home/f"), b"still here").unwrap();
    env.zpool(&["sync", "tank"]).ok();
    mnt
}

#[test]
fn kill_9_and_restart_brings_the_pool_and_its_mounts_back() {
    let env = Env::new();
    if !fuse_usable("kill_9_and_restart_brings_the_pool_and_its_mounts_back") {
        return;
    }
    let mnt = pool_with_a_file(&env);
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

/// Pids of the `fusermount` helpers (they hold `auto_unmount`) whose command line
/// names a path under `dir`.
fn fusermount_helpers(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.split('\0').next().is_some_and(|a| a.ends_with("fusermount") || a.ends_with("fusermount3")) && cmd.contains(&needle)
        })
        .collect()
}

/// What systemd's `Restart=on-failure` meets: the unit's whole cgroup was killed, the
/// daemon and the `fusermount` helpers that would have unmounted its file systems,
/// so the mounts stay behind, dead (`ENOTCONN`). The next daemon must replace them,
/// not fail its mounts (found running contrib/systemd/test-under-systemd.sh).
#[test]
fn a_restart_replaces_mounts_left_dead_by_a_killed_daemon_and_helpers() {
    let env = Env::new();
    if !fuse_usable("a_restart_replaces_mounts_left_dead_by_a_killed_daemon_and_helpers") {
        return;
    }
    let mnt = pool_with_a_file(&env);
    let helpers = fusermount_helpers(&mnt);
    assert_eq!(helpers.len(), 2, "one auto_unmount helper per mount");
    for pid in helpers {
        // SAFETY: signalling a helper process this test's daemon started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    kill_9_daemon(&env);
    // The mounts are still in the table, and dead.
    assert!(is_mounted(&mnt) && is_mounted(&mnt.join("home")));
    // A listing asks the daemon (a stat may still be answered from the kernel's cache).
    let err = std::fs::read_dir(&mnt).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    env.tarn(&["daemon"]).ok();
    assert_eq!(std::fs::read(mnt.join("home/f")).unwrap(), b"still here", "{}", env.daemon_log());
    assert!(env.daemon_log().contains("detached the dead mount at"), "{}", env.daemon_log());
    // Exactly one live mount per dataset is left (the dead ones were detached).
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for m in [&mnt, &mnt.join("home")] {
        let at = m.display().to_string();
        let n = table.lines().filter(|l| l.split_whitespace().nth(4) == Some(at.as_str())).count();
        assert_eq!(n, 1, "mounts at {at}:\n{table}");
    }
    env.zfs(&["unmount", "tank/home"]).ok();
    assert!(!is_mounted(&mnt.join("home")));
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

/// Every administrative command is durable when it answers: `kill -9` right after it
/// (no `zpool sync`, well inside the 5 s txg timeout) and a restart from the
/// cachefile find its change. Before `Pool::log_history_durable`, `zfs create`,
/// `set`, `hold`, `bookmark`, `clone`, `rename`, `destroy`, `release`, `rollback`,
/// `promote` and `zpool set` changed only the open txg, and a crash undid them after they had said they
/// succeeded (found by contrib/systemd/test-under-systemd.sh).
#[test]
fn administrative_changes_survive_a_kill_9_right_after_the_command() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    let crash = || {
        kill_9_daemon(&env);
        env.tarn(&["daemon"]).ok();
    };
    let names = |t: &str| env.zfs(&["list", "-H", "-o", "name", "-t", t, "-r", "tank"]).ok().stdout;
    env.zfs(&["create", "tank/a"]).ok();
    crash();
    assert!(names("filesystem").contains("tank/a\n"), "zfs create lost");
    env.zfs(&["set", "compression=lz4", "tank/a"]).ok();
    crash();
    assert_eq!(
        env.zfs(&["get", "-H", "-o", "value,source", "compression", "tank/a"]).ok().stdout,
        "lz4\tlocal\n"
    );
    env.zfs(&["snapshot", "tank/a@s1"]).ok();
    crash();
    assert!(names("snapshot").contains("tank/a@s1\n"), "zfs snapshot lost");
    env.zfs(&["hold", "keep", "tank/a@s1"]).ok();
    crash();
    assert!(env.zfs(&["holds", "-H", "tank/a@s1"]).ok().stdout.contains("keep"), "zfs hold lost");
    env.zfs(&["bookmark", "tank/a@s1", "tank/a#b1"]).ok();
    crash();
    assert!(names("bookmark").contains("tank/a#b1\n"), "zfs bookmark lost");
    env.zfs(&["clone", "tank/a@s1", "tank/c"]).ok();
    crash();
    assert!(names("filesystem").contains("tank/c\n"), "zfs clone lost");
    env.zfs(&["rename", "tank/c", "tank/d"]).ok();
    crash();
    let fs = names("filesystem");
    assert!(fs.contains("tank/d\n") && !fs.contains("tank/c\n"), "zfs rename lost: {fs}");
    env.zfs(&["destroy", "tank/d"]).ok();
    crash();
    assert!(!names("filesystem").contains("tank/d\n"), "zfs destroy lost");
    env.zfs(&["release", "keep", "tank/a@s1"]).ok();
    crash();
    assert!(!env.zfs(&["holds", "-H", "tank/a@s1"]).ok().stdout.contains("keep"), "zfs release lost");
    env.zfs(&["snapshot", "tank/a@s2"]).ok();
    env.zfs(&["rollback", "-r", "tank/a@s1"]).ok();
    crash();
    assert!(!names("snapshot").contains("tank/a@s2\n"), "zfs rollback -r lost");
    env.zfs(&["clone", "tank/a@s1", "tank/e"]).ok();
    env.zfs(&["promote", "tank/e"]).ok();
    crash();
    assert_eq!(
        env.zfs(&["get", "-H", "-o", "value", "origin", "tank/a"]).ok().stdout,
        "tank/e@s1\n",
        "zfs promote lost"
    );
    env.zpool(&["set", "failmode=continue", "tank"]).ok();
    crash();
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "failmode", "tank"]).ok().stdout, "continue\n");
}
