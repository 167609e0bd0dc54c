//! End-to-end: commands never lie (issue 11 §4). Every flag either does what OpenZFS
//! documents or is refused with OpenZFS's `invalid option` wording; every property
//! shown is gettable and settable where OpenZFS allows it.
//!
//! How: one private daemon per test ([`common::Env`]) on file vdevs; each test drives
//! the real binary the way a user would and checks the effect, not only the exit
//! status (a read-only import refuses writes through the mount with EROFS, `-Fn`
//! leaves the pool exported, `attach -w` returns with the resilver finished, ...).
//! Tests that need a FUSE mount skip when FUSE is unusable here.

mod common;
use common::*;

const MB: u64 = 1 << 20;

fn is_mountpoint(p: &std::path::Path) -> bool {
    let s = p.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(s.as_str()))
}

/// A pool that mounts nothing (no FUSE needed).
fn quiet_pool(env: &Env, name: &str) -> String {
    let a = env.make_vdev(&format!("{name}-a"), 128 * MB);
    env.zpool(&["create", "-m", "none", name, &a]).ok();
    a
}

fn get(env: &Env, family: &str, prop: &str, target: &str) -> String {
    env.tarn(&[family, "get", "-H", "-o", "value,source", prop, target]).ok().stdout
}

#[test]
fn sync_and_logbias_through_the_cli() {
    let env = Env::new();
    quiet_pool(&env, "tank");
    env.zfs(&["create", "tank/db"]).ok();
    assert_eq!(get(&env, "zfs", "sync", "tank"), "standard\tdefault\n");
    assert_eq!(get(&env, "zfs", "logbias", "tank"), "latency\tdefault\n");
    env.zfs(&["set", "sync=always", "logbias=throughput", "tank"]).ok();
    assert_eq!(get(&env, "zfs", "sync", "tank/db"), "always\tinherited from tank\n");
    assert_eq!(get(&env, "zfs", "logbias", "tank"), "throughput\tlocal\n");
    env.zfs(&["set", "sync=disabled", "tank/db"]).ok();
    assert_eq!(get(&env, "zfs", "sync", "tank/db"), "disabled\tlocal\n");
    env.zfs(&["inherit", "sync", "tank/db"]).ok();
    env.zfs(&["inherit", "logbias", "tank"]).ok();
    assert_eq!(get(&env, "zfs", "sync", "tank/db"), "always\tinherited from tank\n");
    assert_eq!(get(&env, "zfs", "logbias", "tank/db"), "latency\tdefault\n");
    env.zfs(&["set", "sync=sometimes", "tank"])
        .fails_with("'sync' must be one of 'standard | always | disabled'");
    let all = env.zfs(&["get", "-H", "-o", "property", "all", "tank"]).ok().stdout;
    assert!(all.lines().any(|l| l == "sync") && all.lines().any(|l| l == "logbias"), "{all}");
}

#[test]
fn creation_guid_and_a_real_compressratio() {
    let env = Env::new();
    if !fuse_usable("creation_guid_and_a_real_compressratio") {
        return;
    }
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "-O", "compression=lz4", "tank", &a]).ok();
    env.zfs(&["create", "-o", "compression=off", "tank/plain"]).ok();
    let text: Vec<u8> = b"all work and no play makes jack a dull boy\n".iter().copied().cycle().take(8 << 20).collect();
    std::fs::write(mnt.join("text"), &text).unwrap();
    std::fs::write(mnt.join("plain/text"), &text).unwrap();
    env.zpool(&["sync", "tank"]).ok();
    let out = env
        .zfs(&["get", "-H", "-o", "property,value", "creation,guid,compressratio,refcompressratio", "tank"])
        .ok()
        .stdout;
    let v: Vec<(&str, &str)> = out.lines().map(|l| l.split_once('\t').unwrap()).collect();
    assert_eq!(
        v.iter().map(|x| x.0).collect::<Vec<_>>(),
        ["creation", "guid", "compressratio", "refcompressratio"]
    );
    assert!(v[1].1.parse::<u64>().unwrap() > 0, "{out}");
    let ratio = |s: &str| -> f64 { s.strip_suffix('x').unwrap().parse().unwrap() };
    // lz4 on repeated text: far more logical than physical bytes.
    assert!(ratio(v[3].1) > 2.0, "{out}");
    // The whole tree counts the uncompressed child too, so it is lower but above 1.
    assert!(ratio(v[2].1) > 1.0 && ratio(v[2].1) < ratio(v[3].1), "{out}");
    // Uncompressed data; only its metadata (always compressed, as in OpenZFS) shrinks.
    let plain = get(&env, "zfs", "compressratio", "tank/plain");
    assert!(plain.ends_with("x\t-\n") && ratio(plain.split('\t').next().unwrap()) < 1.2, "{plain}");
    let p = env.zfs(&["get", "-Hp", "-o", "value", "refcompressratio", "tank"]).ok().stdout;
    assert!(!p.contains('x') && p.trim().parse::<f64>().unwrap() > 2.0, "{p}");
    env.zfs(&["set", "compressratio=2.00x", "tank"]).fails_with("'compressratio' is readonly");
}

#[test]
fn import_readonly_writes_nothing() {
    let env = Env::new();
    if !fuse_usable("import_readonly_writes_nothing") {
        return;
    }
    let mnt = env.path().join("mnt");
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", &a]).ok();
    std::fs::write(mnt.join("f"), b"before").unwrap();
    env.zpool(&["export", "tank"]).ok();
    let image = std::fs::read(&a).unwrap();
    let dir = env.vdir().display().to_string();
    env.zpool(&["import", "-d", &dir, "-o", "readonly=on", "tank"]).ok();
    assert!(is_mountpoint(&mnt), "{}", env.daemon_log());
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"before");
    let e = std::fs::write(mnt.join("f"), b"after").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "{e}"); // EROFS
    assert_eq!(get(&env, "zpool", "readonly", "tank"), "on\t-\n");
    env.zfs(&["create", "tank/x"]).fails_with("cannot create 'tank/x': pool is read-only");
    env.zfs(&["set", "atime=off", "tank"]).fails_with("pool is read-only");
    env.zpool(&["export", "tank"]).ok();
    // Not one byte of the vdev changed: no label, no uberblock, no history record.
    assert!(std::fs::read(&a).unwrap() == image, "a read-only import wrote to the vdev");
    env.zpool(&["import", "-d", &dir, "tank"]).ok();
    assert_eq!(get(&env, "zpool", "readonly", "tank"), "off\t-\n");
    std::fs::write(mnt.join("f"), b"after").unwrap();
}

#[test]
fn import_fn_is_a_dry_run() {
    let env = Env::new();
    let a = quiet_pool(&env, "tank");
    env.zpool(&["export", "tank"]).ok();
    let image = std::fs::read(&a).unwrap();
    let dir = env.vdir().display().to_string();
    env.zpool(&["import", "-d", &dir, "-n", "tank"]).fails_with("-n or -X only meaningful with -F");
    // The newest state opens as it is: nothing to report, and nothing imported.
    let out = env.zpool(&["import", "-d", &dir, "-Fn", "tank"]).ok();
    assert_eq!(out.stdout, "");
    env.zpool(&["list", "tank"]).fails_with("cannot open 'tank': no such pool");
    assert!(std::fs::read(&a).unwrap() == image, "a dry run wrote to the vdev");
    let listing = env.zpool(&["import", "-d", &dir]).ok().stdout;
    assert!(listing.contains("pool: tank"), "{listing}");
    env.zpool(&["import", "-d", &dir, "tank"]).ok();
}

/// `zpool attach -w` / `zpool replace -w` return only when the resilver is over.
#[test]
fn attach_and_replace_wait_for_the_resilver() {
    let env = Env::new();
    let [a, b, c] = ["a", "b", "c"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    // Slow reads of the source, so that a command that did not wait would find the
    // resilver still running.
    env.tarn(&["zinject", "-d", &a, "-D", "1500", "-T", "read", "tank"]).ok();
    env.zpool(&["attach", "-w", "tank", &a, &b]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(st.contains("resilvered") && !st.contains("resilvering") && !st.contains("in progress"), "{st}");
    env.zpool(&["replace", "-w", "tank", &b, &c]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(!st.contains("replacing") && !st.contains("in progress") && st.contains(&c), "{st}");
    env.tarn(&["zinject", "-c", "all"]).ok();
    env.zpool(&["attach", "-s", "tank", &a, &b]).fails_with("invalid option 's'");
}

/// Flags Tarn does not implement are refused as OpenZFS refuses an unknown one,
/// exit status 2, rather than accepted and ignored.
#[test]
fn unimplemented_flags_are_refused() {
    let env = Env::new();
    let a = quiet_pool(&env, "tank");
    for (args, flag) in [
        (vec!["zpool", "offline", "-f", "tank", a.as_str()], 'f'),
        (vec!["zpool", "online", "-e", "tank", a.as_str()], 'e'),
        (vec!["zpool", "clear", "-F", "tank"], 'F'),
        (vec!["zpool", "clear", "-n", "tank"], 'n'),
        (vec!["zpool", "history", "-i", "tank"], 'i'),
        (vec!["zpool", "history", "-l", "tank"], 'l'),
        (vec!["zpool", "status", "-p", "tank"], 'p'),
        (vec!["zfs", "mount", "-o", "ro", "tank"], 'o'),
        (vec!["zfs", "mount", "-O", "tank"], 'O'),
    ] {
        let out = env.tarn(&args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.starts_with(&format!("invalid option '{flag}'\nusage:")), "{args:?}: {out:?}");
    }
    // Nothing happened: the device is online and the history has only the create.
    assert!(env.zpool(&["status", "tank"]).ok().stdout.contains("ONLINE"));
    assert_eq!(env.zpool(&["history", "tank"]).ok().stdout.lines().count(), 3);
}

/// Detaches a loop device when dropped (also when the test fails).
struct LoopDev(String);

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// Device names lose `/dev/` in `zpool status` unless `-P` (a loop device stands in
/// for a disk; skipped without losetup).
#[test]
fn status_names_devices_as_openzfs() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    let out = std::process::Command::new("losetup").args(["--find", "--show", &a]).output();
    let Some(dev) = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| LoopDev(String::from_utf8_lossy(&o.stdout).trim().to_string()))
    else {
        eprintln!("SKIP status_names_devices_as_openzfs: losetup unavailable");
        return;
    };
    let full = dev.0.clone();
    let short = full.trim_start_matches("/dev/").to_string();
    env.zpool(&["create", "-m", "none", "tank", &full]).ok();
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(st.lines().any(|l| l.trim_start().starts_with(&format!("{short} "))), "{st}");
    assert!(!st.contains(&full), "{st}");
    let st = env.zpool(&["status", "-P", "tank"]).ok().stdout;
    assert!(st.lines().any(|l| l.trim_start().starts_with(&format!("{full} "))), "{st}");
    // zpool iostat -v too; -P gives the path; a vdev operand may name it either way.
    let io = env.zpool(&["iostat", "-v", "tank"]).ok().stdout;
    assert!(
        io.lines().any(|l| l.trim_start().starts_with(&format!("{short} "))) && !io.contains(&full),
        "{io}"
    );
    let io = env.zpool(&["iostat", "-vP", "tank"]).ok().stdout;
    assert!(io.lines().any(|l| l.trim_start().starts_with(&format!("{full} "))), "{io}");
    for name in [&short, &full] {
        let io = env.zpool(&["iostat", "-H", "tank", name]).ok().stdout;
        assert!(io.lines().any(|l| l.starts_with(&format!("{short}\t"))), "{name}: {io}");
    }
    // The import listing names it the same way.
    env.zpool(&["export", "tank"]).ok();
    let listing = env.zpool(&["import"]).ok().stdout;
    assert!(listing.lines().any(|l| l.trim_start().starts_with(&format!("{short} "))), "{listing}");
    assert!(!listing.contains(&full), "{listing}");
    env.zpool(&["import", "tank"]).ok();
    env.zpool(&["destroy", "tank"]).ok();
}

#[test]
fn create_ashift_takes_9_to_16() {
    let env = Env::new();
    let [a, b, c] = ["a", "b", "c"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "-o", "ashift=13", "p13", &a]).ok();
    assert_eq!(get(&env, "zpool", "ashift", "p13"), "13\tlocal\n");
    env.zpool(&["create", "-m", "none", "-o", "ashift=16", "p16", &b]).ok();
    assert_eq!(get(&env, "zpool", "ashift", "p16"), "16\tlocal\n");
    env.zfs(&["create", "p16/fs"]).ok();
    env.zpool(&["export", "p16"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "p16"]).ok();
    assert!(env.zfs(&["list", "-H", "-o", "name", "p16/fs"]).ok().stdout == "p16/fs\n");
    for bad in ["8", "17"] {
        env.zpool(&["create", "-m", "none", "-o", &format!("ashift={bad}"), "px", &c])
            .fails_with(&format!(
                "cannot create 'px': property 'ashift' number {bad} is invalid, only values between 9 and 16 are allowed."
            ));
    }
}

#[test]
fn pool_properties_autotrim_autoexpand_cachefile_readonly() {
    let env = Env::new();
    quiet_pool(&env, "tank");
    assert_eq!(get(&env, "zpool", "autotrim", "tank"), "off\tdefault\n");
    assert_eq!(get(&env, "zpool", "autoexpand", "tank"), "off\tdefault\n");
    assert_eq!(get(&env, "zpool", "cachefile", "tank"), "-\tdefault\n");
    assert_eq!(get(&env, "zpool", "readonly", "tank"), "off\t-\n");
    env.zpool(&["set", "autotrim=off", "tank"]).ok();
    assert_eq!(get(&env, "zpool", "autotrim", "tank"), "off\tlocal\n");
    env.zpool(&["set", "autoexpand=on", "tank"])
        .fails_with("cannot set property for 'tank': property 'autoexpand' cannot be 'on'");
    env.zpool(&["set", "readonly=on", "tank"])
        .fails_with("cannot set property for 'tank': property 'readonly' can only be set at import time");
    env.zpool(&["set", "cachefile=none", "tank"]).ok();
    assert_eq!(get(&env, "zpool", "cachefile", "tank"), "none\tlocal\n");
    env.zpool(&["set", "cachefile=relative", "tank"])
        .fails_with("property 'cachefile' must be empty, an absolute path, or 'none'");
    let all = env.zpool(&["get", "-H", "-o", "property", "all", "tank"]).ok().stdout;
    for p in ["autotrim", "autoexpand", "cachefile", "readonly", "dedupratio", "checkpoint", "expandsize"] {
        assert!(all.lines().any(|l| l == p), "{p} missing from get all:\n{all}");
    }
}

#[test]
fn list_default_columns_are_openzfs_2() {
    let env = Env::new();
    quiet_pool(&env, "tank");
    let out = env.zpool(&["list"]).ok().stdout;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "ALLOC", "FREE", "CKPOINT", "EXPANDSZ", "FRAG", "CAP", "DEDUP", "HEALTH", "ALTROOT"]
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[4], row[5], row[8], row[9], row[10]),
        ("tank", "-", "-", "1.00x", "ONLINE", "-"),
        "{out}"
    );
}

/// Times are shown in the local time zone (the daemon started with `TZ`), not UTC.
#[test]
fn times_are_local() {
    let env = Env::new();
    let zone = "Asia/Kolkata"; // UTC+05:30, so no minute of it matches UTC's
    let tarn = |args: &[&str]| {
        run({
            let mut c = env.command(args);
            c.env("TZ", zone);
            c
        })
    };
    let stamp = || jiff::Timestamp::now().in_tz(zone).unwrap().strftime("%Y-%m-%d.%H:%M").to_string();
    let before = stamp();
    let a = env.make_vdev("a", 128 * MB);
    tarn(&["zpool", "create", "-m", "none", "tank", &a]).ok();
    let after = stamp();
    let hist = tarn(&["zpool", "history", "tank"]).ok().stdout;
    let first = hist.lines().nth(1).unwrap();
    assert!(first[..16] == before || first[..16] == after, "{first} is not {before} or {after} ({zone})");
    let creation = tarn(&["zfs", "get", "-H", "-o", "value", "creation", "tank"]).ok().stdout;
    // `creation` reads like "Mon Nov 23  5:07 2026" (hour without a leading zero).
    let hm = |t: &str| format!("{}:{}", t[11..13].parse::<u32>().unwrap(), &t[14..16]);
    assert!(
        creation.contains(&format!(" {} ", hm(&before))) || creation.contains(&format!(" {} ", hm(&after))),
        "{creation} is not {before} or {after} ({zone})"
    );
}
