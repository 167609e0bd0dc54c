//! Device repair: `zpool offline/online/clear`, `attach/detach/replace`, hot spares, the
//! dirty time logs (DTLs) of leaves that miss txgs, faulting leaves with too many I/O
//! errors, and what a finished resilver changes in the vdev tree (OpenZFS
//! `vdev_offline`/`vdev_online`/`vdev_clear`, `spa_vdev_attach`/`spa_vdev_detach`,
//! `spa_vdev_resilver_done`, and zed's fault rule).
//!
//! Theory. **DTLs.** A leaf that cannot take a txg's writes records the txg in its DTL
//! (`tarn_vdev::Dtl`): reads skip it for blocks born then, and a resilver copies exactly
//! those blocks back. The scheme is coarse and cheap:
//! - a leaf that becomes unusable (offline, faulted) gets an *open* range
//!   `[first missed txg, u64::MAX]`, where the first missed txg is the one after the
//!   last synced txg (taken under `sync_lock`, so no sync is half way);
//! - a leaf missing at import gets `[import's first txg, MAX]` unless it already has an
//!   open range; a leaf found at import whose newest uberblock is older than the txg
//!   imported missed the txgs in between, which are added (this also covers a crash
//!   between the uberblock of an offline and the label rewrite that records its DTL);
//! - a leaf whose `stats.write_errors` grew while a txg synced gets that txg added
//!   (the mirror or raidz write still succeeded through the other children);
//! - when the leaf comes back (`zpool online`, `zpool clear` of a faulted leaf, found
//!   again at import) the open range is closed at the last synced txg and a resilver is
//!   requested; a newly attached or replacing leaf gets `[1, last synced txg]`.
//!
//! DTLs, the persistent offline flag and the faulted flag live in the label config
//! (`VdevConfig::dtl/offline/faulted`): every label write first copies them from the
//! runtime leaves (`Pool::refresh_leaf_config`). `zpool offline -t` is not persisted
//! (the leaf is online again after import), its DTL is.
//!
//! **Faults.** At the start of each txg sync a usable leaf with at least
//! [`FAULT_IO_ERRORS`] read + write errors since the last `zpool clear` is faulted,
//! unless the top-level vdev would then lose data (OpenZFS degrades instead of
//! faulting the last replica). zed's rule is 10 I/O errors within 10 minutes; Tarn
//! counts since the last clear, which is simpler and errs towards faulting.
//!
//! **Tree surgery.** Vdev nodes are immutable apart from atomics, so a change below a
//! top-level vdev edits the config tree (plain data), rebuilds the top-level node from
//! it reusing every existing node `Arc` by GUID (`rebuild_top`), and swaps it in with
//! `Zio::replace_top` — all under `sync_lock`, so no txg sync sees one without the
//! other. The top-level id, its `asize_bytes` and so every DVA stay the same. A mirror,
//! replacing or spare node left with one child collapses into that child. Ids of
//! children are their index; a reused leaf node keeps the id it was built with (only
//! error messages show it) until the next import.
//!
//! **Crash safety** follows `zpool add` (crate theory): a change that adds a leaf
//! (attach, replace, a spare going into use) writes the new config to the new leaf only,
//! before the uberblock that commits it; import picks the newest config whose GUID sum
//! some uberblock carries, so a crash leaves the old tree or the new one. A change that
//! removes a leaf (detach, a finished replace) keeps the removed leaf's labels until
//! the new config is in every label; a crash before that imports the old config at the
//! previous txg. Flag and DTL changes do not change the GUID sum.
//!
//! **Spares.** Listed in the root config (`VdevConfig::spares`) and in `RepairState`;
//! each carries a label naming the pool (`top_guid` 0). A spare in use is also a leaf of
//! a `spare-N` node (same `Arc`); it is INUSE until the original or the spare is
//! detached (the spare then becomes a permanent member, or returns to AVAIL).
//!
//! Locks: `sync_lock` → `config` → `RepairState` mutexes. Operations that need a txg
//! drop `sync_lock` before `Pool::sync`. `resilver_done` never blocks: its tree changes
//! run at the start of the next txg sync (it may be called from syncing context).
//!
//! Called by: cli (daemon), scan (`resilver_done`), `sync.rs` (hooks), `pool.rs`
//! (import, labels, status). Calls: vdev, zio.

use crate::config::*;
use crate::pool::{kind_of_leaf, new_guid, Pool};
use crate::vdevs::same_device;
use crate::{Result, SpaError, TopSpec};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tarn_phys::label::{LabelConfig, PoolState, VdevConfig};
use tarn_vdev::{label, Leaf, Vdev, VdevState};

/// Read + write errors since the last `zpool clear` at which a leaf is faulted.
pub const FAULT_IO_ERRORS: u64 = 10;

/// Repair state of a pool that is not part of the vdev tree.
#[derive(Default)]
pub(crate) struct RepairState {
    /// Hot spares in `config.spares` order; a spare in use is the same `Arc` as its
    /// leaf in the tree.
    pub(crate) spares: Mutex<Vec<Arc<Vdev>>>,
    /// GUIDs of leaves taken offline with `-t` (their offline flag is not persisted).
    pub(crate) temp_offline: Mutex<HashSet<u64>>,
    /// A resilver finished: collapse completed replacing vdevs at the next txg sync.
    pub(crate) finish_replacing: AtomicBool,
    /// Leaves removed from the tree; released (labels cleared, lock dropped) once a
    /// txg sync has written the config without them.
    pub(crate) released: Mutex<Vec<Arc<Vdev>>>,
}

/// Whether top-level vdev `top` would lose some block without leaf `guid` (OpenZFS
/// `vdev_dtl_required`): it is unusable without it, or some txg in another leaf's DTL
/// would have no copy left. Every leaf's "missing" is constant between the starts and
/// ends of the DTL ranges, so those txgs (and 0, "usable at all") are the ones checked.
fn required(top: &Vdev, guid: u64) -> bool {
    let mut txgs = vec![0u64];
    for l in top.leaves() {
        for (a, b) in l.dtl().ranges() {
            txgs.push(a);
            if b != u64::MAX {
                txgs.push(b + 1);
            }
        }
    }
    txgs.iter().any(|&t| top.missing_without(guid, t))
}

impl Pool {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(SpaError::NotFound(format!("cannot open '{}': no such pool", self.name)));
        }
        Ok(())
    }

    /// The runtime node of every node of top-level vdev `id`, by GUID.
    fn top_nodes(&self, id: usize) -> HashMap<u64, Arc<Vdev>> {
        let mut m = HashMap::new();
        collect_nodes(&self.zio.vdevs()[id], &mut m);
        m
    }

    /// The runtime leaf with `guid`, in the tree or among the spares.
    fn leaf_by_guid(&self, guid: u64) -> Option<Arc<Vdev>> {
        for t in self.zio.vdevs() {
            let mut m = HashMap::new();
            collect_nodes(&t, &mut m);
            if let Some(v) = m.remove(&guid) {
                return Some(v);
            }
        }
        self.repair.spares.lock().iter().find(|s| s.guid() == guid).cloned()
    }

    /// Rebuild top-level vdev `id` from `cfg.children[id]`, reusing the current nodes and
    /// the `new_leaves`, and swap it in. Caller holds `sync_lock` and the config lock.
    fn rebuild_top(&self, cfg: &VdevConfig, id: usize, new_leaves: &[Arc<Vdev>]) {
        let mut nodes = self.top_nodes(id);
        for l in new_leaves {
            nodes.insert(l.guid(), l.clone());
        }
        let t = &cfg.children[id];
        let top = build_vdev(t, id as u32, t.ashift, &mut |c, _, _| nodes.get(&c.guid).cloned().expect("rebuilt leaf exists"));
        copy_counters(&top, &nodes);
        self.zio.replace_top(id as u32, top);
    }

    /// Copy each leaf's DTL, persistent offline flag and faulted flag into the config
    /// (before the config is written to labels).
    pub(crate) fn refresh_leaf_config(&self) {
        let mut nodes = HashMap::new();
        for t in self.zio.vdevs() {
            collect_nodes(&t, &mut nodes);
        }
        let temp = self.repair.temp_offline.lock().clone();
        let mut cfg = self.config.lock();
        for t in cfg.children.iter_mut() {
            for_leaves_mut(t, &mut |l| {
                if let Some(v) = nodes.get(&l.guid) {
                    l.dtl = v.dtl().ranges();
                    l.offline = v.is_offline() && !temp.contains(&l.guid);
                    l.faulted = v.state() == VdevState::Faulted;
                }
            });
        }
    }

    /// Write the label config of `cfg` (the pool's tree) to one leaf, not yet in every
    /// label: the new leaf of an attach or replace, before the uberblock that commits it.
    fn write_label_on(&self, leaf: &Vdev, cfg: &VdevConfig, top_guid: u64, txg: u64) {
        let lc = LabelConfig {
            version: tarn_phys::TARN_FORMAT_VERSION,
            name: self.name.clone(),
            pool_guid: self.guid,
            guid: leaf.guid(),
            top_guid,
            txg,
            state: PoolState::Active,
            hostname: crate::pool::hostname(),
            features_for_read: vec![],
            vdev_tree: cfg.clone(),
        };
        label::sync_configs(&[(leaf, lc)]);
    }

    /// Open a device that is to join the tree (attach, replace), with the checks of
    /// `zpool add`; `what` prefixes size errors ("cannot attach X to Y").
    fn open_joining(&self, device: &Path, force: bool, what: &str, needed_bytes: u64, ashift: u8, in_place: bool) -> Result<(String, Leaf)> {
        let cfg = self.config.lock().clone();
        let spec = TopSpec::Leaf(device.to_path_buf());
        // Replacing a device by itself (a new disk at the same path) may not look at the
        // tree, which still names that path.
        let pool = if in_place { None } else { Some((self.name.as_str(), self.guid, &cfg)) };
        let mut opened = Self::open_new_tops(&[(&spec, false)], force, pool).map_err(|e| match e {
            SpaError::TooSmall(_) => SpaError::Invalid(format!("{what}: device is too small")),
            SpaError::InUse { path, state, .. } if in_place && state == "active" => SpaError::InUse {
                path,
                pool: self.name.clone(),
                state,
            },
            other => other,
        })?;
        let (p, leaf) = opened.pop().and_then(|mut g| g.pop()).expect("one leaf opened");
        if leaf_asize(leaf.size_bytes, ashift) < needed_bytes {
            return Err(SpaError::Invalid(format!("{what}: device is too small")));
        }
        let path = std::fs::canonicalize(&p).unwrap_or(p).display().to_string();
        Ok((path, leaf))
    }

    /// `zpool offline [-t] POOL DEVICE`: stop using a leaf. Refused when the top-level
    /// vdev would lose data without it ("no valid replicas"). The leaf's DTL is opened
    /// at the next txg; `temporary` (`-t`) leaves the offline flag out of the labels,
    /// so the leaf is online again after import. Offlining an offline leaf succeeds
    /// (and makes a temporary offline persistent when `temporary` is false).
    pub fn offline(&self, device: &str, temporary: bool) -> Result<()> {
        self.check_open()?;
        let what = format!("cannot offline {device}");
        {
            let _s = self.sync_lock.lock();
            let cfg = self.config.lock().clone();
            let Some(at) = find_leaf_path(&cfg, device) else {
                return Err(self.not_in_tree(&what, device));
            };
            let guid = node(&cfg, &at).guid;
            let top = self.zio.vdevs()[at[0]].clone();
            let leaf = self.top_nodes(at[0]).remove(&guid).expect("leaf of the tree");
            if !leaf.is_offline() {
                if leaf.state().is_usable() && required(&top, guid) {
                    return Err(SpaError::Busy(format!("{what}: no valid replicas")));
                }
                leaf.set_offline(true);
                if !leaf.dtl().is_open() {
                    leaf.dtl().add(self.gate.synced_txg() + 1, u64::MAX);
                }
            }
            let mut temp = self.repair.temp_offline.lock();
            if temporary {
                temp.insert(guid);
            } else {
                temp.remove(&guid);
            }
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.sync()
    }

    /// The error for a device that is not a leaf of the tree: a hot spare cannot be
    /// used this way, anything else is not in the pool.
    fn not_in_tree(&self, what: &str, device: &str) -> SpaError {
        let cfg = self.config.lock();
        if cfg
            .spares
            .iter()
            .any(|s| s.path.as_deref().is_some_and(|p| same_device(p, device)) || s.guid.to_string() == device)
        {
            SpaError::Invalid(format!("{what}: device is reserved as a hot spare"))
        } else {
            SpaError::NotFound(format!("{what}: no such device in pool"))
        }
    }

    /// `zpool online POOL DEVICE`: bring an offline or faulted leaf back (a leaf whose
    /// device was missing is reopened at its path). Its DTL is closed at the last
    /// synced txg and a resilver requested. Returns the leaf's state afterwards: not
    /// ONLINE when its device still cannot be opened (OpenZFS then warns "onlined, but
    /// remains in faulted state").
    pub fn online(&self, device: &str) -> Result<VdevState> {
        self.check_open()?;
        let what = format!("cannot online {device}");
        let state = {
            let _s = self.sync_lock.lock();
            let cfg = self.config.lock();
            let Some(at) = find_leaf_path(&cfg, device) else {
                drop(cfg);
                return Err(self.not_in_tree(&what, device));
            };
            let lcfg = node(&cfg, &at).clone();
            let mut leaf = self.top_nodes(at[0]).remove(&lcfg.guid).expect("leaf of the tree");
            if leaf.is_missing_device() {
                // Reopen the device; it must carry this leaf's label.
                let path = lcfg.path.clone().unwrap_or_default();
                let reopened = Leaf::open(Path::new(&path)).ok().filter(|l| {
                    label::read_configs(l)
                        .into_iter()
                        .flatten()
                        .any(|c| c.pool_guid == self.guid && c.guid == lcfg.guid)
                });
                if let Some(l) = reopened {
                    let v = Arc::new(Vdev::new_leaf(leaf.id(), leaf.guid(), leaf.ashift(), path, Some(l)));
                    v.dtl().set(&leaf.dtl().ranges());
                    if !v.dtl().is_open() {
                        v.dtl().add(1, u64::MAX);
                    }
                    self.rebuild_top(&cfg, at[0], std::slice::from_ref(&v));
                    leaf = v;
                }
            }
            leaf.set_offline(false);
            leaf.set_faulted(false);
            self.repair.temp_offline.lock().remove(&lcfg.guid);
            let state = leaf.state();
            if state.is_usable() {
                leaf.dtl().close(self.gate.synced_txg());
            }
            self.config_dirty.store(true, Ordering::SeqCst);
            state
        };
        self.sync()?;
        if state.is_usable() {
            self.request_resilver_if_needed();
        }
        Ok(state)
    }

    /// `zpool clear POOL [DEVICE]`: zero the READ/WRITE/CKSUM counters of the device
    /// and everything below it (every vdev and the pool's data error count without a
    /// device), and return faulted leaves among them to service (DTL closed, resilver
    /// requested).
    pub fn clear(&self, device: Option<&str>) -> Result<()> {
        self.check_open()?;
        let mut changed = false;
        {
            let _s = self.sync_lock.lock();
            let cfg = self.config.lock().clone();
            let scope: Vec<Arc<Vdev>> = match device {
                None => {
                    self.zio.data_errors.store(0, Ordering::Relaxed);
                    self.zio.vdevs().into_iter().filter(|t| !t.is_hole()).collect()
                }
                Some(d) => match find_node_path(&cfg, d) {
                    Some(at) => {
                        let guid = node(&cfg, &at).guid;
                        vec![self.top_nodes(at[0]).remove(&guid).expect("node of the tree")]
                    }
                    None => match self
                        .repair
                        .spares
                        .lock()
                        .iter()
                        .find(|s| s.path().as_deref().is_some_and(|p| same_device(p, d)))
                    {
                        Some(s) => vec![s.clone()],
                        None => return Err(SpaError::NotFound(format!("cannot clear errors for {d}: no such device in pool"))),
                    },
                },
            };
            fn walk(v: &Vdev, synced: u64, changed: &mut bool) {
                for c in [&v.stats().read_errors, &v.stats().write_errors, &v.stats().checksum_errors] {
                    c.store(0, Ordering::Relaxed);
                }
                if v.state() == VdevState::Faulted {
                    v.set_faulted(false);
                    if v.state().is_usable() {
                        v.dtl().close(synced);
                    }
                    *changed = true;
                }
                for c in v.children() {
                    walk(c, synced, changed);
                }
            }
            for v in &scope {
                walk(v, self.gate.synced_txg(), &mut changed);
            }
            if changed {
                self.config_dirty.store(true, Ordering::SeqCst);
            }
        }
        if changed {
            self.sync()?;
            self.request_resilver_if_needed();
        }
        Ok(())
    }

    /// `zpool attach [-f] POOL DEVICE NEW_DEVICE`: mirror `existing` (a top-level leaf,
    /// which becomes `mirror-N`, or a side of a mirror) onto `new_device`. The new
    /// device is checked as `zpool add` checks devices, must be at least as large as
    /// the vdev needs, gets DTL `[1, last synced txg]`, and a resilver is requested.
    /// Returns once a txg has committed the new tree.
    pub fn attach(&self, existing: &str, new_device: &Path, force: bool) -> Result<()> {
        self.check_open()?;
        let what = format!("cannot attach {} to {existing}", new_device.display());
        let cfg = self.config.lock().clone();
        let Some(at) = find_leaf_path(&cfg, existing) else {
            return Err(match self.not_in_tree(&what, existing) {
                SpaError::Invalid(_) => SpaError::Invalid(format!("{what}: can only attach to mirrors and top-level disks")),
                e => e,
            });
        };
        if at.len() > 1 && node(&cfg, &at[..at.len() - 1]).kind != "mirror" {
            return Err(SpaError::Invalid(format!("{what}: can only attach to mirrors and top-level disks")));
        }
        let ashift = cfg.children[at[0]].ashift;
        let (path, leaf) = self.open_joining(new_device, force, &what, needed_asize(&cfg, &at), ashift, false)?;
        self.join_leaf(&at, path, leaf, None)?;
        self.sync()?;
        self.request_resilver_if_needed();
        Ok(())
    }

    /// Put a new leaf into the tree beside the leaf at `at`: as another mirror side
    /// (`role` None: attach; a top-level leaf becomes a mirror), or in a new
    /// replacing/spare node `[old, new]` in the old leaf's place. `leaf` is an opened
    /// device (new leaf node made here) or, for a spare, its existing node.
    fn join_leaf(&self, at: &[usize], path: String, leaf: Leaf, role: Option<&str>) -> Result<()> {
        let g = new_guid();
        let vdev_for = |id: u32, ashift: u8| Arc::new(Vdev::new_leaf(id, g, ashift, path.clone(), Some(leaf)));
        self.join_node(at, role, |id, ashift| {
            let v = vdev_for(id, ashift);
            let c = VdevConfig {
                kind: kind_of_leaf(Path::new(&path)).into(),
                id: id as u64,
                guid: g,
                path: Some(path.clone()),
                ashift,
                ..VdevConfig::default()
            };
            (v, c)
        })
    }

    /// The tree half of [`Pool::join_leaf`]: `make(id, ashift)` gives the joining leaf
    /// node and its config.
    fn join_node(&self, at: &[usize], role: Option<&str>, make: impl FnOnce(u32, u8) -> (Arc<Vdev>, VdevConfig)) -> Result<()> {
        let _s = self.sync_lock.lock();
        let mut cfg = self.config.lock();
        let top_id = at[0];
        let ashift = cfg.children[top_id].ashift;
        let synced = self.gate.synced_txg();
        let full_dtl: Vec<(u64, u64)> = if synced >= 1 { vec![(1, synced)] } else { Vec::new() };
        let old = node(&cfg, at).clone();
        let top_level = at.len() == 1;
        let (new_id, parent_role) = match role {
            None if !top_level => (node(&cfg, &at[..at.len() - 1]).children.len() as u32, "mirror"),
            None => (1, "mirror"),
            Some(r) => (1, r),
        };
        let (vdev, mut ncfg) = make(new_id, ashift);
        vdev.dtl().set(&full_dtl);
        ncfg.dtl = full_dtl;
        ncfg.id = new_id as u64;
        if role.is_none() && !top_level {
            let parent = node_mut(&mut cfg, &at[..at.len() - 1]);
            parent.children.push(ncfg);
        } else {
            let mut first = old.clone();
            first.id = 0;
            if top_level {
                first.asize_bytes = 0;
                first.is_log = false;
            }
            let interior = VdevConfig {
                kind: parent_role.into(),
                id: old.id,
                guid: new_guid(),
                ashift,
                asize_bytes: if top_level { old.asize_bytes } else { 0 },
                is_log: top_level && old.is_log,
                children: vec![first, ncfg],
                ..VdevConfig::default()
            };
            *node_mut(&mut cfg, at) = interior;
        }
        self.rebuild_top(&cfg, top_id, std::slice::from_ref(&vdev));
        // The new leaf learns the new tree before the uberblock that commits it (see the
        // crash-safety paragraph of the theory statement).
        let top_guid = cfg.children[top_id].guid;
        self.write_label_on(&vdev, &cfg, top_guid, synced + 1);
        self.config_dirty.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// `zpool detach POOL DEVICE`: take a leaf out of a mirror, replacing or spare
    /// vdev. Refused for other leaves ("only applicable to mirror and replacing vdevs")
    /// and when the vdev would lose data ("no valid replicas"). A node left with one
    /// child collapses into it. Detaching a spare returns it to the spares; detaching
    /// the original beside a spare makes the spare a permanent member. The detached
    /// leaf's labels are cleared and its lock released once a txg has committed the
    /// new tree.
    pub fn detach(&self, device: &str) -> Result<()> {
        self.check_open()?;
        let what = format!("cannot detach {device}");
        {
            let _s = self.sync_lock.lock();
            let mut cfg = self.config.lock();
            let Some(at) = find_leaf_path(&cfg, device) else {
                drop(cfg);
                return Err(self.not_in_tree(&what, device));
            };
            if at.len() == 1 || role_of(&node(&cfg, &at[..at.len() - 1]).kind).is_none() {
                return Err(SpaError::Invalid(format!("{what}: only applicable to mirror and replacing vdevs")));
            }
            let guid = node(&cfg, &at).guid;
            let top = self.zio.vdevs()[at[0]].clone();
            if required(&top, guid) {
                return Err(SpaError::Busy(format!("{what}: no valid replicas")));
            }
            let leaf = self.top_nodes(at[0]).remove(&guid).expect("leaf of the tree");
            self.remove_leaf(&mut cfg, &at);
            self.rebuild_top(&cfg, at[0], &[]);
            self.repair.temp_offline.lock().remove(&guid);
            let is_spare = cfg.spares.iter().any(|s| s.guid == guid);
            if !is_spare {
                self.repair.released.lock().push(leaf);
            } else {
                // Back in the spares list, usable again.
                leaf.set_offline(false);
                leaf.set_faulted(false);
                leaf.dtl().set(&[]);
            }
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.sync()
    }

    /// Remove the leaf at `at` from its mirror-shaped parent in `cfg`, collapsing a
    /// parent left with one child; a spare that stays behind after its original was
    /// removed becomes a permanent member (leaves the spares list).
    fn remove_leaf(&self, cfg: &mut VdevConfig, at: &[usize]) {
        let parent_at = &at[..at.len() - 1];
        let parent = node_mut(cfg, parent_at);
        let removed = parent.children.remove(at[at.len() - 1]);
        renumber(parent);
        let spare_parent = parent.kind == "spare";
        let remaining: Vec<u64> = parent.children.iter().flat_map(|c| c.leaves()).map(|l| l.guid).collect();
        if parent.children.len() == 1 {
            collapse_into(parent, parent_at.len() == 1);
        }
        let was_spare = cfg.spares.iter().any(|s| s.guid == removed.guid);
        if spare_parent && !was_spare {
            cfg.spares.retain(|s| !remaining.contains(&s.guid));
            renumber_spares(cfg);
            self.repair.spares.lock().retain(|s| !remaining.contains(&s.guid()));
        }
    }

    /// `zpool replace [-f] POOL DEVICE [NEW_DEVICE]`: build `replacing-N` (or, when
    /// `new_device` is one of the pool's available spares, `spare-N`) of
    /// `[old, new]` in the old leaf's place — top-level, mirror side or raidz column —
    /// with the new leaf's DTL `[1, last synced txg]`, and request a resilver. Without
    /// `new_device` the device at the old leaf's path is used (a new disk in the same
    /// place); the old leaf must then be missing. When the resilver finishes,
    /// [`Pool::resilver_done`] detaches the old leaf of a replacing vdev.
    pub fn replace(&self, old: &str, new_device: Option<&Path>, force: bool) -> Result<()> {
        self.check_open()?;
        let cfg = self.config.lock().clone();
        let new_word = new_device.map(|p| p.display().to_string()).unwrap_or_else(|| old.to_string());
        let what = format!("cannot replace {old} with {new_word}");
        let Some(at) = find_leaf_path(&cfg, old) else {
            return Err(self.not_in_tree(&what, old));
        };
        let ocfg = node(&cfg, &at).clone();
        if at.len() > 1 {
            let pk = &node(&cfg, &at[..at.len() - 1]).kind;
            if pk == "replacing" || pk == "spare" {
                return Err(SpaError::Invalid(format!(
                    "{what}: already in replacing/spare config; wait for completion or use 'zpool detach'"
                )));
            }
        }
        let ashift = cfg.children[at[0]].ashift;
        let needed = needed_asize(&cfg, &at);
        // A hot spare of this pool?
        let spare = new_device.and_then(|p| {
            let p = p.display().to_string();
            cfg.spares.iter().find(|s| s.path.as_deref().is_some_and(|sp| same_device(sp, &p))).cloned()
        });
        if let Some(scfg) = spare {
            if cfg.children.iter().flat_map(|t| t.leaves()).any(|l| l.guid == scfg.guid) {
                return Err(SpaError::Busy(format!("{what}: {new_word} is busy")));
            }
            let sv = self.repair.spares.lock().iter().find(|s| s.guid() == scfg.guid).cloned().expect("spare node");
            if !sv.state().is_usable() {
                return Err(SpaError::Invalid(format!("{what}: {new_word} is not available")));
            }
            if sv.asize_bytes() < needed {
                return Err(SpaError::Invalid(format!("{what}: device is too small")));
            }
            self.join_node(&at, Some("spare"), |id, a| {
                let mut c = scfg.clone();
                c.id = id as u64;
                c.ashift = a;
                (sv.clone(), c)
            })?;
        } else {
            let in_place = new_device.is_none();
            if in_place {
                let leaf = self.top_nodes(at[0]).remove(&ocfg.guid).expect("leaf of the tree");
                if !leaf.is_missing_device() {
                    return Err(SpaError::InUse {
                        path: old.to_string(),
                        pool: self.name.clone(),
                        state: "active".into(),
                    });
                }
            }
            let target = new_device
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(ocfg.path.clone().unwrap_or_default()));
            let (path, leaf) = self.open_joining(&target, force, &what, needed, ashift, in_place)?;
            self.join_leaf(&at, path, leaf, Some("replacing"))?;
        }
        self.sync()?;
        self.request_resilver_if_needed();
        Ok(())
    }

    /// Add hot spares (from `zpool create` or `zpool add`): `opened` are the checked,
    /// opened devices. The caller holds `sync_lock` or owns the pool alone.
    pub(crate) fn add_spares(&self, opened: Vec<(PathBuf, Leaf)>, ashift: u8) {
        let mut cfg = self.config.lock();
        let mut spares = self.repair.spares.lock();
        for (p, leaf) in opened {
            let (c, v) = crate::config::new_single_leaf(&p, leaf, cfg.spares.len() as u32, ashift);
            cfg.spares.push(c);
            spares.push(v);
        }
    }

    /// `zpool remove POOL SPARE`: forget an available hot spare; its labels are
    /// cleared once the labels of the pool no longer list it. `Ok(false)` when `device`
    /// is not a spare of this pool.
    pub(crate) fn remove_spare(&self, device: &str) -> Result<bool> {
        {
            let _s = self.sync_lock.lock();
            let mut cfg = self.config.lock();
            let Some(i) = cfg
                .spares
                .iter()
                .position(|s| s.path.as_deref().is_some_and(|p| same_device(p, device)) || s.guid.to_string() == device)
            else {
                return Ok(false);
            };
            let guid = cfg.spares[i].guid;
            if cfg.children.iter().flat_map(|t| t.leaves()).any(|l| l.guid == guid) {
                return Err(SpaError::Busy(format!("cannot remove {device}: Pool busy; removal may already be in progress")));
            }
            cfg.spares.remove(i);
            renumber_spares(&mut cfg);
            let mut spares = self.repair.spares.lock();
            if let Some(j) = spares.iter().position(|s| s.guid() == guid) {
                self.repair.released.lock().push(spares.remove(j));
            }
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.sync()?;
        Ok(true)
    }

    /// The spares not in use in the tree (their labels are written beside the tree's).
    pub(crate) fn idle_spares(&self) -> Vec<Arc<Vdev>> {
        let cfg = self.config.lock();
        let used: HashSet<u64> = cfg.children.iter().flat_map(|t| t.leaves()).map(|l| l.guid).collect();
        self.repair.spares.lock().iter().filter(|s| !used.contains(&s.guid())).cloned().collect()
    }

    /// Rows of the `spares` section of `zpool status`.
    pub(crate) fn spare_status(&self) -> Vec<crate::VdevStatus> {
        let cfg = self.config.lock();
        let used: HashSet<u64> = cfg.children.iter().flat_map(|t| t.leaves()).map(|l| l.guid).collect();
        self.repair
            .spares
            .lock()
            .iter()
            .map(|s| {
                let state = if used.contains(&s.guid()) {
                    "INUSE"
                } else if s.state().is_usable() {
                    "AVAIL"
                } else {
                    "UNAVAIL"
                };
                crate::VdevStatus {
                    size_bytes: s.asize_bytes(),
                    ..crate::VdevStatus::new(&s.display_name(), state, vec![])
                }
            })
            .collect()
    }

    /// The DTL of the leaf named `device` (path or GUID), in the tree or a spare:
    /// inclusive txg ranges, `u64::MAX` ending an open one. None if there is no such leaf.
    pub fn dtl_of(&self, device: &str) -> Option<Vec<(u64, u64)>> {
        let cfg = self.config.lock().clone();
        let guid = match find_leaf_path(&cfg, device) {
            Some(at) => node(&cfg, &at).guid,
            None => cfg.spares.iter().find(|s| s.path.as_deref().is_some_and(|p| same_device(p, device)))?.guid,
        };
        self.leaf_by_guid(guid).map(|v| v.dtl().ranges())
    }

    /// Whether some usable leaf's DTL is not empty (there is something to resilver).
    fn needs_resilver(&self) -> bool {
        self.zio
            .vdevs()
            .iter()
            .flat_map(|t| t.leaves().into_iter().map(|l| l.state().is_usable() && !l.dtl().is_empty()).collect::<Vec<_>>())
            .any(|x| x)
    }

    /// Request a resilver when some usable leaf misses txgs.
    pub(crate) fn request_resilver_if_needed(&self) {
        if self.needs_resilver() {
            self.request_resilver();
        }
    }

    /// Called by the scan when a resilver that copied every block born up to
    /// `scanned_through_txg` has finished: clear those txgs from the DTL of every
    /// usable leaf; at the start of the next txg sync (requested here; this never
    /// blocks, so it may be called from syncing context) the old leaf of each replacing
    /// vdev whose new leaf has an empty DTL is detached, and the new DTLs are written
    /// to the labels. Tests call it to simulate a finished resilver.
    pub fn resilver_done(&self, scanned_through_txg: u64) {
        for top in self.zio.vdevs() {
            for leaf in top.leaves() {
                if leaf.state().is_usable() {
                    leaf.dtl().clear_through(scanned_through_txg);
                }
            }
        }
        self.repair.finish_replacing.store(true, Ordering::SeqCst);
        self.config_dirty.store(true, Ordering::SeqCst);
        self.gate.request_sync(self.gate.open_txg());
    }

    /// Collapse every replacing vdev whose last (new) child is usable with an empty
    /// DTL: its other children are detached. Runs in syncing context (`sync_lock` held).
    fn finish_replacing(&self) -> bool {
        let mut cfg = self.config.lock();
        let mut any = false;
        for id in 0..cfg.children.len() {
            if cfg.children[id].is_hole() {
                continue;
            }
            let nodes = self.top_nodes(id);
            let mut changed = false;
            // Repeat until no replacing node in this top-level vdev is complete.
            while let Some(at) = find_complete_replacing(&cfg, id, &nodes) {
                let rep = node(&cfg, &at).clone();
                let keep = rep.children.last().expect("children").guid;
                for c in &rep.children {
                    for l in c.leaves() {
                        if l.guid != keep {
                            if let Some(v) = nodes.get(&l.guid) {
                                self.repair.released.lock().push(v.clone());
                            }
                        }
                    }
                }
                let n = node_mut(&mut cfg, &at);
                n.children.retain(|c| c.guid == keep);
                collapse_into(n, at.len() == 1);
                changed = true;
            }
            if changed {
                self.rebuild_top(&cfg, id, &[]);
                any = true;
            }
        }
        any
    }

    /// Syncing-context work at the start of txg `txg` (`sync_lock` held): fault leaves
    /// with too many I/O errors, finish completed replaces. Returns every leaf's WRITE
    /// count, for [`Pool::repair_sync_writes_done`].
    pub(crate) fn repair_sync_start(&self, txg: u64) -> HashMap<u64, u64> {
        let mut changed = false;
        for top in self.zio.vdevs() {
            for leaf in top.leaves() {
                let errors = leaf.stats().read_errors.load(Ordering::Relaxed) + leaf.stats().write_errors.load(Ordering::Relaxed);
                if leaf.state().is_usable() && errors >= FAULT_IO_ERRORS && !required(&top, leaf.guid()) {
                    tracing::warn!("pool {}: faulting {:?} after {errors} I/O errors", self.name, leaf.path());
                    leaf.set_faulted(true);
                    if !leaf.dtl().is_open() {
                        leaf.dtl().add(txg, u64::MAX);
                    }
                    changed = true;
                }
            }
        }
        if self.repair.finish_replacing.swap(false, Ordering::SeqCst) && self.finish_replacing() {
            changed = true;
        }
        if changed {
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.leaf_write_errors()
    }

    fn leaf_write_errors(&self) -> HashMap<u64, u64> {
        let mut m = HashMap::new();
        for top in self.zio.vdevs() {
            for leaf in top.leaves() {
                m.insert(leaf.guid(), leaf.stats().write_errors.load(Ordering::Relaxed));
            }
        }
        m
    }

    /// After txg `txg`'s blocks were written (before its uberblock): a leaf whose WRITE
    /// count grew since `before` missed some of them; add the txg to its DTL. Returns
    /// whether a DTL changed (the labels must then be rewritten).
    pub(crate) fn repair_sync_writes_done(&self, txg: u64, before: &HashMap<u64, u64>) -> bool {
        let mut changed = false;
        for top in self.zio.vdevs() {
            for leaf in top.leaves() {
                let now = leaf.stats().write_errors.load(Ordering::Relaxed);
                if now > before.get(&leaf.guid()).copied().unwrap_or(now) && !leaf.dtl().contains(txg) {
                    leaf.dtl().add(txg, txg);
                    changed = true;
                }
            }
        }
        changed
    }

    /// After a txg whose labels recorded a new tree: clear the labels of leaves that
    /// left it and release their devices.
    pub(crate) fn repair_sync_done(&self) {
        let released: Vec<Arc<Vdev>> = std::mem::take(&mut *self.repair.released.lock());
        label::clear_and_release(&released.iter().map(|l| l.as_ref()).collect::<Vec<_>>());
    }

    /// At import, before the pool opens: give every leaf of `cfg` (runtime nodes in
    /// `top`) its DTL and flags from the config; `txg` is the txg being imported and
    /// `leaf_ub_txg` the newest uberblock txg found on each present leaf. A missing
    /// leaf gets an open DTL from `txg + 1`; a present one that missed txgs gets them,
    /// and an open range is closed at `txg`.
    pub(crate) fn restore_leaf_state(cfg: &VdevConfig, top: &[Arc<Vdev>], txg: u64, leaf_ub_txg: &HashMap<u64, u64>) {
        let mut nodes = HashMap::new();
        for t in top {
            collect_nodes(t, &mut nodes);
        }
        for lc in cfg.children.iter().flat_map(|t| t.leaves()) {
            let Some(v) = nodes.get(&lc.guid) else { continue };
            v.dtl().set(&lc.dtl);
            if v.is_missing_device() {
                if !v.dtl().is_open() {
                    v.dtl().add(txg + 1, u64::MAX);
                }
                continue;
            }
            let newest = leaf_ub_txg.get(&lc.guid).copied().unwrap_or(0);
            if newest < txg {
                v.dtl().add(newest + 1, txg);
            }
            if lc.offline || lc.faulted {
                v.set_offline(lc.offline);
                v.set_faulted(lc.faulted);
                if !v.dtl().is_open() {
                    v.dtl().add(txg + 1, u64::MAX);
                }
            } else {
                v.dtl().close(txg);
            }
        }
    }
}
