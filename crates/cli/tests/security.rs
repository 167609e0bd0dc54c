//! End-to-end: the hardening of issue 11 that a user can see. Mounts are `nosuid,nodev`
//! with the dataset name as their only source; `-R altroot` confines mountpoints
//! (symbolic links followed) and `..` is refused in `mountpoint=`; a missing
//! `fusermount` is named with how to install it; the daemon answers root only (checked
//! as a user made for the test), refuses a socket directory others can enter, caps
//! the request size and drops silent clients; the started daemon runs with a clean
//! environment (fixed PATH, cwd `/`, umask 077) and makes vdev files mode 0600.

mod common;
use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The mountinfo line of `mnt`: (per-mount options, source), both as the kernel writes
/// them (a space is `\040`).
fn mountinfo(mnt: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_str().unwrap().replace(' ', "\\040");
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        (f[4] == want).then(|| (f[5].to_string(), f[dash + 2].to_string()))
    })
}

fn daemon_pid(env: &Env) -> u32 {
    std::fs::read_to_string(env.state().join("daemon.pid")).unwrap().trim().parse().unwrap()
}

#[test]
fn mounts_are_nosuid_nodev_and_named_by_the_dataset() {
    if !fuse_usable("mounts_are_nosuid_nodev_and_named_by_the_dataset") {
        return;
    }
    let env = Env::new();
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "-o", "size=128M", "p", "v/a"]).ok();
    // Comma-free but otherwise unusual: space, colon, dot, dash, underscore.
    env.zfs(&["create", "p/a b:c.d-e_f"]).ok();
    for (dir, source) in [(mnt.clone(), "p"), (mnt.join("a b:c.d-e_f"), "p/a\\040b:c.d-e_f")] {
        let (options, src) = mountinfo(&dir).unwrap_or_else(|| panic!("{} is not mounted", dir.display()));
        let options: Vec<&str> = options.split(',').collect();
        assert!(options.contains(&"nosuid") && options.contains(&"nodev"), "{}: {options:?}", dir.display());
        assert_eq!(src, source);
    }
}

#[test]
fn dotdot_mountpoints_are_refused() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-m", "/x/../y", "-o", "size=128M", "q", "v/q"])
        .fails_with("cannot create 'q': 'mountpoint' must not contain '..' components");
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "p", "v/a"]).ok();
    env.zfs(&["create", "-o", "mountpoint=/p/../../etc", "p/esc"])
        .fails_with("'mountpoint' must not contain '..' components");
    env.zfs(&["list", "p/esc"]).fails_with("dataset does not exist");
    env.zfs(&["set", "mountpoint=/a/../../etc", "p"])
        .fails_with("'mountpoint' must not contain '..' components");
    env.zfs(&["set", "mountpoint=/..", "p"])
        .fails_with("'mountpoint' must not contain '..' components");
    let shown = env.zfs(&["get", "-H", "-o", "value", "mountpoint", "p"]).ok().stdout;
    assert_eq!(shown.trim(), format!("{alt}/p"));
    // A name that merely contains dots is fine.
    env.zfs(&["set", "mountpoint=/a/..b", "p"]).ok();
}

#[test]
fn altroot_confines_mounts_through_symlinks() {
    if !fuse_usable("altroot_confines_mounts_through_symlinks") {
        return;
    }
    let env = Env::new();
    let alt = env.path().join("alt");
    let outside = env.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    env.zpool(&["create", "-R", alt.to_str().unwrap(), "-o", "size=128M", "p", "v/a"]).ok();
    assert!(mountinfo(&alt.join("p")).is_some());
    // Anyone who can write in a mounted file system can plant a link out of the altroot.
    std::os::unix::fs::symlink(&outside, alt.join("p/link")).unwrap();
    let out = env.zfs(&["create", "-o", "mountpoint=/p/link/sub", "p/esc"]);
    out.fails_with(&format!(
        "cannot mount 'p/esc': mountpoint '{}' is outside the alternate root '{}'",
        alt.join("p/link/sub").display(),
        alt.display()
    ));
    assert!(!outside.join("sub").exists(), "nothing is created outside the altroot");
    assert!(mountinfo(&outside.join("sub")).is_none());
    env.zfs(&["mount", "p/esc"]).fails_with("is outside the alternate root");
    // Inside the altroot all is as before.
    env.zfs(&["set", "mountpoint=/p/inside", "p/esc"]).ok();
    env.zfs(&["mount", "p/esc"]).ok();
    assert!(mountinfo(&alt.join("p/inside")).is_some());
}

#[test]
fn missing_fusermount_is_named() {
    if !fuse_usable("missing_fusermount_is_named") {
        return;
    }
    let env = Env::new();
    let empty = env.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let mnt = env.path().join("mnt");
    // The first command starts the daemon, with this PATH.
    let mut c = env.command(&["zpool", "create", "-m", mnt.to_str().unwrap(), "-o", "size=128M", "p", "v/a"]);
    c.env("TARN_DAEMON_PATH", &empty);
    let out = run(c).fails_with(&format!(
        "cannot mount '{}': fusermount is missing (searched PATH={}): install the Debian package 'fuse' ('apt-get install fuse')",
        mnt.display(),
        empty.display()
    ));
    assert!(!out.stderr.contains("os error 2"), "{out:?}");
    assert!(mountinfo(&mnt).is_none());
    // The pool itself is there.
    assert_eq!(env.zpool(&["list", "-H", "-o", "name"]).ok().stdout, "p\n");
}

/// A user made for this test (removed again when dropped); uid 65534 where `useradd`
/// is not available.
struct TestUser {
    name: Option<String>,
    uid: u32,
    gid: u32,
}

impl TestUser {
    fn new() -> TestUser {
        Self::named(&format!("tarnt{}", std::process::id()))
    }

    /// A user called `name` (unique per test: tests run in parallel).
    fn named(name: &str) -> TestUser {
        let name = name.to_string();
        let made = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", &name])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !made {
            eprintln!("useradd failed: running as uid 65534 instead");
            return TestUser {
                name: None,
                uid: 65534,
                gid: 65534,
            };
        }
        let id = |flag: &str| -> u32 {
            let o = std::process::Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        TestUser { name: Some(name), uid, gid }
    }

    /// `tarn ARGS` as this user, against `env`'s daemon.
    fn tarn(&self, env: &Env, args: &[&str]) -> Out {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.args(args)
            .current_dir("/")
            .env("TARN_SOCKET", env.socket())
            .env("TARN_STATE_DIR", env.state())
            .uid(self.uid)
            .gid(self.gid);
        run(c)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        if let Some(n) = &self.name {
            let _ = std::process::Command::new("userdel").arg(n).status();
        }
    }
}

const DENIED: &str = "Permission denied the ZFS utilities must be run as root.";

#[test]
fn daemon_answers_root_only() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP daemon_answers_root_only: not root");
        return;
    }
    let user = TestUser::new();
    let env = Env::new();
    env.zpool(&["create", "-O", "canmount=off", "-o", "size=128M", "p", "v/a"]).ok();
    // The socket's directory is root's alone: the connect itself is refused.
    let mode = std::fs::metadata(env.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    user.tarn(&env, &["zpool", "list"]).fails_with(DENIED);
    // Opened up by mistake: the daemon still checks who is asking.
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(env.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    user.tarn(&env, &["zpool", "destroy", "p"]).fails_with(DENIED);
    user.tarn(&env, &["zfs", "list"]).fails_with(DENIED);
    assert_eq!(env.zpool(&["list", "-H", "-o", "name"]).ok().stdout, "p\n");
    assert!(
        env.daemon_log().contains(&format!("refused a request from uid {}", user.uid)),
        "{}",
        env.daemon_log()
    );
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// `TARN_READ_GROUP`: members may run the read-only commands (list, status, get,
/// iostat), nothing else; others are still refused.
#[test]
fn a_read_group_may_run_read_only_commands() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP a_read_group_may_run_read_only_commands: not root");
        return;
    }
    let group = format!("tarng{}", std::process::id());
    if !std::process::Command::new("groupadd").arg(&group).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIP a_read_group_may_run_read_only_commands: groupadd failed");
        return;
    }
    struct Group(String);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = std::process::Command::new("groupdel").arg(&self.0).status();
        }
    }
    let _g = Group(group.clone());
    let out = std::process::Command::new("getent").args(["group", &group]).output().unwrap();
    let gid: u32 = String::from_utf8_lossy(&out.stdout).split(':').nth(2).unwrap().trim().parse().unwrap();
    let member = TestUser::named(&format!("tarnm{}", std::process::id()));
    let Some(name) = member.name.clone() else {
        eprintln!("SKIP a_read_group_may_run_read_only_commands: useradd failed");
        return;
    };
    assert!(std::process::Command::new("usermod").args(["-aG", &group, &name]).status().unwrap().success());
    let env = Env::new();
    // The first command starts the daemon with the read group.
    let mut c = env.command(&["zpool", "create", "-O", "canmount=off", "-o", "size=128M", "p", "v/a"]);
    c.env("TARN_READ_GROUP", &group);
    run(c).ok();
    let mode = std::fs::metadata(env.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o710);
    // As the member (its login groups include the read group).
    let as_member = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.args(args)
            .current_dir("/")
            .env("TARN_SOCKET", env.socket())
            .env("TARN_STATE_DIR", env.state())
            .uid(member.uid)
            .gid(gid);
        run(c)
    };
    assert_eq!(as_member(&["zpool", "list", "-H", "-o", "name"]).ok().stdout, "p\n");
    assert!(as_member(&["zpool", "status", "p"]).ok().stdout.contains("state: ONLINE"));
    assert_eq!(as_member(&["zpool", "get", "-H", "-o", "value", "health", "p"]).ok().stdout, "ONLINE\n");
    as_member(&["zpool", "iostat", "p"]).ok();
    assert_eq!(as_member(&["zfs", "list", "-H", "-o", "name"]).ok().stdout, "p\n");
    as_member(&["zfs", "get", "used", "p"]).ok();
    as_member(&["zpool", "destroy", "p"]).fails_with(DENIED);
    as_member(&["zfs", "create", "p/x"]).fails_with(DENIED);
    as_member(&["zpool", "history", "p"]).fails_with(DENIED);
    as_member(&["daemon", "--stop"]).fails_with(DENIED);
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "p\n");
    // Someone outside the group is refused everything.
    let other = TestUser::named(&format!("tarno{}", std::process::id()));
    other.tarn(&env, &["zpool", "list"]).fails_with(DENIED);
}

#[test]
fn socket_directory_must_be_private() {
    let env = Env::new();
    let open = env.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = env.command(&["daemon", "--foreground"]);
    c.env("TARN_SOCKET", open.join("tarn.sock"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the daemon served a socket in a directory mode 0755");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot use socket directory {}", open.display())), "{err}");
    assert!(err.contains("mode 0755"), "{err}");
    assert!(!open.join("tarn.sock").exists());
    // A directory that does not exist yet is made mode 0700.
    let fresh = env.path().join("run/deeper");
    let mut c = env.command(&["zpool", "list"]);
    c.env("TARN_SOCKET", fresh.join("tarn.sock"));
    run(c).ok();
    assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o700);
    let mut c = env.command(&["daemon", "--stop"]);
    c.env("TARN_SOCKET", fresh.join("tarn.sock"));
    run(c).ok();
}

#[test]
fn oversized_and_silent_clients_are_dropped() {
    let env = Env::new();
    env.zpool(&["list"]).ok();
    // A client that connects and never sends.
    let silent = UnixStream::connect(env.socket()).unwrap();
    // A 2 MiB request: refused once 1 MiB is read, whatever the rest.
    let mut big = UnixStream::connect(env.socket()).unwrap();
    let mut writer = big.try_clone().unwrap();
    let feeder = std::thread::spawn(move || {
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..32 {
            if writer.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = writer.shutdown(std::net::Shutdown::Write);
    });
    big.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    feeder.join().unwrap();
    assert!(answer.contains("request too large"), "{answer:?}");
    // Others are served meanwhile.
    env.zpool(&["list"]).ok();
    // The silent one is dropped after the daemon's timeout (15 s), not held forever.
    let start = Instant::now();
    let mut silent = silent;
    silent.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut rest = Vec::new();
    let r = silent.read_to_end(&mut rest);
    assert!(r.is_ok(), "the daemon kept a silent connection open for 60 s: {r:?}");
    assert!(start.elapsed() < Duration::from_secs(40));
    env.zpool(&["list"]).ok();
}

#[test]
fn started_daemon_has_a_clean_environment() {
    let env = Env::new();
    let mut c = env.command(&["zpool", "create", "-O", "canmount=off", "-o", "size=128M", "p", "v/a"]);
    c.env("HARDEN_TEST_SECRET", "leak")
        .env("PATH", format!("/nonexistent:{}", std::env::var("PATH").unwrap_or_default()));
    run(c).ok();
    let pid = daemon_pid(&env);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(
        vars.contains(&"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
        "{vars:?}"
    );
    assert!(!vars.iter().any(|v| v.starts_with("HARDEN_TEST_SECRET=")), "{vars:?}");
    assert!(vars.contains(&format!("TARN_SOCKET={}", env.socket().display())), "{vars:?}");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), Path::new("/"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.lines().any(|l| l == "Umask:\t0077"), "{status}");
    // The vdev file made by -o size= holds the pool: root's alone.
    let mode = std::fs::metadata(env.vdev("a")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}
