//! # spa — the storage pool: lifecycle, config, labels, uberblocks, txg sync; and the DSL
//!
//! Theory. A pool is a tree of vdevs (root → top-level vdevs → leaves) plus the MOS
//! (meta object set) that describes its datasets. `spa` owns the pool's lifecycle:
//! - **create** validates the whole request before writing a byte (names, vdev specs,
//!   device sizes, labels of pools the devices already belong to), then writes labels,
//!   an empty MOS and the root dataset, and syncs txg 1;
//! - **import** reads labels from every device under the search directories, groups
//!   them by pool GUID, rebuilds the vdev tree from the newest config (missing leaves
//!   are UNAVAIL), and picks the newest uberblock whose GUID sum matches (or the one
//!   asked for with `-T`, or an older one with `-F` when the newest cannot be opened);
//! - **sync** (a thread per pool, `sync.rs`) turns each txg into a new tree: quiesce,
//!   write dataset data and metadata, update dataset records in the MOS, write the
//!   MOS, write the space structures (the txg's space-map log block, a few flushed
//!   metaslab maps, their directory pages and a root; they record their own
//!   allocation — `tarn_metaslab` theory statement), flush all leaves,
//!   write the uberblock into every label's ring, flush again. Only then is the txg
//!   durable (DESIGN "Transaction groups"). A failed sync suspends the pool.
//! - **export/destroy** sync, mark the labels, and release the device locks.
//!
//! **Top-level vdevs and classes.** The root's children are the top-level vdevs; a
//! child's index is its `id`, the vdev number in every DVA. A child is a normal vdev
//! (pool capacity), a separate intent-log vdev (`is_log`, a SLOG: only ZIL blocks go
//! there, picked by `metaslab::SpaceMap::pick_log_vdev`), or a hole left by a removed
//! log vdev (so the ids of the others never change; `zpool add` fills the first hole,
//! as OpenZFS does). `zpool add` validates everything first (the same checks as
//! create, plus the replication level against the pool's), then brings the vdevs into
//! the allocator and marks the config dirty; the next txg sync writes the uberblock —
//! whose GUID sum now covers the new leaves — to every leaf, then the new config into
//! every label. `zpool remove` of a log vdev stops allocation there, runs the ZIL's
//! evacuation hook (or just syncs a txg), requires that nothing is allocated on it,
//! swaps it for a hole, syncs the same way, and finally clears the removed leaves'
//! labels and unlocks them. Crash safety of both rests on import choosing, among the
//! label configs found, the newest one for which some uberblock's GUID sum matches:
//! a crash before the uberblock of the change leaves the old config in force.
//!
//! **Missing log devices.** A pool whose log vdev has no usable leaf refuses to import
//! unless asked to (`zpool import -m`, [`ImportOptions::missing_log`]); imported so,
//! the log vdev is UNAVAIL, the pool DEGRADED, and the intent log uses the normal
//! class. Losing a log device loses at most the unsynced log records, never the pool.
//!
//! **Repair** (`repair.rs`): `zpool offline/online/clear/attach/detach/replace`, hot
//! spares, the dirty time logs (DTLs) of leaves that miss txgs, faulting leaves with
//! too many I/O errors, and what a finished resilver changes in the tree. Its theory
//! statement is at the top of that module.
//!
//! The DSL half (`dsl.rs`) keeps the dataset directory: names, properties with
//! inheritance, and per-dataset records (`DslDatasetPhys` in a MOS object's bonus)
//! pointing at each dataset's object set; `snapshot.rs` adds snapshots, clones,
//! rollback and the dead lists that decide which freed blocks a snapshot still holds.
//!
//! **Leak check** (`leak.rs`): [`Pool::leak_check`] walks every tree of the last synced
//! txg (MOS, every head, snapshot and clone, shared blocks once) plus the space
//! structures and the live intent logs, and requires the space maps to call exactly
//! those blocks allocated. Tests run it; the pool never does by itself.
//!
//! **Holds and renames** (`holds.rs`, `rename.rs`): user holds on snapshots, deferred
//! destroy, and renames of file systems and snapshots, each a few MOS changes in one
//! txg; their theory statements are at the top of those modules.
//!
//! **Scan** (`scan.rs`): scrubs and resilvers run in a thread of their own, batch by
//! batch through `tarn_scan`, with their progress (`ScanPhys`) in the pool directory
//! so they resume after export or a crash; resilvers cover the DTLs of usable leaves
//! and end in `resilver_done`. Reads that fail on every copy and blocks a scan finds
//! unrecoverable go to the error log that `zpool status -v` lists.
//!
//! Fault injection (`inject.rs`) registers `zinject -d` handlers on the pool's leaves
//! after checking the request against the pool; the handlers live in `tarn_vdev::inject`.
//!
//! **Suspension** (`suspend.rs`): a sync that cannot reach the disks, or a panic in the
//! sync thread, the scan thread or a FUSE worker, suspends the pool; the pool property
//! `failmode` decides whether writers wait, get EIO or the process aborts; `zpool
//! clear` ([`Pool::resume`]) re-runs the failed sync in place when it had changed
//! nothing in memory, and otherwise re-imports the pool from disk. Its theory
//! statement is at the top of that module.
//!
//! **Config tree** (`config.rs`): the `VdevConfig` helpers (index paths, find, walk,
//! collapse, renumber) and the building of runtime `Vdev` nodes from a config. Label
//! I/O itself — the two-phase config update, the uberblock fan-out and their error
//! counts — belongs to `tarn_vdev::label`; spa only says which config each leaf gets.
//!
//! Locks of a [`Pool`], in the order they are taken (a thread holding one takes only
//! those after it):
//! 1. `sync_lock` — one txg sync (the sync thread takes it first), vdev-tree surgery
//!    (`repair.rs`, `vdevs.rs`), the leak check, and the administrative changes that
//!    must not interleave with a sync (snapshots, holds, renames, bookmarks, promote,
//!    receive);
//! 2. a txg hold (`TxgGate::hold*`, a read lock on the gate's open txg; the sync
//!    thread's quiesce takes it for writing under `sync_lock`, and never takes a
//!    hold). Administrative changes use `hold_nowait`, so a suspended pool fails them
//!    instead of parking a thread that holds `sync_lock`;
//! 3. `admin` — MOS changes, against the MOS part of the sync;
//! 4. `dir` (the pool directory), then the MOS's and datasets' object-set locks
//!    (`tarn_dmu` theory);
//! 5. `config`, then the `RepairState` mutexes (spares, temporary offlines, released
//!    leaves); `config` is never held together with `dir`;
//! 6. leaf locks, held briefly and never while taking another pool lock: `objsets`,
//!    `zilogs`, `snap_objsets`, `dead`, `spacemap_bp`, `import_notes`, `altroot`,
//!    `log_evacuate_hook`, `sync_thread`, the scanner's mutexes, `suspension`; and
//!    inside `tarn_zio`, its `vdevs` and `space` locks.
//!
//! Threads: the txg sync thread (`sync.rs`), the scan thread (`scan.rs`); both catch
//! panics at their loop boundary and suspend the pool. Joining either (export,
//! `zpool clear`'s re-import) happens holding no lock that either thread takes.
//!
//! Called by: cli (daemon), tests. Calls: dmu, zio, metaslab, vdev, phys.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod bookmark;
mod config;
mod dsl;
#[cfg(test)]
mod format_doc;
#[doc(hidden)]
pub mod fuzzing;
mod holds;
pub mod inject;
mod inspect;
mod iostat;
mod l2cache;
mod leak;
mod names;
mod pool;
mod promote;
mod rename;
mod repair;
pub mod scan;
mod sendrecv;
mod snapshot;
mod suspend;
mod sync;
mod vdevs;
pub use vdevs::create_replication_mismatch;

pub use bookmark::{validate_bookmark_name, Bookmark};
pub use dsl::{
    check_dataset_prop, check_user_prop, is_user_prop, parse_size, recordsize_bytes, DATASET_PROPS, INHERIT_SUFFIX, READONLY_DATASET_PROPS, RECEIVED_SUFFIX,
    USER_PROP_NAME_MAX_BYTES, USER_PROP_VALUE_MAX_BYTES,
};
pub use holds::{Released, TempHolds, TAG_MAX_BYTES};
pub use inspect::{BlockStats, DatasetDump, MetaslabInfo, ObjectDump, SimDdtEntry, TypeStats, VdevMetaslabs, RAW_READ_MAX_BYTES, WALK_POINTERS_MAX};
pub use iostat::{PoolIostat, VdevIostat};
pub use leak::LeakReport;
pub use names::{is_descendant, validate_dataset_name, validate_pool_name, validate_snapshot_name};
pub use pool::{
    arc, cache_limit, default_cache_limit, format_time, set_cache_limit, LogEvacuateHook, Pool, CACHE_LIMIT_DEFAULT_BYTES, CACHE_LIMIT_DEFAULT_MAX_BYTES,
};
pub use rename::RenamePlan;
pub use repair::FAULT_IO_ERRORS;
pub use sendrecv::{RecvOutcome, RecvSpec, RESUME_TOKEN_PROP};
pub use suspend::{open_pools_dirty_bytes, panic_message, FailMode, Resume, SuspendCause, Suspension};
pub use tarn_dmu::ObjectStore;
pub use tarn_phys::MIN_DEVICE_SIZE_BYTES;
pub use tarn_zil::Zilog;

/// Errors surfaced to `zpool`/`zfs`. Display strings follow OpenZFS wording where
/// OpenZFS has one (the CLI prints them after "cannot create 'tank': ").
#[derive(Debug, thiserror::Error)]
pub enum SpaError {
    /// Bad vdev specification or argument; the string is the whole message.
    #[error("{0}")]
    Invalid(String),
    /// `pool already exists` / `dataset already exists`.
    #[error("{0} already exists")]
    Exists(String),
    /// `no such pool` / `dataset does not exist`.
    #[error("{0}")]
    NotFound(String),
    /// A device is part of another pool (`-f` overrides when that pool is exported).
    #[error("{path} is part of {state} pool '{pool}'")]
    InUse {
        /// Device path.
        path: String,
        /// Pool name in its label.
        pool: String,
        /// "active", "exported" or "destroyed".
        state: String,
    },
    /// Device smaller than 64 MiB.
    #[error("{0} is too small (minimum 64M)")]
    TooSmall(String),
    /// Dataset has children and -r was not given.
    #[error("filesystem has children\nuse '-r' to destroy the following datasets:\n{0}")]
    HasChildren(String),
    /// Pool label is newer than this software.
    #[error("pool '{0}' uses a newer on-disk format (version {1}); this Tarn supports version {2}")]
    NewerVersion(String, u64, u64),
    /// Label or metadata damaged beyond use.
    #[error("{0}")]
    Corrupt(String),
    /// Out of space.
    #[error("out of space")]
    NoSpace,
    /// A change asked of a pool that takes none: imported `readonly=on` (or
    /// suspended).
    #[error("pool is read-only")]
    ReadOnly,
    /// Busy (device locked, dataset mounted, ...).
    #[error("{0}")]
    Busy(String),
    /// I/O error.
    #[error("I/O error: {0}")]
    Io(String),
    /// Import refused because every leaf of one or more log vdevs is missing
    /// (`zpool import -m` imports anyway). `missing` lists those log vdevs.
    #[error("cannot import '{pool}': one or more devices is currently unavailable")]
    MissingLogs {
        /// Pool name as asked for.
        pool: String,
        /// The missing top-level log vdevs, with their leaves.
        missing: Vec<VdevStatus>,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, SpaError>;

/// One top-level vdev as given on the `zpool create` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopSpec {
    /// A single leaf (striped with the other top-level vdevs).
    Leaf(PathBuf),
    /// N-way mirror (N ≥ 2).
    Mirror(Vec<PathBuf>),
    /// raidz with `nparity` (1..=3) and more than `nparity` leaves.
    Raidz {
        /// Parity columns.
        nparity: u8,
        /// Leaves.
        leaves: Vec<PathBuf>,
    },
}

impl TopSpec {
    /// The leaf paths, in order.
    pub fn leaves(&self) -> &[PathBuf] {
        match self {
            TopSpec::Leaf(p) => std::slice::from_ref(p),
            TopSpec::Mirror(v) | TopSpec::Raidz { leaves: v, .. } => v,
        }
    }
}

/// Arguments of `zpool create`.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    /// Pool name (validated by [`validate_pool_name`]).
    pub name: String,
    /// Top-level vdevs.
    pub vdevs: Vec<TopSpec>,
    /// Separate intent-log vdevs (`log ...`): single leaves or mirrors, not raidz.
    pub logs: Vec<TopSpec>,
    /// Hot spares (`spare ...`): single devices.
    pub spares: Vec<PathBuf>,
    /// Cache devices (`cache ...`, the L2ARC): single devices.
    pub caches: Vec<PathBuf>,
    /// log2 sector size, 9 or 12 (default 12).
    pub ashift: u8,
    /// `-f`: use devices that belong to an exported or destroyed pool.
    pub force: bool,
    /// Pool properties from `-o` (e.g. `comment`).
    pub pool_props: BTreeMap<String, String>,
    /// Root dataset properties from `-O` and `-m` (mountpoint).
    pub fs_props: BTreeMap<String, String>,
}

impl Default for CreateSpec {
    /// No name, no vdevs, ashift 12, no force, no properties.
    fn default() -> Self {
        CreateSpec {
            name: String::new(),
            vdevs: Vec::new(),
            logs: Vec::new(),
            spares: Vec::new(),
            caches: Vec::new(),
            ashift: 12,
            force: false,
            pool_props: BTreeMap::new(),
            fs_props: BTreeMap::new(),
        }
    }
}

/// Arguments of `zpool add`.
#[derive(Debug, Clone, Default)]
pub struct AddSpec {
    /// New normal top-level vdevs.
    pub vdevs: Vec<TopSpec>,
    /// New separate intent-log vdevs: single leaves or mirrors, not raidz.
    pub logs: Vec<TopSpec>,
    /// New hot spares: single devices.
    pub spares: Vec<PathBuf>,
    /// New cache devices (L2ARC): single devices.
    pub caches: Vec<PathBuf>,
    /// `-f`: use devices of exported or destroyed pools, and accept a replication
    /// level different from the pool's.
    pub force: bool,
}

/// How `zpool import` opens a pool.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Which uberblock to use.
    pub rewind: Rewind,
    /// Import under this name instead of the one in the labels.
    pub new_name: Option<String>,
    /// `-m`: import even if every leaf of a log vdev is missing (its unsynced log
    /// records are lost; the log vdev stays in the config, UNAVAIL).
    pub missing_log: bool,
    /// `-o readonly=on`: open without writing anything (no labels, no uberblocks, no
    /// sync thread, no intent-log replay by the caller); every change is refused with
    /// "pool is read-only" and export writes nothing.
    pub readonly: bool,
}

impl Default for ImportOptions {
    /// Newest uberblock, the labels' name, no missing log devices.
    fn default() -> Self {
        ImportOptions {
            rewind: Rewind::None,
            new_name: None,
            missing_log: false,
            readonly: false,
        }
    }
}

/// How to pick the uberblock at import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewind {
    /// The newest valid uberblock.
    None,
    /// `-F`: if the newest cannot be opened, try older ones.
    Recover,
    /// `-T txg`: exactly this txg.
    Txg(u64),
}

/// What a rewinding import skipped ([`Pool::rewound`]); times in seconds since the
/// epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewindReport {
    /// The newest uberblock's txg (which could not be opened).
    pub newest_txg: u64,
    /// When that txg was written.
    pub newest_time_s: u64,
    /// The txg the pool opened at.
    pub txg: u64,
    /// When that txg was written.
    pub time_s: u64,
}

/// A pool found by reading labels.
#[derive(Debug, Clone)]
pub struct ImportCandidate {
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub guid: u64,
    /// "ONLINE", "DEGRADED", "UNAVAIL", ...
    pub health: String,
    /// Label state ("exported", "active", "destroyed").
    pub state: String,
    /// Status tree (leaves with their health).
    pub config: VdevStatus,
    /// Directories holding its leaves.
    pub dirs: Vec<PathBuf>,
}

/// One node of `zpool status` config.
#[derive(Debug, Clone)]
pub struct VdevStatus {
    /// Display name: pool name, "mirror-0", "raidz2-1", "replacing-1", "spare-0" or
    /// the leaf path.
    pub name: String,
    /// "ONLINE", "DEGRADED", "FAULTED", "UNAVAIL", "OFFLINE"; for the rows of the
    /// root's `spares` list "AVAIL", "INUSE" or "UNAVAIL".
    pub state: String,
    /// READ errors.
    pub read_errors: u64,
    /// WRITE errors.
    pub write_errors: u64,
    /// CKSUM errors.
    pub checksum_errors: u64,
    /// Allocated bytes (top-level vdevs; 0 for leaves).
    pub alloc_bytes: u64,
    /// Size in bytes.
    pub size_bytes: u64,
    /// A top-level separate intent-log vdev (shown under `logs`).
    pub is_log: bool,
    /// Children.
    pub children: Vec<VdevStatus>,
    /// A leaf that a running resilver is writing (its DTL is not empty): `zpool
    /// status` adds "(resilvering)".
    pub resilvering: bool,
    /// The root's hot spares (empty elsewhere).
    pub spares: Vec<VdevStatus>,
    /// The root's cache devices (empty elsewhere): state "ONLINE" or "UNAVAIL",
    /// `alloc_bytes` what the L2ARC holds there.
    pub caches: Vec<VdevStatus>,
}

impl VdevStatus {
    /// A node with zero counters and sizes (import listings, tests).
    pub fn new(name: &str, state: &str, children: Vec<VdevStatus>) -> VdevStatus {
        VdevStatus {
            name: name.into(),
            state: state.into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            alloc_bytes: 0,
            size_bytes: 0,
            is_log: false,
            children,
            resilvering: false,
            spares: Vec::new(),
            caches: Vec::new(),
        }
    }
}

/// `zfs list` row and property access.
#[derive(Debug, Clone)]
pub struct DatasetInfo {
    /// Full name (`tank/home`).
    pub name: String,
    /// USED bytes (this dataset and descendants).
    pub used_bytes: u64,
    /// AVAIL bytes.
    pub avail_bytes: u64,
    /// REFER bytes (referenced by this dataset).
    pub refer_bytes: u64,
    /// Effective properties: name → (value, source) where source is "default",
    /// "local", "inherited from X" or "-".
    pub props: BTreeMap<String, (String, String)>,
}
