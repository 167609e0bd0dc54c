//! # arc — the Adaptive Replacement Cache of verified logical blocks
//!
//! Theory: the cache policy of Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead
//! Replacement Cache" (FAST 2003), applied to variable-size buffers the way OpenZFS's
//! `module/zfs/arc.c` applies it (sizes in bytes, not pages). Four lists, each kept in
//! LRU order:
//!
//! - **MRU** (`T1`): blocks seen once recently (a miss inserts here, and so does a
//!   write or a prefetch);
//! - **MFU** (`T2`): blocks seen at least twice (a demand hit on an MRU block moves it
//!   here, a hit on an MFU block moves it to the head);
//! - **MRU ghost** and **MFU ghost** (`B1`, `B2`): headers without data of blocks
//!   evicted from MRU or MFU, each remembering its size.
//!
//! A miss that finds a ghost header is a *ghost hit*: the cache would have hit had that
//! list been larger, so the target size `p` of the MRU moves towards it (up on an MRU
//! ghost hit, down on an MFU ghost hit, by the block's size times the ratio of the
//! other ghost list's size to this one's, at least 1 and at most 10, as `arc_adapt`
//! did), and the block comes back into the MFU. Eviction takes the LRU end of the MRU
//! while the MRU holds more than `p`, otherwise the LRU end of the MFU; the evicted
//! header goes to the matching ghost list. Ghost lists are trimmed so that MRU + its
//! ghost ≤ `c` and all four lists ≤ 2`c` (the paper's invariants, in bytes). A one-time
//! sequential scan therefore only churns the MRU: blocks read twice live in the MFU,
//! which keeps at least `c - p` bytes, and the scan never produces ghost hits that would
//! raise `p`.
//!
//! Prefetch: a block brought in by a prefetch read is flagged; the first demand read
//! that finds it counts as a demand hit and as `demand_hit_predictive_prefetch`, clears
//! the flag and leaves it in the MRU (OpenZFS `arc_access`: a prefetched block has not
//! yet been *used* twice). Prefetch hits and misses have their own counters. A
//! prefetched block evicted before any demand read is dropped without a ghost header,
//! and a prefetch read that finds a ghost header brings the block into the MRU without
//! adapting `p`: read-ahead that runs too far ahead or too late never moves `p`
//! (Tarn's choice: without it a sequential scan with prefetch produced MRU ghost hits
//! and pushed the hot set out).
//!
//! Invariants (checked after every call that changes sizes): `c_min ≤ c ≤ c_max`,
//! `size + overhead_size ≤ c` (resident bytes of MRU + MFU, and the decompressed copies
//! below), `p ≤ c`. A buffer larger than `c` is not
//! cached. Data and metadata are accounted apart (`data_size`, `metadata_size`, and per
//! list). Uncompressed buffers are shared read-only (`Arc<Vec<u8>>`): readers clone
//! the pointer, never the bytes; a compressed one is decompressed per reader.
//!
//! Keys: (cache user id, first DVA, birth txg). The user id separates pools that share
//! one cache; the birth txg makes a rewritten block (new birth) a different key, and a
//! free removes the key ([`ArcCache::remove`]), so a stale buffer is never served.
//!
//! The pools' L2ARCs (module [`crate::l2arc`]) feed from the eviction end of the
//! MFU and MRU ([`ArcCache::l2_candidates`]); their counters join `stats`.
//!
//! Compressed ARC (OpenZFS's, since 0.7): a compressed block is kept as its
//! physical bytes ([`Stored`]) and decompressed for its readers; sizes, `c` and `p`
//! count the bytes kept, so a compressible working set fits as many times more
//! blocks as it compresses. `uncompressed_size` in the stats is the logical total.
//! Recently decompressed blocks are kept apart, least recently used out first, up to
//! `c / 32` bytes (OpenZFS's dbuf cache, `dbuf_cache_shift` 5), reported as
//! `overhead_size`: a block read again soon is not decompressed again. They count
//! against `c` as OpenZFS counts its decompressed copies in `arc_size`: the lists
//! evict to make room for them, so the memory of everything the ARC keeps is bounded
//! by `arc_max`, and `hdr_size` (an estimate, [`HDR_BYTES`] per resident or ghost
//! header) says what its bookkeeping costs beside it.
//! `compressed_arc_enabled` off caches new blocks decompressed instead.
//!
//! Replacement policy: [`Policy::Arc`] by default; [`Policy::Lru`] and [`Policy::Fifo`]
//! (the pipeline's cache before the ARC) exist to measure the ARC against them (tests,
//! `bench/arc.sh`).
//!
//! Who calls it: [`crate::Zio`] (reads, writes, frees, prefetch workers); the daemon
//! sizes it (`set_max_bytes`, `set_min_bytes`) and its memory-pressure thread
//! ([`ArcCache::memory_pressure_step`]); `tarn kstat arcstats` reads [`ArcCache::stats`].
//! It calls nothing below it: it is a data structure behind one mutex, no I/O.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tarn_phys::{Compression, Dva};

/// Cache key: (cache user id, first DVA, birth txg).
pub type ArcKey = (u64, Dva, u64);

/// Smallest `arc_max` the daemon accepts, bytes (OpenZFS ignores a `zfs_arc_max`
/// below 64 MiB).
pub const ARC_MAX_MIN_BYTES: u64 = 64 << 20;
/// Smallest `arc_min` the daemon accepts, bytes (OpenZFS: `2 << SPA_MAXBLOCKSHIFT`,
/// 32 MiB).
pub const ARC_MIN_MIN_BYTES: u64 = 32 << 20;
/// `c` shrinks by at least `c >> ARC_SHRINK_SHIFT` on memory pressure (OpenZFS
/// `zfs_arc_shrink_shift`, 7 = 1/128).
pub const ARC_SHRINK_SHIFT: u32 = 7;

/// Replacement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Adaptive Replacement Cache (the default).
    Arc,
    /// Least recently used: one list, a hit moves the block to the head.
    Lru,
    /// First in, first out: hits change nothing (the pipeline's cache before the ARC).
    Fifo,
}

impl Policy {
    /// Parse `arc`, `lru` or `fifo`.
    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "arc" => Some(Policy::Arc),
            "lru" => Some(Policy::Lru),
            "fifo" => Some(Policy::Fifo),
            _ => None,
        }
    }
    /// The name [`Policy::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Arc => "arc",
            Policy::Lru => "lru",
            Policy::Fifo => "fifo",
        }
    }
}

/// Who asks for a block: a demand read (the application or the DMU needs it now) or
/// a prefetch (a guess). Counted apart, as OpenZFS's arcstats do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A read that something waits for.
    Demand,
    /// A speculative read ahead.
    Prefetch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Mru = 0,
    Mfu = 1,
    MruGhost = 2,
    MfuGhost = 3,
}

struct Hdr {
    list: List,
    /// Position in its list: larger = more recently used.
    seq: u64,
    size_bytes: u64,
    meta: bool,
    /// Brought in by a prefetch and not demand-read since.
    prefetch: bool,
    /// May be written to a cache device (its dataset's `secondarycache` allows it).
    l2: bool,
    /// How `buf` is stored: `Off` for the logical bytes, else compressed (the block's
    /// physical bytes, OpenZFS's compressed ARC), `lsize` bytes once decompressed.
    comp: Compression,
    lsize: u32,
    buf: Option<Arc<Vec<u8>>>,
}

impl Hdr {
    /// The resident buffer as kept (`None` for a ghost).
    fn stored(&self) -> Option<Stored> {
        Some(Stored {
            bytes: self.buf.clone()?,
            comp: self.comp,
            lsize: self.lsize,
        })
    }
}

/// A buffer as the ARC stores it: the block's logical bytes, or its physical
/// (compressed) bytes with how to get the logical ones back.
#[derive(Clone)]
pub struct Stored {
    /// The bytes kept.
    pub bytes: Arc<Vec<u8>>,
    /// `Off`: `bytes` are the logical bytes; else their compression.
    pub comp: Compression,
    /// Logical size, bytes.
    pub lsize: u32,
}

impl Stored {
    /// Logical bytes kept as they are.
    pub fn logical(bytes: Arc<Vec<u8>>) -> Stored {
        let lsize = bytes.len() as u32;
        Stored {
            bytes,
            comp: Compression::Off,
            lsize,
        }
    }

    /// What to keep of a block whose logical bytes are `logical` and whose physical
    /// bytes `phys` yields (compressed with `comp`, `lsize` bytes logical): the
    /// physical bytes when the block is compressed and `keep_compressed` (compressed
    /// ARC), else the logical bytes (`phys` is then never called).
    pub fn choose(comp: Compression, lsize: u32, logical: &Arc<Vec<u8>>, phys: impl FnOnce() -> Vec<u8>, keep_compressed: bool) -> Stored {
        if comp == Compression::Off || !keep_compressed {
            Stored::logical(logical.clone())
        } else {
            Stored {
                bytes: Arc::new(phys()),
                comp,
                lsize,
            }
        }
    }

    /// The logical bytes: shared when stored so, else decompressed (`None` if the
    /// bytes do not decompress, which verified blocks always do).
    pub fn to_logical(&self) -> Option<Arc<Vec<u8>>> {
        if self.comp == Compression::Off {
            return Some(self.bytes.clone());
        }
        self.comp.decompress(&self.bytes, self.lsize as usize).ok().map(Arc::new)
    }
}

/// Counters of [`ArcCache`], named as OpenZFS's `arcstats` kstat names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArcCounters {
    /// Lookups that found the block resident.
    pub hits: u64,
    /// Lookups that did not (ghost hits included).
    pub misses: u64,
    /// Demand hits on file data.
    pub demand_data_hits: u64,
    /// Demand misses on file data.
    pub demand_data_misses: u64,
    /// Demand hits on metadata.
    pub demand_metadata_hits: u64,
    /// Demand misses on metadata.
    pub demand_metadata_misses: u64,
    /// Prefetch lookups of file data that found it resident.
    pub prefetch_data_hits: u64,
    /// Prefetch lookups of file data that read it from disk.
    pub prefetch_data_misses: u64,
    /// Prefetch lookups of metadata that found it resident.
    pub prefetch_metadata_hits: u64,
    /// Prefetch lookups of metadata that read it from disk.
    pub prefetch_metadata_misses: u64,
    /// Hits on the MRU list.
    pub mru_hits: u64,
    /// Misses whose header was on the MRU ghost list.
    pub mru_ghost_hits: u64,
    /// Hits on the MFU list.
    pub mfu_hits: u64,
    /// Misses whose header was on the MFU ghost list.
    pub mfu_ghost_hits: u64,
    /// Demand hits on blocks a prefetch brought in.
    pub demand_hit_predictive_prefetch: u64,
    /// Buffers evicted (moved to a ghost list or dropped) to make room.
    pub evicted: u64,
    /// Headers dropped because their block was freed or its pool left the cache.
    pub deleted: u64,
    /// Times `c` was lowered for memory pressure.
    pub memory_throttle_count: u64,
}

struct State {
    policy: Policy,
    c_bytes: u64,
    p_bytes: u64,
    c_min_bytes: u64,
    c_max_bytes: u64,
    hdrs: HashMap<ArcKey, Hdr>,
    lists: [BTreeMap<u64, ArcKey>; 4],
    /// Bytes per list, [data, metadata] (as stored: compressed blocks count their
    /// physical size).
    sizes: [[u64; 2]; 4],
    /// Logical bytes of the resident buffers (MRU + MFU), for `uncompressed_size`.
    uncompressed_bytes: u64,
    next_seq: u64,
    counters: ArcCounters,
    /// `MemAvailable` minus the free-memory floor, bytes, as last seen by the
    /// memory-pressure check (negative when short); `None` before the first check.
    memory_available_bytes: Option<i64>,
    /// Memory was short at the last check: `c` does not grow.
    no_grow: bool,
    /// Bytes of the cache of decompressed blocks, as last told by
    /// [`ArcCache::sync_overhead`]: the lists make room for them under `c`.
    overhead_bytes: u64,
}

/// Estimated memory of one header, bytes, resident or ghost (`hdr_size` in the
/// stats is this times the headers): its entry in the hash table (key and `Hdr`,
/// with the table's spare capacity, about half again), its entry in its list's B-tree
/// (position and key, nodes about two-thirds full) and, for a resident one, the shared
/// buffer's reference-count block. OpenZFS counts its headers in `arc_size`; Tarn
/// reports them beside it, and the daemon's memory bound adds them (`tarn_cli`'s
/// `memory` module).
pub const HDR_BYTES: u64 = ((std::mem::size_of::<(ArcKey, Hdr)>() + 1) * 3 / 2 + (8 + std::mem::size_of::<ArcKey>()) * 3 / 2 + 48) as u64;

/// `c` over this is the most the cache of decompressed blocks holds (OpenZFS's
/// `dbuf_cache_shift` of 5: 1/32 of the ARC target).
pub const DCACHE_SHIFT_DIVISOR: u64 = 32;

/// Recently decompressed blocks, least recently used out first, bounded in bytes.
#[derive(Default)]
struct DCache {
    map: HashMap<ArcKey, (Arc<Vec<u8>>, u64)>,
    order: BTreeMap<u64, ArcKey>,
    bytes: u64,
    next: u64,
}

impl DCache {
    fn get(&mut self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        let (buf, seq) = self.map.get_mut(key)?;
        self.order.remove(seq);
        self.next += 1;
        *seq = self.next;
        self.order.insert(self.next, *key);
        Some(buf.clone())
    }

    fn put(&mut self, key: ArcKey, buf: Arc<Vec<u8>>, cap_bytes: u64) {
        self.remove(&key);
        if buf.len() as u64 > cap_bytes {
            return;
        }
        self.next += 1;
        self.bytes += buf.len() as u64;
        self.order.insert(self.next, key);
        self.map.insert(key, (buf, self.next));
        self.shrink_to(cap_bytes);
    }

    /// Drop the least recently used blocks until at most `cap_bytes` are kept.
    fn shrink_to(&mut self, cap_bytes: u64) {
        while self.bytes > cap_bytes {
            let Some((_, k)) = self.order.pop_first() else { break };
            if let Some((b, _)) = self.map.remove(&k) {
                self.bytes -= b.len() as u64;
            }
        }
    }

    fn remove(&mut self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        let (b, seq) = self.map.remove(key)?;
        self.order.remove(&seq);
        self.bytes -= b.len() as u64;
        Some(b)
    }

    fn remove_user(&mut self, user: u64) {
        let keys: Vec<ArcKey> = self.map.keys().filter(|k| k.0 == user).copied().collect();
        for k in keys {
            self.remove(&k);
        }
    }
}

/// The cache. Cheap to share: every method takes `&self` and one mutex.
pub struct ArcCache {
    st: Mutex<State>,
    /// Recently decompressed blocks (a dbuf cache in miniature), at most `c / 32`
    /// bytes (OpenZFS's `dbuf_cache_shift` of 5).
    dcache: Mutex<DCache>,
    /// Keep compressed blocks compressed (`compressed_arc_enabled`).
    compressed: std::sync::atomic::AtomicBool,
    /// The L2ARCs of the pools using this cache, for host-wide `l2_*` statistics.
    l2s: Mutex<Vec<std::sync::Weak<crate::l2arc::L2Arc>>>,
}

fn total(s: &[u64; 2]) -> u64 {
    s[0] + s[1]
}

impl State {
    fn size(&self, l: List) -> u64 {
        total(&self.sizes[l as usize])
    }
    fn resident(&self) -> u64 {
        self.size(List::Mru) + self.size(List::Mfu)
    }
    /// Everything `c` bounds: the resident buffers and the decompressed copies.
    fn charged(&self) -> u64 {
        self.resident() + self.overhead_bytes
    }
    fn unlink(&mut self, key: &ArcKey) -> Option<Hdr> {
        let h = self.hdrs.remove(key)?;
        self.lists[h.list as usize].remove(&h.seq);
        self.sizes[h.list as usize][h.meta as usize] -= h.size_bytes;
        if h.buf.is_some() {
            self.uncompressed_bytes -= u64::from(h.lsize);
        }
        Some(h)
    }
    fn link(&mut self, key: ArcKey, mut h: Hdr, list: List) {
        self.next_seq += 1;
        h.seq = self.next_seq;
        h.list = list;
        if matches!(list, List::MruGhost | List::MfuGhost) {
            h.buf = None;
        }
        if h.buf.is_some() {
            self.uncompressed_bytes += u64::from(h.lsize);
        }
        self.lists[list as usize].insert(h.seq, key);
        self.sizes[list as usize][h.meta as usize] += h.size_bytes;
        self.hdrs.insert(key, h);
    }
    /// Oldest entry of `l`.
    fn lru_of(&self, l: List) -> Option<ArcKey> {
        self.lists[l as usize].first_key_value().map(|(_, k)| *k)
    }

    /// Evict until `resident + overhead + need ≤ c`, then trim the ghost lists.
    fn evict_to_fit(&mut self, need_bytes: u64) {
        while self.charged() + need_bytes > self.c_bytes && self.resident() > 0 {
            let from = match self.policy {
                Policy::Arc => {
                    let mru = self.size(List::Mru);
                    if mru > 0 && (mru > self.p_bytes || self.size(List::Mfu) == 0) {
                        List::Mru
                    } else {
                        List::Mfu
                    }
                }
                // LRU and FIFO keep everything in the MRU list.
                Policy::Lru | Policy::Fifo => {
                    if self.size(List::Mru) > 0 {
                        List::Mru
                    } else {
                        List::Mfu
                    }
                }
            };
            let Some(key) = self.lru_of(from) else { break };
            let h = self.unlink(&key).expect("listed header");
            self.counters.evicted += 1;
            // A prefetched block evicted before any demand read leaves no ghost: a
            // later miss on it says the prefetch ran too far ahead, not that the MRU
            // is too small, and must not move `p` (a sequential scan with read-ahead
            // would otherwise grow the MRU at the expense of the MFU).
            if self.policy == Policy::Arc && !h.prefetch {
                let ghost = if from == List::Mru { List::MruGhost } else { List::MfuGhost };
                self.link(key, h, ghost);
            }
        }
        self.trim_ghosts();
    }

    /// |T1| + |B1| ≤ c and |T1| + |T2| + |B1| + |B2| ≤ 2c.
    fn trim_ghosts(&mut self) {
        while self.size(List::Mru) + self.size(List::MruGhost) > self.c_bytes {
            let Some(k) = self.lru_of(List::MruGhost) else { break };
            self.unlink(&k);
        }
        while self.resident() + self.size(List::MruGhost) + self.size(List::MfuGhost) > 2 * self.c_bytes {
            let Some(k) = self.lru_of(List::MfuGhost).or_else(|| self.lru_of(List::MruGhost)) else {
                break;
            };
            self.unlink(&k);
        }
    }

    /// Set `c` within `c_min..=c_max`; `p` keeps its share of `c`.
    fn set_c(&mut self, c_bytes: u64) {
        let old = self.c_bytes.max(1);
        self.c_bytes = c_bytes.clamp(self.c_min_bytes, self.c_max_bytes);
        self.p_bytes = ((self.p_bytes as u128 * self.c_bytes as u128 / old as u128) as u64).min(self.c_bytes);
        self.evict_to_fit(0);
    }

    fn count(&mut self, access: Access, meta: bool, hit: bool) {
        let c = &mut self.counters;
        if hit {
            c.hits += 1;
        } else {
            c.misses += 1;
        }
        let slot = match (access, meta, hit) {
            (Access::Demand, false, true) => &mut c.demand_data_hits,
            (Access::Demand, false, false) => &mut c.demand_data_misses,
            (Access::Demand, true, true) => &mut c.demand_metadata_hits,
            (Access::Demand, true, false) => &mut c.demand_metadata_misses,
            (Access::Prefetch, false, true) => &mut c.prefetch_data_hits,
            (Access::Prefetch, false, false) => &mut c.prefetch_data_misses,
            (Access::Prefetch, true, true) => &mut c.prefetch_metadata_hits,
            (Access::Prefetch, true, false) => &mut c.prefetch_metadata_misses,
        };
        *slot += 1;
    }
}

/// Configuration of a new cache.
#[derive(Debug, Clone, Copy)]
pub struct ArcConfig {
    /// Largest target size `c_max`, bytes (`arc_max`).
    pub max_bytes: u64,
    /// Smallest target size `c_min`, bytes (`arc_min`); clamped to `max_bytes`.
    pub min_bytes: u64,
    /// Replacement policy.
    pub policy: Policy,
}

/// Default `arc_max` for a machine with `mem_bytes` of memory: half of it, at least
/// [`ARC_MAX_MIN_BYTES`] (OpenZFS on Linux before 2.3 took half; 2.3 takes all but
/// 1 GiB, which suits a dedicated NAS less well when Tarn shares the box). The
/// memory-pressure thread gives memory back when the machine runs short.
pub fn default_max_bytes(mem_bytes: u64) -> u64 {
    (mem_bytes / 2).max(ARC_MAX_MIN_BYTES)
}

/// Default `arc_min` for a machine with `mem_bytes` of memory: 1/32 of it, at least
/// [`ARC_MIN_MIN_BYTES`] (OpenZFS's `arc_c_min`).
pub fn default_min_bytes(mem_bytes: u64) -> u64 {
    (mem_bytes / 32).max(ARC_MIN_MIN_BYTES)
}

/// Free-memory floor for `mem_bytes` of memory: the ARC shrinks when `MemAvailable`
/// falls below it. 1/64 of memory, at least 64 MiB and at most 1 GiB (OpenZFS's
/// `arc_sys_free` plays this part).
pub fn sys_free_bytes(mem_bytes: u64) -> u64 {
    (mem_bytes / 64).clamp(64 << 20, 1 << 30)
}

impl ArcCache {
    /// An empty cache; `c` starts at `c_max` and `p` at half of it.
    pub fn new(cfg: ArcConfig) -> ArcCache {
        let min = cfg.min_bytes.min(cfg.max_bytes);
        ArcCache {
            st: Mutex::new(State {
                policy: cfg.policy,
                c_bytes: cfg.max_bytes,
                p_bytes: cfg.max_bytes / 2,
                c_min_bytes: min,
                c_max_bytes: cfg.max_bytes,
                hdrs: HashMap::new(),
                lists: Default::default(),
                sizes: [[0; 2]; 4],
                uncompressed_bytes: 0,
                next_seq: 0,
                counters: ArcCounters::default(),
                memory_available_bytes: None,
                no_grow: false,
                overhead_bytes: 0,
            }),
            l2s: Mutex::new(Vec::new()),
            dcache: Mutex::new(DCache::default()),
            compressed: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// A cache of at most `max_bytes` with `c_min` = `max_bytes`/2 and the ARC policy
    /// (a pipeline opened outside the daemon: tests, tools).
    pub fn with_max(max_bytes: u64) -> ArcCache {
        ArcCache::new(ArcConfig {
            max_bytes,
            min_bytes: max_bytes / 2,
            policy: Policy::Arc,
        })
    }

    /// Look `key` up for a read. A resident buffer is returned (a hit) and the block
    /// moves as its list and the policy say; otherwise `None` (a miss: the caller
    /// reads the block and hands it to [`ArcCache::insert_read`]). Counts the hit or
    /// miss under `access` and data/metadata (`meta`).
    pub fn lookup(&self, key: &ArcKey, access: Access, meta: bool) -> Option<Arc<Vec<u8>>> {
        let stored = self.lookup_stored(key, access, meta)?;
        self.logical_of(key, stored)
    }

    /// The logical bytes of `stored` (the buffer of `key`): as kept, from the cache of
    /// recently decompressed blocks, or decompressed now (and remembered there).
    fn logical_of(&self, key: &ArcKey, stored: Stored) -> Option<Arc<Vec<u8>>> {
        if stored.comp == Compression::Off {
            return Some(stored.bytes);
        }
        if let Some(b) = self.dcache.lock().get(key) {
            return Some(b);
        }
        let logical = stored.to_logical()?;
        let cap = self.st.lock().c_bytes / DCACHE_SHIFT_DIVISOR;
        self.dcache.lock().put(*key, logical.clone(), cap);
        self.sync_overhead();
        Some(logical)
    }

    /// Tell the lists how much the cache of decompressed blocks holds, cut that cache
    /// to `c` / [`DCACHE_SHIFT_DIVISOR`] if `c` fell, and evict so that both fit
    /// under `c` (OpenZFS counts its decompressed copies, `overhead_size`, in
    /// `arc_size` too). Lock order: the state, then the decompressed cache.
    fn sync_overhead(&self) {
        let mut st = self.st.lock();
        let mut dc = self.dcache.lock();
        dc.shrink_to(st.c_bytes / DCACHE_SHIFT_DIVISOR);
        st.overhead_bytes = dc.bytes;
        drop(dc);
        st.evict_to_fit(0);
    }

    /// Whether compressed blocks are kept compressed (OpenZFS's
    /// `zfs_compressed_arc_enabled`, on by default). Off, the pipeline caches every
    /// block decompressed: more memory, no decompression per hit.
    pub fn compressed_enabled(&self) -> bool {
        self.compressed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Set `compressed_arc_enabled` (blocks already cached stay as they are).
    pub fn set_compressed_enabled(&self, on: bool) {
        self.compressed.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`ArcCache::lookup`], returning the buffer as stored (compressed or not).
    fn lookup_stored(&self, key: &ArcKey, access: Access, meta: bool) -> Option<Stored> {
        let mut st = self.st.lock();
        let (list, buf, was_prefetch) = match st.hdrs.get(key) {
            Some(h) if h.buf.is_some() => (h.list, h.stored(), h.prefetch),
            Some(h) => {
                let l = h.list;
                st.count(access, meta, false);
                match l {
                    List::MruGhost => st.counters.mru_ghost_hits += 1,
                    _ => st.counters.mfu_ghost_hits += 1,
                }
                return None;
            }
            None => {
                st.count(access, meta, false);
                return None;
            }
        };
        st.count(access, meta, true);
        if list == List::Mru {
            st.counters.mru_hits += 1;
        } else {
            st.counters.mfu_hits += 1;
        }
        if access == Access::Demand && was_prefetch {
            st.counters.demand_hit_predictive_prefetch += 1;
        }
        let policy = st.policy;
        let h = st.unlink(key).expect("header just seen");
        let mut h = h;
        let to = match policy {
            Policy::Fifo => {
                // FIFO: a hit changes nothing; relink at the same place.
                st.lists[list as usize].insert(h.seq, *key);
                st.sizes[list as usize][h.meta as usize] += h.size_bytes;
                st.uncompressed_bytes += u64::from(h.lsize);
                if access == Access::Demand {
                    h.prefetch = false;
                }
                st.hdrs.insert(*key, h);
                return buf;
            }
            Policy::Lru => List::Mru,
            Policy::Arc => match (access, list, was_prefetch) {
                // A prefetch hit leaves the block where it is (refreshed).
                (Access::Prefetch, l, _) => l,
                // The first demand read of a prefetched block: it has been used once.
                (Access::Demand, List::Mru, true) => List::Mru,
                _ => List::Mfu,
            },
        };
        if access == Access::Demand {
            h.prefetch = false;
        }
        st.link(*key, h, to);
        buf
    }

    /// Whether `key` is resident (no counters, no movement).
    pub fn contains(&self, key: &ArcKey) -> bool {
        self.peek(key).is_some()
    }

    /// The resident buffer of `key`, without counting a hit or miss and without
    /// moving it between lists: for internal reads that are not an application's
    /// (the deferred fill of a record its own txg is about to replace).
    pub fn peek(&self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        let stored = self.st.lock().hdrs.get(key)?.stored()?;
        self.logical_of(key, stored)
    }

    /// Drop the resident buffer of `key` and hand over its logical bytes (`None`, and
    /// nothing changed, when only a ghost or nothing is there), without counting a hit
    /// or miss: for the deferred fill, which turns the block its txg replaces into the
    /// new record. Once the cache's references are gone the caller usually holds the
    /// only one, so `Arc::try_unwrap` yields the buffer without a copy. The block is
    /// freed by the same sync (or kept by a snapshot, whose reads then miss and read
    /// it again), so nothing that reads it soon loses more than a device read.
    /// Counted as `deleted`, like [`ArcCache::remove`].
    pub fn take(&self, key: &ArcKey) -> Option<Arc<Vec<u8>>> {
        let mut st = self.st.lock();
        let stored = st.hdrs.get(key)?.stored()?;
        st.unlink(key);
        st.counters.deleted += 1;
        // Lock order: the state, then the decompressed cache (`sync_overhead`).
        let mut dc = self.dcache.lock();
        let decompressed = dc.remove(key);
        st.overhead_bytes = dc.bytes;
        drop(dc);
        drop(st);
        match decompressed {
            Some(b) => Some(b),
            None if stored.comp == Compression::Off => Some(stored.bytes),
            None => stored.to_logical(),
        }
    }

    /// Cache a block just read from disk after a miss by [`ArcCache::lookup`]. A
    /// ghost header adapts `p` and brings the block into the MFU; otherwise it enters
    /// the MRU. Flagged as a prefetch when `access` is one.
    pub fn insert_read(&self, key: ArcKey, buf: Arc<Vec<u8>>, meta: bool, access: Access) {
        self.insert_read_stored(key, Stored::logical(buf), meta, access)
    }

    /// [`ArcCache::insert_read`] of a buffer kept as `stored` (compressed blocks keep
    /// their physical bytes: OpenZFS's compressed ARC).
    pub fn insert_read_stored(&self, key: ArcKey, buf: Stored, meta: bool, access: Access) {
        let mut st = self.st.lock();
        let size = buf.bytes.len() as u64;
        let mut to = List::Mru;
        if let Some(old) = st.unlink(&key) {
            match old.list {
                // Only a demand read adapts `p`: a prefetch that finds a ghost came
                // too late (the demand read already used and lost the block).
                List::MruGhost | List::MfuGhost if access == Access::Prefetch => {}
                List::MruGhost if st.policy == Policy::Arc => {
                    let ratio = (st.size(List::MfuGhost) / st.size(List::MruGhost).max(1)).clamp(1, 10);
                    st.p_bytes = (st.p_bytes + size * ratio).min(st.c_bytes);
                    to = List::Mfu;
                }
                List::MfuGhost if st.policy == Policy::Arc => {
                    let ratio = (st.size(List::MruGhost) / st.size(List::MfuGhost).max(1)).clamp(1, 10);
                    st.p_bytes = st.p_bytes.saturating_sub(size * ratio);
                    to = List::Mfu;
                }
                // Raced with another reader that cached it: keep its place.
                l @ (List::Mru | List::Mfu) => to = l,
                _ => {}
            }
        }
        Self::insert_locked(&mut st, key, buf, meta, access == Access::Prefetch, to);
    }

    /// Cache a block just written (its new identity). Enters the MRU; no counters.
    pub fn insert_written(&self, key: ArcKey, buf: Arc<Vec<u8>>, meta: bool) {
        self.insert_written_stored(key, Stored::logical(buf), meta, None)
    }

    /// [`ArcCache::insert_written`] of a buffer kept as `stored`.
    ///
    /// `logical`: the block's logical bytes when the writer still has them; a block
    /// kept compressed then also enters the cache of decompressed blocks, as if it had
    /// just been read (OpenZFS's dbuf cache keeps the uncompressed copy of a block it
    /// wrote), so its next read costs no decompression.
    pub fn insert_written_stored(&self, key: ArcKey, buf: Stored, meta: bool, logical: Option<&Arc<Vec<u8>>>) {
        let compressed = buf.comp != Compression::Off;
        let mut st = self.st.lock();
        st.unlink(&key);
        Self::insert_locked(&mut st, key, buf, meta, false, List::Mru);
        // Lock order: the state, then the decompressed cache. A decompressed copy of
        // an older block under the same key (a block freed unsynced and its range
        // reallocated in the same txg) never outlives this write. Only a change there
        // updates the overhead count and evicts.
        let mut dc = self.dcache.lock();
        let before = dc.bytes;
        match (compressed && st.hdrs.contains_key(&key), logical) {
            (true, Some(l)) => dc.put(key, l.clone(), st.c_bytes / DCACHE_SHIFT_DIVISOR),
            _ => {
                dc.remove(&key);
            }
        }
        if dc.bytes != before {
            st.overhead_bytes = dc.bytes;
            drop(dc);
            st.evict_to_fit(0);
        }
    }

    fn insert_locked(st: &mut State, key: ArcKey, buf: Stored, meta: bool, prefetch: bool, to: List) {
        let size = buf.bytes.len() as u64;
        if size > st.c_bytes || size == 0 {
            return;
        }
        // Grow `c` towards `c_max` while the cache is full and memory is not short
        // (OpenZFS grows `arc_c` on allocation when `arc_size` is near it).
        if !st.no_grow && st.charged() + size > st.c_bytes && st.c_bytes < st.c_max_bytes {
            st.c_bytes = (st.c_bytes + size).min(st.c_max_bytes);
        }
        st.evict_to_fit(size);
        st.link(
            key,
            Hdr {
                list: to,
                seq: 0,
                size_bytes: size,
                meta,
                prefetch,
                l2: true,
                comp: buf.comp,
                lsize: buf.lsize,
                buf: Some(buf.bytes),
            },
            to,
        );
        st.trim_ghosts();
    }

    /// Drop `key` (resident or ghost): its block was freed, so its DVA may be
    /// reallocated; with the birth txg in the key a stale buffer could never match, but
    /// the memory goes back at once.
    pub fn remove(&self, key: &ArcKey) {
        let mut st = self.st.lock();
        if st.unlink(key).is_some() {
            st.counters.deleted += 1;
        }
        // Lock order: the state, then the decompressed cache (`sync_overhead`).
        let mut dc = self.dcache.lock();
        dc.remove(key);
        st.overhead_bytes = dc.bytes;
    }

    /// Whether `key`'s block may go to a cache device (a dataset whose
    /// `secondarycache` refuses it clears this after each read or write).
    pub fn set_l2_eligible(&self, key: &ArcKey, eligible: bool) {
        if let Some(h) = self.st.lock().hdrs.get_mut(key) {
            h.l2 = eligible;
        }
    }

    /// Buffers of cache user `user` that the L2ARC feed should copy: from the
    /// eviction end of the MFU and then the MRU, looking at most `scan_max_bytes` of
    /// each list, at most `write_max_bytes` in all; buffers brought in by a prefetch
    /// and not yet demand-read (OpenZFS `l2arc_noprefetch`), buffers whose dataset
    /// refuses the L2ARC, and buffers for which `skip` is true (already on a cache
    /// device) are left out. Returns (key, shared buffer, metadata?) oldest first.
    /// `skip` runs under the ARC's lock.
    pub fn l2_candidates(&self, user: u64, scan_max_bytes: u64, write_max_bytes: u64, skip: &dyn Fn(&ArcKey) -> bool) -> Vec<(ArcKey, Arc<Vec<u8>>, bool)> {
        let st = self.st.lock();
        let mut out = Vec::new();
        let mut total = 0u64;
        for l in [List::Mfu, List::Mru] {
            let mut scanned = 0u64;
            for key in st.lists[l as usize].values() {
                if scanned >= scan_max_bytes || total >= write_max_bytes {
                    break;
                }
                if key.0 != user {
                    continue;
                }
                let h = &st.hdrs[key];
                scanned += h.size_bytes;
                let Some(buf) = &h.buf else { continue };
                if h.prefetch || !h.l2 || total + h.size_bytes > write_max_bytes || skip(key) {
                    continue;
                }
                total += h.size_bytes;
                out.push((*key, buf.clone(), h.meta));
            }
        }
        out
    }

    /// Count `l2`'s statistics in [`ArcCache::stats`] while it lives.
    pub fn register_l2(&self, l2: &Arc<crate::l2arc::L2Arc>) {
        let mut v = self.l2s.lock();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(l2));
    }

    /// Drop every header of cache user `user` (a pool closed, or asked for a cold
    /// cache).
    pub fn remove_user(&self, user: u64) {
        let mut st = self.st.lock();
        let keys: Vec<ArcKey> = st.hdrs.keys().filter(|k| k.0 == user).copied().collect();
        for k in keys {
            st.unlink(&k);
            st.counters.deleted += 1;
        }
        drop(st);
        self.dcache.lock().remove_user(user);
        self.sync_overhead();
    }

    /// Like [`ArcCache::remove_user`], taking the lock for at most 4,096 headers at a
    /// time, so that other pools' lookups interleave with the purge of a closed pool
    /// that had a million blocks cached.
    pub fn remove_user_gradually(&self, user: u64) {
        let keys: Vec<ArcKey> = self.st.lock().hdrs.keys().filter(|k| k.0 == user).copied().collect();
        for chunk in keys.chunks(4096) {
            let mut st = self.st.lock();
            for k in chunk {
                if st.unlink(k).is_some() {
                    st.counters.deleted += 1;
                }
            }
        }
        self.dcache.lock().remove_user(user);
        self.sync_overhead();
    }

    /// Set `c_max` (`arc_max`), bytes. Lowering it lowers `c` and evicts down to it
    /// before returning. `c_min` follows when it would exceed it.
    pub fn set_max_bytes(&self, max_bytes: u64) {
        let mut st = self.st.lock();
        st.c_max_bytes = max_bytes;
        st.c_min_bytes = st.c_min_bytes.min(max_bytes);
        let c = st.c_bytes.min(max_bytes);
        st.set_c(c);
        drop(st);
        self.sync_overhead();
    }

    /// Set `c_min` (`arc_min`), bytes (at most `c_max`); `c` rises to it if below.
    pub fn set_min_bytes(&self, min_bytes: u64) {
        let mut st = self.st.lock();
        st.c_min_bytes = min_bytes.min(st.c_max_bytes);
        let c = st.c_bytes;
        st.set_c(c);
    }

    /// Change the replacement policy. Everything cached is dropped (the lists mean
    /// different things under each policy).
    pub fn set_policy(&self, policy: Policy) {
        let mut st = self.st.lock();
        st.policy = policy;
        st.hdrs.clear();
        st.lists = Default::default();
        st.sizes = [[0; 2]; 4];
        st.p_bytes = st.c_bytes / 2;
    }

    /// The replacement policy in force.
    pub fn policy(&self) -> Policy {
        self.st.lock().policy
    }

    /// React to the machine's free memory: `available_bytes` is `MemAvailable`,
    /// `floor_bytes` the free-memory floor ([`sys_free_bytes`]). Below the floor, `c`
    /// shrinks by the deficit or by `c >> ARC_SHRINK_SHIFT`, whichever is more (never
    /// below `c_min`), the cache evicts down to it and stops growing; under twice the
    /// floor it only stops growing. Returns the new `c`, bytes. The daemon's
    /// memory-pressure thread calls this every second with `/proc/meminfo`'s values.
    pub fn memory_pressure_step(&self, available_bytes: u64, floor_bytes: u64) -> u64 {
        let mut st = self.st.lock();
        st.memory_available_bytes = Some(available_bytes as i64 - floor_bytes as i64);
        if available_bytes < floor_bytes {
            let shrink = (floor_bytes - available_bytes).max(st.c_bytes >> ARC_SHRINK_SHIFT);
            let c = st.c_bytes.saturating_sub(shrink);
            st.set_c(c);
            st.counters.memory_throttle_count += 1;
            st.no_grow = true;
        } else {
            st.no_grow = available_bytes < 2 * floor_bytes;
        }
        let c = st.c_bytes;
        drop(st);
        self.sync_overhead();
        c
    }

    /// Resident bytes (MRU + MFU).
    pub fn size_bytes(&self) -> u64 {
        self.st.lock().resident()
    }

    /// Estimated memory of the headers, resident and ghost, bytes (`hdr_size`):
    /// [`HDR_BYTES`] each.
    pub fn hdr_bytes(&self) -> u64 {
        self.st.lock().hdrs.len() as u64 * HDR_BYTES
    }

    /// Bytes of the cache of recently decompressed blocks (`overhead_size`), at most
    /// `c` / [`DCACHE_SHIFT_DIVISOR`].
    pub fn overhead_bytes(&self) -> u64 {
        self.dcache.lock().bytes
    }

    /// Target size `c`, bytes.
    pub fn c_bytes(&self) -> u64 {
        self.st.lock().c_bytes
    }

    /// MRU target `p`, bytes.
    pub fn p_bytes(&self) -> u64 {
        self.st.lock().p_bytes
    }

    /// `c_max`, bytes.
    pub fn max_bytes(&self) -> u64 {
        self.st.lock().c_max_bytes
    }

    /// `c_min`, bytes.
    pub fn min_bytes(&self) -> u64 {
        self.st.lock().c_min_bytes
    }

    /// The counters so far.
    pub fn counters(&self) -> ArcCounters {
        self.st.lock().counters.clone()
    }

    /// Every statistic as (OpenZFS `arcstats` name, kstat type, value): type 4 is
    /// `KSTAT_DATA_UINT64`, 3 is `KSTAT_DATA_INT64` (`memory_available_bytes`, which
    /// is negative when memory is short). Sizes are bytes.
    pub fn stats(&self) -> Vec<(&'static str, u8, i64)> {
        let dcache_bytes = self.dcache.lock().bytes;
        let st = self.st.lock();
        let c = &st.counters;
        let u = |n: &'static str, v: u64| (n, 4u8, v as i64);
        let sz = |l: List| st.sizes[l as usize];
        let (mru, mfu, mrug, mfug) = (sz(List::Mru), sz(List::Mfu), sz(List::MruGhost), sz(List::MfuGhost));
        let data = mru[0] + mfu[0];
        let meta = mru[1] + mfu[1];
        let mut out = vec![
            u("hits", c.hits),
            u("misses", c.misses),
            u("demand_data_hits", c.demand_data_hits),
            u("demand_data_misses", c.demand_data_misses),
            u("demand_metadata_hits", c.demand_metadata_hits),
            u("demand_metadata_misses", c.demand_metadata_misses),
            u("prefetch_data_hits", c.prefetch_data_hits),
            u("prefetch_data_misses", c.prefetch_data_misses),
            u("prefetch_metadata_hits", c.prefetch_metadata_hits),
            u("prefetch_metadata_misses", c.prefetch_metadata_misses),
            u("mru_hits", c.mru_hits),
            u("mru_ghost_hits", c.mru_ghost_hits),
            u("mfu_hits", c.mfu_hits),
            u("mfu_ghost_hits", c.mfu_ghost_hits),
            u("deleted", c.deleted),
            u("evict_skip", 0),
            u("mutex_miss", 0),
            u("hash_elements", st.hdrs.len() as u64),
            u("p", st.p_bytes),
            u("c", st.c_bytes),
            u("c_min", st.c_min_bytes),
            u("c_max", st.c_max_bytes),
            u("size", data + meta),
            u("compressed_size", data + meta),
            u("uncompressed_size", st.uncompressed_bytes),
            u("overhead_size", dcache_bytes),
            u("hdr_size", st.hdrs.len() as u64 * HDR_BYTES),
            u("data_size", data),
            u("metadata_size", meta),
            u("mru_size", total(&mru)),
            u("mru_data", mru[0]),
            u("mru_metadata", mru[1]),
            u("mru_ghost_size", total(&mrug)),
            u("mfu_size", total(&mfu)),
            u("mfu_data", mfu[0]),
            u("mfu_metadata", mfu[1]),
            u("mfu_ghost_size", total(&mfug)),
            u("memory_throttle_count", c.memory_throttle_count),
            u("arc_no_grow", st.no_grow as u64),
            ("memory_available_bytes", 3, st.memory_available_bytes.unwrap_or(0)),
            u("demand_hit_predictive_prefetch", c.demand_hit_predictive_prefetch),
            u("evicted", c.evicted),
        ];
        drop(st);
        // The L2ARCs of every pool, summed (OpenZFS's arcstats are per host).
        let l2s: Vec<Arc<crate::l2arc::L2Arc>> = self.l2s.lock().iter().filter_map(|w| w.upgrade()).collect();
        let mut l2 = crate::l2arc::L2Arc::new().stats();
        for x in &l2s {
            for (slot, (_, v)) in l2.iter_mut().zip(x.stats()) {
                slot.1 += v;
            }
        }
        out.extend(l2.into_iter().map(|(n, v)| u(n, v)));
        out
    }

    #[cfg(test)]
    fn list_of(&self, key: &ArcKey) -> Option<List> {
        self.st.lock().hdrs.get(key).map(|h| h.list)
    }

    /// Check the invariants (tests): sizes add up, `size ≤ c`, `c_min ≤ c ≤ c_max`,
    /// `p ≤ c`, and the ghost bounds. Returns a description of the first broken one.
    pub fn check(&self) -> std::result::Result<(), String> {
        let st = self.st.lock();
        for l in [List::Mru, List::Mfu, List::MruGhost, List::MfuGhost] {
            let sum: u64 = st.lists[l as usize].values().map(|k| st.hdrs[k].size_bytes).sum();
            if sum != st.size(l) {
                return Err(format!("{l:?}: listed {sum} bytes, accounted {}", st.size(l)));
            }
        }
        if st.charged() > st.c_bytes {
            return Err(format!("size {} + overhead {} > c {}", st.resident(), st.overhead_bytes, st.c_bytes));
        }
        if st.c_bytes > st.c_max_bytes || st.c_bytes < st.c_min_bytes {
            return Err(format!("c {} outside [{}, {}]", st.c_bytes, st.c_min_bytes, st.c_max_bytes));
        }
        if st.p_bytes > st.c_bytes {
            return Err(format!("p {} > c {}", st.p_bytes, st.c_bytes));
        }
        if st.size(List::Mru) + st.size(List::MruGhost) > st.c_bytes {
            return Err("MRU + MRU ghost > c".into());
        }
        Ok(())
    }
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo` text, bytes; `None` when a line
/// is missing or malformed.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// Start the memory-pressure thread for `arc`: every second it reads
/// `/proc/meminfo` and calls [`ArcCache::memory_pressure_step`] with
/// `MemAvailable` and [`sys_free_bytes`] of `MemTotal`. It stops when `arc` is dropped
/// or `/proc/meminfo` cannot be read.
pub fn start_memory_thread(arc: &Arc<ArcCache>) {
    let weak = Arc::downgrade(arc);
    let _ = std::thread::Builder::new().name("arc_reap".into()).spawn(move || {
        while let Some(arc) = weak.upgrade() {
            let Some((total_bytes, avail_bytes)) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| parse_meminfo(&t)) else {
                break;
            };
            arc.memory_pressure_step(avail_bytes, sys_free_bytes(total_bytes));
            drop(arc);
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;

    fn key(i: u64) -> ArcKey {
        (
            1,
            Dva {
                vdev: 0,
                offset_bytes: i * B,
                asize_bytes: B,
            },
            1,
        )
    }

    fn cache(max_blocks: u64, policy: Policy) -> ArcCache {
        ArcCache::new(ArcConfig {
            max_bytes: max_blocks * B,
            min_bytes: max_blocks * B / 2,
            policy,
        })
    }

    /// Demand-read block `i`; on a miss, "read" it and insert.
    fn read(a: &ArcCache, i: u64) -> bool {
        let k = key(i);
        if a.lookup(&k, Access::Demand, false).is_some() {
            return true;
        }
        a.insert_read(k, Arc::new(vec![i as u8; B as usize]), false, Access::Demand);
        false
    }

    #[test]
    fn take_hands_over_the_buffer_and_forgets_the_block() {
        let a = cache(8, Policy::Arc);
        a.insert_written(key(1), Arc::new(vec![7u8; B as usize]), false);
        read(&a, 2);
        let size = a.size_bytes();
        let deleted = a.counters().deleted;
        let got = a.take(&key(1)).expect("resident");
        assert_eq!(Arc::strong_count(&got), 1, "the cache keeps no reference");
        assert_eq!(*got, vec![7u8; B as usize]);
        assert!(!a.contains(&key(1)));
        assert!(a.contains(&key(2)), "other blocks stay");
        assert_eq!(a.size_bytes(), size - B);
        assert_eq!(a.counters().deleted, deleted + 1);
        assert!(a.take(&key(1)).is_none(), "taken once");
        assert!(a.take(&key(3)).is_none(), "never cached");
        assert_eq!(a.counters().deleted, deleted + 1, "a miss changes nothing");
        a.check().unwrap();
    }

    #[test]
    fn take_of_a_compressed_block_returns_its_logical_bytes() {
        let a = cache(64, Policy::Arc);
        let logical: Vec<u8> = (0..B as usize).map(|i| (i / 512) as u8).collect();
        let phys = Compression::Lz4.compress(&logical).expect("compressible");
        let stored = Stored::choose(Compression::Lz4, B as u32, &Arc::new(logical.clone()), || phys, true);
        assert_ne!(stored.comp, Compression::Off, "kept compressed");
        a.insert_read_stored(key(4), stored, false, Access::Demand);
        assert_eq!(*a.lookup(&key(4), Access::Demand, false).unwrap(), logical, "decompressed copy cached");
        let got = a.take(&key(4)).expect("resident");
        assert_eq!(*got, logical);
        assert!(!a.contains(&key(4)));
        a.check().unwrap();
    }

    /// Hot set of `hot` blocks read 4 times, then a scan of `scan` other blocks read
    /// once each, then the hot set again: returns the hits of that last pass.
    fn hot_then_scan(a: &ArcCache, hot: u64, scan: u64) -> u64 {
        for _ in 0..4 {
            for i in 0..hot {
                read(a, i);
            }
        }
        for i in 0..scan {
            read(a, 1_000_000 + i);
            a.check().unwrap();
        }
        (0..hot).filter(|&i| read(a, i)).count() as u64
    }

    #[test]
    fn scan_resistance_arc_keeps_hot_set_lru_and_fifo_lose_it() {
        // ARC of 256 blocks, hot set 64 blocks, one scan of 1024 blocks (4× the ARC).
        let arc = cache(256, Policy::Arc);
        let arc_hits = hot_then_scan(&arc, 64, 1024);
        let lru_hits = hot_then_scan(&cache(256, Policy::Lru), 64, 1024);
        let fifo_hits = hot_then_scan(&cache(256, Policy::Fifo), 64, 1024);
        assert_eq!(arc_hits, 64, "the ARC lost hot blocks to a scan");
        assert_eq!(lru_hits, 0, "an LRU keeps nothing through a scan 4× its size");
        assert_eq!(fifo_hits, 0);
        let c = arc.counters();
        // The hot set lives in the MFU; the scan went through the MRU.
        assert!(arc.stats().iter().any(|&(n, _, v)| n == "mfu_size" && v as u64 == 64 * B));
        assert_eq!(c.mru_ghost_hits + c.mfu_ghost_hits, 0, "a one-time scan makes no ghost hits");
    }

    #[test]
    fn ghost_hits_move_p() {
        let a = cache(100, Policy::Arc);
        let p0 = a.p_bytes();
        let ghosts_of = |a: &ArcCache, l: List, r: std::ops::Range<u64>| -> Vec<u64> { r.filter(|&i| a.list_of(&key(i)) == Some(l)).collect() };
        // 100 blocks once (MRU), 60 of them again (MFU), then 100 new ones push blocks
        // of both lists out to their ghost lists.
        for i in 0..100 {
            read(&a, i);
        }
        for i in 0..60 {
            read(&a, i);
        }
        for i in 200..300 {
            read(&a, i);
        }
        let mru_ghosts = ghosts_of(&a, List::MruGhost, 0..300);
        assert!(mru_ghosts.len() >= 5, "{mru_ghosts:?}");
        // Re-reading blocks evicted from the MRU hits the MRU ghost list: p grows.
        for &i in mru_ghosts.iter().take(5) {
            assert!(!read(&a, i));
            assert_eq!(a.list_of(&key(i)), Some(List::Mfu), "a ghost hit brings the block into the MFU");
        }
        assert_eq!(a.counters().mru_ghost_hits, 5);
        let p1 = a.p_bytes();
        assert!(p1 > p0, "MRU ghost hits must raise p ({p0} -> {p1})");
        // Blocks read twice push MFU blocks out; re-reading those lowers p.
        for i in 400..450 {
            read(&a, i);
            read(&a, i);
        }
        let mfu_ghosts = ghosts_of(&a, List::MfuGhost, 0..500);
        assert!(!mfu_ghosts.is_empty());
        let p2 = a.p_bytes();
        for &i in mfu_ghosts.iter().take(5) {
            assert!(!read(&a, i));
        }
        assert_eq!(a.counters().mfu_ghost_hits as usize, mfu_ghosts.len().min(5));
        assert!(a.p_bytes() < p2, "MFU ghost hits must lower p ({p2} -> {})", a.p_bytes());
        a.check().unwrap();
    }

    #[test]
    fn never_exceeds_max_under_mixed_workload_and_shrinks_at_once() {
        let a = cache(128, Policy::Arc);
        let mut x: u64 = 12345;
        let max = a.max_bytes();
        for n in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Working set 4× the cache, reads and writes of 1..4 blocks' size.
            let i = (x >> 33) % 512;
            let len = B * (1 + (x >> 20) % 4);
            let k = key(i);
            if n % 3 == 0 {
                a.insert_written(k, Arc::new(vec![1; len as usize]), i.is_multiple_of(5));
            } else if a.lookup(&k, Access::Demand, i.is_multiple_of(5)).is_none() {
                a.insert_read(k, Arc::new(vec![2; len as usize]), i.is_multiple_of(5), Access::Demand);
            }
            assert!(a.size_bytes() <= max);
            if n % 997 == 0 {
                a.check().unwrap();
            }
        }
        assert!(a.size_bytes() > max / 2);
        // Lower arc_max: evicted before the call returns; p keeps its share of c.
        let share = a.p_bytes() as f64 / a.c_bytes() as f64;
        a.set_max_bytes(16 * B);
        assert!(a.size_bytes() <= 16 * B);
        assert_eq!(a.c_bytes(), 16 * B);
        assert!((a.p_bytes() as f64 / a.c_bytes() as f64 - share).abs() < 0.01);
        a.check().unwrap();
    }

    #[test]
    fn prefetch_counts_apart_and_first_demand_hit_stays_mru() {
        let a = cache(64, Policy::Arc);
        let k = key(7);
        assert!(a.lookup(&k, Access::Prefetch, false).is_none());
        a.insert_read(k, Arc::new(vec![7; B as usize]), false, Access::Prefetch);
        assert!(a.lookup(&k, Access::Demand, false).is_some());
        let c = a.counters();
        assert_eq!((c.prefetch_data_misses, c.demand_data_hits, c.demand_hit_predictive_prefetch), (1, 1, 1));
        let mru = |a: &ArcCache| a.stats().iter().find(|s| s.0 == "mru_size").unwrap().2 as u64;
        assert_eq!(mru(&a), B, "first demand read of a prefetched block leaves it in the MRU");
        assert!(a.lookup(&k, Access::Demand, false).is_some());
        assert_eq!(mru(&a), 0, "the second demand read promotes it to the MFU");
        assert_eq!(a.counters().demand_hit_predictive_prefetch, 1);
        // A prefetched block evicted unused leaves no ghost: its next miss moves no p.
        let b = cache(4, Policy::Arc);
        b.insert_read(key(1), Arc::new(vec![1; B as usize]), false, Access::Prefetch);
        for i in 10..20 {
            read(&b, i);
        }
        assert_eq!(b.list_of(&key(1)), None);
        let p = b.p_bytes();
        assert!(!read(&b, 1));
        assert_eq!((b.counters().mru_ghost_hits, b.p_bytes()), (0, p));
        // Metadata counted apart.
        assert!(a.lookup(&key(8), Access::Demand, true).is_none());
        assert_eq!(a.counters().demand_metadata_misses, 1);
    }

    #[test]
    fn decompressed_copies_count_against_c() {
        // 64 blocks of c; each compresses to a fraction of 4 KiB and is read once, so
        // its decompressed copy joins the cache of decompressed blocks (c/32 = 2 blocks).
        let a = cache(64, Policy::Arc);
        let logical = b"tarn arc overhead ".repeat(B as usize / 16)[..B as usize].to_vec();
        let phys = Compression::Lz4.compress(&logical).expect("compresses");
        for i in 0..512 {
            let stored = Stored {
                bytes: Arc::new(phys.clone()),
                comp: Compression::Lz4,
                lsize: B as u32,
            };
            a.insert_read_stored(key(i), stored, false, Access::Demand);
            assert_eq!(a.lookup(&key(i), Access::Demand, false).as_deref(), Some(&logical));
            a.check().unwrap();
        }
        let stat = |n: &str| a.stats().iter().find(|s| s.0 == n).unwrap().2 as u64;
        assert_eq!(stat("overhead_size"), 2 * B, "the decompressed copies fill c/32");
        assert!(stat("size") + stat("overhead_size") <= a.c_bytes());
        assert_eq!(stat("hdr_size"), stat("hash_elements") * HDR_BYTES);
        // A lower c cuts the decompressed copies to its 1/32 (one block) as well.
        a.set_max_bytes(32 * B);
        assert_eq!(stat("overhead_size"), B);
        a.check().unwrap();
        a.remove(&key(511));
        assert_eq!(stat("overhead_size"), 0, "a freed block's decompressed copy stays");
    }

    #[test]
    fn a_written_compressed_block_keeps_the_writers_logical_copy() {
        let a = cache(64, Policy::Arc);
        let compressed = |fill: &[u8]| {
            let mut bytes = fill.repeat(B as usize / fill.len() + 1);
            bytes.truncate(B as usize);
            let logical = Arc::new(bytes);
            let stored = Stored {
                bytes: Arc::new(Compression::Lz4.compress(&logical).expect("compresses")),
                comp: Compression::Lz4,
                lsize: B as u32,
            };
            (logical, stored)
        };
        // With the writer's bytes: the next read gets that very buffer back, nothing
        // decompressed.
        let (la, sa) = compressed(b"indirect block A ");
        a.insert_written_stored(key(1), sa, true, Some(&la));
        let r = a.lookup(&key(1), Access::Demand, true).unwrap();
        assert!(Arc::ptr_eq(&r, &la), "the written logical copy is served");
        assert_eq!(a.counters().demand_metadata_hits, 1);
        a.check().unwrap();
        // Another block written under the same key without its logical bytes: the old
        // decompressed copy must not be served for it.
        let (lb, sb) = compressed(b"indirect block B ");
        a.insert_written_stored(key(1), sb, true, None);
        let r = a.lookup(&key(1), Access::Demand, true).expect("resident");
        assert!(*r == *lb, "the old block's decompressed copy was served");
        a.check().unwrap();
    }

    #[test]
    fn buffers_shared_and_removal_drops_them() {
        let a = cache(64, Policy::Arc);
        let buf = Arc::new(vec![1u8; B as usize]);
        a.insert_written(key(1), buf.clone(), true);
        let r1 = a.lookup(&key(1), Access::Demand, true).unwrap();
        let r2 = a.lookup(&key(1), Access::Demand, true).unwrap();
        assert!(Arc::ptr_eq(&r1, &buf) && Arc::ptr_eq(&r2, &buf), "readers share one buffer");
        assert!(a.stats().iter().any(|&(n, _, v)| n == "metadata_size" && v as u64 == B));
        a.remove(&key(1));
        assert!(a.lookup(&key(1), Access::Demand, true).is_none());
        // Same DVA, later birth: a different key.
        a.insert_written(key(2), Arc::new(vec![2; B as usize]), false);
        let mut k2 = key(2);
        k2.2 = 9;
        assert!(a.lookup(&k2, Access::Demand, false).is_none());
    }

    #[test]
    fn memory_pressure_shrinks_to_c_min_at_most() {
        let a = cache(256, Policy::Arc);
        for i in 0..256 {
            read(&a, i);
        }
        let c0 = a.c_bytes();
        let floor = 1 << 30;
        // Plenty free: nothing changes.
        assert_eq!(a.memory_pressure_step(4 << 30, floor), c0);
        // 100 blocks short: c drops by that much and the cache evicts.
        let c1 = a.memory_pressure_step(floor - 100 * B, floor);
        assert_eq!(c1, c0 - 100 * B);
        assert!(a.size_bytes() <= c1);
        // Far short: never below c_min.
        assert_eq!(a.memory_pressure_step(0, floor), a.min_bytes());
        assert_eq!(a.counters().memory_throttle_count, 2);
        // While short, c does not grow back.
        for i in 1000..1300 {
            read(&a, i);
        }
        assert_eq!(a.c_bytes(), a.min_bytes());
        a.check().unwrap();
    }

    #[test]
    fn defaults_follow_memory() {
        let g = 1u64 << 30;
        assert_eq!(default_max_bytes(16 * g), 8 * g, "arc_max: half of memory");
        assert_eq!(default_max_bytes(64 << 20), ARC_MAX_MIN_BYTES);
        assert_eq!(default_min_bytes(16 * g), g / 2, "arc_min: 1/32 of memory");
        assert_eq!(default_min_bytes(g), ARC_MIN_MIN_BYTES);
        assert_eq!(sys_free_bytes(16 * g), 256 << 20, "free floor: 1/64 of memory");
        assert_eq!((sys_free_bytes(g), sys_free_bytes(256 * g)), (64 << 20, g));
    }

    #[test]
    fn meminfo_parses() {
        let t = "MemTotal:       16303524 kB\nMemFree:  1 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(parse_meminfo(t), Some((16303524 * 1024, 12000000 * 1024)));
        assert_eq!(parse_meminfo("MemTotal: x kB\n"), None);
    }
}
