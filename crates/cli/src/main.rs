//! # tarn — the command users type
//!
//! Theory: pick the role from argv. `argv[0]` named `zpool`, `zfs`, `zinject` or `zdb`
//! (a symlink) means that command family; otherwise the first argument chooses.
//! `zpool …` (but `zpool iostat`), `zfs …`, `zinject …` and `kstat …` are one request
//! each: forwarded to the daemon here (`tarn_proto`), and the process exits with
//! the status the daemon returns. Everything else (`daemon …`, `zdb`, `arcstat`, `zpool
//! iostat`, usage) is the engine binary's (`tarnd`, installed beside this one), which
//! replaces this process with the same arguments.
//!
//! Why two binaries: this one links only the protocol, so a command's process start
//! costs what a small program's does. The engine binary is a position-independent
//! executable with thousands of relocations and a large read-only data segment; starting
//! it costs about 0.2 ms more on an idle 2-core VM and 0.6 ms more beside an fsynced
//! writer, on every `tarn zfs snapshot` (bench/README.md, "The client binary").

use tarn_proto as proto;

fn main() {
    let args = proto::command_args();
    let code = match args.first().map(String::as_str) {
        Some("zpool") if args.get(1).map(String::as_str) == Some("iostat") => proto::exec_engine(&args),
        Some("zpool") | Some("zfs") | Some("zinject") | Some("kstat") => proto::forward(args),
        _ => proto::exec_engine(&args),
    };
    std::process::exit(code);
}
