//! `Zio::take_block`: a block its txg sync is about to replace leaves the ARC and
//! hands over the cached buffer itself; an uncached one is read and verified without
//! entering the cache.

mod common;

use common::{data_props, leaf, pattern, zio_over};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[test]
fn a_cached_block_is_taken_out_of_the_arc_without_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let zio = zio_over(leaf(&dir, "take", 21, 80 << 20), 64 << 20);
    let data = Arc::new(pattern(5, 128 << 10));
    let bp = zio.write_blocks(&[(data.clone(), data_props(3))], 1).pop().unwrap().unwrap();
    let key = zio.arc_key(&bp);
    let cached_at = zio.arc().peek(&key).expect("a block just written is cached").as_ptr() as usize;
    let reads = zio.blocks_read.load(Ordering::Relaxed);
    let taken = zio.take_block(&bp).unwrap();
    assert_eq!(&taken[..], &data[..]);
    assert_eq!(taken.as_ptr() as usize, cached_at, "the cached buffer itself, not a copy");
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), reads, "no device read");
    assert!(!zio.arc().contains(&key), "the taken block left the ARC");
    drop(data);
    assert!(Arc::try_unwrap(taken).is_ok(), "the caller holds the only reference");
}

#[test]
fn an_uncached_block_is_read_and_verified_but_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let zio = zio_over(leaf(&dir, "cold", 22, 80 << 20), 64 << 20);
    let data = Arc::new(pattern(9, 64 << 10));
    let bp = zio.write_blocks(&[(data.clone(), data_props(4))], 1).pop().unwrap().unwrap();
    zio.clear_cache();
    let reads = zio.blocks_read.load(Ordering::Relaxed);
    assert_eq!(&zio.take_block(&bp).unwrap()[..], &data[..]);
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), reads + 1, "read from the device");
    assert!(!zio.arc().contains(&zio.arc_key(&bp)), "a block about to be replaced stays out of the ARC");
    // A pointer whose checksum does not match what is on disk is an error, not bytes.
    let mut wrong = bp;
    wrong.checksum[0] ^= 1;
    assert!(zio.take_block(&wrong).is_err());
}
