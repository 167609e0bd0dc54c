//! End-to-end: `tarn zfs hold`, `release`, `holds` and `destroy -d` (OpenZFS suite
//! areas cli_root/zfs_hold, zfs_release, zfs_holds, zfs_destroy).
//!
//! How: pools on file vdevs under the test directory. Output of `zfs holds` is
//! compared column by column with OpenZFS's `print_holds` format; refused commands are
//! checked for status, OpenZFS's message and an unchanged `zfs list`; holds and the
//! deferred-destroy flag must survive export/import.

mod common;
use common::*;

/// Every name with the properties these commands change.
fn listing(env: &Env) -> String {
    env.zfs(&["list", "-H", "-t", "all", "-o", "name,userrefs,defer_destroy,origin"]).ok().stdout
}

/// Names of type `t` in pool `tank`.
fn names(env: &Env, t: &str) -> String {
    env.zfs(&["list", "-H", "-r", "-t", t, "-o", "name", "tank"]).ok().stdout
}

fn get(env: &Env, prop: &str, ds: &str) -> String {
    env.zfs(&["get", "-H", "-o", "value", prop, ds]).ok().stdout.trim_end().to_string()
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn holds_release_and_deferred_destroy() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    env.zfs(&["create", "-u", "tank/fs"]).ok();
    env.zfs(&["create", "-u", "tank/fs/kid"]).ok();
    env.zfs(&["snapshot", "-r", "tank/fs@a"]).ok();
    let t0 = now_s();
    env.zfs(&["hold", "keep", "tank/fs@a"]).ok();
    env.zfs(&["hold", "-r", "backup", "tank/fs@a"]).ok();
    let t1 = now_s();
    // NAME and TAG are as wide as their longest values, two spaces apart.
    let out = env.zfs(&["holds", "tank/fs@a"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NAME       TAG     TIMESTAMP", "{out}");
    assert!(lines[1].starts_with("tank/fs@a  backup  "), "{out}");
    assert!(lines[2].starts_with("tank/fs@a  keep    "), "{out}");
    assert_eq!(lines.len(), 3, "{out}");
    // The timestamp as `creation` shows it ("Tue Mar  4 10:02 2025").
    let ts = &lines[1]["tank/fs@a  backup  ".len()..];
    assert_eq!(ts.split_whitespace().count(), 5, "{out}");
    // -r: the same snapshot of descendants; -H tabs, no header; -p seconds.
    let out = env.zfs(&["holds", "-rHp", "tank/fs@a"]).ok().stdout;
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    let got: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(got, [("tank/fs@a", "backup"), ("tank/fs@a", "keep"), ("tank/fs/kid@a", "backup")], "{out}");
    for r in &rows {
        let t: u64 = r[2].parse().unwrap();
        assert!((t0..=t1).contains(&t), "{out}");
    }
    let out = env.zfs(&["holds", "-r", "tank/fs/kid@a"]).ok().stdout;
    assert!(out.starts_with("NAME           TAG     TIMESTAMP\ntank/fs/kid@a  backup  "), "{out}");
    assert_eq!(get(&env, "userrefs", "tank/fs@a"), "2");
    assert_eq!(get(&env, "userrefs", "tank/fs/kid@a"), "1");
    assert_eq!(get(&env, "defer_destroy", "tank/fs@a"), "off");

    // Refusals, in OpenZFS's words, change nothing.
    let before = listing(&env);
    env.zfs(&["hold", "keep", "tank/fs@a"])
        .fails_with("cannot hold snapshot 'tank/fs@a': tag already exists on this dataset");
    env.zfs(&["hold", "-r", "keep", "tank/fs@a"])
        .fails_with("cannot hold snapshot 'tank/fs@a': tag already exists on this dataset");
    env.zfs(&["release", "nope", "tank/fs@a"])
        .fails_with("cannot release hold from snapshot 'tank/fs@a': no such tag on this dataset");
    env.zfs(&["release", "keep", "tank/fs@zz"])
        .fails_with("cannot release hold from snapshot 'tank/fs@zz': dataset does not exist");
    env.zfs(&["hold", "x", "tank/fs@zz"])
        .fails_with("cannot hold snapshot 'tank/fs@zz': dataset does not exist");
    env.zfs(&["hold", "x", "tank/nope@a"])
        .fails_with("cannot open 'tank/nope': dataset does not exist");
    env.zfs(&["hold", "x", "tank/fs"]).fails_with("'tank/fs' is not a snapshot");
    env.zfs(&["hold", &"t".repeat(256), "tank/fs@a"])
        .fails_with("cannot hold snapshot 'tank/fs@a': tag too long");
    let o = env.zfs(&["hold", ".x", "tank/fs@a"]).fails_with("tag may not start with '.'");
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("hold [-r] <tag> <snapshot> ..."), "{o:?}");
    assert_eq!(env.zfs(&["hold", "x"]).code, 2);
    assert_eq!(env.zfs(&["release", "-x", "t", "tank/fs@a"]).fails_with("invalid option 'x'").code, 2);
    let o = env.zfs(&["holds", "tank/fs@zz"]).fails_with("cannot open 'tank/fs@zz': dataset does not exist");
    assert!(o.stderr.contains("no datasets available"), "{o:?}");
    assert_eq!(o.stdout, "NAME  TAG  TIMESTAMP\n");
    env.zfs(&["holds", "tank/fs"]).fails_with("'tank/fs' is not a snapshot");
    // A held snapshot cannot be destroyed, alone or with its file system.
    env.zfs(&["destroy", "tank/fs@a"])
        .fails_with("cannot destroy snapshot tank/fs@a: dataset is busy");
    env.zfs(&["destroy", "-r", "tank/fs"]).fails_with("dataset is busy");
    env.zfs(&["destroy", "-d", "tank/fs"])
        .fails_with("cannot open 'tank/fs': operation not applicable to datasets of this type");
    assert_eq!(listing(&env), before);

    // One failing operand does not stop the others (exit 1).
    let o = env.zfs(&["hold", "t2", "tank/fs/kid@a", "tank/fs@zz"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(get(&env, "userrefs", "tank/fs/kid@a"), "2");
    env.zfs(&["release", "t2", "tank/fs/kid@a"]).ok();

    // destroy -d marks it; holds and the mark survive export/import.
    env.zfs(&["destroy", "-d", "tank/fs@a"]).ok();
    assert_eq!(get(&env, "defer_destroy", "tank/fs@a"), "on");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "-R", &alt, "tank"]).ok();
    assert_eq!(get(&env, "defer_destroy", "tank/fs@a"), "on");
    assert_eq!(env.zfs(&["holds", "-H", "tank/fs@a"]).ok().stdout.lines().count(), 2);
    env.zfs(&["release", "keep", "tank/fs@a"]).ok();
    assert_eq!(names(&env, "snapshot"), "tank/fs@a\ntank/fs/kid@a\n");
    // The last release destroys the marked snapshot; the kid's was not marked.
    env.zfs(&["release", "-r", "backup", "tank/fs@a"]).ok();
    assert_eq!(names(&env, "snapshot"), "tank/fs/kid@a\n");
    assert_eq!(get(&env, "userrefs", "tank/fs/kid@a"), "0");
    env.zfs(&["destroy", "tank/fs/kid@a"]).ok();

    // A marked snapshot with a clone goes with the clone.
    env.zfs(&["snapshot", "tank/fs@c"]).ok();
    env.zfs(&["clone", "-o", "canmount=noauto", "tank/fs@c", "tank/cl"]).ok();
    let plan = env.zfs(&["destroy", "-dnv", "tank/fs@c"]).ok().stdout;
    assert!(plan.starts_with("would destroy tank/fs@c\nwould reclaim "), "{plan}");
    assert_eq!(get(&env, "defer_destroy", "tank/fs@c"), "off");
    env.zfs(&["destroy", "-d", "tank/fs@c"]).ok();
    assert_eq!(get(&env, "defer_destroy", "tank/fs@c"), "on");
    env.zfs(&["destroy", "tank/cl"]).ok();
    assert_eq!(names(&env, "all"), "tank\ntank/fs\ntank/fs/kid\n");
    // -dR: the clone first, then the snapshot at once.
    env.zfs(&["snapshot", "tank/fs@e"]).ok();
    env.zfs(&["clone", "-o", "canmount=noauto", "tank/fs@e", "tank/ce"]).ok();
    env.zfs(&["destroy", "-dR", "tank/fs@e"]).ok();
    assert_eq!(names(&env, "all"), "tank\ntank/fs\ntank/fs/kid\n");
    let h = env.zpool(&["history", "tank"]).ok().stdout;
    assert!(h.contains("zfs hold keep tank/fs@a") && h.contains("zfs release -r backup tank/fs@a"), "{h}");
}
