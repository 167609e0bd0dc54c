//! # iostat — `zpool iostat [-HpPvy] [[pool ...]|[pool vdev ...]|[vdev ...]] [interval [count]]`
//!
//! Theory: the engine keeps monotonic per-vdev counters (operations and bytes read and
//! written) and `tarn_spa::Pool::iostat` copies them, with the time since the pool was
//! imported, into a snapshot. A report is the difference of two snapshots of a pool
//! divided by the time between them; the first report differences against nothing,
//! which gives the averages since import (OpenZFS's "since boot" report).
//!
//! Where it runs: a daemon command answers exactly once, so it cannot stream reports.
//! The client therefore runs this command itself ([`client`], called from `main`):
//! it parses the command line, asks the daemon for a snapshot of every imported pool
//! (`zpool iostat --snapshot`, an internal request that the client's own option
//! parsing can never produce, answered as JSON by [`run`]), prints a report, sleeps
//! `interval` seconds, asks again, and so on, `count` times or until killed. Sent to
//! the daemon directly (an embedder using `proto::run_remote`), `zpool iostat ARGS`
//! prints the first report only: the daemon never sleeps under its state lock.
//!
//! The loop follows OpenZFS `zpool_do_iostat`: the header is printed once, or before
//! every report with `-v`; `-y` skips the since-import report (with no interval, the
//! one report covers the time between two back-to-back snapshots, as OpenZFS does);
//! a pool that disappears (exported) drops out, and with none left every report is
//! "no pools available" on stderr. Operands are pool names, or vdev names of any pool,
//! or a pool followed by vdev names of that pool (only those vdevs are shown, flush
//! left, under the title `vdev`); the last one or two numeric operands are the
//! interval and the count. Layout (OpenZFS `print_iostat_header`, `print_vdev_stats`):
//! a name column at least 10 wide (the widest name plus two spaces per level with
//! `-v`), six value columns 5 wide (15 with `-p`) each after two spaces, capacity only
//! for the pool, its top-level vdevs and cache devices (`-` elsewhere), log vdevs
//! after a `logs` row of dashes and cache devices after a `cache` row, and with `-v` a dashed line after each pool.
//!
//! Errors and exit status (OpenZFS's): a bad option, an interval of zero, or a pool
//! followed by names that are not its vdevs print a message and the usage, exit 2;
//! operands that are neither pools nor vdevs print "Unable to parse pools/vdevs
//! list.", and no pools at all "no pools available", exit 1.
//!
//! Limits: no `-c`, `-g`, `-L`, `-P`, `-T`, `-l`, `-q`, `-r`, `-w` (latency and queue
//! statistics are not collected); pools imported after the first report are not added.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tarn_spa::{PoolIostat, VdevIostat};

use crate::args::getopt;
use crate::format::nicenum;
use crate::proto::{self, Response};
use crate::state::State;

/// The internal request word that asks the daemon for a JSON snapshot.
pub const SNAPSHOT_ARG: &str = "--snapshot";

/// `zpool iostat` usage, printed after usage errors.
pub const USAGE: &str = "usage:\n\tiostat [-HpPvy] [[pool ...]|[pool vdev ...]|[vdev ...]]\n\t    [interval [count]]\n";

/// Every imported pool's snapshot, by pool name.
pub type Snapshot = BTreeMap<String, PoolIostat>;

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// `-v`: every vdev.
    pub verbose: bool,
    /// `-y`: skip the since-import report.
    pub skip_first: bool,
    /// `-H`: no headers, tab-separated.
    pub scripted: bool,
    /// `-p`: exact numbers.
    pub parsable: bool,
    /// `-P`: full device paths (otherwise a leaf under `/dev/` loses that prefix, as
    /// in `zpool status`; an operand may name it either way).
    pub full_paths: bool,
    /// Pool and vdev names.
    pub operands: Vec<String>,
    /// Seconds between reports (0: one report).
    pub interval_s: f32,
    /// Reports to print (0: forever; only with an interval).
    pub count: u64,
}

/// A usage error: `msg` (when not empty), then the usage; exit status 2.
fn usage_error(msg: &str) -> Response {
    let mut text = String::new();
    if !msg.is_empty() {
        text.push_str(msg);
        text.push('\n');
    }
    text.push_str(USAGE);
    Response::usage(text)
}

/// OpenZFS `isnumber`: digits and dots only.
fn is_number(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Parse `zpool iostat` arguments (after the word `iostat`).
pub fn parse(args: &[String]) -> Result<Args, Response> {
    let p = getopt(args, "vyHpPh").map_err(|e| usage_error(&e))?;
    if p.has('h') {
        return Err(usage_error(""));
    }
    let mut operands = p.operands.clone();
    let mut interval_s = 0f32;
    let mut count = 0u64;
    // The last operand, and the one before it, may be numbers: interval [count].
    for round in 0..2 {
        let Some(last) = operands.last() else { break };
        if !is_number(last) {
            break;
        }
        let Ok(v) = last.parse::<f32>() else {
            // Not a valid number after all: it stays an operand, and fails as a name.
            if round == 0 {
                interval_s = 0.0;
            }
            break;
        };
        if v == 0.0 {
            return Err(usage_error("interval cannot be zero"));
        }
        if round == 1 {
            count = interval_s as u64;
        }
        interval_s = v;
        operands.pop();
    }
    Ok(Args {
        verbose: p.has('v'),
        skip_first: p.has('y'),
        scripted: p.has('H'),
        parsable: p.has('p'),
        full_paths: p.has('P'),
        operands: if p.has('P') {
            operands
        } else {
            operands.into_iter().map(|o| o.strip_prefix("/dev/").map(str::to_string).unwrap_or(o)).collect()
        },
        interval_s,
        count,
    })
}

/// Which pools and which vdevs a report shows.
#[derive(Debug, Clone, PartialEq)]
struct Selection {
    /// Pools, in report order.
    pools: Vec<String>,
    /// Only these vdevs (empty: all).
    vdevs: Vec<String>,
}

fn vdev_names(p: &PoolIostat) -> impl Iterator<Item = &str> {
    p.root.walk().into_iter().skip(1).map(|v| v.name.as_str())
}

fn is_vdev_in(snap: &Snapshot, pool: Option<&str>, name: &str) -> bool {
    snap.iter()
        .filter(|(n, _)| pool.is_none_or(|p| p == n.as_str()))
        .any(|(_, p)| vdev_names(p).any(|v| v == name))
}

/// Resolve the operands against a snapshot (OpenZFS's order of guesses).
fn select(args: &Args, snap: &Snapshot) -> Result<Selection, Response> {
    let ops = &args.operands;
    if ops.is_empty() {
        return Ok(Selection {
            pools: snap.keys().cloned().collect(),
            vdevs: Vec::new(),
        });
    }
    if ops.iter().all(|o| snap.contains_key(o)) {
        let mut pools: Vec<String> = Vec::new();
        for o in ops {
            if !pools.contains(o) {
                pools.push(o.clone());
            }
        }
        return Ok(Selection { pools, vdevs: Vec::new() });
    }
    if ops.iter().all(|o| is_vdev_in(snap, None, o)) {
        return Ok(Selection {
            pools: snap.keys().cloned().collect(),
            vdevs: ops.clone(),
        });
    }
    let first = &ops[0];
    if snap.contains_key(first) {
        let rest = &ops[1..];
        if rest.iter().all(|o| is_vdev_in(snap, Some(first), o)) {
            return Ok(Selection {
                pools: vec![first.clone()],
                vdevs: rest.to_vec(),
            });
        }
        let mut msg = format!("Expected either a list of pools, or list of vdevs in \"{first}\", but got:\n");
        for o in rest {
            let what = if snap.contains_key(o) {
                "pool"
            } else if is_vdev_in(snap, Some(first), o) {
                "vdev in this pool"
            } else if is_vdev_in(snap, None, o) {
                "vdev in another pool"
            } else {
                "unknown"
            };
            msg.push_str(&format!("\t{o} ({what})\n"));
        }
        return Err(usage_error(&msg));
    }
    Err(Response::err("Unable to parse pools/vdevs list.\n\n"))
}

/// Layout parameters of one report.
struct Layout {
    namewidth: usize,
    column_width: usize,
    scripted: bool,
    parsable: bool,
    verbose: bool,
    vdevs: Vec<String>,
}

const TOP_LABELS: [&str; 3] = ["capacity", "operations", "bandwidth"];
const BOTTOM_LABELS: [&str; 6] = ["alloc", "free", "read", "write", "read", "write"];

impl Layout {
    fn title(&self) -> &'static str {
        if self.vdevs.is_empty() {
            "pool"
        } else {
            "vdev"
        }
    }

    /// The dashed line under the header and after each pool with `-v`.
    fn separator(&self) -> String {
        let w = self.namewidth.max(self.title().len());
        let mut s = "-".repeat(w);
        for _ in BOTTOM_LABELS {
            s.push_str("  ");
            s.push_str(&"-".repeat(self.column_width.min(20)));
        }
        s.push('\n');
        s
    }

    /// Three lines: group labels centred over their two columns, column labels, dashes.
    fn header(&self) -> String {
        let w = self.namewidth.max(self.title().len());
        let cw = self.column_width;
        let mut s = " ".repeat(w);
        for label in TOP_LABELS {
            let span = cw * 2 + 2;
            let start = span / 2 - label.len() / 2;
            s.push_str("  ");
            s.push_str(&" ".repeat(start));
            s.push_str(label);
            s.push_str(&" ".repeat(span - start - label.len()));
        }
        s.push('\n');
        s.push_str(&format!("{:<w$}", self.title()));
        for label in BOTTOM_LABELS {
            s.push_str(&format!("  {label:>cw$}"));
        }
        s.push('\n');
        s.push_str(&self.separator());
        s
    }

    fn value(&self, n: u64) -> String {
        let v = if self.parsable { n.to_string() } else { nicenum(n) };
        if self.scripted {
            format!("\t{v}")
        } else {
            format!("  {v:>w$}", w = self.column_width)
        }
    }

    /// One row: name, capacity (or not applicable), then the four rates.
    fn row(&self, name: &str, depth: usize, node: &VdevIostat, rates: [u64; 4]) -> String {
        let mut s = if self.scripted {
            name.to_string()
        } else if name.len() + depth > self.namewidth {
            format!("{}{name}", " ".repeat(depth))
        } else {
            format!("{}{name:<w$}", " ".repeat(depth), w = self.namewidth - depth)
        };
        if node.space_bytes == 0 {
            let na = if self.parsable { "0" } else { "-" };
            for _ in 0..2 {
                if self.scripted {
                    s.push_str(&format!("\t{na}"));
                } else {
                    s.push_str(&format!("  {na:>w$}", w = self.column_width));
                }
            }
        } else {
            s.push_str(&self.value(node.alloc_bytes));
            s.push_str(&self.value(node.space_bytes.saturating_sub(node.alloc_bytes)));
        }
        for r in rates {
            s.push_str(&self.value(r));
        }
        s.push('\n');
        s
    }

    /// The `logs` row: the word, then a dash at the right of every column.
    fn class_row(&self, word: &str) -> String {
        let w = self.namewidth.max(self.title().len()).max(word.len());
        let mut s = format!("{word:<w$}");
        for _ in BOTTOM_LABELS {
            s.push_str(&format!("  {:>w$}-", " ", w = self.column_width - 1));
        }
        s
    }
}

/// Per-second rates of `new` over `old` (None: since import) across `tdelta_ns`.
fn rates(new: &VdevIostat, old: Option<&VdevIostat>, tdelta_ns: u64) -> [u64; 4] {
    let zero = VdevIostat::default();
    let old = old.unwrap_or(&zero);
    let scale = if tdelta_ns == 0 { 1.0 } else { 1e9 / tdelta_ns as f64 };
    [
        (new.read_ops, old.read_ops),
        (new.write_ops, old.write_ops),
        (new.read_bytes, old.read_bytes),
        (new.write_bytes, old.write_bytes),
    ]
    .map(|(n, o)| (n.saturating_sub(o) as f64 * scale) as u64)
}

/// The rows of one node and (with `-v` or vdev names) its children.
fn node_rows(out: &mut String, lay: &Layout, new: &VdevIostat, old: Option<&VdevIostat>, tdelta_ns: u64, depth: usize) {
    let mut depth = depth;
    let shown = if lay.vdevs.is_empty() {
        true
    } else if lay.vdevs.contains(&new.name) {
        depth = 0;
        true
    } else {
        false
    };
    if shown {
        out.push_str(&lay.row(&new.name, depth, new, rates(new, old, tdelta_ns)));
    }
    if !lay.verbose {
        return;
    }
    // Children are matched with the old snapshot by position and name; a vdev that is
    // new since then reports its average since import.
    let old_child = |i: usize, c: &VdevIostat| old.and_then(|o| o.children.get(i)).filter(|oc| oc.name == c.name);
    for (i, c) in new.children.iter().enumerate().filter(|(_, c)| !c.is_log && !c.is_cache) {
        node_rows(out, lay, c, old_child(i, c), tdelta_ns, depth + 2);
    }
    // Log vdevs, then cache devices (OpenZFS `print_iostat_vdevs` order).
    for (word, pick) in [
        ("logs", (|c: &VdevIostat| c.is_log) as fn(&VdevIostat) -> bool),
        ("cache", |c: &VdevIostat| c.is_cache),
    ] {
        if new.children.iter().any(pick) {
            if !lay.scripted && lay.vdevs.is_empty() {
                out.push_str(&lay.class_row(word));
            }
            out.push('\n');
            for (i, c) in new.children.iter().enumerate().filter(|(_, c)| pick(c)) {
                node_rows(out, lay, c, old_child(i, c), tdelta_ns, depth + 2);
            }
        }
    }
}

/// Widest name plus indentation in a tree.
fn max_width(v: &VdevIostat, depth: usize) -> usize {
    v.children.iter().map(|c| max_width(c, depth + 2)).fold(v.name.len() + depth, usize::max)
}

/// Columns of the terminal on stdout, or 999 when it is not a terminal (OpenZFS).
fn terminal_columns() -> usize {
    // SAFETY: isatty and TIOCGWINSZ only read the descriptor's state into `ws`.
    unsafe {
        if libc::isatty(1) == 1 {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_col > 0 {
                return ws.ws_col as usize;
            }
            return 80;
        }
    }
    999
}

/// Where reports go and how the loop waits: the client prints and sleeps; the
/// daemon collects one report.
pub trait Sink {
    /// Take the next snapshot of every imported pool.
    fn snapshot(&mut self) -> Result<Snapshot, Response>;
    /// Print on stdout.
    fn out(&mut self, text: &str);
    /// Print on stderr.
    fn err(&mut self, text: &str);
    /// Wait `interval_s` seconds.
    fn sleep(&mut self, interval_s: f32);
    /// Width of the terminal (OpenZFS caps the name column at this minus 42).
    fn columns(&self) -> usize;
}

/// Device names as the report shows them: without `/dev/` unless `-P` (as
/// `format::device_names` does for `zpool status`).
fn shown_names(args: &Args, mut snap: Snapshot) -> Snapshot {
    fn strip(v: &mut tarn_spa::VdevIostat) {
        if let Some(short) = v.name.strip_prefix("/dev/") {
            v.name = short.to_string();
        }
        v.children.iter_mut().for_each(strip);
    }
    if !args.full_paths {
        snap.values_mut().for_each(|p| strip(&mut p.root));
    }
    snap
}

/// Run the report loop; returns the exit status. With `once`, at most one report is
/// printed whatever the interval and count.
pub fn drive(args: &Args, sink: &mut dyn Sink, once: bool) -> i32 {
    let first = match sink.snapshot().map(|s| shown_names(args, s)) {
        Ok(s) => s,
        Err(r) => {
            sink.err(&r.stderr);
            return r.code;
        }
    };
    let sel = match select(args, &first) {
        Ok(s) => s,
        Err(r) => {
            sink.err(&r.stderr);
            return r.code;
        }
    };
    let interval_s = if once { 0.0 } else { args.interval_s };
    if sel.pools.is_empty() && interval_s == 0.0 {
        sink.err("no pools available\n");
        return 1;
    }
    let verbose = args.verbose || !sel.vdevs.is_empty();
    let mut pools = sel.pools.clone();
    let mut count = args.count;
    let mut iteration = 0u64;
    let mut prev: Option<Snapshot> = None;
    let mut snap = Some(first);
    loop {
        let now = match snap.take() {
            Some(s) => s,
            None => match sink.snapshot().map(|s| shown_names(args, s)) {
                Ok(s) => s,
                Err(r) => {
                    sink.err(&r.stderr);
                    return r.code;
                }
            },
        };
        pools.retain(|p| now.contains_key(p));
        if pools.is_empty() {
            sink.err("no pools available\n");
        } else {
            let skip = args.skip_first && iteration == 0;
            let widest = pools
                .iter()
                .map(|p| if verbose { max_width(&now[p].root, 0) } else { p.len() })
                .max()
                .unwrap_or(0);
            let lay = Layout {
                namewidth: widest.max(10).min(sink.columns().saturating_sub(42).max(1)),
                column_width: if args.parsable { 15 } else { 5 },
                scripted: args.scripted,
                parsable: args.parsable,
                verbose,
                vdevs: sel.vdevs.clone(),
            };
            iteration += 1;
            if ((iteration == 1 && !skip) || skip != args.verbose) && !args.scripted {
                sink.out(&lay.header());
            }
            if skip {
                sink.sleep(interval_s);
                prev = Some(now);
                continue;
            }
            let mut text = String::new();
            for p in &pools {
                let new = &now[p];
                // A pool exported and imported again since the last snapshot starts
                // its counters and clock afresh: report it as since import.
                let old = prev.as_ref().and_then(|s| s.get(p)).filter(|o| iteration > 1 && o.elapsed_ns <= new.elapsed_ns);
                let tdelta_ns = new.elapsed_ns - old.map_or(0, |o| o.elapsed_ns);
                node_rows(&mut text, &lay, &new.root, old.map(|o| &o.root), tdelta_ns, 0);
                if verbose && !args.scripted && sel.vdevs.is_empty() {
                    text.push_str(&lay.separator());
                }
            }
            if ((pools.len() > 1 && !args.verbose) || !sel.vdevs.is_empty()) && !args.scripted {
                text.push_str(&lay.separator());
            }
            sink.out(&text);
        }
        if interval_s == 0.0 {
            break;
        }
        if count != 0 {
            count -= 1;
            if count == 0 {
                break;
            }
        }
        sink.sleep(interval_s);
        prev = Some(now);
    }
    0
}

/// Every imported pool's counters.
fn snapshot_of(st: &State) -> Snapshot {
    st.pools.iter().map(|(n, e)| (n.clone(), e.pool.iostat())).collect()
}

/// The daemon's side: the internal snapshot request, or one report.
struct DaemonSink<'a> {
    st: &'a State,
    resp: Response,
}

impl Sink for DaemonSink<'_> {
    fn snapshot(&mut self) -> Result<Snapshot, Response> {
        Ok(snapshot_of(self.st))
    }
    fn out(&mut self, text: &str) {
        self.resp.stdout.push_str(text);
    }
    fn err(&mut self, text: &str) {
        self.resp.stderr.push_str(text);
    }
    fn sleep(&mut self, _interval_s: f32) {}
    fn columns(&self) -> usize {
        999
    }
}

/// `zpool iostat ARGS` in the daemon: `--snapshot` answers the client's request for
/// counters (JSON of [`Snapshot`]); anything else prints the first report only.
pub fn run(st: &mut State, args: &[String]) -> Response {
    if args.first().map(String::as_str) == Some(SNAPSHOT_ARG) {
        return match serde_json::to_string(&snapshot_of(st)) {
            Ok(json) => Response::ok(json),
            Err(e) => Response::err(format!("internal error: {e}")),
        };
    }
    let parsed = match parse(args) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut sink = DaemonSink { st, resp: Response::ok("") };
    let code = drive(&parsed, &mut sink, true);
    let mut resp = sink.resp;
    resp.code = code;
    resp
}

/// The client's side: talks to the daemon for every snapshot, prints as it goes.
struct ClientSink;

impl Sink for ClientSink {
    fn snapshot(&mut self) -> Result<Snapshot, Response> {
        let argv = vec!["zpool".to_string(), "iostat".to_string(), SNAPSHOT_ARG.to_string()];
        let resp = proto::run_remote(argv).map_err(|e| {
            Response::err(format!(
                "tarn: cannot reach the daemon at {}: {e} (see {})",
                proto::socket_path().display(),
                proto::state_dir().join("daemon.log").display()
            ))
        })?;
        if resp.code != 0 {
            return Err(resp);
        }
        serde_json::from_str(&resp.stdout).map_err(|e| Response::err(format!("tarn: bad answer from the daemon: {e}")))
    }
    fn out(&mut self, text: &str) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }
    fn err(&mut self, text: &str) {
        eprint!("{text}");
    }
    fn sleep(&mut self, interval_s: f32) {
        std::thread::sleep(Duration::from_secs_f32(interval_s.max(0.0)));
    }
    fn columns(&self) -> usize {
        terminal_columns()
    }
}

/// `tarn zpool iostat ARGS` on the client: parse, then report every interval.
/// Returns the exit status.
pub fn client(args: &[String]) -> i32 {
    match parse(args) {
        Ok(a) => drive(&a, &mut ClientSink, false),
        Err(r) => {
            eprint!("{}", r.stderr);
            r.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn leaf(name: &str, r: u64, w: u64) -> VdevIostat {
        VdevIostat {
            name: name.into(),
            read_ops: r,
            write_ops: w,
            read_bytes: r * 5000,
            write_bytes: w * 5000,
            ..VdevIostat::default()
        }
    }

    fn pool() -> Snapshot {
        let mirror = VdevIostat {
            name: "mirror-0".into(),
            alloc_bytes: 1_300_000,
            space_bytes: 100 << 20,
            children: vec![leaf("/v/a", 2, 10), leaf("/v/b", 0, 10)],
            ..leaf("mirror-0", 2, 10)
        };
        let log = VdevIostat {
            is_log: true,
            space_bytes: 60 << 20,
            ..leaf("/v/log", 0, 4)
        };
        let root = VdevIostat {
            name: "tank".into(),
            alloc_bytes: 1_300_000,
            space_bytes: 100 << 20,
            children: vec![mirror, log],
            ..leaf("tank", 2, 14)
        };
        BTreeMap::from([(
            "tank".to_string(),
            PoolIostat {
                elapsed_ns: 2_000_000_000,
                root,
            },
        )])
    }

    struct Fake {
        snaps: Vec<Snapshot>,
        out: String,
        err: String,
        slept: u32,
    }

    impl Sink for Fake {
        fn snapshot(&mut self) -> Result<Snapshot, Response> {
            Ok(if self.snaps.len() > 1 { self.snaps.remove(0) } else { self.snaps[0].clone() })
        }
        fn out(&mut self, text: &str) {
            self.out.push_str(text);
        }
        fn err(&mut self, text: &str) {
            self.err.push_str(text);
        }
        fn sleep(&mut self, _interval_s: f32) {
            self.slept += 1;
        }
        fn columns(&self) -> usize {
            999
        }
    }

    fn fake(snaps: Vec<Snapshot>) -> Fake {
        Fake {
            snaps,
            out: String::new(),
            err: String::new(),
            slept: 0,
        }
    }

    #[test]
    fn interval_and_count_are_the_last_numbers() {
        let a = parse(&s(&["-v", "tank", "2", "3"])).unwrap();
        assert_eq!((a.interval_s, a.count, a.operands.clone()), (2.0, 3, s(&["tank"])));
        let a = parse(&s(&["0.5"])).unwrap();
        assert_eq!((a.interval_s, a.count), (0.5, 0));
        assert!(parse(&s(&["tank", "1.2.3"])).unwrap().operands.len() == 2);
        let e = parse(&s(&["0"])).unwrap_err();
        assert_eq!((e.code, e.stderr.starts_with("interval cannot be zero\nusage:\n")), (2, true));
        assert_eq!(parse(&s(&["-x"])).unwrap_err().stderr.lines().next(), Some("invalid option 'x'"));
    }

    #[test]
    fn header_and_rows_match_openzfs_layout() {
        let mut f = fake(vec![pool()]);
        assert_eq!(drive(&parse(&[]).unwrap(), &mut f, false), 0);
        assert_eq!(
            f.out,
            "              capacity     operations     bandwidth \n\
             pool        alloc   free   read  write   read  write\n\
             ----------  -----  -----  -----  -----  -----  -----\n\
             tank        1.24M  98.8M      1      7  4.88K  34.2K\n"
        );
        let mut f = fake(vec![pool()]);
        drive(&parse(&s(&["-v"])).unwrap(), &mut f, false);
        let body: Vec<&str> = f.out.lines().skip(3).collect();
        assert_eq!(
            body,
            [
                "tank        1.24M  98.8M      1      7  4.88K  34.2K",
                "  mirror-0  1.24M  98.8M      1      5  4.88K  24.4K",
                "    /v/a        -      -      1      5  4.88K  24.4K",
                "    /v/b        -      -      0      5      0  24.4K",
                "logs            -      -      -      -      -      -",
                "  /v/log        0    60M      0      2      0  9.77K",
                "----------  -----  -----  -----  -----  -----  -----",
            ]
        );
    }

    #[test]
    fn later_reports_are_rates_over_the_interval() {
        let a = pool();
        let mut b = pool();
        let t = b.get_mut("tank").unwrap();
        t.elapsed_ns += 1_000_000_000;
        t.root.write_ops += 100;
        let mut f = fake(vec![a, b]);
        drive(&parse(&s(&["-y", "1", "1"])).unwrap(), &mut f, false);
        assert_eq!(
            f.out.lines().skip(3).collect::<Vec<_>>(),
            ["tank        1.24M  98.8M      0    100      0      0"]
        );
        assert_eq!(f.slept, 1);
    }

    #[test]
    fn operands_pick_pools_or_vdevs() {
        let snap = pool();
        let a = parse(&s(&["tank", "/v/a"])).unwrap();
        assert_eq!(select(&a, &snap).unwrap().vdevs, s(&["/v/a"]));
        let e = select(&parse(&s(&["tank", "abc"])).unwrap(), &snap).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e
            .stderr
            .starts_with("Expected either a list of pools, or list of vdevs in \"tank\", but got:\n\tabc (unknown)\n\nusage:"));
        let e = select(&parse(&s(&["abc"])).unwrap(), &snap).unwrap_err();
        assert_eq!((e.code, e.stderr.as_str()), (1, "Unable to parse pools/vdevs list.\n\n"));
    }
}
