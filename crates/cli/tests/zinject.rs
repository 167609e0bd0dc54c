//! End-to-end: `tarn zinject` against a live pool (OpenZFS suite areas cli_root/zinject
//! and the fault tests that use it: checksum errors healed on a mirror, I/O errors on a
//! non-redundant pool, latency on a vdev).
//!
//! How: each test starts a private daemon on file vdevs (see `common`). Data is written
//! through the FUSE mount, the pool is exported and imported again so that reads reach
//! the leaves, then a handler is registered with `tarn zinject` and the effect is
//! checked where a user would see it: file contents and errno through the mount, the
//! READ/CKSUM columns of `zpool status`, the time an `fsync` takes, the `zinject`
//! listing. Clearing the handler must bring normal behaviour back. Bad requests must
//! fail with OpenZFS's message and register nothing. The FUSE tests are skipped, with a
//! message, when FUSE is not usable here.

mod common;
use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NONE_REGISTERED: &str = "No handlers registered.\nRun 'zinject -h' for usage information.\n";

fn zinject(env: &Env, args: &[&str]) -> Out {
    let mut v = vec!["zinject"];
    v.extend_from_slice(args);
    env.tarn(&v)
}

/// (READ, WRITE, CKSUM) of the `zpool status` row whose name ends with `leaf`.
fn leaf_counts(env: &Env, pool: &str, leaf: &str) -> (u64, u64, u64) {
    let st = env.zpool(&["status", pool]).ok().stdout;
    let row = st
        .lines()
        .find(|l| l.split_whitespace().next().is_some_and(|n| n.ends_with(leaf)))
        .unwrap_or_else(|| panic!("no row for {leaf}:\n{st}"));
    let f: Vec<u64> = row.split_whitespace().skip(2).map(|x| x.parse().unwrap()).collect();
    (f[0], f[1], f[2])
}

/// Incompressible test data.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| ((i ^ seed).wrapping_mul(2654435761) >> 13) as u8).collect()
}

/// Create `pool` mounted at `<env>/mnt` (atime off, so reads write nothing), write
/// `data` to `<mnt>/file`, then export and import so nothing is cached. Returns the
/// mountpoint.
fn pool_with_file(env: &Env, pool: &str, vdevs: &[&str], data: &[u8]) -> PathBuf {
    let mnt = env.path().join("mnt");
    let m = mnt.display().to_string();
    let mut args = vec!["create", "-m", &m, "-O", "atime=off", "-o", "size=128M", pool];
    args.extend_from_slice(vdevs);
    env.zpool(&args).ok();
    std::fs::write(mnt.join("file"), data).unwrap();
    env.zpool(&["export", pool]).ok();
    env.zpool(&["import", "-d", "v", pool]).ok();
    mnt
}

/// The id in "Added handler N with the following properties:".
fn added_id(out: &Out) -> u64 {
    let first = out.stdout.lines().next().unwrap_or_default();
    let n = first
        .strip_prefix("Added handler ")
        .and_then(|r| r.strip_suffix(" with the following properties:"));
    n.unwrap_or_else(|| panic!("unexpected output: {out:?}")).parse().unwrap()
}

#[test]
fn checksum_fault_on_one_mirror_side_reads_correctly_and_counts_cksum() {
    if !fuse_usable("checksum_fault_on_one_mirror_side_reads_correctly_and_counts_cksum") {
        return;
    }
    let env = Env::new();
    let data = pattern(3 << 20, 1);
    let mnt = pool_with_file(&env, "tank", &["mirror", "v/a.img", "v/b.img"], &data);
    let out = zinject(&env, &["-d", "v/a.img", "-e", "checksum", "-T", "read", "tank"]).ok();
    assert_eq!(added_id(&out), 1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{out:?}");
    assert_eq!(lines[1], "  pool: tank");
    assert!(lines[2].starts_with("  vdev: ") && u64::from_str_radix(&lines[2][8..], 16).is_ok(), "{out:?}");
    assert_eq!(lines[3], "iotype: read");

    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), data, "the other side supplies good data");
    let (_, _, cksum_a) = leaf_counts(&env, "tank", "a.img");
    assert!(cksum_a > 0, "CKSUM not counted on the injected leaf");
    assert_eq!(leaf_counts(&env, "tank", "b.img"), (0, 0, 0));
    let st = env.zpool(&["status", "tank"]).ok().stdout;
    assert!(st.contains("errors: No known data errors"), "{st}");

    let list = zinject(&env, &[]).ok().stdout;
    let row = list.lines().find(|l| l.starts_with("  1  tank")).unwrap_or_else(|| panic!("{list}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[3..6], ["read", "checksum", "100.0000%"], "{list}");
    let (matched, injected): (u64, u64) = (cols[6].parse().unwrap(), cols[7].parse().unwrap());
    assert!(injected > 0 && injected == matched, "{list}");

    // A pool with handlers stays imported (OpenZFS: "pool is busy").
    env.zpool(&["export", "tank"]).fails_with("cannot export 'tank': pool is busy");
    env.zpool(&["destroy", "tank"]).fails_with("cannot destroy 'tank': pool is busy");
    assert_eq!(zinject(&env, &["-c", "1"]).ok().stdout, "removed handler 1\n");
    assert_eq!(zinject(&env, &[]).ok().stdout, NONE_REGISTERED);
    // Normal again: a fresh import reads both sides without new errors.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), data);
    assert_eq!(leaf_counts(&env, "tank", "a.img"), (0, 0, 0), "counters restart at import; no new errors");
}

#[test]
fn io_errors_on_a_single_disk_give_eio_and_count_read_errors() {
    if !fuse_usable("io_errors_on_a_single_disk_give_eio_and_count_read_errors") {
        return;
    }
    let env = Env::new();
    let data = pattern(2 << 20, 2);
    let mnt = pool_with_file(&env, "solo", &["v/d.img"], &data);
    let abs = env.vdev("d.img");
    let out = zinject(&env, &["-d", &abs, "-e", "io", "-T", "read", "solo"]).ok();
    assert_eq!(added_id(&out), 1);
    let err = std::fs::read(mnt.join("file")).expect_err("reads of an injected EIO must fail");
    assert_eq!(err.raw_os_error(), Some(libc_eio()), "expected EIO, got {err}");
    let (read, write, cksum) = leaf_counts(&env, "solo", "d.img");
    assert!(read > 0, "READ not counted");
    assert_eq!((write, cksum), (0, 0));
    assert_eq!(zinject(&env, &["-c", "all"]).ok().stdout, "removed all registered handlers\n");
    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), data, "reads work again once cleared");
}

fn libc_eio() -> i32 {
    5
}

/// Write a small file and fsync it; returns how long the fsync took.
fn timed_fsync(path: &Path) -> Duration {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(b"latency probe\n").unwrap();
    let t = Instant::now();
    f.sync_all().unwrap();
    t.elapsed()
}

#[test]
fn latency_makes_fsync_wait_at_least_the_delay() {
    if !fuse_usable("latency_makes_fsync_wait_at_least_the_delay") {
        return;
    }
    let env = Env::new();
    let mnt = pool_with_file(&env, "slow", &["v/s.img"], b"x");
    let out = zinject(&env, &["-d", "v/s.img", "-D", "50", "slow"]).ok();
    assert_eq!(added_id(&out), 1);
    assert_eq!(out.stdout.lines().last(), Some("iotype: all"));
    let list = zinject(&env, &[]).ok().stdout;
    assert!(
        list.starts_with(" ID  POOL             GUID              DELAY (ms)  LANES  FREQ       MATCH   INJECT\n"),
        "{list}"
    );
    let cols: Vec<&str> = list.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!((cols[0], cols[1], cols[3], cols[4], cols[5]), ("1", "slow", "50", "1", "100.0000%"), "{list}");

    let slow = timed_fsync(&mnt.join("probe1"));
    // A txg sync is dozens of writes and two flushes, each at least 50 ms on one lane;
    // the behavioural check is only that the fsync waited for the injected delay.
    assert!(slow >= Duration::from_millis(50), "fsync took {slow:?} with a 50 ms delay on the only leaf");
    let list = zinject(&env, &[]).ok().stdout;
    let injected: u64 = list.lines().nth(2).unwrap().split_whitespace().last().unwrap().parse().unwrap();
    assert!(injected > 0, "{list}");

    assert_eq!(zinject(&env, &["-c", "1"]).ok().stdout, "removed handler 1\n");
    assert_eq!(zinject(&env, &[]).ok().stdout, NONE_REGISTERED);
    timed_fsync(&mnt.join("probe2"));
    assert_eq!(std::fs::read(mnt.join("probe2")).unwrap(), b"latency probe\n");
}

#[test]
fn bad_requests_register_nothing_and_guids_name_devices() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a", "v/b"]).ok();
    assert_eq!(zinject(&env, &[]).ok().stdout, NONE_REGISTERED);
    let cases: Vec<(Vec<&str>, &str, i32)> = vec![
        (vec!["-d", "v/nosuch", "tank"], "cannot find device 'v/nosuch' in pool 'tank'", 1),
        (vec!["-d", "12345", "tank"], "cannot find device '12345' in pool 'tank'", 1),
        (vec!["-d", "v/a", "nopool"], "cannot open 'nopool': no such pool", 1),
        (
            vec!["-d", "v/a", "-e", "nxio", "tank"],
            "invalid error type 'nxio': must be one of: io checksum corrupt",
            1,
        ),
        (
            vec!["-d", "v/a", "-T", "free", "tank"],
            "invalid I/O type 'free': must be 'read', 'write', 'flush' or 'all'",
            1,
        ),
        (
            vec!["-d", "v/a", "-f", "0", "tank"],
            "out of range: frequency value must be in the range [0.0001, 100.0]",
            1,
        ),
        (
            vec!["-d", "v/a", "-f", "lots", "tank"],
            "invalid value: frequency value must be in the range [0.0001, 100.0]",
            1,
        ),
        (vec!["-d", "v/a", "-D", "0", "tank"], "invalid i/o delay value: '0'", 1),
        (vec!["-d", "v/a", "-D", "10:0", "tank"], "invalid i/o delay value: '10:0'", 1),
        (vec!["-d", "v/a", "-D", "seek:5:9", "tank"], "invalid i/o delay value: 'seek:5:9'", 1),
        (
            vec!["-d", "v/a", "-D", "10", "-e", "io", "tank"],
            "error type -e incompatible with delay injection",
            1,
        ),
        (
            vec!["-d", "v/a", "-e", "checksum", "-T", "write", "tank"],
            "checksum errors can only be injected on reads",
            1,
        ),
        (
            vec!["-d", "v/a", "-D", "10", "-T", "flush", "tank"],
            "I/O type for a delay must be 'read' or 'write'",
            1,
        ),
        (vec!["-d", "v/a"], "device (-d) injection requires a single pool name", 2),
        (vec!["-d", "v/a", "tank", "extra"], "device (-d) injection requires a single pool name", 2),
        (vec!["-e", "io", "tank"], "a device (-d) must be specified", 2),
        (vec!["-c", "1", "-d", "v/a"], "cancel (-c) incompatible with any other options", 2),
        (vec!["-c", "1", "tank"], "extraneous argument to '-c'", 2),
        (vec!["-c", "x"], "invalid handle id 'x': must be an integer or 'all'", 1),
        (vec!["-c", "99"], "failed to remove handler 99: No such file or directory", 1),
        (vec!["-x"], "invalid option 'x'", 2),
        (vec!["-d"], "option -d requires an operand", 1),
    ];
    for (args, msg, code) in cases {
        let out = zinject(&env, &args).fails_with(msg);
        assert_eq!(out.code, code, "{args:?}: {out:?}");
        assert_eq!(zinject(&env, &[]).ok().stdout, NONE_REGISTERED, "after {args:?}");
    }
    let help = zinject(&env, &["-h"]).ok().stdout;
    assert!(help.starts_with("usage:\n\n\tzinject\n") && help.contains("-D seek:max[:min]"), "{help}");

    // By path (quiet), then by the GUID the listing shows, in hex and in decimal.
    assert_eq!(zinject(&env, &["-q", "-d", "v/a", "-f", "50", "tank"]).ok().stdout, "1\n");
    let list = zinject(&env, &[]).ok().stdout;
    let row: Vec<String> = list.lines().nth(2).unwrap().split_whitespace().map(String::from).collect();
    assert_eq!(
        (row[0].as_str(), row[1].as_str(), row[3].as_str(), row[4].as_str(), row[5].as_str()),
        ("1", "tank", "all", "io", "50.0000%"),
        "{list}"
    );
    let guid_hex = row[2].clone();
    let guid = u64::from_str_radix(&guid_hex, 16).unwrap();
    let by_hex = zinject(&env, &["-d", &format!("0x{guid_hex}"), "-D", "5:2", "-T", "read", "tank"]).ok();
    assert_eq!(added_id(&by_hex), 2);
    assert!(by_hex.stdout.contains(&format!("  vdev: {guid_hex}\n")), "{by_hex:?}");
    let by_dec = zinject(&env, &["-d", &guid.to_string(), "-D", "seek:12:0.5", "tank"]).ok();
    assert_eq!(added_id(&by_dec), 3);
    let abs_b = env.vdev("b");
    assert_eq!(added_id(&zinject(&env, &["-d", &abs_b, "-e", "corrupt", "tank"]).ok()), 4);
    let list = zinject(&env, &[]).ok().stdout;
    let ids = |l: &str| l.split_whitespace().next().and_then(|x| x.parse::<u64>().ok());
    let rows: Vec<u64> = list.lines().filter_map(ids).collect();
    assert_eq!(rows, vec![1, 4, 2, 3], "errors table, then delays table:\n{list}");
    assert!(list.contains("  read   checksum "), "corrupt is a read checksum fault:\n{list}");
    assert!(list.contains(" seek:12:0.5 "), "{list}");

    env.zpool(&["export", "tank"]).fails_with("cannot export 'tank': pool is busy");
    assert_eq!(zinject(&env, &["-c", "3"]).ok().stdout, "removed handler 3\n");
    zinject(&env, &["-c", "3"]).fails_with("failed to remove handler 3: No such file or directory");
    assert_eq!(zinject(&env, &["-c", "all"]).ok().stdout, "removed all registered handlers\n");
    assert_eq!(zinject(&env, &[]).ok().stdout, NONE_REGISTERED);
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    // Ids are never reused.
    assert_eq!(zinject(&env, &["-q", "-d", "v/b", "tank"]).ok().stdout, "5\n");
    zinject(&env, &["-c", "5"]).ok();

    // Invoked through a symlink named zinject, the binary is that command.
    let link = env.path().join("zinject");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tarn"), &link).unwrap();
    let o = std::process::Command::new(&link)
        .current_dir(env.path())
        .env("TARN_SOCKET", env.socket())
        .env("TARN_STATE_DIR", env.state())
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), NONE_REGISTERED);
}
