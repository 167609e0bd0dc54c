//! End-to-end: cache devices (L2ARC) from the command line. `zpool create … cache
//! DEV`, `zpool add POOL cache DEV` and `zpool remove POOL DEV` as OpenZFS spells
//! them; the `cache` section of `zpool status` and `zpool iostat -v`; the `l2_*`
//! arcstats; an import that goes on without a missing cache device; and, through a
//! mount, a cache that the feed thread fills and that comes back warm after export
//! and import (persistent L2ARC).

mod common;
use common::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

fn kstat(env: &Env) -> HashMap<String, i64> {
    let out = env.tarn(&["kstat", "arcstats"]).ok().stdout;
    out.lines()
        .skip(2)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
        })
        .collect()
}

fn status(env: &Env) -> String {
    env.zpool(&["status", "tank"]).ok().stdout
}

#[test]
fn cache_devices_in_create_add_remove_status_and_iostat() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    let c1 = env.make_vdev("c1", 64 * MB);
    let c2 = env.make_vdev("c2", 64 * MB);
    // -n shows the layout and creates nothing.
    let dry = env.zpool(&["create", "-n", "tank", &a, "cache", &c1]).ok().stdout;
    assert!(dry.contains(&format!("\tcache\n\t  {c1}\n")), "{dry}");
    // Grammar errors, OpenZFS's words.
    env.zpool(&["create", "tank", &a, "cache"])
        .fails_with("invalid vdev specification: cache requires at least 1 device");
    env.zpool(&["create", "tank", &a, "cache", &c1, "mirror", &c2, &a])
        .fails_with("invalid vdev specification: unsupported 'cache' device: mirror");
    env.zpool(&["create", "-m", "none", "tank", &a, "cache", &c1]).ok();
    let s = status(&env);
    let w = (2 + c1.len()).max(10);
    assert!(s.contains(&format!("\tcache\n\t  {c1:<w2$}  ONLINE       0     0     0\n", w2 = w - 2)), "{s}");
    // Not capacity: the pool's size is its one data device.
    let list = env.zpool(&["list", "-Hp", "-o", "size", "tank"]).ok().stdout;
    assert!(list.trim().parse::<u64>().unwrap() < 128 * MB, "{list}");
    // Added later, listed after the first.
    env.zpool(&["add", "tank", "cache", &c2]).ok();
    let s = status(&env);
    let at1 = s.find(&c1).unwrap();
    let at2 = s.find(&c2).unwrap();
    assert!(at1 < at2, "{s}");
    let io = env.zpool(&["iostat", "-v", "tank"]).ok().stdout;
    let rows: Vec<&str> = io.lines().collect();
    let cache_row = rows
        .iter()
        .position(|l| l.starts_with("cache "))
        .unwrap_or_else(|| panic!("no cache row: {io}"));
    assert!(rows[cache_row + 1].trim_start().starts_with(&c1), "{io}");
    assert!(rows[cache_row + 2].trim_start().starts_with(&c2), "{io}");
    // Used by this pool: refused elsewhere.
    let b = env.make_vdev("b", 128 * MB);
    let out = env.zpool(&["create", "other", &b, "cache", &c1]);
    assert_eq!(out.code, 1, "{out:?}");
    // The arcstats carry the L2ARC's names.
    let k = kstat(&env);
    for n in [
        "l2_hits",
        "l2_misses",
        "l2_size",
        "l2_asize",
        "l2_hdr_size",
        "l2_rebuild_success",
        "l2_rebuild_bufs",
        "l2_rebuild_log_blks",
    ] {
        assert!(k.contains_key(n), "arcstats lacks {n}");
    }
    // Removed by path; the other stays, across export and import.
    env.zpool(&["remove", "tank", &c1]).ok();
    let s = status(&env);
    assert!(!s.contains(&c1) && s.contains(&c2), "{s}");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert!(status(&env).contains(&c2));
    // Missing at import: the import goes on, the device is UNAVAIL, the pool ONLINE.
    env.zpool(&["export", "tank"]).ok();
    std::fs::remove_file(&c2).unwrap();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    let s = status(&env);
    assert!(s.contains(" state: ONLINE\n"), "{s}");
    assert!(s.contains(c2.as_str()) && s.contains("UNAVAIL      0     0     0  cannot open"), "{s}");
    env.zpool(&["remove", "tank", &c2]).ok();
    assert!(!status(&env).contains("\tcache\n"));
}

#[test]
fn the_feed_thread_fills_the_cache_and_it_comes_back_warm_after_import() {
    let env = Env::new();
    if !fuse_usable("the_feed_thread_fills_the_cache_and_it_comes_back_warm_after_import") {
        return;
    }
    let a = env.make_vdev("a", 256 * MB);
    let c = env.make_vdev("c", 64 * MB);
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a, "cache", &c]).ok();
    let data = xorshift_bytes(8 << 20, 11);
    std::fs::write(mnt.join("f"), &data).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    // The feed runs once a second.
    let t = Instant::now();
    while kstat(&env)["l2_size"] < (4 << 20) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(kstat(&env)["l2_size"] >= 4 << 20, "feed thread wrote {} bytes", kstat(&env)["l2_size"]);
    let io = env.zpool(&["iostat", "-vp", "tank"]).ok().stdout;
    let row = io.lines().find(|l| l.trim_start().starts_with(&c)).unwrap_or_else(|| panic!("{io}"));
    let alloc: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(alloc >= 4 << 20, "cache alloc {alloc}: {io}");
    env.zpool(&["export", "tank"]).ok();
    let before = kstat(&env);
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    let after = kstat(&env);
    assert!(
        after["l2_rebuild_bufs"] - before["l2_rebuild_bufs"] >= 32,
        "rebuilt {:?}",
        after["l2_rebuild_bufs"]
    );
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    let read = kstat(&env);
    assert!(
        read["l2_hits"] - after["l2_hits"] >= 32,
        "first reads after import: {} L2ARC hits",
        read["l2_hits"] - after["l2_hits"]
    );
    // arcstat's L2ARC fields, now that the L2ARC holds data.
    let out = env.tarn(&["arcstat", "-f", "time,l2hits,l2hit%,l2size", "1", "1"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "    time  l2hits  l2hit%  l2size", "{out}");
    let size = lines[1].split_whitespace().nth(3).unwrap();
    assert!(size.ends_with('M'), "l2size of {} bytes: {out}", read["l2_size"]);
}
