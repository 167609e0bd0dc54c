//! # zpl — the ZFS POSIX layer: files, directories, links and attributes
//!
//! Theory: a file system is one DMU object set ([`ObjectStore`]). Every inode is one
//! object and its inode number *is* the object id. The POSIX attributes of an object
//! live in its bonus buffer as a [`znode::ZnodePhys`]; a regular file's bytes are the
//! object's data; a symlink's target is its data; a directory is a ZAP
//! ([`tarn_dmu::zap`]) from name to `object | kind << 60` (ZFS's `ZFS_DIRENT_MAKE`), so
//! `readdir` learns the file types without loading any inode.
//!
//! On-disk structures owned here (see `docs/format.md`):
//! - object 1, the *master node*: a ZAP holding `"VERSION" -> 1`, `"ROOT" -> root
//!   directory object` and `"DELETE_QUEUE" -> delete queue object`;
//! - the *delete queue*: a ZAP from the hex object id to the object id of every file
//!   that was unlinked while still open (ZFS's unlinked set);
//! - directories (`ObjectType::DirZap`), files (`FileData`, created with 512-byte
//!   blocks and a first block that may grow to `recordsize`), symlinks (`Symlink`),
//!   special files (`FileData` with no data), each with a 128-byte znode bonus.
//!
//! States of an object: *linked* (links > 0, reachable by name) → *unlinked-open*
//! (links == 0, open count > 0, listed in the delete queue) → *freed*. A linked file
//! whose last name goes while nobody has it open is freed at once. `Fs::open` frees
//! everything left in the delete queue: after a crash no handle survives.
//!
//! Invariants:
//! - A directory's `links` is 2 + its subdirectories and its `size` is 2 + entries
//!   (maintained by every namespace operation; checked by the tests' `fsck`).
//! - A directory's `parent` names the directory holding its entry; `rename` refuses to
//!   move a directory into its own subtree by walking `parent` up to the root
//!   (bounded by [`MAX_DEPTH`]; a longer chain is reported as `Corrupt`).
//! - Every mutating operation holds one [`TxHold`] across all its DMU calls, so it lands
//!   in one txg: a crash shows either all of it or none of it. All checks that can fail
//!   with an expected error (exists, not empty, ...) run before the first change; after
//!   the first change only media errors and ENOSPC can interrupt an operation.
//!
//! Locks, in the order they are taken (a `TxHold` is always obtained *before* any lock,
//! so that a thread throttled in `hold_tx` never holds a lock that the txg sync might
//! wait for through another thread's hold):
//! 1. `ns` (RwLock): namespace operations (create, unlink, rename, setattr, release
//!    that frees) take it exclusively; lookups, readdir, getattr, read and write take
//!    it shared.
//! 2. `stripes[ino % N]` (RwLock): serializes data reads/writes and znode updates of one
//!    file against each other, so writes to different files do not block each other.
//! 3. `open` (Mutex): the open-count table; held only briefly.
//!
//! Crash: the txg model gives atomicity; unlinked-open files are reclaimed from the
//! delete queue at the next open. EIO / corruption: returned as `Io` / `Corrupt` to the
//! caller, never retried; a znode that fails validation is never trusted. ENOSPC:
//! returned as `NoSpace`, the operation's earlier changes in the same tx stay (as in
//! ZFS, a tx cannot be rolled back; the pre-checks make this rare). A `write` refused
//! before it changed anything lets go of its tx and tries again after the store's wait
//! for space (up to `WRITE_SPACE_RETRIES` times), since the room may only be on its way
//! back (deferred frees) and taken meanwhile by other writers; so does a truncate whose
//! zeroing of a record's tail is refused.
//!
//! Intent log: with a [`Zilog`] (see [`Fs::open_logged`]) every change queues a record
//! under its tx and locks (`log.rs`), `fsync` commits the log, and a log left by a crash
//! is replayed at open; without one (in-memory tests), `fsync` waits for a txg sync.
//!
//! Mounts: [`Vfs`] (`vfs.rs`) is what a mount serves: this file system plus the `.zfs`
//! control directory (`ctldir.rs`) that shows its snapshots read-only.
//!
//! Limits: no xattrs or ACLs; names ≤ 255 bytes;
//! symlink targets ≤ 4095 bytes; file size ≤ i64::MAX; object ids < 2^60.

pub mod ctldir;
pub mod diff;
pub mod error;
mod log;
pub mod vfs;
pub mod znode;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use tarn_dmu::{zap, DmuError, ObjectType, TxHold};
use tarn_phys::zil::{TX_CREATE, TX_LINK, TX_MKDIR, TX_REMOVE, TX_RENAME, TX_RMDIR, TX_SETATTR, TX_SYMLINK, TX_TRUNCATE};
pub use tarn_zil::{ReplayStats, Zilog};

pub use ctldir::{NoSnapshots, SnapDir, SnapshotSource};
pub use error::ZplError;
pub use tarn_dmu::ObjectStore;
pub use vfs::Vfs;
pub use znode::{FileKind, Timespec, ZnodePhys};
use znode::{S_IFMT, S_IPERM, S_ISGID};

/// Result alias of the POSIX layer.
pub type Result<T> = std::result::Result<T, ZplError>;

/// Object id of the master node.
pub const MASTER_NODE_OBJ: u64 = 1;
/// ZPL on-disk version stored under `"VERSION"` in the master node.
pub const ZPL_VERSION: u64 = 1;
/// Longest name, in bytes.
pub const NAME_MAX_BYTES: usize = 255;
/// Longest symlink target, in bytes.
pub const SYMLINK_MAX_BYTES: usize = 4095;
/// Largest file size (off_t).
pub const FILE_SIZE_MAX_BYTES: u64 = i64::MAX as u64;
/// Largest link count reported (st_nlink is 32 bits in FUSE).
pub const LINK_MAX: u64 = u32::MAX as u64;
/// Bound on parent-chain walks (rename loop check).
pub const MAX_DEPTH: usize = 1 << 16;
/// `fallocate(2)` mode bit (Linux `falloc.h`): do not change the file size.
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
/// `fallocate(2)` mode bit: free the range (the kernel requires `KEEP_SIZE` with it).
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
/// `fallocate(2)` mode bit: make the range read as zeros.
pub const FALLOC_FL_ZERO_RANGE: u32 = 0x10;
/// Percent of the requested length that must be available for a space-reserving
/// `fallocate` (mode 0 or `KEEP_SIZE`): OpenZFS's `zfs_fallocate_reserve_percent`
/// default, the 10% being room for indirect blocks and other metadata.
pub const FALLOCATE_RESERVE_PCT: u64 = 110;
/// `rename` flag: fail with `Exists` if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: atomically swap source and target (both must exist).
pub const RENAME_EXCHANGE: u32 = 2;

const DIRENT_OBJ_MASK: u64 = (1 << 60) - 1;
const STRIPES: usize = 64;
/// Block size new files start with; the first block grows up to recordsize.
const FILE_BLKSZ_MIN_BYTES: u32 = 512;
/// The readdir cursors 0 and 1 are "." and ".."; ZAP cursors are shifted by this.
const DIR_CURSOR_BASE: u64 = 2;
/// Readdir cursors stay below this (they are `off_t` in the kernel); it means "end".
const DIR_CURSOR_END: u64 = i64::MAX as u64;
const RELATIME_SECS: i64 = 24 * 3600;

/// Mount-time and `zfs set` properties of a file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZplOptions {
    /// Refuse every change with [`ZplError::ReadOnly`].
    pub readonly: bool,
    /// Update access times on read (relatime-style: at most once a day, or when
    /// atime ≤ mtime/ctime).
    pub atime: bool,
    /// Largest block size of new files (power of two, 512 B ..= 1 MiB).
    pub recordsize_bytes: u32,
    /// The `sync` property: when changes must reach the intent log.
    pub sync: SyncMode,
}

/// The `sync` dataset property (zfsprops(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fsync`, `O_SYNC`/`O_DSYNC` writes and `sync` commit the intent log.
    #[default]
    Standard,
    /// Every change is committed to the intent log before its call returns.
    Always,
    /// `fsync` returns at once; changes become durable with the next txg (a crash
    /// may lose the last few seconds even of fsync'd data).
    Disabled,
}

impl SyncMode {
    /// Parse the property value.
    pub fn parse(v: &str) -> Option<SyncMode> {
        match v {
            "standard" => Some(SyncMode::Standard),
            "always" => Some(SyncMode::Always),
            "disabled" => Some(SyncMode::Disabled),
            _ => None,
        }
    }
}

impl Default for ZplOptions {
    fn default() -> Self {
        ZplOptions {
            readonly: false,
            atime: true,
            recordsize_bytes: 128 * 1024,
            sync: SyncMode::Standard,
        }
    }
}

/// Attributes of one inode, as `stat` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number (= object id).
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Allocated space in 512-byte units.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last modification.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
    /// Creation.
    pub crtime: Timespec,
    /// File type.
    pub kind: FileKind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number (special files).
    pub rdev: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Generation number (creation txg).
    pub gen: u64,
}

/// A time to set: the current time or a given one (`utimensat`'s `UTIME_NOW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The current time.
    Now,
    /// A given time.
    At(Timespec),
}

/// Attributes to change in [`Fs::setattr`]; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only): truncate down frees, up is sparse.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
    /// New change time (otherwise it becomes now).
    pub ctime: Option<Timespec>,
}

/// One entry returned by [`Fs::readdir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Entry name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// File type.
    pub kind: FileKind,
    /// Cursor that continues the listing after this entry.
    pub next_cursor: u64,
}

/// File-system statistics for `statfs`, in 4096-byte blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Total blocks (used + available).
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes (estimate: used + free).
    pub files: u64,
    /// Free inodes (estimate: one dnode of 512 bytes per file from free space).
    pub ffree: u64,
    /// Block size (4096).
    pub bsize: u32,
    /// Fragment size (4096).
    pub frsize: u32,
    /// Longest name (255).
    pub namelen: u32,
}

/// A mounted-or-not POSIX file system on one object set. `Send + Sync`; share it as
/// `Arc<Fs>`.
pub struct Fs {
    os: Arc<dyn ObjectStore>,
    opts: RwLock<ZplOptions>,
    root: u64,
    delete_queue: u64,
    ns: RwLock<()>,
    stripes: Vec<RwLock<()>>,
    open: Mutex<HashMap<u64, u32>>,
    /// The dataset's intent log (None: fsync waits for a txg sync).
    zil: Option<Arc<Zilog>>,
    /// Set while the intent log is being replayed at mount.
    replaying: AtomicBool,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs").field("root", &self.root).field("opts", &*self.opts.read()).finish()
    }
}

/// Bring `recordsize_bytes` into range: a power of two from 512 B to 1 MiB (rounded
/// down), as `zfs set recordsize` would have refused anything else.
fn sanitize_opts(mut opts: ZplOptions) -> ZplOptions {
    let r = opts.recordsize_bytes.clamp(512, 1 << 20);
    opts.recordsize_bytes = 1 << (31 - r.leading_zeros());
    opts
}

fn validate_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(ZplError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(ZplError::Invalid("name empty or contains '/' or NUL"));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn dirent_make(obj: u64, kind: FileKind) -> u64 {
    debug_assert!(obj <= DIRENT_OBJ_MASK);
    obj | kind.dirent_code() << 60
}

fn dirent_split(dir: u64, value: u64) -> Result<(u64, FileKind)> {
    let kind = FileKind::from_dirent_code(value >> 60).ok_or(ZplError::Corrupt {
        object: dir,
        what: "directory entry has unknown type",
    })?;
    Ok((value & DIRENT_OBJ_MASK, kind))
}

fn dq_name(obj: u64) -> Vec<u8> {
    format!("{obj:x}").into_bytes()
}

/// One namespace operation in progress: the tx hold plus every znode it has loaded,
/// written back together by [`Op::commit`]. Loading each znode once means that an
/// operation touching the same inode twice (rename within one directory, a directory
/// that is both parent and target) sees its own changes.
struct Op<'a> {
    fs: &'a Fs,
    tx: TxHold,
    nodes: BTreeMap<u64, (ZnodePhys, bool)>,
    now: Timespec,
}

impl<'a> Op<'a> {
    fn new(fs: &'a Fs, tx: TxHold) -> Op<'a> {
        Op {
            fs,
            tx,
            nodes: BTreeMap::new(),
            now: Timespec::now(),
        }
    }

    fn get(&mut self, ino: u64) -> Result<&ZnodePhys> {
        if !self.nodes.contains_key(&ino) {
            let z = self.fs.load(ino)?;
            self.nodes.insert(ino, (z, false));
        }
        Ok(&self.nodes[&ino].0)
    }

    fn get_mut(&mut self, ino: u64) -> Result<&mut ZnodePhys> {
        self.get(ino)?;
        let e = self.nodes.get_mut(&ino).expect("just loaded");
        e.1 = true;
        Ok(&mut e.0)
    }

    fn get_dir(&mut self, ino: u64) -> Result<&ZnodePhys> {
        let z = self.get(ino)?;
        if !z.is_dir() {
            return Err(ZplError::NotDir);
        }
        Ok(z)
    }

    /// Directory `dir` gained (`+1`) or lost (`-1`) an entry: size and times.
    fn dir_changed(&mut self, dir: u64, delta: i64) -> Result<()> {
        let now = self.now;
        let d = self.get_mut(dir)?;
        d.size = d.size.checked_add_signed(delta).ok_or(ZplError::Corrupt {
            object: dir,
            what: "directory size underflow",
        })?;
        d.mtime = now;
        d.ctime = now;
        Ok(())
    }

    fn add_links(&mut self, ino: u64, delta: i64) -> Result<()> {
        let now = self.now;
        let z = self.get_mut(ino)?;
        z.links = z.links.checked_add_signed(delta).ok_or(ZplError::Corrupt {
            object: ino,
            what: "link count underflow",
        })?;
        z.ctime = now;
        Ok(())
    }

    /// Free `ino` (all links gone) or, if it is open, move it to the delete queue.
    fn drop_inode(&mut self, ino: u64) -> Result<()> {
        let open = self.fs.open.lock().get(&ino).copied().unwrap_or(0);
        if open > 0 {
            zap::update(&*self.fs.os, &self.tx, self.fs.delete_queue, &dq_name(ino), ino)?;
        } else {
            self.fs.before_free(ino);
            self.fs.os.free_object(&self.tx, ino)?;
            self.nodes.remove(&ino);
        }
        Ok(())
    }

    fn commit(self) -> Result<()> {
        self.commit_keep().map(drop)
    }

    /// Commit, then queue the intent-log record describing the operation while the tx
    /// (and the caller's locks) are still held, so log order is change order.
    fn commit_log(self, rtype: u16, body: Vec<u8>) -> Result<()> {
        let (fs, txg) = (self.fs, self.tx.txg);
        let tx = self.commit_keep()?;
        if let Some(z) = &fs.zil {
            z.log(txg, rtype, body);
        }
        drop(tx);
        Ok(())
    }

    /// Write back the changed znodes; the tx stays held by the caller.
    fn commit_keep(self) -> Result<TxHold> {
        for (ino, (z, dirty)) in &self.nodes {
            if *dirty {
                self.fs.os.set_bonus(&self.tx, *ino, &z.encode())?;
            }
        }
        Ok(self.tx)
    }
}

/// What [`Fs::create_node`] makes.
enum NewNode<'a> {
    Dir,
    File,
    Special(FileKind, u64),
    Symlink(&'a [u8]),
}

/// How many times [`Fs::write`] (and a truncate in [`Fs::setattr`]) lets go of its tx
/// and waits for space on its way back before it reports ENOSPC.
const WRITE_SPACE_RETRIES: u32 = 3;

/// Ok for a regular file; `IsDir` for a directory, `Invalid(what)` for anything else
/// (`what` names the operation, e.g. "read of a special file").
pub(crate) fn require_file(kind: FileKind, what: &'static str) -> Result<()> {
    match kind {
        FileKind::File => Ok(()),
        FileKind::Dir => Err(ZplError::IsDir),
        _ => Err(ZplError::Invalid(what)),
    }
}

impl Fs {
    /// Open the file system in `os`, formatting an empty object set (master node,
    /// root directory 0o40755 owned by 0:0, empty delete queue) and freeing every
    /// object left in the delete queue by a crash.
    pub fn open(os: Arc<dyn ObjectStore>, opts: ZplOptions) -> Result<Arc<Fs>> {
        Fs::open_inner(os, None, opts)
    }

    /// [`Fs::open`] with the dataset's intent log: replay whatever it holds (changes
    /// acknowledged before a crash), then log every change from now on so that
    /// `fsync` returns as soon as its records are durable.
    pub fn open_logged(os: Arc<dyn ObjectStore>, zil: Arc<Zilog>, opts: ZplOptions) -> Result<(Arc<Fs>, ReplayStats)> {
        let fs = Fs::open_inner(os, Some(zil.clone()), opts)?;
        let mut stats = ReplayStats::default();
        if zil.replay_pending() {
            if fs.check_writable().is_err() {
                return Err(ZplError::ReadOnly);
            }
            fs.replaying.store(true, Ordering::SeqCst);
            let r = zil.replay(&mut |rec| fs.replay_record(rec).map_err(|e| e.to_string()));
            fs.replaying.store(false, Ordering::SeqCst);
            stats = r.map_err(|e| ZplError::Io(e.to_string()))?;
            tracing::info!(?stats, "intent log replayed");
        }
        Ok((fs, stats))
    }

    fn open_inner(os: Arc<dyn ObjectStore>, zil: Option<Arc<Zilog>>, opts: ZplOptions) -> Result<Arc<Fs>> {
        let opts = sanitize_opts(opts);
        match os.object_info(MASTER_NODE_OBJ) {
            Ok(_) => {}
            Err(DmuError::NoSuchObject(_)) => {
                if opts.readonly || os.is_readonly() {
                    return Err(ZplError::ReadOnly);
                }
                Fs::format(&*os)?;
            }
            Err(e) => return Err(e.into()),
        }
        let corrupt = |what| ZplError::Corrupt { object: MASTER_NODE_OBJ, what };
        let version = zap::lookup(&*os, MASTER_NODE_OBJ, b"VERSION")?.ok_or(corrupt("master node has no VERSION"))?;
        if version != ZPL_VERSION {
            return Err(corrupt("unsupported ZPL version"));
        }
        let root = zap::lookup(&*os, MASTER_NODE_OBJ, b"ROOT")?.ok_or(corrupt("master node has no ROOT"))?;
        let delete_queue = zap::lookup(&*os, MASTER_NODE_OBJ, b"DELETE_QUEUE")?.ok_or(corrupt("master node has no DELETE_QUEUE"))?;
        let fs = Fs {
            os,
            opts: RwLock::new(opts),
            root,
            delete_queue,
            ns: RwLock::new(()),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            open: Mutex::new(HashMap::new()),
            zil,
            replaying: AtomicBool::new(false),
        };
        if !fs.load(root)?.is_dir() {
            return Err(ZplError::Corrupt {
                object: root,
                what: "root is not a directory",
            });
        }
        if fs.check_writable().is_ok() {
            fs.process_delete_queue()?;
        }
        Ok(Arc::new(fs))
    }

    fn format(os: &dyn ObjectStore) -> Result<()> {
        let tx = os.hold_tx()?;
        let master = zap::create(os, &tx, ObjectType::Zap)?;
        if master != MASTER_NODE_OBJ {
            return Err(ZplError::Corrupt {
                object: master,
                what: "object set not empty: master node is not object 1",
            });
        }
        let root = zap::create(os, &tx, ObjectType::DirZap)?;
        let now = Timespec::now();
        let z = ZnodePhys {
            mode: FileKind::Dir.mode_bits() | 0o755,
            uid: 0,
            gid: 0,
            links: 2,
            size: 2,
            parent: root,
            gen: tx.txg,
            rdev: 0,
            flags: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
        };
        os.set_bonus(&tx, root, &z.encode())?;
        let dq = zap::create(os, &tx, ObjectType::Zap)?;
        zap::add(os, &tx, MASTER_NODE_OBJ, b"VERSION", ZPL_VERSION)?;
        zap::add(os, &tx, MASTER_NODE_OBJ, b"ROOT", root)?;
        zap::add(os, &tx, MASTER_NODE_OBJ, b"DELETE_QUEUE", dq)?;
        Ok(())
    }

    fn process_delete_queue(&self) -> Result<()> {
        let tx = self.hold()?;
        let _ns = self.ns.write();
        loop {
            let batch = zap::list(&*self.os, self.delete_queue, 0, 256)?;
            if batch.is_empty() {
                return Ok(());
            }
            for e in batch {
                tracing::info!(object = e.value, "freeing unlinked object left in the delete queue");
                match self.os.free_object(&tx, e.value) {
                    Ok(()) | Err(DmuError::NoSuchObject(_)) => {}
                    Err(err) => return Err(err.into()),
                }
                zap::remove(&*self.os, &tx, self.delete_queue, &e.name)?;
            }
        }
    }

    /// Change the properties of a mounted file system (`zfs set`).
    /// `recordsize_bytes` is rounded down to a power of two in 512 B ..= 1 MiB.
    pub fn set_options(&self, opts: ZplOptions) {
        *self.opts.write() = sanitize_opts(opts);
    }

    /// Current properties.
    pub fn options(&self) -> ZplOptions {
        *self.opts.read()
    }

    /// Inode number of the root directory.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Hold the open txg for one operation. During replay, tell the log which txg the
    /// record being replayed lands in.
    fn hold(&self) -> Result<TxHold> {
        let tx = self.os.hold_tx()?;
        if self.replaying.load(Ordering::Relaxed) {
            if let Some(z) = &self.zil {
                z.replaying_in(tx.txg);
            }
        }
        Ok(tx)
    }

    /// `sync=always`: commit the intent log before an operation returns.
    fn sync_always(&self) -> Result<()> {
        if self.opts.read().sync == SyncMode::Always && !self.replaying.load(Ordering::Relaxed) {
            self.commit_log()?;
        }
        Ok(())
    }

    /// Current bytes of a logged write, for the intent log (ZFS `zfs_get_data`).
    fn log_data(&self, obj: u64, off: u64, len: u64) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        self.os.read(obj, off, &mut buf).ok().map(|()| buf)
    }

    /// Commit the intent log (or, without one, wait for a txg sync).
    fn commit_log(&self) -> Result<()> {
        match &self.zil {
            Some(z) => z.commit(&|o, off, len| self.log_data(o, off, len)).map_err(|e| ZplError::Io(e.to_string())),
            None => Ok(self.os.wait_synced()?),
        }
    }

    /// `ino` is about to be freed: its logged writes must keep their bytes.
    fn before_free(&self, ino: u64) {
        if let Some(z) = &self.zil {
            z.materialize_writes(ino, &|o, off, len| self.log_data(o, off, len));
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.opts.read().readonly || self.os.is_readonly() {
            return Err(ZplError::ReadOnly);
        }
        Ok(())
    }

    fn stripe(&self, ino: u64) -> &RwLock<()> {
        &self.stripes[(ino % STRIPES as u64) as usize]
    }

    fn load(&self, ino: u64) -> Result<ZnodePhys> {
        if ino == MASTER_NODE_OBJ || ino == self.delete_queue {
            return Err(ZplError::NotFound);
        }
        let b = self.os.bonus(ino)?;
        ZnodePhys::decode(ino, &b)
    }

    fn attr_of(&self, ino: u64, z: &ZnodePhys) -> Result<Attr> {
        let info = self.os.object_info(ino)?;
        Ok(Attr {
            ino,
            size: z.size,
            blocks: info.used_bytes.div_ceil(512),
            atime: z.atime,
            mtime: z.mtime,
            ctime: z.ctime,
            crtime: z.crtime,
            kind: z.kind(),
            perm: (z.mode & S_IPERM) as u16,
            nlink: z.links.min(LINK_MAX) as u32,
            uid: z.uid,
            gid: z.gid,
            rdev: z.rdev,
            blksize: info.datablksz_bytes.max(4096),
            gen: z.gen,
        })
    }

    /// Look `name` up in directory `dir` ("." and ".." included).
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        let _ns = self.ns.read();
        let d = self.load(dir)?;
        if !d.is_dir() {
            return Err(ZplError::NotDir);
        }
        let ino = match name {
            b"." => dir,
            b".." => d.parent,
            _ => {
                validate_name(name)?;
                let v = zap::lookup(&*self.os, dir, name)?.ok_or(ZplError::NotFound)?;
                dirent_split(dir, v)?.0
            }
        };
        let _s = self.stripe(ino).read();
        let z = self.load(ino)?;
        self.attr_of(ino, &z)
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let _ns = self.ns.read();
        let _s = self.stripe(ino).read();
        let z = self.load(ino)?;
        self.attr_of(ino, &z)
    }

    /// Change attributes of `ino` (chmod, chown, truncate, utimens).
    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr> {
        self.check_writable()?;
        // A truncate into the middle of a record first writes zeros over the record's
        // tail, which the store may refuse for space before changing anything (room on
        // its way back, taken by other writers): then let go of the tx and wait for
        // space again, as `write` does.
        let mut attempt = 0;
        let (mut op, _ns) = loop {
            let tx = self.hold()?;
            let ns = self.ns.write();
            let mut op = Op::new(self, tx);
            let z = op.get(ino)?.clone();
            if let Some(size) = s.size {
                require_file(z.kind(), "truncate of a non-regular file")?;
                if size > FILE_SIZE_MAX_BYTES {
                    return Err(ZplError::FileTooBig);
                }
                if size < z.size {
                    match self.truncate_down(&op.tx, ino, size, z.size) {
                        Ok(()) => {}
                        Err(ZplError::NoSpace) if attempt < WRITE_SPACE_RETRIES => {
                            attempt += 1;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            break (op, ns);
        };
        let now = op.now;
        let zm = op.get_mut(ino)?;
        if let Some(m) = s.mode {
            zm.mode = (zm.mode & S_IFMT) | (m & S_IPERM);
        }
        if let Some(u) = s.uid {
            zm.uid = u;
        }
        if let Some(g) = s.gid {
            zm.gid = g;
        }
        if let Some(size) = s.size {
            zm.size = size;
            zm.mtime = now;
        }
        let pick = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        if let Some(t) = s.atime {
            zm.atime = pick(t);
        }
        if let Some(t) = s.mtime {
            zm.mtime = pick(t);
        }
        zm.ctime = s.ctime.unwrap_or(now);
        let out = zm.clone();
        op.commit_log(TX_SETATTR, log::setattr_body(ino, &out, s.size.is_some()))?;
        drop(_ns);
        self.sync_always()?;
        self.attr_of(ino, &out)
    }

    /// `fallocate(2)` on file `ino`, as OpenZFS on Linux does it (`zpl_fallocate`):
    ///
    /// - mode 0 or [`FALLOC_FL_KEEP_SIZE`]: a copy-on-write pool cannot set space aside
    ///   for later writes (a snapshot or a clone may hold the old blocks), so nothing
    ///   is allocated; the call checks that [`FALLOCATE_RESERVE_PCT`] % of `len_bytes`
    ///   is available (else [`ZplError::NoSpace`]) and, without `KEEP_SIZE`, grows the
    ///   file to `offset + len` (sparse) when it is shorter;
    /// - [`FALLOC_FL_PUNCH_HOLE`] or [`FALLOC_FL_ZERO_RANGE`]: the range is freed —
    ///   whole records become holes (their blocks go back to the pool, or to the
    ///   snapshots' dead lists, when the txg syncs) and the partial records at its
    ///   edges are zeroed in place — so it reads as zeros. With `KEEP_SIZE` the range
    ///   is cut at the end of the file (nothing happens when it starts past it);
    ///   without, a range past the end grows the file to its end. The change is logged
    ///   (`TX_TRUNCATE`), so an `fsync` makes it survive a crash.
    ///
    /// Errors: [`ZplError::NotSupported`] for any other mode bit (collapse, insert,
    /// unshare); [`ZplError::Invalid`] for a zero length or a range past the largest
    /// file size; [`ZplError::IsDir`] / [`ZplError::Invalid`] for a directory or
    /// another non-regular file; [`ZplError::ReadOnly`].
    pub fn fallocate(&self, ino: u64, offset_bytes: u64, len_bytes: u64, mode: u32) -> Result<()> {
        let zeroing = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !(FALLOC_FL_KEEP_SIZE | zeroing) != 0 {
            return Err(ZplError::NotSupported);
        }
        if len_bytes == 0 || offset_bytes.checked_add(len_bytes).is_none_or(|end| end > FILE_SIZE_MAX_BYTES) {
            return Err(ZplError::Invalid("fallocate range"));
        }
        self.check_writable()?;
        let a = self.getattr(ino)?;
        require_file(a.kind, "fallocate of a non-regular file")?;
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        if mode & zeroing != 0 {
            let mut len = len_bytes;
            if keep_size {
                if offset_bytes >= a.size {
                    return Ok(());
                }
                len = len.min(a.size - offset_bytes);
            }
            return self.punch_hole(ino, offset_bytes, len);
        }
        let st = self.statfs()?;
        let avail_bytes = st.bavail.saturating_mul(u64::from(st.bsize));
        if u128::from(len_bytes) * u128::from(FALLOCATE_RESERVE_PCT) > u128::from(avail_bytes) * 100 {
            return Err(ZplError::NoSpace);
        }
        let end = offset_bytes + len_bytes;
        if !keep_size && end > a.size {
            self.setattr(
                ino,
                SetAttr {
                    size: Some(end),
                    ..SetAttr::default()
                },
            )?;
        }
        Ok(())
    }

    /// Free `[offset, offset + len)` of file `ino` (whole records become holes, the
    /// partial ones at the edges are zeroed), growing the file to the range's end
    /// when that is past it; logged as `TX_TRUNCATE`, replayed by calling this again.
    pub(crate) fn punch_hole(&self, ino: u64, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.check_writable()?;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        let z = op.get(ino)?.clone();
        if z.kind() != FileKind::File {
            return Err(ZplError::Invalid("hole punched in a non-regular file"));
        }
        let end = offset_bytes
            .checked_add(len_bytes)
            .filter(|&e| e <= FILE_SIZE_MAX_BYTES)
            .ok_or(ZplError::FileTooBig)?;
        if offset_bytes < z.size {
            // Past the old end there is nothing to free: the object holds no data there.
            self.os.free_range(&op.tx, ino, offset_bytes, end.min(z.size) - offset_bytes)?;
        }
        let now = op.now;
        let zm = op.get_mut(ino)?;
        zm.size = zm.size.max(end);
        zm.mtime = now;
        zm.ctime = now;
        op.commit_log(TX_TRUNCATE, log::truncate_body(ino, offset_bytes, len_bytes))?;
        drop(_ns);
        self.sync_always()
    }

    /// Free everything of `ino` past `new_size`, zeroing the tail of the last partial
    /// block first so that a later truncate up or sparse write reads zeros there.
    fn truncate_down(&self, tx: &TxHold, ino: u64, new_size: u64, old_size: u64) -> Result<()> {
        let blksz = u64::from(self.os.object_info(ino)?.datablksz_bytes);
        if !new_size.is_multiple_of(blksz) {
            let tail_end = (new_size / blksz + 1) * blksz;
            let end = tail_end.min(old_size);
            if end > new_size {
                self.os.write(tx, ino, new_size, &vec![0u8; (end - new_size) as usize])?;
            }
        }
        self.os.free_range(tx, ino, new_size, u64::MAX)?;
        Ok(())
    }

    fn create_node(&self, dir: u64, name: &[u8], mut mode: u32, uid: u32, mut gid: u32, what: NewNode<'_>) -> Result<Attr> {
        self.check_writable()?;
        if is_dot(name) {
            return Err(ZplError::Exists);
        }
        validate_name(name)?;
        let kind = match what {
            NewNode::Dir => FileKind::Dir,
            NewNode::File => FileKind::File,
            NewNode::Special(k, _) => k,
            NewNode::Symlink(t) => {
                if t.len() > SYMLINK_MAX_BYTES {
                    return Err(ZplError::NameTooLong);
                }
                if t.is_empty() {
                    return Err(ZplError::NotFound);
                }
                FileKind::Symlink
            }
        };
        let recordsize = self.opts.read().recordsize_bytes;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        let d = op.get_dir(dir)?.clone();
        if d.links == 0 {
            return Err(ZplError::NotFound);
        }
        if zap::lookup(&*self.os, dir, name)?.is_some() {
            return Err(ZplError::Exists);
        }
        if kind == FileKind::Dir && d.links >= LINK_MAX {
            return Err(ZplError::TooManyLinks);
        }
        if d.mode & S_ISGID != 0 {
            gid = d.gid;
            if kind == FileKind::Dir {
                mode |= S_ISGID;
            }
        }
        if kind == FileKind::Symlink {
            mode = 0o777;
        }
        let now = op.now;
        let mut z = ZnodePhys {
            mode: kind.mode_bits() | (mode & S_IPERM),
            uid,
            gid,
            links: 1,
            size: 0,
            parent: dir,
            gen: op.tx.txg,
            rdev: 0,
            flags: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
        };
        let ino = self.make_node(&op.tx, None, &what, &mut z, recordsize)?;
        let (rtype, target) = match what {
            NewNode::Dir => (TX_MKDIR, &[][..]),
            NewNode::Symlink(t) => (TX_SYMLINK, t),
            _ => (TX_CREATE, &[][..]),
        };
        self.link_new_node(&mut op, dir, name, ino, kind)?;
        op.commit_log(rtype, log::create_body(dir, ino, &z, name, target))?;
        drop(_ns);
        self.sync_always()?;
        self.attr_of(ino, &z)
    }

    /// Create the object of a new inode with znode `z` (completed here: links and size
    /// of a directory, size of a symlink, rdev), at id `at` when given (replay) or a
    /// fresh id. Returns the id.
    fn make_node(&self, tx: &TxHold, at: Option<u64>, what: &NewNode<'_>, z: &mut ZnodePhys, recordsize: u32) -> Result<u64> {
        let os = &*self.os;
        let new = |otype, blksz, max_blksz, z: &ZnodePhys| -> Result<u64> {
            Ok(match at {
                Some(obj) => {
                    os.claim_object(tx, obj, otype, blksz, max_blksz, &z.encode())?;
                    obj
                }
                None => os.create_object(tx, otype, blksz, max_blksz, &z.encode())?,
            })
        };
        let ino = match *what {
            NewNode::Dir => {
                z.links = 2;
                z.size = DIR_CURSOR_BASE;
                let ino = match at {
                    Some(obj) => {
                        zap::create_at(os, tx, obj, ObjectType::DirZap)?;
                        obj
                    }
                    None => zap::create(os, tx, ObjectType::DirZap)?,
                };
                os.set_bonus(tx, ino, &z.encode())?;
                ino
            }
            NewNode::File => new(ObjectType::FileData, FILE_BLKSZ_MIN_BYTES, recordsize, z)?,
            NewNode::Special(_, rdev) => {
                z.rdev = rdev;
                new(ObjectType::FileData, FILE_BLKSZ_MIN_BYTES, FILE_BLKSZ_MIN_BYTES, z)?
            }
            NewNode::Symlink(target) => {
                z.size = target.len() as u64;
                let ino = new(ObjectType::Symlink, FILE_BLKSZ_MIN_BYTES, 4096, z)?;
                os.write(tx, ino, 0, target)?;
                ino
            }
        };
        if ino > DIRENT_OBJ_MASK {
            return Err(ZplError::Corrupt {
                object: ino,
                what: "object id exceeds 60 bits",
            });
        }
        Ok(ino)
    }

    /// Enter the new inode `ino` as `dir/name` and account for it in `dir`.
    fn link_new_node(&self, op: &mut Op<'_>, dir: u64, name: &[u8], ino: u64, kind: FileKind) -> Result<()> {
        zap::add(&*self.os, &op.tx, dir, name, dirent_make(ino, kind))?;
        op.dir_changed(dir, 1)?;
        if kind == FileKind::Dir {
            op.add_links(dir, 1)?;
        }
        Ok(())
    }

    /// Replay of a create record: the inode gets its logged id and znode.
    fn replay_create(&self, dir: u64, name: &[u8], obj: u64, mut z: ZnodePhys, target: &[u8]) -> Result<()> {
        validate_name(name)?;
        let kind = z.kind();
        let what = match kind {
            FileKind::Dir => NewNode::Dir,
            FileKind::File => NewNode::File,
            FileKind::Symlink => NewNode::Symlink(target),
            k => NewNode::Special(k, z.rdev),
        };
        let recordsize = self.opts.read().recordsize_bytes;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        op.get_dir(dir)?;
        if zap::lookup(&*self.os, dir, name)?.is_some() {
            return Err(ZplError::Exists);
        }
        let ino = self.make_node(&op.tx, Some(obj), &what, &mut z, recordsize)?;
        self.link_new_node(&mut op, dir, name, ino, kind)?;
        op.commit()
    }

    /// Create a regular file `name` in `dir` (fails with `Exists` if present).
    pub fn create(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.create_node(dir, name, mode, uid, gid, NewNode::File)
    }

    /// Create a regular file, device node, FIFO or socket; the type comes from the
    /// S_IFMT bits of `mode` (0 means a regular file).
    pub fn mknod(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32, rdev: u64) -> Result<Attr> {
        let what = match FileKind::from_mode(mode) {
            None if mode & S_IFMT == 0 => NewNode::File,
            Some(FileKind::File) => NewNode::File,
            Some(k @ (FileKind::BlockDev | FileKind::CharDev)) => NewNode::Special(k, rdev),
            Some(k @ (FileKind::Fifo | FileKind::Socket)) => NewNode::Special(k, 0),
            _ => return Err(ZplError::Invalid("mknod of a directory, symlink or unknown type")),
        };
        self.create_node(dir, name, mode, uid, gid, what)
    }

    /// Create directory `name` in `dir`.
    pub fn mkdir(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.create_node(dir, name, mode, uid, gid, NewNode::Dir)
    }

    /// Create symlink `name` in `dir` pointing at `target`.
    pub fn symlink(&self, dir: u64, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        self.create_node(dir, name, 0o777, uid, gid, NewNode::Symlink(target))
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let _ns = self.ns.read();
        let z = self.load(ino)?;
        if z.kind() != FileKind::Symlink {
            return Err(ZplError::Invalid("readlink of a non-symlink"));
        }
        if z.size > SYMLINK_MAX_BYTES as u64 {
            return Err(ZplError::Corrupt {
                object: ino,
                what: "symlink target too long",
            });
        }
        let mut buf = vec![0u8; z.size as usize];
        self.os.read(ino, 0, &mut buf)?;
        Ok(buf)
    }

    /// Add hard link `newname` in `newdir` to `ino`.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8]) -> Result<Attr> {
        self.check_writable()?;
        if is_dot(newname) {
            return Err(ZplError::Exists);
        }
        validate_name(newname)?;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        op.get_dir(newdir)?;
        let z = op.get(ino)?.clone();
        if z.is_dir() {
            return Err(ZplError::Perm);
        }
        if z.links == 0 {
            return Err(ZplError::NotFound);
        }
        if z.links >= LINK_MAX {
            return Err(ZplError::TooManyLinks);
        }
        if zap::lookup(&*self.os, newdir, newname)?.is_some() {
            return Err(ZplError::Exists);
        }
        zap::add(&*self.os, &op.tx, newdir, newname, dirent_make(ino, z.kind()))?;
        op.dir_changed(newdir, 1)?;
        op.add_links(ino, 1)?;
        let out = op.get(ino)?.clone();
        op.commit_log(TX_LINK, log::link_body(newdir, ino, newname))?;
        drop(_ns);
        self.sync_always()?;
        self.attr_of(ino, &out)
    }

    /// Look `name` up in `dir` for a change: the entry's inode and kind.
    fn entry(&self, dir: u64, name: &[u8]) -> Result<Option<(u64, FileKind)>> {
        match zap::lookup(&*self.os, dir, name)? {
            Some(v) => Ok(Some(dirent_split(dir, v)?)),
            None => Ok(None),
        }
    }

    /// Remove the non-directory `name` from `dir`; the inode is freed when its last
    /// link goes and nobody has it open.
    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.check_writable()?;
        if is_dot(name) {
            return Err(ZplError::IsDir);
        }
        validate_name(name)?;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        op.get_dir(dir)?;
        let (ino, kind) = self.entry(dir, name)?.ok_or(ZplError::NotFound)?;
        if kind == FileKind::Dir {
            return Err(ZplError::IsDir);
        }
        op.get(ino)?;
        zap::remove(&*self.os, &op.tx, dir, name)?;
        op.dir_changed(dir, -1)?;
        op.add_links(ino, -1)?;
        if op.get(ino)?.links == 0 {
            op.drop_inode(ino)?;
        }
        op.commit_log(TX_REMOVE, log::remove_body(dir, name))?;
        drop(_ns);
        self.sync_always()
    }

    /// Remove the empty directory `name` from `dir`.
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        self.check_writable()?;
        match name {
            b"." => return Err(ZplError::Invalid("rmdir of '.'")),
            b".." => return Err(ZplError::NotEmpty),
            _ => validate_name(name)?,
        }
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        op.get_dir(dir)?;
        let (ino, kind) = self.entry(dir, name)?.ok_or(ZplError::NotFound)?;
        if kind != FileKind::Dir {
            return Err(ZplError::NotDir);
        }
        if zap::count(&*self.os, ino)? != 0 {
            return Err(ZplError::NotEmpty);
        }
        zap::remove(&*self.os, &op.tx, dir, name)?;
        op.dir_changed(dir, -1)?;
        op.add_links(dir, -1)?;
        self.os.free_object(&op.tx, ino)?;
        op.nodes.remove(&ino);
        op.commit_log(TX_RMDIR, log::remove_body(dir, name))?;
        drop(_ns);
        self.sync_always()
    }

    /// True if `ancestor` is `dir` or on the parent chain from `dir` to the root.
    fn is_ancestor(&self, op: &mut Op<'_>, ancestor: u64, dir: u64) -> Result<bool> {
        let mut cur = dir;
        for _ in 0..MAX_DEPTH {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == self.root {
                return Ok(false);
            }
            cur = op.get(cur)?.parent;
        }
        Err(ZplError::Corrupt {
            object: dir,
            what: "parent chain longer than MAX_DEPTH",
        })
    }

    /// Rename `dir/name` to `newdir/newname`. `flags`: [`RENAME_NOREPLACE`],
    /// [`RENAME_EXCHANGE`]. Replaces an existing target as POSIX rename does.
    pub fn rename(&self, dir: u64, name: &[u8], newdir: u64, newname: &[u8], flags: u32) -> Result<()> {
        self.check_writable()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 || flags == RENAME_NOREPLACE | RENAME_EXCHANGE {
            return Err(ZplError::Invalid("unknown or conflicting rename flags"));
        }
        if is_dot(name) || is_dot(newname) {
            return Err(ZplError::Invalid("rename of '.' or '..'"));
        }
        validate_name(name)?;
        validate_name(newname)?;
        let tx = self.hold()?;
        let _ns = self.ns.write();
        let mut op = Op::new(self, tx);
        op.get_dir(dir)?;
        op.get_dir(newdir)?;
        let (src, src_kind) = self.entry(dir, name)?.ok_or(ZplError::NotFound)?;
        let dst = self.entry(newdir, newname)?;
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(ZplError::Exists);
        }
        if flags & RENAME_EXCHANGE != 0 && dst.is_none() {
            return Err(ZplError::NotFound);
        }
        if let Some((d, _)) = dst {
            if d == src {
                // Same inode (the same name, or two hard links): POSIX says do nothing.
                return Ok(());
            }
        }
        let src_dir = src_kind == FileKind::Dir;
        if src_dir && dir != newdir && self.is_ancestor(&mut op, src, newdir)? {
            return Err(ZplError::Invalid("cannot move a directory into its own subtree"));
        }
        let os = &*self.os;
        if flags & RENAME_EXCHANGE != 0 {
            let (dst, dst_kind) = dst.expect("checked above");
            let dst_dir = dst_kind == FileKind::Dir;
            if dst_dir && dir != newdir && self.is_ancestor(&mut op, dst, dir)? {
                return Err(ZplError::Invalid("cannot move a directory into its own subtree"));
            }
            zap::update(os, &op.tx, dir, name, dirent_make(dst, dst_kind))?;
            zap::update(os, &op.tx, newdir, newname, dirent_make(src, src_kind))?;
            if dir != newdir {
                let delta = i64::from(src_dir) - i64::from(dst_dir);
                if delta != 0 {
                    op.add_links(dir, -delta)?;
                    op.add_links(newdir, delta)?;
                }
            }
            op.get_mut(src)?.parent = newdir;
            op.get_mut(dst)?.parent = dir;
            op.add_links(src, 0)?;
            op.add_links(dst, 0)?;
            op.dir_changed(dir, 0)?;
            op.dir_changed(newdir, 0)?;
            op.commit_log(TX_RENAME, log::rename_body(dir, name, newdir, newname, flags))?;
            drop(_ns);
            return self.sync_always();
        }
        // Plain rename, possibly over an existing target.
        if let Some((dst, dst_kind)) = dst {
            let dst_dir = dst_kind == FileKind::Dir;
            if src_dir && !dst_dir {
                return Err(ZplError::NotDir);
            }
            if !src_dir && dst_dir {
                return Err(ZplError::IsDir);
            }
            if dst_dir && zap::count(os, dst)? != 0 {
                return Err(ZplError::NotEmpty);
            }
            op.get(dst)?;
            zap::remove(os, &op.tx, newdir, newname)?;
            op.dir_changed(newdir, -1)?;
            if dst_dir {
                op.add_links(newdir, -1)?;
                os.free_object(&op.tx, dst)?;
                op.nodes.remove(&dst);
            } else {
                op.add_links(dst, -1)?;
                if op.get(dst)?.links == 0 {
                    op.drop_inode(dst)?;
                }
            }
        }
        zap::remove(os, &op.tx, dir, name)?;
        op.dir_changed(dir, -1)?;
        zap::add(os, &op.tx, newdir, newname, dirent_make(src, src_kind))?;
        op.dir_changed(newdir, 1)?;
        if src_dir && dir != newdir {
            op.add_links(dir, -1)?;
            op.add_links(newdir, 1)?;
        }
        op.get_mut(src)?.parent = newdir;
        op.add_links(src, 0)?;
        op.commit_log(TX_RENAME, log::rename_body(dir, name, newdir, newname, flags))?;
        drop(_ns);
        self.sync_always()
    }

    /// Note an open handle on `ino` (the inode stays alive while unlinked).
    pub fn open_file(&self, ino: u64) -> Result<()> {
        let _ns = self.ns.read();
        self.load(ino)?;
        *self.open.lock().entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Drop an open handle on `ino`; the last release of an unlinked inode frees it.
    pub fn release_file(&self, ino: u64) -> Result<()> {
        {
            let _ns = self.ns.write();
            let mut open = self.open.lock();
            let Some(n) = open.get_mut(&ino) else {
                return Err(ZplError::Invalid("release of an inode that is not open"));
            };
            *n -= 1;
            if *n > 0 {
                return Ok(());
            }
            open.remove(&ino);
            drop(open);
            match self.load(ino) {
                Ok(z) if z.links == 0 => {}
                Ok(_) | Err(ZplError::NotFound) => return Ok(()),
                Err(e) => return Err(e),
            }
            if self.check_writable().is_err() {
                // Stays in the delete queue; freed at the next writable open.
                return Ok(());
            }
        }
        // Last handle on an unlinked inode: free it. The tx hold comes before the
        // lock (see the lock order), so re-check after taking the lock again.
        let tx = self.hold()?;
        let _ns = self.ns.write();
        if self.open.lock().contains_key(&ino) {
            return Ok(());
        }
        match self.load(ino) {
            Ok(z) if z.links == 0 => {}
            Ok(_) | Err(ZplError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.before_free(ino);
        self.os.free_object(&tx, ino)?;
        match zap::remove(&*self.os, &tx, self.delete_queue, &dq_name(ino)) {
            Ok(()) | Err(DmuError::NotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Read up to `size` bytes of file `ino` at `offset` (short at end of file; holes
    /// read as zeros).
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let n = self.read_into(ino, offset, size, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// [`Fs::read`] into the caller's buffer: reads `n` bytes (at most `size`, fewer
    /// where the file ends) into `buf[..n]` and returns `n`. `buf` grows to `n` bytes
    /// when it is shorter and is never shrunk or cleared, so a buffer kept between
    /// calls (the FUSE workers keep one) is zero-filled only where it grows, and only
    /// as far as the file has bytes to return.
    pub fn read_into(&self, ino: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<usize> {
        let (n, touch) = {
            let _ns = self.ns.read();
            let _s = self.stripe(ino).read();
            let z = self.load(ino)?;
            require_file(z.kind(), "read of a special file")?;
            let n = z.size.saturating_sub(offset).min(u64::from(size)) as usize;
            if buf.len() < n {
                buf.resize(n, 0);
            }
            if n > 0 {
                self.os.read(ino, offset, &mut buf[..n])?;
            }
            (n, self.atime_due(&z))
        };
        if touch {
            // Best effort: a failed atime update never fails the read.
            if let Err(e) = self.touch_atime(ino) {
                tracing::debug!(ino, error = %e, "atime update failed");
            }
        }
        Ok(n)
    }

    fn atime_due(&self, z: &ZnodePhys) -> bool {
        let o = *self.opts.read();
        if !o.atime || o.readonly || self.os.is_readonly() {
            return false;
        }
        z.atime <= z.mtime || z.atime <= z.ctime || Timespec::now().sec - z.atime.sec >= RELATIME_SECS
    }

    fn touch_atime(&self, ino: u64) -> Result<()> {
        let tx = self.hold()?;
        let _ns = self.ns.read();
        let _s = self.stripe(ino).write();
        let mut z = self.load(ino)?;
        if self.atime_due(&z) {
            z.atime = Timespec::now();
            self.os.set_bonus(&tx, ino, &z.encode())?;
        }
        Ok(())
    }

    /// Write `data` to file `ino` at `offset`, extending it; returns bytes written.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.check_writable()?;
        let len = u32::try_from(data.len()).map_err(|_| ZplError::Invalid("write larger than 4 GiB"))?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= FILE_SIZE_MAX_BYTES)
            .ok_or(ZplError::FileTooBig)?;
        // The store refuses dirty data that might not fit before it changes anything.
        // When the shortfall is only space on its way back (frees deferred for a few
        // txgs, dirty overwrites whose syncs free the old blocks) and other writers took
        // the room between the wait before the hold and the check under it, let go of
        // the tx and wait again (OpenZFS `dmu_tx_assign` returns ERESTART and waits for
        // the next txg in that case). A pool that is really full fails every attempt at
        // once, its waits having nothing to wait for.
        let mut attempt = 0;
        let (tx, _ns, _s, mut z) = loop {
            let tx = self.hold()?;
            let ns = self.ns.read();
            let s = self.stripe(ino).write();
            let z = self.load(ino)?;
            require_file(z.kind(), "write to a special file")?;
            if data.is_empty() {
                return Ok(0);
            }
            match self.os.write(&tx, ino, offset, data) {
                Ok(()) => break (tx, ns, s, z),
                Err(tarn_dmu::DmuError::NoSpace) if attempt < WRITE_SPACE_RETRIES => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        };
        let now = Timespec::now();
        z.size = z.size.max(end);
        z.mtime = now;
        z.ctime = now;
        self.os.set_bonus(&tx, ino, &z.encode())?;
        if let Some(zil) = &self.zil {
            zil.log_write(tx.txg, ino, offset, data.len() as u64);
        }
        drop((_s, _ns, tx));
        self.sync_always()?;
        Ok(len)
    }

    /// Share whole records of file `ino_in` from byte `off_in` as records of file
    /// `ino_out` from `off_out`, instead of copying them (OpenZFS 2.2's block cloning:
    /// both files name the same blocks, counted in the pool's block reference table,
    /// and a later write to either copies only what it writes). Only what lies on
    /// record boundaries is shared: both offsets must be multiples of the source's
    /// block size; the range is cut down to whole records, except that a range ending
    /// at the source's end of file takes its last record whole when the target ends
    /// there too. The target takes the source's block size when it has no data yet.
    /// Source records changed since the last txg sync are synced first (one wait).
    /// The clone is durable when this returns (it waits for its txg, as the intent
    /// log has no record for it).
    ///
    /// Returns the bytes shared: 0 (and nothing changed) when nothing could be —
    /// unaligned offsets, a range shorter than a record, different block sizes, a
    /// store that cannot share blocks, a full reference table; the caller copies
    /// those bytes instead. Errors: `ReadOnly`, `IsDir`/`Invalid` for a non-regular
    /// file, `FileTooBig`, and what the object store returns.
    pub fn clone_range(&self, ino_in: u64, off_in: u64, ino_out: u64, off_out: u64, len: u64) -> Result<u64> {
        self.check_writable()?;
        off_out.checked_add(len).filter(|&e| e <= FILE_SIZE_MAX_BYTES).ok_or(ZplError::FileTooBig)?;
        for attempt in 0..2 {
            let tx = self.hold()?;
            let _ns = self.ns.read();
            let (a, b) = (ino_in % STRIPES as u64, ino_out % STRIPES as u64);
            let _s1 = self.stripes[a.min(b) as usize].write();
            let _s2 = (a != b).then(|| self.stripes[a.max(b) as usize].write());
            let zin = self.load(ino_in)?;
            let mut zout = self.load(ino_out)?;
            for z in [&zin, &zout] {
                require_file(z.kind(), "clone of a special file")?;
            }
            let blksz = u64::from(self.os.object_info(ino_in)?.datablksz_bytes);
            let len = len.min(zin.size.saturating_sub(off_in));
            if blksz == 0 || !off_in.is_multiple_of(blksz) || !off_out.is_multiple_of(blksz) {
                return Ok(0);
            }
            let mut nblocks = len / blksz;
            let tail = len % blksz != 0 && off_in + len == zin.size && off_out + len >= zout.size;
            if tail {
                nblocks += 1;
            }
            if nblocks == 0 {
                return Ok(0);
            }
            let bytes = if tail { len } else { nblocks * blksz };
            let Some((src_blksz, bps)) = self.os.block_pointers(ino_in, off_in / blksz, nblocks)? else {
                // Changes not yet synced (or a store that cannot share): sync once.
                drop((_s2, _s1, _ns, tx));
                if attempt == 0 {
                    self.os.wait_synced()?;
                }
                continue;
            };
            if u64::from(src_blksz) != blksz {
                return Ok(0);
            }
            match self.os.clone_blocks(&tx, ino_out, off_out / blksz, src_blksz, &bps) {
                Ok(()) => {}
                Err(tarn_dmu::DmuError::Invalid(_)) => return Ok(0),
                Err(e) => return Err(e.into()),
            }
            let now = Timespec::now();
            zout.size = zout.size.max(off_out + bytes);
            zout.mtime = now;
            zout.ctime = now;
            self.os.set_bonus(&tx, ino_out, &zout.encode())?;
            drop((_s2, _s1, _ns, tx));
            self.os.wait_synced()?;
            return Ok(bytes);
        }
        Ok(0)
    }

    /// List directory `dir` from `cursor` (0 = start): ".", "..", then the entries,
    /// at most `max`. Cursors stay valid while entries are added and removed.
    pub fn readdir(&self, dir: u64, cursor: u64, max: usize) -> Result<Vec<DirEntry>> {
        let _ns = self.ns.read();
        let d = self.load(dir)?;
        if !d.is_dir() {
            return Err(ZplError::NotDir);
        }
        let mut out = Vec::new();
        if cursor == 0 && out.len() < max {
            out.push(DirEntry {
                name: b".".to_vec(),
                ino: dir,
                kind: FileKind::Dir,
                next_cursor: 1,
            });
        }
        if cursor <= 1 && out.len() < max {
            out.push(DirEntry {
                name: b"..".to_vec(),
                ino: d.parent,
                kind: FileKind::Dir,
                next_cursor: DIR_CURSOR_BASE,
            });
        }
        if out.len() >= max {
            return Ok(out);
        }
        if cursor >= DIR_CURSOR_END {
            return Ok(out);
        }
        let zc = cursor.saturating_sub(DIR_CURSOR_BASE);
        for e in zap::list(&*self.os, dir, zc, max - out.len())? {
            let (ino, kind) = dirent_split(dir, e.value)?;
            // ZAP cursors are at most 2^63 - 2; the one entry that could map past
            // i64::MAX is the last possible key, after which nothing can follow.
            let next_cursor = e.next_cursor.saturating_add(DIR_CURSOR_BASE).min(DIR_CURSOR_END);
            out.push(DirEntry {
                name: e.name,
                ino,
                kind,
                next_cursor,
            });
        }
        Ok(out)
    }

    /// Make every change to `ino` made so far durable (`fsync`, `fdatasync`,
    /// `O_SYNC` writes): with an intent log, as soon as its records are on disk.
    /// Under `sync=disabled` it returns at once. The whole log is committed, so
    /// changes to other files ride along (as OpenZFS does for namespace changes).
    pub fn fsync(&self, ino: u64) -> Result<()> {
        let _ = ino;
        if self.opts.read().sync == SyncMode::Disabled {
            return Ok(());
        }
        self.commit_log()
    }

    /// `sync(2)`/`syncfs` on this file system: the same as [`Fs::fsync`] of everything.
    pub fn sync_fs(&self) -> Result<()> {
        self.fsync(self.root)
    }

    /// File-system statistics.
    pub fn statfs(&self) -> Result<StatFs> {
        let sp = self.os.space();
        let ffree = sp.avail_bytes / 512;
        Ok(StatFs {
            blocks: (sp.used_bytes + sp.avail_bytes) / 4096,
            bfree: sp.avail_bytes / 4096,
            bavail: sp.avail_bytes / 4096,
            files: ffree + sp.used_bytes / 4096,
            ffree,
            bsize: 4096,
            frsize: 4096,
            namelen: NAME_MAX_BYTES as u32,
        })
    }

    /// Number of inodes currently open (for tests and `zdb`).
    pub fn open_count(&self, ino: u64) -> u32 {
        self.open.lock().get(&ino).copied().unwrap_or(0)
    }
}

/// The path of `object` inside the file system in `os` ("/dir/file"), found by
/// following parent pointers and looking up each name in the parent directory
/// (OpenZFS `zfs_obj_to_path`). For a file with several hard links, the name in the
/// directory its parent pointer names. None when the object is not a live file or
/// directory of this file system, or its path cannot be read (for `zpool status -v`,
/// which then prints `dataset:<0xN>`).
pub fn object_path(os: &dyn ObjectStore, object: u64) -> Option<String> {
    let root = zap::lookup(os, MASTER_NODE_OBJ, b"ROOT").ok()??;
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut cur = object;
    // Bounded: a corrupt parent cycle must not loop forever.
    for _ in 0..4096 {
        if cur == root {
            names.reverse();
            let parts: Vec<String> = names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
            return Some(format!("/{}", parts.join("/")));
        }
        let parent = ZnodePhys::decode(cur, &os.bonus(cur).ok()?).ok()?.parent;
        let mut cursor = 0;
        let name = loop {
            let batch = zap::list(os, parent, cursor, 256).ok()?;
            let last = batch.last()?.next_cursor;
            if let Some(e) = batch.iter().find(|e| e.value & DIRENT_OBJ_MASK == cur) {
                break e.name.clone();
            }
            cursor = last;
        };
        names.push(name);
        cur = parent;
    }
    None
}
