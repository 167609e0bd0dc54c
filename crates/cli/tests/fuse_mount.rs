//! End-to-end: datasets mounted through FUSE (OpenZFS suite areas cli_root/zfs_mount,
//! zfs_unmount, and the export/import data round trip).
//!
//! How: a mirror pool mounted under the test directory; a tree of files (nested
//! directories, empty, small and multi-record files, a symlink) is copied in, the pool
//! is exported (mounts must disappear) and imported again, and the tree is compared
//! byte for byte with the source. Property changes on a mounted dataset (mountpoint,
//! readonly) are checked through the mount. Skipped, with a message, when FUSE is not
//! usable here (no /dev/fuse, no fusermount, or built without the `fuse` feature).

mod common;
use common::*;
use std::path::Path;

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("d1/d2/d3")).unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("small.txt"), b"hello tarn\n").unwrap();
    let big: Vec<u8> = (0..(3 << 20) + 12345).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(root.join("d1/big.bin"), &big).unwrap();
    for i in 0..50 {
        std::fs::write(root.join(format!("d1/d2/f{i}")), format!("file {i}\n").repeat(i + 1)).unwrap();
    }
    std::fs::write(root.join("d1/d2/d3/deep"), vec![7u8; 200_000]).unwrap();
    std::os::unix::fs::symlink("d1/big.bin", root.join("link")).unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            std::fs::create_dir(&t).unwrap();
            copy_tree(&e.path(), &t);
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &t).unwrap();
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// Compare two trees; returns the first difference.
fn diff(a: &Path, b: &Path) -> Result<(), String> {
    let list = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let (la, lb) = (list(a), list(b));
    if la != lb {
        return Err(format!("{}: {la:?} vs {}: {lb:?}", a.display(), b.display()));
    }
    for n in la {
        let (pa, pb) = (a.join(&n), b.join(&n));
        let (ma, mb) = (std::fs::symlink_metadata(&pa).unwrap(), std::fs::symlink_metadata(&pb).unwrap());
        if ma.file_type().is_symlink() {
            if std::fs::read_link(&pa).unwrap() != std::fs::read_link(&pb).unwrap() {
                return Err(format!("symlink {n} differs"));
            }
        } else if ma.is_dir() {
            if !mb.is_dir() {
                return Err(format!("{n}: not a directory in copy"));
            }
            diff(&pa, &pb)?;
        } else if std::fs::read(&pa).unwrap() != std::fs::read(&pb).unwrap() {
            return Err(format!("{} differs", pa.display()));
        }
    }
    Ok(())
}

fn is_mountpoint(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let s = p.display().to_string();
    mounts.lines().any(|l| l.split_whitespace().nth(4) == Some(s.as_str()))
}

#[test]
fn copy_export_import_diff() {
    if !fuse_usable("copy_export_import_diff") {
        return;
    }
    let env = Env::new();
    let mnt = env.path().join("mnt");
    let src = env.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src);
    let m = mnt.display().to_string();
    env.zpool(&["create", "-m", &m, "-o", "size=256M", "tank", "mirror", "v/a", "v/b"]).ok();
    assert!(is_mountpoint(&mnt), "{}", env.daemon_log());
    assert_eq!(env.zfs(&["mount"]).ok().stdout, format!("{:<30}  {m}\n", "tank"));
    copy_tree(&src, &mnt);
    diff(&src, &mnt).unwrap();
    env.zfs(&["create", "tank/sub"]).ok();
    assert!(is_mountpoint(&mnt.join("sub")));
    std::fs::write(mnt.join("sub/inner"), b"in the child\n").unwrap();

    env.zpool(&["export", "tank"]).ok();
    assert!(!is_mountpoint(&mnt) && !is_mountpoint(&mnt.join("sub")));
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert!(is_mountpoint(&mnt) && is_mountpoint(&mnt.join("sub")));
    assert_eq!(std::fs::read(mnt.join("sub/inner")).unwrap(), b"in the child\n");
    // the child's mount hides its directory in the parent: compare the rest
    env.zfs(&["unmount", "tank/sub"]).ok();
    assert!(!is_mountpoint(&mnt.join("sub")));
    std::fs::remove_dir(mnt.join("sub")).unwrap();
    diff(&src, &mnt).unwrap();
    env.zfs(&["unmount", "tank/sub"]).fails_with("not currently mounted");
    env.zfs(&["mount", "tank/sub"]).ok();
    assert!(is_mountpoint(&mnt.join("sub")));
}

#[test]
fn property_changes_reach_the_mount() {
    if !fuse_usable("property_changes_reach_the_mount") {
        return;
    }
    let env = Env::new();
    let mnt = env.path().join("mnt");
    let m = mnt.display().to_string();
    env.zpool(&["create", "-m", &m, "-o", "size=128M", "tank", "v/a"]).ok();
    env.zfs(&["create", "tank/fs"]).ok();
    std::fs::write(mnt.join("fs/x"), b"x").unwrap();
    env.zfs(&["set", "readonly=on", "tank/fs"]).ok();
    let err = std::fs::write(mnt.join("fs/y"), b"y").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "EROFS expected: {err}");
    env.zfs(&["set", "readonly=off", "tank/fs"]).ok();
    std::fs::write(mnt.join("fs/y"), b"y").unwrap();
    let moved = env.path().join("moved");
    env.zfs(&["set", &format!("mountpoint={}", moved.display()), "tank/fs"]).ok();
    assert!(is_mountpoint(&moved) && !is_mountpoint(&mnt.join("fs")));
    assert_eq!(std::fs::read(moved.join("x")).unwrap(), b"x");
    env.zfs(&["set", "canmount=off", "tank/fs"]).ok();
    assert!(!is_mountpoint(&moved));
    env.zfs(&["mount", "tank/fs"]).fails_with("'canmount' property is set to 'off'");
    env.zfs(&["destroy", "tank/fs"]).ok();
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "tank\n");
}

/// Checksum guarantee through the mount (OpenZFS area: cli_root/zpool_status and the
/// checksum tests): bytes flipped in the vdev file of a non-redundant pool give EIO
/// for that file (never wrong bytes), and `zpool status` counts CKSUM errors.
#[test]
fn flipped_bytes_give_eio_and_cksum_count() {
    if !fuse_usable("flipped_bytes_give_eio_and_cksum_count") {
        return;
    }
    let env = Env::new();
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a.img", 128 << 20);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "ck", &a]).ok();
    let data = vec![0xA5u8; 1 << 20];
    std::fs::write(mnt.join("victim"), &data).unwrap();
    std::fs::write(mnt.join("bystander"), b"still fine\n").unwrap();
    env.zpool(&["export", "ck"]).ok();
    // Flip one byte in every 4 KiB run of the pattern (file data has one copy).
    let mut img = std::fs::read(&a).unwrap();
    let mut flipped = 0;
    let mut i = 4 << 20;
    while i + 4096 < img.len() {
        if img[i..i + 4096].iter().all(|&b| b == 0xA5) {
            img[i + 100] ^= 0x01;
            flipped += 1;
            i += 4096;
        } else {
            i += 512;
        }
    }
    assert!(flipped > 0, "pattern not found in the vdev");
    std::fs::write(&a, &img).unwrap();
    env.zpool(&["import", "-d", env.vdir().to_str().unwrap(), "ck"]).ok();
    let err = std::fs::read(mnt.join("victim")).expect_err("damaged file must not read");
    assert_eq!(err.raw_os_error(), Some(5), "expected EIO, got {err}");
    assert_eq!(std::fs::read(mnt.join("bystander")).unwrap(), b"still fine\n");
    let st = env.zpool(&["status", "ck"]).ok().stdout;
    let leaf_line = st.lines().find(|l| l.contains("a.img")).expect("leaf row");
    let cksum: u64 = leaf_line.split_whitespace().last().unwrap().parse().unwrap();
    assert!(cksum > 0, "CKSUM not counted:\n{st}");
    assert!(st.contains("data errors"), "errors line should report data errors:\n{st}");
}

/// Detaches a loop device when dropped (also when the test fails).
struct LoopDev(String);

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
    }
}

fn attach_loop(file: &str) -> Option<LoopDev> {
    let out = std::process::Command::new("losetup").args(["--find", "--show", file]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(LoopDev(String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// Block-device leaves (OpenZFS suite: the usual case on real systems): a mirror of
/// two loop devices, data copied in, export, found again by `zpool import` scanning
/// /dev (the default search path), imported and compared. Skipped without losetup.
#[test]
fn loop_device_mirror_round_trip() {
    if !fuse_usable("loop_device_mirror_round_trip") {
        return;
    }
    let env = Env::new();
    let f0 = env.make_vdev("l0.img", 128 << 20);
    let f1 = env.make_vdev("l1.img", 128 << 20);
    let (Some(l0), Some(l1)) = (attach_loop(&f0), attach_loop(&f1)) else {
        eprintln!("SKIP loop_device_mirror_round_trip: losetup unavailable");
        return;
    };
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "loopp", "mirror", &l0.0, &l1.0]).ok();
    let st = env.zpool(&["status", "loopp"]).ok().stdout;
    // Shown without /dev/, as OpenZFS does unless -P.
    let short = |d: &str| format!("    {} ", d.trim_start_matches("/dev/"));
    assert!(st.contains(&short(&l0.0)) && st.contains(&short(&l1.0)), "{st}");
    let src = env.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src);
    std::fs::create_dir(mnt.join("t")).unwrap();
    copy_tree(&src, &mnt.join("t"));
    env.zpool(&["export", "loopp"]).ok();
    let listing = env.zpool(&["import"]).ok().stdout;
    assert!(listing.contains("pool: loopp"), "default /dev scan should find the pool:\n{listing}");
    env.zpool(&["import", "loopp"]).ok();
    diff(&src, &mnt.join("t")).unwrap();
    env.zpool(&["export", "loopp"]).ok();
}
