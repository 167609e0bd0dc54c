//! [`VdevSpace`]: one top-level vdev's space as an array of [`Metaslab`]s.
//!
//! Owns the metaslab array, the active metaslab, and the vdev's *pending records*:
//! every state change since the last txg sync drained them, in order, as
//! [`LogRecord`]s (merged with the previous record when adjacent and of the same kind).
//! The records are what the space-map log persists. Allocations made *ahead* (for the
//! txg after the one the next drain logs, while a sync runs) keep their records, and
//! those of the frees of their ranges, in a list of their own until
//! [`VdevSpace::sync_done`] (crate theory statement, "Allocations ahead of the sync").
//! See the crate theory statement for states, policy and invariants; called by
//! [`crate::SpaceMap`], `zio` and the ZIL.

use crate::metaslab::Metaslab;
use crate::range_tree::RangeTree;
use crate::{AllocClass, LogRecord, RecordKind};
use tarn_phys::BlkPtr;

/// Smallest metaslab shift (16 MiB, OpenZFS `SPA_MAXBLOCKSHIFT`).
pub const MS_SHIFT_MIN: u32 = 24;
/// Largest metaslab shift chosen by [`default_ms_shift`] (16 GiB, OpenZFS
/// `zfs_vdev_max_ms_shift`).
pub const MS_SHIFT_MAX: u32 = 34;
/// Preferred metaslab shift (512 MiB, OpenZFS `zfs_vdev_default_ms_shift`).
pub const MS_SHIFT_DEFAULT: u32 = 29;
/// Target number of metaslabs per vdev (OpenZFS `zfs_vdev_default_ms_count`).
pub const MS_COUNT_DEFAULT: u64 = 200;
/// Minimum metaslabs per vdev before smaller ones are used (`zfs_vdev_min_ms_count`).
pub const MS_COUNT_MIN: u64 = 16;
/// Hard limit on metaslabs per vdev (`zfs_vdev_ms_count_limit`); also the bound
/// the decoder enforces.
pub const MS_COUNT_LIMIT: u64 = 1 << 17;

fn highbit(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// Metaslab shift for a vdev of `asize_bytes` (OpenZFS `vdev_metaslab_set_size`):
/// 512 MiB metaslabs when that gives 16–200 of them, else `asize / 200` (or
/// `asize / 16` for small vdevs) rounded up to a power of two, clamped to
/// [`MS_SHIFT_MIN`]..=[`MS_SHIFT_MAX`], and grown if the count would pass
/// [`MS_COUNT_LIMIT`].
pub fn default_ms_shift(asize_bytes: u64) -> u32 {
    let count = asize_bytes >> MS_SHIFT_DEFAULT;
    let mut shift = if count < MS_COUNT_MIN {
        highbit(asize_bytes / MS_COUNT_MIN)
    } else if count > MS_COUNT_DEFAULT {
        highbit(asize_bytes / MS_COUNT_DEFAULT)
    } else {
        MS_SHIFT_DEFAULT
    };
    shift = shift.min(MS_SHIFT_MAX);
    if asize_bytes >> shift > MS_COUNT_LIMIT {
        shift = highbit(asize_bytes / MS_COUNT_LIMIT);
    }
    shift.max(MS_SHIFT_MIN)
}

/// Metaslab size for `ms_shift` on a vdev allocating in units of `align_bytes`:
/// `2^ms_shift` rounded down to the alignment (raidz units are not powers of two).
pub fn ms_size_bytes(ms_shift: u32, align_bytes: u64) -> u64 {
    let raw = 1u64 << ms_shift;
    (raw / align_bytes).max(1) * align_bytes
}

/// One top-level vdev's allocatable space. See the crate theory statement.
#[derive(Debug, Clone)]
pub struct VdevSpace {
    asize_bytes: u64,
    align_bytes: u64,
    ms_shift: u32,
    ms_size_bytes: u64,
    pub(crate) ms: Vec<Metaslab>,
    /// Metaslab `alloc` tries first (the one that served the previous allocation).
    active: Option<usize>,
    free_bytes: u64,
    deferred_bytes: u64,
    class: AllocClass,
    allocatable: bool,
    /// Changes since the last drain, in order.
    pub(crate) pending: Vec<LogRecord>,
    /// Records of allocations made ahead and of frees of their ranges, in order; handed
    /// to `pending` by [`VdevSpace::sync_done`]. The allocations are applied in memory
    /// when made, the frees only when handed over.
    ahead: Vec<LogRecord>,
    /// Ranges allocated ahead and not freed since: allocated in memory, free in the
    /// state the next drain logs.
    ahead_allocated: RangeTree,
    /// Ranges allocated ahead and freed again: allocated in memory until
    /// [`VdevSpace::sync_done`] applies the free, so that no allocation whose record
    /// the next drain logs can take a range whose own allocation it does not.
    ahead_freed: RangeTree,
    /// Created (or attached) since the last sync: its directory is written whole then.
    pub(crate) fresh: bool,
    /// Directory page pointers (see `ondisk`), [`crate::DIR_PAGES`] of them for a
    /// non-hole vdev once synced.
    pub(crate) page_bps: Vec<BlkPtr>,
}

impl VdevSpace {
    /// A vdev whose whole space is free, split into metaslabs of
    /// [`default_ms_shift`]. `asize_bytes` is rounded down to a multiple of
    /// `align_bytes` (non-zero; panics otherwise).
    pub fn new(asize_bytes: u64, align_bytes: u64) -> Self {
        Self::with_ms_shift(asize_bytes, align_bytes, default_ms_shift(asize_bytes))
    }

    /// Like [`VdevSpace::new`] with an explicit metaslab shift (tests use small ones).
    pub fn with_ms_shift(asize_bytes: u64, align_bytes: u64, ms_shift: u32) -> Self {
        assert!(align_bytes > 0, "VdevSpace: zero alignment");
        assert!((9..=40).contains(&ms_shift), "VdevSpace: ms_shift {ms_shift} out of range");
        let usable = asize_bytes - asize_bytes % align_bytes;
        let ms_size = ms_size_bytes(ms_shift, align_bytes);
        let count = usable.div_ceil(ms_size);
        assert!(count <= MS_COUNT_LIMIT, "VdevSpace: {count} metaslabs");
        let ms = (0..count).map(|i| Metaslab::new(i * ms_size, ms_size.min(usable - i * ms_size))).collect();
        let vs = VdevSpace {
            asize_bytes: usable,
            align_bytes,
            ms_shift,
            ms_size_bytes: ms_size,
            ms,
            active: None,
            free_bytes: usable,
            deferred_bytes: 0,
            class: AllocClass::Normal,
            allocatable: true,
            pending: Vec::new(),
            ahead: Vec::new(),
            ahead_allocated: RangeTree::new(),
            ahead_freed: RangeTree::new(),
            fresh: true,
            page_bps: Vec::new(),
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
            ..VdevSpace::with_ms_shift(0, 1, MS_SHIFT_MIN)
        }
    }

    /// What this vdev's space is for.
    pub fn class(&self) -> AllocClass {
        self.class
    }

    pub(crate) fn set_class(&mut self, class: AllocClass) {
        self.class = class;
    }

    /// Whether [`crate::SpaceMap::pick_vdev`] / [`crate::SpaceMap::pick_log_vdev`] may
    /// choose this vdev (false for holes, and while a vdev is being removed or missing).
    pub fn is_allocatable(&self) -> bool {
        self.allocatable && self.class != AllocClass::Hole
    }

    /// Allow or forbid the pickers to choose this vdev. Blocks already allocated stay
    /// and can be freed; `alloc` itself is not refused (the pickers are the gate).
    /// Not persisted: a vdev is allocatable again after import.
    pub fn set_allocatable(&mut self, allocatable: bool) {
        self.allocatable = allocatable;
    }

    /// Metaslab shift (log2 of the nominal metaslab size in bytes).
    pub fn ms_shift(&self) -> u32 {
        self.ms_shift
    }

    /// Size of every metaslab but possibly the last, in bytes.
    pub fn ms_size_bytes(&self) -> u64 {
        self.ms_size_bytes
    }

    /// The metaslabs, by index (metaslab `i` starts at `i * ms_size_bytes`).
    pub fn metaslabs(&self) -> &[Metaslab] {
        &self.ms
    }

    /// Index of the metaslab holding byte `offset`.
    pub(crate) fn ms_index(&self, offset: u64) -> usize {
        (offset / self.ms_size_bytes) as usize
    }

    /// Splits `[start, start + len)` at metaslab boundaries: `(index, start, len)`.
    /// `None` when the range leaves the vdev or is empty.
    pub(crate) fn pieces(&self, start: u64, len: u64) -> Option<Vec<(usize, u64, u64)>> {
        let end = start.checked_add(len)?;
        if len == 0 || end > self.asize_bytes {
            return None;
        }
        let mut out = Vec::new();
        let mut s = start;
        while s < end {
            let i = self.ms_index(s);
            let ms_end = (i as u64 + 1) * self.ms_size_bytes;
            let e = end.min(ms_end);
            out.push((i, s, e - s));
            s = e;
        }
        Some(out)
    }

    /// Records a change for the space-map log, merging it into the previous record
    /// when that one is of the same kind and txg, ends where this one starts, and
    /// both lie in the same metaslab (replaying the merged record is legal exactly
    /// when replaying the two was).
    fn record(&mut self, kind: RecordKind, start: u64, len: u64, txg: u64) {
        if let Some(last) = self.pending.last_mut() {
            if last.kind == kind
                && last.txg == txg
                && last.start_bytes + last.len_bytes == start
                && last.start_bytes / self.ms_size_bytes == start / self.ms_size_bytes
            {
                last.len_bytes += len;
                return;
            }
        }
        self.pending.push(LogRecord {
            vdev: 0,
            kind,
            start_bytes: start,
            len_bytes: len,
            txg,
        });
    }

    /// Applies a legal transition to metaslab `i` and records it. Panics if illegal.
    fn apply_recorded(&mut self, i: usize, kind: RecordKind, start: u64, len: u64, txg: u64) {
        assert!(
            self.ms[i].apply(kind, start, len, txg),
            "VdevSpace: illegal {kind:?} of [{start}, +{len}) (double free?)"
        );
        self.count_recorded(kind, start, len, txg);
    }

    /// The counters and the log record of a transition a metaslab has just applied.
    fn count_recorded(&mut self, kind: RecordKind, start: u64, len: u64, txg: u64) {
        self.count(kind, len);
        self.record(kind, start, len, txg);
    }

    /// The counters of a transition a metaslab has just applied.
    fn count(&mut self, kind: RecordKind, len: u64) {
        match kind {
            RecordKind::Alloc => self.free_bytes -= len,
            RecordKind::Free => self.deferred_bytes += len,
            RecordKind::FreeNow => self.free_bytes += len,
            RecordKind::Release => {
                self.deferred_bytes -= len;
                self.free_bytes += len;
            }
        }
    }

    /// Allocates `[offset, offset + size_bytes)` in metaslab `i` (free: the caller
    /// found it there), recorded in `pending`, or in `ahead` when `ahead`.
    fn alloc_range(&mut self, i: usize, offset: u64, size_bytes: u64, ahead: bool) {
        if ahead {
            assert!(
                self.ms[i].apply(RecordKind::Alloc, offset, size_bytes, 0),
                "VdevSpace: ahead allocation of [{offset}, +{size_bytes}) which is not free"
            );
            self.count(RecordKind::Alloc, size_bytes);
            self.ahead.push(LogRecord {
                vdev: 0,
                kind: RecordKind::Alloc,
                start_bytes: offset,
                len_bytes: size_bytes,
                txg: 0,
            });
            self.ahead_allocated.add(offset, size_bytes);
        } else {
            self.apply_recorded(i, RecordKind::Alloc, offset, size_bytes, 0);
        }
    }

    fn take(&mut self, i: usize, offset: u64, size_bytes: u64, ahead: bool) -> u64 {
        self.alloc_range(i, offset, size_bytes, ahead);
        self.ms[i].set_cursor(offset + size_bytes);
        self.check();
        offset
    }

    /// Allocates `size_bytes` (a non-zero multiple of the alignment; panics otherwise)
    /// and returns its offset. Tries the active metaslab first (so consecutive
    /// allocations are consecutive on disk), then the others by decreasing
    /// [`Metaslab::weight`]; inside a metaslab first fit from its cursor, or best fit
    /// once it is fragmented ([`Metaslab::pick`]). `None` if nothing fits.
    pub fn alloc(&mut self, size_bytes: u64) -> Option<u64> {
        self.alloc_with(size_bytes, false)
    }

    /// [`VdevSpace::alloc`], made ahead when `ahead`: for the txg after the one the
    /// next drain logs (a sync is in progress). Its record waits in a list of its own
    /// until [`VdevSpace::sync_done`], and a map flushed before that shows the range
    /// free (crate theory statement, "Allocations ahead of the sync").
    pub fn alloc_with(&mut self, size_bytes: u64, ahead: bool) -> Option<u64> {
        self.assert_size(size_bytes);
        if size_bytes > self.free_bytes {
            return None;
        }
        if let Some(a) = self.active {
            if let Some(off) = self.ms[a].pick(size_bytes) {
                return Some(self.take(a, off, size_bytes, ahead));
            }
        }
        let n = self.ms.len();
        let mut order: Vec<(u64, usize)> = (0..n)
            .filter(|&i| Some(i) != self.active && self.ms[i].free_tree().max_segment_bytes() >= size_bytes)
            .map(|i| (self.ms[i].weight(i, n), i))
            .collect();
        order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in order {
            if let Some(off) = self.ms[i].pick(size_bytes) {
                self.active = Some(i);
                return Some(self.take(i, off, size_bytes, ahead));
            }
        }
        None
    }

    /// Allocates `size_bytes` for a ditto copy on the same vdev as a copy at
    /// `avoid_offset`: prefers an offset at least `asize / 8` away from it (first
    /// after it, then before it), and falls back to any free offset. No cursor moves
    /// and the active metaslab stays, so the ditto does not disturb sequential
    /// placement. `None` if nothing fits.
    pub fn alloc_near(&mut self, size_bytes: u64, avoid_offset: u64) -> Option<u64> {
        self.alloc_near_with(size_bytes, avoid_offset, false)
    }

    /// [`VdevSpace::alloc_near`], made ahead when `ahead` (see
    /// [`VdevSpace::alloc_with`]).
    pub fn alloc_near_with(&mut self, size_bytes: u64, avoid_offset: u64, ahead: bool) -> Option<u64> {
        self.assert_size(size_bytes);
        let gap = self.asize_bytes / 8;
        let after = self.first_fit(size_bytes, avoid_offset.saturating_add(gap), u64::MAX);
        let before = || match avoid_offset.checked_sub(gap) {
            Some(last) => self.first_fit(size_bytes, 0, last.saturating_add(1)),
            None => None,
        };
        let (i, offset) = after.or_else(before).or_else(|| self.first_fit(size_bytes, 0, u64::MAX))?;
        self.alloc_range(i, offset, size_bytes, ahead);
        self.check();
        Some(offset)
    }

    /// Lowest aligned `(metaslab, offset)` with `from <= offset < to_exclusive` and
    /// the block inside one free range.
    fn first_fit(&self, size_bytes: u64, from: u64, to_exclusive: u64) -> Option<(usize, u64)> {
        let al = self.align_bytes;
        let from = from.checked_add(al - 1)? / al * al;
        if size_bytes > self.free_bytes || from >= self.asize_bytes {
            return None;
        }
        (self.ms_index(from)..self.ms.len()).find_map(|i| {
            let m = &self.ms[i];
            if m.free_tree().max_segment_bytes() < size_bytes {
                return None;
            }
            m.first_fit(size_bytes, from.max(m.start_bytes()), to_exclusive).map(|o| (i, o))
        })
    }

    /// Marks `[offset, offset + size_bytes)` allocated if it is entirely free and
    /// aligned; returns whether it was. For ZIL claim at import (the record is logged
    /// like an alloc). The range comes from a log block pointer read from disk: an
    /// unaligned one is refused (it would put a range finer than the allocation unit
    /// into the free tree).
    #[must_use]
    pub fn claim(&mut self, offset: u64, size_bytes: u64) -> bool {
        if !self.is_aligned(offset, size_bytes) {
            return false;
        }
        let Some(pieces) = self.pieces(offset, size_bytes) else { return false };
        if !pieces.iter().all(|&(i, s, l)| self.ms[i].free_tree().contains(s, l)) {
            return false;
        }
        for (i, s, l) in pieces {
            self.apply_recorded(i, RecordKind::Alloc, s, l, 0);
        }
        self.check();
        true
    }

    /// Frees an allocated block in txg `txg`. The space stays DEFERRED, not
    /// allocatable, until `sync_done(txg + TXG_DEFER_SIZE)`. Panics if the range is
    /// unaligned, outside the vdev, or not currently allocated (double free).
    pub fn free(&mut self, txg: u64, offset: u64, size_bytes: u64) {
        self.release_or_panic(RecordKind::Free, txg, offset, size_bytes);
    }

    /// Frees an allocated block immediately. Only for blocks born in the same open txg
    /// that no synced state can reference. Panics like [`VdevSpace::free`].
    pub fn free_now(&mut self, offset: u64, size_bytes: u64) {
        self.release_or_panic(RecordKind::FreeNow, 0, offset, size_bytes);
    }

    /// [`VdevSpace::try_release`] for internal callers, whose refused free is a bug:
    /// panics with what was wrong (size, alignment, or not allocated).
    fn release_or_panic(&mut self, kind: RecordKind, txg: u64, offset: u64, size_bytes: u64) {
        self.assert_size(size_bytes);
        assert_eq!(offset % self.align_bytes, 0, "VdevSpace: unaligned offset {offset}");
        assert!(
            self.try_release(kind, txg, offset, size_bytes),
            "VdevSpace: free of [{offset}, +{size_bytes}) which is not allocated (double free?)"
        );
    }

    /// [`VdevSpace::free`] of a range that may not be freeable (a block pointer read
    /// from disk, which may be crafted): frees it and returns true when
    /// [`VdevSpace::is_freeable`] holds, else changes nothing and returns false.
    pub fn try_free(&mut self, txg: u64, offset: u64, size_bytes: u64) -> bool {
        self.try_release(RecordKind::Free, txg, offset, size_bytes)
    }

    /// [`VdevSpace::free_now`] that refuses, changing nothing and returning false,
    /// where [`VdevSpace::try_free`] would.
    pub fn try_free_now(&mut self, offset: u64, size_bytes: u64) -> bool {
        self.try_release(RecordKind::FreeNow, 0, offset, size_bytes)
    }

    /// A `Free` or `FreeNow` of the range when it is freeable, checking each piece's
    /// allocation once: a range in one metaslab is checked by the metaslab's own
    /// transition (which changes nothing when illegal), one over several metaslabs
    /// whole before any piece changes. The intent log frees every log block of a txg
    /// in its sync (hundreds under an fsync loop), where checking the range before
    /// the transition checked it again made the frees a tenth of the sync's time.
    fn try_release(&mut self, kind: RecordKind, txg: u64, offset: u64, size_bytes: u64) -> bool {
        if !self.is_aligned(offset, size_bytes) {
            return false;
        }
        let Some(pieces) = self.pieces(offset, size_bytes) else { return false };
        if self.ahead_freed.overlaps(offset, size_bytes) {
            // Freed already (its free waits for `sync_done`).
            return false;
        }
        if self.ahead_allocated.overlaps(offset, size_bytes) {
            // A block allocated ahead: its free is recorded after its allocation and
            // applied with it in `sync_done`. No block lies partly ahead.
            if !self.ahead_allocated.contains(offset, size_bytes) {
                return false;
            }
            self.ahead_allocated.remove(offset, size_bytes);
            self.ahead_freed.add(offset, size_bytes);
            self.ahead.push(LogRecord {
                vdev: 0,
                kind,
                start_bytes: offset,
                len_bytes: size_bytes,
                txg,
            });
            self.check();
            return true;
        }
        if pieces.len() > 1 && !pieces.iter().all(|&(i, s, l)| self.ms[i].is_allocated(s, l)) {
            return false;
        }
        for (i, s, l) in pieces {
            if !self.ms[i].apply(kind, s, l, txg) {
                // Only a single piece gets here (several were checked above), so
                // nothing changed.
                return false;
            }
            self.count_recorded(kind, s, l, txg);
        }
        self.check();
        true
    }

    /// Called after txg `synced_txg` has synced: every deferred free with
    /// `free_txg + TXG_DEFER_SIZE <= synced_txg` — and `free_txg < hold_from_txg` —
    /// becomes allocatable (and is logged as a `Release` record).
    ///
    /// Then the records of allocations made ahead (for the txg after `synced_txg`)
    /// and of the frees of their ranges join `pending`, in order, for that txg's
    /// drain, and those frees take effect. The releases touch no such range (it was
    /// allocated when the release's free was made, or free then and allocated after),
    /// so the order between the two sets of records does not matter.
    pub fn sync_done(&mut self, synced_txg: u64, hold_from_txg: u64) {
        for i in 0..self.ms.len() {
            for (txg, s, l) in self.ms[i].sync_done(synced_txg, hold_from_txg) {
                self.deferred_bytes -= l;
                self.free_bytes += l;
                self.record(RecordKind::Release, s, l, txg);
            }
        }
        for r in std::mem::take(&mut self.ahead) {
            if r.kind == RecordKind::Alloc {
                // Applied when made.
                self.record(r.kind, r.start_bytes, r.len_bytes, r.txg);
                continue;
            }
            let pieces = self.pieces(r.start_bytes, r.len_bytes).expect("an ahead free lies inside the vdev");
            for (i, s, l) in pieces {
                self.apply_recorded(i, r.kind, s, l, r.txg);
            }
        }
        self.ahead_allocated.clear();
        self.ahead_freed.clear();
        self.check();
    }

    /// Records made ahead and not yet handed to `pending` (see
    /// [`VdevSpace::alloc_with`]).
    pub fn ahead_records(&self) -> usize {
        self.ahead.len()
    }

    /// The free ranges metaslab `i`'s map records when flushed: its free tree and
    /// every range allocated ahead in it (free in the state the drain logs), sorted
    /// and with adjacent ranges merged.
    pub(crate) fn map_free_ranges(&self, i: usize) -> Vec<(u64, u64)> {
        let m = &self.ms[i];
        if self.ahead_allocated.is_empty() && self.ahead_freed.is_empty() {
            return m.free_tree().iter().collect();
        }
        let (start, end) = (m.start_bytes(), m.start_bytes() + m.size_bytes());
        // The trees merge adjacent blocks, also across a metaslab boundary: clip.
        let inside = |t: &RangeTree| {
            t.iter()
                .filter(|&(s, l)| s < end && s + l > start)
                .map(|(s, l)| (s.max(start), (s + l).min(end) - s.max(start)))
                .collect::<Vec<_>>()
        };
        let mut all: Vec<(u64, u64)> = m.free_tree().iter().collect();
        all.extend(inside(&self.ahead_allocated));
        all.extend(inside(&self.ahead_freed));
        all.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (s, l) in all {
            match out.last_mut() {
                Some(last) if last.0 + last.1 == s => last.1 += l,
                _ => out.push((s, l)),
            }
        }
        out
    }

    /// Bytes allocatable now.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Bytes allocated: `asize - free - deferred`.
    pub fn alloc_bytes(&self) -> u64 {
        self.asize_bytes - self.free_bytes - self.deferred_bytes
    }

    /// Bytes freed but waiting for their txg to age past [`crate::TXG_DEFER_SIZE`].
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

    /// The free space as one tree (built on demand; for leak checks and tests).
    pub fn free_tree(&self) -> RangeTree {
        let mut t = RangeTree::new();
        for m in &self.ms {
            for (s, l) in m.free_tree().iter() {
                t.add(s, l);
            }
        }
        t
    }

    /// Deferred frees as `(txg, start, len)`, by metaslab, then txg, then start.
    pub fn deferred_iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.ms
            .iter()
            .flat_map(|m| m.deferred.iter().flat_map(|(&txg, t)| t.iter().map(move |(s, l)| (txg, s, l))))
    }

    /// Whether [`VdevSpace::free`] / [`VdevSpace::free_now`] accept this range (they
    /// panic otherwise, as a double free is a bug): non-empty, aligned, inside the
    /// vdev and allocated (and, for a range allocated ahead, within one such range not
    /// freed already). Callers freeing a range read from disk (a block pointer
    /// that may be crafted) use [`VdevSpace::try_free`] / [`VdevSpace::try_free_now`],
    /// which free exactly the ranges this accepts and refuse the rest.
    pub fn is_freeable(&self, offset: u64, size_bytes: u64) -> bool {
        self.is_aligned(offset, size_bytes)
            && self.is_allocated(offset, size_bytes)
            && !self.ahead_freed.overlaps(offset, size_bytes)
            && (!self.ahead_allocated.overlaps(offset, size_bytes) || self.ahead_allocated.contains(offset, size_bytes))
    }

    /// A non-empty range of whole allocation units on a vdev that has space (not a
    /// hole): the ranges `claim` and the frees may take.
    fn is_aligned(&self, offset: u64, size_bytes: u64) -> bool {
        size_bytes > 0 && size_bytes.is_multiple_of(self.align_bytes) && offset.is_multiple_of(self.align_bytes) && self.class != AllocClass::Hole
    }

    /// Whether every byte of `[offset, offset + size_bytes)` is allocated (neither free
    /// nor deferred) and inside the vdev.
    pub fn is_allocated(&self, offset: u64, size_bytes: u64) -> bool {
        self.pieces(offset, size_bytes)
            .is_some_and(|p| p.iter().all(|&(i, s, l)| self.ms[i].is_allocated(s, l)))
    }

    /// Fragmentation of this vdev's free space, 0–100: the average of its metaslabs'
    /// [`Metaslab::fragmentation_pct`] (OpenZFS `metaslab_group_fragmentation`);
    /// `None` for a vdev without metaslabs.
    pub fn fragmentation_pct(&self) -> Option<u64> {
        if self.ms.is_empty() {
            return None;
        }
        Some(self.ms.iter().map(Metaslab::fragmentation_pct).sum::<u64>() / self.ms.len() as u64)
    }

    /// Panics unless every invariant of the theory statement holds: metaslabs tile the
    /// vdev, every metaslab verifies, and the cached counters equal the sums.
    /// O(extents log extents); for tests and `zdb`.
    pub fn verify(&self) {
        let al = self.align_bytes;
        assert_eq!(self.asize_bytes % al, 0, "VdevSpace: unaligned asize");
        let mut next = 0u64;
        let (mut free, mut deferred) = (0u64, 0u64);
        for m in &self.ms {
            assert_eq!(m.start_bytes(), next, "VdevSpace: metaslabs do not tile the vdev");
            next += m.size_bytes();
            m.verify(al);
            free += m.free_bytes();
            deferred += m.deferred_bytes();
        }
        assert_eq!(next, self.asize_bytes, "VdevSpace: metaslabs do not cover asize");
        assert_eq!(free, self.free_bytes, "VdevSpace: stale free_bytes");
        assert_eq!(deferred, self.deferred_bytes, "VdevSpace: stale deferred_bytes");
        for t in [&self.ahead_allocated, &self.ahead_freed] {
            for (s, l) in t.iter() {
                assert!(self.is_allocated(s, l), "VdevSpace: ahead range [{s}, +{l}) is not allocated");
            }
        }
        assert!(
            self.ahead_allocated.iter().all(|(s, l)| !self.ahead_freed.overlaps(s, l)),
            "VdevSpace: a range both allocated and freed ahead"
        );
        assert_eq!(
            self.ahead.is_empty(),
            self.ahead_allocated.is_empty() && self.ahead_freed.is_empty(),
            "VdevSpace: ahead records and ranges disagree"
        );
    }

    /// Runs [`VdevSpace::verify`] when tests or the `verify` feature ask for it.
    pub(crate) fn check(&self) {
        if cfg!(any(test, feature = "verify")) {
            self.verify();
        }
    }

    /// Re-derives the cached counters after import replaced metaslab states.
    pub(crate) fn recount(&mut self) {
        self.free_bytes = self.ms.iter().map(Metaslab::free_bytes).sum();
        self.deferred_bytes = self.ms.iter().map(Metaslab::deferred_bytes).sum();
    }

    /// Applies a replayed record (import) to the metaslabs whose flush txg is below
    /// `block_txg`; an unaligned or out-of-range record or an illegal transition is
    /// `Err` naming the offending piece.
    pub(crate) fn replay(&mut self, rec: &LogRecord, block_txg: u64) -> Result<(), String> {
        if !rec.start_bytes.is_multiple_of(self.align_bytes) || !rec.len_bytes.is_multiple_of(self.align_bytes) {
            return Err(format!("record [{}, +{}) is not {}-aligned", rec.start_bytes, rec.len_bytes, self.align_bytes));
        }
        let pieces = self
            .pieces(rec.start_bytes, rec.len_bytes)
            .ok_or_else(|| format!("record [{}, +{}) outside the vdev", rec.start_bytes, rec.len_bytes))?;
        for (i, s, l) in pieces {
            let m = &mut self.ms[i];
            if block_txg <= m.flush_txg {
                continue;
            }
            if !m.apply(rec.kind, s, l, rec.txg) {
                return Err(format!("illegal {:?} of [{s}, +{l}) (txg {}) in metaslab {i}", rec.kind, rec.txg));
            }
            m.unflushed_txg.get_or_insert(block_txg);
        }
        Ok(())
    }

    fn assert_size(&self, size_bytes: u64) {
        assert!(
            size_bytes > 0 && size_bytes.is_multiple_of(self.align_bytes),
            "VdevSpace: size {size_bytes} is not a non-zero multiple of {}",
            self.align_bytes
        );
    }
}
