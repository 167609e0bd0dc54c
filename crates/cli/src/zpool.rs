//! # zpool — the pool command family, run inside the daemon
//!
//! Theory: each subcommand parses its arguments (OpenZFS getopt syntax), checks
//! everything it can before touching any device, calls the pool layer once, then
//! brings the daemon's tables (pool map, mounts, known_dirs, the cachefile) in line
//! and records the command in the pool history (not for a pool imported read-only). A failure before the pool call changes nothing; a
//! failure of the pool call leaves the daemon's tables as they were (`zpool create`
//! also removes the vdev files it created for `-o size`). Messages follow OpenZFS
//! wording; exit status 1 for failures, 2 for usage errors.
//!
//! The caller holds the daemon's state lock for the whole command.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tarn_spa::{AddSpec, CreateSpec, ImportOptions, Pool, Rewind, SpaError, TopSpec, VdevStatus};

use crate::args::{self, getopt, split_prop, VdevWords};
use crate::format::{self, nicebytes, table, Align, Column};
use crate::proto::Response;
use crate::state::{self, Ctx, PoolEntry, State};
use crate::zfs_mount;

/// Smallest vdev OpenZFS accepts (`SPA_MINDEVSIZE`), as the pool layer checks it.
use tarn_spa::MIN_DEVICE_SIZE_BYTES as MIN_DEVICE_BYTES;

const USAGE: &str = "usage: zpool command args ...\nwhere 'command' is one of the following:\n\n\
\tcreate [-fn] [-m mountpoint] [-o property=value] ... \n\t    [-O file-system-property=value] ... [-R root] <pool> <vdev> ...\n\
\tdestroy [-f] <pool>\n\n\
\tadd [-fn] <pool> <vdev> ...\n\
\tremove <pool> <device> ...\n\n\
\tattach [-f] <pool> <device> <new-device>\n\
\tdetach <pool> <device>\n\
\treplace [-f] <pool> <device> [new-device]\n\n\
\tonline <pool> <device> ...\n\
\toffline [-t] <pool> <device> ...\n\
\tclear <pool> [device]\n\n\
\timport [-d dir] [-D]\n\timport [-d dir]... [-fFmN] [-R root] [-T txg] [-o property=value] ...\n\t    <pool | id> [newpool]\n\
\texport [-f] <pool> ...\n\n\
\tlist [-Hp] [-o property[,...]] [pool] ...\n\
\tstatus [-vx] [pool] ...\n\
\thistory [pool] ...\n\n\
\tget [-Hp] [-o \"all\" | field[,...]] <\"all\" | property[,...]> <pool> ...\n\
\tset <property=value> <pool>\n\n\
\tddtprune -d|-p <amount> <pool>\n";

fn bad_usage(sub: &str, msg: &str) -> Response {
    crate::args::bad_usage(USAGE, sub, msg)
}

/// Run `zpool ARGS`.
pub fn run(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let Some(sub) = args.first() else {
        return Response::usage(USAGE);
    };
    let rest = &args[1..];
    match sub.as_str() {
        "create" => create(st, ctx, rest),
        "destroy" => destroy(st, ctx, rest),
        "add" => add(st, ctx, rest),
        "remove" => remove(st, ctx, rest),
        "attach" => attach(st, ctx, rest),
        "detach" => detach(st, ctx, rest),
        "replace" => replace(st, ctx, rest),
        "online" => online(st, ctx, rest),
        "offline" => offline(st, ctx, rest),
        "clear" => clear(st, ctx, rest),
        "list" => list(st, rest),
        "status" => status(st, rest),
        "export" => export(st, rest),
        "import" => import(st, ctx, rest),
        "get" => get(st, rest),
        "set" => set(st, ctx, rest),
        "history" => history(st, rest),
        "sync" => sync(st, rest),
        "ddtprune" => ddtprune(st, ctx, rest),
        "scrub" => crate::scrub::scrub(st, rest),
        "iostat" => crate::iostat::run(st, rest),
        "-?" | "help" | "--help" => Response::ok(USAGE),
        other => Response::usage(format!("unrecognized command '{other}'\n{USAGE}")),
    }
}

/// Finish a command whose main step succeeded but where mounting reported errors.
fn with_mount_errors(mut resp: Response, errors: Vec<String>) -> Response {
    if !errors.is_empty() {
        for e in errors {
            resp.stderr.push_str(&e);
            resp.stderr.push('\n');
        }
        resp.code = 1;
    }
    resp
}

/// A path that is neither a regular file nor a block device, with OpenZFS's wording.
fn unusable_device(path: &std::path::Path, md: &std::fs::Metadata) -> Option<Response> {
    use std::os::unix::fs::FileTypeExt;
    let ft = md.file_type();
    if ft.is_dir() {
        return Some(Response::err(format!("cannot open '{}': Is a directory", path.display())));
    }
    if !(ft.is_file() || ft.is_block_device()) {
        return Some(Response::err(format!(
            "cannot use '{}': must be a block device or regular file",
            path.display()
        )));
    }
    None
}

struct PlannedLeaf {
    path: PathBuf,
    create: bool,
}

fn create(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "fnm:o:O:R:") {
        Ok(p) => p,
        Err(e) => return bad_usage("create", &e),
    };
    let Some(name) = p.operands.first().cloned() else {
        return bad_usage("create", "missing pool name argument");
    };
    if p.operands.len() < 2 {
        return bad_usage("create", "missing vdev specification");
    }
    let fail = |msg: String| Response::err(state::cannot(&format!("cannot create '{name}'"), msg));
    if let Err(e) = tarn_spa::validate_pool_name(&name) {
        return fail(e.to_string());
    }
    let force = p.has('f');
    let mut ashift = 12u8;
    let mut size_bytes: Option<u64> = None;
    let mut altroot = p.last('R').map(PathBuf::from);
    let mut pool_props = BTreeMap::new();
    let mut cachefile = None;
    for o in p.all('o') {
        let (k, v) = match split_prop(&o) {
            Ok(kv) => kv,
            Err(e) => return bad_usage("create", &e),
        };
        match k.as_str() {
            // 0 asks for the default (OpenZFS detects the device's sector size; Tarn
            // takes 4K).
            "ashift" => match v.parse::<u64>() {
                Ok(0) => ashift = 12,
                Ok(n @ 9..=16) => ashift = n as u8,
                Ok(n) => return fail(format!("property 'ashift' number {n} is invalid, only values between 9 and 16 are allowed.")),
                Err(_) => return fail("'ashift' must be a number".to_string()),
            },
            "size" => match format::parse_size(&v) {
                Some(n) => size_bytes = Some(n),
                None => return fail(format!("bad size '{v}'")),
            },
            "altroot" => altroot = Some(PathBuf::from(v)),
            "cachefile" => match crate::cachefile::check_property(&v) {
                Ok(c) => cachefile = c,
                Err(e) => return fail(e),
            },
            _ => match Pool::check_pool_prop(&k, &v) {
                Ok(()) => {
                    pool_props.insert(k, v);
                }
                Err(e) => return fail(e.to_string()),
            },
        }
    }
    if let Some(r) = &altroot {
        if !r.is_absolute() {
            return fail(format!("invalid alternate root '{}': must be an absolute path", r.display()));
        }
    }
    let mut fs_props = BTreeMap::new();
    for o in p.all('O') {
        let checked = split_prop(&o).and_then(|(k, v)| args::check_fs_prop(&k, &v));
        match checked {
            Ok((k, v)) => {
                fs_props.insert(k, v);
            }
            Err(e) => return fail(e),
        }
    }
    if let Some(m) = p.last('m') {
        match args::check_fs_prop("mountpoint", &m) {
            Ok((k, v)) => {
                fs_props.insert(k, v);
            }
            Err(e) => return fail(e),
        }
    }
    if st.pools.contains_key(&name) {
        return fail("pool already exists".into());
    }
    let groups = match args::parse_vdev_words(&p.operands[1..]) {
        Ok(g) => g,
        Err(e) => return Response::err(e),
    };
    // Resolve and check every leaf before anything is created.
    let mut planned: Vec<PlannedLeaf> = Vec::new();
    let mut seen: BTreeMap<PathBuf, ()> = BTreeMap::new();
    let mut resolve = |w: &str| -> Result<PathBuf, Response> {
        let path = args::resolve_device(w, &ctx.cwd, size_bytes.is_some());
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.insert(key, ()).is_some() {
            return Err(Response::err(format!("invalid vdev specification: {} is used twice", path.display())));
        }
        match std::fs::metadata(&path) {
            Ok(md) => {
                if let Some(e) = unusable_device(&path, &md) {
                    return Err(e);
                }
                if md.file_type().is_file() && md.len() < MIN_DEVICE_BYTES {
                    return Err(fail("one or more devices is less than the minimum size (64M)".into()));
                }
                planned.push(PlannedLeaf {
                    path: path.clone(),
                    create: false,
                });
            }
            Err(_) => {
                let parent_ok = path.parent().map(|d| d.is_dir()).unwrap_or(false);
                if size_bytes.is_none() || !parent_ok {
                    return Err(Response::err(format!("cannot open '{}': No such file or directory", path.display())));
                }
                planned.push(PlannedLeaf {
                    path: path.clone(),
                    create: true,
                });
            }
        }
        Ok(path)
    };
    let tops = match resolve_groups(&groups.normal, &mut resolve) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let logs = match resolve_groups(&groups.logs, &mut resolve) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let spares = match groups.spares.iter().map(|w| resolve(w)).collect::<Result<Vec<_>, _>>() {
        Ok(v) => v,
        Err(r) => return r,
    };
    let caches = match groups.caches.iter().map(|w| resolve(w)).collect::<Result<Vec<_>, _>>() {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Some(n) = size_bytes {
        if n < MIN_DEVICE_BYTES && planned.iter().any(|l| l.create) {
            return fail("one or more devices is less than the minimum size (64M)".into());
        }
    }
    if !force {
        if let Some(why) = tarn_spa::create_replication_mismatch(&tops) {
            return Response::err(format!("invalid vdev specification\nuse '-f' to override the following errors:\n{why}"));
        }
    }
    if tops.is_empty() {
        let how = if force {
            "the following errors must be manually repaired:"
        } else {
            "use '-f' to override the following errors:"
        };
        return Response::err(format!(
            "invalid vdev specification\n{how}\nat least one general top-level vdev must be specified"
        ));
    }
    if p.has('n') {
        let mut out = format!("would create '{name}' with the following layout:\n\n\t{name}\n");
        out.push_str(&spec_tree(&tops));
        if !logs.is_empty() {
            out.push_str("\tlogs\n");
            out.push_str(&spec_tree(&logs));
        }
        if !caches.is_empty() {
            out.push_str("\tcache\n");
            out.push_str(&spec_tree(&caches.iter().cloned().map(TopSpec::Leaf).collect::<Vec<_>>()));
        }
        if !spares.is_empty() {
            out.push_str("\tspares\n");
            out.push_str(&spec_tree(&spares.iter().cloned().map(TopSpec::Leaf).collect::<Vec<_>>()));
        }
        return Response::ok(out);
    }
    // Create the missing file vdevs (Tarn's `-o size`), removed again on failure.
    let mut created: Vec<PathBuf> = Vec::new();
    let cleanup = |created: &[PathBuf]| {
        for c in created {
            let _ = std::fs::remove_file(c);
        }
    };
    // Mode 0600 whatever the umask: a vdev file holds the whole pool's data.
    for l in planned.iter().filter(|l| l.create) {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&l.path)
            .and_then(|f| f.set_len(size_bytes.unwrap_or(0)));
        if let Err(e) = r {
            cleanup(&created);
            return Response::err(format!("cannot create '{}': {e}", l.path.display()));
        }
        created.push(l.path.clone());
    }
    let spec = CreateSpec {
        name: name.clone(),
        vdevs: tops,
        logs,
        spares,
        caches,
        ashift,
        force,
        pool_props,
        fs_props,
    };
    let pool = match Pool::create(&spec) {
        Ok(p) => p,
        Err(e) => {
            cleanup(&created);
            return Response::err(create_error(&name, e));
        }
    };
    let mut entry = PoolEntry::new(pool, altroot);
    entry.cachefile = cachefile;
    st.remember_dirs(planned.iter().map(|l| l.path.clone()));
    ctx.commit(&entry.pool);
    let errors = zfs_mount::mount_all(&mut entry);
    st.pools.insert(name.clone(), entry);
    crate::cachefile::record(st, &name, None);
    with_mount_errors(Response::ok(""), errors)
}

/// Resolve the device words of vdev groups into specs with `resolve` (which checks
/// each device and reports the first problem as the command's response).
fn resolve_groups(groups: &[VdevWords], resolve: &mut impl FnMut(&str) -> Result<PathBuf, Response>) -> Result<Vec<TopSpec>, Response> {
    let mut tops = Vec::new();
    for g in groups {
        let top = match g {
            VdevWords::Leaf(w) => resolve(w).map(TopSpec::Leaf),
            VdevWords::Mirror(ws) => ws.iter().map(|w| resolve(w)).collect::<Result<Vec<_>, _>>().map(TopSpec::Mirror),
            VdevWords::Raidz(n, ws) => ws
                .iter()
                .map(|w| resolve(w))
                .collect::<Result<Vec<_>, _>>()
                .map(|leaves| TopSpec::Raidz { nparity: *n, leaves }),
        };
        tops.push(top?);
    }
    Ok(tops)
}

/// The vdevs of a spec as OpenZFS's `print_vdev_tree` lays out new vdevs (type words
/// without ids, leaves below), two spaces in.
fn spec_tree(tops: &[TopSpec]) -> String {
    let mut out = String::new();
    for t in tops {
        match t {
            TopSpec::Leaf(l) => out.push_str(&format!("\t  {}\n", l.display())),
            TopSpec::Mirror(ls) | TopSpec::Raidz { leaves: ls, .. } => {
                let word = match t {
                    TopSpec::Raidz { nparity, .. } => format!("raidz{nparity}"),
                    _ => "mirror".to_string(),
                };
                out.push_str(&format!("\t  {word}\n"));
                for l in ls {
                    out.push_str(&format!("\t    {}\n", l.display()));
                }
            }
        }
    }
    out
}

/// The pool's own top-level vdevs of one class (`logs`), laid out like [`spec_tree`]
/// but with their `zpool status` names ("mirror-0").
fn pool_tree(root: &VdevStatus, logs: bool) -> String {
    let mut out = String::new();
    for t in root.children.iter().filter(|t| t.is_log == logs) {
        out.push_str(&format!("\t  {}\n", t.name));
        for l in &t.children {
            out.push_str(&format!("\t    {}\n", l.name));
        }
    }
    out
}

/// `zpool add [-fn] POOL VDEV...`: add normal and (after `log`) log vdevs.
fn add(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "fn") {
        Ok(p) => p,
        Err(e) => return bad_usage("add", &e),
    };
    let Some(name) = p.operands.first().cloned() else {
        return bad_usage("add", "missing pool name argument");
    };
    if p.operands.len() < 2 {
        return bad_usage("add", "missing vdev specification");
    }
    let Some(entry) = st.pools.get(&name) else {
        return no_such_pool(&name);
    };
    let fail = |msg: &str| Response::err(format!("cannot add to '{name}': {msg}"));
    let groups = match args::parse_vdev_words(&p.operands[1..]) {
        Ok(g) => g,
        Err(e) => return Response::err(e),
    };
    let mut seen: BTreeMap<PathBuf, ()> = BTreeMap::new();
    let mut leaves: Vec<PathBuf> = Vec::new();
    let mut resolve = |w: &str| -> Result<PathBuf, Response> {
        let path = args::resolve_device(w, &ctx.cwd, false);
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if seen.insert(key, ()).is_some() {
            return Err(Response::err(format!("invalid vdev specification: {} is used twice", path.display())));
        }
        let Ok(md) = std::fs::metadata(&path) else {
            return Err(Response::err(format!("cannot open '{}': No such file or directory", path.display())));
        };
        if let Some(e) = unusable_device(&path, &md) {
            return Err(e);
        }
        if md.file_type().is_file() && md.len() < MIN_DEVICE_BYTES {
            return Err(fail("device is less than the minimum size (64M)"));
        }
        leaves.push(path.clone());
        Ok(path)
    };
    let vdevs = match resolve_groups(&groups.normal, &mut resolve) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let logs = match resolve_groups(&groups.logs, &mut resolve) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let spares = match groups.spares.iter().map(|w| resolve(w)).collect::<Result<Vec<_>, _>>() {
        Ok(v) => v,
        Err(r) => return r,
    };
    let caches = match groups.caches.iter().map(|w| resolve(w)).collect::<Result<Vec<_>, _>>() {
        Ok(v) => v,
        Err(r) => return r,
    };
    if p.has('n') {
        let root = entry.pool.status();
        let mut out = format!("would update '{name}' to the following configuration:\n\n\t{name}\n");
        out.push_str(&pool_tree(&root, false));
        out.push_str(&spec_tree(&vdevs));
        if root.children.iter().any(|t| t.is_log) || !logs.is_empty() {
            out.push_str("\tlogs\n");
            out.push_str(&pool_tree(&root, true));
            out.push_str(&spec_tree(&logs));
        }
        return Response::ok(out);
    }
    let spec = AddSpec {
        vdevs,
        logs,
        spares,
        caches,
        force: p.has('f'),
    };
    if let Err(e) = entry.pool.add_vdevs(&spec) {
        return Response::err(add_error(&name, e));
    }
    st.remember_dirs(leaves);
    ctx.commit(&entry.pool);
    crate::cachefile::record(st, &name, None);
    Response::ok("")
}

/// `zpool SUB [opts] POOL DEVICE...`: parse `args` with getopt `opts`, find the pool,
/// and run `op` on each device word (made absolute by [`device_word`]). A success is
/// noted in the history; each failure prints its error and makes the exit status 1,
/// and the other devices are still tried. `op` may add warnings to the response.
fn each_device(
    st: &State,
    ctx: &Ctx,
    args: &[String],
    sub: &str,
    opts: &str,
    missing: (&str, &str),
    op: impl Fn(&PoolEntry, &args::Parsed, &str, &mut Response) -> Result<(), SpaError>,
) -> Response {
    let p = match getopt(args, opts) {
        Ok(p) => p,
        Err(e) => return bad_usage(sub, &e),
    };
    let Some(name) = p.operands.first() else {
        return bad_usage(sub, missing.0);
    };
    if p.operands.len() < 2 {
        return bad_usage(sub, missing.1);
    }
    let Some(entry) = st.pools.get(name) else {
        return no_such_pool(name);
    };
    let mut resp = Response::ok("");
    for word in &p.operands[1..] {
        match op(entry, &p, &device_word(ctx, word), &mut resp) {
            Ok(()) => ctx.commit(&entry.pool),
            Err(e) => {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
    }
    resp
}

/// `zpool remove POOL DEVICE...`: remove separate log vdevs, idle spares and cache
/// devices.
fn remove(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    each_device(
        st,
        ctx,
        args,
        "remove",
        "",
        ("missing pool name argument", "missing device"),
        |entry, _, dev, _| entry.pool.remove_vdev(dev),
    )
}

/// A device word as the pool layer takes it: paths relative to the client's
/// directory are made absolute; vdev names ("mirror-1"), GUIDs and absolute paths
/// stay as they are.
fn device_word(ctx: &Ctx, word: &str) -> String {
    if word.contains('/') && !word.starts_with('/') {
        args::normalize(&ctx.cwd.join(word)).display().to_string()
    } else {
        word.to_string()
    }
}

/// The message of a failed repair command: the pool layer words it whole, except
/// for vdev specification errors of a new device (OpenZFS `vdev_error`).
fn repair_error(what: &str, e: SpaError) -> String {
    match e {
        e @ SpaError::InUse { .. } => vdev_spec_error(what, e),
        SpaError::NotFound(m) if m.starts_with("cannot open") => m,
        other => other.to_string(),
    }
}

/// `zpool attach [-f] POOL DEVICE NEW_DEVICE`.
fn attach(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "fw") {
        Ok(p) => p,
        Err(e) => return bad_usage("attach", &e),
    };
    let (name, dev, new) = match p.operands.as_slice() {
        [] => return bad_usage("attach", "missing pool name argument"),
        [_] => return bad_usage("attach", "missing <device> specification"),
        [_, _] => return bad_usage("attach", "missing <new_device> specification"),
        [n, d, w] => (n, device_word(ctx, d), args::resolve_device(w, &ctx.cwd, false)),
        _ => return bad_usage("attach", "too many arguments"),
    };
    let Some(entry) = st.pools.get(name) else {
        return no_such_pool(name);
    };
    if let Err(e) = entry.pool.attach(&dev, &new, p.has('f')) {
        return Response::err(repair_error(&format!("cannot attach {} to {dev}", new.display()), e));
    }
    st.remember_dirs([new]);
    ctx.commit(&st.pools[name].pool);
    crate::cachefile::record(st, name, None);
    wait_resilver(st, name, p.has('w'));
    Response::ok("")
}

/// `-w` of attach and replace: the request is answered only when the resilver the
/// command started has ended (the daemon waits after releasing the state lock, as
/// for `zpool scrub -w`).
fn wait_resilver(st: &mut State, name: &str, wait: bool) {
    if wait {
        if let Some(e) = st.pools.get(name) {
            st.wait_scan.push(e.pool.clone());
        }
    }
}

/// `zpool detach POOL DEVICE`.
fn detach(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "") {
        Ok(p) => p,
        Err(e) => return bad_usage("detach", &e),
    };
    let (name, dev) = match p.operands.as_slice() {
        [] => return bad_usage("detach", "missing pool name argument"),
        [_] => return bad_usage("detach", "missing <device> specification"),
        [n, d] => (n, device_word(ctx, d)),
        _ => return bad_usage("detach", "too many arguments"),
    };
    let Some(entry) = st.pools.get(name) else {
        return no_such_pool(name);
    };
    if let Err(e) = entry.pool.detach(&dev) {
        return Response::err(e.to_string());
    }
    ctx.commit(&entry.pool);
    Response::ok("")
}

/// `zpool replace [-f] POOL DEVICE [NEW_DEVICE]`.
fn replace(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "fw") {
        Ok(p) => p,
        Err(e) => return bad_usage("replace", &e),
    };
    let (name, dev, new) = match p.operands.as_slice() {
        [] => return bad_usage("replace", "missing pool name argument"),
        [_] => return bad_usage("replace", "missing <device> specification"),
        [n, d] => (n, device_word(ctx, d), None),
        [n, d, w] => (n, device_word(ctx, d), Some(args::resolve_device(w, &ctx.cwd, false))),
        _ => return bad_usage("replace", "too many arguments"),
    };
    let Some(entry) = st.pools.get(name) else {
        return no_such_pool(name);
    };
    let new_word = new.as_ref().map(|n| n.display().to_string()).unwrap_or_else(|| dev.clone());
    if let Err(e) = entry.pool.replace(&dev, new.as_deref(), p.has('f')) {
        return Response::err(repair_error(&format!("cannot replace {dev} with {new_word}"), e));
    }
    st.remember_dirs(new);
    ctx.commit(&st.pools[name].pool);
    crate::cachefile::record(st, name, None);
    wait_resilver(st, name, p.has('w'));
    Response::ok("")
}

/// `zpool online POOL DEVICE...`.
fn online(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    each_device(
        st,
        ctx,
        args,
        "online",
        "",
        ("missing pool name", "missing device name"),
        |entry, _, dev, resp| {
            if !entry.pool.online(dev)?.is_usable() {
                resp.stderr.push_str(&format!(
                    "warning: device '{dev}' onlined, but remains in faulted state\nuse 'zpool replace' to replace devices that are no longer present\n"
                ));
            }
            Ok(())
        },
    )
}

/// `zpool offline [-t] POOL DEVICE...`.
fn offline(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    each_device(
        st,
        ctx,
        args,
        "offline",
        "t",
        ("missing pool name", "missing device name"),
        |entry, p, dev, _| entry.pool.offline(dev, p.has('t')),
    )
}

/// `zpool clear POOL [DEVICE]`.
fn clear(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "") {
        Ok(p) => p,
        Err(e) => return bad_usage("clear", &e),
    };
    let (name, dev) = match p.operands.as_slice() {
        [] => return bad_usage("clear", "missing pool name"),
        [n] => (n, None),
        [n, d] => (n, Some(device_word(ctx, d))),
        _ => return bad_usage("clear", "too many arguments"),
    };
    let Some(entry) = st.pools.get_mut(name) else {
        return no_such_pool(name);
    };
    if let Err(e) = entry.pool.clear(dev.as_deref()) {
        return Response::err(e.to_string());
    }
    // A suspended pool resumes: in place, or re-imported from disk and remounted.
    match entry.pool.resume() {
        Ok(tarn_spa::Resume::NotSuspended | tarn_spa::Resume::InPlace) => {}
        Ok(tarn_spa::Resume::Reopened(pool)) => {
            let mut errors = zfs_mount::unmount_all(entry, true);
            entry.pool = pool;
            errors.extend(zfs_mount::mount_all(entry));
            if !errors.is_empty() {
                return Response::err(errors.join("\n"));
            }
        }
        Err(e) => {
            // A re-import that failed leaves the old pool closed: forget it (its
            // devices are free; `zpool import` may be tried again).
            if entry.pool.is_closed() {
                zfs_mount::unmount_all(entry, true);
                st.pools.remove(name);
            }
            return Response::err(e.to_string());
        }
    }
    ctx.commit(&entry.pool);
    Response::ok("")
}

fn create_error(name: &str, e: SpaError) -> String {
    match e {
        SpaError::TooSmall(_) => format!("cannot create '{name}': one or more devices is less than the minimum size (64M)"),
        SpaError::Exists(_) => format!("cannot create '{name}': pool already exists"),
        other => vdev_spec_error(&format!("cannot create '{name}'"), other),
    }
}

fn add_error(name: &str, e: SpaError) -> String {
    match e {
        SpaError::TooSmall(_) => format!("cannot add to '{name}': device is less than the minimum size (64M)"),
        other => vdev_spec_error(&format!("cannot add to '{name}'"), other),
    }
}

/// Errors of a vdev specification as OpenZFS's `vdev_error` prints them; anything else
/// after `what` ("cannot create 'tank'").
fn vdev_spec_error(what: &str, e: SpaError) -> String {
    match e {
        SpaError::InUse { path, pool, state } if state == "active" => {
            format!("invalid vdev specification\nthe following errors must be manually repaired:\n{path} is part of active pool '{pool}'")
        }
        SpaError::InUse { path, pool, state } => {
            format!("invalid vdev specification\nuse '-f' to override the following errors:\n{path} is part of {state} pool '{pool}'")
        }
        SpaError::Invalid(m) if m.starts_with("invalid vdev specification") => m,
        other => state::cannot(what, other),
    }
}

fn no_such_pool(name: &str) -> Response {
    Response::err(format!("cannot open '{name}': no such pool"))
}

fn destroy(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "f") {
        Ok(p) => p,
        Err(e) => return bad_usage("destroy", &e),
    };
    let name = match p.operands.as_slice() {
        [n] => n.clone(),
        [] => return bad_usage("destroy", "missing pool argument"),
        _ => return bad_usage("destroy", "too many arguments"),
    };
    let Some(entry) = st.pools.get_mut(&name) else {
        return no_such_pool(&name);
    };
    if let Some(e) = crate::zinject::busy(&entry.pool, "destroy") {
        return Response::err(e);
    }
    let errors = zfs_mount::unmount_all(entry, p.has('f'));
    if !errors.is_empty() && !p.has('f') {
        return Response::err(format!("{}\ncannot destroy '{name}': could not unmount datasets", errors.join("\n")));
    }
    ctx.commit(&entry.pool);
    if let Err(e) = entry.pool.destroy() {
        return Response::err(state::cannot(&format!("cannot destroy '{name}'"), e));
    }
    if let Some(gone) = st.pools.remove(&name) {
        crate::cachefile::forget(&gone);
    }
    Response::ok("")
}

fn pool_column(c: &str) -> Option<(&'static str, Column)> {
    Some(match c {
        "name" => ("name", Column::left("NAME")),
        "size" => ("size", Column::right("SIZE")),
        "alloc" | "allocated" => ("allocated", Column::right("ALLOC")),
        "free" => ("free", Column::right("FREE")),
        "cap" | "capacity" => ("capacity", Column::right("CAP")),
        "frag" | "fragmentation" => ("fragmentation", Column::right("FRAG")),
        "health" => (
            "health",
            Column {
                header: "HEALTH".into(),
                align: Align::Right,
                min_width: 8,
            },
        ),
        "altroot" => ("altroot", Column::left("ALTROOT")),
        "ckpoint" | "checkpoint" => ("checkpoint", Column::right("CKPOINT")),
        "expandsz" | "expandsize" => ("expandsize", Column::right("EXPANDSZ")),
        "dedup" | "dedupratio" => ("dedupratio", Column::right("DEDUP")),
        "dedup_table_quota" => ("dedup_table_quota", Column::right("DDTQUOTA")),
        "dedup_table_size" => ("dedup_table_size", Column::right("DDTSIZE")),
        "bcloneused" => ("bcloneused", Column::right("BCLONE_USED")),
        "bclonesaved" => ("bclonesaved", Column::right("BCLONE_SAVED")),
        "bcloneratio" => ("bcloneratio", Column::right("BCLONE_RATIO")),
        "cachefile" => ("cachefile", Column::left("CACHEFILE")),
        "autotrim" => ("autotrim", Column::left("AUTOTRIM")),
        "autoexpand" | "expand" => ("autoexpand", Column::left("EXPAND")),
        "guid" => ("guid", Column::right("GUID")),
        "comment" => ("comment", Column::left("COMMENT")),
        "ashift" => ("ashift", Column::right("ASHIFT")),
        "version" => ("version", Column::right("VERSION")),
        "readonly" => ("readonly", Column::left("RDONLY")),
        "failmode" => ("failmode", Column::left("FAILMODE")),
        _ => return None,
    })
}

/// Value of a pool property; `parsable`: exact numbers.
fn pool_value(name: &str, entry: &PoolEntry, prop: &str, parsable: bool) -> (String, String) {
    let size = entry.pool.size_bytes();
    let alloc = entry.pool.alloc_bytes();
    let num = |n: u64| if parsable { n.to_string() } else { nicebytes(n) };
    let ro = "-".to_string();
    match prop {
        "name" => (name.to_string(), ro),
        "size" => (num(size), ro),
        "allocated" => (num(alloc), ro),
        "free" => (num(size.saturating_sub(alloc)), ro),
        "capacity" => {
            let cap = alloc.saturating_mul(100).checked_div(size).unwrap_or(0);
            (if parsable { cap.to_string() } else { format!("{cap}%") }, ro)
        }
        "fragmentation" => match entry.pool.fragmentation_pct() {
            Some(f) if parsable => (f.to_string(), ro),
            Some(f) => (format!("{f}%"), ro),
            None => ("-".into(), ro),
        },
        "health" => (entry.pool.health(), ro),
        "guid" => (entry.pool.guid().to_string(), ro),
        "altroot" => match &entry.altroot {
            Some(r) => (r.display().to_string(), "local".into()),
            None => ("-".into(), "default".into()),
        },
        // No checkpoints and no device growth in Tarn: OpenZFS's values for a pool
        // without them.
        "checkpoint" | "expandsize" => ("-".into(), ro),
        // Referenced over allocated bytes of the deduplicated blocks (OpenZFS
        // `ddt_get_pool_dedup_ratio`); 1.00x without any.
        "dedup_table_size" => {
            let n = entry.pool.zio().ddt().len() as u64 * tarn_zio::ddt::DDT_RECORD_BYTES as u64;
            (num(n), ro)
        }
        "dedupratio" => match entry.pool.zio().ddt().space_bytes() {
            (0, _) => (format::ratio(1, 1, parsable), ro),
            (alloc, referenced) => (format::ratio(referenced, alloc, parsable), ro),
        },
        // Block cloning (OpenZFS 2.2): bytes of the shared blocks, bytes their extra
        // references would take as copies, and (used + saved) / used.
        "bcloneused" | "bclonesaved" | "bcloneratio" => {
            let (used, saved) = entry.pool.zio().brt().space_bytes();
            match prop {
                "bcloneused" => (num(used), ro),
                "bclonesaved" => (num(saved), ro),
                _ if used == 0 => (format::ratio(1, 1, parsable), ro),
                _ => (format::ratio(used + saved, used, parsable), ro),
            }
        }
        "cachefile" => match &entry.cachefile {
            Some(c) => (c.clone(), "local".into()),
            None => ("-".into(), "default".into()),
        },
        other => entry.pool.get_prop(other).unwrap_or_else(|_| ("-".into(), "-".into())),
    }
}

fn list(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "Hpo:") {
        Ok(p) => p,
        Err(e) => return bad_usage("list", &e),
    };
    let cols_arg = p
        .last('o')
        .unwrap_or_else(|| "name,size,alloc,free,ckpoint,expandsz,frag,cap,dedup,health,altroot".into());
    let mut props = Vec::new();
    let mut cols = Vec::new();
    for c in cols_arg.split(',') {
        match pool_column(c) {
            Some((prop, col)) => {
                props.push(prop);
                cols.push(col);
            }
            None => return bad_usage("list", &format!("invalid property '{c}'")),
        }
    }
    let mut resp = Response::ok("");
    let names: Vec<String> = if p.operands.is_empty() {
        st.pools.keys().cloned().collect()
    } else {
        p.operands.clone()
    };
    let mut rows = Vec::new();
    for n in &names {
        match st.pools.get(n) {
            Some(entry) => rows.push(props.iter().map(|pr| pool_value(n, entry, pr, p.has('p')).0).collect()),
            None => {
                resp.stderr.push_str(&format!("cannot open '{n}': no such pool\n"));
                resp.code = 1;
            }
        }
    }
    if rows.is_empty() && p.operands.is_empty() {
        resp.stdout = "no pools available\n".into();
        return resp;
    }
    if !rows.is_empty() {
        resp.stdout = table(&cols, &rows, p.has('H'));
    }
    resp
}

fn status(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "vxPD") {
        Ok(p) => p,
        Err(e) => return bad_usage("status", &e),
    };
    let mut resp = Response::ok("");
    if st.pools.is_empty() && p.operands.is_empty() {
        resp.stdout = "no pools available\n".into();
        return resp;
    }
    let names: Vec<String> = if p.operands.is_empty() {
        st.pools.keys().cloned().collect()
    } else {
        p.operands.clone()
    };
    let mut blocks = Vec::new();
    for n in &names {
        let Some(entry) = st.pools.get(n) else {
            resp.stderr.push_str(&format!("cannot open '{n}': no such pool\n"));
            resp.code = 1;
            continue;
        };
        let health = entry.pool.health();
        let tree = format::device_names(entry.pool.status(), p.has('P'));
        let errs = entry.pool.data_errors().max(entry.pool.error_log().len() as u64);
        if p.has('x') && format::pool_is_healthy(&health, &tree, errs) {
            if !p.operands.is_empty() {
                blocks.push(format!("pool '{n}' is healthy\n"));
            }
            continue;
        }
        let mut block = format::pool_status(n, &health, &tree, errs);
        if let Some(s) = entry.pool.suspension() {
            // Ours beside OpenZFS's wording: why the pool suspended.
            block = block.replacen("action: Make sure", &format!("\t{s}\naction: Make sure"), 1);
        }
        if let Some(scan) = entry.pool.scan_status() {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            if scan.phys.func == tarn_spa::scan::ScanKind::Resilver && scan.phys.state == tarn_spa::scan::ScanState::Scanning {
                block = crate::scrub::with_resilver_explanation(&block);
            }
            block = block.replacen("config:\n", &format!("{}config:\n", crate::scrub::scan_lines(&scan, now)), 1);
        }
        if let Some(at) = block.find("errors: ") {
            block.truncate(at);
            if p.has('D') {
                // OpenZFS prints the dedup table's summary after the config.
                let blocks: Vec<format::DedupBlock> = entry
                    .pool
                    .zio()
                    .ddt()
                    .entries()
                    .iter()
                    .map(|(k, e)| format::DedupBlock::of_entry(k, e))
                    .collect();
                block.push_str(&format::dedup_stats(
                    &blocks,
                    tarn_zio::ddt::DDT_RECORD_BYTES as u64,
                    tarn_zio::ddt::DDT_ENTRY_CORE_BYTES as u64,
                ));
                block.push('\n');
            }
            block.push_str(&crate::scrub::errors_block(entry, errs, p.has('v')));
        }
        let refused = entry.pool.zio().refused_frees.load(std::sync::atomic::Ordering::Relaxed);
        block.push_str(&crate::scrub::refused_frees_note(n, refused));
        blocks.push(block);
    }
    if p.has('x') && blocks.is_empty() && resp.code == 0 {
        resp.stdout = "all pools are healthy\n".into();
        return resp;
    }
    resp.stdout = blocks.join("\n");
    resp
}

fn export(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "fa") {
        Ok(p) => p,
        Err(e) => return bad_usage("export", &e),
    };
    let names: Vec<String> = if p.has('a') { st.pools.keys().cloned().collect() } else { p.operands.clone() };
    if names.is_empty() {
        return bad_usage("export", "missing pool argument");
    }
    let mut resp = Response::ok("");
    for name in names {
        let Some(entry) = st.pools.get_mut(&name) else {
            resp.stderr.push_str(&format!("cannot open '{name}': no such pool\n"));
            resp.code = 1;
            continue;
        };
        if let Some(e) = crate::zinject::busy(&entry.pool, "export") {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
            continue;
        }
        // A suspended pool is released first, writing nothing (tarn_spa `suspend.rs`):
        // its file systems then answer errors instead of holding up the unmount.
        let suspended = entry.pool.suspension().is_some();
        if suspended {
            let _ = entry.pool.export();
        }
        let errors = zfs_mount::unmount_all(entry, p.has('f') || suspended);
        if !errors.is_empty() && !p.has('f') && !suspended {
            resp.stderr.push_str(&format!("{}\n", errors.join("\n")));
            resp.code = 1;
            continue;
        }
        if suspended {
            st.pools.remove(&name);
            continue;
        }
        if let Err(e) = entry.pool.export() {
            resp.stderr.push_str(&format!("{}\n", state::cannot(&format!("cannot export '{name}'"), e)));
            resp.code = 1;
            continue;
        }
        if let Some(gone) = st.pools.remove(&name) {
            crate::cachefile::forget(&gone);
        }
    }
    resp
}

fn import_dirs(st: &State, p: &args::Parsed) -> Vec<PathBuf> {
    let given = p.all('d');
    if !given.is_empty() {
        return given.into_iter().map(PathBuf::from).collect();
    }
    let mut dirs = vec![PathBuf::from("/dev")];
    for d in st.known_dirs() {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

fn import(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "ad:DfFmnNo:R:T:c:") {
        Ok(p) => p,
        Err(e) => return bad_usage("import", &e),
    };
    let dirs: Vec<PathBuf> = import_dirs(st, &p)
        .into_iter()
        .map(|d| if d.is_absolute() { d } else { args::normalize(&ctx.cwd.join(d)) })
        .collect();
    let rewind = match (p.last('T'), p.has('F')) {
        (Some(t), _) => match t.parse::<u64>() {
            Ok(n) => Rewind::Txg(n),
            Err(_) => return bad_usage("import", &format!("invalid txg value '{t}'")),
        },
        (None, true) => Rewind::Recover,
        (None, false) => Rewind::None,
    };
    let mut altroot = p.last('R').map(PathBuf::from);
    let show_destroyed = p.has('D');
    // `-n` is a dry run of the `-F` rewind and means nothing alone (OpenZFS).
    if p.has('n') && !p.has('F') {
        return bad_usage("import", "-n or -X only meaningful with -F");
    }
    let mut readonly = false;
    let mut cachefile = None;
    let mut later_props = Vec::new();
    for o in p.all('o') {
        let (k, v) = match split_prop(&o) {
            Ok(kv) => kv,
            Err(e) => return bad_usage("import", &e),
        };
        let bad = |e: String| Response::err(format!("cannot import: {e}"));
        match k.as_str() {
            "readonly" => match v.as_str() {
                "on" => readonly = true,
                "off" => readonly = false,
                _ => return bad("'readonly' must be one of 'on | off'".into()),
            },
            "cachefile" => match crate::cachefile::check_property(&v) {
                Ok(c) => cachefile = c,
                Err(e) => return bad(e),
            },
            "altroot" => altroot = Some(PathBuf::from(v)),
            _ => match Pool::check_pool_prop(&k, &v) {
                Ok(()) => later_props.push((k, v)),
                Err(e) => return bad(e.to_string()),
            },
        }
    }
    if let Some(r) = &altroot {
        if !r.is_absolute() {
            return Response::err(format!("cannot import: bad alternate root '{}'", r.display()));
        }
    }
    if readonly && !later_props.is_empty() {
        return Response::err("cannot import: pool is read-only; no other property can be set".to_string());
    }
    let opts = ImportOptions {
        rewind,
        new_name: None,
        missing_log: p.has('m'),
        // A dry run opens read-only and gives the pool back at once.
        readonly: readonly || p.has('n'),
    };
    let how = ImportHow {
        altroot,
        no_mount: p.has('N'),
        dry_run: p.has('n'),
        cachefile,
        props: later_props,
    };
    if p.operands.is_empty() || p.has('a') {
        let candidates = match Pool::find_importable(&dirs) {
            Ok(c) => c,
            Err(e) => return Response::err(format!("cannot search for pools: {e}")),
        };
        let imported: Vec<u64> = st.pools.values().map(|e| e.pool.guid()).collect();
        let candidates: Vec<_> = candidates
            .into_iter()
            .filter(|c| !imported.contains(&c.guid))
            .filter(|c| (c.state == "destroyed") == show_destroyed)
            .collect();
        if !p.has('a') {
            if candidates.is_empty() {
                return Response {
                    stdout: String::new(),
                    stderr: "no pools available to import\n".into(),
                    code: 1,
                };
            }
            // Device names as in `zpool status` (no /dev/ prefix).
            let blocks: Vec<String> = candidates
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.config = format::device_names(c.config, false);
                    format::import_candidate(&c)
                })
                .collect();
            return Response::ok(blocks.join("\n"));
        }
        let mut resp = Response::ok("");
        for c in candidates {
            let r = import_one(st, ctx, &c.guid.to_string(), None, &dirs, &opts, &how);
            resp.stdout.push_str(&r.stdout);
            resp.stderr.push_str(&r.stderr);
            resp.code = resp.code.max(r.code);
        }
        return resp;
    }
    let (which, new_name) = match p.operands.as_slice() {
        [w] => (w.clone(), None),
        [w, n] => (w.clone(), Some(n.clone())),
        _ => return bad_usage("import", "too many arguments"),
    };
    import_one(st, ctx, &which, new_name.as_deref(), &dirs, &opts, &how)
}

/// What `zpool import` does with a pool once the pool layer opened it.
struct ImportHow {
    /// `-R`/`-o altroot=`.
    altroot: Option<PathBuf>,
    /// `-N`: do not mount.
    no_mount: bool,
    /// `-n` (with `-F`): report what the rewind would do, then give the pool back.
    dry_run: bool,
    /// `-o cachefile=`.
    cachefile: Option<String>,
    /// Other `-o` pool properties, set once it is imported.
    props: Vec<(String, String)>,
}

fn import_one(st: &mut State, ctx: &Ctx, which: &str, new_name: Option<&str>, dirs: &[PathBuf], opts: &ImportOptions, how: &ImportHow) -> Response {
    if let Some(n) = new_name {
        if let Err(e) = tarn_spa::validate_pool_name(n) {
            return Response::err(state::cannot(&format!("cannot import '{which}'"), e));
        }
    }
    let target = new_name.unwrap_or(which);
    if st.pools.contains_key(target) {
        return Response::err(format!(
            "cannot import '{which}': a pool with that name already exists\n\
             use the form 'zpool import <pool | id> <newpool>' to give it a new name"
        ));
    }
    let opts = ImportOptions {
        new_name: new_name.map(String::from),
        ..opts.clone()
    };
    let pool = match Pool::import_with(which, dirs, &opts) {
        Ok(p) => p,
        Err(SpaError::NotFound(_)) => return Response::err(format!("cannot import '{which}': no such pool available")),
        Err(e @ SpaError::MissingLogs { .. }) => {
            // OpenZFS prints the list on stdout, then the error on stderr.
            let SpaError::MissingLogs { missing, .. } = &e else { unreachable!() };
            return Response {
                stdout: format!(
                    "The devices below are missing or corrupted, use '-m' to import the pool anyway:\n{}\n",
                    format::missing_vdev_tree(missing)
                ),
                stderr: format!("{e}\n"),
                code: 1,
            };
        }
        Err(e) => return Response::err(state::cannot(&format!("cannot import '{which}'"), e)),
    };
    let name = pool.name();
    if how.dry_run {
        // OpenZFS `zpool_rewind_exclaim`: nothing is printed when the newest state
        // opens as it is.
        let mut out = String::new();
        if let Some(r) = pool.rewound() {
            let (newest_s, to_s) = (r.newest_time_s, r.time_s);
            out.push_str(&format!(
                "Would be able to return {name} to its state as of {}.\n",
                crate::format::local_time(to_s, "%c")
            ));
            let loss_s = newest_s.saturating_sub(to_s);
            if loss_s > 120 {
                out.push_str(&format!("Would discard approximately {} minutes of transactions.\n", (loss_s + 30) / 60));
            } else if loss_s > 0 {
                out.push_str(&format!("Would discard approximately {loss_s} seconds of transactions.\n"));
            }
        }
        if let Err(e) = pool.export() {
            return Response::err(state::cannot(&format!("cannot import '{which}'"), e));
        }
        return Response::ok(out);
    }
    if st.pools.contains_key(&name) {
        // Imported by GUID into a name we already have: give it back.
        let _ = pool.export();
        return Response::err(format!(
            "cannot import '{which}': a pool with that name already exists\n\
             use the form 'zpool import <pool | id> <newpool>' to give it a new name"
        ));
    }
    let mut entry = PoolEntry::new(pool, how.altroot.clone());
    entry.readonly = opts.readonly;
    entry.cachefile = how.cachefile.clone();
    st.remember_dirs(state::leaves(&entry.pool.status()));
    if !entry.readonly {
        ctx.commit(&entry.pool);
    }
    let mut errors = Vec::new();
    for (k, v) in &how.props {
        if let Err(e) = entry.pool.set_prop(k, v) {
            errors.push(state::cannot(&format!("cannot set property for '{name}'"), e));
        }
    }
    if !how.no_mount {
        errors.extend(zfs_mount::mount_all(&mut entry));
    }
    // Warnings that do not fail the import (an unreadable intent log): on stderr.
    let mut resp = Response::ok("");
    for note in entry.pool.import_notes() {
        resp.stderr.push_str(&format!("warning: {note}\n"));
    }
    st.pools.insert(name.clone(), entry);
    crate::cachefile::record(st, &name, None);
    with_mount_errors(resp, errors)
}

fn get(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "Hpo:") {
        Ok(p) => p,
        Err(e) => return bad_usage("get", &e),
    };
    let Some(props_arg) = p.operands.first() else {
        return bad_usage("get", "missing property argument");
    };
    let fields: Vec<String> = match p.last('o') {
        Some(o) if o == "all" => vec!["name".into(), "property".into(), "value".into(), "source".into()],
        Some(o) => o.split(',').map(String::from).collect(),
        None => vec!["name".into(), "property".into(), "value".into(), "source".into()],
    };
    for f in &fields {
        if !["name", "property", "value", "source"].contains(&f.as_str()) {
            return bad_usage("get", &format!("invalid field '{f}'"));
        }
    }
    let props: Vec<String> = if props_arg == "all" {
        tarn_spa::Pool::prop_names()
            .iter()
            .chain(&[
                "cachefile",
                "dedupratio",
                "expandsize",
                "checkpoint",
                "bcloneused",
                "bclonesaved",
                "bcloneratio",
            ])
            .map(|s| s.to_string())
            .collect()
    } else {
        let mut v = Vec::new();
        for pr in props_arg.split(',') {
            match pool_column(pr) {
                Some((canon, _)) => v.push(canon.to_string()),
                None => return bad_usage("get", &format!("bad property list: invalid property '{pr}'")),
            }
        }
        v
    };
    let names: Vec<String> = if p.operands.len() > 1 {
        p.operands[1..].to_vec()
    } else {
        st.pools.keys().cloned().collect()
    };
    let mut resp = Response::ok("");
    let mut rows = Vec::new();
    for n in &names {
        let Some(entry) = st.pools.get(n) else {
            resp.stderr.push_str(&format!("cannot open '{n}': no such pool\n"));
            resp.code = 1;
            continue;
        };
        for pr in &props {
            let (value, source) = pool_value(n, entry, pr, p.has('p'));
            let row = fields
                .iter()
                .map(|f| match f.as_str() {
                    "name" => n.clone(),
                    "property" => pr.clone(),
                    "value" => value.clone(),
                    _ => source.clone(),
                })
                .collect();
            rows.push(row);
        }
    }
    if !rows.is_empty() {
        let cols: Vec<Column> = fields.iter().map(|f| Column::left(&f.to_ascii_uppercase())).collect();
        resp.stdout = table(&cols, &rows, p.has('H'));
    }
    resp
}

fn set(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let (kv, name) = match args {
        [kv, name] => (kv, name),
        _ => return bad_usage("set", "missing property=value or pool argument"),
    };
    let (k, v) = match split_prop(kv) {
        Ok(x) => x,
        Err(e) => return bad_usage("set", &e),
    };
    let Some(entry) = st.pools.get_mut(name) else {
        return no_such_pool(name);
    };
    let what = format!("cannot set property for '{name}'");
    if k == "cachefile" {
        let value = match crate::cachefile::check_property(&v) {
            Ok(c) => c,
            Err(e) => return Response::err(format!("{what}: {e}")),
        };
        if entry.readonly {
            return Response::err(format!("{what}: pool is read-only"));
        }
        let old = crate::cachefile::path_of(entry);
        entry.cachefile = value;
        ctx.commit(&entry.pool);
        crate::cachefile::record(st, name, old);
        return Response::ok("");
    }
    if let Err(e) = entry.pool.set_prop(&k, &v) {
        return Response::err(state::cannot(&what, e));
    }
    ctx.commit(&entry.pool);
    Response::ok("")
}

/// `zpool sync [pool ...]`: force every pool named (all with none) to sync its open
/// txg and wait until it is on disk, as OpenZFS's `zpool sync` does.
fn sync(st: &mut State, args: &[String]) -> Response {
    if let Some(flag) = args.iter().find(|a| a.starts_with('-')) {
        return bad_usage("sync", &format!("invalid option '{}'", flag.trim_start_matches('-')));
    }
    let names: Vec<String> = if args.is_empty() { st.pools.keys().cloned().collect() } else { args.to_vec() };
    let mut resp = Response::ok("");
    for n in names {
        match st.pools.get(&n) {
            None => {
                resp.stderr.push_str(&format!("cannot open '{n}': no such pool\n"));
                resp.code = 1;
            }
            Some(entry) => {
                if let Err(e) = entry.pool.sync() {
                    resp.stderr.push_str(&format!("cannot sync '{n}': {e}\n"));
                    resp.code = 1;
                }
            }
        }
    }
    resp
}

/// `zpool ddtprune -d days | -p percent pool` (OpenZFS 2.3): drop unique dedup
/// table entries last changed more than `days` ago, or that percentage of them,
/// oldest first; prints nothing on success. Usage errors and their wording follow
/// `zpool_do_ddt_prune`.
fn ddtprune(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    use tarn_zio::ddt::Prune;
    let p = match getopt(args, "d:p:") {
        Ok(p) => p,
        Err(e) => return bad_usage("ddtprune", &e),
    };
    let mut rule: Option<Prune> = None;
    for (flag, value) in &p.opts {
        let amount = value.as_deref().and_then(parse_c_u64).filter(|&n| n > 0);
        match (flag, rule) {
            ('d', Some(Prune::Percent(_))) => return bad_usage("ddtprune", "-d cannot be combined with -p option"),
            ('p', Some(Prune::ChangedBefore(_))) => return bad_usage("ddtprune", "-p cannot be combined with -d option"),
            ('d', _) => match amount.and_then(|days| days.checked_mul(86_400)) {
                Some(secs) => rule = Some(Prune::ChangedBefore(secs)),
                None => return bad_usage("ddtprune", "invalid days value"),
            },
            _ => match amount.filter(|&n| n <= 100) {
                Some(pct) => rule = Some(Prune::Percent(pct as u8)),
                None => return bad_usage("ddtprune", "invalid percentage value"),
            },
        }
    }
    let Some(mut rule) = rule else {
        return bad_usage("ddtprune", "missing amount option (-d|-p <value>)");
    };
    let name = match p.operands.as_slice() {
        [] => return bad_usage("ddtprune", "missing pool argument"),
        [n] => n.clone(),
        _ => return bad_usage("ddtprune", "too many arguments"),
    };
    let Some(entry) = st.pools.get(&name) else {
        return Response::err(format!("cannot open '{name}': no such pool"));
    };
    // `-d`: until here the age in seconds; the cutoff is now minus it. OpenZFS's
    // kernel refuses an age reaching back before the epoch (EINVAL).
    if let Prune::ChangedBefore(age_secs) = rule {
        let now_secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if age_secs >= now_secs {
            return Response::err(format!("cannot prune dedup table on '{name}': invalid argument"));
        }
        rule = Prune::ChangedBefore(now_secs - age_secs);
    }
    match entry.pool.ddt_prune(rule) {
        Ok(pruned) => {
            tracing::info!("zpool ddtprune {name}: {pruned} unique entries pruned");
            ctx.commit(&entry.pool);
            Response::ok("")
        }
        Err(e) => Response::err(format!("cannot prune dedup table on '{name}': {e}")),
    }
}

/// A number as C's `strtoull(s, _, 0)` reads it (decimal, `0x` hex, `0` octal), the
/// whole string; None otherwise.
fn parse_c_u64(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

fn history(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "") {
        Ok(p) => p,
        Err(e) => return bad_usage("history", &e),
    };
    let names: Vec<String> = if p.operands.is_empty() {
        st.pools.keys().cloned().collect()
    } else {
        p.operands.clone()
    };
    if names.is_empty() {
        return Response::ok("no pools available\n");
    }
    let mut resp = Response::ok("");
    for n in names {
        let Some(entry) = st.pools.get(&n) else {
            resp.stderr.push_str(&format!("cannot open '{n}': no such pool\n"));
            resp.code = 1;
            continue;
        };
        match entry.pool.history() {
            Ok(lines) => {
                resp.stdout.push_str(&format!("History for '{n}':\n"));
                for l in lines {
                    resp.stdout.push_str(&format::history_line(&l));
                    resp.stdout.push('\n');
                }
                resp.stdout.push('\n');
            }
            Err(e) => {
                resp.stderr.push_str(&format!("cannot get history for '{n}': {e}\n"));
                resp.code = 1;
            }
        }
    }
    resp
}

/// Leaves of a status tree whose state is not ONLINE (for messages).
pub fn unhealthy_leaves(v: &VdevStatus) -> Vec<&Path> {
    if v.children.is_empty() {
        return if v.state == "ONLINE" { vec![] } else { vec![Path::new(&v.name)] };
    }
    v.children.iter().flat_map(unhealthy_leaves).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lines_for_subcommands() {
        assert!(crate::args::usage_of(USAGE, "create").contains("create [-fn]"));
        assert!(crate::args::usage_of(USAGE, "destroy").contains("destroy [-f] <pool>"));
    }

    #[test]
    fn create_error_wording() {
        let e = SpaError::InUse {
            path: "/v/a".into(),
            pool: "old".into(),
            state: "exported".into(),
        };
        assert_eq!(
            create_error("tank", e),
            "invalid vdev specification\nuse '-f' to override the following errors:\n/v/a is part of exported pool 'old'"
        );
        assert_eq!(
            create_error("tank", SpaError::TooSmall("/v/a".into())),
            "cannot create 'tank': one or more devices is less than the minimum size (64M)"
        );
    }
}
