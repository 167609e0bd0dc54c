//! Early writes: whole records of the open txg written before the txg syncs.
//!
//! Theory. A txg sync writes every dirty record of its txg, so its length grows with
//! what writers did since the last one, and whatever waits for the sync (a snapshot, a
//! `zpool sync`, a writer at the dirty limit) waits for all of it. A record that a
//! streaming writer has just completed (a write reached its last byte) is usually
//! never written again in the txg; writing it at once, in open context, leaves the
//! sync only the pointer to install. OpenZFS does the same for one case, the blocks an
//! `fsync` writes through `dmu_sync`: the dirty record is "overridden" with the block
//! pointer already written (`dbuf_sync_leaf`, `DR_OVERRIDDEN`), and a later write
//! into the record undoes the override and frees the block (`dbuf_unoverride`). Here
//! the writer is a background thread per object set, fed by [`Objset::write`].
//!
//! Invariants:
//! - *An early block is used only for the exact bytes it holds*: it is kept with the
//!   `Arc` of the record it wrote, and phase 2 of the sync installs it only when the
//!   syncing record is that same `Arc` (a later write replaces or copies the record:
//!   `put_block` inserts a new one, `Arc::make_mut` copies a shared one). Every other
//!   early block — its record rewritten, cloned over, freed with its range or object,
//!   or its object set gone — is freed at once by the next sync (or by `Drop`): it was
//!   never referenced by a synced tree, so nothing can hold it.
//! - *An early block belongs to the txg of its record*: it is written under a hold on
//!   the open txg (taken without waiting, [`TxgGate::try_hold`]: no batch starts while a
//!   quiesce waits, but one under way delays a quiesce by its own write, at most
//!   [`EARLY_BATCH_RECORDS`] records), with that txg as its birth, and installed before
//!   the hold is released, so the record cannot have moved to syncing meanwhile.
//! - *Its allocation is logged with its own txg*: allocations are recorded in the
//!   space records the next txg sync drains; an early write runs only when the txg
//!   before its own has synced whole (no sync in progress: the next drain is its own
//!   txg's, which waits for the hold), so a crash can never find an early block
//!   allocated on disk by a txg that does not reference it.
//! - *Redundancy as at sync*: the write is kept only when no leaf failed a write and
//!   the vdev tree did not change while it ran ([`Zio::write_fence`]); otherwise it is
//!   freed and the sync writes the record (and records a leaf's missing txg).
//! - Nothing that only the syncing context may do: deduplicated and nopwrite datasets
//!   (their tables change at sync) and the MOS never write early; neither does a pool
//!   short of space (an early block and its dirty bytes would both count against it).
//!
//! Called by: [`Objset::write`] (queueing), phase 2 of the sync ([`Objset::early_take`])
//! and the object set's `Drop`.

use super::*;
use parking_lot::Condvar;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Weak;
use std::time::Duration;

/// Records waiting for the early writer at most; a writer that outruns it leaves the
/// rest to the txg sync.
pub const EARLY_QUEUE_MAX: usize = 1024;

/// Records the early writer takes per batch (written as one aggregated batch, 1 MiB
/// of 128 KiB records, as [`tarn_zio::AGGREGATE_MAX_BYTES`] aggregates).
pub const EARLY_BATCH_RECORDS: usize = 8;

/// The early writer exits after this long with nothing queued (a new one starts with
/// the next record).
const EARLY_IDLE_EXIT: Duration = Duration::from_secs(2);

/// Counters of early writes since the object set was opened (for tests and benchmarks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EarlyStats {
    /// Records written early.
    pub written: u64,
    /// Early blocks a txg sync installed as they were.
    pub used: u64,
    /// Early blocks freed unused (the record changed, or went away, before its sync).
    pub discarded: u64,
}

/// One record written early: its txg, the exact record bytes it holds, its pointer.
pub(super) struct EarlyBlock {
    txg: u64,
    data: Arc<Vec<u8>>,
    bp: BlkPtr,
}

/// State shared by an object set and its early writer thread (which must not keep the
/// object set alive: it holds this and a `Weak` to the object set).
#[derive(Default)]
pub(super) struct EarlyShared {
    inner: Mutex<EarlyState>,
    ready: Condvar,
    /// Early writes wanted at all (see [`Objset::set_early_writes`]).
    off: AtomicBool,
}

#[derive(Default)]
struct EarlyState {
    /// (object, block id) of records completed by a write, oldest first.
    queue: VecDeque<(u64, u64)>,
    /// Blocks written early and not yet taken by a sync, by (object, block id).
    blocks: HashMap<(u64, u64), EarlyBlock>,
    /// A writer thread is running.
    worker: bool,
    /// The object set is gone: the worker exits.
    closed: bool,
    stats: EarlyStats,
}

impl Objset {
    /// Early-write counters since the object set was opened.
    pub fn early_stats(&self) -> EarlyStats {
        self.early.inner.lock().stats
    }

    /// Turn early writes on (the default) or off, for benchmarks comparing the two.
    pub fn set_early_writes(&self, on: bool) {
        self.early.off.store(!on, Ordering::Relaxed);
    }

    /// Whether this object set writes records early at all (module docs): not when
    /// turned off, for the MOS, a read-only object set, or a dataset whose sync may
    /// deduplicate or nopwrite a record (their tables change in syncing context).
    fn early_wanted(&self) -> bool {
        !self.early.off.load(Ordering::Relaxed)
            && self.os_type != OS_TYPE_MOS
            && !self.readonly.load(Ordering::Relaxed)
            && self.dedup() == tarn_zio::Dedup::Off
            && !(self.checksum().is_strong() && self.compression().alg != tarn_phys::Compression::Off)
    }

    /// Whether a write that just completed block `blkid` of `dn` makes it a record to
    /// write early: file data, a whole record of the object's full record size, in an
    /// object set that writes early ([`Objset::early_wanted`]).
    pub(super) fn early_candidate(&self, dn: &Dn, blkid: u64) -> bool {
        dn.attrs.otype == ObjectType::FileData
            && dn.attrs.blksz == dn.attrs.max_blksz
            && matches!(dn.open.blocks.get(&blkid), Some(Dirty::Full(_)))
            && self.early_wanted()
    }

    /// Queue records for the early writer (starting it when none runs). Records past
    /// [`EARLY_QUEUE_MAX`] are left to the sync.
    pub(super) fn early_queue(&self, records: &[(u64, u64)]) {
        if records.is_empty() {
            return;
        }
        let mut st = self.early.inner.lock();
        for &r in records {
            if st.queue.len() < EARLY_QUEUE_MAX && !st.queue.contains(&r) {
                st.queue.push_back(r);
            }
        }
        if !st.worker && !st.closed {
            let (shared, os) = (self.early.clone(), self.weak.clone());
            let spawned = std::thread::Builder::new().name("dmu_early".into()).spawn(move || early_worker(&shared, &os));
            st.worker = spawned.is_ok();
        }
        drop(st);
        self.early.ready.notify_one();
    }

    /// Write the records `batch` (object, block id) early, those still whole records
    /// of the open txg (module docs), as one aggregated batch; any failure leaves them
    /// to the sync.
    fn early_write(&self, batch: &[(u64, u64)]) {
        // Properties may have changed since the records were queued; and a pool short of
        // space would count an early block and its dirty bytes both.
        let (size, free) = self.zio.with_space(|s| (s.asize_bytes(), s.free_bytes()));
        if !self.early_wanted() || free <= size / 4 {
            return;
        }
        let Some(mut hold) = self.gate.try_hold() else { return };
        if self.gate.synced_txg() + 1 != hold.txg {
            // A sync is in progress (of the txg before the open one, which is therefore
            // wanted already): its space drain could log these allocations.
            let syncing = hold.txg - 1;
            drop(hold);
            let _ = self.gate.wait_synced_nowait(syncing);
            match self.gate.try_hold() {
                Some(h) if self.gate.synced_txg() + 1 == h.txg => hold = h,
                _ => return,
            }
        }
        self.early_write_with(&hold, batch);
    }

    fn early_write_with(&self, hold: &TxHold, batch: &[(u64, u64)]) {
        let zero_is_hole = self.compression().alg != tarn_phys::Compression::Off;
        let records: Vec<(u64, u64, Arc<Vec<u8>>)> = {
            let st = self.st.lock();
            let e = self.early.inner.lock();
            batch
                .iter()
                .filter_map(|&(obj, blkid)| {
                    let dn = st.dnodes.get(&obj)?;
                    let Some(Dirty::Full(d)) = dn.open.blocks.get(&blkid) else { return None };
                    let done = e.blocks.get(&(obj, blkid)).is_some_and(|b| Arc::ptr_eq(&b.data, d));
                    (!dn.attrs.freed && d.len() == dn.attrs.blksz as usize && !done).then(|| (obj, blkid, d.clone()))
                })
                .collect()
        };
        // An all-zero record becomes a hole at sync when compression is on.
        let records: Vec<(u64, u64, Arc<Vec<u8>>)> = records.into_iter().filter(|(_, _, d)| !(zero_is_hole && d.iter().all(|&b| b == 0))).collect();
        if records.is_empty() {
            return;
        }
        let props = WriteProps {
            otype: ObjectType::FileData,
            level: 0,
            compression: self.compression(),
            checksum: self.checksum(),
            copies: copies_for(ObjectType::FileData, self.os_type, self.data_copies()),
            txg: hold.txg,
            fill: 1,
            nop_prev: None,
            dedup: tarn_zio::Dedup::Off,
        };
        let items: Vec<(Arc<Vec<u8>>, WriteProps)> = records.iter().map(|(_, _, d)| (d.clone(), props)).collect();
        let fence = self.zio.write_fence();
        let written = self.write_bps(&items, 1);
        let intact = self.zio.write_fence() == fence;
        let st = self.st.lock();
        let mut e = self.early.inner.lock();
        for ((obj, blkid, data), r) in records.into_iter().zip(written) {
            let Ok(bp) = r else { continue };
            e.stats.written += 1;
            let current = st.dnodes.get(&obj).and_then(|dn| match dn.open.blocks.get(&blkid) {
                Some(Dirty::Full(d)) if !dn.attrs.freed => Some(d),
                _ => None,
            });
            if !intact || !current.is_some_and(|d| Arc::ptr_eq(d, &data)) {
                e.stats.discarded += 1;
                self.early_free(&bp);
                continue;
            }
            if let Some(old) = e.blocks.insert((obj, blkid), EarlyBlock { txg: hold.txg, data, bp }) {
                e.stats.discarded += 1;
                self.early_free(&old.bp);
            }
        }
    }

    /// Phase 2 of the sync of `txg`: for each whole record of `blocks` (object, block
    /// id, record) whose early block holds exactly its bytes, that block's pointer
    /// (in order, `None` elsewhere). Every other early block of this txg or an older
    /// one is freed.
    pub(super) fn early_take(&self, txg: u64, blocks: &[(u64, u64, ObjectType, Dirty)]) -> Vec<Option<BlkPtr>> {
        let mut e = self.early.inner.lock();
        if e.blocks.is_empty() {
            return vec![None; blocks.len()];
        }
        let out: Vec<Option<BlkPtr>> = blocks
            .iter()
            .map(|(obj, blkid, _, record)| {
                let Dirty::Full(d) = record else { return None };
                match e.blocks.get(&(*obj, *blkid)) {
                    Some(b) if b.txg == txg && Arc::ptr_eq(&b.data, d) => e.blocks.remove(&(*obj, *blkid)).map(|b| b.bp),
                    _ => None,
                }
            })
            .collect();
        e.stats.used += out.iter().flatten().count() as u64;
        let stale: Vec<(u64, u64)> = e.blocks.iter().filter(|(_, b)| b.txg <= txg).map(|(k, _)| *k).collect();
        for k in stale {
            let b = e.blocks.remove(&k).expect("listed above");
            e.stats.discarded += 1;
            self.early_free(&b.bp);
        }
        out
    }

    /// Free an early block nothing references, and drop it from the ARC first: its
    /// range is allocatable at once, and a block written there in the same txg would
    /// have the same ARC identity (first DVA, birth txg).
    fn early_free(&self, bp: &BlkPtr) {
        self.zio.uncache(bp);
        self.zio.free_now(bp);
    }

    /// The object set is going away: free every early block no sync took, and stop
    /// the writer.
    pub(super) fn early_close(&self) {
        let mut e = self.early.inner.lock();
        e.closed = true;
        e.queue.clear();
        for (_, b) in e.blocks.drain() {
            self.early_free(&b.bp);
        }
        drop(e);
        self.early.ready.notify_all();
    }
}

/// The early writer: takes queued records and writes each (module docs); exits when
/// the object set is gone or after [`EARLY_IDLE_EXIT`] with nothing to do.
fn early_worker(shared: &EarlyShared, os: &Weak<Objset>) {
    loop {
        let next: Vec<(u64, u64)> = {
            let mut st = shared.inner.lock();
            loop {
                if st.closed {
                    st.worker = false;
                    return;
                }
                if !st.queue.is_empty() {
                    let n = st.queue.len().min(EARLY_BATCH_RECORDS);
                    break st.queue.drain(..n).collect();
                }
                if shared.ready.wait_for(&mut st, EARLY_IDLE_EXIT).timed_out() && st.queue.is_empty() {
                    st.worker = false;
                    return;
                }
            }
        };
        // Upgrade only for the write: the object set must be free to go while idle.
        let Some(os) = os.upgrade() else { return };
        os.early_write(&next);
    }
}
