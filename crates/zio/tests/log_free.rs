//! `Zio::free_log_dvas`: a txg sync's frees of many log blocks at once, adjacent
//! blocks as one range, each block freed exactly once and a block that is not
//! allocated refused and counted, as `Zio::free_dva` does one at a time.

mod common;

use common::{leaf, zio_over};
use std::sync::atomic::Ordering;
use tarn_phys::Dva;

#[test]
fn log_blocks_freed_together_match_block_by_block_frees() {
    let dir = tempfile::tempdir().unwrap();
    let zio = zio_over(leaf(&dir, "logfree", 31, 80 << 20), 64 << 20);
    let base = zio.alloc_bytes();
    let mut dvas: Vec<Dva> = (0..12).map(|_| zio.alloc_log_block(8 << 10, 0, &[]).unwrap()).collect();
    let allocated = zio.alloc_bytes() - base;
    assert_eq!(allocated, dvas.iter().map(|d| d.asize_bytes).sum::<u64>());
    // Adjacent blocks (the allocator hands them out one after the other) and gaps:
    // free every block but the fourth and the ninth now, in a shuffled order.
    let all = dvas.clone();
    let touch = |a: &Dva, b: &Dva| a.vdev == b.vdev && a.offset_bytes + a.asize_bytes == b.offset_bytes;
    assert!(all.windows(2).all(|w| touch(&w[0], &w[1])), "the allocator gave consecutive blocks: {all:?}");
    let kept = [dvas[3], dvas[8]];
    dvas.retain(|d| !kept.contains(d));
    dvas.reverse();
    dvas.swap(0, 5);
    zio.free_log_dvas(&mut dvas, 7);
    assert_eq!(zio.refused_frees.load(Ordering::Relaxed), 0);
    assert_eq!(
        zio.deferred_bytes(),
        dvas.iter().map(|d| d.asize_bytes).sum::<u64>(),
        "deferred, like every free"
    );
    for d in &dvas {
        assert!(!zio.dva_allocated(d), "{d:?} was freed");
    }
    for d in &kept {
        assert!(zio.dva_allocated(d), "{d:?} was not named and stays allocated");
    }
    // A second free of two blocks already freed around one still allocated, three
    // that touch: the allocated one is freed, each of the others refused and counted
    // once.
    let mut again = vec![all[4], all[2], all[3]];
    zio.free_log_dvas(&mut again, 8);
    assert_eq!(zio.refused_frees.load(Ordering::Relaxed), 2);
    assert!(!zio.dva_allocated(&kept[0]));
    assert!(zio.dva_allocated(&kept[1]));
}
