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
//! `Full`, as before. Invariants:
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
//!   and the fill turns every partial record into a whole new block.
//!
//! A read of a partial record merges: bytes one extent holds are copied out directly
//! (the intent log fetches written ranges this way, so a sync write logs only its own
//! bytes and reads nothing); any other range reads the block below and lays the
//! extents over it (newest generation last); when the open generation's record was
//! the partial one and no write changed it meanwhile, the merge becomes that record
//! (`Objset::promote`, now `Full`), so a record read often (a ZAP block) merges once. At txg
//! sync (phase 2) every partial record of the txg is filled: the old blocks are looked
//! up in the tree, sorted by (vdev, offset), read with `Zio::read_blocks` (adjacent
//! blocks aggregated) in batches of at most [`FILL_BATCH_BYTES`], merged and written
//! before the next batch is read, so the fill's memory is bounded whatever the dirty
//! limit. A whole-record write needs no fill, and a partial record over a hole none.
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
//! Limits: one mutex per object set (metadata I/O in phase 3 happens under it, one
//! batched round trip per tree level); clean
//! dnodes are evicted from memory when more than [`DNODE_CACHE_MAX`] are loaded.
//!
//! Errors: a failed block read returns `DmuError::Io` (zio already counted it); a
//! failed write or allocation in phase 2/3 is returned to spa, which suspends the pool.
//!
//! Untrusted trees: every indirect block is read through `read_indirect`, which
//! checks the pointer's level and type against its place in the tree and the block's
//! length (exactly 128 KiB) before anything indexes it, in open context
//! (`tree_lookup`) and in syncing context (`load_indirect`, `l1_exists`,
//! `free_subtree`, and so `trees_write`, which only sees blocks loaded that way). A
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
use tarn_zio::{CachePolicy, WriteProps, Zio, ZioError};

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

/// A dirty level-0 record of one generation (open or syncing) of a dnode.
#[derive(Clone)]
enum Dirty {
    /// Every byte of the record: exactly `blksz` bytes.
    Full(Arc<Vec<u8>>),
    /// Only the byte ranges written in this generation (deferred fill); every other
    /// byte is whatever lies below this generation. See the theory statement.
    Partial(Arc<Partial>),
    /// Another block's pointer, shared by cloning (`ObjectStore::clone_blocks`): its
    /// sync writes nothing, counts the reference (block reference table, or dedup
    /// table for a deduplicated block) and installs the pointer.
    Clone(BlkPtr),
}

impl Dirty {
    /// Bytes this record counts as dirty data: the whole record, partial or not. A
    /// partial record holds only its written bytes in memory, but its sync allocates a
    /// whole record while the old one is still allocated, and the dirty count is what
    /// the space check (`Objset::space_check`) weighs against free space: counting
    /// only the written bytes let random 8 KiB overwrites of 128 KiB records dirty 16
    /// times more than the pool could hold, and the txg sync failed with ENOSPC.
    fn dirty_bytes(&self) -> u64 {
        match self {
            Dirty::Full(d) => d.len() as u64,
            Dirty::Partial(p) => p.record_bytes,
            Dirty::Clone(_) => 0,
        }
    }
}

/// The written ranges of a partial record: offset in the record → bytes. Extents are
/// disjoint and never touch (`Partial::insert` merges them), so their number is at
/// most one per write and their bytes are exactly the valid bytes.
#[derive(Clone, Default, Debug)]
pub(crate) struct Partial {
    extents: BTreeMap<usize, Vec<u8>>,
    /// Size of the whole record (the dnode's block size when the record was made).
    record_bytes: u64,
}

impl Partial {
    /// Record `data` as written at byte `at` of the record, over whatever was there.
    fn insert(&mut self, at: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = at + data.len();
        // Extents that overlap or touch [at, end) merge into one.
        let mut lo = at;
        let mut hi = end;
        let touching: Vec<usize> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(&s, e)| s + e.len() >= at)
            .map(|(&s, _)| s)
            .collect();
        for &s in &touching {
            lo = lo.min(s);
            hi = hi.max(s + self.extents[&s].len());
        }
        let mut merged = vec![0u8; hi - lo];
        for s in touching {
            let e = self.extents.remove(&s).expect("listed above");
            merged[s - lo..s - lo + e.len()].copy_from_slice(&e);
        }
        merged[at - lo..end - lo].copy_from_slice(data);
        self.extents.insert(lo, merged);
    }

    /// Copy bytes `[at, at + dst.len())` of the record into `dst` when one extent
    /// holds them all; false (and `dst` untouched) otherwise.
    fn read_covered(&self, at: usize, dst: &mut [u8]) -> bool {
        match self.extents.range(..=at).next_back() {
            Some((&s, e)) if s + e.len() >= at + dst.len() => {
                dst.copy_from_slice(&e[at - s..at - s + dst.len()]);
                true
            }
            _ => false,
        }
    }

    /// Lay the written ranges over `record` (the bytes below, `blksz` long).
    fn overlay(&self, record: &mut [u8]) {
        for (&s, e) in &self.extents {
            let end = (s + e.len()).min(record.len());
            if s < end {
                record[s..end].copy_from_slice(&e[..end - s]);
            }
        }
    }
}

#[derive(Default)]
struct OpenRec {
    blocks: BTreeMap<u64, Dirty>,
    frees: Vec<(u64, u64)>,
}

struct SyncRec {
    blocks: BTreeMap<u64, Dirty>,
    frees: Vec<(u64, u64)>,
    attrs: Attrs,
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

/// Where the current content of a level-0 block is.
enum Src {
    Data(Arc<Vec<u8>>),
    Zero,
    Bp(BlkPtr),
    /// Partial records (the newest first) over the content below them (never itself
    /// `Partial`).
    Partial(Vec<Arc<Partial>>, Box<Src>),
}

impl Src {
    /// The content a block pointer names: zeros for a hole.
    fn of(bp: BlkPtr) -> Src {
        if bp.is_hole() {
            Src::Zero
        } else {
            Src::Bp(bp)
        }
    }

    /// `layers` (newest first) over `self`.
    fn under(self, mut layers: Vec<Arc<Partial>>) -> Src {
        if layers.is_empty() {
            return self;
        }
        match self {
            Src::Partial(more, base) => {
                layers.extend(more);
                Src::Partial(layers, base)
            }
            base => Src::Partial(layers, Box::new(base)),
        }
    }
}

/// One block for [`Zio::write_blocks`]: its logical bytes and write properties.
type WriteItem = (Arc<Vec<u8>>, WriteProps);

/// Records one deferred-fill batch reads at most: the fill's memory (the old blocks
/// read plus the merged records waiting for their write) stays below twice this many
/// bytes however many partial records a txg holds.
pub const FILL_BATCH_BYTES: u64 = 32 << 20;

/// Counters of the deferred fill since the object set was opened (for tests and
/// benchmarks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FillStats {
    /// Partial records completed at txg sync (their old block read and merged).
    pub synced_fills: u64,
    /// Partial records completed at txg sync with nothing to read (a hole below).
    pub hole_fills: u64,
    /// Fills whose old block could not be read: their new bytes were dropped.
    pub failed_fills: u64,
    /// Batched read calls issued for fills.
    pub fill_batches: u64,
}

/// Everything phase 2 must write for one txg: (object, blkid, otype, record).
pub struct SyncBatch {
    txg: u64,
    blocks: Vec<(u64, u64, ObjectType, Dirty)>,
    /// One entry per block: the new pointer, or `None` when nothing may be installed
    /// (a fill that failed keeps the old block).
    written: Vec<Option<BlkPtr>>,
    dirty_bytes: u64,
    /// Objects with changes in this txg (data, attributes or frees).
    objects: usize,
}

impl SyncBatch {
    /// The txg being synced.
    pub fn txg(&self) -> u64 {
        self.txg
    }
    /// True when nothing in this object set changed in the txg.
    pub fn is_empty(&self) -> bool {
        self.objects == 0
    }
}

/// A tree being rewritten in phase 3: its tree (root and levels already grown), the
/// dirty indirect blocks keyed (level, index), and its used bytes before and now.
struct TreeWork {
    tree: Tree,
    dirty: BTreeMap<(u32, u64), Vec<u8>>,
    used: i64,
    before: i64,
}

impl TreeWork {
    /// Change of the tree's used bytes in this txg.
    fn used_delta_bytes(&self) -> i64 {
        self.tree.used_bytes as i64 - self.before
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
    /// A new, empty object set of type `os_type` (nothing on disk until synced).
    pub fn create(zio: Arc<Zio>, gate: Arc<TxgGate>, os_type: u64) -> Arc<Objset> {
        Arc::new(Objset {
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
            st: Mutex::new(OsState {
                meta: Tree {
                    root: BlkPtr::HOLE,
                    nlevels: 1,
                    used_bytes: 0,
                },
                dnodes: HashMap::new(),
                dirty: BTreeSet::new(),
                syncing: Vec::new(),
                next_obj: 1,
                free_ids: BTreeSet::new(),
                scan_cursor: 1,
                used_bytes: 0,
                root: BlkPtr::HOLE,
                zil_header: ZilHeader::default(),
                zil_dirty: false,
            }),
            slop_shift: 5,
            streams: Mutex::new(HashMap::new()),
            error_sink: Mutex::new(None),
            block_kill: Mutex::new(None),
            fill_stats: Mutex::new(FillStats::default()),
        })
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
        let next_obj = md.maxblkid.saturating_add(1).saturating_mul(DNODES_PER_BLOCK).max(1);
        Ok(Arc::new(Objset {
            zio,
            gate,
            os_type: phys.os_type,
            compression: CompressSetting::OFF.to_bits().into(),
            checksum: AtomicU8::new(ChecksumAlg::Fletcher4 as u8),
            dedup: AtomicU8::new(0),
            data_copies: AtomicU8::new(1),
            primarycache: AtomicU8::new(0),
            secondarycache: AtomicU8::new(0),
            readonly: false.into(),
            st: Mutex::new(OsState {
                meta: Tree {
                    root: md.blkptr,
                    nlevels: md.nlevels,
                    used_bytes: md.used_bytes,
                },
                dnodes: HashMap::new(),
                dirty: BTreeSet::new(),
                syncing: Vec::new(),
                next_obj: if md.blkptr.is_hole() { 1 } else { next_obj },
                free_ids: BTreeSet::new(),
                scan_cursor: 1,
                used_bytes,
                root: *root,
                zil_header: phys.zil_header,
                zil_dirty: false,
            }),
            slop_shift: 5,
            streams: Mutex::new(HashMap::new()),
            error_sink: Mutex::new(None),
            block_kill: Mutex::new(None),
            fill_stats: Mutex::new(FillStats::default()),
        }))
    }

    fn check_new_object(&self, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<()> {
        self.check_writable()?;
        if bonus.len() > tarn_phys::DNODE_BONUS_SIZE_BYTES {
            return Err(DmuError::Invalid("bonus too long"));
        }
        let valid = |b: u32| (512..=tarn_phys::MAX_BLOCK_SIZE_BYTES).contains(&b) && b.is_multiple_of(512);
        if !valid(blksz_bytes) || !valid(max_blksz_bytes) || max_blksz_bytes < blksz_bytes {
            return Err(DmuError::Invalid("block size"));
        }
        Ok(())
    }

    /// Put a new, empty object at id `obj` (free, checked by the caller) and mark it dirty.
    fn install_object(st: &mut OsState, obj: u64, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) {
        st.next_obj = st.next_obj.max(obj + 1);
        st.dnodes.insert(
            obj,
            Dn {
                attrs: Attrs {
                    otype,
                    blksz: blksz_bytes,
                    max_blksz: max_blksz_bytes,
                    maxblkid: 0,
                    bonus_type: 1,
                    bonus: bonus.to_vec(),
                    freed: false,
                },
                tree: Tree {
                    root: BlkPtr::HOLE,
                    nlevels: 1,
                    used_bytes: 0,
                },
                open: OpenRec::default(),
                syncing: None,
            },
        );
        Self::mark_dirty(st, obj);
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
        let policy = self.primarycache();
        if policy != CachePolicy::All {
            for bp in out.iter().flatten() {
                if !policy.caches(tarn_zio::bp_is_metadata(bp)) {
                    self.zio.uncache(bp);
                }
            }
        }
        if self.secondarycache() != CachePolicy::All {
            for bp in out.iter().flatten() {
                self.mark_secondary(bp);
            }
        }
        out
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

    /// Sequential-stream detection for `read` of blocks `first..=last` of `obj`: when
    /// the read continues the previous one, queue the next [`PREFETCH_BLOCKS`] blocks
    /// (those not queued yet) for background reads into the cache.
    fn prefetch_after(&self, obj: u64, first: u64, last: u64) {
        let (from, to) = {
            let mut streams = self.streams.lock();
            let seq = matches!(streams.get(&obj), Some(&(next, _)) if first == next || first + 1 == next);
            if !seq {
                if streams.len() >= PREFETCH_STREAMS_MAX {
                    streams.clear();
                }
                streams.insert(obj, (last + 1, last + 1));
                return;
            }
            let e = streams.get_mut(&obj).unwrap();
            let from = e.1.max(last + 1);
            let to = last + 1 + PREFETCH_BLOCKS;
            *e = (last + 1, to.max(e.1));
            (from, to)
        };
        if from >= to {
            return;
        }
        let mut bps = Vec::new();
        {
            let mut st = self.st.lock();
            let Ok(dn) = self.load_dnode(&mut st, obj) else { return };
            for b in from..to.min(dn.attrs.maxblkid.saturating_add(1)) {
                if let Ok(Src::Bp(bp)) = self.resolve(dn, b) {
                    bps.push(bp);
                }
            }
        }
        for bp in bps {
            self.zio.prefetch_as(bp, self.primarycache());
        }
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

    /// Read the indirect block `bp`, which its place in the tree says is at `level`
    /// (≥ 1), and check it before anything slices it: a pointer at the wrong level,
    /// of another type, or a block that is not exactly one indirect block long is
    /// `Corrupt` (a crafted pool), never an index panic further down.
    fn read_indirect(&self, bp: &BlkPtr, level: u32) -> Result<Arc<Vec<u8>>> {
        if bp.level as u32 != level || bp.otype != ObjectType::Indirect {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "indirect",
                format!("expected a level-{level} indirect block, found level {} {:?}", bp.level, bp.otype),
            )));
        }
        let ind = self.read_bp(bp).map_err(zio_err)?;
        if ind.len() != 1 << INDBLKSHIFT {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "indirect",
                format!("indirect block of {} bytes (level {level})", ind.len()),
            )));
        }
        Ok(ind)
    }

    /// The level-0 pointer for `blkid` in `tree` (hole if beyond the tree).
    fn tree_lookup(&self, tree: &Tree, blkid: u64) -> Result<BlkPtr> {
        let levels = tree.nlevels.max(1) as u32;
        if levels == 1 {
            return Ok(if blkid == 0 { tree.root } else { BlkPtr::HOLE });
        }
        let span = BPS_PER_INDIRECT.checked_pow(levels - 1).unwrap_or(u64::MAX);
        if blkid >= span {
            return Ok(BlkPtr::HOLE);
        }
        let mut bp = tree.root;
        for level in (1..levels).rev() {
            if bp.is_hole() {
                return Ok(BlkPtr::HOLE);
            }
            let ind = self.read_indirect(&bp, level)?;
            let idx = (blkid / BPS_PER_INDIRECT.pow(level - 1)) % BPS_PER_INDIRECT;
            let off = idx as usize * BLKPTR_SIZE_BYTES;
            bp = BlkPtr::decode(&ind[off..off + BLKPTR_SIZE_BYTES])?;
        }
        Ok(bp)
    }

    /// Dnode blocks one [`Objset::scan_free_slots`] call reads at most.
    const SCAN_BLOCKS: u64 = 4;

    /// Look for free slots below `next_obj` in the next few dnode blocks after
    /// `scan_cursor` and add them to `free_ids`. A slot counts when it is free on disk
    /// and has no dnode in memory (one created, or freed, in a txg not yet synced).
    fn scan_free_slots(&self, st: &mut OsState) -> Result<()> {
        let mut blocks = 0;
        while st.scan_cursor < st.next_obj && blocks < Self::SCAN_BLOCKS && st.free_ids.is_empty() {
            let blkid = st.scan_cursor / DNODES_PER_BLOCK;
            let first = blkid * DNODES_PER_BLOCK;
            let end = (first + DNODES_PER_BLOCK).min(st.next_obj);
            let bp = self.tree_lookup(&st.meta, blkid)?;
            let blk = if bp.is_hole() { None } else { Some(self.read_bp(&bp).map_err(zio_err)?) };
            for obj in st.scan_cursor.max(first).max(1)..end {
                let free_on_disk = match &blk {
                    None => true,
                    Some(b) => {
                        let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
                        let d = b
                            .get(off..off + DNODE_SIZE_BYTES)
                            .ok_or(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode", "short dnode block")))?;
                        DnodePhys::decode(d)?.is_free()
                    }
                };
                if free_on_disk && !st.dnodes.contains_key(&obj) {
                    st.free_ids.insert(obj);
                }
            }
            st.scan_cursor = end;
            blocks += 1;
        }
        Ok(())
    }

    fn load_dnode<'a>(&self, st: &'a mut OsState, obj: u64) -> Result<&'a mut Dn> {
        if obj == 0 {
            return Err(DmuError::NoSuchObject(0));
        }
        if !st.dnodes.contains_key(&obj) {
            let bp = self.tree_lookup(&st.meta, obj / DNODES_PER_BLOCK)?;
            if bp.is_hole() {
                return Err(DmuError::NoSuchObject(obj));
            }
            let blk = self.read_bp(&bp).map_err(zio_err)?;
            let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
            if blk.len() < off + DNODE_SIZE_BYTES {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode", "short dnode block")));
            }
            let phys = DnodePhys::decode(&blk[off..off + DNODE_SIZE_BYTES])?;
            if phys.is_free() {
                return Err(DmuError::NoSuchObject(obj));
            }
            if st.dnodes.len() >= DNODE_CACHE_MAX {
                let dirty = &st.dirty;
                st.dnodes.retain(|id, d| dirty.contains(id) || d.syncing.is_some());
            }
            st.dnodes.insert(
                obj,
                Dn {
                    attrs: Attrs {
                        otype: phys.otype,
                        blksz: phys.datablksz_bytes,
                        max_blksz: phys.max_blksz_bytes,
                        maxblkid: phys.maxblkid,
                        bonus_type: phys.bonus_type,
                        bonus: phys.bonus,
                        freed: false,
                    },
                    tree: Tree {
                        root: phys.blkptr,
                        nlevels: phys.nlevels,
                        used_bytes: phys.used_bytes,
                    },
                    open: OpenRec::default(),
                    syncing: None,
                },
            );
        }
        let dn = st.dnodes.get_mut(&obj).unwrap();
        if dn.attrs.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        Ok(dn)
    }

    /// Where the content of block `blkid` is: the open generation, then the syncing
    /// one, then the synced tree. Partial records are returned as layers over what
    /// lies below them.
    fn resolve(&self, dn: &Dn, blkid: u64) -> Result<Src> {
        match dn.open.blocks.get(&blkid) {
            Some(Dirty::Full(b)) => Ok(Src::Data(b.clone())),
            Some(Dirty::Partial(p)) => Ok(self.resolve_below_open(dn, blkid)?.under(vec![p.clone()])),
            Some(Dirty::Clone(bp)) => Ok(Src::of(*bp)),
            None if in_ranges(&dn.open.frees, blkid) => Ok(Src::Zero),
            None => self.resolve_below_open(dn, blkid),
        }
    }

    /// Where the content of block `blkid` is as the open generation found it: the
    /// syncing generation, then the synced tree.
    fn resolve_below_open(&self, dn: &Dn, blkid: u64) -> Result<Src> {
        if let Some(s) = &dn.syncing {
            match s.blocks.get(&blkid) {
                Some(Dirty::Full(b)) => return Ok(Src::Data(b.clone())),
                Some(Dirty::Partial(p)) => return Ok(self.resolve_tree(&dn.tree, blkid)?.under(vec![p.clone()])),
                Some(Dirty::Clone(bp)) => return Ok(Src::of(*bp)),
                None if in_ranges(&s.frees, blkid) => return Ok(Src::Zero),
                None => {}
            }
        }
        self.resolve_tree(&dn.tree, blkid)
    }

    /// Block `blkid` of the synced tree.
    fn resolve_tree(&self, tree: &Tree, blkid: u64) -> Result<Src> {
        Ok(Src::of(self.tree_lookup(tree, blkid)?))
    }

    /// The bytes of `src`, exactly `blksz` bytes for a merged partial record (the
    /// fill on read: new bytes over old); other sources as stored.
    fn fetch(&self, src: Src, blksz: u32) -> Result<Arc<Vec<u8>>> {
        match src {
            Src::Data(d) => Ok(d),
            Src::Zero => Ok(Arc::new(vec![0u8; blksz as usize])),
            Src::Bp(bp) => self.read_bp(&bp).map_err(zio_err),
            Src::Partial(layers, base) => {
                let mut v = self.fetch(*base, blksz)?.as_ref().clone();
                v.resize(blksz as usize, 0);
                for p in layers.iter().rev() {
                    p.overlay(&mut v);
                }
                Ok(Arc::new(v))
            }
        }
    }

    /// Current content of block `blkid`, exactly `blksz` bytes (zero-extended).
    fn block_content(&self, dn: &Dn, blkid: u64) -> Result<Vec<u8>> {
        let src = self.resolve(dn, blkid)?;
        let mut v = self.fetch(src, dn.attrs.blksz)?.as_ref().clone();
        v.resize(dn.attrs.blksz as usize, 0);
        Ok(v)
    }

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
    /// as OpenZFS's `dmu_tx_assign` waits and retries on ERESTART. Gives up after
    /// [`SPACE_WAIT_SYNCS_MAX`] syncs; the check under the hold then decides.
    fn wait_for_space(&self) {
        for _ in 0..SPACE_WAIT_SYNCS_MAX {
            if self.space_check(SPACE_WAIT_HEADROOM_BYTES).is_ok() {
                return;
            }
            if self.zio.deferred_bytes() == 0 && self.gate.dirty_bytes() == 0 {
                return;
            }
            if self.gate.wait_synced(self.gate.open_txg()).is_err() {
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

    fn mark_dirty(st: &mut OsState, obj: u64) {
        st.dirty.insert(obj);
    }

    /// Make `record` the open generation's block `blkid` of `obj`, accounting the
    /// change of dirty bytes.
    fn put_block(&self, st: &mut OsState, obj: u64, blkid: u64, record: Dirty) {
        let len = record.dirty_bytes() as i64;
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let old = dn.open.blocks.insert(blkid, record);
        let delta = len - old.map(|o| o.dirty_bytes() as i64).unwrap_or(0);
        if blkid > dn.attrs.maxblkid {
            dn.attrs.maxblkid = blkid;
        }
        Self::mark_dirty(st, obj);
        if delta != 0 {
            self.gate.add_dirty(delta);
        }
    }

    /// Write `data` at byte `in_blk` of block `blkid` of `obj` (the range lies within
    /// the block). Never reads a data block: a whole record replaces what was there; a
    /// part of a record already dirty in the open txg is patched in place; a part of
    /// a record whose content below the open txg is a hole, freed, or dirty and whole
    /// in the syncing txg is copied from memory; any other part (the record is on
    /// disk, or partial in the syncing txg) becomes or extends a partial record and
    /// its fill is deferred (theory statement). Indirect blocks may be read to find
    /// the record.
    fn write_in_block(&self, st: &mut OsState, obj: u64, blkid: u64, in_blk: usize, data: &[u8]) -> Result<()> {
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let blksz = dn.attrs.blksz as usize;
        debug_assert!(in_blk + data.len() <= blksz, "write crosses a record boundary");
        if in_blk == 0 && data.len() == blksz {
            self.put_block(st, obj, blkid, Dirty::Full(Arc::new(data.to_vec())));
            return Ok(());
        }
        let record = match dn.open.blocks.get_mut(&blkid) {
            Some(Dirty::Full(existing)) => {
                let v = Arc::make_mut(existing);
                v.resize(blksz, 0);
                v[in_blk..in_blk + data.len()].copy_from_slice(data);
                if blkid > dn.attrs.maxblkid {
                    dn.attrs.maxblkid = blkid;
                }
                return Ok(());
            }
            Some(Dirty::Partial(p)) => {
                // Already counted whole (`Dirty::dirty_bytes`).
                Arc::make_mut(p).insert(in_blk, data);
                if blkid > dn.attrs.maxblkid {
                    dn.attrs.maxblkid = blkid;
                }
                return Ok(());
            }
            Some(Dirty::Clone(bp)) => {
                // A write into a block cloned in this txg: it becomes a copy (read
                // now); the clone took no reference yet, so dropping it costs nothing.
                let mut b = self.fetch(Src::of(*bp), blksz as u32)?.as_ref().clone();
                b.resize(blksz, 0);
                b[in_blk..in_blk + data.len()].copy_from_slice(data);
                Dirty::Full(Arc::new(b))
            }
            None => {
                let below = if in_ranges(&dn.open.frees, blkid) {
                    Src::Zero
                } else {
                    self.resolve_below_open(dn, blkid)?
                };
                match below {
                    Src::Zero | Src::Data(_) => {
                        let mut b = self.fetch(below, blksz as u32)?.as_ref().clone();
                        b.resize(blksz, 0);
                        b[in_blk..in_blk + data.len()].copy_from_slice(data);
                        Dirty::Full(Arc::new(b))
                    }
                    Src::Bp(_) | Src::Partial(..) => {
                        let mut p = Partial {
                            record_bytes: blksz as u64,
                            ..Partial::default()
                        };
                        p.insert(in_blk, data);
                        Dirty::Partial(Arc::new(p))
                    }
                }
            }
        };
        self.put_block(st, obj, blkid, record);
        Ok(())
    }

    /// A read merged the partial record `top` of block `blkid` of `obj` into `merged`
    /// (new bytes over old): when `top` is still the open generation's record,
    /// unchanged since (a write would have replaced the shared `Arc`), keep the merge
    /// as the whole record, so later reads and writes of it need no merge. The
    /// content below cannot have changed meanwhile (theory statement), so `merged` is
    /// the record's content. Accounts the record's growth to `blksz` bytes.
    fn promote(&self, obj: u64, blkid: u64, top: &Arc<Partial>, merged: &Arc<Vec<u8>>) {
        let mut st = self.st.lock();
        let Some(dn) = st.dnodes.get_mut(&obj) else { return };
        if dn.attrs.freed || merged.len() != dn.attrs.blksz as usize {
            return;
        }
        let same = matches!(dn.open.blocks.get(&blkid), Some(Dirty::Partial(p)) if Arc::ptr_eq(p, top));
        if same {
            self.put_block(&mut st, obj, blkid, Dirty::Full(merged.clone()));
        }
    }

    /// Deferred-fill counters since the object set was opened.
    pub fn fill_stats(&self) -> FillStats {
        *self.fill_stats.lock()
    }

    // ---- sync ---------------------------------------------------------------------

    /// Phase 1 (call inside [`TxgGate::quiesce`]): move open dirty state to syncing.
    pub fn sync_collect(&self, txg: u64) -> SyncBatch {
        let mut st = self.st.lock();
        let dirty = std::mem::take(&mut st.dirty);
        let mut blocks = Vec::new();
        let mut dirty_bytes = 0u64;
        for &obj in &dirty {
            let dn = st.dnodes.get_mut(&obj).unwrap();
            assert!(dn.syncing.is_none(), "object {obj} still syncing from an earlier txg");
            let open = std::mem::take(&mut dn.open);
            let otype = dn.attrs.otype;
            for (blkid, record) in &open.blocks {
                dirty_bytes += record.dirty_bytes();
                if !dn.attrs.freed {
                    blocks.push((obj, *blkid, otype, record.clone()));
                }
            }
            dn.syncing = Some(SyncRec {
                blocks: open.blocks,
                frees: open.frees,
                attrs: dn.attrs.clone(),
            });
        }
        st.syncing = dirty.into_iter().collect();
        SyncBatch {
            txg,
            blocks,
            written: Vec::new(),
            dirty_bytes,
            objects: st.syncing.len(),
        }
    }

    /// Phase 2: write the batch's level-0 blocks (in `threads` parallel workers).
    ///
    /// Whole records go out first, as one batch. Then the partial records are filled
    /// (theory statement, "Deferred fill"): the block each one lies over is looked up
    /// in the synced tree, the fills are sorted by the old block's (vdev, offset) and
    /// read with [`Zio::read_blocks`] in batches of at most [`FILL_BATCH_BYTES`], each
    /// batch merged (new bytes over old) and written before the next is read.
    pub fn sync_write_data(&self, batch: &mut SyncBatch, threads: usize) -> Result<()> {
        let (compression, checksum, data_copies, dedup) = (self.compression(), self.checksum(), self.data_copies(), self.dedup());
        let txg = batch.txg;
        // nopwrite (OpenZFS `dmu_write_policy`: a strong checksum and compression on):
        // each file data block is offered the pointer it replaces, unless a free of
        // this txg covers it (then that pointer is being freed).
        let nop = checksum.is_strong() && compression.alg != tarn_phys::Compression::Off;
        let prev: Vec<Option<BlkPtr>> = if nop {
            let st = self.st.lock();
            batch
                .blocks
                .iter()
                .map(|(obj, blkid, otype, _)| {
                    let dn = st.dnodes.get(obj)?;
                    let rec = dn.syncing.as_ref()?;
                    if *otype != ObjectType::FileData || rec.frees.iter().any(|&(s, e)| (s..e).contains(blkid)) {
                        return None;
                    }
                    self.tree_lookup(&dn.tree, *blkid).ok().filter(|bp| !bp.is_hole())
                })
                .collect()
        } else {
            vec![None; batch.blocks.len()]
        };
        // Write properties of the batch's block `i` of type `otype`.
        let props = |i: usize, otype: ObjectType| {
            if otype == ObjectType::FileData {
                WriteProps {
                    otype,
                    level: 0,
                    compression,
                    checksum,
                    copies: copies_for(otype, self.os_type, data_copies),
                    txg,
                    fill: 1,
                    nop_prev: prev[i],
                    dedup,
                }
            } else {
                WriteProps::meta(otype, 0, copies_for(otype, self.os_type, data_copies), txg, 1)
            }
        };
        batch.written = vec![None; batch.blocks.len()];
        let mut first_err = None;
        // One batch through zio: compressed and checksummed in parallel, then written
        // with adjacent blocks merged into larger device writes.
        let full: Vec<usize> = (0..batch.blocks.len()).filter(|&i| matches!(batch.blocks[i].3, Dirty::Full(_))).collect();
        let items: Vec<(Arc<Vec<u8>>, WriteProps)> = full
            .iter()
            .map(|&i| match &batch.blocks[i].3 {
                Dirty::Full(d) => (d.clone(), props(i, batch.blocks[i].2)),
                Dirty::Partial(_) | Dirty::Clone(_) => unreachable!("filtered above"),
            })
            .collect();
        // With compression on, an all-zero file data block is stored as a hole, not
        // written (zfsprops(7) `compression`; OpenZFS `zio_write_compress`).
        let zero: Vec<bool> = items
            .iter()
            .map(|(d, p)| p.otype == ObjectType::FileData && compression.alg != tarn_phys::Compression::Off && d.iter().all(|&b| b == 0))
            .collect();
        let to_write: Vec<(Arc<Vec<u8>>, WriteProps)> = items.iter().zip(&zero).filter(|(_, z)| !**z).map(|(i, _)| i.clone()).collect();
        let mut out = self.write_bps(&to_write, threads).into_iter();
        for (k, &i) in full.iter().enumerate() {
            let r = if zero[k] {
                Ok(BlkPtr::HOLE)
            } else {
                out.next().expect("one result per block")
            };
            match r {
                Ok(bp) => batch.written[i] = Some(bp),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        drop(items);
        // Cloned records: the shared pointer itself, counted now in the block
        // reference table (or the dedup table) — in syncing context, so that the
        // tables written at the end of this txg match its trees.
        for (i, (_, _, _, record)) in batch.blocks.iter().enumerate() {
            if let Dirty::Clone(bp) = record {
                // A deduplicated block missing from its table (a damaged pool) counts
                // nowhere: its frees then leave it allocated (`refused_frees`).
                if !bp.is_hole() {
                    self.zio.clone_ref(bp);
                }
                batch.written[i] = Some(*bp);
            }
        }
        // Deferred fills: what each partial record lies over, from the synced tree
        // (unchanged since the write, see the theory statement).
        let mut fills: Vec<(usize, Src, u32)> = Vec::new(); // (batch index, old block, blksz)
        {
            let st = self.st.lock();
            for (i, (obj, blkid, _, record)) in batch.blocks.iter().enumerate() {
                if !matches!(record, Dirty::Partial(_)) {
                    continue;
                }
                let dn = st.dnodes.get(obj).expect("a syncing object stays loaded");
                let rec = dn.syncing.as_ref().expect("a syncing object has a syncing record");
                let below = if in_ranges(&rec.frees, *blkid) {
                    Src::Zero
                } else {
                    self.resolve_tree(&dn.tree, *blkid)?
                };
                fills.push((i, below, rec.attrs.blksz));
            }
        }
        let key = |s: &Src| match s {
            Src::Bp(bp) => (1, bp.dva[0].vdev, bp.dva[0].offset_bytes),
            _ => (0, 0, 0),
        };
        fills.sort_by_key(|(_, s, _)| key(s));
        let mut rest = &fills[..];
        while !rest.is_empty() {
            let mut take = 0usize;
            let mut bytes = 0u64;
            while take < rest.len() && (take == 0 || bytes + rest[take].2 as u64 <= FILL_BATCH_BYTES) {
                bytes += rest[take].2 as u64;
                take += 1;
            }
            let (chunk, tail) = rest.split_at(take);
            rest = tail;
            let bps: Vec<BlkPtr> = chunk
                .iter()
                .map(|(_, s, _)| match s {
                    Src::Bp(bp) => *bp,
                    _ => BlkPtr::HOLE,
                })
                .collect();
            let olds = self.zio.read_blocks(&bps, threads);
            let mut stats = FillStats {
                fill_batches: 1,
                ..FillStats::default()
            };
            let mut idx: Vec<usize> = Vec::new();
            let mut items: Vec<WriteItem> = Vec::new();
            for ((i, below, blksz), old) in chunk.iter().zip(olds) {
                let (obj, _, otype, record) = &batch.blocks[*i];
                let Dirty::Partial(p) = record else { unreachable!("fills are partial") };
                let old = match below {
                    Src::Bp(_) => match old {
                        Ok(old) => {
                            stats.synced_fills += 1;
                            old
                        }
                        Err(_) => {
                            // The old bytes are gone (no copy verified; zio counted the
                            // error): install nothing, so the record keeps its old,
                            // unreadable block and every later read reports the error.
                            // The new bytes are dropped; the object goes to the error log.
                            stats.failed_fills += 1;
                            if let Some(sink) = self.error_sink.lock().clone() {
                                sink(*obj);
                            }
                            continue;
                        }
                    },
                    _ => {
                        stats.hole_fills += 1;
                        Arc::new(Vec::new())
                    }
                };
                let mut v = old.as_ref().clone();
                v.resize(*blksz as usize, 0);
                p.overlay(&mut v);
                idx.push(*i);
                items.push((Arc::new(v), props(*i, *otype)));
            }
            for (i, r) in idx.into_iter().zip(self.write_bps(&items, threads)) {
                match r {
                    Ok(bp) => batch.written[i] = Some(bp),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            let mut total = self.fill_stats.lock();
            total.synced_fills += stats.synced_fills;
            total.hole_fills += stats.hole_fills;
            total.failed_fills += stats.failed_fills;
            total.fill_batches += stats.fill_batches;
        }
        match first_err {
            Some(e) => Err(zio_err(e)),
            None => Ok(()),
        }
    }

    /// Phase 3: install pointers, rewrite indirect and dnode blocks and the root.
    /// Returns the new root pointer, or `None` if nothing changed in this txg.
    ///
    /// The metadata is written level by level across all objects of the txg, each
    /// level as one [`Zio::write_blocks`] batch (aggregated, in parallel): first every
    /// dirty level-1 indirect block, then level 2, and so on, then all dnode blocks,
    /// then object 0's indirect blocks, then the root. A txg therefore costs a handful
    /// of device round trips on a slow disk, not one per block, and the object-set lock
    /// is held that much less (OpenZFS issues these as one tree of parallel zios).
    pub fn sync_finish(&self, batch: SyncBatch) -> Result<Option<BlkPtr>> {
        let txg = batch.txg;
        let mut st = self.st.lock();
        let syncing = std::mem::take(&mut st.syncing);
        if syncing.is_empty() && !st.zil_dirty {
            return Ok(None);
        }
        let mut installs: HashMap<u64, Vec<(u64, BlkPtr)>> = HashMap::new();
        for ((obj, blkid, _, _), bp) in batch.blocks.iter().zip(batch.written.iter()) {
            if let Some(bp) = bp {
                installs.entry(*obj).or_default().push((*blkid, *bp));
            }
        }
        let mut used_delta: i64 = 0;
        // Every surviving object's tree, with its level-1 blocks already patched.
        let mut works: Vec<(u64, SyncRec, TreeWork)> = Vec::new();
        let mut dnode_updates: BTreeMap<u64, DnodePhys> = BTreeMap::new();
        for obj in syncing {
            let dn = st.dnodes.get_mut(&obj).unwrap();
            let rec = dn.syncing.take().unwrap();
            let tree = std::mem::take(&mut dn.tree);
            if rec.attrs.freed {
                self.free_tree(&tree, txg)?;
                used_delta -= tree.used_bytes as i64;
                dnode_updates.insert(obj, DnodePhys::free());
                let dn = st.dnodes.get_mut(&obj).unwrap();
                dn.tree = Tree {
                    root: BlkPtr::HOLE,
                    nlevels: 1,
                    used_bytes: 0,
                };
                if dn.attrs.freed && !st.dirty.contains(&obj) {
                    st.dnodes.remove(&obj);
                    // Free on disk once this txg's dnode blocks are written, which
                    // happens before any later txg writes the slot again.
                    st.free_ids.insert(obj);
                }
            } else {
                let ins = installs.remove(&obj).unwrap_or_default();
                let work = self.tree_prepare(tree, &rec.frees, &ins, txg)?;
                works.push((obj, rec, work));
            }
        }
        {
            let mut trees: Vec<&mut TreeWork> = works.iter_mut().map(|(_, _, w)| w).collect();
            self.trees_write(&mut trees, txg)?;
        }
        for (obj, rec, work) in works {
            used_delta += work.used_delta_bytes();
            let tree = work.tree;
            let a = &rec.attrs;
            dnode_updates.insert(
                obj,
                DnodePhys {
                    otype: a.otype,
                    indblkshift: INDBLKSHIFT,
                    nlevels: tree.nlevels,
                    bonus_type: a.bonus_type,
                    datablksz_bytes: a.blksz,
                    max_blksz_bytes: a.max_blksz,
                    maxblkid: a.maxblkid,
                    used_bytes: tree.used_bytes,
                    blkptr: tree.root,
                    bonus: a.bonus.clone(),
                },
            );
            st.dnodes.get_mut(&obj).unwrap().tree = tree;
        }
        // Dnode blocks, through object 0's tree: patched in memory, written as one batch.
        let mut by_block: BTreeMap<u64, Vec<(u64, DnodePhys)>> = BTreeMap::new();
        for (obj, phys) in dnode_updates {
            by_block.entry(obj / DNODES_PER_BLOCK).or_default().push((obj, phys));
        }
        let mut meta_installs = Vec::new();
        let mut dnode_blocks: Vec<(Arc<Vec<u8>>, WriteProps)> = Vec::new();
        let mut dnode_bids = Vec::new();
        for (bid, entries) in by_block {
            let old_bp = self.tree_lookup(&st.meta, bid)?;
            let mut blk = if old_bp.is_hole() {
                vec![0u8; DNODE_BLOCK_BYTES as usize]
            } else {
                let mut v = self.read_bp(&old_bp).map_err(zio_err)?.as_ref().clone();
                v.resize(DNODE_BLOCK_BYTES as usize, 0);
                v
            };
            for (obj, phys) in entries {
                let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
                phys.encode_into(&mut blk[off..off + DNODE_SIZE_BYTES]);
            }
            if blk.iter().all(|&b| b == 0) {
                meta_installs.push((bid, BlkPtr::HOLE));
            } else {
                dnode_blocks.push((Arc::new(blk), self.meta_props(ObjectType::Dnode, 0, txg, 1)));
                dnode_bids.push(bid);
            }
        }
        for (bid, r) in dnode_bids.into_iter().zip(self.write_bps(&dnode_blocks, 2)) {
            meta_installs.push((bid, r.map_err(zio_err)?));
        }
        let meta = std::mem::take(&mut st.meta);
        let mut work = self.tree_prepare(meta, &[], &meta_installs, txg)?;
        self.trees_write(&mut [&mut work], txg)?;
        used_delta += work.used_delta_bytes();
        let meta = work.tree;
        let maxblkid = (st.next_obj.saturating_sub(1)) / DNODES_PER_BLOCK;
        let meta_dnode = DnodePhys {
            otype: ObjectType::Dnode,
            indblkshift: INDBLKSHIFT,
            nlevels: meta.nlevels,
            bonus_type: 0,
            datablksz_bytes: DNODE_BLOCK_BYTES,
            max_blksz_bytes: DNODE_BLOCK_BYTES,
            maxblkid,
            used_bytes: meta.used_bytes,
            blkptr: meta.root,
            bonus: Vec::new(),
        };
        st.meta = meta;
        let phys = ObjsetPhys {
            meta_dnode,
            os_type: self.os_type,
            zil_header: st.zil_header,
        };
        st.zil_dirty = false;
        let root = self
            .zio
            .write_block(&phys.encode(), self.meta_props(ObjectType::Objset, 0, txg, 1))
            .map_err(zio_err)?;
        let old_root = std::mem::replace(&mut st.root, root);
        used_delta += root.asize_total_bytes() as i64 - old_root.asize_total_bytes() as i64;
        self.kill(&old_root, txg);
        st.used_bytes = (st.used_bytes as i64 + used_delta).max(0) as u64;
        drop(st);
        self.gate.add_dirty(-(batch.dirty_bytes as i64));
        Ok(Some(root))
    }

    /// Install (or remove, with `None`) the hook that decides the fate of every block
    /// this object set stops referencing; see [`BlockKill`].
    pub fn set_block_kill(&self, kill: Option<BlockKill>) {
        *self.block_kill.lock() = kill;
    }

    /// A block leaves the tree in txg `txg`: hand it to the kill hook, or free it
    /// (deferred) when there is none. Holes are ignored.
    fn kill(&self, bp: &BlkPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        let hook = self.block_kill.lock().clone();
        match hook {
            Some(k) => k(bp, txg),
            None => self.zio.free_block(bp, txg),
        }
    }

    /// Write properties of a metadata block of this object set (LZ4, BLAKE3, ditto copies).
    fn meta_props(&self, otype: ObjectType, level: u8, txg: u64, fill: u64) -> WriteProps {
        WriteProps::meta(otype, level, copies_for(otype, self.os_type, self.data_copies()), txg, fill)
    }

    /// Free every block of a tree (object deletion). The root must sit at the level
    /// `nlevels` gives it, and every child one level below its parent, so the walk is
    /// at most 8 deep. A pointer met twice in one tree (a crafted DAG: a tree never
    /// shares a block with itself) is freed once and its subtree walked once, so the
    /// walk costs at most 1024 decodes per distinct indirect block and never frees a
    /// block twice.
    fn free_tree(&self, tree: &Tree, txg: u64) -> Result<()> {
        if !tree.root.is_hole() && tree.root.level as u32 + 1 != tree.nlevels.max(1) as u32 {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "dnode",
                format!("{} levels with a level-{} root", tree.nlevels, tree.root.level),
            )));
        }
        self.free_subtree(&tree.root, txg, &mut std::collections::HashSet::new())
    }

    fn free_subtree(&self, bp: &BlkPtr, txg: u64, seen: &mut std::collections::HashSet<(tarn_phys::Dva, u64)>) -> Result<()> {
        // A block is freed once however often a (crafted) tree names it, except the
        // level-0 pointers that legitimately repeat — deduplicated and cloned ones,
        // two of which may be identical — each of which is a reference to give back.
        let shared = bp.level == 0 && (bp.dedup || bp.phys_birth_txg != 0);
        if bp.is_hole() || (!shared && !seen.insert((bp.dva[0], bp.birth_txg))) {
            return Ok(());
        }
        if bp.level > 0 {
            let ind = self.read_indirect(bp, bp.level as u32)?;
            for c in ind.chunks_exact(BLKPTR_SIZE_BYTES) {
                let c = BlkPtr::decode(c)?;
                if !c.is_hole() && c.level + 1 != bp.level {
                    return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
                }
                self.free_subtree(&c, txg, seen)?;
            }
        }
        self.kill(bp, txg);
        Ok(())
    }

    /// First half of rewriting a tree in phase 3: grow it to reach every installed
    /// block id, then apply `frees` (level-0 block-id ranges) and `installs` to its
    /// level-1 blocks in memory. Only reads happen here; [`Objset::trees_write`] writes.
    fn tree_prepare(&self, mut tree: Tree, frees: &[(u64, u64)], installs: &[(u64, BlkPtr)], txg: u64) -> Result<TreeWork> {
        let before = tree.used_bytes as i64;
        let mut dirty: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
        let old_levels = tree.nlevels.max(1) as u32;
        let mut levels = old_levels;
        if let Some(maxb) = installs.iter().map(|(b, _)| *b).max() {
            while levels < 8 && BPS_PER_INDIRECT.checked_pow(levels - 1).map(|s| maxb >= s).unwrap_or(false) {
                levels += 1;
            }
        }
        if levels > old_levels {
            // Grow: the old root becomes entry 0 of a new indirect block one level up,
            // which is entry 0 of the next, up to the new top; all are written below.
            for level in old_levels..levels {
                dirty.insert((level, 0), vec![0u8; 1 << INDBLKSHIFT]);
            }
            if !tree.root.is_hole() {
                tree.root.encode_into(&mut dirty.get_mut(&(old_levels, 0)).unwrap()[0..BLKPTR_SIZE_BYTES]);
            }
            tree.root = BlkPtr::HOLE;
        }
        tree.nlevels = levels as u8;
        let mut used = before;
        if levels == 1 {
            for &(s, e) in frees {
                if s == 0 && e > 0 && !tree.root.is_hole() {
                    used -= tree.root.asize_total_bytes() as i64;
                    self.kill(&tree.root, txg);
                    tree.root = BlkPtr::HOLE;
                }
            }
            for (blkid, bp) in installs {
                assert_eq!(*blkid, 0);
                if tree.root == *bp {
                    continue; // nopwrite: the block stays as it is
                }
                used -= tree.root.asize_total_bytes() as i64;
                self.kill(&tree.root, txg);
                used += bp.asize_total_bytes() as i64;
                tree.root = *bp;
            }
            // `trees_write` sets `tree.used_bytes` from `used` for every tree.
            return Ok(TreeWork { tree, dirty, used, before });
        }
        let top = levels - 1;
        let span = |level: u32| BPS_PER_INDIRECT.pow(level);
        // Frees: for each range, walk the level-1 blocks that overlap existing data.
        for &(s, e) in frees {
            let e = e.min(span(levels - 1));
            if s >= e {
                continue;
            }
            let mut l1 = s / BPS_PER_INDIRECT;
            let last = (e - 1) / BPS_PER_INDIRECT;
            while l1 <= last {
                // Skip level-1 blocks that are holes without loading them.
                if self.l1_exists(&tree, &dirty, top, l1)? {
                    self.load_indirect(&mut dirty, &tree, top, 1, l1)?;
                    let blk = dirty.get_mut(&(1, l1)).unwrap();
                    let lo = s.max(l1 * BPS_PER_INDIRECT);
                    let hi = e.min((l1 + 1) * BPS_PER_INDIRECT);
                    for b in lo..hi {
                        let o = (b % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                        let old = BlkPtr::decode(&blk[o..o + BLKPTR_SIZE_BYTES])?;
                        if !old.is_hole() {
                            used -= old.asize_total_bytes() as i64;
                            self.kill(&old, txg);
                            blk[o..o + BLKPTR_SIZE_BYTES].fill(0);
                        }
                    }
                }
                l1 += 1;
            }
        }
        for &(blkid, bp) in installs {
            self.load_indirect(&mut dirty, &tree, top, 1, blkid / BPS_PER_INDIRECT)?;
            let blk = dirty.get_mut(&(1, blkid / BPS_PER_INDIRECT)).unwrap();
            let o = (blkid % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
            let old = BlkPtr::decode(&blk[o..o + BLKPTR_SIZE_BYTES])?;
            if old == bp {
                continue; // nopwrite: the block stays as it is
            }
            if !old.is_hole() {
                used -= old.asize_total_bytes() as i64;
                self.kill(&old, txg);
            }
            used += bp.asize_total_bytes() as i64;
            bp.encode_into(&mut blk[o..o + BLKPTR_SIZE_BYTES]);
        }
        Ok(TreeWork { tree, dirty, used, before })
    }

    /// Load indirect block (`level`, `index`) of a tree of top level `top` into
    /// `dirty`, with every ancestor on the way down (a dirty copy wins over disk).
    fn load_indirect(&self, dirty: &mut BTreeMap<(u32, u64), Vec<u8>>, tree: &Tree, top: u32, level: u32, index: u64) -> Result<()> {
        for l in (level..=top).rev() {
            let idx = index / BPS_PER_INDIRECT.pow(l - level);
            if dirty.contains_key(&(l, idx)) {
                continue;
            }
            let bp = if l == top {
                tree.root
            } else {
                let parent = &dirty[&(l + 1, idx / BPS_PER_INDIRECT)];
                let o = (idx % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                BlkPtr::decode(&parent[o..o + BLKPTR_SIZE_BYTES])?
            };
            let bytes = if bp.is_hole() {
                vec![0u8; 1 << INDBLKSHIFT]
            } else {
                self.read_indirect(&bp, l)?.as_ref().clone()
            };
            dirty.insert((l, idx), bytes);
        }
        Ok(())
    }

    /// Second half of phase 3 for a set of trees: write their dirty indirect blocks
    /// bottom-up, one [`Zio::write_blocks`] batch per level across all trees, each
    /// written pointer installed in its (loaded) parent or as the tree's new root.
    fn trees_write(&self, works: &mut [&mut TreeWork], txg: u64) -> Result<()> {
        let max_top = works.iter().map(|w| w.tree.nlevels.max(1) as u32 - 1).max().unwrap_or(0);
        for level in 1..=max_top {
            // (tree, index, bytes) of every dirty block at this level; empty ones are holes.
            let mut members: Vec<(usize, u64)> = Vec::new();
            let mut blocks: Vec<(Arc<Vec<u8>>, WriteProps)> = Vec::new();
            let mut results: Vec<(usize, u64, BlkPtr)> = Vec::new();
            for (w, work) in works.iter_mut().enumerate() {
                let keys: Vec<u64> = work.dirty.range((level, 0)..(level + 1, 0)).map(|((_, i), _)| *i).collect();
                for idx in keys {
                    let blk = work.dirty.remove(&(level, idx)).unwrap();
                    let mut fill = 0u64;
                    for i in 0..BPS_PER_INDIRECT as usize {
                        let c = &blk[i * BLKPTR_SIZE_BYTES..(i + 1) * BLKPTR_SIZE_BYTES];
                        if c[64..72] != [0u8; 8] {
                            fill += u64::from_le_bytes(c[72..80].try_into().unwrap());
                        }
                    }
                    if blk.iter().all(|&b| b == 0) {
                        results.push((w, idx, BlkPtr::HOLE));
                    } else {
                        members.push((w, idx));
                        blocks.push((Arc::new(blk), self.meta_props(ObjectType::Indirect, level as u8, txg, fill)));
                    }
                }
            }
            for ((w, idx), r) in members.into_iter().zip(self.write_bps(&blocks, 2)) {
                results.push((w, idx, r.map_err(zio_err)?));
            }
            for (w, idx, new_bp) in results {
                let work = &mut *works[w];
                let top = work.tree.nlevels.max(1) as u32 - 1;
                work.used += new_bp.asize_total_bytes() as i64;
                if level == top {
                    work.used -= work.tree.root.asize_total_bytes() as i64;
                    self.kill(&work.tree.root, txg);
                    work.tree.root = new_bp;
                } else {
                    let pidx = idx / BPS_PER_INDIRECT;
                    if !work.dirty.contains_key(&(level + 1, pidx)) {
                        self.load_indirect(&mut work.dirty, &work.tree, top, level + 1, pidx)?;
                    }
                    let parent = work.dirty.get_mut(&(level + 1, pidx)).unwrap();
                    let o = (idx % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                    let old = BlkPtr::decode(&parent[o..o + BLKPTR_SIZE_BYTES])?;
                    if !old.is_hole() {
                        work.used -= old.asize_total_bytes() as i64;
                        self.kill(&old, txg);
                    }
                    new_bp.encode_into(&mut parent[o..o + BLKPTR_SIZE_BYTES]);
                }
            }
        }
        for work in works.iter_mut() {
            work.tree.used_bytes = work.used.max(0) as u64;
        }
        Ok(())
    }

    /// Whether level-1 block `l1` of `tree` exists (or is already loaded).
    fn l1_exists(&self, tree: &Tree, dirty: &BTreeMap<(u32, u64), Vec<u8>>, top: u32, l1: u64) -> Result<bool> {
        if dirty.contains_key(&(1, l1)) {
            return Ok(true);
        }
        // Find the pointer to (1, l1) by walking down from the root; a dirty block on
        // the way (a tree grown this txg has a hole for a root) wins over disk.
        let mut bp = tree.root;
        for l in (2..=top).rev() {
            let idx_here = l1 / BPS_PER_INDIRECT.pow(l - 1);
            let child = (l1 / BPS_PER_INDIRECT.pow(l - 2)) % BPS_PER_INDIRECT;
            let o = child as usize * BLKPTR_SIZE_BYTES;
            bp = match dirty.get(&(l, idx_here)) {
                Some(b) => BlkPtr::decode(&b[o..o + BLKPTR_SIZE_BYTES])?,
                None if bp.is_hole() => return Ok(false),
                None => BlkPtr::decode(&self.read_indirect(&bp, l)?[o..o + BLKPTR_SIZE_BYTES])?,
            };
        }
        Ok(!bp.is_hole())
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
        let released: i64 = dn.open.blocks.values().map(|b| b.dirty_bytes() as i64).sum();
        dn.open.blocks.clear();
        Self::mark_dirty(&mut st, obj);
        drop(st);
        self.gate.add_dirty(-released);
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
        while pos < data.len() {
            let dn = self.load_dnode(&mut st, obj)?;
            let blksz = dn.attrs.blksz as u64;
            let off = offset_bytes + pos as u64;
            let blkid = off / blksz;
            let in_blk = (off % blksz) as usize;
            let n = (blksz as usize - in_blk).min(data.len() - pos);
            self.write_in_block(&mut st, obj, blkid, in_blk, &data[pos..pos + n])?;
            pos += n;
        }
        Self::mark_dirty(&mut st, obj);
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
        let mut released = 0i64;
        if first_full < last_full {
            let doomed: Vec<u64> = dn.open.blocks.range(first_full..last_full).map(|(k, _)| *k).collect();
            for k in doomed {
                released += dn.open.blocks.remove(&k).map(|b| b.dirty_bytes() as i64).unwrap_or(0);
            }
            dn.open.frees.push((first_full, last_full));
        }
        if len_bytes == u64::MAX {
            dn.attrs.maxblkid = if offset_bytes == 0 { 0 } else { (offset_bytes - 1) / blksz };
            let keep_to = dn.attrs.maxblkid;
            let doomed: Vec<u64> = dn.open.blocks.range(keep_to + 1..).map(|(k, _)| *k).collect();
            for k in doomed {
                released += dn.open.blocks.remove(&k).map(|b| b.dirty_bytes() as i64).unwrap_or(0);
            }
            if offset_bytes == 0 {
                // Truncate to zero frees block 0 too.
                released += dn.open.blocks.remove(&0).map(|b| b.dirty_bytes() as i64).unwrap_or(0);
                dn.open.frees.push((0, u64::MAX));
            } else {
                dn.open.frees.push((keep_to + 1, u64::MAX));
            }
        }
        Self::mark_dirty(&mut st, obj);
        drop(st);
        if released != 0 {
            self.gate.add_dirty(-released);
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
