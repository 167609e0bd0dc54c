//! Pool suspension: panics and failed syncs contained, `failmode`, `zpool clear`.
//!
//! Theory (OpenZFS `spa_suspend`/`zio_suspend`/`spa_resume` and `zpoolprops.7`
//! `failmode`). A txg that cannot be made durable — its sync returned an error (every
//! leaf of a top-level vdev refused a write or a flush, no leaf took the uberblock),
//! or a thread that changes pool state panicked (the txg sync thread, the scan thread,
//! a FUSE worker through [`Pool::suspend_open`]) — **suspends** the pool instead of
//! looping, panicking the process or serving on. Each of those threads catches panics
//! at its loop boundary (`catch_unwind` in `sync.rs`, `scan.rs`, `tarn_fuse`), so a
//! bug costs the pool's availability, never the process or the data on disk.
//!
//! States: *running* → (failure) → *suspended* `{ txg, cause, reopen }` → (`zpool
//! clear`, [`Pool::resume`]) → *running* again, either the same `Pool` or a new one
//! imported from disk. While suspended:
//! - the txg sync thread does not sync (the gate answers it "no work");
//! - writers are treated as the pool property `failmode` says, through the txg gate
//!   (`tarn_dmu::txg` theory): `wait` (default) blocks every data hold and sync wait
//!   until the pool resumes; `continue` fails them with EIO (reads of synced data go
//!   on in both); `panic` aborts the process at the suspension, after logging why;
//! - administrative changes (`zfs create`, `zpool set`, history records) fail at once
//!   with "pool I/O is currently suspended" in every mode, so a daemon request that
//!   holds the daemon's state lock can never wedge the `zpool clear` that would end it;
//! - `zpool status` shows `state: SUSPENDED`, OpenZFS's status and action lines, and
//!   the cause ([`Suspension`]'s `Display`: the txg, the thread, the panic message or
//!   the I/O error).
//!
//! **Resume never serves a half-changed state.** A sync mutates in-memory structures
//! from the moment it quiesces the txg (object-set trees, allocations, the MOS). The
//! sync records that point (`Pool::sync_untrusted`): a failure before it (the sync
//! fault point [`crate::inject::SyncFault::PanicAtStart`]) leaves memory exactly as it
//! was, and `zpool clear` lifts the suspension and re-runs the sync of the same txg in
//! place ([`Resume::InPlace`]), so nothing written before or during the suspension is
//! lost. Any later failure, and every panic outside the sync thread, marks the
//! suspension `reopen`: resume then abandons this `Pool` as a crash would (nothing of
//! its memory is written again: no sync, no label), releases its leaves and imports
//! the pool again from disk ([`Resume::Reopened`]): the last synced txg plus the intent
//! logs' replay, exactly what DESIGN's crash invariant promises. Changes neither
//! synced nor logged are lost, as in a crash; acknowledged (`fsync`ed) data is not.
//! Export or destroy of a suspended pool likewise writes nothing and only releases the
//! leaves.
//!
//! Invariants: the first cause wins (a second failure while suspended is logged, not
//! recorded); the gate is suspended exactly while `suspension` is `Some` (both set in
//! [`Pool::suspend`], both cleared in [`Pool::resume`]); a reopened pool's old `Pool`
//! is closed (`closed`, read-only gate), so its FUSE mounts and blocked writers get
//! errors, not stale data.
//!
//! Locks: `suspension` is a leaf lock (nothing is taken under it).
//!
//! Limits: `failmode=panic` cannot be tested in-process (it aborts); the FUSE hook
//! finds the pool by name, so it suspends nothing for a pool that was renamed since
//! the mount (there is no pool rename yet).

use crate::{ImportOptions, Pool, Result, SpaError};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tarn_dmu::txg::SuspendMode;

/// The pool property `failmode` (OpenZFS `zpoolprops.7`): what happens to I/O once the
/// pool is suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Block every write and sync wait until `zpool clear` (the default).
    #[default]
    Wait,
    /// Return EIO to new write requests and sync waits; reads of synced data go on.
    Continue,
    /// Abort the process (OpenZFS panics the host and dumps core).
    Panic,
}

impl FailMode {
    /// The property value: "wait", "continue", "panic".
    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Wait => "wait",
            FailMode::Continue => "continue",
            FailMode::Panic => "panic",
        }
    }

    /// Parse a property value (exact, lower case as OpenZFS). `None` if unknown.
    pub fn parse(value: &str) -> Option<FailMode> {
        match value {
            "wait" => Some(FailMode::Wait),
            "continue" => Some(FailMode::Continue),
            "panic" => Some(FailMode::Panic),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> FailMode {
        match v {
            1 => FailMode::Continue,
            2 => FailMode::Panic,
            _ => FailMode::Wait,
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            FailMode::Wait => 0,
            FailMode::Continue => 1,
            FailMode::Panic => 2,
        }
    }
}

/// Why a pool was suspended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspendCause {
    /// A thread panicked: its name ("txg_sync", "scan", "fuse") and the panic message.
    Panic {
        /// Which thread.
        thread: String,
        /// The panic payload as text.
        message: String,
    },
    /// The txg could not be made durable (the sync's error, as text).
    Io(String),
}

/// A suspension in force (`zpool status` prints its `Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspension {
    /// The txg whose sync failed, or the open txg when another thread failed.
    pub txg: u64,
    /// What happened.
    pub cause: SuspendCause,
    /// In-memory state cannot be trusted: resume re-imports the pool from disk.
    pub reopen: bool,
}

impl std::fmt::Display for Suspension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            SuspendCause::Panic { thread, message } => write!(f, "{thread} thread panicked in txg {}: {message}", self.txg),
            SuspendCause::Io(e) => write!(f, "txg {} could not be written: {e}", self.txg),
        }
    }
}

/// What [`Pool::resume`] did.
pub enum Resume {
    /// The pool was not suspended; nothing changed.
    NotSuspended,
    /// The failed sync was re-run in place and succeeded.
    InPlace,
    /// The old `Pool` was abandoned and the pool imported again from disk; use the new
    /// handle (the old one is closed). Mounts must be made again.
    Reopened(Arc<Pool>),
}

/// Pools open in this process by name, for [`Pool::suspend_open`].
static LIVE: Mutex<BTreeMap<String, Weak<Pool>>> = Mutex::new(BTreeMap::new());

/// Dirty data of every pool open in this process, bytes, as each pool's write throttle
/// counts it ([`Pool::dirty_bytes`]): the daemon's memory reaper adds it to what it
/// expects to be resident.
pub fn open_pools_dirty_bytes() -> u64 {
    // Upgraded under the lock, used and dropped after it: dropping the last handle of a
    // pool unregisters it, which takes the lock.
    let pools: Vec<Arc<Pool>> = LIVE.lock().values().filter_map(Weak::upgrade).collect();
    pools.iter().map(|p| p.dirty_bytes()).sum()
}

/// The text of a panic payload (`&str` or `String`; anything else is "unknown").
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".into()
    }
}

impl Pool {
    /// Make this pool findable by [`Pool::suspend_open`] (once it is in its `Arc`).
    pub(crate) fn register_live(self: &Arc<Self>) {
        LIVE.lock().insert(self.name.clone(), Arc::downgrade(self));
    }

    pub(crate) fn unregister_live(&self) {
        let mut live = LIVE.lock();
        if live.get(&self.name).is_some_and(|w| std::ptr::eq(w.as_ptr(), self)) {
            live.remove(&self.name);
        }
    }

    /// Suspend the open pool named `pool` (the first component of a dataset name is
    /// accepted too) because `thread` panicked with `message`: the FUSE adapter's
    /// panic hook. Returns whether such a pool was open. The suspension is marked
    /// `reopen` (the panic may have left any in-memory structure half-changed).
    pub fn suspend_open(pool: &str, thread: &str, message: &str) -> bool {
        let name = pool.split(['/', '@', '#']).next().unwrap_or(pool);
        let Some(p) = LIVE.lock().get(name).and_then(Weak::upgrade) else {
            return false;
        };
        p.suspend(
            p.gate.open_txg(),
            SuspendCause::Panic {
                thread: thread.into(),
                message: message.into(),
            },
            true,
        );
        true
    }

    /// The pool property `failmode` in force.
    pub fn failmode(&self) -> FailMode {
        FailMode::from_u8(self.failmode.load(Ordering::SeqCst))
    }

    /// Whether this `Pool` was exported, destroyed, or abandoned by a re-import
    /// ([`Resume::Reopened`], or a failed one): it serves nothing any more.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The suspension in force, if any.
    pub fn suspension(&self) -> Option<Suspension> {
        self.suspension.lock().clone()
    }

    /// Suspend the pool (module theory): record the first cause, then stop writers as
    /// `failmode` says — or abort the process under `failmode=panic`. `reopen`: the
    /// in-memory state cannot be trusted any more.
    pub(crate) fn suspend(&self, txg: u64, cause: SuspendCause, reopen: bool) {
        let s = Suspension { txg, cause, reopen };
        {
            let mut cur = self.suspension.lock();
            if let Some(first) = cur.as_mut() {
                tracing::error!("pool {}: already suspended ({first}); also: {s}", self.name);
                first.reopen |= reopen;
                return;
            }
            *cur = Some(s.clone());
        }
        tracing::error!("pool {}: suspended: {s}", self.name);
        match self.failmode() {
            FailMode::Panic => {
                eprintln!(
                    "tarn: pool '{}' has encountered an uncorrectable I/O failure and the failure mode property for this pool is set to panic: {s}",
                    self.name
                );
                std::process::abort();
            }
            FailMode::Wait => self.gate.suspend(SuspendMode::Wait),
            FailMode::Continue => self.gate.suspend(SuspendMode::Fail),
        }
    }

    /// `zpool clear` of a suspended pool (module theory): re-run the failed sync in
    /// place when memory is clean, else abandon this `Pool` and import the pool again
    /// from disk (same devices, same altroot). Leaf error counters and faults are
    /// cleared by [`Pool::clear`], which should run first.
    ///
    /// Errors: `Io` when the re-run sync fails again (the pool is suspended again,
    /// possibly now marked for a reopen: clear again); an import error when the pool
    /// cannot be imported from disk (the old `Pool` is closed all the same).
    pub fn resume(self: &Arc<Self>) -> Result<Resume> {
        let Some(s) = self.suspension() else { return Ok(Resume::NotSuspended) };
        if s.reopen {
            return self.reopen().map(Resume::Reopened);
        }
        *self.suspension.lock() = None;
        self.gate.resume();
        tracing::info!("pool {}: resumed; re-running the sync of txg {}", self.name, s.txg);
        self.gate
            .wait_synced_nowait(self.gate.open_txg())
            .map_err(|e| SpaError::Io(format!("cannot clear errors for {}: {e}", self.name)))?;
        Ok(Resume::InPlace)
    }

    /// Abandon this pool as a crash would and import it again (see [`Pool::resume`]).
    fn reopen(self: &Arc<Self>) -> Result<Arc<Pool>> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Err(SpaError::NotFound(format!("cannot clear errors for {}: no such pool", self.name)));
        }
        tracing::warn!("pool {}: in-memory state not trusted; re-importing from disk", self.name);
        // Fail blocked writers first: a thread joined below may be one of them.
        self.gate.set_readonly(true);
        self.stop_scan_thread();
        self.stop_sync_thread();
        let mut dirs: Vec<PathBuf> = Vec::new();
        for leaf in self.leaf_devices() {
            if let Some(d) = std::path::Path::new(&leaf.path).parent() {
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                }
            }
        }
        for s in self.spare_status() {
            if let Some(d) = std::path::Path::new(&s.name).parent() {
                if !dirs.iter().any(|x| x == d) {
                    dirs.push(d.to_path_buf());
                }
            }
        }
        let missing_log = self.log_vdevs_missing();
        let altroot = self.altroot();
        self.release_leaves();
        self.unregister();
        let opts = ImportOptions {
            missing_log,
            ..ImportOptions::default()
        };
        let p = Pool::import_with(&self.guid.to_string(), &dirs, &opts)?;
        p.set_altroot(altroot);
        Ok(p)
    }
}
