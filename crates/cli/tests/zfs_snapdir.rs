//! End-to-end: the `.zfs` control directory of mounted file systems and the `snapdir`
//! property (OpenZFS suite areas cli_root/zfs_set snapdir cases, snapshot/snapshot_*
//! reading files through `.zfs/snapshot`, ctldir).
//!
//! How: a pool mounted under the test directory; files are written through FUSE,
//! snapshotted and changed, and `.zfs/snapshot/<snap>/` is read, listed and written to
//! through `std::fs` and `ls -a` while snapshots are taken, destroyed and rolled away.
//! The property half (validation, inheritance, `zfs get`) needs no mount and always
//! runs; the FUSE half is skipped, with a message, when FUSE is not usable here.

mod common;
use common::*;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Names in a directory, sorted ("." and ".." are not reported by `read_dir`).
fn ls(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", p.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// `ls -a` of a directory, one name a line, as a user would see it.
fn ls_a(p: &Path) -> Vec<String> {
    let out = std::process::Command::new("ls").env("LC_ALL", "C").arg("-a1").arg(p).output().expect("run ls");
    assert!(out.status.success(), "ls -a {}: {out:?}", p.display());
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap_or(-1)
}

/// Wait (up to 3 s: past the kernel's 1 s entry cache) for `cond`.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn snapdir_property() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    let get = |ds: &str| env.zfs(&["get", "-H", "-o", "value,source", "snapdir", ds]).ok().stdout;
    assert_eq!(get("tank/fs"), "hidden\tdefault\n");
    env.zfs(&["set", "snapdir=bogus", "tank/fs"])
        .fails_with("cannot set property for 'tank/fs': 'snapdir' must be one of 'hidden | visible'");
    env.zfs(&["create", "-u", "-o", "snapdir=shown", "tank/x"])
        .fails_with("cannot create 'tank/x': 'snapdir' must be one of 'hidden | visible'");
    assert_eq!(get("tank/fs"), "hidden\tdefault\n");
    env.zfs(&["set", "snapdir=visible", "tank"]).ok();
    assert_eq!(get("tank/fs"), "visible\tinherited from tank\n");
    env.zfs(&["set", "snapdir=hidden", "tank/fs"]).ok();
    assert_eq!(get("tank/fs"), "hidden\tlocal\n");
    env.zfs(&["inherit", "snapdir", "tank/fs"]).ok();
    assert_eq!(get("tank/fs"), "visible\tinherited from tank\n");
    env.zfs(&["inherit", "snapdir", "tank"]).ok();
    assert_eq!(get("tank/fs"), "hidden\tdefault\n");
    env.zfs(&["create", "-u", "-o", "snapdir=visible", "tank/v"]).ok();
    assert_eq!(get("tank/v"), "visible\tlocal\n");
    let all = env.zfs(&["get", "all", "tank/fs"]).ok().stdout;
    assert!(
        all.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["tank/fs", "snapdir", "hidden", "default"]),
        "{all}"
    );
    // Survives export/import.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "-R", &alt, "tank"]).ok();
    assert_eq!(get("tank/v"), "visible\tlocal\n");
}

#[test]
fn snapshots_through_dotzfs() {
    if !fuse_usable("snapshots_through_dotzfs") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.zpool(&["create", "-m", &ms, "-o", "size=256M", "tank", "v/a"]).ok();
    env.zfs(&["create", "tank/fs"]).ok();
    let fs = m.join("fs");
    let snapdir = fs.join(".zfs/snapshot");
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(fs.join("file"), b"first version\n").unwrap();
    std::fs::write(fs.join("big"), &big).unwrap();
    std::fs::create_dir(fs.join("dir")).unwrap();
    std::fs::write(fs.join("dir/inner"), b"inner\n").unwrap();

    // No snapshots yet: .zfs is there but not listed; .zfs/snapshot is empty.
    assert_eq!(ls_a(&fs), [".", "..", "big", "dir", "file"]);
    assert!(fs.join(".zfs").is_dir());
    assert_eq!(ls(&fs.join(".zfs")), ["shares", "snapshot"]);
    assert!(ls(&snapdir).is_empty());

    env.zfs(&["snapshot", "tank/fs@one"]).ok();
    std::fs::write(fs.join("file"), b"second version, longer\n").unwrap();
    std::fs::write(fs.join("big"), b"overwritten").unwrap();
    std::fs::remove_file(fs.join("dir/inner")).unwrap();
    std::fs::write(fs.join("new"), b"born after one\n").unwrap();

    // The snapshot shows the old contents; the live file system the new.
    let one = snapdir.join("one");
    assert_eq!(ls(&snapdir), ["one"]);
    assert_eq!(ls(&one), ["big", "dir", "file"]);
    assert_eq!(std::fs::read(one.join("file")).unwrap(), b"first version\n");
    assert_eq!(std::fs::read(one.join("big")).unwrap(), big);
    assert_eq!(std::fs::read(one.join("dir/inner")).unwrap(), b"inner\n");
    assert!(!one.join("new").exists());
    assert_eq!(std::fs::read(fs.join("file")).unwrap(), b"second version, longer\n");
    // Inode numbers under .zfs have bit 63 set and never meet the live ones.
    let live_ino = std::fs::metadata(fs.join("file")).unwrap().ino();
    let snap_ino = std::fs::metadata(one.join("file")).unwrap().ino();
    assert_eq!(live_ino >> 63, 0);
    assert_eq!(snap_ino >> 63, 1);
    assert_eq!(std::fs::metadata(&one).unwrap().ino() >> 63, 1);

    // Everything under it is read-only.
    assert_eq!(errno(std::fs::write(one.join("file"), b"x")), libc::EROFS);
    assert_eq!(errno(std::fs::write(one.join("created"), b"x")), libc::EROFS);
    assert_eq!(errno(std::fs::remove_file(one.join("file"))), libc::EROFS);
    assert_eq!(errno(std::fs::rename(one.join("file"), one.join("moved"))), libc::EROFS);
    assert_eq!(errno(std::fs::create_dir(one.join("d"))), libc::EROFS);
    assert_eq!(errno(std::fs::remove_dir(one.join("dir"))), libc::EROFS);
    assert_eq!(
        errno(std::fs::set_permissions(one.join("file"), std::fs::Permissions::from_mode(0o600))),
        libc::EROFS
    );
    assert_eq!(errno(std::fs::create_dir(snapdir.join("made"))), libc::EROFS);
    assert_eq!(errno(std::fs::rename(fs.join("new"), one.join("new"))), libc::EROFS);
    assert_eq!(std::fs::read(one.join("file")).unwrap(), b"first version\n");
    assert_eq!(ls(&snapdir), ["one"], "zfs list and .zfs agree after refused changes");

    // Snapshots taken while mounted appear at once, in each file system's own .zfs.
    env.zfs(&["create", "tank/fs/kid"]).ok();
    std::fs::write(fs.join("kid/k"), b"kid\n").unwrap();
    env.zfs(&["snapshot", "-r", "tank/fs@two"]).ok();
    env.zfs(&["snapshot", "tank/fs@three"]).ok();
    assert_eq!(ls(&snapdir), ["one", "three", "two"]);
    assert_eq!(ls(&fs.join("kid/.zfs/snapshot")), ["two"]);
    assert_eq!(std::fs::read(fs.join("kid/.zfs/snapshot/two/k")).unwrap(), b"kid\n");
    assert_eq!(std::fs::read(snapdir.join("two/file")).unwrap(), b"second version, longer\n");

    // snapdir=visible lists .zfs in the root (of that file system only); hidden again
    // when inherited back.
    env.zfs(&["set", "snapdir=visible", "tank/fs"]).ok();
    assert_eq!(ls_a(&fs), [".", "..", ".zfs", "big", "dir", "file", "kid", "new"]);
    assert_eq!(ls_a(&fs.join("kid")), [".", "..", ".zfs", "k"], "kid inherits visible");
    assert_eq!(ls_a(&fs.join("dir")), [".", ".."]);
    env.zfs(&["set", "snapdir=hidden", "tank/fs/kid"]).ok();
    assert_eq!(ls_a(&fs.join("kid")), [".", "..", "k"]);
    env.zfs(&["inherit", "snapdir", "tank/fs"]).ok();
    assert_eq!(ls_a(&fs), [".", "..", "big", "dir", "file", "kid", "new"]);
    assert!(fs.join(".zfs/snapshot/two").is_dir(), "hidden is still reachable by name");
    env.zfs(&["set", "snapdir=bogus", "tank/fs"])
        .fails_with("cannot set property for 'tank/fs': 'snapdir' must be one of 'hidden | visible'");
    assert_eq!(ls_a(&fs), [".", "..", "big", "dir", "file", "kid", "new"]);

    // A destroyed snapshot leaves the listing at once; a file of it held open is stale.
    let mut held = std::fs::File::open(one.join("big")).unwrap();
    env.zfs(&["destroy", "tank/fs@one"]).ok();
    assert_eq!(ls(&snapdir), ["three", "two"]);
    let mut buf = Vec::new();
    assert_eq!(errno(std::io::Read::read_to_end(&mut held, &mut buf)), libc::ESTALE);
    drop(held);
    eventually("the destroyed snapshot's path to go", || !one.exists());
    assert_eq!(errno(std::fs::read(one.join("file"))), libc::ENOENT);
    // rollback -r destroys the newer snapshots: they go too. (The rollback remounts
    // tank/fs and leaves tank/fs/kid unmounted, so kid is done with by now.)
    env.zfs(&["rollback", "-r", "tank/fs@two"]).ok();
    assert_eq!(ls(&snapdir), ["two"]);
    assert_eq!(env.zfs(&["list", "-H", "-o", "name", "-t", "snapshot", "tank/fs"]).ok().stdout, "tank/fs@two\n");
    // A new snapshot under a destroyed one's name shows the new contents.
    std::fs::write(fs.join("file"), b"third\n").unwrap();
    env.zfs(&["snapshot", "tank/fs@one"]).ok();
    assert_eq!(ls(&snapdir), ["one", "two"]);
    assert_eq!(std::fs::read(snapdir.join("one/file")).unwrap(), b"third\n");

    // A name the file system cannot hold: .zfs in the root.
    assert_eq!(errno(std::fs::create_dir(fs.join(".zfs"))), libc::EEXIST);
    env.zpool(&["export", "tank"]).ok();
}
