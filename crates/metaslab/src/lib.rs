//! Free-space management for a pool of top-level vdevs: metaslabs and the space-map log.
//!
//! # Theory statement
//!
//! **What it models.** Every top-level vdev exposes `asize` bytes of allocatable space
//! (after labels and parity are accounted for by `vdev`; this crate only sees numbers).
//! Each byte of that space is in exactly one of three states:
//!
//! ```text
//!            alloc / alloc_near / claim                    (record Alloc)
//!   FREE  ─────────────────────────────►  ALLOCATED
//!    ▲  ◄──────────── free_now ─────────────  │        (record FreeNow)
//!    │                                        │ free(txg)        (record Free)
//!    └──── sync_done(txg + TXG_DEFER_SIZE) ── DEFERRED(txg)   (record Release)
//! ```
//!
//! A [`VdevSpace`] splits its vdev into [`Metaslab`]s of `2^ms_shift` bytes (rounded
//! down to the allocation unit; about 200 per vdev, [`default_ms_shift`] follows
//! OpenZFS `vdev_metaslab_set_size`). Each metaslab holds its FREE set as a
//! [`RangeTree`] (with a size index for best fit) and one `RangeTree` per freeing txg
//! for DEFERRED; ALLOCATED is the complement. A [`SpaceMap`] is the list of
//! `VdevSpace`s for the whole pool, indexed by top-level vdev id, plus the pool-wide
//! space-map log state.
//!
//! **Why frees are deferred.** A block freed in txg `t` may still be referenced by the
//! uberblocks of txgs before `t`. Rewind import (`import -T`) may go back to any of the
//! last few uberblocks, so a freed block must not be overwritten until
//! [`TXG_DEFER_SIZE`] more txgs have synced. OpenZFS uses 2; Tarn keeps 4 so that the
//! whole uberblock ring that rewind may use stays intact. `free_now` is for blocks
//! born and freed in the same open txg: no synced state references them. The space
//! structures' own old blocks (log blocks, maps, pages, roots) are freed the same
//! deferred way, so the space structures of the last 4 txgs stay readable.
//!
//! **Allocation policy.** `alloc` tries the *active* metaslab (the one that served the
//! previous allocation) first, so sequential writes stay sequential; when it cannot
//! serve the request, the metaslabs are tried by decreasing [`Metaslab::weight`]
//! (free space discounted by fragmentation, biased toward low offsets: OpenZFS
//! `metaslab_space_weight`). Inside a metaslab ([`Metaslab::pick`]) it is first fit
//! from the metaslab's cursor, wrapping once, until the metaslab is fragmented (its
//! largest free segment under 128 KiB or less than 4% free), then best fit (OpenZFS
//! `metaslab_df_alloc`). `alloc_near` places a ditto copy at least `asize / 8` away
//! from the first copy (OpenZFS spreads dittos likewise) and moves no cursor.
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
//! **On-disk structures owned** (byte layouts in `docs/format.md` and [`ondisk`]):
//! OpenZFS 2.0's *log space map* design. Every state change above is appended, in
//! order, to its vdev's pending list as a [`LogRecord`]. Each txg sync
//! ([`SpaceMap::sync_plan`]) writes
//! - one or more **log blocks** (`SpaceMapLog`) holding all pending records, chained
//!   newest to oldest through a `prev` block pointer;
//! - a few **condensed maps** (`MetaslabMap`, chains of chunks of at most 128 KiB):
//!   the full state (free ranges and deferred frees) of the metaslabs it *flushes*
//!   this txg, which then record that txg as their `flush_txg`;
//! - the **directory pages** (`MetaslabPage`) that hold those metaslabs' entries
//!   (`flush_txg`, map pointer); a vdev's directory is [`DIR_PAGES`] pages, each
//!   covering 1/16 of its metaslabs;
//! - a **root** (`MetaslabRoot`): per vdev its class, asize, `ms_shift` and page
//!   pointers, plus the log head and the oldest txg whose log blocks are still
//!   needed. The uberblock's `spacemap_bp` points at the root.
//!
//! Log blocks older than every metaslab's oldest unflushed record are freed (the log
//! is truncated). Flushing picks the metaslabs with the oldest unflushed records,
//! [`FLUSH_PER_TXG`] per txg, more when the log has more than [`LOG_BLOCKS_TARGET`]
//! blocks. So a txg writes log bytes proportional to its own allocations and frees,
//! plus a bounded number of maps and pages: nothing proportional to pool size.
//! Import ([`SpaceMap::load`]) reads the root, the pages and the maps, then replays
//! every log record newer than its metaslab's `flush_txg`.
//!
//! **The space structures record their own allocation.** [`SpaceMap::sync_plan`] runs
//! under the caller's space lock: it frees the blocks it replaces, sizes and
//! allocates every new block (those allocations are pending records like any other),
//! and only then drains the pending records into the log blocks and encodes the maps,
//! so the state written is exactly the state after this txg, its own blocks included.
//! Sizes are upper bounds computed before allocating (each allocation adds at most
//! one record and one free range); overrunning one is a bug (asserted).
//!
//! **Allocations ahead of the sync.** A txg's drain must log exactly that txg's
//! changes: a block allocated in open context for the *next* txg while this one
//! syncs (an early write, `tarn_dmu`'s module `early`) is not referenced by the tree
//! this sync writes, so logging its allocation here would leak it on a crash after
//! this txg (OpenZFS keeps such allocations in `ms_allocating[txg & TXG_MASK]` and
//! writes only the syncing txg's). Such an allocation is made *ahead*
//! ([`VdevSpace::alloc_with`], for a birth txg past `synced_txg + 1`,
//! [`SpaceMap::allocates_ahead`]): applied in memory at once, its record kept in a
//! list of its own, and a map flushed meanwhile shows the range free. A free of such
//! a range is recorded after it in the same list and applied only when
//! [`SpaceMap::sync_done`] hands the list to the pending records, so no allocation
//! logged by this txg can take a range whose own allocation it does not log (a replay
//! would then allocate it twice).
//!
//! **Invariants** (each with the check that enforces it):
//! 1. FREE and every DEFERRED(txg) are pairwise disjoint — `RangeTree::add` asserts
//!    no overlap; `Metaslab::apply` refuses illegal transitions and `VdevSpace` panics
//!    on them (a double free is a bug, not an I/O error); replay returns [`Corrupt`].
//! 2. Every range boundary is a multiple of `align` and lies inside its metaslab —
//!    `alloc`/`free` assert aligned sizes and offsets; decoders check.
//! 3. `free_bytes + deferred_bytes + alloc_bytes == asize` — by construction; the
//!    counters are re-derived by [`VdevSpace::verify`], which runs after every
//!    mutation under `cfg(test)` or the `verify` feature.
//! 4. The state on disk (maps + log records newer than each map) equals the state
//!    in memory at the end of each sync — `sync_plan` drains and encodes under one
//!    lock; the model tests reload after every sync and compare.
//! 5. Decoding never panics and allocates in proportion to the bytes read: counts are
//!    checked against the bytes remaining, metaslab counts against
//!    [`MS_COUNT_LIMIT`], the log walk against [`LOG_CHAIN_BLOCKS_MAX`].
//!
//! **Locks.** None. The caller (`zio`) owns the `SpaceMap` behind its own lock; allocs
//! and frees happen in open/syncing context, `sync_plan` and `sync_done` in each txg
//! sync. `pick_vdev` and `pick_log_vdev` take `&self` and advance their rotors with
//! relaxed atomics.
//!
//! **Crash.** Nothing written by a sync is referenced until its uberblock is; a crash
//! imports the root of the last synced uberblock, whose maps and log blocks were
//! freed (deferred) only by later txgs, so they are intact. Allocations of the lost
//! txg were never recorded (those made ahead while the last sync ran included), so
//! they are FREE again with no leak; intent-log blocks
//! allocated after the last sync are claimed by the ZIL at import. Cursors and the
//! active metaslab are not persisted.
//!
//! **ENOSPC.** `alloc` returns `None` when no free range of the vdev fits the request
//! (space may be free but fragmented, or held in DEFERRED until later txgs sync);
//! the caller tries another vdev or reports no space.
//!
//! **EIO / checksum errors** are not seen here: the caller reads the blocks through
//! the checksummed block pointers and passes decoded bytes only (a read error is a
//! [`LoadError::Read`]).
//!
//! **Removed vdevs.** [`SpaceMap::retire_vdev`] turns a vdev into a hole; its pages
//! and maps are freed by the next sync, its records still in the log are skipped at
//! import (the config says hole), and a vdev later attached in its place starts with
//! every metaslab "free at the end of the previous txg", so those stale records never
//! apply to it.
//!
//! **Limits.** Every metaslab is loaded at import and stays loaded (no on-demand
//! loading/unloading yet, so DESIGN invariant 7 "nothing is loaded whole" does not
//! hold for free space). The root grows with the number of top-level vdevs (~2 KiB
//! each). A flush rewrites the metaslab's whole condensed map (a chain of chunks of
//! at most 128 KiB), where OpenZFS appends the flushed changes to the metaslab's own
//! space map and condenses it separately: a flush costs O(the metaslab's extents),
//! bounded by the metaslab's size, not the pool's. Switching metaslabs
//! computes the weights of all of them (O(metaslabs)). A vdev's asize cannot change
//! (no online expansion): import rejects a root whose asize differs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};

use tarn_phys::BlkPtr;
pub use tarn_phys::Corrupt;

mod metaslab;
pub mod ondisk;
mod persist;
mod range_tree;
mod vdev_space;

pub use metaslab::{Metaslab, DF_ALLOC_THRESHOLD_BYTES, DF_FREE_PCT, FRAG_TABLE_PCT};
pub use persist::{alloc_one_copy, LoadError, SyncBlock, SyncPlan, VdevDims};
pub use range_tree::{RangeTree, HISTOGRAM_BUCKETS};
pub use vdev_space::{default_ms_shift, ms_size_bytes, VdevSpace, MS_COUNT_LIMIT, MS_SHIFT_MAX, MS_SHIFT_MIN};

/// Txgs a free waits before its space is reusable: a block freed in txg `t` becomes
/// allocatable once `sync_done(t + TXG_DEFER_SIZE)` has run, so the uberblocks of the
/// last few txgs stay usable for rewind import (OpenZFS uses 2; Tarn keeps 4 for `-T`).
pub const TXG_DEFER_SIZE: u64 = 4;

/// Directory pages per top-level vdev: page `p` holds the entries of metaslabs
/// `[p * per, (p + 1) * per)` with `per = ceil(ms_count / DIR_PAGES)`.
pub const DIR_PAGES: usize = 16;

/// Metaslabs flushed per txg (those with the oldest unflushed log records).
pub const FLUSH_PER_TXG: usize = 4;

/// When the log holds more blocks than this, a sync flushes every metaslab whose
/// records are in the oldest excess blocks, so the log can be truncated.
pub const LOG_BLOCKS_TARGET: usize = 64;

/// Bound on the log blocks import walks (a corrupt or cyclic chain stops here).
pub const LOG_CHAIN_BLOCKS_MAX: usize = 1 << 16;

/// What a [`LogRecord`] does (the transitions of the theory statement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// FREE → ALLOCATED (alloc, alloc_near, claim).
    Alloc,
    /// ALLOCATED → DEFERRED(txg).
    Free,
    /// ALLOCATED → FREE (a block born and freed in the same open txg).
    FreeNow,
    /// DEFERRED(txg) → FREE (the free aged past [`TXG_DEFER_SIZE`]).
    Release,
}

impl RecordKind {
    /// Value stored in a log record.
    pub fn to_u8(self) -> u8 {
        match self {
            RecordKind::Alloc => 1,
            RecordKind::Free => 2,
            RecordKind::FreeNow => 3,
            RecordKind::Release => 4,
        }
    }

    /// Parses a stored kind; `None` for an unknown value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => RecordKind::Alloc,
            2 => RecordKind::Free,
            3 => RecordKind::FreeNow,
            4 => RecordKind::Release,
            _ => return None,
        })
    }
}

/// One state change of one range, as the space-map log stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecord {
    /// Top-level vdev id.
    pub vdev: u32,
    /// The transition.
    pub kind: RecordKind,
    /// First byte (vdev offset).
    pub start_bytes: u64,
    /// Length in bytes (non-zero, aligned).
    pub len_bytes: u64,
    /// The freeing txg for `Free` and `Release`; 0 otherwise.
    pub txg: u64,
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
    /// Live space-map log blocks, oldest first: `(txg, pointer)`.
    pub(crate) log_blocks: VecDeque<(u64, BlkPtr)>,
    /// The root block written by the last sync (freed by the next one).
    pub(crate) root_bp: BlkPtr,
    /// Bytes (physical, all copies counted once) of space structures written by the
    /// last [`SpaceMap::sync_plan`].
    pub(crate) last_sync_bytes: u64,
    /// Directory pages and maps of vdevs removed since the last sync, freed by it.
    pub(crate) retired: Vec<BlkPtr>,
    /// The last txg [`SpaceMap::sync_done`] was called for: the next drain logs txg
    /// `synced_txg + 1`, and allocations for a later txg are made ahead.
    synced_txg: u64,
}

impl Clone for SpaceMap {
    fn clone(&self) -> Self {
        SpaceMap {
            vdevs: self.vdevs.clone(),
            rotor: AtomicU32::new(self.rotor.load(Ordering::Relaxed)),
            log_rotor: AtomicU32::new(self.log_rotor.load(Ordering::Relaxed)),
            hold_from_txg: self.hold_from_txg,
            log_blocks: self.log_blocks.clone(),
            root_bp: self.root_bp,
            last_sync_bytes: self.last_sync_bytes,
            retired: self.retired.clone(),
            synced_txg: self.synced_txg,
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
            log_blocks: VecDeque::new(),
            root_bp: BlkPtr::HOLE,
            last_sync_bytes: 0,
            retired: Vec::new(),
            synced_txg: 0,
        }
    }

    /// Turns vdev `id` into a hole (its space is dropped, its id stays taken). The
    /// blocks of its directory pages and condensed maps are freed by the next
    /// [`SpaceMap::sync_plan`] (a crash before it imports the old root, which still
    /// needs them); its pending records are dropped, and records of it still in the
    /// log are skipped at import because the vdev is then a hole.
    pub fn retire_vdev(&mut self, id: usize) {
        let old = std::mem::replace(&mut self.vdevs[id], VdevSpace::hole());
        self.retired.extend(old.page_bps.iter().copied().filter(|bp| !bp.is_hole()));
        self.retired.extend(old.ms.iter().flat_map(|m| m.map_bps.iter().copied()));
    }

    /// A space map for a new pool: every vdev `(asize, align)` entirely free.
    pub fn create(vdevs: &[(u64, u64)]) -> Self {
        SpaceMap::new(vdevs.iter().map(|&(asize, align)| VdevSpace::new(asize, align)).collect())
    }

    /// Chooses the top-level vdev for a new block: the `Normal`, allocatable vdev with
    /// the most free bytes, skipping the ids in `exclude` (vdevs already holding a copy
    /// of the block). Round-robin among ties. Never a `Log` vdev or a hole. `None` if
    /// every candidate is excluded or full.
    pub fn pick_vdev(&self, exclude: &[u32]) -> Option<u32> {
        let n = self.vdevs.len();
        let candidate = |i: usize| {
            let v = &self.vdevs[i];
            v.class() == AllocClass::Normal && v.is_allocatable() && !exclude.contains(&(i as u32))
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
            v.class() == AllocClass::Log && v.is_allocatable() && v.free_bytes() > 0 && !exclude.contains(&(i as u32))
        })?;
        self.log_rotor.store(((chosen + 1) % n) as u32, Ordering::Relaxed);
        Some(chosen as u32)
    }

    /// The vdevs of `class`.
    fn of_class(&self, class: AllocClass) -> impl Iterator<Item = &VdevSpace> {
        self.vdevs.iter().filter(move |v| v.class() == class)
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
    ///
    /// Records of allocations made ahead (for txg `synced_txg + 1`) then join the
    /// pending records ([`VdevSpace::sync_done`]).
    pub fn sync_done(&mut self, synced_txg: u64) {
        let hold = self.hold_from_txg.unwrap_or(u64::MAX);
        for v in &mut self.vdevs {
            v.sync_done(synced_txg, hold);
        }
        self.synced_txg = synced_txg;
    }

    /// Whether an allocation for a block born in `birth_txg`, made in open context,
    /// is made ahead ([`VdevSpace::alloc_with`]): its txg comes after the one the next
    /// drain logs (`birth_txg > synced_txg + 1`, a sync is in progress). Decided under
    /// the caller's space lock, against this map's own last [`SpaceMap::sync_done`]:
    /// the hand-over of the records made ahead happens there.
    pub fn allocates_ahead(&self, birth_txg: u64) -> bool {
        birth_txg > self.synced_txg + 1
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

    /// Pool fragmentation, 0–100: each `Normal` vdev's
    /// [`VdevSpace::fragmentation_pct`] weighted by its size (OpenZFS
    /// `metaslab_class_fragmentation`, the `FRAG` column of `zpool list`). `None`
    /// when the pool has no normal space.
    pub fn fragmentation_pct(&self) -> Option<u64> {
        let (mut weighted, mut total) = (0u128, 0u128);
        for v in self.of_class(AllocClass::Normal) {
            if let Some(f) = v.fragmentation_pct() {
                weighted += f as u128 * v.asize_bytes() as u128;
                total += v.asize_bytes() as u128;
            }
        }
        (total > 0).then(|| (weighted / total) as u64)
    }

    /// Bytes of space structures (log, condensed maps, directory pages, root; each
    /// block's physical size once, not per copy) that the last txg sync wrote. The
    /// engine counter behind the "flat with pool size" test.
    pub fn last_sync_bytes(&self) -> u64 {
        self.last_sync_bytes
    }

    /// Every block of the space structures the last sync wrote or kept: the root,
    /// directory pages, condensed maps and live log blocks (for scrub and resilver).
    pub fn structure_bps(&self) -> Vec<BlkPtr> {
        let mut out = vec![self.root_bp];
        for v in &self.vdevs {
            out.extend(v.page_bps.iter().copied());
            out.extend(v.ms.iter().flat_map(|m| m.map_bps.iter().copied()));
        }
        out.extend(self.log_blocks.iter().map(|&(_, bp)| bp));
        out.retain(|bp| !bp.is_hole());
        out
    }

    /// Number of live space-map log blocks.
    pub fn log_block_count(&self) -> usize {
        self.log_blocks.len()
    }

    /// Changes not yet handed to a sync (records waiting for the next log block).
    pub fn pending_records(&self) -> usize {
        self.vdevs.iter().map(|v| v.pending.len()).sum()
    }
}

#[cfg(test)]
mod tests;
