//! End-to-end: dedup from the command line. `zfs set dedup=…` with OpenZFS's
//! values (others refused, nothing changed), a file written twice through a mount
//! stored once (`zpool list` DEDUP 2.00x, allocated space not doubled), `zpool status
//! -D` with the dedup table's summary and histogram, and the table surviving export
//! and import.

mod common;
use common::*;

const MB: u64 = 1 << 20;

#[test]
fn duplicate_files_are_stored_once() {
    let env = Env::new();
    let a = env.make_vdev("a", 256 * MB);
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a]).ok();
    env.zfs(&["set", "dedup=skein", "tank"])
        .fails_with("'dedup' must be one of 'on | off | verify | sha256[,verify] | sha512[,verify] | blake3[,verify]'");
    let s = env.zpool(&["status", "-D", "tank"]).ok().stdout;
    assert!(s.contains(" dedup: no DDT entries\n"), "{s}");
    env.zpool(&["set", "dedup_table_quota=1G", "tank"]).ok();
    assert_eq!(
        env.zpool(&["get", "-H", "-o", "value,source", "dedup_table_quota", "tank"]).ok().stdout,
        "1G\tlocal\n"
    );
    env.zpool(&["set", "dedup_table_quota=lots", "tank"])
        .fails_with("'dedup_table_quota' must be 'auto', 'none' or a size");
    env.zfs(&["set", "dedup=on", "tank"]).ok();
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "dedup", "tank"]).ok().stdout, "on\n");
    if !fuse_usable("duplicate_files_are_stored_once") {
        return;
    }
    let data = xorshift_bytes((8 * MB) as usize, 3);
    std::fs::write(mnt.join("one"), &data).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    let alloc = |env: &Env| -> u64 {
        env.zpool(&["get", "-Hp", "-o", "value", "allocated", "tank"])
            .ok()
            .stdout
            .trim()
            .parse()
            .unwrap()
    };
    let before = alloc(&env);
    std::fs::write(mnt.join("two"), &data).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    assert!(alloc(&env) - before < 2 * MB, "the duplicate allocated {} bytes", alloc(&env) - before);
    assert_eq!(env.zpool(&["list", "-H", "-o", "dedup", "tank"]).ok().stdout, "2.00x\n");
    let s = env.zpool(&["status", "-D", "tank"]).ok().stdout;
    assert!(s.contains(" dedup: DDT entries 64, size 120B on disk,"), "{s}");
    assert!(s.contains("refcnt   blocks   LSIZE   PSIZE   DSIZE   blocks   LSIZE   PSIZE   DSIZE\n"), "{s}");
    assert!(s.contains("     2       64      8M      8M      8M      128     16M     16M     16M\n"), "{s}");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(env.zpool(&["list", "-H", "-o", "dedup", "tank"]).ok().stdout, "2.00x\n");
    assert_eq!(std::fs::read(mnt.join("two")).unwrap(), data);
    std::fs::remove_file(mnt.join("one")).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    assert_eq!(env.zpool(&["list", "-H", "-o", "dedup", "tank"]).ok().stdout, "1.00x\n");
    assert_eq!(std::fs::read(mnt.join("two")).unwrap(), data);
}
