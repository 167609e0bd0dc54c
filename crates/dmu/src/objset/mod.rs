//! Object sets on disk: dnodes, block-pointer trees, and their per-txg dirty state.
//!
//! Theory. An object set is an array of dnodes stored as the data of object 0 (the
//! meta-dnode) in 16 KiB blocks of 32 dnodes, rooted in an [`ObjsetPhys`] block. Each
//! object is a tree of block pointers: level 0 holds data blocks of `blksz` bytes,
//! levels ≥ 1 are 128 KiB indirect blocks of 1024 pointers (OpenZFS
//! `module/zfs/dnode.c`, `dbuf.c`). A tree with `nlevels == 1` points straight at
//! block 0; it gains a level when a block id beyond its reach is written.
//!
//! Dirty state has two generations per dnode: `open` (the open txg, changed by writers
//! under a [`TxHold`]) and `syncing` (the quiesced txg being written). Reads look in
//! open → syncing → the tree. Syncing a txg goes in three phases:
//! 1. [`Objset::sync_collect`] (under the txg gate's write lock): move every open
//!    record to syncing and snapshot dnode attributes, so later changes go to the next
//!    txg.
//! 2. [`Objset::sync_write_data`] (no object-set lock): write the level-0 blocks of the
//!    syncing records through zio, in parallel.
//! 3. [`Objset::sync_finish`] (object-set lock): apply frees, install the new level-0
//!    pointers, rewrite dirty indirect blocks bottom-up, rewrite dirty dnode blocks
//!    through object 0's tree, write the object-set root. Every replaced block is freed
//!    (deferred) — copy-on-write, never in place (DESIGN invariant 1).
//!
//! The tree (root pointer, nlevels, used bytes) is changed only by phase 3, under the
//! lock, so open-context readers always see a complete synced tree.
//!
//! Deferred fill (our design; OpenZFS discussed it as "async COW", issue 8590 and PR
//! 9954, but reads the record before a partial write, `dbuf_will_dirty`). A write of
//! part of a record never reads the record. A dirty record of a generation is either
//! `Full` (all `blksz` bytes) or `Partial`: only the byte ranges written in this
//! generation (disjoint extents), every other byte being the content *below* the
//! generation — for the open generation the syncing one, then the tree; for the
//! syncing generation the tree. A write makes a record partial only when the content
//! below would need a read (a block on disk, or a partial syncing record); over a
//! hole, a freed range or a whole syncing record it copies from memory and makes it
//! `Full`, as before. A partial record whose written extents come to cover all of it
//! (a file rewritten a few KiB at a time) becomes `Full` with its last piece: nothing
//! below it is read, and a record completed that way may be written early (module
//! `early`). Invariants:
//! - *The content below a partial record does not change while it is partial*: the
//!   syncing generation is frozen after phase 1, and the tree changes only in phase 3,
//!   for exactly the blocks of the syncing generation; those it replaces hold the same
//!   logical content (the syncing record filled), so what "below" means at the fill
//!   equals what it meant at the write. So a fill resolves its old block when it runs,
//!   not when the write happened, and still reads the block the head pointed to then
//!   (or that block's successor with the same bytes); copy-on-write keeps that block
//!   alive — a snapshot taken meanwhile holds it, and a free is deferred — until the
//!   txg that replaces it syncs.
//! - *A partial record is never covered by its own generation's frees*: `free_range`
//!   removes the records it frees, and a later write over a freed range sees zeros
//!   below and makes a `Full` record. Truncating into a partial record writes a zero
//!   extent (still no read).
//! - *Dirty accounting counts what the sync will allocate*: a partial record counts a
//!   whole `blksz` (`Dirty::dirty_bytes`), like a full one, although it holds only its
//!   written bytes in memory: the space check weighs dirty bytes against free space,
//!   and the fill turns every partial record into a whole new block. A record's bytes
//!   leave the count when phase 2 has written it (OpenZFS `dbuf_write_done`), so a
//!   block being written is never counted both as dirty and as allocated.
//!
//! A read of a partial record merges: bytes one extent holds are copied out directly
//! (the intent log fetches written ranges this way, so a sync write logs only its own
//! bytes and reads nothing); any other range reads the block below and lays the
//! extents over it (newest generation last); when the open generation's record was
//! the partial one and no write changed it meanwhile, the merge becomes that record
//! (`Objset::promote`, now `Full`), so a record read often (a ZAP block) merges once. At txg
//! sync (phase 2) every partial record of the txg is filled: the old blocks are looked
//! up in the tree, sorted by (vdev, offset), read with `Zio::take_blocks` (adjacent
//! blocks aggregated; a block in the ARC leaves it, its buffer becoming the new
//! record without a copy) in batches of at most [`FILL_BATCH_BYTES`], merged and
//! written before the next batch is read, so the fill's memory is bounded whatever
//! the dirty limit. A whole-record write needs no fill, and a partial record over a
//! hole none.
//!
//! A fill whose read fails (I/O error or checksum error on every copy; zio counted it)
//! installs nothing: the record keeps its old block, the new bytes of that record are
//! dropped, the object goes to the read-error sink (`zpool status -v`), and every later
//! read of the record reports the same error instead of returning zeros. A write whose
//! fill fails is thus lost, as a buffered write into a damaged record; the rest of the
//! txg syncs normally.
//!
//! Block cloning (`ObjectStore::clone_blocks`, OpenZFS 2.2's `dmu_brt_clone`): a
//! record may be another block's pointer (`Dirty::Clone`), taken from the synced tree
//! of a source object (`block_pointers`, which refuses blocks with unsynced changes).
//! The pointer keeps its DVAs and checksum, gets the open txg as its birth and keeps
//! the source's as its physical birth; phase 2 counts the reference
//! (`Zio::clone_ref`) and installs the pointer without writing, before phase 3 frees
//! anything of the txg, so a source block freed in the same txg stays. A clone
//! record dropped before its sync (replaced, freed with its range or object) took
//! nothing. A partial write into a block cloned in the same txg turns it into a
//! whole record (the shared bytes read at once).
//!
//! Object ids are reused (OpenZFS `dmu_object_alloc`): a new object takes the lowest
//! free slot known — a slot whose free has synced (`free_ids`, filled by phase 3), or
//! one found by scanning the dnode array a few blocks at a time from `scan_cursor`
//! (free slots that existed at open) — and only when none is known, the next id past
//! the end (`next_obj`, which only grows). So create/delete churn keeps the dnode array
//! at its high-water mark instead of growing without bound. A slot freed in a txg that
//! has not synced is never handed out. A dnode block whose 32 slots are all free
//! becomes a hole. Users of ids tell a reused id apart by what they store in the
//! object (the ZPL's generation number).
//!
//! Code layout, along OpenZFS's files: this module holds the object set itself (its
//! state, properties, open and the `ObjectStore` methods); `dnode` the in-memory
//! dnodes, tree walks and object-id allocation (`dnode.c`); `dbuf` the dirty records
//! and block resolution (`dbuf.c`); `zfetch` the sequential read-ahead
//! (`dmu_zfetch.c`); `dnode_sync` the three sync phases (`dnode_sync.c`).
//!
//! Limits: one mutex per object set (metadata I/O in phase 3 happens under it: one
//! aggregated batch of writes for all levels, after reads of the indirect blocks
//! being changed); clean
//! dnodes are evicted from memory when more than [`DNODE_CACHE_MAX`] are loaded.
//!
//! Errors: a failed block read returns `DmuError::Io` (zio already counted it); a
//! failed write or allocation in phase 2/3 is returned to spa, which suspends the pool.
//!
//! Untrusted trees: every indirect block is read through `read_indirect` (or
//! `take_indirect`, the sync's read of a block it is about to rewrite, which takes the
//! cached buffer out of the ARC instead of copying it), both of which check the
//! pointer's level and type against its place in the tree and the block's length
//! (exactly 128 KiB) before anything indexes it, in open context (`tree_lookup`) and
//! in syncing context (`load_indirect`, `l1_exists`, `free_subtree`, and so
//! `trees_write`, which only sees blocks loaded that way). A
//! damaged or crafted tree gives `DmuError::Corrupt`, never a panic in the sync
//! thread. Freeing a tree remembers the blocks it freed, so a pointer repeated in a
//! crafted DAG is freed once and its subtree walked once.

use crate::txg::TxgGate;
use crate::{DmuError, ObjectInfo, ObjectStore, Result, SpaceInfo, TxHold};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use tarn_phys::{BlkPtr, ChecksumAlg, CompressSetting, DnodePhys, ObjectType, ObjsetPhys, ZilHeader, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};
use tarn_zio::{CachePolicy, StagedWrites, WriteProps, Zio, ZioError};

/// Bytes per dnode block (object 0's block size).
pub const DNODE_BLOCK_BYTES: u32 = 16 << 10;
/// Dnodes per dnode block.
pub const DNODES_PER_BLOCK: u64 = DNODE_BLOCK_BYTES as u64 / DNODE_SIZE_BYTES as u64;
/// log2 of the indirect block size.
pub const INDBLKSHIFT: u8 = 17;
/// Block pointers per indirect block.
pub const BPS_PER_INDIRECT: u64 = (1 << INDBLKSHIFT) / BLKPTR_SIZE_BYTES as u64;
/// Blocks read ahead of a sequential stream (ZFS zfetch keeps a similar window).
pub const PREFETCH_BLOCKS: u64 = 16;
/// Streams tracked per object set.
const PREFETCH_STREAMS_MAX: usize = 64;

/// Txg syncs a hold may wait for while space is coming back (deferred frees need
/// `TXG_DEFER_SIZE` = 4 syncs, plus one for the syncing txg and one to spare).
pub const SPACE_WAIT_SYNCS_MAX: usize = 6;
/// Room a hold wants before it starts without waiting: the largest FUSE write.
pub const SPACE_WAIT_HEADROOM_BYTES: u64 = 1 << 20;

/// Clean dnodes kept in memory before eviction.
pub const DNODE_CACHE_MAX: usize = 65_536;
/// Object-set type of the MOS.
pub const OS_TYPE_MOS: u64 = 1;
/// Object-set type of a file system dataset.
pub const OS_TYPE_ZFS: u64 = 2;

mod dbuf;
mod dnode;
mod dnode_sync;
mod early;
mod zfetch;

use dbuf::{Dirty, OpenRec, Src, SyncRec};
pub use dnode_sync::{FillStats, SyncBatch, FILL_BATCH_BYTES};
pub use early::{EarlyStats, EARLY_BACKLOG_RECORDS, EARLY_BACKLOG_WAIT_MAX, EARLY_BATCH_RECORDS, EARLY_QUEUE_MAX};

fn zio_err(e: ZioError) -> DmuError {
    match e {
        ZioError::NoSpace => DmuError::NoSpace,
        ZioError::Corrupt(c) => DmuError::Corrupt(c),
        other => DmuError::Io(other.to_string()),
    }
}

/// The sync-owned block tree of one object.
#[derive(Debug, Clone, Default)]
struct Tree {
    root: BlkPtr,
    nlevels: u8,
    used_bytes: u64,
}

/// Attributes that change in open context and are snapshotted at quiesce.
#[derive(Debug, Clone)]
struct Attrs {
    otype: ObjectType,
    blksz: u32,
    max_blksz: u32,
    maxblkid: u64,
    bonus_type: u8,
    bonus: Vec<u8>,
    freed: bool,
}

struct Dn {
    attrs: Attrs,
    tree: Tree,
    open: OpenRec,
    syncing: Option<SyncRec>,
}

fn in_ranges(ranges: &[(u64, u64)], blkid: u64) -> bool {
    ranges.iter().any(|&(s, e)| blkid >= s && blkid < e)
}

struct OsState {
    meta: Tree,
    dnodes: HashMap<u64, Dn>,
    dirty: BTreeSet<u64>,
    syncing: Vec<u64>,
    next_obj: u64,
    /// Ids below `next_obj` known to be free on disk and in memory (their free has
    /// synced), handed out lowest first.
    free_ids: BTreeSet<u64>,
    /// Ids below this were scanned for free slots since open.
    scan_cursor: u64,
    used_bytes: u64,
    root: BlkPtr,
    /// Intent-log header to write with the next root; `zil_dirty` when it changed.
    zil_header: ZilHeader,
    zil_dirty: bool,
}

impl OsState {
    /// The state of an object set whose meta-dnode tree is `meta`, with nothing
    /// loaded or dirty.
    fn new(meta: Tree, next_obj: u64, used_bytes: u64, root: BlkPtr, zil_header: ZilHeader) -> OsState {
        OsState {
            meta,
            dnodes: HashMap::new(),
            dirty: BTreeSet::new(),
            syncing: Vec::new(),
            next_obj,
            free_ids: BTreeSet::new(),
            scan_cursor: 1,
            used_bytes,
            root,
            zil_header,
            zil_dirty: false,
        }
    }
}

/// An object set: the real [`ObjectStore`].
pub struct Objset {
    zio: Arc<Zio>,
    gate: Arc<TxgGate>,
    os_type: u64,
    /// The `compression` property ([`CompressSetting::to_bits`]).
    compression: std::sync::atomic::AtomicU32,
    /// The `checksum` property for file data (a [`ChecksumAlg`] code).
    checksum: AtomicU8,
    /// The `dedup` property ([`tarn_zio::Dedup`] as 0 off, 1 on, 2 verify).
    dedup: AtomicU8,
    /// The `copies` property for file data (1..=3).
    data_copies: AtomicU8,
    /// The `primarycache` property ([`CachePolicy`] as u8).
    primarycache: AtomicU8,
    /// The `secondarycache` property ([`CachePolicy`] as u8).
    secondarycache: AtomicU8,
    readonly: std::sync::atomic::AtomicBool,
    st: Mutex<OsState>,
    /// Bytes kept free for metadata when pool space runs low (1/32 of the pool, ZFS slop).
    slop_shift: u32,
    /// Sequential read streams: object → (next expected block id, prefetched up to).
    streams: Mutex<HashMap<u64, (u64, u64)>>,
    /// Told the object id of every read that failed below the DMU (see
    /// [`Objset::set_read_error_sink`]).
    error_sink: Mutex<Option<ReadErrorSink>>,
    /// Decides what happens to each block this object set stops referencing (see
    /// [`Objset::set_block_kill`]); `None` frees it.
    block_kill: Mutex<Option<BlockKill>>,
    /// Deferred-fill counters (see [`Objset::fill_stats`]).
    fill_stats: Mutex<FillStats>,
    /// This object set, for the threads it starts (which must not keep it alive).
    weak: std::sync::Weak<Objset>,
    /// Records written before their txg syncs (module `early`).
    early: Arc<early::EarlyShared>,
}

impl Drop for Objset {
    fn drop(&mut self) {
        self.early_close();
    }
}

/// Receiver of the object ids whose reads failed with an I/O or checksum error.
pub type ReadErrorSink = Arc<dyn Fn(u64) + Send + Sync>;

/// Called with (block pointer, syncing txg) for every non-hole block a txg sync
/// removes from the object set's tree: replaced by copy-on-write, freed by a
/// truncate, or part of a deleted object. The DSL supplies it for datasets with
/// snapshots: a block born after the latest snapshot is freed, an older one goes to
/// the dataset's dead list (OpenZFS `dsl_dataset_block_kill`). Runs in syncing
/// context, under the object set's lock: it must not call back into the object set.
pub type BlockKill = Arc<dyn Fn(&BlkPtr, u64) + Send + Sync>;

/// DVAs of a block: three for the MOS; for a dataset's file data its `copies`
/// property, for its metadata one more than that, at least two and at most three
/// (OpenZFS `dmu_write_policy`: `MIN(copies + 1, spa_max_replication)`).
fn copies_for(otype: ObjectType, os_type: u64, data_copies: u8) -> u8 {
    let data_copies = data_copies.clamp(1, 3);
    if os_type == OS_TYPE_MOS {
        3
    } else if otype.is_metadata() {
        (data_copies + 1).min(3)
    } else {
        data_copies
    }
}

impl Objset {
    /// An object set of type `os_type` in state `st`, with properties at their
    /// defaults (the DSL sets them after open).
    fn with_state(zio: Arc<Zio>, gate: Arc<TxgGate>, os_type: u64, st: OsState) -> Arc<Objset> {
        Arc::new_cyclic(|weak| Objset {
            zio,
            gate,
            os_type,
            compression: CompressSetting::OFF.to_bits().into(),
            checksum: AtomicU8::new(ChecksumAlg::Fletcher4 as u8),
            dedup: AtomicU8::new(0),
            data_copies: AtomicU8::new(1),
            primarycache: AtomicU8::new(0),
            secondarycache: AtomicU8::new(0),
            readonly: false.into(),
            st: Mutex::new(st),
            slop_shift: 5,
            streams: Mutex::new(HashMap::new()),
            error_sink: Mutex::new(None),
            block_kill: Mutex::new(None),
            fill_stats: Mutex::new(FillStats::default()),
            weak: weak.clone(),
            early: Arc::default(),
        })
    }

    /// A new, empty object set of type `os_type` (nothing on disk until synced).
    pub fn create(zio: Arc<Zio>, gate: Arc<TxgGate>, os_type: u64) -> Arc<Objset> {
        let meta = Tree {
            root: BlkPtr::HOLE,
            nlevels: 1,
            used_bytes: 0,
        };
        Objset::with_state(zio, gate, os_type, OsState::new(meta, 1, 0, BlkPtr::HOLE, ZilHeader::default()))
    }

    /// Open the object set rooted at `root` (an [`ObjsetPhys`] block).
    pub fn open(zio: Arc<Zio>, gate: Arc<TxgGate>, root: &BlkPtr, used_bytes: u64) -> Result<Arc<Objset>> {
        if root.is_hole() {
            let os = Objset::create(zio, gate, OS_TYPE_ZFS);
            return Ok(os);
        }
        let data = zio.read_block(root).map_err(zio_err)?;
        let phys = ObjsetPhys::decode(&data)?;
        let md = &phys.meta_dnode;
        if !md.is_free() && md.datablksz_bytes != DNODE_BLOCK_BYTES {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "objset",
                format!("meta-dnode block size {} (expected {DNODE_BLOCK_BYTES})", md.datablksz_bytes),
            )));
        }
        // `DnodePhys::decode` checked that (maxblkid + 1) blocks of 16 KiB fit in
        // u64, so (maxblkid + 1) × 32 dnodes does too.
        let next_obj = if md.blkptr.is_hole() {
            1
        } else {
            md.maxblkid.saturating_add(1).saturating_mul(DNODES_PER_BLOCK).max(1)
        };
        let meta = Tree {
            root: md.blkptr,
            nlevels: md.nlevels,
            used_bytes: md.used_bytes,
        };
        let st = OsState::new(meta, next_obj, used_bytes, *root, phys.zil_header);
        Ok(Objset::with_state(zio, gate, phys.os_type, st))
    }

    /// The intent-log header as of the last [`Objset::set_zil_header`] (or as read at open).
    pub fn zil_header(&self) -> ZilHeader {
        self.st.lock().zil_header
    }

    /// Replace the intent-log header; the next txg sync writes a new object-set root
    /// carrying it even if nothing else changed.
    pub fn set_zil_header(&self, h: ZilHeader) {
        let mut st = self.st.lock();
        if st.zil_header != h {
            st.zil_header = h;
            st.zil_dirty = true;
        }
    }

    /// True when a changed intent-log header waits for the next sync.
    pub fn zil_dirty(&self) -> bool {
        self.st.lock().zil_dirty
    }

    /// Set the compression used for new data blocks (the `compression` property).
    /// Metadata always uses LZ4.
    pub fn set_compression(&self, c: CompressSetting) {
        self.compression.store(c.to_bits(), Ordering::Relaxed);
    }

    /// Set the checksum of new file data blocks (the `checksum` property; `Off`
    /// writes none). Metadata always gets BLAKE3, whatever this says.
    pub fn set_checksum(&self, alg: ChecksumAlg) {
        self.checksum.store(alg as u8, Ordering::Relaxed);
    }

    /// Set how new file data blocks are deduplicated (the `dedup` property; the
    /// caller also sets the strong checksum it implies).
    pub fn set_dedup(&self, d: tarn_zio::Dedup) {
        let v = match d {
            tarn_zio::Dedup::Off => 0,
            tarn_zio::Dedup::On => 1,
            tarn_zio::Dedup::Verify => 2,
        };
        self.dedup.store(v, Ordering::Relaxed);
    }

    /// The `dedup` setting in force.
    pub fn dedup(&self) -> tarn_zio::Dedup {
        match self.dedup.load(Ordering::Relaxed) {
            1 => tarn_zio::Dedup::On,
            2 => tarn_zio::Dedup::Verify,
            _ => tarn_zio::Dedup::Off,
        }
    }

    /// Set the number of copies (DVAs) of new file data blocks (the `copies`
    /// property, clamped to 1..=3); metadata gets one more, up to 3.
    pub fn set_copies(&self, copies: u8) {
        self.data_copies.store(copies.clamp(1, 3), Ordering::Relaxed);
    }

    /// What the ARC may keep of this object set's blocks (the `primarycache`
    /// property): reads of blocks it may not keep still count in the ARC statistics
    /// but leave nothing behind, and blocks just written are dropped from it.
    pub fn set_primarycache(&self, c: CachePolicy) {
        self.primarycache.store(policy_code(c), Ordering::Relaxed);
    }

    /// The `primarycache` policy in force.
    pub fn primarycache(&self) -> CachePolicy {
        policy_of(self.primarycache.load(Ordering::Relaxed))
    }

    /// What the L2ARC may take of this object set's blocks (the `secondarycache`
    /// property): blocks it refuses are marked in the ARC after each read and write
    /// so that the feed skips them.
    pub fn set_secondarycache(&self, c: CachePolicy) {
        self.secondarycache.store(policy_code(c), Ordering::Relaxed);
    }

    /// The `secondarycache` policy in force.
    pub fn secondarycache(&self) -> CachePolicy {
        policy_of(self.secondarycache.load(Ordering::Relaxed))
    }

    /// Mark `bp` for the L2ARC feed as `secondarycache` says (nothing to do for the
    /// default `all`).
    fn mark_secondary(&self, bp: &BlkPtr) {
        let policy = self.secondarycache();
        if policy != CachePolicy::All && !policy.caches(tarn_zio::bp_is_metadata(bp)) {
            self.zio.set_l2_eligible(bp, false);
        }
    }

    /// A demand read of `bp` through the ARC under this object set's `primarycache`
    /// and `secondarycache`.
    fn read_bp(&self, bp: &BlkPtr) -> std::result::Result<Arc<Vec<u8>>, ZioError> {
        let r = self.zio.read_block_as(bp, tarn_zio::Access::Demand, self.primarycache());
        self.mark_secondary(bp);
        r
    }

    /// [`Zio::write_blocks`], then drop from the ARC what `primarycache` does not let
    /// it keep, and mark what `secondarycache` keeps off the cache devices.
    fn write_bps(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize) -> Vec<std::result::Result<BlkPtr, ZioError>> {
        let out = self.zio.write_blocks(blocks, threads);
        self.cache_policy(out.iter().flatten());
        out
    }

    /// Apply `primarycache` and `secondarycache` to blocks just written.
    fn cache_policy<'a>(&self, bps: impl Iterator<Item = &'a BlkPtr> + Clone) {
        let policy = self.primarycache();
        if policy != CachePolicy::All {
            for bp in bps.clone() {
                if !policy.caches(tarn_zio::bp_is_metadata(bp)) {
                    self.zio.uncache(bp);
                }
            }
        }
        if self.secondarycache() != CachePolicy::All {
            for bp in bps {
                self.mark_secondary(bp);
            }
        }
    }

    /// Make this object set refuse changes (`readonly=on`).
    pub fn set_readonly(&self, ro: bool) {
        self.readonly.store(ro, Ordering::Relaxed);
    }

    /// Allocated bytes of all blocks of this object set as of the last sync.
    pub fn used_bytes(&self) -> u64 {
        self.st.lock().used_bytes
    }

    /// The root block pointer as of the last sync (hole if never synced).
    pub fn root_bp(&self) -> BlkPtr {
        self.st.lock().root
    }

    /// True when some object has changes not yet synced.
    pub fn has_dirty(&self) -> bool {
        let st = self.st.lock();
        !st.dirty.is_empty() || st.zil_dirty
    }

    fn compression(&self) -> CompressSetting {
        CompressSetting::from_bits(self.compression.load(Ordering::Relaxed))
    }

    fn checksum(&self) -> ChecksumAlg {
        ChecksumAlg::from_u8(self.checksum.load(Ordering::Relaxed)).unwrap_or(ChecksumAlg::Fletcher4)
    }

    fn data_copies(&self) -> u8 {
        self.data_copies.load(Ordering::Relaxed)
    }

    // ---- tree reading -------------------------------------------------------------

    /// Dnode blocks one [`Objset::scan_free_slots`] call reads at most.
    const SCAN_BLOCKS: u64 = 4;

    fn check_writable(&self) -> Result<()> {
        if self.readonly.load(Ordering::Relaxed) || self.gate.is_readonly() {
            return Err(DmuError::ReadOnly);
        }
        Ok(())
    }

    /// Before a hold (none is held here, so waiting for a sync cannot deadlock): when
    /// new dirty data would fail [`Objset::space_check`] only because space is still
    /// on its way back (frees deferred for a few txgs, or dirty overwrites whose old
    /// blocks their sync will free), wait for txg syncs instead of failing with ENOSPC,
    /// as OpenZFS's `dmu_tx_assign` waits and retries on ERESTART. Each wait is for
    /// the next sync to end — the one running if any (its end returns the frees that
    /// aged past `TXG_DEFER_SIZE` and ends the double count of its dirty data), else
    /// the open txg's — then the check runs again; waiting for the open txg while
    /// another syncs would stall the writer for two syncs where one may do. Gives up
    /// after [`SPACE_WAIT_SYNCS_MAX`] syncs; the check under the hold then decides.
    fn wait_for_space(&self) {
        for _ in 0..SPACE_WAIT_SYNCS_MAX {
            if self.space_check(SPACE_WAIT_HEADROOM_BYTES).is_ok() {
                return;
            }
            if self.zio.deferred_bytes() == 0 && self.gate.dirty_bytes() == 0 {
                return;
            }
            if self.gate.wait_synced(self.gate.synced_txg() + 1).is_err() {
                return;
            }
        }
    }

    /// Refuse new dirty data that might not fit in the pool (keeps 1/32 as slop for
    /// metadata and frees, as OpenZFS's `spa_slop_shift`).
    fn space_check(&self, len: u64) -> Result<()> {
        let (size, free) = self.zio.with_space(|s| (s.asize_bytes(), s.free_bytes()));
        let slop = (size >> self.slop_shift).max(4 << 20);
        let pending = (self.gate.dirty_bytes() + len) as f64 * self.zio.inflation() * 1.1;
        if (free as f64) < slop as f64 + pending {
            return Err(DmuError::NoSpace);
        }
        Ok(())
    }

    // ---- sync ---------------------------------------------------------------------

    /// Install (or remove, with `None`) the hook that decides the fate of every block
    /// this object set stops referencing; see [`BlockKill`].
    pub fn set_block_kill(&self, kill: Option<BlockKill>) {
        *self.block_kill.lock() = kill;
    }
}

impl Objset {
    /// Report the object id of every failed [`ObjectStore::read`] (an I/O or checksum
    /// error below the DMU: no copy verified) to `sink` — spa's persistent error log,
    /// which `zpool status -v` lists.
    pub fn set_read_error_sink(&self, sink: ReadErrorSink) {
        *self.error_sink.lock() = Some(sink);
    }

    /// [`ObjectStore::read`] without the error report.
    fn read_inner(&self, obj: u64, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let blksz = {
            let mut st = self.st.lock();
            self.load_dnode(&mut st, obj)?.attrs.blksz as u64
        };
        self.prefetch_after(obj, offset_bytes / blksz, (offset_bytes + buf.len() as u64 - 1) / blksz);
        let mut pos = 0usize;
        while pos < buf.len() {
            let off = offset_bytes + pos as u64;
            let (src, blksz, in_blk, blkid) = {
                let mut st = self.st.lock();
                let dn = self.load_dnode(&mut st, obj)?;
                let blksz = dn.attrs.blksz as u64;
                let blkid = off / blksz;
                (self.resolve(dn, blkid)?, blksz, (off % blksz) as usize, blkid)
            };
            let n = (blksz as usize - in_blk).min(buf.len() - pos);
            let dst = &mut buf[pos..pos + n];
            match src {
                Src::Zero => dst.fill(0),
                // Bytes written into a partial record are served without its fill.
                Src::Partial(layers, _) if layers[0].read_covered(in_blk, dst) => {}
                other => {
                    let top = match &other {
                        Src::Partial(layers, _) => Some(layers[0].clone()),
                        _ => None,
                    };
                    let data = self.fetch(other, blksz as u32)?;
                    if let Some(top) = top {
                        self.promote(obj, blkid, &top, &data);
                    }
                    // A block shorter than the dnode's block size (a damaged pool)
                    // reads as zeros past its end.
                    let avail = data.len().saturating_sub(in_blk).min(n);
                    if avail > 0 {
                        dst[..avail].copy_from_slice(&data[in_blk..in_blk + avail]);
                    }
                    dst[avail..].fill(0);
                }
            }
            pos += n;
        }
        Ok(())
    }
}

impl ObjectStore for Objset {
    fn block_pointers(&self, obj: u64, first_blkid: u64, n: u64) -> Result<Option<(u32, Vec<BlkPtr>)>> {
        let end = first_blkid.checked_add(n).ok_or(DmuError::Invalid("block range overflows"))?;
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        let pending = |blocks: &BTreeMap<u64, Dirty>, frees: &[(u64, u64)]| {
            blocks.range(first_blkid..end).next().is_some() || frees.iter().any(|&(s, e)| s < end && first_blkid < e)
        };
        if pending(&dn.open.blocks, &dn.open.frees) || dn.syncing.as_ref().is_some_and(|r| pending(&r.blocks, &r.frees)) {
            return Ok(None);
        }
        let blksz = dn.attrs.blksz;
        let tree = dn.tree.clone();
        let bps = (first_blkid..end).map(|b| self.tree_lookup(&tree, b)).collect::<Result<Vec<_>>>()?;
        Ok(Some((blksz, bps)))
    }

    fn clone_blocks(&self, tx: &TxHold, obj: u64, first_blkid: u64, blksz_bytes: u32, bps: &[BlkPtr]) -> Result<()> {
        self.check_writable()?;
        if bps
            .iter()
            .any(|bp| !bp.is_hole() && (bp.otype != ObjectType::FileData || bp.level != 0 || bp.birth_txg >= tx.txg))
        {
            return Err(DmuError::Invalid("only synced file data blocks can be cloned"));
        }
        first_blkid.checked_add(bps.len() as u64).ok_or(DmuError::Invalid("block range overflows"))?;
        if !self.zio.brt().has_room(bps.len()) {
            return Err(DmuError::Invalid("the block reference table is full"));
        }
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        if dn.attrs.blksz != blksz_bytes {
            // An object without data takes the source's block size, as the growing
            // first block would (OpenZFS `dmu_brt_clone` does the same).
            let empty = dn.attrs.maxblkid == 0 && !dn.open.blocks.contains_key(&0) && matches!(self.resolve(dn, 0)?, Src::Zero);
            if !empty || blksz_bytes > dn.attrs.max_blksz || !blksz_bytes.is_multiple_of(512) || blksz_bytes == 0 {
                return Err(DmuError::Invalid("block sizes differ"));
            }
            dn.attrs.blksz = blksz_bytes;
        }
        for (i, bp) in bps.iter().enumerate() {
            let rec = if bp.is_hole() {
                Dirty::Clone(BlkPtr::HOLE)
            } else {
                let mut c = *bp;
                c.phys_birth_txg = bp.physical_birth_txg();
                c.birth_txg = tx.txg;
                Dirty::Clone(c)
            };
            self.put_block(&mut st, obj, first_blkid + i as u64, rec);
        }
        Self::mark_dirty(&mut st, obj);
        Ok(())
    }

    fn hold_tx(&self) -> Result<TxHold> {
        self.check_writable()?;
        // Before the wait for space: the early writer allocates while a writer waits
        // for it, and what `wait_for_space` found must still be there at the hold.
        self.early_backpressure();
        self.wait_for_space();
        self.gate.hold()
    }

    fn create_object(&self, _tx: &TxHold, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<u64> {
        self.check_new_object(blksz_bytes, max_blksz_bytes, bonus)?;
        let mut st = self.st.lock();
        if st.free_ids.is_empty() {
            self.scan_free_slots(&mut st)?;
        }
        let obj = match st.free_ids.pop_first() {
            Some(id) => id,
            None => st.next_obj,
        };
        Self::install_object(&mut st, obj, otype, blksz_bytes, max_blksz_bytes, bonus);
        Ok(obj)
    }

    fn claim_object(&self, _tx: &TxHold, obj: u64, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<()> {
        self.check_new_object(blksz_bytes, max_blksz_bytes, bonus)?;
        let mut st = self.st.lock();
        match self.load_dnode(&mut st, obj) {
            Ok(_) => return Err(DmuError::Exists),
            Err(DmuError::NoSuchObject(_)) if obj != 0 => {}
            Err(e) => return Err(e),
        }
        if st.dnodes.get(&obj).is_some_and(|d| d.syncing.is_some() || st.dirty.contains(&obj)) {
            return Err(DmuError::Invalid("object id freed in a txg not yet synced"));
        }
        st.free_ids.remove(&obj);
        Self::install_object(&mut st, obj, otype, blksz_bytes, max_blksz_bytes, bonus);
        Ok(())
    }

    fn free_object(&self, _tx: &TxHold, obj: u64) -> Result<()> {
        self.check_writable()?;
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        dn.attrs.freed = true;
        let (released, partial, held) = dbuf::dirty_split(dn.open.blocks.values());
        dn.open.blocks.clear();
        Self::mark_dirty(&mut st, obj);
        drop(st);
        self.gate.add_dirty_split(-released, -partial, -held);
        Ok(())
    }

    fn read(&self, obj: u64, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.read_inner(obj, offset_bytes, buf);
        if let Err(DmuError::Io(_)) = &r {
            if let Some(sink) = self.error_sink.lock().clone() {
                sink(obj);
            }
        }
        r
    }

    fn write(&self, _tx: &TxHold, obj: u64, offset_bytes: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        if data.is_empty() {
            return Ok(());
        }
        self.space_check(data.len() as u64)?;
        let end = offset_bytes + data.len() as u64;
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        // Grow the single first block while the object has only one (ZFS behaviour).
        if dn.attrs.maxblkid == 0 && dn.attrs.blksz < dn.attrs.max_blksz && end > dn.attrs.blksz as u64 {
            let new_blksz = if end <= dn.attrs.max_blksz as u64 {
                (end.div_ceil(512) * 512) as u32
            } else {
                dn.attrs.max_blksz
            };
            let mut b0 = self.block_content(dn, 0)?;
            b0.resize(new_blksz as usize, 0);
            let had = !matches!(self.resolve(dn, 0)?, Src::Zero);
            dn.attrs.blksz = new_blksz;
            if had || dn.open.blocks.contains_key(&0) {
                self.put_block(&mut st, obj, 0, Dirty::Full(Arc::new(b0)));
            }
        }
        let mut pos = 0usize;
        // Records this write completed, for the early writer (module `early`).
        let mut completed: Vec<(u64, u64)> = Vec::new();
        while pos < data.len() {
            let dn = self.load_dnode(&mut st, obj)?;
            let blksz = dn.attrs.blksz as u64;
            let off = offset_bytes + pos as u64;
            let blkid = off / blksz;
            let in_blk = (off % blksz) as usize;
            let n = (blksz as usize - in_blk).min(data.len() - pos);
            self.write_in_block(&mut st, obj, blkid, in_blk, &data[pos..pos + n])?;
            pos += n;
            if in_blk + n == blksz as usize && st.dnodes.get(&obj).is_some_and(|dn| self.early_candidate(dn, blkid)) {
                completed.push((obj, blkid));
            }
        }
        Self::mark_dirty(&mut st, obj);
        drop(st);
        self.early_queue(&completed);
        Ok(())
    }

    fn free_range(&self, _tx: &TxHold, obj: u64, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.check_writable()?;
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        let blksz = dn.attrs.blksz as u64;
        let obj_end = dn.attrs.maxblkid.saturating_add(1).saturating_mul(blksz);
        let end = if len_bytes == u64::MAX {
            obj_end.max(offset_bytes)
        } else {
            offset_bytes.saturating_add(len_bytes).min(obj_end.max(offset_bytes))
        };
        if end <= offset_bytes {
            if len_bytes == u64::MAX {
                dn.attrs.maxblkid = if offset_bytes == 0 { 0 } else { (offset_bytes - 1) / blksz };
                Self::mark_dirty(&mut st, obj);
            }
            return Ok(());
        }
        let first_full = offset_bytes.div_ceil(blksz);
        let last_full = end / blksz; // exclusive
                                     // Partial head and tail: zero in place.
        let mut partial = Vec::new();
        if !offset_bytes.is_multiple_of(blksz) {
            let b = offset_bytes / blksz;
            partial.push((b, (offset_bytes % blksz) as usize, ((b + 1) * blksz).min(end)));
        }
        if end % blksz != 0
            && end / blksz >= first_full
            && (end / blksz) * blksz >= offset_bytes
            && (offset_bytes / blksz != end / blksz || offset_bytes.is_multiple_of(blksz))
        {
            let b = end / blksz;
            partial.push((b, 0, end));
        }
        for (b, from, to_abs) in partial {
            let dn = st.dnodes.get_mut(&obj).unwrap();
            if matches!(self.resolve(dn, b)?, Src::Zero) {
                continue;
            }
            // Zeros written over the range: a partial record stays partial (no read).
            let to = (to_abs - b * blksz) as usize;
            self.write_in_block(&mut st, obj, b, from, &vec![0u8; to - from])?;
        }
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let mut removed = Vec::new();
        if first_full < last_full {
            let doomed: Vec<u64> = dn.open.blocks.range(first_full..last_full).map(|(k, _)| *k).collect();
            for k in doomed {
                removed.extend(dn.open.blocks.remove(&k));
            }
            dn.open.frees.push((first_full, last_full));
        }
        if len_bytes == u64::MAX {
            dn.attrs.maxblkid = if offset_bytes == 0 { 0 } else { (offset_bytes - 1) / blksz };
            let keep_to = dn.attrs.maxblkid;
            let doomed: Vec<u64> = dn.open.blocks.range(keep_to + 1..).map(|(k, _)| *k).collect();
            for k in doomed {
                removed.extend(dn.open.blocks.remove(&k));
            }
            if offset_bytes == 0 {
                // Truncate to zero frees block 0 too.
                removed.extend(dn.open.blocks.remove(&0));
                dn.open.frees.push((0, u64::MAX));
            } else {
                dn.open.frees.push((keep_to + 1, u64::MAX));
            }
        }
        Self::mark_dirty(&mut st, obj);
        drop(st);
        let (released, partial, held) = dbuf::dirty_split(&removed);
        if released != 0 {
            self.gate.add_dirty_split(-released, -partial, -held);
        }
        Ok(())
    }

    fn bonus(&self, obj: u64) -> Result<Vec<u8>> {
        let mut st = self.st.lock();
        Ok(self.load_dnode(&mut st, obj)?.attrs.bonus.clone())
    }

    fn set_bonus(&self, _tx: &TxHold, obj: u64, bonus: &[u8]) -> Result<()> {
        self.check_writable()?;
        if bonus.len() > tarn_phys::DNODE_BONUS_SIZE_BYTES {
            return Err(DmuError::Invalid("bonus too long"));
        }
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        dn.attrs.bonus = bonus.to_vec();
        Self::mark_dirty(&mut st, obj);
        Ok(())
    }

    fn object_info(&self, obj: u64) -> Result<ObjectInfo> {
        let mut st = self.st.lock();
        let dn = self.load_dnode(&mut st, obj)?;
        let dirty: u64 = dn.open.blocks.values().map(|b| b.dirty_bytes()).sum();
        Ok(ObjectInfo {
            otype: dn.attrs.otype,
            datablksz_bytes: dn.attrs.blksz,
            maxblkid: dn.attrs.maxblkid,
            used_bytes: dn.tree.used_bytes.max(dirty),
        })
    }

    fn wait_synced(&self) -> Result<()> {
        let txg = self.gate.open_txg();
        self.gate.wait_synced(txg)
    }

    fn space(&self) -> SpaceInfo {
        let size = self.zio.size_bytes();
        let slop = (size >> self.slop_shift).max(4 << 20);
        SpaceInfo {
            used_bytes: self.zio.deflated_bytes(self.used_bytes()),
            avail_bytes: self.zio.deflated_bytes(self.zio.free_bytes().saturating_sub(slop)),
        }
    }

    fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::Relaxed) || self.gate.is_readonly()
    }
}

impl Objset {
    /// One past the highest object id this object set may hold: no object with an id
    /// at or above it exists (ids are handed out below it, and opening starts it past
    /// the end of the dnode array). A receive clips `FREEOBJECTS` ranges with it so
    /// that freeing a huge id range costs what the object set holds, not the range.
    pub fn object_id_end(&self) -> u64 {
        self.st.lock().next_obj
    }
}

/// [`CachePolicy`] as stored in an atomic byte.
fn policy_code(c: CachePolicy) -> u8 {
    match c {
        CachePolicy::All => 0,
        CachePolicy::Metadata => 1,
        CachePolicy::None => 2,
    }
}

/// The [`CachePolicy`] of [`policy_code`]'s byte.
fn policy_of(v: u8) -> CachePolicy {
    match v {
        1 => CachePolicy::Metadata,
        2 => CachePolicy::None,
        _ => CachePolicy::All,
    }
}
