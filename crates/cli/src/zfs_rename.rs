//! # zfs_rename — `zfs rename`
//!
//! Theory: the engine (`tarn_spa`'s rename module) re-keys names in one txg; this
//! module speaks OpenZFS's syntax (`zfs_do_rename`, libzfs `zfs_rename`) and keeps the
//! mounts in line, as libzfs's changelist does for `ZFS_PROP_NAME`:
//!
//! 1. every check (options, names, pools, the engine's [`tarn_spa::Pool::rename_dataset_plan`])
//!    before anything is touched;
//! 2. the mounted file systems that move are unmounted, children first;
//! 3. the engine renames (and with `-p` creates the missing ancestors);
//! 4. the ancestors `-p` created are mounted like new file systems, then the moved
//!    file systems that were mounted are mounted again, parents first, at their new
//!    mountpoints (an inherited mountpoint follows the name). If the engine refused,
//!    they are mounted again where they were.
//!
//! With `-u`, or when the file system's mountpoint is `none` or `legacy` (OpenZFS's
//! rule), nothing is unmounted: the mounts keep their old mountpoints under the new
//! names. Snapshot renames touch no mount. The caller holds the daemon's state lock.
//!
//! Limits: `-f` (force the unmounts) is not implemented and is refused as an unknown
//! option; volumes do not exist yet.

use std::collections::BTreeMap;

use crate::args::getopt;
use crate::proto::Response;
use crate::state::{Ctx, PoolEntry, State};
use crate::zfs_mount;
use crate::zfs_snap::pool_of;

const RENAME_USAGE: &str = "usage:\n\
\trename [-f] <filesystem|snapshot> <filesystem|snapshot>\n\
\trename -p [-f] <filesystem> <filesystem>\n\
\trename -u [-f] <filesystem> <filesystem>\n\
\trename -r <snapshot> <snapshot>\n";

fn usage(msg: &str) -> Response {
    Response::usage(format!("{msg}\n{RENAME_USAGE}"))
}

/// `zfs rename [-fpru] source target`; `-f` unmounts busy file systems that move.
pub fn rename(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    let p = match getopt(args, "fpru") {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    let (from, to) = match p.operands.as_slice() {
        [] => return usage("missing source dataset argument"),
        [_] => return usage("missing target dataset argument"),
        [f, t] => (f.clone(), t.clone()),
        _ => return usage("too many arguments"),
    };
    let parents = p.opts.iter().filter(|(c, _)| *c == 'p').count();
    let (recursive, nounmount) = (p.has('r'), p.has('u'));
    if recursive && parents > 0 {
        return usage("-p and -r options are mutually exclusive");
    }
    if nounmount && parents > 0 {
        return usage("-u and -p options are mutually exclusive");
    }
    if recursive && !from.contains('@') {
        return usage("source dataset for recursive rename must be a snapshot");
    }
    let Some(entry) = st.pools.get_mut(pool_of(&from)) else {
        return Response::err(format!("cannot open '{from}': dataset does not exist"));
    };
    let resp = if let Some((fs, _)) = from.split_once('@') {
        if parents > 0 || nounmount {
            // OpenZFS opens the source as a file system for -p and -u.
            if !entry.pool.snapshots_of(fs).contains(&from) {
                return Response::err(format!("cannot open '{from}': dataset does not exist"));
            }
            return Response::err(format!("cannot open '{from}': operation not applicable to datasets of this type"));
        }
        // `@new` and `new` abbreviate `fs@new`.
        let target = match to.find('@') {
            None => format!("{fs}@{to}"),
            Some(0) => format!("{fs}{to}"),
            Some(_) => to.clone(),
        };
        match entry.pool.rename_snapshot(&from, &target, recursive) {
            Ok(_) => Response::ok(""),
            Err(e) => Response::err(e.to_string()),
        }
    } else {
        let pool_known = st.pools.contains_key(pool_of(&to));
        let Some(entry) = st.pools.get_mut(pool_of(&from)) else {
            return Response::err(format!("cannot open '{from}': dataset does not exist"));
        };
        rename_fs(entry, &from, &to, parents, nounmount, p.has('f'), pool_known)
    };
    if resp.code == 0 {
        if let Some(entry) = st.pools.get(pool_of(&from)) {
            ctx.commit(&entry.pool);
        }
    }
    resp
}

/// A file-system rename with its unmounts and mounts (see the module docs).
/// `target_pool_known`: whether a pool named like the target's first component is
/// imported (OpenZFS says "no such pool" otherwise).
fn rename_fs(entry: &mut PoolEntry, from: &str, to: &str, parents: usize, nounmount: bool, force: bool, target_pool_known: bool) -> Response {
    let plan = match entry.pool.rename_dataset_plan(from, to, parents > 0) {
        Ok(plan) => plan,
        Err(e) => {
            let msg = e.to_string();
            if msg.ends_with("datasets must be within same pool") && !target_pool_known {
                return Response::err(format!("cannot create '{to}': no such pool '{}'", pool_of(to)));
            }
            return Response::err(msg);
        }
    };
    if plan.datasets.is_empty() {
        return Response::ok("");
    }
    let infos = entry.pool.list_datasets().unwrap_or_default();
    let mountpoint = infos.iter().find(|i| i.name == from).map(|i| zfs_mount::prop(i, "mountpoint").to_string());
    let nounmount = nounmount || matches!(mountpoint.as_deref(), Some("none" | "legacy"));
    // 2. Unmount, children first, what moves and is mounted.
    let mut unmounted: Vec<(String, String)> = Vec::new();
    if !nounmount {
        for (old, new) in plan.datasets.iter().rev() {
            if !entry.mounts.contains_key(old) {
                continue;
            }
            if let Err(e) = zfs_mount::unmount_one_ext(entry, old, force) {
                let mut resp = Response::err(e);
                remount(entry, unmounted.iter().rev().map(|(o, _)| o.as_str()), &mut resp);
                return resp;
            }
            unmounted.push((old.clone(), new.clone()));
        }
    }
    // 3. The rename; `-pp` creates the ancestors with canmount=off.
    let mut props = BTreeMap::new();
    if parents > 1 {
        props.insert("canmount".to_string(), "off".to_string());
    }
    let parent_props = (parents > 0).then_some(&props);
    if let Err(e) = entry.pool.rename_dataset(from, to, parent_props) {
        let mut resp = Response::err(e.to_string());
        remount(entry, unmounted.iter().rev().map(|(o, _)| o.as_str()), &mut resp);
        return resp;
    }
    let mut resp = Response::ok("");
    if nounmount {
        // The mounts stay where they are, under their new names.
        for (old, new) in &plan.datasets {
            if let Some(m) = entry.mounts.remove(old) {
                entry.mounts.insert(new.clone(), m);
            }
        }
        return resp;
    }
    // 4. New ancestors as `zfs create -p` mounts them, then the moved ones.
    let infos = entry.pool.list_datasets().unwrap_or_default();
    for c in &plan.created {
        let Some(info) = infos.iter().find(|i| i.name == *c) else { continue };
        if zfs_mount::canmount(info) == "on" && zfs_mount::effective_mountpoint(info, entry.altroot.as_deref()).is_some() {
            if let Err(e) = zfs_mount::mount_one(entry, info, false) {
                resp.stderr.push_str(&format!("{e}\n"));
                resp.code = 1;
            }
        }
    }
    remount(entry, unmounted.iter().rev().map(|(_, n)| n.as_str()), &mut resp);
    resp
}

/// Mount `names` (parents first) again, adding failures to `resp`.
fn remount<'a>(entry: &mut PoolEntry, names: impl Iterator<Item = &'a str>, resp: &mut Response) {
    let infos = entry.pool.list_datasets().unwrap_or_default();
    for n in names {
        let Some(info) = infos.iter().find(|i| i.name == n) else { continue };
        if let Err(e) = zfs_mount::mount_one(entry, info, true) {
            resp.stderr.push_str(&format!("{e}\n"));
            resp.code = 1;
        }
    }
}
