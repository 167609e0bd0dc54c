//! User holds and deferred destroy of snapshots (`zfs hold`, `zfs release`, `zfs holds`,
//! `zfs destroy -d`).
//!
//! Theory (OpenZFS `dsl_userhold.c`, `dsl_destroy.c`). A *user hold* is a named
//! reference on a snapshot: while a snapshot has one, destroying it is refused with
//! EBUSY ("dataset is busy"). Each snapshot has its own tag namespace; a tag is held at
//! most once per snapshot. `zfs destroy -d` of a snapshot with neither holds nor clones
//! destroys it at once; otherwise it only sets [`DS_FLAG_DEFER_DESTROY`], and the
//! snapshot is destroyed, in the same txg, by whichever change removes the last of
//! them: the release of its last hold ([`Pool::release`]) or the destroy of its last
//! clone ([`Pool::reap_deferred`], called by `destroy_dataset_ext`).
//!
//! On disk (`docs/format.md` §11): a snapshot's [`DslDatasetPhys`] names, in
//! `userrefs_obj` (offset 232), a MOS ZAP of type `Zap` mapping each tag (1..=255
//! bytes, UTF-8) to the hold's creation time in seconds since the epoch; `userrefs`
//! (offset 224) is the number of its entries. The first hold creates the ZAP and the
//! last release frees it, so "no holds" is always `userrefs_obj = 0, userrefs = 0` —
//! which is what every record written before holds existed carries.
//!
//! Invariants: `userrefs` equals the ZAP's entry count and is 0 exactly when
//! `userrefs_obj` is 0; only snapshots carry holds or the defer flag. [`read_holds`]
//! checks the first two (and the object's type) on every read and reports `Corrupt`;
//! [`Pool::hold`] and [`Pool::release`] read before they write, so a damaged record is
//! never updated.
//!
//! Locks, as `snapshot()`: `sync_lock` → txg hold → `admin`, after a sync of what
//! was dirty (so the txg hold does not wait in the write throttle for a sync that
//! `sync_lock` blocks). A release may destroy a snapshot, which needs the kill hooks'
//! pending lists empty (no txg syncing). Every
//! check of a command precedes its first change, all its changes are made in one txg,
//! and the command waits for that txg to sync (as an OpenZFS sync task does). Crash:
//! the txg is durable as a whole or not at all, so holds, counts and the defer flag
//! never disagree after an import.
//!
//! *Temporary holds* (OpenZFS's cleanup-fd holds, which `zfs send` takes on the
//! snapshots it reads, tag `.send-PID-N`): [`Pool::hold_temporary`] and
//! [`Pool::release_temporary`]. They refuse destroys exactly as user holds do, show in
//! `zfs holds` and `userrefs`, but live only in memory (`Pool::temp_holds`): a daemon
//! that dies takes them along, as OpenZFS drops its temporary holds at the next import.
//! Releasing the last hold of a snapshot marked for deferred destroy destroys it.
//!
//! Limits: tags are at most 255 bytes (the ZAP's name limit; OpenZFS allows 256) and
//! not empty.
//!
//! Called by: the CLI's `zfs hold/release/holds` and `zfs destroy -d`; `dsl.rs` and
//! `snapshot.rs` ask [`Pool::check_not_held`] before destroying a snapshot.

use crate::dsl::{DslDatasetPhys, DS_FLAG_DEFER_DESTROY};
use crate::pool::{dmu_err, now_s, Pool};
use crate::{Result, SpaError};
use std::collections::BTreeMap;
use tarn_dmu::{zap, ObjectStore, ObjectType, TxHold};

/// Temporary holds of one [`Pool::hold_temporary`] call: give them back with
/// [`Pool::release_temporary`].
#[derive(Debug)]
#[must_use = "temporary holds last until released"]
pub struct TempHolds {
    tag: String,
    objs: Vec<u64>,
}

/// Longest hold tag, in bytes (the ZAP's name limit).
pub const TAG_MAX_BYTES: usize = 255;

/// Most holds one snapshot may carry before its ZAP counts as damaged.
const HOLDS_MAX: u64 = 1 << 20;

/// OpenZFS's refusal to destroy a held snapshot (libzfs `zfs_destroy_snaps_nvl`, EBUSY;
/// OpenZFS 2.4 words it "it's being held").
pub(crate) fn held(name: &str) -> SpaError {
    SpaError::Busy(format!("cannot destroy snapshot {name}: dataset is busy"))
}

/// The holds of a snapshot record: tag → creation time (s). Errors: `Corrupt` when the
/// object is not a ZAP, a tag is not UTF-8, or the count disagrees with `userrefs`.
pub(crate) fn read_holds(mos: &dyn ObjectStore, phys: &DslDatasetPhys) -> Result<BTreeMap<String, u64>> {
    let bad = |why: &str| SpaError::Corrupt(format!("user holds object {}: {why}", phys.userrefs_obj));
    let mut out = BTreeMap::new();
    if phys.userrefs_obj == 0 {
        if phys.userrefs != 0 {
            return Err(bad("hold count without a holds object"));
        }
        return Ok(out);
    }
    if mos.object_info(phys.userrefs_obj).map_err(dmu_err)?.otype != ObjectType::Zap {
        return Err(bad("not a ZAP"));
    }
    let count = zap::count(mos, phys.userrefs_obj).map_err(dmu_err)?;
    if count != phys.userrefs || count == 0 || count > HOLDS_MAX {
        return Err(bad(&format!("{count} entries, record counts {}", phys.userrefs)));
    }
    let mut cursor = 0u64;
    // Each round returns at least one entry until the end, so `count` bounds the loop.
    for _ in 0..=count {
        let batch = zap::list(mos, phys.userrefs_obj, cursor, 1024).map_err(dmu_err)?;
        for e in &batch {
            let tag = String::from_utf8(e.name.clone()).map_err(|_| bad("tag is not UTF-8"))?;
            out.insert(tag, e.value);
        }
        match batch.last() {
            Some(l) if batch.len() == 1024 => cursor = l.next_cursor,
            _ => break,
        }
    }
    if out.len() as u64 != count {
        return Err(bad("listing disagrees with the entry count"));
    }
    Ok(out)
}

/// What [`Pool::release`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Snapshots the tag was released from, in listing order.
    pub released: Vec<String>,
    /// Snapshots marked for deferred destroy whose last hold this was: destroyed.
    pub destroyed: Vec<String>,
}

impl Pool {
    /// `fs@snap`, and with `recursive` the snapshot of the same name of every
    /// descendant file system, that exist; file systems in name order.
    fn same_named_snapshots(&self, snap: &str, recursive: bool) -> Vec<String> {
        let Some((fs, short)) = snap.split_once('@') else { return Vec::new() };
        let d = self.dir.lock();
        let prefix = format!("{fs}/");
        let mut fss = vec![fs.to_string()];
        if recursive {
            fss.extend(d.datasets.keys().filter(|k| k.starts_with(&prefix)).cloned());
        }
        fss.into_iter().map(|f| format!("{f}@{short}")).filter(|n| d.snaps.contains_key(n)).collect()
    }

    /// The file system part of `snap` must exist (OpenZFS opens it first).
    fn hold_fs_exists(&self, snap: &str) -> Result<()> {
        let fs = snap.split_once('@').map(|(f, _)| f).unwrap_or(snap);
        self.head_obj(fs).map(|_| ())
    }

    /// `zfs hold [-r] tag fs@snap`: add hold `tag` to the snapshot (with `recursive`,
    /// to the same-named snapshot of every descendant that has one), all in one txg.
    /// Returns the snapshots held.
    ///
    /// Errors (OpenZFS wording, nothing changed): `NotFound` when the file system or
    /// every snapshot is missing; `Invalid` for a tag longer than [`TAG_MAX_BYTES`]
    /// ("tag too long"), an empty tag, a name without `@`, or a tag one of the
    /// snapshots already has ("tag already exists on this dataset"); `Corrupt` for a
    /// damaged holds object.
    pub fn hold(&self, snap: &str, tag: &str, recursive: bool) -> Result<Vec<String>> {
        if !snap.contains('@') {
            return Err(SpaError::Invalid(format!("'{snap}' is not a snapshot")));
        }
        self.hold_fs_exists(snap)?;
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let targets = self.same_named_snapshots(snap, recursive);
        let Some(first) = targets.first() else {
            return Err(SpaError::NotFound(format!("cannot hold snapshot '{snap}': dataset does not exist")));
        };
        if tag.len() > TAG_MAX_BYTES {
            return Err(SpaError::Invalid(format!("cannot hold snapshot '{first}': tag too long")));
        }
        if tag.is_empty() || tag.contains('\0') {
            return Err(SpaError::Invalid(format!("cannot hold snapshot '{first}': invalid tag")));
        }
        let mut recs = Vec::new();
        for t in &targets {
            let obj = self.snap_obj(t)?;
            let phys = self.ds_phys(obj)?;
            if read_holds(&*self.mos, &phys)?.contains_key(tag) {
                return Err(SpaError::Invalid(format!("cannot hold snapshot '{t}': tag already exists on this dataset")));
            }
            recs.push((obj, phys));
        }
        let now = now_s();
        for (obj, mut phys) in recs {
            if phys.userrefs_obj == 0 {
                phys.userrefs_obj = zap::create(&*self.mos, &tx, ObjectType::Zap).map_err(dmu_err)?;
            }
            zap::add(&*self.mos, &tx, phys.userrefs_obj, tag.as_bytes(), now).map_err(dmu_err)?;
            phys.userrefs += 1;
            self.set_ds_phys(&tx, obj, &phys)?;
        }
        drop(_a);
        drop(tx);
        drop(_s);
        self.sync()?;
        Ok(targets)
    }

    /// `zfs release [-r] tag fs@snap`: remove hold `tag` from the snapshot (with
    /// `recursive`, from every same-named snapshot of a descendant that has that tag),
    /// in one txg. A snapshot marked for deferred destroy that loses its last hold and
    /// has no clones is destroyed in the same txg.
    ///
    /// Errors (nothing changed): `NotFound` when the file system is missing, or when no
    /// snapshot had the tag — "no such tag on this dataset" or, when the last snapshot
    /// looked at is missing, "dataset does not exist" (libzfs `zfs_release`);
    /// `Invalid` for a name without `@`; `Corrupt` for a damaged holds object.
    pub fn release(&self, snap: &str, tag: &str, recursive: bool) -> Result<Released> {
        let Some((fs, short)) = snap.split_once('@') else {
            return Err(SpaError::Invalid(format!("'{snap}' is not a snapshot")));
        };
        self.hold_fs_exists(snap)?;
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let mut fss = vec![fs.to_string()];
        if recursive {
            let prefix = format!("{fs}/");
            fss.extend(self.dir.lock().datasets.keys().filter(|k| k.starts_with(&prefix)).cloned());
        }
        let mut recs = Vec::new();
        let mut no_tag = false;
        for f in &fss {
            let name = format!("{f}@{short}");
            let Ok(obj) = self.snap_obj(&name) else {
                no_tag = false;
                continue;
            };
            let phys = self.ds_phys(obj)?;
            if read_holds(&*self.mos, &phys)?.contains_key(tag) {
                recs.push((name, obj, phys));
            } else {
                no_tag = true;
            }
        }
        if recs.is_empty() {
            let why = if no_tag { "no such tag on this dataset" } else { "dataset does not exist" };
            return Err(SpaError::NotFound(format!("cannot release hold from snapshot '{snap}': {why}")));
        }
        let mut out = Released::default();
        for (name, obj, mut phys) in recs {
            zap::remove(&*self.mos, &tx, phys.userrefs_obj, tag.as_bytes()).map_err(dmu_err)?;
            phys.userrefs -= 1;
            if phys.userrefs == 0 {
                self.mos.free_object(&tx, phys.userrefs_obj).map_err(dmu_err)?;
                phys.userrefs_obj = 0;
            }
            self.set_ds_phys(&tx, obj, &phys)?;
            out.released.push(name);
            out.destroyed.extend(self.reap_deferred(&tx, obj)?);
        }
        drop(_a);
        drop(tx);
        drop(_s);
        self.sync()?;
        Ok(out)
    }

    /// `zfs holds fs@snap`: the snapshot's holds, tag → creation time (seconds since
    /// the epoch). Errors: `NotFound` ("dataset does not exist"), `Invalid` for a name
    /// without `@`, `Corrupt` for a damaged holds object.
    pub fn holds(&self, snap: &str) -> Result<BTreeMap<String, u64>> {
        if !snap.contains('@') {
            return Err(SpaError::Invalid(format!("'{snap}' is not a snapshot")));
        }
        let _a = self.admin.lock();
        let obj = self.snap_obj(snap)?;
        let phys = self.ds_phys(obj)?;
        let mut out = read_holds(&*self.mos, &phys)?;
        if let Some(t) = self.temp_holds.lock().get(&obj) {
            out.extend(t.iter().map(|(k, v)| (k.clone(), *v)));
        }
        Ok(out)
    }

    /// `zfs holds [-r] fs@snap`: the holds of the snapshot, or with `recursive` of
    /// the same-named snapshot of `fs` and of every descendant that has one (file
    /// systems in name order), each with its holds (possibly none).
    ///
    /// Errors: `NotFound` — the snapshot (without `recursive`) or the file system (with
    /// it) does not exist ("cannot open"); `Invalid` for a name without `@`; `Corrupt`.
    pub fn holds_of(&self, snap: &str, recursive: bool) -> Result<Vec<(String, BTreeMap<String, u64>)>> {
        let Some((fs, _)) = snap.split_once('@') else {
            return Err(SpaError::Invalid(format!("'{snap}' is not a snapshot")));
        };
        if recursive {
            self.head_obj(fs)?;
        } else {
            self.snap_obj(snap)?;
        }
        let mut out = Vec::new();
        for n in self.same_named_snapshots(snap, recursive) {
            let h = self.holds(&n)?;
            out.push((n, h));
        }
        Ok(out)
    }

    /// `zfs destroy -d snap…`: destroy each named snapshot that has neither holds nor
    /// clones now, and mark the others for deferred destroy (`defer_destroy` = on);
    /// all in one txg. Names that do not exist are skipped, as `lzc_destroy_snaps`
    /// does. Returns the snapshots destroyed now.
    ///
    /// Errors: `NotFound` when none of the names exists ("could not find any snapshots
    /// to destroy; check snapshot names."), `Invalid` for a name without `@`.
    pub fn defer_destroy(&self, names: &[String]) -> Result<Vec<String>> {
        if let Some(n) = names.iter().find(|n| !n.contains('@')) {
            return Err(SpaError::Invalid(format!(
                "cannot open '{n}': operation not applicable to datasets of this type"
            )));
        }
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let mut found = Vec::new();
        for n in names {
            if let Ok(obj) = self.snap_obj(n) {
                let phys = self.ds_phys(obj)?;
                found.push((n.clone(), obj, phys));
            }
        }
        if found.is_empty() {
            return Err(SpaError::NotFound("could not find any snapshots to destroy; check snapshot names.".into()));
        }
        // Newest first, so that a range destroys as `zfs destroy` without -d does.
        found.sort_by_key(|(_, _, p)| std::cmp::Reverse(p.creation_txg));
        let mut destroyed = Vec::new();
        for (name, obj, mut phys) in found {
            if phys.userrefs == 0 && phys.num_clones == 0 && self.temp_hold_count(obj) == 0 {
                self.destroy_snapshot_locked(&tx, &name)?;
                destroyed.push(name);
            } else if phys.flags & DS_FLAG_DEFER_DESTROY == 0 {
                phys.flags |= DS_FLAG_DEFER_DESTROY;
                self.set_ds_phys(&tx, obj, &phys)?;
            }
        }
        drop(_a);
        drop(tx);
        drop(_s);
        self.sync()?;
        Ok(destroyed)
    }

    /// `Busy` in OpenZFS's words when snapshot `name` (record `obj`) has user or
    /// temporary holds.
    pub(crate) fn check_not_held(&self, name: &str, obj: u64) -> Result<()> {
        if self.ds_phys(obj)?.userrefs > 0 || self.temp_hold_count(obj) > 0 {
            return Err(held(name));
        }
        Ok(())
    }

    /// Number of temporary holds on snapshot record `obj`.
    pub(crate) fn temp_hold_count(&self, obj: u64) -> u64 {
        self.temp_holds.lock().get(&obj).map_or(0, |m| m.len() as u64)
    }

    /// Put temporary hold `tag` on every snapshot in `snaps` (all or none); they last
    /// until [`Pool::release_temporary`] or the end of the process.
    ///
    /// Errors (nothing held): `NotFound` for a missing snapshot, `Exists` when one
    /// already carries `tag` ("tag already exists on this dataset"), `Invalid` for a
    /// name without `@` or a bad tag.
    pub fn hold_temporary(&self, snaps: &[String], tag: &str) -> Result<TempHolds> {
        if tag.is_empty() || tag.len() > TAG_MAX_BYTES {
            return Err(SpaError::Invalid(format!("cannot hold: invalid tag '{tag}'")));
        }
        let mut objs = Vec::new();
        for s in snaps {
            if !s.contains('@') {
                return Err(SpaError::Invalid(format!("'{s}' is not a snapshot")));
            }
            objs.push((s.clone(), self.snap_obj(s)?));
        }
        let mut th = self.temp_holds.lock();
        if let Some((s, _)) = objs.iter().find(|(_, o)| th.get(o).is_some_and(|m| m.contains_key(tag))) {
            return Err(SpaError::Exists(format!("cannot hold snapshot '{s}': tag already exists on this dataset")));
        }
        let now = now_s();
        for (_, o) in &objs {
            th.entry(*o).or_default().insert(tag.to_string(), now);
        }
        Ok(TempHolds {
            tag: tag.to_string(),
            objs: objs.into_iter().map(|(_, o)| o).collect(),
        })
    }

    /// Release temporary holds taken by [`Pool::hold_temporary`]. A snapshot marked for
    /// deferred destroy that is left with no hold and no clone is destroyed (one txg);
    /// returns the names destroyed.
    pub fn release_temporary(&self, holds: TempHolds) -> Result<Vec<String>> {
        let mut freed = Vec::new();
        {
            let mut th = self.temp_holds.lock();
            for o in &holds.objs {
                if let Some(m) = th.get_mut(o) {
                    m.remove(&holds.tag);
                    if m.is_empty() {
                        th.remove(o);
                        freed.push(*o);
                    }
                }
            }
        }
        let deferred: Vec<u64> = freed
            .into_iter()
            .filter(|o| self.ds_phys(*o).is_ok_and(|p| p.flags & DS_FLAG_DEFER_DESTROY != 0))
            .collect();
        if deferred.is_empty() {
            return Ok(Vec::new());
        }
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let mut out = Vec::new();
        for o in deferred {
            out.extend(self.reap_deferred(&tx, o)?);
        }
        drop(_a);
        drop(tx);
        drop(_s);
        self.sync()?;
        Ok(out)
    }

    /// Destroy snapshot record `sobj` if it is marked for deferred destroy and has no
    /// holds and no clones left; returns its name then. Called, under the locks of a
    /// snapshot destroy and in its txg, after a release or a clone's destroy.
    pub(crate) fn reap_deferred(&self, tx: &TxHold, sobj: u64) -> Result<Option<String>> {
        if sobj == 0 {
            return Ok(None);
        }
        let name = self.dir.lock().snaps.iter().find(|(_, r)| r.obj == sobj).map(|(n, _)| n.clone());
        let Some(name) = name else { return Ok(None) };
        let p = self.ds_phys(sobj)?;
        if p.flags & DS_FLAG_DEFER_DESTROY == 0 || p.userrefs > 0 || p.num_clones > 0 || self.temp_hold_count(sobj) > 0 {
            return Ok(None);
        }
        self.destroy_snapshot_locked(tx, &name)?;
        Ok(Some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_dmu::mem::MemStore;

    #[test]
    fn read_holds_checks_count_and_type() {
        let mos = MemStore::new();
        let tx = mos.hold_tx().unwrap();
        let mut p = DslDatasetPhys::default();
        assert!(read_holds(&mos, &p).unwrap().is_empty());
        p.userrefs = 1;
        assert!(matches!(read_holds(&mos, &p), Err(SpaError::Corrupt(_))));
        let z = zap::create(&mos, &tx, ObjectType::Zap).unwrap();
        zap::add(&mos, &tx, z, b"keep", 77).unwrap();
        zap::add(&mos, &tx, z, b"backup", 78).unwrap();
        p.userrefs_obj = z;
        p.userrefs = 2;
        let h = read_holds(&mos, &p).unwrap();
        assert_eq!(h.into_iter().collect::<Vec<_>>(), vec![("backup".to_string(), 78), ("keep".to_string(), 77)]);
        // A count that disagrees with the ZAP, or another object type, is corruption.
        p.userrefs = 3;
        assert!(matches!(read_holds(&mos, &p), Err(SpaError::Corrupt(_))));
        let other = mos.create_object(&tx, ObjectType::Packed, 512, 512, &[0u8; 8]).unwrap();
        p.userrefs_obj = other;
        p.userrefs = 2;
        assert!(matches!(read_holds(&mos, &p), Err(SpaError::Corrupt(_))));
    }
}
