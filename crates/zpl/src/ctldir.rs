//! # ctldir — the `.zfs` control directory: inode numbering, snapshot slots, the source
//!
//! Theory: OpenZFS gives the root of every mounted file system a directory `.zfs` that
//! exists on no disk (`zfs_ctldir.c`). It holds `snapshot`, whose entries are the file
//! system's snapshots by short name, each showing that snapshot's files read-only, and
//! `shares` (SMB share data in OpenZFS; here always an empty directory, as OpenZFS
//! shows it when nothing is shared). This module owns the state behind it: the inode
//! numbering of everything under `.zfs`, the table of snapshot *slots*, and the
//! [`SnapshotSource`] trait through which the layer that knows the pool says which
//! snapshots exist. [`crate::vfs::Vfs`] routes each POSIX call to the live file system,
//! a fixed control node or a snapshot. Nothing here is stored on disk.
//!
//! ## Inode numbers
//! Live inode numbers are object ids, below 2^60 (the zpl limit), so bit 63 is clear;
//! every number under `.zfs` has bit 63 set ([`CTL_INO_BIT`]) and cannot collide:
//!
//! | bit 63 | bits 62..48 | bits 47..0 | names |
//! |--------|-------------|------------|-------|
//! | 0 | object id ||  the live file system |
//! | 1 | 0 | 1, 2, 3 | `.zfs`, `.zfs/snapshot`, `.zfs/shares` ([`CTL_INO_ROOT`], [`CTL_INO_SNAPDIR`], [`CTL_INO_SHARES`]) |
//! | 1 | slot 1..=[`SLOT_MAX`] | 0 | the root directory of the snapshot in that slot |
//! | 1 | slot | object id | that object of the snapshot in that slot |
//!
//! A snapshot's root directory is numbered as object 0 (the meta-dnode, never a file),
//! so its number is known without opening the snapshot: the real root object maps to 0
//! and back ([`snap_ino`], [`decode`]). Objects at or above 2^48 (OpenZFS's
//! `DN_MAX_OBJECT`) cannot be numbered and are refused with `Overflow` (EOVERFLOW).
//!
//! ## Slots
//! A snapshot gets a slot (the lowest free number) the first time it is listed or looked
//! up under `.zfs/snapshot`, and keeps it while it exists, so its inode numbers are stable
//! for the life of the mount. States of a slot: *named* (a name, not yet opened) →
//! *open* (the snapshot's object set and a read-only [`Fs`] over it) → *dead* (the
//! snapshot was destroyed, or replaced by another snapshot of the same name) → *free*.
//! A dead slot answers every access with `Stale` (ESTALE); it becomes free when the
//! kernel has forgotten every inode of it (`refs`, the count of successful lookups not
//! yet forgotten, reaches 0), and only then may its number serve another snapshot: the
//! kernel never holds an inode number that now names something else.
//!
//! Which snapshot a slot shows is checked on every access: the slot's name is opened
//! through the source again and must give the very object set the slot opened
//! (`Arc` identity; the pool caches one object set per snapshot). A missing name or a
//! different object set kills the slot. The list is never cached here: `readdir` of
//! `.zfs/snapshot` asks the source each time and kills the slots of names that left it.
//!
//! Invariants: `by_name` maps each name to its one live (non-dead) slot and nothing
//! else (`Slots::kill`, `Slots::slot_for`); a free slot is `None` in the table; slot 0
//! is never handed out (it numbers the fixed nodes).
//!
//! Locks: the slot table is one mutex inside [`crate::vfs::Vfs`], a leaf: it is never
//! held while calling the source or a file system.
//!
//! Limits: at most [`SLOT_MAX`] (32767) snapshots of one file system can have a slot at
//! once; a lookup beyond that fails with `Overflow` and a listing leaves the rest out
//! (logged).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tarn_dmu::ObjectStore;

use crate::{Fs, Result, ZplError};

/// Name of the control directory in the root of every file system.
pub const CTLDIR_NAME: &[u8] = b".zfs";
/// Name of the snapshot directory inside `.zfs`.
pub const SNAPDIR_NAME: &[u8] = b"snapshot";
/// Name of the (always empty) shares directory inside `.zfs`.
pub const SHAREDIR_NAME: &[u8] = b"shares";

/// Set in every inode number under `.zfs`; clear in every live inode number.
pub const CTL_INO_BIT: u64 = 1 << 63;
/// Bits of a snapshot inode number that carry the object id.
pub const SNAP_OBJ_BITS: u32 = 48;
/// Highest slot number (15 bits between the object id and [`CTL_INO_BIT`]).
pub const SLOT_MAX: u32 = (1 << (63 - SNAP_OBJ_BITS)) - 1;
/// Inode number of `.zfs`.
pub const CTL_INO_ROOT: u64 = CTL_INO_BIT | 1;
/// Inode number of `.zfs/snapshot`.
pub const CTL_INO_SNAPDIR: u64 = CTL_INO_BIT | 2;
/// Inode number of `.zfs/shares`.
pub const CTL_INO_SHARES: u64 = CTL_INO_BIT | 3;

const SNAP_OBJ_MASK: u64 = (1 << SNAP_OBJ_BITS) - 1;

/// The `snapdir` property (zfsprops(7)): whether `.zfs` is listed in the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapDir {
    /// `.zfs` is left out of `readdir` of the root but can be looked up and entered.
    #[default]
    Hidden,
    /// `.zfs` is listed like any other directory.
    Visible,
}

impl SnapDir {
    /// Parse the property value (`hidden` or `visible`).
    pub fn parse(v: &str) -> Option<SnapDir> {
        match v {
            "hidden" => Some(SnapDir::Hidden),
            "visible" => Some(SnapDir::Visible),
            _ => None,
        }
    }
}

/// The snapshots of one file system, as the layer that knows the pool sees them now.
/// Called on every lookup and listing under `.zfs/snapshot` and on every access to a
/// snapshot's files, so both calls should be cheap; neither may call back into the
/// [`crate::vfs::Vfs`] that holds the source.
pub trait SnapshotSource: Send + Sync {
    /// Short names (the part after `@`) of the file system's snapshots, oldest first.
    fn list(&self) -> Vec<String>;
    /// The read-only object set of snapshot `name` (short name). While the snapshot
    /// exists every call must return the same `Arc` (identity is how a snapshot
    /// destroyed and re-created under the same name is told apart).
    /// Errors: `NotFound` when no such snapshot exists (now); `Io` when it cannot be
    /// opened.
    fn open(&self, name: &str) -> Result<Arc<dyn ObjectStore>>;
}

/// A source with no snapshots: `.zfs/snapshot` stays empty (file systems mounted
/// without a pool, as in tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSnapshots;

impl SnapshotSource for NoSnapshots {
    fn list(&self) -> Vec<String> {
        Vec::new()
    }

    fn open(&self, _name: &str) -> Result<Arc<dyn ObjectStore>> {
        Err(ZplError::NotFound)
    }
}

/// One of the fixed directories under the control directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtlNode {
    /// `.zfs`.
    Root,
    /// `.zfs/snapshot`.
    SnapDir,
    /// `.zfs/shares`.
    Shares,
}

impl CtlNode {
    /// Its inode number.
    pub fn ino(self) -> u64 {
        match self {
            CtlNode::Root => CTL_INO_ROOT,
            CtlNode::SnapDir => CTL_INO_SNAPDIR,
            CtlNode::Shares => CTL_INO_SHARES,
        }
    }
}

/// What an inode number names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// An inode of the live file system (its object id).
    Live(u64),
    /// A fixed control directory.
    Ctl(CtlNode),
    /// Object `obj` of the snapshot in `slot`; `obj == 0` is the snapshot's root.
    Snap {
        /// Slot number, 1..=[`SLOT_MAX`].
        slot: u32,
        /// Object id, or 0 for the root directory.
        obj: u64,
    },
}

/// Split an inode number into what it names. `None` for a number under `.zfs` that no
/// node ever had (slot 0 with an unknown object).
pub fn decode(ino: u64) -> Option<Node> {
    if ino & CTL_INO_BIT == 0 {
        return Some(Node::Live(ino));
    }
    let slot = ((ino & !CTL_INO_BIT) >> SNAP_OBJ_BITS) as u32;
    let obj = ino & SNAP_OBJ_MASK;
    if slot != 0 {
        return Some(Node::Snap { slot, obj });
    }
    match ino {
        CTL_INO_ROOT => Some(Node::Ctl(CtlNode::Root)),
        CTL_INO_SNAPDIR => Some(Node::Ctl(CtlNode::SnapDir)),
        CTL_INO_SHARES => Some(Node::Ctl(CtlNode::Shares)),
        _ => None,
    }
}

/// The inode number of object `obj` of the snapshot in `slot`, whose root directory is
/// object `root`. Errors: `Overflow` for an object id ≥ 2^48.
pub fn snap_ino(slot: u32, root: u64, obj: u64) -> Result<u64> {
    debug_assert!((1..=SLOT_MAX).contains(&slot));
    let o = if obj == root { 0 } else { obj };
    if o > SNAP_OBJ_MASK {
        return Err(ZplError::Overflow);
    }
    Ok(CTL_INO_BIT | u64::from(slot) << SNAP_OBJ_BITS | o)
}

/// The object a snapshot inode's object part names (0 is the root).
pub(crate) fn snap_obj(root: u64, obj: u64) -> u64 {
    if obj == 0 {
        root
    } else {
        obj
    }
}

/// One snapshot slot; see the module docs for its states.
struct Slot {
    name: String,
    /// Successful lookups of this slot's inodes not yet forgotten by the kernel.
    refs: u64,
    /// The snapshot's object set and the read-only file system over it, once opened.
    open: Option<(Arc<dyn ObjectStore>, Arc<Fs>)>,
    /// Gone or replaced: every access is `Stale`.
    dead: bool,
}

/// The table of snapshot slots (index = slot number; index 0 unused).
#[derive(Default)]
pub(crate) struct Slots {
    slots: Vec<Option<Slot>>,
    by_name: HashMap<String, u32>,
    /// Free numbers below `slots.len()`.
    free: BTreeSet<u32>,
}

/// What [`Slots::bind`] found.
pub(crate) enum Bind {
    /// The slot's file system.
    Ready(Arc<Fs>),
    /// Live but not opened yet: open the snapshot and bind again with it.
    Unopened,
    /// Dead, free, or now another snapshot's: the access is `Stale`.
    Gone,
}

fn same_store(a: &Arc<dyn ObjectStore>, b: &Arc<dyn ObjectStore>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const (), Arc::as_ptr(b) as *const ())
}

impl Slots {
    fn get(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The live slot of `name`, given one (the lowest free number) if it has none.
    /// Errors: `Overflow` when all [`SLOT_MAX`] slots are taken.
    pub(crate) fn slot_for(&mut self, name: &str) -> Result<u32> {
        if let Some(&s) = self.by_name.get(name) {
            return Ok(s);
        }
        if self.slots.is_empty() {
            self.slots.push(None); // slot 0 numbers the fixed nodes
        }
        let slot = match self.free.pop_first() {
            Some(s) => s as usize,
            None if self.slots.len() <= SLOT_MAX as usize => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(ZplError::Overflow),
        };
        self.slots[slot] = Some(Slot {
            name: name.to_string(),
            refs: 0,
            open: None,
            dead: false,
        });
        self.by_name.insert(name.to_string(), slot as u32);
        Ok(slot as u32)
    }

    /// The name of `slot` if it is live (not dead, not free).
    pub(crate) fn live_name(&self, slot: u32) -> Option<String> {
        self.get(slot).filter(|s| !s.dead).map(|s| s.name.clone())
    }

    /// The file system of `slot` if it was opened and is not dead (for `release`,
    /// which must not fail because the snapshot went away).
    pub(crate) fn opened_fs(&self, slot: u32) -> Option<Arc<Fs>> {
        self.get(slot).filter(|s| !s.dead).and_then(|s| s.open.as_ref().map(|(_, fs)| fs.clone()))
    }

    /// Bind `slot` (live, named `name`) to object set `os`: [`Bind::Ready`] with the
    /// slot's file system when it is open on `os` (or `fs` is given and installed now),
    /// [`Bind::Unopened`] when it has none yet and `fs` is `None`, [`Bind::Gone`] when
    /// the slot is dead, renamed, or open on another object set (then it is killed:
    /// the name now names another snapshot).
    pub(crate) fn bind(&mut self, slot: u32, name: &str, os: &Arc<dyn ObjectStore>, fs: Option<Arc<Fs>>) -> Bind {
        let Some(s) = self.get_mut(slot).filter(|s| !s.dead && s.name == name) else {
            return Bind::Gone;
        };
        match &s.open {
            Some((held, held_fs)) if same_store(held, os) => Bind::Ready(held_fs.clone()),
            Some(_) => {
                self.kill(slot);
                Bind::Gone
            }
            None => match fs {
                Some(fs) => {
                    s.open = Some((os.clone(), fs.clone()));
                    Bind::Ready(fs)
                }
                None => Bind::Unopened,
            },
        }
    }

    /// Kill `slot` if it is still the slot named `name` (its snapshot was not found).
    pub(crate) fn kill_named(&mut self, slot: u32, name: &str) {
        if self.get(slot).is_some_and(|s| s.name == name) {
            self.kill(slot);
        }
    }

    /// The snapshot of `slot` is gone: later accesses are `Stale`; the slot is freed
    /// once the kernel holds none of its inodes.
    pub(crate) fn kill(&mut self, slot: u32) {
        let Some(s) = self.get_mut(slot) else { return };
        if s.dead {
            return;
        }
        s.dead = true;
        s.open = None;
        let (name, refs) = (s.name.clone(), s.refs);
        if self.by_name.get(&name) == Some(&slot) {
            self.by_name.remove(&name);
        }
        if refs == 0 {
            self.free_slot(slot);
        }
    }

    fn free_slot(&mut self, slot: u32) {
        self.slots[slot as usize] = None;
        self.free.insert(slot);
    }

    /// The kernel got one more inode of `slot` (a successful lookup).
    pub(crate) fn add_ref(&mut self, slot: u32) {
        if let Some(s) = self.get_mut(slot) {
            s.refs += 1;
        }
    }

    /// The kernel forgot `n` lookups of an inode of `slot`; a dead slot with none left
    /// is freed.
    pub(crate) fn forget(&mut self, slot: u32, n: u64) {
        let Some(s) = self.get_mut(slot) else { return };
        s.refs = s.refs.saturating_sub(n);
        if s.dead && s.refs == 0 {
            self.free_slot(slot);
        }
    }

    /// Bring the table in line with `names` (the source's list now): slots of names
    /// not in it die, names without a slot get one. Returns `(slot, name)` of every
    /// listed snapshot that has a slot, by slot number.
    pub(crate) fn reconcile(&mut self, names: &[String]) -> Vec<(u32, String)> {
        let listed: HashSet<&str> = names.iter().map(String::as_str).collect();
        let gone: Vec<u32> = self.by_name.iter().filter(|(n, _)| !listed.contains(n.as_str())).map(|(_, &s)| s).collect();
        for s in gone {
            self.kill(s);
        }
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            match self.slot_for(n) {
                Ok(s) => out.push((s, n.clone())),
                Err(_) => tracing::warn!(snapshot = %n, "no free .zfs/snapshot slot; left out of the listing"),
            }
        }
        out.sort();
        out
    }

    /// Number of slots in use, dead ones included (tests).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_round_trips_and_never_meets_live_numbers() {
        assert_eq!(decode(5), Some(Node::Live(5)));
        assert_eq!(decode((1 << 60) - 1), Some(Node::Live((1 << 60) - 1)));
        assert_eq!(decode(CTL_INO_ROOT), Some(Node::Ctl(CtlNode::Root)));
        assert_eq!(decode(CTL_INO_SNAPDIR), Some(Node::Ctl(CtlNode::SnapDir)));
        assert_eq!(decode(CTL_INO_SHARES), Some(Node::Ctl(CtlNode::Shares)));
        assert_eq!(decode(CTL_INO_BIT | 9), None);
        for (slot, obj) in [(1, 2), (1, 7), (SLOT_MAX, 2), (SLOT_MAX, SNAP_OBJ_MASK), (300, 1 << 40)] {
            let ino = snap_ino(slot, 2, obj).unwrap();
            assert_ne!(ino & CTL_INO_BIT, 0);
            let want = if obj == 2 { 0 } else { obj };
            assert_eq!(decode(ino), Some(Node::Snap { slot, obj: want }));
            assert_eq!(snap_obj(2, want), obj);
        }
        assert_eq!(snap_ino(1, 2, 2).unwrap(), CTL_INO_BIT | 1 << 48);
        assert_eq!(snap_ino(1, 2, 1 << 48), Err(ZplError::Overflow));
    }

    #[test]
    fn slots_are_reused_only_when_dead_and_forgotten() {
        let mut t = Slots::default();
        let a = t.slot_for("a").unwrap();
        let b = t.slot_for("b").unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(t.slot_for("a").unwrap(), 1);
        t.add_ref(a);
        t.add_ref(a);
        t.kill(a);
        assert_eq!(t.live_name(a), None);
        // Dead but still held by the kernel: "a" again gets a new number.
        assert_eq!(t.slot_for("a").unwrap(), 3);
        t.forget(a, 1);
        assert_eq!(t.in_use(), 3);
        t.forget(a, 1);
        assert_eq!(t.in_use(), 2);
        assert_eq!(t.slot_for("c").unwrap(), 1);
        // A listing kills what left it and numbers what is new.
        let live = t.reconcile(&["c".to_string(), "d".to_string()]);
        assert_eq!(live, vec![(1, "c".to_string()), (2, "d".to_string())]);
        assert_eq!(t.in_use(), 2);
    }

    #[test]
    fn slot_table_fills_up() {
        let mut t = Slots::default();
        for i in 0..SLOT_MAX {
            assert_eq!(t.slot_for(&format!("s{i}")).unwrap(), i + 1);
        }
        assert_eq!(t.slot_for("one-too-many"), Err(ZplError::Overflow));
        t.kill(7);
        assert_eq!(t.slot_for("one-too-many").unwrap(), 7);
    }
}
