//! # zfs_snap — `zfs snapshot`, `rollback`, `clone` and snapshot `destroy`
//!
//! Theory: the engine (`tarn_spa`'s snapshot module) owns the chains, dead lists and
//! space; this module parses OpenZFS's syntax, checks what only the daemon knows
//! (mounts), and keeps mounts in line: a rollback unmounts the file system, rolls
//! back and mounts it again, so the mount shows the snapshot's contents at once; a
//! clone is mounted like a new file system. Every check happens before the pool is
//! asked, and the pool validates again, so a refused command changes nothing. The
//! caller holds the daemon's state lock.

use std::collections::BTreeMap;

use crate::args::{getopt, split_prop};
use crate::format::nicebytes;
use crate::proto::Response;
use crate::state::{self, Ctx, PoolEntry, State};
use crate::zfs_mount;

const SNAPSHOT_USAGE: &str = "usage:\n\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n";
const ROLLBACK_USAGE: &str = "usage:\n\trollback [-rRf] <snapshot>\n";
const BOOKMARK_USAGE: &str = "usage:\n\tbookmark <snapshot|bookmark> <bookmark>\n";
const PROMOTE_USAGE: &str = "usage:\n\tpromote <clone-filesystem>\n";
const DIFF_USAGE: &str = "usage:\n\tdiff [-FHt] <snapshot> [snapshot|filesystem]\n";
const CLONE_USAGE: &str = "usage:\n\tclone [-p] [-o property=value] ... <snapshot> <filesystem|volume>\n";

fn usage(u: &str, msg: &str) -> Response {
    Response::usage(format!("{msg}\n{u}"))
}

/// The pool part of a dataset, snapshot or bookmark name.
pub(crate) fn pool_of(name: &str) -> &str {
    name.split(['/', '@', '#']).next().unwrap_or(name)
}

fn history_note(st: &State, pool: &str, ctx: &Ctx) {
    if let Some(e) = st.pools.get(pool) {
        ctx.commit(&e.pool);
    }
}

/// `zfs snapshot|snap [-r] fs@snap …`: all in one txg per pool.
pub fn snapshot(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "ro:") {
        Ok(p) => p,
        Err(e) => return usage(SNAPSHOT_USAGE, &e),
    };
    if p.operands.is_empty() {
        return usage(SNAPSHOT_USAGE, "missing snapshot argument");
    }
    let mut props = BTreeMap::new();
    for o in p.all('o') {
        match split_prop(&o) {
            Ok((k, v)) => {
                if props.insert(k.clone(), v).is_some() {
                    return Response::err(format!("property '{k}' specified multiple times"));
                }
            }
            Err(e) => return usage(SNAPSHOT_USAGE, &e),
        }
    }
    let pool = pool_of(&p.operands[0]).to_string();
    for n in &p.operands {
        if let Err(e) = tarn_spa::validate_snapshot_name(n) {
            return Response::err(state::cannot(&format!("cannot create snapshot '{n}'"), e));
        }
        if pool_of(n) != pool {
            return Response::err("cannot create snapshots: all snapshots must be in the same pool".to_string());
        }
    }
    let Some(entry) = st.pools.get(&pool) else {
        let fs = p.operands[0].split('@').next().unwrap_or_default();
        return Response::err(format!("cannot open '{fs}': dataset does not exist"));
    };
    if let Err(e) = entry.pool.snapshot_with_props(&p.operands, p.has('r'), &props) {
        return Response::err(e.to_string());
    }
    // The snapshots are durable already (their sync task waited for its txg); the
    // history record goes with the next txg rather than costing a second sync.
    if let Err(e) = entry.pool.log_history(&ctx.command_line()) {
        tracing::warn!("history: {e}");
    }
    Response::ok("")
}

/// `zfs rollback [-rRf] fs@snap`. `-R` first destroys the clones of the snapshots
/// that `-r` destroys (unmounting them); `-f` unmounts those clones even while busy
/// (zfs-rollback(8)).
pub fn rollback(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "rRf") {
        Ok(p) => p,
        Err(e) => return usage(ROLLBACK_USAGE, &e),
    };
    let snap = match p.operands.as_slice() {
        [s] => s.clone(),
        [] => return usage(ROLLBACK_USAGE, "missing dataset argument"),
        _ => return usage(ROLLBACK_USAGE, "too many arguments"),
    };
    let Some((fs, _)) = snap.split_once('@') else {
        return Response::err(format!("cannot rollback '{snap}': operation only applies to snapshots"));
    };
    let fs = fs.to_string();
    let Some(entry) = st.pools.get_mut(pool_of(&snap)) else {
        return Response::err(format!("cannot open '{snap}': dataset does not exist"));
    };
    let newer_ok = p.has('r') || p.has('R');
    // Every refusal (no such snapshot, newer snapshots without -r, their clones
    // without -R) comes before any mount or dataset is touched.
    let newer = match entry.pool.rollback_plan(&snap, newer_ok, p.has('R')) {
        Ok(n) => n,
        Err(e) => return Response::err(e.to_string()),
    };
    if p.has('R') {
        // The clones (and their dependents) of every newer snapshot go first.
        let mut victims: Vec<String> = Vec::new();
        for n in &newer {
            match entry.pool.destroy_plan(n, false, true) {
                Ok(v) => victims.extend(v.into_iter().filter(|x| !x.starts_with(&format!("{fs}@")))),
                Err(e) => return Response::err(state::cannot(&format!("cannot rollback to '{snap}'"), e)),
            }
        }
        if let Err(e) = destroy_victims(entry, &victims, p.has('f')) {
            return Response::err(e);
        }
    }
    // Unmounting a file system unmounts its mounted descendants first: remember them
    // all, and mount them again (parents first) after the rollback.
    let prefix = format!("{fs}/");
    let was_mounted: Vec<String> = entry.mounts.keys().filter(|k| **k == fs || k.starts_with(&prefix)).cloned().collect();
    if !was_mounted.is_empty() {
        if let Err(e) = zfs_mount::unmount_one(entry, &fs) {
            return Response::err(format!("cannot rollback '{fs}': {}", e.split("': ").last().unwrap_or(&e)));
        }
    }
    let result = entry.pool.rollback(&snap, newer_ok);
    let mut resp = match result {
        Ok(_) => Response::ok(""),
        Err(e) => Response::err(e.to_string()),
    };
    let infos = entry.pool.list_datasets().unwrap_or_default();
    for name in &was_mounted {
        if let Some(info) = infos.iter().find(|i| &i.name == name) {
            if let Err(e) = zfs_mount::mount_one(entry, info, false) {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
    }
    if resp.code == 0 {
        history_note(st, pool_of(&snap), ctx);
    }
    resp
}

/// `zfs clone [-p] [-o prop=value]… fs@snap target`.
pub fn clone(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "po:") {
        Ok(p) => p,
        Err(e) => return usage(CLONE_USAGE, &e),
    };
    let (snap, target) = match p.operands.as_slice() {
        [s, t] => (s.clone(), t.clone()),
        [] | [_] => return usage(CLONE_USAGE, "missing source dataset argument"),
        _ => return usage(CLONE_USAGE, "too many arguments"),
    };
    if !snap.contains('@') {
        return Response::err(format!("cannot open '{snap}': operation only applies to snapshots"));
    }
    let mut props = BTreeMap::new();
    for o in p.all('o') {
        match split_prop(&o) {
            Ok((k, v)) => match crate::args::check_fs_prop(&k, &v) {
                Ok((k, v)) => {
                    props.insert(k, v);
                }
                Err(e) => return Response::err(format!("cannot create '{target}': {e}")),
            },
            Err(e) => return usage(CLONE_USAGE, &e),
        }
    }
    if pool_of(&snap) != pool_of(&target) {
        return Response::err(format!("cannot create '{target}': source and target pools differ"));
    }
    let Some(entry) = st.pools.get_mut(pool_of(&snap)) else {
        return Response::err(format!("cannot open '{snap}': dataset does not exist"));
    };
    if let Err(e) = entry.pool.clone_snapshot(&snap, &target, &props, p.has('p')) {
        return Response::err(state::cannot(&format!("cannot create '{target}'"), e));
    }
    history_note(st, pool_of(&snap), ctx);
    let Some(entry) = st.pools.get_mut(pool_of(&snap)) else {
        return Response::ok("");
    };
    let info = entry.pool.list_datasets().ok().and_then(|v| v.into_iter().find(|i| i.name == target));
    if let Some(info) = info {
        if zfs_mount::canmount(&info) == "on" && zfs_mount::effective_mountpoint(&info, entry.altroot.as_deref()).is_some() {
            if let Err(e) = zfs_mount::mount_one(entry, &info, false) {
                return Response::err(format!("{e}\nfilesystem successfully created, but not mounted"));
            }
        }
    }
    Response::ok("")
}

/// `zfs destroy [-dnvrR] fs@snap[%snap][,snap]…`: snapshots, ranges and lists.
/// `p` carries destroy's flags: `-r` (same snapshot of descendants), `-R` (clones
/// too), `-n` (dry run), `-v` (list), `-f` (force unmount), `-d` (deferred destroy,
/// `zfs_holds::destroy_deferred`).
pub fn destroy_snapshots(st: &mut State, ctx: &Ctx, name: &str, p: &crate::args::Parsed) -> Response {
    let (recursive, with_clones, dry_run, verbose, force) = (p.has('r'), p.has('R'), p.has('n'), p.has('v'), p.has('f'));
    let Some((fs, spec)) = name.split_once('@') else {
        return Response::err(format!("cannot destroy '{name}': not a snapshot"));
    };
    let Some(entry) = st.pools.get_mut(pool_of(name)) else {
        return Response::err(format!("cannot open '{fs}': dataset does not exist"));
    };
    if !entry.pool.list_datasets().map(|v| v.iter().any(|i| i.name == fs)).unwrap_or(false) {
        return Response::err(format!("cannot open '{fs}': dataset does not exist"));
    }
    // Expand "a%b" ranges (inclusive, by creation order) and "a,b" lists.
    let chain = entry.pool.snapshots_of(fs);
    let mut targets: Vec<String> = Vec::new();
    for part in spec.split(',') {
        if let Some((a, b)) = part.split_once('%') {
            let ia = if a.is_empty() {
                Some(0)
            } else {
                chain.iter().position(|n| n == &format!("{fs}@{a}"))
            };
            let ib = if b.is_empty() {
                chain.len().checked_sub(1)
            } else {
                chain.iter().position(|n| n == &format!("{fs}@{b}"))
            };
            match (ia, ib) {
                (Some(x), Some(y)) if x <= y => targets.extend(chain[x..=y].iter().cloned()),
                _ => return Response::err(format!("cannot destroy '{name}': snapshot range is not valid")),
            }
        } else {
            targets.push(format!("{fs}@{part}"));
        }
    }
    if p.has('d') {
        return crate::zfs_holds::destroy_deferred(entry, ctx, &targets, p);
    }
    let mut plan: Vec<String> = Vec::new();
    let mut missing = 0;
    for t in &targets {
        match entry.pool.destroy_plan(t, recursive, with_clones) {
            Ok(v) => {
                for x in v {
                    if !plan.contains(&x) {
                        plan.push(x);
                    }
                }
            }
            Err(tarn_spa::SpaError::NotFound(_)) => missing += 1,
            Err(e) => return Response::err(e.to_string()),
        }
    }
    if plan.is_empty() && missing > 0 {
        return Response::err("could not find any snapshots to destroy; check snapshot names.".to_string());
    }
    // What would be freed: each snapshot's `used` (OpenZFS prints the total).
    let sizes: BTreeMap<String, u64> = entry
        .pool
        .list_all()
        .map(|v| v.into_iter().map(|i| (i.name, i.used_bytes)).collect())
        .unwrap_or_default();
    let reclaim: u64 = plan.iter().map(|n| sizes.get(n).copied().unwrap_or(0)).sum();
    if dry_run {
        return Response::ok(if verbose {
            destroy_report(&plan, "would", Some(reclaim))
        } else {
            String::new()
        });
    }
    if let Err(e) = destroy_victims(entry, &plan, force) {
        return Response::err(e);
    }
    history_note(st, pool_of(name), ctx);
    Response::ok(if verbose {
        destroy_report(&plan, "will", Some(reclaim))
    } else {
        String::new()
    })
}

/// `zfs destroy -v` lines: "`verb` destroy NAME" per victim, then "`verb` reclaim
/// SIZE" when the space is known (`verb` is "would" with `-n`, else "will").
pub(crate) fn destroy_report(plan: &[String], verb: &str, reclaim_bytes: Option<u64>) -> String {
    let mut out: String = plan.iter().map(|v| format!("{verb} destroy {v}\n")).collect();
    if let Some(b) = reclaim_bytes {
        out.push_str(&format!("{verb} reclaim {}\n", nicebytes(b)));
    }
    out
}

/// Destroy a plan from [`tarn_spa::Pool::destroy_plan`] in its order, unmounting its
/// file systems first (an unmount failure stops everything unless `force`).
pub(crate) fn destroy_victims(entry: &mut PoolEntry, plan: &[String], force: bool) -> Result<(), String> {
    for v in plan.iter().filter(|v| !v.contains('@')) {
        zfs_mount::unmount_one_ext(entry, v, force)?;
    }
    for v in plan {
        match entry.pool.destroy_dataset_ext(v, false, false) {
            // A snapshot marked for deferred destroy went with its last clone.
            Err(tarn_spa::SpaError::NotFound(_)) if v.contains('@') => {}
            r => {
                r.map_err(|e| state::cannot(&format!("cannot destroy '{v}'"), e))?;
            }
        }
    }
    Ok(())
}

/// `zfs bookmark fs@snap|fs#bm fs#new`.
pub fn bookmark(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "") {
        Ok(p) => p,
        Err(e) => return usage(BOOKMARK_USAGE, &e),
    };
    let (src, dst) = match p.operands.as_slice() {
        [a, b] => (a.clone(), b.clone()),
        [] | [_] => return usage(BOOKMARK_USAGE, "missing arguments"),
        _ => return usage(BOOKMARK_USAGE, "too many arguments"),
    };
    if !src.contains('@') && !src.contains('#') {
        return usage(BOOKMARK_USAGE, "invalid snapshot or bookmark name");
    }
    // OpenZFS takes `#short` for a bookmark of the source's file system.
    let dst = match dst.strip_prefix('#') {
        Some(short) => format!("{}#{short}", src.split(['@', '#']).next().unwrap_or("")),
        None => dst,
    };
    let pool = pool_of(&dst).to_string();
    let Some(entry) = st.pools.get(&pool) else {
        return Response::err(format!("cannot create bookmark '{dst}': no such pool '{pool}'"));
    };
    if let Err(e) = entry.pool.create_bookmark(&src, &dst) {
        return Response::err(state::cannot(&format!("cannot create bookmark '{dst}'"), e));
    }
    history_note(st, &pool, ctx);
    Response::ok("")
}

/// `zfs destroy fs#bm` (`-n`/`-v` report it; `-r`/`-R` do not apply).
pub fn destroy_bookmark(st: &mut State, ctx: &Ctx, name: &str, p: &crate::args::Parsed) -> Response {
    let pool = pool_of(name).to_string();
    let Some(entry) = st.pools.get(&pool) else {
        return Response::err(format!("cannot destroy '{name}': bookmark does not exist"));
    };
    if let Err(e) = entry.pool.bookmark_info(name) {
        return Response::err(state::cannot(&format!("cannot destroy '{name}'"), e));
    }
    let report = if p.has('v') {
        format!("{} destroy {name}\n", if p.has('n') { "would" } else { "will" })
    } else {
        String::new()
    };
    if p.has('n') {
        return Response::ok(report);
    }
    if let Err(e) = entry.pool.destroy_bookmark(name) {
        return Response::err(state::cannot(&format!("cannot destroy '{name}'"), e));
    }
    history_note(st, &pool, ctx);
    Response::ok(report)
}

/// `zfs diff [-FHt] snapshot [snapshot|filesystem]`: one line per changed file, in
/// OpenZFS's format (`M`, `+`, `-`, `R old -> new`; `-F` adds the type, `-t` the
/// change time, `-H` a tab instead of ` -> `), paths under the file system's
/// mountpoint with unusual bytes escaped.
pub fn diff(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "FHt") {
        Ok(p) => p,
        Err(e) => return usage(DIFF_USAGE, &e),
    };
    let (from, to) = match p.operands.as_slice() {
        [a] => (a.clone(), None),
        [a, b] => (a.clone(), Some(b.clone())),
        [] => return usage(DIFF_USAGE, "must provide at least one snapshot name"),
        _ => return usage(DIFF_USAGE, "too many arguments"),
    };
    let fs = from.split('@').next().unwrap_or(&from).to_string();
    let Some(entry) = st.pools.get(pool_of(&from)) else {
        return Response::err(format!("cannot open '{from}': dataset does not exist"));
    };
    let (old, new, ids) = match entry.pool.diff_sources(&from, to.as_deref()) {
        Ok(x) => x,
        Err(e) => return Response::err(e.to_string()),
    };
    let changes = match tarn_zpl::diff::diff(&*old, &*new, &ids) {
        Ok(c) => c,
        Err(e) => return Response::err(format!("cannot diff '{from}': {e}")),
    };
    let mp = match entry.pool.list_datasets().ok().and_then(|v| v.into_iter().find(|i| i.name == fs)) {
        Some(info) => zfs_mount::shown_mountpoint(&info, entry.altroot.as_deref()),
        None => return Response::err(format!("cannot open '{fs}': dataset does not exist")),
    };
    let full = |path: &str| {
        let mp = mp.trim_end_matches('/');
        tarn_zpl::diff::escape_path(&format!("{mp}{path}"))
    };
    let mut out = String::new();
    for c in &changes {
        if p.has('t') {
            out += &format!("{}.{:09}\t", c.ctime.sec, c.ctime.nsec);
        }
        out.push(c.change);
        out.push('\t');
        if p.has('F') {
            out.push(tarn_zpl::diff::kind_char(c.kind));
            out.push('\t');
        }
        out += &full(&c.path);
        if let Some(n) = &c.new_path {
            out += if p.has('H') { "\t" } else { " -> " };
            out += &full(n);
        }
        out.push('\n');
    }
    Response::ok(out)
}

/// `zfs promote clone`: the clone takes over its origin's snapshots (renamed under
/// it) and the origin's file system becomes its clone. No mount moves.
pub fn promote(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "") {
        Ok(p) => p,
        Err(e) => return usage(PROMOTE_USAGE, &e),
    };
    let fs = match p.operands.as_slice() {
        [f] => f.clone(),
        [] => return usage(PROMOTE_USAGE, "missing clone filesystem argument"),
        _ => return usage(PROMOTE_USAGE, "too many arguments"),
    };
    let pool = pool_of(&fs).to_string();
    let Some(entry) = st.pools.get(&pool) else {
        return Response::err(format!("cannot open '{fs}': dataset does not exist"));
    };
    if let Err(e) = entry.pool.promote(&fs) {
        return Response::err(state::cannot(&format!("cannot promote '{fs}'"), e));
    }
    history_note(st, &pool, ctx);
    Response::ok("")
}
