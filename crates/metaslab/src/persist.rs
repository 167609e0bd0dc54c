//! Persistence of a [`SpaceMap`]: one txg's space structures ([`SpaceMap::sync_plan`])
//! and import ([`SpaceMap::load`]). See the crate theory statement for the design and
//! `ondisk` for the layouts. This module does no I/O: the caller (spa) allocates
//! through a callback, writes the returned blocks, and reads through a callback.

use crate::ondisk::*;
use crate::{AllocClass, Corrupt, LogRecord, SpaceMap, VdevSpace, DIR_PAGES, FLUSH_PER_TXG, LOG_BLOCKS_TARGET, LOG_CHAIN_BLOCKS_MAX};
use std::collections::BTreeSet;
use tarn_phys::{BlkPtr, ChecksumAlg, Compression, Dva, ObjectType};

/// Allocation unit of the space-structure blocks' physical size.
const BLOCK_ROUND_BYTES: u64 = 4096;

/// The simplest allocation callback for [`SpaceMap::sync_plan`]: one copy, on the
/// top-level vdev [`SpaceMap::pick_vdev`] chooses, rounded up to its allocation unit.
/// `None` when no vdev has room. For tests and benchmarks: the pool allocates the space
/// structures through zio, with ditto copies.
pub fn alloc_one_copy(sm: &mut SpaceMap, psize_bytes: u64) -> Option<[Dva; 3]> {
    let v = sm.pick_vdev(&[])?;
    let vs = &mut sm.vdevs[v as usize];
    let asize_bytes = psize_bytes.div_ceil(vs.align_bytes()) * vs.align_bytes();
    let offset_bytes = vs.alloc(asize_bytes)?;
    let mut d = [Dva::default(); 3];
    d[0] = Dva {
        vdev: v,
        asize_bytes,
        offset_bytes,
    };
    Some(d)
}

/// A top-level vdev as the pool config describes it (what import checks the root
/// against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VdevDims {
    /// Allocatable bytes (before rounding to the alignment).
    pub asize_bytes: u64,
    /// Allocation unit.
    pub align_bytes: u64,
    /// Class.
    pub class: AllocClass,
}

/// Why [`SpaceMap::load`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// A block decoded to something impossible.
    Corrupt(Corrupt),
    /// A block could not be read (every copy failed its checksum or I/O).
    Read {
        /// Which structure.
        what: &'static str,
        /// The reader's error.
        error: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Corrupt(c) => write!(f, "{}: {}", c.kind, c.detail),
            LoadError::Read { what, error } => write!(f, "{what} unreadable: {error}"),
        }
    }
}

impl From<Corrupt> for LoadError {
    fn from(c: Corrupt) -> Self {
        LoadError::Corrupt(c)
    }
}

fn corrupt(detail: impl Into<String>) -> LoadError {
    LoadError::Corrupt(Corrupt::new("space map", detail))
}

/// One block to write: its pointer (DVAs, checksum, birth) and its padded bytes.
#[derive(Debug, Clone)]
pub struct SyncBlock {
    /// Where it goes and how to verify it.
    pub bp: BlkPtr,
    /// Exactly `bp.psize_bytes` bytes.
    pub payload: Vec<u8>,
}

/// What one txg writes for space accounting: every block (children before the
/// blocks that point at them) and the root for the uberblock.
#[derive(Debug, Clone)]
pub struct SyncPlan {
    /// Blocks to write, all of them before the uberblock.
    pub blocks: Vec<SyncBlock>,
    /// The root (also the last entry of `blocks`).
    pub root: BlkPtr,
}

fn psize_for(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BLOCK_ROUND_BYTES).max(1) * BLOCK_ROUND_BYTES
}

fn seal(dva: [Dva; 3], mut payload: Vec<u8>, psize: u64, otype: ObjectType, txg: u64) -> SyncBlock {
    assert!(
        payload.len() as u64 <= psize,
        "space structure outgrew its allocation ({} > {psize})",
        payload.len()
    );
    payload.resize(psize as usize, 0);
    let bp = BlkPtr {
        dva,
        lsize_bytes: psize as u32,
        psize_bytes: psize as u32,
        otype,
        level: 0,
        checksum_alg: ChecksumAlg::Blake3,
        compression: Compression::Off,
        birth_txg: txg,
        phys_birth_txg: 0,
        dedup: false,
        fill: 1,
        checksum: ChecksumAlg::Blake3.compute(&payload),
    };
    SyncBlock { bp, payload }
}

/// Physical sizes of the chunks of a map whose entries take `entry_bytes`: full
/// [`MAP_CHUNK_MAX_BYTES`] chunks, then one for the rest. Each chunk gets one
/// deferred entry of slack, since entries of 16 and 24 bytes may leave up to 23
/// bytes of a chunk unused.
fn map_chunk_sizes(entry_bytes: usize) -> Vec<u64> {
    let room = MAP_CHUNK_MAX_BYTES - MAP_HEADER_BYTES - MAP_DEFERRED_BYTES;
    let mut out = Vec::new();
    let mut left = entry_bytes;
    loop {
        let here = left.min(room);
        out.push(psize_for(MAP_HEADER_BYTES + here + MAP_DEFERRED_BYTES));
        left -= here;
        if left == 0 {
            return out;
        }
    }
}

/// Bound on the chunks of one metaslab's map (import stops a longer chain): enough
/// for a deferred entry per allocation unit, plus slack.
fn map_chunks_max(size_bytes: u64, align_bytes: u64) -> usize {
    let units = (size_bytes / align_bytes.max(1)) as usize;
    units
        .saturating_mul(MAP_DEFERRED_BYTES)
        .div_ceil(MAP_CHUNK_MAX_BYTES - MAP_HEADER_BYTES - MAP_DEFERRED_BYTES)
        + 8
}

/// Metaslabs per directory page for a vdev of `ms_count` metaslabs.
pub(crate) fn per_page(ms_count: usize) -> usize {
    ms_count.div_ceil(DIR_PAGES).max(1)
}

impl SpaceMap {
    /// Frees every DVA of `bp` in `txg` (deferred), skipping holes and DVAs on vdevs
    /// that have become holes.
    fn free_bp(&mut self, bp: &BlkPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        for d in bp.dvas() {
            if let Some(vs) = self.vdevs.get_mut(d.vdev as usize) {
                if vs.class() != AllocClass::Hole {
                    vs.free(txg, d.offset_bytes, d.asize_bytes);
                }
            }
        }
    }

    /// Builds txg `txg`'s space structures (see the crate theory statement): frees
    /// the blocks they replace, allocates the new ones with `alloc(self, psize_bytes)`
    /// (which must allocate through this map, e.g. `zio`'s DVA allocator, and return
    /// `None` when out of space), then drains every pending record into log blocks
    /// and encodes the flushed maps, the changed directory pages and a new root. The
    /// caller writes [`SyncPlan::blocks`] and points the uberblock at
    /// [`SyncPlan::root`]. Call with the space lock held throughout. `Err(psize)`
    /// when an allocation failed (the pool is out of space; the map must not be
    /// synced again: the caller suspends).
    pub fn sync_plan(&mut self, txg: u64, alloc: &mut dyn FnMut(&mut SpaceMap, u64) -> Option<[Dva; 3]>) -> Result<SyncPlan, u64> {
        assert!(txg > 0, "sync_plan: txg 0");
        let mut dirty_pages: BTreeSet<(usize, usize)> = BTreeSet::new();
        // 1. Vdevs new since the last sync: every metaslab was free at the end of the
        //    previous txg; their whole directory is written (so stale records of a
        //    vdev id that was a hole never apply to them).
        for (vi, v) in self.vdevs.iter_mut().enumerate() {
            if v.class() == AllocClass::Hole {
                v.fresh = false;
                v.page_bps.clear();
                continue;
            }
            if v.page_bps.len() != DIR_PAGES {
                v.page_bps = vec![BlkPtr::HOLE; DIR_PAGES];
            }
            if v.fresh {
                v.fresh = false;
                for m in &mut v.ms {
                    m.flush_txg = txg - 1;
                    m.map_bps.clear();
                    m.unflushed_txg = None;
                }
                dirty_pages.extend((0..DIR_PAGES).map(|p| (vi, p)));
            }
        }
        // 2. Which metaslabs to flush: the oldest unflushed first; more when the log
        //    is longer than its target.
        let mut cands: Vec<(u64, usize, usize)> = Vec::new();
        for (vi, v) in self.vdevs.iter().enumerate() {
            for (mi, m) in v.ms.iter().enumerate() {
                if let Some(t) = m.unflushed_txg {
                    cands.push((t, vi, mi));
                }
            }
        }
        cands.sort_unstable();
        let horizon = match self.log_blocks.len().checked_sub(LOG_BLOCKS_TARGET) {
            Some(excess) if excess > 0 => self.log_blocks[excess].0,
            _ => 0,
        };
        let flush: Vec<(usize, usize)> = cands
            .iter()
            .enumerate()
            .filter(|&(k, &(t, _, _))| k < FLUSH_PER_TXG || t < horizon)
            .map(|(_, &(_, vi, mi))| (vi, mi))
            .collect();
        let flush_set: BTreeSet<(usize, usize)> = flush.iter().copied().collect();
        // 3. Free the maps they replace.
        for &(vi, mi) in &flush {
            for old in std::mem::take(&mut self.vdevs[vi].ms[mi].map_bps) {
                self.free_bp(&old, txg);
            }
            dirty_pages.insert((vi, mi / per_page(self.vdevs[vi].ms.len())));
        }
        // 4. Truncate the log: blocks older than every unflushed record go.
        let tail = cands
            .iter()
            .filter(|&&(_, vi, mi)| !flush_set.contains(&(vi, mi)))
            .map(|&(t, _, _)| t)
            .min()
            .unwrap_or(txg)
            .min(txg);
        while let Some(&(t, bp)) = self.log_blocks.front() {
            if t >= tail {
                break;
            }
            self.log_blocks.pop_front();
            self.free_bp(&bp, txg);
        }
        // 5. Free the pages and the root they replace.
        for &(vi, p) in &dirty_pages {
            let old = self.vdevs[vi].page_bps[p];
            self.free_bp(&old, txg);
        }
        let old_root = self.root_bp;
        self.free_bp(&old_root, txg);
        for bp in std::mem::take(&mut self.retired) {
            self.free_bp(&bp, txg);
        }

        // 6. Sizes, as upper bounds: every block allocated below adds at most 3
        //    records (one per DVA) and splits at most 3 free ranges. The chunk
        //    counts and the log size depend on each other: iterate to a fixed point
        //    (all of them only grow).
        let pending: usize = self.pending_records();
        let entry_bytes: Vec<usize> = flush
            .iter()
            .map(|&(vi, mi)| {
                let m = &self.vdevs[vi].ms[mi];
                let deferred: usize = m.deferred.values().map(|t| t.len()).sum();
                self.vdevs[vi].map_free_ranges(mi).len() * MAP_FREE_BYTES + deferred * MAP_DEFERRED_BYTES
            })
            .collect();
        let mut log_count = 1usize;
        let mut chunk_count = vec![1usize; flush.len()];
        let extra_ranges = loop {
            let blocks = chunk_count.iter().sum::<usize>() + dirty_pages.len() + 1 + log_count;
            let extra = 3 * blocks;
            let logs = (pending + extra).div_ceil(LOG_RECORDS_PER_BLOCK).max(1);
            let chunks: Vec<usize> = entry_bytes.iter().map(|&e| map_chunk_sizes(e + extra * MAP_FREE_BYTES).len()).collect();
            if logs == log_count && chunks == chunk_count {
                break extra;
            }
            log_count = log_count.max(logs);
            chunk_count = chunks.iter().zip(&chunk_count).map(|(&a, &b)| a.max(b)).collect();
        };
        let map_psize: Vec<Vec<u64>> = entry_bytes
            .iter()
            .zip(&chunk_count)
            .map(|(&e, &k)| {
                let mut sizes = map_chunk_sizes(e + extra_ranges * MAP_FREE_BYTES);
                sizes.resize(k, psize_for(MAP_HEADER_BYTES));
                sizes
            })
            .collect();
        let page_psize: Vec<u64> = dirty_pages
            .iter()
            .map(|&(vi, _)| psize_for(PagePhys::encoded_bytes(per_page(self.vdevs[vi].ms.len()))))
            .collect();
        let log_psize = psize_for(LogBlockPhys::encoded_bytes(LOG_RECORDS_PER_BLOCK.min(pending + extra_ranges)));
        let root_psize = psize_for(RootPhys::encoded_bytes(self.vdevs.len()));

        // 7. Allocate everything (these allocations are pending records too).
        let mut take = |sm: &mut SpaceMap, psize: u64| alloc(sm, psize).ok_or(psize);
        let mut map_dva = Vec::with_capacity(flush.len());
        for sizes in &map_psize {
            let mut dvas = Vec::with_capacity(sizes.len());
            for &p in sizes {
                dvas.push(take(self, p)?);
            }
            map_dva.push(dvas);
        }
        let mut page_dva = Vec::with_capacity(page_psize.len());
        for &p in &page_psize {
            page_dva.push(take(self, p)?);
        }
        let mut log_dva = Vec::with_capacity(log_count);
        for _ in 0..log_count {
            log_dva.push(take(self, log_psize)?);
        }
        let root_dva = take(self, root_psize)?;

        // 8. Drain: after this point nothing may change the map until the plan is done.
        let mut records: Vec<LogRecord> = Vec::new();
        for (vi, v) in self.vdevs.iter_mut().enumerate() {
            let pending = std::mem::take(&mut v.pending);
            for mut r in pending {
                r.vdev = vi as u32;
                if let Some(pieces) = v.pieces(r.start_bytes, r.len_bytes) {
                    for (mi, _, _) in pieces {
                        if !flush_set.contains(&(vi, mi)) {
                            v.ms[mi].unflushed_txg.get_or_insert(txg);
                        }
                    }
                }
                records.push(r);
            }
        }
        assert!(records.len() <= log_count * LOG_RECORDS_PER_BLOCK, "space-map log outgrew its blocks");

        let mut blocks = Vec::new();
        // 9. Condensed maps: the entries fill the chunks in order (free ranges, then
        //    deferred frees); chunks are sealed last to first, each pointing at the
        //    next.
        for ((&(vi, mi), dvas), sizes) in flush.iter().zip(map_dva).zip(map_psize) {
            // The state at the end of this txg: ranges allocated ahead are free in it.
            let free = self.vdevs[vi].map_free_ranges(mi);
            let m = &mut self.vdevs[vi].ms[mi];
            m.flush_txg = txg;
            m.unflushed_txg = None;
            let deferred: Vec<(u64, u64, u64)> = m.deferred.iter().flat_map(|(&t, tree)| tree.iter().map(move |(s, l)| (t, s, l))).collect();
            let mut chunks: Vec<MapPhys> = Vec::with_capacity(sizes.len());
            let (mut fi, mut di) = (0, 0);
            for (k, &psize) in sizes.iter().enumerate() {
                let mut room = psize as usize - MAP_HEADER_BYTES;
                let mut c = MapPhys {
                    vdev: vi as u64,
                    ms_index: mi as u64,
                    start_bytes: m.start_bytes(),
                    size_bytes: m.size_bytes(),
                    flush_txg: txg,
                    chunk: k as u64,
                    next: BlkPtr::HOLE,
                    free: Vec::new(),
                    deferred: Vec::new(),
                };
                while fi < free.len() && room >= MAP_FREE_BYTES {
                    c.free.push(free[fi]);
                    fi += 1;
                    room -= MAP_FREE_BYTES;
                }
                while fi == free.len() && di < deferred.len() && room >= MAP_DEFERRED_BYTES {
                    c.deferred.push(deferred[di]);
                    di += 1;
                    room -= MAP_DEFERRED_BYTES;
                }
                chunks.push(c);
            }
            assert!(fi == free.len() && di == deferred.len(), "metaslab map outgrew its chunks");
            let mut sealed = Vec::with_capacity(chunks.len());
            let mut next = BlkPtr::HOLE;
            for ((mut c, dva), &psize) in chunks.into_iter().zip(dvas).zip(&sizes).rev() {
                c.next = next;
                let b = seal(dva, c.encode(), psize, ObjectType::MetaslabMap, txg);
                next = b.bp;
                sealed.push(b);
            }
            sealed.reverse();
            m.map_bps = sealed.iter().map(|b| b.bp).collect();
            blocks.extend(sealed);
        }
        // 10. Directory pages.
        for ((&(vi, p), dva), psize) in dirty_pages.iter().zip(page_dva).zip(page_psize) {
            let v = &mut self.vdevs[vi];
            let per = per_page(v.ms.len());
            let first = (p * per).min(v.ms.len());
            let last = ((p + 1) * per).min(v.ms.len());
            let phys = PagePhys {
                vdev: vi as u64,
                page: p as u64,
                first_ms: first as u64,
                entries: v.ms[first..last]
                    .iter()
                    .map(|m| (m.flush_txg, m.map_bps.first().copied().unwrap_or(BlkPtr::HOLE)))
                    .collect(),
            };
            let b = seal(dva, phys.encode(), psize, ObjectType::MetaslabPage, txg);
            v.page_bps[p] = b.bp;
            blocks.push(b);
        }
        // 11. Log blocks, oldest first, each pointing at the one before.
        let mut chunks = records.chunks(LOG_RECORDS_PER_BLOCK);
        for dva in log_dva {
            let recs = chunks.next().unwrap_or(&[]).to_vec();
            let prev = self.log_blocks.back().map_or(BlkPtr::HOLE, |&(_, bp)| bp);
            let phys = LogBlockPhys { txg, prev, records: recs };
            let b = seal(dva, phys.encode(), log_psize, ObjectType::SpaceMapLog, txg);
            self.log_blocks.push_back((txg, b.bp));
            blocks.push(b);
        }
        // 12. Root.
        let root = RootPhys {
            txg,
            log_tail_txg: self.log_blocks.front().map_or(txg, |&(t, _)| t),
            log_head: self.log_blocks.back().map_or(BlkPtr::HOLE, |&(_, bp)| bp),
            vdevs: self
                .vdevs
                .iter()
                .map(|v| {
                    let mut pages = [BlkPtr::HOLE; DIR_PAGES];
                    if v.class() != AllocClass::Hole {
                        pages.copy_from_slice(&v.page_bps);
                    }
                    RootVdevPhys {
                        class: v.class(),
                        asize_bytes: if v.class() == AllocClass::Hole { 0 } else { v.asize_bytes() },
                        ms_shift: if v.class() == AllocClass::Hole { 0 } else { v.ms_shift() },
                        ms_count: v.ms.len() as u64,
                        pages,
                    }
                })
                .collect(),
        };
        let b = seal(root_dva, root.encode(), root_psize, ObjectType::MetaslabRoot, txg);
        let root_bp = b.bp;
        blocks.push(b);
        self.root_bp = root_bp;
        self.last_sync_bytes = blocks.iter().map(|b| b.payload.len() as u64).sum();
        for v in &self.vdevs {
            v.check();
        }
        Ok(SyncPlan { blocks, root: root_bp })
    }

    /// Rebuilds the map a sync wrote: reads the root at `root_bp` (through `read`,
    /// which returns a block's verified bytes), checks it against the config `dims`,
    /// loads every metaslab's condensed map and replays the log records newer than
    /// each one's flush txg. Every transition is checked, so a corrupt or
    /// inconsistent structure is an error, never a panic. Pending records are empty
    /// afterwards: the loaded state is what the disk holds.
    pub fn load(dims: &[VdevDims], root_bp: &BlkPtr, read: &mut dyn FnMut(&BlkPtr) -> Result<Vec<u8>, String>) -> Result<SpaceMap, LoadError> {
        let mut get = |what: &'static str, bp: &BlkPtr, otype: ObjectType| -> Result<Vec<u8>, LoadError> {
            if bp.otype != otype {
                return Err(corrupt(format!("{what}: pointer has type {:?}", bp.otype)));
            }
            read(bp).map_err(|error| LoadError::Read { what, error })
        };
        if root_bp.is_hole() {
            return Err(corrupt("the uberblock has no space map root"));
        }
        let root = RootPhys::decode(&get("space map root", root_bp, ObjectType::MetaslabRoot)?)?;
        if root.vdevs.len() != dims.len() {
            return Err(corrupt(format!("root lists {} vdevs, the config {}", root.vdevs.len(), dims.len())));
        }
        let mut vdevs = Vec::with_capacity(dims.len());
        for (vi, (rv, d)) in root.vdevs.iter().zip(dims).enumerate() {
            if rv.class != d.class {
                return Err(corrupt(format!("root gives vdev {vi} class {:?}, the config {:?}", rv.class, d.class)));
            }
            if d.class == AllocClass::Hole {
                if rv.asize_bytes != 0 || rv.ms_count != 0 || rv.pages.iter().any(|p| !p.is_hole()) {
                    return Err(corrupt(format!("hole vdev {vi} has space in the root")));
                }
                vdevs.push(VdevSpace::hole());
                continue;
            }
            if d.align_bytes == 0 {
                return Err(corrupt(format!("vdev {vi}: zero alignment")));
            }
            let usable = d.asize_bytes - d.asize_bytes % d.align_bytes;
            if rv.asize_bytes != usable {
                return Err(corrupt(format!("vdev {vi}: asize {} does not match the config's {usable}", rv.asize_bytes)));
            }
            if !(9..=40).contains(&rv.ms_shift) {
                return Err(corrupt(format!("vdev {vi}: ms_shift {}", rv.ms_shift)));
            }
            let count = usable.div_ceil(crate::ms_size_bytes(rv.ms_shift, d.align_bytes));
            if rv.ms_count != count || count > crate::MS_COUNT_LIMIT {
                return Err(corrupt(format!("vdev {vi}: {} metaslabs recorded, {count} expected", rv.ms_count)));
            }
            let mut v = VdevSpace::with_ms_shift(usable, d.align_bytes, rv.ms_shift);
            v.set_class(d.class);
            v.fresh = false;
            v.page_bps = rv.pages.to_vec();
            let per = per_page(v.ms.len());
            for (p, pbp) in rv.pages.iter().enumerate() {
                let first = (p * per).min(v.ms.len());
                let last = ((p + 1) * per).min(v.ms.len());
                if pbp.is_hole() {
                    continue;
                }
                let page = PagePhys::decode(&get("metaslab directory page", pbp, ObjectType::MetaslabPage)?)?;
                if page.vdev != vi as u64 || page.page != p as u64 || page.first_ms != first as u64 || page.entries.len() != last - first {
                    return Err(corrupt(format!("vdev {vi} page {p}: header does not match its place")));
                }
                for (k, &(flush_txg, map_bp)) in page.entries.iter().enumerate() {
                    let mi = first + k;
                    if flush_txg > root.txg {
                        return Err(corrupt(format!("vdev {vi} metaslab {mi}: flush txg {flush_txg} after the root's {}", root.txg)));
                    }
                    let m = &mut v.ms[mi];
                    m.flush_txg = flush_txg;
                    let mut chunks = Vec::new();
                    let mut bp = map_bp;
                    let chunks_max = map_chunks_max(m.size_bytes(), d.align_bytes);
                    while !bp.is_hole() {
                        if chunks.len() >= chunks_max {
                            return Err(corrupt(format!("vdev {vi} metaslab {mi}: map longer than {chunks_max} chunks")));
                        }
                        let c = MapPhys::decode(&get("metaslab map", &bp, ObjectType::MetaslabMap)?)?;
                        if c.vdev != vi as u64
                            || c.ms_index != mi as u64
                            || c.start_bytes != m.start_bytes()
                            || c.size_bytes != m.size_bytes()
                            || c.flush_txg != flush_txg
                            || c.chunk != chunks.len() as u64
                        {
                            return Err(corrupt(format!("vdev {vi} metaslab {mi}: map chunk {} does not match its place", chunks.len())));
                        }
                        m.map_bps.push(bp);
                        bp = c.next;
                        chunks.push(c);
                    }
                    if !chunks.is_empty() {
                        let (free, deferred) = MapPhys::chain_trees(&chunks, m.start_bytes(), m.size_bytes(), d.align_bytes)?;
                        m.set_state(free, deferred);
                    }
                }
            }
            v.recount();
            vdevs.push(v);
        }
        let mut sm = SpaceMap::new(vdevs);
        // The log, newest first, bounded.
        let mut chain: Vec<(u64, BlkPtr, LogBlockPhys)> = Vec::new();
        let mut bp = root.log_head;
        let mut newer_txg = root.txg;
        while !bp.is_hole() && bp.birth_txg >= root.log_tail_txg {
            if chain.len() >= LOG_CHAIN_BLOCKS_MAX {
                return Err(corrupt(format!("space-map log longer than {LOG_CHAIN_BLOCKS_MAX} blocks")));
            }
            if bp.birth_txg > newer_txg {
                return Err(corrupt(format!("log block of txg {} after one of txg {newer_txg}", bp.birth_txg)));
            }
            let block = LogBlockPhys::decode(&get("space-map log block", &bp, ObjectType::SpaceMapLog)?)?;
            if block.txg != bp.birth_txg {
                return Err(corrupt(format!("log block says txg {}, its pointer {}", block.txg, bp.birth_txg)));
            }
            newer_txg = block.txg;
            let prev = block.prev;
            chain.push((block.txg, bp, block));
            bp = prev;
        }
        for (txg, bp, block) in chain.into_iter().rev() {
            for rec in &block.records {
                let v = sm
                    .vdevs
                    .get_mut(rec.vdev as usize)
                    .ok_or_else(|| corrupt(format!("log txg {txg}: record for vdev {} of {}", rec.vdev, dims.len())))?;
                if v.class() == AllocClass::Hole {
                    continue; // a vdev removed since: its records no longer matter
                }
                v.replay(rec, txg).map_err(|e| corrupt(format!("log txg {txg}, vdev {}: {e}", rec.vdev)))?;
            }
            sm.log_blocks.push_back((txg, bp));
        }
        for v in &mut sm.vdevs {
            v.recount();
            v.check();
        }
        sm.root_bp = *root_bp;
        Ok(sm)
    }
}
