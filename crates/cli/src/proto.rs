//! # proto — the client ↔ daemon protocol and the thin client
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
//! Locations: the socket is `$TARN_SOCKET` (default `/run/tarn/tarn.sock`); daemon state
//! (pid file, `known_dirs`, `daemon.log`) lives in `$TARN_STATE_DIR` (default
//! `/var/lib/tarn`).
//!
//! Starting: when the connect fails (no socket, or nobody listening), the client starts
//! `tarn daemon --foreground` in a new session (setsid), stdin from /dev/null and
//! stdout/stderr appended to `daemon.log`, then retries the connect every 50 ms for up
//! to 10 s. Two clients racing to start a daemon are harmless: the daemon takes an
//! exclusive lock beside the socket, and the loser exits.

use std::io::{Read, Write};
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

/// Send one request on a connected stream and read the response.
pub fn exchange(mut stream: UnixStream, req: &Request) -> std::io::Result<Response> {
    let mut body = serde_json::to_vec(req)?;
    body.push(b'\n');
    stream.write_all(&body)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Start `tarn daemon --foreground` detached (new session, output to daemon.log).
pub fn spawn_daemon() -> std::io::Result<()> {
    let exe = std::env::current_exe()?;
    let dir = state_dir();
    std::fs::create_dir_all(&dir)?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("daemon.log"))?;
    let log2 = log.try_clone()?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon").arg("--foreground").stdin(Stdio::null()).stdout(log).stderr(log2);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
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
    let stream = connect_or_start(Duration::from_secs(10))?;
    match exchange(stream, &req) {
        // A daemon that was dying (e.g. just SIGKILLed) can accept a connection into
        // its backlog and then reset it without reading the request: the command did
        // not run, so connect again (starting a fresh daemon) and retry once.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) => {
            std::thread::sleep(Duration::from_millis(100));
            exchange(connect_or_start(Duration::from_secs(10))?, &req)
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
