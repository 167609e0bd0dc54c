//! Transaction groups: the open-txg gate, dirty-data accounting and the write throttle.
//!
//! Theory (OpenZFS `module/zfs/txg.c`, `dsl_pool.c` dirty data): changes are made under
//! a hold on the open txg (a read lock on `open`). The sync thread *quiesces* by taking
//! the write lock — which waits for every hold of the open txg to be released — then
//! collects that txg's dirty state from every object set and opens the next txg before
//! releasing the lock. So a txg's changes are exactly those made under its holds.
//!
//! Dirty bytes (data waiting to be written) are counted here. `hold` throttles writers
//! while dirty data exceeds `dirty_max_bytes`, and asks for a sync as soon as dirty data
//! passes a quarter of it (ZFS `zfs_dirty_data_sync_percent`), so a sync is always
//! running ahead of the writers rather than starting when they stall.
//!
//! Locks: `open` (RwLock) is taken before any object-set lock. Never take a second hold
//! while holding one (a waiting quiescer would deadlock the pair).
//!
//! Called by: objset (holds, dirty accounting), spa (quiesce, sync bookkeeping).

use crate::{DmuError, Result, TxHold};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
struct SyncState {
    /// Highest txg whose uberblock is on disk.
    synced_txg: u64,
    /// Highest txg someone asked to be synced now.
    wanted_txg: u64,
    /// Set when a sync failed: the pool is suspended.
    suspended: bool,
}

/// The txg gate shared by the pool and all its object sets.
pub struct TxgGate {
    open: Arc<RwLock<u64>>,
    dirty: Mutex<u64>,
    dirty_cv: Condvar,
    sync: Mutex<SyncState>,
    sync_cv: Condvar,
    /// Writers wait while dirty data exceeds this many bytes.
    pub dirty_max_bytes: u64,
    readonly: AtomicBool,
}

impl TxgGate {
    /// A gate whose open txg is `open_txg` and whose last synced txg is `open_txg - 1`.
    pub fn new(open_txg: u64, dirty_max_bytes: u64) -> TxgGate {
        TxgGate {
            open: Arc::new(RwLock::new(open_txg)),
            dirty: Mutex::new(0),
            dirty_cv: Condvar::new(),
            sync: Mutex::new(SyncState {
                synced_txg: open_txg.saturating_sub(1),
                wanted_txg: 0,
                suspended: false,
            }),
            sync_cv: Condvar::new(),
            dirty_max_bytes,
            readonly: AtomicBool::new(false),
        }
    }

    /// Refuse all further holds (read-only import, export in progress).
    pub fn set_readonly(&self, ro: bool) {
        self.readonly.store(ro, Ordering::SeqCst);
    }

    /// True when holds are refused.
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::SeqCst) || self.sync.lock().suspended
    }

    /// Hold the open txg, throttling while dirty data is over the limit.
    pub fn hold(&self) -> Result<TxHold> {
        if self.is_readonly() {
            return Err(DmuError::ReadOnly);
        }
        {
            let mut d = self.dirty.lock();
            while *d > self.dirty_max_bytes {
                let open = *self.open.read();
                self.request_sync(open);
                self.dirty_cv.wait_for(&mut d, Duration::from_millis(100));
                if self.sync.lock().suspended {
                    return Err(DmuError::ReadOnly);
                }
            }
        }
        let guard = self.open.read_arc();
        let txg = *guard;
        Ok(TxHold {
            txg,
            _guard: Some(Box::new(guard)),
        })
    }

    /// The open txg.
    pub fn open_txg(&self) -> u64 {
        *self.open.read()
    }

    /// Quiesce: wait for all holds of the open txg, run `collect(txg)` while no hold
    /// can be taken, open the next txg. Returns the quiesced txg.
    pub fn quiesce(&self, collect: impl FnOnce(u64)) -> u64 {
        let mut g = self.open.write();
        let txg = *g;
        collect(txg);
        *g = txg + 1;
        txg
    }

    /// Account `delta` bytes of dirty data (negative when synced or discarded).
    pub fn add_dirty(&self, delta: i64) {
        let mut d = self.dirty.lock();
        *d = (*d as i64 + delta).max(0) as u64;
        let over = *d > self.dirty_max_bytes / 4;
        drop(d);
        self.dirty_cv.notify_all();
        if over && delta > 0 {
            let open = *self.open.read_recursive();
            let mut s = self.sync.lock();
            if s.wanted_txg < open {
                s.wanted_txg = open;
                self.sync_cv.notify_all();
            }
        }
    }

    /// Dirty bytes not yet written.
    pub fn dirty_bytes(&self) -> u64 {
        *self.dirty.lock()
    }

    /// Ask the sync thread to sync through `txg` now.
    pub fn request_sync(&self, txg: u64) {
        let mut s = self.sync.lock();
        if s.wanted_txg < txg {
            s.wanted_txg = txg;
        }
        self.sync_cv.notify_all();
    }

    /// Block until `txg` is synced (requesting it). Fails if the pool suspends.
    pub fn wait_synced(&self, txg: u64) -> Result<()> {
        self.request_sync(txg);
        let mut s = self.sync.lock();
        while s.synced_txg < txg {
            if s.suspended {
                return Err(DmuError::Io("pool I/O is suspended".into()));
            }
            self.sync_cv.wait_for(&mut s, Duration::from_millis(200));
        }
        Ok(())
    }

    /// Sync thread: wait up to `timeout` for a sync request. Returns true if one is
    /// pending (or dirty data is waiting and the timeout passed).
    pub fn wait_for_work(&self, timeout: Duration) -> bool {
        let open = *self.open.read();
        let mut s = self.sync.lock();
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

    /// Sync thread: a sync failed; refuse further changes and fail waiters.
    pub fn suspend(&self) {
        self.sync.lock().suspended = true;
        self.sync_cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// Last synced txg.
    pub fn synced_txg(&self) -> u64 {
        self.sync.lock().synced_txg
    }
}
