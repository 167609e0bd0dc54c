//! End-to-end: `tarn zfs snapshot`, `list -t snapshot`, `destroy` of snapshots and
//! ranges, `rollback`, `clone` (OpenZFS suite areas cli_root/zfs_snapshot,
//! zfs_rollback, zfs_clone, zfs_destroy).
//!
//! How: a pool mounted under the test directory; files are written through FUSE,
//! snapshotted, changed, and the mount is checked after rollback (old contents at
//! once) and through a clone's mount. Refused commands are checked for status,
//! OpenZFS's message and an unchanged `zfs list`. The FUSE half is skipped, with a
//! message, when FUSE is not usable here; the listing and error half always runs.

mod common;
use common::*;

fn snaps(env: &Env) -> String {
    env.zfs(&["list", "-H", "-t", "snapshot", "-o", "name"]).ok().stdout
}

/// A numeric property in parsable form (`zfs get -Hp`).
fn bytes(env: &Env, prop: &str, ds: &str) -> u64 {
    let out = env.zfs(&["get", "-H", "-p", "-o", "value", prop, ds]).ok().stdout;
    out.trim().parse().unwrap_or_else(|_| panic!("{prop} of {ds}: {out:?}"))
}

#[test]
fn snapshot_list_destroy_without_mounts() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    env.zfs(&["create", "-u", "tank/fs/kid"]).ok();
    env.zfs(&["snapshot", "tank/fs@a"]).ok();
    env.zfs(&["snapshot", "-r", "tank/fs@b"]).ok();
    env.zfs(&["snap", "tank/fs@c", "tank@top"]).ok();
    assert_eq!(snaps(&env), "tank@top\ntank/fs@a\ntank/fs@b\ntank/fs@c\ntank/fs/kid@b\n");
    // Plain `zfs list` shows file systems only; -t all both; -t snapshot FS its own.
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "tank\ntank/fs\ntank/fs/kid\n");
    assert_eq!(
        env.zfs(&["list", "-H", "-o", "name", "-t", "snapshot", "tank/fs"]).ok().stdout,
        "tank/fs@a\ntank/fs@b\ntank/fs@c\n"
    );
    assert_eq!(
        env.zfs(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank/fs/kid"]).ok().stdout,
        "tank/fs/kid\ntank/fs/kid@b\n"
    );
    assert_eq!(
        env.zfs(&["list", "-H", "-o", "name", "-d", "1", "-t", "all", "tank/fs"]).ok().stdout,
        "tank/fs\ntank/fs@a\ntank/fs@b\ntank/fs@c\ntank/fs/kid\n"
    );
    let sp = env.zfs(&["list", "-o", "space", "tank/fs"]).ok().stdout;
    assert!(
        sp.lines().next().unwrap().split_whitespace().collect::<Vec<_>>() == ["NAME", "AVAIL", "USED", "USEDSNAP", "USEDDS", "USEDREFRESERV", "USEDCHILD"],
        "{sp}"
    );
    let t = env.zfs(&["get", "-H", "-o", "value", "type", "tank/fs@a"]).ok().stdout;
    assert_eq!(t, "snapshot\n");
    let all = env.zfs(&["get", "all", "tank/fs@a"]).ok().stdout;
    for p in ["creation", "used", "referenced", "written", "clones", "userrefs", "createtxg"] {
        assert!(all.contains(&format!(" {p} ")), "get all lacks {p}: {all}");
    }
    assert!(!all.contains(" mountpoint "), "a snapshot has no mountpoint: {all}");

    // Refusals change nothing.
    let before = snaps(&env);
    env.zfs(&["snapshot", "tank/fs@a"])
        .fails_with("cannot create snapshot 'tank/fs@a': dataset already exists");
    env.zfs(&["snapshot", "tank/nope@x"])
        .fails_with("cannot open 'tank/nope': dataset does not exist");
    env.zfs(&["snapshot", "tank/fs"]).fails_with("missing '@' delimiter");
    env.zfs(&["snapshot", "tank/fs@bad*name"]).fails_with("invalid character '*'");
    env.zfs(&["destroy", "tank/fs"]).fails_with("filesystem has children");
    env.zfs(&["destroy", "tank/fs@nope"]).fails_with("could not find any snapshots to destroy");
    env.zfs(&["rollback", "tank/fs@a"]).fails_with("more recent snapshots or bookmarks exist");
    env.zfs(&["clone", "tank/fs@a", "other/c"]).fails_with("source and target pools differ");
    assert_eq!(snaps(&env), before);

    // A clone pins its origin.
    env.zfs(&["clone", "-o", "canmount=noauto", "tank/fs@a", "tank/c"]).ok();
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "origin", "tank/c"]).ok().stdout, "tank/fs@a\n");
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "clones", "tank/fs@a"]).ok().stdout, "tank/c\n");
    env.zfs(&["destroy", "tank/fs@a"]).fails_with("snapshot has dependent clones");
    // -nv prints the plan and changes nothing.
    let plan = env.zfs(&["destroy", "-nvR", "tank/fs@a"]).ok().stdout;
    assert!(plan.starts_with("would destroy tank/c\nwould destroy tank/fs@a\nwould reclaim "), "{plan}");
    assert_eq!(snaps(&env), before);
    // A range destroys a@..c@ of tank/fs; -R takes the clone and, as it implies -r
    // in OpenZFS, the same-named snapshots of descendants (tank/fs/kid@b).
    env.zfs(&["destroy", "-R", "tank/fs@a%c"]).ok();
    assert_eq!(snaps(&env), "tank@top\n");
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "tank\ntank/fs\ntank/fs/kid\n");
    // -r on a snapshot name takes the same snapshot of every descendant.
    env.zfs(&["snapshot", "-r", "tank@r"]).ok();
    assert_eq!(snaps(&env), "tank@top\ntank@r\ntank/fs@r\ntank/fs/kid@r\n");
    env.zfs(&["destroy", "-r", "tank@r"]).ok();
    assert_eq!(snaps(&env), "tank@top\n");
    env.zfs(&["snapshot", "tank/fs/kid@b"]).ok();
    // Snapshots survive export/import.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "-R", &alt, "tank"]).ok();
    assert_eq!(snaps(&env), "tank@top\ntank/fs/kid@b\n");
    // rollback -R: clones of the snapshots -r destroys go first (-f: busy mounts of
    // them too, tests/fuse_force.rs).
    env.zfs(&["snapshot", "tank/fs@x"]).ok();
    env.zfs(&["snapshot", "tank/fs@y"]).ok();
    env.zfs(&["clone", "-o", "canmount=noauto", "tank/fs@y", "tank/cy"]).ok();
    env.zfs(&["rollback", "-r", "tank/fs@x"]).fails_with("clones of previous snapshots exist");
    env.zfs(&["rollback", "-q", "tank/fs@x"]).fails_with("invalid option 'q'");
    assert_eq!(snaps(&env), "tank@top\ntank/fs@x\ntank/fs@y\ntank/fs/kid@b\n");
    env.zfs(&["rollback", "-R", "tank/fs@x"]).ok();
    assert_eq!(snaps(&env), "tank@top\ntank/fs@x\ntank/fs/kid@b\n");
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, "tank\ntank/fs\ntank/fs/kid\n");
    // Comma lists name several snapshots of one file system; written@snap is bytes.
    env.zfs(&["snapshot", "tank/fs@p", "tank/fs@q"]).ok();
    assert_eq!(bytes(&env, "written@p", "tank/fs"), 0);
    env.zfs(&["destroy", "tank/fs@p,q"]).ok();
    assert_eq!(snaps(&env), "tank@top\ntank/fs@x\ntank/fs/kid@b\n");
    env.zfs(&["destroy", "-r", "tank/fs"]).ok();
    assert_eq!(snaps(&env), "tank@top\n");
}

#[test]
fn rollback_and_clone_through_mounts() {
    if !fuse_usable("rollback_and_clone_through_mounts") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.zpool(&["create", "-m", &ms, "-o", "size=256M", "tank", "mirror", "v/a", "v/b"]).ok();
    env.zfs(&["create", "tank/fs"]).ok();
    let f = m.join("fs/file");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(&f, &big).unwrap();
    std::fs::write(m.join("fs/keep"), b"v1\n").unwrap();
    env.zfs(&["snapshot", "tank/fs@one"]).ok();
    std::fs::write(&f, b"changed").unwrap();
    std::fs::write(m.join("fs/new"), b"born after one").unwrap();
    std::fs::remove_file(m.join("fs/keep")).unwrap();
    // Space moves to the snapshot when the txg holding the overwrite syncs.
    env.zpool(&["sync", "tank"]).ok();
    env.zpool(&["sync", "nosuch"]).fails_with("cannot open 'nosuch': no such pool");
    // The snapshot holds the old blocks: it uses about the 3 MB overwritten.
    let used = bytes(&env, "used", "tank/fs@one");
    assert!(used >= 2_500_000, "snapshot used {used}");
    let usedsnap = bytes(&env, "usedbysnapshots", "tank/fs");
    assert_eq!(usedsnap, used);
    // A clone shows the snapshot's files, and is writable on its own.
    env.zfs(&["clone", "tank/fs@one", "tank/c"]).ok();
    assert_eq!(std::fs::read(m.join("c/file")).unwrap(), big);
    std::fs::write(m.join("c/keep"), b"clone's own").unwrap();
    // A child file system mounted inside: the rollback unmounts it with its parent
    // and mounts both again.
    env.zfs(&["create", "tank/fs/kid"]).ok();
    std::fs::write(m.join("fs/kid/inside"), b"kid's file").unwrap();
    // Rollback: the mount shows the old contents at once.
    env.zfs(&["rollback", "tank/fs@one"]).ok();
    assert_eq!(std::fs::read(m.join("fs/kid/inside")).unwrap(), b"kid's file");
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "mounted", "tank/fs/kid"]).ok().stdout, "yes\n");
    assert_eq!(std::fs::read(&f).unwrap(), big);
    assert_eq!(std::fs::read(m.join("fs/keep")).unwrap(), b"v1\n");
    assert!(!m.join("fs/new").exists());
    assert_eq!(std::fs::read(m.join("c/keep")).unwrap(), b"clone's own");
    // Destroying the clone, then the snapshot, gives the space back.
    env.zfs(&["destroy", "tank/fs/kid"]).ok();
    env.zfs(&["destroy", "tank/c"]).ok();
    env.zfs(&["destroy", "tank/fs@one"]).ok();
    assert_eq!(std::fs::read(&f).unwrap(), big);
    env.zpool(&["export", "tank"]).ok();
}
