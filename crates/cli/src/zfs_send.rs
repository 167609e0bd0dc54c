//! # zfs_send — `zfs send` and `zfs recv`
//!
//! Theory: `tarn_send` owns the stream format and `tarn_spa`'s sendrecv module decides
//! what a stream is made from and where it lands; this module parses OpenZFS's syntax,
//! plans which snapshots go (`-i`, `-I`, `-R`), maps sent names onto the target
//! (`-d`, `-e`), and keeps mounts in line (an incremental target is unmounted while
//! records are applied and mounted again after, unless `-u`).
//!
//! Both commands run in two halves. Under the daemon's state lock they check every
//! argument and build a plan (the snapshots, their sources, the estimates); nothing
//! has been written when a check fails. The stream itself is moved by a
//! [`state::Job`] that runs after the lock is released, on the descriptors the
//! client handed over (`proto::wants_stdio`): a send into a slow pipe, or a receive
//! from one, never stops other commands, and `zfs send … | zfs recv …` into the same
//! daemon does not wait on itself. The job takes the lock again only to unmount and
//! mount.
//!
//! Several snapshots (`-I`, `-R`) or properties (`-p`, `-R`) go as a package
//! (`tarn_send::package`): a checksummed header listing the datasets and streams, then
//! the streams. `zfs recv` tells a package from a single stream by its magic. A
//! package stream whose snapshot the target already has (same GUID) is read, checked
//! and skipped, so re-running an `-I` replication is harmless.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tarn_send::{Package, PackageDataset, PackageStream, SendOpts, SendSource, StreamReader};
use tarn_spa::{Pool, RecvSpec};

use crate::args::{check_fs_props, getopt};
use crate::format::nicebytes;
use crate::proto::Response;
use crate::state::{self, Ctx, State};
use crate::zfs_mount;
use crate::zfs_snap::pool_of;

const SEND_USAGE: &str = "usage:\n\tsend [-LPcenpv] [-R] [-[i|I] snapshot|bookmark] <snapshot>\n\tsend [-LPcenv] -t <receive_resume_token>\n";
const RECV_USAGE: &str = "usage:\n\treceive [-Fnsuv] [-o <property>=<value>] ... [-x <property>] ...\n\t    [-d | -e] <filesystem|volume|snapshot>\n\treceive -A <filesystem|volume>\n";

fn usage(u: &str, msg: &str) -> Response {
    Response::usage(format!("{msg}\n{u}"))
}

/// The client's stdin, stdout and stderr, when it sent them.
fn take_stdio(ctx: &Ctx) -> Option<[OwnedFd; 3]> {
    let mut v = std::mem::take(&mut *ctx.stdio.lock());
    if v.len() != 3 {
        return None;
    }
    let e = v.pop()?;
    let o = v.pop()?;
    let i = v.pop()?;
    Some([i, o, e])
}

fn is_tty(fd: &OwnedFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd.as_raw_fd()) == 1 }
}

/// One stream of a send plan.
struct Item {
    src: SendSource,
    /// Dataset relative to the package top (`""` for the top).
    rel: String,
    /// Snapshot short name.
    snap: String,
    /// Short name of the incremental source, for `-v` lines.
    from_short: Option<String>,
    /// `-n`/`-v`/`-P` estimate, bytes.
    estimate_bytes: u64,
    /// `-t`: the token this stream resumes.
    resume: Option<tarn_send::ResumeToken>,
}

impl Item {
    fn opts(&self, base: &SendOpts) -> SendOpts {
        SendOpts {
            resume: self.resume.clone(),
            ..base.clone()
        }
    }
}

/// Numbers the temporary-hold tags of this daemon's sends.
static SEND_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `zfs send`.
pub fn send(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "i:I:RpcLevPnt:") {
        Ok(p) => p,
        Err(e) => return usage(SEND_USAGE, &e),
    };
    let dry = p.has('n');
    let verbose = p.has('v') || p.has('P');
    let opts = SendOpts {
        compressed: p.has('c'),
        large_blocks: p.has('L'),
        embed: p.has('e'),
        resume: None,
    };
    let stdio = take_stdio(ctx);
    if !dry {
        match &stdio {
            None => return Response::err("cannot send: the client passed no output stream"),
            Some([_, out, _]) if is_tty(out) => {
                return Response::err("Error: Stream can not be written to a terminal.\nYou must redirect standard output.");
            }
            _ => {}
        }
    }
    let (pool, items, package) = if let Some(token) = p.last('t') {
        if p.has('i') || p.has('I') || p.has('R') || p.has('p') || !p.operands.is_empty() {
            return usage(SEND_USAGE, "too many arguments");
        }
        match plan_resume(st, &token) {
            Ok(x) => (x.0, vec![x.1], None),
            Err(e) => return Response::err(e),
        }
    } else {
        let snap = match p.operands.as_slice() {
            [s] => s.clone(),
            [] => return usage(SEND_USAGE, "missing snapshot argument"),
            _ => return usage(SEND_USAGE, "too many arguments"),
        };
        if !snap.contains('@') {
            return usage(SEND_USAGE, "argument must be a snapshot");
        }
        if p.has('i') && p.has('I') {
            return usage(SEND_USAGE, "-i and -I are mutually exclusive");
        }
        let (from, chain) = match (p.last('i'), p.last('I')) {
            (Some(f), _) => (Some(f), false),
            (_, Some(f)) => (Some(f), true),
            _ => (None, false),
        };
        let Some(entry) = st.pools.get(pool_of(&snap)) else {
            return Response::err(format!("cannot open '{snap}': dataset does not exist"));
        };
        match plan_send(&entry.pool, &snap, from.as_deref(), chain, p.has('R'), p.has('p')) {
            Ok((items, pkg)) => (entry.pool.clone(), items, pkg),
            Err(e) => return Response::err(e),
        }
    };
    let mut items = items;
    if verbose || dry {
        for it in items.iter_mut() {
            match tarn_send::estimate(pool.zio(), &it.src, &it.opts(&opts)) {
                Ok(s) => it.estimate_bytes = s.stream_bytes,
                Err(e) => return Response::err(format!("cannot send '{}': {e}", it.src.to_name)),
            }
        }
    }
    let summary = if verbose { estimate_lines(&items, p.has('P')) } else { String::new() };
    if dry {
        return Response::ok(summary);
    }
    let Some([_, out, err]) = stdio else {
        return Response::err("cannot send: the client passed no output stream");
    };
    let show_progress = p.has('v');
    // Temporary holds keep every snapshot being read from being destroyed until the
    // stream ends (OpenZFS `zfs send` does the same, tag `.send-PID-N`); taken here,
    // under the state lock that destroys also need.
    let mut to_names: Vec<String> = items.iter().map(|it| it.src.to_name.clone()).collect();
    to_names.dedup();
    let tag = format!(".send-{}-{}", std::process::id(), SEND_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let holds = match pool.hold_temporary(&to_names, &tag) {
        Ok(h) => h,
        Err(e) => return Response::err(state::cannot("cannot send", e)),
    };
    let job: state::Job = Box::new(move |_state: &Mutex<State>| {
        let mut err = File::from(err);
        let _ = err.write_all(summary.as_bytes());
        let r = run_send(&pool, &items, package.as_ref(), &opts, File::from(out), show_progress.then_some(&mut err));
        if let Err(e) = pool.release_temporary(holds) {
            tracing::warn!("zfs send: releasing temporary holds: {e}");
        }
        match r {
            Ok(()) => Response::ok(""),
            Err(e) => Response::err(e),
        }
    });
    st.deferred = Some(job);
    Response::ok("")
}

fn plan_resume(st: &State, token: &str) -> Result<(Arc<Pool>, Item), String> {
    let t = tarn_send::ResumeToken::decode(token).map_err(|e| format!("cannot resume send: {e}"))?;
    let pool = st
        .pools
        .values()
        .find(|e| e.pool.snapshot_by_guid(t.to_guid).is_some())
        .map(|e| e.pool.clone())
        .ok_or_else(|| format!("cannot resume send: '{}' no longer exists", t.to_name))?;
    let src = pool.resume_source(&t).map_err(|e| e.to_string())?;
    let from_short = match t.from_guid {
        0 => None,
        g => pool.snapshot_by_guid(g).and_then(|n| n.split_once('@').map(|(_, s)| s.to_string())),
    };
    let snap = src.to_name.split_once('@').map(|(_, s)| s.to_string()).unwrap_or_default();
    Ok((
        pool,
        Item {
            src,
            rel: String::new(),
            snap,
            from_short,
            estimate_bytes: 0,
            resume: Some(t),
        },
    ))
}

/// Snapshots of `fs` from `from` (exclusive, `None`: from the first, inclusive) to
/// `to` (inclusive), oldest first, as short names.
fn snapshot_range(pool: &Pool, fs: &str, from: Option<&str>, to: &str) -> Result<Vec<String>, String> {
    let all: Vec<String> = pool
        .snapshots_of(fs)
        .into_iter()
        .filter_map(|n| n.split_once('@').map(|(_, s)| s.to_string()))
        .collect();
    let end = all
        .iter()
        .position(|s| s == to)
        .ok_or_else(|| format!("cannot open '{fs}@{to}': dataset does not exist"))?;
    let start = match from {
        None => 0,
        Some(f) => {
            let i = all
                .iter()
                .position(|s| s == f)
                .ok_or_else(|| format!("cannot open '{fs}@{f}': dataset does not exist"))?;
            if i >= end {
                return Err(format!("cannot send '{fs}@{to}': incremental source ({fs}@{f}) is not earlier than it"));
            }
            i + 1
        }
    };
    Ok(all[start..=end].to_vec())
}

/// Short name of an `-i`/`-I` argument (`@a`, `a`, `fs@a`), checked to be in `fs`.
fn from_short(fs: &str, from: &str) -> Result<String, String> {
    match from.split_once('@') {
        Some(("", s)) => Ok(s.to_string()),
        Some((f, s)) if f == fs => Ok(s.to_string()),
        Some(_) => Err("incremental source must be in same filesystem".into()),
        None => Ok(from.to_string()),
    }
}

/// The streams of `zfs send [-R] [-p] [-i|-I from] snap`, and the package header when
/// more than one stream or properties go.
fn plan_send(pool: &Arc<Pool>, snap: &str, from: Option<&str>, chain: bool, replicate: bool, props: bool) -> Result<(Vec<Item>, Option<Package>), String> {
    let (top, short) = snap.split_once('@').ok_or_else(|| "argument must be a snapshot".to_string())?;
    let infos = pool.list_datasets().map_err(|e| e.to_string())?;
    if !infos.iter().any(|i| i.name == top) {
        return Err(format!("cannot open '{top}': dataset does not exist"));
    }
    if let Some(bm) = from.filter(|f| f.contains('#')) {
        // From a bookmark: one incremental stream of this file system (OpenZFS
        // allows neither -I nor -R from a bookmark).
        if chain || replicate || props {
            return Err("cannot send: -I, -R and -p need an incremental source snapshot, not a bookmark".into());
        }
        let src = pool.send_source(snap, Some(bm)).map_err(|e| e.to_string())?;
        let short_bm = bm.rsplit('#').next().unwrap_or(bm).to_string();
        let item = Item {
            src,
            rel: String::new(),
            snap: short.to_string(),
            from_short: Some(format!("#{short_bm}")),
            estimate_bytes: 0,
            resume: None,
        };
        return Ok((vec![item], None));
    }
    let from = from.map(|f| from_short(top, f)).transpose()?;
    let mut fss: Vec<String> = vec![top.to_string()];
    if replicate {
        let prefix = format!("{top}/");
        fss.extend(infos.iter().filter(|i| i.name.starts_with(&prefix)).map(|i| i.name.clone()));
    }
    let mut items = Vec::new();
    let mut datasets = Vec::new();
    for fs in &fss {
        let has = pool.snapshots_of(fs).iter().any(|n| n.split_once('@').map(|(_, s)| s) == Some(short));
        if !has {
            if fs == top {
                return Err(format!("cannot open '{snap}': dataset does not exist"));
            }
            continue; // a child made after the snapshot
        }
        let rel = fs.strip_prefix(top).unwrap_or("").trim_start_matches('/').to_string();
        let sent_props: BTreeMap<String, String> = if replicate || props {
            let info = infos
                .iter()
                .find(|i| &i.name == fs)
                .ok_or_else(|| format!("cannot open '{fs}': dataset does not exist"))?;
            info.props
                .iter()
                // Local and received values travel, as OpenZFS's send_iterate_prop
                // sends them, so a chain of backups keeps the properties.
                .filter(|(k, (_, src))| {
                    (src == "local" || src == "received") && (tarn_spa::DATASET_PROPS.iter().any(|(p, _)| p == k) || tarn_spa::is_user_prop(k))
                })
                .map(|(k, (v, _))| (k.clone(), v.clone()))
                .collect()
        } else {
            BTreeMap::new()
        };
        datasets.push(PackageDataset {
            name: rel.clone(),
            props: sent_props,
        });
        // Which snapshots: -R sends the whole history up to `short`; -I every one
        // after `from`; otherwise just `short` (from `from` when given).
        let names: Vec<String> = match (&from, chain || (replicate && from.is_none())) {
            (None, true) => snapshot_range(pool, fs, None, short)?,
            (None, false) => vec![short.to_string()],
            (Some(f), true) => snapshot_range(pool, fs, Some(f), short)?,
            (Some(f), false) => {
                snapshot_range(pool, fs, Some(f), short)?;
                vec![short.to_string()]
            }
        };
        let mut prev = from.clone();
        for n in names {
            let full = format!("{fs}@{n}");
            let src = pool
                .send_source(&full, prev.as_deref().map(|p| format!("@{p}")).as_deref())
                .map_err(|e| e.to_string())?;
            items.push(Item {
                src,
                rel: rel.clone(),
                snap: n.clone(),
                from_short: prev.clone(),
                estimate_bytes: 0,
                resume: None,
            });
            prev = Some(n);
        }
    }
    let package = (replicate || props || items.len() > 1).then(|| Package {
        top: top.to_string(),
        datasets,
        streams: items
            .iter()
            .map(|it| PackageStream {
                dataset: it.rel.clone(),
                snap: it.snap.clone(),
                to_guid: it.src.to_guid,
                from_guid: it.src.from_guid,
            })
            .collect(),
    });
    Ok((items, package))
}

/// `-v`/`-P` lines printed before the stream (OpenZFS's wording).
fn estimate_lines(items: &[Item], parsable: bool) -> String {
    let mut out = String::new();
    let mut total = 0u64;
    for it in items {
        total += it.estimate_bytes;
        let size = if parsable {
            it.estimate_bytes.to_string()
        } else {
            nicebytes(it.estimate_bytes)
        };
        out += &match (&it.from_short, parsable) {
            (None, false) => format!("full send of {} estimated size is {size}\n", it.src.to_name),
            (Some(f), false) if f.starts_with('#') => format!("send from {f} to {} estimated size is {size}\n", it.src.to_name),
            (Some(f), false) => format!("send from @{f} to {} estimated size is {size}\n", it.src.to_name),
            (None, true) => format!("full\t{}\t{size}\n", it.src.to_name),
            (Some(f), true) => format!("incremental\t{f}\t{}\t{size}\n", it.src.to_name),
        };
    }
    out += &if parsable {
        format!("size\t{total}\n")
    } else {
        format!("total estimated size is {}\n", nicebytes(total))
    };
    out
}

/// Counts bytes and prints `-v` progress once a second.
struct Progress<'a, W: Write> {
    inner: W,
    sent_bytes: u64,
    last: Instant,
    err: Option<&'a mut File>,
    snapshot: String,
}

impl<W: Write> Write for Progress<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sent_bytes += n as u64;
        if self.last.elapsed().as_secs() >= 1 {
            self.last = Instant::now();
            if let Some(e) = self.err.as_deref_mut() {
                let _ = writeln!(e, "{}   {:>6}   {}", local_hms(), nicebytes(self.sent_bytes), self.snapshot);
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn local_hms() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    crate::format::local_time(now, "%H:%M:%S")
}

/// Write the package header (if any) and every stream to `out`.
fn run_send(pool: &Pool, items: &[Item], package: Option<&Package>, opts: &SendOpts, out: File, mut err: Option<&mut File>) -> Result<(), String> {
    let mut w = BufWriter::with_capacity(1 << 20, out);
    let broken = |e: &dyn std::fmt::Display| format!("warning: cannot send: {e}");
    if let Some(pkg) = package {
        tarn_send::write_package(&mut w, pkg).map_err(|e| broken(&e))?;
    }
    for it in items {
        if let Some(e) = err.as_deref_mut() {
            let _ = writeln!(e, "TIME        SENT   SNAPSHOT {}", it.src.to_name);
        }
        let mut pw = Progress {
            inner: &mut w,
            sent_bytes: 0,
            last: Instant::now(),
            err: err.as_deref_mut(),
            snapshot: it.src.to_name.clone(),
        };
        tarn_send::send(pool.zio(), &it.src, &it.opts(opts), &mut pw).map_err(|e| format!("warning: cannot send '{}': {e}", it.src.to_name))?;
    }
    w.flush().map_err(|e| broken(&e))
}

/// How sent names map onto the target (`-d`, `-e`, neither).
#[derive(Clone, Copy, PartialEq, Eq)]
enum NameMode {
    Plain,
    KeepPath,
    LastOnly,
}

fn map_top(target: &str, sent_fs: &str, mode: NameMode) -> String {
    match mode {
        NameMode::Plain => target.to_string(),
        NameMode::KeepPath => match sent_fs.split_once('/') {
            Some((_, rest)) => format!("{target}/{rest}"),
            None => target.to_string(),
        },
        NameMode::LastOnly => format!("{target}/{}", sent_fs.rsplit('/').next().unwrap_or(sent_fs)),
    }
}

/// Everything `zfs recv` decided under the lock.
struct RecvPlan {
    pool: Arc<Pool>,
    target: String,
    mode: NameMode,
    force: bool,
    resumable: bool,
    no_mount: bool,
    dry: bool,
    verbose: bool,
    set_props: BTreeMap<String, String>,
    exclude: Vec<String>,
    /// `-o origin=`: receive the (single) stream as a clone of this (a full stream empties the clone first).
    origin: Option<String>,
}

/// `zfs recv` / `zfs receive`.
pub fn recv(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "FnusvdeAo:x:") {
        Ok(p) => p,
        Err(e) => return usage(RECV_USAGE, &e),
    };
    let target = match p.operands.as_slice() {
        [t] => t.clone(),
        [] => return usage(RECV_USAGE, "missing snapshot argument"),
        _ => return usage(RECV_USAGE, "too many arguments"),
    };
    if p.has('A') {
        return abort(st, ctx, &target);
    }
    if p.has('d') && p.has('e') {
        return usage(RECV_USAGE, "-d and -e are mutually exclusive");
    }
    let mode = if p.has('d') {
        NameMode::KeepPath
    } else if p.has('e') {
        NameMode::LastOnly
    } else {
        NameMode::Plain
    };
    if mode != NameMode::Plain && target.contains('@') {
        return Response::err(format!("cannot receive: '{target}' is not a filesystem: -d and -e need a file system"));
    }
    let fs_part = target.split('@').next().unwrap_or(&target);
    if let Err(e) = tarn_spa::validate_dataset_name(fs_part) {
        return Response::err(state::cannot(&format!("cannot receive: invalid name '{target}'"), e));
    }
    let mut set_props = BTreeMap::new();
    let mut origin = None;
    for o in p.all('o') {
        if let Some(("origin", v)) = o.split_once('=') {
            origin = Some(v.to_string());
            continue;
        }
        match check_fs_props(std::slice::from_ref(&o)) {
            Ok(m) => set_props.extend(m),
            Err(e) => return Response::err(format!("cannot receive: {e}")),
        }
    }
    let exclude = p.all('x');
    for x in &exclude {
        if !tarn_spa::DATASET_PROPS.iter().any(|(k, _)| k == x) && !tarn_spa::is_user_prop(x) {
            return Response::err(format!("cannot receive: invalid property '{x}'"));
        }
    }
    let Some(entry) = st.pools.get(pool_of(&target)) else {
        return Response::err(format!("cannot open '{}': dataset does not exist", pool_of(&target)));
    };
    let Some([input, out, _err]) = take_stdio(ctx) else {
        return Response::err("cannot receive: the client passed no input stream");
    };
    drop(out);
    if is_tty(&input) {
        return Response::err(
            "Error: Backup stream can not be read from a terminal.
You must redirect standard input.",
        );
    }
    let plan = RecvPlan {
        pool: entry.pool.clone(),
        target,
        mode,
        force: p.has('F'),
        resumable: p.has('s'),
        no_mount: p.has('u'),
        dry: p.has('n'),
        verbose: p.has('v'),
        set_props,
        exclude,
        origin,
    };
    let line = ctx.command_line();
    let job: state::Job = Box::new(move |state: &Mutex<State>| {
        let mut input = BufReader::with_capacity(1 << 20, File::from(input));
        let started = Instant::now();
        let mut out = String::new();
        let r = run_recv(state, &plan, &mut input, &mut out);
        if r.is_ok() {
            if let Err(e) = plan.pool.log_history_durable(&line) {
                tracing::warn!("history: {e}");
            }
        }
        match r {
            Ok(bytes) => {
                if plan.verbose && !plan.dry {
                    let secs = started.elapsed().as_secs_f64().max(0.001);
                    out += &format!(
                        "received {} stream in {secs:.2} seconds ({}/sec)\n",
                        nicebytes(bytes),
                        nicebytes((bytes as f64 / secs) as u64)
                    );
                }
                Response::ok(out)
            }
            Err(e) => {
                let mut r = Response::err(e);
                r.stdout = out;
                r
            }
        }
    });
    st.deferred = Some(job);
    Response::ok("")
}

/// `zfs recv -A fs`.
fn abort(st: &mut State, ctx: &Ctx, fs: &str) -> Response {
    let Some(entry) = st.pools.get_mut(pool_of(fs)) else {
        return Response::err(format!("cannot open '{fs}': dataset does not exist"));
    };
    if let Err(e) = entry.pool.receive_abort(fs) {
        return Response::err(state::cannot(&format!("cannot resume receive on '{fs}'"), e));
    }
    ctx.commit(&entry.pool);
    let mut errs = Vec::new();
    mount_received(entry, std::slice::from_ref(&fs.to_string()), &mut errs);
    if errs.is_empty() {
        Response::ok("")
    } else {
        Response::err(errs.join("\n"))
    }
}

/// Mount `names` (parents first) that are not mounted and may be.
fn mount_received(entry: &mut state::PoolEntry, names: &[String], errs: &mut Vec<String>) {
    let Ok(infos) = entry.pool.list_datasets() else { return };
    let mut names = names.to_vec();
    names.sort();
    for n in names {
        let Some(info) = infos.iter().find(|i| i.name == n) else { continue };
        if entry.mounts.contains_key(&n) || zfs_mount::canmount(info) != "on" || zfs_mount::effective_mountpoint(info, entry.altroot.as_deref()).is_none() {
            continue;
        }
        if let Err(e) = zfs_mount::mount_one(entry, info, false) {
            errs.push(e);
        }
    }
}

fn read_magic(input: &mut dyn Read) -> Result<[u8; 8], String> {
    let mut m = [0u8; 8];
    let mut got = 0;
    while got < m.len() {
        match input.read(&mut m[got..]) {
            Ok(0) if got == 0 => return Err("cannot receive: failed to read from stream".into()),
            Ok(0) => return Err("cannot receive: invalid stream (bad magic number)".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot receive: failed to read from stream: {e}")),
        }
    }
    Ok(m)
}

/// Receive a single stream or a package; returns the stream bytes read.
fn run_recv(state: &Mutex<State>, plan: &RecvPlan, input: &mut BufReader<File>, out: &mut String) -> Result<u64, String> {
    let magic = read_magic(input)?;
    if u64::from_le_bytes(magic) == tarn_send::PACKAGE_MAGIC {
        return run_recv_package(state, plan, input, out);
    }
    let mut chained = std::io::Cursor::new(magic).chain(input);
    let mut reader = StreamReader::new(&mut chained).map_err(|e| match e {
        tarn_send::SendError::BadMagic => "cannot receive: invalid stream (bad magic number)".to_string(),
        e => format!("cannot receive: {e}"),
    })?;
    let h = reader.header().clone();
    let (sent_fs, sent_snap) = h
        .to_name
        .split_once('@')
        .ok_or_else(|| "cannot receive: stream names no snapshot".to_string())?;
    let (fs, snap) = match plan.target.split_once('@') {
        Some((f, s)) => (f.to_string(), s.to_string()),
        None => (map_top(&plan.target, sent_fs, plan.mode), sent_snap.to_string()),
    };
    let kind = if h.is_incremental() { "incremental" } else { "full" };
    if plan.verbose {
        let verb = if plan.dry { "would receive" } else { "receiving" };
        *out += &format!("{verb} {kind} stream of {} into {fs}@{snap}\n", h.to_name);
    }
    if plan.dry {
        drain(&mut reader)?;
        return Ok(reader.offset_bytes());
    }
    let mut props = plan.set_props.clone();
    for x in &plan.exclude {
        props.remove(x);
    }
    let spec = RecvSpec {
        fs: fs.clone(),
        snap,
        force: plan.force,
        resumable: plan.resumable,
        props,
        received: None,
        origin: plan.origin.clone(),
    };
    if plan.mode != NameMode::Plain {
        create_parents(plan, &fs)?;
    }
    receive_one(state, plan, &mut reader, &spec)?;
    Ok(reader.offset_bytes())
}

/// Read a stream to its end, verifying every record (`-n`, skipped streams).
fn drain<R: Read>(reader: &mut StreamReader<R>) -> Result<(), String> {
    loop {
        match reader.next_record() {
            Ok(tarn_send::Record::End { .. }) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("cannot receive: checksum mismatch or incomplete stream ({e})")),
        }
    }
}

/// Create the missing ancestors of `fs` (`-d`, `-e`, packages), mounting them.
fn create_parents(plan: &RecvPlan, fs: &str) -> Result<(), String> {
    let Some(parent) = fs.rfind('/').map(|i| &fs[..i]) else { return Ok(()) };
    if plan.pool.dataset_names().iter().any(|n| n == parent) {
        return Ok(());
    }
    plan.pool
        .create_dataset_ext(parent, &BTreeMap::new(), true)
        .map_err(|e| format!("cannot receive: {e}"))
}

/// Unmount an incremental target, apply one stream, mount the result.
fn receive_one<R: Read>(state: &Mutex<State>, plan: &RecvPlan, reader: &mut StreamReader<R>, spec: &RecvSpec) -> Result<(), String> {
    let pool_name = plan.pool.name();
    let exists = plan.pool.dataset_names().contains(&spec.fs);
    if exists {
        let mut st = state.lock();
        if let Some(entry) = st.pools.get_mut(&pool_name) {
            zfs_mount::unmount_one(entry, &spec.fs)?;
        }
    }
    let mut r = plan.pool.receive(reader, spec);
    if let (true, Ok(_)) = (exists, &r) {
        // An existing file system takes the `-o` properties as `zfs set` would (the
        // stream's own ones are received values, stored by the receive), before it is
        // mounted again.
        if let Err(e) = set_option_props(&plan.pool, &spec.fs, &spec.props) {
            r = Err(tarn_spa::SpaError::Invalid(e));
        }
    }
    if !plan.no_mount {
        let mut st = state.lock();
        if let Some(entry) = st.pools.get_mut(&pool_name) {
            let prefix = format!("{}/", spec.fs);
            let names: Vec<String> = entry
                .pool
                .dataset_names()
                .into_iter()
                .filter(|n| *n == spec.fs || n.starts_with(&prefix))
                .collect();
            let mut errs = Vec::new();
            mount_received(entry, &names, &mut errs);
            if let (Ok(_), false) = (&r, errs.is_empty()) {
                return Err(errs.join("\n"));
            }
        }
    }
    r.map(|_| ()).map_err(|e| e.to_string())
}

/// Set each `-o` property of `props` on `fs` whose local value differs (received into
/// an existing file system). Errors: the first refusal, in `zfs set`'s words.
fn set_option_props(pool: &Pool, fs: &str, props: &BTreeMap<String, String>) -> Result<(), String> {
    if props.is_empty() {
        return Ok(());
    }
    let infos = pool.list_datasets().map_err(|e| e.to_string())?;
    let info = infos.iter().find(|i| i.name == fs);
    for (k, v) in props {
        let local = info.and_then(|i| i.props.get(k)).filter(|(_, src)| src == "local").map(|(val, _)| val);
        if local != Some(v) {
            pool.set_dataset_prop(fs, k, v)
                .map_err(|e| state::cannot(&format!("cannot set property for '{fs}'"), e))?;
        }
    }
    Ok(())
}

fn run_recv_package(state: &Mutex<State>, plan: &RecvPlan, input: &mut BufReader<File>, out: &mut String) -> Result<u64, String> {
    if plan.target.contains('@') {
        return Err("cannot receive: cannot specify snapshot name for multi-snapshot stream".into());
    }
    let pkg = tarn_send::read_package(input).map_err(|e| format!("cannot receive: invalid package header: {e}"))?;
    if plan.origin.is_some() {
        return Err("cannot receive: -o origin= takes a single stream, not a -R/-I/-p package".into());
    }
    let top = map_top(&plan.target, &pkg.top, plan.mode);
    let mut bytes = 0u64;
    for (i, ps) in pkg.streams.iter().enumerate() {
        let fs = if ps.dataset.is_empty() {
            top.clone()
        } else {
            format!("{top}/{}", ps.dataset)
        };
        let mut reader = StreamReader::new(&mut *input).map_err(|e| format!("cannot receive: stream {} of the package: {e}", i + 1))?;
        let h = reader.header().clone();
        if h.to_guid != ps.to_guid || h.from_guid != ps.from_guid {
            return Err(format!(
                "cannot receive: stream {} does not match the package's listing (a spliced or foreign stream)",
                i + 1
            ));
        }
        let have = plan.pool.snapshots_of(&fs).iter().any(|n| plan.pool.snapshot_guid(n).ok() == Some(ps.to_guid));
        let kind = if h.is_incremental() { "incremental" } else { "full" };
        if plan.verbose {
            let verb = if have {
                "skipping (already present)"
            } else if plan.dry {
                "would receive"
            } else {
                "receiving"
            };
            *out += &format!("{verb} {kind} stream of {} into {fs}@{}\n", h.to_name, ps.snap);
        }
        if have || plan.dry {
            drain(&mut reader)?;
            bytes += reader.offset_bytes();
            continue;
        }
        // The package's properties are received values; `-o` ones are set locally.
        let mut received = pkg.datasets.iter().find(|d| d.name == ps.dataset).map(|d| d.props.clone()).unwrap_or_default();
        let mut props = plan.set_props.clone();
        for x in &plan.exclude {
            received.remove(x);
            props.remove(x);
        }
        create_parents(plan, &fs)?;
        let spec = RecvSpec {
            fs,
            snap: ps.snap.clone(),
            force: plan.force,
            resumable: plan.resumable,
            props,
            received: Some(received),
            origin: None,
        };
        receive_one(state, plan, &mut reader, &spec)?;
        bytes += reader.offset_bytes();
    }
    Ok(bytes)
}
