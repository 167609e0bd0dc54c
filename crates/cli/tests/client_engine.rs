//! The two binaries: `tarn` forwards pool and dataset commands itself and runs the
//! engine (`tarnd`, beside it) for the daemon and `zdb`; a `tarn` installed without
//! its engine says what is missing and changes nothing.

mod common;
use common::{run, Env};
use std::process::Command;

/// The client started the daemon as the engine binary beside it, and the engine
/// serves `zdb` in place of the client (same process, same arguments).
#[test]
fn the_client_starts_the_engine_for_the_daemon_and_runs_it_for_zdb() {
    let env = Env::new();
    env.mounted_pool(&[]);
    let v = env.vdev("a");
    let pid = std::fs::read_to_string(env.state().join("daemon.pid")).unwrap();
    let exe = std::fs::read_link(format!("/proc/{}/exe", pid.trim())).unwrap();
    assert_eq!(exe.file_name().unwrap(), "tarnd", "daemon runs {}", exe.display());
    let engine = std::path::Path::new(env!("CARGO_BIN_EXE_tarn")).with_file_name("tarnd");
    assert_eq!(exe.canonicalize().unwrap(), engine.canonicalize().unwrap());
    // zdb reads the labels in the engine (the client has no zdb of its own).
    let out = env.tarn(&["zdb", "-l", &v]).ok();
    assert!(out.stdout.contains("name: 'tank'"), "{out:?}");
    // The engine takes the client's arguments too.
    let direct = run({
        let mut d = Command::new(&engine);
        d.args(["zfs", "list", "-H", "-o", "name"])
            .current_dir(env.path())
            .env("TARN_SOCKET", env.socket())
            .env("TARN_STATE_DIR", env.state())
            .env("TARN_CACHEFILE", env.cachefile());
        d
    })
    .ok();
    assert_eq!(direct.stdout, "tank\n");
    env.zpool(&["destroy", "tank"]).ok();
}

/// `tarn` copied alone: every role that needs the engine, and a command whose daemon
/// is not running, fails naming the missing file; no state directory or socket appears.
#[test]
fn a_client_without_its_engine_says_what_is_missing() {
    let env = Env::new();
    let lone = env.path().join("bin");
    std::fs::create_dir(&lone).unwrap();
    let tarn = lone.join("tarn");
    std::fs::copy(env!("CARGO_BIN_EXE_tarn"), &tarn).unwrap();
    let cmd = |args: &[&str]| {
        let mut c = Command::new(&tarn);
        c.args(args)
            .current_dir(env.path())
            .env("TARN_SOCKET", env.socket())
            .env("TARN_STATE_DIR", env.state())
            .env("TARN_CACHEFILE", env.cachefile());
        run(c)
    };
    let missing = format!("{} is missing: install the tarnd binary", lone.join("tarnd").display());
    cmd(&["daemon", "--stop"]).fails_with(&missing);
    cmd(&["zdb", "-l", "/nonexistent"]).fails_with(&missing);
    let out = cmd(&["zpool", "list"]).fails_with(&missing);
    assert!(out.stderr.contains("cannot reach the daemon"), "{out:?}");
    assert!(!env.state().exists(), "state directory created: {out:?}");
    assert!(!env.socket().exists());
}
