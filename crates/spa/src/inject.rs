//! Fault injection on an imported pool: the pool half of `zinject -d`.
//!
//! Theory: the handlers themselves live in `tarn_vdev::inject` (process-wide, matched
//! by leaf path inside `Leaf::pread`/`pwrite`/`flush`). This module ties them to a
//! pool: it names the pool's leaves ([`Pool::leaf_devices`]: path and vdev GUID, the two
//! ways `zinject -d` names a device), checks a request against the pool before anything
//! is registered ([`Pool::inject`]), and answers whether the pool has handlers
//! ([`Pool::inject_handlers`]) — OpenZFS refuses to export or destroy such a pool
//! ("pool is busy"), because a handler outliving its pool would fire on whatever later
//! opens the same path.
//!
//! Checks, all before registering (a refused request registers nothing): the leaf is
//! one of this pool's; a fixed delay has at least one lane and a seek delay has
//! `min <= max`; corruption is a read fault (`-T all` is narrowed to reads, `write` and
//! `flush` are refused); a delay applies to reads and/or writes, not to flushes alone
//! (OpenZFS: "I/O type for a delay must be 'read' or 'write'"); the frequency is at most
//! 100 %.
//!
//! State: none here; the registry is the vdev layer's. Locks: only the registry's.
//!
//! Called by: the daemon (`tarn zinject`). Calls: `tarn_vdev::inject`.

use crate::{Pool, Result, SpaError};
pub use tarn_vdev::inject::{Action, Delay, Fault, HandlerInfo, HandlerSpec, IoType, FREQ_ALWAYS_PPM};

/// A leaf of a pool as `zinject -d` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafDevice {
    /// Leaf path as stored in the config (absolute for files created by the CLI).
    pub path: String,
    /// Leaf vdev GUID.
    pub guid: u64,
}

impl Pool {
    /// Every leaf of the pool (UNAVAIL ones included), depth-first in config order.
    pub fn leaf_devices(&self) -> Vec<LeafDevice> {
        self.zio
            .vdevs()
            .iter()
            .flat_map(|t| {
                t.leaves()
                    .into_iter()
                    .map(|l| LeafDevice {
                        path: l.path().clone().unwrap_or_default(),
                        guid: l.guid(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Register a handler on leaf `guid` of this pool; returns the handler id.
    ///
    /// Errors: `NotFound` when no leaf has that GUID; `Invalid` (the whole message) for
    /// a request the checks in the module statement refuse. Nothing is registered on
    /// error.
    pub fn inject(&self, guid: u64, io_type: IoType, action: Action, freq_ppm: u32) -> Result<u64> {
        let Some(leaf) = self.leaf_devices().into_iter().find(|l| l.guid == guid) else {
            return Err(SpaError::NotFound(format!("cannot find device '{guid:x}' in pool '{}'", self.name)));
        };
        if freq_ppm > FREQ_ALWAYS_PPM {
            return Err(SpaError::Invalid("frequency value must be in the range [0.0001, 100.0]".into()));
        }
        let io_type = match (action, io_type) {
            (Action::Fault(Fault::Checksum), IoType::Read | IoType::All) => IoType::Read,
            (Action::Fault(Fault::Checksum), _) => {
                return Err(SpaError::Invalid("checksum errors can only be injected on reads".into()));
            }
            (Action::Delay(_), IoType::Flush) => {
                return Err(SpaError::Invalid("I/O type for a delay must be 'read' or 'write'".into()));
            }
            (_, t) => t,
        };
        match action {
            Action::Delay(Delay::Fixed { lanes: 0, .. }) => {
                return Err(SpaError::Invalid("a delay needs at least one lane".into()));
            }
            Action::Delay(Delay::Seek { min_latency, max_latency }) if min_latency > max_latency => {
                return Err(SpaError::Invalid("the seek model's minimum latency exceeds its maximum".into()));
            }
            _ => {}
        }
        Ok(tarn_vdev::inject::add_handler(HandlerSpec {
            pool: self.name.clone(),
            vdev_guid: leaf.guid,
            path: leaf.path,
            io_type,
            action,
            freq_ppm,
        }))
    }

    /// The handlers registered on this pool, in id order.
    pub fn inject_handlers(&self) -> Vec<HandlerInfo> {
        handlers().into_iter().filter(|h| h.spec.pool == self.name).collect()
    }
}

/// Every registered handler of every pool, in id order.
pub fn handlers() -> Vec<HandlerInfo> {
    tarn_vdev::inject::handlers()
}

/// Remove handler `id`; false when there is none.
pub fn clear(id: u64) -> bool {
    tarn_vdev::inject::remove_handler(id)
}

/// Remove every handler; returns the ids removed.
pub fn clear_all() -> Vec<u64> {
    tarn_vdev::inject::remove_all_handlers()
}

/// Where [`inject_sync_fault`] makes the txg sync (or scan) thread panic (test hook for pool
/// suspension, `suspend.rs`; OpenZFS tests suspend pools with `zinject` I/O errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncFault {
    /// At the start of a sync, before the txg is quiesced: in-memory state is intact,
    /// so `zpool clear` re-runs the sync in place.
    PanicAtStart,
    /// After the datasets' blocks are written, before the MOS: in-memory state is
    /// half-synced, so `zpool clear` re-imports the pool from disk.
    PanicAfterData,
    /// In the scan thread, at the start of a scrub or resilver batch: the scan's
    /// progress record may be half-changed, so the pool is suspended for a reopen.
    PanicInScan,
}

/// Armed sync faults: (pool name, where). Each fires once.
static SYNC_FAULTS: parking_lot::Mutex<Vec<(String, SyncFault)>> = parking_lot::Mutex::new(Vec::new());

/// Make the next txg sync of pool `pool` panic at `at` (once). A test hook: a panic
/// in the sync thread must suspend the pool, not kill the process or wedge it.
pub fn inject_sync_fault(pool: &str, at: SyncFault) {
    SYNC_FAULTS.lock().push((pool.to_string(), at));
}

/// Disarm every sync fault of pool `pool` that has not fired.
pub fn clear_sync_faults(pool: &str) {
    SYNC_FAULTS.lock().retain(|(p, _)| p != pool);
}

/// The sync or scan thread passes `at`: panic if a fault is armed there for `pool`.
pub(crate) fn sync_fault_point(pool: &str, at: SyncFault) {
    let fire = {
        let mut f = SYNC_FAULTS.lock();
        match f.iter().position(|(p, a)| p == pool && *a == at) {
            Some(i) => {
                f.remove(i);
                true
            }
            None => false,
        }
    };
    if fire {
        panic!("injected sync fault {at:?} in pool {pool}");
    }
}
