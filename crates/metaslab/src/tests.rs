//! Unit tests and property tests against a block-array model.

use super::*;
use proptest::prelude::*;

const K: u64 = 4096;

fn ranges(t: &RangeTree) -> Vec<(u64, u64)> {
    t.iter().collect()
}

// ---- RangeTree -------------------------------------------------------------------

#[test]
fn range_tree_merges_adjacent() {
    let mut t = RangeTree::new();
    t.add(10, 10);
    t.add(30, 10);
    assert_eq!(ranges(&t), vec![(10, 10), (30, 10)]);
    t.add(20, 10); // bridges both
    assert_eq!(ranges(&t), vec![(10, 30)]);
    t.add(0, 10); // merges on the left
    t.add(40, 5); // merges on the right
    assert_eq!(ranges(&t), vec![(0, 45)]);
    assert_eq!(t.space_bytes(), 45);
    assert_eq!(t.len(), 1);
    t.verify();
}

#[test]
fn range_tree_splits_on_remove() {
    let mut t = RangeTree::new();
    t.add(0, 100);
    t.remove(40, 20);
    assert_eq!(ranges(&t), vec![(0, 40), (60, 40)]);
    t.remove(0, 10); // trims the front
    t.remove(90, 10); // trims the back
    assert_eq!(ranges(&t), vec![(10, 30), (60, 30)]);
    t.remove(10, 30); // whole range
    assert_eq!(ranges(&t), vec![(60, 30)]);
    assert_eq!(t.space_bytes(), 30);
    t.verify();
}

#[test]
fn range_tree_contains_and_overlaps() {
    let mut t = RangeTree::new();
    t.add(10, 10);
    t.add(30, 10);
    assert!(t.contains(10, 10));
    assert!(t.contains(12, 3));
    assert!(!t.contains(15, 10)); // spans the hole
    assert!(!t.contains(5, 10));
    assert!(!t.contains(u64::MAX, 2));
    assert!(t.overlaps(5, 6));
    assert!(t.overlaps(19, 20));
    assert!(!t.overlaps(20, 10));
    assert!(!t.overlaps(0, 10));
    assert!(!t.overlaps(40, 100));
    assert!(!t.is_empty());
    t.clear();
    assert!(t.is_empty());
}

#[test]
#[should_panic(expected = "double free")]
fn range_tree_add_overlap_panics() {
    let mut t = RangeTree::new();
    t.add(0, 10);
    t.add(5, 10);
}

#[test]
#[should_panic(expected = "not contained")]
fn range_tree_remove_uncontained_panics() {
    let mut t = RangeTree::new();
    t.add(0, 10);
    t.add(20, 10);
    t.remove(5, 20);
}

// ---- VdevSpace -------------------------------------------------------------------

#[test]
fn new_rounds_asize_down_to_alignment() {
    let v = VdevSpace::new(10 * K + 123, K);
    assert_eq!(v.asize_bytes(), 10 * K);
    assert_eq!(v.free_bytes(), 10 * K);
    assert_eq!(v.alloc_bytes(), 0);
    let empty = VdevSpace::new(K - 1, K);
    assert_eq!(empty.asize_bytes(), 0);
}

#[test]
fn alloc_is_aligned() {
    let mut v = VdevSpace::new(1 << 20, 512);
    for size in [512, 1024, 3 * 512, 8192, 512] {
        let off = v.alloc(size).unwrap();
        assert_eq!(off % 512, 0);
    }
    // Free an odd hole, then allocate again: still aligned.
    v.free_now(512, 1024);
    let off = v.alloc(512).unwrap();
    assert_eq!(off % 512, 0);
}

#[test]
#[should_panic(expected = "multiple")]
fn alloc_unaligned_size_panics() {
    let mut v = VdevSpace::new(1 << 20, K);
    v.alloc(100);
}

#[test]
fn cursor_gives_sequential_offsets() {
    let mut v = VdevSpace::new(64 * K, K);
    let a = v.alloc(K).unwrap();
    let b = v.alloc(2 * K).unwrap();
    let c = v.alloc(K).unwrap();
    assert_eq!((a, b, c), (0, K, 3 * K));
    // Freeing a block behind the cursor does not pull the next alloc back.
    v.free_now(a, K);
    assert_eq!(v.alloc(K), Some(4 * K));
    // Fill to the end, then the cursor wraps to the hole at 0.
    let rest = v.free_bytes() - K;
    assert_eq!(v.alloc(rest), Some(5 * K));
    assert_eq!(v.alloc(K), Some(0));
    assert_eq!(v.free_bytes(), 0);
}

#[test]
fn deferred_frees_wait_for_txg_plus_defer() {
    let mut v = VdevSpace::new(4 * K, K);
    let a = v.alloc(4 * K).unwrap();
    v.free(10, a, 4 * K);
    assert_eq!(v.deferred_bytes(), 4 * K);
    assert_eq!(v.free_bytes(), 0);
    assert_eq!(v.alloc_bytes(), 0);
    for synced in 10..10 + TXG_DEFER_SIZE {
        v.sync_done(synced, u64::MAX);
        assert_eq!(v.alloc(K), None, "reused at txg {synced}");
    }
    v.sync_done(10 + TXG_DEFER_SIZE, u64::MAX);
    assert_eq!(v.deferred_bytes(), 0);
    assert_eq!(v.free_bytes(), 4 * K);
    assert!(v.alloc(4 * K).is_some());
}

#[test]
fn deferred_frees_release_per_txg() {
    let mut v = VdevSpace::new(8 * K, K);
    let a = v.alloc(K).unwrap();
    let b = v.alloc(K).unwrap();
    v.free(5, a, K);
    v.free(6, b, K);
    v.sync_done(9, u64::MAX);
    assert_eq!((v.free_bytes(), v.deferred_bytes()), (7 * K, K));
    v.sync_done(10, u64::MAX);
    assert_eq!((v.free_bytes(), v.deferred_bytes()), (8 * K, 0));
    assert!(v.deferred_iter().next().is_none());
}

#[test]
#[should_panic(expected = "not allocated")]
fn double_free_panics() {
    let mut v = VdevSpace::new(8 * K, K);
    let a = v.alloc(K).unwrap();
    v.free(1, a, K);
    v.free(2, a, K);
}

#[test]
#[should_panic(expected = "not allocated")]
fn free_of_free_space_panics() {
    let mut v = VdevSpace::new(8 * K, K);
    v.free_now(0, K);
}

#[test]
fn enospc_returns_none() {
    let mut v = VdevSpace::new(4 * K, K);
    assert_eq!(v.alloc(8 * K), None);
    assert_eq!(v.alloc(4 * K), Some(0));
    assert_eq!(v.alloc(K), None);
    assert_eq!(v.alloc_near(K, 0), None);
    // Fragmented: 2 blocks free but not contiguous.
    v.free_now(0, K);
    v.free_now(2 * K, K);
    assert_eq!(v.free_bytes(), 2 * K);
    assert_eq!(v.alloc(2 * K), None);
    assert!(v.alloc(K).is_some());
}

#[test]
fn alloc_near_keeps_distance() {
    let mut v = VdevSpace::new(800 * K, K);
    let a = v.alloc(K).unwrap();
    let d = v.alloc_near(K, a).unwrap();
    assert!(d.abs_diff(a) >= v.asize_bytes() / 8, "{d} too close to {a}");
    // The cursor is unaffected by the ditto.
    assert_eq!(v.alloc(K), Some(a + K));
    // Near the end: the ditto goes before.
    let end = v.asize_bytes() - K;
    assert!(v.claim(end, K));
    let d = v.alloc_near(K, end).unwrap();
    assert!(end - d >= v.asize_bytes() / 8);
}

#[test]
fn alloc_near_falls_back_when_far_space_is_full() {
    let mut v = VdevSpace::new(16 * K, K);
    // Fill all but the block right after `a` (closer than asize / 8 = 2 blocks).
    let a = v.alloc(K).unwrap();
    let all = v.alloc(15 * K).unwrap();
    v.free_now(all, K);
    let d = v.alloc_near(K, a).unwrap();
    assert_eq!(d, K);
}

#[test]
fn claim_only_free_space() {
    let mut v = VdevSpace::new(8 * K, K);
    assert!(v.claim(2 * K, 2 * K));
    assert!(!v.claim(3 * K, K));
    assert!(!v.claim(7 * K, 2 * K));
    assert!(v.is_allocated(2 * K, 2 * K));
    assert!(!v.is_allocated(K, 2 * K));
    assert_eq!(v.alloc_bytes(), 2 * K);
}

// ---- encode / decode ------------------------------------------------------------

fn sample() -> VdevSpace {
    let mut v = VdevSpace::new(64 * K, K);
    let a = v.alloc(4 * K).unwrap();
    let b = v.alloc(4 * K).unwrap();
    let _c = v.alloc(4 * K).unwrap();
    v.free(7, a, K);
    v.free(8, a + 2 * K, K);
    v.free_now(b, 2 * K);
    v
}

#[test]
fn vdev_encoding_layout() {
    let v = sample();
    let b = v.encode();
    let u = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
    assert_eq!(u(0), 64 * K);
    let (nf, nd) = (u(8) as usize, u(16) as usize);
    assert_eq!((nf, nd), (2, 2));
    assert_eq!(b.len(), VDEV_SECTION_HEADER_BYTES + nf * FREE_ENTRY_BYTES + nd * DEFERRED_ENTRY_BYTES);
    assert_eq!((u(24), u(32)), (4 * K, 2 * K));
    assert_eq!((u(40), u(48)), (12 * K, 52 * K));
    let d0 = 24 + 16 * nf;
    assert_eq!((u(d0), u(d0 + 8), u(d0 + 16)), (7, 0, K));
    assert_eq!((u(d0 + 24), u(d0 + 32), u(d0 + 40)), (8, 2 * K, K));
}

#[test]
fn space_map_roundtrip_and_header() {
    let mut sm = SpaceMap::create(&[(64 * K, K), (32 * K + 7, 512)]);
    sm.vdevs[0] = sample();
    sm.vdevs[1].alloc(1024).unwrap();
    let b = sm.encode();
    assert_eq!(&b[0..8], b"TARNSPMP");
    assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), SPACE_MAP_VERSION);
    assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 2);
    // Version 2: one class per vdev (both Normal), then the sections.
    assert_eq!(&b[24..40], &[0u8; 16]);
    assert_eq!(&b[40..40 + sm.vdevs[0].encode().len()], &sm.vdevs[0].encode()[..]);
    let back = SpaceMap::decode(&[(64 * K, K), (32 * K + 7, 512)], &b).unwrap();
    assert_eq!(back.encode(), b);
    assert_eq!(back.free_bytes(), sm.free_bytes());
    assert_eq!(back.alloc_bytes(), sm.alloc_bytes());
    assert_eq!(back.deferred_bytes(), sm.deferred_bytes());
    assert_eq!(back.asize_bytes(), 96 * K);
    // Wrong config.
    assert!(SpaceMap::decode(&[(64 * K, K)], &b).is_err());
    assert!(SpaceMap::decode(&[(64 * K, K), (33 * K, 512)], &b).is_err());
}

fn section(asize: u64, free: &[(u64, u64)], deferred: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, asize);
    put(&mut out, free.len() as u64);
    put(&mut out, deferred.len() as u64);
    for &(s, l) in free {
        put(&mut out, s);
        put(&mut out, l);
    }
    for &(t, s, l) in deferred {
        put(&mut out, t);
        put(&mut out, s);
        put(&mut out, l);
    }
    out
}

#[test]
fn decode_accepts_handmade_valid_section() {
    let b = section(16 * K, &[(0, K), (4 * K, 2 * K)], &[(3, K, K), (9, 2 * K, K)]);
    let v = VdevSpace::decode(16 * K, K, &b).unwrap();
    assert_eq!(v.free_bytes(), 3 * K);
    assert_eq!(v.deferred_bytes(), 2 * K);
    assert_eq!(v.alloc_bytes(), 11 * K);
    assert_eq!(v.encode(), b);
}

#[test]
fn decode_rejects_bad_sections() {
    let a = 16 * K;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("overlapping free", section(a, &[(0, 2 * K), (K, 2 * K)], &[])),
        ("unsorted free", section(a, &[(4 * K, K), (0, K)], &[])),
        ("adjacent free", section(a, &[(0, K), (K, K)], &[])),
        ("empty free", section(a, &[(0, 0)], &[])),
        ("unaligned start", section(a, &[(100, K)], &[])),
        ("unaligned len", section(a, &[(0, 100)], &[])),
        ("past asize", section(a, &[(15 * K, 2 * K)], &[])),
        ("overflow", section(a, &[(u64::MAX - K + 1, K)], &[])),
        ("wrong asize", section(a + K, &[], &[])),
        ("deferred overlaps free", section(a, &[(0, 2 * K)], &[(1, K, K)])),
        ("deferred overlap each other", section(a, &[], &[(1, 0, 2 * K), (2, K, K)])),
        ("deferred unsorted", section(a, &[], &[(1, 4 * K, K), (2, 0, K)])),
        ("deferred past asize", section(a, &[], &[(1, 16 * K, K)])),
        ("deferred unaligned", section(a, &[], &[(1, 512, K)])),
        ("deferred empty", section(a, &[], &[(1, 0, 0)])),
    ];
    for (what, bytes) in bad {
        assert!(VdevSpace::decode(a, K, &bytes).is_err(), "accepted {what}");
    }
    // Truncated, trailing, lying counts.
    let good = section(a, &[(0, K)], &[(1, K, K)]);
    assert!(VdevSpace::decode(a, K, &good).is_ok());
    for cut in 0..good.len() {
        assert!(VdevSpace::decode(a, K, &good[..cut]).is_err(), "accepted cut at {cut}");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(VdevSpace::decode(a, K, &trailing).is_err());
    let mut huge = good.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(VdevSpace::decode(a, K, &huge).is_err());
    let mut huge = good;
    huge[16..24].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    assert!(VdevSpace::decode(a, K, &huge).is_err());
    // Bad alignment from the config is an error, not a panic.
    assert!(VdevSpace::decode(a, 3000, &section(a, &[], &[])).is_err());
    assert!(VdevSpace::decode(a, 0, &section(a, &[], &[])).is_err());
}

#[test]
fn decode_rejects_bad_headers() {
    let sm = SpaceMap::create(&[(16 * K, K)]);
    let good = sm.encode();
    let cfg = [(16 * K, K)];
    assert!(SpaceMap::decode(&cfg, &good).is_ok());
    let mut b = good.clone();
    b[0] ^= 1;
    assert!(SpaceMap::decode(&cfg, &b).is_err(), "bad magic");
    let mut b = good.clone();
    b[8] = 3;
    assert!(SpaceMap::decode(&cfg, &b).is_err(), "bad version");
    let mut b = good.clone();
    b[8] = 0;
    assert!(SpaceMap::decode(&cfg, &b).is_err(), "version 0");
    let mut b = good.clone();
    b[24] = 3;
    assert!(SpaceMap::decode(&cfg, &b).is_err(), "unknown class");
    let mut b = good.clone();
    b[16] = 2;
    assert!(SpaceMap::decode(&cfg, &b).is_err(), "bad count");
    assert!(SpaceMap::decode(&cfg, &[]).is_err());
    assert!(SpaceMap::decode(&cfg, b"garbage garbage garbage garbage").is_err());
}

#[test]
fn version_1_maps_still_decode_as_normal() {
    // A version 1 map: header without classes, then the sections.
    let mut v1 = Vec::new();
    put(&mut v1, SPACE_MAP_MAGIC);
    put(&mut v1, 1);
    put(&mut v1, 2);
    v1.extend(section(16 * K, &[(0, 4 * K)], &[(3, 4 * K, K)]));
    v1.extend(section(8 * K, &[(0, 8 * K)], &[]));
    let sm = SpaceMap::decode(&[(16 * K, K), (8 * K, K)], &v1).unwrap();
    assert!(sm.vdevs.iter().all(|v| v.class() == AllocClass::Normal));
    assert_eq!(sm.free_bytes(), 12 * K);
    assert_eq!(sm.deferred_bytes(), K);
    // Re-encoding writes version 2 with explicit classes.
    let v2 = sm.encode();
    assert_eq!(u64::from_le_bytes(v2[8..16].try_into().unwrap()), 2);
    assert_eq!(v2.len(), v1.len() + 2 * CLASS_ENTRY_BYTES);
}

#[test]
fn classes_and_holes_roundtrip() {
    let mut sm = SpaceMap::new(vec![
        VdevSpace::new(64 * K, K),
        VdevSpace::hole(),
        VdevSpace::new_class(32 * K, 512, AllocClass::Log),
    ]);
    sm.vdevs[2].alloc(1024).unwrap();
    sm.vdevs[0].alloc(4 * K).unwrap();
    let b = sm.encode();
    let u = |off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
    assert_eq!((u(16), u(24), u(32), u(40)), (3, 0, 2, 1));
    let dims = [(64 * K, K), (0, 512), (32 * K, 512)];
    let back = SpaceMap::decode(&dims, &b).unwrap();
    assert_eq!(back.encode(), b);
    let classes: Vec<AllocClass> = back.vdevs.iter().map(VdevSpace::class).collect();
    assert_eq!(classes, [AllocClass::Normal, AllocClass::Hole, AllocClass::Log]);
    assert!(!back.vdevs[1].is_allocatable());
    assert_eq!(back.vdevs[1].asize_bytes(), 0);
    // Pool sums are the normal class only; the log class is reported apart.
    assert_eq!(back.asize_bytes(), 64 * K);
    assert_eq!(back.alloc_bytes(), 4 * K);
    assert_eq!(back.free_bytes(), 60 * K);
    assert_eq!(back.class_asize_bytes(AllocClass::Log), 32 * K);
    assert_eq!(back.class_alloc_bytes(AllocClass::Log), 1024);
    assert_eq!(back.class_free_bytes(AllocClass::Log), 32 * K - 1024);
    // A hole whose config gives it space is refused.
    assert!(SpaceMap::decode(&[(64 * K, K), (K, 512), (32 * K, 512)], &b).is_err());
}

// ---- pick_vdev ------------------------------------------------------------------

#[test]
fn pick_vdev_never_returns_log_or_hole() {
    let sm = SpaceMap::new(vec![
        VdevSpace::new_class(1024 * K, K, AllocClass::Log),
        VdevSpace::new(16 * K, K),
        VdevSpace::hole(),
        VdevSpace::new(16 * K, K),
        VdevSpace::new_class(1024 * K, K, AllocClass::Log),
    ]);
    for _ in 0..20 {
        let p = sm.pick_vdev(&[]).unwrap();
        assert!(p == 1 || p == 3, "picked {p}");
        // Ditto copies: excluding the normal vdevs leaves nothing, not a log vdev.
        assert_eq!(sm.pick_vdev(&[1, 3]), None);
        let q = sm.pick_vdev(&[p]).unwrap();
        assert!(q == 1 || q == 3);
    }
    // A pool of only log vdevs and holes has no normal space at all.
    let logs = SpaceMap::new(vec![VdevSpace::hole(), VdevSpace::new_class(64 * K, K, AllocClass::Log)]);
    assert_eq!(logs.pick_vdev(&[]), None);
    assert_eq!(logs.free_bytes(), 0);
    // A normal vdev that is not allocatable is not picked either.
    let mut sm2 = SpaceMap::create(&[(16 * K, K), (8 * K, K)]);
    sm2.vdevs[0].set_allocatable(false);
    assert_eq!(sm2.pick_vdev(&[]), Some(1));
    assert_eq!(sm2.pick_vdev(&[1]), None);
}

#[test]
fn pick_log_vdev_stripes_and_skips() {
    let mut sm = SpaceMap::new(vec![
        VdevSpace::new(64 * K, K),
        VdevSpace::new_class(64 * K, K, AllocClass::Log),
        VdevSpace::hole(),
        VdevSpace::new_class(16 * K, K, AllocClass::Log),
        VdevSpace::new_class(64 * K, K, AllocClass::Log),
    ]);
    // Round robin over the three log vdevs, whatever their free space.
    let picks: Vec<u32> = (0..6).map(|_| sm.pick_log_vdev(&[]).unwrap()).collect();
    assert_eq!(picks, [1, 3, 4, 1, 3, 4]);
    // Excluded ones are skipped.
    let p = sm.pick_log_vdev(&[1, 3]).unwrap();
    assert_eq!(p, 4);
    assert_eq!(sm.pick_log_vdev(&[1, 3, 4]), None);
    // A full log vdev is skipped.
    sm.vdevs[3].alloc(16 * K).unwrap();
    let picks: Vec<u32> = (0..4).map(|_| sm.pick_log_vdev(&[]).unwrap()).collect();
    assert!(picks.iter().all(|&p| p == 1 || p == 4), "{picks:?}");
    assert!(picks.contains(&1) && picks.contains(&4));
    // One being removed (not allocatable) is skipped; none left means None.
    sm.vdevs[1].set_allocatable(false);
    sm.vdevs[4].set_allocatable(false);
    assert_eq!(sm.pick_log_vdev(&[]), None);
    sm.vdevs[4].set_allocatable(true);
    assert_eq!(sm.pick_log_vdev(&[]), Some(4));
    // Pools without log vdevs have none to offer.
    assert_eq!(SpaceMap::create(&[(16 * K, K)]).pick_log_vdev(&[]), None);
    assert_eq!(SpaceMap::new(Vec::new()).pick_log_vdev(&[]), None);
    // Log allocations never show in the pool's sums.
    let before = (sm.free_bytes(), sm.alloc_bytes(), sm.asize_bytes());
    sm.vdevs[4].alloc(8 * K).unwrap();
    assert_eq!((sm.free_bytes(), sm.alloc_bytes(), sm.asize_bytes()), before);
}

#[test]
fn pick_vdev_most_free_round_robin_and_exclude() {
    let mut sm = SpaceMap::create(&[(16 * K, K), (16 * K, K), (16 * K, K)]);
    // All tied: round-robin.
    assert_eq!(sm.pick_vdev(&[]), Some(0));
    assert_eq!(sm.pick_vdev(&[]), Some(1));
    assert_eq!(sm.pick_vdev(&[]), Some(2));
    assert_eq!(sm.pick_vdev(&[]), Some(0));
    // Most free wins.
    sm.vdevs[0].alloc(K).unwrap();
    sm.vdevs[2].alloc(K).unwrap();
    assert_eq!(sm.pick_vdev(&[]), Some(1));
    assert_eq!(sm.pick_vdev(&[]), Some(1));
    // Excluded vdevs are skipped even if they have the most free.
    let p = sm.pick_vdev(&[1]).unwrap();
    assert!(p == 0 || p == 2);
    assert_eq!(sm.pick_vdev(&[0, 1, 2]), None);
    // Full vdevs are never picked.
    let mut full = SpaceMap::create(&[(K, K)]);
    full.vdevs[0].alloc(K).unwrap();
    assert_eq!(full.pick_vdev(&[]), None);
    assert_eq!(SpaceMap::new(Vec::new()).pick_vdev(&[]), None);
}

#[test]
fn pick_vdev_spreads_equal_vdevs() {
    let mut sm = SpaceMap::create(&[(64 * K, K), (64 * K, K)]);
    let mut counts = [0u32; 2];
    for _ in 0..32 {
        let id = sm.pick_vdev(&[]).unwrap();
        sm.vdevs[id as usize].alloc(K).unwrap();
        counts[id as usize] += 1;
    }
    assert_eq!(counts, [16, 16]);
    sm.vdevs[0].free(1, 0, K);
    sm.sync_done(1 + TXG_DEFER_SIZE);
    assert_eq!(sm.alloc_bytes(), 31 * K);
}

// ---- property tests against a model --------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Block {
    Free,
    Alloc,
    Deferred(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64),
    AllocNear(u64, usize),
    Free(usize),
    FreeNow(usize),
    Sync,
    Roundtrip,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..6).prop_map(Op::Alloc),
        1 => (1u64..4, any::<usize>()).prop_map(|(n, i)| Op::AllocNear(n, i)),
        3 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeNow),
        2 => Just(Op::Sync),
        1 => Just(Op::Roundtrip),
    ]
}

fn has_free_run(model: &[Block], n: usize) -> bool {
    model.split(|b| *b != Block::Free).any(|run| run.len() >= n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn alloc_free_matches_model(blocks in 1u64..64, align_shift in 9u32..13, ops in prop::collection::vec(op(), 1..200)) {
        let align = 1u64 << align_shift;
        let mut v = VdevSpace::new(blocks * align, align);
        let mut model = vec![Block::Free; blocks as usize];
        let mut live: Vec<(u64, u64)> = Vec::new(); // (offset, size) allocated
        let mut txg = 1u64;
        for op in ops {
            match op {
                Op::Alloc(n) | Op::AllocNear(n, _) => {
                    let got = match op {
                        Op::AllocNear(_, i) if !live.is_empty() => v.alloc_near(n * align, live[i % live.len()].0),
                        _ => v.alloc(n * align),
                    };
                    match got {
                        Some(off) => {
                            prop_assert_eq!(off % align, 0);
                            let b = (off / align) as usize;
                            prop_assert!(b + n as usize <= model.len());
                            for blk in &mut model[b..b + n as usize] {
                                prop_assert_eq!(*blk, Block::Free, "overlapping alloc at {}", off);
                                *blk = Block::Alloc;
                            }
                            live.push((off, n * align));
                        }
                        None => prop_assert!(!has_free_run(&model, n as usize), "ENOSPC with a free run of {}", n),
                    }
                }
                Op::Free(i) | Op::FreeNow(i) if !live.is_empty() => {
                    let (off, size) = live.swap_remove(i % live.len());
                    let b = (off / align) as usize;
                    let state = if matches!(op, Op::Free(_)) {
                        v.free(txg, off, size);
                        Block::Deferred(txg)
                    } else {
                        v.free_now(off, size);
                        Block::Free
                    };
                    for blk in &mut model[b..b + (size / align) as usize] {
                        *blk = state;
                    }
                }
                Op::Free(_) | Op::FreeNow(_) => {}
                Op::Sync => {
                    v.sync_done(txg, u64::MAX);
                    for blk in &mut model {
                        if let Block::Deferred(t) = *blk {
                            if t + TXG_DEFER_SIZE <= txg {
                                *blk = Block::Free;
                            }
                        }
                    }
                    txg += 1;
                }
                Op::Roundtrip => {
                    let bytes = v.encode();
                    let back = VdevSpace::decode(blocks * align, align, &bytes).unwrap();
                    prop_assert_eq!(back.encode(), bytes);
                    prop_assert_eq!(back.free_tree(), v.free_tree());
                    prop_assert_eq!(back.deferred_iter().collect::<Vec<_>>(), v.deferred_iter().collect::<Vec<_>>());
                    let cursor = v.cursor_bytes;
                    v = back;
                    v.cursor_bytes = cursor;
                }
            }
            v.verify();
            let count = |f: fn(&Block) -> bool| model.iter().filter(|b| f(b)).count() as u64 * align;
            prop_assert_eq!(v.free_bytes(), count(|b| *b == Block::Free));
            prop_assert_eq!(v.alloc_bytes(), count(|b| *b == Block::Alloc));
            prop_assert_eq!(v.deferred_bytes(), count(|b| matches!(b, Block::Deferred(_))));
            for (i, b) in model.iter().enumerate() {
                let off = i as u64 * align;
                prop_assert_eq!(v.free_tree().contains(off, align), *b == Block::Free);
                prop_assert_eq!(v.is_allocated(off, align), *b == Block::Alloc);
            }
        }
    }

    #[test]
    fn decode_never_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = SpaceMap::decode(&[(16 * K, K)], &bytes);
        let _ = VdevSpace::decode(16 * K, K, &bytes);
    }

    #[test]
    fn decode_never_panics_on_mutations(seed_ops in prop::collection::vec(1u64..4, 0..12),
                                        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let mut sm = SpaceMap::create(&[(32 * K, K), (8 * K, 512)]);
        for (i, n) in seed_ops.iter().enumerate() {
            let vd = &mut sm.vdevs[i % 2];
            let align = vd.align_bytes();
            if let Some(off) = vd.alloc(n * align) {
                if i % 3 == 0 { vd.free(i as u64, off, align); }
            }
        }
        let mut bytes = sm.encode();
        for (pos, x) in flips {
            let p = pos % bytes.len();
            bytes[p] ^= x;
        }
        if let Ok(back) = SpaceMap::decode(&[(32 * K, K), (8 * K, 512)], &bytes) {
            for v in &back.vdevs { v.verify(); }
            prop_assert_eq!(back.encode(), bytes);
        }
    }
}

#[test]
fn held_frees_stay_deferred_until_released() {
    let mut sm = SpaceMap::new(vec![VdevSpace::new(8 * K, K)]);
    let a = sm.vdevs[0].alloc(K).unwrap();
    let b = sm.vdevs[0].alloc(K).unwrap();
    sm.vdevs[0].free(5, a, K);
    sm.hold_frees_from(Some(6));
    sm.vdevs[0].free(6, b, K);
    sm.sync_done(20);
    // The free of txg 5 predates the hold; the one of txg 6 waits.
    assert_eq!((sm.vdevs[0].free_bytes(), sm.vdevs[0].deferred_bytes()), (7 * K, K));
    sm.hold_frees_from(None);
    sm.sync_done(21);
    assert_eq!((sm.vdevs[0].free_bytes(), sm.vdevs[0].deferred_bytes()), (8 * K, 0));
}
