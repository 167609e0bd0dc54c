//! Byte layouts of the space structures (the human spec is `docs/format.md`).
//!
//! Four block types, all little-endian u64 fields unless noted, each starting with a
//! magic and a version, zero-padded to the block's physical size (the padding must be
//! zero). No checksum is embedded: each block is checksummed by the block pointer that
//! references it. Every decoder returns [`Corrupt`] on malformed input and never
//! allocates more than the bytes it was given can describe.
//!
//! ```text
//! MetaslabRoot (ObjectType 20), ROOT_HEADER_BYTES = 168, then N vdev entries:
//!   off   0 magic          "TARNMSRT"
//!   off   8 version        1
//!   off  16 txg            txg that wrote this root
//!   off  24 vdev_count     N (holes included)
//!   off  32 log_tail_txg   oldest txg whose log blocks are still needed
//!   off  40 log_head       BlkPtr (128 B) of the newest log block (hole: none)
//!   off 168 + 2080*i       vdev entry i:
//!       +0  class u64 (0 Normal, 1 Log, 2 Hole)   +8 asize_bytes   +16 ms_shift
//!       +24 ms_count   +32 page pointers: DIR_PAGES (16) × BlkPtr (128 B)
//!       (a hole's entry is class 2 and zeros)
//!
//! MetaslabPage (ObjectType 21), PAGE_HEADER_BYTES = 48, then `count` entries of 136 B:
//!   off 0 magic "TARNMSPG"  8 version 1  16 vdev  24 page  32 first_ms  40 count
//!   entry: +0 flush_txg u64, +8 map BlkPtr (128 B; hole = free at flush_txg)
//!
//! MetaslabMap (ObjectType 22), one chunk of at most 128 KiB, MAP_HEADER_BYTES = 208;
//! a map is a chain of chunks (head in the directory page), its ranges in order:
//!   off 0 magic "TARNMSMP"  8 version 1  16 vdev  24 ms_index  32 start_bytes
//!   40 size_bytes  48 flush_txg  56 chunk index  64 free_count F  72 deferred_count D
//!   80 next chunk  BlkPtr (128 B; hole in the last chunk)
//!   208 + 16*i        free range i: start, len           (sorted, merged, over the chain)
//!   208 + 16*F + 24*j deferred j: txg, start, len        (after every free range)
//!
//! SpaceMapLog (ObjectType 23), LOG_HEADER_BYTES = 160, then R records of 32 B:
//!   off 0 magic "TARNSMLG"  8 version 1  16 txg  24 record_count R
//!   off 32 prev  BlkPtr (128 B) of the previous (older) log block, hole at the end
//!   record: +0 start_bytes  +8 len_bytes  +16 vdev u32  +20 kind u8 (1 Alloc,
//!           2 Free, 3 FreeNow, 4 Release)  +21 three zero bytes  +24 txg (Free,
//!           Release: the freeing txg; otherwise 0)
//! ```

use crate::range_tree::RangeTree;
use crate::{AllocClass, Corrupt, LogRecord, RecordKind, DIR_PAGES};
use std::collections::BTreeMap;
use tarn_phys::blkptr::BLKPTR_SIZE_BYTES;
use tarn_phys::BlkPtr;

/// Magic of a [`RootPhys`]: the bytes `TARNMSRT`.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"TARNMSRT");
/// Magic of a [`PagePhys`]: the bytes `TARNMSPG`.
pub const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"TARNMSPG");
/// Magic of a [`MapPhys`]: the bytes `TARNMSMP`.
pub const MAP_MAGIC: u64 = u64::from_le_bytes(*b"TARNMSMP");
/// Magic of a [`LogBlockPhys`]: the bytes `TARNSMLG`.
pub const LOG_MAGIC: u64 = u64::from_le_bytes(*b"TARNSMLG");
/// Magic of the space map of earlier Tarn builds (refused with a clear message).
pub const OLD_SPACE_MAP_MAGIC: u64 = u64::from_le_bytes(*b"TARNSPMP");
/// Version of all four layouts.
pub const ONDISK_VERSION: u64 = 1;

/// Fixed part of a root.
pub const ROOT_HEADER_BYTES: usize = 168;
/// One vdev entry of a root.
pub const ROOT_VDEV_BYTES: usize = 32 + DIR_PAGES * BLKPTR_SIZE_BYTES;
/// Fixed part of a page.
pub const PAGE_HEADER_BYTES: usize = 48;
/// One page entry (flush txg, map pointer).
pub const PAGE_ENTRY_BYTES: usize = 8 + BLKPTR_SIZE_BYTES;
/// Fixed part of a condensed map chunk.
pub const MAP_HEADER_BYTES: usize = 208;
/// Largest condensed map chunk (a map needs no contiguous space larger than this).
pub const MAP_CHUNK_MAX_BYTES: usize = 128 << 10;
/// One free range of a map.
pub const MAP_FREE_BYTES: usize = 16;
/// One deferred free of a map.
pub const MAP_DEFERRED_BYTES: usize = 24;
/// Fixed part of a log block.
pub const LOG_HEADER_BYTES: usize = 160;
/// One log record.
pub const LOG_RECORD_BYTES: usize = 32;
/// Records per log block (a log block is at most 128 KiB).
pub const LOG_RECORDS_PER_BLOCK: usize = ((128 << 10) - LOG_HEADER_BYTES) / LOG_RECORD_BYTES;

const KIND: &str = "space map";

fn bad(detail: impl Into<String>) -> Corrupt {
    Corrupt::new(KIND, detail)
}

/// The root's entry for one top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootVdevPhys {
    /// Class of the vdev.
    pub class: AllocClass,
    /// Usable bytes (0 for a hole).
    pub asize_bytes: u64,
    /// Metaslab shift (0 for a hole).
    pub ms_shift: u32,
    /// Number of metaslabs.
    pub ms_count: u64,
    /// Directory pages (holes for a hole vdev).
    pub pages: [BlkPtr; DIR_PAGES],
}

/// The metaslab directory root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootPhys {
    /// Txg that wrote it.
    pub txg: u64,
    /// Oldest txg whose log blocks are needed.
    pub log_tail_txg: u64,
    /// Newest log block.
    pub log_head: BlkPtr,
    /// One entry per top-level vdev id.
    pub vdevs: Vec<RootVdevPhys>,
}

/// One directory page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePhys {
    /// Top-level vdev id.
    pub vdev: u64,
    /// Page index in the vdev's directory.
    pub page: u64,
    /// Index of the first metaslab it covers.
    pub first_ms: u64,
    /// `(flush_txg, map)` per metaslab.
    pub entries: Vec<(u64, BlkPtr)>,
}

/// One chunk of a metaslab's condensed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapPhys {
    /// Top-level vdev id.
    pub vdev: u64,
    /// Metaslab index.
    pub ms_index: u64,
    /// First byte of the metaslab.
    pub start_bytes: u64,
    /// Size of the metaslab.
    pub size_bytes: u64,
    /// Txg whose end state this is.
    pub flush_txg: u64,
    /// Position in the chain (0 for the head).
    pub chunk: u64,
    /// Next chunk (hole in the last).
    pub next: BlkPtr,
    /// Free ranges `(start, len)`.
    pub free: Vec<(u64, u64)>,
    /// Deferred frees `(txg, start, len)`.
    pub deferred: Vec<(u64, u64, u64)>,
}

/// One block of the space-map log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlockPhys {
    /// Txg that wrote it.
    pub txg: u64,
    /// Previous (older) log block; a hole ends the chain.
    pub prev: BlkPtr,
    /// Records in the order they happened.
    pub records: Vec<LogRecord>,
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bp(out: &mut Vec<u8>, bp: &BlkPtr) {
    out.extend_from_slice(&bp.encode());
}

/// Bounds-checked little-endian reader: every read returns `Corrupt` past the end.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], magic: u64, what: &str) -> Result<Self, Corrupt> {
        let mut r = Reader { b, pos: 0 };
        let m = r.u64()?;
        if m == OLD_SPACE_MAP_MAGIC {
            return Err(bad("this pool has a whole-pool space map of an older Tarn format; import it with that version"));
        }
        if m != magic {
            return Err(bad(format!("{what}: bad magic {m:#018x}")));
        }
        let v = r.u64()?;
        if v != ONDISK_VERSION {
            return Err(bad(format!("{what}: unsupported version {v}")));
        }
        Ok(r)
    }

    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        let chunk = self
            .b
            .get(self.pos..self.pos + 8)
            .ok_or_else(|| bad(format!("truncated at byte {}", self.pos)))?;
        self.pos += 8;
        Ok(u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
    }

    fn bp(&mut self) -> Result<BlkPtr, Corrupt> {
        let chunk = self
            .b
            .get(self.pos..self.pos + BLKPTR_SIZE_BYTES)
            .ok_or_else(|| bad(format!("truncated at byte {}", self.pos)))?;
        self.pos += BLKPTR_SIZE_BYTES;
        BlkPtr::decode(chunk).map_err(|e| bad(format!("block pointer at byte {}: {}", self.pos - BLKPTR_SIZE_BYTES, e.detail)))
    }

    /// Reads a count of entries of `entry_bytes` each, rejecting one that cannot fit.
    fn count(&mut self, entry_bytes: usize) -> Result<usize, Corrupt> {
        let n = self.u64()?;
        if n > (self.remaining() / entry_bytes) as u64 {
            return Err(bad(format!("count {n} exceeds the remaining {} bytes", self.remaining())));
        }
        Ok(n as usize)
    }

    /// The rest must be zero padding.
    fn finish(&self) -> Result<(), Corrupt> {
        if self.b[self.pos..].iter().any(|&x| x != 0) {
            return Err(bad(format!("non-zero bytes after the end at {}", self.pos)));
        }
        Ok(())
    }
}

impl RootPhys {
    /// Encoded size for `vdev_count` vdevs.
    pub fn encoded_bytes(vdev_count: usize) -> usize {
        ROOT_HEADER_BYTES + vdev_count * ROOT_VDEV_BYTES
    }

    /// Serializes (layout in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::encoded_bytes(self.vdevs.len()));
        put(&mut out, ROOT_MAGIC);
        put(&mut out, ONDISK_VERSION);
        put(&mut out, self.txg);
        put(&mut out, self.vdevs.len() as u64);
        put(&mut out, self.log_tail_txg);
        put_bp(&mut out, &self.log_head);
        for v in &self.vdevs {
            put(&mut out, v.class.to_u64());
            put(&mut out, v.asize_bytes);
            put(&mut out, v.ms_shift as u64);
            put(&mut out, v.ms_count);
            for p in &v.pages {
                put_bp(&mut out, p);
            }
        }
        out
    }

    /// Parses a root; structure only (the caller checks it against the config).
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader::new(b, ROOT_MAGIC, "root")?;
        let txg = r.u64()?;
        let n = r.u64()?;
        let log_tail_txg = r.u64()?;
        let log_head = r.bp()?;
        if n > (r.remaining() / ROOT_VDEV_BYTES) as u64 {
            return Err(bad(format!("root: {n} vdevs do not fit")));
        }
        let mut vdevs = Vec::with_capacity(n as usize);
        for i in 0..n {
            let c = r.u64()?;
            let class = AllocClass::from_u64(c).ok_or_else(|| bad(format!("root: vdev {i}: unknown class {c}")))?;
            let asize_bytes = r.u64()?;
            let ms_shift = r.u64()?;
            let ms_count = r.u64()?;
            let mut pages = [BlkPtr::HOLE; DIR_PAGES];
            for p in &mut pages {
                *p = r.bp()?;
            }
            if ms_shift > 63 {
                return Err(bad(format!("root: vdev {i}: ms_shift {ms_shift}")));
            }
            vdevs.push(RootVdevPhys {
                class,
                asize_bytes,
                ms_shift: ms_shift as u32,
                ms_count,
                pages,
            });
        }
        r.finish()?;
        Ok(RootPhys {
            txg,
            log_tail_txg,
            log_head,
            vdevs,
        })
    }
}

impl PagePhys {
    /// Encoded size of a page of `entries` entries.
    pub fn encoded_bytes(entries: usize) -> usize {
        PAGE_HEADER_BYTES + entries * PAGE_ENTRY_BYTES
    }

    /// Serializes (layout in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::encoded_bytes(self.entries.len()));
        put(&mut out, PAGE_MAGIC);
        put(&mut out, ONDISK_VERSION);
        put(&mut out, self.vdev);
        put(&mut out, self.page);
        put(&mut out, self.first_ms);
        put(&mut out, self.entries.len() as u64);
        for (txg, bp) in &self.entries {
            put(&mut out, *txg);
            put_bp(&mut out, bp);
        }
        out
    }

    /// Parses a page.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader::new(b, PAGE_MAGIC, "directory page")?;
        let vdev = r.u64()?;
        let page = r.u64()?;
        let first_ms = r.u64()?;
        let n = r.count(PAGE_ENTRY_BYTES)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let txg = r.u64()?;
            entries.push((txg, r.bp()?));
        }
        r.finish()?;
        Ok(PagePhys { vdev, page, first_ms, entries })
    }
}

impl MapPhys {
    /// Encoded size of a chunk with `free` ranges and `deferred` entries.
    pub fn encoded_bytes(free: usize, deferred: usize) -> usize {
        MAP_HEADER_BYTES + free * MAP_FREE_BYTES + deferred * MAP_DEFERRED_BYTES
    }

    /// Serializes (layout in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::encoded_bytes(self.free.len(), self.deferred.len()));
        for v in [
            MAP_MAGIC,
            ONDISK_VERSION,
            self.vdev,
            self.ms_index,
            self.start_bytes,
            self.size_bytes,
            self.flush_txg,
            self.chunk,
            self.free.len() as u64,
            self.deferred.len() as u64,
        ] {
            put(&mut out, v);
        }
        put_bp(&mut out, &self.next);
        for &(s, l) in &self.free {
            put(&mut out, s);
            put(&mut out, l);
        }
        for &(t, s, l) in &self.deferred {
            put(&mut out, t);
            put(&mut out, s);
            put(&mut out, l);
        }
        out
    }

    /// Parses one chunk (structure only; [`MapPhys::chain_trees`] validates the ranges).
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader::new(b, MAP_MAGIC, "metaslab map")?;
        let (vdev, ms_index, start_bytes, size_bytes, flush_txg, chunk) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let (f, d) = (r.u64()?, r.u64()?);
        let next = r.bp()?;
        let fits = |n: u64, each: usize| n <= (r.remaining() / each) as u64;
        if !fits(f, MAP_FREE_BYTES) || !fits(d, MAP_DEFERRED_BYTES) {
            return Err(bad(format!("metaslab map: counts {f}/{d} exceed the block")));
        }
        let (f, d) = (f as usize, d as usize);
        if f.checked_mul(MAP_FREE_BYTES)
            .and_then(|a| a.checked_add(d.checked_mul(MAP_DEFERRED_BYTES)?))
            .is_none_or(|n| n > r.remaining())
        {
            return Err(bad("metaslab map: range arrays run past the end"));
        }
        let mut free = Vec::with_capacity(f);
        for _ in 0..f {
            free.push((r.u64()?, r.u64()?));
        }
        let mut deferred = Vec::with_capacity(d);
        for _ in 0..d {
            deferred.push((r.u64()?, r.u64()?, r.u64()?));
        }
        r.finish()?;
        Ok(MapPhys {
            vdev,
            ms_index,
            start_bytes,
            size_bytes,
            flush_txg,
            chunk,
            next,
            free,
            deferred,
        })
    }

    /// Validates the ranges of a whole chain (non-empty, `align_bytes`-aligned, inside
    /// the metaslab `[start_bytes, +size_bytes)`, free ranges sorted and merged across
    /// chunks, nothing overlapping) and builds the trees.
    pub fn chain_trees(chunks: &[MapPhys], start_bytes: u64, size_bytes: u64, align_bytes: u64) -> Result<(RangeTree, BTreeMap<u64, RangeTree>), Corrupt> {
        let end = start_bytes.checked_add(size_bytes).ok_or_else(|| bad("metaslab map: bounds overflow"))?;
        let check = |what: &str, s: u64, l: u64| {
            if l == 0 || !s.is_multiple_of(align_bytes) || !l.is_multiple_of(align_bytes) {
                return Err(bad(format!("metaslab map: {what} range [{s}, +{l}) empty or not {align_bytes}-aligned")));
            }
            match s.checked_add(l) {
                Some(e) if s >= start_bytes && e <= end => Ok(e),
                _ => Err(bad(format!("metaslab map: {what} range [{s}, +{l}) outside the metaslab"))),
            }
        };
        let mut free = RangeTree::new();
        let mut prev_end = None;
        for &(s, l) in chunks.iter().flat_map(|c| c.free.iter()) {
            let e = check("free", s, l)?;
            if prev_end.is_some_and(|p| s <= p) {
                return Err(bad(format!("metaslab map: free range at {s} unsorted, overlapping or unmerged")));
            }
            prev_end = Some(e);
            free.add(s, l);
        }
        let mut deferred: BTreeMap<u64, RangeTree> = BTreeMap::new();
        let mut all = free.clone();
        for &(t, s, l) in chunks.iter().flat_map(|c| c.deferred.iter()) {
            check("deferred", s, l)?;
            if !all.try_add(s, l) {
                return Err(bad(format!("metaslab map: deferred range at {s} (txg {t}) overlaps")));
            }
            deferred.entry(t).or_default().add(s, l);
        }
        Ok((free, deferred))
    }
}

impl LogBlockPhys {
    /// Encoded size of a block of `records` records.
    pub fn encoded_bytes(records: usize) -> usize {
        LOG_HEADER_BYTES + records * LOG_RECORD_BYTES
    }

    /// Serializes (layout in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::encoded_bytes(self.records.len()));
        put(&mut out, LOG_MAGIC);
        put(&mut out, ONDISK_VERSION);
        put(&mut out, self.txg);
        put(&mut out, self.records.len() as u64);
        put_bp(&mut out, &self.prev);
        for rec in &self.records {
            put(&mut out, rec.start_bytes);
            put(&mut out, rec.len_bytes);
            put(&mut out, rec.vdev as u64 | (rec.kind.to_u8() as u64) << 32);
            put(&mut out, rec.txg);
        }
        out
    }

    /// Parses a log block; records are checked for a known kind, zero reserved bytes,
    /// non-zero length and no overflow (legality is checked by the replay).
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let mut r = Reader::new(b, LOG_MAGIC, "log block")?;
        let txg = r.u64()?;
        let n = r.u64()?;
        let prev = r.bp()?;
        if n > (r.remaining() / LOG_RECORD_BYTES) as u64 {
            return Err(bad(format!("log block: {n} records do not fit")));
        }
        let mut records = Vec::with_capacity(n as usize);
        for i in 0..n {
            let (start_bytes, len_bytes, word, rtxg) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let kind = RecordKind::from_u8((word >> 32) as u8).filter(|_| word >> 40 == 0);
            let Some(kind) = kind else {
                return Err(bad(format!("log block txg {txg}: record {i}: bad kind word {word:#x}")));
            };
            if len_bytes == 0 || start_bytes.checked_add(len_bytes).is_none() {
                return Err(bad(format!("log block txg {txg}: record {i}: bad range [{start_bytes}, +{len_bytes})")));
            }
            records.push(LogRecord {
                vdev: word as u32,
                kind,
                start_bytes,
                len_bytes,
                txg: rtxg,
            });
        }
        r.finish()?;
        Ok(LogBlockPhys { txg, prev, records })
    }
}
