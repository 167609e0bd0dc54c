//! End-to-end: dedup from the command line. `zfs set dedup=…` with OpenZFS's
//! values (others refused, nothing changed), a file written twice through a mount
//! stored once (`zpool list` DEDUP 2.00x, allocated space not doubled), `zpool status
//! -D` with the dedup table's summary and histogram, and the table surviving export
//! and import; `zpool ddtprune` with OpenZFS's usage errors, dropping unique entries
//! only.

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
    assert!(s.contains(" dedup: DDT entries 64, size 128B on disk,"), "{s}");
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

#[test]
fn ddtprune_drops_unique_entries_only() {
    let env = Env::new();
    let a = env.make_vdev("a", 256 * MB);
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "pr", &a]).ok();
    for (args, msg) in [
        (&["ddtprune"][..], "missing amount option (-d|-p <value>)"),
        (&["ddtprune", "pr"], "missing amount option (-d|-p <value>)"),
        (&["ddtprune", "-d", "1", "-p", "5", "pr"], "-p cannot be combined with -d option"),
        (&["ddtprune", "-p", "5", "-d", "1", "pr"], "-d cannot be combined with -p option"),
        (&["ddtprune", "-p", "0", "pr"], "invalid percentage value"),
        (&["ddtprune", "-p", "101", "pr"], "invalid percentage value"),
        (&["ddtprune", "-d", "x", "pr"], "invalid days value"),
        (&["ddtprune", "-d", "0", "pr"], "invalid days value"),
        (&["ddtprune", "-p", "50"], "missing pool argument"),
        (&["ddtprune", "-p", "50", "pr", "extra"], "too many arguments"),
    ] {
        let out = env.zpool(args).fails_with(msg);
        assert_eq!(out.code, 2, "{args:?}: a usage error: {out:?}");
        assert!(out.stderr.contains("ddtprune -d|-p <amount> <pool>"), "{out:?}");
    }
    env.zpool(&["ddtprune", "-p", "50", "nopool"]).fails_with("cannot open 'nopool': no such pool");
    // An empty table: nothing to do.
    env.zpool(&["ddtprune", "-p", "100", "pr"]).ok();
    env.zfs(&["set", "dedup=on", "pr"]).ok();
    if !fuse_usable("ddtprune_drops_unique_entries_only") {
        return;
    }
    let entries = |env: &Env| -> String {
        let s = env.zpool(&["status", "-D", "pr"]).ok().stdout;
        s.lines().find(|l| l.starts_with(" dedup:")).unwrap_or_default().to_string()
    };
    let shared = xorshift_bytes((4 * MB) as usize, 5);
    let unique = xorshift_bytes((2 * MB) as usize, 6);
    std::fs::write(mnt.join("one"), &shared).unwrap();
    std::fs::write(mnt.join("two"), &shared).unwrap();
    std::fs::write(mnt.join("three"), &unique).unwrap();
    env.zpool(&["sync", "pr"]).ok();
    assert!(entries(&env).starts_with(" dedup: DDT entries 48,"), "{}", entries(&env));
    // No entry is a day old: -d 1 prunes nothing.
    env.zpool(&["ddtprune", "-d", "1", "pr"]).ok();
    assert!(entries(&env).starts_with(" dedup: DDT entries 48,"), "{}", entries(&env));
    env.zpool(&["ddtprune", "-p", "100", "pr"]).ok();
    assert!(entries(&env).starts_with(" dedup: DDT entries 32,"), "the 16 unique entries: {}", entries(&env));
    assert!(env.zpool(&["history", "pr"]).ok().stdout.contains(" zpool ddtprune -p 100 pr\n"));
    assert_eq!(env.zpool(&["list", "-H", "-o", "dedup", "pr"]).ok().stdout, "2.00x\n");
    env.zpool(&["export", "pr"]).ok();
    env.zpool(&["import", "-d", "v", "pr"]).ok();
    assert!(entries(&env).starts_with(" dedup: DDT entries 32,"), "{}", entries(&env));
    assert_eq!(std::fs::read(mnt.join("three")).unwrap(), unique);
    let alloc = |env: &Env| -> u64 { env.zpool(&["get", "-Hp", "-o", "value", "allocated", "pr"]).ok().stdout.trim().parse().unwrap() };
    let before = alloc(&env);
    std::fs::remove_file(mnt.join("three")).unwrap();
    env.zpool(&["sync", "pr"]).ok();
    assert!(alloc(&env) + MB < before, "the pruned blocks were not freed");
    env.assert_no_leaks("pr");
}
