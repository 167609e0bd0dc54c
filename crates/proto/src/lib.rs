//! # tarn-proto — the client ↔ daemon protocol and the thin client
//!
//! Theory: one connection carries one command. The client connects to the daemon's
//! Unix socket, writes one JSON object and a newline,
//! `{"argv": ["zpool", "create", ...], "cwd": "/home/me"}`, then shuts down its write
//! half. The daemon answers with one JSON object,
//! `{"stdout": "...", "stderr": "...", "code": 0}`, and closes. The client prints both
//! streams and exits with `code`. `argv` is everything after `tarn` (with the family
//! word first even when the binary was invoked as `zpool`/`zfs` through a symlink);
//! `cwd` lets the daemon resolve relative vdev paths as the user meant them.
//!
//! `zfs send` and `zfs recv` ([`wants_stdio`]) also hand the daemon the client's
//! stdin, stdout and stderr descriptors (SCM_RIGHTS on the request's first byte): the
//! daemon reads or writes the stream on them directly, and the JSON answer still
//! comes at the end. The daemon closes any descriptor a command does not use.
//!
//! Locations: the socket is `$TARN_SOCKET` (default `/run/tarn/tarn.sock`); daemon state
//! (pid file, `known_dirs`, `daemon.log`) lives in `$TARN_STATE_DIR` (default
//! `/var/lib/tarn`).
//!
//! Starting: when the connect fails (no socket, or nobody listening), the client starts
//! `tarnd daemon --foreground` (the engine binary beside `tarn`, [`engine_exe`]) in a
//! new session (setsid), stdin from /dev/null and stdout/stderr appended to
//! `daemon.log`, then retries the connect every 50 ms for up to 10 s. Two clients racing to start a daemon are harmless: the daemon takes an
//! exclusive lock beside the socket, and the loser exits.
//!
//! The started daemon does not inherit the client's environment: it runs in `/` with
//! umask 077 and only `PATH` ([`DAEMON_PATH`], or `$TARN_DAEMON_PATH` where a test
//! harness needs another), the `TARN_*` settings (with `TARN_SOCKET` and
//! `TARN_STATE_DIR` made absolute), `RUST_BACKTRACE` and `TZ` (times are shown in
//! the local time of whoever started it).
//!
//! Limits: a request is at most [`MAX_REQUEST_BYTES`]; the daemon gives a client
//! [`IO_TIMEOUT`] to send it and, for each write, to take the answer, and answers only
//! root or its own user (see `daemon`).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Default socket path.
pub const DEFAULT_SOCKET: &str = "/run/tarn/tarn.sock";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/tarn";
/// `PATH` of a daemon the client starts (`$TARN_DAEMON_PATH` replaces it, for tests).
pub const DAEMON_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Largest request the daemon reads (the JSON of argv and cwd); a larger one is
/// refused with "request too large".
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// How long the daemon waits for a client to send its request, and for each write of
/// the answer to be taken; a client that stalls longer is dropped.
pub const IO_TIMEOUT: Duration = Duration::from_secs(15);
/// OpenZFS's words (libzfs) for a user who may not run commands.
pub const PERMISSION_DENIED: &str = "Permission denied the ZFS utilities must be run as root.";

/// One command sent to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Arguments after `tarn`, starting with the family (`zpool`, `zfs`, `daemon`).
    pub argv: Vec<String>,
    /// The client's working directory.
    pub cwd: String,
}

/// The daemon's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Response {
    /// Text for the client's stdout.
    pub stdout: String,
    /// Text for the client's stderr.
    pub stderr: String,
    /// Exit status for the client.
    pub code: i32,
}

impl Response {
    /// Success with this stdout.
    pub fn ok(stdout: impl Into<String>) -> Response {
        Response {
            stdout: stdout.into(),
            stderr: String::new(),
            code: 0,
        }
    }
    /// Failure (exit 1) with this stderr; a newline is appended when missing.
    pub fn err(stderr: impl Into<String>) -> Response {
        let mut s: String = stderr.into();
        if !s.ends_with('\n') {
            s.push('\n');
        }
        Response {
            stdout: String::new(),
            stderr: s,
            code: 1,
        }
    }
    /// Usage error (exit 2).
    pub fn usage(stderr: impl Into<String>) -> Response {
        let mut r = Response::err(stderr);
        r.code = 2;
        r
    }
}

/// `$TARN_SOCKET` or the default.
pub fn socket_path() -> PathBuf {
    std::env::var_os("TARN_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// `$TARN_STATE_DIR` or the default.
pub fn state_dir() -> PathBuf {
    std::env::var_os("TARN_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// Commands that read or write a stream on the client's standard input/output
/// (`zfs send`, `zfs recv`): the client hands the daemon its stdin, stdout and stderr
/// as file descriptors (SCM_RIGHTS) with the request, so the stream never passes
/// through the socket and `-v` progress reaches the terminal while it runs.
pub fn wants_stdio(argv: &[String]) -> bool {
    argv.first().map(String::as_str) == Some("zfs") && matches!(argv.get(1).map(String::as_str), Some("send" | "recv" | "receive"))
}

/// Most descriptors a request may carry (stdin, stdout, stderr).
pub const STDIO_FDS: usize = 3;

/// Write `body` on `stream`, its first byte carrying `fds` as SCM_RIGHTS.
fn send_with_fds(stream: &UnixStream, body: &[u8], fds: &[RawFd]) -> std::io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: body.as_ptr() as *mut libc::c_void,
        iov_len: body.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call,
    // and the control buffer is large enough (CMSG_SPACE) for one header and `fds`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c) as *mut RawFd, fds.len());
        let n = libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Read the first chunk of a request with the descriptors that came with it (at most
/// [`STDIO_FDS`]; any beyond are closed, and so is everything on error).
pub fn recv_with_fds(stream: &UnixStream, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: pure size computation.
    let space = unsafe { libc::CMSG_SPACE((8 * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut fds = Vec::new();
    // SAFETY: as in send_with_fds; the kernel writes at most msg_controllen bytes of
    // control data and we walk it with the CMSG macros, taking ownership of each
    // descriptor exactly once.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c) as *const RawFd;
                for i in 0..data_bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        n as usize
    };
    fds.truncate(STDIO_FDS);
    Ok((n, fds))
}

/// Send one request on a connected stream and read the response.
pub fn exchange(stream: UnixStream, req: &Request) -> std::io::Result<Response> {
    exchange_fds(stream, req, &[])
}

/// [`exchange`], handing `fds` to the daemon with the request.
pub fn exchange_fds(mut stream: UnixStream, req: &Request, fds: &[RawFd]) -> std::io::Result<Response> {
    let mut body = serde_json::to_vec(req)?;
    body.push(b'\n');
    let sent = if fds.is_empty() { 0 } else { send_with_fds(&stream, &body, fds)? };
    stream.write_all(&body[sent..])?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// This process's arguments after `argv[0]`, with the command family first: when
/// `argv[0]` is named `zpool`, `zfs`, `zinject` or `zdb` (a symlink to `tarn` or
/// `tarnd`), that name is put in front, as `tarn zfs …` would have it.
pub fn command_args() -> Vec<String> {
    let mut args: Vec<String> = std::env::args().collect();
    let argv0 = args.remove(0);
    let base = std::path::Path::new(&argv0)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if matches!(base.as_str(), "zpool" | "zfs" | "zinject" | "zdb") {
        args.insert(0, base);
    }
    args
}

/// The file name of the engine binary ([`engine_exe`]).
pub const ENGINE_NAME: &str = "tarnd";

/// The engine binary (`tarnd`: daemon, `zdb`, interval clients): this process's own
/// executable when it is the engine, otherwise `tarnd` in the directory of this
/// process's executable (symlinks resolved, so a `zfs` link to `tarn` finds it too).
/// Errors: `NotFound` naming the missing file and what to install.
pub fn engine_exe() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if exe.file_name().is_some_and(|n| n == ENGINE_NAME) {
        return Ok(exe);
    }
    let engine = exe.with_file_name(ENGINE_NAME);
    if engine.is_file() {
        return Ok(engine);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "{} is missing: install the {ENGINE_NAME} binary (built beside tarn by `cargo build --release -p tarn-cli`) in the same directory as {}",
            engine.display(),
            exe.display()
        ),
    ))
}

/// Replace this process with the engine binary run on `args` (what followed `tarn`,
/// family word first). Returns only on failure, with the exit status to use after
/// printing why.
pub fn exec_engine(args: &[String]) -> i32 {
    match engine_exe() {
        Ok(engine) => {
            let e = Command::new(&engine).args(args).exec();
            eprintln!("tarn: cannot run {}: {e}", engine.display());
            1
        }
        Err(e) => {
            eprintln!("tarn: {e}");
            1
        }
    }
}

/// The client side of one forwarded command: send `argv` (family word first) to the
/// daemon, starting it if needed, print its stdout and stderr, and return the exit
/// status it chose (1 with a message when the daemon cannot be reached).
pub fn forward(argv: Vec<String>) -> i32 {
    match run_remote(argv) {
        Ok(resp) => {
            print!("{}", resp.stdout);
            eprint!("{}", resp.stderr);
            let _ = std::io::stdout().flush();
            resp.code
        }
        // The socket's directory is root's alone (mode 0700).
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("{PERMISSION_DENIED}");
            1
        }
        Err(e) => {
            eprintln!(
                "tarn: cannot reach the daemon at {}: {e} (see {})",
                socket_path().display(),
                state_dir().join("daemon.log").display()
            );
            1
        }
    }
}

/// Start `tarnd daemon --foreground` ([`engine_exe`]) detached (new session, output
/// to daemon.log), with a clean environment: cwd `/`, umask 077, `PATH` [`DAEMON_PATH`] (or
/// `$TARN_DAEMON_PATH`), and of the client's variables only `TARN_*` and
/// `RUST_BACKTRACE` (`TARN_SOCKET` and `TARN_STATE_DIR` absolute).
pub fn spawn_daemon() -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let exe = engine_exe()?;
    let dir = std::path::absolute(state_dir())?;
    let socket = std::path::absolute(socket_path())?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join("daemon.log"))?;
    let log2 = log.try_clone()?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon").arg("--foreground").stdin(Stdio::null()).stdout(log).stderr(log2);
    cmd.env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(|k| k.starts_with("TARN_") || k == "RUST_BACKTRACE" || k == "TZ")))
        .env("PATH", std::env::var_os("TARN_DAEMON_PATH").unwrap_or_else(|| DAEMON_PATH.into()))
        .env("TARN_SOCKET", socket)
        .env("TARN_STATE_DIR", dir)
        .current_dir("/");
    // SAFETY: setsid and umask are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::umask(0o077);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    // Reap it from a thread so it never lingers as a zombie while we wait; a daemon
    // that starts fine runs until stopped, which outlives this client (we do not join).
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// Connect, starting the daemon if nobody answers, retrying for up to `timeout`.
pub fn connect_or_start(timeout: Duration) -> std::io::Result<UnixStream> {
    let path = socket_path();
    match UnixStream::connect(&path) {
        Ok(s) => return Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(e),
        Err(_) => {}
    }
    spawn_daemon()?;
    let start = Instant::now();
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() >= timeout => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Run one command through the daemon (starting it if needed).
pub fn run_remote(argv: Vec<String>) -> std::io::Result<Response> {
    let cwd = std::env::current_dir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| "/".into());
    let req = Request { argv, cwd };
    let fds: Vec<RawFd> = if wants_stdio(&req.argv) { vec![0, 1, 2] } else { Vec::new() };
    let stream = connect_or_start(Duration::from_secs(10))?;
    match exchange_fds(stream, &req, &fds) {
        // A daemon that was dying (e.g. just SIGKILLed) can accept a connection into
        // its backlog and then reset it without reading the request: the command did
        // not run, so connect again (starting a fresh daemon) and retry once.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) => {
            std::thread::sleep(Duration::from_millis(100));
            exchange_fds(connect_or_start(Duration::from_secs(10))?, &req, &fds)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_response_are_plain_json() {
        let r = Request {
            argv: vec!["zpool".into(), "list".into()],
            cwd: "/tmp".into(),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"argv":["zpool","list"],"cwd":"/tmp"}"#);
        let resp: Response = serde_json::from_str(r#"{"stdout":"a\n","stderr":"","code":1}"#).unwrap();
        assert_eq!(
            resp,
            Response {
                stdout: "a\n".into(),
                stderr: "".into(),
                code: 1
            }
        );
        assert_eq!(Response::err("x").stderr, "x\n");
        assert_eq!(Response::usage("x").code, 2);
    }
}
