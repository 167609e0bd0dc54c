//! The FUSE ceiling for `bench/fio.sh`: a minimal file system on `fuser` mounted with
//! exactly Tarn's session settings ([`tarn_fuse::session_config`] with the daemon's
//! options: 8 worker threads, `allow_other`, `auto_unmount`, `default_permissions`,
//! 1 MiB `max_write`, 1 MiB readahead). No file system on FUSE here can beat it.
//!
//! Two modes:
//! - `fuse_null MOUNTPOINT`: names and sizes live in memory; reads return zeros from
//!   memory, writes are discarded (only the size grows), fsync does nothing.
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
    st: Mutex<State>,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
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
        let mut st = self.st.lock();
        let Some(&ino) = st.names.get(&(parent, name.to_os_string())) else {
            return reply.error(Errno::from_i32(libc::ENOENT));
        };
        if dir && st.names.range((ino, OsString::new())..).next().is_some_and(|((p, _), _)| *p == ino) {
            return reply.error(Errno::from_i32(libc::ENOTEMPTY));
        }
        if let Some(p) = self.backing_path(&st, ino) {
            let r = if dir { std::fs::remove_dir(&p) } else { std::fs::remove_file(&p) };
            if let Err(e) = r {
                return reply.error(errno(&e));
            }
        }
        st.names.remove(&(parent, name.to_os_string()));
        st.nodes.remove(&ino);
        st.links.remove(&ino);
        reply.ok();
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

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backing, mountpoint) = match args.as_slice() {
        [m] => (None, PathBuf::from(m)),
        [flag, dir, m] if flag == "--passthrough" => (Some(PathBuf::from(dir)), PathBuf::from(m)),
        _ => {
            eprintln!("usage: fuse_null [--passthrough DIR] MOUNTPOINT");
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
    let fs = NullFs {
        backing,
        st: Mutex::new(State {
            nodes,
            names: BTreeMap::new(),
            next_ino: 2,
            files: HashMap::new(),
            next_fh: 1,
            links: HashMap::new(),
        }),
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
    let session = match fuser::spawn_mount(fs, &mountpoint, &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fuse_null: mount {}: {e}", mountpoint.display());
            std::process::exit(1);
        }
    };
    tarn_fuse::set_readahead(Path::new(&mountpoint), tarn_fuse::READAHEAD_KIB);
    // Serve until unmounted (`fusermount -u`, or the kernel's auto_unmount when this
    // process is killed).
    if let Err(e) = session.join() {
        eprintln!("fuse_null: {e}");
    }
}
