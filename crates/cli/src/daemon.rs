//! # daemon — the process that hosts imported pools and their mounts
//!
//! Theory: the daemon is the one process in which a pool is open (the pool layer holds
//! an exclusive lock on every leaf). It owns:
//!
//! * `State::pools`: pool name → [`PoolEntry`] (the `Arc<Pool>`, the altroot given at
//!   create/import time, and the live [`Mounted`] datasets keyed by dataset name);
//! * `$TARN_STATE_DIR/known_dirs`: directories that held leaves of pools it created or
//!   imported (one path a line), searched by default by `zpool import`;
//! * `$TARN_STATE_DIR/daemon.pid` and the socket `$TARN_SOCKET` with an exclusive
//!   `flock` on `<socket>.lock`.
//!
//! Who may ask: root only (and the daemon's own user, when a user runs a private
//! daemon for tests). The socket is bound with umask 077 inside a directory that must
//! be the daemon user's alone (mode 0700, created so when missing; the daemon refuses
//! to start on one that others can enter, except that it tightens its own default
//! `/run/tarn` left by an older version), so no other user can reach it, not even for
//! a moment; and every connection's peer credentials (`SO_PEERCRED`) are checked
//! before anything is read, others being answered OpenZFS's "Permission denied the
//! ZFS utilities must be run as root." A request is at most
//! [`proto::MAX_REQUEST_BYTES`]; a client gets [`proto::IO_TIMEOUT`] to send it and for
//! each write of the answer; at most [`MAX_CONNECTIONS`] are served at once (more are
//! answered "daemon busy"). Pid, lock and log files are opened with `O_NOFOLLOW`.
//!
//! States: starting (lock taken, socket bound) → serving → stopping (SIGTERM, SIGINT or
//! a `daemon --stop` request: every dataset unmounted children first, every pool
//! exported, socket and pid file removed) → exit 0. A second daemon for the same
//! socket finds the socket answering (or the lock held past `LOCK_WAIT` while nobody
//! answers: a daemon that is exiting gets that long to let go) and exits with "tarn
//! daemon already running".
//!
//! Locks: one mutex around `State`, held for a whole command, so commands are
//! serialized (they are short; file I/O through FUSE never takes it). Order: state
//! mutex → pool internals (inside spa) → FUSE session teardown on unmount.
//!
//! Each connection is served by its own thread; a panic while running a command (a
//! bug, or an unimplemented engine path) is caught, logged, and answered as
//! "internal error" with exit 1, leaving the daemon up.
//!
//! Crash: with `kill -9` the pools are left "active" on disk (import them again, the
//! last synced txg wins) and FUSE mounts vanish through `auto_unmount`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_spa::{DatasetInfo, Pool};

use crate::format::parse_size;
use crate::mounts::{self, MountOpts, Mounted};
use crate::proto::{self, Request, Response};

/// One imported pool and what the daemon mounted from it.
pub struct PoolEntry {
    /// The open pool.
    pub pool: Arc<Pool>,
    /// `-R altroot` given at create/import (prefixes every mountpoint).
    pub altroot: Option<PathBuf>,
    /// Mounted datasets by name.
    pub mounts: BTreeMap<String, Mounted>,
}

/// Everything the daemon holds, behind one mutex.
pub struct State {
    /// Imported pools by name.
    pub pools: BTreeMap<String, PoolEntry>,
    /// `$TARN_STATE_DIR`.
    pub state_dir: PathBuf,
    /// Pools whose scan the current request waits for (`zpool scrub -w`) once the
    /// state lock is released; emptied by every request.
    pub wait_scan: Vec<Arc<Pool>>,
    /// Work the current request runs after the state lock is released (a `zfs send`
    /// or `zfs recv` stream, which may take hours and must not stop other commands);
    /// its response replaces the one `dispatch` returned, whose stdout is kept in
    /// front. Emptied by every request.
    pub deferred: Option<Job>,
}

/// Long work of one request, run without the state lock; it takes the lock itself
/// (through the argument) for short steps such as mounting.
pub type Job = Box<dyn FnOnce(&Mutex<State>) -> Response + Send>;

/// The per-command context: the client's cwd and the command line (for history).
pub struct Ctx {
    /// Client working directory.
    pub cwd: PathBuf,
    /// Full argv after `tarn`.
    pub argv: Vec<String>,
    /// The client's stdin, stdout and stderr when the request carried them
    /// ([`proto::wants_stdio`]); a command takes them out.
    pub stdio: Mutex<Vec<std::os::fd::OwnedFd>>,
}

impl Ctx {
    /// The command line as `zpool history` records it.
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }
}

impl State {
    /// Empty state for `state_dir`.
    pub fn new(state_dir: PathBuf) -> State {
        State {
            pools: BTreeMap::new(),
            state_dir,
            wait_scan: Vec::new(),
            deferred: None,
        }
    }

    /// Directories remembered for `zpool import`.
    pub fn known_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_to_string(self.state_dir.join("known_dirs"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(PathBuf::from)
            .collect()
    }

    /// Remember the directories of these leaves (deduplicated).
    pub fn remember_dirs<I: IntoIterator<Item = PathBuf>>(&self, leaves: I) {
        let mut dirs = self.known_dirs();
        let mut changed = false;
        for leaf in leaves {
            if let Some(d) = leaf.parent() {
                if d.as_os_str().is_empty() || d == Path::new("/dev") {
                    continue;
                }
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                    changed = true;
                }
            }
        }
        if changed {
            let text: String = dirs.iter().map(|d| format!("{}\n", d.display())).collect();
            let _ = std::fs::create_dir_all(&self.state_dir);
            let _ = std::fs::write(self.state_dir.join("known_dirs"), text);
        }
    }

    /// Unmount every dataset of every pool and export every pool (shutdown).
    pub fn export_all(&mut self) {
        let names: Vec<String> = self.pools.keys().cloned().collect();
        for name in names {
            if let Some(mut entry) = self.pools.remove(&name) {
                // A suspended pool is released first (writing nothing), so unmounting
                // does not wait on it (tarn_spa `suspend.rs`).
                let suspended = entry.pool.suspension().is_some();
                if suspended {
                    let _ = entry.pool.export();
                }
                for e in unmount_all(&mut entry, true) {
                    tracing::warn!("{e}");
                }
                if suspended {
                    tracing::info!("released suspended pool {name}");
                } else if let Err(e) = entry.pool.export() {
                    tracing::error!("export of {name} failed: {e}");
                } else {
                    tracing::info!("exported {name}");
                }
            }
        }
    }
}

/// `"{what}: {e}"`. The pool layer words some errors as a whole message
/// ("cannot use 'x': invalid character ..."): its own "cannot … 'x': " prefix is
/// replaced by `what`, so the verb is the command's; "invalid vdev specification"
/// messages stand alone as in OpenZFS.
pub fn cannot(what: &str, e: impl std::fmt::Display) -> String {
    let s = e.to_string();
    if s.starts_with("invalid vdev specification") {
        return s;
    }
    if s.starts_with("cannot ") {
        if let Some(i) = s.find("': ") {
            return format!("{what}: {}", &s[i + 3..]);
        }
        return s;
    }
    format!("{what}: {s}")
}

/// Leaf paths of a status tree.
pub fn leaves(v: &tarn_spa::VdevStatus) -> Vec<PathBuf> {
    if v.children.is_empty() {
        return vec![PathBuf::from(&v.name)];
    }
    v.children.iter().flat_map(leaves).collect()
}

/// The value of a dataset property ("" when the pool layer does not report it).
pub fn prop<'a>(info: &'a DatasetInfo, name: &str) -> &'a str {
    info.props.get(name).map(|(v, _)| v.as_str()).unwrap_or("")
}

/// Where a dataset mounts (altroot applied), or None for `none`/`legacy`/unset.
pub fn effective_mountpoint(info: &DatasetInfo, altroot: Option<&Path>) -> Option<PathBuf> {
    let mp = prop(info, "mountpoint");
    if !mp.starts_with('/') {
        return None;
    }
    Some(match altroot {
        Some(root) => root.join(mp.trim_start_matches('/')),
        None => PathBuf::from(mp),
    })
}

/// Check where dataset `name` would mount before anything is created there: `mp`
/// (from [`effective_mountpoint`]) must have no `..` component, and under `-R altroot`
/// the path its existing part resolves to (symbolic links followed, as mount(2)
/// would) must stay inside the altroot's own resolved path. Property values and
/// names are checked when they are set, but a pool written elsewhere may hold
/// anything, so this is checked again on every mount. The error is the whole message.
pub fn check_mountpoint(name: &str, mp: &Path, altroot: Option<&Path>) -> Result<(), String> {
    use std::path::Component;
    if mp.components().any(|c| c == Component::ParentDir) {
        return Err(format!("cannot mount '{name}': mountpoint '{}' contains '..' components", mp.display()));
    }
    let Some(root) = altroot else { return Ok(()) };
    let resolve = |p: &Path| -> std::io::Result<PathBuf> {
        // The deepest part that exists (a dangling link counts, and fails to resolve),
        // resolved, with the rest appended as it is (it has no `..`).
        let mut base = p;
        let mut rest = Vec::new();
        while std::fs::symlink_metadata(base).is_err() {
            match (base.parent(), base.file_name()) {
                (Some(parent), Some(last)) => {
                    rest.push(last.to_os_string());
                    base = parent;
                }
                _ => break,
            }
        }
        let mut out = std::fs::canonicalize(base)?;
        out.extend(rest.iter().rev());
        Ok(out)
    };
    let outside = || {
        format!(
            "cannot mount '{name}': mountpoint '{}' is outside the alternate root '{}'",
            mp.display(),
            root.display()
        )
    };
    let real_root = resolve(root).map_err(|e| format!("cannot mount '{name}': cannot resolve alternate root '{}': {e}", root.display()))?;
    let real_mp = resolve(mp).map_err(|e| format!("cannot mount '{name}': cannot resolve mountpoint '{}': {e}", mp.display()))?;
    if !mp.starts_with(root) || !real_mp.starts_with(&real_root) {
        return Err(outside());
    }
    Ok(())
}

/// The mountpoint as `zfs list`/`zfs get` show it (altroot applied; "none"/"legacy").
pub fn shown_mountpoint(info: &DatasetInfo, altroot: Option<&Path>) -> String {
    match effective_mountpoint(info, altroot) {
        Some(p) => p.display().to_string(),
        None => {
            let v = prop(info, "mountpoint");
            if v.is_empty() {
                "-".into()
            } else {
                v.to_string()
            }
        }
    }
}

/// zpl options from the effective properties.
pub fn mount_opts(info: &DatasetInfo) -> MountOpts {
    let rs = parse_size(prop(info, "recordsize")).filter(|n| n.is_power_of_two() && (512..=1 << 20).contains(n));
    MountOpts {
        readonly: prop(info, "readonly") == "on",
        atime: prop(info, "atime") != "off",
        recordsize_bytes: rs.unwrap_or(128 << 10) as u32,
        sync: match prop(info, "sync") {
            "always" => mounts::SyncProp::Always,
            "disabled" => mounts::SyncProp::Disabled,
            _ => mounts::SyncProp::Standard,
        },
        snapdir: tarn_zpl::SnapDir::parse(prop(info, "snapdir")).unwrap_or_default(),
    }
}

/// `canmount` ("on" when unset).
pub fn canmount(info: &DatasetInfo) -> &str {
    match prop(info, "canmount") {
        "" => "on",
        v => v,
    }
}

/// Mount one dataset; the error is the whole message for the user.
pub fn mount_one(entry: &mut PoolEntry, info: &DatasetInfo, explicit: bool) -> Result<(), String> {
    let name = &info.name;
    if entry.mounts.contains_key(name) {
        return Err(format!("cannot mount '{name}': filesystem already mounted"));
    }
    // A name read from a pool written elsewhere has not been through the name rules.
    if let Err(e) = tarn_spa::validate_dataset_name(name) {
        return Err(cannot(&format!("cannot mount '{name}'"), e));
    }
    // A file system a receive is writing (or left partially received for `-s`) is
    // never mounted: its contents are not a snapshot's.
    if entry.pool.is_inconsistent(name) {
        if !explicit {
            return Ok(());
        }
        return Err(format!(
            "cannot mount '{name}': dataset is partially received (see 'zfs get receive_resume_token')"
        ));
    }
    match canmount(info) {
        "off" => return Err(format!("cannot mount '{name}': 'canmount' property is set to 'off'")),
        "noauto" if !explicit => return Ok(()),
        _ => {}
    }
    let mp = match effective_mountpoint(info, entry.altroot.as_deref()) {
        Some(p) => p,
        None if prop(info, "mountpoint") == "legacy" => {
            return Err(format!("cannot mount '{name}': legacy mountpoint\nuse mount(8) to mount this filesystem"));
        }
        None => return Err(format!("cannot mount '{name}': no mountpoint set")),
    };
    check_mountpoint(name, &mp, entry.altroot.as_deref())?;
    if entry.mounts.values().any(|m| m.mountpoint == mp) {
        return Err(format!("cannot mount '{}': mountpoint is in use", mp.display()));
    }
    let os = entry.pool.objset(name).map_err(|e| cannot(&format!("cannot mount '{name}'"), e))?;
    // TARN_ZIL=off (benchmarks only): mount without the intent log, so every fsync
    // forces a txg sync as before the log existed.
    let zil = entry.pool.zilog(name).ok().filter(|_| std::env::var("TARN_ZIL").as_deref() != Ok("off"));
    let snaps = mounts::PoolSnapshots::new(&entry.pool, name);
    let m = mounts::mount(os, zil, snaps, name, &mp, mount_opts(info)).map_err(|e| format!("cannot mount '{}': {e}", mp.display()))?;
    tracing::info!("mounted {name} at {}", mp.display());
    entry.mounts.insert(name.clone(), m);
    Ok(())
}

/// Unmount one dataset if mounted (and its mounted descendants first).
pub fn unmount_one(entry: &mut PoolEntry, name: &str) -> Result<(), String> {
    let prefix = format!("{name}/");
    let mut victims: Vec<String> = entry.mounts.keys().filter(|k| k.as_str() == name || k.starts_with(&prefix)).cloned().collect();
    victims.sort();
    for v in victims.into_iter().rev() {
        if let Some(m) = entry.mounts.remove(&v) {
            let mp = m.mountpoint.clone();
            m.unmount().map_err(|e| format!("cannot unmount '{}': {e}", mp.display()))?;
            tracing::info!("unmounted {v} from {}", mp.display());
        }
    }
    Ok(())
}

/// Mount every dataset of the pool that should be (parents first). Returns the errors.
pub fn mount_all(entry: &mut PoolEntry) -> Vec<String> {
    let infos = match entry.pool.list_datasets() {
        Ok(i) => i,
        Err(e) => return vec![format!("cannot list datasets: {e}")],
    };
    let mut errors = Vec::new();
    for info in &infos {
        if entry.mounts.contains_key(&info.name) || canmount(info) != "on" || effective_mountpoint(info, entry.altroot.as_deref()).is_none() {
            continue;
        }
        if let Err(e) = mount_one(entry, info, false) {
            errors.push(e);
        }
    }
    errors
}

/// Unmount every dataset of the pool, children first. `force`: keep going on errors.
pub fn unmount_all(entry: &mut PoolEntry, force: bool) -> Vec<String> {
    let names: Vec<String> = entry.mounts.keys().rev().cloned().collect();
    let mut errors = Vec::new();
    for n in names {
        if let Err(e) = unmount_one(entry, &n) {
            errors.push(e);
            if !force {
                break;
            }
        }
    }
    errors
}

/// Run one request against the state (the state lock is held by the caller).
pub fn dispatch(st: &mut State, req: &Request) -> Response {
    dispatch_with(st, req, Vec::new())
}

/// [`dispatch`] with the descriptors that came with the request.
pub fn dispatch_with(st: &mut State, req: &Request, stdio: Vec<std::os::fd::OwnedFd>) -> Response {
    let ctx = Ctx {
        cwd: PathBuf::from(&req.cwd),
        argv: req.argv.clone(),
        stdio: Mutex::new(stdio),
    };
    let Some(family) = req.argv.first() else {
        return Response::usage("usage: tarn zpool|zfs|zinject|daemon ...");
    };
    let rest = &req.argv[1..];
    match family.as_str() {
        "zpool" => crate::zpool::run(st, &ctx, rest),
        "zfs" => crate::zfs::run(st, &ctx, rest),
        "zinject" => crate::zinject::run(st, &ctx, rest),
        "daemon" => Response::ok("tarn daemon running\n"),
        other => Response::usage(format!("unrecognized command '{other}'\nusage: tarn zpool|zfs|zinject|daemon ...")),
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

/// The running daemon.
pub struct Daemon {
    state: Mutex<State>,
    socket: PathBuf,
    pid_file: PathBuf,
}

/// Most connections served at once; more are answered "daemon busy" and closed.
pub const MAX_CONNECTIONS: usize = 64;

/// The user id of the process at the other end of `stream` (`SO_PEERCRED`).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let rc = libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        );
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(cred.uid)
    }
}

/// Whether user `uid` may run commands: root, or the user the daemon runs as.
pub fn uid_allowed(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

impl Daemon {
    fn handle(&self, mut stream: UnixStream) {
        // A client that never sends, or never reads the answer, gives its thread up.
        let _ = stream.set_read_timeout(Some(proto::IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(proto::IO_TIMEOUT));
        match peer_uid(&stream) {
            Ok(uid) if uid_allowed(uid) => {}
            Ok(uid) => {
                tracing::warn!("refused a request from uid {uid}");
                // Take the request (at most the cap, into nothing; descriptors that came
                // with it are closed) so the answer is not lost to a reset: a Unix
                // socket closed with unread data resets its peer.
                let mut first = [0u8; 4096];
                if matches!(proto::recv_with_fds(&stream, &mut first), Ok((n, _)) if n > 0) {
                    let _ = std::io::copy(&mut (&mut stream).take(proto::MAX_REQUEST_BYTES as u64), &mut std::io::sink());
                }
                let _ = write_response(&mut stream, &Response::err(proto::PERMISSION_DENIED));
                return;
            }
            Err(e) => {
                tracing::warn!("cannot read peer credentials: {e}");
                return;
            }
        }
        let mut first = vec![0u8; 64 << 10];
        let (n, fds) = match proto::recv_with_fds(&stream, &mut first) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("read request: {e}");
                return;
            }
        };
        let mut buf = first[..n].to_vec();
        if n > 0 {
            let room = (proto::MAX_REQUEST_BYTES + 1).saturating_sub(n) as u64;
            if let Err(e) = (&mut stream).take(room).read_to_end(&mut buf) {
                tracing::warn!("read request: {e}");
                return;
            }
        }
        if buf.len() > proto::MAX_REQUEST_BYTES {
            tracing::warn!("refused a request of more than {} bytes", proto::MAX_REQUEST_BYTES);
            let _ = write_response(
                &mut stream,
                &Response::usage(format!("request too large (over {} bytes)", proto::MAX_REQUEST_BYTES)),
            );
            return;
        }
        let req: Request = match serde_json::from_slice(&buf) {
            Ok(r) => r,
            Err(e) => {
                let _ = write_response(&mut stream, &Response::usage(format!("bad request: {e}")));
                return;
            }
        };
        tracing::info!("request: {}", req.argv.join(" "));
        let stop = req.argv.first().map(String::as_str) == Some("daemon") && req.argv.iter().any(|a| a == "--stop");
        if stop {
            let _ = write_response(&mut stream, &Response::ok("tarn daemon stopping\n"));
            drop(stream);
            self.shutdown();
        }
        let fds = if proto::wants_stdio(&req.argv) { fds } else { Vec::new() };
        let (resp, waits, job) = {
            let mut st = self.state.lock();
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch_with(&mut st, &req, fds))) {
                Ok(r) => r,
                Err(p) => {
                    let msg = panic_message(&*p);
                    tracing::error!("command {:?} panicked: {msg}", req.argv);
                    Response::err(format!("internal error: {msg}"))
                }
            };
            (r, std::mem::take(&mut st.wait_scan), st.deferred.take())
        };
        for pool in waits {
            pool.scan_wait();
        }
        let resp = match job {
            None => resp,
            Some(job) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&self.state))) {
                Ok(mut r) => {
                    r.stdout.insert_str(0, &resp.stdout);
                    r
                }
                Err(p) => {
                    let msg = panic_message(&*p);
                    tracing::error!("command {:?} panicked: {msg}", req.argv);
                    Response::err(format!("internal error: {msg}"))
                }
            },
        };
        if let Err(e) = write_response(&mut stream, &resp) {
            tracing::warn!("write response: {e}");
        }
    }

    /// Unmount, export, remove socket and pid file, exit 0.
    pub fn shutdown(&self) -> ! {
        tracing::info!("shutting down");
        {
            let mut st = self.state.lock();
            let st = &mut *st;
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| st.export_all())) {
                tracing::error!("export at shutdown panicked: {}", panic_message(&*p));
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.pid_file);
        tracing::info!("stopped");
        std::process::exit(0)
    }
}

fn write_response(stream: &mut UnixStream, resp: &Response) -> std::io::Result<()> {
    let mut body = serde_json::to_vec(resp)?;
    body.push(b'\n');
    stream.write_all(&body)
}

/// Make sure the socket's directory `dir` is the daemon user's alone: created mode 0700
/// when missing; otherwise it must be a directory (not a link) owned by this user that
/// no one else may enter. The default directory, `/run/tarn`, made mode 0755 by older
/// versions, is tightened instead. The error is the whole message.
pub fn prepare_socket_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot use {}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mode = md.mode() & 0o7777;
    if md.is_dir() && md.uid() == me && mode & 0o077 != 0 && mode & 0o022 == 0 && Some(dir) == Path::new(proto::DEFAULT_SOCKET).parent() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| format!("cannot chmod {}: {e}", dir.display()))?;
        tracing::warn!("tightened {} from mode {mode:04o} to 0700", dir.display());
        return Ok(());
    }
    if !md.is_dir() || md.uid() != me || mode & 0o077 != 0 {
        return Err(format!(
            "cannot use socket directory {}: it must be a directory owned by uid {me} with mode 0700 (it is {}, uid {}, mode {mode:04o}); \
             run 'chmod 700 {}' or set TARN_SOCKET to a path in a private directory",
            dir.display(),
            if md.is_dir() { "a directory" } else { "not a directory" },
            md.uid(),
            dir.display()
        ));
    }
    Ok(())
}

/// How long a starting daemon waits for the lock of one that is exiting.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `tarn daemon --foreground`: serve until stopped. Returns the exit status on a
/// failure to start.
pub fn run_foreground() -> i32 {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TARN_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .try_init();
    let socket = proto::socket_path();
    let state_dir = proto::state_dir();
    // Memory budget per pool for cached + dirty blocks (`TARN_CACHE_MAX`, e.g. 512M).
    if let Some(v) = std::env::var("TARN_CACHE_MAX").ok().and_then(|v| crate::format::parse_size(&v)) {
        tarn_spa::set_cache_limit(v);
    }
    if UnixStream::connect(&socket).is_ok() {
        eprintln!("tarn daemon already running");
        return 1;
    }
    // Whatever the daemon creates (socket, state files) is its user's alone; vdev files
    // and mountpoints get their modes explicitly.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o077) };
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = prepare_socket_dir(dir) {
            eprintln!("{e}");
            return 1;
        }
    }
    if let Err(e) = std::fs::create_dir_all(&state_dir) {
        eprintln!("cannot create {}: {e}", state_dir.display());
        return 1;
    }
    // Exclusive lock beside the socket: the loser of a start race exits here.
    let mut lock_name = socket.clone().into_os_string();
    lock_name.push(".lock");
    let lock = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_name)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot open {}: {e}", PathBuf::from(&lock_name).display());
            return 1;
        }
    };
    // A daemon that was just killed closes its socket a moment before the kernel drops
    // its lock, so a held lock with nobody answering the socket is a daemon on its way
    // out: wait for it (up to LOCK_WAIT) rather than report one running.
    let waited = std::time::Instant::now();
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if UnixStream::connect(&socket).is_ok() || waited.elapsed() >= LOCK_WAIT {
            eprintln!("tarn daemon already running");
            return 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::mem::forget(lock); // held until the process exits
    let _ = std::fs::remove_file(&socket);
    let listener = match UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot bind {}: {e}", socket.display());
            return 1;
        }
    };
    let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    let pid_file = state_dir.join("daemon.pid");
    let _ = std::fs::remove_file(&pid_file);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&pid_file)
        .and_then(|mut f| f.write_all(format!("{}\n", std::process::id()).as_bytes()));
    if let Err(e) = written {
        tracing::warn!("cannot write {}: {e}", pid_file.display());
    }

    // Block SIGTERM/SIGINT/SIGHUP in every thread (set before any thread is spawned)
    // and take them synchronously in one thread that runs the clean shutdown.
    // SAFETY: plain libc signal-mask calls on a zeroed sigset_t.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let daemon = Arc::new(Daemon {
        state: Mutex::new(State::new(state_dir)),
        socket: socket.clone(),
        pid_file,
    });
    {
        let d = daemon.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: waits on the blocked set; sig is a valid out pointer.
                let rc = unsafe { libc::sigwait(&set, &mut sig) };
                if rc == 0 {
                    tracing::info!("signal {sig}");
                    d.shutdown();
                }
            })
            .expect("spawn signal thread");
    }
    tracing::info!("tarn daemon serving {} (pid {})", socket.display(), std::process::id());
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for conn in listener.incoming() {
        match conn {
            Ok(mut stream) => {
                use std::sync::atomic::Ordering;
                if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    active.fetch_sub(1, Ordering::SeqCst);
                    tracing::warn!("refused a connection: {MAX_CONNECTIONS} already being served");
                    let _ = stream.set_write_timeout(Some(std::time::Duration::from_secs(1)));
                    let _ = write_response(&mut stream, &Response::err("tarn daemon busy: too many connections, try again"));
                    continue;
                }
                // Counts the connection until its thread ends (or fails to start).
                struct Slot(Arc<std::sync::atomic::AtomicUsize>);
                impl Drop for Slot {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                let slot = Slot(active.clone());
                let d = daemon.clone();
                let _ = std::thread::Builder::new().name("conn".into()).spawn(move || {
                    let _slot = slot;
                    d.handle(stream);
                });
            }
            Err(e) => tracing::warn!("accept: {e}"),
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cannot_rewords_prefixes() {
        assert_eq!(
            cannot("cannot create 'a'", "dataset already exists"),
            "cannot create 'a': dataset already exists"
        );
        assert_eq!(
            cannot("cannot create 'a/b*'", "cannot use 'a/b*': invalid character '*' in name"),
            "cannot create 'a/b*': invalid character '*' in name"
        );
        assert_eq!(cannot("cannot create 'a'", "invalid vdev specification: x"), "invalid vdev specification: x");
    }

    #[test]
    fn mountpoints_stay_inside_the_altroot() {
        let tmp = tempfile::tempdir().unwrap();
        let alt = tmp.path().join("alt");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(alt.join("p/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, alt.join("p/link")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), alt.join("p/dangling")).unwrap();
        let ok = |mp: &Path| check_mountpoint("p/x", mp, Some(&alt));
        ok(&alt).unwrap();
        ok(&alt.join("p/a")).unwrap();
        ok(&alt.join("p/new/deeper")).unwrap();
        // A dataset named p/../../etc read from disk mounts by default at /p/../../etc.
        let dotdot = effective_mountpoint_of("/p/../../etc", Some(&alt));
        assert!(ok(&dotdot).unwrap_err().contains("contains '..' components"));
        let e = ok(&alt.join("p/link/sub")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "cannot mount 'p/x': mountpoint '{}' is outside the alternate root '{}'",
                alt.join("p/link/sub").display(),
                alt.display()
            )
        );
        assert!(ok(&alt.join("p/dangling/sub")).unwrap_err().contains("cannot resolve mountpoint"));
        assert!(ok(Path::new("/etc")).unwrap_err().contains("outside the alternate root"));
        // Without an altroot any absolute path is the administrator's choice, but `..`
        // is still refused.
        check_mountpoint("p/x", &alt.join("p/link/sub"), None).unwrap();
        assert!(check_mountpoint("p/x", Path::new("/a/../etc"), None).is_err());
    }

    fn effective_mountpoint_of(mp: &str, altroot: Option<&Path>) -> PathBuf {
        let info = DatasetInfo {
            name: "p".into(),
            used_bytes: 0,
            avail_bytes: 0,
            refer_bytes: 0,
            props: [("mountpoint".to_string(), (mp.to_string(), "local".to_string()))].into(),
        };
        effective_mountpoint(&info, altroot).unwrap()
    }
}
