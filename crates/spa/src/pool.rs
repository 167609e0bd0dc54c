//! The `Pool` object: create, import, export, destroy, status and pool properties.
//! See the crate theory statement in `lib.rs`.

use crate::dsl::{Dir, DslDatasetPhys};
use crate::{CreateSpec, ImportCandidate, Result, Rewind, SpaError, TopSpec, VdevStatus};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tarn_dmu::objset::{Objset, OS_TYPE_MOS};
use tarn_dmu::txg::TxgGate;
use tarn_dmu::{ObjectStore, TxHold};
use tarn_metaslab::{SpaceMap, VdevSpace};
use tarn_phys::label::{LabelConfig, PoolState, VdevConfig};
use tarn_phys::{BlkPtr, ObjectType, UberblockPhys, TARN_FORMAT_VERSION};
use tarn_vdev::{label, Leaf, Vdev, VdevError, VdevState};
use tarn_zio::Zio;

/// Default memory budget for cached and dirty blocks of one pool, bytes.
pub const CACHE_LIMIT_DEFAULT_BYTES: u64 = 256 << 20;

static CACHE_LIMIT_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(CACHE_LIMIT_DEFAULT_BYTES);

/// Set the per-pool memory budget `limit` (bytes, at least 16 MiB) for pools opened
/// from now on. Half of it is the read cache; a quarter is the dirty-data limit of
/// one txg, so the open and the syncing txg together hold at most another half.
/// Block memory therefore stays within `limit`, as OpenZFS counts dirty buffers
/// inside the ARC.
pub fn set_cache_limit(limit_bytes: u64) {
    CACHE_LIMIT_BYTES.store(limit_bytes.max(16 << 20), Ordering::Relaxed);
}

/// The current per-pool memory budget, bytes.
pub fn cache_limit() -> u64 {
    CACHE_LIMIT_BYTES.load(Ordering::Relaxed)
}

fn cache_max_bytes() -> u64 {
    cache_limit() / 2
}

fn dirty_max_bytes() -> u64 {
    cache_limit() / 4
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
        tarn_dmu::DmuError::Corrupt(c) => SpaError::Corrupt(c.to_string()),
        other => SpaError::Io(other.to_string()),
    }
}

fn hostname() -> String {
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

fn guid() -> u64 {
    loop {
        let g: u64 = rand::random();
        if g != 0 {
            return g;
        }
    }
}

fn kind_of_leaf(path: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => "disk",
        _ => "file",
    }
}

/// An imported pool.
pub struct Pool {
    pub(crate) name: String,
    pub(crate) guid: u64,
    pub(crate) config: Mutex<VdevConfig>,
    pub(crate) top: Vec<Arc<Vdev>>,
    pub(crate) zio: Arc<Zio>,
    pub(crate) gate: Arc<TxgGate>,
    pub(crate) mos: Arc<Objset>,
    /// Serializes MOS changes (admin operations) against the MOS part of sync.
    pub(crate) admin: Mutex<()>,
    pub(crate) dir: Mutex<Dir>,
    /// Open dataset object sets by dataset MOS object id.
    pub(crate) objsets: Mutex<BTreeMap<u64, Arc<Objset>>>,
    pub(crate) spacemap_bp: Mutex<BlkPtr>,
    pub(crate) stop: AtomicBool,
    pub(crate) sync_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(crate) sync_lock: Mutex<()>,
    pub(crate) closed: AtomicBool,
    pub(crate) altroot: Mutex<Option<String>>,
}

struct FoundLeaf {
    path: PathBuf,
    leaf: Leaf,
    config: LabelConfig,
}

impl Pool {
    // ---- create -----------------------------------------------------------------

    /// `zpool create`. Validates everything before touching any device.
    pub fn create(spec: &CreateSpec) -> Result<Arc<Pool>> {
        crate::validate_pool_name(&spec.name)?;
        if spec.ashift != 9 && spec.ashift != 12 {
            return Err(SpaError::Invalid(format!(
                "invalid vdev specification: ashift must be 9 or 12 (got {})",
                spec.ashift
            )));
        }
        if spec.vdevs.is_empty() {
            return Err(SpaError::Invalid("invalid vdev specification: at least one device is required".into()));
        }
        // Shape checks.
        let mut seen = HashSet::new();
        for t in &spec.vdevs {
            let leaves: Vec<&PathBuf> = match t {
                TopSpec::Leaf(p) => vec![p],
                TopSpec::Mirror(v) => {
                    if v.len() < 2 {
                        return Err(SpaError::Invalid("invalid vdev specification: mirror requires at least 2 devices".into()));
                    }
                    v.iter().collect()
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
                    leaves.iter().collect()
                }
            };
            for p in leaves {
                let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                if !seen.insert(canon) {
                    return Err(SpaError::Invalid(format!(
                        "invalid vdev specification: {} is specified more than once",
                        p.display()
                    )));
                }
            }
        }
        // Open every leaf and check size and labels before writing anything.
        let mut opened: Vec<Vec<(PathBuf, Leaf)>> = Vec::new();
        for t in &spec.vdevs {
            let paths: Vec<PathBuf> = match t {
                TopSpec::Leaf(p) => vec![p.clone()],
                TopSpec::Mirror(v) => v.clone(),
                TopSpec::Raidz { leaves, .. } => leaves.clone(),
            };
            let mut group = Vec::new();
            for p in paths {
                if !p.exists() {
                    return Err(SpaError::NotFound(format!("cannot open '{}': No such file or directory", p.display())));
                }
                let leaf = Leaf::open(&p).map_err(|e| match e {
                    VdevError::Busy { .. } => SpaError::Busy(format!("{} is in use and contains an imported pool", p.display())),
                    VdevError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput => SpaError::TooSmall(p.display().to_string()),
                    other => SpaError::Io(other.to_string()),
                })?;
                if leaf.size_bytes < tarn_phys::MIN_DEVICE_SIZE_BYTES {
                    return Err(SpaError::TooSmall(p.display().to_string()));
                }
                if let Some(cfg) = label::read_configs(&leaf).into_iter().flatten().next() {
                    let state = match cfg.state {
                        PoolState::Active => Some("active"),
                        PoolState::Exported => Some("exported"),
                        PoolState::Destroyed => None,
                    };
                    if let Some(state) = state {
                        if !spec.force {
                            return Err(SpaError::InUse {
                                path: p.display().to_string(),
                                pool: cfg.name,
                                state: state.into(),
                            });
                        }
                    }
                }
                group.push((p, leaf));
            }
            opened.push(group);
        }
        register_name(&spec.name)?;
        let res = Self::create_inner(spec, opened);
        if res.is_err() {
            unregister_name(&spec.name);
        }
        res
    }

    fn create_inner(spec: &CreateSpec, opened: Vec<Vec<(PathBuf, Leaf)>>) -> Result<Arc<Pool>> {
        let ashift = spec.ashift;
        let mut top = Vec::new();
        let mut tops_cfg = Vec::new();
        for (id, (t, group)) in spec.vdevs.iter().zip(opened).enumerate() {
            let id = id as u32;
            let mut leaves = Vec::new();
            let mut leaf_cfgs = Vec::new();
            let single = matches!(t, TopSpec::Leaf(_));
            for (i, (p, leaf)) in group.into_iter().enumerate() {
                // A lone leaf is itself the top-level vdev and carries its id.
                let i = if single { id as usize } else { i };
                let g = guid();
                let path = std::fs::canonicalize(&p).unwrap_or(p.clone()).display().to_string();
                leaf_cfgs.push(VdevConfig {
                    kind: kind_of_leaf(&p).into(),
                    id: i as u64,
                    guid: g,
                    path: Some(path.clone()),
                    nparity: 0,
                    ashift,
                    asize_bytes: 0,
                    is_log: false,
                    children: vec![],
                });
                leaves.push(Arc::new(Vdev::new_leaf(i as u32, g, ashift, path, Some(leaf))));
            }
            let tg = guid();
            let (vdev, kind, nparity) = match t {
                TopSpec::Leaf(_) => {
                    let (v, lc) = (leaves.pop().unwrap(), leaf_cfgs.pop().unwrap());
                    tops_cfg.push(VdevConfig {
                        asize_bytes: v.asize_bytes(),
                        ..lc
                    });
                    top.push(v);
                    continue;
                }
                TopSpec::Mirror(_) => (Vdev::new_mirror(id, tg, ashift, leaves), "mirror", 0),
                TopSpec::Raidz { nparity, .. } => (Vdev::new_raidz(id, tg, ashift, *nparity, leaves), "raidz", *nparity),
            };
            let asize = vdev.asize_bytes();
            tops_cfg.push(VdevConfig {
                kind: kind.into(),
                id: id as u64,
                guid: tg,
                path: None,
                nparity,
                ashift,
                asize_bytes: asize,
                is_log: false,
                children: leaf_cfgs,
            });
            top.push(Arc::new(vdev));
        }
        let pool_guid = guid();
        let root_cfg = VdevConfig {
            kind: "root".into(),
            id: 0,
            guid: pool_guid,
            path: None,
            nparity: 0,
            ashift: 0,
            asize_bytes: 0,
            is_log: false,
            children: tops_cfg,
        };
        let space = SpaceMap::new(top.iter().map(|v| VdevSpace::new(v.asize_bytes(), v.alloc_align_bytes())).collect());
        let zio = Arc::new(Zio::new(top.clone(), space, cache_max_bytes()));
        let gate = Arc::new(TxgGate::new(1, dirty_max_bytes()));
        let mos = Objset::create(zio.clone(), gate.clone(), OS_TYPE_MOS);
        let pool = Arc::new(Pool {
            name: spec.name.clone(),
            guid: pool_guid,
            config: Mutex::new(root_cfg),
            top,
            zio,
            gate,
            mos,
            admin: Mutex::new(()),
            dir: Mutex::new(Dir::default()),
            objsets: Mutex::new(BTreeMap::new()),
            spacemap_bp: Mutex::new(BlkPtr::HOLE),
            stop: AtomicBool::new(false),
            sync_thread: Mutex::new(None),
            sync_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            altroot: Mutex::new(spec.pool_props.get("altroot").cloned()),
        });
        // Labels first (state active), so a crash mid-create leaves a recognisable pool.
        pool.write_labels(PoolState::Active, 0)?;
        {
            let tx = TxHold { txg: 1, _guard: None };
            let dir_obj = pool.mos.create_object(&tx, ObjectType::Packed, 512, 128 << 10, &[]).map_err(dmu_err)?;
            assert_eq!(dir_obj, MOS_DIR_OBJ);
            let hist = pool
                .mos
                .create_object(&tx, ObjectType::History, 512, 128 << 10, &0u64.to_le_bytes())
                .map_err(dmu_err)?;
            let mut dir = Dir {
                history_obj: hist,
                ..Dir::default()
            };
            for (k, v) in &spec.pool_props {
                if k != "altroot" {
                    dir.pool_props.insert(k.clone(), v.clone());
                }
            }
            *pool.dir.lock() = dir;
            pool.create_dataset_record(&tx, &spec.name, &spec.fs_props)?;
            pool.save_dir(&tx)?;
        }
        pool.sync_once()?;
        pool.write_labels(PoolState::Active, pool.gate.synced_txg())?;
        pool.zio.flush().map_err(|e| SpaError::Io(e.to_string()))?;
        pool.start_sync_thread();
        Ok(pool)
    }

    /// Write every leaf's label config with `state`.
    pub(crate) fn write_labels(&self, state: PoolState, txg: u64) -> Result<()> {
        let cfg = self.config.lock().clone();
        for (t, tcfg) in self.top.iter().zip(cfg.children.iter()) {
            for (leaf, lcfg) in t.leaves().into_iter().zip(tcfg.leaves()) {
                let tarn_vdev::VdevKind::Leaf(Some(l)) = &leaf.kind else { continue };
                let lc = LabelConfig {
                    version: TARN_FORMAT_VERSION,
                    name: self.name.clone(),
                    pool_guid: self.guid,
                    guid: lcfg.guid,
                    top_guid: tcfg.guid,
                    txg,
                    state,
                    hostname: hostname(),
                    features_for_read: vec![],
                    vdev_tree: cfg.clone(),
                };
                let r = label::write_config(l, &lc).and_then(|_| l.flush());
                if let Err(e) = r {
                    leaf.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("label write failed on {:?}: {e}", leaf.path);
                }
            }
        }
        Ok(())
    }

    /// Sum of leaf GUIDs (uberblock check).
    pub(crate) fn guid_sum(cfg: &VdevConfig) -> u64 {
        cfg.children.iter().flat_map(|t| t.leaves()).fold(0u64, |a, l| a.wrapping_add(l.guid))
    }

    // ---- import -----------------------------------------------------------------

    fn scan_dirs(dirs: &[PathBuf]) -> Vec<FoundLeaf> {
        use std::os::unix::fs::FileTypeExt;
        let mut out = Vec::new();
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
                let Ok(leaf) = Leaf::open(&canon) else { continue };
                if let Some(config) = label::read_configs(&leaf).into_iter().flatten().max_by_key(|c| c.txg) {
                    out.push(FoundLeaf { path: canon, leaf, config });
                }
            }
        }
        out
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
        let mk_leaf = |c: &VdevConfig, id: u32, ashift: u8, found: &mut HashMap<u64, FoundLeaf>| {
            let f = found.remove(&c.guid);
            let path = f.as_ref().map(|f| f.path.display().to_string()).or(c.path.clone()).unwrap_or_default();
            Vdev::new_leaf(id, c.guid, ashift, path, f.map(|f| f.leaf))
        };
        cfg.children
            .iter()
            .map(|t| {
                let id = t.id as u32;
                let v = match t.kind.as_str() {
                    "mirror" => Vdev::new_mirror(
                        id,
                        t.guid,
                        t.ashift,
                        t.children
                            .iter()
                            .enumerate()
                            .map(|(i, c)| Arc::new(mk_leaf(c, i as u32, t.ashift, found)))
                            .collect(),
                    ),
                    "raidz" => Vdev::new_raidz(
                        id,
                        t.guid,
                        t.ashift,
                        t.nparity,
                        t.children
                            .iter()
                            .enumerate()
                            .map(|(i, c)| Arc::new(mk_leaf(c, i as u32, t.ashift, found)))
                            .collect(),
                    ),
                    _ => mk_leaf(t, id, t.ashift, found),
                };
                Arc::new(v)
            })
            .collect()
    }

    fn candidate_of(name: &str, guid: u64, cfg: &VdevConfig, leaves: &[FoundLeaf], state: PoolState) -> ImportCandidate {
        let present: HashSet<u64> = leaves.iter().map(|f| f.config.guid).collect();
        let mut worst = VdevState::Online;
        let children = cfg
            .children
            .iter()
            .map(|t| {
                let kids: Vec<VdevStatus> = t
                    .leaves()
                    .iter()
                    .filter(|_| !t.children.is_empty())
                    .map(|l| {
                        VdevStatus::new(
                            &l.path.clone().unwrap_or_default(),
                            if present.contains(&l.guid) { "ONLINE" } else { "UNAVAIL" },
                            vec![],
                        )
                    })
                    .collect();
                let missing = t.leaves().iter().filter(|l| !present.contains(&l.guid)).count();
                let tol = match t.kind.as_str() {
                    "mirror" => t.children.len().saturating_sub(1),
                    "raidz" => t.nparity as usize,
                    _ => 0,
                };
                let st = if missing == 0 {
                    VdevState::Online
                } else if missing <= tol {
                    VdevState::Degraded
                } else {
                    VdevState::Unavail
                };
                if st == VdevState::Unavail || (st == VdevState::Degraded && worst == VdevState::Online) {
                    worst = st;
                }
                let name = match t.kind.as_str() {
                    "mirror" => format!("mirror-{}", t.id),
                    "raidz" => format!("raidz{}-{}", t.nparity, t.id),
                    _ => t.path.clone().unwrap_or_default(),
                };
                VdevStatus {
                    name,
                    state: st.as_str().into(),
                    read_errors: 0,
                    write_errors: 0,
                    checksum_errors: 0,
                    alloc_bytes: 0,
                    size_bytes: t.asize_bytes,
                    children: kids,
                }
            })
            .collect();
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

    /// `zpool import` with no name: pools whose labels are found under `search_dirs`.
    pub fn find_importable(search_dirs: &[PathBuf]) -> Result<Vec<ImportCandidate>> {
        let groups = Self::group(Self::scan_dirs(search_dirs));
        let mut out = Vec::new();
        for (g, leaves) in groups {
            let best = leaves.iter().max_by_key(|f| f.config.txg).unwrap().config.clone();
            out.push(Self::candidate_of(&best.name, g, &best.vdev_tree, &leaves, best.state));
        }
        Ok(out)
    }

    /// `zpool import NAME|GUID` from leaves found under `search_dirs`.
    pub fn import(name_or_guid: &str, search_dirs: &[PathBuf], rewind: Rewind, new_name: Option<&str>) -> Result<Arc<Pool>> {
        let groups = Self::group(Self::scan_dirs(search_dirs));
        let mut matches: Vec<(u64, Vec<FoundLeaf>)> = groups
            .into_iter()
            .filter(|(g, leaves)| leaves.iter().any(|f| f.config.name == name_or_guid) || g.to_string() == name_or_guid)
            .collect();
        if matches.is_empty() {
            return Err(SpaError::NotFound(format!("cannot import '{name_or_guid}': no such pool available")));
        }
        if matches.len() > 1 {
            return Err(SpaError::Invalid(format!(
                "cannot import '{name_or_guid}': more than one matching pool\nimport by numeric ID instead"
            )));
        }
        let (pool_guid, leaves) = matches.pop().unwrap();
        let best = leaves.iter().max_by_key(|f| f.config.txg).unwrap().config.clone();
        if best.version > TARN_FORMAT_VERSION {
            return Err(SpaError::NewerVersion(best.name.clone(), best.version, TARN_FORMAT_VERSION));
        }
        if !best.features_for_read.is_empty() {
            return Err(SpaError::Invalid(format!(
                "cannot import '{}': pool uses the following feature(s) not supported by this system:\n\t{}",
                best.name,
                best.features_for_read.join("\n\t")
            )));
        }
        let name = new_name.unwrap_or(&best.name).to_string();
        crate::validate_pool_name(&name)?;
        let cand = Self::candidate_of(&name, pool_guid, &best.vdev_tree, &leaves, best.state);
        if cand.health == "UNAVAIL" {
            return Err(SpaError::Invalid(format!(
                "cannot import '{name}': one or more devices is currently unavailable"
            )));
        }
        register_name(&name)?;
        let r = Self::open_pool(name.clone(), pool_guid, best.vdev_tree.clone(), leaves, rewind);
        if r.is_err() {
            unregister_name(&name);
        }
        r
    }

    fn open_pool(name: String, pool_guid: u64, cfg: VdevConfig, leaves: Vec<FoundLeaf>, rewind: Rewind) -> Result<Arc<Pool>> {
        let mut ubs: Vec<UberblockPhys> = Vec::new();
        for f in &leaves {
            ubs.extend(label::read_uberblocks(&f.leaf));
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
        let mut last_err = None;
        for ub in candidates {
            match Self::open_at(&name, pool_guid, &cfg, &top, &ub) {
                Ok(p) => {
                    if ub.txg != ubs[0].txg {
                        p.discard_newer_uberblocks(ub.txg);
                    }
                    p.write_labels(PoolState::Active, ub.txg)?;
                    p.start_sync_thread();
                    return Ok(p);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap())
    }

    fn open_at(name: &str, pool_guid: u64, cfg: &VdevConfig, top: &[Arc<Vdev>], ub: &UberblockPhys) -> Result<Arc<Pool>> {
        let dims: Vec<(u64, u64)> = top.iter().zip(&cfg.children).map(|(v, c)| (c.asize_bytes, v.alloc_align_bytes())).collect();
        let zio = Arc::new(Zio::new(
            top.to_vec(),
            SpaceMap::new(dims.iter().map(|&(a, al)| VdevSpace::new(a, al)).collect()),
            cache_max_bytes(),
        ));
        let sm_bytes = zio
            .read_block(&ub.spacemap_bp)
            .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': space map unreadable: {e}")))?;
        let sm_len = u64::from_le_bytes(
            sm_bytes
                .get(0..8)
                .ok_or_else(|| SpaError::Corrupt("space map too short".into()))?
                .try_into()
                .unwrap(),
        ) as usize;
        let sm = SpaceMap::decode(&dims, sm_bytes.get(8..8 + sm_len).ok_or_else(|| SpaError::Corrupt("space map length".into()))?)
            .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': {e}")))?;
        zio.with_space(|s| {
            *s = sm;
            s.sync_done(ub.txg);
        });
        let gate = Arc::new(TxgGate::new(ub.txg + 1, dirty_max_bytes()));
        let mos =
            Objset::open(zio.clone(), gate.clone(), &ub.rootbp, 0).map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': MOS unreadable: {e}")))?;
        let dir = Dir::load(&*mos).map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': pool directory unreadable: {e}")))?;
        let pool = Arc::new(Pool {
            name: name.to_string(),
            guid: pool_guid,
            config: Mutex::new(cfg.clone()),
            top: top.to_vec(),
            zio,
            gate,
            mos,
            admin: Mutex::new(()),
            dir: Mutex::new(dir),
            objsets: Mutex::new(BTreeMap::new()),
            spacemap_bp: Mutex::new(ub.spacemap_bp),
            stop: AtomicBool::new(false),
            sync_thread: Mutex::new(None),
            sync_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            altroot: Mutex::new(None),
        });
        // Every dataset record must be readable.
        let ids: Vec<u64> = pool.dir.lock().datasets.values().map(|d| d.obj).collect();
        for id in ids {
            let b = pool
                .mos
                .bonus(id)
                .map_err(|e| SpaError::Corrupt(format!("cannot import '{name}': dataset record {id}: {e}")))?;
            DslDatasetPhys::decode(&b)?;
        }
        Ok(pool)
    }

    /// After a rewind import, remove uberblocks newer than `txg` so a later import
    /// cannot pick a tree whose blocks may since have been reused.
    fn discard_newer_uberblocks(&self, txg: u64) {
        for t in &self.top {
            for leaf in t.leaves() {
                let tarn_vdev::VdevKind::Leaf(Some(l)) = &leaf.kind else { continue };
                if label::clear_uberblocks_after(l, txg).and_then(|_| l.flush()).is_err() {
                    leaf.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
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
    /// "ONLINE", "DEGRADED", "UNAVAIL".
    pub fn health(&self) -> String {
        self.root_state().as_str().into()
    }
    fn root_state(&self) -> VdevState {
        let mut worst = VdevState::Online;
        for t in &self.top {
            match t.state() {
                VdevState::Online => {}
                VdevState::Degraded => {
                    if worst == VdevState::Online {
                        worst = VdevState::Degraded
                    }
                }
                _ => worst = VdevState::Unavail,
            }
        }
        worst
    }
    /// Total allocatable bytes.
    pub fn size_bytes(&self) -> u64 {
        self.zio.size_bytes()
    }
    /// Allocated bytes.
    pub fn alloc_bytes(&self) -> u64 {
        self.zio.alloc_bytes()
    }
    /// Number of blocks that failed every copy since import.
    pub fn data_errors(&self) -> u64 {
        self.zio.data_errors.load(Ordering::Relaxed)
    }

    /// The config tree with counters for `zpool status`.
    pub fn status(&self) -> VdevStatus {
        fn node(v: &Vdev, top: bool, alloc: u64) -> VdevStatus {
            VdevStatus {
                name: v.display_name(),
                state: v.state().as_str().into(),
                read_errors: v.stats.read_errors.load(Ordering::Relaxed),
                write_errors: v.stats.write_errors.load(Ordering::Relaxed),
                checksum_errors: v.stats.checksum_errors.load(Ordering::Relaxed),
                alloc_bytes: if top { alloc } else { 0 },
                size_bytes: v.asize_bytes(),
                children: v.children().iter().map(|c| node(c, false, 0)).collect(),
            }
        }
        let allocs: Vec<u64> = self.zio.with_space(|s| s.vdevs.iter().map(|v| v.alloc_bytes()).collect());
        VdevStatus {
            name: self.name.clone(),
            state: self.health(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            alloc_bytes: self.alloc_bytes(),
            size_bytes: self.size_bytes(),
            children: self.top.iter().zip(allocs).map(|(t, a)| node(t, true, a)).collect(),
        }
    }

    // ---- lifecycle ----------------------------------------------------------------

    /// Force a txg sync and wait for it.
    pub fn sync(&self) -> Result<()> {
        let txg = self.gate.open_txg();
        self.gate.wait_synced(txg).map_err(dmu_err)
    }

    fn close(&self, state: PoolState) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Err(SpaError::NotFound(format!("cannot export '{}': no such pool", self.name)));
        }
        self.stop_sync_thread();
        let r = self.sync_once();
        self.gate.set_readonly(true);
        let txg = self.gate.synced_txg();
        self.write_labels(state, txg)?;
        for t in &self.top {
            for leaf in t.leaves() {
                if let tarn_vdev::VdevKind::Leaf(Some(l)) = &leaf.kind {
                    let _ = l.flush();
                    l.unlock();
                }
            }
        }
        self.objsets.lock().clear();
        unregister_name(&self.name);
        r
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
            "health" => self.health(),
            "guid" => self.guid.to_string(),
            "version" => "-".into(),
            "ashift" => self.top.first().map(|t| t.ashift).unwrap_or(12).to_string(),
            "altroot" => self.altroot().unwrap_or_else(|| "-".into()),
            "readonly" => if self.gate.is_readonly() { "on" } else { "off" }.into(),
            "txg" => self.synced_txg().to_string(),
            "comment" => {
                let d = self.dir.lock();
                return Ok(match d.pool_props.get("comment") {
                    Some(c) => (c.clone(), "local".into()),
                    None => ("-".into(), "default".into()),
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
            "free",
            "allocated",
            "readonly",
            "ashift",
            "comment",
        ]
    }

    /// `zpool set` (settable: comment).
    pub fn set_prop(&self, prop: &str, value: &str) -> Result<()> {
        match prop {
            "comment" => {
                if value.len() > 32 || value.chars().any(|c| c.is_control()) {
                    return Err(SpaError::Invalid("comment must be at most 32 printable characters".into()));
                }
                let tx = self.gate.hold().map_err(dmu_err)?;
                let _a = self.admin.lock();
                self.dir.lock().pool_props.insert("comment".into(), value.into());
                self.save_dir(&tx)
            }
            p if Self::prop_names().contains(&p) => Err(SpaError::Invalid(format!(
                "cannot set property for '{}': property '{p}' is readonly",
                self.name
            ))),
            p => Err(SpaError::Invalid(format!("cannot set property for '{}': invalid property '{p}'", self.name))),
        }
    }

    /// Append a `zpool history` record.
    pub fn log_history(&self, command_line: &str) -> Result<()> {
        let tx = self.gate.hold().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let obj = self.dir.lock().history_obj;
        let b = self.mos.bonus(obj).map_err(dmu_err)?;
        let len = u64::from_le_bytes(b.get(0..8).unwrap_or(&[0; 8]).try_into().unwrap());
        let line = format!("{} {}\n", format_time(now_s()), command_line);
        self.mos.write(&tx, obj, len, line.as_bytes()).map_err(dmu_err)?;
        self.mos.set_bonus(&tx, obj, &(len + line.len() as u64).to_le_bytes()).map_err(dmu_err)?;
        Ok(())
    }

    /// `zpool history` lines: "YYYY-MM-DD.HH:MM:SS command".
    pub fn history(&self) -> Result<Vec<String>> {
        let obj = self.dir.lock().history_obj;
        let b = self.mos.bonus(obj).map_err(dmu_err)?;
        let len = u64::from_le_bytes(b.get(0..8).unwrap_or(&[0; 8]).try_into().unwrap());
        let mut buf = vec![0u8; len as usize];
        self.mos.read(obj, 0, &mut buf).map_err(dmu_err)?;
        Ok(String::from_utf8_lossy(&buf).lines().map(|s| s.to_string()).collect())
    }
}

/// Format seconds since the epoch as `YYYY-MM-DD.HH:MM:SS` (UTC), as `zpool history`.
pub fn format_time(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil-from-days (proleptic Gregorian), Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!("{y:04}-{m:02}-{d:02}.{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        unregister_name(&self.name);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_format() {
        assert_eq!(super::format_time(0), "1970-01-01.00:00:00");
        assert_eq!(super::format_time(1_700_000_000), "2023-11-14.22:13:20");
    }
}
