//! [`Metaslab`]: one fixed-size slice of a top-level vdev with its own free space.
//!
//! Owns the in-memory state of one metaslab: FREE ([`RangeTree`]), DEFERRED(txg)
//! (one tree per freeing txg), the allocation cursor, and its persistence bookkeeping
//! (flush txg, condensed-map pointer, the oldest txg whose log records it still needs).
//! Offsets are absolute vdev offsets. Transitions are [`Metaslab::apply`]'d as
//! [`RecordKind`]s, the same records the space-map log stores, so that replay at import
//! runs exactly the code that produced the state. Invariants are those of the crate
//! theory statement, checked by [`Metaslab::verify`]. Called by [`crate::VdevSpace`]
//! and by the import replay in `persist`.

use crate::range_tree::RangeTree;
use crate::{RecordKind, TXG_DEFER_SIZE};
use std::collections::BTreeMap;
use tarn_phys::BlkPtr;

/// A metaslab switches from first fit to best fit when its largest free segment is
/// smaller than this (OpenZFS `metaslab_df_alloc_threshold`, 128 KiB).
pub const DF_ALLOC_THRESHOLD_BYTES: u64 = 128 << 10;

/// ... or when less than this percentage of it is free (OpenZFS `metaslab_df_free_pct`).
pub const DF_FREE_PCT: u64 = 4;

/// Fragmentation percentage of free space in a segment of `2^(9 + i)` bytes
/// (OpenZFS `zfs_frag_table`: 512 B segments count as 100% fragmented, 16 MiB and
/// larger as 0%).
pub const FRAG_TABLE_PCT: [u64; 16] = [100, 100, 98, 95, 90, 80, 70, 60, 50, 40, 30, 20, 15, 10, 5, 0];

/// One metaslab: `[start_bytes, start_bytes + size_bytes)` of its vdev.
#[derive(Debug, Clone)]
pub struct Metaslab {
    start_bytes: u64,
    size_bytes: u64,
    pub(crate) free: RangeTree,
    /// Freeing txg -> ranges freed in it, not yet reusable.
    pub(crate) deferred: BTreeMap<u64, RangeTree>,
    deferred_bytes: u64,
    /// Where the next first-fit search starts (end of the previous allocation).
    cursor_bytes: u64,
    /// Txg whose state the condensed map holds (records of later txgs apply).
    pub(crate) flush_txg: u64,
    /// The condensed map's chunks as of `flush_txg`, head first (the directory page
    /// points at the head, each chunk at the next); empty means "entirely free at
    /// `flush_txg`".
    pub(crate) map_bps: Vec<BlkPtr>,
    /// Txg of the oldest log record not covered by the map (None: the map is current).
    pub(crate) unflushed_txg: Option<u64>,
}

impl Metaslab {
    /// A metaslab whose whole range is free.
    pub fn new(start_bytes: u64, size_bytes: u64) -> Self {
        let mut free = RangeTree::new();
        if size_bytes > 0 {
            free.add(start_bytes, size_bytes);
        }
        Metaslab {
            start_bytes,
            size_bytes,
            free,
            deferred: BTreeMap::new(),
            deferred_bytes: 0,
            cursor_bytes: start_bytes,
            flush_txg: 0,
            map_bps: Vec::new(),
            unflushed_txg: None,
        }
    }

    /// First byte of the metaslab (a vdev offset).
    pub fn start_bytes(&self) -> u64 {
        self.start_bytes
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Bytes allocatable now.
    pub fn free_bytes(&self) -> u64 {
        self.free.space_bytes()
    }

    /// Bytes freed in the last [`TXG_DEFER_SIZE`] txgs, not yet allocatable.
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred_bytes
    }

    /// The free tree.
    pub fn free_tree(&self) -> &RangeTree {
        &self.free
    }

    /// Txg of the last flush of this metaslab's condensed map.
    pub fn flush_txg(&self) -> u64 {
        self.flush_txg
    }

    /// Whether `[start, start + len)` lies inside this metaslab.
    pub fn covers(&self, start: u64, len: u64) -> bool {
        start >= self.start_bytes && start.checked_add(len).is_some_and(|e| e <= self.start_bytes + self.size_bytes)
    }

    /// Whether the range is inside, neither free nor deferred.
    pub fn is_allocated(&self, start: u64, len: u64) -> bool {
        self.covers(start, len) && !self.free.overlaps(start, len) && self.deferred.values().all(|t| !t.overlaps(start, len))
    }

    /// Applies one transition; returns false (changing nothing) when it is not legal
    /// from the current state. `range` must lie inside the metaslab (checked).
    ///
    /// - `Alloc`: FREE → ALLOCATED (the range must be inside one free extent)
    /// - `Free`: ALLOCATED → DEFERRED(`txg`)
    /// - `FreeNow`: ALLOCATED → FREE
    /// - `Release`: DEFERRED(`txg`) → FREE
    #[must_use]
    pub fn apply(&mut self, kind: RecordKind, start: u64, len: u64, txg: u64) -> bool {
        if len == 0 || !self.covers(start, len) {
            return false;
        }
        match kind {
            RecordKind::Alloc => {
                if !self.free.contains(start, len) {
                    return false;
                }
                self.free.remove(start, len);
            }
            RecordKind::Free => {
                if !self.is_allocated(start, len) {
                    return false;
                }
                self.deferred.entry(txg).or_default().add(start, len);
                self.deferred_bytes += len;
            }
            RecordKind::FreeNow => {
                if !self.is_allocated(start, len) {
                    return false;
                }
                self.free.add(start, len);
            }
            RecordKind::Release => {
                let Some(tree) = self.deferred.get_mut(&txg) else { return false };
                if !tree.contains(start, len) {
                    return false;
                }
                tree.remove(start, len);
                if tree.is_empty() {
                    self.deferred.remove(&txg);
                }
                self.deferred_bytes -= len;
                self.free.add(start, len);
            }
        }
        true
    }

    /// Chooses an offset for `size_bytes` (a multiple of `align_bytes`) without
    /// allocating it: first fit from the cursor (wrapping once) while the metaslab is
    /// not fragmented, best fit once its largest free segment is under
    /// [`DF_ALLOC_THRESHOLD_BYTES`] or less than [`DF_FREE_PCT`] of it is free
    /// (OpenZFS `metaslab_df_alloc`).
    pub fn pick(&self, size_bytes: u64) -> Option<u64> {
        if self.free.max_segment_bytes() < size_bytes {
            return None;
        }
        let fragmented = self.free.max_segment_bytes() < DF_ALLOC_THRESHOLD_BYTES
            || self.free.space_bytes().saturating_mul(100) < self.size_bytes.saturating_mul(DF_FREE_PCT);
        if fragmented {
            return self.free.best_fit(size_bytes);
        }
        let end = self.start_bytes + self.size_bytes;
        self.first_fit(size_bytes, self.cursor_bytes, end)
            .or_else(|| self.first_fit(size_bytes, self.start_bytes, self.cursor_bytes))
    }

    /// Moves the cursor past an allocation that ends at `end_bytes`.
    pub(crate) fn set_cursor(&mut self, end_bytes: u64) {
        self.cursor_bytes = end_bytes;
    }

    /// Lowest offset `o` in `[from, to_exclusive)` with `[o, o + size)` inside one free
    /// range. Ranges are aligned, so any fitting offset at a range start is aligned;
    /// `from` must be aligned by the caller.
    pub fn first_fit(&self, size_bytes: u64, from: u64, to_exclusive: u64) -> Option<u64> {
        if from >= to_exclusive {
            return None;
        }
        for (s, e) in self.free.iter_from(from) {
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

    /// Releases deferred frees of txgs `t` with `t + TXG_DEFER_SIZE <= synced_txg` and
    /// `t < hold_from_txg`; returns the released `(txg, start, len)`.
    pub(crate) fn sync_done(&mut self, synced_txg: u64, hold_from_txg: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        while let Some(entry) = self.deferred.first_entry() {
            let txg = *entry.key();
            if txg.saturating_add(TXG_DEFER_SIZE) > synced_txg || txg >= hold_from_txg {
                break;
            }
            let tree = entry.remove();
            for (start, len) in tree.iter() {
                self.free.add(start, len);
                out.push((txg, start, len));
            }
            self.deferred_bytes -= tree.space_bytes();
        }
        out
    }

    /// Fragmentation of the free space, 0–100 (OpenZFS `metaslab_set_fragmentation`):
    /// the free bytes of each power-of-two segment-size bucket weighted by
    /// [`FRAG_TABLE_PCT`]. A metaslab without free space counts as 0.
    pub fn fragmentation_pct(&self) -> u64 {
        let hist = self.free.histogram_bytes();
        let (mut weighted, mut total) = (0u128, 0u128);
        for (b, &bytes) in hist.iter().enumerate() {
            if bytes == 0 {
                continue;
            }
            let idx = b.saturating_sub(9).min(FRAG_TABLE_PCT.len() - 1);
            weighted += bytes as u128 * FRAG_TABLE_PCT[idx] as u128;
            total += bytes as u128;
        }
        weighted.checked_div(total).map_or(0, |f| f as u64)
    }

    /// Allocation preference (OpenZFS `metaslab_space_weight`): free bytes discounted
    /// by fragmentation, then doubled at the start of the vdev and scaled down
    /// linearly to 1× at its end (outer tracks of a disk are faster; it also keeps a
    /// young pool's allocations together).
    pub fn weight(&self, index: usize, count: usize) -> u64 {
        let space = self.free_bytes() as u128 * (101 - self.fragmentation_pct().max(1)) as u128 / 100;
        let count = count.max(1) as u128;
        (2 * space - space * index as u128 / count) as u64
    }

    /// Panics unless the trees are well formed, inside the metaslab, aligned to
    /// `align_bytes`, pairwise disjoint, and the cached counters match.
    pub fn verify(&self, align_bytes: u64) {
        let mut all = RangeTree::new();
        let mut deferred_sum = 0u64;
        for tree in std::iter::once(&self.free).chain(self.deferred.values()) {
            tree.verify();
            for (s, l) in tree.iter() {
                assert!(s % align_bytes == 0 && l % align_bytes == 0, "Metaslab: unaligned range [{s}, +{l})");
                assert!(
                    self.covers(s, l),
                    "Metaslab: range [{s}, +{l}) outside [{}, +{})",
                    self.start_bytes,
                    self.size_bytes
                );
                assert!(all.try_add(s, l), "Metaslab: range [{s}, +{l}) is both free and deferred");
            }
        }
        for tree in self.deferred.values() {
            assert!(!tree.is_empty(), "Metaslab: empty deferred tree kept");
            deferred_sum += tree.space_bytes();
        }
        assert_eq!(deferred_sum, self.deferred_bytes, "Metaslab: stale deferred_bytes");
    }

    /// Replaces the state with a decoded condensed map (import).
    pub(crate) fn set_state(&mut self, free: RangeTree, deferred: BTreeMap<u64, RangeTree>) {
        self.deferred_bytes = deferred.values().map(RangeTree::space_bytes).sum();
        self.free = free;
        self.deferred = deferred;
    }
}
