//! The `Pool` object: create, import, export, destroy, status and pool properties.
//! See the crate theory statement in `lib.rs`.

use crate::dsl::{Dir, DslDatasetPhys};
use crate::{CreateSpec, ImportCandidate, ImportOptions, Result, Rewind, SpaError, TopSpec, VdevStatus};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use tarn_dmu::objset::{Objset, OS_TYPE_MOS};
use tarn_dmu::txg::TxgGate;
use tarn_dmu::{ObjectStore, TxHold};
use tarn_metaslab::{AllocClass, SpaceMap, VdevDims, VdevSpace};
use tarn_phys::label::{LabelConfig, PoolState, VdevConfig};
use tarn_phys::{BlkPtr, UberblockPhys, TARN_FORMAT_VERSION};
use tarn_vdev::{label, Leaf, Vdev, VdevError, VdevState};
use tarn_zil::Zilog;
use tarn_zio::{ArcCache, Zio};

/// Smallest default memory budget for cached and dirty blocks of one pool, bytes
/// (what a machine with 1 GiB of memory or less gets).
pub const CACHE_LIMIT_DEFAULT_BYTES: u64 = 256 << 20;
/// Largest default budget, bytes: its dirty-data quarter is then 4 GiB, OpenZFS's cap
/// (`zfs_dirty_data_max_max`).
pub const CACHE_LIMIT_DEFAULT_MAX_BYTES: u64 = 16 << 30;

/// The default per-pool budget: a quarter of physical memory, within
/// [`CACHE_LIMIT_DEFAULT_BYTES`]..=[`CACHE_LIMIT_DEFAULT_MAX_BYTES`]. So the read cache
/// gets an eighth of memory and one txg's dirty data a sixteenth. OpenZFS sizes both
/// from memory too, more greedily (the ARC up to half of it or more, dirty data 10 %);
/// Tarn shares the machine with other services, so it takes less.
pub fn default_cache_limit() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || page <= 0 {
        return CACHE_LIMIT_DEFAULT_BYTES;
    }
    ((pages as u64).saturating_mul(page as u64) / 4).clamp(CACHE_LIMIT_DEFAULT_BYTES, CACHE_LIMIT_DEFAULT_MAX_BYTES)
}

/// Per-pool budget in force; 0 until set or first read (then [`default_cache_limit`]).
static CACHE_LIMIT_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Set the per-pool memory budget `limit` (bytes, at least 16 MiB) for pools opened
/// from now on. A quarter is the pool's dirty-data limit: the write throttle counts
/// the dirty data of the open and the syncing txg together against it (a txg's bytes
/// leave the count when its sync ends). Called before the shared ARC is
/// first used ([`arc`]), it also makes `arc_max` half of `limit` (the read cache's
/// share before the ARC; `tarn daemon --set arc_max=…` changes it later).
pub fn set_cache_limit(limit_bytes: u64) {
    CACHE_LIMIT_BYTES.store(limit_bytes.max(16 << 20), Ordering::Relaxed);
}

/// The current per-pool memory budget, bytes.
pub fn cache_limit() -> u64 {
    match CACHE_LIMIT_BYTES.load(Ordering::Relaxed) {
        0 => {
            let d = default_cache_limit();
            // A concurrent set_cache_limit wins over the default.
            let _ = CACHE_LIMIT_BYTES.compare_exchange(0, d, Ordering::Relaxed, Ordering::Relaxed);
            CACHE_LIMIT_BYTES.load(Ordering::Relaxed)
        }
        v => v,
    }
}

/// The process's one ARC, which every pool opened from now on caches its blocks in
/// (OpenZFS has one ARC per host). Made on first use: `arc_max` is
/// [`tarn_zio::arc::default_max_bytes`] of physical memory (half of it), or half of
/// the memory budget when [`set_cache_limit`] was called first (`TARN_CACHE_MAX`,
/// as before the ARC); `arc_min` is [`tarn_zio::arc::default_min_bytes`] (1/32 of
/// memory, at least 32 MiB), at most `arc_max`. The first use also starts its
/// memory-pressure thread ([`tarn_zio::arc::start_memory_thread`]).
pub fn arc() -> &'static Arc<ArcCache> {
    static ARC: std::sync::OnceLock<Arc<ArcCache>> = std::sync::OnceLock::new();
    ARC.get_or_init(|| {
        let mem = physical_memory_bytes().unwrap_or(CACHE_LIMIT_DEFAULT_BYTES * 4);
        let max_bytes = match CACHE_LIMIT_BYTES.load(Ordering::Relaxed) {
            0 => tarn_zio::arc::default_max_bytes(mem),
            v => v / 2,
        };
        let arc = Arc::new(ArcCache::new(tarn_zio::arc::ArcConfig {
            max_bytes,
            min_bytes: tarn_zio::arc::default_min_bytes(mem).min(max_bytes),
            policy: tarn_zio::arc::Policy::Arc,
        }));
        tarn_zio::arc::start_memory_thread(&arc);
        arc
    })
}

fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages > 0 && page > 0).then(|| (pages as u64).saturating_mul(page as u64))
}

fn dirty_max_bytes() -> u64 {
    cache_limit() / 4
}

/// The txg gate of a pool whose I/O goes through `zio`, opening at `open_txg`, which
/// asks `zio` whether the intent log is active (`tarn_dmu::txg`'s theory). The gate
/// holds `zio` weakly: a sync thread waiting on the gate must not keep the devices
/// open after the pool is gone.
fn new_gate(open_txg: u64, zio: &Arc<Zio>) -> Arc<TxgGate> {
    let gate = Arc::new(TxgGate::new(open_txg, dirty_max_bytes()));
    let zio = Arc::downgrade(zio);
    gate.watch_log(move || zio.upgrade().is_some_and(|z| z.log_active()));
    gate
}
/// The top-level specs of a create or an add as `open_new_tops` takes them, flagged
/// `true` for logs: normal vdevs, then logs, then spares (single-leaf tops) last, so
/// the opened devices split at `len - spares.len()`.
pub(crate) fn tops_in_order<'a>(vdevs: &'a [TopSpec], logs: &'a [TopSpec], spares: &'a [TopSpec]) -> Vec<(&'a TopSpec, bool)> {
    vdevs
        .iter()
        .map(|t| (t, false))
        .chain(logs.iter().map(|t| (t, true)))
        .chain(spares.iter().map(|t| (t, false)))
        .collect()
}

/// MOS object holding the pool directory (JSON).
pub(crate) const MOS_DIR_OBJ: u64 = 1;

/// Names of pools open in this process (a second `create`/`import` of the same
/// name is refused).
static OPEN_POOLS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn register_name(name: &str) -> Result<()> {
    let mut g = OPEN_POOLS.lock();
    let set = g.get_or_insert_with(HashSet::new);
    if !set.insert(name.to_string()) {
        return Err(SpaError::Exists(format!("pool '{name}'")));
    }
    Ok(())
}

fn unregister_name(name: &str) {
    if let Some(s) = OPEN_POOLS.lock().as_mut() {
        s.remove(name);
    }
}

pub(crate) fn dmu_err(e: tarn_dmu::DmuError) -> SpaError {
    match e {
        tarn_dmu::DmuError::NoSpace => SpaError::NoSpace,
        tarn_dmu::DmuError::ReadOnly => SpaError::ReadOnly,
        tarn_dmu::DmuError::Corrupt(c) => SpaError::Corrupt(c.to_string()),
        other => SpaError::Io(other.to_string()),
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh random non-zero GUID.
pub(crate) fn new_guid() -> u64 {
    loop {
        let g: u64 = rand::random();
        if g != 0 {
            return g;
        }
    }
}

pub(crate) fn kind_of_leaf(path: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => "disk",
        _ => "file",
    }
}

/// What the intent log supplies to `zpool remove` of a log vdev: given the vdev id,
/// move or retire every live log block on it (commit and let a txg make the records
/// permanent, then free the blocks) and return once that is done. See
/// [`Pool::set_log_evacuate_hook`].
pub type LogEvacuateHook = dyn Fn(u32) -> Result<()> + Send + Sync;

/// The class of a top-level vdev as its config describes it.
pub(crate) fn class_of(c: &VdevConfig) -> AllocClass {
    if c.is_hole() {
        AllocClass::Hole
    } else if c.is_log {
        AllocClass::Log
    } else {
        AllocClass::Normal
    }
}

/// OpenZFS's `vdev_error` text: the header, then `msg`.
pub(crate) fn vdev_error(force: bool, msg: &str) -> String {
    let how = if force {
        "the following errors must be manually repaired:"
    } else {
        "use '-f' to override the following errors:"
    };
    format!("invalid vdev specification\n{how}\n{msg}")
}

/// `zpool status` name of a top-level vdev config: "mirror-1", "raidz2-0", the path.
pub(crate) fn config_display_name(t: &VdevConfig) -> String {
    crate::config::display_name(t)
}

/// An imported pool.
pub struct Pool {
    pub(crate) name: String,
    pub(crate) guid: u64,
    /// The vdev tree as the labels record it; its children match `zio.vdevs()` one to
    /// one (holes included). Changed only under `sync_lock`.
    pub(crate) config: Mutex<VdevConfig>,
    pub(crate) zio: Arc<Zio>,
    pub(crate) gate: Arc<TxgGate>,
    pub(crate) mos: Arc<Objset>,
    /// Serializes MOS changes (admin operations) against the MOS part of sync.
    pub(crate) admin: Mutex<()>,
    pub(crate) dir: Mutex<Dir>,
    /// Open dataset object sets by dataset MOS object id.
    pub(crate) objsets: Mutex<BTreeMap<u64, Arc<Objset>>>,
    /// The intent log of each open dataset object set (same keys as `objsets`).
    pub(crate) zilogs: Mutex<BTreeMap<u64, Arc<Zilog>>>,
    /// Warnings collected at import for the user.
    pub(crate) import_notes: Mutex<Vec<String>>,
    pub(crate) spacemap_bp: Mutex<BlkPtr>,
    pub(crate) stop: AtomicBool,
    pub(crate) sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(crate) sync_lock: Mutex<()>,
    pub(crate) closed: AtomicBool,
    /// Imported with `readonly=on`: no sync thread, no label or uberblock writes, the
    /// txg gate refuses every hold; export only releases the leaves.
    pub(crate) readonly: AtomicBool,
    /// Opened by `zdb` (`Pool::open_inspect`): read-only unlocked leaves, and the
    /// pool's name was never entered in the process's table of open pools.
    pub(crate) inspect: AtomicBool,
    /// Set by a read-only import that had to go back, for `zpool import -Fn`.
    pub(crate) rewound: Mutex<Option<crate::RewindReport>>,
    pub(crate) altroot: Mutex<Option<String>>,
    /// The config changed (vdevs added or removed): the next txg sync writes an
    /// uberblock even with nothing else dirty, then rewrites every label.
    pub(crate) config_dirty: AtomicBool,
    /// Supplied by the intent log; run by `remove_vdev` on a log vdev.
    pub(crate) log_evacuate_hook: Mutex<Option<Arc<LogEvacuateHook>>>,
    /// The scrub/resilver thread and its live counters.
    pub(crate) scanner: crate::scan::Scanner,
    /// When this process created or imported the pool: `zpool iostat`'s first report
    /// averages the I/O counters over the time since then.
    pub(crate) imported_at: std::time::Instant,
    /// Hot spares and repair bookkeeping (`repair.rs`).
    pub(crate) repair: crate::repair::RepairState,
    /// Kill-hook state of every open head dataset, by dataset object (`snapshot.rs`).
    pub(crate) dead: Mutex<BTreeMap<u64, Arc<crate::snapshot::DeadState>>>,
    /// Open read-only object sets of snapshots, by snapshot object.
    pub(crate) snap_objsets: Mutex<BTreeMap<u64, Arc<Objset>>>,
    /// Changes waiting to run in syncing context (`sync.rs`, OpenZFS `dsl_sync_task`).
    pub(crate) sync_tasks: Mutex<Vec<crate::sync::SyncTask>>,
    /// Temporary holds (`holds.rs`): snapshot record → tag → creation time (s). In
    /// memory only, so they end with the daemon.
    pub(crate) temp_holds: Mutex<BTreeMap<u64, BTreeMap<String, u64>>>,
    /// The suspension in force (`suspend.rs`); `None` while the pool runs.
    pub(crate) suspension: Mutex<Option<crate::suspend::Suspension>>,
    /// The pool property `failmode` (`FailMode::to_u8`).
    pub(crate) failmode: AtomicU8,
    /// The running (or last failed) sync has begun changing in-memory structures: a
    /// failure from here on cannot be retried in place (`suspend.rs`).
    pub(crate) sync_untrusted: AtomicBool,
}

pub(crate) struct FoundLeaf {
    pub(crate) path: PathBuf,
    pub(crate) leaf: Leaf,
    config: LabelConfig,
}

/// A leaf whose labels pass their checksum but describe an impossible pool (a crafted
/// or corrupted config, refused by `LabelConfig::validate`): kept only so that an
/// import by name can say why the pool is not there.
struct RefusedLeaf {
    path: PathBuf,
    name: String,
    pool_guid: u64,
    why: tarn_phys::Corrupt,
}

impl Pool {
    // ---- create -----------------------------------------------------------------

    /// `zpool create`. Validates everything before touching any device.
    pub fn create(spec: &CreateSpec) -> Result<Arc<Pool>> {
        crate::validate_pool_name(&spec.name)?;
        if !(9..=16).contains(&spec.ashift) {
            return Err(SpaError::Invalid(format!(
                "property 'ashift' number {} is invalid, only values between 9 and 16 are allowed.",
                spec.ashift
            )));
        }
        if spec.vdevs.is_empty() && spec.logs.is_empty() {
            return Err(SpaError::Invalid("invalid vdev specification: at least one device is required".into()));
        }
        if spec.vdevs.is_empty() {
            return Err(SpaError::Invalid(vdev_error(
                spec.force,
                "at least one general top-level vdev must be specified",
            )));
        }
        if let Some(v) = spec.pool_props.get("failmode") {
            if crate::suspend::FailMode::parse(v).is_none() {
                return Err(SpaError::Invalid(format!(
                    "cannot create '{}': 'failmode' must be one of 'wait | continue | panic'",
                    spec.name
                )));
            }
        }
        let spares: Vec<TopSpec> = spec.spares.iter().cloned().map(TopSpec::Leaf).collect();
        let caches: Vec<TopSpec> = spec.caches.iter().cloned().map(TopSpec::Leaf).collect();
        let mut tops = tops_in_order(&spec.vdevs, &spec.logs, &spares);
        tops.extend(caches.iter().map(|t| (t, false)));
        let mut opened = Self::open_new_tops(&tops, spec.force, None)?;
        let cache_leaves: Vec<(PathBuf, Leaf)> = opened.split_off(opened.len() - caches.len()).into_iter().flatten().collect();
        let spare_leaves: Vec<(PathBuf, Leaf)> = opened.split_off(opened.len() - spares.len()).into_iter().flatten().collect();
        register_name(&spec.name)?;
        let res = Self::create_inner(spec, opened, spare_leaves, cache_leaves);
        if res.is_err() {
            unregister_name(&spec.name);
        }
        res
    }

    /// Check the shape of new top-level vdevs (`(spec, is_log)`), then open every leaf
    /// and check its size and label, before anything is written. `pool` is the
    /// pool being added to (its name and config), whose own leaves are refused.
    pub(crate) fn open_new_tops(tops: &[(&TopSpec, bool)], force: bool, pool: Option<(&str, u64, &VdevConfig)>) -> Result<Vec<Vec<(PathBuf, Leaf)>>> {
        let mut seen = HashSet::new();
        for &(t, is_log) in tops {
            match t {
                TopSpec::Leaf(_) => {}
                TopSpec::Mirror(v) => {
                    if v.len() < 2 {
                        return Err(SpaError::Invalid("invalid vdev specification: mirror requires at least 2 devices".into()));
                    }
                }
                TopSpec::Raidz { .. } if is_log => {
                    return Err(SpaError::Invalid("invalid vdev specification: unsupported 'log' device: raidz".into()));
                }
                TopSpec::Raidz { nparity, leaves } => {
                    if !(1..=3).contains(nparity) {
                        return Err(SpaError::Invalid(format!("invalid vdev specification: unknown vdev type 'raidz{nparity}'")));
                    }
                    if leaves.len() < *nparity as usize + 1 {
                        return Err(SpaError::Invalid(format!(
                            "invalid vdev specification: raidz{nparity} requires at least {} devices",
                            *nparity as usize + 1
                        )));
                    }
                }
            }
            for p in t.leaves() {
                let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                if !seen.insert(canon) {
                    return Err(SpaError::Invalid(format!(
                        "invalid vdev specification: {} is specified more than once",
                        p.display()
                    )));
                }
            }
        }
        if let Some((name, _, cfg)) = pool {
            let mine: HashSet<PathBuf> = cfg
                .children
                .iter()
                .flat_map(|t| t.leaves())
                .chain(cfg.spares.iter())
                .chain(cfg.l2cache.iter())
                .filter_map(|l| l.path.as_ref())
                .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)))
                .collect();
            for p in tops.iter().flat_map(|(t, _)| t.leaves()) {
                if mine.contains(&std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())) {
                    return Err(SpaError::InUse {
                        path: p.display().to_string(),
                        pool: name.to_string(),
                        state: "active".into(),
                    });
                }
            }
        }
        let mut opened: Vec<Vec<(PathBuf, Leaf)>> = Vec::new();
        for (t, _) in tops {
            let mut group = Vec::new();
            for p in t.leaves() {
                if !p.exists() {
                    return Err(SpaError::NotFound(format!("cannot open '{}': No such file or directory", p.display())));
                }
                let leaf = Leaf::open(p).map_err(|e| match e {
                    VdevError::Busy { .. } => SpaError::Busy(format!("{} is in use and contains an imported pool", p.display())),
                    VdevError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput => SpaError::TooSmall(p.display().to_string()),
                    other => SpaError::Io(other.to_string()),
                })?;
                if leaf.size_bytes < tarn_phys::MIN_DEVICE_SIZE_BYTES {
                    return Err(SpaError::TooSmall(p.display().to_string()));
                }
                if let Some(cfg) = label::read_configs(&leaf).into_iter().flatten().next() {
                    // A label of this very pool for a leaf its tree does not have is
                    // left over from an add or remove that a crash cut short.
                    let stale = pool.is_some_and(|(_, guid, tree)| {
                        cfg.pool_guid == guid
                            && !tree
                                .children
                                .iter()
                                .flat_map(|t| t.leaves())
                                .chain(tree.spares.iter())
                                .chain(tree.l2cache.iter())
                                .any(|l| l.guid == cfg.guid)
                    });
                    let state = match cfg.state {
                        _ if stale => None,
                        PoolState::Active => Some("active"),
                        PoolState::Exported => Some("exported"),
                        PoolState::Destroyed => None,
                    };
                    if let Some(state) = state {
                        if !force {
                            return Err(SpaError::InUse {
                                path: p.display().to_string(),
                                pool: cfg.name,
                                state: state.into(),
                            });
                        }
                    }
                }
                group.push((p.clone(), leaf));
            }
            opened.push(group);
        }
        Ok(opened)
    }

    /// Build top-level vdev `id` from its spec and opened leaves: the runtime node and
    /// its config (fresh GUIDs; leaf paths canonicalized).
    pub(crate) fn build_top(id: u32, t: &TopSpec, group: Vec<(PathBuf, Leaf)>, ashift: u8, is_log: bool) -> (Arc<Vdev>, VdevConfig) {
        let single = matches!(t, TopSpec::Leaf(_));
        let mut leaves = Vec::new();
        let mut leaf_cfgs = Vec::new();
        for (i, (p, leaf)) in group.into_iter().enumerate() {
            // A lone leaf is itself the top-level vdev and carries its id.
            let i = if single { id } else { i as u32 };
            let g = new_guid();
            let path = std::fs::canonicalize(&p).unwrap_or(p.clone()).display().to_string();
            leaf_cfgs.push(VdevConfig {
                kind: kind_of_leaf(&p).into(),
                id: i as u64,
                guid: g,
                path: Some(path.clone()),
                ashift,
                ..VdevConfig::default()
            });
            leaves.push(Arc::new(Vdev::new_leaf(i, g, ashift, path, Some(leaf))));
        }
        let tg = new_guid();
        let (vdev, kind, nparity) = match t {
            TopSpec::Leaf(_) => {
                let (v, lc) = (leaves.pop().expect("one leaf"), leaf_cfgs.pop().expect("one leaf"));
                let cfg = VdevConfig {
                    asize_bytes: v.asize_bytes(),
                    is_log,
                    ..lc
                };
                return (v, cfg);
            }
            TopSpec::Mirror(_) => (Vdev::new_mirror(id, tg, ashift, leaves), "mirror", 0),
            TopSpec::Raidz { nparity, .. } => (Vdev::new_raidz(id, tg, ashift, *nparity, leaves), "raidz", *nparity),
        };
        let cfg = VdevConfig {
            kind: kind.into(),
            id: id as u64,
            guid: tg,
            nparity,
            ashift,
            asize_bytes: vdev.asize_bytes(),
            is_log,
            children: leaf_cfgs,
            ..VdevConfig::default()
        };
        (Arc::new(vdev), cfg)
    }

    fn create_inner(spec: &CreateSpec, opened: Vec<Vec<(PathBuf, Leaf)>>, spares: Vec<(PathBuf, Leaf)>, caches: Vec<(PathBuf, Leaf)>) -> Result<Arc<Pool>> {
        let ashift = spec.ashift;
        let mut top = Vec::new();
        let mut tops_cfg = Vec::new();
        let specs = spec.vdevs.iter().map(|t| (t, false)).chain(spec.logs.iter().map(|t| (t, true)));
        for (id, ((t, is_log), group)) in specs.zip(opened).enumerate() {
            let (v, cfg) = Self::build_top(id as u32, t, group, ashift, is_log);
            top.push(v);
            tops_cfg.push(cfg);
        }
        let pool_guid = new_guid();
        let space = SpaceMap::new(
            top.iter()
                .zip(&tops_cfg)
                .map(|(v, c)| VdevSpace::new_class(v.asize_bytes(), v.alloc_align_bytes(), class_of(c)))
                .collect(),
        );
        let root_cfg = VdevConfig {
            kind: "root".into(),
            guid: pool_guid,
            children: tops_cfg,
            ..VdevConfig::default()
        };
        let zio = Arc::new(Zio::with_arc(top, space, arc().clone()));
        let gate = new_gate(1, &zio);
        let mos = Objset::create(zio.clone(), gate.clone(), OS_TYPE_MOS);
        let pool = Arc::new(Pool {
            name: spec.name.clone(),
            guid: pool_guid,
            config: Mutex::new(root_cfg),
            zio,
            gate,
            mos,
            admin: Mutex::new(()),
            dir: Mutex::new(Dir::default()),
            objsets: Mutex::new(BTreeMap::new()),
            zilogs: Mutex::new(BTreeMap::new()),
            import_notes: Mutex::new(Vec::new()),
            spacemap_bp: Mutex::new(BlkPtr::HOLE),
            stop: AtomicBool::new(false),
            sync_thread: Mutex::new(None),
            sync_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            altroot: Mutex::new(spec.pool_props.get("altroot").cloned()),
            readonly: AtomicBool::new(false),
            inspect: AtomicBool::new(false),
            rewound: Mutex::new(None),
            config_dirty: AtomicBool::new(false),
            log_evacuate_hook: Mutex::new(None),
            scanner: Default::default(),
            imported_at: std::time::Instant::now(),
            repair: Default::default(),
            dead: Mutex::new(BTreeMap::new()),
            snap_objsets: Mutex::new(BTreeMap::new()),
            sync_tasks: Mutex::new(Vec::new()),
            temp_holds: Mutex::new(BTreeMap::new()),
            suspension: Mutex::new(None),
            failmode: AtomicU8::new(0),
            sync_untrusted: AtomicBool::new(false),
        });
        pool.add_spares(spares, ashift);
        pool.add_caches(caches, ashift);
        // Labels first (state active), so a crash mid-create leaves a recognisable pool.
        pool.write_labels(PoolState::Active, 0)?;
        {
            let tx = TxHold { txg: 1, _guard: None };
            let pool_props: BTreeMap<String, String> = spec
                .pool_props
                .iter()
                .filter(|(k, _)| *k != "altroot")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mode = pool_props.get("failmode").and_then(|v| crate::suspend::FailMode::parse(v)).unwrap_or_default();
            pool.failmode.store(mode.to_u8(), Ordering::SeqCst);
            pool.init_dir(&tx, pool_props)?;
            pool.create_dataset_record(&tx, &spec.name, &spec.fs_props)?;
        }
        pool.apply_dedup_quota();
        pool.sync_once()?;
        pool.write_labels(PoolState::Active, pool.gate.synced_txg())?;
        pool.zio.flush().map_err(|e| SpaError::Io(e.to_string()))?;
        pool.start_sync_thread();
        Ok(pool)
    }

    /// Write every leaf's label config with `state`, hot spares not in use and cache
    /// devices included, in one two-phase update (`tarn_vdev::label::sync_configs`).
    pub(crate) fn write_labels(&self, state: PoolState, txg: u64) -> Result<()> {
        self.write_label_set(state, txg, &|_| true, true)
    }

    /// Write the label config, with `state` and `txg`, on the leaves of the top-level
    /// vdevs for which `pick` (given the top-level config) is true.
    pub(crate) fn write_labels_where(&self, state: PoolState, txg: u64, pick: &dyn Fn(&VdevConfig) -> bool) -> Result<()> {
        self.write_label_set(state, txg, pick, false)
    }

    /// The label configs of the leaves of the picked top-level vdevs (and of the idle
    /// spares with `spares`), written by one two-phase fan-out. Leaves' DTLs and flags
    /// are copied into the config first; faulted leaves are left alone. Failures are
    /// counted on the leaves; the import picks among the copies that survive.
    fn write_label_set(&self, state: PoolState, txg: u64, pick: &dyn Fn(&VdevConfig) -> bool, spares: bool) -> Result<()> {
        self.refresh_leaf_config();
        let cfg = self.config.lock().clone();
        let label = |guid: u64, top_guid: u64| LabelConfig {
            version: TARN_FORMAT_VERSION,
            name: self.name.clone(),
            pool_guid: self.guid,
            guid,
            top_guid,
            txg,
            state,
            hostname: hostname(),
            features_for_read: vec![],
            vdev_tree: cfg.clone(),
        };
        let tops = self.zio.vdevs();
        // Idle spares and cache devices carry the whole config too (top GUID 0).
        let idle = if spares {
            self.idle_spares()
                .into_iter()
                .chain(self.cache_vdevs().into_iter().filter(|c| c.state().is_usable()))
                .collect()
        } else {
            Vec::new()
        };
        let mut items: Vec<(&Vdev, LabelConfig)> = Vec::new();
        for (t, tcfg) in tops.iter().zip(cfg.children.iter()).filter(|(_, c)| pick(c)) {
            for (leaf, lcfg) in t.leaves().into_iter().zip(tcfg.leaves()) {
                if leaf.state() != VdevState::Faulted {
                    items.push((leaf, label(lcfg.guid, tcfg.guid)));
                }
            }
        }
        items.extend(idle.iter().map(|s| (s.as_ref(), label(s.guid(), 0))));
        label::sync_configs(&items);
        Ok(())
    }

    /// Sum of leaf GUIDs (uberblock check).
    pub(crate) fn guid_sum(cfg: &VdevConfig) -> u64 {
        cfg.children.iter().flat_map(|t| t.leaves()).fold(0u64, |a, l| a.wrapping_add(l.guid))
    }

    // ---- import -----------------------------------------------------------------

    fn scan_dirs(dirs: &[PathBuf]) -> Vec<FoundLeaf> {
        Self::scan_dirs_refused(dirs).0
    }

    /// [`Pool::scan_dirs`], also returning the leaves whose every label was refused
    /// as semantically invalid.
    fn scan_dirs_refused(dirs: &[PathBuf]) -> (Vec<FoundLeaf>, Vec<RefusedLeaf>) {
        Self::scan_dirs_mode(dirs, false)
    }

    /// [`Pool::scan_dirs_refused`]; `inspect` opens every leaf read-only and unlocked
    /// ([`Leaf::open_readonly`], for `zdb`).
    fn scan_dirs_mode(dirs: &[PathBuf], inspect: bool) -> (Vec<FoundLeaf>, Vec<RefusedLeaf>) {
        use std::os::unix::fs::FileTypeExt;
        let mut out = Vec::new();
        let mut refused = Vec::new();
        let mut seen = HashSet::new();
        for d in dirs {
            let Ok(rd) = std::fs::read_dir(d) else { continue };
            let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                let Ok(m) = std::fs::metadata(&p) else { continue };
                let ft = m.file_type();
                if !(ft.is_file() || ft.is_block_device()) || (ft.is_file() && m.len() < tarn_phys::MIN_DEVICE_SIZE_BYTES) {
                    continue;
                }
                let canon = std::fs::canonicalize(&p).unwrap_or(p.clone());
                if !seen.insert(canon.clone()) {
                    continue;
                }
                let opened = if inspect { Leaf::open_readonly(&canon) } else { Leaf::open(&canon) };
                let Ok(leaf) = opened else { continue };
                let configs = label::read_configs(&leaf);
                if let Some(config) = configs.iter().flatten().max_by_key(|c| c.txg) {
                    let config = config.clone();
                    out.push(FoundLeaf { path: canon, leaf, config });
                } else if let Some(cfg) = label::read_configs_unchecked(&leaf).into_iter().flatten().max_by_key(|c| c.txg) {
                    if let Err(why) = cfg.validate() {
                        refused.push(RefusedLeaf {
                            path: canon,
                            name: cfg.name,
                            pool_guid: cfg.pool_guid,
                            why,
                        });
                    }
                }
            }
        }
        (out, refused)
    }

    fn group(found: Vec<FoundLeaf>) -> BTreeMap<u64, Vec<FoundLeaf>> {
        let mut by: BTreeMap<u64, Vec<FoundLeaf>> = BTreeMap::new();
        for f in found {
            if f.config.state == PoolState::Destroyed {
                continue;
            }
            by.entry(f.config.pool_guid).or_default().push(f);
        }
        by
    }

    /// Build the vdev tree from `cfg`, taking leaves from `found` by GUID.
    fn open_tree(cfg: &VdevConfig, found: &mut HashMap<u64, FoundLeaf>) -> Vec<Arc<Vdev>> {
        let mut mk_leaf = |c: &VdevConfig, id: u32, ashift: u8| {
            let f = found.remove(&c.guid);
            let path = f.as_ref().map(|f| f.path.display().to_string()).or(c.path.clone()).unwrap_or_default();
            Arc::new(Vdev::new_leaf(id, c.guid, ashift, path, f.map(|f| f.leaf)))
        };
        cfg.children
            .iter()
            .map(|t| crate::config::build_vdev(t, t.id as u32, t.ashift, &mut mk_leaf))
            .collect()
    }

    /// Health of vdev config `t` when only the leaves in `present` exist (a leaf
    /// recorded offline or faulted counts as such).
    fn config_state(t: &VdevConfig, present: &HashSet<u64>) -> VdevState {
        if t.children.is_empty() {
            return if !present.contains(&t.guid) {
                VdevState::Unavail
            } else if t.offline {
                VdevState::Offline
            } else if t.faulted {
                VdevState::Faulted
            } else {
                VdevState::Online
            };
        }
        let states: Vec<VdevState> = t.children.iter().map(|c| Self::config_state(c, present)).collect();
        let unusable = states.iter().filter(|s| !s.is_usable()).count();
        let tol = if t.kind == "raidz" {
            t.nparity as usize
        } else {
            t.children.len().saturating_sub(1)
        };
        if unusable == 0 && states.iter().all(|&s| s == VdevState::Online) {
            VdevState::Online
        } else if unusable <= tol {
            VdevState::Degraded
        } else {
            VdevState::Unavail
        }
    }

    /// The status node of vdev config `t` (no counters).
    fn config_status(t: &VdevConfig, present: &HashSet<u64>) -> VdevStatus {
        let kids: Vec<VdevStatus> = t.children.iter().map(|c| Self::config_status(c, present)).collect();
        VdevStatus {
            size_bytes: t.asize_bytes,
            is_log: t.is_log,
            ..VdevStatus::new(&config_display_name(t), Self::config_state(t, present).as_str(), kids)
        }
    }

    fn candidate_of(name: &str, guid: u64, cfg: &VdevConfig, leaves: &[FoundLeaf], state: PoolState) -> ImportCandidate {
        let present: HashSet<u64> = leaves.iter().map(|f| f.config.guid).collect();
        let mut worst = VdevState::Online;
        let mut children = Vec::new();
        for t in cfg.children.iter().filter(|t| !t.is_hole()) {
            let node = Self::config_status(t, &present);
            let mut st = Self::config_state(t, &present);
            // As OpenZFS's root vdev: a missing log device degrades the pool, no more.
            if t.is_log && st == VdevState::Unavail {
                st = VdevState::Degraded;
            }
            if st == VdevState::Unavail || (st == VdevState::Degraded && worst == VdevState::Online) {
                worst = st;
            }
            children.push(node);
        }
        let mut dirs: Vec<PathBuf> = leaves.iter().filter_map(|f| f.path.parent().map(|p| p.to_path_buf())).collect();
        dirs.sort();
        dirs.dedup();
        ImportCandidate {
            name: name.into(),
            guid,
            health: worst.as_str().into(),
            state: match state {
                PoolState::Active => "active",
                PoolState::Exported => "exported",
                PoolState::Destroyed => "destroyed",
            }
            .into(),
            config: VdevStatus::new(name, worst.as_str(), children),
            dirs,
        }
    }

    /// The label config to import a pool from: the newest (by label txg) for which some
    /// uberblock on the found leaves carries the config's GUID sum, else the newest.
    /// A crash during `zpool add`/`remove` between the uberblock and the label rewrite
    /// therefore leaves the last config that some txg actually committed.
    fn choose_config(leaves: &[FoundLeaf]) -> LabelConfig {
        let sums: HashSet<u64> = leaves.iter().flat_map(|f| label::read_uberblocks(&f.leaf)).map(|u| u.guid_sum).collect();
        let mut cfgs: Vec<&LabelConfig> = leaves.iter().map(|f| &f.config).collect();
        cfgs.sort_by_key(|c| std::cmp::Reverse(c.txg));
        let chosen = cfgs.iter().find(|c| sums.contains(&Self::guid_sum(&c.vdev_tree))).unwrap_or(&cfgs[0]);
        (*chosen).clone()
    }

    /// `zpool import` with no name: pools whose labels are found under `search_dirs`.
    pub fn find_importable(search_dirs: &[PathBuf]) -> Result<Vec<ImportCandidate>> {
        let groups = Self::group(Self::scan_dirs(search_dirs));
        let mut out = Vec::new();
        for (g, leaves) in groups {
            let best = Self::choose_config(&leaves);
            out.push(Self::candidate_of(&best.name, g, &best.vdev_tree, &leaves, best.state));
        }
        Ok(out)
    }

    /// `zpool import NAME|GUID` from leaves found under `search_dirs`.
    pub fn import(name_or_guid: &str, search_dirs: &[PathBuf], rewind: Rewind, new_name: Option<&str>) -> Result<Arc<Pool>> {
        let opts = ImportOptions {
            rewind,
            new_name: new_name.map(String::from),
            ..ImportOptions::default()
        };
        Self::import_with(name_or_guid, search_dirs, &opts)
    }

    /// `zpool import [-m] [-F | -T txg] NAME|GUID [NEWNAME]` from leaves found under
    /// `search_dirs`. Without `opts.missing_log`, a pool with a log vdev whose every
    /// leaf is missing is refused with [`SpaError::MissingLogs`].
    pub fn import_with(name_or_guid: &str, search_dirs: &[PathBuf], opts: &ImportOptions) -> Result<Arc<Pool>> {
        Self::import_mode(name_or_guid, search_dirs, opts, false)
    }

    /// [`Pool::import_with`]; `inspect` (for `zdb`, see `crate::inspect`) opens the
    /// leaves read-only and unlocked, forces `readonly`, and leaves the process's
    /// table of open pool names alone.
    pub(crate) fn import_mode(name_or_guid: &str, search_dirs: &[PathBuf], opts: &ImportOptions, inspect: bool) -> Result<Arc<Pool>> {
        let (found, refused) = Self::scan_dirs_mode(search_dirs, inspect);
        let groups = Self::group(found);
        let mut matches: Vec<(u64, Vec<FoundLeaf>)> = groups
            .into_iter()
            .filter(|(g, leaves)| leaves.iter().any(|f| f.config.name == name_or_guid) || g.to_string() == name_or_guid)
            .collect();
        let bad_label = refused.iter().find(|r| r.name == name_or_guid || r.pool_guid.to_string() == name_or_guid);
        if let (true, Some(r)) = (matches.is_empty(), bad_label) {
            return Err(SpaError::Corrupt(format!(
                "cannot import '{name_or_guid}': invalid label config on {}: {}",
                r.path.display(),
                r.why.detail
            )));
        }
        if matches.is_empty() {
            return Err(SpaError::NotFound(format!("cannot import '{name_or_guid}': no such pool available")));
        }
        if matches.len() > 1 {
            return Err(SpaError::Invalid(format!(
                "cannot import '{name_or_guid}': more than one matching pool\nimport by numeric ID instead"
            )));
        }
        let (pool_guid, leaves) = matches.pop().unwrap();
        let best = Self::choose_config(&leaves);
        if best.version > TARN_FORMAT_VERSION {
            return Err(SpaError::NewerVersion(best.name.clone(), best.version, TARN_FORMAT_VERSION));
        }
        if best.version < tarn_phys::TARN_FORMAT_VERSION_MIN {
            return Err(SpaError::Invalid(format!(
                "cannot import '{}': pool is formatted with an older on-disk format version ({}) that this version of Tarn ({}) does not read\n\tuse the Tarn release that created it to copy the data out, then recreate the pool",
                best.name,
                best.version,
                TARN_FORMAT_VERSION
            )));
        }
        if !best.features_for_read.is_empty() {
            return Err(SpaError::Invalid(format!(
                "cannot import '{}': pool uses the following feature(s) not supported by this system:\n\t{}",
                best.name,
                best.features_for_read.join("\n\t")
            )));
        }
        let name = opts.new_name.as_deref().unwrap_or(&best.name).to_string();
        crate::validate_pool_name(&name)?;
        let cand = Self::candidate_of(&name, pool_guid, &best.vdev_tree, &leaves, best.state);
        if cand.health == "UNAVAIL" {
            return Err(SpaError::Invalid(format!(
                "cannot import '{name}': one or more devices is currently unavailable"
            )));
        }
        if !opts.missing_log {
            let present: HashSet<u64> = leaves.iter().map(|f| f.config.guid).collect();
            let missing: Vec<VdevStatus> = best
                .vdev_tree
                .children
                .iter()
                .filter(|t| t.is_log && Self::config_state(t, &present) == VdevState::Unavail)
                .map(|t| Self::config_status(t, &present))
                .collect();
            if !missing.is_empty() {
                return Err(SpaError::MissingLogs { pool: name, missing });
            }
        }
        if inspect {
            let p = Self::open_pool(name, pool_guid, best.vdev_tree.clone(), leaves, opts.rewind, true)?;
            p.inspect.store(true, Ordering::SeqCst);
            return Ok(p);
        }
        register_name(&name)?;
        let r = Self::open_pool(name.clone(), pool_guid, best.vdev_tree.clone(), leaves, opts.rewind, opts.readonly);
        if r.is_err() {
            unregister_name(&name);
        }
        r
    }

    fn open_pool(name: String, pool_guid: u64, cfg: VdevConfig, leaves: Vec<FoundLeaf>, rewind: Rewind, readonly: bool) -> Result<Arc<Pool>> {
        let mut ubs: Vec<UberblockPhys> = Vec::new();
        // The newest uberblock on each leaf: a leaf behind the pool missed txgs.
        let mut leaf_ub_txg: HashMap<u64, u64> = HashMap::new();
        for f in &leaves {
            let mine = label::read_uberblocks(&f.leaf);
            leaf_ub_txg.insert(f.config.guid, mine.iter().map(|u| u.txg).max().unwrap_or(0));
            ubs.extend(mine);
        }
        let sum = Self::guid_sum(&cfg);
        ubs.retain(|u| u.guid_sum == sum && u.version <= TARN_FORMAT_VERSION);
        ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
        ubs.dedup_by_key(|u| u.txg);
        if ubs.is_empty() {
            return Err(SpaError::Corrupt(format!(
                "cannot import '{name}': no valid uberblock found (labels are damaged)"
            )));
        }
        let candidates: Vec<UberblockPhys> = match rewind {
            Rewind::None => ubs[..1].to_vec(),
            Rewind::Recover => ubs.clone(),
            Rewind::Txg(t) => {
                let v: Vec<_> = ubs.iter().filter(|u| u.txg == t).cloned().collect();
                if v.is_empty() {
                    return Err(SpaError::NotFound(format!(
                        "cannot import '{name}': no uberblock for txg {t} (available: {})",
                        ubs.iter().map(|u| u.txg.to_string()).collect::<Vec<_>>().join(", ")
                    )));
                }
                v
            }
        };
        let mut found: HashMap<u64, FoundLeaf> = leaves.into_iter().map(|f| (f.config.guid, f)).collect();
        let top = Self::open_tree(&cfg, &mut found);
        // Hot spares: the tree's node when in use, else opened from what was found.
        let spares: Vec<Arc<Vdev>> = cfg
            .spares
            .iter()
            .map(|s| {
                crate::config::tree_leaf(&top, s.guid).unwrap_or_else(|| {
                    let f = found.remove(&s.guid);
                    let path = f.as_ref().map(|f| f.path.display().to_string()).or(s.path.clone()).unwrap_or_default();
                    Arc::new(Vdev::new_leaf(s.id as u32, s.guid, s.ashift.max(9), path, f.map(|f| f.leaf)))
                })
            })
            .collect();
        // DTLs and flags from the config, before any read (reads skip stale leaves).
        Self::restore_leaf_state(&cfg, &top, candidates[0].txg, &leaf_ub_txg);
        let mut last_err = None;
        for ub in candidates {
            match Self::open_at(&name, pool_guid, &cfg, &top, &ub) {
                Ok(p) => {
                    if readonly {
                        // Nothing may reach the disks: no label, no uberblock, no
                        // sync thread, no scan, no receive cleanup.
                        p.readonly.store(true, Ordering::SeqCst);
                        p.gate.set_readonly(true);
                        if ub.txg != ubs[0].txg {
                            *p.rewound.lock() = Some(crate::RewindReport {
                                newest_txg: ubs[0].txg,
                                newest_time_s: ubs[0].timestamp_s,
                                txg: ub.txg,
                                time_s: ub.timestamp_s,
                            });
                        }
                        *p.repair.spares.lock() = spares;
                        return Ok(p);
                    }
                    if ub.txg != ubs[0].txg {
                        p.discard_newer_uberblocks(ub.txg);
                    }
                    *p.repair.spares.lock() = spares;
                    p.open_caches(&cfg, &mut found, ub.txg);
                    p.write_labels(PoolState::Active, ub.txg)?;
                    p.start_sync_thread();
                    p.resume_scan();
                    let notes = p.cleanup_interrupted_receives();
                    p.import_notes.lock().extend(notes);
                    return Ok(p);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap())
    }

    fn open_at(name: &str, pool_guid: u64, cfg: &VdevConfig, top: &[Arc<Vdev>], ub: &UberblockPhys) -> Result<Arc<Pool>> {
        // The config's sizes come from disk: a top-level vdev may not claim more space
        // than the devices found under it hold (a crafted size would otherwise let
        // allocations run past the end of the leaves, or size the metaslab array).
        for (i, (v, c)) in top.iter().zip(&cfg.children).enumerate() {
            let have = v.asize_bytes();
            if !c.is_hole() && have > 0 && c.asize_bytes > have {
                return Err(SpaError::Corrupt(format!(
                    "cannot import '{name}': the config gives top-level vdev {i} {} bytes, its devices hold {have}",
                    c.asize_bytes
                )));
            }
        }
        let dims: Vec<(u64, u64)> = top.iter().zip(&cfg.children).map(|(v, c)| (c.asize_bytes, v.alloc_align_bytes())).collect();
        let classes: Vec<AllocClass> = cfg.children.iter().map(class_of).collect();
        let zio = Arc::new(Zio::with_arc(
            top.to_vec(),
            SpaceMap::new(dims.iter().zip(&classes).map(|(&(a, al), &c)| VdevSpace::new_class(a, al, c)).collect()),
            arc().clone(),
        ));
        let vdims: Vec<VdevDims> = dims
            .iter()
            .zip(&classes)
            .map(|(&(asize_bytes, align_bytes), &class)| VdevDims {
                asize_bytes,
                align_bytes,
                class,
            })
            .collect();
        let mut sm = SpaceMap::load(&vdims, &ub.spacemap_bp, &mut |bp| {
            zio.read_block(bp).map(|b| b.to_vec()).map_err(|e| e.to_string())
        })
        .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': space map: {e}")))?;
        for (i, (vs, &class)) in sm.vdevs.iter_mut().zip(&classes).enumerate() {
            if vs.class() != class {
                return Err(SpaError::Corrupt(format!(
                    "cannot import '{name}': space map gives vdev {i} class {:?}, the config {class:?}",
                    vs.class()
                )));
            }
            // A log vdev with no usable leaf (imported with -m) takes no new blocks.
            if class == AllocClass::Log && !top[i].state().is_usable() {
                vs.set_allocatable(false);
            }
        }
        zio.with_space(|s| {
            *s = sm;
            s.sync_done(ub.txg);
        });
        let gate = new_gate(ub.txg + 1, &zio);
        let mos =
            Objset::open(zio.clone(), gate.clone(), &ub.rootbp, 0).map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': MOS unreadable: {e}")))?;
        let mut dir = Dir::load(&*mos).map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': pool directory unreadable: {e}")))?;
        if dir.brt_obj != 0 {
            let table = crate::dsl::read_packed(&*mos, dir.brt_obj)
                .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': block reference table unreadable: {e}")))?;
            zio.brt().load(&table).map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': {e}")))?;
        }
        if dir.ddt_obj != 0 {
            use tarn_zio::ddt::{DdtLoader, DDT_STORED_MAX_BYTES};
            // Records of an older format are read as such; the first txg synced
            // (which writes this build's version) rewrites the table.
            let mut l = DdtLoader::new(ub.version);
            let piece = l.piece_bytes();
            let bad = |e: SpaError| SpaError::Corrupt(format!("cannot import '{name}': dedup table unreadable: {e}"));
            let corrupt = |e: tarn_phys::Corrupt| SpaError::Corrupt(e.to_string());
            crate::dsl::read_pieces(&*mos, dir.ddt_obj, DDT_STORED_MAX_BYTES, piece, &mut |p| l.table(p).map_err(corrupt)).map_err(bad)?;
            if dir.ddt_log_obj != 0 {
                crate::dsl::read_pieces(&*mos, dir.ddt_log_obj, DDT_STORED_MAX_BYTES, piece, &mut |p| l.log(p).map_err(corrupt)).map_err(bad)?;
            }
            zio.ddt().install(l);
        }
        let ignored = std::mem::take(&mut dir.ignored);
        let pool = Arc::new(Pool {
            name: name.to_string(),
            guid: pool_guid,
            config: Mutex::new(cfg.clone()),
            zio,
            gate,
            mos,
            admin: Mutex::new(()),
            dir: Mutex::new(dir),
            objsets: Mutex::new(BTreeMap::new()),
            zilogs: Mutex::new(BTreeMap::new()),
            import_notes: Mutex::new(ignored),
            spacemap_bp: Mutex::new(ub.spacemap_bp),
            stop: AtomicBool::new(false),
            sync_thread: Mutex::new(None),
            sync_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            altroot: Mutex::new(None),
            readonly: AtomicBool::new(false),
            inspect: AtomicBool::new(false),
            rewound: Mutex::new(None),
            config_dirty: AtomicBool::new(false),
            log_evacuate_hook: Mutex::new(None),
            scanner: Default::default(),
            imported_at: std::time::Instant::now(),
            repair: Default::default(),
            dead: Mutex::new(BTreeMap::new()),
            snap_objsets: Mutex::new(BTreeMap::new()),
            sync_tasks: Mutex::new(Vec::new()),
            temp_holds: Mutex::new(BTreeMap::new()),
            suspension: Mutex::new(None),
            failmode: AtomicU8::new(0),
            sync_untrusted: AtomicBool::new(false),
        });
        let mode = pool
            .dir
            .lock()
            .pool_props
            .get("failmode")
            .and_then(|v| crate::suspend::FailMode::parse(v))
            .unwrap_or_default();
        pool.failmode.store(mode.to_u8(), Ordering::SeqCst);
        pool.apply_dedup_quota();
        // Every dataset record must be readable.
        let ids: Vec<u64> = pool.dir.lock().datasets.values().map(|d| d.obj).collect();
        for id in ids {
            let b = pool
                .mos
                .bonus(id)
                .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': dataset record {id}: {e}")))?;
            let phys = DslDatasetPhys::decode(&b)?;
            if !phys.rootbp.is_hole() {
                pool.claim_intent_log(id, &phys)?;
            }
        }
        Ok(pool)
    }

    /// After a rewind import, remove uberblocks newer than `txg` so a later import
    /// cannot pick a tree whose blocks may since have been reused.
    fn discard_newer_uberblocks(&self, txg: u64) {
        let tops = self.zio.vdevs();
        let leaves: Vec<&Vdev> = tops.iter().flat_map(|t| t.leaves()).collect();
        label::clear_uberblocks_after_all(&leaves, txg);
    }

    // ---- accessors ----------------------------------------------------------------

    /// Pool name.
    pub fn name(&self) -> String {
        self.name.clone()
    }
    /// Pool GUID.
    pub fn guid(&self) -> u64 {
        self.guid
    }
    /// Last synced txg.
    pub fn synced_txg(&self) -> u64 {
        self.gate.synced_txg()
    }
    /// Alternate root prefixed to mountpoints (`-R`), if any.
    pub fn altroot(&self) -> Option<String> {
        self.altroot.lock().clone()
    }
    /// Set the alternate root (import `-R`).
    pub fn set_altroot(&self, altroot: Option<String>) {
        *self.altroot.lock() = altroot;
    }
    /// "ONLINE", "DEGRADED", "UNAVAIL", or "SUSPENDED" while suspended (OpenZFS
    /// `zpool_get_state_str`).
    pub fn health(&self) -> String {
        if self.suspension.lock().is_some() {
            return "SUSPENDED".into();
        }
        self.root_state().as_str().into()
    }
    fn root_state(&self) -> VdevState {
        let mut worst = VdevState::Online;
        for (t, is_log) in self.tops() {
            match t.state() {
                VdevState::Online => {}
                // As OpenZFS's root vdev: a log vdev that cannot be used only degrades
                // the pool (its loss costs unsynced log records, not data).
                VdevState::Degraded => {
                    if worst == VdevState::Online {
                        worst = VdevState::Degraded
                    }
                }
                _ if is_log => {
                    if worst == VdevState::Online {
                        worst = VdevState::Degraded
                    }
                }
                _ => worst = VdevState::Unavail,
            }
        }
        worst
    }
    /// The top-level vdevs other than holes, with whether each is a log vdev.
    fn tops(&self) -> Vec<(Arc<Vdev>, bool)> {
        let cfg = self.config.lock();
        self.zio
            .vdevs()
            .into_iter()
            .zip(cfg.children.iter().map(|c| c.is_log))
            .filter(|(t, _)| !t.is_hole())
            .collect()
    }
    /// Whether some log vdev has no usable leaf (imported with `-m`, or its devices
    /// failed): the intent log then writes to the normal class.
    pub fn log_vdevs_missing(&self) -> bool {
        self.tops().iter().any(|(t, is_log)| *is_log && !t.state().is_usable())
    }
    /// The pool's I/O pipeline (for the intent log, which allocates on log vdevs with
    /// `zio.with_space(|s| s.pick_log_vdev(..))`, and for tests).
    pub fn zio(&self) -> &Arc<Zio> {
        &self.zio
    }
    /// Total allocatable bytes (normal class: log vdevs are not counted, as in OpenZFS).
    pub fn size_bytes(&self) -> u64 {
        self.zio.size_bytes()
    }
    /// Allocated bytes (normal class).
    pub fn alloc_bytes(&self) -> u64 {
        self.zio.alloc_bytes()
    }
    /// Fragmentation of the normal class's free space, 0–100 (OpenZFS's metric over
    /// the metaslabs' free-segment histograms; `zpool list` FRAG). `None` when the
    /// pool has no normal space.
    pub fn fragmentation_pct(&self) -> Option<u64> {
        self.zio.with_space(|s| s.fragmentation_pct())
    }
    /// Bytes of space structures (space-map log, flushed metaslab maps, directory
    /// pages, root; each block once, not per copy) the last txg sync wrote.
    pub fn space_sync_bytes(&self) -> u64 {
        self.zio.with_space(|s| s.last_sync_bytes())
    }
    /// Number of blocks that failed every copy since import.
    pub fn data_errors(&self) -> u64 {
        self.zio.data_errors.load(Ordering::Relaxed)
    }

    /// Dirty data of the open and syncing txgs, bytes, as the write throttle counts it
    /// (a partially written record counts as a whole record: its sync allocates one).
    pub fn dirty_bytes(&self) -> u64 {
        self.gate.dirty_bytes()
    }

    /// The config tree with counters for `zpool status`.
    pub fn status(&self) -> VdevStatus {
        let resilvering = self.resilver_running();
        let node = |v: &Vdev, top: bool, alloc: u64| -> VdevStatus {
            fn node(v: &Vdev, top: bool, alloc: u64, resilvering: bool) -> VdevStatus {
                let leaf = v.is_leaf();
                VdevStatus {
                    name: v.display_name(),
                    state: v.state().as_str().into(),
                    read_errors: v.stats().read_errors.load(Ordering::Relaxed),
                    write_errors: v.stats().write_errors.load(Ordering::Relaxed),
                    checksum_errors: v.stats().checksum_errors.load(Ordering::Relaxed),
                    alloc_bytes: if top { alloc } else { 0 },
                    size_bytes: v.asize_bytes(),
                    is_log: false,
                    children: v.children().iter().map(|c| node(c, false, 0, resilvering)).collect(),
                    resilvering: resilvering && leaf && v.state().is_usable() && !v.dtl().is_empty(),
                    spares: Vec::new(),
                    caches: Vec::new(),
                }
            }
            node(v, top, alloc, resilvering)
        };
        let allocs: Vec<u64> = self.zio.with_space(|s| s.vdevs.iter().map(|v| v.alloc_bytes()).collect());
        let logs: Vec<bool> = self.config.lock().children.iter().map(|c| c.is_log).collect();
        VdevStatus {
            name: self.name.clone(),
            state: self.health(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            alloc_bytes: self.alloc_bytes(),
            size_bytes: self.size_bytes(),
            is_log: false,
            children: self
                .zio
                .vdevs()
                .iter()
                .zip(allocs)
                .zip(logs)
                .filter(|((t, _), _)| !t.is_hole())
                .map(|((t, a), is_log)| VdevStatus { is_log, ..node(t, true, a) })
                .collect(),
            resilvering: false,
            spares: self.spare_status(),
            caches: self.cache_status(),
        }
    }

    // ---- lifecycle ----------------------------------------------------------------

    /// Force a txg sync and wait for it. Errors: `Io` ("pool I/O is currently
    /// suspended") at once if the pool is or becomes suspended, whatever `failmode`.
    pub fn sync(&self) -> Result<()> {
        if self.is_readonly() {
            return Ok(()); // nothing is dirty, and no sync thread runs
        }
        let txg = self.gate.open_txg();
        self.gate.wait_synced_nowait(txg).map_err(dmu_err)
    }

    /// Ask for a sync of the txg open now without waiting for it (as dirty data over
    /// the sync mark does); returns that txg, which [`Pool::synced_txg`] reaches when
    /// the sync is done. Unlike [`Pool::sync`], nothing counts as waiting for it
    /// (early writes of the next txg go on meanwhile: `tarn_dmu`'s module `early`).
    pub fn request_sync(&self) -> u64 {
        let txg = self.gate.open_txg();
        self.gate.request_sync(txg);
        txg
    }

    fn close(&self, state: PoolState) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Err(SpaError::NotFound(format!("cannot export '{}': no such pool", self.name)));
        }
        if let Some(s) = self.suspension() {
            // Nothing of a suspended pool's memory is written (suspend.rs): release
            // the leaves as a crash would; import finds the last synced txg.
            tracing::warn!("pool {}: closed while suspended ({s}); nothing written", self.name);
            self.gate.set_readonly(true);
            self.stop_scan_thread();
            self.stop_sync_thread();
            self.release_leaves();
            self.unregister();
            return Ok(());
        }
        self.stop_scan_thread();
        self.stop_sync_thread();
        let readonly = self.readonly.load(Ordering::SeqCst);
        for z in self.zilogs.lock().values() {
            z.close();
        }
        let r = if readonly { Ok(()) } else { self.sync_once() };
        self.gate.set_readonly(true);
        let txg = self.gate.synced_txg();
        if !readonly {
            self.write_labels(state, txg)?;
        }
        self.release_leaves();
        self.unregister();
        r
    }

    /// Flush and unlock every leaf, idle spares and cache devices included (export,
    /// destroy, reopen).
    pub(crate) fn release_leaves(&self) {
        for v in self.zio.vdevs().iter().chain(self.idle_spares().iter()).chain(self.cache_vdevs().iter()) {
            v.release();
        }
    }

    /// Forget the open object sets and logs, and free the pool's name.
    pub(crate) fn unregister(&self) {
        self.objsets.lock().clear();
        self.zilogs.lock().clear();
        self.unregister_live();
        if !self.inspect.load(Ordering::SeqCst) {
            unregister_name(&self.name);
        }
    }

    /// True when imported with `readonly=on` (see [`crate::ImportOptions::readonly`]).
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::SeqCst)
    }

    /// After a read-only import with [`Rewind::Recover`] that could not use the newest
    /// uberblock: where it went back from and to. What `zpool import -Fn` reports.
    pub fn rewound(&self) -> Option<crate::RewindReport> {
        *self.rewound.lock()
    }

    /// `zpool export`: sync, mark labels exported, release every leaf.
    pub fn export(&self) -> Result<()> {
        self.close(PoolState::Exported)
    }

    /// `zpool destroy`: mark labels destroyed and release every leaf.
    pub fn destroy(&self) -> Result<()> {
        self.close(PoolState::Destroyed)
    }

    // ---- pool properties and history ----------------------------------------------

    /// Pool property value and source (`zpool get`).
    pub fn get_prop(&self, prop: &str) -> Result<(String, String)> {
        let size = self.size_bytes();
        let alloc = self.alloc_bytes();
        let v = match prop {
            "name" => self.name.clone(),
            "size" => size.to_string(),
            "allocated" => alloc.to_string(),
            "free" => size.saturating_sub(alloc).to_string(),
            "capacity" => (alloc * 100).checked_div(size).unwrap_or(0).to_string(),
            "fragmentation" => self.fragmentation_pct().map_or_else(|| "-".into(), |f| f.to_string()),
            "health" => self.health(),
            "guid" => self.guid.to_string(),
            "version" => "-".into(),
            "ashift" => self.tops().iter().find(|(_, l)| !l).map(|(t, _)| t.ashift()).unwrap_or(12).to_string(),
            "altroot" => self.altroot().unwrap_or_else(|| "-".into()),
            "readonly" => if self.is_readonly() { "on" } else { "off" }.into(),
            "failmode" => {
                let src = if self.dir.lock().pool_props.contains_key("failmode") {
                    "local"
                } else {
                    "default"
                };
                return Ok((self.failmode().as_str().into(), src.into()));
            }
            "txg" => self.synced_txg().to_string(),
            "dedup_table_size" => (self.zio.ddt().len() as u64 * tarn_zio::ddt::DDT_RECORD_BYTES as u64).to_string(),
            "comment" | "autotrim" | "autoexpand" | "dedup_table_quota" => {
                let d = self.dir.lock();
                let default = match prop {
                    "comment" => "-",
                    "dedup_table_quota" => "auto",
                    _ => "off",
                };
                return Ok(match d.pool_props.get(prop) {
                    Some(c) => (c.clone(), "local".into()),
                    None => (default.into(), "default".into()),
                });
            }
            _ => return Err(SpaError::Invalid(format!("bad property list: invalid property '{prop}'"))),
        };
        let src = if matches!(prop, "ashift") { "local" } else { "-" };
        Ok((v, src.into()))
    }

    /// Names of the pool properties, in OpenZFS's `zpool get all` order. (`txg`, the
    /// last synced txg, can also be read with [`Pool::get_prop`] but is not listed.)
    pub fn prop_names() -> &'static [&'static str] {
        &[
            "size",
            "capacity",
            "altroot",
            "health",
            "guid",
            "version",
            "failmode",
            "free",
            "allocated",
            "readonly",
            "ashift",
            "comment",
            "autoexpand",
            "fragmentation",
            "autotrim",
            "dedup_table_size",
            "dedup_table_quota",
        ]
    }

    /// Apply the `dedup_table_quota` pool property to the dedup table: a size caps
    /// the table's on-disk bytes (entries of [`tarn_zio::ddt::DDT_RECORD_BYTES`]);
    /// `none`, and `auto` (OpenZFS sizes it after a dedicated dedup vdev, which Tarn
    /// does not have), set no limit.
    pub(crate) fn apply_dedup_quota(&self) {
        let v = self.dir.lock().pool_props.get("dedup_table_quota").cloned().unwrap_or_default();
        let entries = crate::dsl::parse_size(&v).map_or(0, |b| ((b / tarn_zio::ddt::DDT_RECORD_BYTES as u64).max(1)) as usize);
        self.zio.ddt().set_max_entries(entries);
    }

    /// `zpool ddtprune`: drop the unique dedup table entries `rule` picks, in one
    /// sync task (module `tarn_zio::ddt`, pruning), and return how many went.
    /// Errors: `ReadOnly` on a read-only import (nothing changes); `Io` when the
    /// pool is suspended.
    pub fn ddt_prune(&self, rule: tarn_zio::ddt::Prune) -> Result<u64> {
        if self.is_readonly() {
            return Err(SpaError::ReadOnly);
        }
        self.run_sync_task(move |pool, _tx| Ok(pool.zio.ddt().prune(rule)))
    }

    /// Check a pool property given to `zpool create -o` or `zpool set`, with OpenZFS's
    /// wording after "cannot …: ". `autotrim` and `autoexpand` take only `off`: Tarn
    /// neither trims nor grows into a larger device yet, and a property that says it
    /// does would lie. `failmode` takes `wait | continue | panic` (`suspend.rs`).
    pub fn check_pool_prop(prop: &str, value: &str) -> Result<()> {
        match prop {
            "failmode" => match crate::suspend::FailMode::parse(value) {
                Some(_) => Ok(()),
                None => Err(SpaError::Invalid("'failmode' must be one of 'wait | continue | panic'".into())),
            },
            "comment" => {
                if value.chars().any(|c| c.is_control()) {
                    return Err(SpaError::Invalid("comment may only have printable characters".into()));
                }
                if value.len() > 32 {
                    return Err(SpaError::Invalid("comment must not exceed 32 characters".into()));
                }
                Ok(())
            }
            "autotrim" | "autoexpand" => match value {
                "off" => Ok(()),
                "on" => Err(SpaError::Invalid(format!(
                    "property '{prop}' cannot be 'on': Tarn does not {} yet",
                    if prop == "autotrim" { "trim" } else { "expand vdevs" }
                ))),
                _ => Err(SpaError::Invalid(format!("'{prop}' must be one of 'on | off'"))),
            },
            "dedup_table_quota" => match value {
                "auto" | "none" => Ok(()),
                v if crate::dsl::parse_size(v).is_some() => Ok(()),
                _ => Err(SpaError::Invalid("'dedup_table_quota' must be 'auto', 'none' or a size".into())),
            },
            "readonly" => Err(SpaError::Invalid("property 'readonly' can only be set at import time".into())),
            p if Self::prop_names().contains(&p) => Err(SpaError::Invalid(format!("'{p}' is readonly"))),
            p => Err(SpaError::Invalid(format!("invalid property '{p}'"))),
        }
    }

    /// `zpool set` (settable: comment, failmode, autotrim, autoexpand; see
    /// [`Pool::check_pool_prop`]). Errors are worded after "cannot set property for
    /// 'pool': "; `Io` while the pool is suspended.
    pub fn set_prop(&self, prop: &str, value: &str) -> Result<()> {
        Self::check_pool_prop(prop, value)?;
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        self.dir.lock().pool_props.insert(prop.into(), value.into());
        if let (true, Some(mode)) = (prop == "failmode", crate::suspend::FailMode::parse(value)) {
            self.failmode.store(mode.to_u8(), Ordering::SeqCst);
        }
        if prop == "dedup_table_quota" {
            self.apply_dedup_quota();
        }
        self.save_pool_props(&tx)
    }

    /// Append a `zpool history` record for a command whose changes, and this record,
    /// must be durable before the command answers, and wait for that: the open txg is
    /// synced (it holds every change made under an earlier hold, and the record).
    /// OpenZFS gets the same from `dsl_sync_task`, which returns only once its txg
    /// synced; Tarn's administrative changes (`zfs create`, `destroy`, `rename`,
    /// `set`, `clone`, `promote`, `rollback`, `hold`, `bookmark`, `zpool set`, …) are
    /// made under a hold and would otherwise be lost by a crash right after the
    /// command said it succeeded. Errors: the history write's; `Io` when the pool is
    /// suspended before the txg synced (the change stays in memory, as a suspended
    /// pool's other dirty state).
    pub fn log_history_durable(&self, command_line: &str) -> Result<()> {
        self.log_history(command_line)?;
        self.sync()
    }

    /// Append a `zpool history` record (synced with the next txg; see
    /// [`Pool::log_history_durable`]).
    pub fn log_history(&self, command_line: &str) -> Result<()> {
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let (obj, len) = self.history_len()?;
        let line = format!("{} {}\n", format_time(now_s()), command_line);
        self.mos.write(&tx, obj, len, line.as_bytes()).map_err(dmu_err)?;
        self.mos.set_bonus(&tx, obj, &(len + line.len() as u64).to_le_bytes()).map_err(dmu_err)?;
        Ok(())
    }

    /// The history object and its length in bytes (kept in its bonus buffer). The
    /// length comes from disk: it must lie within the object's blocks, or the history
    /// is reported corrupt rather than read or written at a crafted offset.
    fn history_len(&self) -> Result<(u64, u64)> {
        let obj = self.dir.lock().history_obj;
        let b = self.mos.bonus(obj).map_err(dmu_err)?;
        let len = b.get(0..8).map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
        let info = self.mos.object_info(obj).map_err(dmu_err)?;
        let size = info.maxblkid.saturating_add(1).saturating_mul(info.datablksz_bytes as u64);
        if len > size {
            return Err(SpaError::Corrupt(format!(
                "pool history object {obj} claims {len} bytes but holds at most {size}"
            )));
        }
        Ok((obj, len))
    }

    /// `zpool history` lines: "YYYY-MM-DD.HH:MM:SS command". At most the last
    /// `HISTORY_READ_MAX_BYTES` are read (older lines are left out, as OpenZFS's
    /// history is a ring that drops its oldest records), so a history of any length
    /// costs a bounded allocation. Errors: `Corrupt` when the recorded length does not
    /// fit the object (a crafted pool).
    pub fn history(&self) -> Result<Vec<String>> {
        let (obj, len) = self.history_len()?;
        let start = len.saturating_sub(HISTORY_READ_MAX_BYTES);
        let mut buf = vec![0u8; (len - start) as usize];
        self.mos.read(obj, start, &mut buf).map_err(dmu_err)?;
        let text = String::from_utf8_lossy(&buf);
        // A read that starts mid-history starts mid-line: drop the partial line.
        let skip = if start > 0 { 1 } else { 0 };
        Ok(text.lines().skip(skip).map(|s| s.to_string()).collect())
    }
}

/// Most bytes of pool history [`Pool::history`] reads (the newest ones): 16 MiB,
/// some 200,000 commands.
pub const HISTORY_READ_MAX_BYTES: u64 = 16 << 20;

/// Format seconds since the epoch as `YYYY-MM-DD.HH:MM:SS` in UTC, the form a
/// `zpool history` record is stored in (the CLI shows it in local time).
pub fn format_time(secs: u64) -> String {
    match jiff::Timestamp::from_second(secs.min(i64::MAX as u64) as i64) {
        Ok(ts) => ts.strftime("%Y-%m-%d.%H:%M:%S").to_string(),
        Err(_) => secs.to_string(),
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unregister_live();
        if !self.inspect.load(Ordering::SeqCst) {
            unregister_name(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_format() {
        assert_eq!(super::format_time(0), "1970-01-01.00:00:00");
        assert_eq!(super::format_time(1_700_000_000), "2023-11-14.22:13:20");
    }

    /// A history length (kept in the history object's bonus, so read from disk) that
    /// the object cannot hold is `Corrupt` for `zpool history` and for the next
    /// logged command, instead of an allocation of that many bytes; after the pool is
    /// re-imported the damage is still reported, not trusted.
    #[test]
    fn crafted_history_length_is_refused() {
        use tarn_dmu::ObjectStore;
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        std::fs::File::create(&a).unwrap().set_len(64 << 20).unwrap();
        let pool = super::Pool::create(&crate::CreateSpec {
            name: "hist".into(),
            vdevs: vec![crate::TopSpec::Leaf(a)],
            ashift: 12,
            ..Default::default()
        })
        .unwrap();
        pool.log_history("zpool create hist").unwrap();
        assert_eq!(pool.history().unwrap().len(), 1);
        let obj = pool.dir.lock().history_obj;
        let tx = pool.gate.hold().unwrap();
        pool.mos.set_bonus(&tx, obj, &(1u64 << 40).to_le_bytes()).unwrap();
        drop(tx);
        pool.sync().unwrap();
        assert!(matches!(pool.history(), Err(crate::SpaError::Corrupt(_))));
        assert!(matches!(pool.log_history("zpool status"), Err(crate::SpaError::Corrupt(_))));
        pool.export().unwrap();
        drop(pool);
        let pool = super::Pool::import("hist", &[dir.path().to_path_buf()], crate::Rewind::None, None).unwrap();
        assert!(matches!(pool.history(), Err(crate::SpaError::Corrupt(_))));
        pool.export().unwrap();
    }
}
