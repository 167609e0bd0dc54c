//! Shared harness for the end-to-end tests: one private daemon per test.
//!
//! Each [`Env`] owns a temporary directory (mode 0700, as the daemon requires of its
//! socket's directory) holding the socket (`TARN_SOCKET`), the daemon's state
//! directory (`TARN_STATE_DIR`) and the vdev files. Commands run the
//! real `tarn` binary with that directory as cwd; the first one starts the daemon.
//! Dropping the `Env` stops the daemon (`tarn daemon --stop`, then SIGTERM of the pid
//! in `daemon.pid` if that did not work), which unmounts and exports its pools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Output of one command.
#[derive(Debug)]
pub struct Out {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Out {
    /// Panic with the whole output unless the command succeeded.
    pub fn ok(self) -> Out {
        assert_eq!(self.code, 0, "command failed: {self:?}");
        self
    }
    /// Panic unless the command failed and its stderr contains `msg`.
    pub fn fails_with(self, msg: &str) -> Out {
        assert_ne!(self.code, 0, "command unexpectedly succeeded: {self:?}");
        assert!(self.stderr.contains(msg), "expected {msg:?} in stderr: {self:?}");
        self
    }
}

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::Builder::new().prefix("tarn-e2e").tempdir_in("/tmp").unwrap();
        // The daemon serves its socket only from a directory that is root's alone.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        std::fs::create_dir_all(dir.path().join("v")).unwrap();
        Env { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.path().join("tarn.sock")
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// The daemon's default cachefile (`TARN_CACHEFILE`): never `/etc/tarn`.
    pub fn cachefile(&self) -> PathBuf {
        self.path().join("tarn.cache")
    }

    /// Directory of the vdev files.
    pub fn vdir(&self) -> PathBuf {
        self.path().join("v")
    }

    /// Path of vdev file `name` (not created).
    pub fn vdev(&self, name: &str) -> String {
        self.vdir().join(name).display().to_string()
    }

    /// Create a sparse vdev file of `size_bytes`.
    pub fn make_vdev(&self, name: &str, size_bytes: u64) -> String {
        let p = self.vdev(name);
        std::fs::File::create(&p).unwrap().set_len(size_bytes).unwrap();
        p
    }

    /// `tarn ARGS` with this test's socket, state directory and cwd, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.args(args)
            .current_dir(self.path())
            .env("TARN_SOCKET", self.socket())
            .env("TARN_STATE_DIR", self.state())
            .env("TARN_CACHEFILE", self.cachefile());
        c
    }

    /// Run `tarn ARGS`.
    pub fn tarn(&self, args: &[&str]) -> Out {
        run(self.command(args))
    }

    pub fn zpool(&self, args: &[&str]) -> Out {
        let mut v = vec!["zpool"];
        v.extend_from_slice(args);
        self.tarn(&v)
    }

    pub fn zfs(&self, args: &[&str]) -> Out {
        let mut v = vec!["zfs"];
        v.extend_from_slice(args);
        self.tarn(&v)
    }

    /// `zpool create -m DIR/mnt -o size=256M OPTS… tank v/a`; returns the mountpoint.
    pub fn mounted_pool(&self, opts: &[&str]) -> PathBuf {
        let m = self.path().join("mnt");
        let ms = m.display().to_string();
        let mut args = vec!["create", "-m", &ms, "-o", "size=256M"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["tank", "v/a"]);
        self.zpool(&args).ok();
        m
    }

    /// `tarn ARGS < file`.
    pub fn with_stdin(&self, args: &[&str], file: &Path) -> Out {
        let mut c = self.command(args);
        c.stdin(std::fs::File::open(file).unwrap());
        run(c)
    }

    /// The final leak check of an end-to-end test (issue 15): `zpool sync POOL`, then
    /// `tarn zdb -b POOL`, run beside the daemon, must report no leak. Returns the
    /// check's output.
    pub fn assert_no_leaks(&self, pool: &str) -> Out {
        self.zpool(&["sync", pool]).ok();
        let out = self.tarn(&["zdb", "-b", pool]);
        assert!(
            out.code == 0 && out.stdout.contains("No leaks (block sum matches space maps exactly)"),
            "zdb -b {pool}: {out:?}"
        );
        out
    }

    /// [`Env::assert_no_leaks`] for an exported pool whose devices are in [`Env::vdir`].
    pub fn assert_no_leaks_exported(&self, pool: &str) -> Out {
        let v = self.vdir().display().to_string();
        let out = self.tarn(&["zdb", "-e", "-p", &v, "-b", pool]);
        assert!(
            out.code == 0 && out.stdout.contains("No leaks (block sum matches space maps exactly)"),
            "zdb -b {pool}: {out:?}"
        );
        out
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.state().join("daemon.log")).unwrap_or_default()
    }
}

/// Run a command to completion and collect its output (stdout as text).
/// Wait (at most `timeout`) until a `kill -9`ed daemon has really let go: no thread of
/// process `pid` still runs and its socket refuses connections. A killed process's
/// group leader turns zombie while its other threads are still exiting, and the
/// shared descriptor table (the listening socket, the lock) closes only with the
/// last of them; until then a connect still succeeds. Returns whether it is gone.
#[allow(dead_code)]
pub fn wait_daemon_gone(env: &Env, pid: i32, timeout: std::time::Duration) -> bool {
    let t = std::time::Instant::now();
    let running = || {
        // Any thread of the group not yet a zombie (or the group leader alive).
        match std::fs::read_dir(format!("/proc/{pid}/task")) {
            Err(_) => false,
            Ok(tasks) => tasks.flatten().any(|task| {
                std::fs::read_to_string(task.path().join("stat"))
                    .map(|s| !s.contains(") Z ") && !s.contains(") X "))
                    .unwrap_or(false)
            }),
        }
    };
    loop {
        let gone = !running() && std::os::unix::net::UnixStream::connect(env.socket()).is_err();
        if gone {
            return true;
        }
        if t.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn run(mut c: Command) -> Out {
    let o = c.output().expect("run tarn");
    Out {
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        code: o.status.code().unwrap_or(-1),
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.socket().exists() {
            return;
        }
        let out = self.tarn(&["daemon", "--stop"]);
        if out.code != 0 || self.socket().exists() {
            if let Ok(pid) = std::fs::read_to_string(self.state().join("daemon.pid")) {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    // SAFETY: signalling the daemon this test started.
                    unsafe { libc_kill(pid) };
                }
            }
        }
    }
}

unsafe fn libc_kill(pid: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    kill(pid, 15);
}

/// True when FUSE mounts can work here; otherwise print why the test is skipped.
pub fn fuse_usable(test: &str) -> bool {
    if !cfg!(feature = "fuse") {
        eprintln!("SKIP {test}: tarn-cli built without the 'fuse' feature");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP {test}: /dev/fuse is absent");
        return false;
    }
    let has_fusermount = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount").exists() || d.join("fusermount3").exists()))
        .unwrap_or(false);
    if !has_fusermount {
        eprintln!("SKIP {test}: fusermount not installed");
        return false;
    }
    true
}

/// True when the first and last `len` bytes of the file are all zero.
pub fn untouched(path: &str, len: usize) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).unwrap();
    let size = f.metadata().unwrap().len();
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).unwrap();
    if buf.iter().any(|b| *b != 0) {
        return false;
    }
    f.seek(SeekFrom::Start(size - len as u64)).unwrap();
    f.read_exact(&mut buf).unwrap();
    buf.iter().all(|b| *b == 0)
}

/// `len` deterministic, incompressible bytes from `seed` (xorshift64).
pub fn xorshift_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `kill -9` the test's daemon and wait (at most 10 s, else panic) until it has let
/// go: see [`wait_daemon_gone`]. Returns the pid it had.
pub fn kill_9_daemon(env: &Env) -> i32 {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    let pid: i32 = std::fs::read_to_string(env.state().join("daemon.pid")).unwrap().trim().parse().unwrap();
    // SAFETY: signalling the daemon this test started.
    unsafe { kill(pid, 9) };
    assert!(
        wait_daemon_gone(env, pid, std::time::Duration::from_secs(10)),
        "daemon {pid} still running 10 s after kill -9"
    );
    pid
}

/// Whether `path` is a mount point now (`/proc/self/mountinfo`).
pub fn is_mounted(path: &Path) -> bool {
    let s = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(s.as_str()))
}
