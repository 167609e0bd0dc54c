//! Staged writes (`Zio::stage_blocks`, `Zio::write_staged`): pointers handed out before
//! any device write, all blocks written in one batch afterwards; a block whose every
//! copy fails makes the batch fail and gives its space back.

mod common;

use common::{data_props, leaf, zio_over};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::ObjectType;
use tarn_vdev::inject::{self, Action, Fault, HandlerSpec, IoType, FREQ_ALWAYS_PPM};
use tarn_zio::{StagedWrites, WriteProps, Zio};

fn zio_on(dir: &tempfile::TempDir, name: &str, guid: u64) -> Zio {
    zio_over(leaf(dir, name, guid, 80 << 20), 64 << 20)
}

/// Two "levels" of blocks: the second holds the first's pointers (as an indirect block
/// would) and is staged before anything is written; after `write_staged` every block
/// reads back from the device, with its checksum verified.
#[test]
fn staged_blocks_get_pointers_first_and_read_back_after_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let zio = zio_on(&dir, "data", 11);
    let level0: Vec<(Arc<Vec<u8>>, WriteProps)> = (0..5u8)
        .map(|i| (Arc::new(vec![i.wrapping_mul(37).wrapping_add(1); 16 << 10]), data_props(3)))
        .collect();
    let mut staged = StagedWrites::default();
    let bps: Vec<_> = zio.stage_blocks(&level0, 1, &mut staged).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(zio.blocks_written.load(Ordering::Relaxed), 0, "staging wrote to a device");
    let mut parent = Vec::new();
    for bp in &bps {
        let mut b = vec![0u8; tarn_phys::BLKPTR_SIZE_BYTES];
        bp.encode_into(&mut b);
        parent.extend(b);
    }
    let top = [(Arc::new(parent.clone()), WriteProps::meta(ObjectType::Indirect, 1, 2, 3, 5))];
    let top_bp = zio.stage_blocks(&top, 1, &mut staged).pop().unwrap().unwrap();
    let written = zio.write_staged(staged, 2).unwrap();
    assert_eq!(written.len(), 6);
    assert_eq!(written[5], top_bp);
    zio.clear_cache();
    assert_eq!(&zio.read_block(&top_bp).unwrap()[..], &parent[..]);
    for (bp, (data, _)) in bps.iter().zip(&level0) {
        assert_eq!(&zio.read_block(bp).unwrap()[..], &data[..]);
    }
}

/// Every write of the leaf fails: `write_staged` reports it and the allocation is
/// given back; `discard_staged` gives back a batch never written.
#[test]
fn a_staged_block_that_cannot_be_written_fails_the_batch_and_frees_its_space() {
    let dir = tempfile::tempdir().unwrap();
    let zio = zio_on(&dir, "bad", 12);
    let before = zio.alloc_bytes();
    let blocks = [(Arc::new(vec![7u8; 32 << 10]), data_props(4))];
    let mut staged = StagedWrites::default();
    zio.stage_blocks(&blocks, 1, &mut staged).pop().unwrap().unwrap();
    assert!(zio.alloc_bytes() > before);
    let id = inject::add_handler(HandlerSpec {
        pool: "staged-test".into(),
        vdev_guid: 12,
        path: dir.path().join("bad").display().to_string(),
        io_type: IoType::Write,
        action: Action::Fault(Fault::Io),
        freq_ppm: FREQ_ALWAYS_PPM,
    });
    let r = zio.write_staged(staged, 1);
    inject::remove_handler(id);
    assert!(r.is_err(), "a block with no copy written was reported written");
    assert_eq!(zio.alloc_bytes(), before, "the failed block kept its space");
    let mut staged = StagedWrites::default();
    zio.stage_blocks(&blocks, 1, &mut staged).pop().unwrap().unwrap();
    zio.discard_staged(staged);
    assert_eq!(zio.alloc_bytes(), before, "a discarded batch kept its space");
}
