//! Batched block reads with I/O aggregation: the read twin of `aggregate.rs`.
//!
//! Theory: the DMU's deferred fill (see `tarn_dmu::objset`) reads, at txg sync, the
//! old version of every record that was only partly overwritten in the txg. Those
//! blocks were written by earlier txgs, often next to each other, so reading them one
//! by one pays a device round trip per block. [`Zio::read_blocks`] sorts the blocks by
//! (top-level vdev, offset), merges blocks whose first DVAs are adjacent on a leaf or
//! mirror vdev into runs of at most [`crate::AGGREGATE_MAX_BYTES`] (OpenZFS
//! `vdev_queue.c` aggregates reads the same way), issues one device read per run from
//! a few workers ([`tarn_vdev::Vdev::read_run`]: `O_DIRECT` into a reused aligned
//! buffer, so the host's page cache neither copies nor keeps the bytes), and then
//! verifies every block of the run against its own checksum and decompresses it.
//! Only raw bytes come back from the run read; the checksum of each block is the
//! oracle, exactly as for a single read.
//!
//! Invariants: a block is returned only after its checksum verified (DESIGN invariant
//! 6). A block that does not verify inside a run (a damaged sector, a mirror side that
//! missed the txg) or whose run failed is read again alone with [`Zio::read_block`],
//! which tries every copy and every mirror side, heals bad copies and counts the
//! error, so a batched read is never weaker than single reads. Holes read as zeros.
//!
//! The ARC is consulted first (a record written by the previous txg is usually still
//! there), but neither counted, moved nor filled: the callers read blocks that their
//! own txg is about to replace, or a stream's blocks, which are no application's
//! reads. [`Zio::read_blocks`] only peeks at it; [`Zio::take_blocks`], the fill's,
//! takes the cached buffer out ([`crate::arc::ArcCache::take`]), so that the fill can
//! turn the old block's buffer into the new record in place instead of copying 128 KiB
//! into a fresh allocation. Every block read from a device counts in `blocks_read`.
//!
//! While the intent log is active (module `queue`), runs are at most
//! `queue::ASYNC_PIECE_BYTES` and each device read takes the pool's
//! asynchronous-I/O gate, one at a time.
//!
//! [`Zio::take_block`] is the same take for one block, on the caller's thread (the
//! sync's read of an indirect block it rewrites).
//!
//! The prefetch workers ([`Zio::prefetch_blocks`]) use the same read for a stream's
//! next blocks, and there each block read from a device does enter the ARC, as a
//! prefetch (`Zio::prefetch_read`).
//!
//! Called by: dmu (phase 2 of a txg sync, the fill of partial records; phase 3, the
//! indirect blocks), send (its read-ahead of data blocks) and zio's prefetch workers.

use crate::arc::Access;
use crate::queue::ASYNC_PIECE_BYTES;
use crate::{CachePolicy, Result, Zio, AGGREGATE_MAX_BYTES};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::{BlkPtr, Compression};
use tarn_vdev::VdevKind;

/// The outcome of one block's read: its logical bytes or the error.
type BlockRead = Result<Arc<Vec<u8>>>;

/// What a batched read does with the cache.
#[derive(Clone, Copy)]
enum Mode {
    /// [`Zio::read_blocks`]: use a cached copy, never fill the cache.
    Peek,
    /// [`Zio::take_blocks`]: take cached copies out, never fill the cache.
    Take,
    /// [`Zio::prefetch_read`]: put what is read in the cache as prefetches.
    Prefetch(CachePolicy),
}

impl Zio {
    /// Read and verify many blocks as [`Zio::read_block`] would, merging blocks that
    /// are adjacent on disk into larger device reads. `threads` (1..=8) issue the runs
    /// and verify in parallel. Returns one result per block, in the order given; the
    /// memory used is the blocks' physical bytes plus one run buffer per worker.
    ///
    /// Errors per block, as [`Zio::read_block`]: `Checksum` when no copy verified,
    /// `Io` when every copy failed, `Corrupt` when a verified block fails to
    /// decompress.
    pub fn read_blocks(&self, bps: &[BlkPtr], threads: usize) -> Vec<Result<Arc<Vec<u8>>>> {
        self.read_blocks_with(bps, threads, Mode::Peek)
    }

    /// [`Zio::read_blocks`] for blocks about to be replaced (the deferred fill): a
    /// block found in the ARC leaves it ([`crate::arc::ArcCache::take`]), so the
    /// returned buffer is usually the only reference to its bytes and can be changed
    /// in place after `Arc::try_unwrap`. No block it reads from a device enters the
    /// ARC (`read_blocks` caches those it has to read alone). Same results and errors
    /// as `read_blocks`.
    pub fn take_blocks(&self, bps: &[BlkPtr], threads: usize) -> Vec<Result<Arc<Vec<u8>>>> {
        self.read_blocks_with(bps, threads, Mode::Take)
    }

    /// The prefetch workers' read of a stream's next blocks (see
    /// [`Zio::prefetch_blocks`]): [`Zio::read_blocks`] on the calling thread, each
    /// block read from a device put in the cache as a prefetch (when `cache` keeps its
    /// kind) instead of returned. A block that does not verify in its run is read
    /// alone as [`Zio::read_block_as`] would, with every copy.
    pub(crate) fn prefetch_read(&self, bps: &[BlkPtr], cache: CachePolicy) {
        self.read_blocks_with(bps, 1, Mode::Prefetch(cache));
    }

    /// [`Zio::take_blocks`] of one block, on the calling thread: the cached buffer
    /// leaves the ARC, or the block is read, verified and decompressed like
    /// [`Zio::read_block`] without entering the cache. For an indirect block its txg
    /// sync is about to rewrite: the ARC usually held the only other reference, so the
    /// caller can `Arc::try_unwrap` it and edit the bytes in place instead of copying
    /// 128 KiB into fresh memory (OpenZFS `arc_release` detaches a dirtied dbuf's
    /// buffer from the hash table for the same reason). Holes read as zeros. Errors as
    /// [`Zio::read_block`].
    pub fn take_block(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.take_blocks(std::slice::from_ref(bp), 1).pop().expect("one result per block")
    }

    fn read_blocks_with(&self, bps: &[BlkPtr], threads: usize, mode: Mode) -> Vec<Result<Arc<Vec<u8>>>> {
        let n = bps.len();
        let mut out: Vec<Option<Result<Arc<Vec<u8>>>>> = (0..n).map(|_| None).collect();
        // (vdev, offset, asize, index) of the first DVA of every non-hole block.
        let mut order: Vec<(u32, u64, u64, usize)> = Vec::with_capacity(n);
        for (i, bp) in bps.iter().enumerate() {
            if bp.is_hole() {
                out[i] = Some(Ok(Arc::new(vec![0u8; bp.lsize_bytes as usize])));
            } else if let Some(d) = match mode {
                Mode::Take => self.arc.take(&self.arc_key(bp)),
                Mode::Peek | Mode::Prefetch(_) => self.arc.peek(&self.arc_key(bp)),
            } {
                // Verified when it entered the cache, as `read_block` trusts it.
                out[i] = Some(Ok(d));
            } else {
                let d = bp.dva[0];
                order.push((d.vdev, d.offset_bytes, d.asize_bytes.max(bp.psize_bytes as u64), i));
            }
        }
        order.sort_unstable_by_key(|&(v, off, _, _)| (v, off));
        // A snapshot of the vdev vector, so that the workers may fall back to
        // `read_block` (which takes the vdev lock itself) without a nested lock.
        let vdevs = self.vdevs();
        let aggregatable = |v: u32| {
            vdevs
                .get(v as usize)
                .is_some_and(|t| matches!(t.kind(), VdevKind::Leaf(_) | VdevKind::Mirror(_)))
        };
        // Runs of adjacent blocks: (vdev, offset, length, members as indexes in `order`).
        // While the intent log is active (module `queue`), runs are at most
        // `ASYNC_PIECE_BYTES` and every device read goes through the gate, one at a
        // time, so a log write does not wait behind them.
        let yielding = self.queue.sync_active();
        let run_max = if yielding { ASYNC_PIECE_BYTES as u64 } else { AGGREGATE_MAX_BYTES };
        let mut runs: Vec<(u32, u64, u64, Vec<usize>)> = Vec::new();
        for (k, &(v, off, asize, _)) in order.iter().enumerate() {
            let extend = runs
                .last()
                .is_some_and(|(rv, roff, rlen, _)| *rv == v && aggregatable(v) && off == roff + rlen && rlen + asize <= run_max);
            if extend {
                let r = runs.last_mut().unwrap();
                r.2 += asize;
                r.3.push(k);
            } else {
                runs.push((v, off, asize, vec![k]));
            }
        }
        let workers = if yielding { 1 } else { threads.clamp(1, 8).min(runs.len().max(1)) };
        // Worker `w` of `workers`: issue and verify every `workers`-th run from `w`.
        let work = |w: usize| {
            let mut got = Vec::new();
            for (v, off, len, members) in runs.iter().skip(w).step_by(workers) {
                // One device read for the run; `None` when it failed (every
                // member is then read alone below).
                // (A single block on a leaf or mirror is read this way too while
                // yielding, so that its read also takes the gate; one that fails to
                // verify is read again below with every copy.)
                let raw = if members.len() > 1 || (yielding && aggregatable(*v)) {
                    vdevs
                        .get(*v as usize)
                        .and_then(|t| self.queue.gated(|| t.read_run(*off, *len, &self.run_buffers)).ok())
                } else {
                    None
                };
                for &k in members {
                    let (_, boff, _, i) = order[k];
                    let bp = &bps[i];
                    let from_run = raw.as_ref().and_then(|raw| {
                        let at = (boff - off) as usize;
                        let phys = raw.get(at..at + bp.psize_bytes as usize)?;
                        (bp.checksum_alg.compute(phys) == bp.checksum).then_some(phys)
                    });
                    let r = match (from_run, mode) {
                        (Some(phys), Mode::Prefetch(cache)) => {
                            self.blocks_read.fetch_add(1, Ordering::Relaxed);
                            self.logical_of_phys(bp, phys.to_vec()).map(|(logical, stored)| {
                                let meta = crate::bp_is_metadata(bp);
                                if cache.caches(meta) {
                                    self.arc.insert_read_stored(self.arc_key(bp), stored, meta, Access::Prefetch);
                                }
                                logical
                            })
                        }
                        (Some(phys), _) => {
                            self.blocks_read.fetch_add(1, Ordering::Relaxed);
                            if bp.compression == Compression::Off && phys.len() >= bp.lsize_bytes as usize {
                                Ok(Arc::new(phys[..bp.lsize_bytes as usize].to_vec()))
                            } else {
                                bp.compression.decompress(phys, bp.lsize_bytes as usize).map(Arc::new).map_err(Into::into)
                            }
                        }
                        // Alone, or not verified in its run: the full
                        // single-block path, with every copy, healing and
                        // error counting.
                        // (The fill's blocks stay out of the cache
                        // there too: they are about to be replaced.)
                        (None, Mode::Take) => self.read_block_as(bp, Access::Demand, CachePolicy::None),
                        (None, Mode::Prefetch(cache)) => self.read_block_as(bp, Access::Prefetch, cache),
                        (None, Mode::Peek) => self.read_block(bp),
                    };
                    got.push((i, r));
                }
                // A run of one large block (while yielding) is not kept.
                if let Some(raw) = raw.filter(|r| r.capacity() as u64 <= AGGREGATE_MAX_BYTES) {
                    self.run_buffers.give(raw);
                }
            }
            got
        };
        // One worker (or nothing left to read after the ARC) needs no thread of its own.
        let results: Vec<Vec<(usize, BlockRead)>> = if workers == 1 {
            vec![work(0)]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..workers).map(|w| s.spawn(move || work(w))).collect();
                handles.into_iter().map(|h| h.join().expect("batched read")).collect()
            })
        };
        for (i, r) in results.into_iter().flatten() {
            out[i] = Some(r);
        }
        out.into_iter().map(|r| r.expect("every block has a result")).collect()
    }
}
