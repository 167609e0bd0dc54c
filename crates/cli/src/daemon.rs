//! # daemon — the process that hosts imported pools and their mounts
//!
//! Theory: the daemon is the one process in which a pool is open (the pool layer holds
//! an exclusive lock on every leaf). It owns the [`State`] ([`crate::state`]: pools,
//! mounts, known directories) behind one mutex, the socket `$TARN_SOCKET` with an
//! exclusive `flock` on `<socket>.lock`, and `$TARN_STATE_DIR/daemon.pid`. It serves
//! requests by handing them to the command modules ([`dispatch`]); those see the
//! state, never the daemon. At start it imports and mounts the pools listed in the
//! default cachefile ([`crate::cachefile`]) before it answers anyone, then tells a
//! supervisor it is ready (`sd_notify` `READY=1` when `$NOTIFY_SOCKET` is set).
//!
//! Who may ask: root (and the daemon's own user, when a user runs a private daemon
//! for tests), plus, when `$TARN_READ_GROUP` is set, that group's members for the
//! read-only commands ([`crate::access`]; the socket directory is then 0710 and the
//! socket 0660 of that group). The socket is bound with umask 077 inside a directory that must
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
//! Each connection is served by its own thread, which then waits for the next
//! connection rather than exiting (up to [`IDLE_CONN_THREADS`] wait; `ConnWorkers`).
//! A panic while running a command (a bug, or an unimplemented engine path) is
//! caught, logged, and answered as "internal error" with exit 1, leaving the daemon
//! up.
//!
//! Memory: before any thread starts the daemon tunes glibc's allocator, and once the
//! ARC has its tunables it starts the reaper that hands freed heap memory back
//! ([`crate::memory`]); its resident set stays under `arc_max` + the pools' dirty-data
//! limits + the ARC's and L2ARC's header bytes + [`crate::memory::overhead_bytes`].
//!
//! Crash: with `kill -9` the pools are left "active" on disk and FUSE mounts vanish
//! through `auto_unmount`; the next daemon imports the pools of its cachefile again
//! (the last synced txg wins, the intent log replays at mount) and remounts them.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::access::Access;
use crate::proto::{self, Request, Response};
use crate::state::{Ctx, State};
use crate::zfs_mount::unmount_all;

/// Unmount every dataset of every pool and export every pool (shutdown). The pools
/// stay in their cachefiles, so the next daemon imports them again.
pub fn export_all(st: &mut State) {
    let names: Vec<String> = st.pools.keys().cloned().collect();
    for name in names {
        if let Some(mut entry) = st.pools.remove(&name) {
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
        commit_error: Mutex::new(None),
    };
    let Some(family) = req.argv.first() else {
        return Response::usage("usage: tarn zpool|zfs|zinject|daemon ...");
    };
    let rest = &req.argv[1..];
    let mut resp = match family.as_str() {
        "zpool" => crate::zpool::run(st, &ctx, rest),
        "zfs" => crate::zfs::run(st, &ctx, rest),
        "zinject" => crate::zinject::run(st, &ctx, rest),
        "daemon" if rest.first().map(String::as_str) == Some("--set") => crate::arcstat::set_tunables(&rest[1..]),
        "daemon" => Response::ok("tarn daemon running\n"),
        "kstat" => crate::arcstat::kstat(rest),
        other => Response::usage(format!("unrecognized command '{other}'\nusage: tarn zpool|zfs|zinject|daemon ...")),
    };
    // A change that could not be made durable is not a success.
    if let Some(e) = ctx.commit_error.lock().take() {
        if resp.code == 0 {
            resp.code = 1;
        }
        resp.stderr.push_str(&e);
        resp.stderr.push('\n');
    }
    resp
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
    /// `$TARN_READ_GROUP`: members may run read-only commands ([`crate::access`]).
    read_gid: Option<u32>,
    socket: PathBuf,
    pid_file: PathBuf,
}

/// Most connections served at once; more are answered "daemon busy" and closed.
pub const MAX_CONNECTIONS: usize = 64;

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
        let access = match crate::access::peer_cred(&stream) {
            Ok((uid, gid)) => (uid, crate::access::access_of(uid, gid, self.read_gid, uid_allowed)),
            Err(e) => {
                tracing::warn!("cannot read peer credentials: {e}");
                return;
            }
        };
        match access {
            (_, Access::Full | Access::ReadOnly) => {}
            (uid, Access::Denied) => {
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
        if access.1 == Access::ReadOnly && !crate::access::read_only_command(&req.argv) {
            tracing::warn!("refused '{}' from uid {} (read group: read-only commands only)", req.argv.join(" "), access.0);
            let _ = write_response(&mut stream, &Response::err(proto::PERMISSION_DENIED));
            return;
        }
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
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| export_all(st))) {
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
pub fn prepare_socket_dir(dir: &Path, read_gid: Option<u32>) -> Result<(), String> {
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
    // With a read group the directory is 0710 and of that group (set below).
    let group_ok = read_gid.is_some_and(|g| md.gid() == g) && mode & 0o067 == 0;
    if !md.is_dir() || md.uid() != me || (mode & 0o077 != 0 && !group_ok) {
        return Err(format!(
            "cannot use socket directory {}: it must be a directory owned by uid {me} with mode 0700 (it is {}, uid {}, mode {mode:04o}); \
             run 'chmod 700 {}' or set TARN_SOCKET to a path in a private directory",
            dir.display(),
            if md.is_dir() { "a directory" } else { "not a directory" },
            md.uid(),
            dir.display()
        ));
    }
    if let Some(g) = read_gid {
        std::os::unix::fs::chown(dir, None, Some(g)).map_err(|e| format!("cannot chgrp {}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o710)).map_err(|e| format!("cannot chmod {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Tell a supervisor that started us with `Type=notify` (systemd's `sd_notify`
/// protocol: a datagram `READY=1` to the Unix socket `$NOTIFY_SOCKET`, `@` meaning an
/// abstract name) that the socket answers and the cachefile's pools are imported.
/// Nothing happens when the variable is unset.
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy().into_owned();
    let addr = match target.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&target),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound().and_then(|s| s.send_to_addr(b"READY=1", &a)));
    if let Err(e) = sent {
        tracing::warn!("cannot notify {target}: {e}");
    }
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
    // Before any thread exists (module `memory`: arenas are made as threads allocate).
    crate::memory::tune_allocator();
    let socket = proto::socket_path();
    let state_dir = proto::state_dir();
    // Memory budget per pool for cached + dirty blocks (`TARN_CACHE_MAX`, e.g. 512M).
    if let Some(v) = std::env::var("TARN_CACHE_MAX").ok().and_then(|v| crate::format::parse_size(&v)) {
        tarn_spa::set_cache_limit(v);
    }
    // ARC tunables (`TARN_ARC_MAX`, `TARN_ARC_MIN`, `TARN_ARC_POLICY`); this also makes
    // the shared ARC and starts its memory-pressure thread.
    if let Err(e) = crate::arcstat::tunables_from_env() {
        eprint!("{e}");
        return 1;
    }
    // Gives the allocator's free memory back while it exceeds what the caches and the
    // dirty data explain (module `memory`).
    crate::memory::start_reaper();
    if UnixStream::connect(&socket).is_ok() {
        eprintln!("tarn daemon already running");
        return 1;
    }
    // Whatever the daemon creates (socket, state files) is its user's alone; vdev files
    // and mountpoints get their modes explicitly.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o077) };
    let read_gid = match crate::access::read_group() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = prepare_socket_dir(dir, read_gid) {
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
                            // Pools of the default cachefile come back (imported and mounted) before the
                            // socket answers, so the first client, or a supervisor waiting for READY=1, sees
                            // them.
    let mut state = State::new(state_dir.clone());
    let imported = crate::cachefile::import_all(&mut state);
    if !imported.is_empty() {
        tracing::info!("imported from the cachefile: {}", imported.join(", "));
    }
    let _ = std::fs::remove_file(&socket);
    let listener = match UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot bind {}: {e}", socket.display());
            return 1;
        }
    };
    // Root's alone, or also the read group's (its members connect; the daemon still
    // checks every peer).
    match read_gid {
        None => {
            let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        }
        Some(g) => {
            let _ = std::os::unix::fs::chown(&socket, None, Some(g));
            let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660));
        }
    }
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
        state: Mutex::new(state),
        read_gid,
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
    notify_ready();
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = ConnWorkers::new(daemon.clone());
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
                workers.serve(stream, Slot(active.clone()));
            }
            Err(e) => tracing::warn!("accept: {e}"),
        }
    }
    0
}

/// Counts one connection being served until dropped (after its answer, or when its
/// thread fails to start or dies).
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Idle connection threads kept for the next connections, at most this many: a
/// command's connection then costs a hand-over to a waiting thread instead of a thread
/// start and exit (stack mapping, the allocator's per-thread clean-up): about 50 of
/// the 230 µs a `zfs list` took in the daemon (bench/README, "Connection threads").
pub const IDLE_CONN_THREADS: usize = 4;

/// How long an idle connection thread waits for a connection before it exits.
const IDLE_CONN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The daemon's connection threads: one per connection being served, as before, but a
/// thread whose connection is done waits for the next one (up to
/// [`IDLE_CONN_THREADS`] of them) instead of exiting.
///
/// Invariant: `idle` counts the threads waiting for a connection that no accept has
/// claimed. An accept claims one (decrements `idle`) before it sends a connection, so
/// every connection sent has a thread that will take it; a waiting thread that times
/// out leaves only if it can unclaim itself (decrement `idle`), otherwise a
/// connection is on its way to it and it waits on.
struct ConnWorkers {
    daemon: Arc<Daemon>,
    idle: Arc<std::sync::atomic::AtomicUsize>,
    tx: std::sync::mpsc::Sender<(UnixStream, Slot)>,
    rx: Arc<Mutex<std::sync::mpsc::Receiver<(UnixStream, Slot)>>>,
}

impl ConnWorkers {
    fn new(daemon: Arc<Daemon>) -> ConnWorkers {
        let (tx, rx) = std::sync::mpsc::channel();
        ConnWorkers {
            daemon,
            idle: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            tx,
            rx: Arc::new(Mutex::new(rx)),
        }
    }

    /// Serve `stream` on an idle thread, or on a new one when none is idle.
    fn serve(&self, stream: UnixStream, slot: Slot) {
        use std::sync::atomic::Ordering;
        if self.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            // A claimed thread holds the receiving end for as long as it waits.
            let _ = self.tx.send((stream, slot));
            return;
        }
        let (d, idle, rx) = (self.daemon.clone(), self.idle.clone(), self.rx.clone());
        let _ = std::thread::Builder::new().name("conn".into()).spawn(move || {
            let mut next = Some((stream, slot));
            while let Some((stream, slot)) = next.take() {
                d.handle(stream);
                drop(slot);
                // Wait for the next connection, unless enough threads wait already.
                if idle
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < IDLE_CONN_THREADS).then_some(n + 1))
                    .is_err()
                {
                    return;
                }
                loop {
                    match rx.lock().recv_timeout(IDLE_CONN_WAIT) {
                        Ok(job) => {
                            next = Some(job);
                            break;
                        }
                        Err(_) => {
                            if idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                                return;
                            }
                        }
                    }
                }
            }
        });
    }
}
