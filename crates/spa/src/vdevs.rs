//! Changing the vdev tree of a live pool: `zpool add` (OpenZFS `spa_vdev_add`) and
//! `zpool remove` of a separate log vdev (`spa_vdev_remove_log`).
//!
//! Both follow one pattern (crate theory statement, "Top-level vdevs and classes"):
//! validate everything, then under `sync_lock` change the config and the pipeline's
//! vdev vector together (so no txg sync sees one without the other), mark the config
//! dirty, and sync a txg: its uberblock carries the new GUID sum, after which every
//! label is rewritten with the new tree. Ids never move: a removed vdev leaves a hole,
//! and an added vdev takes the first hole or the next id.
//!
//! The replication check of `zpool add` is OpenZFS's `check_replication`
//! (`cmd/zpool/zpool_vdev.c`): the new normal vdevs must agree among themselves and
//! with the pool (same type, parity and width; raidz and mirror agree when they
//! survive as many failures), unless the pool is already mixed or `-f` is given.
//! Log vdevs are left out of it, as in OpenZFS.

use crate::pool::{class_of, config_display_name, kind_of_leaf, vdev_error, LogEvacuateHook, Pool};
use crate::{AddSpec, Result, SpaError, TopSpec};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_metaslab::VdevSpace;
use tarn_phys::label::{PoolState, VdevConfig};
use tarn_vdev::label;

/// The replication of one top-level vdev as OpenZFS's `replication_level_t` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Replication {
    /// "mirror", "raidz", "file" or "disk".
    kind: String,
    /// Leaves (1 for a plain device).
    children: usize,
    /// raidz parity, else 0.
    parity: u8,
}

impl Replication {
    fn of_config(t: &VdevConfig) -> Replication {
        Replication {
            kind: t.kind.clone(),
            children: t.children.len().max(1),
            parity: t.nparity,
        }
    }

    fn of_spec(t: &TopSpec) -> Replication {
        match t {
            TopSpec::Leaf(p) => Replication {
                kind: kind_of_leaf(p).into(),
                children: 1,
                parity: 0,
            },
            TopSpec::Mirror(v) => Replication {
                kind: "mirror".into(),
                children: v.len(),
                parity: 0,
            },
            TopSpec::Raidz { nparity, leaves } => Replication {
                kind: "raidz".into(),
                children: leaves.len(),
                parity: *nparity,
            },
        }
    }

    /// `(raidz, mirror)` when the pair is one of each.
    fn raidz_mirror<'a>(a: &'a Replication, b: &'a Replication) -> Option<(&'a Replication, &'a Replication)> {
        match (a.kind.as_str(), b.kind.as_str()) {
            ("raidz", "mirror") => Some((a, b)),
            ("mirror", "raidz") => Some((b, a)),
            _ => None,
        }
    }
}

/// OpenZFS `get_replication`: the replication of the last vdev when all agree, else
/// the first disagreement in OpenZFS's words.
fn common_replication(reps: &[Replication]) -> std::result::Result<Option<Replication>, String> {
    let mut last: Option<&Replication> = None;
    for rep in reps {
        if let Some(l) = last {
            if let Some((raidz, mirror)) = Replication::raidz_mirror(l, rep) {
                if raidz.parity as usize != mirror.children - 1 {
                    return Err(format!(
                        "mismatched replication level: {} and {} vdevs with different redundancy, {} vs. {} ({}-way) are present",
                        raidz.kind,
                        mirror.kind,
                        raidz.parity,
                        mirror.children - 1,
                        mirror.children
                    ));
                }
            } else if l.kind != rep.kind {
                return Err(format!("mismatched replication level: both {} and {} vdevs are present", l.kind, rep.kind));
            } else if l.parity != rep.parity {
                return Err(format!(
                    "mismatched replication level: both {} and {} device parity {} vdevs are present",
                    l.parity, rep.parity, rep.kind
                ));
            } else if l.children != rep.children {
                return Err(format!(
                    "mismatched replication level: both {}-way and {}-way {} vdevs are present",
                    l.children, rep.children, rep.kind
                ));
            }
        }
        last = Some(rep);
    }
    Ok(last.cloned())
}

/// OpenZFS `check_replication` for `zpool create`: `None` when the normal top-level
/// vdevs `tops` agree among themselves (same type, parity and width; raidz and
/// mirror agree when they survive as many failures), else the reason in OpenZFS's
/// words (`mismatched replication level: …`). Log vdevs are not passed here.
pub fn create_replication_mismatch(tops: &[TopSpec]) -> Option<String> {
    common_replication(&tops.iter().map(Replication::of_spec).collect::<Vec<_>>()).err()
}

/// OpenZFS `check_replication` for `zpool add`: `None` when the new normal vdevs
/// `new` may join the pool whose tree is `pool`, else the reason.
pub(crate) fn replication_mismatch(pool: &VdevConfig, new: &[TopSpec]) -> Option<String> {
    let current: Vec<Replication> = pool.children.iter().filter(|t| !t.is_log && !t.is_hole()).map(Replication::of_config).collect();
    // A pool that is already mixed has no level to keep.
    let Ok(current) = common_replication(&current) else { return None };
    if new.is_empty() {
        return None;
    }
    let new = match common_replication(&new.iter().map(Replication::of_spec).collect::<Vec<_>>()) {
        Ok(r) => r.expect("non-empty"),
        Err(why) => return Some(why),
    };
    let cur = current?;
    if let Some((raidz, mirror)) = Replication::raidz_mirror(&cur, &new) {
        if raidz.parity as usize != mirror.children - 1 {
            return Some(format!(
                "mismatched replication level: pool and new vdev with different redundancy, {} and {} vdevs, {} vs. {} ({}-way)",
                raidz.kind,
                mirror.kind,
                raidz.parity,
                mirror.children - 1,
                mirror.children
            ));
        }
        None
    } else if cur.kind != new.kind {
        Some(format!("mismatched replication level: pool uses {} and new vdev is {}", cur.kind, new.kind))
    } else if cur.parity != new.parity {
        Some(format!(
            "mismatched replication level: pool uses {} device parity and new vdev uses {}",
            cur.parity, new.parity
        ))
    } else if cur.children != new.children {
        Some(format!(
            "mismatched replication level: pool uses {}-way {} and new vdev uses {}-way {}",
            cur.children, cur.kind, new.children, new.kind
        ))
    } else {
        None
    }
}

/// Whether config path `path` names the same device as `device` (as given, after
/// canonicalization, or as a short name under /dev).
pub(crate) fn same_device(path: &str, device: &str) -> bool {
    if path == device || Path::new("/dev").join(device) == Path::new(path) {
        return true;
    }
    match (std::fs::canonicalize(path), std::fs::canonicalize(device)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

impl Pool {
    /// `zpool add`: bring new normal and log top-level vdevs into the pool. Validates
    /// everything first — shapes (no raidz log), duplicates, devices of this or another
    /// pool, sizes, and (without `force`) the replication level — and changes nothing
    /// on error. Each new vdev takes the first hole's id, else the next id. Returns
    /// once a txg has committed the new tree and every label records it.
    pub fn add_vdevs(&self, spec: &AddSpec) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(SpaError::NotFound(format!("cannot open '{}': no such pool", self.name)));
        }
        if spec.vdevs.is_empty() && spec.logs.is_empty() && spec.spares.is_empty() && spec.caches.is_empty() {
            return Err(SpaError::Invalid(
                "invalid vdev specification: at least one toplevel vdev must be specified".into(),
            ));
        }
        let cfg = self.config.lock().clone();
        let spares: Vec<TopSpec> = spec.spares.iter().cloned().map(TopSpec::Leaf).collect();
        let caches: Vec<TopSpec> = spec.caches.iter().cloned().map(TopSpec::Leaf).collect();
        let mut all = crate::pool::tops_in_order(&spec.vdevs, &spec.logs, &spares);
        all.extend(caches.iter().map(|t| (t, false)));
        let tops = &all[..all.len() - spares.len() - caches.len()];
        // As OpenZFS's make_root_vdev: the spec and the devices first, then the
        // replication level. Opening writes nothing; on error the leaves are closed.
        let mut opened = Self::open_new_tops(&all, spec.force, Some((&self.name, self.guid, &cfg)))?;
        let cache_leaves: Vec<_> = opened.split_off(opened.len() - caches.len()).into_iter().flatten().collect();
        let spare_leaves: Vec<_> = opened.split_off(opened.len() - spares.len()).into_iter().flatten().collect();
        if !spec.force {
            if let Some(why) = replication_mismatch(&cfg, &spec.vdevs) {
                return Err(SpaError::Invalid(vdev_error(false, &why)));
            }
        }
        // New vdevs take the pool's sector size (OpenZFS: the `ashift` pool property).
        let ashift = cfg.children.iter().find(|c| !c.is_log && !c.is_hole()).map(|c| c.ashift).unwrap_or(12);
        if !spare_leaves.is_empty() {
            // Spares change no GUID sum: the next txg's labels record them.
            let _s = self.sync_lock.lock();
            self.add_spares(spare_leaves, ashift);
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        if !cache_leaves.is_empty() {
            // Cache devices change no GUID sum either.
            let _s = self.sync_lock.lock();
            self.add_caches(cache_leaves, ashift);
        }
        if tops.is_empty() {
            return self.sync();
        }
        {
            let _s = self.sync_lock.lock();
            let mut new_guids = Vec::new();
            {
                let mut cfg = self.config.lock();
                for (&(t, is_log), group) in tops.iter().zip(opened) {
                    let id = cfg.children.iter().position(VdevConfig::is_hole).unwrap_or(cfg.children.len());
                    let (vdev, vcfg) = Self::build_top(id as u32, t, group, ashift, is_log);
                    let space = VdevSpace::new_class(vdev.asize_bytes(), vdev.alloc_align_bytes(), class_of(&vcfg));
                    new_guids.push(vcfg.guid);
                    if id == cfg.children.len() {
                        cfg.children.push(vcfg);
                    } else {
                        cfg.children[id] = vcfg;
                    }
                    self.zio.attach_vdev(vdev, space);
                }
            }
            // The new leaves get their labels before the uberblock that commits them:
            // should a crash come first, import finds this newer config, no uberblock
            // for it, and falls back to the old one (`Pool::choose_config`); should it
            // come after, every new leaf is already recognisable.
            let txg = self.gate.synced_txg() + 1;
            self.write_labels_where(PoolState::Active, txg, &|t| new_guids.contains(&t.guid))?;
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.sync()
    }

    /// Find `device` among the top-level vdevs: by `zpool status` name ("mirror-1",
    /// a leaf path), by GUID, or by a leaf inside one. Returns the top-level id and
    /// whether `device` is that top-level vdev itself.
    fn find_vdev(&self, device: &str) -> Option<(usize, bool)> {
        let cfg = self.config.lock();
        for t in cfg.children.iter().filter(|t| !t.is_hole()) {
            if config_display_name(t) == device || t.guid.to_string() == device {
                return Some((t.id as usize, true));
            }
            for l in t.leaves() {
                let by_path = l.path.as_deref().is_some_and(|p| same_device(p, device));
                if by_path || l.guid.to_string() == device {
                    return Some((t.id as usize, t.children.is_empty()));
                }
            }
        }
        None
    }

    /// Replace how [`Pool::remove_vdev`] empties a log vdev (called with its id after
    /// allocation there has stopped). Without a hook the pool's own intent logs are
    /// evacuated (see `evacuate_log_vdev`).
    pub fn set_log_evacuate_hook(&self, hook: Box<LogEvacuateHook>) {
        *self.log_evacuate_hook.lock() = Some(Arc::from(hook));
    }

    /// Move the intent logs off log vdev `id` (allocation there has stopped): retire
    /// every chain with a block on it, then run real txg syncs until the retired blocks
    /// have been freed and their deferral has passed, so nothing is allocated there.
    /// Commits meanwhile fall back to txg syncs and then start new chains elsewhere.
    fn evacuate_log_vdev(&self, id: u32) -> Result<()> {
        for z in self.zilogs.lock().values() {
            z.evacuate(id);
        }
        for _ in 0..tarn_metaslab::TXG_DEFER_SIZE + 4 {
            if self.zio.with_space(|s| s.vdevs[id as usize].alloc_bytes()) == 0 {
                break;
            }
            // An otherwise empty txg still has to sync for deferred frees to age.
            self.config_dirty.store(true, Ordering::SeqCst);
            self.sync()?;
        }
        Ok(())
    }

    /// `zpool remove POOL DEVICE` for a hot spare not in use (see `remove_spare`) or a
    /// separate log vdev (`device`: "mirror-N", the
    /// leaf path of a single log device, or a GUID). Stops allocation on it, runs the
    /// evacuation hook (or syncs a txg), then requires that nothing is allocated there
    /// (else `Busy`, and the vdev is back in service); replaces it by a hole, commits
    /// that in a txg, clears the removed leaves' labels and releases them. Other
    /// vdevs — normal ones, and leaves inside a vdev — cannot be removed (`Invalid`);
    /// an unknown device is `NotFound`.
    pub fn remove_vdev(&self, device: &str) -> Result<()> {
        if self.remove_spare(device)? || self.remove_cache(device)? {
            return Ok(());
        }
        let Some((id, top_level)) = self.find_vdev(device) else {
            return Err(SpaError::NotFound(format!("cannot remove {device}: no such device in pool")));
        };
        let is_log = self.config.lock().children[id].is_log;
        if !is_log || !top_level {
            return Err(SpaError::Invalid(format!(
                "cannot remove {device}: only inactive hot spares, cache, or log devices can be removed"
            )));
        }
        let usable = self.zio.vdevs()[id].state().is_usable();
        let set_allocatable = |on: bool| self.zio.with_space(|s| s.vdevs[id].set_allocatable(on));
        set_allocatable(false);
        let hook = self.log_evacuate_hook.lock().clone();
        let evacuated = match hook {
            Some(h) => h(id as u32),
            None => self.evacuate_log_vdev(id as u32),
        };
        if let Err(e) = evacuated {
            set_allocatable(usable);
            return Err(e);
        }
        let removed = {
            let _s = self.sync_lock.lock();
            let mut cfg = self.config.lock();
            match self.zio.detach_vdev(id as u32) {
                Ok(old) => {
                    cfg.children[id] = VdevConfig::hole(id as u64);
                    self.config_dirty.store(true, Ordering::SeqCst);
                    old
                }
                Err(alloc_bytes) => {
                    drop(cfg);
                    set_allocatable(usable);
                    return Err(SpaError::Busy(format!(
                        "cannot remove {device}: log device still holds {alloc_bytes} bytes of intent-log blocks"
                    )));
                }
            }
        };
        self.sync()?;
        // The committed tree no longer has these leaves: free them for reuse.
        label::clear_and_release(&removed.leaves());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn top(kind: &str, n: usize, parity: u8) -> VdevConfig {
        VdevConfig {
            kind: kind.into(),
            nparity: parity,
            children: (0..n)
                .map(|_| VdevConfig {
                    kind: "file".into(),
                    ..VdevConfig::default()
                })
                .collect(),
            ..VdevConfig::default()
        }
    }

    fn pool(children: Vec<VdevConfig>) -> VdevConfig {
        VdevConfig {
            kind: "root".into(),
            children,
            ..VdevConfig::default()
        }
    }

    fn file() -> VdevConfig {
        VdevConfig {
            kind: "file".into(),
            ..VdevConfig::default()
        }
    }

    fn mirror(n: usize) -> TopSpec {
        TopSpec::Mirror((0..n).map(|i| PathBuf::from(format!("/nonexistent/m{i}"))).collect())
    }

    #[test]
    fn create_replication_follows_openzfs() {
        let raidz = |p: u8, n: usize| TopSpec::Raidz {
            nparity: p,
            leaves: (0..n).map(|i| PathBuf::from(format!("/nonexistent/r{i}"))).collect(),
        };
        assert_eq!(create_replication_mismatch(&[mirror(3)]), None);
        assert_eq!(create_replication_mismatch(&[mirror(2), mirror(2)]), None);
        // A 2-way mirror and raidz1 both survive one failure: accepted, as OpenZFS does.
        assert_eq!(create_replication_mismatch(&[mirror(2), raidz(1, 3)]), None);
        assert_eq!(
            create_replication_mismatch(&[mirror(2), mirror(3)]).unwrap(),
            "mismatched replication level: both 2-way and 3-way mirror vdevs are present"
        );
        assert_eq!(
            create_replication_mismatch(&[raidz(1, 3), raidz(2, 4)]).unwrap(),
            "mismatched replication level: both 1 and 2 device parity raidz vdevs are present"
        );
        assert_eq!(
            create_replication_mismatch(&[mirror(3), raidz(1, 3)]).unwrap(),
            "mismatched replication level: raidz and mirror vdevs with different redundancy, 1 vs. 2 (3-way) are present"
        );
        assert_eq!(
            create_replication_mismatch(&[mirror(2), TopSpec::Leaf(PathBuf::from("/nonexistent/x"))]).unwrap(),
            "mismatched replication level: both mirror and file vdevs are present"
        );
    }

    #[test]
    fn replication_rules_follow_openzfs() {
        let leaf = TopSpec::Leaf(PathBuf::from("/nonexistent/x"));
        let raidz = |p: u8, n: usize| TopSpec::Raidz {
            nparity: p,
            leaves: (0..n).map(|i| PathBuf::from(format!("/nonexistent/r{i}"))).collect(),
        };
        let m2 = pool(vec![top("mirror", 2, 0)]);
        assert_eq!(replication_mismatch(&m2, &[mirror(2)]), None);
        assert_eq!(
            replication_mismatch(&m2, std::slice::from_ref(&leaf)).unwrap(),
            "mismatched replication level: pool uses mirror and new vdev is file"
        );
        assert_eq!(
            replication_mismatch(&m2, &[mirror(3)]).unwrap(),
            "mismatched replication level: pool uses 2-way mirror and new vdev uses 3-way mirror"
        );
        // raidz1 survives one failure like a 2-way mirror: accepted; raidz2 is not.
        assert_eq!(replication_mismatch(&m2, &[raidz(1, 3)]), None);
        assert_eq!(
            replication_mismatch(&m2, &[raidz(2, 4)]).unwrap(),
            "mismatched replication level: pool and new vdev with different redundancy, raidz and mirror vdevs, 2 vs. 1 (2-way)"
        );
        let z1 = pool(vec![top("raidz", 3, 1)]);
        assert_eq!(
            replication_mismatch(&z1, &[raidz(2, 3)]).unwrap(),
            "mismatched replication level: pool uses 1 device parity and new vdev uses 2"
        );
        assert_eq!(
            replication_mismatch(&z1, &[raidz(1, 4)]).unwrap(),
            "mismatched replication level: pool uses 3-way raidz and new vdev uses 4-way raidz"
        );
        // The new vdevs must agree among themselves.
        assert_eq!(
            replication_mismatch(&m2, &[mirror(2), leaf.clone()]).unwrap(),
            "mismatched replication level: both mirror and file vdevs are present"
        );
        // Logs and holes do not count; a mixed pool has no level to keep.
        let logs = pool(vec![
            file(),
            VdevConfig::hole(1),
            VdevConfig {
                is_log: true,
                ..top("mirror", 2, 0)
            },
        ]);
        assert_eq!(replication_mismatch(&logs, std::slice::from_ref(&leaf)), None);
        let mixed = pool(vec![file(), top("mirror", 2, 0)]);
        assert_eq!(replication_mismatch(&mixed, &[raidz(3, 5)]), None);
        assert_eq!(replication_mismatch(&m2, &[]), None);
    }
}
