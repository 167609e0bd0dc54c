//! Free-space management for a pool of top-level vdevs.
//!
//! # Theory statement
//!
//! **What it models.** Every top-level vdev exposes `asize` bytes of allocatable space
//! (after labels and parity are accounted for by `vdev`; this crate only sees numbers).
//! Each byte of that space is in exactly one of three states:
//!
//! ```text
//!            alloc / alloc_near / claim
//!   FREE  ─────────────────────────────►  ALLOCATED
//!    ▲  ◄──────────── free_now ─────────────  │
//!    │                                        │ free(txg)
//!    └──── sync_done(txg + TXG_DEFER_SIZE) ── DEFERRED(txg)
//! ```
//!
//! A [`VdevSpace`] holds the FREE set as a [`RangeTree`] and the DEFERRED sets as one
//! `RangeTree` per freeing txg; ALLOCATED is the complement (it is never stored, as in
//! OpenZFS where the allocated tree is implied by the space map). A [`SpaceMap`] is the
//! list of `VdevSpace`s for the whole pool, indexed by top-level vdev id.
//!
//! **Why frees are deferred.** A block freed in txg `t` may still be referenced by the
//! uberblocks of txgs before `t`. Rewind import (`import -T`) may go back to any of the
//! last few uberblocks, so a freed block must not be overwritten until
//! [`TXG_DEFER_SIZE`] more txgs have synced. OpenZFS uses 2; Tarn keeps 4 so that the
//! whole uberblock ring that rewind may use stays intact. `free_now` is for blocks
//! born and freed in the same open txg: no synced state references them.
//!
//! **Allocation policy.** `alloc` is first-fit from a rotating cursor (the end of the
//! previous allocation), wrapping around once, so sequential writes land sequentially
//! on disk. `alloc_near` places a ditto copy at least `asize / 8` away from the first
//! copy (OpenZFS spreads dittos likewise) and does not move the cursor.
//! [`SpaceMap::pick_vdev`] picks the top-level vdev with the most free bytes,
//! round-robin among ties, skipping vdevs that already hold a copy.
//!
//! **Allocation classes.** Every top-level vdev belongs to one [`AllocClass`], as
//! OpenZFS groups vdevs into metaslab classes: `Normal` vdevs hold every block of the
//! pool (data, metadata, their ditto copies); `Log` vdevs (separate intent-log devices,
//! SLOGs) hold only intent-log blocks, which the ZIL places with
//! [`SpaceMap::pick_log_vdev`] (round-robin, so several log vdevs are striped); a `Hole`
//! stands where a removed top-level vdev was, so that the ids of the others — which
//! DVAs carry — never change (OpenZFS `vdev_hole`). A hole has no space at all.
//! `pick_vdev` only ever returns `Normal` vdevs, and the pool-wide sums
//! (`free_bytes`, `alloc_bytes`, `asize_bytes`, `deferred_bytes`) count only `Normal`
//! vdevs: log space is not pool capacity (OpenZFS leaves it out of SIZE and FREE).
//! A vdev can also be made non-allocatable ([`VdevSpace::set_allocatable`]) while it
//! is being removed or while its devices are missing; neither picker returns it then.
//! That flag is not persisted.
//!
//! **On-disk structure owned: the space map object.** Little-endian, u64 fields:
//!
//! ```text
//! SpaceMap (pool):
//!   off  0  magic         u64  = SPACE_MAP_MAGIC (the bytes "TARNSPMP")
//!   off  8  version       u64  = SPACE_MAP_VERSION (2; version 1 is still read)
//!   off 16  vdev_count    u64  = N, number of top-level vdevs (holes included)
//!   off 24  class × N     u64  each: 0 = Normal, 1 = Log, 2 = Hole     (version 2 only)
//!   off 24 + 8*N          vdev section × N, back to back, in vdev id order
//!                         (version 1: the sections start at 24 and every vdev is Normal)
//!
//! vdev section (VdevSpace::encode), offsets relative to its start,
//! F = free_count, D = deferred_count:
//!   off  0           asize           u64  usable bytes (asize rounded down to align)
//!   off  8           free_count      u64
//!   off 16           deferred_count  u64
//!   off 24 + 16*i    free range i:     start u64, len u64          (i < F)
//!   off 24 + 16*F + 24*j
//!                    deferred entry j: txg u64, start u64, len u64 (j < D)
//!   total 24 + 16*F + 24*D bytes
//! ```
//!
//! Free ranges are sorted by start, non-empty, aligned, inside `asize`, and neither
//! overlapping nor adjacent (adjacent ranges are always merged: the encoding is
//! canonical). Deferred entries are sorted by start, non-empty, aligned, inside
//! `asize`, disjoint from each other and from every free range. A hole's section is
//! asize 0 with no entries. No checksum is embedded: the block holding the map is
//! checksummed by its block pointer.
//!
//! **Invariants** (each with the check that enforces it):
//! 1. FREE and every DEFERRED(txg) are pairwise disjoint — `RangeTree::add` asserts
//!    no overlap; `VdevSpace::free`/`free_now` assert the range is neither free nor
//!    deferred (a double free is a bug, not an I/O error); `decode` returns
//!    [`Corrupt`] for overlap in the bytes.
//! 2. Every range boundary is a multiple of `align` and lies in `[0, asize)` —
//!    `alloc`/`free` assert aligned sizes and offsets; `decode` checks.
//! 3. `free_bytes + deferred_bytes + alloc_bytes == asize` — by construction; the
//!    counters are re-derived by [`VdevSpace::verify`], which runs after every
//!    mutation under `cfg(test)` or the `verify` feature.
//! 4. Decoding never panics: every count is checked against the bytes remaining
//!    before it drives a loop, and all arithmetic is checked.
//!
//! **Locks.** None. The caller (`spa`) owns the `SpaceMap` behind its own lock; allocs
//! and frees happen in open/syncing context, `sync_done` at the end of each txg sync.
//! `pick_vdev` and `pick_log_vdev` take `&self` and advance their rotors with relaxed
//! atomics.
//!
//! **Crash.** The map is rewritten whole in each txg that the caller syncs, inside the
//! txg; after a crash the pool imports the map of the last synced uberblock, whose
//! deferred entries are still pending. Allocations of the lost txg were never
//! referenced, so they are back in FREE with no leak. The cursor is not persisted; it
//! restarts at 0 on import.
//!
//! **ENOSPC.** `alloc` returns `None` when no free range of the vdev fits the request
//! (space may be free but fragmented, or held in DEFERRED until later txgs sync);
//! the caller tries another vdev or reports no space.
//!
//! **EIO / checksum errors** are not seen here: the caller reads the map through the
//! checksummed block tree and passes decoded bytes only.
//!
//! **Limits.** Everything is in memory (one `BTreeMap` entry per free extent) and the
//! whole map is re-encoded every txg: O(extents) per sync, fine for the small pools
//! Tarn targets, unlike OpenZFS's per-metaslab append-only logs. First-fit scans the
//! free tree linearly from the cursor, so allocation is O(extents) on a fragmented
//! vdev (OpenZFS keeps a second, size-sorted tree). A vdev's asize cannot change
//! (no online expansion): `decode` rejects a map whose asize differs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

pub use tarn_phys::Corrupt;

/// Txgs a free waits before its space is reusable: a block freed in txg `t` becomes
/// allocatable once `sync_done(t + TXG_DEFER_SIZE)` has run, so the uberblocks of the
/// last few txgs stay usable for rewind import (OpenZFS uses 2; Tarn keeps 4 for `-T`).
pub const TXG_DEFER_SIZE: u64 = 4;

/// Magic number at offset 0 of an encoded [`SpaceMap`]: the ASCII bytes `TARNSPMP`.
pub const SPACE_MAP_MAGIC: u64 = u64::from_le_bytes(*b"TARNSPMP");

/// Version of the space map encoding written by this crate (2: a class per vdev).
pub const SPACE_MAP_VERSION: u64 = 2;

/// Oldest space map encoding this crate still reads (1: no classes, all `Normal`).
pub const SPACE_MAP_VERSION_MIN: u64 = 1;

/// Size of one encoded vdev class in a version 2 map.
pub const CLASS_ENTRY_BYTES: usize = 8;

/// Size of the [`SpaceMap`] header (magic, version, vdev count).
pub const SPACE_MAP_HEADER_BYTES: usize = 24;

/// Size of the fixed part of a vdev section (asize, free count, deferred count).
pub const VDEV_SECTION_HEADER_BYTES: usize = 24;

/// Size of one encoded free range (start, len).
pub const FREE_ENTRY_BYTES: usize = 16;

/// Size of one encoded deferred free (txg, start, len).
pub const DEFERRED_ENTRY_BYTES: usize = 24;

const KIND: &str = "space map";

// ---------------------------------------------------------------------------------
// RangeTree
// ---------------------------------------------------------------------------------

/// A set of disjoint half-open byte ranges `[start, end)`, kept as a `BTreeMap` from
/// start to end. Adjacent ranges are merged on insert, so each maximal extent is one
/// entry. The total size is cached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeTree {
    map: BTreeMap<u64, u64>,
    space_bytes: u64,
}

impl RangeTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[start, start + len)`, merging with adjacent ranges.
    ///
    /// Panics if `len` is zero, the range overflows, or it overlaps a range already in
    /// the tree: adding space twice is a double free, which is a bug.
    pub fn add(&mut self, start: u64, len: u64) {
        assert!(self.try_add(start, len), "RangeTree::add: [{start}, +{len}) overlaps (double free)");
    }

    /// Adds `[start, start + len)` unless it overlaps; returns whether it was added.
    /// Panics on zero length or overflow (caller bugs); decoders check those first.
    fn try_add(&mut self, start: u64, len: u64) -> bool {
        assert!(len > 0, "RangeTree: empty range at {start}");
        let end = start.checked_add(len).expect("RangeTree: range overflows u64");
        if self.overlaps(start, len) {
            return false;
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&s, &e)) = self.map.range(..start).next_back() {
            if e == start {
                new_start = s;
                self.map.remove(&s);
            }
        }
        if let Some(e) = self.map.remove(&end) {
            new_end = e;
        }
        self.map.insert(new_start, new_end);
        self.space_bytes += len;
        true
    }

    /// Removes `[start, start + len)`, splitting the range that holds it.
    ///
    /// Panics unless the whole range is contained in one extent of the tree.
    pub fn remove(&mut self, start: u64, len: u64) {
        assert!(len > 0, "RangeTree::remove: empty range at {start}");
        assert!(self.contains(start, len), "RangeTree::remove: [{start}, +{len}) not contained");
        let end = start + len; // no overflow: contained in a range
        let (&s, &e) = self.map.range(..=start).next_back().expect("contained");
        self.map.remove(&s);
        if s < start {
            self.map.insert(s, start);
        }
        if end < e {
            self.map.insert(end, e);
        }
        self.space_bytes -= len;
    }

    /// Whether all of `[start, start + len)` is in the tree (true for `len == 0`).
    pub fn contains(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        match self.map.range(..=start).next_back() {
            Some((_, &e)) => e >= end,
            None => false,
        }
    }

    /// Whether any byte of `[start, start + len)` is in the tree.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let end = start.saturating_add(len);
        // Ranges are disjoint and sorted, so ends increase with starts: only the last
        // range that starts before `end` can reach past `start`.
        match self.map.range(..end).next_back() {
            Some((_, &e)) => e > start,
            None => false,
        }
    }

    /// Total bytes in the tree.
    pub fn space_bytes(&self) -> u64 {
        self.space_bytes
    }

    /// The ranges as `(start, len)`, in increasing order of start.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e - s))
    }

    /// Number of (maximal) ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the tree holds no range.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Removes every range.
    pub fn clear(&mut self) {
        self.map.clear();
        self.space_bytes = 0;
    }

    /// Panics unless the tree is well-formed: non-empty, non-adjacent, sorted ranges
    /// whose lengths sum to the cached size.
    pub fn verify(&self) {
        let mut prev_end: Option<u64> = None;
        let mut sum = 0u64;
        for (&s, &e) in &self.map {
            assert!(s < e, "RangeTree: empty or inverted range [{s}, {e})");
            if let Some(p) = prev_end {
                assert!(p < s, "RangeTree: ranges overlap or touch at {s}");
            }
            prev_end = Some(e);
            sum += e - s;
        }
        assert_eq!(sum, self.space_bytes, "RangeTree: cached space_bytes is stale");
    }
}

// ---------------------------------------------------------------------------------
// AllocClass
// ---------------------------------------------------------------------------------

/// What a top-level vdev's space is for (OpenZFS's metaslab classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocClass {
    /// Ordinary pool space: every block of the pool, picked by [`SpaceMap::pick_vdev`].
    Normal,
    /// A separate intent-log device: only ZIL blocks, picked by
    /// [`SpaceMap::pick_log_vdev`]; not counted in the pool's size.
    Log,
    /// A removed top-level vdev: keeps its id, has no space.
    Hole,
}

impl AllocClass {
    /// The value stored in a version 2 space map.
    pub fn to_u64(self) -> u64 {
        match self {
            AllocClass::Normal => 0,
            AllocClass::Log => 1,
            AllocClass::Hole => 2,
        }
    }

    /// Parses a stored class; `None` for an unknown value.
    pub fn from_u64(v: u64) -> Option<AllocClass> {
        match v {
            0 => Some(AllocClass::Normal),
            1 => Some(AllocClass::Log),
            2 => Some(AllocClass::Hole),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------
// VdevSpace
// ---------------------------------------------------------------------------------

/// One top-level vdev's allocatable space: the free tree, the deferred frees per txg,
/// and the allocation cursor. See the crate theory statement for the states.
#[derive(Debug, Clone)]
pub struct VdevSpace {
    asize_bytes: u64,
    align_bytes: u64,
    free: RangeTree,
    /// Freeing txg -> ranges freed in it, not yet reusable.
    deferred: BTreeMap<u64, RangeTree>,
    deferred_bytes: u64,
    /// End of the previous `alloc`; the next first-fit search starts here.
    cursor_bytes: u64,
    /// What the space is for (not part of the section encoding; the map stores it).
    class: AllocClass,
    /// Whether the pickers may choose this vdev (in memory only).
    allocatable: bool,
}

impl VdevSpace {
    /// A vdev whose whole space is free. `asize_bytes` is rounded down to a multiple of
    /// `align_bytes`, which must be a non-zero power of two (panics otherwise).
    pub fn new(asize_bytes: u64, align_bytes: u64) -> Self {
        assert!(align_bytes > 0, "VdevSpace: zero alignment");
        let usable = asize_bytes - asize_bytes % align_bytes;
        let mut free = RangeTree::new();
        if usable > 0 {
            free.add(0, usable);
        }
        let vs = VdevSpace {
            asize_bytes: usable,
            align_bytes,
            free,
            deferred: BTreeMap::new(),
            deferred_bytes: 0,
            cursor_bytes: 0,
            class: AllocClass::Normal,
            allocatable: true,
        };
        vs.check();
        vs
    }

    /// Like [`VdevSpace::new`], for a vdev of `class`. A `Hole` ignores the size and
    /// has no space (see [`VdevSpace::hole`]).
    pub fn new_class(asize_bytes: u64, align_bytes: u64, class: AllocClass) -> Self {
        if class == AllocClass::Hole {
            return VdevSpace::hole();
        }
        VdevSpace {
            class,
            ..VdevSpace::new(asize_bytes, align_bytes)
        }
    }

    /// The space of a removed top-level vdev: no bytes, class `Hole`, never picked.
    pub fn hole() -> Self {
        VdevSpace {
            class: AllocClass::Hole,
            allocatable: false,
            ..VdevSpace::new(0, 1)
        }
    }

    /// What this vdev's space is for.
    pub fn class(&self) -> AllocClass {
        self.class
    }

    /// Whether [`SpaceMap::pick_vdev`] / [`SpaceMap::pick_log_vdev`] may choose this
    /// vdev (false for holes, and while a vdev is being removed or is missing).
    pub fn is_allocatable(&self) -> bool {
        self.allocatable && self.class != AllocClass::Hole
    }

    /// Allow or forbid the pickers to choose this vdev. Blocks already allocated stay
    /// and can be freed; `alloc` itself is not refused (the pickers are the gate).
    /// Not persisted: a vdev is allocatable again after import.
    pub fn set_allocatable(&mut self, allocatable: bool) {
        self.allocatable = allocatable;
    }

    /// Allocates `size_bytes` (a non-zero multiple of the alignment; panics otherwise)
    /// and returns its aligned offset. First-fit starting at the cursor (the end of the
    /// previous allocation), wrapping around once to the start of the vdev, so that
    /// consecutive allocations are consecutive on disk. `None` if no free range fits.
    pub fn alloc(&mut self, size_bytes: u64) -> Option<u64> {
        self.assert_size(size_bytes);
        let cursor = self.cursor_bytes;
        let offset = self.first_fit(size_bytes, cursor, u64::MAX).or_else(|| self.first_fit(size_bytes, 0, cursor))?;
        self.free.remove(offset, size_bytes);
        self.cursor_bytes = offset + size_bytes;
        self.check();
        Some(offset)
    }

    /// Allocates `size_bytes` for a ditto copy on the same vdev as a copy at
    /// `avoid_offset`: prefers an offset at least `asize / 8` away from it (first
    /// after it, then before it), and falls back to any free offset. The cursor is not
    /// moved, so the ditto does not disturb sequential placement. `None` if nothing fits.
    pub fn alloc_near(&mut self, size_bytes: u64, avoid_offset: u64) -> Option<u64> {
        self.assert_size(size_bytes);
        let gap = self.asize_bytes / 8;
        let after = self.first_fit(size_bytes, avoid_offset.saturating_add(gap), u64::MAX);
        let before = || match avoid_offset.checked_sub(gap) {
            Some(last) => self.first_fit(size_bytes, 0, last.saturating_add(1)),
            None => None,
        };
        let offset = after.or_else(before).or_else(|| self.first_fit(size_bytes, 0, u64::MAX))?;
        self.free.remove(offset, size_bytes);
        self.check();
        Some(offset)
    }

    /// Marks `[offset, offset + size_bytes)` allocated if it is entirely free; returns
    /// whether it was. For ZIL claim and for rebuilding a map from a block walk.
    #[must_use]
    pub fn claim(&mut self, offset: u64, size_bytes: u64) -> bool {
        if size_bytes == 0 || !self.free.contains(offset, size_bytes) {
            return false;
        }
        self.free.remove(offset, size_bytes);
        self.check();
        true
    }

    /// Frees an allocated block in txg `txg`. The space stays DEFERRED, not
    /// allocatable, until `sync_done(txg + TXG_DEFER_SIZE)`. Panics if the range is
    /// unaligned, outside the vdev, or not currently allocated (double free).
    pub fn free(&mut self, txg: u64, offset: u64, size_bytes: u64) {
        self.assert_allocated(offset, size_bytes);
        self.deferred.entry(txg).or_default().add(offset, size_bytes);
        self.deferred_bytes += size_bytes;
        self.check();
    }

    /// Frees an allocated block immediately. Only for blocks born in the same open txg
    /// that no synced state can reference. Panics like [`VdevSpace::free`].
    pub fn free_now(&mut self, offset: u64, size_bytes: u64) {
        self.assert_allocated(offset, size_bytes);
        self.free.add(offset, size_bytes);
        self.check();
    }

    /// Called after txg `synced_txg` has synced: every deferred free with
    /// `free_txg + TXG_DEFER_SIZE <= synced_txg` — and `free_txg < hold_from_txg` —
    /// becomes allocatable.
    pub fn sync_done(&mut self, synced_txg: u64, hold_from_txg: u64) {
        while let Some(entry) = self.deferred.first_entry() {
            if entry.key().saturating_add(TXG_DEFER_SIZE) > synced_txg || *entry.key() >= hold_from_txg {
                break;
            }
            let tree = entry.remove();
            for (start, len) in tree.iter() {
                self.free.add(start, len);
            }
            self.deferred_bytes -= tree.space_bytes();
        }
        self.check();
    }

    /// Bytes allocatable now.
    pub fn free_bytes(&self) -> u64 {
        self.free.space_bytes()
    }

    /// Bytes allocated: `asize - free - deferred`.
    pub fn alloc_bytes(&self) -> u64 {
        self.asize_bytes - self.free.space_bytes() - self.deferred_bytes
    }

    /// Bytes freed but waiting for their txg to age past [`TXG_DEFER_SIZE`].
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred_bytes
    }

    /// Usable size of the vdev (the `asize` given, rounded down to the alignment).
    pub fn asize_bytes(&self) -> u64 {
        self.asize_bytes
    }

    /// Allocation unit: every offset and size is a multiple of it.
    pub fn align_bytes(&self) -> u64 {
        self.align_bytes
    }

    /// The free tree (for `zdb`-style leak checks).
    pub fn free_tree(&self) -> &RangeTree {
        &self.free
    }

    /// Deferred frees as `(txg, start, len)`, by txg then start.
    pub fn deferred_iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.deferred.iter().flat_map(|(&txg, t)| t.iter().map(move |(s, l)| (txg, s, l)))
    }

    /// Whether every byte of `[offset, offset + size_bytes)` is allocated (neither free
    /// nor deferred) and inside the vdev.
    pub fn is_allocated(&self, offset: u64, size_bytes: u64) -> bool {
        match offset.checked_add(size_bytes) {
            Some(end) if end <= self.asize_bytes => {}
            _ => return false,
        }
        !self.free.overlaps(offset, size_bytes) && self.deferred.values().all(|t| !t.overlaps(offset, size_bytes))
    }

    /// Serializes this vdev's section of the space map (layout in the crate docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let mut deferred: Vec<(u64, u64, u64)> = self.deferred_iter().collect();
        deferred.sort_unstable_by_key(|&(_, s, _)| s);
        out.reserve(VDEV_SECTION_HEADER_BYTES + FREE_ENTRY_BYTES * self.free.len() + DEFERRED_ENTRY_BYTES * deferred.len());
        put(out, self.asize_bytes);
        put(out, self.free.len() as u64);
        put(out, deferred.len() as u64);
        for (s, l) in self.free.iter() {
            put(out, s);
            put(out, l);
        }
        for (txg, s, l) in deferred {
            put(out, txg);
            put(out, s);
            put(out, l);
        }
    }

    /// Parses one vdev section produced by [`VdevSpace::encode`], which must fill
    /// `bytes` exactly. `asize_bytes`/`align_bytes` come from the pool config; the
    /// encoded asize must equal `asize_bytes` rounded down to the alignment. Returns
    /// [`Corrupt`] (never panics) on any malformed, overlapping or out-of-range entry.
    pub fn decode(asize_bytes: u64, align_bytes: u64, bytes: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader { b: bytes, pos: 0 };
        let vs = Self::decode_from(asize_bytes, align_bytes, &mut r)?;
        r.finish()?;
        Ok(vs)
    }

    fn decode_from(asize_bytes: u64, align_bytes: u64, r: &mut Reader<'_>) -> Result<Self, Corrupt> {
        if align_bytes == 0 {
            return Err(Corrupt::new(KIND, "zero alignment"));
        }
        let usable = asize_bytes - asize_bytes % align_bytes;
        let enc_asize = r.u64()?;
        if enc_asize != usable {
            return Err(Corrupt::new(KIND, format!("asize {enc_asize} does not match vdev asize {usable}")));
        }
        let free_count = r.count(FREE_ENTRY_BYTES)?;
        let deferred_count = r.count(DEFERRED_ENTRY_BYTES)?;
        // Both arrays must fit in what is left (each count was checked alone).
        let need = free_count
            .checked_mul(FREE_ENTRY_BYTES)
            .and_then(|a| deferred_count.checked_mul(DEFERRED_ENTRY_BYTES).and_then(|b| a.checked_add(b)));
        if need.is_none_or(|n| n > r.remaining()) {
            return Err(Corrupt::new(KIND, "range arrays run past the end"));
        }

        let check_range = |what: &str, s: u64, l: u64, prev_end: Option<u64>, strict: bool| {
            if l == 0 {
                return Err(Corrupt::new(KIND, format!("{what} range at {s} is empty")));
            }
            if !s.is_multiple_of(align_bytes) || !l.is_multiple_of(align_bytes) {
                return Err(Corrupt::new(KIND, format!("{what} range [{s}, +{l}) is not {align_bytes}-aligned")));
            }
            match s.checked_add(l) {
                Some(e) if e <= usable => {}
                _ => return Err(Corrupt::new(KIND, format!("{what} range [{s}, +{l}) is outside asize {usable}"))),
            }
            if let Some(p) = prev_end {
                if s < p || (strict && s == p) {
                    return Err(Corrupt::new(KIND, format!("{what} range at {s} is unsorted, overlapping or unmerged")));
                }
            }
            Ok(s + l)
        };

        let mut free = RangeTree::new();
        let mut prev_end = None;
        for _ in 0..free_count {
            let (s, l) = (r.u64()?, r.u64()?);
            prev_end = Some(check_range("free", s, l, prev_end, true)?);
            if !free.try_add(s, l) {
                return Err(Corrupt::new(KIND, format!("free range at {s} overlaps")));
            }
        }

        let mut deferred: BTreeMap<u64, RangeTree> = BTreeMap::new();
        let mut deferred_bytes = 0u64;
        let mut prev_end = None;
        for _ in 0..deferred_count {
            let (txg, s, l) = (r.u64()?, r.u64()?, r.u64()?);
            prev_end = Some(check_range("deferred", s, l, prev_end, false)?);
            if free.overlaps(s, l) {
                return Err(Corrupt::new(KIND, format!("deferred range at {s} (txg {txg}) overlaps free space")));
            }
            if !deferred.entry(txg).or_default().try_add(s, l) {
                return Err(Corrupt::new(KIND, format!("deferred range at {s} (txg {txg}) overlaps")));
            }
            deferred_bytes += l; // <= usable: the ranges are disjoint and inside asize
        }

        let vs = VdevSpace {
            asize_bytes: usable,
            align_bytes,
            free,
            deferred,
            deferred_bytes,
            cursor_bytes: 0,
            class: AllocClass::Normal,
            allocatable: true,
        };
        vs.check();
        Ok(vs)
    }

    /// Panics unless every invariant of the theory statement holds: well-formed trees,
    /// aligned ranges inside asize, FREE and DEFERRED pairwise disjoint, and cached
    /// counters equal to the sums. O(extents log extents); for tests and `zdb`.
    pub fn verify(&self) {
        let al = self.align_bytes;
        assert_eq!(self.asize_bytes % al, 0, "VdevSpace: unaligned asize");
        let mut all = RangeTree::new();
        let mut deferred_sum = 0u64;
        let trees = std::iter::once(&self.free).chain(self.deferred.values());
        for tree in trees {
            tree.verify();
            for (s, l) in tree.iter() {
                assert!(s % al == 0 && l % al == 0, "VdevSpace: unaligned range [{s}, +{l})");
                assert!(s + l <= self.asize_bytes, "VdevSpace: range [{s}, +{l}) past asize");
                assert!(all.try_add(s, l), "VdevSpace: range [{s}, +{l}) is both free and deferred");
            }
        }
        for tree in self.deferred.values() {
            assert!(!tree.is_empty(), "VdevSpace: empty deferred tree kept");
            deferred_sum += tree.space_bytes();
        }
        assert_eq!(deferred_sum, self.deferred_bytes, "VdevSpace: stale deferred_bytes");
        assert_eq!(self.cursor_bytes % al, 0, "VdevSpace: unaligned cursor");
    }

    /// Runs [`VdevSpace::verify`] when tests or the `verify` feature ask for it.
    fn check(&self) {
        if cfg!(any(test, feature = "verify")) {
            self.verify();
        }
    }

    fn assert_size(&self, size_bytes: u64) {
        assert!(
            size_bytes > 0 && size_bytes.is_multiple_of(self.align_bytes),
            "VdevSpace: size {size_bytes} is not a non-zero multiple of {}",
            self.align_bytes
        );
    }

    fn assert_allocated(&self, offset: u64, size_bytes: u64) {
        self.assert_size(size_bytes);
        assert_eq!(offset % self.align_bytes, 0, "VdevSpace: unaligned offset {offset}");
        assert!(
            self.is_allocated(offset, size_bytes),
            "VdevSpace: free of [{offset}, +{size_bytes}) which is not allocated (double free?)"
        );
    }

    /// Lowest aligned offset `o` with `o >= from`, `o < to_exclusive`, and
    /// `[o, o + size)` inside one free range.
    fn first_fit(&self, size_bytes: u64, from: u64, to_exclusive: u64) -> Option<u64> {
        let al = self.align_bytes;
        let from = from.checked_add(al - 1)? / al * al;
        if size_bytes > self.free.space_bytes() || from >= to_exclusive {
            return None;
        }
        let head = self.free.map.range(..=from).next_back().filter(|&(_, &e)| e > from);
        let tail = self.free.map.range(from.saturating_add(1)..);
        for (&s, &e) in head.into_iter().chain(tail) {
            let cand = s.max(from);
            if cand >= to_exclusive {
                break;
            }
            if cand.checked_add(size_bytes).is_some_and(|end| end <= e) {
                return Some(cand);
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------------
// SpaceMap
// ---------------------------------------------------------------------------------

/// The pool's free space: one [`VdevSpace`] per top-level vdev, indexed by vdev id.
#[derive(Debug)]
pub struct SpaceMap {
    /// Per top-level vdev space, index = vdev id.
    pub vdevs: Vec<VdevSpace>,
    /// Next vdev id to prefer among ties in `pick_vdev`.
    rotor: AtomicU32,
    /// Next vdev id to try first in `pick_log_vdev`.
    log_rotor: AtomicU32,
    /// Frees from this txg on are held deferred ([`SpaceMap::hold_frees_from`]).
    hold_from_txg: Option<u64>,
}

impl Clone for SpaceMap {
    fn clone(&self) -> Self {
        SpaceMap {
            vdevs: self.vdevs.clone(),
            rotor: AtomicU32::new(self.rotor.load(Ordering::Relaxed)),
            log_rotor: AtomicU32::new(self.log_rotor.load(Ordering::Relaxed)),
            hold_from_txg: self.hold_from_txg,
        }
    }
}

impl From<Vec<VdevSpace>> for SpaceMap {
    fn from(vdevs: Vec<VdevSpace>) -> Self {
        SpaceMap::new(vdevs)
    }
}

impl SpaceMap {
    /// A space map over the given vdevs.
    pub fn new(vdevs: Vec<VdevSpace>) -> Self {
        SpaceMap {
            vdevs,
            rotor: AtomicU32::new(0),
            log_rotor: AtomicU32::new(0),
            hold_from_txg: None,
        }
    }

    /// A space map for a new pool: every vdev `(asize, align)` entirely free.
    pub fn create(vdevs: &[(u64, u64)]) -> Self {
        SpaceMap::new(vdevs.iter().map(|&(asize, align)| VdevSpace::new(asize, align)).collect())
    }

    /// Serializes the whole map (layout in the crate docs; always the current version).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, SPACE_MAP_MAGIC);
        put(&mut out, SPACE_MAP_VERSION);
        put(&mut out, self.vdevs.len() as u64);
        for v in &self.vdevs {
            put(&mut out, v.class.to_u64());
        }
        for v in &self.vdevs {
            v.encode_into(&mut out);
        }
        out
    }

    /// Parses a map produced by [`SpaceMap::encode`] (or a version 1 map, whose vdevs
    /// are all `Normal`). `vdevs` lists `(asize, align)` for each top-level vdev from
    /// the pool config (a hole has asize 0); the encoded vdev count and asizes must
    /// match, and a `Hole` must have asize 0. The caller checks the decoded classes
    /// against its config. Returns [`Corrupt`] (never panics) on malformed bytes.
    pub fn decode(vdevs: &[(u64, u64)], bytes: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader { b: bytes, pos: 0 };
        let magic = r.u64()?;
        if magic != SPACE_MAP_MAGIC {
            return Err(Corrupt::new(KIND, format!("bad magic {magic:#018x}")));
        }
        let version = r.u64()?;
        if !(SPACE_MAP_VERSION_MIN..=SPACE_MAP_VERSION).contains(&version) {
            return Err(Corrupt::new(KIND, format!("unsupported version {version}")));
        }
        let count = r.u64()?;
        if count != vdevs.len() as u64 {
            return Err(Corrupt::new(KIND, format!("{count} vdevs encoded, pool has {}", vdevs.len())));
        }
        let mut classes = vec![AllocClass::Normal; vdevs.len()];
        if version >= 2 {
            for (i, c) in classes.iter_mut().enumerate() {
                let v = r.u64()?;
                *c = AllocClass::from_u64(v).ok_or_else(|| Corrupt::new(KIND, format!("vdev {i}: unknown class {v}")))?;
            }
        }
        let mut out = Vec::with_capacity(vdevs.len());
        for (i, (&(asize, align), class)) in vdevs.iter().zip(classes).enumerate() {
            if class == AllocClass::Hole {
                if asize != 0 {
                    return Err(Corrupt::new(KIND, format!("vdev {i} is a hole but the config gives it {asize} bytes")));
                }
                // A hole's section is the empty section of a zero-sized vdev.
                VdevSpace::decode_from(0, 1, &mut r)?;
                out.push(VdevSpace::hole());
                continue;
            }
            let mut vs = VdevSpace::decode_from(asize, align, &mut r)?;
            vs.class = class;
            out.push(vs);
        }
        r.finish()?;
        Ok(SpaceMap::new(out))
    }

    /// Chooses the top-level vdev for a new block: the `Normal`, allocatable vdev with
    /// the most free bytes, skipping the ids in `exclude` (vdevs already holding a copy
    /// of the block). Round-robin among ties. Never a `Log` vdev or a hole. `None` if
    /// every candidate is excluded or full.
    pub fn pick_vdev(&self, exclude: &[u32]) -> Option<u32> {
        let n = self.vdevs.len();
        let candidate = |i: usize| {
            let v = &self.vdevs[i];
            v.class == AllocClass::Normal && v.is_allocatable() && !exclude.contains(&(i as u32))
        };
        let best = (0..n).filter(|&i| candidate(i)).map(|i| self.vdevs[i].free_bytes()).max()?;
        if best == 0 {
            return None;
        }
        let start = self.rotor.load(Ordering::Relaxed) as usize % n;
        let chosen = (0..n).map(|k| (start + k) % n).find(|&i| candidate(i) && self.vdevs[i].free_bytes() == best)?;
        self.rotor.store(((chosen + 1) % n) as u32, Ordering::Relaxed);
        Some(chosen as u32)
    }

    /// Chooses a separate intent-log vdev for the next log block: an allocatable
    /// `Log`-class vdev with free space, not in `exclude`, taking them in turn
    /// (round-robin from the one after the previous pick) so that consecutive log
    /// blocks are striped over all log vdevs. `None` when the pool has no usable log
    /// vdev (the ZIL then allocates from the normal class, as OpenZFS does).
    pub fn pick_log_vdev(&self, exclude: &[u32]) -> Option<u32> {
        let n = self.vdevs.len();
        if n == 0 {
            return None;
        }
        let start = self.log_rotor.load(Ordering::Relaxed) as usize % n;
        let chosen = (0..n).map(|k| (start + k) % n).find(|&i| {
            let v = &self.vdevs[i];
            v.class == AllocClass::Log && v.is_allocatable() && v.free_bytes() > 0 && !exclude.contains(&(i as u32))
        })?;
        self.log_rotor.store(((chosen + 1) % n) as u32, Ordering::Relaxed);
        Some(chosen as u32)
    }

    /// The vdevs of `class`.
    fn of_class(&self, class: AllocClass) -> impl Iterator<Item = &VdevSpace> {
        self.vdevs.iter().filter(move |v| v.class == class)
    }

    /// Bytes allocatable now, summed over `Normal` vdevs (log space is not pool space).
    pub fn free_bytes(&self) -> u64 {
        self.class_free_bytes(AllocClass::Normal)
    }

    /// Bytes allocated, summed over `Normal` vdevs.
    pub fn alloc_bytes(&self) -> u64 {
        self.class_alloc_bytes(AllocClass::Normal)
    }

    /// Bytes in deferred frees, summed over `Normal` vdevs.
    pub fn deferred_bytes(&self) -> u64 {
        self.of_class(AllocClass::Normal).map(VdevSpace::deferred_bytes).sum()
    }

    /// Usable bytes, summed over `Normal` vdevs.
    pub fn asize_bytes(&self) -> u64 {
        self.class_asize_bytes(AllocClass::Normal)
    }

    /// Bytes allocatable now on the vdevs of `class`.
    pub fn class_free_bytes(&self, class: AllocClass) -> u64 {
        self.of_class(class).map(VdevSpace::free_bytes).sum()
    }

    /// Bytes allocated on the vdevs of `class`.
    pub fn class_alloc_bytes(&self, class: AllocClass) -> u64 {
        self.of_class(class).map(VdevSpace::alloc_bytes).sum()
    }

    /// Usable bytes of the vdevs of `class`.
    pub fn class_asize_bytes(&self, class: AllocClass) -> u64 {
        self.of_class(class).map(VdevSpace::asize_bytes).sum()
    }

    /// Txg `synced_txg` has synced: release aged deferred frees on every vdev, except
    /// those freed in or after the txg given to [`SpaceMap::hold_frees_from`].
    pub fn sync_done(&mut self, synced_txg: u64) {
        let hold = self.hold_from_txg.unwrap_or(u64::MAX);
        for v in &mut self.vdevs {
            v.sync_done(synced_txg, hold);
        }
    }

    /// Keep every block freed in txg `txg` or later out of the free trees (they stay
    /// deferred) until called with `None`. A scan holds frees while it works on a
    /// traversal of txg `txg - 1`, so that no block it is about to read or rewrite can
    /// be reallocated and rewritten under it (OpenZFS handles the same race by removing
    /// freed blocks from its scan queues). Not persisted: a restarted scan traverses
    /// again.
    pub fn hold_frees_from(&mut self, txg: Option<u64>) {
        self.hold_from_txg = txg;
    }
}

// ---------------------------------------------------------------------------------
// Byte helpers
// ---------------------------------------------------------------------------------

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Bounds-checked little-endian reader: every read returns `Corrupt` past the end.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        let chunk = self
            .b
            .get(self.pos..self.pos + 8)
            .ok_or_else(|| Corrupt::new(KIND, format!("truncated at byte {}", self.pos)))?;
        self.pos += 8;
        Ok(u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
    }

    /// Reads a count of entries of `entry_bytes` each, rejecting one that cannot fit.
    fn count(&mut self, entry_bytes: usize) -> Result<usize, Corrupt> {
        let n = self.u64()?;
        if n > (self.remaining() / entry_bytes) as u64 {
            return Err(Corrupt::new(KIND, format!("count {n} exceeds the remaining {} bytes", self.remaining())));
        }
        Ok(n as usize)
    }

    fn finish(&self) -> Result<(), Corrupt> {
        if self.pos != self.b.len() {
            return Err(Corrupt::new(KIND, format!("{} trailing bytes", self.b.len() - self.pos)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
