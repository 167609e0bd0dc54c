//! # fuse — the kernel's FUSE requests, translated to `tarn-zpl` calls
//!
//! Theory: this crate is a thin, stateless adapter. Each `fuser::Filesystem` callback
//! converts its arguments (inode numbers, names, flags, times), makes one call into
//! [`tarn_zpl::Vfs`] (the live [`tarn_zpl::Fs`] plus its `.zfs` control directory),
//! and converts the answer back; the only state is the `Arc<Vfs>`. It is the only
//! place in Tarn where errno values appear ([`errno`]).
//!
//! Inode numbers: the kernel's inode number is the vfs inode number, except that the
//! kernel insists that the root is inode 1 (`FUSE_ROOT_ID`). Live inodes are object
//! ids; object 1 is the master node, never a file, so "kernel 1 <-> zpl root, every
//! other number unchanged" is a bijection. Everything under `.zfs` is numbered with bit
//! 63 set: the fixed directories `.zfs`, `.zfs/snapshot`, `.zfs/shares` are
//! `1 << 63 | 1, 2, 3`, and object `o` of the snapshot in slot `s` (1..=32767, one per
//! snapshot of the mounted file system) is `1 << 63 | s << 48 | o`, its root directory
//! `o = 0` (`tarn_zpl::ctldir` has the table). `forget` is passed down so that a slot
//! is renumbered only when the kernel holds none of its inodes.
//!
//! Handles: file handles are not used (always 0); the zpl keeps open counts per inode,
//! which is what unlinked-but-open files need. `open`/`create` bump the count and
//! `release` drops it; the kernel sends exactly one release per successful open.
//! Opening a file under `.zfs` for writing fails with EROFS at `open`.
//!
//! Directory offsets are the vfs readdir cursors (0 = start, "." and ".." first); they
//! stay valid while the directory changes, as `seekdir`/`telldir` require.
//!
//! Caching: entries and attributes are cached by the kernel for [`TTL`] (1 s). The
//! daemon is the only writer, so the only staleness is across hard links and that
//! second (a destroyed snapshot's directory may still be found by path for up to that
//! second; its files then answer ESTALE); NFS-like tools that need more should mount
//! with a shorter TTL (future work). Directory listings are never cached.
//!
//! Panics: every callback runs under `catch_unwind` (`TarnFuse::guard`): a bug in
//! one request answers it EIO, keeps the worker thread and the mount alive, and is
//! reported to the hook installed with [`set_panic_hook`], with which the daemon
//! suspends the pool (the panic may have left the file system half-changed; `zpool
//! clear` re-imports it from disk).
//!
//! Locks: none here; the zpl serialises. Threads: `MountOptions::threads` fuser workers
//! (with `clone_fd` when more than one), each calling into the zpl concurrently.
//!
//! Mount options: every mount passes `nosuid` and `nodev` explicitly, so a setuid
//! binary or a device node stored in a dataset (from a pool that came from anywhere)
//! is never honoured; there is no `setuid`/`devices` property to turn them back on.
//! The `fsname` (the dataset name, shown as the source in /proc/mounts) goes through
//! [`fsname_option`], which replaces every character a dataset name cannot hold (`,`
//! and `\` among them) with `_`, so a crafted name such as `t,suid,dev` stays one
//! option. Before mounting, [`check_mount_support`] makes sure `/dev/fuse` and a
//! `fusermount` binary are there and says how to get them when not, rather than "No
//! such file or directory". Missing mountpoint directories are created mode 0755
//! whatever the process umask ([`create_mountpoint`]), as OpenZFS creates them.
//!
//! Unmount: [`Mount::unmount_ext`] does not wait for the kernel to evict the inodes it
//! cached (seconds for a million files): once umount2 on a helper thread has detached
//! the mount, the connection is aborted through fusectl and the caller goes on.
//!
//! Crash / EIO / ENOSPC: zpl errors are mapped to errno and returned to the caller;
//! nothing is retried. If the daemon dies, a mount made with `auto_unmount` is
//! removed by `fusermount`; otherwise it stays as "Transport endpoint is not
//! connected" until `umount`.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, SessionACL, TimeOrNow, WriteFlags,
};
use tarn_zpl::{Attr, FileKind, SetAttr, SetTime, Timespec, Vfs, ZplError};

/// How long the kernel may cache entries and attributes.
pub const TTL: Duration = Duration::from_secs(1);
/// Largest write request asked of the kernel (it caps this at max_pages_limit pages).
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Entries fetched from the zpl per batch while filling a readdir reply.
const READDIR_BATCH: usize = 128;

thread_local! {
    /// Each FUSE worker's read buffer, kept between requests and grown to the
    /// largest reply sent (at most `max_read`, 1 MiB, and never past what a file had
    /// to return; [`tarn_zpl::Fs::read_into`]): a read reply is assembled here
    /// instead of in a new zero-filled allocation per request (whose zeroing and page
    /// faults cost as much CPU as the copy itself in a cold sequential read).
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Options of one FUSE mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Source name shown in /proc/mounts (the dataset name).
    pub fsname: String,
    /// Mount read-only.
    pub readonly: bool,
    /// Let users other than the mounting one in (`allow_other`).
    pub allow_other: bool,
    /// Have `fusermount` unmount when the daemon exits (needs the `fusermount`
    /// binary from Debian's `fuse` package).
    pub auto_unmount: bool,
    /// Let the kernel check permissions from mode/uid/gid (`default_permissions`).
    pub default_permissions: bool,
    /// Worker threads serving requests (at least 1).
    pub threads: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "tarn".into(),
            readonly: false,
            allow_other: false,
            auto_unmount: false,
            default_permissions: true,
            threads: 2,
        }
    }
}

/// How long [`Mount::unmount_ext`] retries an unmount that fails with EBUSY, ms.
pub const UNMOUNT_BUSY_RETRY_MS: u64 = 1000;

/// A live FUSE mount; unmounted by [`Mount::unmount`] or when dropped.
#[derive(Debug)]
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl Mount {
    /// Unmount and wait for the session's threads to finish.
    pub fn unmount(mut self) -> io::Result<()> {
        self.unmount_ext(false)
    }

    /// Unmount; on failure the mount stays live and this handle keeps it, so the
    /// caller can report the error (EBUSY: files are open) and try again later.
    /// `force` (`zfs unmount -f`, and `-f` of `zfs rollback/rename/destroy`) detaches
    /// the mount even while busy and aborts its FUSE connection: programs holding
    /// files open there get `ENOTCONN` from then on (umount2(2) `MNT_FORCE |
    /// MNT_DETACH`). Needs root for umount2; without it the plain unmount goes through
    /// `fusermount -u`. Then waits for the session's threads to finish.
    pub fn unmount_ext(&mut self, force: bool) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        if self.session.is_none() {
            return Ok(());
        }
        let c = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())?;
        let flags = if force { libc::MNT_FORCE | libc::MNT_DETACH } else { 0 };
        // Where the connection can be aborted once the mount is detached (below).
        let abort = if force { None } else { connection_abort_file(&self.mountpoint) };
        let outcome = match abort {
            Some((dev, file)) => self.umount_detached(c, dev, &file),
            None => umount_retrying(&c, flags),
        };
        match outcome {
            Ok(()) => {}
            // Not root: let fuser unmount through fusermount.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && !force => {
                return self.session.take().map_or(Ok(()), |s| s.umount_and_join());
            }
            // Already unmounted behind our back: only the threads are left.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
        // The connection ends with the mount (or was aborted): the session's threads
        // see ENODEV and stop.
        match self.session.take() {
            Some(s) => s.join(),
            None => Ok(()),
        }
    }

    /// A plain unmount whose slow part does not hold up the caller. umount2(2) takes
    /// the mount out of the tree at once, then (still inside the call) evicts every
    /// inode the kernel cached for it: several microseconds each, seconds for a
    /// million files just created. Nothing of that needs the daemon any more. So the
    /// call runs on a helper thread; as soon as the mount point no longer shows the
    /// FUSE file system (`st_dev` changed), the connection is aborted through fusectl
    /// (which ends the session's threads at once; the kernel sends no request after
    /// the detach but forgets, which an aborted connection drops) and the caller goes
    /// on while the helper finishes the eviction. A busy mount is not detached: the
    /// helper's EBUSY comes back as before.
    fn umount_detached(&self, c: std::ffi::CString, dev: u64, abort_file: &Path) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("fuse_umount".into()).spawn(move || {
            let _ = tx.send(umount_retrying(&c, 0));
        })?;
        loop {
            match rx.recv_timeout(Duration::from_micros(500)) {
                Ok(r) => return r,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err(io::Error::other("unmount thread vanished")),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if std::fs::metadata(&self.mountpoint).is_ok_and(|m| m.dev() != dev) {
                        if let Err(e) = std::fs::write(abort_file, b"1") {
                            // The connection ends anyway when the eviction is done.
                            tracing::debug!("cannot abort {}: {e}", abort_file.display());
                        }
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

/// umount2(2) of `c` with `flags`, retrying EBUSY for up to [`UNMOUNT_BUSY_RETRY_MS`]:
/// a just-unmounted child may leave the parent busy for a moment (its `fusermount`
/// helper exits after the child's session ends).
fn umount_retrying(c: &std::ffi::CStr, flags: libc::c_int) -> io::Result<()> {
    let mut waited_ms = 0;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    while unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBUSY) && waited_ms < UNMOUNT_BUSY_RETRY_MS {
            std::thread::sleep(Duration::from_millis(20));
            waited_ms += 20;
            continue;
        }
        return Err(e);
    }
    Ok(())
}

/// statfs(2) of `path`. Errors: the call's, or `InvalidInput` for a path with a NUL.
fn statfs_of(path: &Path) -> io::Result<libc::statfs> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: an all-zero statfs is a valid value for the kernel to fill in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid out pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `f_type` of a file system, from statfs(2); None when `path` cannot be examined.
// `f_type` is 64 bits wide on 64-bit Linux, 32 on 32-bit targets.
#[allow(clippy::useless_conversion)]
fn fs_magic(path: &Path) -> Option<i64> {
    statfs_of(path).ok().map(|st| i64::from(st.f_type))
}

/// Where the kernel's FUSE control file system (fusectl) lives.
const FUSECTL_DIR: &str = "/sys/fs/fuse/connections";

/// Mount fusectl at [`FUSECTL_DIR`] if it is not mounted and this process is root, once
/// per process, as systemd (`sys-fs-fuse-connections.mount`) and Debian's `fuse` init
/// script do at boot. Best effort: without it unmounts take the slow path.
fn ensure_fusectl() {
    static TRIED: std::sync::Once = std::sync::Once::new();
    const FUSECTL_SUPER_MAGIC: i64 = 0x6573_5543;
    TRIED.call_once(|| {
        let dir = Path::new(FUSECTL_DIR);
        // SAFETY: geteuid has no preconditions.
        if fs_magic(dir) == Some(FUSECTL_SUPER_MAGIC) || unsafe { libc::geteuid() } != 0 || !dir.is_dir() {
            return;
        }
        let Ok(target) = std::ffi::CString::new(FUSECTL_DIR) else { return };
        // SAFETY: every pointer is a valid NUL-terminated string; no data argument.
        if unsafe { libc::mount(c"fusectl".as_ptr(), target.as_ptr(), c"fusectl".as_ptr(), 0, std::ptr::null()) } != 0 {
            tracing::debug!("cannot mount fusectl on {FUSECTL_DIR}: {}", io::Error::last_os_error());
        }
    });
}

/// The FUSE file system mounted at `mountpoint`: its device number and its
/// connection's `abort` file under fusectl (`/sys/fs/fuse/connections/N/abort`, N the
/// kernel's device number, `major << 20 | minor`), fusectl mounted first if need be
/// ([`ensure_fusectl`]). None when the mount point is not a FUSE mount or fusectl is
/// not there.
fn connection_abort_file(mountpoint: &Path) -> Option<(u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    if fs_magic(mountpoint)? != FUSE_SUPER_MAGIC {
        return None;
    }
    ensure_fusectl();
    let dev = std::fs::metadata(mountpoint).ok()?.dev();
    let n = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    let file = PathBuf::from(format!("{FUSECTL_DIR}/{n}/abort"));
    file.exists().then_some((dev, file))
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if let Err(e) = s.umount_and_join() {
                tracing::warn!(mountpoint = %self.mountpoint.display(), error = %e, "unmount on drop failed");
            }
        }
    }
}

/// Readahead the kernel may issue for a Tarn mount, KiB. The FUSE default (128 KiB)
/// leaves one 128 KiB request in flight at a time; 1 MiB lets sequential reads keep
/// both FUSE threads busy and matches the largest request the kernel sends.
pub const READAHEAD_KIB: u32 = 1024;

/// Best effort: set the mount's backing-device readahead through
/// `/sys/class/bdi/MAJ:MIN/read_ahead_kb` (root only; a failure just keeps the default).
pub fn set_readahead(mountpoint: &Path, kib: u32) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(mountpoint) else { return };
    let dev = m.dev();
    let path = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    if let Err(e) = std::fs::write(&path, kib.to_string()) {
        tracing::debug!("cannot set {path}: {e}");
    }
}

/// The device every FUSE mount opens.
pub const DEV_FUSE: &str = "/dev/fuse";

/// The `fsname=` value for a dataset name: every character that a valid dataset name
/// cannot hold (anything but ASCII letters, digits, `_ - . : /` and space) becomes `_`.
/// `fusermount` splits its `-o` list on commas (and treats `\` as an escape), and the
/// direct mount(2) path takes the name as it is, so only a sanitized name is one
/// option on both: a crafted `t,suid,dev` is mounted as `t_suid_dev`, never with
/// `suid` and `dev`. Valid names pass unchanged.
pub fn fsname_option(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The `fusermount` (or `fusermount3`) binary that a mount would run: `$FUSERMOUNT_PATH`
/// when set (as `fuser` honours it), else the first one found in the directories of
/// `path` (a `$PATH` value). `None` when there is none.
pub fn find_fusermount(path: Option<&OsStr>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        let p = PathBuf::from(p);
        return is_executable(&p).then_some(p);
    }
    let dirs: Vec<PathBuf> = std::env::split_paths(path?).collect();
    ["fusermount3", "fusermount"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Check that this system can make a FUSE mount: the device `dev_fuse` exists, and,
/// when `fusermount` is needed (`auto_unmount` always mounts through it), a
/// `fusermount` binary is found in `path` (a `$PATH` value). The error says what is
/// missing and how to install it.
pub fn check_mount_support(dev_fuse: &Path, path: Option<&OsStr>, fusermount: bool) -> io::Result<()> {
    if std::fs::symlink_metadata(dev_fuse).is_err() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} is missing: load the FUSE kernel module ('modprobe fuse'), or in a container pass the device in ('--device /dev/fuse')",
                dev_fuse.display()
            ),
        ));
    }
    if fusermount && find_fusermount(path).is_none() {
        let searched = path.map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("fusermount is missing (searched PATH={searched}): install the Debian package 'fuse' ('apt-get install fuse')"),
        ));
    }
    Ok(())
}

/// Detach every dead Tarn mount at `dir` or at one of its ancestors, and return the
/// mountpoints detached (outermost first).
///
/// A FUSE mount outlives the daemon that served it when nothing unmounts it: the
/// daemon was killed together with its `fusermount` helpers (systemd kills the whole
/// cgroup of a unit; `auto_unmount` lives in that helper). Such a mount answers every
/// access with `ENOTCONN` ("Transport endpoint is not connected") and would make the
/// restarted daemon's mount of the same dataset fail. A mount is detached only when
/// `/proc/self/mounts` lists it with type `fuse.tarn` (Tarn's subtype) *and* a statfs
/// of it fails with `ENOTCONN`, so a live mount, or another file system's, is never
/// touched. Detaching is `umount2(MNT_DETACH)` (root), else `fusermount -u -z`;
/// detaching an ancestor detaches the dead mounts below it too.
///
/// Errors: reading `/proc/self/mounts`, or a detach that fails.
pub fn clear_dead_mounts(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let table = std::fs::read_to_string("/proc/self/mounts")?;
    let mut dead: Vec<PathBuf> = Vec::new();
    for line in table.lines() {
        let mut f = line.split(' ');
        let (Some(_src), Some(at), Some(fstype)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if fstype != "fuse.tarn" {
            continue;
        }
        let at = unescape_mount_field(at);
        if !dir.starts_with(&at) || dead.contains(&at) {
            continue;
        }
        if connection_lost(&at) {
            dead.push(at);
        }
    }
    // Outermost first: detaching it takes the dead mounts stacked below with it.
    dead.sort_by_key(|p| p.components().count());
    let mut detached = Vec::new();
    for at in dead {
        if detached.iter().any(|d: &PathBuf| at.starts_with(d)) {
            continue;
        }
        detach(&at)?;
        detached.push(at);
    }
    Ok(detached)
}

/// Whether the FUSE mount at `at` has lost its daemon: statfs(2) always asks the
/// daemon (a stat may be answered from the kernel's attribute cache for a while
/// after the daemon died), and a closed connection answers `ENOTCONN`.
fn connection_lost(at: &Path) -> bool {
    matches!(statfs_of(at), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// `/proc/self/mounts` writes space, tab, newline and backslash in a path as `\ooo`
/// octal escapes; undo them (bytes, not text: a path need not be UTF-8).
fn unescape_mount_field(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(((d[0] - b'0') << 6) | ((d[1] - b'0') << 3) | (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Lazily detach the mount at `at`: umount2(MNT_DETACH) as root, `fusermount -u -z`
/// otherwise.
fn detach(at: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(at.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let fusermount = find_fusermount(std::env::var_os("PATH").as_deref()).unwrap_or_else(|| PathBuf::from("fusermount"));
    let st = std::process::Command::new(fusermount).arg("-u").arg("-z").arg(at).status()?;
    if st.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount -u -z {} failed ({st})", at.display())))
    }
}

/// Create `dir` and any missing parents, each mode 0755 whatever the umask (the daemon
/// runs with umask 077, which would leave mountpoints only root can enter while the
/// file system is not mounted).
pub fn create_mountpoint(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut missing = Vec::new();
    let mut p = dir;
    while std::fs::symlink_metadata(p).is_err() {
        missing.push(p);
        match p.parent() {
            Some(q) if !q.as_os_str().is_empty() => p = q,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    if !std::fs::metadata(dir)?.is_dir() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} is not a directory", dir.display())));
    }
    Ok(())
}

/// The mount options passed for `opts` (`nosuid` and `nodev` always).
fn mount_options(opts: &MountOptions) -> Vec<MountOption> {
    let mut v = vec![
        MountOption::FSName(fsname_option(&opts.fsname)),
        MountOption::Subtype("tarn".into()),
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    v.push(if opts.readonly { MountOption::RO } else { MountOption::RW });
    if opts.default_permissions {
        v.push(MountOption::DefaultPermissions);
    }
    if opts.auto_unmount {
        v.push(MountOption::AutoUnmount);
    }
    v
}

/// Mount `vfs` (a file system and its `.zfs` directory) on `mountpoint` (created if
/// missing, mode 0755) and serve it from background threads until the returned
/// [`Mount`] is unmounted or dropped; always `nosuid,nodev`. Errors: a missing
/// `/dev/fuse` or `fusermount` ([`check_mount_support`], with how to install it),
/// and those of creating the directory and of `fusermount`.
pub fn mount(vfs: Arc<Vfs>, mountpoint: &Path, opts: &MountOptions) -> io::Result<Mount> {
    check_mount_support(Path::new(DEV_FUSE), std::env::var_os("PATH").as_deref(), opts.auto_unmount)?;
    create_mountpoint(mountpoint)?;
    let cfg = session_config(opts);
    let root = vfs.root();
    let session = fuser::spawn_mount(
        TarnFuse {
            vfs,
            root,
            dataset: opts.fsname.clone(),
        },
        mountpoint,
        &cfg,
    )?;
    set_readahead(mountpoint, READAHEAD_KIB);
    Ok(Mount {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
    })
}

/// The `fuser` session configuration of a mount with `opts`: mount options, access
/// control and worker threads (one cloned `/dev/fuse` descriptor per worker when
/// there are several). Shared with the `fuse_null` benchmark example, so that the
/// FUSE ceiling is measured with exactly Tarn's settings.
pub fn session_config(opts: &MountOptions) -> Config {
    let mut cfg = Config::default();
    cfg.mount_options = mount_options(opts);
    cfg.acl = if opts.allow_other {
        SessionACL::All
    } else if opts.auto_unmount {
        // fuser refuses auto_unmount with acl == Owner; root-and-owner is the narrowest.
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    let threads = opts.threads.max(1);
    cfg.n_threads = Some(threads);
    cfg.clone_fd = threads > 1;
    cfg
}

/// The errno for a zpl error.
pub fn errno(e: &ZplError) -> i32 {
    match e {
        ZplError::NotFound => libc::ENOENT,
        ZplError::Exists => libc::EEXIST,
        ZplError::NotDir => libc::ENOTDIR,
        ZplError::IsDir => libc::EISDIR,
        ZplError::NotEmpty => libc::ENOTEMPTY,
        ZplError::NoSpace => libc::ENOSPC,
        ZplError::ReadOnly => libc::EROFS,
        ZplError::NameTooLong => libc::ENAMETOOLONG,
        ZplError::Invalid(_) => libc::EINVAL,
        ZplError::CrossDevice => libc::EXDEV,
        ZplError::TooManyLinks => libc::EMLINK,
        ZplError::Perm => libc::EPERM,
        ZplError::FileTooBig => libc::EFBIG,
        ZplError::NotSupported => libc::EOPNOTSUPP,
        ZplError::Stale => libc::ESTALE,
        ZplError::Overflow => libc::EOVERFLOW,
        ZplError::Io(_) | ZplError::Corrupt { .. } => libc::EIO,
    }
}

fn err(e: ZplError) -> Errno {
    if matches!(e, ZplError::Io(_) | ZplError::Corrupt { .. }) {
        tracing::warn!(error = %e, "I/O error returned to the kernel");
    }
    Errno::from_i32(errno(&e))
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::BlockDev => FileType::BlockDevice,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

/// The `fuser::Filesystem` over one mounted file system.
struct TarnFuse {
    vfs: Arc<Vfs>,
    root: u64,
    /// The dataset name (unsanitized), for the panic hook.
    dataset: String,
}

/// What a caught panic in a FUSE callback is reported to: `(dataset, message)`.
pub type PanicHook = dyn Fn(&str, &str) + Send + Sync;

static PANIC_HOOK: std::sync::RwLock<Option<Arc<PanicHook>>> = std::sync::RwLock::new(None);

/// Install the process-wide hook told about every panic caught in a FUSE callback,
/// with the mounted dataset's name and the panic message (the daemon suspends the
/// pool: `tarn_spa::Pool::suspend_open`). Replaces any earlier hook.
pub fn set_panic_hook(hook: Arc<PanicHook>) {
    *PANIC_HOOK.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
}

impl TarnFuse {
    /// Run one callback with its panics contained: the worker thread survives, the
    /// unanswered request gets EIO (fuser answers a dropped reply so), and the panic
    /// hook hears of it.
    fn guard(&self, op: &str, f: impl FnOnce()) {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".into());
            tracing::error!("{}: FUSE {op} panicked: {message}", self.dataset);
            let hook = PANIC_HOOK.read().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(h) = hook {
                h(&self.dataset, &format!("{op}: {message}"));
            }
        }
    }

    fn zino(&self, ino: INodeNo) -> u64 {
        if ino == INodeNo::ROOT {
            self.root
        } else {
            ino.0
        }
    }

    fn kino(&self, ino: u64) -> INodeNo {
        if ino == self.root {
            INodeNo::ROOT
        } else {
            INodeNo(ino)
        }
    }

    fn fattr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: self.kino(a.ino),
            size: a.size,
            blocks: a.blocks,
            atime: a.atime.to_system_time(),
            mtime: a.mtime.to_system_time(),
            ctime: a.ctime.to_system_time(),
            crtime: a.crtime.to_system_time(),
            kind: file_type(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev as u32,
            blksize: a.blksize,
            flags: 0,
        }
    }

    fn entry(&self, r: Result<Attr, ZplError>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.fattr(&a), Generation(a.gen)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn empty(r: Result<(), ZplError>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(Timespec::from_system_time(t)),
    }
}

impl Filesystem for TarnFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(nearest) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(nearest);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.guard("lookup", || {
            self.entry(self.vfs.lookup(self.zino(parent), name.as_bytes()), reply);
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.guard("forget", || {
            self.vfs.forget(self.zino(ino), nlookup);
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.guard("getattr", || match self.vfs.getattr(self.zino(ino)) {
            Ok(a) => reply.attr(&TTL, &self.fattr(&a)),
            Err(e) => reply.error(err(e)),
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.guard("setattr", || {
            let s = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
                ctime: ctime.map(Timespec::from_system_time),
            };
            match self.vfs.setattr(self.zino(ino), s) {
                Ok(a) => reply.attr(&TTL, &self.fattr(&a)),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.guard("readlink", || match self.vfs.readlink(self.zino(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(err(e)),
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, rdev: u32, reply: ReplyEntry) {
        self.guard("mknod", || {
            // The kernel has already applied the umask to `mode` (no FUSE_DONT_MASK).
            self.entry(
                self.vfs.mknod(self.zino(parent), name.as_bytes(), mode, req.uid(), req.gid(), u64::from(rdev)),
                reply,
            );
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        self.guard("mkdir", || {
            self.entry(self.vfs.mkdir(self.zino(parent), name.as_bytes(), mode, req.uid(), req.gid()), reply);
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guard("unlink", || {
            Self::empty(self.vfs.unlink(self.zino(parent), name.as_bytes()), reply);
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.guard("rmdir", || {
            Self::empty(self.vfs.rmdir(self.zino(parent), name.as_bytes()), reply);
        });
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.guard("symlink", || {
            self.entry(
                self.vfs
                    .symlink(self.zino(parent), link_name.as_bytes(), target.as_os_str().as_bytes(), req.uid(), req.gid()),
                reply,
            );
        });
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        self.guard("rename", || {
            let mut zflags = 0;
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                zflags |= tarn_zpl::RENAME_NOREPLACE;
            }
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                zflags |= tarn_zpl::RENAME_EXCHANGE;
            }
            if flags.contains(RenameFlags::RENAME_WHITEOUT) {
                reply.error(Errno::from_i32(libc::EINVAL));
                return;
            }
            Self::empty(
                self.vfs
                    .rename(self.zino(parent), name.as_bytes(), self.zino(newparent), newname.as_bytes(), zflags),
                reply,
            );
        });
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.guard("link", || {
            self.entry(self.vfs.link(self.zino(ino), self.zino(newparent), newname.as_bytes()), reply);
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.guard("open", || {
            // O_TRUNC arrives as a separate setattr(size = 0) from the kernel.
            let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
            match self.vfs.open_file(self.zino(ino), write) {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock_owner: Option<LockOwner>, reply: ReplyData) {
        self.guard("read", || {
            READ_BUF.with_borrow_mut(|buf| match self.vfs.read_into(self.zino(ino), offset, size, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(err(e)),
            })
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.guard("write", || {
            let zino = self.zino(ino);
            // O_SYNC / O_DSYNC: durable before the write returns (through the intent log).
            let sync = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
            match self
                .vfs
                .write(zino, offset, data)
                .and_then(|n| if sync { self.vfs.fsync(zino).map(|()| n) } else { Ok(n) })
            {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    /// `ENOSYS`, once: the kernel then sets `no_flush` for the connection and stops
    /// sending a FLUSH on every `close` (a ninth of the requests of a `cp -a` of small
    /// files). Nothing is lost: writes reach the DMU before they are acknowledged, so
    /// a close has nothing to flush and no error to report late, and POSIX locks,
    /// which FLUSH would release, are kept by the kernel (no `getlk`/`setlk` here).
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        self.guard("flush", || {
            reply.error(Errno::from_i32(libc::ENOSYS));
        });
    }

    fn release(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, _lock_owner: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.guard("release", || {
            Self::empty(self.vfs.release_file(self.zino(ino)), reply);
        });
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.guard("fsync", || {
            Self::empty(self.vfs.fsync(self.zino(ino)), reply);
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.guard("opendir", || match self.vfs.getattr(self.zino(ino)) {
            Ok(a) if a.kind == FileKind::Dir => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::from_i32(libc::ENOTDIR)),
            Err(e) => reply.error(err(e)),
        });
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.guard("readdir", || {
            let dir = self.zino(ino);
            let mut cursor = offset;
            loop {
                let batch = match self.vfs.readdir(dir, cursor, READDIR_BATCH) {
                    Ok(b) => b,
                    Err(e) => return reply.error(err(e)),
                };
                if batch.is_empty() {
                    break;
                }
                for e in batch {
                    if reply.add(self.kino(e.ino), e.next_cursor, file_type(e.kind), OsStr::from_bytes(&e.name)) {
                        return reply.ok();
                    }
                    cursor = e.next_cursor;
                }
            }
            reply.ok();
        });
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.guard("releasedir", || {
            reply.ok();
        });
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.guard("fsyncdir", || {
            Self::empty(self.vfs.fsync(self.zino(ino)), reply);
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.guard("statfs", || match self.vfs.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize),
            Err(e) => reply.error(err(e)),
        });
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, _flags: i32, reply: ReplyCreate) {
        self.guard("create", || {
            let a = match self.vfs.create(self.zino(parent), name.as_bytes(), mode, req.uid(), req.gid()) {
                Ok(a) => a,
                Err(e) => return reply.error(err(e)),
            };
            match self.vfs.open_file(a.ino, true) {
                Ok(()) => reply.created(&TTL, &self.fattr(&a), Generation(a.gen), FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.guard("copy_file_range", || {
            match self.vfs.copy_file_range(self.zino(ino_in), offset_in, self.zino(ino_out), offset_out, len) {
                // At most COPY_RANGE_MAX_BYTES, which fits the reply's u32.
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        self.guard("fallocate", || match self.vfs.fallocate(self.zino(ino), offset, length, mode as u32) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_table_escapes_are_undone_bytewise() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(unescape_mount_field("/mnt/a\\040b\\011c\\134d"), PathBuf::from("/mnt/a b\tc\\d"));
        // A path that is not UTF-8 comes back byte for byte; a lone backslash stays.
        assert_eq!(unescape_mount_field("/x\\377y").as_os_str().as_bytes(), b"/x\xffy");
        assert_eq!(unescape_mount_field("/x\\9z\\"), PathBuf::from("/x\\9z\\"));
    }

    #[test]
    fn a_panicking_callback_is_contained_and_reported() {
        let store = Arc::new(tarn_dmu::mem::MemStore::new());
        let fs = tarn_zpl::Fs::open(store, tarn_zpl::ZplOptions::default()).unwrap();
        let vfs = Vfs::new(fs, Arc::new(tarn_zpl::NoSnapshots), tarn_zpl::SnapDir::Hidden);
        let root = vfs.root();
        let fuse = TarnFuse {
            vfs,
            root,
            dataset: "tank/home".into(),
        };
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = heard.clone();
        set_panic_hook(Arc::new(move |ds: &str, msg: &str| h.lock().unwrap().push((ds.to_string(), msg.to_string()))));
        let mut after = false;
        fuse.guard("mkdir", || panic!("boom"));
        fuse.guard("getattr", || after = true);
        assert!(after, "the worker goes on after a panic");
        assert_eq!(*heard.lock().unwrap(), vec![("tank/home".to_string(), "mkdir: boom".to_string())]);
    }

    #[test]
    fn errno_mapping() {
        assert_eq!(errno(&ZplError::NotFound), libc::ENOENT);
        assert_eq!(errno(&ZplError::NotEmpty), libc::ENOTEMPTY);
        assert_eq!(errno(&ZplError::ReadOnly), libc::EROFS);
        assert_eq!(errno(&ZplError::Invalid("x")), libc::EINVAL);
        assert_eq!(errno(&ZplError::Corrupt { object: 3, what: "x" }), libc::EIO);
        assert_eq!(errno(&ZplError::Stale), libc::ESTALE);
        assert_eq!(errno(&ZplError::Overflow), libc::EOVERFLOW);
        assert_eq!(file_type(FileKind::Symlink), FileType::Symlink);
    }

    #[test]
    fn fsname_is_sanitized() {
        assert_eq!(fsname_option("tank/home"), "tank/home");
        assert_eq!(fsname_option("t,suid,dev"), "t_suid_dev");
        assert_eq!(fsname_option("a\\b"), "a_b");
        assert_eq!(fsname_option("a\\,suid"), "a__suid");
        assert_eq!(fsname_option("x=y\n\t"), "x_y__");
        assert_eq!(fsname_option("p/a b:c.d-e_f"), "p/a b:c.d-e_f");
        assert_eq!(fsname_option("é"), "_");
    }

    #[test]
    fn every_mount_is_nosuid_nodev() {
        let o = mount_options(&MountOptions {
            fsname: "t,suid,dev".into(),
            auto_unmount: true,
            ..Default::default()
        });
        assert!(o.contains(&MountOption::NoSuid) && o.contains(&MountOption::NoDev));
        assert!(!o.contains(&MountOption::Suid) && !o.contains(&MountOption::Dev));
        assert!(o.contains(&MountOption::FSName("t_suid_dev".into())));
    }

    #[test]
    fn missing_pieces_are_named() {
        let dir = std::env::temp_dir();
        let e = check_mount_support(Path::new("/nonexistent/fuse"), Some(dir.as_os_str()), true).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/fuse is missing: load the FUSE kernel module"), "{e}");
        if std::env::var_os("FUSERMOUNT_PATH").is_none() {
            let empty = OsStr::new("/nonexistent/bin");
            assert_eq!(find_fusermount(Some(empty)), None);
            let e = check_mount_support(&dir, Some(empty), true).unwrap_err();
            assert_eq!(
                e.to_string(),
                "fusermount is missing (searched PATH=/nonexistent/bin): install the Debian package 'fuse' ('apt-get install fuse')"
            );
            check_mount_support(&dir, Some(empty), false).unwrap();
        }
    }

    #[test]
    fn mountpoints_are_0755_under_any_umask() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = std::env::temp_dir().join(format!("tarn-fuse-mp-{}", std::process::id()));
        let deep = tmp.join("a/b");
        // SAFETY: umask only changes this process's file-creation mask; no other test
        // of this binary creates files.
        let old = unsafe { libc::umask(0o077) };
        let made = create_mountpoint(&deep);
        unsafe { libc::umask(old) };
        made.unwrap();
        for d in [&tmp, &tmp.join("a"), &deep] {
            assert_eq!(std::fs::metadata(d).unwrap().permissions().mode() & 0o777, 0o755, "{}", d.display());
        }
        create_mountpoint(&deep).unwrap();
        std::fs::write(tmp.join("f"), b"").unwrap();
        assert!(create_mountpoint(&tmp.join("f")).is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
