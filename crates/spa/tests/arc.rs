//! The ARC through the pool API, judged by its counters: `primarycache=all|metadata|
//! none` (inherited by a child) decides what a dataset's reads and writes leave in the
//! cache, and a rewritten or freed block is never served from it. One test function:
//! the process's ARC is shared by every pool in it, so nothing else may run beside it.

use std::collections::BTreeMap;
use std::sync::Arc;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::{CreateSpec, Pool, TopSpec};
use tarn_zio::arc::{ArcCounters, Policy};

mod common;
use common::pattern;

const RECORD: usize = 128 << 10;
const BLOCKS: usize = 24;

fn write_file(pool: &Pool, ds: &str, seed: u64) -> (Arc<dyn ObjectStore>, u64) {
    common::write_object(pool, ds, seed, RECORD, BLOCKS)
}

/// Read the file one record at a time, backwards (so no sequential stream starts
/// prefetching), and return the counter changes.
fn read_back(pool: &Pool, os: &Arc<dyn ObjectStore>, obj: u64, seed: u64) -> ArcCounters {
    let before = pool.zio().arc().counters();
    let want = pattern(seed, RECORD * BLOCKS);
    let mut buf = vec![0u8; RECORD];
    for b in (0..BLOCKS).rev() {
        os.read(obj, (b * RECORD) as u64, &mut buf).unwrap();
        assert!(buf[..] == want[b * RECORD..(b + 1) * RECORD], "block {b} differs");
    }
    let after = pool.zio().arc().counters();
    ArcCounters {
        demand_data_hits: after.demand_data_hits - before.demand_data_hits,
        demand_data_misses: after.demand_data_misses - before.demand_data_misses,
        demand_metadata_hits: after.demand_metadata_hits - before.demand_metadata_hits,
        demand_metadata_misses: after.demand_metadata_misses - before.demand_metadata_misses,
        ..ArcCounters::default()
    }
}

#[test]
fn primarycache_and_stale_blocks_by_counters() {
    let d = tempfile::tempdir().unwrap();
    let dev = d.path().join("a.img");
    std::fs::File::create(&dev).unwrap().set_len(256 << 20).unwrap();
    let pool = Pool::create(&CreateSpec {
        name: "arcp".into(),
        vdevs: vec![TopSpec::Leaf(dev)],
        ashift: 12,
        ..CreateSpec::default()
    })
    .unwrap();
    let none = BTreeMap::new();
    for ds in ["arcp/all", "arcp/meta", "arcp/none", "arcp/none/child"] {
        pool.create_dataset(ds, &none).unwrap();
    }
    pool.set_dataset_prop("arcp/meta", "primarycache", "metadata").unwrap();
    pool.set_dataset_prop("arcp/none", "primarycache", "none").unwrap();
    assert!(pool.set_dataset_prop("arcp/all", "primarycache", "some").is_err());
    assert!(pool.set_dataset_prop("arcp/all", "secondarycache", "ssd").is_err());

    // primarycache=all: written blocks are cached, a read after the write hits.
    let (os, obj) = write_file(&pool, "arcp/all", 1);
    let c = read_back(&pool, &os, obj, 1);
    assert_eq!((c.demand_data_hits, c.demand_data_misses), (BLOCKS as u64, 0), "{c:?}");
    // Cold: the first pass misses, the second hits every data block.
    pool.zio().clear_cache();
    let c = read_back(&pool, &os, obj, 1);
    assert_eq!(c.demand_data_misses, BLOCKS as u64, "{c:?}");
    let c = read_back(&pool, &os, obj, 1);
    assert_eq!(
        (c.demand_data_hits, c.demand_data_misses, c.demand_metadata_misses),
        (BLOCKS as u64, 0, 0),
        "{c:?}"
    );

    // primarycache=metadata: data blocks always miss (written ones were dropped too),
    // metadata blocks hit once read.
    let (os, obj) = write_file(&pool, "arcp/meta", 2);
    let c = read_back(&pool, &os, obj, 2);
    assert_eq!((c.demand_data_hits, c.demand_data_misses), (0, BLOCKS as u64), "{c:?}");
    let c = read_back(&pool, &os, obj, 2);
    assert_eq!(
        (c.demand_data_hits, c.demand_data_misses, c.demand_metadata_misses),
        (0, BLOCKS as u64, 0),
        "{c:?}"
    );

    // primarycache=none, inherited by the child: nothing stays, data or metadata.
    for (ds, seed) in [("arcp/none", 3), ("arcp/none/child", 4)] {
        let (os, obj) = write_file(&pool, ds, seed);
        read_back(&pool, &os, obj, seed);
        let c = read_back(&pool, &os, obj, seed);
        assert_eq!((c.demand_data_hits, c.demand_data_misses), (0, BLOCKS as u64), "{ds}: {c:?}");
        assert_eq!(c.demand_metadata_hits, 0, "{ds}: {c:?}");
    }
    // Back to all (inherit): reads cache again.
    pool.inherit_dataset_prop("arcp/none", "primarycache").unwrap();
    let os = pool.objset("arcp/none").unwrap();
    let (_, obj) = write_file(&pool, "arcp/none", 5);
    let c = read_back(&pool, &os, obj, 5);
    assert_eq!(c.demand_data_hits, BLOCKS as u64, "{c:?}");

    // Rewritten blocks: the cached old version (same object, same offsets) is never
    // served; every read returns the new bytes, from the cache (just written).
    let (os, obj) = write_file(&pool, "arcp/all", 6);
    read_back(&pool, &os, obj, 6);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &pattern(7, RECORD * BLOCKS)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let c = read_back(&pool, &os, obj, 7);
    assert_eq!(c.demand_data_hits, BLOCKS as u64);
    // Freed: deleting the object drops its blocks from the ARC (headers deleted).
    let deleted = pool.zio().arc().counters().deleted;
    let tx = os.hold_tx().unwrap();
    os.free_object(&tx, obj).unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(pool.zio().arc().counters().deleted >= deleted + BLOCKS as u64, "freed blocks stayed in the ARC");
    pool.zio().arc().check().unwrap();

    // Scan resistance through the pool: an ARC of 4 MiB, a hot file of 1 MiB read
    // four times, then one sequential read of a 16 MiB file (4× the ARC, prefetch
    // running), then the hot file again: the ARC keeps all of it; an LRU and the old
    // FIFO cache lose it all.
    let arc = pool.zio().arc().clone();
    arc.set_min_bytes(1 << 20);
    arc.set_max_bytes(4 << 20);
    let os = pool.objset("arcp/all").unwrap();
    let tx = os.hold_tx().unwrap();
    let hot = os.create_object(&tx, ObjectType::FileData, 512, RECORD as u32, &[]).unwrap();
    os.write(&tx, hot, 0, &pattern(8, 8 * RECORD)).unwrap();
    let scan = os.create_object(&tx, ObjectType::FileData, 512, RECORD as u32, &[]).unwrap();
    os.write(&tx, scan, 0, &pattern(9, 128 * RECORD)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let mut hot_hits = Vec::new();
    for policy in [Policy::Arc, Policy::Lru, Policy::Fifo] {
        arc.set_policy(policy);
        let mut buf = vec![0u8; RECORD];
        let read_hot = || {
            let mut b = vec![0u8; RECORD];
            for i in (0..8).rev() {
                os.read(hot, (i * RECORD) as u64, &mut b).unwrap();
            }
        };
        for _ in 0..4 {
            read_hot();
        }
        for i in 0..128 {
            os.read(scan, (i * RECORD) as u64, &mut buf).unwrap();
            assert!(arc.size_bytes() <= 4 << 20);
        }
        let before = arc.counters().demand_data_hits;
        read_hot();
        hot_hits.push(arc.counters().demand_data_hits - before);
        arc.check().unwrap();
    }
    assert_eq!(hot_hits, [8, 0, 0], "hot-set hits after a scan with arc, lru, fifo");
    pool.export().unwrap();
}
