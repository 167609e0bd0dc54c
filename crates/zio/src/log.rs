//! Raw block I/O for the intent log.
//!
//! Theory: log blocks do not go through the compress/checksum/block-pointer pipeline.
//! Each carries its own checksum and chain identity (`tarn_phys::zil`), and its
//! location is promised by the block before it, so the ZIL needs the four primitive
//! steps separately: allocate one DVA (on a log vdev when the pool has one, ZFS's
//! `zio_alloc_zil`), write bytes at it, flush only the leaves of that top-level vdev
//! (one device round trip, not the whole pool's), and read it back with a validator.
//! Freeing and claiming go through the same space map as every other block: a log
//! block allocated in open context is recorded as allocated by the next space-map
//! write, and import claims the blocks of chains that outlived their space map.
//!
//! Every write and flush here is the intent log's, so each counts as synchronous I/O
//! while it runs (`queue::IoQueue::sync_io`): the pool's bulk I/O yields to it.
//!
//! Called by: the zil crate.

use crate::{Result, Zio, ZioError};
use std::sync::atomic::Ordering;
use tarn_phys::zil::LWB_MIN_SIZE_BYTES;
use tarn_phys::Dva;

impl Zio {
    /// Allocate one block of `size_bytes` for the intent log (ZFS `zio_alloc_zil`): on a
    /// separate log vdev when the pool has a usable one not in `avoid` (striped over
    /// several), else on the normal class provided that at least
    /// `normal_reserve_bytes` stay free there afterwards (the space promised to dirty
    /// data and the sync's own metadata: a log block must never make a txg sync run
    /// out of space). Errors: `NoSpace` (the caller falls back to a txg sync).
    pub fn alloc_log_block(&self, size_bytes: u64, normal_reserve_bytes: u64, avoid: &[u32]) -> Result<Dva> {
        let vdevs = self.vdevs.read();
        let mut space = self.space.lock();
        let take = |space: &mut tarn_metaslab::SpaceMap, v: u32| {
            let asize = vdevs[v as usize].psize_to_asize(size_bytes);
            space.vdevs[v as usize].alloc(asize).map(|off| Dva {
                vdev: v,
                asize_bytes: asize,
                offset_bytes: off,
            })
        };
        let mut tried: Vec<u32> = avoid.to_vec();
        while let Some(v) = space.pick_log_vdev(&tried) {
            tried.push(v);
            if vdevs.get(v as usize).is_some_and(|t| t.state().is_usable()) {
                if let Some(dva) = take(&mut space, v) {
                    return Ok(dva);
                }
            }
        }
        if space.free_bytes() < normal_reserve_bytes.saturating_add(2 * size_bytes) {
            return Err(ZioError::NoSpace);
        }
        let mut tried: Vec<u32> = Vec::new();
        while let Some(v) = space.pick_vdev(&tried) {
            if let Some(dva) = take(&mut space, v) {
                return Ok(dva);
            }
            tried.push(v);
        }
        Err(ZioError::NoSpace)
    }

    /// True when the pool has a usable separate log vdev (a SLOG) for log blocks.
    pub fn has_slog(&self) -> bool {
        let vdevs = self.vdevs.read();
        let space = self.space.lock();
        space
            .vdevs
            .iter()
            .enumerate()
            .any(|(i, s)| s.class() == tarn_metaslab::AllocClass::Log && s.is_allocatable() && vdevs.get(i).is_some_and(|t| t.state().is_usable()))
    }

    /// The top-level vdev `dva` names. Errors: `Io` when there is none (a log block
    /// pointer read back from a chain may name any vdev).
    fn log_top(&self, dva: &Dva) -> Result<std::sync::Arc<tarn_vdev::Vdev>> {
        let top = self.vdevs.read().get(dva.vdev as usize).cloned();
        top.ok_or_else(|| ZioError::Io(format!("no top-level vdev {}", dva.vdev)))
    }

    /// Write `data` (its length is the block size) at `dva`; not durable until
    /// [`Zio::flush_vdevs`]. Errors: `Io` when no copy of the write landed.
    pub fn write_raw(&self, dva: &Dva, data: &[u8]) -> Result<()> {
        let top = self.log_top(dva)?;
        let _sync = self.queue.sync_io();
        top.write(dva.offset_bytes, data).map_err(|e| ZioError::Io(e.to_string()))?;
        self.blocks_written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many leading bytes of a `size_bytes` log block at `dva` a write must cover
    /// so that its first `used_bytes` land where a read of the whole block finds
    /// them: `used_bytes` rounded up to whole sectors (at least the 4 KiB of
    /// [`LWB_MIN_SIZE_BYTES`]) on a leaf or
    /// mirror top-level vdev, which lay a block's bytes out in order; the whole block
    /// on raidz, whose columns depend on the length written, and on an unknown vdev.
    /// Never more than `size_bytes`. (OpenZFS writes an lwb's used part the same way:
    /// `zil_lwb_write_issue` rounds `lwb_nused` up to `ZIL_MIN_BLKSZ`.)
    pub fn log_write_len(&self, dva: &Dva, used_bytes: usize, size_bytes: usize) -> usize {
        let Ok(top) = self.log_top(dva) else { return size_bytes };
        match top.kind() {
            tarn_vdev::VdevKind::Leaf(_) | tarn_vdev::VdevKind::Mirror(_) => {
                let want = used_bytes.max(1).next_multiple_of(LWB_MIN_SIZE_BYTES as usize) as u64;
                (top.psize_to_asize(want) as usize).min(size_bytes)
            }
            _ => size_bytes,
        }
    }

    /// [`Zio::write_raw`] and the flush of the block's top-level vdev in one step, each
    /// mirror side writing and then flushing on its own ([`tarn_vdev::Vdev::write_flush`]):
    /// durable when it returns Ok. For a commit whose only block is this one. Errors:
    /// `Io` when no copy both landed and flushed.
    pub fn write_raw_flushed(&self, dva: &Dva, data: &[u8]) -> Result<()> {
        let top = self.log_top(dva)?;
        let _sync = self.queue.sync_io();
        top.write_flush(dva.offset_bytes, data).map_err(|e| ZioError::Io(e.to_string()))?;
        self.blocks_written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Read `size_bytes` at `dva`, accepting the first copy (mirror side, raidz
    /// reconstruction) for which `verify` returns true; bad copies are rewritten by
    /// the vdev. Errors: `Io`/`Checksum` as the vdev reports them.
    pub fn read_raw(&self, dva: &Dva, size_bytes: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<Vec<u8>> {
        let top = self.log_top(dva)?;
        top.read(dva.offset_bytes, size_bytes, verify).map_err(|e| match e {
            tarn_vdev::VdevError::Checksum { .. } => ZioError::Checksum {
                vdev: dva.vdev,
                offset_bytes: dva.offset_bytes,
                birth_txg: 0,
            },
            other => ZioError::Io(other.to_string()),
        })
    }

    /// Flush the leaves of the given top-level vdevs, in parallel. Errors: `Io` when a
    /// top-level vdev had no leaf that flushed.
    pub fn flush_vdevs(&self, ids: &[u32]) -> Result<()> {
        let _sync = self.queue.sync_io();
        self.flush_tops(Some(ids))
    }

    /// Free one DVA, deferred like every other free (see [`Zio::free_block`]). A range
    /// that is not allocated (a log block claimed twice) is left alone and reported.
    pub fn free_dva(&self, dva: &Dva, txg: u64) {
        self.free_log_dvas(&mut [*dva], txg);
    }

    /// [`Zio::free_dva`] of many log blocks at once, as a txg sync frees the blocks its
    /// chain no longer needs (hundreds of them under an fsync loop): sorted, with
    /// blocks that touch on one top-level vdev freed as one range (a chain's blocks
    /// are mostly allocated one after the other), under one hold of the space lock.
    /// The space maps record the same transitions as block-by-block frees, in fewer
    /// records. A merged range that cannot be freed whole is freed block by block, so
    /// a block that is not allocated is refused and counted alone, as by `free_dva`.
    pub fn free_log_dvas(&self, dvas: &mut [Dva], txg: u64) {
        dvas.sort_unstable_by_key(|d| (d.vdev, d.offset_bytes));
        let end = |d: &Dva| d.offset_bytes.checked_add(d.asize_bytes);
        let mut space = self.space.lock();
        for run in dvas.chunk_by(|a, b| a.vdev == b.vdev && end(a) == Some(b.offset_bytes)) {
            let Some(vs) = space.vdevs.get_mut(run[0].vdev as usize) else { continue };
            let whole = run.len() > 1 && end(&run[run.len() - 1]).is_some_and(|e| vs.try_free(txg, run[0].offset_bytes, e - run[0].offset_bytes));
            if whole {
                continue;
            }
            for d in run {
                if !vs.try_free(txg, d.offset_bytes, d.asize_bytes) {
                    self.refused_log_free(d);
                }
            }
        }
    }

    /// Count and report the free of a log block that is not allocated (leaked space,
    /// never a double free).
    fn refused_log_free(&self, dva: &Dva) {
        self.refused_frees.fetch_add(1, Ordering::Relaxed);
        tracing::error!("log block {dva:?} freed but not allocated; ignored");
    }

    /// Free one DVA at once (it was never referenced by anything durable). A range
    /// that is not allocated is left alone and counted, as in [`Zio::free_dva`].
    pub fn free_dva_now(&self, dva: &Dva) {
        let mut space = self.space.lock();
        let freed = space
            .vdevs
            .get_mut(dva.vdev as usize)
            .is_some_and(|vs| vs.try_free_now(dva.offset_bytes, dva.asize_bytes));
        if !freed {
            self.refused_log_free(dva);
        }
    }

    /// Mark one DVA allocated if it is free (import claims the blocks of a log chain
    /// written after the last space-map sync). Returns true when it was free.
    pub fn claim_dva(&self, dva: &Dva) -> bool {
        let mut space = self.space.lock();
        match space.vdevs.get_mut(dva.vdev as usize) {
            Some(vs) => vs.claim(dva.offset_bytes, dva.asize_bytes),
            None => false,
        }
    }

    /// Whether every byte of one DVA is allocated (neither free nor deferred): a log
    /// block whose allocation an earlier txg already synced.
    pub fn dva_allocated(&self, dva: &Dva) -> bool {
        let space = self.space.lock();
        space
            .vdevs
            .get(dva.vdev as usize)
            .is_some_and(|vs| vs.is_allocated(dva.offset_bytes, dva.asize_bytes))
    }
}
