//! End-to-end: a pool that cannot write suspends, says so in `zpool status`, and
//! `zpool clear` brings it back (OpenZFS suite area cli_root/zpool_clear and the
//! `failmode` property of cli_root/zpool_get / zpool_set).
//!
//! How: a mirror pool with `-m none` (no FUSE needed); `zpool set/get failmode`; then
//! `tarn zinject -e io -T write` on both leaves, a pool change and `zpool sync`, which
//! must fail; `zpool status` must show `state: SUSPENDED`, OpenZFS's status and action
//! lines and our line saying why; other changes fail with "pool I/O is currently
//! suspended"; after `zinject -c all` and `zpool clear` the pool is ONLINE, takes
//! changes again, and the change made before the failure is on disk after export and
//! import; a suspended pool can be exported (writing nothing) and imported again.

mod common;
use common::*;

#[test]
fn failmode_property_suspension_status_and_clear() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a.img", "v/b.img"])
        .ok();
    assert_eq!(
        env.zpool(&["get", "-H", "-o", "value,source", "failmode", "tank"]).ok().stdout,
        "wait\tdefault\n"
    );
    env.zpool(&["set", "failmode=sometimes", "tank"])
        .fails_with("cannot set property for 'tank': 'failmode' must be one of 'wait | continue | panic'");
    env.zpool(&["set", "failmode=continue", "tank"]).ok();
    assert_eq!(
        env.zpool(&["get", "-H", "-o", "value,source", "failmode", "tank"]).ok().stdout,
        "continue\tlocal\n"
    );
    env.zpool(&["set", "comment=before", "tank"]).ok();
    env.zpool(&["sync", "tank"]).ok();

    for leaf in ["v/a.img", "v/b.img"] {
        env.tarn(&["zinject", "-d", leaf, "-e", "io", "-T", "write", "tank"]).ok();
    }
    // The change cannot reach the disk: the command that made it says so (it waits
    // for its txg), and so does the next sync.
    env.zpool(&["set", "comment=lost", "tank"]).fails_with("pool I/O is currently suspended");
    env.zpool(&["sync", "tank"]).fails_with("pool I/O is currently suspended");
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(st.starts_with("  pool: tank\n state: SUSPENDED\n"), "{st}");
    assert!(
        st.contains("status: One or more devices are faulted in response to IO failures.\n\ttxg "),
        "{st}"
    );
    assert!(st.contains("could not be written"), "{st}");
    assert!(
        st.contains("action: Make sure the affected devices are connected, then run 'zpool clear'.\n"),
        "{st}"
    );
    assert_eq!(env.zpool(&["list", "-H", "-o", "health", "tank"]).ok().stdout, "SUSPENDED\n");
    env.zpool(&["set", "comment=refused", "tank"]).fails_with("pool I/O is currently suspended");

    env.tarn(&["zinject", "-c", "all"]).ok();
    env.zpool(&["clear", "tank"]).ok();
    assert_eq!(env.zpool(&["list", "-H", "-o", "health", "tank"]).ok().stdout, "ONLINE\n");
    // Re-imported from disk: the change of the failed txg is gone, the one before is not.
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "comment", "tank"]).ok().stdout, "before\n");
    env.zpool(&["set", "comment=after", "tank"]).ok();
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "comment", "tank"]).ok().stdout, "after\n");
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "failmode", "tank"]).ok().stdout, "continue\n");

    // A suspended pool can be exported (nothing is written) and imported again.
    for leaf in ["v/a.img", "v/b.img"] {
        env.tarn(&["zinject", "-d", leaf, "-e", "io", "-T", "write", "tank"]).ok();
    }
    env.zpool(&["set", "comment=lost-again", "tank"]).fails_with("pool I/O is currently suspended");
    env.zpool(&["sync", "tank"]).fails_with("pool I/O is currently suspended");
    env.tarn(&["zinject", "-c", "all"]).ok();
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "comment", "tank"]).ok().stdout, "after\n");
}

/// `failmode=panic`: a sync that cannot write ends the daemon at once (OpenZFS panics
/// the host) with the reason on its log; the client reports the lost connection; the
/// next command starts a daemon that imports the pool from the cachefile with every
/// change synced before the failure, and nothing of the failed txg.
#[test]
fn failmode_panic_ends_the_daemon_and_the_pool_comes_back() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a.img", "v/b.img"])
        .ok();
    env.zpool(&["set", "failmode=panic", "tank"]).ok();
    assert_eq!(
        env.zpool(&["get", "-H", "-o", "value,source", "failmode", "tank"]).ok().stdout,
        "panic\tlocal\n"
    );
    env.zpool(&["set", "comment=before", "tank"]).ok();
    env.zpool(&["sync", "tank"]).ok();
    for leaf in ["v/a.img", "v/b.img"] {
        env.tarn(&["zinject", "-d", leaf, "-e", "io", "-T", "write", "tank"]).ok();
    }
    // `zpool set` answers only once its txg is on disk, which cannot be written: the
    // daemon panics while the command waits, and the client sees the lost connection.
    let out = env.zpool(&["set", "comment=lost", "tank"]);
    assert_ne!(out.code, 0, "zpool set succeeded on a pool that cannot write: {out:?}");
    let log = env.daemon_log();
    assert!(
        log.contains("the failure mode property for this pool is set to panic"),
        "daemon log lacks the panic reason:\n{log}"
    );
    // A new daemon (started by this command) imports the pool from the cachefile.
    assert_eq!(env.zpool(&["list", "-H", "-o", "name,health", "tank"]).ok().stdout, "tank\tONLINE\n");
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "comment", "tank"]).ok().stdout, "before\n");
    assert_eq!(env.zpool(&["get", "-H", "-o", "value", "failmode", "tank"]).ok().stdout, "panic\n");
    env.zpool(&["set", "comment=after", "tank"]).ok();
    env.zpool(&["sync", "tank"]).ok();
    env.zpool(&["export", "tank"]).ok();
}
