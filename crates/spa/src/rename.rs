//! Renaming file systems and snapshots (`zfs rename`).
//!
//! Theory. A dataset's name lives in one place on disk: its key in the dataset-name ZAP
//! (`docs/format.md` §11), mirrored in memory by `Dir`. Everything else — the record,
//! the object set, dead lists, holds, local properties, a clone's `origin_obj` — is
//! found by MOS object id, and inherited properties (`mountpoint` above all) are
//! computed from names. So a rename is a re-keying of ZAP entries:
//!
//! - `fs@a → fs@b` re-keys one snapshot; with `-r` the snapshot `@a` of every
//!   descendant file system that has one (OpenZFS `dsl_dataset_rename_snapshot`);
//! - `fs → new` re-keys `fs`, every descendant file system and every snapshot of all
//!   of them (OpenZFS moves one `dsl_dir`; we have no per-directory objects, so every
//!   name below moves), and renames their bookmarks in the pool's bookmark record
//!   (`bookmark.rs`). `-p` first creates the missing ancestors of `new`.
//!
//! Clones keep their `origin_obj`, so their `origin` shows the new snapshot name; a
//! file system whose mountpoint is inherited gets a new one (the daemon unmounts and
//! mounts again — the engine knows nothing of mounts).
//!
//! Crash safety: every entry of one rename (and the ancestors `-p` creates) changes in
//! one txg — taken under `sync_lock` (no sync can start), a txg hold (the txg cannot
//! close) and `admin` (MOS changes), after a sync of what was dirty, as `snapshot()`
//! does (so the hold does not wait in the write throttle for a blocked sync). Old
//! keys all leave the ZAP before any new key enters it, so no add meets an entry of
//! the same rename.
//! The txg is durable as a whole or not at all: an import after a crash finds every
//! old name or every new one, never a mix. The call returns after that txg synced.
//!
//! Checks follow OpenZFS's order and wording (libzfs `zfs_rename`, `check_parents`;
//! `dsl_dir_rename_check`, `dsl_dataset_rename_snapshot_check`), all before the first
//! change, and are repeated under the locks: a refused rename changes nothing.
//!
//! Limits: no `-f` (forced unmounts are the daemon's, and it has none); renaming
//! across pools is refused, as in OpenZFS.

use crate::dsl::{Dir, DsRec};
use crate::names::is_descendant;
use crate::names::NAME_MAX_BYTES;
use crate::pool::{dmu_err, Pool};
use crate::{Result, SpaError};
use std::collections::BTreeMap;
use tarn_dmu::TxHold;

/// What a file-system rename moves ([`Pool::rename_dataset_plan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenamePlan {
    /// Missing ancestors of the new name that `-p` creates, shallowest first.
    pub created: Vec<String>,
    /// `(old, new)` of the file system and of each descendant, parents first. Empty
    /// when the new name is the old one (nothing to do, as in OpenZFS).
    pub datasets: Vec<(String, String)>,
    /// `(old, new)` of every snapshot of those file systems.
    pub snapshots: Vec<(String, String)>,
    /// `(old, new)` of every bookmark of those file systems.
    pub bookmarks: Vec<(String, String)>,
}

/// "cannot use 'x': why" (a name check's message) → "why".
fn why(e: SpaError) -> String {
    let s = e.to_string();
    match s.split_once("': ") {
        Some((_, w)) => w.to_string(),
        None => s,
    }
}

fn parent_of(name: &str) -> Option<&str> {
    name.rfind('/').map(|i| &name[..i])
}

impl Pool {
    /// The checks of `zfs rename [-p] from to` for file systems, without changing
    /// anything: what the rename would create and move, or OpenZFS's refusal.
    ///
    /// Errors: `NotFound` — `from` does not exist ("cannot open"), or a parent of `to`
    /// is missing without `create_parents` ("cannot create 'to': parent does not
    /// exist"); `Invalid` — `from` is a snapshot, `to` is not a valid file system name,
    /// has no parent ("missing dataset name"; so a pool's root dataset cannot be
    /// renamed), is in another pool ("datasets must be within same pool") or below
    /// `from` ("New dataset name cannot be a descendant of current dataset name"), or
    /// a moved name would pass 255 bytes ("dataset name is too long"); `Exists` — `to`
    /// exists.
    pub fn rename_dataset_plan(&self, from: &str, to: &str, create_parents: bool) -> Result<RenamePlan> {
        let d = self.dir.lock().clone();
        self.plan_dataset_rename(&d, from, to, create_parents)
    }

    fn plan_dataset_rename(&self, d: &Dir, from: &str, to: &str, create_parents: bool) -> Result<RenamePlan> {
        if from.contains('@') {
            return Err(SpaError::Invalid(format!(
                "cannot open '{from}': operation not applicable to datasets of this type"
            )));
        }
        if !d.datasets.contains_key(from) {
            return Err(SpaError::NotFound(format!("cannot open '{from}': dataset does not exist")));
        }
        if from == to {
            return Ok(RenamePlan::default());
        }
        let to_err = |w: &str| SpaError::Invalid(format!("cannot rename to '{to}': {w}"));
        if to.contains('@') {
            return Err(to_err("snapshot delimiter '@' is not expected here"));
        }
        crate::validate_dataset_name(to).map_err(|e| to_err(&why(e)))?;
        let Some(parent) = parent_of(to) else {
            return Err(SpaError::Invalid(format!("cannot create '{to}': missing dataset name")));
        };
        if to.split('/').next() != Some(self.name.as_str()) {
            return Err(to_err("datasets must be within same pool"));
        }
        let mut created = Vec::new();
        let mut p = Some(parent);
        while let Some(a) = p.filter(|a| !d.datasets.contains_key(*a)) {
            created.push(a.to_string());
            p = parent_of(a);
        }
        created.reverse();
        if !created.is_empty() && !create_parents {
            return Err(SpaError::NotFound(format!("cannot create '{to}': parent does not exist")));
        }
        if is_descendant(to, from) {
            return Err(to_err("New dataset name cannot be a descendant of current dataset name"));
        }
        if d.datasets.contains_key(to) {
            return Err(SpaError::Exists(format!("cannot rename '{from}': dataset")));
        }
        let moved = |n: &str| n == from || is_descendant(n, from);
        let renamed = |n: &str| format!("{to}{}", &n[from.len()..]);
        let datasets: Vec<(String, String)> = d.datasets.keys().filter(|k| moved(k)).map(|k| (k.clone(), renamed(k))).collect();
        let snapshots: Vec<(String, String)> = d
            .snaps
            .keys()
            .filter(|k| k.split_once('@').is_some_and(|(f, _)| moved(f)))
            .map(|k| (k.clone(), renamed(k)))
            .collect();
        let bookmarks: Vec<(String, String)> = self
            .bookmarks()?
            .into_iter()
            .filter(|b| b.name.split_once('#').is_some_and(|(f, _)| moved(f)))
            .map(|b| (b.name.clone(), renamed(&b.name)))
            .collect();
        if datasets.iter().chain(&snapshots).chain(&bookmarks).any(|(_, n)| n.len() > NAME_MAX_BYTES) {
            return Err(SpaError::Invalid(format!("cannot rename '{from}': dataset name is too long")));
        }
        Ok(RenamePlan {
            created,
            datasets,
            snapshots,
            bookmarks,
        })
    }

    /// `zfs rename [-p] from to`: move file system `from`, its descendants and all
    /// their snapshots to the names below `to`, in one txg (see the module docs).
    /// `parent_props` is `-p`: create the missing ancestors of `to`, with these local
    /// properties (`-pp` gives `canmount=off`); `None` refuses missing ancestors.
    /// Returns what moved. The caller unmounts the moved file systems before and
    /// mounts them after. Errors: those of [`Pool::rename_dataset_plan`]; nothing
    /// changes on error.
    pub fn rename_dataset(&self, from: &str, to: &str, parent_props: Option<&BTreeMap<String, String>>) -> Result<RenamePlan> {
        if let Some(props) = parent_props {
            for (k, v) in props {
                crate::dsl::check_prop(k, v)?;
            }
        }
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let d = self.dir.lock().clone();
        let plan = self.plan_dataset_rename(&d, from, to, parent_props.is_some())?;
        if plan.datasets.is_empty() {
            return Ok(plan);
        }
        let none = BTreeMap::new();
        for m in &plan.created {
            self.create_dataset_record(&tx, m, parent_props.unwrap_or(&none))?;
        }
        self.rekey(&tx, &d, &plan.datasets, &plan.snapshots)?;
        if !plan.bookmarks.is_empty() {
            self.rename_bookmarks(&tx, &plan.bookmarks)?;
        }
        drop(_a);
        drop(tx);
        drop(_s);
        // Inherited compression, readonly, logbias now come from the new ancestors.
        self.apply_props_to_open();
        self.sync()?;
        Ok(plan)
    }

    /// `zfs rename [-r] fs@a fs@b`: rename snapshot `from` to `to` (both full names of
    /// the same file system); with `recursive`, also `@a` of every descendant that has
    /// one. One txg. Returns `(old, new)` of each renamed snapshot (empty when the
    /// names are equal).
    ///
    /// Errors (nothing changed): `NotFound` — `from` does not exist; `Invalid` — `to`
    /// is of another file system ("snapshots must be part of same dataset") or not a
    /// valid snapshot name, a descendant already has the new name with `recursive`
    /// ("a child dataset already has a snapshot with the new name"), a new name would
    /// pass 255 bytes; `Exists` — `to` exists.
    pub fn rename_snapshot(&self, from: &str, to: &str, recursive: bool) -> Result<Vec<(String, String)>> {
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let d = self.dir.lock().clone();
        let pairs = self.plan_snapshot_rename(&d, from, to, recursive)?;
        if pairs.is_empty() {
            return Ok(pairs);
        }
        self.rekey(&tx, &d, &[], &pairs)?;
        drop(_a);
        drop(tx);
        drop(_s);
        self.sync()?;
        Ok(pairs)
    }

    fn plan_snapshot_rename(&self, d: &Dir, from: &str, to: &str, recursive: bool) -> Result<Vec<(String, String)>> {
        let Some((fs, old_short)) = from.split_once('@') else {
            return Err(SpaError::Invalid(format!("'{from}' is not a snapshot")));
        };
        if !d.snaps.contains_key(from) {
            return Err(SpaError::NotFound(format!("cannot open '{from}': dataset does not exist")));
        }
        if from == to {
            return Ok(Vec::new());
        }
        let to_err = |w: &str| SpaError::Invalid(format!("cannot rename to '{to}': {w}"));
        let new_short = match to.split_once('@') {
            Some((f, s)) if f == fs => s,
            _ => return Err(to_err("snapshots must be part of same dataset")),
        };
        crate::validate_snapshot_name(to).map_err(|e| to_err(&why(e)))?;
        let mut fss = vec![fs];
        if recursive {
            fss.extend(d.datasets.keys().filter(|k| is_descendant(k, fs)).map(String::as_str));
        }
        let mut pairs = Vec::new();
        for f in fss {
            let old = format!("{f}@{old_short}");
            if !d.snaps.contains_key(&old) {
                continue;
            }
            let new = format!("{f}@{new_short}");
            if d.snaps.contains_key(&new) {
                return Err(if recursive {
                    SpaError::Invalid(format!("cannot rename '{from}': a child dataset already has a snapshot with the new name"))
                } else {
                    SpaError::Exists(format!("cannot rename '{from}': dataset"))
                });
            }
            if new.len() > NAME_MAX_BYTES {
                return Err(SpaError::Invalid(format!("cannot rename '{from}': dataset name is too long")));
            }
            pairs.push((old, new));
        }
        Ok(pairs)
    }

    /// Move the dataset-name ZAP entries and the directory's records of `datasets`
    /// and `snapshots` (`(old, new)` pairs of `d`) to their new names, in `tx`.
    fn rekey(&self, tx: &TxHold, d: &Dir, datasets: &[(String, String)], snapshots: &[(String, String)]) -> Result<()> {
        let rec = |old: &str, snap: bool| -> Result<DsRec> {
            let m = if snap { &d.snaps } else { &d.datasets };
            m.get(old)
                .cloned()
                .ok_or_else(|| SpaError::NotFound(format!("cannot open '{old}': dataset does not exist")))
        };
        let mut moves = Vec::new();
        for (old, new) in datasets {
            moves.push((old, new, rec(old, false)?, false));
        }
        for (old, new) in snapshots {
            moves.push((old, new, rec(old, true)?, true));
        }
        for (old, _, _, _) in &moves {
            self.unlink_name(tx, old)?;
        }
        for (_, new, r, _) in &moves {
            self.link_name(tx, new, r.obj)?;
        }
        let mut dir = self.dir.lock();
        for (old, new, r, snap) in moves {
            let m = if snap { &mut dir.snaps } else { &mut dir.datasets };
            m.remove(old);
            m.insert(new.clone(), r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_helpers() {
        assert!(is_descendant("tank/a/b", "tank/a"));
        assert!(!is_descendant("tank/ab", "tank/a"));
        assert!(!is_descendant("tank/a", "tank/a"));
        assert_eq!(parent_of("tank/a/b"), Some("tank/a"));
        assert_eq!(parent_of("tank"), None);
        assert_eq!(
            why(SpaError::Invalid("cannot use 'x*': invalid character '*' in name".into())),
            "invalid character '*' in name"
        );
    }
}
