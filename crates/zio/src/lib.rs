//! # zio — the block I/O pipeline
//!
//! Theory: every block the pool stores passes through here. A write is
//! *compress → checksum → (nopwrite) → allocate → issue*: the logical bytes are
//! compressed with the dataset's algorithm when that saves ≥ 1/8
//! (`CompressSetting::compress`; zstd ≥ 3 aborts early on incompressible blocks), the
//! physical bytes are checksummed (file data with the dataset's `checksum`, fletcher4
//! by default, possibly none; metadata always BLAKE3), a block whose strong checksum
//! equals that of the pointer it replaces is not written at all (nopwrite,
//! [`WriteProps::nop_prev`]), `copies` DVAs are allocated — ditto copies (metadata,
//! and file data of a dataset with `copies=2|3`) on distinct top-level vdevs when the
//! pool has several, else apart on the same one (DESIGN invariant 5) — and the
//! bytes are written to each DVA's top-level vdev. The result is a [`BlkPtr`] that the
//! caller stores in the parent block, so the checksum always lives one level up
//! (invariant 4). A read is *issue → verify → decompress*: each DVA is tried in turn;
//! the vdev itself tries mirror sides and raidz reconstructions with our checksum as
//! the oracle (invariant 6), and ditto copies that failed before one verified are
//! rewritten with the verified bytes, as a mirror heals its sides. Only when every copy fails does the read return
//! [`ZioError::Checksum`] or [`ZioError::Io`], and `data_errors` counts it. A file
//! data block written with `checksum=off` has nothing to verify against: its first
//! readable copy is returned as is, and neither reads nor scrub can detect or heal
//! damage to it (as in OpenZFS); a damaged compressed payload still fails to decode.
//!
//! Owns: the pool's [`SpaceMap`] (behind a mutex). Caches verified logical blocks in
//! an [`ArcCache`] (module [`arc`]: the Adaptive Replacement Cache) keyed by (this
//! pipeline's id, first DVA, birth txg), filled by verified reads (demand, or prefetch
//! from [`Zio::prefetch_blocks`]' workers, which read a stream's next blocks together
//! through the batched read of module `read_batch`) and by batched writes ([`Zio::write_blocks`]). A
//! freed block leaves the cache; the key's birth txg keeps a reallocated DVA from ever
//! matching an older entry. The ARC lives in zio rather than in a crate above it
//! (OpenZFS's `arc.c` sits above `zio.c`) because zio itself fills it on writes, empties
//! it on frees (OpenZFS's `zio_free` calls back up into `arc_freed`) and runs the
//! prefetch workers: here every call still goes down. The daemon shares one ARC among
//! its pools ([`Zio::with_arc`]); a dataset's `primarycache` reaches the read path as a
//! [`CachePolicy`] ([`Zio::read_block_as`]).
//!
//! A demand read of a block that a prefetch worker is reading at that moment waits for
//! that read and takes the block from the cache ([`Zio::read_block_as`]) instead of
//! reading it a second time (OpenZFS's `arc_read` finds the prefetch's header in the
//! hash table and waits on it the same way); a cold sequential read issued a seventh
//! more leaf reads than the file's size before.
//!
//! Blocks shared by cloning (`copy_file_range`) are counted in the pool's block
//! reference table ([`brt`]): a free of such a block drops one reference, and only
//! the last one frees its space.
//!
//! Frees are deferred ([`tarn_metaslab::TXG_DEFER_SIZE`]) so that the last few
//! uberblocks stay importable for rewind. A free names DVAs read from disk, so it is
//! checked first (`VdevSpace::try_free`): a range that is not allocated or names
//! no vdev is refused and counted in `refused_frees` (leaked space) instead of
//! panicking the syncing thread or handing the range out twice.
//!
//! Allocation classes: ordinary blocks (and their dittos) only ever go to `Normal`
//! vdevs ([`tarn_metaslab::SpaceMap::pick_vdev`]). Separate intent-log vdevs (`Log`
//! class) are left to the ZIL, which picks one with `SpaceMap::pick_log_vdev` inside
//! [`Zio::with_space`], allocates there, and writes through [`Zio::vdevs`]. The pool's
//! size and free space ([`Zio::size_bytes`], [`Zio::free_bytes`]) count only the
//! normal class. A log vdev's failure does not fail [`Zio::flush`]: no txg data lives
//! on it, and losing it loses at most unsynced log records (DESIGN "Caching and
//! logging").
//!
//! I/O classes (module `queue`): the intent log's writes and flushes, and the blocks
//! an `fsync` writes itself ([`IoClass::Sync`]), go ahead of the bulk I/O; while they
//! run or ran in the last 20 ms, batched writes and reads go out in 256 KiB pieces,
//! one at a time for the pool (OpenZFS `vdev_queue.c` issues synchronous I/O first).
//!
//! Live reconfiguration: the vdev vector is behind an `RwLock` that the hot paths only
//! read-lock (one uncontended atomic per block). `zpool add` appends a top-level vdev
//! or fills a hole ([`Zio::attach_vdev`]); `zpool remove` of a log vdev swaps it for a
//! hole ([`Zio::detach_vdev`]) once nothing is allocated on it; `zpool attach`,
//! `detach` and `replace` swap a top-level node for one with other children over the
//! same space ([`Zio::replace_top`]). Ids never move.
//!
//! Locks (in order): `vdevs`, then `space`, then the ARC's; none is held across I/O
//! except the `vdevs` read lock.
//!
//! Called by: dmu (block trees), spa (the txg's space structures through
//! [`Zio::space_sync_plan`] and [`Zio::write_sealed_all`], uberblock bookkeeping).
//! Calls: metaslab, vdev.

use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tarn_metaslab::{AllocClass, SpaceMap, SyncPlan, VdevSpace};
use tarn_phys::{BlkPtr, ChecksumAlg, CompressSetting, Compression, Dva, ObjectType};
use tarn_vdev::{Vdev, VdevError};

mod aggregate;
pub mod craft;
mod log;
mod queue;
mod read_batch;
pub use aggregate::{StagedWrites, AGGREGATE_MAX_BYTES};
pub use queue::IoClass;
pub mod arc;
pub use arc::{Access, ArcCache};
pub mod l2arc;
pub use l2arc::L2Arc;
pub mod brt;
pub use brt::Brt;
pub mod ddt;
pub use ddt::Ddt;
/// Run a closure on every item at once on the vdev I/O pool (for callers above zio
/// that issue parallel device I/O, such as the intent log's block writes).
pub use tarn_vdev::iopool::each_parallel;

/// Errors of the I/O pipeline.
#[derive(Debug, thiserror::Error)]
pub enum ZioError {
    /// No top-level vdev has room for the block.
    #[error("out of space")]
    NoSpace,
    /// Every copy failed verification.
    #[error("checksum error reading block (vdev {vdev}, offset {offset_bytes}, birth txg {birth_txg})")]
    Checksum {
        /// First DVA's top-level vdev.
        vdev: u32,
        /// First DVA's offset.
        offset_bytes: u64,
        /// Birth txg of the block.
        birth_txg: u64,
    },
    /// I/O errors on every copy, or a write that no copy accepted.
    #[error("I/O error: {0}")]
    Io(String),
    /// A block verified but its content failed to decode/decompress.
    #[error(transparent)]
    Corrupt(#[from] tarn_phys::Corrupt),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ZioError>;

/// What a caller asks of a block write.
#[derive(Debug, Clone, Copy)]
pub struct WriteProps {
    /// Object type recorded in the block pointer.
    pub otype: ObjectType,
    /// Indirection level recorded in the block pointer.
    pub level: u8,
    /// Compression to try (algorithm and zstd level).
    pub compression: CompressSetting,
    /// Checksum of a file data block (the dataset's `checksum` property). Metadata
    /// ignores it: any other object type gets BLAKE3, whatever is asked.
    pub checksum: ChecksumAlg,
    /// Number of DVAs (1..=3).
    pub copies: u8,
    /// Birth txg.
    pub txg: u64,
    /// Fill count to record.
    pub fill: u64,
    /// nopwrite candidate (OpenZFS `zio_nop_write`): the pointer this block replaces.
    /// When it is a level-0 block with the same strong checksum algorithm,
    /// compression, sizes, number of copies and checksum as the new content, the
    /// write is skipped and this pointer is returned as is. The caller sets it only
    /// when nopwrite applies (a strong checksum and compression on) and the old block
    /// is not freed in this txg.
    pub nop_prev: Option<BlkPtr>,
    /// The dataset's `dedup` (file data with a strong checksum only; see [`ddt`]).
    pub dedup: Dedup,
}

/// A dataset's `dedup` setting as the write path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dedup {
    /// Every block is written (the default).
    #[default]
    Off,
    /// A block whose checksum is in the dedup table is not written again.
    On,
    /// As `On`, after comparing the stored block's bytes with the new ones.
    Verify,
}

impl WriteProps {
    /// Properties of a metadata block: LZ4, BLAKE3, `copies` DVAs, no nopwrite.
    pub fn meta(otype: ObjectType, level: u8, copies: u8, txg: u64, fill: u64) -> WriteProps {
        WriteProps {
            otype,
            level,
            compression: CompressSetting::LZ4,
            checksum: ChecksumAlg::Blake3,
            copies,
            txg,
            fill,
            nop_prev: None,
            dedup: Dedup::Off,
        }
    }
}

/// What a dataset lets the cache keep of its blocks: OpenZFS's `primarycache`
/// property (`all`, `metadata`, `none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Data and metadata blocks are cached (the default).
    #[default]
    All,
    /// Only metadata blocks (indirect blocks, dnodes, ZAPs...) are cached.
    Metadata,
    /// Nothing is cached; reads still count as ARC hits or misses.
    None,
}

impl CachePolicy {
    /// Parse a `primarycache` value.
    pub fn parse(s: &str) -> Option<CachePolicy> {
        match s {
            "all" => Some(CachePolicy::All),
            "metadata" => Some(CachePolicy::Metadata),
            "none" => Some(CachePolicy::None),
            _ => None,
        }
    }
    /// Whether a block (metadata when `meta`) may be cached.
    pub fn caches(self, meta: bool) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => meta,
            CachePolicy::None => false,
        }
    }
}

/// See [`Zio::write_fence`]: compare two with `==`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFence {
    /// Address of each top-level vdev node (a replaced node is a new allocation).
    tops: Vec<usize>,
    /// (guid, state, write errors) of every leaf, in tree order.
    leaves: Vec<(u64, tarn_vdev::VdevState, u64)>,
}

/// Whether the cache accounts `bp` as metadata: an indirect block or a block of a
/// metadata type (OpenZFS `BP_IS_METADATA`).
pub fn bp_is_metadata(bp: &BlkPtr) -> bool {
    bp.level > 0 || bp.otype.is_metadata()
}

/// Cache user ids handed to pipelines (keys of pools sharing one [`ArcCache`]).
static NEXT_ARC_USER: AtomicU64 = AtomicU64::new(1);

/// Idle run buffers a pipeline keeps for [`Zio::read_blocks`]: enough for the two
/// workers of its usual callers (a send's reader, a txg's fill) at once, so at most
/// 4 MiB stay allocated between batches (part of the daemon's fixed overhead,
/// `tarn_cli::memory`).
pub const READ_RUN_BUFFERS_KEPT: usize = 4;

/// Worker threads that read prefetched blocks into the cache.
pub const PREFETCH_THREADS: usize = 2;
/// Prefetch requests (each a stream's next few blocks) queued at most; more are
/// dropped (prefetch is only a hint).
pub const PREFETCH_QUEUE: usize = 64;

/// One prefetch request: a stream's next blocks, and what the cache may keep of them.
type PrefetchRequest = (Vec<BlkPtr>, CachePolicy);

/// A prefetch read in progress: set `done` and notified when it ends (whatever its
/// outcome), so that demand reads of the same block can wait for it.
#[derive(Default)]
struct Flight {
    done: Mutex<bool>,
    cv: parking_lot::Condvar,
}

/// Ends a prefetch's [`Flight`] when dropped, also if the read panicked.
struct FlightGuard<'a> {
    zio: &'a Zio,
    key: arc::ArcKey,
    flight: Arc<Flight>,
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        self.zio.prefetching.lock().remove(&self.key);
        *self.flight.done.lock() = true;
        self.flight.cv.notify_all();
    }
}

/// The pool's I/O pipeline: top-level vdevs, their free space, and the read cache.
pub struct Zio {
    /// `f64` bits of the worst normal-class asize/psize ratio (see [`Zio::inflation`]).
    inflation_bits: AtomicU64,
    prefetch_tx: Mutex<Option<std::sync::mpsc::SyncSender<PrefetchRequest>>>,
    /// Blocks a prefetch worker is reading now, by cache key.
    prefetching: Mutex<std::collections::HashMap<arc::ArcKey, Arc<Flight>>>,
    /// Aligned buffers the runs of [`Zio::read_blocks`] are read into, reused (at
    /// most [`READ_RUN_BUFFERS_KEPT`] idle, each at most [`AGGREGATE_MAX_BYTES`]).
    run_buffers: tarn_vdev::leaf::RunBuffers,
    vdevs: RwLock<Vec<Arc<Vdev>>>,
    space: Mutex<SpaceMap>,
    arc: Arc<ArcCache>,
    /// This pipeline's id in the keys of `arc`.
    arc_user: u64,
    /// The pool's cache devices and the headers of what they hold.
    l2arc: Arc<L2Arc>,
    /// The L2ARC feed thread has been started.
    l2_feeding: std::sync::atomic::AtomicBool,
    /// The intent log's I/O ahead of the bulk I/O (module `queue`).
    queue: queue::IoQueue,
    /// Blocks shared by cloning, and their extra references (module [`brt`]).
    brt: Brt,
    /// Deduplicated blocks and their references (module [`ddt`]).
    ddt: Ddt,
    /// Block writes skipped because the dedup table had the block (since open).
    pub dedup_hits: AtomicU64,
    /// Reads that failed on every copy since the pool was opened.
    pub data_errors: AtomicU64,
    /// Frees refused since open because the range was not allocated or named no vdev
    /// (see [`Zio::free_block`]); non-zero means a corrupted or crafted pointer.
    pub refused_frees: AtomicU64,
    /// Blocks written since open (for tests and `zpool iostat`).
    pub blocks_written: AtomicU64,
    /// Block writes skipped by nopwrite since open (the old pointer was kept, see
    /// [`WriteProps::nop_prev`]); not counted in `blocks_written`.
    pub nop_writes: AtomicU64,
    /// Blocks read from disk (cache misses) since open. With `blocks_written` this is
    /// the application activity that scan I/O yields to.
    pub blocks_read: AtomicU64,
}

impl Drop for Zio {
    /// A closed pool's blocks leave the shared ARC, on a thread of their own and a
    /// batch at a time ([`ArcCache::remove_user_gradually`]): purging a pool with a
    /// million cached blocks in one lock hold stalled every other pool's reads and the
    /// thread that dropped the pool. Nothing can hit them meanwhile: `arc_user` is
    /// never reused, so no later key matches them.
    fn drop(&mut self) {
        let (arc, user) = (self.arc.clone(), self.arc_user);
        let purge = std::thread::Builder::new()
            .name("arc_purge".into())
            .spawn(move || arc.remove_user_gradually(user));
        if purge.is_err() {
            self.arc.remove_user(self.arc_user);
        }
    }
}

impl Zio {
    /// Build a pipeline over top-level vdevs (index = DVA vdev id) and their space map.
    /// The read cache is a private ARC of at most `cache_max_bytes`.
    pub fn new(vdevs: Vec<Arc<Vdev>>, space: SpaceMap, cache_max_bytes: u64) -> Zio {
        Self::with_arc(vdevs, space, Arc::new(ArcCache::with_max(cache_max_bytes)))
    }

    /// Build a pipeline that caches its blocks in `arc`, which other pools may share
    /// (the daemon has one ARC for all pools, as OpenZFS has one per host).
    pub fn with_arc(vdevs: Vec<Arc<Vdev>>, space: SpaceMap, arc: Arc<ArcCache>) -> Zio {
        assert_eq!(vdevs.len(), space.vdevs.len(), "one VdevSpace per top-level vdev");
        let inflation = Self::compute_inflation(&vdevs, &space);
        let l2arc = Arc::new(L2Arc::new());
        arc.register_l2(&l2arc);
        Zio {
            inflation_bits: AtomicU64::new(inflation.to_bits()),
            prefetch_tx: Mutex::new(None),
            prefetching: Mutex::new(std::collections::HashMap::new()),
            run_buffers: tarn_vdev::leaf::RunBuffers::with_limit(READ_RUN_BUFFERS_KEPT),
            vdevs: RwLock::new(vdevs),
            space: Mutex::new(space),
            arc,
            arc_user: NEXT_ARC_USER.fetch_add(1, Ordering::Relaxed),
            l2arc,
            l2_feeding: std::sync::atomic::AtomicBool::new(false),
            queue: queue::IoQueue::new(),
            brt: Brt::default(),
            ddt: Ddt::default(),
            dedup_hits: AtomicU64::new(0),
            data_errors: AtomicU64::new(0),
            refused_frees: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            nop_writes: AtomicU64::new(0),
            blocks_read: AtomicU64::new(0),
        }
    }

    /// A fingerprint of the vdev tree's shape and health for open-context writes
    /// (the DMU's early writes): which top-level vdevs are in place, and every leaf's
    /// state and write-error count. Two equal fences, taken before and after a write,
    /// mean no leaf failed a write meanwhile and no vdev was attached, detached,
    /// replaced, onlined or offlined, so the block is on every leaf that a txg sync
    /// would have written it to, and a leaf's missing-txg range (DTL), which only the
    /// txg sync records, needs nothing for it.
    pub fn write_fence(&self) -> WriteFence {
        let vdevs = self.vdevs.read();
        let mut leaves = Vec::new();
        for top in vdevs.iter() {
            for leaf in top.leaves() {
                leaves.push((leaf.guid(), leaf.state(), leaf.stats().write_errors.load(Ordering::Relaxed)));
            }
        }
        WriteFence {
            tops: vdevs.iter().map(|t| Arc::as_ptr(t) as usize).collect(),
            leaves,
        }
    }

    /// The top-level vdevs, index = DVA vdev id (holes included).
    pub fn vdevs(&self) -> Vec<Arc<Vdev>> {
        self.vdevs.read().clone()
    }

    /// Number of top-level vdev ids in use (holes included).
    pub fn vdev_count(&self) -> usize {
        self.vdevs.read().len()
    }

    /// Worst asize/psize ratio of a 128 KiB block over the normal-class vdevs.
    fn compute_inflation(vdevs: &[Arc<Vdev>], space: &SpaceMap) -> f64 {
        vdevs
            .iter()
            .zip(&space.vdevs)
            .filter(|(_, s)| s.class() == AllocClass::Normal)
            .map(|(d, _)| d.psize_to_asize(128 << 10) as f64 / (128 << 10) as f64)
            .fold(1.0, f64::max)
    }

    /// Bring a new top-level vdev into the pipeline with its (empty) space: appended
    /// when `vdev.id` is the next id, or put in place of the hole with that id. Panics
    /// (a caller bug) for any other id, or when `space` is a hole.
    pub fn attach_vdev(&self, vdev: Arc<Vdev>, space: VdevSpace) {
        assert_ne!(space.class(), AllocClass::Hole, "attach a hole");
        let mut vdevs = self.vdevs.write();
        let mut sm = self.space.lock();
        let id = vdev.id() as usize;
        if id == vdevs.len() {
            vdevs.push(vdev);
            sm.vdevs.push(space);
        } else {
            assert!(
                id < vdevs.len() && vdevs[id].is_hole(),
                "attach_vdev: id {id} is neither the next id nor a hole"
            );
            vdevs[id] = vdev;
            sm.vdevs[id] = space;
        }
        self.inflation_bits.store(Self::compute_inflation(&vdevs, &sm).to_bits(), Ordering::Relaxed);
    }

    /// Replace top-level vdev `id` by a hole, if nothing is allocated on it: its space
    /// (free and deferred) is dropped and its id stays taken. Returns the removed vdev
    /// (the caller releases its leaves), or `Err(allocated bytes)` and changes nothing.
    /// The check and the swap happen under the space lock, so no allocation can slip
    /// in between. Panics if `id` is out of range or already a hole.
    pub fn detach_vdev(&self, id: u32) -> std::result::Result<Arc<Vdev>, u64> {
        let mut vdevs = self.vdevs.write();
        let mut sm = self.space.lock();
        let i = id as usize;
        assert!(i < vdevs.len() && !vdevs[i].is_hole(), "detach_vdev: no vdev {id}");
        let alloc = sm.vdevs[i].alloc_bytes();
        if alloc != 0 {
            return Err(alloc);
        }
        sm.retire_vdev(i);
        let old = std::mem::replace(&mut vdevs[i], Arc::new(Vdev::new_hole(id)));
        self.inflation_bits.store(Self::compute_inflation(&vdevs, &sm).to_bits(), Ordering::Relaxed);
        Ok(old)
    }

    /// Swap top-level vdev `id` for `vdev`, a rebuilt node over the same address space
    /// (spa does this when `zpool attach`, `detach` or `replace` changes the children
    /// below a top-level vdev: the node is immutable, so a new one reuses the child
    /// `Arc`s). Its space, and so every DVA on it, is unchanged. Returns the old node.
    /// Panics (a caller bug) if `id` is out of range or a hole, or `vdev` is a hole.
    pub fn replace_top(&self, id: u32, vdev: Arc<Vdev>) -> Arc<Vdev> {
        let mut vdevs = self.vdevs.write();
        let i = id as usize;
        assert!(i < vdevs.len() && !vdevs[i].is_hole() && !vdev.is_hole(), "replace_top: no vdev {id}");
        let old = std::mem::replace(&mut vdevs[i], vdev);
        let sm = self.space.lock();
        self.inflation_bits.store(Self::compute_inflation(&vdevs, &sm).to_bits(), Ordering::Relaxed);
        old
    }

    /// Run `f` with the space map locked (spa uses this to load and inspect it; the
    /// intent log picks and allocates log blocks with it).
    ///
    /// `f` must not call back into this `Zio`: the lock order is `vdevs` before
    /// `space`. Take the vdevs first, then size and allocate inside:
    ///
    /// ```ignore
    /// let vdevs = zio.vdevs();
    /// let dva = zio.with_space(|s| {
    ///     let v = s.pick_log_vdev(&[])?;
    ///     let asize = vdevs[v as usize].psize_to_asize(psize_bytes);
    ///     let off = s.vdevs[v as usize].alloc(asize)?;
    ///     Some(Dva { vdev: v, asize_bytes: asize, offset_bytes: off })
    /// });
    /// ```
    pub fn with_space<R>(&self, f: impl FnOnce(&mut SpaceMap) -> R) -> R {
        f(&mut self.space.lock())
    }

    /// Allocated bytes on top-level vdev `vdev` for a block of `psize_bytes`. A vdev
    /// id that names no vdev (a DVA read from a damaged or crafted pointer) gives
    /// `psize_bytes` itself; the read that follows reports the missing vdev.
    pub fn asize_of(&self, vdev: u32, psize_bytes: u64) -> u64 {
        self.vdevs.read().get(vdev as usize).map_or(psize_bytes, |v| v.psize_to_asize(psize_bytes))
    }

    /// Whether intent-log I/O is in flight or ended less than 20 ms ago (the I/O
    /// classes' window, module `queue`): synchronous writers are waiting on the log.
    /// The txg gate asks it before it starts a sync for partial records
    /// (`tarn_dmu::txg`).
    pub fn log_active(&self) -> bool {
        self.queue.sync_active()
    }

    /// Worst-case allocated/physical ratio over the normal-class top-level vdevs for a
    /// 128 KiB block (used by the write throttle to reserve space before accepting
    /// dirty data). Fixed by the vdev tree, so computed when it changes, not per call.
    pub fn inflation(&self) -> f64 {
        f64::from_bits(self.inflation_bits.load(Ordering::Relaxed))
    }

    /// The pool's deflate ratio in OpenZFS's fixed point (1/512 units: 512 = 1.0):
    /// each normal-class vdev's [`Vdev::deflate_ratio`] (`2^17 / (asize of a 128 KiB
    /// block / 512)`, OpenZFS `vdev_deflate_ratio`), weighted by the vdev's size. A
    /// pool of one vdev gets exactly that vdev's ratio; 512 when there is none.
    pub fn deflate_ratio_fixed(&self) -> u64 {
        let v = self.vdevs.read();
        let normal: Vec<bool> = self.space.lock().vdevs.iter().map(|s| s.class() == AllocClass::Normal).collect();
        let (mut weighted, mut total) = (0u128, 0u128);
        for (d, _) in v.iter().zip(normal).filter(|(_, n)| *n) {
            let share = u128::from(d.asize_bytes());
            weighted += share * u128::from(d.deflate_ratio());
            total += share;
        }
        weighted.checked_div(total).map_or(512, |r| (r as u64).min(512))
    }

    /// The deflate ratio as a fraction (1.0 for mirrors and plain disks, about
    /// (n−p)/n for raidz): [`Zio::deflate_ratio_fixed`] / 512.
    pub fn deflate_ratio(&self) -> f64 {
        self.deflate_ratio_fixed() as f64 / 512.0
    }

    /// Raw allocated bytes as users see them (`zfs list`, `statfs`): OpenZFS's
    /// `vdev_deflated_space`, `(bytes >> 9) × deflate ratio` (bytes in, bytes out).
    pub fn deflated_bytes(&self, bytes: u64) -> u64 {
        (bytes >> 9).saturating_mul(self.deflate_ratio_fixed())
    }

    /// Allocate `copies` DVAs for a block of `psize_bytes` on normal-class vdevs;
    /// distinct top-level vdevs when possible, otherwise far apart on the same one.
    fn allocate(&self, psize_bytes: u64, copies: u8) -> Result<[Dva; 3]> {
        let vdevs = self.vdevs.read();
        let mut space = self.space.lock();
        Self::allocate_in(&vdevs, &mut space, psize_bytes, copies, false)
    }

    /// [`Zio::allocate`] in open context for a block born in `birth_txg`: made ahead
    /// when that txg comes after the one the next space sync logs
    /// ([`SpaceMap::allocates_ahead`], decided under the space lock).
    pub(crate) fn allocate_open(&self, psize_bytes: u64, copies: u8, birth_txg: u64) -> Result<[Dva; 3]> {
        let vdevs = self.vdevs.read();
        let mut space = self.space.lock();
        let ahead = space.allocates_ahead(birth_txg);
        Self::allocate_in(&vdevs, &mut space, psize_bytes, copies, ahead)
    }

    /// [`Zio::allocate`] with both locks already held by the caller; `ahead` as
    /// [`tarn_metaslab::VdevSpace::alloc_with`] takes it.
    fn allocate_in(vdevs: &[Arc<Vdev>], space: &mut SpaceMap, psize_bytes: u64, copies: u8, ahead: bool) -> Result<[Dva; 3]> {
        let mut out = [Dva::default(); 3];
        let mut used: Vec<u32> = Vec::new();
        for i in 0..copies.clamp(1, 3) as usize {
            let pick = space.pick_vdev(&used).or_else(|| if i > 0 { space.pick_vdev(&[]) } else { None });
            let Some(v) = pick else { break };
            let asize = vdevs[v as usize].psize_to_asize(psize_bytes);
            let vs = &mut space.vdevs[v as usize];
            let off = match used.iter().position(|&u| u == v) {
                Some(j) => vs.alloc_near_with(asize, out[j].offset_bytes, ahead),
                None => vs.alloc_with(asize, ahead),
            };
            let off = match off {
                Some(o) => o,
                None => {
                    // Try any other normal vdev with room before giving up on this copy.
                    let mut found = None;
                    for (k, d) in vdevs.iter().enumerate() {
                        let vs = &space.vdevs[k];
                        if vs.class() != AllocClass::Normal || !vs.is_allocatable() {
                            continue;
                        }
                        let a = d.psize_to_asize(psize_bytes);
                        if let Some(o) = space.vdevs[k].alloc_with(a, ahead) {
                            found = Some((k as u32, a, o));
                            break;
                        }
                    }
                    match found {
                        Some((k, a, o)) => {
                            out[i] = Dva {
                                vdev: k,
                                asize_bytes: a,
                                offset_bytes: o,
                            };
                            used.push(k);
                            continue;
                        }
                        None => break,
                    }
                }
            };
            out[i] = Dva {
                vdev: v,
                asize_bytes: asize,
                offset_bytes: off,
            };
            used.push(v);
        }
        if out[0].is_empty() {
            return Err(ZioError::NoSpace);
        }
        Ok(out)
    }

    /// Write one block. `data` is the logical content (its length is the lsize).
    /// Returns the block pointer to store in the parent.
    pub fn write_block(&self, data: &[u8], props: WriteProps) -> Result<BlkPtr> {
        let aggregate::Prepared { payload, mut bp, nop } = aggregate::prepare(data, &props);
        if nop {
            self.nop_writes.fetch_add(1, Ordering::Relaxed);
            return Ok(bp);
        }
        bp.dva = self.allocate(payload.len() as u64, props.copies)?;
        let vdevs = self.vdevs.read();
        let mut ok = 0;
        let mut last_err = None;
        for d in bp.dvas() {
            match vdevs[d.vdev as usize].write(d.offset_bytes, &payload) {
                Ok(()) => ok += 1,
                Err(e) => last_err = Some(e),
            }
        }
        if ok == 0 {
            self.free_now(&bp);
            return Err(ZioError::Io(last_err.map(|e| e.to_string()).unwrap_or_default()));
        }
        self.blocks_written.fetch_add(1, Ordering::Relaxed);
        Ok(bp)
    }

    /// Build txg `txg`'s space structures ([`SpaceMap::sync_plan`]) under the space
    /// lock, allocating them like pool-wide metadata (three copies). Errors: `NoSpace`.
    pub fn space_sync_plan(&self, txg: u64) -> Result<SyncPlan> {
        let vdevs = self.vdevs.read();
        let mut space = self.space.lock();
        space
            .sync_plan(txg, &mut |sm, psize| Self::allocate_in(&vdevs, sm, psize, 3, false).ok())
            .map_err(|_| ZioError::NoSpace)
    }

    /// Application block I/O so far (reads that missed the cache plus block writes);
    /// a scan compares two readings to see whether the pool is busy.
    pub fn io_activity(&self) -> u64 {
        self.blocks_read.load(Ordering::Relaxed) + self.blocks_written.load(Ordering::Relaxed)
    }

    /// Drop every block cached in RAM (after a rewind or for cold-cache
    /// measurements). The L2ARC keeps its copies: they are keyed by birth txg too.
    pub fn clear_cache(&self) {
        self.arc.remove_user(self.arc_user);
    }

    /// The ARC this pipeline caches in.
    pub fn arc(&self) -> &Arc<ArcCache> {
        &self.arc
    }

    /// The ARC key of `bp`: (this pipeline's id, first DVA, birth txg).
    pub fn arc_key(&self, bp: &BlkPtr) -> arc::ArcKey {
        (self.arc_user, bp.dva[0], bp.birth_txg)
    }

    /// The pool's block reference table (blocks shared by cloning).
    pub fn brt(&self) -> &Brt {
        &self.brt
    }

    /// The pool's dedup table.
    pub fn ddt(&self) -> &Ddt {
        &self.ddt
    }

    /// Count one more pointer to `bp`'s block, a clone being installed (syncing
    /// context): in the dedup table for a deduplicated block that has its entry (as
    /// OpenZFS's `brt_pending_add` leaves those to the DDT), else in the block
    /// reference table (an ordinary block, or a deduplicated one whose entry was
    /// pruned: OpenZFS `ddt_addref` returning false).
    pub fn clone_ref(&self, bp: &BlkPtr) {
        if !(ddt::is_dedup(bp) && self.ddt.add_ref_block(bp)) {
            self.brt.add_ref(bp);
        }
    }

    /// Whether a free of `bp` must leave its DVAs alone because another pointer still
    /// names the block: the dedup table's count for a deduplicated block that has
    /// its entry, else the block reference table's (OpenZFS `zio_ddt_free` falling
    /// back to a plain free for a pruned entry).
    fn keep_on_free(&self, bp: &BlkPtr) -> bool {
        if ddt::is_dedup(bp) {
            match self.ddt.release(bp) {
                ddt::Release::Last => return false,
                ddt::Release::Shared => return true,
                ddt::Release::NotInTable => {}
            }
        }
        self.brt.release(bp)
    }

    /// The pool's L2ARC (cache devices, their headers and counters).
    pub fn l2arc(&self) -> &Arc<L2Arc> {
        &self.l2arc
    }

    /// Add a cache device to the L2ARC (see [`L2Arc::add_device`]) and start the feed
    /// thread on the first one. The thread holds only a weak reference to the
    /// pipeline and exits when it is dropped.
    pub fn add_cache_device(self: &Arc<Self>, vdev: Arc<Vdev>, rebuild: bool, max_birth_txg: u64) -> l2arc::RebuildReport {
        let r = self.l2arc.add_device(vdev, rebuild, max_birth_txg);
        if !self.l2_feeding.swap(true, Ordering::SeqCst) {
            let weak = Arc::downgrade(self);
            let _ = std::thread::Builder::new().name("l2arc_feed".into()).spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(l2arc::L2ARC_FEED_INTERVAL_MS));
                let Some(zio) = weak.upgrade() else { break };
                zio.l2arc_feed();
            });
        }
        r
    }

    /// Run one L2ARC feed for this pool now (the feed thread's step; tests and
    /// benchmarks call it to fill the cache devices at once). Returns bytes written.
    pub fn l2arc_feed(&self) -> u64 {
        self.l2arc.feed(&self.arc, self.arc_user)
    }

    /// Whether `bp`'s block may be copied to a cache device (a dataset's
    /// `secondarycache`).
    pub fn set_l2_eligible(&self, bp: &BlkPtr, eligible: bool) {
        if !bp.is_hole() {
            self.arc.set_l2_eligible(&self.arc_key(bp), eligible);
        }
    }

    /// Drop `bp`'s block from the ARC (a dataset whose `primarycache` refuses a block
    /// it has just written).
    pub fn uncache(&self, bp: &BlkPtr) {
        if !bp.is_hole() {
            self.arc.remove(&self.arc_key(bp));
        }
    }

    /// Read and verify a block, returning its logical bytes (`lsize_bytes` long).
    /// Holes read as zeros. A demand read that may cache the block
    /// ([`CachePolicy::All`]).
    pub fn read_block(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.read_block_as(bp, Access::Demand, CachePolicy::All)
    }

    /// [`Zio::read_block`] counted as `access` in the ARC statistics, caching the
    /// block only when `cache` allows it (the dataset's `primarycache`). Shares the
    /// ARC's buffer when the block is resident.
    pub fn read_block_as(&self, bp: &BlkPtr, access: Access, cache: CachePolicy) -> Result<Arc<Vec<u8>>> {
        if bp.is_hole() {
            return Ok(Arc::new(vec![0u8; bp.lsize_bytes as usize]));
        }
        let key = self.arc_key(bp);
        let meta = bp_is_metadata(bp);
        if let Some(d) = self.arc.lookup(&key, access, meta) {
            return Ok(d);
        }
        if access == Access::Demand && self.wait_prefetch(&key) {
            if let Some(d) = self.arc.lookup(&key, access, meta) {
                return Ok(d);
            }
        }
        if !self.l2arc.is_empty() {
            // The L2ARC holds what the ARC held: the physical bytes of a compressed
            // block, else the logical ones.
            let got = self.l2arc.read(&(key.1, key.2)).and_then(|b| {
                if b.len() == bp.psize_bytes as usize {
                    self.logical_of_phys(bp, b).ok()
                } else if b.len() == bp.lsize_bytes as usize {
                    let l = Arc::new(b);
                    Some((l.clone(), arc::Stored::logical(l)))
                } else {
                    None
                }
            });
            if let Some((logical, stored)) = got {
                if cache.caches(meta) {
                    self.arc.insert_read_stored(key, stored, meta, access);
                }
                return Ok(logical);
            }
        }
        self.blocks_read.fetch_add(1, Ordering::Relaxed);
        let vdevs = self.vdevs.read();
        let verify = |b: &[u8]| bp.checksum_alg.compute(b) == bp.checksum;
        let mut err: Option<VdevError> = None;
        let mut failed: Vec<&Dva> = Vec::new();
        for d in bp.dvas() {
            let Some(v) = vdevs.get(d.vdev as usize) else { continue };
            match v.read_birth(d.offset_bytes, bp.psize_bytes as u64, bp.physical_birth_txg(), &verify) {
                Ok(phys) => {
                    // Self-heal ditto copies as a mirror heals its sides: rewrite every
                    // copy that failed with the verified bytes (a failure is counted by
                    // the vdev; an unavailable one refuses the write).
                    for f in failed {
                        if let Some(fv) = vdevs.get(f.vdev as usize) {
                            let _ = fv.write(f.offset_bytes, &phys);
                        }
                    }
                    let (logical, stored) = self.logical_of_phys(bp, phys)?;
                    if cache.caches(meta) {
                        self.arc.insert_read_stored(key, stored, meta, access);
                    }
                    return Ok(logical);
                }
                Err(e) => {
                    failed.push(d);
                    err = Some(e);
                }
            }
        }
        self.data_errors.fetch_add(1, Ordering::Relaxed);
        match err {
            Some(VdevError::Checksum { .. }) | None => Err(ZioError::Checksum {
                vdev: bp.dva[0].vdev,
                offset_bytes: bp.dva[0].offset_bytes,
                birth_txg: bp.birth_txg,
            }),
            Some(e) => Err(ZioError::Io(e.to_string())),
        }
    }

    /// The logical bytes of `bp`'s verified physical bytes `phys`, and what the ARC
    /// keeps of them (compressed blocks stay compressed: compressed ARC, unless
    /// `compressed_arc_enabled` is off).
    fn logical_of_phys(&self, bp: &BlkPtr, mut phys: Vec<u8>) -> Result<(Arc<Vec<u8>>, arc::Stored)> {
        if bp.compression == Compression::Off && phys.len() >= bp.lsize_bytes as usize {
            phys.truncate(bp.lsize_bytes as usize);
            let l = Arc::new(phys);
            return Ok((l.clone(), arc::Stored::logical(l)));
        }
        let l = Arc::new(bp.compression.decompress(&phys, bp.lsize_bytes as usize)?);
        let s = arc::Stored::choose(bp.compression, bp.lsize_bytes, &l, || phys, self.arc.compressed_enabled());
        Ok((l, s))
    }

    /// Rewrite the copy of `bp` at `bad` from another of its DVAs that verifies (a
    /// scan found `bad` wrong and its own vdev cannot rebuild it: a ditto copy on a
    /// single disk). True when a good copy was found and the rewrite succeeded.
    pub fn repair_copy(&self, bp: &BlkPtr, bad: &Dva) -> bool {
        let vdevs = self.vdevs.read();
        let verify = |b: &[u8]| bp.checksum_alg.compute(b) == bp.checksum;
        let Some(target) = vdevs.get(bad.vdev as usize) else { return false };
        let good = bp.dvas().filter(|d| (d.vdev, d.offset_bytes) != (bad.vdev, bad.offset_bytes)).find_map(|d| {
            vdevs
                .get(d.vdev as usize)?
                .read_birth(d.offset_bytes, bp.psize_bytes as u64, bp.physical_birth_txg(), &verify)
                .ok()
        });
        good.is_some_and(|phys| target.write(bad.offset_bytes, &phys).is_ok())
    }

    /// Read `bp` into the cache in the background (a hint: dropped when the queue is
    /// full, ignored when cached). Workers hold only a weak reference to the pipeline
    /// and exit when it is dropped.
    pub fn prefetch(self: &Arc<Self>, bp: BlkPtr) {
        self.prefetch_as(bp, CachePolicy::All)
    }

    /// [`Zio::prefetch`] for a dataset whose `primarycache` is `cache`: nothing is
    /// prefetched that the cache would not keep. Prefetch reads count as prefetch
    /// hits or misses in the ARC statistics.
    pub fn prefetch_as(self: &Arc<Self>, bp: BlkPtr, cache: CachePolicy) {
        self.prefetch_blocks(std::slice::from_ref(&bp), cache)
    }

    /// [`Zio::prefetch_as`] of several blocks (a stream's next blocks, in order) as
    /// one request: a worker reads those not yet cached or in flight with
    /// [`Zio::read_blocks`]' aggregation (blocks adjacent on disk in one `O_DIRECT`
    /// device read, each verified) and puts them in the cache. With an L2ARC, each
    /// block is read alone as before, so that a cached copy there is used.
    pub fn prefetch_blocks(self: &Arc<Self>, bps: &[BlkPtr], cache: CachePolicy) {
        let wanted: Vec<BlkPtr> = bps
            .iter()
            .filter(|bp| !bp.is_hole() && cache.caches(bp_is_metadata(bp)) && !self.arc.contains(&self.arc_key(bp)))
            .copied()
            .collect();
        if wanted.is_empty() {
            return;
        }
        let mut tx = self.prefetch_tx.lock();
        if tx.is_none() {
            let (send, recv) = std::sync::mpsc::sync_channel::<PrefetchRequest>(PREFETCH_QUEUE);
            let recv = Arc::new(Mutex::new(recv));
            for i in 0..PREFETCH_THREADS {
                let (recv, weak) = (recv.clone(), Arc::downgrade(self));
                let _ = std::thread::Builder::new().name(format!("zio_prefetch{i}")).spawn(move || loop {
                    let Ok((bps, cache)) = recv.lock().recv() else { break };
                    let Some(zio) = weak.upgrade() else { break };
                    // Registered before any is read, so a demand read of any of them
                    // waits for this batch instead of reading it a second time.
                    let (mine, _flights): (Vec<BlkPtr>, Vec<FlightGuard<'_>>) = bps.iter().filter_map(|bp| zio.begin_prefetch(bp).map(|g| (*bp, g))).unzip();
                    if mine.len() > 1 && zio.l2arc.is_empty() {
                        zio.prefetch_read(&mine, cache);
                    } else {
                        for bp in &mine {
                            let _ = zio.read_block_as(bp, Access::Prefetch, cache);
                        }
                    }
                });
            }
            *tx = Some(send);
        }
        let _ = tx.as_ref().unwrap().try_send((wanted, cache));
    }

    /// Register a prefetch read of `bp`; `None` when one is already in flight.
    fn begin_prefetch(&self, bp: &BlkPtr) -> Option<FlightGuard<'_>> {
        let key = self.arc_key(bp);
        let flight = match self.prefetching.lock().entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => return None,
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Arc::new(Flight::default())).clone(),
        };
        Some(FlightGuard { zio: self, key, flight })
    }

    /// Wait for a prefetch read of the block under `key`, if one is in flight. True
    /// when there was one (the block may now be cached).
    fn wait_prefetch(&self, key: &arc::ArcKey) -> bool {
        let Some(flight) = self.prefetching.lock().get(key).cloned() else {
            return false;
        };
        let mut done = flight.done.lock();
        while !*done {
            flight.cv.wait(&mut done);
        }
        true
    }

    /// Free a block's DVAs, deferred until `txg + TXG_DEFER_SIZE` has synced. A DVA
    /// on a removed vdev (a hole) has nothing to free and is skipped. A DVA that names
    /// no vdev, or a range that is not allocated (a crafted or corrupted pointer, or a
    /// block freed twice), is left alone and counted in `refused_frees`, as OpenZFS's
    /// `zfs_recover` turns a bad free into a warning: the cost is leaked space, never
    /// a panic in syncing context or a range handed out twice. A block that cloning
    /// shares ([`Brt`]) only loses a reference; its last one frees it.
    pub fn free_block(&self, bp: &BlkPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        self.arc.remove(&self.arc_key(bp));
        if !self.l2arc.is_empty() {
            self.l2arc.remove(&(bp.dva[0], bp.birth_txg));
        }
        if self.keep_on_free(bp) {
            // Another pointer (a clone, a dedup hit) still names the block.
            return;
        }
        self.free_dvas(bp, |vs, d| vs.try_free(txg, d.offset_bytes, d.asize_bytes));
    }

    /// Free a block immediately (it was never referenced by a synced uberblock). DVAs
    /// on holes are skipped and bad ranges refused, and a shared block only loses a
    /// reference, as in [`Zio::free_block`].
    pub fn free_now(&self, bp: &BlkPtr) {
        if self.keep_on_free(bp) {
            return;
        }
        self.free_dvas(bp, |vs, d| vs.try_free_now(d.offset_bytes, d.asize_bytes));
    }

    /// Give back every DVA of `bp` with `free` (`VdevSpace::try_free` or
    /// `try_free_now`), under one space-map lock: DVAs on holes are skipped, and a DVA
    /// naming no vdev or a range `free` refuses is counted ([`Zio::refuse_free`]).
    fn free_dvas(&self, bp: &BlkPtr, free: impl Fn(&mut VdevSpace, &Dva) -> bool) {
        let mut space = self.space.lock();
        for d in bp.dvas() {
            let freed = match space.vdevs.get_mut(d.vdev as usize) {
                Some(vs) if vs.class() == AllocClass::Hole => true,
                Some(vs) => free(vs, d),
                None => false,
            };
            if !freed {
                self.refuse_free(d);
            }
        }
    }

    fn refuse_free(&self, d: &Dva) {
        self.refused_frees.fetch_add(1, Ordering::Relaxed);
        tracing::error!("free of {d:?}, which is not an allocated range; ignored (space may leak)");
    }

    /// Flush every top-level vdev (fdatasync on every leaf). Errors if the leaves of
    /// some normal-class vdev that flushed do not hold it whole
    /// ([`tarn_vdev::Vdev::durable_with`]: one side of a mirror, all but `nparity`
    /// children of a raidz); log vdevs hold no txg data, so their failures (and
    /// missing log devices) are only counted on their leaves.
    pub fn flush(&self) -> Result<()> {
        self.flush_tops(None)
    }

    /// Flush the leaves of the top-level vdevs in `ids` (all when None), every leaf in
    /// parallel: a txg's or a log commit's latency is one device flush, not the sum.
    fn flush_tops(&self, ids: Option<&[u32]>) -> Result<()> {
        let vdevs = self.vdevs.read();
        // For a txg flush (all vdevs) only normal-class failures count: log vdevs hold
        // no txg data. A log commit names its vdevs and needs every one of them.
        let normal: Vec<bool> = self.space.lock().vdevs.iter().map(|s| s.class() == AllocClass::Normal).collect();
        let tops: Vec<&Arc<Vdev>> = vdevs.iter().filter(|t| ids.is_none_or(|i| i.contains(&t.id()))).collect();
        let leaves: Vec<(u32, &Vdev)> = tops.iter().flat_map(|top| top.leaves().into_iter().map(move |leaf| (top.id(), leaf))).collect();
        // An unusable leaf (offline, faulted, missing) got none of the writes: it
        // counts as not flushed.
        let flush = |leaf: &Vdev| leaf.state().is_usable() && leaf.flush().is_ok();
        let results: Vec<bool> = tarn_vdev::iopool::each_parallel(&leaves, |&(_, leaf)| flush(leaf));
        let flushed: Vec<*const Vdev> = leaves
            .iter()
            .zip(&results)
            .filter(|(_, ok)| **ok)
            .map(|((_, l), _)| *l as *const Vdev)
            .collect();
        for top in tops
            .into_iter()
            .filter(|t| ids.is_some() || normal.get(t.id() as usize).copied().unwrap_or(false))
        {
            if !top.leaves().is_empty() && !top.durable_with(&|l| flushed.contains(&(l as *const Vdev))) {
                return Err(ZioError::Io(format!(
                    "too few leaves of top-level vdev {} could be flushed to hold its data",
                    top.id()
                )));
            }
        }
        Ok(())
    }

    /// Free bytes now allocatable (normal class).
    pub fn free_bytes(&self) -> u64 {
        self.space.lock().free_bytes()
    }

    /// Bytes freed but not yet allocatable (normal class): they come back as the next
    /// [`tarn_metaslab::TXG_DEFER_SIZE`] txgs sync.
    pub fn deferred_bytes(&self) -> u64 {
        self.space.lock().deferred_bytes()
    }

    /// Allocated bytes (normal class; deferred frees are not counted).
    pub fn alloc_bytes(&self) -> u64 {
        self.space.lock().alloc_bytes()
    }

    /// Total allocatable bytes (normal class: log vdevs are not pool capacity).
    pub fn size_bytes(&self) -> u64 {
        self.space.lock().asize_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_vdev::Leaf;

    fn leaf_vdev(dir: &tempfile::TempDir, name: &str, id: u32) -> Arc<Vdev> {
        let p = dir.path().join(name);
        std::fs::File::create(&p).unwrap().set_len(80 << 20).unwrap();
        let l = Leaf::open(&p).unwrap();
        Arc::new(Vdev::new_leaf(id, 100 + id as u64, 12, p.display().to_string(), Some(l)))
    }

    fn props(copies: u8) -> WriteProps {
        WriteProps {
            otype: ObjectType::FileData,
            level: 0,
            compression: CompressSetting::OFF,
            checksum: ChecksumAlg::Fletcher4,
            copies,
            txg: 1,
            fill: 1,
            nop_prev: None,
            dedup: Dedup::Off,
        }
    }

    /// A raidz top-level vdev of `n` leaves (ashift 12).
    fn raidz_vdev(dir: &tempfile::TempDir, tag: &str, id: u32, n: usize, p: u8) -> Arc<Vdev> {
        let ch = (0..n).map(|i| leaf_vdev(dir, &format!("{tag}{i}"), i as u32)).collect();
        Arc::new(Vdev::new_raidz(id, 500 + id as u64, 12, p, ch))
    }

    /// A log block is written only up to its used part, rounded to 4 KiB, on a leaf
    /// (and so on a mirror); whole on raidz, whose column layout depends on the
    /// length written.
    #[test]
    fn log_writes_cover_the_used_part_on_a_leaf_and_the_whole_block_on_raidz() {
        let dir = tempfile::tempdir().unwrap();
        for (top, whole) in [(leaf_vdev(&dir, "lwl", 0), false), (raidz_vdev(&dir, "lwr", 0, 3, 1), true)] {
            let space = SpaceMap::new(vec![VdevSpace::new(top.asize_bytes(), top.alloc_align_bytes())]);
            let zio = Zio::new(vec![top], space, 1 << 20);
            let dva = zio.alloc_log_block(64 << 10, 0, &[]).unwrap();
            let want = |used: usize| if whole { 64 << 10 } else { used };
            assert_eq!(zio.log_write_len(&dva, 128 + 8300, 64 << 10), want(12 << 10));
            assert_eq!(zio.log_write_len(&dva, 128, 64 << 10), want(4 << 10));
            assert_eq!(zio.log_write_len(&dva, 64 << 10, 64 << 10), 64 << 10);
        }
    }

    #[test]
    fn raidz_blocks_get_openzfs_asize_and_deflate_ratio_matches() {
        let dir = tempfile::tempdir().unwrap();
        let rz = raidz_vdev(&dir, "r", 0, 3, 1);
        // 128 KiB on raidz1 of 3, ashift 12: 32 data + 16 parity sectors = 192 KiB, so
        // OpenZFS's ratio is 2^17 / (192 KiB / 512) = 131072 / 384 = 341.
        assert_eq!(rz.psize_to_asize(128 << 10), 192 << 10);
        assert_eq!(rz.deflate_ratio(), 341);
        let space = SpaceMap::new(vec![VdevSpace::new(rz.asize_bytes(), rz.alloc_align_bytes())]);
        let zio = Zio::new(vec![rz.clone()], space, 1 << 20);
        assert_eq!(zio.deflate_ratio_fixed(), 341);
        assert_eq!(zio.deflated_bytes(1 << 20), 2048 * 341);
        // Blocks pack back to back (no whole-row rounding) and read back.
        let mut end = 0;
        for len in [4096usize, 1, 9000, 128 << 10, 12288] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
            let bp = zio.write_block(&data, props(1)).unwrap();
            assert_eq!(bp.dva[0].asize_bytes, rz.psize_to_asize(len as u64));
            assert_eq!(bp.dva[0].asize_bytes % (2 * 4096), 0, "multiple of p + 1 sectors");
            end = end.max(bp.dva[0].offset_bytes + bp.dva[0].asize_bytes);
            assert_eq!(&zio.read_block(&bp).unwrap()[..], &data[..]);
        }
        assert_eq!(zio.alloc_bytes(), 8192 + 8192 + 24576 + (192 << 10) + 24576);
        // Mirrors and leaves: 512 (1.0); a pool mixes ratios by vdev size.
        let a = leaf_vdev(&dir, "a", 1);
        assert_eq!(a.deflate_ratio(), 512);
        zio.attach_vdev(a.clone(), VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes()));
        let want = (rz.asize_bytes() as u128 * 341 + a.asize_bytes() as u128 * 512) / (rz.asize_bytes() + a.asize_bytes()) as u128;
        assert_eq!(zio.deflate_ratio_fixed() as u128, want);
        zio.flush().unwrap();
    }

    #[test]
    fn blocks_never_land_on_log_vdevs_and_holes_keep_ids() {
        let dir = tempfile::tempdir().unwrap();
        let (a, log) = (leaf_vdev(&dir, "a", 0), leaf_vdev(&dir, "log", 1));
        let space = SpaceMap::new(vec![
            VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes()),
            VdevSpace::new_class(log.asize_bytes(), log.alloc_align_bytes(), AllocClass::Log),
        ]);
        let zio = Zio::new(vec![a.clone(), log.clone()], space, 1 << 20);
        assert_eq!(zio.size_bytes(), a.asize_bytes(), "log space is not pool space");
        let data = vec![7u8; 8192];
        for copies in [1u8, 2, 3, 1, 2, 3] {
            let bp = zio.write_block(&data, props(copies)).unwrap();
            assert!(bp.dvas().all(|d| d.vdev == 0), "{bp:?}");
            assert_eq!(bp.dvas().count(), copies as usize, "dittos on the one normal vdev");
            assert_eq!(&zio.read_block(&bp).unwrap()[..], &data[..]);
        }
        assert_eq!(zio.with_space(|s| s.vdevs[1].alloc_bytes()), 0);
        // A log vdev with a live block cannot be detached; without one it becomes a hole.
        let off = zio.with_space(|s| {
            let v = s.pick_log_vdev(&[]).unwrap();
            s.vdevs[v as usize].alloc(4096).unwrap()
        });
        assert_eq!(zio.detach_vdev(1).err(), Some(4096));
        zio.with_space(|s| s.vdevs[1].free_now(off, 4096));
        let old = zio.detach_vdev(1).unwrap();
        assert_eq!(old.id(), 1);
        assert!(zio.vdevs()[1].is_hole());
        assert_eq!(zio.vdev_count(), 2);
        zio.flush().unwrap();
        // A new vdev fills the hole, another is appended; the first keeps id 0.
        drop(old);
        let b = leaf_vdev(&dir, "b", 1);
        zio.attach_vdev(b.clone(), VdevSpace::new(b.asize_bytes(), b.alloc_align_bytes()));
        let c = leaf_vdev(&dir, "c", 2);
        zio.attach_vdev(c.clone(), VdevSpace::new(c.asize_bytes(), c.alloc_align_bytes()));
        assert_eq!(zio.size_bytes(), a.asize_bytes() + b.asize_bytes() + c.asize_bytes());
        let mut seen = [false; 3];
        for _ in 0..12 {
            let bp = zio.write_block(&data, props(1)).unwrap();
            seen[bp.dva[0].vdev as usize] = true;
        }
        // Most-free first: the empty new vdevs take the new blocks.
        assert_eq!(seen, [false, true, true]);
        zio.flush().unwrap();
    }

    /// A crafted pointer whose checksum is right but whose payload is a decompression
    /// bomb (zstd, gzip, zle, lz4 streams of 1 MiB of zeros under a 4 KiB lsize) or is
    /// cut short: the read is an error, not a panic or a 1 MiB allocation. An unknown
    /// compression code never gets that far: the pointer does not decode.
    #[test]
    fn crafted_bombs_and_truncations_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let a = leaf_vdev(&dir, "a", 0);
        let space = SpaceMap::new(vec![VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes())]);
        let zio = Zio::new(vec![a.clone()], space, 1 << 20);
        for name in ["zstd-19", "gzip-9", "zle", "lz4"] {
            let s = CompressSetting::parse(name).unwrap();
            let bomb = s.compress(&vec![0u8; 1 << 20]).unwrap();
            let mut bp = zio.write_block(&bomb, props(1)).unwrap();
            // Claim the payload is `s.alg`-compressed 4 KiB of data.
            bp.compression = s.alg;
            bp.lsize_bytes = 4096.max(bp.psize_bytes);
            let e = zio.read_block(&bp).unwrap_err();
            assert!(matches!(e, ZioError::Corrupt(_)), "{name}: {e}");
            // The stream cut in half, its length field saying so (checksum matching).
            let hdr = if s.alg == Compression::Zstd { 8 } else { 4 };
            let clen = u32::from_le_bytes(bomb[0..4].try_into().unwrap()) as usize / 2;
            let mut half = bomb[..hdr + clen].to_vec();
            half[0..4].copy_from_slice(&(clen as u32).to_le_bytes());
            let mut bp = zio.write_block(&half, props(1)).unwrap();
            bp.compression = s.alg;
            bp.lsize_bytes = 1 << 20;
            assert!(matches!(zio.read_block(&bp), Err(ZioError::Corrupt(_))), "{name} truncated");
        }
        let bp = zio.write_block(&[1u8; 4096], props(1)).unwrap();
        let mut raw = bp.encode();
        raw[59] = 99;
        assert!(BlkPtr::decode(&raw).is_err());
    }

    #[test]
    fn batched_writes_merge_adjacent_blocks_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = leaf_vdev(&dir, "a", 0);
        let space = SpaceMap::new(vec![VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes())]);
        let zio = Zio::new(vec![a.clone()], space, 1 << 20);
        // Odd sizes (padded to the sector) and a ditto pair among them.
        let datas: Vec<Vec<u8>> = (0..40u32).map(|i| vec![i as u8 + 1; 3000 + 1000 * (i as usize % 7)]).collect();
        let items: Vec<(Arc<Vec<u8>>, WriteProps)> = datas
            .iter()
            .enumerate()
            .map(|(i, d)| (Arc::new(d.clone()), props(if i == 5 { 2 } else { 1 })))
            .collect();
        let before = a.stats().write_ops.load(Ordering::Relaxed);
        let bps: Vec<BlkPtr> = zio.write_blocks(&items, 2).into_iter().map(|r| r.unwrap()).collect();
        let ios = a.stats().write_ops.load(Ordering::Relaxed) - before;
        assert!(ios < 10, "{ios} device writes for 41 block copies: not aggregated");
        // Written blocks are cached: reading them back costs no device read.
        let reads = zio.blocks_read.load(Ordering::Relaxed);
        for (bp, d) in bps.iter().zip(&datas) {
            assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
        }
        assert_eq!(zio.blocks_read.load(Ordering::Relaxed), reads, "a just-written block was read back from disk");
        zio.clear_cache();
        for (bp, d) in bps.iter().zip(&datas) {
            assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
        }
        assert_eq!(bps[5].dvas().count(), 2);
    }

    /// Every intent-log write and flush marks the log active for the queue.
    #[test]
    fn log_io_makes_the_log_active() {
        let dir = tempfile::tempdir().unwrap();
        let a = leaf_vdev(&dir, "a", 0);
        let fresh = || {
            Zio::new(
                vec![a.clone()],
                SpaceMap::new(vec![VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes())]),
                1 << 20,
            )
        };
        let zio = fresh();
        assert!(!zio.queue.sync_active());
        let dva = zio.alloc_log_block(8192, 0, &[]).unwrap();
        zio.write_raw_flushed(&dva, &[7u8; 8192]).unwrap();
        assert!(zio.queue.sync_active(), "after write_raw_flushed");
        let zio = fresh();
        zio.write_raw(&dva, &[8u8; 8192]).unwrap();
        assert!(zio.queue.sync_active(), "after write_raw");
        let zio = fresh();
        zio.flush_vdevs(&[0]).unwrap();
        assert!(zio.queue.sync_active(), "after flush_vdevs");
    }

    /// Batched writes and reads go out whole while the intent log is idle and in
    /// pieces of at most `ASYNC_PIECE_BYTES` while it is active, synchronous writes
    /// whole either way, with the same bytes on disk in every case.
    #[test]
    fn batched_io_yields_to_the_intent_log_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let a = leaf_vdev(&dir, "a", 0);
        let space = SpaceMap::new(vec![VdevSpace::new(a.asize_bytes(), a.alloc_align_bytes())]);
        let zio = Zio::new(vec![a.clone()], space, 64 << 20);
        let batch = |seed: u8| -> Vec<(Arc<Vec<u8>>, WriteProps)> {
            (0..16u8)
                .map(|i| (Arc::new(tarn_testkit::pattern(seed as u64 * 100 + i as u64, 128 << 10)), props(1)))
                .collect()
        };
        let total = 16 * (128u64 << 10);
        let pieces = total.div_ceil(queue::ASYNC_PIECE_BYTES as u64);
        let ops = |s: &AtomicU64| s.load(Ordering::Relaxed);
        // Idle: 2 MiB of adjacent blocks in a few aggregated writes and reads.
        let idle = batch(1);
        let w0 = ops(&a.stats().write_ops);
        let idle_bps: Vec<BlkPtr> = zio.write_blocks(&idle, 2).into_iter().map(|r| r.unwrap()).collect();
        let idle_writes = ops(&a.stats().write_ops) - w0;
        assert!(idle_writes <= 3, "{idle_writes} writes for 2 MiB with the log idle");
        // Writes an fsync waits for are synchronous: whole runs, and the bulk I/O
        // yields to them as to the log's own.
        assert!(!zio.queue.sync_active());
        let fsynced = batch(201);
        let mut staged = StagedWrites::default();
        let fsynced_bps: Vec<BlkPtr> = zio.stage_blocks(&fsynced, 2, &mut staged).into_iter().map(|r| r.unwrap()).collect();
        let w2 = ops(&a.stats().write_ops);
        assert!(zio.write_staged_each(staged, 2, IoClass::Sync).iter().all(|&ok| ok));
        let sync_writes = ops(&a.stats().write_ops) - w2;
        assert!(sync_writes <= 3, "{sync_writes} writes for 2 MiB of synchronous blocks");
        assert!(zio.queue.sync_active(), "a synchronous batch counts as log I/O");
        // The log active (a log write in flight): pieces.
        let busy = batch(101);
        let log = zio.queue.sync_io();
        let w1 = ops(&a.stats().write_ops);
        let busy_bps: Vec<BlkPtr> = zio.write_blocks(&busy, 2).into_iter().map(|r| r.unwrap()).collect();
        let busy_writes = ops(&a.stats().write_ops) - w1;
        assert!(
            busy_writes >= pieces,
            "{busy_writes} writes for 2 MiB with the log active, want at least {pieces}"
        );
        zio.clear_cache();
        let r1 = ops(&a.stats().read_ops);
        for (r, (want, _)) in zio.read_blocks(&busy_bps, 2).into_iter().zip(&busy) {
            assert_eq!(&r.unwrap()[..], &want[..]);
        }
        let busy_reads = ops(&a.stats().read_ops) - r1;
        assert!(busy_reads >= pieces, "{busy_reads} reads for 2 MiB with the log active, want at least {pieces}");
        drop(log);
        // Both batches read back exactly, through the single-block path too.
        zio.clear_cache();
        for (bps, items) in [(&idle_bps, &idle), (&busy_bps, &busy), (&fsynced_bps, &fsynced)] {
            for (bp, (d, _)) in bps.iter().zip(items.iter()) {
                assert_eq!(&zio.read_block(bp).unwrap()[..], &d[..]);
            }
        }
    }
}
