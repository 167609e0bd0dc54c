//! The `.zfs` control directory through a real FUSE mount: a MemStore-backed file
//! system whose "snapshots" are `MemStore::snapshot` copies, driven through `std::fs`
//! so that the kernel's view is checked (errno values, inode numbers, listings while
//! snapshots come and go, ESTALE on an open file of a destroyed snapshot). Skipped,
//! with a message, without /dev/fuse or root.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::mem::MemStore;
use tarn_dmu::ObjectStore;
use tarn_fuse::{mount, MountOptions};
use tarn_zpl::{Fs, SnapDir, SnapshotSource, Vfs, ZplError, ZplOptions};

fn can_mount() -> bool {
    if !Path::new("/dev/fuse").exists() {
        println!("skipping: /dev/fuse is missing");
        return false;
    }
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: not root");
        return false;
    }
    true
}

#[derive(Default)]
struct Snaps(Mutex<Vec<(String, Arc<dyn ObjectStore>)>>);

impl SnapshotSource for Snaps {
    fn list(&self) -> Vec<String> {
        self.0.lock().iter().map(|(n, _)| n.clone()).collect()
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ObjectStore>, ZplError> {
        self.0.lock().iter().find(|(n, _)| n == name).map(|(_, o)| o.clone()).ok_or(ZplError::NotFound)
    }
}

fn ls(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap()
}

#[test]
fn snapshots_under_dotzfs() {
    if !can_mount() {
        return;
    }
    let store = Arc::new(MemStore::new());
    let zfs = Fs::open(store.clone(), ZplOptions::default()).unwrap();
    let snaps = Arc::new(Snaps::default());
    let vfs = Vfs::new(zfs, snaps.clone(), SnapDir::Hidden);
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let m = mount(
        vfs.clone(),
        &mnt,
        &MountOptions {
            fsname: "tank/snapdir".into(),
            threads: 2,
            ..Default::default()
        },
    )
    .unwrap();

    fs::write(mnt.join("file"), b"version one").unwrap();
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/inner"), b"inner").unwrap();
    snaps.0.lock().push(("one".into(), Arc::new(store.snapshot())));
    fs::write(mnt.join("file"), b"version two, longer").unwrap();
    fs::remove_file(mnt.join("dir/inner")).unwrap();

    // Hidden from the root's listing, there by name.
    assert_eq!(ls(&mnt), ["dir", "file"]);
    let z = fs::metadata(mnt.join(".zfs")).unwrap();
    assert!(z.is_dir());
    assert_eq!(z.permissions().mode() & 0o7777, 0o777);
    assert_eq!(ls(&mnt.join(".zfs")), ["shares", "snapshot"]);
    assert_eq!(ls(&mnt.join(".zfs/snapshot")), ["one"]);
    let one = mnt.join(".zfs/snapshot/one");
    assert_eq!(fs::read(one.join("file")).unwrap(), b"version one");
    assert_eq!(fs::read(one.join("dir/inner")).unwrap(), b"inner");
    assert_eq!(fs::read(mnt.join("file")).unwrap(), b"version two, longer");
    // Inode numbers: bit 63 under .zfs, never a live number.
    let live = fs::metadata(mnt.join("file")).unwrap().ino();
    let old = fs::metadata(one.join("file")).unwrap().ino();
    assert_ne!(old & 1 << 63, 0);
    assert_eq!(live & 1 << 63, 0);
    assert_eq!(fs::metadata(&one).unwrap().ino(), 1 << 63 | 1 << 48);

    // Read-only under .zfs: EROFS from the kernel's point of view.
    assert_eq!(errno(fs::write(one.join("file"), b"x")), libc::EROFS);
    assert_eq!(errno(fs::OpenOptions::new().append(true).open(one.join("file"))), libc::EROFS);
    assert_eq!(errno(fs::write(one.join("new"), b"x")), libc::EROFS);
    assert_eq!(errno(fs::create_dir(one.join("d2"))), libc::EROFS);
    assert_eq!(errno(fs::remove_file(one.join("file"))), libc::EROFS);
    assert_eq!(errno(fs::rename(one.join("file"), one.join("f2"))), libc::EROFS);
    assert_eq!(errno(fs::set_permissions(one.join("file"), fs::Permissions::from_mode(0o600))), libc::EROFS);
    assert_eq!(errno(fs::create_dir(mnt.join(".zfs/snapshot/two"))), libc::EROFS);
    assert_eq!(errno(fs::hard_link(one.join("file"), mnt.join("h"))), libc::EXDEV);
    assert_eq!(errno(fs::create_dir(mnt.join(".zfs"))), libc::EEXIST);

    // visible: listed in the root.
    vfs.set_snapdir(SnapDir::Visible);
    assert_eq!(ls(&mnt), [".zfs", "dir", "file"]);
    vfs.set_snapdir(SnapDir::Hidden);
    assert_eq!(ls(&mnt), ["dir", "file"]);

    // Snapshots come and go while mounted; an open file of a destroyed one is stale.
    snaps.0.lock().push(("two".into(), Arc::new(store.snapshot())));
    assert_eq!(ls(&mnt.join(".zfs/snapshot")), ["one", "two"]);
    assert_eq!(fs::read(mnt.join(".zfs/snapshot/two/file")).unwrap(), b"version two, longer");
    let mut held = fs::File::open(one.join("file")).unwrap();
    snaps.0.lock().retain(|(n, _)| n != "one");
    assert_eq!(ls(&mnt.join(".zfs/snapshot")), ["two"]);
    let mut buf = Vec::new();
    assert_eq!(errno(held.read_to_end(&mut buf)), libc::ESTALE);
    drop(held);
    // Once the kernel's 1 s entry cache has passed, the path is gone too.
    std::thread::sleep(tarn_fuse::TTL + std::time::Duration::from_millis(200));
    assert!(!one.exists());
    assert_eq!(errno(fs::metadata(one.join("file"))), libc::ENOENT);

    m.unmount().unwrap();
}
