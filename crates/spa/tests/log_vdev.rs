//! Engine-level tests of separate intent-log vdevs (SLOGs) and of adding and removing
//! top-level vdevs on a live pool, on file vdevs.
//!
//! What they check: create with `log` and `log mirror`; that no ordinary block lands
//! on a log vdev and the pool's size leaves log space out; `zpool add` of log and
//! normal vdevs (data spreads to a new normal vdev; everything survives export and
//! import); `zpool remove` of log vdevs (a hole keeps the other ids, the next add fills
//! it, the removed device is free for another pool, the evacuation hook is called);
//! bad requests fail with OpenZFS's wording and change nothing; a pool whose log
//! device is gone refuses import unless `missing_log` (`zpool import -m`) is given.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tarn_metaslab::AllocClass;
use tarn_spa::{AddSpec, CreateSpec, ImportOptions, Pool, Rewind, SpaError, TopSpec, VdevStatus};

mod common;
use common::{get, pattern, put};

const MB: u64 = 1 << 20;

fn mkfile(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

fn spec(name: &str, vdevs: Vec<TopSpec>, logs: Vec<TopSpec>) -> CreateSpec {
    CreateSpec {
        name: name.into(),
        vdevs,
        logs,
        ..CreateSpec::default()
    }
}

/// The error of a call that must fail (`Pool` is not `Debug`, so no `unwrap_err`).
fn fails<T>(r: tarn_spa::Result<T>) -> SpaError {
    r.err().expect("must fail")
}

fn canon(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

/// (name, state, is_log) of each top-level vdev shown by status.
fn tops(pool: &Pool) -> Vec<(String, String, bool)> {
    pool.status().children.iter().map(|c| (c.name.clone(), c.state.clone(), c.is_log)).collect()
}

fn names(v: &VdevStatus) -> Vec<String> {
    v.children.iter().map(|c| c.name.clone()).collect()
}

fn import(name: &str, dir: &Path) -> Arc<Pool> {
    Pool::import(name, &[dir.to_path_buf()], Rewind::None, None).unwrap()
}

fn log_alloc(pool: &Pool) -> u64 {
    pool.zio().with_space(|s| s.class_alloc_bytes(AllocClass::Log))
}

#[test]
fn create_with_log_and_log_mirror() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (mkfile(d.path(), "a", 96 * MB), mkfile(d.path(), "b", 96 * MB));
    let (c, e, f) = (mkfile(d.path(), "c", 80 * MB), mkfile(d.path(), "e", 80 * MB), mkfile(d.path(), "f", 80 * MB));
    let pool = Pool::create(&spec(
        "slog1",
        vec![TopSpec::Mirror(vec![a.clone(), b.clone()])],
        vec![TopSpec::Leaf(c.clone()), TopSpec::Mirror(vec![e.clone(), f.clone()])],
    ))
    .unwrap();
    let expect = vec![
        ("mirror-0".to_string(), "ONLINE".to_string(), false),
        (canon(&c), "ONLINE".to_string(), true),
        ("mirror-2".to_string(), "ONLINE".to_string(), true),
    ];
    assert_eq!(tops(&pool), expect);
    let st = pool.status();
    assert_eq!(names(&st.children[2]), vec![canon(&e), canon(&f)]);
    // The pool's size is the mirror's alone.
    assert_eq!(pool.size_bytes(), st.children[0].size_bytes / 4096 * 4096);
    assert_eq!(pool.get_prop("size").unwrap().0, pool.size_bytes().to_string());
    // Data and metadata (dittos included) never land on the log vdevs.
    let os = pool.objset("slog1").unwrap();
    let data = pattern(1, 3 * MB as usize);
    let o = put(&*os, &data);
    os.wait_synced().unwrap();
    assert_eq!(log_alloc(&pool), 0);
    assert!(pool.alloc_bytes() > 3 * MB);
    // The intent log's allocator stripes over both log vdevs.
    let picks: Vec<u32> = (0..4).map(|_| pool.zio().with_space(|s| s.pick_log_vdev(&[]).unwrap())).collect();
    assert_eq!(picks, [1, 2, 1, 2]);
    assert!(!pool.log_vdevs_missing());
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = import("slog1", d.path());
    assert_eq!(tops(&pool), expect);
    assert_eq!(get(&*pool.objset("slog1").unwrap(), o), data);
    let listing = Pool::find_importable(&[d.path().to_path_buf()]).unwrap();
    assert!(listing.is_empty(), "an imported pool is not listed");
    pool.export().unwrap();
    drop(pool);
    let listing = Pool::find_importable(&[d.path().to_path_buf()]).unwrap();
    let logs: Vec<bool> = listing[0].config.children.iter().map(|c| c.is_log).collect();
    assert_eq!(logs, [false, true, true]);
}

#[test]
fn add_log_then_normal_vdev_and_data_spreads() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, c) = (mkfile(d.path(), "a", 96 * MB), mkfile(d.path(), "b", 96 * MB), mkfile(d.path(), "c", 80 * MB));
    let pool = Pool::create(&spec("add1", vec![TopSpec::Leaf(a.clone())], vec![])).unwrap();
    let os = pool.objset("add1").unwrap();
    let first = pattern(2, 2 * MB as usize);
    let o1 = put(&*os, &first);
    os.wait_synced().unwrap();
    let size_before = pool.size_bytes();
    pool.add_vdevs(&AddSpec {
        logs: vec![TopSpec::Leaf(c.clone())],
        ..AddSpec::default()
    })
    .unwrap();
    assert_eq!(pool.size_bytes(), size_before, "a log vdev adds no pool space");
    assert_eq!(tops(&pool)[1], (canon(&c), "ONLINE".to_string(), true));
    pool.add_vdevs(&AddSpec {
        vdevs: vec![TopSpec::Leaf(b.clone())],
        ..AddSpec::default()
    })
    .unwrap();
    assert!(pool.size_bytes() > size_before + 80 * MB);
    let st = pool.status();
    assert_eq!(names(&st), vec![canon(&a), canon(&c), canon(&b)]);
    assert!(st.children[2].alloc_bytes < MB, "only pool metadata so far");
    // New writes go to the emptier new vdev; none to the log vdev.
    let second = pattern(3, 8 * MB as usize);
    let o2 = put(&*os, &second);
    os.wait_synced().unwrap();
    let st = pool.status();
    assert!(st.children[2].alloc_bytes > 4 * MB, "new vdev got {} bytes", st.children[2].alloc_bytes);
    assert_eq!(st.children[1].alloc_bytes, 0);
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = import("add1", d.path());
    let os = pool.objset("add1").unwrap();
    assert_eq!(get(&*os, o1), first);
    assert_eq!(get(&*os, o2), second);
    assert_eq!(names(&pool.status()), vec![canon(&a), canon(&c), canon(&b)]);
    drop(os);
    pool.export().unwrap();
}

#[test]
fn remove_log_leaves_a_hole_and_frees_the_device() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a", 96 * MB);
    let (c, e, f, g) = (
        mkfile(d.path(), "c", 80 * MB),
        mkfile(d.path(), "e", 80 * MB),
        mkfile(d.path(), "f", 80 * MB),
        mkfile(d.path(), "g", 80 * MB),
    );
    let pool = Pool::create(&spec(
        "rm1",
        vec![TopSpec::Leaf(a.clone())],
        vec![TopSpec::Leaf(c.clone()), TopSpec::Mirror(vec![e.clone(), f.clone()])],
    ))
    .unwrap();
    let calls = Arc::new(AtomicU32::new(u32::MAX));
    let seen = calls.clone();
    pool.set_log_evacuate_hook(Box::new(move |id| {
        seen.store(id, Ordering::SeqCst);
        Ok(())
    }));
    let os = pool.objset("rm1").unwrap();
    let data = pattern(4, MB as usize);
    let o = put(&*os, &data);
    os.wait_synced().unwrap();
    pool.remove_vdev(&c.display().to_string()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the hook gets the vdev id");
    // The mirror keeps id 2 ("mirror-2"); the hole is never shown.
    let expect = vec![(canon(&a), "ONLINE".to_string(), false), ("mirror-2".to_string(), "ONLINE".to_string(), true)];
    assert_eq!(tops(&pool), expect);
    assert_eq!(pool.zio().vdev_count(), 3);
    // The removed device is no longer locked nor labelled: another pool may use it.
    let other = Pool::create(&spec("rm1other", vec![TopSpec::Leaf(c.clone())], vec![])).unwrap();
    other.destroy().unwrap();
    drop(other);
    // Writes go on; the pool imports with the hole.
    let more = pattern(5, MB as usize);
    let o2 = put(&*os, &more);
    os.wait_synced().unwrap();
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = import("rm1", d.path());
    assert_eq!(tops(&pool), expect);
    // The removed vdev's space structures (directory pages, maps) were freed.
    pool.leak_check().unwrap();
    let os = pool.objset("rm1").unwrap();
    assert_eq!((get(&*os, o), get(&*os, o2)), (data.clone(), more.clone()));
    // A removal by "mirror-N" name; without a hook the pool just syncs.
    pool.remove_vdev("mirror-2").unwrap();
    assert_eq!(tops(&pool), vec![(canon(&a), "ONLINE".to_string(), false)]);
    // The next added vdev fills the first hole (id 1); the next one takes id 2.
    pool.add_vdevs(&AddSpec {
        logs: vec![TopSpec::Leaf(g.clone()), TopSpec::Mirror(vec![e.clone(), f.clone()])],
        ..AddSpec::default()
    })
    .unwrap();
    assert_eq!(
        tops(&pool),
        vec![
            (canon(&a), "ONLINE".to_string(), false),
            (canon(&g), "ONLINE".to_string(), true),
            ("mirror-2".to_string(), "ONLINE".to_string(), true),
        ]
    );
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = import("rm1", d.path());
    assert_eq!(tops(&pool).len(), 3);
    assert_eq!(get(&*pool.objset("rm1").unwrap(), o2), more);
    pool.export().unwrap();
}

#[test]
fn bad_requests_fail_clearly_and_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (mkfile(d.path(), "a", 96 * MB), mkfile(d.path(), "b", 96 * MB));
    let (c, x, y) = (mkfile(d.path(), "c", 80 * MB), mkfile(d.path(), "x", 80 * MB), mkfile(d.path(), "y", 80 * MB));
    let small = mkfile(d.path(), "small", 32 * MB);
    // Create: raidz log, logs without a normal vdev.
    let raidz_log = TopSpec::Raidz {
        nparity: 1,
        leaves: vec![x.clone(), y.clone()],
    };
    let err = fails(Pool::create(&spec("bad1", vec![TopSpec::Leaf(a.clone())], vec![raidz_log.clone()])));
    assert_eq!(err.to_string(), "invalid vdev specification: unsupported 'log' device: raidz");
    let err = fails(Pool::create(&spec("bad1", vec![], vec![TopSpec::Leaf(c.clone())])));
    assert_eq!(
        err.to_string(),
        "invalid vdev specification\nuse '-f' to override the following errors:\nat least one general top-level vdev must be specified"
    );
    assert!(Pool::find_importable(&[d.path().to_path_buf()]).unwrap().is_empty(), "nothing was written");

    let pool = Pool::create(&spec("bad2", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![TopSpec::Leaf(c.clone())])).unwrap();
    let before = tops(&pool);
    let size = pool.size_bytes();
    let add = |vdevs: Vec<TopSpec>, logs: Vec<TopSpec>, force: bool| {
        pool.add_vdevs(&AddSpec {
            vdevs,
            logs,
            spares: Vec::new(),
            caches: Vec::new(),
            force,
        })
    };
    let msg = |r: tarn_spa::Result<()>| fails(r).to_string();
    assert_eq!(
        msg(add(vec![], vec![raidz_log.clone()], false)),
        "invalid vdev specification: unsupported 'log' device: raidz"
    );
    assert!(matches!(add(vec![], vec![TopSpec::Leaf(small.clone())], false), Err(SpaError::TooSmall(_))));
    match add(vec![], vec![TopSpec::Leaf(a.clone())], true) {
        Err(SpaError::InUse { pool, state, .. }) => assert_eq!((pool.as_str(), state.as_str()), ("bad2", "active")),
        other => panic!("adding a device of the pool itself: {other:?}"),
    }
    assert!(msg(add(vec![], vec![TopSpec::Mirror(vec![x.clone(), x.clone()])], false)).contains("is specified more than once"));
    assert!(msg(add(vec![TopSpec::Mirror(vec![x.clone()])], vec![], false)).contains("mirror requires at least 2 devices"));
    assert_eq!(
        msg(add(vec![TopSpec::Leaf(x.clone())], vec![], false)),
        "invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: pool uses mirror and new vdev is file"
    );
    assert_eq!(
        msg(add(vec![], vec![], false)),
        "invalid vdev specification: at least one toplevel vdev must be specified"
    );
    // Remove: a normal vdev, a leaf of it, an unknown device.
    let only = "only inactive hot spares, cache, or log devices can be removed";
    assert_eq!(msg(pool.remove_vdev("mirror-0")), format!("cannot remove mirror-0: {only}"));
    let a_str = a.display().to_string();
    assert_eq!(msg(pool.remove_vdev(&a_str)), format!("cannot remove {a_str}: {only}"));
    assert!(matches!(pool.remove_vdev("/no/such/dev"), Err(SpaError::NotFound(m)) if m == "cannot remove /no/such/dev: no such device in pool"));
    assert_eq!(tops(&pool), before);
    assert_eq!(pool.size_bytes(), size);
    // x and y were never labelled: a new pool can have them without -f.
    let other = Pool::create(&spec("bad3", vec![TopSpec::Mirror(vec![x.clone(), y.clone()])], vec![])).unwrap();
    other.destroy().unwrap();
    drop(other);
    // -f overrides the replication check (not the raidz-log rule).
    add(vec![TopSpec::Leaf(x.clone())], vec![], true).unwrap();
    assert_eq!(tops(&pool).len(), 3);

    // A log vdev with live blocks cannot be removed, and stays in service.
    let off = pool.zio().with_space(|s| s.vdevs[1].alloc(4096).unwrap());
    let c_str = c.display().to_string();
    let err = fails(pool.remove_vdev(&c_str));
    assert!(matches!(err, SpaError::Busy(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot remove {c_str}: log device still holds 4096 bytes of intent-log blocks")
    );
    assert_eq!(pool.zio().with_space(|s| s.pick_log_vdev(&[])), Some(1));
    assert!(tops(&pool)[1].2);
    // Once the block is freed it can go.
    pool.zio().with_space(|s| s.vdevs[1].free_now(off, 4096));
    pool.remove_vdev(&c_str).unwrap();
    assert_eq!(tops(&pool).len(), 2);
    // A failing evacuation hook aborts the removal and leaves the vdev in service.
    pool.add_vdevs(&AddSpec {
        logs: vec![TopSpec::Leaf(c.clone())],
        ..AddSpec::default()
    })
    .unwrap();
    pool.set_log_evacuate_hook(Box::new(|_| Err(SpaError::Busy("log busy".into()))));
    assert_eq!(msg(pool.remove_vdev(&c_str)), "log busy");
    assert_eq!(pool.zio().with_space(|s| s.pick_log_vdev(&[])), Some(1));
    pool.export().unwrap();
}

#[test]
fn missing_log_device_needs_missing_log_option() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a", 96 * MB);
    let (c, e, f) = (mkfile(d.path(), "c", 80 * MB), mkfile(d.path(), "e", 80 * MB), mkfile(d.path(), "f", 80 * MB));
    let pool = Pool::create(&spec(
        "miss1",
        vec![TopSpec::Leaf(a.clone())],
        vec![TopSpec::Leaf(c.clone()), TopSpec::Mirror(vec![e.clone(), f.clone()])],
    ))
    .unwrap();
    let os = pool.objset("miss1").unwrap();
    let data = pattern(6, MB as usize);
    let o = put(&*os, &data);
    os.wait_synced().unwrap();
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let dirs = [d.path().to_path_buf()];

    // One leg of the log mirror missing: DEGRADED, but it imports without -m.
    let hidden = d.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::rename(&f, hidden.join("f")).unwrap();
    let pool = import("miss1", d.path());
    assert_eq!(pool.health(), "DEGRADED");
    assert!(!pool.log_vdevs_missing());
    pool.export().unwrap();
    drop(pool);
    std::fs::rename(hidden.join("f"), &f).unwrap();

    // The single log device gone: refused, naming it.
    let c_path = canon(&c);
    std::fs::rename(&c, hidden.join("c")).unwrap();
    let err = fails(Pool::import("miss1", &dirs, Rewind::None, None));
    assert_eq!(err.to_string(), "cannot import 'miss1': one or more devices is currently unavailable");
    let SpaError::MissingLogs { pool: name, missing } = err else {
        panic!("{err:?}")
    };
    assert_eq!(name, "miss1");
    assert_eq!(missing.len(), 1);
    assert_eq!((missing[0].name.as_str(), missing[0].is_log), (c_path.as_str(), true));
    let listing = Pool::find_importable(&dirs).unwrap();
    assert_eq!(listing[0].health, "DEGRADED");
    // With -m it imports, DEGRADED, the log vdev UNAVAIL, and the pool works.
    let opts = ImportOptions {
        missing_log: true,
        ..ImportOptions::default()
    };
    let pool = Pool::import_with("miss1", &dirs, &opts).unwrap();
    assert_eq!(pool.health(), "DEGRADED");
    assert!(pool.log_vdevs_missing());
    let t = tops(&pool);
    assert_eq!(t[1].1, "UNAVAIL");
    assert!(t[1].2);
    assert_eq!(pool.zio().with_space(|s| s.pick_log_vdev(&[])), Some(2), "only the mirror is usable");
    let os = pool.objset("miss1").unwrap();
    assert_eq!(get(&*os, o), data);
    let more = pattern(7, MB as usize);
    let o2 = put(&*os, &more);
    os.wait_synced().unwrap();
    drop(os);
    pool.export().unwrap();
    drop(pool);
    // Still refused without -m; with -m the missing log vdev can be removed, after
    // which the pool imports normally.
    assert!(matches!(Pool::import("miss1", &dirs, Rewind::None, None), Err(SpaError::MissingLogs { .. })));
    let pool = Pool::import_with("miss1", &dirs, &opts).unwrap();
    pool.remove_vdev(&c_path).unwrap();
    assert_eq!(pool.health(), "ONLINE");
    assert!(!pool.log_vdevs_missing());
    pool.export().unwrap();
    drop(pool);
    let pool = import("miss1", d.path());
    assert_eq!(get(&*pool.objset("miss1").unwrap(), o2), more);
    assert_eq!(tops(&pool).len(), 2);
    pool.export().unwrap();
}

/// Abandon `pool` as a crash would; see `common::abandon`.
fn crash(pool: Arc<Pool>, prefix: &str) {
    common::abandon(pool, prefix);
}

/// A power cut at every point of `zpool add` of a log vdev and of `zpool remove`: the
/// pool imports with either the old or the new tree (the new one whenever the change
/// returned before the cut), its data intact, and the change can then be redone.
#[test]
fn power_cut_during_add_and_remove() {
    // An add makes 23 writes here (labels of the new leaf, the space map, uberblocks,
    // labels); a removal 15. Every cut point up to a couple past the end.
    let mut seen = [0u32; 2];
    for (removing, writes) in [(false, 25u64), (true, 17)] {
        for cut_after in 0..writes {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path().to_path_buf();
            let prefix = dir.display().to_string();
            let (a, c) = (mkfile(&dir, "a", 96 * MB), mkfile(&dir, "c", 80 * MB));
            let name = format!("cut{}{cut_after}", if removing { "rm" } else { "add" });
            let logs = if removing { vec![TopSpec::Leaf(c.clone())] } else { vec![] };
            let pool = Pool::create(&spec(&name, vec![TopSpec::Leaf(a.clone())], logs)).unwrap();
            let os = pool.objset(&name).unwrap();
            let data = pattern(cut_after, 300_000);
            let o = put(&*os, &data);
            os.wait_synced().unwrap();
            drop(os);
            let cut = tarn_vdev::inject::power_cut_after(&prefix, cut_after);
            let done = if removing {
                pool.remove_vdev(&c.display().to_string())
            } else {
                pool.add_vdevs(&AddSpec {
                    logs: vec![TopSpec::Leaf(c.clone())],
                    ..AddSpec::default()
                })
            };
            let before_cut = done.is_ok() && cut.dropped_writes() == 0;
            crash(pool, &prefix);
            let pool = Pool::import(&name, std::slice::from_ref(&dir), Rewind::None, None)
                .unwrap_or_else(|e| panic!("cut after {cut_after} writes (removing: {removing}): import failed: {e}"));
            assert_eq!(get(&*pool.objset(&name).unwrap(), o), data);
            let has_log = tops(&pool).len() == 2;
            if before_cut {
                assert_eq!(has_log, !removing, "cut after {cut_after}: a completed change was lost");
            }
            seen[has_log as usize] += 1;
            // Redo the change if the crash undid it.
            if has_log && removing {
                pool.remove_vdev(&c.display().to_string()).unwrap();
            } else if !has_log && !removing {
                pool.add_vdevs(&AddSpec {
                    logs: vec![TopSpec::Leaf(c.clone())],
                    ..AddSpec::default()
                })
                .unwrap_or_else(|e| panic!("cut after {cut_after}: re-adding the log device: {e}"));
            }
            assert_eq!(tops(&pool).len(), if removing { 1 } else { 2 });
            pool.export().unwrap();
            drop(pool);
            let pool = import(&name, &dir);
            assert_eq!(tops(&pool).len(), if removing { 1 } else { 2 });
            pool.leak_check()
                .unwrap_or_else(|e| panic!("cut after {cut_after} (removing: {removing}): {e}"));
            pool.export().unwrap();
        }
    }
    // The sweep must have produced both outcomes.
    assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
}
