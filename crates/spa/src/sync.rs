//! The txg sync thread and one txg's sync (see the crate theory statement).
//!
//! Sync tasks (OpenZFS `dsl_sync_task`): a change that must see the file systems exactly
//! as a txg leaves them — a snapshot freezes the root each dataset has at the end of
//! that txg — is queued with [`Pool::run_sync_task`] and run by the sync of the open
//! txg (or a later one), after every object set of that txg has written its root into
//! its dataset record and before the MOS is written, so the change and the state it
//! froze become durable in the same txg: one sync per command instead of a sync to
//! settle the data and a second for the records. A task runs with `sync_lock` held and
//! takes `admin` itself; it must check everything before it changes anything (its
//! error leaves the MOS untouched) and must not wait for a txg.
//!
//! Observability: at debug level (`TARN_LOG=tarn_spa=debug` in the daemon's
//! environment) each txg that writes logs one line: its dirty blocks and bytes, how
//! many blocks the early writer had written (and, since the object sets were opened,
//! how many it wrote and discarded and how many holds waited for its backlog), and the
//! cumulative time at the end of each phase (quiesce, data, sync tasks, MOS, space
//! maps, flush, uberblock).

use crate::dsl::DslDatasetPhys;
use crate::pool::{dmu_err, now_s, Pool};
use crate::suspend::SuspendCause;
use crate::{Result, SpaError};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tarn_dmu::{ObjectStore, TxHold};
use tarn_phys::{UberblockPhys, TARN_FORMAT_VERSION};
use tarn_vdev::label;

/// Seconds between txg syncs when nobody asks for one (ZFS `zfs_txg_timeout`).
pub const TXG_TIMEOUT_S: u64 = 5;

/// The body of a [`SyncTask`]: called once, in syncing context, with the txg's hold.
type SyncTaskFn = Box<dyn FnOnce(&Pool, &TxHold) + Send>;

/// A queued syncing-context change: runs in the sync of a txg at or after `min_txg`
/// with that txg's hold (see the module docs).
pub(crate) struct SyncTask {
    min_txg: u64,
    run: SyncTaskFn,
}

impl Pool {
    /// Run `task` in syncing context (module docs) and wait until the txg it ran in is
    /// durable; returns the task's result. The task runs in the sync of the txg open
    /// now or a later one, so it sees every change acknowledged before this call.
    ///
    /// Errors: the task's own; `Io` when the pool suspends or is closed before the
    /// task ran or before its txg synced.
    pub(crate) fn run_sync_task<T: Send + 'static>(&self, task: impl FnOnce(&Pool, &TxHold) -> Result<T> + Send + 'static) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        // Early writes of the next txg leave the device to the syncs this waits for.
        let _waiting = self.gate.sync_waiter();
        let min_txg = self.gate.open_txg();
        self.sync_tasks.lock().push(SyncTask {
            min_txg,
            run: Box::new(move |pool, hold| {
                let r = task(pool, hold);
                let _ = tx.send((hold.txg, r));
            }),
        });
        loop {
            self.gate.request_sync(self.gate.open_txg());
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((txg, r)) => {
                    let v = r?;
                    self.gate.wait_synced(txg).map_err(dmu_err)?;
                    return Ok(v);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.closed.load(Ordering::SeqCst) || self.gate.suspended().is_some() {
                        return Err(SpaError::Io("pool I/O is suspended".into()));
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(SpaError::Io("pool I/O is suspended".into()));
                }
            }
        }
    }

    /// Syncing context of `txg`: run the queued tasks that may run in it, in order.
    fn run_due_sync_tasks(&self, tx: &TxHold) {
        let due: Vec<SyncTask> = {
            let mut q = self.sync_tasks.lock();
            let (due, later) = std::mem::take(&mut *q).into_iter().partition(|t| t.min_txg <= tx.txg);
            *q = later;
            due
        };
        for t in due {
            (t.run)(self, tx);
        }
    }

    fn has_due_sync_tasks(&self, txg: u64) -> bool {
        self.sync_tasks.lock().iter().any(|t| t.min_txg <= txg)
    }

    pub(crate) fn start_sync_thread(self: &Arc<Self>) {
        self.set_scan_self();
        self.register_live();
        let weak: Weak<Pool> = Arc::downgrade(self);
        let h = std::thread::Builder::new()
            .name(format!("txg_sync:{}", self.name))
            .spawn(move || {
                let mut last = Instant::now();
                // Hold only the gate while waiting, so an abandoned pool is freed (and
                // its leaves unlocked) promptly.
                while let Some(gate) = weak.upgrade().map(|p| p.gate.clone()) {
                    let asked = gate.wait_for_work(Duration::from_millis(500));
                    drop(gate);
                    let Some(p) = weak.upgrade() else { break };
                    if p.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let due = last.elapsed() >= Duration::from_secs(TXG_TIMEOUT_S);
                    if p.gate.suspended().is_some() {
                        continue;
                    }
                    if asked || (due && p.has_dirty()) {
                        p.sync_contained();
                        last = Instant::now();
                    } else if due {
                        last = Instant::now();
                    }
                }
            })
            .expect("spawn sync thread");
        *self.sync_thread.lock() = Some(h);
    }

    /// One txg sync with its failures contained (`suspend.rs`): an error or a panic
    /// suspends the pool; `reopen` unless the sync failed before it changed anything.
    fn sync_contained(&self) {
        let txg = self.gate.open_txg();
        self.sync_untrusted.store(false, Ordering::SeqCst);
        let cause = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sync_once())) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => SuspendCause::Io(e.to_string()),
            Err(payload) => SuspendCause::Panic {
                thread: "txg_sync".into(),
                message: crate::suspend::panic_message(payload.as_ref()),
            },
        };
        self.suspend(txg, cause, self.sync_untrusted.load(Ordering::SeqCst));
    }

    pub(crate) fn stop_sync_thread(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.gate.request_sync(0);
        if let Some(h) = self.sync_thread.lock().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn has_dirty(&self) -> bool {
        self.gate.dirty_bytes() > 0 || self.mos.has_dirty() || self.objsets.lock().values().any(|o| o.has_dirty())
    }

    /// Sync one txg: everything changed under holds of the open txg becomes durable.
    pub(crate) fn sync_once(&self) -> Result<()> {
        let t_wait = Instant::now();
        let _s = self.sync_lock.lock();
        let t0 = Instant::now();
        let lock_wait = t0 - t_wait;
        crate::inject::sync_fault_point(&self.name, crate::inject::SyncFault::PanicAtStart);
        // From the quiesce on, a failure leaves in-memory state half-synced.
        self.sync_untrusted.store(true, Ordering::SeqCst);
        let objsets: Vec<(u64, Arc<tarn_dmu::objset::Objset>)> = self.objsets.lock().iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut batches = Vec::new();
        let txg = self.gate.quiesce(|t| {
            for (id, os) in &objsets {
                batches.push((*id, os.clone(), os.sync_collect(t)));
            }
        });
        // Intent logs: free blocks this txg makes unnecessary, record replay progress,
        // hand each object set its new log header.
        let logs: Vec<Arc<tarn_zil::Zilog>> = self.zilogs.lock().values().cloned().collect();
        for z in &logs {
            z.sync(txg);
        }
        // Fault failing leaves, finish completed replaces (repair.rs); remember every
        // leaf's WRITE count to find the leaves that miss this txg's blocks.
        let write_errors_before = self.repair_sync_start(txg);
        // A changed vdev tree needs an uberblock with the new GUID sum even when no
        // block changed.
        let mut config_changed = self.config_dirty.swap(false, Ordering::SeqCst);
        // A txg asked for while frees are still deferred is synced even when nothing
        // changed: it releases the frees of an older txg, which a writer waiting for
        // space (`Objset::hold_tx`) needs.
        let any = batches.iter().any(|(_, _, b)| !b.is_empty())
            || self.mos.has_dirty()
            || batches.iter().any(|(_, os, _)| os.zil_dirty())
            || config_changed
            || self.zio.deferred_bytes() > 0
            || self.has_due_sync_tasks(txg);
        if !any {
            self.gate.mark_synced(txg);
            for z in &logs {
                z.synced(txg);
            }
            return Ok(());
        }
        let t_quiesced = t0.elapsed();
        // What the debug line reports (module docs), counted only when it is logged.
        let debug = tracing::enabled!(tracing::Level::DEBUG);
        let dirty_records: usize = batches.iter().map(|(_, _, b)| b.block_count()).sum();
        let dirty_bytes: u64 = batches.iter().map(|(_, _, b)| b.dirty_bytes()).sum();
        let tx = TxHold { txg, _guard: None };
        let mut early_blocks = 0;
        let mut early = tarn_dmu::objset::EarlyStats::default();
        for (id, os, mut b) in batches {
            os.sync_write_data(&mut b, 2).map_err(dmu_err)?;
            if debug {
                early_blocks += b.early_blocks();
                let e = os.early_stats();
                early.written += e.written;
                early.discarded += e.discarded;
                early.throttled += e.throttled;
            }
            if let Some(root) = os.sync_finish(b).map_err(dmu_err)? {
                let _a = self.admin.lock();
                // The dataset may have been destroyed meanwhile.
                if let Ok(bonus) = self.mos.bonus(id) {
                    let mut phys = DslDatasetPhys::decode(&bonus)?;
                    phys.rootbp = root;
                    phys.used_bytes = os.used_bytes();
                    self.mos.set_bonus(&tx, id, &phys.encode()).map_err(dmu_err)?;
                    // Blocks the kill hook kept for snapshots go to the dead list.
                    self.flush_dead(&tx, id, phys.deadlist_obj)?;
                }
            }
        }
        crate::inject::sync_fault_point(&self.name, crate::inject::SyncFault::PanicAfterData);
        let t_data = t0.elapsed();
        // Sync tasks see every dataset record as this txg leaves it.
        self.run_due_sync_tasks(&tx);
        let t_tasks = t0.elapsed();
        // The block reference and dedup tables after every free of this txg (they
        // change only in syncing context, so they match this txg's trees).
        if self.zio.brt().take_dirty() {
            self.save_brt(&tx)?;
        }
        if self.zio.ddt().is_dirty() {
            self.save_ddt(&tx)?;
        }
        let mos_root = {
            let _a = self.admin.lock();
            let mut mb = self.mos.sync_collect(txg);
            self.mos.sync_write_data(&mut mb, 1).map_err(dmu_err)?;
            self.mos.sync_finish(mb).map_err(dmu_err)?
        };
        let t_mos = t0.elapsed();
        let rootbp = mos_root.unwrap_or_else(|| self.mos.root_bp());
        // Space accounting (metaslab theory statement): this txg's log block(s), the
        // metaslabs flushed this txg, their directory pages and a new root. The plan
        // allocates its own blocks before it drains the records, so the structures
        // record their own allocation.
        let plan = self
            .zio
            .space_sync_plan(txg)
            .map_err(|e| SpaError::Io(format!("txg {txg}: space structures: {e}")))?;
        self.zio
            .write_sealed_all(&plan.blocks)
            .map_err(|e| SpaError::Io(format!("txg {txg}: space structures: {e}")))?;
        let smbp = plan.root;
        let t_space = t0.elapsed();
        self.zio.flush().map_err(|e| SpaError::Io(e.to_string()))?;
        let t_flush = t0.elapsed();
        // A leaf that failed a write of this txg lacks some of its blocks: its DTL gets
        // the txg, and the labels record that after the uberblock.
        if self.repair_sync_writes_done(txg, &write_errors_before) {
            config_changed = true;
        }
        let ub = UberblockPhys {
            version: TARN_FORMAT_VERSION,
            txg,
            guid_sum: Self::guid_sum(&self.config.lock()),
            timestamp_s: now_s(),
            rootbp,
            spacemap_bp: smbp,
        };
        // Every leaf's label ring, in parallel (one device round trip per txg).
        let top = self.zio.vdevs();
        let leaves: Vec<&tarn_vdev::Vdev> = top.iter().flat_map(|t| t.leaves()).collect();
        let written = label::sync_uberblock(&leaves, &ub).written;
        if written == 0 {
            return Err(SpaError::Io(format!("txg {txg}: no leaf accepted the uberblock")));
        }
        *self.spacemap_bp.lock() = smbp;
        let t_ub = t0.elapsed();
        tracing::debug!(
            "pool {} txg {txg}: waited {lock_wait:?} for the sync lock; {dirty_records} dirty blocks ({early_blocks} written early; since open {} early, {} discarded, {} holds throttled), {dirty_bytes} dirty bytes; quiesce {t_quiesced:?}, data {t_data:?}, tasks {t_tasks:?}, mos {t_mos:?}, space {t_space:?}, flush {t_flush:?}, uberblock {t_ub:?} (cumulative)",
            self.name,
            early.written,
            early.discarded,
            early.throttled
        );
        self.zio.with_space(|s| s.sync_done(txg));
        if config_changed {
            // The uberblock above committed the new vdev tree; now every label (new
            // leaves included) records it. A crash before this point imports the old
            // config at the previous txg (see `Pool::choose_config`).
            self.write_labels(tarn_phys::label::PoolState::Active, txg)?;
            // Leaves that left the tree: the committed config no longer has them.
            self.repair_sync_done();
        }
        self.gate.mark_synced(txg);
        for z in &logs {
            z.synced(txg);
        }
        Ok(())
    }

    /// Write the block reference table into its MOS object (made, and listed in the
    /// pool directory, the first time).
    fn save_brt(&self, tx: &TxHold) -> Result<()> {
        let _a = self.admin.lock();
        let mos = &*self.mos;
        let mut d = self.dir.lock();
        if d.brt_obj == 0 {
            let obj = crate::dsl::create_packed(mos, tx)?;
            tarn_dmu::zap::add(mos, tx, crate::pool::MOS_DIR_OBJ, crate::dsl::DIR_BRT, obj).map_err(dmu_err)?;
            d.brt_obj = obj;
        }
        crate::dsl::write_packed(mos, tx, d.brt_obj, &self.zio.brt().encode())
    }

    /// Append the dedup entries this txg changed to the DDT log (OpenZFS 2.3's fast
    /// dedup log); when the log has grown past the table (and 1 MiB), rewrite the
    /// table whole and empty the log. Both objects are made, and listed in the pool
    /// directory, the first time.
    fn save_ddt(&self, tx: &TxHold) -> Result<()> {
        use crate::dsl::{create_packed, write_packed, DIR_DDT, DIR_DDT_LOG};
        let _a = self.admin.lock();
        let mos = &*self.mos;
        let mut d = self.dir.lock();
        if d.ddt_obj == 0 {
            let table = create_packed(mos, tx)?;
            let log = create_packed(mos, tx)?;
            tarn_dmu::zap::add(mos, tx, crate::pool::MOS_DIR_OBJ, DIR_DDT, table).map_err(dmu_err)?;
            tarn_dmu::zap::add(mos, tx, crate::pool::MOS_DIR_OBJ, DIR_DDT_LOG, log).map_err(dmu_err)?;
            d.ddt_obj = table;
            d.ddt_log_obj = log;
        }
        let records = self.zio.ddt().take_changes();
        let rewrite = self.zio.ddt().take_rewrite_due();
        let len = |obj: u64| crate::dsl::packed_len(mos, obj, u64::MAX);
        let (table_len, log_len) = (len(d.ddt_obj)?, len(d.ddt_log_obj)?);
        let new_log = log_len + records.len() as u64;
        if rewrite || new_log > table_len.max(1 << 20) {
            write_packed(mos, tx, d.ddt_obj, &self.zio.ddt().encode())?;
            write_packed(mos, tx, d.ddt_log_obj, &[])?;
        } else if !records.is_empty() {
            mos.write(tx, d.ddt_log_obj, log_len, &records).map_err(dmu_err)?;
            mos.set_bonus(tx, d.ddt_log_obj, &new_log.to_le_bytes()).map_err(dmu_err)?;
        }
        Ok(())
    }
}
