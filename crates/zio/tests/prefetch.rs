//! Prefetch and demand reads of the same block: a demand read that finds a prefetch
//! of its block in flight waits for it and takes the block from the cache, so the
//! device is read once.

mod common;

use common::{data_props, leaf, zio_over};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_vdev::inject::{self, Action, Delay, HandlerSpec, IoType, FREQ_ALWAYS_PPM};

#[test]
fn a_demand_read_waits_for_the_prefetch_of_its_block_instead_of_reading_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let leaf = leaf(&dir, "data", 7, 80 << 20);
    let path = dir.path().join("data");
    let zio = Arc::new(zio_over(leaf, 64 << 20));
    let data: Vec<u8> = (0..128u32 << 10).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
    let bp = zio.write_blocks(&[(Arc::new(data.clone()), data_props(4))], 1).remove(0).unwrap();
    zio.clear_cache();
    let id = inject::add_handler(HandlerSpec {
        pool: "prefetch-test".into(),
        vdev_guid: 7,
        path: path.display().to_string(),
        io_type: IoType::Read,
        action: Action::Delay(Delay::Fixed {
            latency: Duration::from_millis(300),
            lanes: 4,
        }),
        freq_ppm: FREQ_ALWAYS_PPM,
    });
    let leaf_reads = || inject::handlers().into_iter().find(|h| h.id == id).map_or(0, |h| h.match_count);
    zio.prefetch(bp);
    // Wait until the prefetch worker's read has reached the (slow) leaf.
    let start = Instant::now();
    while leaf_reads() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the prefetch never read the leaf");
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = zio.read_block(&bp).unwrap();
    let reads = leaf_reads();
    inject::remove_handler(id);
    assert_eq!(&got[..], &data[..]);
    assert_eq!(reads, 1, "the leaf saw the demand read beside the prefetch's");
    assert_eq!(
        zio.blocks_read.load(Ordering::Relaxed),
        1,
        "the demand read went to the device beside the prefetch"
    );
}

/// A stream's next blocks prefetched as one request are read together (blocks
/// adjacent on disk in one device read) and each lands in the cache verified: the
/// demand reads that follow find every one there.
#[test]
fn a_prefetch_of_adjacent_blocks_reads_them_together_into_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let leaf = leaf(&dir, "batch", 9, 80 << 20);
    let zio = Arc::new(zio_over(leaf, 64 << 20));
    let blocks: Vec<Vec<u8>> = (0..8u32)
        .map(|b| (0..128u32 << 10).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ b as u8).collect())
        .collect();
    let items: Vec<_> = blocks.iter().map(|d| (Arc::new(d.clone()), data_props(4))).collect();
    let bps: Vec<_> = zio.write_blocks(&items, 1).into_iter().map(|r| r.unwrap()).collect();
    zio.clear_cache();
    let device_reads = || zio.vdevs()[0].stats().read_ops.load(Ordering::Relaxed);
    let before = device_reads();
    zio.prefetch_blocks(&bps, tarn_zio::CachePolicy::All);
    let start = Instant::now();
    while zio.blocks_read.load(Ordering::Relaxed) < bps.len() as u64 {
        assert!(start.elapsed() < Duration::from_secs(20), "the prefetch never finished");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Eight 128 KiB blocks written together lie side by side: one 1 MiB read.
    let reads = device_reads() - before;
    assert!(reads <= 2, "{reads} device reads for eight adjacent blocks");
    let settled = zio.blocks_read.load(Ordering::Relaxed);
    for (bp, want) in bps.iter().zip(&blocks) {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &want[..]);
    }
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), settled, "every demand read was a cache hit");
}
