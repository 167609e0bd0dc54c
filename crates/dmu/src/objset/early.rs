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
//!   never referenced by a synced tree, so nothing can hold it (unless the intent log
//!   adopted it: below).
//! - *An early block belongs to the txg of its record*: it is compressed, checksummed
//!   and allocated under a hold on the open txg (taken without waiting,
//!   [`TxgGate::try_hold`]: no batch starts while a quiesce waits), with that txg as
//!   its birth; the hold is then released and the block written, the batch counted in
//!   flight for that txg until it is, so a quiesce never waits for an early write.
//!   The txg's sync waits for its in-flight batches before it takes early blocks
//!   (phase 2), so it sees every one of them written, installs those whose record it
//!   is syncing unchanged, and frees the rest before it drains the space records.
//! - *Its allocation is logged with its own txg*: a batch allocates through
//!   [`Zio::stage_blocks_open`], so while the sync of the txg before its own runs
//!   (whose drain must not log it) its allocations are made *ahead* and handed to the
//!   space records only when that sync is done (`tarn_metaslab`, "Allocations ahead
//!   of the sync"; OpenZFS keeps per-txg allocation trees for the same reason). Its
//!   own txg's drain, which waits for the batch, logs them: a crash can never find an
//!   early block allocated on disk by a txg that does not reference it. So the early
//!   writer keeps writing the open txg's records while the previous txg syncs; before,
//!   it waited for that sync, and under writers that kept syncs back to back it wrote
//!   almost nothing (20 `fio` writers of 1 MiB right after a 1 GiB file was deleted:
//!   345 and 381 MiB/s in the medians of two `bench/swab.sh` runs, 639 and 632 with
//!   allocations ahead).
//! - *Writers wait for a long backlog*: a writer that completes records faster than
//!   the early writer writes them (a stream that outruns the device) waits before its
//!   next hold while more than [`EARLY_BACKLOG_RECORDS`] records are queued, at most
//!   [`EARLY_BACKLOG_WAIT_MAX`] each time (`Objset::early_backpressure`, never under a
//!   hold). Whatever waits for a
//!   sync then waits for a few records, not for all the writer got ahead by: under a
//!   64 MiB `dd` stream a snapshot's median fell from 24.5 to 15.9 ms and its 90th
//!   percentile from 63 to 21 ms, and the stream itself ran faster (337 to 465
//!   MiB/s), `bench/snaplat.sh`. OpenZFS throttles on all dirty data
//!   (`dmu_tx_delay`), which Tarn also does ([`crate::txg`]), at a far higher mark.
//! - *Redundancy as at sync*: the write is kept only when no leaf failed a write and
//!   the vdev tree did not change while it ran ([`Zio::write_fence`]); otherwise it is
//!   freed and the sync writes the record (and records a leaf's missing txg).
//! - Nothing that only the syncing context may do: deduplicated and nopwrite datasets
//!   (their tables change at sync) and the MOS never write early; neither does a pool
//!   short of space (an early block and its dirty bytes would both count against it).
//! - *A record an `fsync` and the writer thread both want is written once*: the
//!   writer counts the records it takes from its queue (`taken`) and, once it has
//!   chosen them under the lock, those it writes (`writing`); an `fsync`
//!   ([`Objset::adopt_records`]) takes its records off the queue, claims those taken
//!   but not started (the writer skips them) and waits, without a hold and at most
//!   [`EARLY_BACKLOG_WAIT_MAX`], for those being written, whose blocks it then adopts.
//!   Before, under a 128 KiB appender with an `fsync` after each write, half the
//!   records were written twice (`bench/fsyncab.sh --rw write --bs 128k`: 1,120 →
//!   1,397 writes/s, 511 → 366 µs of daemon CPU per write). It never waits for the
//!   writer to wake: waiting for whole batches halved an 8 KiB appender's rate.
//! - *An adopted block outlives its record until its txg is in the pool*: the intent
//!   log may point a write record at an early block instead of writing the bytes a
//!   second time ([`Objset::adopt_records`], OpenZFS's `dmu_sync` for `WR_INDIRECT`
//!   records). Such a block is *adopted*: the sync of its txg still installs it when
//!   the record is unchanged, but when the record changed it is freed deferred in that
//!   txg's sync (never at once), because a crash before that txg is in the pool
//!   replays the log record, which reads it. The log never frees an adopted block
//!   itself; at import it claims one only when its birth txg never reached the pool
//!   (`tarn_zil::Zilog::claim`).
//!
//! Called by: [`Objset::write`] (queueing), the intent log's commit
//! ([`Objset::adopt_records`]), phase 2 of the sync ([`Objset::early_take`]) and the
//! object set's `Drop`.

use super::*;
use parking_lot::Condvar;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Weak;
use std::time::Duration;

/// Records waiting for the early writer at most; a writer that outruns it leaves the
/// rest to the txg sync.
pub const EARLY_QUEUE_MAX: usize = 1024;

/// Records the early writer takes per batch at most (4 MiB of 128 KiB records,
/// written as aggregated device writes of up to [`tarn_zio::AGGREGATE_MAX_BYTES`]).
/// Only the allocation holds the open txg, so the size of a batch never delays a
/// quiesce by its write; the txg's sync waits for it, as it would have written it.
pub const EARLY_BATCH_RECORDS: usize = 32;

/// Records queued for the early writer above which a writer of the object set waits,
/// before it takes its next hold, for the early writer to catch up (at most
/// [`EARLY_BACKLOG_WAIT_MAX`] per hold). This bounds what a txg sync finds unwritten
/// from a streaming writer (this many records plus a batch in flight: 64 records, 8 MiB
/// of 128 KiB records), so whatever waits for a sync — a snapshot, `zpool sync` —
/// waits for that much rather than for everything the writer outran the device by.
/// Smaller marks shorten that wait further but slow a writer down to the early
/// writer's pace in small batches (`zfs recv` of 1 GiB, `bench/recvrate.sh`: 8
/// records 1.5 times slower, 16 records 10% slower, 32 about 5% slower in the median
/// of five rounds, with more spread; `bench/README.md`).
pub const EARLY_BACKLOG_RECORDS: usize = 32;

/// Longest a writer waits for the early writer's backlog before one hold, so that a
/// stalled early writer slows writers down without stopping them.
pub const EARLY_BACKLOG_WAIT_MAX: Duration = Duration::from_millis(50);

/// Worker threads of an early batch (checksum and compression, then the device
/// writes of its aggregated runs).
const EARLY_WRITE_THREADS: usize = 2;

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
    /// Early blocks the intent log adopted (pointed a write record at).
    pub adopted: u64,
    /// Holds that waited for the early writer's backlog first
    /// ([`EARLY_BACKLOG_RECORDS`]).
    pub throttled: u64,
}

/// One record written early: its txg, the exact record bytes it holds, its pointer,
/// and whether a log record points at it (module docs).
pub(super) struct EarlyBlock {
    txg: u64,
    data: Arc<Vec<u8>>,
    bp: BlkPtr,
    adopted: bool,
}

/// State shared by an object set and its early writer thread (which must not keep the
/// object set alive: it holds this and a `Weak` to the object set).
#[derive(Default)]
pub(super) struct EarlyShared {
    inner: Mutex<EarlyState>,
    ready: Condvar,
    /// Signalled when an in-flight batch is written (`EarlyState::inflight`).
    written: Condvar,
    /// Early writes wanted at all (see [`Objset::set_early_writes`]).
    off: AtomicBool,
}

#[derive(Default)]
struct EarlyState {
    /// (object, block id) of records completed by a write, oldest first.
    queue: VecDeque<(u64, u64)>,
    /// Blocks written early and not yet taken by a sync, by (object, block id).
    blocks: HashMap<(u64, u64), EarlyBlock>,
    /// Adopted blocks whose record was written again before their txg synced: (txg,
    /// pointer), freed deferred by the sync of that txg.
    orphans: Vec<(u64, BlkPtr)>,
    /// A writer thread is running.
    worker: bool,
    /// Batches allocated under a hold on txg (key) whose blocks are still being
    /// written (count); that txg's sync waits for them ([`Objset::early_take`]).
    inflight: HashMap<u64, usize>,
    /// Records the writer thread has taken from `queue` and not finished with (count
    /// of its batches that hold each).
    taken: HashMap<(u64, u64), usize>,
    /// Of those, the records the writer is writing now (count): past the point where
    /// an `fsync` may claim them ([`Objset::adopt_records`]).
    writing: HashMap<(u64, u64), usize>,
    /// Taken records an `fsync` writes itself: the writer skips them (and forgets
    /// the claim when it is done with its batch).
    claimed: HashSet<(u64, u64)>,
    /// The object set is gone: the worker exits.
    closed: bool,
    stats: EarlyStats,
}

impl Objset {
    /// Early-write counters since the object set was opened.
    pub fn early_stats(&self) -> EarlyStats {
        self.early.inner.lock().stats
    }

    /// Early batches allocated and not yet written (for tests: a sync that quiesces
    /// now waits for them).
    pub fn early_batches_in_flight(&self) -> usize {
        self.early.inner.lock().inflight.values().sum()
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

    /// The early writer's back pressure (called before a writer takes a hold, never
    /// under one: the early writer needs a hold of its own to drain the queue): while
    /// more than [`EARLY_BACKLOG_RECORDS`] records wait for it, wait for its batches,
    /// at most [`EARLY_BACKLOG_WAIT_MAX`] in all.
    pub(super) fn early_backpressure(&self) {
        let mut e = self.early.inner.lock();
        let behind = |e: &EarlyState| e.queue.len() > EARLY_BACKLOG_RECORDS && e.worker && !e.closed;
        if !behind(&e) {
            return;
        }
        e.stats.throttled += 1;
        let deadline = std::time::Instant::now() + EARLY_BACKLOG_WAIT_MAX;
        while behind(&e) {
            if self.early.written.wait_until(&mut e, deadline).timed_out() {
                break;
            }
        }
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
        if let Some(hold) = self.early_hold() {
            self.early_write_with(hold, batch, EARLY_WRITE_THREADS, tarn_zio::IoClass::Async);
        }
    }

    /// A hold on the open txg under which early blocks may be allocated, or `None`:
    /// early writes are off (properties may have changed since the records were
    /// queued), the pool is short of space (an early block and its dirty bytes would
    /// both count against it), a quiesce holds or waits for the txg, or a sync (of the
    /// txg before) is in progress while a thread waits for a sync. A sync in progress
    /// alone is no reason: the allocations are then made ahead (module docs).
    fn early_hold(&self) -> Option<TxHold> {
        let (size, free) = self.zio.with_space(|s| (s.asize_bytes(), s.free_bytes()));
        if !self.early_wanted() || free <= size / 4 {
            return None;
        }
        let hold = self.gate.try_hold()?;
        // Whoever waits for a sync (a snapshot, `zpool sync`, an intent-log fallback)
        // would wait for the device these writes share with the running sync: under a
        // 64 MiB `dd` stream, writing ahead regardless took a snapshot's median from
        // 13.7 to 22.8 ms (`bench/snaplat.sh`). Such records are left to their sync.
        if hold.txg > self.gate.synced_txg() + 1 && self.gate.has_sync_waiters() {
            return None;
        }
        Some(hold)
    }

    /// Write the records `batch` (object, block id) that are still whole records of
    /// the open txg, the one `hold` is on: compressed, checksummed and allocated under
    /// the hold (so the allocations belong to that txg), then the hold is released and
    /// the blocks written, so that a quiesce never waits for the device. Until they
    /// are written the batch counts as in flight for that txg, and the txg's sync
    /// waits for it before it takes early blocks ([`Objset::early_take`]): the sync
    /// never drains these allocations, or publishes a tree, before the blocks are on
    /// disk and known. Written blocks are recorded for the sync; failed ones freed.
    fn early_write_with(&self, hold: TxHold, batch: &[(u64, u64)], threads: usize, class: tarn_zio::IoClass) {
        let zero_is_hole = self.compression().alg != tarn_phys::Compression::Off;
        // The writer thread's batches (bulk I/O) skip the records an fsync claimed and
        // count the rest as being written, for an fsync to wait for.
        let background = class == tarn_zio::IoClass::Async;
        let mut _writing: Option<Writing> = None;
        let records: Vec<(u64, u64, Arc<Vec<u8>>)> = {
            let st = self.st.lock();
            let mut e = self.early.inner.lock();
            let records: Vec<(u64, u64, Arc<Vec<u8>>)> = batch
                .iter()
                .filter_map(|&(obj, blkid)| {
                    if background && e.claimed.contains(&(obj, blkid)) {
                        return None;
                    }
                    let d = Self::open_full_record(&st, obj, blkid)?;
                    let whole = st.dnodes.get(&obj).is_some_and(|dn| d.len() == dn.attrs.blksz as usize);
                    let done = e.blocks.get(&(obj, blkid)).is_some_and(|b| Arc::ptr_eq(&b.data, d));
                    (whole && !done).then(|| (obj, blkid, d.clone()))
                })
                .collect();
            if background {
                let keys: Vec<(u64, u64)> = records.iter().map(|(o, b, _)| (*o, *b)).collect();
                count(&mut e.writing, &keys, true);
                _writing = Some(Writing {
                    shared: &self.early,
                    records: keys,
                });
            }
            records
        };
        // An all-zero record becomes a hole at sync when compression is on.
        let records: Vec<(u64, u64, Arc<Vec<u8>>)> = records.into_iter().filter(|(_, _, d)| !(zero_is_hole && d.iter().all(|&b| b == 0))).collect();
        if records.is_empty() {
            return;
        }
        let txg = hold.txg;
        let props = WriteProps {
            otype: ObjectType::FileData,
            level: 0,
            compression: self.compression(),
            checksum: self.checksum(),
            copies: copies_for(ObjectType::FileData, self.os_type, self.data_copies()),
            txg,
            fill: 1,
            nop_prev: None,
            dedup: tarn_zio::Dedup::Off,
        };
        let items: Vec<(Arc<Vec<u8>>, WriteProps)> = records.iter().map(|(_, _, d)| (d.clone(), props)).collect();
        let fence = self.zio.write_fence();
        let mut staged = tarn_zio::StagedWrites::default();
        // Allocated ahead while the txg before syncs: logged by `txg`'s own drain.
        let bps = self.zio.stage_blocks_open(&items, threads, &mut staged);
        let _in_flight = InFlight::start(&self.early, txg);
        drop(hold);
        let landed = self.zio.write_staged_each(staged, threads, class);
        let mut landed = landed.into_iter();
        let written: Vec<Option<BlkPtr>> = bps.into_iter().map(|r| r.ok().filter(|_| landed.next().unwrap_or(false))).collect();
        self.cache_policy(written.iter().flatten());
        let intact = self.zio.write_fence() == fence;
        let mut e = self.early.inner.lock();
        for ((obj, blkid, data), bp) in records.into_iter().zip(written) {
            // A block no copy of which landed was freed by zio.
            let Some(bp) = bp else { continue };
            e.stats.written += 1;
            if !intact {
                e.stats.discarded += 1;
                self.early_free(&bp);
                continue;
            }
            // Kept even if the record changed meanwhile: the sync installs it only
            // for the bytes it holds, and frees it otherwise.
            let new = EarlyBlock { txg, data, bp, adopted: false };
            if let Some(old) = e.blocks.insert((obj, blkid), new) {
                e.stats.discarded += 1;
                if old.adopted {
                    e.orphans.push((old.txg, old.bp));
                } else {
                    self.early_free(&old.bp);
                }
            }
        }
    }

    /// Phase 2 of the sync of `txg`: for each whole record of `blocks` (object, block
    /// id, record) whose early block holds exactly its bytes, that block's pointer
    /// (in order, `None` elsewhere). Every other early block of this txg or an older
    /// one is freed.
    pub(super) fn early_take(&self, txg: u64, blocks: &[(u64, u64, ObjectType, Dirty)]) -> Vec<Option<BlkPtr>> {
        let mut e = self.early.inner.lock();
        // Batches allocated in this txg and still being written (`early_write_with`).
        while e.inflight.keys().any(|&t| t <= txg) {
            self.early.written.wait(&mut e);
        }
        // Adopted blocks replaced before this sync: a log record of this txg may still
        // name them until the txg is in the pool, so their space waits for it.
        let orphans = std::mem::take(&mut e.orphans);
        let (due, keep): (Vec<_>, Vec<_>) = orphans.into_iter().partition(|(t, _)| *t <= txg);
        e.orphans = keep;
        for (_, bp) in due {
            self.zio.free_block(&bp, txg);
        }
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
            if b.adopted {
                self.zio.free_block(&b.bp, txg);
            } else {
                self.early_free(&b.bp);
            }
        }
        out
    }

    /// The bytes of block `blkid` of `obj` when it is a whole record dirty in the
    /// open txg of an object not being freed (what an early block may hold).
    fn open_full_record(st: &OsState, obj: u64, blkid: u64) -> Option<&Arc<Vec<u8>>> {
        let dn = st.dnodes.get(&obj).filter(|dn| !dn.attrs.freed)?;
        match dn.open.blocks.get(&blkid) {
            Some(Dirty::Full(d)) => Some(d),
            _ => None,
        }
    }

    /// Record size of file `obj` when its records are whole (`blksz == max_blksz`) and
    /// early writes are on for this object set: the span the intent log may cover with
    /// one adopted block ([`Objset::adopt_records`]). `None` otherwise.
    pub fn adoptable_record_bytes(&self, obj: u64) -> Option<u64> {
        if !self.early_wanted() {
            return None;
        }
        let st = self.st.lock();
        let dn = st.dnodes.get(&obj)?;
        (dn.attrs.otype == ObjectType::FileData && dn.attrs.blksz == dn.attrs.max_blksz && !dn.attrs.freed).then_some(dn.attrs.blksz as u64)
    }

    /// The intent log's `dmu_sync`: for each `(object, block id)` of `records`, a block
    /// already on disk holding exactly the record's current bytes, which the log may
    /// name in a write record instead of writing the bytes again. The block is the
    /// record's early block (written now, as one aggregated batch, for records that
    /// have none yet); it is marked adopted (module docs) and the txg sync installs it
    /// as usual. Returns, in order, `(pointer, txg of the block)` or `None` where no
    /// block can be offered: the record is not a whole dirty record of the open txg,
    /// early writes are off, the pool is short of space, a quiesce holds the txg, or
    /// the write failed. Never waits for a txg.
    pub fn adopt_records(&self, records: &[(u64, u64)]) -> Vec<Option<(BlkPtr, u64)>> {
        let mut out: Vec<Option<(BlkPtr, u64)>> = vec![None; records.len()];
        if records.is_empty() {
            return out;
        }
        self.early_claim(records);
        // Under a hold on the open txg: the records without a block are allocated in
        // it (`early_write_with`), as early writes are. Never waits for a sync.
        let Some(hold) = self.early_hold() else { return out };
        let missing: Vec<(u64, u64)> = {
            let st = self.st.lock();
            let e = self.early.inner.lock();
            records
                .iter()
                .filter(|&&(obj, blkid)| {
                    Self::open_full_record(&st, obj, blkid)
                        .is_some_and(|d| !e.blocks.get(&(obj, blkid)).is_some_and(|b| b.txg == hold.txg && Arc::ptr_eq(d, &b.data)))
                })
                .copied()
                .collect()
        };
        let txg = hold.txg;
        if missing.is_empty() {
            drop(hold);
        } else {
            // (`early_claim` took them off the writer's queue.) An fsync waits for these: synchronous I/O, ahead of the bulk.
            self.early_write_with(hold, &missing, EARLY_WRITE_THREADS, tarn_zio::IoClass::Sync);
        }
        // Without the hold now: a record that moved on to its sync meanwhile is no
        // longer the open txg's, and is left to the log's own copy.
        let st = self.st.lock();
        let mut guard = self.early.inner.lock();
        let e = &mut *guard;
        for (slot, &(obj, blkid)) in out.iter_mut().zip(records) {
            let Some(d) = Self::open_full_record(&st, obj, blkid) else { continue };
            if let Some(b) = e.blocks.get_mut(&(obj, blkid)).filter(|b| b.txg == txg && Arc::ptr_eq(&b.data, d)) {
                if !b.adopted {
                    b.adopted = true;
                    e.stats.adopted += 1;
                }
                *slot = Some((b.bp, b.txg));
            }
        }
        out
    }

    /// Before an `fsync` writes `records` itself, so that each is written once: take
    /// them off the writer thread's queue; claim those it has taken but not started
    /// (it skips them); and wait, without a hold (the writer needs none to finish),
    /// for those it is writing, whose blocks the log then adopts (OpenZFS's
    /// `dmu_sync` likewise waits for a write of the same buffer in progress). Never
    /// waits for the writer to wake or for the rest of its batch, and at most
    /// [`EARLY_BACKLOG_WAIT_MAX`] in all: after that a record is written again, which
    /// costs a device write and nothing else (the sync frees the block it does not
    /// install).
    fn early_claim(&self, records: &[(u64, u64)]) {
        let mut e = self.early.inner.lock();
        if !records.iter().any(|r| e.taken.contains_key(r)) && e.queue.is_empty() {
            return;
        }
        e.queue.retain(|r| !records.contains(r));
        for r in records {
            if e.taken.contains_key(r) && !e.writing.contains_key(r) {
                e.claimed.insert(*r);
            }
        }
        let deadline = std::time::Instant::now() + EARLY_BACKLOG_WAIT_MAX;
        while records.iter().any(|r| e.writing.contains_key(r)) {
            if self.early.written.wait_until(&mut e, deadline).timed_out() {
                break;
            }
        }
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
        // No txg of this object set syncs again; an adopted block's log chain goes
        // with it (export and destroy sync or discard the log first).
        for (_, b) in e.blocks.drain() {
            self.early_free(&b.bp);
        }
        for (_, bp) in std::mem::take(&mut e.orphans) {
            self.early_free(&bp);
        }
        drop(e);
        self.early.ready.notify_all();
    }
}

/// A batch counted in flight for its txg (`EarlyState::inflight`) from its allocation
/// until it is dropped, even by a panic, so that the txg's sync never waits for a
/// batch that is gone.
struct InFlight<'a> {
    shared: &'a EarlyShared,
    txg: u64,
}

impl<'a> InFlight<'a> {
    fn start(shared: &'a EarlyShared, txg: u64) -> Self {
        *shared.inner.lock().inflight.entry(txg).or_insert(0) += 1;
        InFlight { shared, txg }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut e = self.shared.inner.lock();
        if let Some(n) = e.inflight.get_mut(&self.txg) {
            *n -= 1;
            if *n == 0 {
                e.inflight.remove(&self.txg);
            }
        }
        drop(e);
        self.shared.written.notify_all();
    }
}

/// Add one to (`up`) or take one from each record's count in `map`, dropping
/// counts that reach zero.
fn count(map: &mut HashMap<(u64, u64), usize>, records: &[(u64, u64)], up: bool) {
    for r in records {
        if up {
            *map.entry(*r).or_insert(0) += 1;
        } else if let Some(n) = map.get_mut(r) {
            *n -= 1;
            if *n == 0 {
                map.remove(r);
            }
        }
    }
}

/// A batch the writer thread took from the queue (counted in `EarlyState::taken` as
/// it took it): when the writer is done with it, even by a panic or an early return,
/// its records are uncounted, their claims forgotten, and waiting fsyncs woken.
struct Taken<'a> {
    shared: &'a EarlyShared,
    records: &'a [(u64, u64)],
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut e = self.shared.inner.lock();
        count(&mut e.taken, self.records, false);
        for r in self.records {
            e.claimed.remove(r);
        }
        drop(e);
        self.shared.written.notify_all();
    }
}

/// Records the writer thread is writing (counted in `EarlyState::writing` when it
/// chose them): uncounted when the write is done, even by a panic.
struct Writing<'a> {
    shared: &'a EarlyShared,
    records: Vec<(u64, u64)>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        count(&mut self.shared.inner.lock().writing, &self.records, false);
        self.shared.written.notify_all();
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
                    let batch: Vec<(u64, u64)> = st.queue.drain(..n).collect();
                    // Counted as taken in the same critical section, so an fsync
                    // always finds a record queued, taken or written.
                    count(&mut st.taken, &batch, true);
                    break batch;
                }
                if shared.ready.wait_for(&mut st, EARLY_IDLE_EXIT).timed_out() && st.queue.is_empty() {
                    st.worker = false;
                    return;
                }
            }
        };
        let _taken = Taken { shared, records: &next };
        // Upgrade only for the write: the object set must be free to go while idle.
        let Some(os) = os.upgrade() else { return };
        os.early_write(&next);
        // Writers held back by the backlog look again (`Objset::early_backpressure`).
        shared.written.notify_all();
    }
}
