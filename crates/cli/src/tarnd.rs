//! # tarnd — the engine binary: the daemon, `zdb`, and the interval clients
//!
//! Theory: the `tarn` command users type is a small client (`main.rs`) that forwards
//! `zpool`/`zfs`/`zinject`/`kstat` requests to the daemon itself and runs this binary,
//! installed beside it, for everything else: `daemon [--foreground|--stop|--set
//! NAME=VALUE…]`, `zdb` (run here, never in the daemon), `arcstat` and `zpool
//! iostat` (client loops over the daemon's counters). This binary links the whole
//! engine; keeping it out of the client keeps each `tarn zfs …` command's process
//! start as cheap as a small program's (a position-independent executable applies its
//! relocations at every start, and this one has thousands). It takes the same
//! arguments as `tarn`, so `tarnd zfs list` works too; `argv[0]` named `zpool`, `zfs`,
//! `zinject` or `zdb` (a symlink) means that command family.

use std::time::Duration;

use tarn_cli::{daemon, proto};

/// Large allocations are mappings of their own (`tarn_cli::memory::MapLarge`): part of
/// keeping the daemon's resident memory under its bound.
#[global_allocator]
static ALLOCATOR: tarn_cli::memory::MapLarge = tarn_cli::memory::MapLarge;

const USAGE: &str =
    "usage: tarn zpool <command> [args...]\n       tarn zfs <command> [args...]\n       tarn zinject [args...]\n       tarn zdb [args...]\n       tarn kstat arcstats\n       tarn arcstat [interval [count]]\n       tarn daemon [--foreground | --stop | --set NAME=VALUE...]\n";

fn main() {
    let args = proto::command_args();
    let code = match args.first().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => {
            eprint!("{USAGE}");
            2
        }
        Some("daemon") => run_daemon(&args[1..]),
        // Reports every interval: the client loops, asking the daemon for counters.
        Some("zpool") if args.get(1).map(String::as_str) == Some("iostat") => tarn_cli::iostat::client(&args[2..]),
        Some("arcstat") => tarn_cli::arcstat::client(&args[1..]),
        Some("zpool") | Some("zfs") | Some("zinject") | Some("kstat") => proto::forward(args),
        // Reads the leaves itself, read-only, in this process (never the daemon).
        Some("zdb") => tarn_cli::zdb::main(&args[1..]),
        Some(other) => {
            eprint!("tarn: unknown command '{other}'\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}

fn run_daemon(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("--foreground") | Some("-f") => daemon::run_foreground(),
        // Tunables go to the running daemon (started if needed).
        Some("--set") => proto::forward([&["daemon".to_string()], args].concat()),
        Some("--stop") => match std::os::unix::net::UnixStream::connect(proto::socket_path()) {
            Ok(s) => {
                let req = proto::Request {
                    argv: vec!["daemon".into(), "--stop".into()],
                    cwd: "/".into(),
                };
                match proto::exchange(s, &req) {
                    Ok(r) => {
                        print!("{}", r.stdout);
                        eprint!("{}", r.stderr);
                        if r.code != 0 {
                            return r.code;
                        }
                        // Wait until the socket is gone (shutdown finished).
                        for _ in 0..200 {
                            if !proto::socket_path().exists() {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        r.code
                    }
                    Err(e) => {
                        eprintln!("tarn: {e}");
                        1
                    }
                }
            }
            Err(_) => {
                eprintln!("tarn daemon is not running");
                1
            }
        },
        None => {
            // Background start: same as the client's auto-start, then wait for the socket.
            if std::os::unix::net::UnixStream::connect(proto::socket_path()).is_ok() {
                eprintln!("tarn daemon already running");
                return 1;
            }
            match proto::connect_or_start(Duration::from_secs(10)) {
                Ok(_) => 0,
                Err(e) => {
                    eprintln!("tarn: daemon did not start: {e}");
                    1
                }
            }
        }
        Some(other) => {
            eprint!("tarn daemon: unknown option '{other}'\n{USAGE}");
            2
        }
    }
}
