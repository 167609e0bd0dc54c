//! # vfs — one mounted file system as the kernel sees it: the live tree plus `.zfs`
//!
//! Theory: [`Vfs`] is what a mount serves (OpenZFS's `zfsvfs_t` plays this part): the
//! live [`Fs`] and, in its root, the control directory `.zfs` ([`crate::ctldir`]) with
//! `snapshot/<name>/` showing each snapshot of the file system read-only, without a
//! mount of its own. Every call takes and returns *vfs inode numbers*: a live inode's
//! number is its object id (unchanged, so everything outside `.zfs` behaves exactly as
//! [`Fs`] does); numbers under `.zfs` have bit 63 set and are decoded by
//! [`ctldir::decode`] into a fixed control node or (snapshot slot, object). Each call
//! is routed by that decoding:
//!
//! - live inodes go to the live [`Fs`], except that the name `.zfs` in the root is the
//!   control directory (a real entry of that name is shadowed, as in OpenZFS): looking
//!   it up enters `.zfs`; creating, linking or renaming onto it is refused;
//! - `readdir` of the root lists `.zfs` at cursor 2 (after "." and "..", where
//!   OpenZFS's `zfs_readdir` puts it) when `snapdir=visible`, never when `hidden`; the
//!   root's other cursors are the zpl's plus one, so they stay valid whichever the
//!   property is when the listing resumes;
//! - `.zfs` lists `snapshot` and `shares`; `.zfs/shares` is always empty;
//! - `.zfs/snapshot` asks the [`SnapshotSource`] on every lookup and listing, so
//!   snapshots taken, destroyed or rolled away while mounted appear and disappear at
//!   once; its cursors are slot numbers plus 2, stable while snapshots come and go;
//! - inodes of a snapshot go to a read-only [`Fs`] over the snapshot's object set,
//!   opened at first use and checked on every call (see `ctldir`): a snapshot destroyed
//!   while someone holds one of its files gives `Stale` (ESTALE), a name that no longer
//!   exists gives `NotFound`.
//!
//! Everything under `.zfs` is read-only: writes, creates, links, unlinks, renames and
//! attribute changes there return `ReadOnly` (EROFS), and so does opening a snapshot's
//! file for writing. (OpenZFS answers `mkdir`/`rmdir`/`mv` in `.zfs/snapshot` by
//! creating, destroying or renaming snapshots when the `zfs_admin_snapshot` tunable is
//! set, and with EACCES when it is not, its default; Tarn has no such tunable and
//! answers EROFS.) A hard link from a snapshot into the live tree is `CrossDevice`.
//!
//! Attributes of the fixed nodes follow OpenZFS on Linux: directories of mode 0777
//! owned by root, generation 0, modification and change times the time of the mount,
//! access time now; `.zfs/snapshot` has 2 + (number of snapshots) links and size. A
//! snapshot's root directory shows the attributes of the snapshot's root directory.
//!
//! Lookup counts: the kernel holds an inode from a successful lookup until it sends
//! `forget`; [`Vfs::lookup`] counts lookups of snapshot inodes per slot and
//! [`Vfs::forget`] uncounts them, so that a slot is renumbered only when the kernel
//! holds none of its inodes. Lookups of live and fixed inodes are not counted.
//!
//! Locks: the slot table's mutex (a leaf, never held while calling the source or a file
//! system), then whatever the called [`Fs`] takes. The `snapdir` setting is an atomic.
//!
//! Crash: nothing here is persistent. EIO: a snapshot's read errors come back as they
//! do for the live tree. A snapshot destroyed between the check and the read of one
//! call may give EIO (its blocks freed and reused fail their checksums), never another
//! snapshot's or the live tree's data.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::mem::MemStore;
use tarn_dmu::{DmuError, ObjectStore};

use crate::ctldir::{self, Bind, CtlNode, Node, Slots, SnapDir, SnapshotSource, CTLDIR_NAME, SHAREDIR_NAME, SNAPDIR_NAME};
use crate::{Attr, DirEntry, FileKind, Fs, Result, SetAttr, StatFs, Timespec, ZplError, ZplOptions, DIR_CURSOR_END, MASTER_NODE_OBJ};

/// Permission bits of the control directories (OpenZFS: `S_IRWXUGO`).
const CTL_PERM: u16 = 0o777;
/// Block size reported for the control directories (OpenZFS: `SPA_MINBLOCKSIZE`).
const CTL_BLKSIZE: u32 = 512;
/// Root readdir cursor of `.zfs` (after "." at 0 and ".." at 1).
const ROOT_CURSOR_CTLDIR: u64 = 2;
/// Root readdir cursors from here on are the zpl's plus one.
const ROOT_CURSOR_ZPL: u64 = 3;
/// `.zfs/snapshot` readdir cursor of slot `s` is `s + SNAPDIR_CURSOR_BASE`.
const SNAPDIR_CURSOR_BASE: u64 = 2;

/// Most bytes one [`Vfs::copy_file_range`] copies (the kernel's callers loop).
pub const COPY_RANGE_MAX_BYTES: u64 = 128 << 20;
/// Bytes read and written per step of a copy.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// [`Vfs::copy_file_range`] calls in this process (all mounts), for tests and
/// statistics: proof that the kernel handed a copy to the file system instead of
/// doing it itself.
static COPY_FILE_RANGE_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many [`Vfs::copy_file_range`] calls this process has served.
pub fn copy_file_range_calls() -> u64 {
    COPY_FILE_RANGE_CALLS.load(Ordering::Relaxed)
}

/// A mounted file system: the live [`Fs`] and its `.zfs` control directory. `Send +
/// Sync`; share it as `Arc<Vfs>`.
pub struct Vfs {
    fs: Arc<Fs>,
    source: Arc<dyn SnapshotSource>,
    visible: AtomicBool,
    slots: Mutex<Slots>,
    mounted: Timespec,
}

impl std::fmt::Debug for Vfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vfs").field("fs", &self.fs).field("snapdir", &self.snapdir()).finish()
    }
}

/// Open the read-only file system of a snapshot's object set. A snapshot of a file
/// system that was never mounted holds no ZPL at all (no master node): it shows as the
/// empty directory that file system would have been.
fn open_snapshot_fs(os: Arc<dyn ObjectStore>) -> Result<Arc<Fs>> {
    let ro = ZplOptions {
        readonly: true,
        atime: false,
        ..ZplOptions::default()
    };
    match os.object_info(MASTER_NODE_OBJ) {
        Ok(_) => Fs::open(os, ro),
        Err(DmuError::NoSuchObject(_)) => {
            let empty = Arc::new(MemStore::new());
            let fs = Fs::open(empty.clone(), ZplOptions { readonly: false, ..ro })?;
            empty.set_readonly(true);
            fs.set_options(ro);
            Ok(fs)
        }
        Err(e) => Err(e.into()),
    }
}

fn dot_entries(me: u64, parent: u64, cursor: u64, max: usize, out: &mut Vec<DirEntry>) {
    for (i, (name, ino)) in [(&b"."[..], me), (&b".."[..], parent)].into_iter().enumerate() {
        if cursor <= i as u64 && out.len() < max {
            out.push(DirEntry {
                name: name.to_vec(),
                ino,
                kind: FileKind::Dir,
                next_cursor: i as u64 + 1,
            });
        }
    }
}

impl Vfs {
    /// Serve `fs` with a control directory whose snapshots come from `source`, `.zfs`
    /// listed in the root or not as `snapdir` says.
    pub fn new(fs: Arc<Fs>, source: Arc<dyn SnapshotSource>, snapdir: SnapDir) -> Arc<Vfs> {
        Arc::new(Vfs {
            fs,
            source,
            visible: AtomicBool::new(snapdir == SnapDir::Visible),
            slots: Mutex::new(Slots::default()),
            mounted: Timespec::now(),
        })
    }

    /// The live file system.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Inode number of the root directory (the live root's).
    pub fn root(&self) -> u64 {
        self.fs.root()
    }

    /// Change the `snapdir` property of the mounted file system (`zfs set`); the next
    /// `readdir` of the root follows it.
    pub fn set_snapdir(&self, snapdir: SnapDir) {
        self.visible.store(snapdir == SnapDir::Visible, Ordering::Relaxed);
    }

    /// The current `snapdir` property.
    pub fn snapdir(&self) -> SnapDir {
        if self.visible.load(Ordering::Relaxed) {
            SnapDir::Visible
        } else {
            SnapDir::Hidden
        }
    }

    fn node(ino: u64) -> Result<Node> {
        ctldir::decode(ino).ok_or(ZplError::Stale)
    }

    /// `dir/name` is the control directory's own entry.
    fn is_ctldir(&self, dir: u64, name: &[u8]) -> bool {
        dir == self.fs.root() && name == CTLDIR_NAME
    }

    /// The live directory `dir`, or `ReadOnly` for a directory under `.zfs`.
    fn live_dir(dir: u64) -> Result<u64> {
        match Self::node(dir)? {
            Node::Live(d) => Ok(d),
            _ => Err(ZplError::ReadOnly),
        }
    }

    fn ctl_attr(&self, node: CtlNode) -> Attr {
        let (nlink, size) = match node {
            // A fresh Linux inode's link count, as OpenZFS reports it.
            CtlNode::Root => (1, 0),
            CtlNode::SnapDir => {
                let n = self.source.list().len() as u64;
                ((2 + n).min(u64::from(u32::MAX)) as u32, 2 + n)
            }
            CtlNode::Shares => (2, 2),
        };
        Attr {
            ino: node.ino(),
            size,
            blocks: 0,
            atime: Timespec::now(),
            mtime: self.mounted,
            ctime: self.mounted,
            crtime: self.mounted,
            kind: FileKind::Dir,
            perm: CTL_PERM,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: CTL_BLKSIZE,
            gen: 0,
        }
    }

    /// The file system of the snapshot in `slot`, checked against the source: `Stale`
    /// when the snapshot is gone or its name now names another snapshot.
    fn snap(&self, slot: u32) -> Result<Arc<Fs>> {
        let name = self.slots.lock().live_name(slot).ok_or(ZplError::Stale)?;
        let os = match self.source.open(&name) {
            Ok(os) => os,
            Err(ZplError::NotFound) => {
                self.slots.lock().kill_named(slot, &name);
                return Err(ZplError::Stale);
            }
            Err(e) => return Err(e),
        };
        self.bind(slot, &name, os)
    }

    fn bind(&self, slot: u32, name: &str, os: Arc<dyn ObjectStore>) -> Result<Arc<Fs>> {
        match self.slots.lock().bind(slot, name, &os, None) {
            Bind::Ready(fs) => return Ok(fs),
            Bind::Gone => return Err(ZplError::Stale),
            Bind::Unopened => {}
        }
        let fs = open_snapshot_fs(os.clone())?;
        match self.slots.lock().bind(slot, name, &os, Some(fs)) {
            Bind::Ready(fs) => Ok(fs),
            Bind::Unopened | Bind::Gone => Err(ZplError::Stale),
        }
    }

    /// `a` (from the snapshot in `slot`) with its vfs inode number.
    fn snap_attr(slot: u32, fs: &Fs, mut a: Attr) -> Result<Attr> {
        a.ino = ctldir::snap_ino(slot, fs.root(), a.ino)?;
        Ok(a)
    }

    /// Look `name` up in `.zfs/snapshot`: the root directory of that snapshot.
    fn lookup_snapshot(&self, name: &[u8]) -> Result<Attr> {
        let name = std::str::from_utf8(name).map_err(|_| ZplError::NotFound)?;
        let os = self.source.open(name)?;
        // A slot killed between the two steps (the name re-created meanwhile) is
        // replaced by a fresh one on the second try.
        for _ in 0..2 {
            let slot = self.slots.lock().slot_for(name)?;
            match self.bind(slot, name, os.clone()) {
                Ok(fs) => {
                    let a = Self::snap_attr(slot, &fs, fs.getattr(fs.root())?)?;
                    self.slots.lock().add_ref(slot);
                    return Ok(a);
                }
                Err(ZplError::Stale) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ZplError::Stale)
    }

    /// Look `name` up in directory `dir` ("." and ".." included). A successful lookup
    /// of a snapshot's inode counts as one kernel reference until [`Vfs::forget`].
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        match Self::node(dir)? {
            Node::Live(d) if self.is_ctldir(d, name) => Ok(self.ctl_attr(CtlNode::Root)),
            Node::Live(d) => self.fs.lookup(d, name),
            Node::Ctl(CtlNode::Root) => match name {
                b"." => Ok(self.ctl_attr(CtlNode::Root)),
                b".." => self.fs.getattr(self.fs.root()),
                SNAPDIR_NAME => Ok(self.ctl_attr(CtlNode::SnapDir)),
                SHAREDIR_NAME => Ok(self.ctl_attr(CtlNode::Shares)),
                _ => Err(ZplError::NotFound),
            },
            Node::Ctl(CtlNode::Shares) => match name {
                b"." => Ok(self.ctl_attr(CtlNode::Shares)),
                b".." => Ok(self.ctl_attr(CtlNode::Root)),
                _ => Err(ZplError::NotFound),
            },
            Node::Ctl(CtlNode::SnapDir) => match name {
                b"." => Ok(self.ctl_attr(CtlNode::SnapDir)),
                b".." => Ok(self.ctl_attr(CtlNode::Root)),
                _ => self.lookup_snapshot(name),
            },
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                if obj == 0 && name == b".." {
                    return Ok(self.ctl_attr(CtlNode::SnapDir));
                }
                let a = fs.lookup(ctldir::snap_obj(fs.root(), obj), name)?;
                let a = Self::snap_attr(slot, &fs, a)?;
                self.slots.lock().add_ref(slot);
                Ok(a)
            }
        }
    }

    /// The kernel dropped `nlookup` references to `ino` (FUSE `forget`).
    pub fn forget(&self, ino: u64, nlookup: u64) {
        if let Some(Node::Snap { slot, .. }) = ctldir::decode(ino) {
            self.slots.lock().forget(slot, nlookup);
        }
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.getattr(i),
            Node::Ctl(c) => Ok(self.ctl_attr(c)),
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                let a = fs.getattr(ctldir::snap_obj(fs.root(), obj))?;
                Self::snap_attr(slot, &fs, a)
            }
        }
    }

    /// Change attributes of `ino` (live only; `ReadOnly` under `.zfs`).
    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.setattr(i, s),
            _ => Err(ZplError::ReadOnly),
        }
    }

    /// Target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.readlink(i),
            Node::Ctl(_) => Err(ZplError::Invalid("readlink of a non-symlink")),
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                fs.readlink(ctldir::snap_obj(fs.root(), obj))
            }
        }
    }

    /// Create regular file `dir/name` ([`Fs::create`]).
    pub fn create(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::Exists);
        }
        self.fs.create(d, name, mode, uid, gid)
    }

    /// Create special file `dir/name` ([`Fs::mknod`]).
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32, rdev: u64) -> Result<Attr> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::Exists);
        }
        self.fs.mknod(d, name, mode, uid, gid, rdev)
    }

    /// Create directory `dir/name` ([`Fs::mkdir`]).
    pub fn mkdir(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::Exists);
        }
        self.fs.mkdir(d, name, mode, uid, gid)
    }

    /// Create symlink `dir/name` → `target` ([`Fs::symlink`]).
    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::Exists);
        }
        self.fs.symlink(d, name, target, uid, gid)
    }

    /// Hard link `newdir/newname` to `ino` ([`Fs::link`]); `CrossDevice` for an inode
    /// under `.zfs`, `ReadOnly` for a directory under it.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8]) -> Result<Attr> {
        let d = Self::live_dir(newdir)?;
        let Node::Live(i) = Self::node(ino)? else {
            return Err(ZplError::CrossDevice);
        };
        if self.is_ctldir(d, newname) {
            return Err(ZplError::Exists);
        }
        self.fs.link(i, d, newname)
    }

    /// Remove `dir/name` ([`Fs::unlink`]).
    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<()> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::ReadOnly);
        }
        self.fs.unlink(d, name)
    }

    /// Remove directory `dir/name` ([`Fs::rmdir`]).
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        let d = Self::live_dir(dir)?;
        if self.is_ctldir(d, name) {
            return Err(ZplError::ReadOnly);
        }
        self.fs.rmdir(d, name)
    }

    /// Rename `dir/name` to `newdir/newname` ([`Fs::rename`]); `ReadOnly` when either
    /// side is under `.zfs` or is `.zfs` itself.
    pub fn rename(&self, dir: u64, name: &[u8], newdir: u64, newname: &[u8], flags: u32) -> Result<()> {
        let d = Self::live_dir(dir)?;
        let nd = Self::live_dir(newdir)?;
        if self.is_ctldir(d, name) || self.is_ctldir(nd, newname) {
            return Err(ZplError::ReadOnly);
        }
        self.fs.rename(d, name, nd, newname, flags)
    }

    /// Note an open handle on `ino`; `write`: opened for writing, refused with
    /// `ReadOnly` under `.zfs`.
    pub fn open_file(&self, ino: u64, write: bool) -> Result<()> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.open_file(i),
            _ if write => Err(ZplError::ReadOnly),
            Node::Ctl(_) => Ok(()),
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                fs.open_file(ctldir::snap_obj(fs.root(), obj))
            }
        }
    }

    /// Drop an open handle on `ino`. Never fails because a snapshot went away.
    pub fn release_file(&self, ino: u64) -> Result<()> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.release_file(i),
            Node::Ctl(_) => Ok(()),
            Node::Snap { slot, obj } => match self.slots.lock().opened_fs(slot) {
                Some(fs) => match fs.release_file(ctldir::snap_obj(fs.root(), obj)) {
                    Ok(()) | Err(ZplError::NotFound) | Err(ZplError::Invalid(_)) => Ok(()),
                    Err(e) => Err(e),
                },
                None => Ok(()),
            },
        }
    }

    /// Read up to `size` bytes of file `ino` at `offset` ([`Fs::read`]).
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let n = self.read_into(ino, offset, size, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// [`Vfs::read`] into the caller's buffer ([`Fs::read_into`]): returns `n`, the
    /// bytes now in `buf[..n]`.
    pub fn read_into(&self, ino: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<usize> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.read_into(i, offset, size, buf),
            Node::Ctl(_) => Err(ZplError::IsDir),
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                fs.read_into(ctldir::snap_obj(fs.root(), obj), offset, size, buf)
            }
        }
    }

    /// Write `data` to file `ino` at `offset` ([`Fs::write`]); `ReadOnly` under `.zfs`.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.write(i, offset, data),
            _ => Err(ZplError::ReadOnly),
        }
    }

    /// `copy_file_range(2)`: copy up to `len_bytes` from `ino_in` at `offset_in` to
    /// `ino_out` at `offset_out` inside the daemon, so the bytes never travel through
    /// the kernel and back; returns the bytes copied (fewer than asked at the source's
    /// end, and at most [`COPY_RANGE_MAX_BYTES`] per call, as the syscall allows; its
    /// callers loop). The source may be a snapshot's file under `.zfs`. Whole records
    /// on record boundaries are shared instead of copied ([`Fs::clone_range`],
    /// OpenZFS 2.2's block cloning); the rest is copied. Errors: `IsDir`/`Invalid` for a non-regular file, `Invalid` for
    /// overlapping ranges of one file (as Linux), `ReadOnly` for a target under
    /// `.zfs`, and what the reads and writes return.
    pub fn copy_file_range(&self, ino_in: u64, offset_in: u64, ino_out: u64, offset_out: u64, len_bytes: u64) -> Result<u64> {
        COPY_FILE_RANGE_CALLS.fetch_add(1, Ordering::Relaxed);
        let (a_in, a_out) = (self.getattr(ino_in)?, self.getattr(ino_out)?);
        for a in [&a_in, &a_out] {
            crate::require_file(a.kind, "copy_file_range of a non-regular file")?;
        }
        let n = len_bytes.min(a_in.size.saturating_sub(offset_in)).min(COPY_RANGE_MAX_BYTES);
        if ino_in == ino_out && offset_in < offset_out.saturating_add(n) && offset_out < offset_in.saturating_add(n) {
            return Err(ZplError::Invalid("overlapping copy_file_range of one file"));
        }
        offset_out
            .checked_add(n)
            .filter(|&e| e <= crate::FILE_SIZE_MAX_BYTES)
            .ok_or(ZplError::FileTooBig)?;
        // Whole records are shared, not copied (block cloning), when both files are
        // live files of this file system and the offsets lie on record boundaries.
        let mut done = match (Self::node(ino_in)?, Self::node(ino_out)?) {
            (Node::Live(i), Node::Live(o)) => self.fs.clone_range(i, offset_in, o, offset_out, n)?,
            _ => 0,
        };
        while done < n {
            let chunk = (n - done).min(COPY_CHUNK_BYTES) as u32;
            let data = self.read(ino_in, offset_in + done, chunk)?;
            if data.is_empty() {
                break;
            }
            let w = self.write(ino_out, offset_out + done, &data)?;
            done += u64::from(w);
            if (w as usize) < data.len() {
                break;
            }
        }
        Ok(done)
    }

    /// `fallocate(2)` ([`Fs::fallocate`]); `ReadOnly` under `.zfs`.
    pub fn fallocate(&self, ino: u64, offset_bytes: u64, len_bytes: u64, mode: u32) -> Result<()> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.fallocate(i, offset_bytes, len_bytes, mode),
            _ => Err(ZplError::ReadOnly),
        }
    }

    /// Make changes to `ino` durable ([`Fs::fsync`]); nothing to do under `.zfs`.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        match Self::node(ino)? {
            Node::Live(i) => self.fs.fsync(i),
            _ => Ok(()),
        }
    }

    /// File-system statistics (the live file system's, for every inode).
    pub fn statfs(&self) -> Result<StatFs> {
        self.fs.statfs()
    }

    /// List directory `dir` from `cursor` (0 = start), at most `max` entries; see the
    /// module docs for the cursors of the root and of `.zfs/snapshot`.
    pub fn readdir(&self, dir: u64, cursor: u64, max: usize) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        match Self::node(dir)? {
            Node::Live(d) if d == self.fs.root() => return self.readdir_root(cursor, max),
            Node::Live(d) => return self.fs.readdir(d, cursor, max),
            Node::Ctl(CtlNode::Root) => {
                dot_entries(ctldir::CTL_INO_ROOT, self.fs.root(), cursor, max, &mut out);
                for (i, (name, ino)) in [(SNAPDIR_NAME, ctldir::CTL_INO_SNAPDIR), (SHAREDIR_NAME, ctldir::CTL_INO_SHARES)]
                    .into_iter()
                    .enumerate()
                {
                    let at = 2 + i as u64;
                    if cursor <= at && out.len() < max {
                        out.push(DirEntry {
                            name: name.to_vec(),
                            ino,
                            kind: FileKind::Dir,
                            next_cursor: at + 1,
                        });
                    }
                }
            }
            Node::Ctl(CtlNode::Shares) => dot_entries(ctldir::CTL_INO_SHARES, ctldir::CTL_INO_ROOT, cursor, max, &mut out),
            Node::Ctl(CtlNode::SnapDir) => {
                dot_entries(ctldir::CTL_INO_SNAPDIR, ctldir::CTL_INO_ROOT, cursor, max, &mut out);
                let names = self.source.list();
                let live = self.slots.lock().reconcile(&names);
                for (slot, name) in live {
                    if out.len() >= max {
                        break;
                    }
                    let at = u64::from(slot) + SNAPDIR_CURSOR_BASE;
                    if at < cursor {
                        continue;
                    }
                    out.push(DirEntry {
                        name: name.into_bytes(),
                        ino: ctldir::snap_ino(slot, 0, 0)?,
                        kind: FileKind::Dir,
                        next_cursor: at + 1,
                    });
                }
            }
            Node::Snap { slot, obj } => {
                let fs = self.snap(slot)?;
                let root = fs.root();
                for mut e in fs.readdir(ctldir::snap_obj(root, obj), cursor, max)? {
                    e.ino = if obj == 0 && e.name == b".." {
                        ctldir::CTL_INO_SNAPDIR
                    } else {
                        ctldir::snap_ino(slot, root, e.ino)?
                    };
                    out.push(e);
                }
            }
        }
        Ok(out)
    }

    /// The root's listing: ".", "..", `.zfs` when visible, then the zpl's entries with
    /// their cursors moved up by one (a real `.zfs` entry is shadowed and left out).
    fn readdir_root(&self, cursor: u64, max: usize) -> Result<Vec<DirEntry>> {
        let root = self.fs.root();
        let mut out = Vec::new();
        if cursor < ROOT_CURSOR_CTLDIR {
            out = self.fs.readdir(root, cursor, max.min((ROOT_CURSOR_CTLDIR - cursor) as usize))?;
        }
        if cursor <= ROOT_CURSOR_CTLDIR && out.len() < max && self.snapdir() == SnapDir::Visible {
            out.push(DirEntry {
                name: CTLDIR_NAME.to_vec(),
                ino: ctldir::CTL_INO_ROOT,
                kind: FileKind::Dir,
                next_cursor: ROOT_CURSOR_ZPL,
            });
        }
        if cursor >= DIR_CURSOR_END {
            return Ok(out);
        }
        // Root cursor c >= 3 is zpl cursor c - 1 (zpl cursor 2 = its first entry). The
        // one zpl cursor this pushes onto the end marker follows a ZAP entry with a
        // collision differentiator of CD_MAX - 2 on the largest hash: unreachable.
        let mut zc = cursor.max(ROOT_CURSOR_ZPL) - 1;
        while out.len() < max && zc < DIR_CURSOR_END {
            let batch = self.fs.readdir(root, zc, max - out.len())?;
            if batch.is_empty() {
                break;
            }
            for mut e in batch {
                zc = e.next_cursor;
                if e.name == CTLDIR_NAME {
                    continue;
                }
                e.next_cursor = e.next_cursor.saturating_add(1).min(DIR_CURSOR_END);
                out.push(e);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
