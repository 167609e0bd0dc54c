//! End-to-end: `tarn zpool` on file vdevs (OpenZFS suite areas cli_root/zpool_create,
//! zpool_status, zpool_list, zpool_import, zpool_export, zpool_destroy, zpool_history).
//!
//! How: each test starts a private daemon (see `common`), builds 128 MiB sparse vdev
//! files, and compares what `tarn zpool …` prints and returns with what OpenZFS does.
//! Refused commands are checked for exit status, message, and that nothing changed
//! (no pool listed, vdev files still all zeros, other pools still import). Pools are
//! created with `-m none` so these tests need no FUSE.

mod common;
use common::*;

const MB: u64 = 1 << 20;

#[test]
fn create_refuses_bad_input_and_changes_nothing() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    let b = env.make_vdev("b", 128 * MB);
    let c = env.make_vdev("c", 128 * MB);
    let small = env.make_vdev("small", 32 * MB);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["create", "tank", "raidz4", &a, &b, &c],
            "invalid vdev specification: unknown vdev type 'raidz4'",
        ),
        (vec!["create", "tank", "foo"], "cannot open '/dev/foo': No such file or directory"),
        (vec!["create", "tank", "v/nosuch"], "No such file or directory"),
        (
            vec!["create", "tank", "mirror", &a],
            "invalid vdev specification: mirror requires at least 2 devices",
        ),
        (
            vec!["create", "tank", "raidz2", &a, &b],
            "invalid vdev specification: raidz2 requires at least 3 devices",
        ),
        (vec!["create", "tank", "mirror", &a, &a], "is used twice"),
        (vec!["create", "tank", "mirror", &a, "v/a"], "is used twice"),
        (
            vec!["create", "tank", &small],
            "cannot create 'tank': one or more devices is less than the minimum size (64M)",
        ),
        (vec!["create", "-o", "size=32M", "tank", "v/new"], "less than the minimum size (64M)"),
        (vec!["create", "1tank", &a], "cannot create '1tank'"),
        (vec!["create", "mirror", &a], "cannot create 'mirror'"),
        (vec!["create", "tank", &a, "mirror", &b, &c], "mismatched replication level"),
        (vec!["create", "-o", "ashift=17", "tank", &a], "cannot create 'tank'"),
        (vec!["create", "-O", "atime=maybe", "tank", &a], "'atime' must be one of 'on | off'"),
        (vec!["create", "tank"], "missing vdev specification"),
    ];
    for (args, msg) in cases {
        let out = env.zpool(&args).fails_with(msg);
        assert!(out.code == 1 || out.code == 2, "{args:?}: {out:?}");
        let list = env.zpool(&["list"]).ok();
        assert_eq!(list.stdout, "no pools available\n", "after {args:?}");
    }
    assert!(!std::path::Path::new(&env.vdev("new")).exists(), "-o size must not leave files behind");
    for v in [&a, &b, &c] {
        assert!(untouched(v, 512 << 10), "{v} was written");
    }
    // usage errors exit 2
    assert_eq!(env.zpool(&["create", "-x", "tank", &a]).code, 2);
    assert_eq!(env.zpool(&["frobnicate"]).code, 2);
}

#[test]
fn device_of_exported_pool_needs_force() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a", "v/b"]).ok();
    env.zpool(&["export", "tank"]).ok();
    assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n");
    let a = env.vdev("a");
    env.zpool(&["create", "-m", "none", "other", &a])
        .fails_with(&format!("{a} is part of exported pool 'tank'"));
    assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n");
    // the exported pool is intact and imports
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    let s = env.zpool(&["status", "tank"]).ok();
    assert!(s.stdout.contains(" state: ONLINE\n"), "{s:?}");
    // an active pool's device cannot be taken even with -f
    env.zpool(&["create", "-f", "-m", "none", "other", &a]).fails_with("");
    assert_eq!(env.zpool(&["list", "-H", "-o", "name"]).ok().stdout, "tank\n");
}

#[test]
fn mirror_status_column_by_column() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a", "v/b"]).ok();
    let (a, b) = (env.vdev("a"), env.vdev("b"));
    let w = (4 + a.len()).max(10);
    let out = env.zpool(&["status"]).ok().stdout;
    let expected = format!(
        "  pool: tank\n state: ONLINE\nconfig:\n\n\
         \t{:<w$}  STATE     READ WRITE CKSUM\n\
         \t{:<w$}  ONLINE       0     0     0\n\
         \t  {:<w2$}  ONLINE       0     0     0\n\
         \t    {:<w4$}  ONLINE       0     0     0\n\
         \t    {:<w4$}  ONLINE       0     0     0\n\n\
         errors: No known data errors\n",
        "NAME",
        "tank",
        "mirror-0",
        a,
        b,
        w2 = w - 2,
        w4 = w - 4
    );
    assert_eq!(out, expected);
    assert_eq!(env.zpool(&["status", "-x"]).ok().stdout, "all pools are healthy\n");
    env.zpool(&["status", "nosuch"]).fails_with("cannot open 'nosuch': no such pool");
}

#[test]
fn list_fields_scripted_and_parsable() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=256M", "tank", "v/a", "v/b"]).ok();
    let out = env.zpool(&["list", "-H", "-p"]).ok().stdout;
    let fields: Vec<&str> = out.trim_end_matches('\n').split('\t').collect();
    // NAME SIZE ALLOC FREE CKPOINT EXPANDSZ FRAG CAP DEDUP HEALTH ALTROOT
    assert_eq!(fields.len(), 11, "{out:?}");
    assert_eq!(fields[0], "tank");
    let size: u64 = fields[1].parse().unwrap();
    let alloc: u64 = fields[2].parse().unwrap();
    let free: u64 = fields[3].parse().unwrap();
    assert_eq!((fields[4], fields[5], fields[8]), ("-", "-", "1.00"));
    let frag: u64 = fields[6].parse().unwrap();
    let cap: u64 = fields[7].parse().unwrap();
    assert!(size > 256 * MB && size <= 512 * MB, "size {size}");
    assert!(alloc > 0 && alloc < size);
    assert_eq!(free, size - alloc);
    assert_eq!(cap, alloc * 100 / size);
    assert!(frag <= 100, "frag {frag}");
    assert_eq!(fields[9], "ONLINE");
    assert_eq!(fields[10], "-");
    let human = env.zpool(&["list"]).ok().stdout;
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("NAME "), "{human}");
    for h in ["SIZE", "ALLOC", "FREE", "FRAG", "CAP", "HEALTH", "ALTROOT"] {
        assert!(lines[0].contains(h));
    }
    assert!(lines[1].starts_with("tank  "));
    assert!(lines[1].ends_with("ONLINE  -"), "{human}");
    let one = env.zpool(&["list", "-H", "-o", "name,health"]).ok().stdout;
    assert_eq!(one, "tank\tONLINE\n");
    env.zpool(&["list", "-o", "bogus"]).fails_with("invalid property 'bogus'");
    env.zpool(&["list", "nosuch"]).fails_with("cannot open 'nosuch': no such pool");
    let get = env.zpool(&["get", "-H", "-o", "value", "health", "tank"]).ok().stdout;
    assert_eq!(get, "ONLINE\n");
}

#[test]
fn export_import_listing_and_destroy() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "mirror", "v/a", "v/b"]).ok();
    env.zpool(&["export", "tank"]).ok();
    let out = env.zpool(&["import", "-d", "v"]).ok().stdout;
    let a = env.vdev("a");
    let w = (4 + a.len()).max(10);
    assert!(out.starts_with("   pool: tank\n     id: "), "{out}");
    assert!(out.contains("\n  state: ONLINE\n action: The pool can be imported using its name or numeric identifier.\n config:\n\n"));
    assert!(
        out.contains(&format!("\t{:<w$}  ONLINE\n\t  {:<w2$}  ONLINE\n\t    {a}", "tank", "mirror-0", w2 = w - 2)),
        "{out}"
    );
    // default search: known_dirs remembered at create
    let out2 = env.zpool(&["import"]).ok().stdout;
    assert!(out2.contains("   pool: tank\n"), "{out2}");
    let id = out.lines().nth(1).unwrap().trim().trim_start_matches("id: ").to_string();
    env.zpool(&["import", "-d", "v", &id, "newtank"]).ok();
    assert_eq!(env.zpool(&["list", "-H", "-o", "name"]).ok().stdout, "newtank\n");
    env.zpool(&["import", "-d", "v", "newtank"]).fails_with("cannot import 'newtank'");
    env.zpool(&["destroy", "newtank"]).ok();
    assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n");
    env.zpool(&["import", "-d", "v"]).fails_with("no pools available to import");
    env.zpool(&["destroy", "newtank"]).fails_with("cannot open 'newtank': no such pool");
}

#[test]
fn history_and_properties() {
    let env = Env::new();
    env.zpool(&["create", "-m", "none", "-o", "size=128M", "tank", "v/a"]).ok();
    env.zpool(&["set", "comment=hello", "tank"]).ok();
    let out = env.zpool(&["get", "-H", "-o", "property,value", "comment,health", "tank"]).ok().stdout;
    assert_eq!(out, "comment\thello\nhealth\tONLINE\n");
    let h = env.zpool(&["history", "tank"]).ok().stdout;
    assert!(h.starts_with("History for 'tank':\n"), "{h}");
    assert!(h.contains("zpool create -m none -o size=128M tank v/a\n"), "{h}");
    assert!(h.contains("zpool set comment=hello tank\n"), "{h}");
    env.zpool(&["get", "bogus", "tank"]).fails_with("invalid property 'bogus'");
}

#[test]
fn daemon_is_single_and_private() {
    let env = Env::new();
    assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    env.tarn(&["daemon", "--foreground"]).fails_with("tarn daemon already running");
    let pid = std::fs::read_to_string(env.state().join("daemon.pid")).unwrap();
    assert!(pid.trim().parse::<u32>().is_ok());
    env.tarn(&["daemon", "--stop"]).ok();
    assert!(!env.socket().exists());
    env.tarn(&["daemon", "--stop"]).fails_with("not running");
}
