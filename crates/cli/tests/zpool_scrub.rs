//! End-to-end: `zpool scrub` and the scan and error lines of `zpool status`
//! (OpenZFS suite areas cli_root/zpool_scrub, zpool_status -v).
//!
//! How: a private daemon (see `common`) on sparse vdev files; damage is written into
//! a leaf file's data area while the pool is exported, then the pool is imported,
//! scrubbed with `-w`, and `zpool status` is compared with OpenZFS's wording.

mod common;
use common::*;
use std::os::unix::fs::FileExt;

const DATA_START_BYTES: u64 = 4 << 20;

fn scribble(path: &str, off: u64, len: usize, seed: u8) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let junk: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(151).wrapping_add(seed) ^ 0x5a).collect();
    f.write_all_at(&junk, DATA_START_BYTES + off).unwrap();
}

fn scan_line(status: &str) -> &str {
    status.lines().find(|l| l.starts_with("  scan: ")).unwrap_or("")
}

fn cksum_of(status: &str, leaf: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with(leaf))
        .unwrap_or_else(|| panic!("no row for {leaf}:\n{status}"));
    line.split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn scrub_bad_usage_changes_nothing() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 << 20);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    env.zpool(&["scrub"]).fails_with("missing pool name argument");
    env.zpool(&["scrub", "-s", "-p", "tank"]).fails_with("mutually exclusive");
    env.zpool(&["scrub", "nosuch"]).fails_with("cannot open 'nosuch': no such pool");
    env.zpool(&["scrub", "-p", "tank"])
        .fails_with("cannot pause scrubbing tank: there is no active scrub");
    env.zpool(&["scrub", "-s", "tank"])
        .fails_with("cannot cancel scrubbing tank: there is no active scrub");
    assert_eq!(scan_line(&env.zpool(&["status", "tank"]).ok().stdout), "", "no scan ran");
    env.zpool(&["scrub", "-w", "tank"]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(scan_line(&st).starts_with("  scan: scrub repaired 0B in 00:00:"), "{st}");
    assert!(scan_line(&st).contains(" with 0 errors on "), "{st}");
    let pos = |s: &str| st.find(s).unwrap();
    assert!(
        pos(" state: ") < pos("  scan: ") && pos("  scan: ") < pos("config:"),
        "scan line placement:\n{st}"
    );
}

#[test]
fn scrub_repairs_a_damaged_side_and_lists_lost_files() {
    if !fuse_usable("scrub_repairs_a_damaged_side_and_lists_lost_files") {
        return;
    }
    let env = Env::new();
    let (a, b) = (env.make_vdev("a", 256 << 20), env.make_vdev("b", 256 << 20));
    let mnt = env.path().join("mnt");
    let m = mnt.display().to_string();
    env.zpool(&["create", "-m", &m, "tank", "mirror", &a, &b]).ok();
    let files: Vec<(String, Vec<u8>)> = (0..12)
        .map(|i| {
            let data: Vec<u8> = (0..(400_000 + i * 50_000))
                .map(|j| (j as u32).wrapping_mul(2654435761).wrapping_add(i as u32) as u8)
                .collect();
            (format!("f{i}"), data)
        })
        .collect();
    for (n, d) in &files {
        std::fs::write(mnt.join(n), d).unwrap();
    }
    env.zpool(&["export", "tank"]).ok();
    for k in 0..10 {
        scribble(&b, k << 20, 200_000, k as u8);
    }
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    env.zpool(&["scrub", "-w", "tank"]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(scan_line(&st).starts_with("  scan: scrub repaired "), "{st}");
    assert!(!scan_line(&st).starts_with("  scan: scrub repaired 0B"), "{st}");
    assert!(scan_line(&st).contains("with 0 errors"), "{st}");
    assert!(cksum_of(&st, &b) > 0 && cksum_of(&st, &a) == 0, "{st}");
    assert!(st.contains("errors: No known data errors"), "{st}");
    for (n, d) in &files {
        assert!(std::fs::read(mnt.join(n)).unwrap() == *d, "{n} differs after scrub");
    }
    env.zpool(&["scrub", "-w", "tank"]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(scan_line(&st).starts_with("  scan: scrub repaired 0B in "), "second scrub: {st}");

    // Now the same places on both sides: some files are lost, and named.
    env.zpool(&["export", "tank"]).ok();
    for f in [&a, &b] {
        for k in 0..10 {
            scribble(f, (k << 20) + 300_000, 150_000, 9);
        }
    }
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    env.zpool(&["scrub", "-w", "tank"]).ok();
    let st = env.zpool(&["status", "-v", "tank"]).ok().stdout;
    assert!(!scan_line(&st).contains("with 0 errors"), "{st}");
    assert!(st.contains("errors: Permanent errors have been detected in the following files:\n\n"), "{st}");
    let listed: Vec<&str> = st.lines().filter(|l| l.starts_with("        /")).map(str::trim).collect();
    let mut lost = 0;
    for (n, d) in &files {
        let p = mnt.join(n);
        match std::fs::read(&p) {
            Ok(got) => assert!(got == *d, "{n}: wrong data instead of an error"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(5), "{n}: {e}");
                assert!(listed.contains(&p.to_str().unwrap()), "{n} is lost but not listed: {st}");
                lost += 1;
            }
        }
    }
    assert!(lost > 0, "the damage hit no file data:\n{st}");
    let short = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(short.contains(" data errors, use '-v' for a list"), "{short}");
    env.zpool(&["export", "tank"]).ok();
}
