//! The L2ARC below the pipeline: blocks fed to a cache device are served from it
//! after the ARC lost them, and nothing a cache device holds (damaged, removed,
//! stale, overwritten by the ring, or from another pool) is ever returned wrong.

mod common;

use common::{data_props, zio_over};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::{BlkPtr, CompressSetting};
use tarn_vdev::leaf::Leaf;
use tarn_vdev::Vdev;
use tarn_zio::{WriteProps, Zio};

const POOL_GUID: u64 = 0xabcdef;

fn leaf(dir: &tempfile::TempDir, name: &str, id: u32, guid: u64, size_bytes: u64) -> Arc<Vdev> {
    let p = dir.path().join(name);
    if !p.exists() {
        std::fs::File::create(&p).unwrap().set_len(size_bytes).unwrap();
    }
    let l = Leaf::open(&p).unwrap();
    Arc::new(Vdev::new_leaf(id, guid, 12, p.display().to_string(), Some(l)))
}

/// A pipeline over one 80 MiB data leaf with its own ARC of `arc_bytes`.
fn pipeline(dir: &tempfile::TempDir, arc_bytes: u64) -> Arc<Zio> {
    let a = leaf(dir, "data", 0, 100, 80 << 20);
    let zio = Arc::new(zio_over(a, arc_bytes));
    zio.l2arc().set_pool_guid(POOL_GUID);
    zio
}

/// Write `n` blocks of `len` bytes born in `txg` (batched writes also cache them).
fn write_all(zio: &Zio, n: u64, len: usize, txg: u64) -> Vec<(BlkPtr, Vec<u8>)> {
    let datas: Vec<Vec<u8>> = (0..n).map(|i| common::pattern(i + txg * 1000, len)).collect();
    let items: Vec<(Arc<Vec<u8>>, WriteProps)> = datas.iter().map(|d| (Arc::new(d.clone()), data_props(txg))).collect();
    let bps = zio.write_blocks(&items, 2);
    bps.into_iter().map(|r| r.unwrap()).zip(datas).collect()
}

fn stat(zio: &Zio, name: &str) -> u64 {
    zio.l2arc().stats().into_iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn blocks_lost_by_the_arc_are_read_from_the_cache_device() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    let cache = leaf(&dir, "cache", 0, 900, 32 << 20);
    zio.add_cache_device(cache.clone(), false, 0);
    let blocks = write_all(&zio, 40, 64 << 10, 5);
    assert!(zio.l2arc_feed() > 40 * (64 << 10), "the feed wrote less than the cached blocks");
    assert_eq!(zio.l2arc().header_count(), 40);
    assert_eq!(stat(&zio, "l2_size"), 40 * (64 << 10));
    // A second feed finds nothing new.
    assert_eq!(zio.l2arc_feed(), 0);
    zio.clear_cache();
    let pool_reads = zio.blocks_read.load(Ordering::Relaxed);
    for (bp, d) in &blocks {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), pool_reads, "the pool's leaves were read");
    assert_eq!(stat(&zio, "l2_hits"), 40);
    // The kstat of the shared ARC carries the pool's L2ARC counters.
    let s = zio.arc().stats();
    assert_eq!(s.iter().find(|(n, _, _)| *n == "l2_hits").unwrap().2, 40);
    assert!(s.iter().find(|(n, _, _)| *n == "l2_hdr_size").unwrap().2 > 0);
}

#[test]
fn prefetched_and_refused_blocks_stay_off_the_cache_device() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), false, 0);
    let blocks = write_all(&zio, 4, 8192, 5);
    zio.set_l2_eligible(&blocks[0].0, false);
    zio.clear_cache();
    // Block 1 read by a prefetch only; 2 and 3 by demand.
    zio.read_block_as(&blocks[1].0, tarn_zio::Access::Prefetch, tarn_zio::CachePolicy::All).unwrap();
    for (bp, _) in &blocks[2..] {
        zio.read_block(bp).unwrap();
    }
    zio.read_block(&blocks[0].0).unwrap();
    zio.set_l2_eligible(&blocks[0].0, false);
    zio.l2arc_feed();
    let has = |i: usize| zio.l2arc().contains(&(blocks[i].0.dva[0], blocks[i].0.birth_txg));
    assert!(!has(0), "secondarycache refused it");
    assert!(!has(1), "a prefetched block never demand-read went to the L2ARC");
    assert!(has(2) && has(3));
}

#[test]
fn a_damaged_or_removed_cache_device_never_returns_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    let cache = leaf(&dir, "cache", 0, 900, 32 << 20);
    zio.add_cache_device(cache.clone(), false, 0);
    let blocks = write_all(&zio, 20, 16 << 10, 5);
    zio.l2arc_feed();
    // Scribble over the whole ring behind the pipeline's back.
    let f = std::fs::OpenOptions::new().write(true).open(dir.path().join("cache")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&vec![0x5a; 8 << 20], 4 << 20).unwrap();
    zio.clear_cache();
    for (bp, d) in &blocks {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert!(stat(&zio, "l2_cksum_bad") > 0, "the damage went unnoticed");
    assert_eq!(zio.data_errors.load(Ordering::Relaxed), 0, "a bad cache block counted as a pool error");
    assert_eq!(cache.stats().checksum_errors.load(Ordering::Relaxed), 0);
    // Refed, then the device leaves while its headers are live.
    zio.l2arc_feed();
    assert!(zio.l2arc().header_count() > 0);
    zio.clear_cache();
    assert!(zio.l2arc().remove_device(900).is_some());
    assert_eq!(zio.l2arc().header_count(), 0);
    for (bp, d) in &blocks {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
}

#[test]
fn a_freed_block_is_never_served_from_the_cache_device() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), false, 0);
    let old = write_all(&zio, 8, 8192, 5);
    zio.l2arc_feed();
    for (bp, _) in &old {
        zio.free_now(bp);
        zio.free_block(bp, 6);
        assert!(!zio.l2arc().contains(&(bp.dva[0], bp.birth_txg)));
    }
    // The space is handed out again to blocks of a later txg.
    let new = write_all(&zio, 8, 8192, 7);
    zio.clear_cache();
    for (bp, d) in &new {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
}

#[test]
fn headers_come_back_from_the_log_blocks_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let blocks;
    {
        let zio = pipeline(&dir, 64 << 20);
        zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), false, 0);
        let mut all = Vec::new();
        for txg in 5..9 {
            all.extend(write_all(&zio, 10, 32 << 10, txg));
            zio.l2arc_feed();
        }
        assert_eq!(zio.l2arc().header_count(), 40);
        blocks = all;
    }
    // Same pool, same device: everything comes back, and reads hit.
    {
        let zio = pipeline(&dir, 64 << 20);
        let r = zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), true, 100);
        assert_eq!((r.log_blocks, r.bufs), (4, 40));
        assert_eq!(stat(&zio, "l2_rebuild_success"), 1);
        assert_eq!(stat(&zio, "l2_rebuild_bufs"), 40);
        let pool_reads = zio.blocks_read.load(Ordering::Relaxed);
        for (bp, d) in &blocks {
            assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
        }
        assert_eq!(zio.blocks_read.load(Ordering::Relaxed), pool_reads);
        assert_eq!(stat(&zio, "l2_hits"), 40);
    }
    // A rewound pool (last txg 6): blocks born later are not restored.
    {
        let zio = pipeline(&dir, 64 << 20);
        let r = zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), true, 6);
        assert_eq!(r.bufs, 20);
    }
    // Another pool, or the same file as a new device: nothing is restored.
    {
        let zio = pipeline(&dir, 64 << 20);
        zio.l2arc().set_pool_guid(POOL_GUID + 1);
        assert_eq!(zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), true, 100).bufs, 0);
        assert_eq!(stat(&zio, "l2_rebuild_unsupported"), 1);
        drop(zio);
        let zio = pipeline(&dir, 64 << 20);
        assert_eq!(zio.add_cache_device(leaf(&dir, "cache", 0, 901, 32 << 20), true, 100).bufs, 0);
    }
    // A damaged newest log block: the rebuild stops there, and reads stay right.
    {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(dir.path().join("cache")).unwrap();
        use std::os::unix::fs::FileExt;
        let len = f.metadata().unwrap().len();
        let mut all = vec![0u8; len as usize];
        f.read_exact_at(&mut all, 0).unwrap();
        // Flip the first byte of every "TARNL2LB" found (every log block).
        let mut at = 0;
        while let Some(i) = all[at..].windows(8).position(|w| w == b"TARNL2LB") {
            f.write_all_at(b"X", (at + i) as u64).unwrap();
            at += i + 8;
        }
        let zio = pipeline(&dir, 64 << 20);
        let r = zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), true, 100);
        assert_eq!(r.bufs, 0);
        assert_eq!(stat(&zio, "l2_rebuild_cksum_lb_errors"), 1);
        for (bp, d) in &blocks {
            assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
        }
    }
}

#[test]
fn the_ring_wraps_and_a_rebuild_after_it_restores_only_live_buffers() {
    let dir = tempfile::tempdir().unwrap();
    // A 20 MiB file: about 4 MiB of ring after the labels.
    let size = 20 << 20;
    let zio = pipeline(&dir, 64 << 20);
    let cache = leaf(&dir, "cache", 0, 900, size);
    zio.add_cache_device(cache.clone(), false, 0);
    let ring = cache.asize_bytes();
    let mut all = Vec::new();
    // Twice the ring's worth of 512 KiB batches.
    let batches = 2 * ring / (512 << 10);
    for txg in 5..5 + batches {
        all.extend(write_all(&zio, 8, 64 << 10, txg));
        zio.l2arc_feed();
        assert!(
            stat(&zio, "l2_asize") <= ring,
            "txg {txg}: {} bytes cached on a {ring}-byte device",
            stat(&zio, "l2_asize")
        );
    }
    assert!(stat(&zio, "l2_evict_l2") > 0, "the ring never wrapped");
    let live = zio.l2arc().header_count();
    drop((zio, cache));
    let zio = pipeline(&dir, 64 << 20);
    let r = zio.add_cache_device(leaf(&dir, "cache", 0, 900, size), true, 100);
    // Buffers evicted ahead of the hand but not yet overwritten may come back too.
    assert!(r.bufs as usize >= live && r.bufs * (64 << 10) <= ring, "rebuilt {} ({live} live)", r.bufs);
    for (bp, d) in &all {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert_eq!(stat(&zio, "l2_cksum_bad"), 0, "a rebuilt header pointed at overwritten bytes");
    assert_eq!(stat(&zio, "l2_hits"), r.bufs);
}

#[test]
fn a_feed_writes_at_most_write_max_and_more_while_the_arc_warms() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    zio.add_cache_device(leaf(&dir, "cache", 0, 900, 64 << 20), false, 0);
    let l2 = zio.l2arc();
    l2.write_max_bytes.store(256 << 10, Ordering::Relaxed);
    l2.write_boost_bytes.store(256 << 10, Ordering::Relaxed);
    write_all(&zio, 32, 64 << 10, 5);
    // The ARC has evicted nothing yet: boosted to 512 KiB of buffers (plus the log
    // block's sector).
    let n = zio.l2arc_feed();
    assert!(n > 256 << 10 && n <= (512 << 10) + 8192, "boosted feed wrote {n}");
    assert_eq!(l2.header_count(), 8);
    // Once the ARC evicts, the boost stops.
    zio.arc().set_max_bytes(1 << 20);
    write_all(&zio, 16, 64 << 10, 6);
    assert!(zio.arc().counters().evicted > 0);
    let n = zio.l2arc_feed();
    assert!(n > 0 && n <= (256 << 10) + 8192, "feed wrote {n}");
}

/// The compressed ARC (OpenZFS's): a compressed block is kept as its physical bytes
/// (the ARC's `size` counts those, `uncompressed_size` the logical ones), readers
/// get the logical bytes, and the L2ARC carries the compressed form too.
#[test]
fn compressed_blocks_stay_compressed_in_the_arc_and_the_l2arc() {
    let dir = tempfile::tempdir().unwrap();
    let zio = pipeline(&dir, 64 << 20);
    zio.add_cache_device(leaf(&dir, "cache", 0, 900, 32 << 20), false, 0);
    let stat = |name: &str| zio.arc().stats().into_iter().find(|(n, _, _)| *n == name).unwrap().2 as u64;
    // Text-like blocks that lz4 shrinks several times.
    let datas: Vec<Vec<u8>> = (0..32u64)
        .map(|i| format!("block {i}: the quick brown fox jumps over the lazy dog. ").into_bytes().repeat(2000)[..64 << 10].to_vec())
        .collect();
    let mut p = data_props(5);
    p.compression = CompressSetting::LZ4;
    let items: Vec<(Arc<Vec<u8>>, WriteProps)> = datas.iter().map(|d| (Arc::new(d.clone()), p)).collect();
    let bps: Vec<BlkPtr> = zio.write_blocks(&items, 2).into_iter().map(|r| r.unwrap()).collect();
    assert!(bps.iter().all(|b| b.psize_bytes * 4 < b.lsize_bytes), "the blocks did not compress");
    let logical = 32 * (64 << 10) as u64;
    assert_eq!(stat("uncompressed_size"), logical);
    assert!(stat("size") * 4 < logical, "ARC holds {} bytes for {logical} logical", stat("size"));
    assert_eq!(stat("compressed_size"), stat("size"));
    let reads = zio.blocks_read.load(Ordering::Relaxed);
    for (bp, d) in bps.iter().zip(&datas) {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), reads, "ARC hits went to disk");
    // Through the L2ARC: compressed on the device, logical to the reader.
    let fed = zio.l2arc_feed();
    assert!(fed < logical / 2, "the L2ARC got {fed} bytes for {logical} logical");
    zio.clear_cache();
    for (bp, d) in bps.iter().zip(&datas) {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), reads, "L2ARC hits went to the pool");
    assert_eq!(stat("l2_hits"), 32);
    assert!(stat("size") * 4 < logical, "blocks came back from the L2ARC uncompressed");
    // A block read twice in a row is decompressed once (the cache of recently
    // decompressed blocks hands out the same buffer).
    let a = zio.read_block(&bps[0]).unwrap();
    let b = zio.read_block(&bps[0]).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "decompressed twice");
    assert!(stat("overhead_size") >= 64 << 10, "the decompressed copy is not reported");
    // compressed_arc_enabled=0: blocks are cached as their logical bytes.
    zio.arc().set_compressed_enabled(false);
    zio.clear_cache();
    for (bp, d) in bps.iter().zip(&datas) {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
    }
    assert_eq!(stat("size"), logical, "compressed_arc_enabled=0 still cached compressed");
}
