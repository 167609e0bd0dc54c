//! The FUSE ceiling for `bench/fio.sh`: a minimal file system on `fuser` mounted with
//! exactly Tarn's session settings ([`tarn_fuse::session_config`] with the daemon's
//! options: 16 worker threads, `allow_other`, `auto_unmount`, `default_permissions`,
//! 1 MiB `max_write`, 1 MiB readahead). No file system on FUSE here can beat it.
//!
//! Three modes:
//! - `fuse_null MOUNTPOINT`: names and sizes live in memory; reads return zeros from
//!   memory, writes are discarded (only the size grows), fsync does nothing.
//! - `fuse_null --uring MOUNTPOINT`: the same, with the requests served over
//!   FUSE-over-io_uring (kernel 6.14+, the fuse module's `enable_uring` parameter on):
//!   at INIT it asks for `FUSE_OVER_IO_URING`, then one thread per CPU, pinned to it,
//!   registers `ring::DEPTH` entries on a ring of its own and answers each request
//!   with the command that also fetches the next (`ring` below). Only the requests a
//!   benchmark sends are served there (lookup, getattr, setattr of size and mode,
//!   mkdir, unlink, rmdir, open, create, read, write, statfs, release, fsync,
//!   opendir, readdir, releasedir); the rest get ENOSYS (flush too, as in the
//!   other modes and in Tarn). Forgets and interrupts still come through /dev/fuse.
//!   `fuse-null-uring` in `bench/fio.sh`.
//! - `fuse_null --passthrough DIR MOUNTPOINT`: every request is forwarded to the same
//!   path under `DIR` (open/pread/pwrite/fsync on real descriptors): FUSE's cost over
//!   the raw directory.
//!
//! Flat and simple on purpose: regular files, directories and symbolic links only
//! (no hard links, renames or special files: they answer ENOSYS). Runs until
//! unmounted (`fusermount -u`);
//! killed, `auto_unmount` lets `fusermount` unmount it.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::from_secs(1);
/// Zeros that null-mode reads are served from (the largest read the kernel sends).
static ZEROS: [u8; 1 << 20] = [0u8; 1 << 20];

struct Node {
    kind: FileType,
    size_bytes: u64,
    parent: u64,
    name: OsString,
    perm: u16,
}

struct State {
    nodes: HashMap<u64, Node>,
    names: BTreeMap<(u64, OsString), u64>,
    next_ino: u64,
    files: HashMap<u64, std::fs::File>,
    next_fh: u64,
    /// Symbolic links' targets (null mode; passthrough asks the backing directory).
    links: HashMap<u64, Vec<u8>>,
}

struct NullFs {
    /// Backing directory in passthrough mode.
    backing: Option<PathBuf>,
    /// Ask for FUSE over io_uring at INIT (`--uring`).
    uring: bool,
    st: Arc<Mutex<State>>,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(errno_code(e))
}

/// The errno value of `e` (EIO when it has none).
fn errno_code(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl NullFs {
    fn path_of(st: &State, ino: u64) -> PathBuf {
        let mut parts = Vec::new();
        let mut at = ino;
        while at != 1 {
            let n = &st.nodes[&at];
            parts.push(n.name.clone());
            at = n.parent;
        }
        parts.iter().rev().collect()
    }

    fn backing_path(&self, st: &State, ino: u64) -> Option<PathBuf> {
        self.backing.as_ref().map(|b| b.join(Self::path_of(st, ino)))
    }

    fn attr(&self, st: &State, ino: u64) -> Result<FileAttr, Errno> {
        let n = st.nodes.get(&ino).ok_or(Errno::from_i32(libc::ENOENT))?;
        let now = SystemTime::now();
        let mut a = FileAttr {
            ino: INodeNo(ino),
            size: n.size_bytes,
            blocks: n.size_bytes.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: n.kind,
            perm: n.perm,
            nlink: if n.kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 128 << 10,
            flags: 0,
        };
        if let Some(p) = self.backing_path(st, ino) {
            let m = std::fs::symlink_metadata(&p).map_err(|e| errno(&e))?;
            let t = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
            a.size = m.size();
            a.blocks = m.blocks();
            a.atime = t(m.atime(), m.atime_nsec());
            a.mtime = t(m.mtime(), m.mtime_nsec());
            a.ctime = t(m.ctime(), m.ctime_nsec());
            a.perm = (m.mode() & 0o7777) as u16;
            a.uid = m.uid();
            a.gid = m.gid();
        }
        Ok(a)
    }

    /// Add `name` under `parent` (its backing object already made in passthrough).
    fn add(&self, st: &mut State, parent: u64, name: &OsStr, kind: FileType, perm: u16) -> u64 {
        let ino = st.next_ino;
        st.next_ino += 1;
        st.nodes.insert(
            ino,
            Node {
                kind,
                size_bytes: 0,
                parent,
                name: name.to_os_string(),
                perm,
            },
        );
        st.names.insert((parent, name.to_os_string()), ino);
        ino
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        match self.remove_name(parent, name, dir) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    /// Remove `name` from directory `parent` (`dir`: it must be an empty directory);
    /// errors are errno values.
    fn remove_name(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), i32> {
        let mut st = self.st.lock();
        let Some(&ino) = st.names.get(&(parent, name.to_os_string())) else {
            return Err(libc::ENOENT);
        };
        if dir && st.names.range((ino, OsString::new())..).next().is_some_and(|((p, _), _)| *p == ino) {
            return Err(libc::ENOTEMPTY);
        }
        if let Some(p) = self.backing_path(&st, ino) {
            let r = if dir { std::fs::remove_dir(&p) } else { std::fs::remove_file(&p) };
            r.map_err(|e| errno_code(&e))?;
        }
        st.names.remove(&(parent, name.to_os_string()));
        st.nodes.remove(&ino);
        st.links.remove(&ino);
        Ok(())
    }

    fn open_backing(&self, st: &mut State, ino: u64, flags: i32, create: bool) -> Result<u64, Errno> {
        let Some(p) = self.backing_path(st, ino) else { return Ok(0) };
        let mut o = std::fs::OpenOptions::new();
        let acc = flags & libc::O_ACCMODE;
        o.read(acc != libc::O_WRONLY).write(acc != libc::O_RDONLY || create).create(create);
        let f = o.open(&p).map_err(|e| errno(&e))?;
        let fh = st.next_fh;
        st.next_fh += 1;
        st.files.insert(fh, f);
        Ok(fh)
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(nearest) = config.set_max_write(tarn_fuse::MAX_WRITE_BYTES) {
            let _ = config.set_max_write(nearest);
        }
        if self.uring && config.add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING).is_err() {
            eprintln!("fuse_null: the kernel does not offer FUSE over io_uring (echo Y > /sys/module/fuse/parameters/enable_uring)");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.st.lock();
        let ino = match st.names.get(&(parent.0, name.to_os_string())) {
            Some(&i) => i,
            None => {
                // Passthrough: names made outside the mount (or before it) appear too.
                let Some(dir) = self.backing_path(&st, parent.0) else {
                    return reply.error(Errno::from_i32(libc::ENOENT));
                };
                match std::fs::symlink_metadata(dir.join(name)) {
                    Ok(m) if m.is_dir() => self.add(&mut st, parent.0, name, FileType::Directory, 0o755),
                    Ok(m) if m.is_file() => self.add(&mut st, parent.0, name, FileType::RegularFile, 0o644),
                    _ => return reply.error(Errno::from_i32(libc::ENOENT)),
                }
            }
        };
        match self.attr(&st, ino) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.st.lock();
        match self.attr(&st, ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.st.lock();
        if let Some(p) = self.backing_path(&st, ino.0) {
            if let Some(sz) = size {
                if let Err(e) = std::fs::OpenOptions::new().write(true).open(&p).and_then(|f| f.set_len(sz)) {
                    return reply.error(errno(&e));
                }
            }
        }
        if let Some(n) = st.nodes.get_mut(&ino.0) {
            if let Some(sz) = size {
                n.size_bytes = sz;
            }
            if let Some(m) = mode {
                n.perm = (m & 0o7777) as u16;
            }
        }
        match self.attr(&st, ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let mut st = self.st.lock();
        if st.names.contains_key(&(parent.0, name.to_os_string())) {
            return reply.error(Errno::from_i32(libc::EEXIST));
        }
        if let Some(dir) = self.backing_path(&st, parent.0) {
            if let Err(e) = std::fs::create_dir(dir.join(name)) {
                return reply.error(errno(&e));
            }
        }
        let ino = self.add(&mut st, parent.0, name, FileType::Directory, (mode & 0o7777) as u16);
        match self.attr(&st, ino) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let mut st = self.st.lock();
        if st.names.contains_key(&(parent.0, link_name.to_os_string())) {
            return reply.error(Errno::from_i32(libc::EEXIST));
        }
        if let Some(dir) = self.backing_path(&st, parent.0) {
            if let Err(e) = std::os::unix::fs::symlink(target, dir.join(link_name)) {
                return reply.error(errno(&e));
            }
        }
        let ino = self.add(&mut st, parent.0, link_name, FileType::Symlink, 0o777);
        let t = target.as_os_str().as_bytes().to_vec();
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.size_bytes = t.len() as u64;
        }
        st.links.insert(ino, t);
        match self.attr(&st, ino) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.st.lock();
        if let Some(p) = self.backing_path(&st, ino.0) {
            return match std::fs::read_link(&p) {
                Ok(t) => reply.data(t.as_os_str().as_bytes()),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match st.links.get(&ino.0) {
            Some(t) => reply.data(t),
            None => reply.error(Errno::from_i32(libc::EINVAL)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent.0, name, false, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent.0, name, true, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.st.lock();
        if flags.0 & libc::O_TRUNC != 0 {
            if let Some(n) = st.nodes.get_mut(&ino.0) {
                n.size_bytes = 0;
            }
        }
        match self.open_backing(&mut st, ino.0, flags.0, false) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, flags: i32, reply: ReplyCreate) {
        let mut st = self.st.lock();
        let ino = match st.names.get(&(parent.0, name.to_os_string())) {
            Some(&i) => i,
            None => self.add(&mut st, parent.0, name, FileType::RegularFile, (mode & 0o7777) as u16),
        };
        let fh = match self.open_backing(&mut st, ino, flags, true) {
            Ok(fh) => fh,
            Err(e) => return reply.error(e),
        };
        match self.attr(&st, ino) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock_owner: Option<LockOwner>, reply: ReplyData) {
        if self.backing.is_some() {
            let f = self.st.lock().files.get(&fh.0).and_then(|f| f.try_clone().ok());
            let Some(f) = f else { return reply.error(Errno::from_i32(libc::EBADF)) };
            let mut buf = vec![0u8; size as usize];
            match f.read_at(&mut buf, offset) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(&e)),
            }
            return;
        }
        let file_size = self.st.lock().nodes.get(&ino.0).map(|n| n.size_bytes).unwrap_or(0);
        let n = file_size.saturating_sub(offset).min(size as u64).min(ZEROS.len() as u64) as usize;
        reply.data(&ZEROS[..n]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if self.backing.is_some() {
            let f = self.st.lock().files.get(&fh.0).and_then(|f| f.try_clone().ok());
            let Some(f) = f else { return reply.error(Errno::from_i32(libc::EBADF)) };
            match f.write_all_at(data, offset) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(&e)),
            }
            return;
        }
        if let Some(n) = self.st.lock().nodes.get_mut(&ino.0) {
            n.size_bytes = n.size_bytes.max(offset + data.len() as u64);
        }
        reply.written(data.len() as u32);
    }

    /// ENOSYS, as Tarn answers (`tarn_fuse`): the kernel then stops sending FLUSH at
    /// every close, so the ceiling carries no request Tarn does not.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    fn release(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock_owner: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.st.lock().files.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let f = self.st.lock().files.get(&fh.0).and_then(|f| f.try_clone().ok());
        let r = match f {
            Some(f) if datasync => f.sync_data(),
            Some(f) => f.sync_all(),
            None => Ok(()),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let st = self.st.lock();
        let mut entries: Vec<(u64, FileType, OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (st.nodes.get(&ino.0).map(|n| n.parent).unwrap_or(1), FileType::Directory, "..".into()),
        ];
        for ((p, name), &child) in st.names.range((ino.0, OsString::new())..) {
            if *p != ino.0 {
                break;
            }
            entries.push((child, st.nodes[&child].kind, name.clone()));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, OsStr::from_bytes(name.as_bytes())) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let uring = args.first().is_some_and(|a| a == "--uring");
    if uring {
        args.remove(0);
    }
    let (backing, mountpoint) = match args.as_slice() {
        [m] => (None, PathBuf::from(m)),
        [flag, dir, m] if flag == "--passthrough" && !uring => (Some(PathBuf::from(dir)), PathBuf::from(m)),
        _ => {
            eprintln!("usage: fuse_null [--uring] MOUNTPOINT | fuse_null --passthrough DIR MOUNTPOINT");
            std::process::exit(2);
        }
    };
    let mut nodes = HashMap::new();
    nodes.insert(
        1,
        Node {
            kind: FileType::Directory,
            size_bytes: 0,
            parent: 1,
            name: OsString::new(),
            perm: 0o755,
        },
    );
    let st = Arc::new(Mutex::new(State {
        nodes,
        names: BTreeMap::new(),
        next_ino: 2,
        files: HashMap::new(),
        next_fh: 1,
        links: HashMap::new(),
    }));
    let fs = NullFs {
        backing,
        uring,
        st: st.clone(),
    };
    // The daemon's options (crates/cli/src/mounts.rs).
    let opts = tarn_fuse::MountOptions {
        fsname: "fuse-null".into(),
        readonly: false,
        allow_other: true,
        auto_unmount: true,
        default_permissions: true,
        // tarn_cli::memory::MOUNT_FUSE_THREADS
        threads: 16,
    };
    let cfg = tarn_fuse::session_config(&opts);
    let session = match fuser::Session::new(fs, &mountpoint, &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fuse_null: mount {}: {e}", mountpoint.display());
            std::process::exit(1);
        }
    };
    use std::os::fd::AsFd;
    let dev = match session.as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("fuse_null: dup /dev/fuse: {e}");
            std::process::exit(1);
        }
    };
    let session = match session.spawn() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fuse_null: {e}");
            std::process::exit(1);
        }
    };
    // With io_uring negotiated the kernel holds every request until each CPU's queue
    // has registered an entry, so the rings start before anything touches the mount.
    let rings = uring.then(|| {
        let null = Arc::new(NullFs { backing: None, uring, st });
        std::thread::spawn(move || {
            if let Err(e) = ring::serve(null, dev) {
                eprintln!("fuse_null: io_uring: {e}");
            }
        })
    });
    tarn_fuse::set_readahead(Path::new(&mountpoint), tarn_fuse::READAHEAD_KIB);
    // Serve until unmounted (`fusermount -u`, or the kernel's auto_unmount when this
    // process is killed).
    if let Err(e) = session.join() {
        eprintln!("fuse_null: {e}");
    }
    if let Some(r) = rings {
        let _ = r.join();
    }
}

/// FUSE over io_uring for the null mode (`--uring`; the kernel's
/// Documentation/filesystems/fuse/fuse-io-uring.rst, `fs/fuse/dev_uring.c`, the
/// structures of `include/uapi/linux/fuse.h`). One ring (128-byte SQEs) and thread
/// per CPU queue, each with `DEPTH` entries registered by `FUSE_IO_URING_CMD_REGISTER`
/// (a `URING_CMD` on the /dev/fuse descriptor whose 80-byte command holds flags,
/// commit id and queue id, and whose `addr`/`len` name two iovecs): a 288-byte header
/// (128 bytes for `fuse_in_header` on fetch and `fuse_out_header` on commit, 128 for
/// the opcode's fixed argument, 32 for flags, commit id and payload size) and a
/// payload of the largest write (the request's other arguments; on commit, every
/// argument of the reply). A request arrives as the completion of an entry's
/// command; its reply goes back with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which
/// also waits for the next request. The kernel holds every request until each CPU's
/// queue has an entry.
mod ring {
    use super::*;
    use io_uring::{cqueue, opcode, squeue, types, IoUring};
    use std::os::fd::{AsRawFd, OwnedFd};

    /// Entries registered per queue: requests one CPU can have in flight.
    const DEPTH: usize = 8;
    /// `FUSE_IO_URING_CMD_REGISTER`: hand an entry's buffers to the kernel and fetch.
    const CMD_REGISTER: u32 = 1;
    /// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: reply to the entry's request and fetch.
    const CMD_COMMIT_AND_FETCH: u32 = 2;
    /// `struct fuse_uring_req_header`: in/out header, op argument, entry fields.
    const HEADER_BYTES: usize = 288;
    /// `struct fuse_in_header`, cleared before the reply's out header is written.
    const IN_HEADER_BYTES: usize = 40;

    struct Entry {
        header: Box<[u8; HEADER_BYTES]>,
        payload: Vec<u8>,
        iov: Box<[libc::iovec; 2]>,
    }

    fn cmd(qid: u16, commit_id: u64) -> [u8; 80] {
        let mut c = [0u8; 80];
        c[8..16].copy_from_slice(&commit_id.to_le_bytes());
        c[16..18].copy_from_slice(&qid.to_le_bytes());
        c
    }

    fn sqe(fd: i32, op: u32, qid: u16, commit_id: u64, iov: Option<&[libc::iovec; 2]>, slot: usize) -> squeue::Entry128 {
        let mut b = opcode::UringCmd80::new(types::Fd(fd), op).cmd(cmd(qid, commit_id));
        if let Some(iov) = iov {
            b = b.addr(Some(iov.as_ptr() as u64));
        }
        let mut e = b.build().user_data(slot as u64);
        if iov.is_some() {
            // sqe->len = 2 iovecs (the crate's builder has no field for it).
            const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
            // SAFETY: Entry128 is repr(C), starting with the 64-byte io_uring_sqe, whose
            // `len` (u32) is at offset 24.
            unsafe { *((&mut e as *mut squeue::Entry128 as *mut u8).add(24) as *mut u32) = 2 };
        }
        e
    }

    /// The kernel's queue count: one per *possible* CPU (`num_possible_cpus()`, the
    /// highest index in `/sys/devices/system/cpu/possible` plus one), which may exceed
    /// the CPUs this process may run on; the rings are ready only once every queue
    /// has an entry, and until then every request waits.
    fn possible_cpus() -> usize {
        let highest = std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|s| s.trim().split([',', '-']).filter_map(|n| n.parse::<usize>().ok()).max());
        match highest {
            Some(h) => h + 1,
            None => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        }
    }

    pub fn serve(fs: Arc<NullFs>, dev: OwnedFd) -> std::io::Result<()> {
        let queues = possible_cpus();
        let dev = Arc::new(dev);
        let mut threads = Vec::new();
        for qid in 0..queues {
            let (fs, dev) = (fs.clone(), dev.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-ring-{qid}"))
                    .spawn(move || queue(fs, dev.as_raw_fd(), qid as u16))?,
            );
        }
        for t in threads {
            match t.join() {
                Ok(Err(e)) => eprintln!("fuse_null: ring: {e}"),
                Err(_) => eprintln!("fuse_null: ring thread panicked"),
                Ok(Ok(())) => {}
            }
        }
        Ok(())
    }

    /// One CPU's queue: pin this thread to CPU `qid` (the kernel queues a request on
    /// the queue of the CPU its caller runs on, so the reply is made there), register
    /// `DEPTH` entries, then serve requests until the connection ends.
    fn queue(fs: Arc<NullFs>, fd: i32, qid: u16) -> std::io::Result<()> {
        if (qid as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; the call only reads it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(qid as usize, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        }
        // The entries are made before the ring, so that the ring (and with it any
        // command still holding their buffers) is closed before they are freed.
        let mut ents: Vec<Entry> = (0..DEPTH)
            .map(|_| {
                let mut header = Box::new([0u8; HEADER_BYTES]);
                let mut payload = vec![0u8; tarn_fuse::MAX_WRITE_BYTES as usize];
                let iov = Box::new([
                    libc::iovec {
                        iov_base: header.as_mut_ptr().cast(),
                        iov_len: HEADER_BYTES,
                    },
                    libc::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ]);
                Entry { header, payload, iov }
            })
            .collect();
        let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder().build(2 * DEPTH as u32)?;
        let register = |ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, ents: &[Entry], slot: usize| {
            let e = sqe(fd, CMD_REGISTER, qid, 0, Some(&ents[slot].iov), slot);
            // SAFETY: the entry's buffers live in `ents` until this function returns,
            // which it does only once the kernel has ended the commands (the
            // connection's end completes them).
            unsafe { ring.submission().push(&e).map_err(|_| std::io::Error::other("submission queue full")) }
        };
        for slot in 0..DEPTH {
            register(&mut ring, &ents, slot)?;
        }
        // Entries whose command the kernel has not ended yet.
        let mut live = DEPTH;
        while live > 0 {
            ring.submit_and_wait(1)?;
            let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (ud, res) in done {
                let slot = ud as usize;
                match res {
                    // The kernel answers a register with EAGAIN until INIT is done.
                    r if r == -libc::EAGAIN => {
                        std::thread::sleep(Duration::from_millis(1));
                        register(&mut ring, &ents, slot)?;
                    }
                    // The connection ended (unmount): the kernel ends every command.
                    r if r == -libc::ENOTCONN || r == -libc::ECANCELED || r == -libc::ENODEV => live -= 1,
                    r if r < 0 => return Err(std::io::Error::from_raw_os_error(-r)),
                    _ => handle(&fs, fd, qid, &mut ring, &mut ents, slot)?,
                }
            }
        }
        Ok(())
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn put_attr(out: &mut Vec<u8>, a: &FileAttr) {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (at, mt, ct) = (secs(a.atime), secs(a.mtime), secs(a.ctime));
        let kind = match a.kind {
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            _ => libc::S_IFREG,
        };
        for v in [a.ino.0, a.size, a.blocks, at.as_secs(), mt.as_secs(), ct.as_secs()] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            at.subsec_nanos(),
            mt.subsec_nanos(),
            ct.subsec_nanos(),
            kind | a.perm as u32,
            a.nlink,
            a.uid,
            a.gid,
            a.rdev,
            a.blksize,
            0,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn entry_out(out: &mut Vec<u8>, a: &FileAttr) {
        for v in [a.ino.0, 0, 1, 1] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&[0u8; 8]);
        put_attr(out, a);
    }

    fn name(payload: &[u8]) -> &OsStr {
        let end = payload.iter().position(|&b| b == 0).unwrap_or(payload.len());
        OsStr::from_bytes(&payload[..end])
    }

    /// Serve the request in entry `slot` and commit its reply (fetching the next).
    fn handle(fs: &NullFs, fd: i32, qid: u16, ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, ents: &mut [Entry], slot: usize) -> std::io::Result<()> {
        let ent = &mut ents[slot];
        let h = &ent.header[..];
        let opcode = u32_at(h, 4);
        let unique = u64_at(h, 8);
        let nodeid = u64_at(h, 16);
        let op = &h[128..256];
        let payload_bytes = (u32_at(h, 256 + 16) as usize).min(ent.payload.len());
        // The reply's arguments, copied into the payload below; a READ reply is
        // written into the payload directly (`read_bytes`).
        let mut out: Vec<u8> = Vec::new();
        let mut error = 0i32;
        let mut read_bytes = None;
        match opcode {
            1 => {
                // LOOKUP: payload = name
                let st = fs.st.lock();
                match st
                    .names
                    .get(&(nodeid, name(&ent.payload[..payload_bytes]).to_os_string()))
                    .copied()
                    .map(|i| fs.attr(&st, i))
                {
                    Some(Ok(a)) => entry_out(&mut out, &a),
                    _ => error = -libc::ENOENT,
                }
            }
            3 | 4 => {
                // GETATTR / SETATTR (size and mode)
                let mut st = fs.st.lock();
                if opcode == 4 {
                    let valid = u32_at(op, 0);
                    if let Some(n) = st.nodes.get_mut(&nodeid) {
                        if valid & (1 << 3) != 0 {
                            n.size_bytes = u64_at(op, 16);
                        }
                        if valid & 1 != 0 {
                            n.perm = (u32_at(op, 68) & 0o7777) as u16;
                        }
                    }
                }
                match fs.attr(&st, nodeid) {
                    Ok(a) => {
                        out.extend_from_slice(&1u64.to_le_bytes());
                        out.extend_from_slice(&[0u8; 8]);
                        put_attr(&mut out, &a);
                    }
                    Err(_) => error = -libc::ENOENT,
                }
            }
            14 | 27 => {
                // OPEN / OPENDIR
                if opcode == 14 && u32_at(op, 0) as i32 & libc::O_TRUNC != 0 {
                    if let Some(n) = fs.st.lock().nodes.get_mut(&nodeid) {
                        n.size_bytes = 0;
                    }
                }
                out.extend_from_slice(&[0u8; 16]);
            }
            35 => {
                // CREATE: op = fuse_create_in, payload = name
                let mode = u32_at(op, 4);
                let mut st = fs.st.lock();
                let nm = name(&ent.payload[..payload_bytes]).to_os_string();
                let ino = match st.names.get(&(nodeid, nm.clone())) {
                    Some(&i) => i,
                    None => fs.add(&mut st, nodeid, &nm, FileType::RegularFile, (mode & 0o7777) as u16),
                };
                match fs.attr(&st, ino) {
                    Ok(a) => {
                        entry_out(&mut out, &a);
                        out.extend_from_slice(&[0u8; 16]);
                    }
                    Err(_) => error = -libc::EIO,
                }
            }
            15 => {
                // READ: zeros up to the size
                let (offset, size) = (u64_at(op, 8), u32_at(op, 16) as u64);
                let file_size = fs.st.lock().nodes.get(&nodeid).map(|n| n.size_bytes).unwrap_or(0);
                let n = file_size.saturating_sub(offset).min(size).min(ent.payload.len() as u64) as usize;
                ent.payload[..n].fill(0);
                read_bytes = Some(n);
            }
            16 => {
                // WRITE: op = fuse_write_in, payload = data (discarded)
                let (offset, size) = (u64_at(op, 8), u32_at(op, 16));
                if let Some(n) = fs.st.lock().nodes.get_mut(&nodeid) {
                    n.size_bytes = n.size_bytes.max(offset.saturating_add(size as u64));
                }
                out.extend_from_slice(&size.to_le_bytes());
                out.extend_from_slice(&[0u8; 4]);
            }
            17 => {
                for v in [1u64 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                for v in [4096u32, 255, 4096, 0, 0, 0, 0, 0, 0, 0] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            9 => {
                // MKDIR: op = fuse_mkdir_in (mode, umask), payload = name
                let mode = u32_at(op, 0);
                let mut st = fs.st.lock();
                let nm = name(&ent.payload[..payload_bytes]).to_os_string();
                if st.names.contains_key(&(nodeid, nm.clone())) {
                    error = -libc::EEXIST;
                } else {
                    let ino = fs.add(&mut st, nodeid, &nm, FileType::Directory, (mode & 0o7777) as u16);
                    match fs.attr(&st, ino) {
                        Ok(a) => entry_out(&mut out, &a),
                        Err(_) => error = -libc::EIO,
                    }
                }
            }
            10 | 11 => {
                // UNLINK / RMDIR: payload = name
                let nm = name(&ent.payload[..payload_bytes]).to_os_string();
                if let Err(e) = fs.remove_name(nodeid, &nm, opcode == 11) {
                    error = -e;
                }
            }
            28 => {
                // READDIR: op = fuse_read_in (offset = entries to skip, size = room);
                // each entry a fuse_dirent (ino, next offset, name length, type, name
                // padded to 8 bytes).
                let (skip, room) = (u64_at(op, 8), (u32_at(op, 16) as usize).min(ent.payload.len()));
                let st = fs.st.lock();
                let parent = st.nodes.get(&nodeid).map(|n| n.parent).unwrap_or(1);
                let mut entries: Vec<(u64, u32, Vec<u8>)> = vec![(nodeid, libc::DT_DIR as u32, b".".to_vec()), (parent, libc::DT_DIR as u32, b"..".to_vec())];
                for ((p, nm), &child) in st.names.range((nodeid, OsString::new())..) {
                    if *p != nodeid {
                        break;
                    }
                    let t = if st.nodes[&child].kind == FileType::Directory {
                        libc::DT_DIR
                    } else {
                        libc::DT_REG
                    };
                    entries.push((child, t as u32, nm.as_bytes().to_vec()));
                }
                for (i, (ino, t, nm)) in entries.into_iter().enumerate().skip(skip as usize) {
                    let len = (24 + nm.len()).next_multiple_of(8);
                    if out.len() + len > room {
                        break;
                    }
                    out.extend_from_slice(&ino.to_le_bytes());
                    out.extend_from_slice(&(i as u64 + 1).to_le_bytes());
                    out.extend_from_slice(&(nm.len() as u32).to_le_bytes());
                    out.extend_from_slice(&t.to_le_bytes());
                    out.extend_from_slice(&nm);
                    out.resize(out.len().next_multiple_of(8), 0);
                }
                // Nothing added: the end of the directory, an empty reply.
            }
            18 | 20 | 29 | 30 => {} // RELEASE, FSYNC, RELEASEDIR, FSYNCDIR: nothing to do
            _ => error = -libc::ENOSYS,
        }
        let reply_in_payload = match (error, read_bytes) {
            (0, Some(n)) => n,
            (0, None) => {
                ent.payload[..out.len()].copy_from_slice(&out);
                out.len()
            }
            _ => 0,
        };
        let hdr = &mut ent.header[..];
        hdr[..IN_HEADER_BYTES].fill(0);
        hdr[0..4].copy_from_slice(&((16 + reply_in_payload) as u32).to_le_bytes());
        hdr[4..8].copy_from_slice(&error.to_le_bytes());
        hdr[8..16].copy_from_slice(&unique.to_le_bytes());
        hdr[256 + 16..256 + 20].copy_from_slice(&(reply_in_payload as u32).to_le_bytes());
        let e = sqe(fd, CMD_COMMIT_AND_FETCH, qid, unique, None, slot);
        // SAFETY: as at registration: the entry's buffers outlive the command. The
        // caller's next submit_and_wait submits it.
        unsafe { ring.submission().push(&e).map_err(|_| std::io::Error::other("submission queue full"))? };
        Ok(())
    }
}
