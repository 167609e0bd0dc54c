//! # mounts — dataset mounts (zpl + FUSE) behind one small type
//!
//! Theory: a mounted dataset is its object set opened by `tarn_zpl::Fs` and served at
//! a directory by `tarn_fuse`. [`Mounted`] owns both halves; dropping the FUSE handle
//! is the only way a mount ends besides [`Mounted::unmount`] (and, when the daemon is
//! killed, `auto_unmount`: fusermount notices the closed channel and unmounts; when
//! that helper was killed too — systemd kills a unit's whole cgroup — the next mount
//! at that place detaches the dead one first, `tarn_fuse::clear_dead_mounts`).
//! Option changes that zpl can apply live (readonly, atime, recordsize, sync, snapdir)
//! go through [`Mounted::set_options`]; a mountpoint change is an unmount plus a
//! mount, done by the daemon.
//!
//! Every mount serves the dataset with its `.zfs` control directory
//! (`tarn_zpl::Vfs`): [`PoolSnapshots`] answers which snapshots the dataset has by
//! asking the pool on every call (`Pool::snapshots_of`, `Pool::snapshot_objset`), so
//! `zfs snapshot`, `destroy` and `rollback` show under `.zfs/snapshot` at once. It
//! holds the pool weakly and the dataset's name: a mount outliving its pool sees no
//! snapshots, and a renamed dataset must be remounted to find its snapshots again.
//!
//! Built without the `fuse` feature (while zpl/fuse are unfinished), [`mount`] fails
//! with a clear message and nothing else changes, so pool commands keep working.
//!
//! The mountpoint directory is created (with parents, mode 0755) when missing, as
//! OpenZFS does, once the system is known to have what a FUSE mount needs
//! (`tarn_fuse::check_mount_support`: `/dev/fuse` and `fusermount`, from Debian's
//! `fuse` package). Every mount is `nosuid,nodev` (no `setuid`/`devices` property
//! exists to change that), and the dataset name becomes the FUSE `fsname` only
//! sanitized (`tarn_fuse::fsname_option`), so a name from a crafted pool cannot add
//! mount options.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use tarn_spa::{ObjectStore, Pool, SpaError, Zilog};
use tarn_zpl::{SnapDir, SnapshotSource, ZplError};

/// Options of one mount, from the dataset's effective properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountOpts {
    /// `readonly=on`.
    pub readonly: bool,
    /// `atime=on`.
    pub atime: bool,
    /// `recordsize` in bytes.
    pub recordsize_bytes: u32,
    /// `sync` property.
    pub sync: SyncProp,
    /// `snapdir` property: whether `.zfs` is listed in the root.
    pub snapdir: SnapDir,
}

/// The snapshots of one dataset, from its pool: the `.zfs/snapshot` source of a mount.
#[derive(Debug)]
pub struct PoolSnapshots {
    pool: Weak<Pool>,
    fs: String,
}

impl PoolSnapshots {
    /// The snapshots of file system `fs` of `pool`.
    pub fn new(pool: &Arc<Pool>, fs: &str) -> Arc<PoolSnapshots> {
        Arc::new(PoolSnapshots {
            pool: Arc::downgrade(pool),
            fs: fs.to_string(),
        })
    }
}

impl SnapshotSource for PoolSnapshots {
    fn list(&self) -> Vec<String> {
        let Some(pool) = self.pool.upgrade() else { return Vec::new() };
        let prefix = format!("{}@", self.fs);
        pool.snapshots_of(&self.fs)
            .into_iter()
            .filter_map(|n| n.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ObjectStore>, ZplError> {
        let pool = self.pool.upgrade().ok_or(ZplError::NotFound)?;
        if name.contains(['@', '/']) {
            return Err(ZplError::NotFound);
        }
        match pool.snapshot_objset(&format!("{}@{name}", self.fs)) {
            Ok(os) => Ok(os),
            Err(SpaError::NotFound(_)) => Err(ZplError::NotFound),
            Err(e) => Err(ZplError::Io(e.to_string())),
        }
    }
}

/// The `sync` dataset property as the mount applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncProp {
    /// `sync=standard`.
    #[default]
    Standard,
    /// `sync=always`.
    Always,
    /// `sync=disabled`.
    Disabled,
}

/// A live mount.
pub struct Mounted {
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// Options it runs with.
    pub opts: MountOpts,
    imp: imp::Handle,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("mountpoint", &self.mountpoint)
            .field("opts", &self.opts)
            .finish()
    }
}

/// Mount dataset `name` (object set `os`, intent log `zil`, snapshots for `.zfs` from
/// `snapshots`) at `mountpoint`. A log left by a crash is replayed first.
pub fn mount(
    os: Arc<dyn ObjectStore>,
    zil: Option<Arc<Zilog>>,
    snapshots: Arc<dyn SnapshotSource>,
    name: &str,
    mountpoint: &Path,
    opts: MountOpts,
) -> Result<Mounted, String> {
    let imp = imp::mount(os, zil, snapshots, name, mountpoint, opts)?;
    Ok(Mounted {
        mountpoint: mountpoint.to_path_buf(),
        opts,
        imp,
    })
}

impl Mounted {
    /// Apply readonly/atime/recordsize/sync/snapdir to the live file system.
    pub fn set_options(&mut self, opts: MountOpts) -> Result<(), String> {
        if opts != self.opts {
            imp::set_options(&self.imp, opts)?;
            self.opts = opts;
        }
        Ok(())
    }
    /// Unmount (flushes through zpl first). On failure (EBUSY without `force`) the
    /// file system stays mounted and served, and this handle keeps it. `force`
    /// detaches it even while files are open there (`tarn_fuse::Mount::unmount_ext`).
    pub fn unmount(&mut self, force: bool) -> Result<(), String> {
        imp::unmount(&mut self.imp, force)
    }
}

#[cfg(feature = "fuse")]
mod imp {
    use super::*;

    pub struct Handle {
        vfs: Arc<tarn_zpl::Vfs>,
        mount: tarn_fuse::Mount,
    }

    fn zpl_opts(o: MountOpts) -> tarn_zpl::ZplOptions {
        tarn_zpl::ZplOptions {
            readonly: o.readonly,
            atime: o.atime,
            recordsize_bytes: o.recordsize_bytes as _,
            sync: match o.sync {
                SyncProp::Standard => tarn_zpl::SyncMode::Standard,
                SyncProp::Always => tarn_zpl::SyncMode::Always,
                SyncProp::Disabled => tarn_zpl::SyncMode::Disabled,
            },
        }
    }

    pub fn mount(
        os: Arc<dyn ObjectStore>,
        zil: Option<Arc<Zilog>>,
        snapshots: Arc<dyn SnapshotSource>,
        name: &str,
        mountpoint: &Path,
        opts: MountOpts,
    ) -> Result<Handle, String> {
        // Before the log is replayed or a directory made: say what the system lacks.
        tarn_fuse::check_mount_support(Path::new(tarn_fuse::DEV_FUSE), std::env::var_os("PATH").as_deref(), true).map_err(|e| e.to_string())?;
        // A dead mount left by a killed daemon (and its killed fusermount helper)
        // would refuse this one with ENOTCONN: detach it first.
        for at in tarn_fuse::clear_dead_mounts(mountpoint).map_err(|e| format!("cannot detach a dead mount at or above {}: {e}", mountpoint.display()))? {
            tracing::warn!("detached the dead mount at {} (its daemon was killed)", at.display());
        }
        tarn_fuse::create_mountpoint(mountpoint).map_err(|e| format!("failed to create mountpoint: {e}"))?;
        let fs = match zil {
            Some(z) => {
                let (fs, stats) = tarn_zpl::Fs::open_logged(os, z, zpl_opts(opts)).map_err(|e| format!("{e}"))?;
                if stats.applied > 0 || stats.failed > 0 {
                    tracing::info!(
                        "{name}: intent log replayed: {} records applied, {} skipped, {} failed",
                        stats.applied,
                        stats.skipped,
                        stats.failed
                    );
                }
                fs
            }
            None => tarn_zpl::Fs::open(os, zpl_opts(opts)).map_err(|e| format!("{e}"))?,
        };
        // nosuid,nodev are always passed and the name is sanitized by tarn_fuse.
        let mo = tarn_fuse::MountOptions {
            fsname: name.to_string(),
            readonly: opts.readonly,
            allow_other: true,
            auto_unmount: true,
            default_permissions: true,
            // Enough workers that concurrent fsyncs meet in one log commit.
            threads: crate::memory::MOUNT_FUSE_THREADS,
        };
        let vfs = tarn_zpl::Vfs::new(fs, snapshots, opts.snapdir);
        // A panic in a FUSE worker suspends the dataset's pool (tarn_spa `suspend.rs`).
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            tarn_fuse::set_panic_hook(Arc::new(|dataset: &str, message: &str| {
                tarn_spa::Pool::suspend_open(dataset, "fuse", message);
            }))
        });
        let mount = tarn_fuse::mount(vfs.clone(), mountpoint, &mo).map_err(|e| format!("{e}"))?;
        Ok(Handle { vfs, mount })
    }

    pub fn set_options(h: &Handle, opts: MountOpts) -> Result<(), String> {
        h.vfs.fs().set_options(zpl_opts(opts));
        h.vfs.set_snapdir(opts.snapdir);
        Ok(())
    }

    pub fn unmount(h: &mut Handle, force: bool) -> Result<(), String> {
        h.mount.unmount_ext(force).map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => "pool or dataset is busy".to_string(),
            _ => e.to_string(),
        })
    }
}

#[cfg(not(feature = "fuse"))]
mod imp {
    use super::*;

    pub struct Handle;

    pub fn mount(
        _os: Arc<dyn ObjectStore>,
        _zil: Option<Arc<Zilog>>,
        _snapshots: Arc<dyn SnapshotSource>,
        _name: &str,
        _mountpoint: &Path,
        _opts: MountOpts,
    ) -> Result<Handle, String> {
        Err("this tarn was built without FUSE support (feature 'fuse')".into())
    }

    pub fn set_options(_h: &Handle, _opts: MountOpts) -> Result<(), String> {
        Ok(())
    }

    pub fn unmount(_h: &mut Handle, _force: bool) -> Result<(), String> {
        Ok(())
    }
}
