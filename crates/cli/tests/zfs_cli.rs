//! End-to-end: `tarn zfs` datasets and properties (OpenZFS suite areas
//! cli_root/zfs_create, zfs_destroy, zfs_list, zfs_get, zfs_set, zfs_inherit).
//!
//! How: a pool is created with an altroot in the test directory and
//! `-O canmount=noauto`, and children with `zfs create -u`, so nothing is mounted and
//! no FUSE is needed; mountpoints are still computed (altroot + inherited path) and
//! checked. Refused commands are checked for status, message, and an unchanged
//! `zfs list`.

mod common;
use common::*;

fn pool(env: &Env) -> String {
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    alt
}

fn names(env: &Env) -> String {
    env.zfs(&["list", "-H", "-o", "name"]).ok().stdout
}

#[test]
fn create_list_get_set_inherit() {
    let env = Env::new();
    let alt = pool(&env);
    env.zfs(&["create", "-u", "tank/home"]).ok();
    env.zfs(&["create", "-u", "-o", "atime=off", "tank/home/u"]).ok();
    let out = env.zfs(&["list", "-H", "-o", "name,mountpoint"]).ok().stdout;
    assert_eq!(out, format!("tank\t{alt}/tank\ntank/home\t{alt}/tank/home\ntank/home/u\t{alt}/tank/home/u\n"));
    let human = env.zfs(&["list"]).ok().stdout;
    let first = human.lines().next().unwrap();
    assert!(first.starts_with("NAME ") && first.contains("USED  AVAIL  REFER  MOUNTPOINT"), "{human}");
    let p = env.zfs(&["list", "-H", "-p", "-o", "used,avail,refer", "tank"]).ok().stdout;
    assert!(p.trim().split('\t').all(|f| f.parse::<u64>().is_ok()), "{p}");

    let get = |prop: &str, ds: &str| env.zfs(&["get", "-H", "-o", "value,source", prop, ds]).ok().stdout;
    assert_eq!(get("recordsize", "tank/home"), "128K\tdefault\n");
    assert_eq!(get("atime", "tank/home/u"), "off\tlocal\n");
    env.zfs(&["set", "recordsize=16K", "tank/home"]).ok();
    assert_eq!(get("recordsize", "tank/home"), "16K\tlocal\n");
    assert_eq!(get("recordsize", "tank/home/u"), "16K\tinherited from tank/home\n");
    assert_eq!(env.zfs(&["get", "-H", "-p", "-o", "value", "recordsize", "tank/home"]).ok().stdout, "16384\n");
    env.zfs(&["inherit", "recordsize", "tank/home"]).ok();
    assert_eq!(get("recordsize", "tank/home/u"), "128K\tdefault\n");
    env.zfs(&["set", "mountpoint=/srv/h", "tank/home"]).ok();
    let out = env.zfs(&["list", "-H", "-r", "-o", "name,mountpoint", "tank/home"]).ok().stdout;
    assert_eq!(out, format!("tank/home\t{alt}/srv/h\ntank/home/u\t{alt}/srv/h/u\n"));
    let all = env.zfs(&["get", "all", "tank/home"]).ok().stdout;
    let header = all.lines().next().unwrap();
    assert!(header.starts_with("NAME ") && header.contains("PROPERTY") && header.contains("VALUE") && header.ends_with("SOURCE"));
    for p in [
        "type",
        "used",
        "available",
        "referenced",
        "mounted",
        "recordsize",
        "mountpoint",
        "compression",
        "atime",
        "readonly",
        "canmount",
    ] {
        assert!(all.lines().any(|l| l.split_whitespace().nth(1) == Some(p)), "{p} missing in {all}");
    }
    let depth = env.zfs(&["list", "-H", "-d", "1", "-o", "name", "tank"]).ok().stdout;
    assert_eq!(depth, "tank\ntank/home\n");
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "mounted", "tank/home"]).ok().stdout, "no\n");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let env = Env::new();
    pool(&env);
    env.zfs(&["create", "-u", "tank/x"]).ok();
    let before = names(&env);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["create", "tank/bad*name"], "cannot create 'tank/bad*name'"),
        (vec!["create", "tank//y"], "cannot create 'tank//y'"),
        (vec!["create", "tank/a/b"], "cannot create 'tank/a/b': parent does not exist"),
        (vec!["create", "tank/x"], "cannot create 'tank/x': dataset already exists"),
        (vec!["create", "tank"], "cannot create 'tank': missing dataset name"),
        (vec!["create", "nopool/a"], "cannot create 'nopool/a'"),
        (vec!["create", "-o", "atime=maybe", "tank/y"], "'atime' must be one of 'on | off'"),
        (vec!["create", "-o", "recordsize=3K", "tank/y"], "'recordsize' must be power of 2"),
        (vec!["create", "-o", "bogus=1", "tank/y"], "invalid property 'bogus'"),
        (vec!["set", "atime=maybe", "tank/x"], "cannot set property for 'tank/x'"),
        (vec!["set", "atime=off", "tank/nosuch"], "cannot open 'tank/nosuch': dataset does not exist"),
        (vec!["destroy", "tank/nosuch"], "cannot open 'tank/nosuch': dataset does not exist"),
        (vec!["destroy", "tank"], "operation does not apply to pools"),
        (vec!["list", "tank/nosuch"], "cannot open 'tank/nosuch': dataset does not exist"),
        (vec!["get", "bogus", "tank"], "bad property list: invalid property 'bogus'"),
    ];
    for (args, msg) in cases {
        env.zfs(&args).fails_with(msg);
        assert_eq!(names(&env), before, "after {args:?}");
    }
    assert_eq!(env.zfs(&["get", "-H", "-o", "value", "atime", "tank/x"]).ok().stdout, "on\n");
}

#[test]
fn destroy_with_children_needs_r() {
    let env = Env::new();
    pool(&env);
    env.zfs(&["create", "-u", "-p", "tank/x/y/z"]).ok();
    assert_eq!(names(&env), "tank\ntank/x\ntank/x/y\ntank/x/y/z\n");
    env.zfs(&["destroy", "tank/x"])
        .fails_with("cannot destroy 'tank/x': filesystem has children\nuse '-r' to destroy the following datasets:\ntank/x/y\ntank/x/y/z");
    assert_eq!(names(&env), "tank\ntank/x\ntank/x/y\ntank/x/y/z\n");
    env.zfs(&["destroy", "tank/x/y/z"]).ok();
    env.zfs(&["destroy", "-r", "tank/x"]).ok();
    assert_eq!(names(&env), "tank\n");
    // survives export/import
    env.zfs(&["create", "-u", "tank/keep"]).ok();
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", "v", "tank"]).ok();
    assert_eq!(names(&env), "tank\ntank/keep\n");
}
