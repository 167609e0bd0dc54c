//! # sendrecv — the DSL side of `zfs send` and `zfs recv`
//!
//! Theory. `tarn-send` turns one object set into a stream and a stream into objects;
//! this module decides which object set is sent and where a stream lands, and keeps
//! the pool consistent around a receive (OpenZFS `dmu_recv.c`/`libzfs_sendrecv.c` are
//! the model; the mechanics differ where noted).
//!
//! * **Send** ([`Pool::send_source`]): a stream is always made from a snapshot's root
//!   block pointer, which never changes while the snapshot exists. An incremental
//!   stream (`-i @a`) carries the blocks born after `@a`'s creation txg, so its cost
//!   follows the change, not the dataset. `@a` must be an earlier snapshot of the same
//!   file system.
//! * **Receive** ([`Pool::receive`]): a full stream creates a new file system, empty
//!   and unmounted; an incremental stream lands in an existing file system whose newest
//!   snapshot carries the stream's from-guid (`-F` first rolls back to that snapshot).
//!   While records are applied the file system's record carries the *inconsistent*
//!   flag (bit 1 of the dataset record's flags): it is never mounted, and the caller
//!   unmounts it first. Unlike OpenZFS, an incremental receive writes into the head
//!   itself rather than into a `%recv` clone swapped in at the end, so its old
//!   contents cannot be read while the receive runs.
//! * **Success**: a snapshot named by the caller is taken with the sender's GUID (the
//!   next incremental finds its base by GUID), and the flag is cleared.
//! * **Failure**: without `-s`, everything the receive changed goes: a new file system
//!   is destroyed, an existing one is rolled back to its base snapshot. With `-s`, the
//!   applied records are synced and the resume token is stored in the dataset's
//!   property record under `receive_resume_token` (shown by `zfs get`); `zfs send -t`
//!   continues the stream there, and `zfs recv -A` ([`Pool::receive_abort`]) discards
//!   it.
//! * **Crash**: an import finds inconsistent file systems
//!   ([`Pool::cleanup_interrupted_receives`]): one with a resume token stays for
//!   `zfs send -t`; any other is destroyed (full receive) or rolled back to its newest
//!   snapshot (incremental), as OpenZFS destroys inconsistent datasets at load. A
//!   receive in progress is thus either resumable or gone.
//!
//! Called by: the CLI (`zfs send`, `zfs recv`). Calls: `tarn-send`, the DSL
//! (`dsl.rs`, `snapshot.rs`).

use crate::dsl::DS_FLAG_INCONSISTENT;
use crate::pool::{dmu_err, Pool};
use crate::{Result, SpaError};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use tarn_dmu::objset::Objset;
use tarn_dmu::ObjectStore;
use tarn_send::{RecvInfo, RecvOpts, RecvProgress, ResumeToken, SendError, SendSource, StreamReader};

/// Property-record key of a saved resume token (read-only to users).
pub const RESUME_TOKEN_PROP: &str = "receive_resume_token";

/// Where and how `zfs recv` applies one stream.
#[derive(Debug, Clone, Default)]
pub struct RecvSpec {
    /// The file system the stream lands in (`pool/fs`).
    pub fs: String,
    /// Short name (after `@`) of the snapshot the receive creates.
    pub snap: String,
    /// `-F`: roll an incremental target back to the stream's base (destroying newer
    /// snapshots), or replace an existing full-stream target without children.
    pub force: bool,
    /// `-s`: keep a partially received state and a resume token when the stream
    /// breaks off.
    pub resumable: bool,
    /// Properties of a file system the receive creates (`-o`, or a package's), each
    /// validated as `zfs create` does.
    pub props: BTreeMap<String, String>,
    /// Properties the stream carried (a `-p`/`-R` package's, less `-x` ones): stored
    /// as received values ([`Pool::set_received_props`], source `received`),
    /// replacing those an earlier stream left. `None`: the stream carried none and
    /// received values stay as they are.
    pub received: Option<BTreeMap<String, String>>,
    /// `-o origin=pool/fs@snap`: receive into a new file system made as a clone of
    /// this snapshot. For an incremental stream its GUID must be the stream's
    /// from-GUID; a full stream may name any snapshot (the clone is emptied first).
    pub origin: Option<String>,
}

/// What a successful receive made.
#[derive(Debug, Clone)]
pub struct RecvOutcome {
    /// The snapshot created (`pool/fs@snap`).
    pub snapshot: String,
    /// True when the file system was created by this receive.
    pub created_fs: bool,
    /// What the stream applied.
    pub info: RecvInfo,
}

fn cannot_recv(incremental: bool, why: &str) -> SpaError {
    let kind = if incremental { "incremental" } else { "new filesystem" };
    SpaError::Invalid(format!("cannot receive {kind} stream: {why}"))
}

/// Stream damage (as opposed to a stream that does not fit its target).
fn is_stream_damage(e: &SendError) -> bool {
    matches!(
        e,
        SendError::Io(_) | SendError::Truncated { .. } | SendError::Checksum { .. } | SendError::Corrupt { .. }
    )
}

impl Pool {
    /// The source of `zfs send [-i from] snap`: `snap` is `pool/fs@name`; `from` is
    /// `@a`, `a` or `pool/fs@a`, an earlier snapshot of the same file system, or a
    /// bookmark `#b` / `pool/fs#b` made from one.
    ///
    /// Errors (OpenZFS wording): `Invalid` when `snap` is not a snapshot, when `from`
    /// is in another file system or is not earlier; `NotFound` for a missing snapshot.
    pub fn send_source(&self, snap: &str, from: Option<&str>) -> Result<SendSource> {
        let Some((fs, _)) = snap.split_once('@') else {
            return Err(SpaError::Invalid(format!("cannot send '{snap}': operation only applies to snapshots")));
        };
        let s = self.ds_phys(self.snap_obj(snap)?)?;
        let mut src = SendSource {
            root: s.rootbp,
            from_txg: None,
            to_guid: s.guid,
            from_guid: 0,
            to_name: snap.to_string(),
            creation_time_s: s.creation_time_s,
        };
        if let Some(bm) = from.filter(|f| f.contains('#')) {
            // A bookmark stands for the snapshot it was made from (bookmark.rs).
            let full = match bm.split_once('#') {
                Some(("", short)) => format!("{fs}#{short}"),
                Some((bfs, _)) if bfs != fs => {
                    return Err(SpaError::Invalid("incremental source must be in same filesystem".into()));
                }
                _ => bm.to_string(),
            };
            let b = self.bookmark_info(&full)?;
            if b.creation_txg >= s.creation_txg {
                return Err(SpaError::Invalid(format!(
                    "cannot send '{snap}': incremental source ({full}) is not earlier than it"
                )));
            }
            src.from_txg = Some(b.creation_txg);
            src.from_guid = b.guid;
        } else if let Some(from) = from {
            let full = match from.split_once('@') {
                Some(("", short)) => format!("{fs}@{short}"),
                Some((ffs, _)) if ffs != fs => {
                    return Err(SpaError::Invalid("incremental source must be in same filesystem".into()));
                }
                Some(_) => from.to_string(),
                None => format!("{fs}@{from}"),
            };
            let f = self.ds_phys(self.snap_obj(&full)?)?;
            if f.creation_txg >= s.creation_txg {
                return Err(SpaError::Invalid(format!(
                    "cannot send '{snap}': incremental source ({full}) is not earlier than it"
                )));
            }
            src.from_txg = Some(f.creation_txg);
            src.from_guid = f.guid;
        }
        Ok(src)
    }

    /// GUID of snapshot `name` (`pool/fs@snap`). Errors: `NotFound`.
    pub fn snapshot_guid(&self, name: &str) -> Result<u64> {
        Ok(self.ds_phys(self.snap_obj(name)?)?.guid)
    }

    /// What `zfs diff from [to]` compares: read-only object sets of snapshot `from`
    /// (`pool/fs@a`) and of `to` (`@b`, `pool/fs@b`, or the file system itself,
    /// also when `to` is `None`, as of its newest synced txg after a sync), and the
    /// ids of the objects that may differ ([`tarn_send::changed_objects`] from
    /// `from`'s txg).
    ///
    /// Errors (OpenZFS wording): `Invalid` when `from` is not a snapshot, `to` is in
    /// another file system or not later; `NotFound` for missing datasets.
    pub fn diff_sources(&self, from: &str, to: Option<&str>) -> Result<(Arc<Objset>, Arc<Objset>, Vec<u64>)> {
        let Some((fs, _)) = from.split_once('@') else {
            return Err(SpaError::Invalid(format!("Badly formed snapshot name {from}")));
        };
        let f = self.ds_phys(self.snap_obj(from)?)?;
        let old = self.snapshot_objset(from)?;
        let (new, new_txg) = match to {
            Some(t) if t.contains('@') => {
                let full = if let Some(short) = t.strip_prefix('@') {
                    format!("{fs}@{short}")
                } else {
                    t.to_string()
                };
                if full.split('@').next() != Some(fs) {
                    return Err(SpaError::Invalid(format!("cannot diff: '{full}' is not a snapshot of '{fs}'")));
                }
                let p = self.ds_phys(self.snap_obj(&full)?)?;
                (self.snapshot_objset(&full)?, p.creation_txg)
            }
            Some(t) if t != fs => {
                return Err(SpaError::Invalid(format!("cannot diff: '{from}' is not a snapshot of '{t}'")));
            }
            _ => {
                self.head_obj(fs)?;
                self.sync()?;
                let p = self.ds_phys(self.head_obj(fs)?)?;
                let os = Objset::open(self.zio.clone(), self.gate.clone(), &p.rootbp, p.used_bytes).map_err(dmu_err)?;
                os.set_readonly(true);
                (os, u64::MAX)
            }
        };
        if new_txg <= f.creation_txg {
            return Err(SpaError::Invalid(format!(
                "cannot diff: '{from}' is not an earlier snapshot than the other side"
            )));
        }
        let ids = tarn_send::changed_objects(&self.zio, &new.root_bp(), f.creation_txg).map_err(|e| SpaError::Invalid(format!("cannot diff: {e}")))?;
        Ok((old, new, ids))
    }

    /// The snapshot whose GUID is `guid` (`None` when no snapshot of the pool has it).
    pub fn snapshot_by_guid(&self, guid: u64) -> Option<String> {
        let d = self.dir.lock().clone();
        d.snaps
            .iter()
            .find(|(_, r)| self.ds_phys(r.obj).map(|p| p.guid == guid).unwrap_or(false))
            .map(|(n, _)| n.clone())
    }

    /// The source that resumes the stream of `token` (`zfs send -t`): the snapshot
    /// with the token's to-guid, incremental from the one with its from-guid.
    /// Errors: `NotFound` when either snapshot is gone.
    pub fn resume_source(&self, token: &ResumeToken) -> Result<SendSource> {
        let gone = |what: &str, guid: u64| SpaError::NotFound(format!("cannot resume send: '{what}' snapshot (guid {guid:#x}) no longer exists"));
        // A received copy in the same pool carries the same GUIDs: take the base from
        // the same file system as the snapshot found.
        let guid_of = |n: &String| self.snap_obj(n).and_then(|o| self.ds_phys(o)).map(|p| p.guid).ok();
        let candidates: Vec<String> = self.dir.lock().snaps.keys().cloned().collect();
        let mut found = None;
        for to in candidates.iter().filter(|n| guid_of(n) == Some(token.to_guid)) {
            let fs = to.split('@').next().unwrap_or_default();
            let from = self.snapshots_of(fs).into_iter().find(|n| guid_of(n) == Some(token.from_guid));
            if token.from_guid == 0 || from.is_some() {
                found = Some((to.clone(), from));
                break;
            }
        }
        let (to, from) = found.ok_or_else(|| {
            if self.snapshot_by_guid(token.to_guid).is_none() {
                gone(&token.to_name, token.to_guid)
            } else {
                gone("incremental source", token.from_guid)
            }
        })?;
        self.send_source(&to, from.as_deref())
    }

    /// True when a receive into file system `fs` has not finished (it must not be
    /// mounted). False for a missing dataset.
    pub fn is_inconsistent(&self, fs: &str) -> bool {
        self.head_obj(fs).and_then(|o| self.ds_phys(o)).map(|p| p.is_inconsistent()).unwrap_or(false)
    }

    /// The saved resume token of file system `fs`, if any.
    pub fn resume_token(&self, fs: &str) -> Option<String> {
        self.dir.lock().datasets.get(fs).and_then(|r| r.props.get(RESUME_TOKEN_PROP).cloned())
    }

    fn set_inconsistent(&self, fs: &str, on: bool, token: Option<&str>) -> Result<()> {
        {
            let _s = self.sync_lock.lock();
            self.set_inconsistent_locked(fs, on, token)?;
        }
        self.sync()
    }

    /// [`Pool::set_inconsistent`] without the sync, for a caller holding `sync_lock`.
    fn set_inconsistent_locked(&self, fs: &str, on: bool, token: Option<&str>) -> Result<()> {
        let tx = self.gate.hold_nowait().map_err(dmu_err)?;
        let _a = self.admin.lock();
        let obj = self.head_obj(fs)?;
        let mut p = self.ds_phys(obj)?;
        if on {
            p.flags |= DS_FLAG_INCONSISTENT;
        } else {
            p.flags &= !DS_FLAG_INCONSISTENT;
        }
        self.set_ds_phys(&tx, obj, &p)?;
        let mut props = self.dir.lock().datasets.get(fs).map(|r| r.props.clone()).unwrap_or_default();
        match token {
            Some(t) => props.insert(RESUME_TOKEN_PROP.into(), t.into()),
            None => props.remove(RESUME_TOKEN_PROP),
        };
        self.save_ds_props(&tx, obj, &props)?;
        if let Some(r) = self.dir.lock().datasets.get_mut(fs) {
            r.props = props;
        }
        Ok(())
    }

    /// `zfs recv`: check that the stream read by `reader` (header read) fits `spec`,
    /// apply it, and snapshot the result as `spec.fs@spec.snap` with the stream's
    /// to-guid. The caller unmounts `spec.fs` first (an incremental target) and mounts
    /// it after. What happens on failure is in the module docs.
    ///
    /// Errors: `Invalid`/`NotFound`/`Exists` with OpenZFS's wording before anything
    /// changes (missing or existing target, base mismatch, modified target, bad
    /// properties); `Invalid` "checksum mismatch or incomplete stream" (with the
    /// `zfs send -t` hint when the state was saved) for a damaged stream.
    pub fn receive<R: Read>(&self, reader: &mut StreamReader<R>, spec: &RecvSpec) -> Result<RecvOutcome> {
        for (k, v) in spec.received.iter().flatten() {
            crate::dsl::check_prop(k, v)?;
        }
        let out = self.receive_stream(reader, spec)?;
        if let Some(r) = &spec.received {
            self.set_received_props(&spec.fs, r, true)?;
        }
        Ok(out)
    }

    fn receive_stream<R: Read>(&self, reader: &mut StreamReader<R>, spec: &RecvSpec) -> Result<RecvOutcome> {
        let h = reader.header().clone();
        let incremental = h.is_incremental();
        let full_snap = format!("{}@{}", spec.fs, spec.snap);
        crate::validate_snapshot_name(&full_snap)?;
        if spec.fs.split('/').next() != Some(self.name.as_str()) {
            return Err(SpaError::NotFound(format!("cannot open '{}': dataset does not exist", spec.fs)));
        }
        let exists = self.dir.lock().datasets.contains_key(&spec.fs);
        let token = if exists { self.resume_token(&spec.fs) } else { None };
        if h.is_resuming() {
            let Some(t) = token.as_deref() else {
                return Err(cannot_recv(
                    incremental,
                    &format!("destination '{}' does not have resumable receive state", spec.fs),
                ));
            };
            let t = ResumeToken::decode(t).map_err(|e| SpaError::Corrupt(format!("saved resume token of '{}': {e}", spec.fs)))?;
            let base = if incremental { self.newest_snapshot_guid(&spec.fs)? } else { None };
            let opts = RecvOpts {
                expected_from_guid: base,
                resume: Some(t),
            };
            return self.apply(reader, spec, &opts, false);
        }
        if token.is_some() || (exists && self.is_inconsistent(&spec.fs)) {
            return Err(cannot_recv(
                incremental,
                &format!("destination {} contains partially-complete state from \"zfs receive -s\"", spec.fs),
            ));
        }
        let snap_exists = self.dir.lock().snaps.contains_key(&full_snap);
        if snap_exists && (incremental || !spec.force) && (incremental || !exists) {
            return Err(SpaError::Invalid(format!("cannot restore to {full_snap}: destination already exists")));
        }
        if let Some(origin) = &spec.origin {
            return self.receive_as_clone(reader, spec, origin, exists);
        }
        if incremental {
            if !exists {
                return Err(cannot_recv(true, &format!("destination '{}' does not exist", spec.fs)));
            }
            let snaps = self.snapshots_of(&spec.fs);
            let base = snaps
                .iter()
                .find(|n| self.snap_obj(n).and_then(|o| self.ds_phys(o)).map(|p| p.guid == h.from_guid).unwrap_or(false))
                .cloned();
            let newest = snaps.last().cloned();
            match (&base, spec.force) {
                (Some(b), true) => {
                    if self.rollback_plan(b, true, false).is_err() {
                        return Err(cannot_recv(true, &format!("destination {} has snapshots with clones newer than {b}", spec.fs)));
                    }
                    self.rollback(b, true)?;
                }
                (Some(b), false) if Some(b) == newest.as_ref() => {
                    if self.written_since(&spec.fs, b)? != 0 {
                        return Err(cannot_recv(
                            true,
                            &format!("destination {} has been modified\nsince most recent snapshot", spec.fs),
                        ));
                    }
                }
                _ => {
                    return Err(cannot_recv(
                        true,
                        &format!("most recent snapshot of {} does not\nmatch incremental source", spec.fs),
                    ));
                }
            }
            let opts = RecvOpts {
                expected_from_guid: Some(h.from_guid),
                resume: None,
            };
            self.set_inconsistent(&spec.fs, true, None)?;
            return self.apply(reader, spec, &opts, false);
        }
        // A full stream.
        if exists {
            if !spec.force {
                return Err(cannot_recv(
                    false,
                    &format!("destination '{}' exists\nmust specify -F to overwrite it", spec.fs),
                ));
            }
            let prefix = format!("{}/", spec.fs);
            if self.dir.lock().datasets.keys().any(|k| k.starts_with(&prefix)) {
                return Err(cannot_recv(
                    false,
                    &format!("destination '{}' has children; cannot overwrite it with -F", spec.fs),
                ));
            }
            self.destroy_dataset_ext(&spec.fs, true, false)?;
            self.sync()?;
        }
        // Create the file system and flag it inconsistent in one txg (txgs close only
        // in `sync_once`, under `sync_lock`). Were a txg synced between the two, by the
        // txg timer say, a crash there would leave an empty, consistent file system
        // that the import's cleanup keeps: a receive neither resumable nor gone.
        {
            let _s = self.sync_lock.lock();
            self.create_dataset(&spec.fs, &spec.props)?;
            if let Some(r) = &spec.received {
                // Before the data: a received `compression` applies to it.
                self.set_received_props(&spec.fs, r, true)?;
            }
            self.set_inconsistent_locked(&spec.fs, true, None)?;
        }
        self.sync()?;
        self.apply(reader, spec, &RecvOpts::default(), true)
    }

    /// `zfs recv -o origin=snap`: an incremental stream whose base is `origin` lands in
    /// a new clone of `origin` (created and flagged inconsistent in one txg, like a
    /// full receive's file system); a failure destroys the clone.
    ///
    /// Errors, before anything changes: `NotFound` for a missing origin; `Invalid`
    /// when the target exists, or the origin is not the base of an incremental
    /// stream. A full stream goes to [`Pool::receive_full_as_clone`].
    fn receive_as_clone<R: Read>(&self, reader: &mut StreamReader<R>, spec: &RecvSpec, origin: &str, exists: bool) -> Result<RecvOutcome> {
        let h = reader.header().clone();
        if !origin.contains('@') {
            return Err(SpaError::Invalid(format!("cannot receive: '{origin}' is not a snapshot")));
        }
        let oguid = self.ds_phys(self.snap_obj(origin)?)?.guid;
        let incremental = h.is_incremental();
        if exists {
            return Err(cannot_recv(
                incremental,
                &format!("destination '{}' exists\n-o origin= needs a new file system", spec.fs),
            ));
        }
        if !incremental {
            return self.receive_full_as_clone(reader, spec, origin);
        }
        if oguid != h.from_guid {
            return Err(cannot_recv(
                true,
                &format!("most recent snapshot of {} does not\nmatch incremental source", spec.fs),
            ));
        }
        self.create_receiving_clone(origin, spec)?;
        self.sync()?;
        let opts = RecvOpts {
            expected_from_guid: Some(h.from_guid),
            resume: None,
        };
        self.apply(reader, spec, &opts, true)
    }

    /// The target of a receive with `-o origin=`: after a sync, a clone of `origin`
    /// named `spec.fs`, with the receive's properties, flagged inconsistent in the
    /// same txg that creates it (txgs close only under `sync_lock`).
    fn create_receiving_clone(&self, origin: &str, spec: &RecvSpec) -> Result<()> {
        self.sync()?;
        let _s = self.sync_lock.lock();
        self.clone_snapshot(origin, &spec.fs, &spec.props, false)?;
        if let Some(r) = &spec.received {
            self.set_received_props(&spec.fs, r, true)?;
        }
        self.set_inconsistent_locked(&spec.fs, true, None)
    }

    /// `zfs recv -o origin=snap` of a full stream. OpenZFS makes the stream's file
    /// system a clone of the named snapshot, and any existing snapshot will do: here a
    /// new clone of `origin` is emptied of every object it inherited (their blocks
    /// stay with the origin), and the stream is then received into it as into a new
    /// file system. The result has the stream's contents and `origin` as its origin,
    /// so the origin cannot be destroyed while it exists. A failure destroys the clone.
    fn receive_full_as_clone<R: Read>(&self, reader: &mut StreamReader<R>, spec: &RecvSpec, origin: &str) -> Result<RecvOutcome> {
        self.create_receiving_clone(origin, spec)?;
        let emptied = self
            .objset_concrete(&spec.fs)
            .and_then(|os| tarn_send::recv::free_objects(&os, 1, u64::MAX).map_err(dmu_err));
        if let Err(e) = emptied.and_then(|_freed| self.sync()) {
            let _ = self.discard_receive(&spec.fs);
            return Err(e);
        }
        self.apply(reader, spec, &RecvOpts::default(), true)
    }

    /// GUID of the newest snapshot of `fs`, or for a clone without snapshots of its
    /// origin (the base of a receive with `-o origin=`).
    fn newest_snapshot_guid(&self, fs: &str) -> Result<Option<u64>> {
        match self.snapshots_of(fs).last() {
            Some(n) => Ok(Some(self.ds_phys(self.snap_obj(n)?)?.guid)),
            None => {
                let h = self.ds_phys(self.head_obj(fs)?)?;
                Ok(if h.origin_obj != 0 { Some(self.ds_phys(h.origin_obj)?.guid) } else { None })
            }
        }
    }

    /// Apply the records, then finish (snapshot, clear the flag) or clean up.
    fn apply<R: Read>(&self, reader: &mut StreamReader<R>, spec: &RecvSpec, opts: &RecvOpts, created: bool) -> Result<RecvOutcome> {
        let incremental = reader.header().is_incremental();
        let os = self.objset_concrete(&spec.fs)?;
        let mut progress = RecvProgress::default();
        match tarn_send::receive_stream(reader, &os, opts, &mut progress) {
            Ok(info) => {
                let snap = format!("{}@{}", spec.fs, spec.snap);
                self.snapshot_with_guid(std::slice::from_ref(&snap), false, Some(info.header.to_guid))?;
                self.set_inconsistent(&spec.fs, false, None)?;
                Ok(RecvOutcome {
                    snapshot: snap,
                    created_fs: created,
                    info,
                })
            }
            Err(e) => {
                let detail = e.to_string();
                let saved = if spec.resumable && is_stream_damage(&e) {
                    os.wait_synced().ok().and_then(|_| progress.resume_token()).map(|t| t.encode())
                } else {
                    None
                };
                if let Some(t) = &saved {
                    self.set_inconsistent(&spec.fs, true, Some(t))?;
                    return Err(cannot_recv(
                        incremental,
                        &format!(
                            "checksum mismatch or incomplete stream.\nPartially received snapshot is saved.\nA resuming stream can be generated on the sending system by running:\n    zfs send -t {t}\n({detail})"
                        ),
                    ));
                }
                let undo = self.discard_receive(&spec.fs);
                let why = if is_stream_damage(&e) {
                    format!("checksum mismatch or incomplete stream ({detail})")
                } else {
                    detail
                };
                if let Err(u) = undo {
                    return Err(cannot_recv(incremental, &format!("{why}; the partial state could not be discarded: {u}")));
                }
                Err(cannot_recv(incremental, &why))
            }
        }
    }

    /// Throw away an unfinished receive into `fs`: roll back to its newest snapshot
    /// (the incremental base), or destroy it when it has none (a full receive).
    fn discard_receive(&self, fs: &str) -> Result<()> {
        match self.snapshots_of(fs).last() {
            Some(base) => {
                let base = base.clone();
                self.rollback(&base, false)?;
                self.set_inconsistent(fs, false, None)
            }
            None => {
                self.destroy_dataset_ext(fs, false, false)?;
                self.sync()
            }
        }
    }

    /// `zfs recv -A fs`: discard the saved partial state of an interrupted `-s`
    /// receive. Errors: `Invalid` when `fs` has none ("does not have any resumable
    /// receive state to abort").
    pub fn receive_abort(&self, fs: &str) -> Result<()> {
        self.head_obj(fs)?;
        if self.resume_token(fs).is_none() && !self.is_inconsistent(fs) {
            return Err(SpaError::Invalid(format!("'{fs}' does not have any resumable receive state to abort")));
        }
        self.discard_receive(fs)
    }

    /// At import: discard every unfinished receive that has no resume token (the
    /// module docs say why). Returns one note per file system touched, for the
    /// import's notes; errors are notes too (the pool stays imported).
    pub fn cleanup_interrupted_receives(&self) -> Vec<String> {
        if self.gate.is_readonly() {
            return Vec::new();
        }
        let names: Vec<String> = self.dir.lock().datasets.keys().cloned().collect();
        let mut notes = Vec::new();
        for fs in names {
            if !self.is_inconsistent(&fs) || self.resume_token(&fs).is_some() {
                continue;
            }
            match self.discard_receive(&fs) {
                Ok(()) => notes.push(format!("discarded the unfinished receive into '{fs}'")),
                Err(e) => notes.push(format!("could not discard the unfinished receive into '{fs}': {e}")),
            }
        }
        notes
    }
}
