//! # zfs — the dataset command family, run inside the daemon
//!
//! Theory: datasets and their properties live in the pool (spa/dsl stores, inherits
//! and reports them); this module adds what only the daemon knows — which datasets
//! are mounted and where — and keeps the two in line. Every change of a property
//! that affects a mount goes through [`reconcile`]: for the changed dataset and its
//! descendants, mounts whose mountpoint moved (or that may no longer be mounted) are
//! unmounted children first, then remounted parents first; live ones get the new
//! readonly/atime/recordsize/sync/snapdir through `set_options`. As in OpenZFS, a dataset that was
//! not mounted is mounted by a mountpoint change only when its old mountpoint was
//! `none`/`legacy`.
//!
//! Checks (names, property values, parent existence, children without `-r`) happen
//! before the pool is asked, so a refused command changes nothing. The caller holds
//! the daemon's state lock.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tarn_spa::{is_descendant, DatasetInfo};

use crate::args::{self, canonical_fs_prop, getopt, split_prop, FS_PROPS};
use crate::format::{self, nicebytes, parse_size, table, Column};
use crate::proto::Response;
use crate::state::{self, Ctx, PoolEntry, State};
use crate::zfs_mount;
use crate::zfs_snap::pool_of;

const USAGE: &str = "usage: zfs command args ...\nwhere 'command' is one of the following:\n\n\
\tcreate [-pu] [-o property=value] ... <filesystem>\n\
\tdestroy [-fnrRv] <filesystem>\n\
\tdestroy [-dfnrRv] <filesystem>@<snap>[%<snap>][,...]\n\n\
\tsnapshot [-r] [-o property=value] ... <filesystem>@<snapname> ...\n\
\trollback [-rRf] <snapshot>\n\
\tclone [-p] [-o property=value] ... <snapshot> <filesystem>\n\
\trename [-f] <filesystem|snapshot> <filesystem|snapshot>\n\
\trename -p [-f] <filesystem> <filesystem>\n\
\trename -u [-f] <filesystem> <filesystem>\n\
\trename -r <snapshot> <snapshot>\n\n\
\tlist [-Hp] [-r|-d max] [-o property[,...]] [-s property]...\n\t    [-S property]... [-t type[,...]] [filesystem] ...\n\n\
\tset <property=value> ... <filesystem> ...\n\
\tget [-rHp] [-d max] [-o \"all\" | field[,...]]\n\t    [-t type[,...]] [-s source[,...]]\n\t    <\"all\" | property[,...]> [filesystem] ...\n\
\tinherit [-r] <property> <filesystem> ...\n\n\
\tmount\n\tmount [-v] [-a | <filesystem>]\n\
\tunmount [-f] <-a | filesystem|mountpoint>\n\n\
\thold [-r] <tag> <snapshot> ...\n\
\tholds [-rHp] <snapshot> ...\n\
\trelease [-r] <tag> <snapshot> ...\n";

fn bad_usage(sub: &str, msg: &str) -> Response {
    crate::args::bad_usage(USAGE, sub, msg)
}

/// Run `zfs ARGS`.
pub fn run(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let Some(sub) = args.first() else {
        return Response::usage(USAGE);
    };
    let rest = &args[1..];
    match sub.as_str() {
        "create" => create(st, ctx, rest),
        "destroy" => destroy(st, ctx, rest),
        "snapshot" | "snap" => crate::zfs_snap::snapshot(st, ctx, rest),
        "rollback" => crate::zfs_snap::rollback(st, ctx, rest),
        "clone" => crate::zfs_snap::clone(st, ctx, rest),
        "hold" => crate::zfs_holds::hold(st, ctx, rest),
        "release" => crate::zfs_holds::release(st, ctx, rest),
        "holds" => crate::zfs_holds::holds(st, rest),
        "rename" => crate::zfs_rename::rename(st, ctx, rest),
        "send" => crate::zfs_send::send(st, ctx, rest),
        "receive" | "recv" => crate::zfs_send::recv(st, ctx, rest),
        "bookmark" => crate::zfs_snap::bookmark(st, ctx, rest),
        "diff" => crate::zfs_snap::diff(st, rest),
        "promote" => crate::zfs_snap::promote(st, ctx, rest),
        "list" => list(st, rest),
        "get" => get(st, rest),
        "set" => set(st, ctx, rest),
        "inherit" => inherit(st, ctx, rest),
        "mount" => mount(st, rest),
        "unmount" | "umount" => unmount(st, ctx, rest),
        "-?" | "help" | "--help" => Response::ok(USAGE),
        other => Response::usage(format!("unrecognized command '{other}'\n{USAGE}")),
    }
}

fn parent_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

fn depth(name: &str) -> usize {
    name.matches('/').count()
}

fn datasets(entry: &PoolEntry) -> Result<Vec<DatasetInfo>, String> {
    entry.pool.list_datasets().map_err(|e| e.to_string())
}

fn find<'a>(infos: &'a [DatasetInfo], name: &str) -> Option<&'a DatasetInfo> {
    infos.iter().find(|i| i.name == name)
}

fn no_dataset(name: &str) -> Response {
    Response::err(format!("cannot open '{name}': dataset does not exist"))
}

fn create(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "puo:") {
        Ok(p) => p,
        Err(e) => return bad_usage("create", &e),
    };
    let name = match p.operands.as_slice() {
        [n] => n.clone(),
        [] => return bad_usage("create", "missing filesystem argument"),
        _ => return bad_usage("create", "too many arguments"),
    };
    let fail = |m: String| Response::err(state::cannot(&format!("cannot create '{name}'"), m));
    if !name.contains('/') && tarn_spa::validate_pool_name(&name).is_ok() {
        return fail("missing dataset name".into());
    }
    if let Err(e) = tarn_spa::validate_dataset_name(&name) {
        return fail(e.to_string());
    }
    let props = match args::check_fs_props(&p.all('o')) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let pool = pool_of(&name).to_string();
    let Some(entry) = st.pools.get_mut(&pool) else {
        return fail(format!("no such pool '{pool}'"));
    };
    // Names only: a full listing reads every record and would make each create cost
    // as much as the pool has datasets.
    let names = entry.pool.dataset_names();
    let exists = |n: &str| names.binary_search_by(|x| x.as_str().cmp(n)).is_ok();
    if exists(&name) {
        return fail("dataset already exists".into());
    }
    // Ancestors to create first (-p), shallowest first.
    let mut missing = Vec::new();
    let mut cur = parent_of(&name);
    while let Some(a) = cur {
        if exists(a) {
            break;
        }
        missing.push(a.to_string());
        cur = parent_of(a);
    }
    if !missing.is_empty() && !p.has('p') {
        return fail("parent does not exist".into());
    }
    missing.reverse();
    for a in &missing {
        if let Err(e) = entry.pool.create_dataset(a, &BTreeMap::new()) {
            return Response::err(state::cannot(&format!("cannot create '{a}'"), e));
        }
    }
    if let Err(e) = entry.pool.create_dataset(&name, &props) {
        return fail(e.to_string());
    }
    ctx.commit(&entry.pool);
    if p.has('u') {
        return Response::ok("");
    }
    let infos = match datasets(entry) {
        Ok(i) => i,
        Err(e) => return Response::err(format!("filesystem successfully created, but not mounted: {e}")),
    };
    let mut errors = Vec::new();
    for n in missing.iter().chain(std::iter::once(&name)) {
        let Some(info) = find(&infos, n) else { continue };
        if zfs_mount::canmount(info) != "on" || zfs_mount::effective_mountpoint(info, entry.altroot.as_deref()).is_none() {
            continue;
        }
        if let Err(e) = zfs_mount::mount_one(entry, info, false) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Response::ok("")
    } else {
        Response::err(format!("{}\nfilesystem successfully created, but not mounted", errors.join("\n")))
    }
}

fn destroy(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "rRfnvd") {
        Ok(p) => p,
        Err(e) => return bad_usage("destroy", &e),
    };
    let name = match p.operands.as_slice() {
        [n] => n.clone(),
        [] => return bad_usage("destroy", "missing dataset argument"),
        _ => return bad_usage("destroy", "too many arguments"),
    };
    let recursive = p.has('r') || p.has('R');
    if name.contains('@') {
        return crate::zfs_snap::destroy_snapshots(st, ctx, &name, &p);
    }
    if name.contains('#') {
        if p.has('d') {
            return Response::err("defer destroy is not supported with bookmark");
        }
        return crate::zfs_snap::destroy_bookmark(st, ctx, &name, &p);
    }
    let Some(entry) = st.pools.get_mut(pool_of(&name)) else {
        return no_dataset(&name);
    };
    let infos = match datasets(entry) {
        Ok(i) => i,
        Err(e) => return Response::err(state::cannot(&format!("cannot destroy '{name}'"), e)),
    };
    if find(&infos, &name).is_none() {
        return no_dataset(&name);
    }
    if p.has('d') {
        // -d applies to snapshots only (OpenZFS opens the operand as one).
        return Response::err(format!("cannot open '{name}': operation not applicable to datasets of this type"));
    }
    let is_root = !name.contains('/');
    if is_root && !recursive {
        return Response::err(format!(
            "cannot destroy '{name}': operation does not apply to pools\n\
             use 'zfs destroy -r {name}' to destroy all datasets in the pool\n\
             use 'zpool destroy {name}' to destroy the pool itself"
        ));
    }
    let children: Vec<String> = infos.iter().filter(|i| is_descendant(&i.name, &name)).map(|i| i.name.clone()).collect();
    // The engine's plan: descendants and snapshots (with -r), clones (with -R), or
    // OpenZFS's refusal naming them.
    let mut victims: Vec<String> = Vec::new();
    let roots: Vec<String> = if is_root {
        let mut r: Vec<String> = children.iter().filter(|c| depth(c) == 1).cloned().collect();
        r.extend(entry.pool.snapshots_of(&name));
        r
    } else {
        vec![name.clone()]
    };
    for r in &roots {
        match entry.pool.destroy_plan(r, recursive, p.has('R')) {
            Ok(v) => victims.extend(v.into_iter().filter(|x| !victims.contains(x)).collect::<Vec<_>>()),
            Err(e) => return Response::err(state::cannot(&format!("cannot destroy '{name}'"), e)),
        }
    }
    if p.has('n') {
        let out = crate::zfs_snap::destroy_report(&victims, "would", None);
        return Response::ok(if p.has('v') { out } else { String::new() });
    }
    if let Err(e) = crate::zfs_snap::destroy_victims(entry, &victims, p.has('f')) {
        return Response::err(e);
    }
    ctx.commit(&entry.pool);
    let out: String = if p.has('v') {
        crate::zfs_snap::destroy_report(&victims, "will", None)
    } else {
        String::new()
    };
    Response::ok(out)
}

/// A `zfs list`/`zfs get` value for property `prop` of `info`, with its source.
fn value_of(entry: &PoolEntry, info: &DatasetInfo, prop: &str, parsable: bool) -> Option<(String, String)> {
    let num = |n: u64| if parsable { n.to_string() } else { nicebytes(n) };
    let ro = "-".to_string();
    Some(match prop {
        "name" => (info.name.clone(), ro),
        "type" => info.props.get("type").cloned().unwrap_or_else(|| ("filesystem".into(), ro)),
        "mounted" if info.name.contains('@') || info.name.contains('#') => return None,
        "available" if info.name.contains('@') => ("-".into(), ro),
        "used" | "available" | "referenced" | "mountpoint" if info.name.contains('#') => ("-".into(), ro),
        p if p.starts_with("written@") => {
            let snap = &p["written@".len()..];
            let fs = info.name.split('@').next().unwrap_or(&info.name);
            let full = if snap.contains('@') { snap.to_string() } else { format!("{fs}@{snap}") };
            (num(entry.pool.written_since(&info.name, &full).ok()?), ro)
        }
        p if SPACE_PROPS.contains(&p) => (num(info.props.get(p)?.0.parse().ok()?), ro),
        "used" => (num(info.used_bytes), ro),
        "available" => (num(info.avail_bytes), ro),
        "referenced" => (num(info.refer_bytes), ro),
        "mounted" => ((if entry.mounts.contains_key(&info.name) { "yes" } else { "no" }).into(), ro),
        "mountpoint" => {
            let (_, src) = info.props.get("mountpoint").cloned().unwrap_or_default();
            (
                zfs_mount::shown_mountpoint(info, entry.altroot.as_deref()),
                if src.is_empty() { "default".into() } else { src },
            )
        }
        "recordsize" => {
            let (v, src) = info.props.get("recordsize")?.clone();
            let v = match parse_size(&v) {
                Some(n) => num(n),
                None => v,
            };
            (v, src)
        }
        "compressratio" | "refcompressratio" => {
            // A file system's compressratio covers its used space (its snapshots and
            // descendants included, each block once); a snapshot's is its
            // refcompressratio, the blocks it references (zfsprops(7)).
            let (lsize, psize) = if prop == "compressratio" && !info.name.contains('@') {
                entry.pool.used_lsize_psize(&info.name).ok()?
            } else {
                entry.pool.referenced_lsize_psize(&info.name).ok()?
            };
            (format::ratio(lsize, psize, parsable), ro)
        }
        // Logical sizes (zfsprops(7)): computed from block pointers when asked.
        "logicalreferenced" => (num(entry.pool.referenced_lsize_psize(&info.name).ok()?.0), ro),
        "logicalused" if info.name.contains('@') => ("-".into(), ro),
        "logicalused" => (num(entry.pool.logical_used(&info.name).ok()?), ro),
        "creation" if !parsable => {
            let (v, src) = info.props.get("creation")?.clone();
            (v.parse::<i64>().map(ctime).unwrap_or(v), src)
        }
        other => info.props.get(other)?.clone(),
    })
}

/// A time as OpenZFS prints `creation` ("Sun Nov 23  1:20 2026", local time).
pub fn ctime(secs: i64) -> String {
    format::local_time(secs.max(0) as u64, "%a %b %e %k:%M %Y")
}

/// Read-only space properties shown in bytes (OpenZFS `zfsprops(7)`).
const SPACE_PROPS: [&str; 6] = [
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "usedbyrefreservation",
    "written",
    "referenced",
];

/// Other read-only properties the engine reports.
const INFO_PROPS: [&str; 13] = [
    "compressratio",
    "refcompressratio",
    "logicalused",
    "logicalreferenced",
    "origin",
    "receive_resume_token",
    "clones",
    "userrefs",
    "createtxg",
    "creation",
    "guid",
    "snapshot_count",
    "defer_destroy",
];

fn is_numeric(prop: &str) -> bool {
    matches!(
        prop,
        "used" | "available" | "referenced" | "recordsize" | "createtxg" | "userrefs" | "logicalused" | "logicalreferenced"
    ) || SPACE_PROPS.contains(&prop)
        || prop.starts_with("written@")
}

fn known_prop(prop: &str) -> bool {
    matches!(prop, "name" | "type" | "used" | "available" | "referenced" | "mounted")
        || FS_PROPS.contains(&prop)
        || SPACE_PROPS.contains(&prop)
        || INFO_PROPS.contains(&prop)
        || prop.starts_with("written@")
        || tarn_spa::is_user_prop(prop)
}

/// File systems, snapshots and bookmarks of a pool, each file system followed by its
/// snapshots, then its bookmarks.
/// File systems, snapshots and bookmarks of the pool in listing order; with `under`,
/// only those in the subtree of that file system (its fs part when it names a
/// snapshot or bookmark), which costs what the subtree costs, not the pool.
/// Without `snapshots` no snapshot is listed (nor its row computed), unless `under`
/// names one.
fn all_datasets(entry: &PoolEntry, under: Option<&str>, snapshots: bool) -> Result<Vec<DatasetInfo>, String> {
    let fs_of = |n: &str| n.split(['@', '#']).next().unwrap_or(n).to_string();
    let snapshots = snapshots || under.is_some_and(|n| n.contains('@'));
    let infos = match under {
        Some(root) => entry.pool.list_under_kinds(&fs_of(root), snapshots),
        None if snapshots => entry.pool.list_all(),
        None => entry.pool.list_datasets(),
    }
    .map_err(|e| e.to_string())?;
    let mut marks = entry.pool.bookmarks().map_err(|e| e.to_string())?;
    if let Some(root) = under {
        let root = fs_of(root);
        marks.retain(|b| {
            let fs = fs_of(&b.name);
            fs == root || is_descendant(&fs, &root)
        });
    }
    if marks.is_empty() {
        return Ok(infos);
    }
    let info_of = |b: &tarn_spa::Bookmark| {
        let ro = |v: String| (v, "-".to_string());
        let props = [
            ("type", ro("bookmark".into())),
            ("creation", ro(b.creation_time_s.to_string())),
            ("createtxg", ro(b.creation_txg.to_string())),
            ("guid", ro(b.guid.to_string())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        DatasetInfo {
            name: b.name.clone(),
            used_bytes: 0,
            avail_bytes: 0,
            refer_bytes: 0,
            props,
        }
    };
    let mut out = Vec::with_capacity(infos.len() + marks.len());
    let mut i = 0;
    while i < infos.len() {
        let fs = fs_of(&infos[i].name);
        while i < infos.len() && fs_of(&infos[i].name) == fs {
            out.push(infos[i].clone());
            i += 1;
        }
        let mut own: Vec<&tarn_spa::Bookmark> = marks.iter().filter(|b| fs_of(&b.name) == fs).collect();
        own.sort_by_key(|b| (b.creation_txg, b.name.clone()));
        out.extend(own.into_iter().map(info_of));
    }
    Ok(out)
}

/// Depth of a name in the `-d` sense: a snapshot is one below its file system.
fn list_depth(name: &str) -> usize {
    match name.split_once(['@', '#']) {
        Some((fs, _)) => depth(fs) + 1,
        None => depth(name),
    }
}

/// Whether `name` is below `of` (a descendant file system, or a snapshot of `of` or
/// of a descendant).
fn is_below(name: &str, of: &str) -> bool {
    let fs = name.split(['@', '#']).next().unwrap_or(name);
    (fs.len() < name.len() && fs == of) || is_descendant(fs, of)
}

/// Datasets selected by the operands of list/get (with -r / -d), for the types (file systems, snapshots) asked for with `-t`. As in
/// OpenZFS, `zfs list -t snapshot fs` lists the snapshots of `fs`, and a snapshot
/// named as an operand is listed whatever `-t` says.
fn select_typed(st: &State, operands: &[String], recursive: bool, max_depth: Option<usize>, types: Types, resp: &mut Response) -> Vec<(String, DatasetInfo)> {
    let (want_fs, want_snap) = (types.fs, types.snap);
    let wanted = |n: &str| types.wants(n);
    let mut out = Vec::new();
    let recursive = recursive || max_depth.is_some();
    let limit = max_depth.unwrap_or(usize::MAX);
    if operands.is_empty() {
        for (pool, entry) in &st.pools {
            match all_datasets(entry, None, want_snap) {
                Ok(infos) => {
                    for i in infos {
                        if wanted(&i.name) && (max_depth.is_none() || list_depth(&i.name) <= limit) {
                            out.push((pool.clone(), i));
                        }
                    }
                }
                Err(e) => {
                    resp.stderr.push_str(&format!("cannot list '{pool}': {e}\n"));
                    resp.code = 1;
                }
            }
        }
        return out;
    }
    for name in operands {
        let name = name.trim_end_matches('/');
        let pool = pool_of(name);
        let infos = match st.pools.get(pool).map(|e| all_datasets(e, Some(name), want_snap)) {
            Some(Ok(i)) => i,
            _ => {
                resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
                resp.code = 1;
                continue;
            }
        };
        if find(&infos, name).is_none() {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        }
        let base = list_depth(name);
        let own_snaps = want_snap && !want_fs && !name.contains('@') && !recursive;
        for i in infos {
            let below = is_below(&i.name, name) && list_depth(&i.name) - base <= limit;
            let take = (i.name == name && (wanted(&i.name) || name.contains('@') || name.contains('#')))
                || (recursive && below && wanted(&i.name))
                || (own_snaps && i.name.split_once('@').map(|(f, _)| f == name).unwrap_or(false))
                || (types.bookmark && !recursive && i.name.split_once('#').map(|(f, _)| f == name).unwrap_or(false));
            if take && !out.iter().any(|(_, o): &(String, DatasetInfo)| o.name == i.name) {
                out.push((pool.to_string(), i));
            }
        }
    }
    out
}

/// Which kinds of dataset a `-t` list selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Types {
    fs: bool,
    snap: bool,
    bookmark: bool,
}

impl Types {
    const FS: Types = Types {
        fs: true,
        snap: false,
        bookmark: false,
    };
    fn any(&self) -> bool {
        self.fs || self.snap || self.bookmark
    }
    fn wants(&self, name: &str) -> bool {
        if name.contains('@') {
            self.snap
        } else if name.contains('#') {
            self.bookmark
        } else {
            self.fs
        }
    }
}

/// `-t type[,type]…` (`filesystem`, `snapshot`, `bookmark`, `all`; `volume` selects
/// nothing, Tarn has no volumes).
fn type_filter(t: Option<String>) -> Result<Types, String> {
    let Some(t) = t else { return Ok(Types::FS) };
    let mut out = Types {
        fs: false,
        snap: false,
        bookmark: false,
    };
    for w in t.split(',') {
        match w {
            "filesystem" | "fs" => out.fs = true,
            "snapshot" | "snap" => out.snap = true,
            "bookmark" => out.bookmark = true,
            "all" => {
                out = Types {
                    fs: true,
                    snap: true,
                    bookmark: true,
                }
            }
            "volume" | "vol" => {}
            other => return Err(format!("invalid type '{other}'")),
        }
    }
    Ok(out)
}

fn parse_depth(p: &args::Parsed) -> Result<Option<usize>, String> {
    match p.last('d') {
        None => Ok(None),
        Some(d) => d.parse::<usize>().map(Some).map_err(|_| format!("invalid depth '{d}'")),
    }
}

fn list(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "Hprd:o:s:S:t:") {
        Ok(p) => p,
        Err(e) => return bad_usage("list", &e),
    };
    let max_depth = match parse_depth(&p) {
        Ok(d) => d,
        Err(e) => return bad_usage("list", &e),
    };
    let want_fs = match type_filter(p.last('t')) {
        Ok(x) => x,
        Err(e) => return bad_usage("list", &e),
    };
    let cols_arg = match p.last('o').as_deref() {
        None => "name,used,avail,refer,mountpoint".to_string(),
        Some("space") => "name,avail,used,usedsnap,usedds,usedrefreserv,usedchild".to_string(),
        Some(o) => o.to_string(),
    };
    let props: Vec<String> = cols_arg.split(',').map(|c| canonical_fs_prop(c).to_string()).collect();
    for pr in &props {
        if !known_prop(pr) {
            return bad_usage("list", &format!("invalid property '{pr}'"));
        }
    }
    let mut resp = Response::ok("");
    let any_snap_operand = p.operands.iter().any(|o| o.contains('@') || o.contains('#'));
    let mut selected = if want_fs.any() || any_snap_operand {
        select_typed(st, &p.operands, p.has('r'), max_depth, want_fs, &mut resp)
    } else {
        Vec::new()
    };
    // -s / -S: sort by a property (numbers numerically), stable; name order otherwise.
    let sorts: Vec<(char, String)> = p
        .opts
        .iter()
        .filter(|(c, _)| *c == 's' || *c == 'S')
        .filter_map(|(c, a)| a.clone().map(|a| (*c, canonical_fs_prop(&a).to_string())))
        .collect();
    for (c, key) in sorts.iter().rev() {
        let key_of = |(pool, i): &(String, DatasetInfo)| -> (u64, String) {
            let v = st.pools.get(pool).and_then(|e| value_of(e, i, key, true)).map(|x| x.0).unwrap_or_default();
            (v.parse::<u64>().unwrap_or(0), v)
        };
        selected.sort_by(|a, b| {
            let (ka, kb) = (key_of(a), key_of(b));
            let ord = if is_numeric(key) { ka.0.cmp(&kb.0) } else { ka.1.cmp(&kb.1) };
            if *c == 'S' {
                ord.reverse()
            } else {
                ord
            }
        });
    }
    let rows: Vec<Vec<String>> = selected
        .iter()
        .map(|(pool, info)| {
            let entry = &st.pools[pool];
            props
                .iter()
                .map(|pr| value_of(entry, info, pr, p.has('p')).map(|x| x.0).unwrap_or_else(|| "-".into()))
                .collect()
        })
        .collect();
    if rows.is_empty() {
        if resp.code == 0 {
            resp.stderr = "no datasets available\n".into();
        }
        return resp;
    }
    let cols: Vec<Column> = props
        .iter()
        .map(|pr| {
            let h = args::fs_prop_header(pr);
            if is_numeric(pr) {
                Column::right(&h)
            } else {
                Column::left(&h)
            }
        })
        .collect();
    resp.stdout = table(&cols, &rows, p.has('H'));
    resp
}

fn get(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "Hprd:o:s:t:") {
        Ok(p) => p,
        Err(e) => return bad_usage("get", &e),
    };
    let max_depth = match parse_depth(&p) {
        Ok(d) => d,
        Err(e) => return bad_usage("get", &e),
    };
    let want_fs = match type_filter(p.last('t')) {
        Ok(x) => x,
        Err(e) => return bad_usage("get", &e),
    };
    let Some(props_arg) = p.operands.first() else {
        return bad_usage("get", "missing property argument");
    };
    let fields: Vec<String> = match p.last('o') {
        Some(o) if o != "all" => o.split(',').map(String::from).collect(),
        _ => vec!["name".into(), "property".into(), "value".into(), "source".into()],
    };
    for f in &fields {
        if !["name", "property", "value", "received", "source"].contains(&f.as_str()) {
            return bad_usage("get", &format!("invalid field '{f}'"));
        }
    }
    let sources: Option<Vec<String>> = p.last('s').map(|s| s.split(',').map(String::from).collect());
    if let Some(srcs) = &sources {
        for s in srcs {
            if !["local", "default", "inherited", "temporary", "received", "none"].contains(&s.as_str()) {
                return bad_usage("get", &format!("invalid source '{s}'"));
            }
        }
    }
    let all = props_arg == "all";
    let wanted: Vec<String> = if all {
        Vec::new()
    } else {
        let mut v = Vec::new();
        for pr in props_arg.split(',') {
            let c = canonical_fs_prop(pr).to_string();
            if !known_prop(&c) {
                return bad_usage("get", &format!("bad property list: invalid property '{pr}'"));
            }
            v.push(c);
        }
        v
    };
    let mut resp = Response::ok("");
    let types = if p.last('t').is_none() {
        Types {
            fs: true,
            snap: true,
            bookmark: true,
        }
    } else {
        want_fs
    };
    let selected = select_typed(
        st,
        &p.operands[1..],
        p.has('r'),
        max_depth,
        Types {
            snap: types.snap && (p.last('t').is_some() || p.operands[1..].iter().any(|o| o.contains('@'))),
            bookmark: types.bookmark && (p.last('t').is_some() || p.operands[1..].iter().any(|o| o.contains('#'))),
            ..types
        },
        &mut resp,
    );
    let mut rows = Vec::new();
    for (pool, info) in &selected {
        let entry = &st.pools[pool];
        let props: Vec<String> = if all {
            let mut v: Vec<String> = [
                "type",
                "creation",
                "used",
                "available",
                "referenced",
                "compressratio",
                "mounted",
                "logicalused",
                "logicalreferenced",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if !info.name.contains('@') {
                v.extend(FS_PROPS.iter().map(|s| s.to_string()));
            } else {
                v.retain(|p| p != "logicalused"); // a file system's figure only
            }
            // Native properties first, user properties last (as OpenZFS lists them).
            let (user, native): (Vec<String>, Vec<String>) = info.props.keys().filter(|k| !v.contains(k)).cloned().partition(|k| tarn_spa::is_user_prop(k));
            v.extend(native);
            v.extend(user);
            v
        } else {
            wanted.clone()
        };
        let received = if fields.iter().any(|f| f == "received") {
            entry.pool.received_props(&info.name)
        } else {
            BTreeMap::new()
        };
        for pr in &props {
            let (value, source) = value_of(entry, info, pr, p.has('p')).unwrap_or_else(|| ("-".into(), "-".into()));
            if let Some(srcs) = &sources {
                let kind = if source == "-" {
                    "none"
                } else {
                    source.split_whitespace().next().unwrap_or("")
                };
                if !srcs.iter().any(|s| s == kind) {
                    continue;
                }
            }
            rows.push(
                fields
                    .iter()
                    .map(|f| match f.as_str() {
                        "name" => info.name.clone(),
                        "property" => pr.clone(),
                        "value" => value.clone(),
                        "received" => received.get(pr).cloned().unwrap_or_else(|| "-".into()),
                        _ => source.clone(),
                    })
                    .collect(),
            );
        }
    }
    if !rows.is_empty() {
        let cols: Vec<Column> = fields.iter().map(|f| Column::left(&f.to_ascii_uppercase())).collect();
        resp.stdout = table(&cols, &rows, p.has('H'));
    }
    resp
}

/// Mount state before a property change: name → (mountpoint property, was mounted).
type Before = BTreeMap<String, String>;

fn snapshot_before(entry: &PoolEntry, root: &str) -> Before {
    datasets(entry)
        .unwrap_or_default()
        .into_iter()
        .filter(|i| i.name == root || is_descendant(&i.name, root))
        .map(|i| (i.name.clone(), zfs_mount::prop(&i, "mountpoint").to_string()))
        .collect()
}

/// Bring mounts of `root` and its descendants in line with their properties.
pub fn reconcile(entry: &mut PoolEntry, root: &str, before: &Before) -> Vec<String> {
    let infos = match datasets(entry) {
        Ok(i) => i,
        Err(e) => return vec![e],
    };
    let subtree: Vec<&DatasetInfo> = infos.iter().filter(|i| i.name == root || is_descendant(&i.name, root)).collect();
    let mut errors = Vec::new();
    let mut remount = Vec::new();
    // Phase 1, children first: unmount what moved or may no longer be mounted.
    for info in subtree.iter().rev() {
        let Some(m) = entry.mounts.get(&info.name) else { continue };
        let want = zfs_mount::effective_mountpoint(info, entry.altroot.as_deref());
        let can = zfs_mount::canmount(info);
        if want.as_ref() != Some(&m.mountpoint) || can == "off" {
            match zfs_mount::unmount_one(entry, &info.name) {
                Ok(()) => {
                    if want.is_some() && can != "off" {
                        remount.push(info.name.clone());
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    // Phase 2, parents first: remount, mount newly mountable, update live options.
    for info in &subtree {
        if let Some(m) = entry.mounts.get_mut(&info.name) {
            if let Err(e) = m.set_options(zfs_mount::mount_opts(info)) {
                errors.push(format!("cannot set options of '{}': {e}", info.name));
            }
            continue;
        }
        let was = before.get(&info.name).map(String::as_str).unwrap_or("");
        let newly = (was == "none" || was == "legacy")
            && zfs_mount::canmount(info) == "on"
            && zfs_mount::effective_mountpoint(info, entry.altroot.as_deref()).is_some();
        if remount.contains(&info.name) || newly {
            if let Err(e) = zfs_mount::mount_one(entry, info, true) {
                errors.push(e);
            }
        }
    }
    errors
}

fn set(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let (assignments, names): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| a.contains('='));
    if assignments.is_empty() {
        return bad_usage("set", "missing property=value argument(s)");
    }
    if names.is_empty() {
        return bad_usage("set", "missing dataset name(s)");
    }
    let mut checked = Vec::new();
    for a in &assignments {
        let r = split_prop(a).and_then(|(k, v)| args::check_fs_prop(&k, &v));
        match r {
            Ok(kv) => checked.push(kv),
            Err(e) => return Response::err(format!("cannot set property for '{}': {e}", names[0])),
        }
    }
    let mut resp = Response::ok("");
    for name in names {
        let Some(entry) = st.pools.get_mut(pool_of(name)) else {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        };
        if name.contains('@') {
            // Snapshots take user properties only; the pool says so for the others.
            for (k, v) in &checked {
                if let Err(e) = entry.pool.set_dataset_prop(name, k, v) {
                    resp.stderr
                        .push_str(&format!("{}\n", state::cannot(&format!("cannot set property for '{name}'"), e)));
                    resp.code = 1;
                    break;
                }
            }
            ctx.commit(&entry.pool);
            continue;
        }
        let before = snapshot_before(entry, name);
        if !before.contains_key(name.as_str()) {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        }
        let mut ok = true;
        for (k, v) in &checked {
            if let Err(e) = entry.pool.set_dataset_prop(name, k, v) {
                resp.stderr
                    .push_str(&format!("{}\n", state::cannot(&format!("cannot set property for '{name}'"), e)));
                resp.code = 1;
                ok = false;
                break;
            }
        }
        if ok {
            ctx.commit(&entry.pool);
        }
        for e in reconcile(entry, name, &before) {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
        }
    }
    resp
}

fn inherit(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "rS") {
        Ok(p) => p,
        Err(e) => return bad_usage("inherit", &e),
    };
    let (prop, names) = match p.operands.split_first() {
        Some((pr, rest)) if !rest.is_empty() => (canonical_fs_prop(pr).to_string(), rest.to_vec()),
        _ => return bad_usage("inherit", "missing property or dataset argument"),
    };
    if matches!(prop.as_str(), "used" | "available" | "referenced" | "type" | "mounted" | "name") {
        return Response::err(format!("'{prop}' property is read-only"));
    }
    if !FS_PROPS.contains(&prop.as_str()) && !tarn_spa::is_user_prop(&prop) {
        return bad_usage("inherit", &format!("invalid property '{prop}'"));
    }
    let mut resp = Response::ok("");
    for name in names {
        let Some(entry) = st.pools.get_mut(pool_of(&name)) else {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        };
        // `-S`: back to the received value where one exists (zfs-inherit(8)).
        let inherit = |pool: &tarn_spa::Pool, n: &str| {
            if p.has('S') {
                pool.revert_to_received(n, &prop)
            } else {
                pool.inherit_dataset_prop(n, &prop)
            }
        };
        if name.contains('@') {
            if let Err(e) = inherit(&entry.pool, &name) {
                resp.stderr
                    .push_str(&format!("{}\n", state::cannot(&format!("cannot inherit {prop} for '{name}'"), e)));
                resp.code = 1;
            }
            ctx.commit(&entry.pool);
            continue;
        }
        let before = snapshot_before(entry, &name);
        if !before.contains_key(&name) {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        }
        let targets: Vec<String> = if p.has('r') { before.keys().cloned().collect() } else { vec![name.clone()] };
        for t in targets {
            if let Err(e) = inherit(&entry.pool, &t) {
                resp.stderr
                    .push_str(&format!("{}\n", state::cannot(&format!("cannot inherit {prop} for '{t}'"), e)));
                resp.code = 1;
            }
        }
        ctx.commit(&entry.pool);
        for e in reconcile(entry, &name, &before) {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
        }
    }
    resp
}

fn mount(st: &mut State, args: &[String]) -> Response {
    // `-o` (temporary mount options) and `-O` (overlay: fusermount refuses a
    // non-empty mountpoint) are not implemented: refused by getopt rather than
    // accepted and ignored. `-v` only reports progress, which `-a` does not print.
    let p = match getopt(args, "av") {
        Ok(p) => p,
        Err(e) => return bad_usage("mount", &e),
    };
    if p.has('a') {
        let mut resp = Response::ok("");
        for entry in st.pools.values_mut() {
            for e in zfs_mount::mount_all(entry) {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
        return resp;
    }
    if p.operands.is_empty() {
        let mut all: Vec<(String, String)> = st
            .pools
            .values()
            .flat_map(|e| e.mounts.iter().map(|(n, m)| (n.clone(), m.mountpoint.display().to_string())))
            .collect();
        all.sort();
        return Response::ok(format::mount_list(&all));
    }
    let mut resp = Response::ok("");
    for name in &p.operands {
        let Some(entry) = st.pools.get_mut(pool_of(name)) else {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        };
        let infos = match datasets(entry) {
            Ok(i) => i,
            Err(e) => return Response::err(format!("cannot mount '{name}': {e}")),
        };
        let Some(info) = find(&infos, name) else {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        };
        if let Err(e) = zfs_mount::mount_one(entry, info, true) {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
        }
    }
    resp
}

fn unmount(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "af") {
        Ok(p) => p,
        Err(e) => return bad_usage("unmount", &e),
    };
    let mut resp = Response::ok("");
    if p.has('a') {
        for entry in st.pools.values_mut() {
            for e in zfs_mount::unmount_all(entry, p.has('f')) {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
        return resp;
    }
    if p.operands.is_empty() {
        return bad_usage("unmount", "missing filesystem argument");
    }
    for target in &p.operands {
        // A path names the dataset mounted there; otherwise it is a dataset name.
        let by_path = if target.starts_with('/') || target.starts_with('.') {
            let path = args::normalize(&ctx.cwd.join(target));
            st.pools
                .iter()
                .find_map(|(pool, e)| e.mounts.iter().find(|(_, m)| m.mountpoint == path).map(|(n, _)| (pool.clone(), n.clone())))
        } else {
            None
        };
        let (pool, name) = match by_path {
            Some(x) => x,
            None if target.starts_with('/') => {
                resp.stderr.push_str(&format!("cannot unmount '{target}': not a mountpoint\n"));
                resp.code = 1;
                continue;
            }
            None => (pool_of(target).to_string(), target.clone()),
        };
        let Some(entry) = st.pools.get_mut(&pool) else {
            resp.stderr.push_str(&format!("cannot open '{name}': dataset does not exist\n"));
            resp.code = 1;
            continue;
        };
        if !entry.mounts.contains_key(&name) {
            let exists = datasets(entry).map(|i| find(&i, &name).is_some()).unwrap_or(false);
            let msg = if exists {
                format!("cannot unmount '{name}': not currently mounted")
            } else {
                format!("cannot open '{name}': dataset does not exist")
            };
            resp.stderr.push_str(&format!("{msg}\n"));
            resp.code = 1;
            continue;
        }
        if let Err(e) = zfs_mount::unmount_one_ext(entry, &name, p.has('f')) {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
        }
    }
    resp
}

/// Paths helper for tests: the default mountpoint OpenZFS gives `name` when nothing
/// is set (`/` + name).
pub fn default_mountpoint(name: &str) -> PathBuf {
    PathBuf::from("/").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_helpers() {
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(parent_of("tank/a/b"), Some("tank/a"));
        assert_eq!(parent_of("tank"), None);
        assert!(is_descendant("tank/a/b", "tank/a"));
        assert!(!is_descendant("tank/ab", "tank/a"));
        assert!(!is_descendant("tank/a", "tank/a"));
        assert_eq!(depth("tank/a/b"), 2);
        assert_eq!(default_mountpoint("tank/a"), PathBuf::from("/tank/a"));
        let c = ctime(0);
        assert!(c.ends_with("1970") || c.ends_with("1969"), "{c}");
        assert_eq!(c.split_whitespace().count(), 5, "{c}");
    }

    #[test]
    fn types() {
        let t = |fs, snap, bookmark| Types { fs, snap, bookmark };
        assert_eq!(type_filter(None).unwrap(), t(true, false, false));
        assert_eq!(type_filter(Some("filesystem".into())).unwrap(), t(true, false, false));
        assert_eq!(type_filter(Some("snapshot".into())).unwrap(), t(false, true, false));
        assert_eq!(type_filter(Some("fs,snap".into())).unwrap(), t(true, true, false));
        assert_eq!(type_filter(Some("bookmark".into())).unwrap(), t(false, false, true));
        assert_eq!(type_filter(Some("all".into())).unwrap(), t(true, true, true));
        assert!(type_filter(Some("bogus".into())).is_err());
    }
}
