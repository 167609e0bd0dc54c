//! Renames of file systems and snapshots at the engine level.
//!
//! How: pools on file vdevs in a temporary directory. Renames are checked by listing
//! every name and reading data back under the new names, before and after
//! export/import; clones' origins and holds must follow; every refused rename must
//! leave the listing (names, origins, holds) exactly as it was. A power-cut loop cuts
//! the device writes at every point of a rename's txg and checks that the imported
//! pool has all the old names or all the new ones, never a mix.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_spa::{Pool, Rewind, SpaError};

mod common;
use common::{err_of, get, names, pattern, prop_value as prop, put, reimport, state};

fn new_pool(dir: &Path, name: &str) -> Arc<Pool> {
    common::mirror_pool(dir, name, 128 << 20)
}

#[test]
fn rename_moves_a_file_system_with_children_and_snapshots() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "rn1");
    for n in ["rn1/a", "rn1/a/b", "rn1/a/b/c", "rn1/other"] {
        pool.create_dataset(n, &BTreeMap::new()).unwrap();
    }
    pool.set_dataset_prop("rn1/other", "compression", "lz4").unwrap();
    let os = pool.objset("rn1/a/b").unwrap();
    let data = pattern(4, 200_000);
    let obj = put(&*os, &data);
    drop(os);
    pool.snapshot(&["rn1/a@s1".into()], true).unwrap();
    pool.clone_snapshot("rn1/a/b@s1", "rn1/cl", &BTreeMap::new(), false).unwrap();
    pool.hold("rn1/a@s1", "keep", false).unwrap();
    // Bookmarks move with their file system; others stay.
    pool.create_bookmark("rn1/a/b@s1", "rn1/a/b#bm").unwrap();
    pool.snapshot(&["rn1/other@o".into()], false).unwrap();
    pool.create_bookmark("rn1/other@o", "rn1/other#stay").unwrap();
    let plan = pool.rename_dataset_plan("rn1/a", "rn1/other/x", false).unwrap();
    assert!(plan.created.is_empty());
    let moved = |v: &[(String, String)]| v.iter().map(|(o, n)| format!("{o}>{n}")).collect::<Vec<_>>();
    assert_eq!(
        moved(&plan.datasets),
        ["rn1/a>rn1/other/x", "rn1/a/b>rn1/other/x/b", "rn1/a/b/c>rn1/other/x/b/c"]
    );
    assert_eq!(
        moved(&plan.snapshots),
        ["rn1/a/b/c@s1>rn1/other/x/b/c@s1", "rn1/a/b@s1>rn1/other/x/b@s1", "rn1/a@s1>rn1/other/x@s1"]
    );
    assert_eq!(moved(&plan.bookmarks), ["rn1/a/b#bm>rn1/other/x/b#bm"]);
    assert_eq!(pool.rename_dataset("rn1/a", "rn1/other/x", None).unwrap(), plan);
    let want = [
        "rn1",
        "rn1/cl",
        "rn1/other",
        "rn1/other@o",
        "rn1/other/x",
        "rn1/other/x@s1",
        "rn1/other/x/b",
        "rn1/other/x/b@s1",
        "rn1/other/x/b/c",
        "rn1/other/x/b/c@s1",
    ];
    let check = |pool: &Pool| {
        assert_eq!(names(pool), want);
        assert_eq!(get(&*pool.objset("rn1/other/x/b").unwrap(), obj), data);
        assert_eq!(get(&*pool.snapshot_objset("rn1/other/x/b@s1").unwrap(), obj), data);
        assert_eq!(prop(pool, "rn1/cl", "origin"), "rn1/other/x/b@s1");
        assert_eq!(prop(pool, "rn1/other/x/b@s1", "clones"), "rn1/cl");
        assert_eq!(pool.holds("rn1/other/x@s1").unwrap().keys().collect::<Vec<_>>(), ["keep"]);
        let mut bms: Vec<String> = pool.bookmarks().unwrap().into_iter().map(|b| b.name).collect();
        bms.sort();
        assert_eq!(bms, ["rn1/other#stay", "rn1/other/x/b#bm"]);
        // Inherited properties follow the new name.
        assert_eq!(pool.dataset_prop("rn1/other/x/b", "mountpoint").unwrap().0, "/rn1/other/x/b");
        assert_eq!(
            pool.dataset_prop("rn1/other/x/b", "compression").unwrap(),
            ("lz4".into(), "inherited from rn1/other".into())
        );
    };
    check(&pool);
    let pool = reimport(pool, d.path(), "rn1");
    check(&pool);
    // -p creates the missing ancestors, with the given properties, in the same txg.
    let mut off = BTreeMap::new();
    off.insert("canmount".to_string(), "off".to_string());
    assert!(pool.rename_dataset("rn1/other/x/b", "rn1/new/deep/b", None).is_err());
    let plan = pool.rename_dataset("rn1/other/x/b", "rn1/new/deep/b", Some(&off)).unwrap();
    assert_eq!(plan.created, ["rn1/new", "rn1/new/deep"]);
    assert_eq!(pool.dataset_prop("rn1/new/deep", "canmount").unwrap().0, "off");
    assert_eq!(prop(&pool, "rn1/cl", "origin"), "rn1/new/deep/b@s1");
    // A rename to the same name does nothing.
    assert_eq!(pool.rename_dataset("rn1/new", "rn1/new", None).unwrap(), Default::default());
    let pool = reimport(pool, d.path(), "rn1");
    assert_eq!(get(&*pool.objset("rn1/new/deep/b").unwrap(), obj), data);
    assert!(names(&pool).contains(&"rn1/new/deep/b/c@s1".to_string()));
    pool.export().unwrap();
}

#[test]
fn rename_snapshots_one_or_recursively() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "rn2");
    for n in ["rn2/fs", "rn2/fs/k1", "rn2/fs/k2", "rn2/fs/k1/g"] {
        pool.create_dataset(n, &BTreeMap::new()).unwrap();
    }
    pool.snapshot(&["rn2/fs@a".into()], true).unwrap();
    pool.destroy_snapshot("rn2/fs/k2@a").unwrap();
    pool.clone_snapshot("rn2/fs/k1@a", "rn2/cl", &BTreeMap::new(), false).unwrap();
    let pairs = pool.rename_snapshot("rn2/fs@a", "rn2/fs@b", true).unwrap();
    assert_eq!(pairs.len(), 3);
    let snaps = |pool: &Pool| names(pool).into_iter().filter(|n| n.contains('@')).collect::<Vec<_>>();
    assert_eq!(snaps(&pool), ["rn2/fs@b", "rn2/fs/k1@b", "rn2/fs/k1/g@b"]);
    assert_eq!(prop(&pool, "rn2/cl", "origin"), "rn2/fs/k1@b");
    // Without -r only the named snapshot moves.
    pool.rename_snapshot("rn2/fs@b", "rn2/fs@c", false).unwrap();
    assert_eq!(snaps(&pool), ["rn2/fs@c", "rn2/fs/k1@b", "rn2/fs/k1/g@b"]);
    let pool = reimport(pool, d.path(), "rn2");
    assert_eq!(snaps(&pool), ["rn2/fs@c", "rn2/fs/k1@b", "rn2/fs/k1/g@b"]);
    assert_eq!(prop(&pool, "rn2/cl", "origin"), "rn2/fs/k1@b");
    pool.export().unwrap();
}

#[test]
fn every_refused_rename_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "rn3");
    for n in ["rn3/a", "rn3/a/b", "rn3/c"] {
        pool.create_dataset(n, &BTreeMap::new()).unwrap();
    }
    pool.snapshot(&["rn3/a@s".into(), "rn3/a@t".into(), "rn3/c@s".into()], false).unwrap();
    pool.snapshot(&["rn3/a/b@t2".into()], false).unwrap();
    pool.snapshot(&["rn3/a/b@s".into()], false).unwrap();
    pool.clone_snapshot("rn3/a@s", "rn3/cl", &BTreeMap::new(), false).unwrap();
    pool.hold("rn3/a@s", "h", false).unwrap();
    let before = state(&pool);
    let long = format!("rn3/{}", "x".repeat(251));
    let none = BTreeMap::new();
    type Case<'a> = (Box<dyn Fn() -> Result<(), SpaError> + 'a>, &'a str);
    let fs = |from: &'static str, to: String, p: bool| -> Box<dyn Fn() -> Result<(), SpaError> + '_> {
        let props = if p { Some(&none) } else { None };
        let pool = pool.clone();
        Box::new(move || pool.rename_dataset(from, &to, props).map(drop))
    };
    let sn = |from: &'static str, to: &'static str, r: bool| -> Box<dyn Fn() -> Result<(), SpaError>> {
        let pool = pool.clone();
        Box::new(move || pool.rename_snapshot(from, to, r).map(drop))
    };
    let cases: Vec<Case> = vec![
        (fs("rn3/nope", "rn3/z".into(), false), "cannot open 'rn3/nope': dataset does not exist"),
        (
            fs("rn3/a", "rn3/z@x".into(), false),
            "cannot rename to 'rn3/z@x': snapshot delimiter '@' is not expected here",
        ),
        (fs("rn3/a", "rn3/z*".into(), false), "cannot rename to 'rn3/z*': invalid character '*' in name"),
        (fs("rn3/a", "rn3/q/z".into(), false), "cannot create 'rn3/q/z': parent does not exist"),
        (
            fs("rn3/a", "other/z".into(), false),
            "cannot rename to 'other/z': datasets must be within same pool",
        ),
        (
            fs("rn3/a", "rn3/a/b/z".into(), false),
            "cannot rename to 'rn3/a/b/z': New dataset name cannot be a descendant of current dataset name",
        ),
        (
            fs("rn3/a", "rn3/a/q/z".into(), true),
            "cannot rename to 'rn3/a/q/z': New dataset name cannot be a descendant of current dataset name",
        ),
        (fs("rn3/a", "rn3/c".into(), false), "cannot rename 'rn3/a': dataset already exists"),
        (fs("rn3/a/b", "rn3/a".into(), false), "cannot rename 'rn3/a/b': dataset already exists"),
        (fs("rn3", "rn3x".into(), false), "cannot create 'rn3x': missing dataset name"),
        (
            fs("rn3", "rn3/x".into(), false),
            "cannot rename to 'rn3/x': New dataset name cannot be a descendant of current dataset name",
        ),
        (fs("rn3/a", long.clone(), false), "cannot rename 'rn3/a': dataset name is too long"),
        (
            fs("rn3/a@s", "rn3/a@u".into(), false),
            "cannot open 'rn3/a@s': operation not applicable to datasets of this type",
        ),
        (sn("rn3/a@zz", "rn3/a@y", false), "cannot open 'rn3/a@zz': dataset does not exist"),
        (
            sn("rn3/a@s", "rn3/c@y", false),
            "cannot rename to 'rn3/c@y': snapshots must be part of same dataset",
        ),
        (sn("rn3/a@s", "rn3/a@y%z", false), "cannot rename to 'rn3/a@y%z': invalid character '%' in name"),
        (sn("rn3/a@s", "rn3/a@t", false), "cannot rename 'rn3/a@s': dataset already exists"),
        // rn3/a@t2 is free, rn3/a/b@t2 is not: -r renames all or nothing.
        (
            sn("rn3/a@s", "rn3/a@t2", true),
            "cannot rename 'rn3/a@s': a child dataset already has a snapshot with the new name",
        ),
    ];
    for (i, (run, want)) in cases.iter().enumerate() {
        let e = run().expect_err(&format!("case {i} ({want}) succeeded"));
        assert_eq!(e.to_string(), *want, "case {i}");
        assert_eq!(state(&pool), before, "case {i} changed something");
    }
    drop(cases);
    // A descendant whose new name would pass 255 bytes refuses the whole rename.
    pool.create_dataset(&format!("rn3/c/{}", "y".repeat(240)), &BTreeMap::new()).unwrap();
    let before = state(&pool);
    let e = err_of(pool.rename_dataset("rn3/c", "rn3/cccccccccccccccc", None));
    assert_eq!(e, "cannot rename 'rn3/c': dataset name is too long");
    assert_eq!(state(&pool), before);
    pool.export().unwrap();
}

/// One crash iteration: cut the device writes after `cut_after` writes, rename, crash,
/// import; the names must all be old or all new. Returns whether the cut dropped
/// writes and whether the import found the new names.
fn crash_one(cut_after: u64, snapshot: bool) -> (bool, bool) {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let name = format!("rnc{cut_after}{}", if snapshot { "s" } else { "f" });
    let pool = new_pool(&dir, &name);
    for n in ["a", "a/b", "a/b/c"] {
        pool.create_dataset(&format!("{name}/{n}"), &BTreeMap::new()).unwrap();
    }
    pool.snapshot(&[format!("{name}/a@s")], true).unwrap();
    pool.sync().unwrap();
    let old = names(&pool);
    let prefix = dir.display().to_string();
    let cut = tarn_vdev::inject::power_cut_after(&prefix, cut_after);
    let r = if snapshot {
        pool.rename_snapshot(&format!("{name}/a@s"), &format!("{name}/a@t"), true).map(drop)
    } else {
        pool.rename_dataset(&format!("{name}/a"), &format!("{name}/x"), None).map(drop)
    };
    let dropped = cut.dropped_writes() > 0;
    assert!(r.is_ok() || dropped, "rename failed before the cut: {r:?}");
    common::abandon(pool, &prefix);
    let pool = Pool::import(&name, std::slice::from_ref(&dir), Rewind::None, None).unwrap_or_else(|e| panic!("cut {cut_after}: import: {e}"));
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let got = sorted(names(&pool));
    let old = sorted(old);
    let new = sorted(if snapshot {
        old.iter().map(|n| n.replace("@s", "@t")).collect()
    } else {
        old.iter().map(|n| n.replacen(&format!("{name}/a"), &format!("{name}/x"), 1)).collect()
    });
    assert!(
        got == old || got == new,
        "cut after {cut_after} writes: a mix of names {got:?} (old {old:?}, new {new:?})"
    );
    if r.is_ok() && !dropped {
        assert_eq!(got, new);
    }
    pool.export().unwrap();
    (dropped, got == new)
}

#[test]
fn power_cut_during_rename_leaves_old_or_new_names() {
    let (mut cuts, mut old, mut new) = (0, 0, 0);
    // A rename (the sync it starts with, then its own txg, with the space maps' log
    // and metaslab records, aggregated into runs) takes a few dozen device writes
    // here: cut at each of the first 60.
    for (i, k) in (0u64..60).enumerate() {
        let (dropped, renamed) = crash_one(k, i % 2 == 1);
        cuts += u32::from(dropped);
        if renamed {
            new += 1;
        } else {
            old += 1;
        }
    }
    eprintln!("{cuts} cuts fell inside the rename; {old} imports found the old names, {new} the new");
    // Meaningful only if cuts land on both sides of the txg's uberblock.
    assert!(cuts >= 20 && old >= 5 && new >= 5, "{cuts} cuts, {old} old, {new} new");
}
