//! Cache devices through the pool API: created with the pool or added later, listed
//! by `status`, fed from the ARC and read after it lost the blocks, rebuilt after
//! export and import (persistent L2ARC), never in the way of an import when missing,
//! removed cleanly, refused as in use, and kept off by `secondarycache`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_dmu::ObjectStore;
use tarn_spa::{AddSpec, CreateSpec, Pool, Rewind, TopSpec};

mod common;
use common::{mkfile, pattern};

const RECORD: usize = 128 << 10;
const BLOCKS: usize = 16;
const MB: u64 = 1 << 20;

fn l2(pool: &Pool, name: &str) -> u64 {
    pool.zio().l2arc().stats().into_iter().find(|(n, _)| *n == name).unwrap().1
}

fn write_file(pool: &Pool, ds: &str, seed: u64) -> (Arc<dyn ObjectStore>, u64) {
    common::write_object(pool, ds, seed, RECORD, BLOCKS)
}

fn check_file(os: &Arc<dyn ObjectStore>, obj: u64, seed: u64) {
    let want = pattern(seed, RECORD * BLOCKS);
    let mut buf = vec![0u8; RECORD * BLOCKS];
    os.read(obj, 0, &mut buf).unwrap();
    assert!(buf == want, "file of seed {seed} reads back wrong");
}

fn create(dir: &Path, name: &str, caches: Vec<std::path::PathBuf>) -> Arc<Pool> {
    let a = mkfile(dir, &format!("{name}-a.img"), 128 * MB);
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Leaf(a)],
        caches,
        ashift: 12,
        ..CreateSpec::default()
    })
    .unwrap()
}

#[test]
fn cache_device_serves_reads_and_comes_back_warm_after_import() {
    let d = tempfile::tempdir().unwrap();
    let c = mkfile(d.path(), "c1.img", 64 * MB);
    let pool = create(d.path(), "l2a", vec![c.clone()]);
    let st = pool.status();
    assert_eq!(st.caches.len(), 1);
    assert_eq!((st.caches[0].state.as_str(), st.caches[0].name.as_str()), ("ONLINE", c.to_str().unwrap()));
    assert!(st.children.iter().all(|t| !t.name.contains("c1")), "a cache device is not a top-level vdev");
    let size_before = pool.size_bytes();
    let (os, obj) = write_file(&pool, "l2a", 7);
    assert!(pool.zio().l2arc_feed() > 0);
    assert!(pool.status().caches[0].alloc_bytes >= (RECORD * BLOCKS) as u64);
    pool.zio().clear_cache();
    let reads = pool.zio().blocks_read.load(std::sync::atomic::Ordering::Relaxed);
    check_file(&os, obj, 7);
    assert!(l2(&pool, "l2_hits") >= BLOCKS as u64, "l2_hits {}", l2(&pool, "l2_hits"));
    let pool_reads = pool.zio().blocks_read.load(std::sync::atomic::Ordering::Relaxed) - reads;
    assert!(pool_reads < BLOCKS as u64, "{pool_reads} blocks read from the pool's leaves");
    assert_eq!(pool.size_bytes(), size_before, "a cache device added capacity");
    // Export and import: the headers come back from the device's log blocks.
    pool.export().unwrap();
    drop((os, pool));
    let pool = Pool::import("l2a", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    assert!(l2(&pool, "l2_rebuild_bufs") >= BLOCKS as u64, "rebuilt {}", l2(&pool, "l2_rebuild_bufs"));
    assert_eq!(l2(&pool, "l2_rebuild_success"), 1);
    let os = pool.objset("l2a").unwrap();
    check_file(&os, obj, 7);
    assert!(l2(&pool, "l2_hits") >= BLOCKS as u64, "first reads after import missed the cache device");
    assert_eq!(pool.status().caches[0].state, "ONLINE");
    pool.export().unwrap();
}

#[test]
fn a_missing_or_damaged_cache_device_never_stops_an_import_or_a_read() {
    let d = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let c = mkfile(other.path(), "c.img", 64 * MB);
    let pool = create(d.path(), "l2m", vec![c.clone()]);
    let (_os, obj) = write_file(&pool, "l2m", 3);
    pool.zio().l2arc_feed();
    pool.export().unwrap();
    drop((_os, pool));
    // Damaged: every byte of the ring after the labels' front replaced.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&c).unwrap();
        f.write_all_at(&vec![0xa5; 32 << 20], 8 << 20).unwrap();
    }
    let pool = Pool::import("l2m", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    check_file(&pool.objset("l2m").unwrap(), obj, 3);
    assert_eq!(pool.data_errors(), 0);
    pool.export().unwrap();
    drop(pool);
    // Missing: the import goes on and lists it as UNAVAIL.
    std::fs::remove_file(&c).unwrap();
    let pool = Pool::import("l2m", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let st = pool.status();
    assert_eq!(st.caches.len(), 1);
    assert_eq!(st.caches[0].state, "UNAVAIL");
    assert_eq!(pool.health(), "ONLINE", "a missing cache device degraded the pool");
    check_file(&pool.objset("l2m").unwrap(), obj, 3);
    assert_eq!(pool.zio().l2arc_feed(), 0);
    // It can be removed while missing.
    pool.remove_vdev(c.to_str().unwrap()).unwrap();
    assert!(pool.status().caches.is_empty());
    pool.export().unwrap();
}

#[test]
fn add_remove_and_in_use_checks() {
    let d = tempfile::tempdir().unwrap();
    let pool = create(d.path(), "l2r", vec![]);
    let c = mkfile(d.path(), "c.img", 64 * MB);
    pool.add_vdevs(&AddSpec {
        caches: vec![c.clone()],
        ..AddSpec::default()
    })
    .unwrap();
    assert_eq!(pool.status().caches.len(), 1);
    // In use by this pool: neither another pool nor a second add may take it.
    let a2 = mkfile(d.path(), "x.img", 128 * MB);
    let err = common::err_of(
        Pool::create(&CreateSpec {
            name: "other".into(),
            vdevs: vec![TopSpec::Leaf(a2.clone())],
            caches: vec![c.clone()],
            ..CreateSpec::default()
        })
        .map(|_| ()),
    );
    assert!(err.contains("is in use and contains an imported pool"), "{err}");
    assert!(pool
        .add_vdevs(&AddSpec {
            caches: vec![c.clone()],
            ..AddSpec::default()
        })
        .is_err());
    // Listed in the labels: it survives export and import.
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("l2r", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    assert_eq!(pool.status().caches.len(), 1);
    assert_eq!(pool.status().caches[0].state, "ONLINE");
    pool.remove_vdev(c.to_str().unwrap()).unwrap();
    assert!(pool.status().caches.is_empty());
    assert!(pool.zio().l2arc().is_empty());
    // Its labels are cleared: a new pool takes it without -f.
    let p2 = Pool::create(&CreateSpec {
        name: "other".into(),
        vdevs: vec![TopSpec::Leaf(a2)],
        caches: vec![c],
        ..CreateSpec::default()
    })
    .unwrap();
    assert_eq!(p2.status().caches.len(), 1);
    p2.export().unwrap();
    pool.export().unwrap();
}

#[test]
fn secondarycache_keeps_a_dataset_off_the_cache_device() {
    let d = tempfile::tempdir().unwrap();
    let pool = create(d.path(), "l2s", vec![mkfile(d.path(), "c.img", 64 * MB)]);
    let none = BTreeMap::new();
    pool.create_dataset("l2s/off", &none).unwrap();
    pool.create_dataset("l2s/on", &none).unwrap();
    pool.set_dataset_prop("l2s/off", "secondarycache", "none").unwrap();
    let (_a, _) = write_file(&pool, "l2s/off", 1);
    let before = pool.zio().l2arc().header_count();
    pool.zio().l2arc_feed();
    let off_fed = pool.zio().l2arc().header_count() - before;
    assert!(off_fed < BLOCKS, "{off_fed} headers after feeding a secondarycache=none dataset");
    let (_b, _) = write_file(&pool, "l2s/on", 2);
    pool.zio().l2arc_feed();
    let on_fed = pool.zio().l2arc().header_count() - before - off_fed;
    assert!(on_fed >= BLOCKS, "only {on_fed} headers after feeding a secondarycache=all dataset");
    pool.export().unwrap();
}
