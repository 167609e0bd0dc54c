//! Shared harness for the end-to-end tests: one private daemon per test.
//!
//! Each [`Env`] owns a temporary directory (mode 0700, as the daemon requires of its
//! socket's directory) holding the socket (`TARN_SOCKET`), the daemon's state
//! directory (`TARN_STATE_DIR`) and the vdev files. Commands run the
//! real `tarn` binary with that directory as cwd; the first one starts the daemon.
//! Dropping the `Env` stops the daemon (`tarn daemon --stop`, then SIGTERM of the pid
//! in `daemon.pid` if that did not work), which unmounts and exports its pools.
//!
//! The leak check (issue 15) runs on drop, before the daemon stops, at the end of every
//! test that has not already failed: every pool the daemon still has imported is
//! synced (`zpool sync`) and checked with `tarn zdb -b` beside the daemon (its leaves
//! found with `-e -p`, as `zpool status -P` names their directories), and every
//! pool the test left exported in [`Env::vdir`] (as `zpool import -d` lists it) with
//! `tarn zdb -e -p VDIR -b`. A leak, a doubly allocated block, a failed sync or a pool
//! zdb cannot read fails the test with zdb's whole output. A test that leaves a pool
//! damaged on purpose (suspended, faulted, corrupted leaves) says so, with the reason,
//! through [`Env::skip_leak_check`]; a daemon that is not running (killed by the test)
//! has no imported pool, and then nothing is checked.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

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

/// One test's private daemon and directory; see the module documentation.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// Why the leak check on drop is skipped ([`Env::skip_leak_check`]), if it is.
    leak_check_skipped: Mutex<Option<String>>,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::Builder::new().prefix("tarn-e2e").tempdir_in("/tmp").unwrap();
        // The daemon serves its socket only from a directory that is root's alone.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        std::fs::create_dir_all(dir.path().join("v")).unwrap();
        Env {
            dir,
            leak_check_skipped: Mutex::new(None),
        }
    }

    /// Opt out of the leak check on drop, for a test that leaves a pool damaged on
    /// purpose (suspended, faulted, corrupted leaves). `reason` says why; a pool that
    /// is merely degraded but sound should be checked, not skipped.
    pub fn skip_leak_check(&self, reason: &str) {
        assert!(!reason.trim().is_empty(), "skip_leak_check needs a reason");
        *self.leak_check_skipped.lock().unwrap() = Some(reason.to_string());
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

    /// A leak check in the middle of a test (issue 15; the one at its end runs on
    /// drop): `zpool sync POOL`, then `tarn zdb -b POOL`, run beside the daemon, must
    /// report no leak. Returns the check's output.
    pub fn assert_no_leaks(&self, pool: &str) -> Out {
        self.zpool(&["sync", pool]).ok();
        let out = self.tarn(&["zdb", "-b", pool]);
        assert!(no_leaks(&out), "zdb -b {pool}: {out:?}");
        out
    }

    /// [`Env::assert_no_leaks`] for an exported pool whose devices are in [`Env::vdir`].
    pub fn assert_no_leaks_exported(&self, pool: &str) -> Out {
        let v = self.vdir().display().to_string();
        let out = self.tarn(&["zdb", "-e", "-p", &v, "-b", pool]);
        assert!(no_leaks(&out), "zdb -e -b {pool}: {out:?}");
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

impl Env {
    /// The leak check on drop (see the module documentation): every imported pool and
    /// every pool exported in [`Env::vdir`]. Returns one message per failure.
    fn check_all_pools(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let listed = self.zpool(&["list", "-H", "-o", "name"]);
        if listed.code != 0 {
            return vec![format!("zpool list: {listed:?}")];
        }
        // Without pools the listing says so on stdout, even with -H.
        for pool in listed.stdout.lines().filter(|l| !l.is_empty() && *l != "no pools available") {
            if let Err(e) = self.check_imported(pool) {
                failures.push(e);
            }
        }
        let v = self.vdir().display().to_string();
        let importable = self.zpool(&["import", "-d", &v]);
        // "no pools available to import" is the usual answer, with a non-zero status.
        for (name, guid) in importable_pools(&importable.stdout) {
            let out = self.tarn(&["zdb", "-e", "-p", &v, "-b", &guid]);
            if no_leaks(&out) {
                eprintln!("leak check on drop: exported pool '{name}' (id {guid}): no leaks");
            } else {
                failures.push(format!("exported pool '{name}' (id {guid}): zdb -e -p {v} -b: {out:?}"));
            }
        }
        failures
    }

    /// `zpool sync POOL`, then `zdb -e -p DIR… -b GUID` beside the daemon, DIR being
    /// the directories of the pool's leaves (as `zpool status -P` names them). Not the
    /// cachefile, which does not list every imported pool (`cachefile=none`, a
    /// read-only import); the GUID, because an exported pool of the same name may
    /// share those directories.
    fn check_imported(&self, pool: &str) -> Result<(), String> {
        let sync = self.zpool(&["sync", pool]);
        if sync.code != 0 {
            return Err(format!("pool '{pool}': zpool sync: {sync:?}"));
        }
        // No panic here: the daemon must still be stopped after a failure.
        let guid = self.zpool(&["get", "-H", "-o", "value", "guid", pool]);
        let status = self.zpool(&["status", "-P", pool]);
        if guid.code != 0 || status.code != 0 {
            return Err(format!("pool '{pool}': zpool get guid: {guid:?}, zpool status -P: {status:?}"));
        }
        let guid = guid.stdout.trim().to_string();
        let mut dirs: Vec<String> = status
            .stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| w.starts_with('/'))
            .filter_map(|w| Path::new(w).parent().map(|d| d.display().to_string()))
            .collect();
        dirs.sort();
        dirs.dedup();
        let mut args = vec!["zdb", "-e"];
        for d in &dirs {
            args.extend_from_slice(&["-p", d]);
        }
        args.extend_from_slice(&["-b", &guid]);
        let out = self.tarn(&args);
        if no_leaks(&out) {
            eprintln!("leak check on drop: pool '{pool}': no leaks");
            Ok(())
        } else {
            Err(format!("pool '{pool}': {}: {out:?}", args.join(" ")))
        }
    }
}

/// Whether `zdb -b` succeeded and found no leak.
fn no_leaks(out: &Out) -> bool {
    out.code == 0 && out.stdout.contains("No leaks (block sum matches space maps exactly)")
}

/// `(name, guid)` of each pool a `zpool import -d DIR` listing shows.
fn importable_pools(listing: &str) -> Vec<(String, String)> {
    let mut pools = Vec::new();
    let mut name = None;
    for l in listing.lines() {
        let l = l.trim();
        if let Some(n) = l.strip_prefix("pool: ") {
            name = Some(n.to_string());
        } else if let (Some(id), Some(n)) = (l.strip_prefix("id: "), name.take()) {
            pools.push((n, id.to_string()));
        }
    }
    pools
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.socket().exists() {
            return;
        }
        // Only a running daemon has imported pools; a test that killed it has none, and
        // a command here would start a new one.
        let running = std::os::unix::net::UnixStream::connect(self.socket()).is_ok();
        let skipped = self.leak_check_skipped.lock().unwrap().clone();
        let failures = match skipped {
            _ if std::thread::panicking() || !running => Vec::new(),
            Some(reason) => {
                eprintln!("leak check skipped: {reason}");
                Vec::new()
            }
            None => {
                let t = std::time::Instant::now();
                let failures = self.check_all_pools();
                eprintln!("leak check on drop: {:.2} s", t.elapsed().as_secs_f64());
                failures
            }
        };
        let out = self.tarn(&["daemon", "--stop"]);
        if out.code != 0 || self.socket().exists() {
            if let Ok(pid) = std::fs::read_to_string(self.state().join("daemon.pid")) {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    // SAFETY: signalling the daemon this test started.
                    unsafe { libc_kill(pid) };
                }
            }
        }
        assert!(failures.is_empty(), "leak check on drop (issue 15) failed:\n{}", failures.join("\n"));
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

/// The xorshift64 sequence from `seed` (endless; deterministic).
pub fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// `len` deterministic, incompressible bytes from `seed` ([`xorshift`]).
pub fn xorshift_bytes(len: usize, seed: u64) -> Vec<u8> {
    xorshift(seed).take(len).map(|x| x as u8).collect()
}

/// `kill -9` the test's daemon and wait (at most 20 s, else panic) until it has let
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
