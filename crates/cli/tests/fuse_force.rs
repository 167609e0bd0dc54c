//! End-to-end: busy mounts and `-f` (zfs-unmount(8), zfs-rename(8), zfs-rollback(8),
//! zfs-destroy(8)). A file system with a file held open refuses a plain unmount with
//! OpenZFS's "pool or dataset is busy" and stays mounted and served; `-f` unmounts
//! it anyway (the kernel aborts the connection; an open file may still read what the
//! page cache holds), so `zfs unmount -f`,
//! `zfs rename -f`, `zfs rollback -Rf`, `zfs destroy -f` and `zpool export -f` go through. Skipped, with a
//! message, when FUSE is not usable here.

mod common;
use common::*;

fn mounted(env: &Env, ds: &str) -> String {
    env.zfs(&["get", "-H", "-o", "value", "mounted", ds]).ok().stdout.trim().to_string()
}

#[test]
fn busy_mounts_and_force() {
    if !fuse_usable("busy_mounts_and_force") {
        return;
    }
    let env = Env::new();
    let m = env.mounted_pool(&[]);
    let ms = m.display().to_string();
    env.zfs(&["create", "tank/fs"]).ok();
    std::fs::write(m.join("fs/file"), b"held open\n").unwrap();

    // A plain unmount of a busy file system fails and leaves it mounted and served.
    let held = std::fs::File::open(m.join("fs/file")).unwrap();
    env.zfs(&["unmount", "tank/fs"]).fails_with("cannot unmount");
    let o = env.zfs(&["unmount", "tank/fs"]).fails_with("pool or dataset is busy");
    assert!(o.stderr.contains(&ms), "{o:?}");
    assert_eq!(mounted(&env, "tank/fs"), "yes");
    assert_eq!(std::fs::read(m.join("fs/file")).unwrap(), b"held open\n");
    // -f unmounts it anyway (the kernel no longer lists it); the data is in the pool.
    env.zfs(&["unmount", "-f", "tank/fs"]).ok();
    assert_eq!(mounted(&env, "tank/fs"), "no");
    let mnts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mnts.contains(&format!(" {ms}/fs ")), "{mnts}");
    drop(held);
    env.zfs(&["mount", "tank/fs"]).ok();
    assert_eq!(std::fs::read(m.join("fs/file")).unwrap(), b"held open\n");

    // rename: refused while busy (nothing renamed, still mounted), -f goes through.
    let held = std::fs::File::open(m.join("fs/file")).unwrap();
    env.zfs(&["rename", "tank/fs", "tank/moved"]).fails_with("pool or dataset is busy");
    assert_eq!(env.zfs(&["list", "-H", "-o", "name", "-r", "tank"]).ok().stdout, "tank\ntank/fs\n");
    assert_eq!(mounted(&env, "tank/fs"), "yes");
    env.zfs(&["rename", "-f", "tank/fs", "tank/moved"]).ok();
    drop(held);
    assert_eq!(mounted(&env, "tank/moved"), "yes");
    assert_eq!(std::fs::read(m.join("moved/file")).unwrap(), b"held open\n");

    // rollback -R destroys a busy clone only with -f.
    env.zfs(&["snapshot", "tank/moved@a"]).ok();
    env.zfs(&["snapshot", "tank/moved@b"]).ok();
    env.zfs(&["clone", "tank/moved@b", "tank/cl"]).ok();
    let held = std::fs::File::open(m.join("cl/file")).unwrap();
    env.zfs(&["rollback", "-R", "tank/moved@a"]).fails_with("pool or dataset is busy");
    assert_eq!(mounted(&env, "tank/cl"), "yes");
    assert!(env.zfs(&["list", "-H", "-o", "name", "tank/moved@b"]).code == 0);
    env.zfs(&["rollback", "-Rf", "tank/moved@a"]).ok();
    drop(held);
    env.zfs(&["list", "tank/cl"]).fails_with("dataset does not exist");
    env.zfs(&["list", "tank/moved@b"]).fails_with("dataset does not exist");

    // destroy: busy refuses (the file system stays), -f destroys.
    env.zfs(&["create", "tank/gone"]).ok();
    std::fs::write(m.join("gone/f"), b"x").unwrap();
    let held = std::fs::File::open(m.join("gone/f")).unwrap();
    env.zfs(&["destroy", "tank/gone"]).fails_with("pool or dataset is busy");
    assert_eq!(mounted(&env, "tank/gone"), "yes");
    env.zfs(&["destroy", "-f", "tank/gone"]).ok();
    drop(held);
    env.zfs(&["list", "tank/gone"]).fails_with("dataset does not exist");

    // zpool export: busy refuses (the pool stays imported and mounted), -f exports.
    let held = std::fs::File::open(m.join("moved/file")).unwrap();
    env.zpool(&["export", "tank"]).fails_with("pool or dataset is busy");
    assert_eq!(mounted(&env, "tank/moved"), "yes");
    env.zpool(&["export", "-f", "tank"]).ok();
    drop(held);
    env.zpool(&["list", "tank"]).fails_with("no such pool");
}
