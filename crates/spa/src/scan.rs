//! The pool's scan: starting, pausing, cancelling and resuming scrubs and resilvers,
//! and keeping their progress in the MOS.
//!
//! Theory. One scan runs at a time, in a thread of its own, as a loop of *batches*
//! (see `tarn_scan`): under `sync_lock` the thread takes the roots of the last
//! synced txg and holds frees from the next txg on; it then walks from the saved
//! [`Bookmark`] until the queue bound, issues the batch sorted by offset, releases
//! the hold, and records the new bookmark and counters in the pool directory
//! ([`ScanPhys`], a txg makes it durable). A crash or an export therefore loses at
//! most the batch in flight; import resumes a scan that was running (OpenZFS keeps
//! `dsl_scan_phys_t` in the MOS the same way). Pausing stops the thread between
//! extents and records `paused_since`; `zpool scrub` resumes it. Cancelling records
//! the scan as canceled.
//!
//! A resilver scans blocks born within the DTLs of the usable leaves (from the
//! smallest DTL txg to the last synced txg) and, when it reaches the end, calls
//! [`Pool::resilver_done`] so repaired leaves forget those txgs and finished
//! replacements drop their old leaf. A resilver requested while one runs restarts
//! it from the beginning with the wider txg range; a resilver requested during a
//! scrub cancels the scrub (as OpenZFS does).
//!
//! Errors found (blocks no copy of which verifies) are kept in the directory's error
//! log as (dataset, object) pairs for `zpool status -v`; a clean scrub that finishes
//! clears the log (OpenZFS rotates its error log per scrub the same way).
//!
//! Called by: cli (`zpool scrub`, `zpool status`), spa (import, repair).

use crate::pool::{now_s, Pool};
use crate::{Result, SpaError};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tarn_dmu::ObjectStore;
use tarn_scan::{Bookmark, Params, Progress, Roots};
use tarn_vdev::scan::{IoTrace, LeafTrace, ScanFunc};

/// Scan function as stored and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanKind {
    /// `zpool scrub`.
    Scrub,
    /// Resilver after attach/replace/online.
    Resilver,
}

/// Scan state as stored (OpenZFS `dsl_scan_state_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanState {
    /// Running or paused.
    Scanning,
    /// Reached the end.
    Finished,
    /// Stopped by `zpool scrub -s` (or a resilver that replaced a scrub).
    Canceled,
}

/// The persistent scan record (in the MOS pool directory; OpenZFS `dsl_scan_phys_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanPhys {
    /// Scrub or resilver.
    pub func: ScanKind,
    /// Scanning, finished or canceled.
    pub state: ScanState,
    /// Seconds since the epoch when the scan started.
    pub start_time_s: u64,
    /// When it finished or was canceled (0 while scanning).
    pub end_time_s: u64,
    /// Blocks born before this txg are not scanned.
    pub min_txg: u64,
    /// Blocks born after this txg are not scanned.
    pub max_txg: u64,
    /// Allocated bytes of the pool at the start (the `total` of `zpool status`).
    pub to_examine_bytes: u64,
    /// Allocated bytes of blocks found by the traversal so far.
    pub examined_bytes: u64,
    /// Allocated bytes of blocks issued so far.
    pub issued_bytes: u64,
    /// Bytes written to repair damage or resilver.
    pub repaired_bytes: u64,
    /// Blocks no copy of which verified.
    pub errors: u64,
    /// Where the next batch starts.
    pub bookmark: Bookmark,
    /// Set while paused (`zpool scrub -p`): when the pause began.
    #[serde(default)]
    pub paused_since_s: Option<u64>,
    /// Seconds spent paused in all.
    #[serde(default)]
    pub paused_total_s: u64,
}

/// What `zpool status` shows of the scan: the record, with live counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStatus {
    /// The record (counters include the batch in flight).
    pub phys: ScanPhys,
    /// When this pass (the run since start, resume or import) began, and the
    /// examined/issued bytes at that moment (for the rates).
    pub pass_start_s: u64,
    /// Examined bytes when the pass began.
    pub pass_examined_start_bytes: u64,
    /// Issued bytes when the pass began.
    pub pass_issued_start_bytes: u64,
}

/// Settings a benchmark or test may change (OpenZFS exposes the like as module
/// parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanTunables {
    /// Sorted, aggregated issue (true, the default) or block-by-block traversal order.
    pub sorted: bool,
    /// Queue bound per batch, in blocks' DVAs (default 1M, about 100 MiB of memory).
    pub batch_max_entries: usize,
    /// Delay before an extent while applications are doing I/O (ms; 0 disables).
    pub busy_delay_ms: u64,
}

impl Default for ScanTunables {
    fn default() -> Self {
        ScanTunables {
            sorted: std::env::var("TARN_SCAN_ORDER").map(|v| v != "naive").unwrap_or(true),
            batch_max_entries: 1 << 20,
            busy_delay_ms: 4,
        }
    }
}

/// I/O made by the last (or current) scan, per leaf: for the benchmarks' report.
#[derive(Debug, Clone, Default)]
pub struct ScanIoReport {
    /// Leaf path → counts.
    pub leaves: Vec<(String, LeafTrace)>,
    /// Times the scan waited for application I/O to pause (this import).
    pub busy_delays: u64,
}

/// How long after application I/O the pool counts as busy (OpenZFS `zfs_scan_idle`).
const SCAN_IDLE_MS: u64 = 50;

/// The scan's in-memory state (one per pool).
#[derive(Default)]
pub(crate) struct Scanner {
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Ask the thread to leave at the next extent (pause, cancel, export).
    stop: AtomicBool,
    progress: Mutex<Arc<Progress>>,
    trace: Mutex<Arc<IoTrace>>,
    /// (pass start s, examined at start, issued at start).
    pass: Mutex<(u64, u64, u64)>,
    tunables: Mutex<ScanTunables>,
    /// Last application-activity reading and when it last changed.
    activity: Mutex<(u64, Option<Instant>)>,
    /// Delays taken because applications were busy.
    busy_delays: std::sync::atomic::AtomicU64,
    /// The pool itself, for the scan thread.
    self_ref: Mutex<Weak<Pool>>,
    /// (dataset, object) of reads that failed on every copy since import; merged
    /// into the directory's error log when a scan records progress.
    pub(crate) read_errors: Arc<Mutex<std::collections::BTreeSet<(u64, u64)>>>,
}

fn busy_msg(pool: &str, phys: &ScanPhys) -> SpaError {
    let what = match phys.func {
        ScanKind::Scrub => "currently scrubbing; use 'zpool scrub -s' to cancel the current scrub",
        ScanKind::Resilver => "currently resilvering",
    };
    SpaError::Busy(format!("cannot scrub {pool}: {what}"))
}

impl Pool {
    fn scan_phys(&self) -> Option<ScanPhys> {
        self.dir.lock().scan.clone()
    }

    /// Store `phys` (and error-log additions) in the directory; a txg makes it durable.
    fn save_scan(&self, phys: &ScanPhys, damaged: &[(u64, u64)], clear_errlog: bool) -> Result<()> {
        let tx = self.gate.hold_nowait().map_err(crate::pool::dmu_err)?;
        let _a = self.admin.lock();
        {
            let mut d = self.dir.lock();
            d.scan = Some(phys.clone());
            let mut live = self.scanner.read_errors.lock();
            if clear_errlog {
                d.errlog.clear();
                live.clear();
            }
            d.errlog.extend(damaged.iter().copied());
            d.errlog.extend(live.iter().copied());
        }
        self.save_scan_records(&tx)
    }

    /// `zpool scrub`: start a scrub, or resume a paused one.
    ///
    /// Errors: `Busy` ("cannot scrub P: currently scrubbing; …" / "currently
    /// resilvering") while a scan runs; `Io` if the record cannot be stored.
    pub fn scrub_start(&self) -> Result<()> {
        if let Some(mut p) = self.scan_phys().filter(|p| p.state == ScanState::Scanning) {
            let Some(since) = p.paused_since_s.filter(|_| p.func == ScanKind::Scrub) else {
                return Err(busy_msg(&self.name, &p));
            };
            p.paused_total_s += now_s().saturating_sub(since);
            p.paused_since_s = None;
            self.save_scan(&p, &[], false)?;
            self.spawn_scan();
            return Ok(());
        }
        self.begin(ScanKind::Scrub)
    }

    /// Start a new scan of `kind` from the beginning (any running one must be stopped).
    fn begin(&self, kind: ScanKind) -> Result<()> {
        self.stop_scan_thread();
        let synced = self.gate.synced_txg();
        let min_txg = match kind {
            ScanKind::Scrub => 0,
            ScanKind::Resilver => match self.dtl_min_txg() {
                Some(t) => t,
                None => return Ok(()),
            },
        };
        let phys = ScanPhys {
            func: kind,
            state: ScanState::Scanning,
            start_time_s: now_s(),
            end_time_s: 0,
            min_txg,
            max_txg: synced,
            to_examine_bytes: self.zio.alloc_bytes(),
            examined_bytes: 0,
            issued_bytes: 0,
            repaired_bytes: 0,
            errors: 0,
            bookmark: Bookmark::default(),
            paused_since_s: None,
            paused_total_s: 0,
        };
        *self.scanner.trace.lock() = Arc::new(IoTrace::default());
        self.save_scan(&phys, &[], false)?;
        self.spawn_scan();
        Ok(())
    }

    /// Smallest txg in the DTL of any usable leaf (what a resilver must start from).
    fn dtl_min_txg(&self) -> Option<u64> {
        self.zio
            .vdevs()
            .iter()
            .flat_map(|t| {
                t.leaves()
                    .into_iter()
                    .filter(|l| l.state().is_usable())
                    .filter_map(|l| l.dtl().bounds())
                    .collect::<Vec<_>>()
            })
            .map(|(lo, _)| lo)
            .min()
    }

    /// Start (or restart, wider) a resilver of every block born in a usable leaf's
    /// DTL. A scrub in progress is canceled first. No-op when no DTL is set.
    pub fn request_resilver(&self) {
        if let Some(p) = self.scan_phys().filter(|p| p.state == ScanState::Scanning) {
            if p.func == ScanKind::Scrub {
                let _ = self.finish_scan(p, ScanState::Canceled, &[]);
            }
        }
        if let Err(e) = self.begin(ScanKind::Resilver) {
            tracing::warn!("pool {}: cannot start resilver: {e}", self.name);
        }
    }

    /// `zpool scrub -p`: pause the running scrub where it is.
    ///
    /// Errors: `NotFound` "cannot pause scrubbing P: there is no active scrub".
    pub fn scrub_pause(&self) -> Result<()> {
        let Some(mut p) = self
            .scan_phys()
            .filter(|p| p.state == ScanState::Scanning && p.func == ScanKind::Scrub && p.paused_since_s.is_none())
        else {
            return Err(SpaError::NotFound(format!("cannot pause scrubbing {}: there is no active scrub", self.name)));
        };
        self.stop_scan_thread();
        // The thread may have just finished.
        if let Some(now) = self.scan_phys() {
            if now.state != ScanState::Scanning {
                return Ok(());
            }
            p = now;
        }
        p.paused_since_s = Some(now_s());
        self.save_scan(&p, &[], false)
    }

    /// `zpool scrub -s`: cancel the running (or paused) scrub.
    ///
    /// Errors: `NotFound` "cannot cancel scrubbing P: there is no active scrub".
    pub fn scrub_cancel(&self) -> Result<()> {
        let Some(_) = self.scan_phys().filter(|p| p.state == ScanState::Scanning && p.func == ScanKind::Scrub) else {
            return Err(SpaError::NotFound(format!("cannot cancel scrubbing {}: there is no active scrub", self.name)));
        };
        self.stop_scan_thread();
        match self.scan_phys() {
            Some(p) if p.state == ScanState::Scanning => self.finish_scan(p, ScanState::Canceled, &[]),
            _ => Ok(()),
        }
    }

    /// Wait until no scan thread runs (`zpool scrub -w`, `zpool wait`). Returns at
    /// once when nothing runs or the scan is paused.
    pub fn scan_wait(&self) {
        loop {
            let running = self.scanner.thread.lock().as_ref().is_some_and(|h| !h.is_finished());
            if !running {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The scan record with live counters, or None if no scan ever ran.
    pub fn scan_status(&self) -> Option<ScanStatus> {
        let mut phys = self.scan_phys()?;
        let running = self.scanner.thread.lock().as_ref().is_some_and(|h| !h.is_finished());
        if running && phys.state == ScanState::Scanning {
            let p = self.scanner.progress.lock().clone();
            phys.examined_bytes = phys.examined_bytes.max(p.examined_bytes.load(Ordering::Relaxed));
            phys.issued_bytes = phys.issued_bytes.max(p.issued_bytes.load(Ordering::Relaxed));
            phys.repaired_bytes = phys.repaired_bytes.max(p.repaired_bytes.load(Ordering::Relaxed));
            phys.errors = phys.errors.max(p.errors.load(Ordering::Relaxed));
        }
        let (pass_start_s, ex, is) = *self.scanner.pass.lock();
        Some(ScanStatus {
            pass_start_s: if pass_start_s == 0 { phys.start_time_s } else { pass_start_s },
            pass_examined_start_bytes: ex,
            pass_issued_start_bytes: is,
            phys,
        })
    }

    /// Change scan tunables (affects scans started afterwards, and batches after the
    /// current one).
    pub fn set_scan_tunables(&self, t: ScanTunables) {
        *self.scanner.tunables.lock() = t;
    }

    /// The scan tunables in force.
    pub fn scan_tunables(&self) -> ScanTunables {
        *self.scanner.tunables.lock()
    }

    /// Per-leaf I/O of the last scan started in this import.
    pub fn scan_io_report(&self) -> ScanIoReport {
        let snap = self.scanner.trace.lock().snapshot();
        let mut leaves = Vec::new();
        for top in self.zio.vdevs() {
            for l in top.leaves() {
                if let Some(t) = snap.get(&l.guid()) {
                    leaves.push((l.display_name(), *t));
                }
            }
        }
        ScanIoReport {
            leaves,
            busy_delays: self.scanner.busy_delays.load(Ordering::Relaxed),
        }
    }

    /// The error log: (dataset name, object id) of every object with a block found
    /// unrecoverable by a scan or by a read since import. Object `u64::MAX` names
    /// dataset metadata.
    pub fn error_log(&self) -> Vec<(String, u64)> {
        let d = self.dir.lock();
        let mut all = d.errlog.clone();
        all.extend(self.scanner.read_errors.lock().iter().copied());
        all.iter()
            .map(|&(ds, obj)| {
                let name = if ds == tarn_scan::MOS_DATASET {
                    format!("<metadata>:{}", self.name)
                } else {
                    d.datasets
                        .iter()
                        .find(|(_, r)| r.obj == ds)
                        .map(|(n, _)| n.clone())
                        .unwrap_or_else(|| format!("<0x{ds:x}>"))
                };
                (name, obj)
            })
            .collect()
    }

    /// Resume a scan that was running when the pool was last active (import);
    /// otherwise start a resilver if some leaf misses txgs.
    pub(crate) fn resume_scan(&self) {
        match self.scan_phys() {
            Some(p) if p.state == ScanState::Scanning && p.paused_since_s.is_none() => self.spawn_scan(),
            Some(p) if p.state == ScanState::Scanning && p.func == ScanKind::Resilver => {}
            _ => self.request_resilver_if_needed(),
        }
    }

    /// Whether a resilver is in progress (for the "(resilvering)" annotation).
    pub(crate) fn resilver_running(&self) -> bool {
        self.scan_phys().is_some_and(|p| p.state == ScanState::Scanning && p.func == ScanKind::Resilver)
    }

    /// Let the scan thread reach the pool (called once the pool is in its `Arc`).
    pub(crate) fn set_scan_self(self: &Arc<Self>) {
        *self.scanner.self_ref.lock() = Arc::downgrade(self);
    }

    /// Stop the scan thread (it leaves at its next extent) and wait for it.
    pub(crate) fn stop_scan_thread(&self) {
        let h = self.scanner.thread.lock().take();
        if let Some(h) = h {
            self.scanner.stop.store(true, Ordering::SeqCst);
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        self.scanner.stop.store(false, Ordering::SeqCst);
        self.zio.with_space(|s| s.hold_frees_from(None));
    }

    fn spawn_scan(&self) {
        self.stop_scan_thread();
        // The pass starts now: counters continue from the record.
        if let Some(p) = self.scan_phys() {
            let prog = Progress::default();
            prog.examined_bytes.store(p.examined_bytes, Ordering::Relaxed);
            prog.issued_bytes.store(p.issued_bytes, Ordering::Relaxed);
            prog.repaired_bytes.store(p.repaired_bytes, Ordering::Relaxed);
            prog.errors.store(p.errors, Ordering::Relaxed);
            *self.scanner.progress.lock() = Arc::new(prog);
            *self.scanner.pass.lock() = (now_s(), p.examined_bytes, p.issued_bytes);
        }
        let weak = self.scanner.self_ref.lock().clone();
        let h = std::thread::Builder::new()
            .name(format!("scan:{}", self.name))
            .spawn(move || scan_thread(weak))
            .expect("spawn scan thread");
        *self.scanner.thread.lock() = Some(h);
    }

    fn finish_scan(&self, mut phys: ScanPhys, state: ScanState, damaged: &[(u64, u64)]) -> Result<()> {
        phys.state = state;
        phys.end_time_s = now_s();
        phys.paused_since_s = None;
        let clean_scrub = state == ScanState::Finished && phys.func == ScanKind::Scrub && phys.errors == 0;
        self.save_scan(&phys, damaged, clean_scrub)
    }

    /// Sleep while applications are busy (true: go on; false: the scan must stop).
    fn scan_throttle(&self) -> bool {
        if self.scanner.stop.load(Ordering::Relaxed) {
            return false;
        }
        let delay_ms = self.scanner.tunables.lock().busy_delay_ms;
        if delay_ms == 0 {
            return true;
        }
        let now = self.zio.io_activity();
        let busy = {
            let mut a = self.scanner.activity.lock();
            if a.0 != now {
                *a = (now, Some(Instant::now()));
            }
            a.1.is_some_and(|t| t.elapsed() < Duration::from_millis(SCAN_IDLE_MS))
        };
        if busy {
            self.scanner.busy_delays.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(delay_ms));
        }
        !self.scanner.stop.load(Ordering::Relaxed)
    }

    /// The roots of the last synced txg, with frees from the next txg held.
    fn scan_roots(&self) -> Roots {
        let _s = self.sync_lock.lock();
        let synced = self.gate.synced_txg();
        self.zio.with_space(|s| s.hold_frees_from(Some(synced + 1)));
        self.roots_synced()
    }

    /// The roots of the last synced txg (call with `sync_lock` held).
    fn roots_synced(&self) -> Roots {
        let datasets = {
            // Snapshots too: a block only a snapshot holds must be scrubbed and
            // resilvered like any other (shared blocks are visited once per tree).
            let d = self.dir.lock();
            d.datasets
                .values()
                .chain(d.snaps.values())
                .filter_map(|r| {
                    let b = self.mos.bonus(r.obj).ok()?;
                    Some((r.obj, crate::dsl::DslDatasetPhys::decode(&b).ok()?.rootbp))
                })
                .collect()
        };
        Roots {
            mos: self.mos.root_bp(),
            spacemap: self.zio.with_space(|s| s.structure_bps()),
            datasets,
        }
    }
}

/// One batch: walk, issue, record. Returns false when the scan thread should exit.
fn scan_batch(pool: &Arc<Pool>) -> bool {
    crate::inject::sync_fault_point(&pool.name, crate::inject::SyncFault::PanicInScan);
    let Some(mut phys) = pool.scan_phys().filter(|p| p.state == ScanState::Scanning && p.paused_since_s.is_none()) else {
        return false;
    };
    let tun = pool.scan_tunables();
    let func = match phys.func {
        ScanKind::Scrub => ScanFunc::Scrub,
        ScanKind::Resilver => ScanFunc::Resilver,
    };
    let mut params = Params::new(func, phys.min_txg, phys.max_txg);
    params.sorted = tun.sorted;
    params.batch_max_entries = tun.batch_max_entries.max(1);
    let progress = pool.scanner.progress.lock().clone();
    let trace = pool.scanner.trace.lock().clone();
    let roots = pool.scan_roots();
    let t0 = std::time::Instant::now();
    let collected = tarn_scan::collect(&pool.zio, &roots, &params, phys.bookmark);
    let examined: u64 = collected.entries.iter().map(|e| e.asize_bytes).sum();
    progress.examined_bytes.fetch_add(examined, Ordering::Relaxed);
    let (entries, t1) = (collected.entries.len(), std::time::Instant::now());
    // The collect's own metadata reads are no application's: only I/O from here on
    // makes the issue wait (they used to cost the batch's first `SCAN_IDLE_MS`).
    *pool.scanner.activity.lock() = (pool.zio.io_activity(), None);
    let throttle = || pool.scan_throttle();
    let issued = tarn_scan::issue(&pool.zio, collected.entries, &params, &progress, &trace, &throttle);
    tracing::debug!(
        "pool {}: scan batch: {entries} blocks' DVAs ({examined} bytes) collected in {:?}, issued in {:?}, {} waits for application I/O so far",
        pool.name,
        t1 - t0,
        t1.elapsed(),
        pool.scanner.busy_delays.load(Ordering::Relaxed)
    );
    pool.zio.with_space(|s| s.hold_frees_from(None));
    if pool.scanner.stop.load(Ordering::Relaxed) {
        // Stopped mid-batch: the batch is redone from the saved bookmark.
        return false;
    }
    let mut damaged = issued.damaged;
    damaged.extend(collected.unreadable.iter().copied());
    damaged.sort_unstable();
    damaged.dedup();
    phys.examined_bytes = progress.examined_bytes.load(Ordering::Relaxed);
    phys.issued_bytes = progress.issued_bytes.load(Ordering::Relaxed);
    phys.repaired_bytes = progress.repaired_bytes.load(Ordering::Relaxed);
    phys.errors = progress.errors.load(Ordering::Relaxed) + collected.unreadable.len() as u64;
    let r = match collected.next {
        Some(b) => {
            phys.bookmark = b;
            pool.save_scan(&phys, &damaged, false).map(|_| true)
        }
        None => {
            let (func, max_txg) = (phys.func, phys.max_txg);
            for (leaf, t) in pool.scan_io_report().leaves {
                tracing::info!(
                    "pool {}: {:?} I/O on {leaf}: {} I/Os, {} bytes, average {} bytes, {:.1}% ascending",
                    pool.name,
                    phys.func,
                    t.ios,
                    t.bytes,
                    t.bytes / t.ios.max(1),
                    100.0 * t.ascending as f64 / t.ios.max(1) as f64
                );
            }
            // Recorded finished before the replace completes (OpenZFS's order too:
            // `dsl_scan_done`, then the resilver-done task), so no status shows the
            // new tree beside a resilver still in progress.
            let r = pool.finish_scan(phys, ScanState::Finished, &damaged).map(|_| false);
            if func == ScanKind::Resilver {
                pool.resilver_done(max_txg);
            }
            r
        }
    };
    match r {
        Ok(more) => more,
        Err(e) => {
            tracing::error!("pool {}: scan stopped: {e}", pool.name);
            false
        }
    }
}

fn scan_thread(weak: Weak<Pool>) {
    loop {
        let Some(pool) = weak.upgrade() else { return };
        if pool.scanner.stop.load(Ordering::Relaxed) || pool.closed.load(Ordering::SeqCst) {
            return;
        }
        // A panic in a batch suspends the pool rather than silently ending the scan
        // with half-changed state serving (`suspend.rs`).
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scan_batch(&pool))) {
            Ok(true) => {}
            Ok(false) => {
                // Make the record durable promptly.
                pool.gate.request_sync(0);
                return;
            }
            Err(payload) => {
                let message = crate::suspend::panic_message(payload.as_ref());
                let cause = crate::suspend::SuspendCause::Panic {
                    thread: "scan".into(),
                    message,
                };
                pool.suspend(pool.gate.open_txg(), cause, true);
                return;
            }
        }
    }
}
