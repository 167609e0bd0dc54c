//! # promote — `zfs promote`: a clone takes over its origin's history
//!
//! Theory. A clone `C` of snapshot `O = A@o` shares `O`'s blocks and everything
//! older. Promoting `C` makes it the owner of that history: `O` and every older
//! snapshot of `A` (back to `A`'s own origin, if `A` is a clone) are renamed to `C@…`,
//! `C` takes `A`'s origin (none, or `A`'s), and `A` becomes a clone of `O`. Then `A`
//! can be destroyed while `C` lives on — the way a clone replaces the file system it
//! came from (OpenZFS `dsl_dataset_promote`).
//!
//! What moves is names and three links; no block and no dead list changes. That holds
//! because of what the records mean (snapshot.rs): a dataset's dead list holds the
//! blocks born at or before its previous snapshot that died while it was the newest,
//! and both `A`'s and `C`'s oldest own dataset (snapshot or head) have `O` as previous
//! snapshot. Before and after, each dead list describes the same blocks relative to the
//! same `O`; only the role of each chain (main line or clone) swaps:
//!
//! * `O.next_snap_obj`: from `A`'s oldest own dataset to `C`'s;
//! * `C.origin_obj := A.origin_obj`, `A.origin_obj := O`;
//! * `O.num_clones` and the clone count of `A`'s old origin do not change (one clone
//!   replaces another).
//!
//! Space figures follow: `usedbysnapshots` of `C` now counts the moved snapshots, and
//! `A`'s `usedbydataset` drops to what it does not share with `O`.
//!
//! All changes are one txg of MOS records under the sync lock, so after a crash the
//! promotion either happened or did not. Errors and their wording follow OpenZFS.
//!
//! Called by: the CLI (`zfs promote`). Calls: the DSL records (`dsl.rs`).

use crate::pool::{dmu_err, Pool};
use crate::{Result, SpaError};

impl Pool {
    /// `zfs promote clone`. Returns the snapshot names that moved, as
    /// `(old, new)` pairs, oldest first.
    ///
    /// Errors: `NotFound` for a missing file system; `Invalid` for a file system that
    /// is not a clone ("not a cloned filesystem") or a snapshot name of the origin
    /// that the clone already uses.
    pub fn promote(&self, clone: &str) -> Result<Vec<(String, String)>> {
        if clone.contains('@') {
            return Err(SpaError::Invalid(format!("cannot promote '{clone}': snapshots can not be promoted")));
        }
        self.sync()?;
        let moved = {
            let _s = self.sync_lock.lock();
            let tx = self.gate.hold_nowait().map_err(dmu_err)?;
            let _a = self.admin.lock();
            let c_obj = self.head_obj(clone)?;
            let mut c = self.ds_phys(c_obj)?;
            if c.origin_obj == 0 {
                return Err(SpaError::Invalid(format!("cannot promote '{clone}': not a cloned filesystem")));
            }
            let o_obj = c.origin_obj;
            let mut o = self.ds_phys(o_obj)?;
            // The origin's file system: the head its snapshot chain leads to.
            let names = self.dir.lock().clone();
            let o_name = names
                .snaps
                .iter()
                .find(|(_, r)| r.obj == o_obj)
                .map(|(n, _)| n.clone())
                .ok_or_else(|| SpaError::Corrupt(format!("origin of '{clone}' has no name")))?;
            let a_name = o_name.split('@').next().unwrap_or_default().to_string();
            let a_obj = self.head_obj(&a_name)?;
            let mut a = self.ds_phys(a_obj)?;
            // The snapshots that move: the origin and older, down to A's own origin.
            let name_of = |obj: u64| names.snaps.iter().find(|(_, r)| r.obj == obj).map(|(n, _)| n.clone());
            let mut moving: Vec<(String, u64)> = Vec::new();
            let mut cur = o_obj;
            while cur != 0 && cur != a.origin_obj {
                if moving.len() as u64 > crate::dsl::DATASETS_MAX {
                    return Err(SpaError::Corrupt("snapshot chain loops".into()));
                }
                let n = name_of(cur).ok_or_else(|| SpaError::Corrupt(format!("snapshot record {cur} has no name")))?;
                if !n.starts_with(&format!("{a_name}@")) {
                    break;
                }
                moving.push((n, cur));
                cur = self.ds_phys(cur)?.prev_snap_obj;
            }
            moving.reverse();
            let mut pairs = Vec::new();
            for (n, _) in &moving {
                let short = n.split_once('@').map(|(_, s)| s).unwrap_or_default();
                let new = format!("{clone}@{short}");
                if names.snaps.contains_key(&new) {
                    return Err(SpaError::Invalid(format!(
                        "cannot promote '{clone}': snapshot name '{short}' from origin \nconflicts with '{new}' from target"
                    )));
                }
                pairs.push((n.clone(), new));
            }
            // Oldest own dataset of each chain: the one whose previous snapshot is O.
            let first_after = |head: u64| -> Result<u64> {
                let mut cur = head;
                for _ in 0..=crate::dsl::DATASETS_MAX {
                    let p = self.ds_phys(cur)?;
                    if p.prev_snap_obj == o_obj {
                        return Ok(cur);
                    }
                    if p.prev_snap_obj == 0 {
                        break;
                    }
                    cur = p.prev_snap_obj;
                }
                Err(SpaError::Corrupt(format!("chain of record {head} does not reach its origin")))
            };
            let c_first = first_after(c_obj)?;
            // Links first (all checks are done), then names.
            o.next_snap_obj = c_first;
            self.set_ds_phys(&tx, o_obj, &o)?;
            // Re-read: the head records may be the same objects as c_first / o.
            c = self.ds_phys(c_obj)?;
            c.origin_obj = a.origin_obj;
            self.set_ds_phys(&tx, c_obj, &c)?;
            a = self.ds_phys(a_obj)?;
            a.origin_obj = o_obj;
            self.set_ds_phys(&tx, a_obj, &a)?;
            for (old, new) in &pairs {
                let obj = self.snap_obj(old)?;
                self.unlink_name(&tx, old)?;
                self.link_name(&tx, new, obj)?;
                let mut d = self.dir.lock();
                if let Some(rec) = d.snaps.remove(old) {
                    d.snaps.insert(new.clone(), rec);
                }
            }
            pairs
        };
        self.sync()?;
        Ok(moved)
    }
}
