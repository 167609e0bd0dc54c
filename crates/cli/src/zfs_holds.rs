//! # zfs_holds — `zfs hold`, `zfs release`, `zfs holds` and `zfs destroy -d`
//!
//! Theory: the engine (`tarn_spa`'s holds module) keeps the holds on disk and decides
//! what a release or a deferred destroy destroys; this module speaks OpenZFS's syntax
//! (`zfs_main.c`: `zfs_do_hold_rele_impl`, `zfs_do_holds`, `print_holds`) and output.
//! As there, each snapshot operand of `hold`/`release` is one engine call (one txg):
//! an error on one operand is printed and the others still run, and the exit status
//! is 1 if any failed. `zfs holds` prints NAME, TAG and TIMESTAMP, the first two
//! columns as wide as their longest value, then "no datasets available" on stderr when
//! no snapshot was found. Snapshots are never mounted, so nothing here touches mounts.
//! The caller holds the daemon's state lock.

use crate::args::{getopt, Parsed};
use crate::proto::Response;
use crate::state::{Ctx, PoolEntry, State};
use crate::zfs_snap::pool_of;

const HOLD_USAGE: &str = "usage:\n\thold [-r] <tag> <snapshot> ...\n";
const RELEASE_USAGE: &str = "usage:\n\trelease [-r] <tag> <snapshot> ...\n";
const HOLDS_USAGE: &str = "usage:\n\tholds [-rHp] <snapshot> ...\n";

fn usage(u: &str, msg: &str) -> Response {
    if msg.is_empty() {
        Response::usage(u)
    } else {
        Response::usage(format!("{msg}\n{u}"))
    }
}

fn fs_of(name: &str) -> &str {
    name.split_once('@').map(|(f, _)| f).unwrap_or(name)
}

/// Append one line to stderr and mark the response failed.
fn fail(resp: &mut Response, msg: impl std::fmt::Display) {
    resp.stderr.push_str(&format!("{msg}\n"));
    resp.code = 1;
}

/// `zfs hold [-r] tag snap…`.
pub fn hold(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    hold_release(st, ctx, args, true)
}

/// `zfs release [-r] tag snap…`.
pub fn release(st: &mut State, ctx: &Ctx, args: &[String]) -> Response {
    hold_release(st, ctx, args, false)
}

fn hold_release(st: &mut State, ctx: &Ctx, args: &[String], holding: bool) -> Response {
    let u = if holding { HOLD_USAGE } else { RELEASE_USAGE };
    let p = match getopt(args, "r") {
        Ok(p) => p,
        Err(e) => return usage(u, &e),
    };
    let [tag, snaps @ ..] = p.operands.as_slice() else {
        return usage(u, "");
    };
    if snaps.is_empty() {
        return usage(u, "");
    }
    if holding && tag.starts_with('.') {
        // Tags starting with '.' are reserved for libzfs (OpenZFS's rule).
        return usage(u, "tag may not start with '.'");
    }
    if tag.is_empty() {
        return usage(u, "tag may not be empty");
    }
    let mut resp = Response::ok("");
    for snap in snaps {
        if !snap.contains('@') {
            fail(&mut resp, format!("'{snap}' is not a snapshot"));
            continue;
        }
        let Some(entry) = st.pools.get(pool_of(snap)) else {
            fail(&mut resp, format!("cannot open '{}': dataset does not exist", fs_of(snap)));
            continue;
        };
        let r = if holding {
            entry.pool.hold(snap, tag, p.has('r')).map(drop)
        } else {
            entry.pool.release(snap, tag, p.has('r')).map(drop)
        };
        match r {
            Ok(()) => {
                ctx.commit(&entry.pool);
            }
            Err(e) => fail(&mut resp, e),
        }
    }
    resp
}

/// `zfs holds [-rHp] snap…`.
pub fn holds(st: &mut State, args: &[String]) -> Response {
    let p = match getopt(args, "rHp") {
        Ok(p) => p,
        Err(e) => return usage(HOLDS_USAGE, &e),
    };
    if p.operands.is_empty() {
        return usage(HOLDS_USAGE, "");
    }
    let mut resp = Response::ok("");
    let mut found: Vec<(String, Vec<(String, u64)>)> = Vec::new();
    for snap in &p.operands {
        if !snap.contains('@') {
            fail(&mut resp, format!("'{snap}' is not a snapshot"));
            continue;
        }
        let missing = if p.has('r') { fs_of(snap) } else { snap.as_str() };
        let Some(entry) = st.pools.get(pool_of(snap)) else {
            fail(&mut resp, format!("cannot open '{missing}': dataset does not exist"));
            continue;
        };
        match entry.pool.holds_of(snap, p.has('r')) {
            Ok(list) => {
                for (name, tags) in list {
                    if !found.iter().any(|(n, _)| *n == name) {
                        found.push((name, tags.into_iter().collect()));
                    }
                }
            }
            Err(e) => fail(&mut resp, e),
        }
    }
    resp.stdout = print_holds(&found, p.has('H'), p.has('p'));
    if found.is_empty() {
        resp.stderr.push_str("no datasets available\n");
    }
    resp
}

/// OpenZFS's `print_holds`: a header unless `scripted`; NAME as wide as the longest
/// snapshot name looked at and TAG as the longest tag (no minimum: a header word may
/// overflow its column, as there); TIMESTAMP as `ctime` or, `parsable`, seconds.
fn print_holds(found: &[(String, Vec<(String, u64)>)], scripted: bool, parsable: bool) -> String {
    let nw = found.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let tw = found.iter().flat_map(|(_, t)| t.iter().map(|(tag, _)| tag.len())).max().unwrap_or(0);
    let mut out = String::new();
    if !scripted {
        out.push_str(&format!("{:<nw$}  {:<tw$}  TIMESTAMP\n", "NAME", "TAG"));
    }
    for (name, tags) in found {
        for (tag, time_s) in tags {
            let when = if parsable { time_s.to_string() } else { crate::zfs::ctime(*time_s as i64) };
            if scripted {
                out.push_str(&format!("{name}\t{tag}\t{when}\n"));
            } else {
                out.push_str(&format!("{name:<nw$}  {tag:<tw$}  {when}\n"));
            }
        }
    }
    out
}

/// `zfs destroy -d [-nvrR] fs@snap[%snap][,…]`, after `zfs_snap` expanded the ranges
/// into `targets`: with `-r` the same snapshots of descendants join; with `-R` their
/// clones (and dependents) are destroyed first. Each snapshot that then has neither
/// holds nor clones is destroyed; the others get `defer_destroy` = on. Missing names
/// are skipped, as `lzc_destroy_snaps` does.
pub(crate) fn destroy_deferred(entry: &mut PoolEntry, ctx: &Ctx, targets: &[String], p: &Parsed) -> Response {
    let mut snaps: Vec<String> = Vec::new();
    for t in targets {
        let below = match entry.pool.holds_of(t, p.has('r') || p.has('R')) {
            Ok(v) => v.into_iter().map(|(n, _)| n).collect(),
            Err(_) => Vec::new(),
        };
        for n in below {
            if !snaps.contains(&n) {
                snaps.push(n);
            }
        }
    }
    if snaps.is_empty() {
        return Response::err("could not find any snapshots to destroy; check snapshot names.");
    }
    // -R: the clones of those snapshots, with their descendants and dependents, first.
    let infos = entry.pool.list_all().unwrap_or_default();
    let mut clones_first: Vec<String> = Vec::new();
    if p.has('R') {
        for s in &snaps {
            let clones = infos.iter().find(|i| i.name == *s).map(|i| crate::zfs_mount::prop(i, "clones").to_string());
            for c in clones.unwrap_or_default().split(',').filter(|c| !c.is_empty()) {
                match entry.pool.destroy_plan(c, true, true) {
                    Ok(v) => {
                        for x in v {
                            if !clones_first.contains(&x) {
                                clones_first.push(x);
                            }
                        }
                    }
                    Err(e) => return Response::err(crate::state::cannot(&format!("cannot destroy '{c}'"), e)),
                }
            }
        }
    }
    let mut plan = clones_first.clone();
    plan.extend(snaps.iter().cloned());
    let used: u64 = plan.iter().filter_map(|n| infos.iter().find(|i| i.name == *n)).map(|i| i.used_bytes).sum();
    if p.has('n') {
        return Response::ok(if p.has('v') {
            crate::zfs_snap::destroy_report(&plan, "would", Some(used))
        } else {
            String::new()
        });
    }
    if let Err(e) = crate::zfs_snap::destroy_victims(entry, &clones_first, p.has('f')) {
        return Response::err(e);
    }
    if let Err(e) = entry.pool.defer_destroy(&snaps) {
        return Response::err(e.to_string());
    }
    ctx.commit(&entry.pool);
    Response::ok(if p.has('v') {
        crate::zfs_snap::destroy_report(&plan, "will", Some(used))
    } else {
        String::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_table() {
        let found = vec![
            ("tank/fs@a".to_string(), vec![("keep".to_string(), 0u64), ("backup-2024".to_string(), 60)]),
            ("tank/fs/kid@a".to_string(), vec![]),
        ];
        let t = print_holds(&found, false, true);
        assert_eq!(
            t,
            "NAME           TAG          TIMESTAMP\n\
             tank/fs@a      keep         0\n\
             tank/fs@a      backup-2024  60\n"
        );
        assert_eq!(print_holds(&found, true, true), "tank/fs@a\tkeep\t0\ntank/fs@a\tbackup-2024\t60\n");
        // No holds at all: the header only, its words unpadded.
        assert_eq!(print_holds(&[], false, false), "NAME  TAG  TIMESTAMP\n");
        assert_eq!(print_holds(&[], true, false), "");
        // Without -p the time reads as `creation` does, in the TIMESTAMP column.
        let t = print_holds(&found[..1], false, false);
        let col = t.find("TIMESTAMP").unwrap();
        let row = t.lines().nth(1).unwrap();
        assert_eq!(row[col..], crate::zfs::ctime(0), "{t}");
    }
}
