//! Transaction groups: the open-txg gate, dirty-data accounting and the write throttle.
//!
//! Theory (OpenZFS `module/zfs/txg.c`, `dsl_pool.c` dirty data): changes are made under
//! a hold on the open txg (a read lock on `open`). The sync thread *quiesces* by taking
//! the write lock — which waits for every hold of the open txg to be released — then
//! collects that txg's dirty state from every object set and opens the next txg before
//! releasing the lock. So a txg's changes are exactly those made under its holds.
//!
//! Dirty bytes (data waiting to be written) are counted here; a record's bytes leave
//! the count as soon as the sync has written it (OpenZFS `dbuf_write_done` undirties
//! each record), the rest when its object set's sync ends. A sync is asked for
//! as soon as dirty data passes a quarter of `dirty_max_bytes`
//! ([`SYNC_DIRTY_PERCENT`]; ZFS `zfs_dirty_data_sync_percent`), so a sync is always
//! running ahead of the writers, with one exception, for partial records (objset's
//! "Deferred fill"). Each counts whole, for the space check and the throttle, because
//! the sync reads and writes a whole record for it, though it holds only its written
//! bytes in memory; random overwrites that land in the same record within one txg
//! cost that record's fill and write once. While synchronous writers wait on the
//! intent log ([`TxgGate::watch_log`]), whose latency every sync's device time
//! lengthens, the sync trigger and the throttle count partial records for less: each
//! at its written bytes (its memory) or a [`PARTIAL_COUNT_DIVISOR`]th of its record
//! (the sync's read and write of it), whichever is more, summed over them; and they
//! may make up to half of the limit so counted ([`SYNC_PARTIAL_DIRTY_PERCENT`], below
//! the throttle's 60%) before they ask for a sync. So they coalesce into fewer, larger
//! syncs that each write a record once for several writes: one fsynced 8 KiB random
//! writer over a 1 GiB file did 1.2x the writes per second with half the
//! 99th-percentile fsync latency with partial records counted whole up to half
//! (bench/README, "Longer txgs for partial records"), and eight writers on a file
//! each, 1.3x with the quarter (bench/README, "Partial records counted by what they
//! hold"). The count never falls below the memory dirty data holds, so the daemon's
//! memory bound (a dirty limit of memory) stands, and the space check still weighs
//! every partial record whole ([`TxgGate::dirty_bytes`]). When the log goes idle with
//! partial records counted whole past the throttle's threshold or the limit, later
//! holds are delayed or wait for the sync that is asked for, as at any limit (a pause
//! of the fsyncs, not an error). Without the log (buffered
//! writers) they count whole and keep the quarter: there the sync is the bottleneck,
//! and a sync that waits leaves the device idle (4 buffered random writers lost a
//! fifth of their rate with the half).
//! `hold` throttles writers smoothly, as OpenZFS's `dmu_tx_delay` does: below
//! [`DELAY_MIN_DIRTY_PERCENT`] of the limit nothing waits; above it each hold sleeps
//! `DELAY_SCALE_NS * (dirty - min) / (max - dirty)`, at most [`DELAY_MAX_NS`], a delay
//! that grows without bound as dirty data nears the limit, so writers slow to the rate
//! the pool absorbs instead of stopping dead; at the limit they wait for a sync.
//!
//! Suspension (OpenZFS `spa_suspend`/`zio_suspend` and the `failmode` property): when
//! the pool above cannot sync a txg it calls [`TxgGate::suspend`] with a
//! [`SuspendMode`]. In [`SuspendMode::Wait`] a hold or a wait for a sync blocks until
//! [`TxgGate::resume`] (or until the gate turns read-only at export, which fails it);
//! in [`SuspendMode::Fail`] both fail at once with [`DmuError::Io`]
//! ([`SUSPENDED_MESSAGE`]). [`TxgGate::hold_nowait`] and
//! [`TxgGate::wait_synced_nowait`] fail in both modes: administrative callers that
//! must never wedge (a daemon request holding its state lock) use them.
//!
//! Locks: `open` (RwLock) is taken before any object-set lock and before `dirty` (a
//! hold adds dirty bytes while it holds `open`); `open` is never waited for under
//! `dirty`: a writer waiting at the limit asks for a sync with the dirty lock released
//! (with it held, a quiescer waiting for `open` and a hold waiting for `dirty`
//! deadlocked the pool's writers). Never take a second hold while holding one (a
//! waiting quiescer would deadlock the pair). Reading the open txg takes no lock: it
//! is an atomic the quiescer changes under `open`'s write lock. When it was the value
//! under `open`, a waiting quiescer kept new readers out, so a thread that read it
//! while holding a lock a holder waits for (the intent log's fallback, under its state
//! lock, while a writer under a hold waits for that lock to log its write) deadlocked
//! the quiescer, the holder and itself.
//!
//! Called by: objset (holds, dirty accounting), spa (quiesce, sync bookkeeping).

use crate::{DmuError, Result, TxHold};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Percent of `dirty_max_bytes` above which holds are delayed (OpenZFS
/// `zfs_delay_min_dirty_percent`).
pub const DELAY_MIN_DIRTY_PERCENT: u64 = 60;
/// Percent of `dirty_max_bytes` of dirty data above which a sync is asked for
/// (OpenZFS `zfs_dirty_data_sync_percent`, 20 there).
pub const SYNC_DIRTY_PERCENT: u64 = 25;
/// While the intent log is active, percent of `dirty_max_bytes` of all dirty data,
/// partial records counted whole, above which a sync is asked for when what passes
/// [`SYNC_DIRTY_PERCENT`] is partial records (module theory); below
/// [`DELAY_MIN_DIRTY_PERCENT`], so the sync starts before any writer is delayed.
pub const SYNC_PARTIAL_DIRTY_PERCENT: u64 = 50;
/// While the intent log is active, a partial record counts for the sync trigger and
/// the throttle at least its record's size divided by this (module theory).
pub const PARTIAL_COUNT_DIVISOR: u64 = 4;

/// Dirty bytes as the sync trigger and the throttle count them (module theory): all
/// of them, partial records whole, unless the log is active, when partial records
/// count their written bytes or a [`PARTIAL_COUNT_DIVISOR`]th of their size,
/// whichever is more. `log_active` is asked only when there are partial records.
fn counted_bytes(dirty: &DirtyCount, log_active: impl FnOnce() -> bool) -> u64 {
    if dirty.partial_bytes == 0 || !log_active() {
        return dirty.bytes;
    }
    let whole = dirty.bytes - dirty.partial_bytes;
    whole
        + dirty
            .partial_held_bytes
            .max(dirty.partial_bytes / PARTIAL_COUNT_DIVISOR)
            .min(dirty.partial_bytes)
}

/// Whether `dirty` asks for a sync of the open txg (module theory); `log_active` is
/// asked only when partial records decide it.
fn sync_due(dirty: &DirtyCount, max_bytes: u64, log_active: impl FnOnce() -> bool) -> bool {
    let quarter = max_bytes / 100 * SYNC_DIRTY_PERCENT;
    if dirty.bytes <= quarter {
        return false;
    }
    let whole = dirty.bytes.saturating_sub(dirty.partial_bytes);
    whole > quarter || !log_active() || counted_bytes(dirty, || true) > max_bytes / 100 * SYNC_PARTIAL_DIRTY_PERCENT
}

/// Dirty data not yet written, bytes: all of it (partial records counted whole), the
/// partial records' share of that, and what the partial records hold.
#[derive(Debug, Default, Clone, Copy)]
struct DirtyCount {
    bytes: u64,
    partial_bytes: u64,
    /// The partial records' written bytes (what they hold in memory).
    partial_held_bytes: u64,
}
/// Delay of a hold when dirty data is midway between the delay threshold and the
/// limit, nanoseconds (OpenZFS `zfs_delay_scale`).
pub const DELAY_SCALE_NS: u64 = 500_000;
/// Longest delay of one hold, nanoseconds (OpenZFS `MAX_DELAY`, 100 ms).
pub const DELAY_MAX_NS: u64 = 100_000_000;

/// The write-throttle delay for one hold with `dirty_bytes` dirty out of `max_bytes`
/// (0 below the threshold; `None` at or over the limit, where the hold must wait).
pub fn throttle_delay_ns(dirty_bytes: u64, max_bytes: u64) -> Option<u64> {
    if dirty_bytes >= max_bytes {
        return None;
    }
    let min = max_bytes / 100 * DELAY_MIN_DIRTY_PERCENT;
    if dirty_bytes <= min {
        return Some(0);
    }
    let ns = DELAY_SCALE_NS as u128 * (dirty_bytes - min) as u128 / (max_bytes - dirty_bytes) as u128;
    Some(ns.min(DELAY_MAX_NS as u128) as u64)
}

/// Text of the error a suspended pool returns (OpenZFS's `EZFS_SUSPENDED` wording).
pub const SUSPENDED_MESSAGE: &str = "pool I/O is currently suspended";

/// What holds and sync waits do while the pool is suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuspendMode {
    /// Block until the pool resumes (`failmode=wait`, and `panic` until the abort).
    Wait,
    /// Fail at once with EIO (`failmode=continue`).
    Fail,
}

#[derive(Default)]
struct SyncState {
    /// Highest txg whose uberblock is on disk.
    synced_txg: u64,
    /// Highest txg someone asked to be synced now.
    wanted_txg: u64,
    /// Set when a sync failed: the pool is suspended, and how writers are treated.
    suspended: Option<SuspendMode>,
    /// Live [`SyncWaiter`]s: threads in [`TxgGate::wait_synced`] (or its `nowait`
    /// form) and sync tasks waiting for their txg.
    waiters: usize,
}

/// A thread counted as waiting for a sync ([`TxgGate::sync_waiter`]) until dropped.
pub struct SyncWaiter<'a> {
    gate: &'a TxgGate,
}

impl Drop for SyncWaiter<'_> {
    fn drop(&mut self) {
        self.gate.sync.lock().waiters -= 1;
    }
}

/// The txg gate shared by the pool and all its object sets.
pub struct TxgGate {
    /// Held for reading by every hold of the open txg, for writing by a quiesce.
    open: Arc<RwLock<()>>,
    /// The open txg: changed only by [`TxgGate::quiesce`] under `open`'s write lock,
    /// so a hold reads the txg it holds; [`TxgGate::open_txg`] reads it without
    /// taking `open` (module theory, "Locks").
    open_txg: AtomicU64,
    dirty: Mutex<DirtyCount>,
    dirty_cv: Condvar,
    sync: Mutex<SyncState>,
    sync_cv: Condvar,
    /// Writers are delayed above [`DELAY_MIN_DIRTY_PERCENT`] of this many dirty bytes
    /// and wait at it.
    pub dirty_max_bytes: u64,
    readonly: AtomicBool,
    /// Whether synchronous writers wait on the intent log now ([`TxgGate::watch_log`]).
    log_active: OnceLock<LogProbe>,
}

/// [`TxgGate::watch_log`]'s question.
type LogProbe = Box<dyn Fn() -> bool + Send + Sync>;

impl TxgGate {
    /// A gate whose open txg is `open_txg` and whose last synced txg is `open_txg - 1`.
    pub fn new(open_txg: u64, dirty_max_bytes: u64) -> TxgGate {
        TxgGate {
            open: Arc::new(RwLock::new(())),
            open_txg: AtomicU64::new(open_txg),
            dirty: Mutex::new(DirtyCount::default()),
            dirty_cv: Condvar::new(),
            sync: Mutex::new(SyncState {
                synced_txg: open_txg.saturating_sub(1),
                wanted_txg: 0,
                suspended: None,
                waiters: 0,
            }),
            sync_cv: Condvar::new(),
            dirty_max_bytes,
            readonly: AtomicBool::new(false),
            log_active: OnceLock::new(),
        }
    }

    /// Ask `active` whether synchronous writers wait on the intent log before a sync
    /// is asked for partial records (module theory; the pool passes its
    /// `Zio::log_active`). Set once: later calls are ignored. Unset, the log never
    /// counts as active.
    pub fn watch_log(&self, active: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.log_active.set(Box::new(active));
    }

    /// Refuse all further holds (read-only import, export in progress). Holds and
    /// sync waits blocked on a suspended gate fail.
    pub fn set_readonly(&self, ro: bool) {
        self.readonly.store(ro, Ordering::SeqCst);
        let _s = self.sync.lock();
        self.sync_cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// True when holds are refused for good (read-only); a suspended gate is not
    /// read-only (see [`TxgGate::suspended`]).
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::SeqCst)
    }

    /// How the gate treats writers now: `None` unless suspended.
    pub fn suspended(&self) -> Option<SuspendMode> {
        self.sync.lock().suspended
    }

    /// While suspended: wait for a resume (`Wait` and `block`) or fail. Ok when the
    /// gate is (or became) not suspended.
    fn wait_resumed(&self, block: bool) -> Result<()> {
        let mut s = self.sync.lock();
        loop {
            if self.is_readonly() {
                return Err(DmuError::ReadOnly);
            }
            match s.suspended {
                None => return Ok(()),
                Some(SuspendMode::Wait) if block => self.sync_cv.wait(&mut s),
                Some(_) => return Err(DmuError::Io(SUSPENDED_MESSAGE.into())),
            }
        }
    }

    /// Hold the open txg, delayed by the write throttle (see the module theory). On a
    /// suspended gate: blocks until resumed (`Wait`) or fails with `Io` (`Fail`).
    /// Errors: `ReadOnly` on a read-only gate.
    pub fn hold(&self) -> Result<TxHold> {
        self.hold_inner(true)
    }

    /// [`TxgGate::hold`] that never waits for a suspended gate: fails with `Io`
    /// ([`SUSPENDED_MESSAGE`]) in either mode. For administrative changes.
    pub fn hold_nowait(&self) -> Result<TxHold> {
        self.hold_inner(false)
    }

    fn hold_inner(&self, block: bool) -> Result<TxHold> {
        if self.is_readonly() {
            return Err(DmuError::ReadOnly);
        }
        self.wait_resumed(block)?;
        let delay_ns = {
            let mut d = self.dirty.lock();
            loop {
                // Counting partial records for less only lowers the count, so below the
                // delay threshold the log is not asked (every write passes here).
                let counted = if d.bytes <= self.dirty_max_bytes / 100 * DELAY_MIN_DIRTY_PERCENT {
                    d.bytes
                } else {
                    counted_bytes(&d, || self.log_active.get().is_some_and(|f| f()))
                };
                match throttle_delay_ns(counted, self.dirty_max_bytes) {
                    Some(ns) => break ns,
                    None => {
                        // Not under the dirty lock: a quiescer waiting for `open` keeps
                        // new readers out until the holds drain, and a hold adding
                        // dirty bytes needs the dirty lock to drain.
                        parking_lot::MutexGuard::unlocked(&mut d, || {
                            self.request_sync(self.open_txg());
                        });
                        self.dirty_cv.wait_for(&mut d, Duration::from_millis(100));
                        if self.is_readonly() {
                            return Err(DmuError::ReadOnly);
                        }
                        if self.sync.lock().suspended.is_some() {
                            drop(d);
                            self.wait_resumed(block)?;
                            d = self.dirty.lock();
                        }
                    }
                }
            }
        };
        if delay_ns > 0 {
            std::thread::sleep(Duration::from_nanos(delay_ns));
        }
        let guard = self.open.read_arc();
        let txg = self.open_txg();
        Ok(TxHold {
            txg,
            _guard: Some(Box::new(guard)),
        })
    }

    /// A hold on the open txg only if one can be had at once: `None` when the gate is
    /// read-only or suspended, or a quiesce holds or waits for the txg (never delayed
    /// by the write throttle). For optional open-context work (the DMU's early writes)
    /// that must never wait for a sync: it never starts once a quiesce is waiting, but
    /// a quiesce that begins while the hold is kept waits for its release, as for any
    /// hold.
    pub fn try_hold(&self) -> Option<TxHold> {
        if self.is_readonly() || self.suspended().is_some() {
            return None;
        }
        let guard = self.open.try_read_arc()?;
        let txg = self.open_txg();
        Some(TxHold {
            txg,
            _guard: Some(Box::new(guard)),
        })
    }

    /// The open txg. Never waits: it does not take `open`, whose read lock a waiting
    /// quiescer keeps new readers from (module theory, "Locks"); during a quiesce's
    /// `collect` it is still the txg being quiesced.
    pub fn open_txg(&self) -> u64 {
        self.open_txg.load(Ordering::SeqCst)
    }

    /// Quiesce: wait for all holds of the open txg, run `collect(txg)` while no hold
    /// can be taken, open the next txg. Returns the quiesced txg.
    pub fn quiesce(&self, collect: impl FnOnce(u64)) -> u64 {
        let _g = self.open.write();
        let txg = self.open_txg();
        collect(txg);
        self.open_txg.store(txg + 1, Ordering::SeqCst);
        txg
    }

    /// Account `delta` bytes of dirty data of whole records (negative when synced or
    /// discarded); [`TxgGate::add_dirty_split`] with no partial records.
    pub fn add_dirty(&self, delta: i64) {
        self.add_dirty_split(delta, 0, 0);
    }

    /// Account `delta_bytes` of dirty data (negative when synced or discarded), of
    /// which `delta_partial_bytes` are partial records counted whole, which hold
    /// `delta_partial_held_bytes` written bytes (module theory; a partial record
    /// completed in memory moves out of the partial share: `(0, -record, -held)`).
    /// Asks for a sync when the count passes a threshold.
    pub fn add_dirty_split(&self, delta_bytes: i64, delta_partial_bytes: i64, delta_partial_held_bytes: i64) {
        let mut d = self.dirty.lock();
        d.bytes = (d.bytes as i64 + delta_bytes).max(0) as u64;
        d.partial_bytes = ((d.partial_bytes as i64 + delta_partial_bytes).max(0) as u64).min(d.bytes);
        d.partial_held_bytes = ((d.partial_held_bytes as i64 + delta_partial_held_bytes).max(0) as u64).min(d.partial_bytes);
        let over = sync_due(&d, self.dirty_max_bytes, || self.log_active.get().is_some_and(|f| f()));
        // A count grew: all dirty data, the whole records among it, or what partial
        // records hold.
        let grew = delta_bytes > 0 || delta_bytes > delta_partial_bytes || delta_partial_held_bytes > 0;
        drop(d);
        self.dirty_cv.notify_all();
        if over && grew {
            let open = self.open_txg();
            let mut s = self.sync.lock();
            if s.wanted_txg < open {
                s.wanted_txg = open;
                self.sync_cv.notify_all();
            }
        }
    }

    /// Dirty bytes not yet written (partial records counted whole).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.lock().bytes
    }

    /// Of [`TxgGate::dirty_bytes`], the partial records' share (counted whole).
    pub fn dirty_partial_bytes(&self) -> u64 {
        self.dirty.lock().partial_bytes
    }

    /// The bytes the partial records of [`TxgGate::dirty_partial_bytes`] hold (their
    /// written bytes).
    pub fn dirty_partial_held_bytes(&self) -> u64 {
        self.dirty.lock().partial_held_bytes
    }

    /// Ask the sync thread to sync through `txg` now.
    pub fn request_sync(&self, txg: u64) {
        let mut s = self.sync.lock();
        if s.wanted_txg < txg {
            s.wanted_txg = txg;
        }
        self.sync_cv.notify_all();
    }

    /// Block until `txg` is synced (requesting it). While the gate is suspended:
    /// waits for the resume and the sync after it (`Wait`) or fails with `Io`
    /// (`Fail`). Errors: `ReadOnly` if the gate turns read-only while waiting.
    pub fn wait_synced(&self, txg: u64) -> Result<()> {
        self.wait_synced_inner(txg, true)
    }

    /// [`TxgGate::wait_synced`] that fails with `Io` ([`SUSPENDED_MESSAGE`]) as soon as
    /// the gate is suspended, in either mode. For administrative callers.
    pub fn wait_synced_nowait(&self, txg: u64) -> Result<()> {
        self.wait_synced_inner(txg, false)
    }

    fn wait_synced_inner(&self, txg: u64, block: bool) -> Result<()> {
        self.request_sync(txg);
        let _waiting = self.sync_waiter();
        let mut s = self.sync.lock();
        while s.synced_txg < txg {
            match s.suspended {
                Some(SuspendMode::Wait) if block => {}
                Some(_) => return Err(DmuError::Io(SUSPENDED_MESSAGE.into())),
                None => {}
            }
            if s.suspended.is_some() && self.is_readonly() {
                return Err(DmuError::ReadOnly);
            }
            self.sync_cv.wait_for(&mut s, Duration::from_millis(200));
        }
        Ok(())
    }

    /// Whether some thread waits for a sync: in [`TxgGate::wait_synced`] (`zpool
    /// sync`, an intent-log fallback, a writer short of space) or holding a
    /// [`SyncWaiter`] (a sync task such as a snapshot).
    pub fn has_sync_waiters(&self) -> bool {
        self.sync.lock().waiters > 0
    }

    /// Count the caller as waiting for a sync until the guard is dropped (for waits
    /// that do not go through [`TxgGate::wait_synced`] alone: a sync task waits for
    /// its task to run first). See [`TxgGate::has_sync_waiters`].
    pub fn sync_waiter(&self) -> SyncWaiter<'_> {
        self.sync.lock().waiters += 1;
        SyncWaiter { gate: self }
    }

    /// Sync thread: wait up to `timeout` for a sync request. Returns true if one is
    /// pending (or dirty data is waiting and the timeout passed); false while the gate
    /// is suspended (after waiting up to `timeout` for a resume).
    pub fn wait_for_work(&self, timeout: Duration) -> bool {
        let open = self.open_txg();
        let mut s = self.sync.lock();
        if s.suspended.is_some() {
            self.sync_cv.wait_for(&mut s, timeout);
            return false;
        }
        if s.wanted_txg >= open && s.synced_txg < open {
            return true;
        }
        self.sync_cv.wait_for(&mut s, timeout);
        s.wanted_txg > s.synced_txg
    }

    /// Sync thread: `txg` is durable.
    pub fn mark_synced(&self, txg: u64) {
        let mut s = self.sync.lock();
        s.synced_txg = s.synced_txg.max(txg);
        self.sync_cv.notify_all();
    }

    /// A sync failed: suspend. Holds and sync waits then block or fail as `mode`
    /// says (module theory); waiters already blocked re-check at once.
    pub fn suspend(&self, mode: SuspendMode) {
        self.sync.lock().suspended = Some(mode);
        self.sync_cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// Lift a suspension (`zpool clear`): blocked holds go on, and the sync thread may
    /// sync again.
    pub fn resume(&self) {
        self.sync.lock().suspended = None;
        self.sync_cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// Last synced txg.
    pub fn synced_txg(&self) -> u64 {
        self.sync.lock().synced_txg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_is_zero_below_the_threshold_and_grows_toward_the_limit() {
        let max = 1000 << 20;
        assert_eq!(throttle_delay_ns(0, max), Some(0));
        assert_eq!(throttle_delay_ns(max / 100 * DELAY_MIN_DIRTY_PERCENT, max), Some(0));
        // Midway between the threshold and the limit: exactly the scale.
        let mid = (max / 100 * DELAY_MIN_DIRTY_PERCENT + max) / 2;
        assert_eq!(throttle_delay_ns(mid, max), Some(DELAY_SCALE_NS));
        let mut last = 0;
        for pct in [61u64, 70, 80, 90, 95, 99] {
            let d = throttle_delay_ns(max / 100 * pct, max).unwrap();
            assert!(d > last, "delay at {pct}% ({d} ns) not above {last} ns");
            last = d;
        }
        assert_eq!(throttle_delay_ns(max - 1, max), Some(DELAY_MAX_NS));
        assert_eq!(throttle_delay_ns(max, max), None);
        assert_eq!(throttle_delay_ns(max + 1, max), None);
    }

    fn wanted(gate: &TxgGate) -> u64 {
        gate.sync.lock().wanted_txg
    }

    /// A gate at txg 7 with a `max`-byte limit whose intent log is active while `log`
    /// is set.
    fn gate_watching(max: u64, log: &Arc<AtomicBool>) -> TxgGate {
        let gate = TxgGate::new(7, max);
        let l = log.clone();
        gate.watch_log(move || l.load(Ordering::SeqCst));
        gate
    }

    #[test]
    fn partial_records_wait_for_half_the_limit_only_while_the_log_is_active() {
        // Partial records holding all their bytes: they count whole either way.
        let max = 1000 << 20;
        let quarter = (max / 100 * SYNC_DIRTY_PERCENT) as i64;
        let half = (max / 100 * SYNC_PARTIAL_DIRTY_PERCENT) as i64;
        let log = Arc::new(AtomicBool::new(true));
        let gate_with_log = || gate_watching(max, &log);
        // Partial records, log active: no sync up to half the limit, one past it.
        let gate = gate_with_log();
        gate.add_dirty_split(half, half, half);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(1, 1, 1);
        assert_eq!(wanted(&gate), 7);
        assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (half as u64 + 1, half as u64 + 1));

        // The same with the log idle, or with no log watched: asked for past a quarter.
        log.store(false, Ordering::SeqCst);
        let gate = gate_with_log();
        gate.add_dirty_split(quarter, quarter, quarter);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(1, 1, 1);
        assert_eq!(wanted(&gate), 7);
        let gate = TxgGate::new(7, max);
        gate.add_dirty_split(quarter + 1, quarter + 1, quarter + 1);
        assert_eq!(wanted(&gate), 7);
        log.store(true, Ordering::SeqCst);

        // Whole records, log active or not: asked for just past a quarter.
        let gate = gate_with_log();
        gate.add_dirty(quarter);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty(1);
        assert_eq!(wanted(&gate), 7);

        // Beside whole records the total counts: a quarter whole and a quarter
        // partial are half, still no sync; one more partial byte asks.
        let gate = gate_with_log();
        gate.add_dirty(quarter);
        gate.add_dirty_split(half - quarter, half - quarter, half - quarter);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(1, 1, 1);
        assert_eq!(wanted(&gate), 7);

        // Completing a partial record in memory turns its bytes whole, which may ask.
        let gate = gate_with_log();
        gate.add_dirty_split(quarter, quarter, quarter);
        gate.add_dirty(1);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(0, -quarter, -quarter);
        assert_eq!(wanted(&gate), 7);
        assert_eq!(gate.dirty_partial_bytes(), 0);

        // Releasing partial records never asks (the whole records stay at a quarter),
        // and the counts never go below zero.
        let gate = gate_with_log();
        gate.add_dirty(quarter);
        gate.add_dirty_split(half - quarter, half - quarter, half - quarter);
        gate.add_dirty_split(-(half - quarter), -(half - quarter), -(half - quarter));
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty(-quarter - 5);
        assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (0, 0));
    }

    #[test]
    fn partial_records_count_what_they_hold_or_a_quarter_while_the_log_is_active() {
        let max = 1000u64 << 20;
        let half = (max / 100 * SYNC_PARTIAL_DIRTY_PERCENT) as i64;
        let log = Arc::new(AtomicBool::new(true));
        let gate_with_log = || gate_watching(max, &log);
        let counted = |gate: &TxgGate, active: bool| counted_bytes(&gate.dirty.lock(), || active);

        // 8 KiB written into each 128 KiB record: a sixteenth held, so a quarter
        // counts. No sync until that quarter passes half the limit, though the
        // records counted whole are twice the limit.
        let gate = gate_with_log();
        gate.add_dirty_split(4 * half, 4 * half, 4 * half / 16);
        assert_eq!(counted(&gate, true), half as u64);
        assert_eq!(counted(&gate, false), 4 * half as u64);
        assert_eq!(gate.dirty_bytes(), 4 * half as u64, "the space check still counts them whole");
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(4, 4, 0);
        assert_eq!(wanted(&gate), 7);

        // Records mostly written count what they hold: their memory.
        let gate = gate_with_log();
        gate.add_dirty_split(2 * half, 2 * half, half * 3 / 4);
        assert_eq!(counted(&gate, true), half as u64 * 3 / 4);
        assert_eq!(wanted(&gate), 0);
        // Written bytes growing in place (a write into a partial record) ask too.
        gate.add_dirty_split(0, 0, half / 4 + 1);
        assert_eq!(counted(&gate, true), half as u64 + 1);
        assert_eq!(wanted(&gate), 7);

        // Whole records count whole beside them.
        let gate = gate_with_log();
        gate.add_dirty(half / 2);
        gate.add_dirty_split(2 * half, 2 * half, 0);
        assert_eq!(counted(&gate, true), half as u64);
        assert_eq!(wanted(&gate), 0);
        gate.add_dirty_split(4, 4, 0);
        assert_eq!(wanted(&gate), 7);

        // With the log idle they count whole, and ask past a quarter.
        log.store(false, Ordering::SeqCst);
        let gate = gate_with_log();
        gate.add_dirty_split(half / 2 + 1, half / 2 + 1, 0);
        assert_eq!(wanted(&gate), 7);
        log.store(true, Ordering::SeqCst);

        // The throttle counts the same way: partial records counted whole past the
        // limit, holding little, do not stop a writer while the log is active (with
        // the count whole it would wait for a sync, which no thread runs here).
        let gate = Arc::new(gate_with_log());
        gate.add_dirty_split(max as i64 * 11 / 10, max as i64 * 11 / 10, 0);
        assert!(counted(&gate, true) < max / 100 * DELAY_MIN_DIRTY_PERCENT);
        let (tx, rx) = std::sync::mpsc::channel();
        let g = gate.clone();
        std::thread::spawn(move || tx.send(g.hold().map(|h| h.txg)).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).ok().map(|r| r.ok()), Some(Some(7)));
    }

    /// The intent log's fallback reads the open txg under its state lock, which a
    /// writer holding the open txg waits for to log its write; with a quiescer waiting
    /// for that hold, a read of `open` waited behind the quiescer and the three
    /// deadlocked (found with eight fsynced writers and a larger dirty limit). The
    /// open txg must be readable while a quiescer waits.
    #[test]
    fn the_open_txg_is_readable_while_a_quiescer_waits_for_a_hold() {
        let gate = Arc::new(TxgGate::new(7, 1 << 30));
        let hold = gate.hold().unwrap();
        let quiescer = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.quiesce(|_| {}))
        };
        // Until the quiescer waits: it then keeps new readers of `open` out.
        let start = std::time::Instant::now();
        while gate.open.try_read().is_some() {
            assert!(start.elapsed() < Duration::from_secs(30), "the quiescer never waited for the hold");
            std::thread::yield_now();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let gate = gate.clone();
            std::thread::spawn(move || tx.send(gate.open_txg()).unwrap())
        };
        let read = rx.recv_timeout(Duration::from_secs(20));
        // Release the hold either way, so a failure does not leave threads blocked.
        drop(hold);
        assert_eq!(read, Ok(7), "open_txg waited behind the quiescer");
        reader.join().unwrap();
        assert_eq!(quiescer.join().unwrap(), 7);
        assert_eq!(gate.open_txg(), 8);
    }
}
