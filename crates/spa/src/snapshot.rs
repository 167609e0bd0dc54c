//! Snapshots, clones and rollback: the DSL's dataset chains and dead lists.
//!
//! Theory (OpenZFS `dsl_dataset.c`, `dsl_deadlist.c`; Rodeh's "B-trees, shadowing and
//! clones" for the idea). Every block pointer carries its birth txg, so which datasets
//! reference a block follows from *when* it was born:
//!
//! - A head dataset `H` and its snapshots form a chain, oldest first, linked by
//!   `prev_snap_obj` / `next_snap_obj` in their records ([`DslDatasetPhys`]). Each
//!   snapshot froze `H`'s root block pointer at the end of its creation txg.
//! - `H.prev_snap_txg` is the creation txg of its newest snapshot (or of its origin,
//!   for a clone). A block `H` stops referencing (the object set's [`BlockKill`]
//!   hook, in syncing context) is **freed** when it was born after `prev_snap_txg` —
//!   no snapshot can hold it — and otherwise appended to `H`'s **dead list**.
//! - Taking a snapshot `S` of `H` in txg `t`: `S` gets `H`'s root, referenced bytes,
//!   previous-snapshot link and dead list; `H` gets a new, empty dead list and
//!   `prev_snap_txg = t`. Nothing is traversed: the cost is a few MOS records.
//! - The dead list of a dataset `N` therefore holds exactly the blocks born at or
//!   before `N.prev_snap_txg` that died between that snapshot and `N`. Destroying a
//!   snapshot `S` (previous `P`, next `N`) frees the entries of `N`'s dead list born
//!   after `S.prev_snap_txg` (only `S` held them), keeps the others, and moves `S`'s
//!   own dead list into `N`'s. Cost: proportional to the two dead lists, never to the
//!   pool.
//! - A clone `C` of snapshot `S` starts with `S`'s root, `origin_obj = S`,
//!   `prev_snap_txg = S`'s txg; blocks born at or before that belong to the origin
//!   and only ever reach `C`'s dead list. `S` counts its clones and cannot be
//!   destroyed while it has any, nor while it has user holds (`holds.rs`).
//! - Rollback of `H` to its newest snapshot `S` frees every block of `H` born after
//!   `S` (a traversal pruned by birth txg), empties `H`'s dead list (those blocks are
//!   `S`'s again) and points `H` at `S`'s root.
//!
//! Space (what `zfs list` shows; OpenZFS `zfsprops(7)` definitions):
//! `usedbysnapshots` = the dead lists of the chain (entries born after the origin);
//! `usedbydataset` = `referenced` − (`prev.referenced` − `H`'s dead list); a
//! snapshot's `used` = entries of its successor's dead list born after its own
//! `prev_snap_txg`; `written` = `referenced` − (`prev.referenced` − own dead list).
//!
//! On disk: a dead list is a MOS object of type `Deadlist` whose data is an array of
//! 128-byte block pointers and whose bonus is `count u64, bytes u64` (allocated bytes
//! of all entries) and, in most lists, a cut: the bytes of the entries born after one
//! txg, the one a snapshot's `used` asks about ([`DeadlistHeader`]), so that listing
//! snapshots reads one header per snapshot, not its successor's whole list. Taking
//! snapshots is a sync task (`sync.rs`): it runs in the sync of txg `t` right after the file systems wrote their roots and `flush_dead` emptied
//! the kill hooks' pending lists, so one txg sync makes the command durable. Every
//! other change here is made under `sync_lock` (no txg is syncing, so the pending
//! lists are empty), a txg hold and `admin`; the MOS changes become durable together
//! in the next txg. Either way a crash leaves the operation done or not done.
//!
//! Called by: the `zfs snapshot/destroy/rollback/clone/list` paths of the CLI through
//! the `Pool` methods below; the txg sync thread (`sync.rs`) for [`Pool::flush_dead`].

use crate::dsl::{DslDatasetPhys, DS_FLAG_SNAPSHOT};
use crate::pool::{dmu_err, now_s, Pool};
use crate::{Result, SpaError};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tarn_dmu::objset::{BlockKill, Objset};
use tarn_dmu::{ObjectStore, TxHold};
use tarn_phys::{BlkPtr, ObjectType, ZilHeader, BLKPTR_SIZE_BYTES};

/// Largest dead list an operation reads (entries); a larger count is corruption.
pub(crate) const DEADLIST_ENTRIES_MAX: u64 = 1 << 32;

/// A new, empty dead list object; with `cut_txg`, its header keeps the bytes of its
/// entries born after that txg (see [`DeadlistHeader`]).
pub(crate) fn create_deadlist(mos: &dyn ObjectStore, tx: &TxHold, cut_txg: Option<u64>) -> Result<u64> {
    let header = DeadlistHeader {
        count: 0,
        bytes: 0,
        cut: cut_txg.map(|t| (t, 0)),
    };
    mos.create_object(tx, ObjectType::Deadlist, 16 << 10, 128 << 10, &header.encode())
        .map_err(dmu_err)
}

/// A dead list's bonus (docs/format.md §11, "Dead list"): `count u64`, `bytes u64`
/// (allocated bytes of all entries), and optionally a **cut**, `cut_txg u64` and
/// `after_cut_bytes u64`: the allocated bytes of the entries born after `cut_txg`,
/// kept exact by every change of the entries ([`deadlist_append`],
/// [`deadlist_replace`]). A snapshot's `used` is the bytes of its successor's dead
/// list born after the snapshot's own `prev_snap_txg`; a list whose cut is that txg
/// answers it from the header instead of reading every entry (OpenZFS keeps
/// `ds_unique_bytes` in the dataset record for the same listing). The cut is placed
/// where a list gets its predecessor: a head's new list at a snapshot, the successor's
/// list at a snapshot destroy, a clone's list (at its origin's txg, which its
/// `usedbysnapshots` asks for). A list without a cut, or asked about another txg,
/// is read whole, as before; so a stale cut costs time, never a wrong figure. A
/// 16-byte bonus (pools written before the cut existed) has no cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeadlistHeader {
    pub count: u64,
    pub bytes: u64,
    /// `(cut_txg, after_cut_bytes)`.
    pub cut: Option<(u64, u64)>,
}

impl DeadlistHeader {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32);
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.bytes.to_le_bytes());
        if let Some((txg, after)) = self.cut {
            b.extend_from_slice(&txg.to_le_bytes());
            b.extend_from_slice(&after.to_le_bytes());
        }
        b
    }
}

/// The header of dead list `obj`. The object must be a dead list whose data can hold
/// `count` entries, with a bonus of 16 or 32 bytes whose cut bytes are at most its
/// total; anything else is `Corrupt`.
pub(crate) fn deadlist_header(mos: &dyn ObjectStore, obj: u64) -> Result<DeadlistHeader> {
    let bad = |why: &str| SpaError::Corrupt(format!("dead list {obj}: {why}"));
    let info = mos.object_info(obj).map_err(dmu_err)?;
    if info.otype != ObjectType::Deadlist {
        return Err(bad("not a dead list object"));
    }
    let b = mos.bonus(obj).map_err(dmu_err)?;
    let u = |o: usize| b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap()));
    let (Some(count), Some(bytes)) = (u(0), u(8)) else {
        return Err(bad("bad header"));
    };
    let cut = match b.len() {
        16 => None,
        32 => {
            let (Some(txg), Some(after)) = (u(16), u(24)) else {
                unreachable!("32 bytes hold both")
            };
            if after > bytes {
                return Err(bad("more bytes after the cut than in the list"));
            }
            Some((txg, after))
        }
        _ => return Err(bad("bad header")),
    };
    let room = info.maxblkid.saturating_add(1).saturating_mul(u64::from(info.datablksz_bytes));
    if count > DEADLIST_ENTRIES_MAX || count.saturating_mul(BLKPTR_SIZE_BYTES as u64) > room {
        return Err(bad("entry count larger than the object"));
    }
    Ok(DeadlistHeader { count, bytes, cut })
}

/// (entry count, allocated bytes) of a dead list ([`deadlist_header`]).
pub(crate) fn deadlist_summary(mos: &dyn ObjectStore, obj: u64) -> Result<(u64, u64)> {
    let h = deadlist_header(mos, obj)?;
    Ok((h.count, h.bytes))
}

/// Every entry of a dead list.
pub(crate) fn deadlist_read(mos: &dyn ObjectStore, obj: u64) -> Result<Vec<BlkPtr>> {
    let (count, _) = deadlist_summary(mos, obj)?;
    let mut out = Vec::new();
    let chunk = 1024u64;
    let mut i = 0;
    while i < count {
        let n = chunk.min(count - i);
        let mut buf = vec![0u8; (n as usize) * BLKPTR_SIZE_BYTES];
        mos.read(obj, i * BLKPTR_SIZE_BYTES as u64, &mut buf).map_err(dmu_err)?;
        for c in buf.chunks_exact(BLKPTR_SIZE_BYTES) {
            let bp = BlkPtr::decode(c).map_err(|e| SpaError::Corrupt(format!("dead list {obj}: {e}")))?;
            if bp.is_hole() {
                return Err(SpaError::Corrupt(format!("dead list {obj}: hole entry")));
            }
            out.push(bp);
        }
        i += n;
    }
    Ok(out)
}

/// (Allocated bytes of all of dead list `obj`'s entries, of those born after `txg`),
/// from one header read: the second from the header when its cut is `txg`, else by
/// reading every entry.
pub(crate) fn deadlist_bytes_born_after(mos: &dyn ObjectStore, obj: u64, txg: u64) -> Result<(u64, u64)> {
    let h = deadlist_header(mos, obj)?;
    match h.cut {
        Some((cut, after)) if cut == txg => Ok((h.bytes, after)),
        _ => Ok((h.bytes, bytes_born_after(&deadlist_read(mos, obj)?, txg))),
    }
}

/// Append entries to a dead list (its cut, if any, counts those born after it).
pub(crate) fn deadlist_append(mos: &dyn ObjectStore, tx: &TxHold, obj: u64, bps: &[BlkPtr]) -> Result<()> {
    if bps.is_empty() {
        return Ok(());
    }
    let mut h = deadlist_header(mos, obj)?;
    let mut buf = vec![0u8; bps.len() * BLKPTR_SIZE_BYTES];
    for (bp, c) in bps.iter().zip(buf.chunks_exact_mut(BLKPTR_SIZE_BYTES)) {
        bp.encode_into(c);
    }
    // A crafted header near the top of the range is corruption, not an overflow.
    let too_big = || SpaError::Corrupt(format!("dead list {obj}: header counts overflow"));
    let count = h
        .count
        .checked_add(bps.len() as u64)
        .filter(|&c| c <= DEADLIST_ENTRIES_MAX)
        .ok_or_else(too_big)?;
    let bytes = h
        .bytes
        .checked_add(bps.iter().map(|b| b.asize_total_bytes()).sum::<u64>())
        .ok_or_else(too_big)?;
    mos.write(tx, obj, h.count * BLKPTR_SIZE_BYTES as u64, &buf).map_err(dmu_err)?;
    h.count = count;
    h.bytes = bytes;
    if let Some((txg, after)) = &mut h.cut {
        // At most `bytes`: the entries born after the cut are some of all the entries.
        *after += bytes_born_after(bps, *txg);
    }
    mos.set_bonus(tx, obj, &h.encode()).map_err(dmu_err)
}

/// Replace a dead list's entries, keeping its cut txg.
pub(crate) fn deadlist_replace(mos: &dyn ObjectStore, tx: &TxHold, obj: u64, bps: &[BlkPtr]) -> Result<()> {
    let cut_txg = deadlist_header(mos, obj)?.cut.map(|(t, _)| t);
    rewrite_deadlist(mos, tx, obj, bps, cut_txg)
}

/// Replace a dead list's entries and place its cut at `cut_txg` (none: no cut).
pub(crate) fn deadlist_replace_cut(mos: &dyn ObjectStore, tx: &TxHold, obj: u64, bps: &[BlkPtr], cut_txg: Option<u64>) -> Result<()> {
    deadlist_header(mos, obj)?;
    rewrite_deadlist(mos, tx, obj, bps, cut_txg)
}

/// The body of both replaces, for an object already checked to be a dead list.
fn rewrite_deadlist(mos: &dyn ObjectStore, tx: &TxHold, obj: u64, bps: &[BlkPtr], cut_txg: Option<u64>) -> Result<()> {
    mos.free_range(tx, obj, 0, u64::MAX).map_err(dmu_err)?;
    let empty = DeadlistHeader {
        count: 0,
        bytes: 0,
        cut: cut_txg.map(|t| (t, 0)),
    };
    mos.set_bonus(tx, obj, &empty.encode()).map_err(dmu_err)?;
    deadlist_append(mos, tx, obj, bps)
}

/// Allocated bytes of the entries of `bps` born after `txg`.
pub(crate) fn bytes_born_after(bps: &[BlkPtr], txg: u64) -> u64 {
    bps.iter().filter(|b| b.birth_txg > txg).map(|b| b.asize_total_bytes()).sum()
}

/// What a head dataset's kill hook needs: the newest snapshot's txg and the blocks
/// killed in the txg being synced that must go to the dead list.
#[derive(Default)]
pub(crate) struct DeadState {
    prev_snap_txg: AtomicU64,
    pending: Mutex<Vec<BlkPtr>>,
}

/// Space figures of one dataset or snapshot, in allocated bytes (not yet deflated).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DsSpace {
    pub referenced: u64,
    pub used_by_dataset: u64,
    pub used_by_snapshots: u64,
    pub written: u64,
    /// A snapshot's `used`: what destroying it alone would free.
    pub unique: u64,
}

impl Pool {
    /// Install the kill hook on a head dataset's object set (see the module docs).
    pub(crate) fn install_kill(&self, id: u64, os: &Objset, phys: &DslDatasetPhys) {
        let st = self.dead.lock().entry(id).or_default().clone();
        st.prev_snap_txg.store(phys.prev_snap_txg, Ordering::SeqCst);
        let zio = self.zio.clone();
        let hook: BlockKill = Arc::new(move |bp: &BlkPtr, txg: u64| {
            if bp.birth_txg > st.prev_snap_txg.load(Ordering::SeqCst) {
                zio.free_block(bp, txg);
            } else {
                st.pending.lock().push(*bp);
            }
        });
        os.set_block_kill(Some(hook));
    }

    /// Syncing context, after dataset `id`'s object set synced: append the blocks its
    /// kill hook kept to its dead list `deadlist_obj` (MOS, same txg).
    pub(crate) fn flush_dead(&self, tx: &TxHold, id: u64, deadlist_obj: u64) -> Result<()> {
        let Some(st) = self.dead.lock().get(&id).cloned() else { return Ok(()) };
        let pending = std::mem::take(&mut *st.pending.lock());
        deadlist_append(&*self.mos, tx, deadlist_obj, &pending)
    }

    /// Record object of file system `name`; `NotFound` in OpenZFS's words.
    pub(crate) fn head_obj(&self, name: &str) -> Result<u64> {
        self.dir.lock().datasets.get(name).map(|r| r.obj).ok_or_else(|| no_such(name))
    }

    /// Record object of snapshot `name`; `NotFound` in OpenZFS's words.
    pub(crate) fn snap_obj(&self, name: &str) -> Result<u64> {
        self.dir.lock().snaps.get(name).map(|r| r.obj).ok_or_else(|| no_such(name))
    }

    /// `zfs snapshot [-r] fs@snap …`: every named snapshot (and with `recursive`, the
    /// same snapshot name on every descendant) is taken at the same txg. Validation of
    /// every name happens first; nothing changes on error.
    ///
    /// Errors: `Invalid` for a bad name or a name in another pool, `NotFound` for a
    /// missing dataset, `Exists` for an existing snapshot (OpenZFS wording).
    pub fn snapshot(&self, names: &[String], recursive: bool) -> Result<Vec<String>> {
        self.snapshot_ext(names, recursive, None, &BTreeMap::new())
    }

    /// `zfs snapshot [-r] -o prop=value … fs@snap …`: [`Pool::snapshot`], every new
    /// snapshot getting the user properties `props` (snapshots take no native
    /// property: `Invalid`, in OpenZFS's words, before anything changes).
    pub fn snapshot_with_props(&self, names: &[String], recursive: bool, props: &BTreeMap<String, String>) -> Result<Vec<String>> {
        self.snapshot_ext(names, recursive, None, props)
    }

    /// [`Pool::snapshot`], where `guid` (non-zero) is the GUID of the one snapshot
    /// named: `zfs recv` gives the received snapshot the sender's GUID, so the next
    /// incremental stream finds its base. `None`: random GUIDs.
    pub(crate) fn snapshot_with_guid(&self, names: &[String], recursive: bool, guid: Option<u64>) -> Result<Vec<String>> {
        self.snapshot_ext(names, recursive, guid, &BTreeMap::new())
    }

    fn snapshot_ext(&self, names: &[String], recursive: bool, guid: Option<u64>, props: &BTreeMap<String, String>) -> Result<Vec<String>> {
        let first = names.first().map(String::as_str).unwrap_or("");
        let mut clean = BTreeMap::new();
        for (k, v) in props {
            let v =
                crate::dsl::check_prop(k, v).map_err(|e| SpaError::Invalid(format!("cannot create snapshot '{first}': {}", strip_cannot(&e.to_string()))))?;
            if !crate::dsl::is_user_prop(k) {
                return Err(SpaError::Invalid(format!(
                    "cannot create snapshot '{first}': this property can not be modified for snapshots"
                )));
            }
            clean.insert(k.clone(), v);
        }
        let mut targets: Vec<(String, String)> = Vec::new();
        for n in names {
            let Some((fs, snap)) = n.split_once('@') else {
                return Err(SpaError::Invalid(format!(
                    "cannot create snapshot '{n}': missing '@' delimiter in snapshot name"
                )));
            };
            crate::validate_snapshot_name(n).map_err(|e| SpaError::Invalid(format!("cannot create snapshot '{n}': {}", strip_cannot(&e.to_string()))))?;
            if fs.split('/').next() != Some(self.name.as_str()) {
                return Err(SpaError::NotFound(format!("cannot open '{fs}': dataset does not exist")));
            }
            let d = self.dir.lock();
            if !d.datasets.contains_key(fs) {
                return Err(SpaError::NotFound(format!("cannot open '{fs}': dataset does not exist")));
            }
            let prefix = format!("{fs}/");
            let mut fss = vec![fs.to_string()];
            if recursive {
                fss.extend(d.datasets.keys().filter(|k| k.starts_with(&prefix)).cloned());
            }
            for f in fss {
                let full = format!("{f}@{snap}");
                if d.snaps.contains_key(&full) || targets.iter().any(|(a, b)| format!("{a}@{b}") == full) {
                    return Err(SpaError::Exists(format!("cannot create snapshot '{full}': dataset")));
                }
                targets.push((f, snap.to_string()));
            }
        }
        // One sync task: it runs in the sync of the open txg (or a later one), after
        // every file system wrote its root for that txg, so the snapshots freeze
        // everything acknowledged before the command and become durable with it.
        self.run_sync_task(move |pool, tx| pool.snapshot_sync(tx, &targets, guid, &clean))
    }

    /// Syncing context of `zfs snapshot`: check every target again (a dataset may have
    /// gone or a snapshot appeared since the open-context check), then create the
    /// records. Returns the full names made.
    fn snapshot_sync(&self, tx: &TxHold, targets: &[(String, String)], guid: Option<u64>, props: &BTreeMap<String, String>) -> Result<Vec<String>> {
        let _a = self.admin.lock();
        let txg = tx.txg;
        let mut heads = Vec::with_capacity(targets.len());
        for (fs, snap) in targets {
            heads.push(self.head_obj(fs)?);
            let full = format!("{fs}@{snap}");
            if self.dir.lock().snaps.contains_key(&full) {
                return Err(SpaError::Exists(format!("cannot create snapshot '{full}': dataset")));
            }
        }
        let mut made = Vec::new();
        for ((fs, snap), head) in targets.iter().zip(heads) {
            let mut h = self.ds_phys(head)?;
            let s = DslDatasetPhys {
                rootbp: h.rootbp,
                guid: guid.unwrap_or_else(rand::random),
                creation_txg: txg,
                creation_time_s: now_s(),
                used_bytes: h.used_bytes,
                flags: DS_FLAG_SNAPSHOT,
                prev_snap_obj: h.prev_snap_obj,
                prev_snap_txg: h.prev_snap_txg,
                next_snap_obj: head,
                deadlist_obj: h.deadlist_obj,
                ..Default::default()
            };
            let sobj = self.mos.create_object(tx, ObjectType::DslDataset, 512, 512, &s.encode()).map_err(dmu_err)?;
            if h.prev_snap_obj != 0 {
                let mut p = self.ds_phys(h.prev_snap_obj)?;
                if p.next_snap_obj == head {
                    p.next_snap_obj = sobj;
                    self.set_ds_phys(tx, h.prev_snap_obj, &p)?;
                }
            }
            h.prev_snap_obj = sobj;
            h.prev_snap_txg = txg;
            // The new snapshot's `used` is read from this list, born after its
            // `prev_snap_txg`: the list's cut.
            h.deadlist_obj = create_deadlist(&*self.mos, tx, Some(s.prev_snap_txg))?;
            self.set_ds_phys(tx, head, &h)?;
            // Blocks this txg's sync killed went to the old dead list (`flush_dead` ran
            // before the task); from the next txg on, blocks born up to `txg` are the
            // new snapshot's.
            if let Some(st) = self.dead.lock().get(&head) {
                st.prev_snap_txg.store(txg, Ordering::SeqCst);
            }
            let full = format!("{fs}@{snap}");
            self.link_name(tx, &full, sobj)?;
            self.dir.lock().snaps.insert(
                full.clone(),
                crate::dsl::DsRec {
                    obj: sobj,
                    props: BTreeMap::new(),
                },
            );
            if !props.is_empty() {
                self.save_ds_props(tx, sobj, props)?;
                if let Some(r) = self.dir.lock().snaps.get_mut(&full) {
                    r.props = props.clone();
                }
            }
            made.push(full);
        }
        Ok(made)
    }

    /// Names of the snapshots of `fs`, oldest first.
    pub fn snapshots_of(&self, fs: &str) -> Vec<String> {
        let d = self.dir.lock();
        let prefix = format!("{fs}@");
        let mut v: Vec<(u64, String)> = d
            .snaps
            .iter()
            .filter(|(n, _)| n.starts_with(&prefix))
            .map(|(n, r)| (self.ds_phys(r.obj).map(|p| p.creation_txg).unwrap_or(0), n.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Clones (head names) whose origin is snapshot object `sobj`.
    pub(crate) fn clones_of(&self, sobj: u64) -> Vec<String> {
        let d = self.dir.lock();
        d.datasets
            .iter()
            .filter(|(_, r)| self.ds_phys(r.obj).map(|p| p.origin_obj == sobj).unwrap_or(false))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// `zfs destroy fs@snap`: free the blocks only this snapshot holds and splice it
    /// out of its chain. Errors: `NotFound`; `Busy` when it has clones (OpenZFS's
    /// "snapshot has dependent clones" wording) or user holds ("dataset is busy").
    pub fn destroy_snapshot(&self, name: &str) -> Result<()> {
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        self.destroy_snapshot_locked(&tx, name)
    }

    pub(crate) fn destroy_snapshot_locked(&self, tx: &TxHold, name: &str) -> Result<()> {
        let sobj = self.dir.lock().snaps.get(name).map(|r| r.obj).ok_or_else(|| {
            SpaError::NotFound(format!(
                "could not find any snapshots to destroy; check snapshot names.\ncannot destroy '{name}': snapshot does not exist"
            ))
        })?;
        let s = self.ds_phys(sobj)?;
        if s.num_clones > 0 {
            return Err(SpaError::Busy(format!(
                "cannot destroy '{name}': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n{}",
                self.clones_of(sobj).join("\n")
            )));
        }
        if s.userrefs > 0 || self.temp_hold_count(sobj) > 0 {
            return Err(crate::holds::held(name));
        }
        let nobj = s.next_snap_obj;
        let mut n = self.ds_phys(nobj)?;
        let mos = &*self.mos;
        let ndead = deadlist_read(mos, n.deadlist_obj)?;
        let (free, keep): (Vec<BlkPtr>, Vec<BlkPtr>) = ndead.into_iter().partition(|b| b.birth_txg > s.prev_snap_txg);
        for bp in &free {
            self.zio.free_block(bp, tx.txg);
        }
        let mut merged = keep;
        merged.extend(deadlist_read(mos, s.deadlist_obj)?);
        // `n`'s predecessor becomes `s`'s: in the same chain, that snapshot's `used` is
        // read from `n`'s list from now on (the cut at its `prev_snap_txg`); otherwise
        // (`s` was the first, or a clone's first after its origin) `n`'s list is asked
        // about `s`'s `prev_snap_txg`, the clone's origin txg.
        let prev = if s.prev_snap_obj != 0 { Some(self.ds_phys(s.prev_snap_obj)?) } else { None };
        let cut_txg = match &prev {
            Some(p) if p.next_snap_obj == sobj => p.prev_snap_txg,
            _ => s.prev_snap_txg,
        };
        deadlist_replace_cut(mos, tx, n.deadlist_obj, &merged, Some(cut_txg))?;
        n.prev_snap_obj = s.prev_snap_obj;
        n.prev_snap_txg = s.prev_snap_txg;
        self.set_ds_phys(tx, nobj, &n)?;
        if !n.is_snapshot() {
            if let Some(st) = self.dead.lock().get(&nobj) {
                st.prev_snap_txg.store(n.prev_snap_txg, Ordering::SeqCst);
            }
        }
        if let Some(mut p) = prev {
            if p.next_snap_obj == sobj {
                p.next_snap_obj = nobj;
                self.set_ds_phys(tx, s.prev_snap_obj, &p)?;
            }
        }
        self.unlink_name(tx, name)?;
        self.dir.lock().snaps.remove(name);
        self.snap_objsets.lock().remove(&sobj);
        mos.free_object(tx, s.deadlist_obj).map_err(dmu_err)?;
        if s.props_obj != 0 {
            mos.free_object(tx, s.props_obj).map_err(dmu_err)?;
        }
        if s.userrefs_obj != 0 {
            mos.free_object(tx, s.userrefs_obj).map_err(dmu_err)?;
        }
        mos.free_object(tx, sobj).map_err(dmu_err)
    }

    /// Free the blocks of head `obj` (record `h`) that no snapshot or origin holds,
    /// and its dead list; the caller removes the record. Requires that it has no
    /// snapshots of its own left.
    pub(crate) fn destroy_head_blocks(&self, tx: &TxHold, obj: u64, root: &BlkPtr, h: &DslDatasetPhys) -> Result<()> {
        let zio = self.zio.clone();
        let txg = tx.txg;
        tarn_dmu::traverse::traverse_resumable(
            &zio,
            root,
            h.prev_snap_txg.saturating_add(1),
            0,
            &mut |bp, _| zio.free_block(bp, txg),
            &mut |_| false,
        )
        .map_err(dmu_err)?;
        // Dead-list entries were born at or before prev_snap_txg: they belong to the
        // origin (a head without snapshots has an empty dead list otherwise).
        if h.deadlist_obj != 0 {
            self.mos.free_object(tx, h.deadlist_obj).map_err(dmu_err)?;
        }
        if h.props_obj != 0 {
            self.mos.free_object(tx, h.props_obj).map_err(dmu_err)?;
        }
        if h.origin_obj != 0 {
            let mut o = self.ds_phys(h.origin_obj)?;
            o.num_clones = o.num_clones.saturating_sub(1);
            self.set_ds_phys(tx, h.origin_obj, &o)?;
        }
        self.dead.lock().remove(&obj);
        Ok(())
    }

    /// `zfs clone [-p] snap fs`: a new head sharing every block of `snap`.
    pub fn clone_snapshot(&self, snap: &str, target: &str, props: &BTreeMap<String, String>, create_parents: bool) -> Result<()> {
        crate::validate_dataset_name(target)?;
        if target.contains('@') {
            return Err(SpaError::Invalid(format!(
                "cannot create '{target}': snapshot delimiter '@' is not expected here"
            )));
        }
        for (k, v) in props {
            crate::dsl::check_prop(k, v)?;
        }
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let sobj = self.snap_obj(snap)?;
        if target.split('/').next() != Some(self.name.as_str()) {
            return Err(SpaError::Invalid(format!("cannot create '{target}': source and target pools differ")));
        }
        if self.dir.lock().datasets.contains_key(target) {
            return Err(SpaError::Exists(format!("cannot create '{target}': dataset")));
        }
        let missing = self.missing_parents(target);
        if !missing.is_empty() && !create_parents {
            return Err(SpaError::NotFound(format!("cannot create '{target}': parent does not exist")));
        }
        if !target.contains('/') {
            return Err(SpaError::Exists(format!("cannot create '{target}': dataset")));
        }
        for m in missing.iter().rev() {
            self.create_dataset_record(&tx, m, &BTreeMap::new())?;
        }
        let mut s = self.ds_phys(sobj)?;
        self.create_dataset_record_from(&tx, target, props, Some((sobj, &s)))?;
        s.num_clones += 1;
        self.set_ds_phys(&tx, sobj, &s)?;
        drop(_a);
        drop(tx);
        // The clone starts with the origin's root, whose intent-log header belongs to
        // the origin's head: clear it (the next txg writes the clone's own root).
        let os = self.objset_concrete(target)?;
        os.set_zil_header(ZilHeader::default());
        Ok(())
    }

    /// Ancestors of `name` that do not exist yet, nearest first.
    pub(crate) fn missing_parents(&self, name: &str) -> Vec<String> {
        let d = self.dir.lock();
        let mut missing = Vec::new();
        let mut p = name.rfind('/').map(|i| &name[..i]);
        while let Some(par) = p {
            if d.datasets.contains_key(par) {
                break;
            }
            missing.push(par.to_string());
            p = par.rfind('/').map(|i| &par[..i]);
        }
        missing
    }

    /// `zfs rollback [-r] fs@snap`. The caller unmounts the file system first and
    /// mounts it again after. With `destroy_newer`, newer snapshots are destroyed
    /// first (`-r`); otherwise their existence is an error in OpenZFS's wording.
    pub fn rollback(&self, snap: &str, destroy_newer: bool) -> Result<Vec<String>> {
        let newer = self.rollback_plan(snap, destroy_newer, false)?;
        let fs = snap.split_once('@').map(|(f, _)| f.to_string()).unwrap_or_default();
        // Whatever the head has dirty must reach disk before its tree is replaced.
        self.sync()?;
        let _s = self.sync_lock.lock();
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let head = self.head_obj(&fs)?;
        if let Some(os) = self.objsets.lock().get(&head) {
            if os.has_dirty() {
                return Err(SpaError::Busy(format!("cannot rollback '{fs}': dataset is busy")));
            }
        }
        for n in newer.iter().rev() {
            self.destroy_snapshot_locked(&tx, n)?;
        }
        let s = self.ds_phys(self.snap_obj(snap)?)?;
        let mut h = self.ds_phys(head)?;
        let os = self.objsets.lock().remove(&head);
        if let Some(zl) = self.zilogs.lock().remove(&head) {
            zl.destroy(tx.txg);
        }
        let root = os.map(|o| o.root_bp()).unwrap_or(h.rootbp);
        let zio = self.zio.clone();
        let txg = tx.txg;
        tarn_dmu::traverse::traverse_resumable(
            &zio,
            &root,
            s.creation_txg.saturating_add(1),
            0,
            &mut |bp, _| zio.free_block(bp, txg),
            &mut |_| false,
        )
        .map_err(dmu_err)?;
        deadlist_replace(&*self.mos, &tx, h.deadlist_obj, &[])?;
        h.rootbp = s.rootbp;
        h.used_bytes = s.used_bytes;
        self.set_ds_phys(&tx, head, &h)?;
        drop(_a);
        drop(tx);
        drop(_s);
        // Reopen: the snapshot's root carries the intent-log header of its time, whose
        // blocks are long gone; the head starts with an empty log.
        let os = self.objset_concrete(&fs)?;
        os.set_zil_header(ZilHeader::default());
        self.sync()?;
        Ok(newer)
    }

    /// The checks of `zfs rollback [-r] [-R]` without changing anything: the newer
    /// snapshots a rollback to `snap` destroys (oldest first), or OpenZFS's refusal
    /// (newer snapshots without `destroy_newer`; clones of them without `with_clones`,
    /// whose destruction is the caller's, before [`Pool::rollback`]; user holds on
    /// them, `Busy`).
    pub fn rollback_plan(&self, snap: &str, destroy_newer: bool, with_clones: bool) -> Result<Vec<String>> {
        let (fs, _) = snap
            .split_once('@')
            .ok_or_else(|| SpaError::Invalid(format!("cannot rollback '{snap}': operation only applies to snapshots")))?;
        self.snap_obj(snap)?;
        let all = self.snapshots_of(fs);
        let pos = all.iter().position(|n| n == snap).unwrap_or(0);
        let newer: Vec<String> = all[pos + 1..].to_vec();
        if !newer.is_empty() && !destroy_newer {
            return Err(SpaError::Invalid(format!(
                "cannot rollback to '{snap}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{}",
                newer.join("\n")
            )));
        }
        for n in &newer {
            let sobj = self.snap_obj(n)?;
            if !with_clones && self.ds_phys(sobj)?.num_clones > 0 {
                return Err(SpaError::Busy(format!(
                    "cannot rollback to '{snap}': clones of previous snapshots exist\nuse '-R' to force deletion of the following clones and dependents:\n{}",
                    self.clones_of(sobj).join("\n")
                )));
            }
            self.check_not_held(n, sobj)?;
        }
        Ok(newer)
    }

    /// Read-only object set of a snapshot (opened once, then cached).
    pub fn snapshot_objset(&self, name: &str) -> Result<Arc<Objset>> {
        let sobj = self.snap_obj(name)?;
        if let Some(os) = self.snap_objsets.lock().get(&sobj) {
            return Ok(os.clone());
        }
        let s = self.ds_phys(sobj)?;
        let os = Objset::open(self.zio.clone(), self.gate.clone(), &s.rootbp, s.used_bytes).map_err(dmu_err)?;
        os.set_readonly(true);
        self.snap_objsets.lock().insert(sobj, os.clone());
        Ok(os)
    }

    /// Space figures of record `obj` (`p`), in allocated bytes; `rec` reads other
    /// records (the previous snapshot, the successor, the origin).
    pub(crate) fn ds_space(&self, obj: u64, p: &DslDatasetPhys, rec: &dyn Fn(u64) -> Result<DslDatasetPhys>) -> Result<DsSpace> {
        let mos = &*self.mos;
        let referenced = if p.is_snapshot() {
            p.used_bytes
        } else {
            self.objsets.lock().get(&obj).map(|o| o.used_bytes()).unwrap_or(p.used_bytes)
        };
        let (_, dead_bytes) = deadlist_summary(mos, p.deadlist_obj)?;
        let prev_ref = if p.prev_snap_obj != 0 { rec(p.prev_snap_obj)?.used_bytes } else { 0 };
        let shared = prev_ref.saturating_sub(dead_bytes);
        let written = referenced.saturating_sub(shared);
        let mut out = DsSpace {
            referenced,
            written,
            ..Default::default()
        };
        if p.is_snapshot() {
            let n = rec(p.next_snap_obj)?;
            out.unique = deadlist_bytes_born_after(mos, n.deadlist_obj, p.prev_snap_txg)?.1;
        } else {
            // The chain's dead lists, newest first: the head's, then each snapshot's.
            // Entries born after the origin count toward the snapshots; entries born
            // at or before it are origin blocks this clone no longer shares.
            let origin = if p.origin_obj != 0 { Some(rec(p.origin_obj)?) } else { None };
            let origin_txg = origin.as_ref().map_or(0, |o| o.creation_txg);
            let mut snap_bytes = 0u64;
            let mut unshared_origin_bytes = 0u64;
            let mut add = |d: &DslDatasetPhys| -> Result<()> {
                if origin_txg == 0 {
                    snap_bytes += deadlist_summary(mos, d.deadlist_obj)?.1;
                } else {
                    let (total, after) = deadlist_bytes_born_after(mos, d.deadlist_obj, origin_txg)?;
                    snap_bytes += after;
                    unshared_origin_bytes += total.saturating_sub(after);
                }
                Ok(())
            };
            add(p)?;
            let mut cur = p.prev_snap_obj;
            let mut steps = 0u64;
            while cur != 0 && cur != p.origin_obj {
                steps += 1;
                if steps > crate::dsl::DATASETS_MAX {
                    return Err(SpaError::Corrupt("snapshot chain loops".into()));
                }
                let c = rec(cur)?;
                add(&c)?;
                cur = c.prev_snap_obj;
            }
            out.used_by_snapshots = snap_bytes;
            // What destroying the file system (after its snapshots) frees: all it
            // references, less the origin's blocks a clone still shares (zfsprops(7)
            // `usedbydataset`).
            let shared_with_origin = origin.map_or(0, |o| o.used_bytes.saturating_sub(unshared_origin_bytes));
            out.used_by_dataset = referenced.saturating_sub(shared_with_origin);
        }
        Ok(out)
    }
}

fn no_such(name: &str) -> SpaError {
    SpaError::NotFound(format!("cannot open '{name}': dataset does not exist"))
}

/// "cannot X: why" → "why".
fn strip_cannot(e: &str) -> String {
    match e.split_once("': ") {
        Some((_, why)) => why.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_dmu::mem::MemStore;
    use tarn_phys::Dva;

    fn bp(birth_txg: u64, asize_bytes: u64) -> BlkPtr {
        let mut b = BlkPtr {
            lsize_bytes: 4096,
            psize_bytes: 4096,
            otype: ObjectType::FileData,
            checksum_alg: tarn_phys::ChecksumAlg::Fletcher4,
            birth_txg,
            phys_birth_txg: 0,
            dedup: false,
            fill: 1,
            ..BlkPtr::HOLE
        };
        b.dva[0] = Dva {
            vdev: 0,
            asize_bytes,
            offset_bytes: birth_txg << 12,
        };
        b
    }

    #[test]
    fn deadlist_append_replace_and_damage() {
        let mos = MemStore::new();
        let tx = mos.hold_tx().unwrap();
        let dl = create_deadlist(&mos, &tx, None).unwrap();
        assert_eq!(deadlist_summary(&mos, dl).unwrap(), (0, 0));
        assert_eq!(deadlist_header(&mos, dl).unwrap().cut, None, "no cut asked, none kept");
        let v = vec![bp(3, 4096), bp(7, 8192), bp(9, 4096)];
        deadlist_append(&mos, &tx, dl, &v).unwrap();
        assert_eq!(deadlist_summary(&mos, dl).unwrap(), (3, 16384));
        assert_eq!(deadlist_read(&mos, dl).unwrap(), v);
        assert_eq!(bytes_born_after(&v, 5), 12288);
        deadlist_replace(&mos, &tx, dl, &v[1..]).unwrap();
        assert_eq!(deadlist_read(&mos, dl).unwrap(), v[1..].to_vec());
        // A count the object cannot hold, or another object type, is corruption.
        let mut bonus = (1u64 << 30).to_le_bytes().to_vec();
        bonus.extend_from_slice(&0u64.to_le_bytes());
        mos.set_bonus(&tx, dl, &bonus).unwrap();
        assert!(matches!(deadlist_summary(&mos, dl), Err(SpaError::Corrupt(_))));
        assert!(deadlist_read(&mos, dl).is_err());
        let other = mos.create_object(&tx, ObjectType::Packed, 512, 512, &[0u8; 16]).unwrap();
        assert!(matches!(deadlist_summary(&mos, other), Err(SpaError::Corrupt(_))));
    }

    /// The cut's bytes follow every change of the entries exactly, survive a replace,
    /// answer the cut's own txg from the header, and any other txg from the entries.
    #[test]
    fn deadlist_cut_counts_the_entries_born_after_it() {
        let mos = MemStore::new();
        let tx = mos.hold_tx().unwrap();
        let dl = create_deadlist(&mos, &tx, Some(5)).unwrap();
        let h = deadlist_header(&mos, dl).unwrap();
        assert_eq!(
            h,
            DeadlistHeader {
                count: 0,
                bytes: 0,
                cut: Some((5, 0))
            }
        );
        let v = vec![bp(3, 4096), bp(7, 8192), bp(5, 4096), bp(9, 4096)];
        deadlist_append(&mos, &tx, dl, &v[..2]).unwrap();
        deadlist_append(&mos, &tx, dl, &v[2..]).unwrap();
        assert_eq!(
            deadlist_header(&mos, dl).unwrap(),
            DeadlistHeader {
                count: 4,
                bytes: 20480,
                cut: Some((5, 12288))
            }
        );
        for txg in [0, 3, 5, 6, 7, 9, 100] {
            assert_eq!(
                deadlist_bytes_born_after(&mos, dl, txg).unwrap(),
                (20480, bytes_born_after(&v, txg)),
                "txg {txg}"
            );
        }
        // A replace keeps the cut's txg and recounts it; a replace with a new cut moves it.
        deadlist_replace(&mos, &tx, dl, &v[1..3]).unwrap();
        assert_eq!(deadlist_header(&mos, dl).unwrap().cut, Some((5, 8192)));
        deadlist_replace_cut(&mos, &tx, dl, &v, Some(7)).unwrap();
        assert_eq!(deadlist_header(&mos, dl).unwrap().cut, Some((7, 4096)));
        deadlist_replace(&mos, &tx, dl, &[]).unwrap();
        assert_eq!(
            deadlist_header(&mos, dl).unwrap(),
            DeadlistHeader {
                count: 0,
                bytes: 0,
                cut: Some((7, 0))
            }
        );
        // The header answers its own txg: a header that disagrees with the entries (a
        // damaged one) shows through there and nowhere else.
        deadlist_append(&mos, &tx, dl, &v).unwrap();
        let mut h = deadlist_header(&mos, dl).unwrap();
        h.cut = Some((7, 1));
        mos.set_bonus(&tx, dl, &h.encode()).unwrap();
        assert_eq!(deadlist_bytes_born_after(&mos, dl, 7).unwrap().1, 1);
        assert_eq!(deadlist_bytes_born_after(&mos, dl, 6).unwrap().1, bytes_born_after(&v, 6));
        // More bytes after the cut than in the list, or a bonus of another length, is
        // corruption, not a figure.
        h.cut = Some((7, h.bytes + 1));
        mos.set_bonus(&tx, dl, &h.encode()).unwrap();
        assert!(matches!(deadlist_header(&mos, dl), Err(SpaError::Corrupt(_))));
        let mut odd = h.encode();
        odd.truncate(24);
        mos.set_bonus(&tx, dl, &odd).unwrap();
        assert!(matches!(deadlist_summary(&mos, dl), Err(SpaError::Corrupt(_))));
        // Header counts at the top of their range: an append is refused as corrupt.
        let top = create_deadlist(&mos, &tx, Some(5)).unwrap();
        let near = DeadlistHeader {
            count: 0,
            bytes: u64::MAX - 1,
            cut: Some((5, 0)),
        };
        mos.set_bonus(&tx, top, &near.encode()).unwrap();
        assert!(matches!(deadlist_append(&mos, &tx, top, &v), Err(SpaError::Corrupt(_))));
        assert_eq!(deadlist_header(&mos, top).unwrap(), near, "nothing changed");
        // A pool written before the cut: a 16-byte header, read whole when asked.
        let old = mos.create_object(&tx, ObjectType::Deadlist, 16 << 10, 128 << 10, &[0u8; 16]).unwrap();
        deadlist_append(&mos, &tx, old, &v).unwrap();
        assert_eq!(deadlist_header(&mos, old).unwrap().cut, None);
        assert_eq!(mos.bonus(old).unwrap().len(), 16, "an old header stays old");
        assert_eq!(deadlist_bytes_born_after(&mos, old, 5).unwrap().1, bytes_born_after(&v, 5));
    }
}
