//! Cache devices: the pool's side of the L2ARC (`zpool create … cache DEV`, `zpool
//! add POOL cache DEV`, `zpool remove POOL DEV`, the `cache` rows of `zpool status`).
//!
//! Theory. A cache device is a single leaf listed in the root config's `l2cache`
//! (OpenZFS keeps `ZPOOL_CONFIG_L2CACHE` beside the vdev tree the same way): it
//! has a GUID and a label naming the pool, so that `zpool create` and `add` refuse
//! it as in use, but it is not a top-level vdev, holds no DVA, and is not in the
//! uberblock's GUID sum. Its contents belong to `tarn_zio::l2arc`, which this
//! module only hands the opened leaf to. Because nothing on it is needed, an import
//! never fails for it: a device that cannot be found or opened is listed as
//! `UNAVAIL` and skipped, and one that opens is rebuilt from its log blocks
//! (persistent L2ARC), keeping only blocks born at or before the imported txg.
//!
//! Invariants: `config.l2cache` and the L2ARC's device list name the same GUIDs, in
//! the same order; ids are list positions (renumbered after a removal).
//!
//! Called by: `pool.rs` (create, import, status, release), `vdevs.rs` (`zpool add`,
//! `zpool remove`). The caller holds `sync_lock` or owns the pool alone.

use crate::pool::Pool;
use crate::vdevs::same_device;
use crate::{Result, VdevStatus};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::label::VdevConfig;
use tarn_vdev::{Leaf, Vdev};

impl Pool {
    /// Add opened cache devices (from `zpool create` or `zpool add`), empty: their
    /// old contents are never trusted. The next txg's labels record them.
    pub(crate) fn add_caches(&self, opened: Vec<(PathBuf, Leaf)>, ashift: u8) {
        self.zio.l2arc().set_pool_guid(self.guid);
        let mut cfg = self.config.lock();
        for (p, leaf) in opened {
            let (c, v) = crate::config::new_single_leaf(&p, leaf, cfg.l2cache.len() as u32, ashift);
            cfg.l2cache.push(c);
            self.zio.add_cache_device(v, false, 0);
        }
        self.config_dirty.store(true, Ordering::SeqCst);
    }

    /// At import: open every cache device of `cfg` (from the leaves found by label
    /// GUID, else at its recorded path) and rebuild its L2ARC headers, keeping blocks
    /// born at or before `txg`. A device that cannot be opened is kept, unusable.
    pub(crate) fn open_caches(&self, cfg: &VdevConfig, found: &mut std::collections::HashMap<u64, crate::pool::FoundLeaf>, txg: u64) {
        self.zio.l2arc().set_pool_guid(self.guid);
        for c in &cfg.l2cache {
            let f = found.remove(&c.guid);
            let (path, leaf) = match f {
                Some(f) => (f.path.display().to_string(), Some(f.leaf)),
                None => {
                    let path = c.path.clone().unwrap_or_default();
                    let leaf = Leaf::open(std::path::Path::new(&path)).ok().filter(|l| {
                        tarn_vdev::label::read_configs(l)
                            .into_iter()
                            .flatten()
                            .any(|lc| lc.guid == c.guid && lc.pool_guid == self.guid)
                    });
                    (path, leaf)
                }
            };
            let v = Arc::new(Vdev::new_leaf(c.id as u32, c.guid, c.ashift.max(9), path, leaf));
            let r = self.zio.add_cache_device(v, true, txg);
            if r.bufs > 0 {
                tracing::info!("{}: L2ARC rebuilt {} buffers from {} log blocks", self.name, r.bufs, r.log_blocks);
            }
        }
    }

    /// `zpool remove POOL DEVICE` for a cache device: forget it and its L2ARC headers;
    /// its labels are cleared once the labels of the pool no longer list it.
    /// `Ok(false)` when `device` is not a cache device of this pool.
    pub(crate) fn remove_cache(&self, device: &str) -> Result<bool> {
        {
            let _s = self.sync_lock.lock();
            let mut cfg = self.config.lock();
            let Some(i) = cfg
                .l2cache
                .iter()
                .position(|s| s.path.as_deref().is_some_and(|p| same_device(p, device)) || s.guid.to_string() == device)
            else {
                return Ok(false);
            };
            let guid = cfg.l2cache.remove(i).guid;
            for (id, c) in cfg.l2cache.iter_mut().enumerate() {
                c.id = id as u64;
            }
            if let Some(v) = self.zio.l2arc().remove_device(guid) {
                self.repair.released.lock().push(v);
            }
            self.config_dirty.store(true, Ordering::SeqCst);
        }
        self.sync()?;
        Ok(true)
    }

    /// The cache devices' leaves (labels, release at export).
    pub(crate) fn cache_vdevs(&self) -> Vec<Arc<Vdev>> {
        self.zio.l2arc().devices().iter().map(|d| d.vdev().clone()).collect()
    }

    /// Rows of the `cache` section of `zpool status` and `zpool iostat -v`.
    pub(crate) fn cache_status(&self) -> Vec<VdevStatus> {
        self.zio
            .l2arc()
            .devices()
            .iter()
            .map(|d| {
                let v = d.vdev();
                VdevStatus {
                    read_errors: v.stats().read_errors.load(Ordering::Relaxed),
                    write_errors: v.stats().write_errors.load(Ordering::Relaxed),
                    checksum_errors: v.stats().checksum_errors.load(Ordering::Relaxed),
                    alloc_bytes: d.asize_bytes(),
                    size_bytes: v.asize_bytes(),
                    ..VdevStatus::new(&v.display_name(), v.state().as_str(), vec![])
                }
            })
            .collect()
    }
}
