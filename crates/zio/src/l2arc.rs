//! # l2arc — the second-level cache on cache devices, and its persistence
//!
//! Theory: OpenZFS's L2ARC (`module/zfs/arc.c`, "Level 2 ARC"; Brendan Gregg's
//! design, persistent since OpenZFS 2.0) in Tarn's terms. A pool's cache devices
//! (`zpool add POOL cache DEV`) hold copies of blocks that the ARC is about to evict,
//! so that a later miss in RAM is served from a fast device instead of the pool's
//! slow leaves. Nothing on a cache device is ever needed for correctness: losing,
//! corrupting or removing one costs only speed.
//!
//! **Feeding.** [`L2Arc::feed`] (called once per `L2ARC_FEED_INTERVAL_MS` by the pool's
//! feed thread, or directly by tests) asks the ARC for the buffers nearest the
//! eviction end of its MFU and MRU lists ([`crate::ArcCache::l2_candidates`]: at most
//! `write_max` bytes, looking no further than `headroom` times that from each list's
//! tail), skipping buffers that arrived by prefetch and were never demand-read
//! (OpenZFS `l2arc_noprefetch=1`), blocks whose dataset's `secondarycache` refuses
//! them, and blocks already on a cache device. While the ARC has not yet evicted
//! anything (it is still warming) the write is boosted by `write_boost`, as
//! `l2arc_write_boost` does. The chosen buffers are laid out one after another, each
//! aligned to the device's sector, followed by one *log block* that lists them, and
//! issued as a single sequential write at the device's *hand*; then the *device
//! header* is rewritten to point at that log block. Devices take turns, one per feed.
//!
//! **The ring.** Each device's data area is, after its header sector, a ring. Before
//! a write lands at `[hand, hand + len)` every header whose buffer lies in the
//! range is dropped (evicted ahead of the hand in windows of 1/16 of the ring, so the
//! header table is scanned at most 16 times per pass); a write that would cross the
//! end of the ring starts again at its beginning.
//!
//! **Headers.** A block held only by the L2ARC costs one entry in a hash table keyed
//! by (first DVA, birth txg): [`L2Hdr`] is the device id, offset, size, a 64-bit
//! BLAKE3 prefix of the bytes written and a metadata flag, 24 bytes, and the entry
//! with its key 56 bytes (`L2_HDR_ENTRY_BYTES`, plus the table's one control byte)
//! against OpenZFS's ~96 for `l2arc_buf_hdr_t` with its `arc_buf_hdr_t` core. The
//! birth txg in the key means an overwritten block (new birth) never matches an old
//! copy; a freed block's header is dropped at once ([`L2Arc::remove`]).
//!
//! **Reads.** On an ARC miss the pipeline asks [`L2Arc::read`]; the bytes read are
//! checked against the header's checksum, and any failure (checksum, I/O error, a
//! device removed or unavailable) drops the header and returns `None`: the caller
//! then reads the pool as if the L2ARC did not exist (counted in `l2_cksum_bad` or
//! `l2_io_error`, never as a pool error).
//!
//! **Persistence** (OpenZFS 2.0's persistent L2ARC, `l2arc_rebuild`). Each log block
//! records its batch (start, length), a sequence number, the pool and device GUIDs,
//! a pointer to the previous log block, its entries and a BLAKE3 checksum; the
//! device header names the newest log block and the hand. When a pool opens with a
//! cache device, [`L2Arc::add_device`] with `rebuild` walks the chain from newest to
//! oldest and recreates the headers. The walk stops at the first log block that does
//! not verify, is out of sequence, names another pool or device, or whose batch lies
//! further behind the hand than one ring (it has been overwritten); entries born
//! after the pool's current txg (a rewound import) are dropped. Every byte of a
//! cache device is untrusted: lengths and counts are bounded before anything is
//! allocated, and an entry that points outside its batch is ignored.
//!
//! Locks: the device list (`devs`), then a device's state, then the header table.
//! The ARC's lock may be held while the header table is locked (the feed's skip
//! test), never the reverse. No lock but the feed's is held across I/O.
//!
//! Called by: [`crate::Zio`] (reads, frees, the feed thread), spa (cache devices
//! added and removed, rebuild at import, `zpool status`/`iostat`), `tarn kstat`
//! through [`crate::ArcCache::stats`]. Calls: vdev (leaf reads and writes).

use crate::arc::{ArcCache, ArcKey};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tarn_phys::{ChecksumAlg, Dva};
use tarn_vdev::Vdev;

/// Bytes at the start of a cache device's data area kept for the device header.
pub const L2_DEVICE_HEADER_BYTES: u64 = 4096;
/// Default bytes written per feed (OpenZFS `l2arc_write_max`, 8 MiB).
pub const L2ARC_WRITE_MAX_BYTES: u64 = 8 << 20;
/// Extra bytes per feed while the ARC is still warming (OpenZFS `l2arc_write_boost`).
pub const L2ARC_WRITE_BOOST_BYTES: u64 = 8 << 20;
/// How far from each list's tail a feed looks, in multiples of the write size
/// (OpenZFS `l2arc_headroom`, 8... Tarn scans 2: its lists are per host, not per
/// sublist, and a deeper scan only finds buffers that will not be evicted soon).
pub const L2ARC_HEADROOM: u64 = 2;
/// Host-wide `l2arc_write_max` in force (`tarn daemon --set l2arc_write_max=…`).
static WRITE_MAX_BYTES: AtomicU64 = AtomicU64::new(L2ARC_WRITE_MAX_BYTES);
/// Host-wide `l2arc_write_boost` in force.
static WRITE_BOOST_BYTES: AtomicU64 = AtomicU64::new(L2ARC_WRITE_BOOST_BYTES);

/// Set the host-wide `l2arc_write_max` and `l2arc_write_boost`, bytes (0: the
/// default), for every pool's next feed (the daemon's tunables).
pub fn set_write_limits(write_max_bytes: Option<u64>, write_boost_bytes: Option<u64>) {
    if let Some(v) = write_max_bytes {
        WRITE_MAX_BYTES.store(if v == 0 { L2ARC_WRITE_MAX_BYTES } else { v }, Ordering::Relaxed);
    }
    if let Some(v) = write_boost_bytes {
        WRITE_BOOST_BYTES.store(if v == 0 { L2ARC_WRITE_BOOST_BYTES } else { v }, Ordering::Relaxed);
    }
}

/// The host-wide (`l2arc_write_max`, `l2arc_write_boost`) in force, bytes.
pub fn write_limits() -> (u64, u64) {
    (WRITE_MAX_BYTES.load(Ordering::Relaxed), WRITE_BOOST_BYTES.load(Ordering::Relaxed))
}

/// Interval of the feed thread, milliseconds (OpenZFS `l2arc_feed_secs`, 1 s).
pub const L2ARC_FEED_INTERVAL_MS: u64 = 1000;
/// Entries per log block at most (OpenZFS `L2ARC_LOG_BLK_MAX_ENTRIES`, 1022); a feed
/// writes at most this many buffers.
pub const L2_LOG_ENTRIES_MAX: usize = 1022;
/// Largest buffer the L2ARC keeps, bytes (the largest record size, 16 MiB).
pub const L2_BUF_MAX_BYTES: u64 = 16 << 20;
/// Memory an L2-only block's header entry costs in the header table: the key
/// (first DVA, birth txg) and [`L2Hdr`], bytes (the table adds one control byte and
/// its load-factor slack).
pub const L2_HDR_ENTRY_BYTES: usize = std::mem::size_of::<(L2Key, L2Hdr)>();

// The bound: an L2-only block costs at most 64 bytes of header (with the
// table's control byte).
const _: () = assert!(L2_HDR_ENTRY_BYTES < 64);

const DH_MAGIC: &[u8; 8] = b"TARNL2DH";
const LB_MAGIC: &[u8; 8] = b"TARNL2LB";
const L2_VERSION: u32 = 1;
/// Bytes of a log block's fixed part (magic .. prev_len).
const LB_HEAD_BYTES: usize = 8 + 4 + 4 + 8 * 7;
/// Bytes of one log entry: DVA (vdev u32, asize u64, offset u64), birth u64, offset
/// u64, size u32, checksum u64, flags u8.
const LB_ENTRY_BYTES: usize = 4 + 8 + 8 + 8 + 8 + 4 + 8 + 1;
/// Largest log block, bytes (head, entries, BLAKE3).
const LB_MAX_BYTES: usize = LB_HEAD_BYTES + L2_LOG_ENTRIES_MAX * LB_ENTRY_BYTES + 32;

/// Header-table key: the block's first DVA and birth txg.
pub type L2Key = (Dva, u64);

/// Where a block's copy lies on a cache device. 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Hdr {
    /// Byte offset in the device's data area.
    pub offset_bytes: u64,
    /// First 8 bytes of the BLAKE3 hash of the bytes written, little-endian.
    pub checksum: u64,
    /// Logical size of the buffer, bytes.
    pub size_bytes: u32,
    /// Id of the cache device ([`L2Arc`]'s own numbering, never reused).
    pub dev: u16,
    /// Accounted as metadata by the ARC.
    pub meta: bool,
}

/// Counters of one pool's L2ARC, named as OpenZFS's `arcstats` names them. Sizes
/// are bytes.
#[derive(Debug, Default)]
pub struct L2Counters {
    /// Reads served by a cache device.
    pub l2_hits: AtomicU64,
    /// ARC misses that the L2ARC could not serve (no header, or the read failed).
    pub l2_misses: AtomicU64,
    /// Feeds that ran with at least one usable device.
    pub l2_feeds: AtomicU64,
    /// Bytes read from cache devices.
    pub l2_read_bytes: AtomicU64,
    /// Bytes written to cache devices (buffers, log blocks, headers).
    pub l2_write_bytes: AtomicU64,
    /// Batch writes issued.
    pub l2_writes_sent: AtomicU64,
    /// Batch writes completed.
    pub l2_writes_done: AtomicU64,
    /// Batch writes that failed.
    pub l2_writes_error: AtomicU64,
    /// Reads whose bytes did not match the header's checksum.
    pub l2_cksum_bad: AtomicU64,
    /// Reads that failed with an I/O error or found the device gone.
    pub l2_io_error: AtomicU64,
    /// Headers dropped because the hand reached their buffer.
    pub l2_evict_l2: AtomicU64,
    /// Log blocks written.
    pub l2_log_blk_writes: AtomicU64,
    /// Rebuilds that walked a device's log chain to its end.
    pub l2_rebuild_success: AtomicU64,
    /// Devices whose header was not a Tarn L2ARC header of this pool and device
    /// (new, or of another pool: nothing to rebuild).
    pub l2_rebuild_unsupported: AtomicU64,
    /// Rebuild reads that failed.
    pub l2_rebuild_io_errors: AtomicU64,
    /// Device headers whose checksum or version did not verify.
    pub l2_rebuild_dh_errors: AtomicU64,
    /// Log blocks that did not verify (the walk stopped there).
    pub l2_rebuild_cksum_lb_errors: AtomicU64,
    /// Logical bytes of the buffers restored by rebuilds.
    pub l2_rebuild_size: AtomicU64,
    /// Device bytes of the buffers restored by rebuilds.
    pub l2_rebuild_asize: AtomicU64,
    /// Headers restored by rebuilds.
    pub l2_rebuild_bufs: AtomicU64,
    /// Entries a rebuild skipped because the block was already known.
    pub l2_rebuild_bufs_precached: AtomicU64,
    /// Log blocks read by rebuilds.
    pub l2_rebuild_log_blks: AtomicU64,
}

/// One cache device.
pub struct L2Dev {
    id: u16,
    vdev: Arc<Vdev>,
    align_bytes: u64,
    /// Logical bytes of the headers on this device.
    size_bytes: AtomicU64,
    /// Device bytes of the headers on this device.
    asize_bytes: AtomicU64,
    st: Mutex<DevState>,
}

#[derive(Debug, Clone, Copy)]
struct DevState {
    /// Where the next batch goes.
    hand_bytes: u64,
    /// Headers are already gone up to here (ahead of the hand).
    evicted_to_bytes: u64,
    /// Sequence number of the newest log block (0: none yet).
    seq: u64,
    /// The newest log block: (offset, length), length 0 for none.
    last_log: (u64, u64),
}

impl L2Dev {
    /// The device's leaf vdev.
    pub fn vdev(&self) -> &Arc<Vdev> {
        &self.vdev
    }
    /// Logical bytes cached on it.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Relaxed)
    }
    /// Device bytes cached on it (what `zpool iostat -v` shows as `alloc`).
    pub fn asize_bytes(&self) -> u64 {
        self.asize_bytes.load(Ordering::Relaxed)
    }
    fn ring_start(&self) -> u64 {
        L2_DEVICE_HEADER_BYTES.next_multiple_of(self.align_bytes)
    }
    fn ring_end(&self) -> u64 {
        self.vdev.asize_bytes() / self.align_bytes * self.align_bytes
    }
    fn ring_len(&self) -> u64 {
        self.ring_end().saturating_sub(self.ring_start())
    }
    fn asize_of(&self, size_bytes: u64) -> u64 {
        size_bytes.next_multiple_of(self.align_bytes)
    }
    /// Count header `h` in (`add`) or out of this device's sizes.
    fn account(&self, h: &L2Hdr, add: bool) {
        let (size, asize) = (h.size_bytes as u64, self.asize_of(h.size_bytes as u64));
        if add {
            self.size_bytes.fetch_add(size, Ordering::Relaxed);
            self.asize_bytes.fetch_add(asize, Ordering::Relaxed);
        } else {
            self.size_bytes.fetch_sub(size, Ordering::Relaxed);
            self.asize_bytes.fetch_sub(asize, Ordering::Relaxed);
        }
    }
}

/// What a rebuild found, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Log blocks read and accepted.
    pub log_blocks: u64,
    /// Headers restored.
    pub bufs: u64,
}

/// A pool's L2ARC: its cache devices and the headers of the blocks on them.
pub struct L2Arc {
    pool_guid: AtomicU64,
    devs: RwLock<Vec<Arc<L2Dev>>>,
    next_dev_id: Mutex<u16>,
    hdrs: Mutex<HashMap<L2Key, L2Hdr>>,
    /// Serializes feeds (the thread and direct calls) and picks the device in turn.
    feed_turn: Mutex<usize>,
    /// Bytes per feed for this pool (0: the host-wide `l2arc_write_max`).
    pub write_max_bytes: AtomicU64,
    /// Extra bytes per feed while the ARC warms for this pool (0: the host-wide
    /// `l2arc_write_boost`).
    pub write_boost_bytes: AtomicU64,
    /// Statistics.
    pub counters: L2Counters,
}

impl Default for L2Arc {
    fn default() -> Self {
        L2Arc::new()
    }
}

fn hash64(data: &[u8]) -> u64 {
    let h = ChecksumAlg::Blake3.compute(data);
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Little-endian cursor over untrusted bytes: every read is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The device header: which pool and device wrote it, the newest log block and the
/// hand, checksummed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DevHeader {
    pool_guid: u64,
    dev_guid: u64,
    seq: u64,
    log_off: u64,
    log_len: u64,
    hand: u64,
}

impl DevHeader {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(L2_DEVICE_HEADER_BYTES as usize);
        b.extend_from_slice(DH_MAGIC);
        b.extend_from_slice(&L2_VERSION.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [self.pool_guid, self.dev_guid, self.seq, self.log_off, self.log_len, self.hand] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let h = ChecksumAlg::Blake3.compute(&b);
        b.extend_from_slice(&h);
        b.resize(L2_DEVICE_HEADER_BYTES as usize, 0);
        b
    }

    /// `Ok(None)`: not a Tarn L2ARC header (a new device); `Err`: one that does not
    /// verify.
    fn decode(b: &[u8]) -> Result<Option<DevHeader>, ()> {
        if b.get(..8) != Some(DH_MAGIC.as_slice()) {
            return Ok(None);
        }
        let body = 8 + 4 + 4 + 6 * 8;
        let (Some(head), Some(sum)) = (b.get(..body), b.get(body..body + 32)) else {
            return Err(());
        };
        if ChecksumAlg::Blake3.compute(head).as_slice() != sum {
            return Err(());
        }
        let mut c = Cursor { b: head, at: 8 };
        if c.u32() != Some(L2_VERSION) {
            return Err(());
        }
        c.u32();
        let mut v = [0u64; 6];
        for x in &mut v {
            *x = c.u64().ok_or(())?;
        }
        Ok(Some(DevHeader {
            pool_guid: v[0],
            dev_guid: v[1],
            seq: v[2],
            log_off: v[3],
            log_len: v[4],
            hand: v[5],
        }))
    }
}

/// One log block, decoded.
struct LogBlock {
    pool_guid: u64,
    dev_guid: u64,
    seq: u64,
    batch_start: u64,
    batch_len: u64,
    prev: (u64, u64),
    entries: Vec<(L2Key, L2Hdr)>,
}

impl LogBlock {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LB_HEAD_BYTES + self.entries.len() * LB_ENTRY_BYTES + 32);
        b.extend_from_slice(LB_MAGIC);
        b.extend_from_slice(&L2_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for v in [
            self.pool_guid,
            self.dev_guid,
            self.seq,
            self.batch_start,
            self.batch_len,
            self.prev.0,
            self.prev.1,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for ((dva, birth), h) in &self.entries {
            b.extend_from_slice(&dva.vdev.to_le_bytes());
            b.extend_from_slice(&dva.asize_bytes.to_le_bytes());
            b.extend_from_slice(&dva.offset_bytes.to_le_bytes());
            b.extend_from_slice(&birth.to_le_bytes());
            b.extend_from_slice(&h.offset_bytes.to_le_bytes());
            b.extend_from_slice(&h.size_bytes.to_le_bytes());
            b.extend_from_slice(&h.checksum.to_le_bytes());
            b.push(h.meta as u8);
        }
        let h = ChecksumAlg::Blake3.compute(&b);
        b.extend_from_slice(&h);
        b
    }

    /// Decode an untrusted log block (`dev`: the device id to give its entries).
    fn decode(b: &[u8], dev: u16) -> Option<LogBlock> {
        if b.get(..8)? != LB_MAGIC.as_slice() {
            return None;
        }
        let mut c = Cursor { b, at: 8 };
        if c.u32()? != L2_VERSION {
            return None;
        }
        let n = c.u32()? as usize;
        if n > L2_LOG_ENTRIES_MAX {
            return None;
        }
        let body = LB_HEAD_BYTES + n * LB_ENTRY_BYTES;
        if ChecksumAlg::Blake3.compute(b.get(..body)?).as_slice() != b.get(body..body + 32)? {
            return None;
        }
        let mut v = [0u64; 7];
        for x in &mut v {
            *x = c.u64()?;
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let dva = Dva {
                vdev: c.u32()?,
                asize_bytes: c.u64()?,
                offset_bytes: c.u64()?,
            };
            let birth = c.u64()?;
            let hdr = L2Hdr {
                offset_bytes: c.u64()?,
                size_bytes: c.u32()?,
                checksum: c.u64()?,
                dev,
                meta: match c.u8()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
            };
            entries.push(((dva, birth), hdr));
        }
        Some(LogBlock {
            pool_guid: v[0],
            dev_guid: v[1],
            seq: v[2],
            batch_start: v[3],
            batch_len: v[4],
            prev: (v[5], v[6]),
            entries,
        })
    }
}

impl L2Arc {
    /// An L2ARC without devices (reads miss, feeds do nothing).
    pub fn new() -> L2Arc {
        L2Arc {
            pool_guid: AtomicU64::new(0),
            devs: RwLock::new(Vec::new()),
            next_dev_id: Mutex::new(0),
            hdrs: Mutex::new(HashMap::new()),
            feed_turn: Mutex::new(0),
            write_max_bytes: AtomicU64::new(0),
            write_boost_bytes: AtomicU64::new(0),
            counters: L2Counters::default(),
        }
    }

    /// Set the GUID of the pool the devices belong to (written in every header and
    /// log block, checked by rebuilds).
    pub fn set_pool_guid(&self, guid: u64) {
        self.pool_guid.store(guid, Ordering::Relaxed);
    }

    /// The cache devices, in the order they were added.
    pub fn devices(&self) -> Vec<Arc<L2Dev>> {
        self.devs.read().clone()
    }

    /// Whether there is no cache device.
    pub fn is_empty(&self) -> bool {
        self.devs.read().is_empty()
    }

    /// Headers held (blocks on cache devices).
    pub fn header_count(&self) -> usize {
        self.hdrs.lock().len()
    }

    /// Whether `key`'s block has a copy on a cache device.
    pub fn contains(&self, key: &L2Key) -> bool {
        self.hdrs.lock().contains_key(key)
    }

    /// Add a cache device (a leaf vdev, open or not). With `rebuild`, restore the
    /// headers its log blocks list (entries born after `max_birth_txg` are dropped);
    /// otherwise it starts empty. A device that is not usable is listed (for `zpool
    /// status`) but never read or written.
    pub fn add_device(&self, vdev: Arc<Vdev>, rebuild: bool, max_birth_txg: u64) -> RebuildReport {
        let id = {
            let mut n = self.next_dev_id.lock();
            *n = n.wrapping_add(1);
            *n
        };
        let align_bytes = vdev.alloc_align_bytes().max(512);
        let dev = Arc::new(L2Dev {
            id,
            vdev,
            align_bytes,
            size_bytes: AtomicU64::new(0),
            asize_bytes: AtomicU64::new(0),
            st: Mutex::new(DevState {
                hand_bytes: 0,
                evicted_to_bytes: 0,
                seq: 0,
                last_log: (0, 0),
            }),
        });
        {
            let mut st = dev.st.lock();
            st.hand_bytes = dev.ring_start();
            st.evicted_to_bytes = dev.ring_start();
        }
        let report = if rebuild && dev.vdev.state().is_usable() && dev.ring_len() > 0 {
            self.rebuild(&dev, max_birth_txg)
        } else {
            RebuildReport::default()
        };
        self.devs.write().push(dev);
        report
    }

    /// Forget the cache device with leaf GUID `guid` and every header on it.
    /// Returns its leaf, or `None` when it was not there.
    pub fn remove_device(&self, guid: u64) -> Option<Arc<Vdev>> {
        let dev = {
            let mut devs = self.devs.write();
            let i = devs.iter().position(|d| d.vdev.guid() == guid)?;
            devs.remove(i)
        };
        let _turn = self.feed_turn.lock();
        self.hdrs.lock().retain(|_, h| h.dev != dev.id);
        dev.size_bytes.store(0, Ordering::Relaxed);
        dev.asize_bytes.store(0, Ordering::Relaxed);
        Some(dev.vdev.clone())
    }

    fn dev_by_id(&self, id: u16) -> Option<Arc<L2Dev>> {
        self.devs.read().iter().find(|d| d.id == id).cloned()
    }

    /// Take a dropped header out of its device's sizes (none of the header table's
    /// lock may be held: the device list comes first in the lock order).
    fn account_drop(&self, h: &L2Hdr) {
        if let Some(d) = self.dev_by_id(h.dev) {
            d.account(h, false);
        }
    }

    /// Drop `key`'s header (its block was freed).
    pub fn remove(&self, key: &L2Key) {
        let h = self.hdrs.lock().remove(key);
        if let Some(h) = h {
            self.account_drop(&h);
        }
    }

    /// The logical bytes of `key`'s block from a cache device, verified against the
    /// header's checksum; `None` (and the header dropped) on any failure, or when no
    /// device holds it. Counts `l2_hits`/`l2_misses`.
    pub fn read(&self, key: &L2Key) -> Option<Vec<u8>> {
        let hdr = self.hdrs.lock().get(key).copied();
        let Some(h) = hdr else {
            bump(&self.counters.l2_misses, 1);
            return None;
        };
        let dev = self.dev_by_id(h.dev);
        let got = dev.as_ref().and_then(|d| {
            // The leaf's own checksum counters are for pool data: verify here.
            match d.vdev.read(h.offset_bytes, h.size_bytes as u64, &|_| true) {
                Ok(b) if hash64(&b) == h.checksum => Some(b),
                Ok(_) => {
                    bump(&self.counters.l2_cksum_bad, 1);
                    None
                }
                Err(_) => {
                    bump(&self.counters.l2_io_error, 1);
                    None
                }
            }
        });
        match got {
            Some(b) => {
                bump(&self.counters.l2_hits, 1);
                bump(&self.counters.l2_read_bytes, b.len() as u64);
                Some(b)
            }
            None => {
                if dev.is_none() {
                    bump(&self.counters.l2_io_error, 1);
                }
                let removed = {
                    let mut hdrs = self.hdrs.lock();
                    // Only the header read: a feed may have replaced it meanwhile.
                    if hdrs.get(key) == Some(&h) {
                        hdrs.remove(key)
                    } else {
                        None
                    }
                };
                if let Some(h) = removed {
                    self.account_drop(&h);
                }
                bump(&self.counters.l2_misses, 1);
                None
            }
        }
    }

    /// Write one batch of the ARC's soon-to-be-evicted buffers of cache user `user`
    /// to the next usable cache device. Returns the bytes written (0 when there is no
    /// usable device or nothing to write). See the module theory.
    pub fn feed(&self, arc: &ArcCache, user: u64) -> u64 {
        let mut turn = self.feed_turn.lock();
        let devs: Vec<Arc<L2Dev>> = self
            .devs
            .read()
            .iter()
            .filter(|d| d.vdev.state().is_usable() && d.ring_len() > 0)
            .cloned()
            .collect();
        if devs.is_empty() {
            return 0;
        }
        *turn = turn.wrapping_add(1);
        let dev = devs[*turn % devs.len()].clone();
        bump(&self.counters.l2_feeds, 1);
        let (host_max, host_boost) = write_limits();
        let or_host = |v: u64, host: u64| if v == 0 { host } else { v };
        let mut write_max = or_host(self.write_max_bytes.load(Ordering::Relaxed), host_max);
        if arc.counters().evicted == 0 {
            write_max = write_max.saturating_add(or_host(self.write_boost_bytes.load(Ordering::Relaxed), host_boost));
        }
        // A batch and its log block must fit in half the ring.
        write_max = write_max.min(dev.ring_len() / 2);
        let mut cands = {
            let hdrs = &self.hdrs;
            arc.l2_candidates(user, write_max.saturating_mul(L2ARC_HEADROOM), write_max, &|k: &ArcKey| {
                k.2 == 0 || hdrs.lock().contains_key(&(k.1, k.2))
            })
        };
        cands.retain(|(_, b, _)| !b.is_empty() && (b.len() as u64) <= L2_BUF_MAX_BYTES);
        cands.truncate(L2_LOG_ENTRIES_MAX);
        if cands.is_empty() {
            return 0;
        }
        let log_len_max = dev.asize_of((LB_HEAD_BYTES + cands.len() * LB_ENTRY_BYTES + 32) as u64);
        let data_len: u64 = cands.iter().map(|(_, b, _)| dev.asize_of(b.len() as u64)).sum();
        let total = data_len + log_len_max;
        let pool_guid = self.pool_guid.load(Ordering::Relaxed);
        let mut st = dev.st.lock();
        if st.hand_bytes + total > dev.ring_end() {
            // Wrap: what is left at the end is dropped with the rest of the pass.
            self.evict_range(&dev, st.hand_bytes, dev.ring_end());
            st.hand_bytes = dev.ring_start();
            st.evicted_to_bytes = dev.ring_start();
        }
        let start = st.hand_bytes;
        if start + total > st.evicted_to_bytes {
            let to = (start + total.max(dev.ring_len() / 16)).min(dev.ring_end());
            self.evict_range(&dev, st.evicted_to_bytes.max(start), to);
            st.evicted_to_bytes = to;
        }
        let mut buf = Vec::with_capacity(total as usize);
        let mut entries = Vec::with_capacity(cands.len());
        for (key, b, meta) in &cands {
            let off = start + buf.len() as u64;
            entries.push((
                (key.1, key.2),
                L2Hdr {
                    offset_bytes: off,
                    checksum: hash64(b),
                    size_bytes: b.len() as u32,
                    dev: dev.id,
                    meta: *meta,
                },
            ));
            buf.extend_from_slice(b);
            buf.resize(buf.len().next_multiple_of(dev.align_bytes as usize), 0);
        }
        let log_off = start + buf.len() as u64;
        let block = LogBlock {
            pool_guid,
            dev_guid: dev.vdev.guid(),
            seq: st.seq + 1,
            batch_start: start,
            batch_len: total,
            prev: st.last_log,
            entries,
        };
        let lb = block.encode();
        let log_len = lb.len() as u64;
        buf.extend_from_slice(&lb);
        buf.resize(total as usize, 0);
        bump(&self.counters.l2_writes_sent, 1);
        if dev.vdev.write(start, &buf).is_err() {
            bump(&self.counters.l2_writes_error, 1);
            return 0;
        }
        bump(&self.counters.l2_writes_done, 1);
        bump(&self.counters.l2_log_blk_writes, 1);
        st.seq += 1;
        st.last_log = (log_off, log_len);
        st.hand_bytes = start + total;
        let header = DevHeader {
            pool_guid,
            dev_guid: dev.vdev.guid(),
            seq: st.seq,
            log_off,
            log_len,
            hand: st.hand_bytes,
        }
        .encode();
        let _ = dev.vdev.write(0, &header);
        bump(&self.counters.l2_write_bytes, total + L2_DEVICE_HEADER_BYTES);
        drop(st);
        let mut replaced = Vec::new();
        {
            let mut hdrs = self.hdrs.lock();
            for (k, h) in block.entries {
                replaced.extend(hdrs.insert(k, h));
                dev.account(&h, true);
            }
        }
        for old in &replaced {
            self.account_drop(old);
        }
        total
    }

    /// Drop every header of `dev` whose buffer starts in `[from, to)` (the hand is
    /// about to overwrite it).
    fn evict_range(&self, dev: &L2Dev, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let mut gone = 0u64;
        let (mut size, mut asize) = (0u64, 0u64);
        self.hdrs.lock().retain(|_, h| {
            let hit = h.dev == dev.id && h.offset_bytes >= from && h.offset_bytes < to;
            if hit {
                gone += 1;
                size += h.size_bytes as u64;
                asize += dev.asize_of(h.size_bytes as u64);
            }
            !hit
        });
        dev.size_bytes.fetch_sub(size, Ordering::Relaxed);
        dev.asize_bytes.fetch_sub(asize, Ordering::Relaxed);
        bump(&self.counters.l2_evict_l2, gone);
    }

    /// Walk `dev`'s log chain (see the module theory) and restore its headers.
    fn rebuild(&self, dev: &Arc<L2Dev>, max_birth_txg: u64) -> RebuildReport {
        let c = &self.counters;
        let mut report = RebuildReport::default();
        let raw = match dev.vdev.read(0, L2_DEVICE_HEADER_BYTES, &|_| true) {
            Ok(b) => b,
            Err(_) => {
                bump(&c.l2_rebuild_io_errors, 1);
                return report;
            }
        };
        let dh = match DevHeader::decode(&raw) {
            Ok(Some(h)) => h,
            Ok(None) => {
                bump(&c.l2_rebuild_unsupported, 1);
                return report;
            }
            Err(()) => {
                bump(&c.l2_rebuild_dh_errors, 1);
                return report;
            }
        };
        let (rs, re) = (dev.ring_start(), dev.ring_end());
        let ring_len = dev.ring_len();
        if dh.pool_guid != self.pool_guid.load(Ordering::Relaxed) || dh.dev_guid != dev.vdev.guid() || dh.hand < rs || dh.hand > re {
            bump(&c.l2_rebuild_unsupported, 1);
            return report;
        }
        {
            let mut st = dev.st.lock();
            st.hand_bytes = dh.hand;
            st.evicted_to_bytes = dh.hand;
            st.seq = dh.seq;
            st.last_log = (dh.log_off, dh.log_len);
        }
        // Distance, going forward around the ring, from `pos` to the hand.
        let behind = |pos: u64| {
            let (p, h) = (pos - rs, dh.hand - rs);
            if h >= p {
                h - p
            } else {
                ring_len - (p - h)
            }
        };
        let (mut off, mut len, mut seq) = (dh.log_off, dh.log_len, dh.seq);
        let mut last_dist = 0u64;
        let max_blocks = ring_len / dev.align_bytes + 1;
        let mut hdrs_new: Vec<(L2Key, L2Hdr)> = Vec::new();
        let mut complete = false;
        for _ in 0..max_blocks {
            if len == 0 || seq == 0 {
                complete = true;
                break;
            }
            if len as usize > LB_MAX_BYTES || off < rs || off.checked_add(len).is_none_or(|e| e > re) || !off.is_multiple_of(dev.align_bytes) {
                bump(&c.l2_rebuild_cksum_lb_errors, 1);
                break;
            }
            let raw = match dev.vdev.read(off, len, &|_| true) {
                Ok(b) => b,
                Err(_) => {
                    bump(&c.l2_rebuild_io_errors, 1);
                    break;
                }
            };
            let Some(lb) = LogBlock::decode(&raw, dev.id) else {
                bump(&c.l2_rebuild_cksum_lb_errors, 1);
                break;
            };
            let batch_end = lb.batch_start.checked_add(lb.batch_len);
            let sane = lb.seq == seq
                && lb.pool_guid == dh.pool_guid
                && lb.dev_guid == dh.dev_guid
                && lb.batch_start >= rs
                && batch_end.is_some_and(|e| e <= re && off >= lb.batch_start && off + len <= e);
            if !sane {
                bump(&c.l2_rebuild_cksum_lb_errors, 1);
                break;
            }
            // Overwritten since: its batch is a full ring (or more) behind the hand.
            let dist = behind(lb.batch_start);
            if dist < lb.batch_len || dist <= last_dist {
                complete = true;
                break;
            }
            last_dist = dist;
            for (k, h) in lb.entries {
                let inside = h.offset_bytes >= lb.batch_start
                    && h.offset_bytes.checked_add(h.size_bytes as u64).is_some_and(|e| e <= off)
                    && h.size_bytes > 0
                    && h.size_bytes as u64 <= L2_BUF_MAX_BYTES
                    && h.offset_bytes.is_multiple_of(dev.align_bytes);
                if inside && k.1 <= max_birth_txg && k.1 > 0 {
                    hdrs_new.push((k, h));
                }
            }
            report.log_blocks += 1;
            (off, len) = lb.prev;
            seq -= 1;
        }
        if complete {
            bump(&c.l2_rebuild_success, 1);
        }
        bump(&c.l2_rebuild_log_blks, report.log_blocks);
        let mut hdrs = self.hdrs.lock();
        // Newest first: an older copy of the same block is skipped.
        for (k, h) in hdrs_new {
            if hdrs.contains_key(&k) {
                bump(&c.l2_rebuild_bufs_precached, 1);
                continue;
            }
            hdrs.insert(k, h);
            report.bufs += 1;
            dev.account(&h, true);
            bump(&c.l2_rebuild_size, h.size_bytes as u64);
            bump(&c.l2_rebuild_asize, dev.asize_of(h.size_bytes as u64));
        }
        bump(&c.l2_rebuild_bufs, report.bufs);
        report
    }

    /// Statistics as (arcstats name, value): counters, then `l2_size`, `l2_asize`
    /// and `l2_hdr_size` (bytes of header table entries).
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let devs = self.devs.read();
        let size: u64 = devs.iter().map(|d| d.size_bytes()).sum();
        let asize: u64 = devs.iter().map(|d| d.asize_bytes()).sum();
        let hdr = (self.hdrs.lock().len() * (L2_HDR_ENTRY_BYTES + 1)) as u64;
        vec![
            ("l2_hits", l(&c.l2_hits)),
            ("l2_misses", l(&c.l2_misses)),
            ("l2_feeds", l(&c.l2_feeds)),
            ("l2_read_bytes", l(&c.l2_read_bytes)),
            ("l2_write_bytes", l(&c.l2_write_bytes)),
            ("l2_writes_sent", l(&c.l2_writes_sent)),
            ("l2_writes_done", l(&c.l2_writes_done)),
            ("l2_writes_error", l(&c.l2_writes_error)),
            ("l2_evict_l2", l(&c.l2_evict_l2)),
            ("l2_cksum_bad", l(&c.l2_cksum_bad)),
            ("l2_io_error", l(&c.l2_io_error)),
            ("l2_size", size),
            ("l2_asize", asize),
            ("l2_hdr_size", hdr),
            ("l2_log_blk_writes", l(&c.l2_log_blk_writes)),
            ("l2_rebuild_success", l(&c.l2_rebuild_success)),
            ("l2_rebuild_unsupported", l(&c.l2_rebuild_unsupported)),
            ("l2_rebuild_io_errors", l(&c.l2_rebuild_io_errors)),
            ("l2_rebuild_dh_errors", l(&c.l2_rebuild_dh_errors)),
            ("l2_rebuild_cksum_lb_errors", l(&c.l2_rebuild_cksum_lb_errors)),
            ("l2_rebuild_size", l(&c.l2_rebuild_size)),
            ("l2_rebuild_asize", l(&c.l2_rebuild_asize)),
            ("l2_rebuild_bufs", l(&c.l2_rebuild_bufs)),
            ("l2_rebuild_bufs_precached", l(&c.l2_rebuild_bufs_precached)),
            ("l2_rebuild_log_blks", l(&c.l2_rebuild_log_blks)),
        ]
    }
}

/// The decoders of the device header and log blocks, for the fuzz target: `data`
/// as read, and `data` sealed with its BLAKE3 (so the fuzzer reaches the fields
/// behind the checksum). An accepted header re-encodes to what was decoded, an
/// accepted log block to the input's first bytes (what follows its checksum is
/// padding). Never panics on any input otherwise.
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    let _ = DevHeader::decode(data);
    let _ = LogBlock::decode(data, 1);
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&ChecksumAlg::Blake3.compute(data));
    if let Ok(Some(h)) = DevHeader::decode(&sealed) {
        assert_eq!(DevHeader::decode(&h.encode()), Ok(Some(h)));
    }
    // A log block is read in a sector-rounded buffer, so bytes after its checksum are
    // padding the decoder ignores: the block re-encodes to the part it decoded.
    if let Some(lb) = LogBlock::decode(&sealed, 1) {
        let again = lb.encode();
        assert_eq!(sealed.get(..again.len()), Some(again.as_slice()), "log block does not round-trip");
    }
}

#[cfg(test)]
mod format_doc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_entry_is_at_most_64_bytes() {
        assert_eq!(std::mem::size_of::<L2Hdr>(), 24);
        assert_eq!(L2_HDR_ENTRY_BYTES, 56);
    }

    #[test]
    fn log_block_round_trips_and_refuses_damage() {
        let e = (
            (
                Dva {
                    vdev: 3,
                    asize_bytes: 8192,
                    offset_bytes: 1 << 30,
                },
                77,
            ),
            L2Hdr {
                offset_bytes: 8192,
                checksum: 0xfeed,
                size_bytes: 5000,
                dev: 9,
                meta: true,
            },
        );
        let lb = LogBlock {
            pool_guid: 1,
            dev_guid: 2,
            seq: 3,
            batch_start: 8192,
            batch_len: 16384,
            prev: (4096, 512),
            entries: vec![e],
        };
        let b = lb.encode();
        let back = LogBlock::decode(&b, 9).unwrap();
        assert_eq!(back.entries, vec![e]);
        assert_eq!((back.pool_guid, back.dev_guid, back.seq, back.prev), (1, 2, 3, (4096, 512)));
        for i in [0, 12, 40, b.len() - 1] {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(LogBlock::decode(&bad, 9).is_none(), "flip at {i} accepted");
        }
        assert!(LogBlock::decode(&b[..b.len() - 1], 9).is_none());
        // A count beyond the maximum is refused before anything is allocated.
        let mut huge = b.clone();
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(LogBlock::decode(&huge, 9).is_none());
    }

    #[test]
    fn device_header_round_trips_and_refuses_damage() {
        let h = DevHeader {
            pool_guid: 5,
            dev_guid: 6,
            seq: 7,
            log_off: 8192,
            log_len: 4096,
            hand: 16384,
        };
        let b = h.encode();
        assert_eq!(b.len() as u64, L2_DEVICE_HEADER_BYTES);
        assert_eq!(DevHeader::decode(&b), Ok(Some(h)));
        let mut bad = b.clone();
        bad[20] ^= 1;
        assert_eq!(DevHeader::decode(&bad), Err(()));
        assert_eq!(DevHeader::decode(&[0u8; 4096]), Ok(None));
    }
}
