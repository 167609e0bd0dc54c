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
