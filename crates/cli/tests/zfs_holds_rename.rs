//! End-to-end: `tarn zfs hold`, `release`, `holds`, `destroy -d` and `rename`
//! (OpenZFS suite areas cli_root/zfs_hold, zfs_release, zfs_holds, zfs_destroy,
//! zfs_rename).
//!
//! How: pools on file vdevs under the test directory. Output of `zfs holds` is
//! compared column by column with OpenZFS's `print_holds` format; refused commands are
//! checked for status, OpenZFS's message and an unchanged `zfs list`; holds, the
//! deferred-destroy flag and renamed names must survive export/import. The FUSE half
//! renames mounted file systems and reads their files at the new mountpoints; it is
//! skipped, with a message, when FUSE is not usable here.

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

#[test]
fn rename_without_mounts() {
    let env = Env::new();
    let alt = env.path().join("alt").display().to_string();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "tank", "v/a"])
        .ok();
    env.zpool(&["create", "-R", &alt, "-O", "canmount=noauto", "-o", "size=128M", "other", "v/o"])
        .ok();
    env.zfs(&["create", "-u", "tank/a"]).ok();
    env.zfs(&["create", "-u", "tank/a/b"]).ok();
    env.zfs(&["snapshot", "-r", "tank/a@s"]).ok();
    env.zfs(&["clone", "-o", "canmount=noauto", "tank/a/b@s", "tank/cl"]).ok();
    env.zfs(&["hold", "keep", "tank/a@s"]).ok();
    env.zfs(&["bookmark", "tank/a/b@s", "tank/a/b#bm"]).ok();
    env.zfs(&["rename", "tank/a", "tank/x"]).ok();
    assert_eq!(names(&env, "filesystem,snapshot"), "tank\ntank/cl\ntank/x\ntank/x@s\ntank/x/b\ntank/x/b@s\n");
    assert_eq!(names(&env, "bookmark"), "tank/x/b#bm\n");
    assert_eq!(get(&env, "origin", "tank/cl"), "tank/x/b@s");
    assert_eq!(get(&env, "mountpoint", "tank/x/b"), format!("{alt}/tank/x/b"));
    assert_eq!(env.zfs(&["holds", "-H", "tank/x@s"]).ok().stdout.split('\t').nth(1), Some("keep"));
    // Snapshots: full name, `@new`, `new`, and -r for descendants.
    env.zfs(&["rename", "tank/x@s", "tank/x@t"]).ok();
    env.zfs(&["rename", "tank/x@t", "@u"]).ok();
    env.zfs(&["rename", "tank/x@u", "v"]).ok();
    assert_eq!(names(&env, "snapshot"), "tank/x@v\ntank/x/b@s\n");
    env.zfs(&["rename", "tank/x/b@s", "tank/x/b@v"]).ok();
    env.zfs(&["rename", "-r", "tank/x@v", "tank/x@w"]).ok();
    assert_eq!(names(&env, "snapshot"), "tank/x@w\ntank/x/b@w\n");
    assert_eq!(get(&env, "origin", "tank/cl"), "tank/x/b@w");
    // -p creates the missing parents; -pp with canmount=off, so nothing mounts here.
    env.zfs(&["rename", "-pp", "tank/x/b", "tank/p/q/b"]).ok();
    assert_eq!(get(&env, "canmount", "tank/p/q"), "off");
    assert_eq!(names(&env, "filesystem"), "tank\ntank/cl\ntank/p\ntank/p/q\ntank/p/q/b\ntank/x\n");
    env.zfs(&["rename", "tank/p/q/b", "tank/x/b"]).ok();

    // Refusals, in OpenZFS's words, change nothing.
    let before = listing(&env);
    let u = |args: &[&str], msg: &str| {
        let o = env.zfs(args).fails_with(msg);
        assert_eq!(o.code, 2, "{o:?}");
        assert!(o.stderr.contains("rename -r <snapshot> <snapshot>"), "{o:?}");
    };
    u(&["rename", "tank/x"], "missing target dataset argument");
    u(&["rename"], "missing source dataset argument");
    u(&["rename", "a", "b", "c"], "too many arguments");
    u(&["rename", "-r", "tank/x", "tank/y"], "source dataset for recursive rename must be a snapshot");
    u(&["rename", "-p", "-r", "tank/x@w", "tank/x@y"], "-p and -r options are mutually exclusive");
    u(&["rename", "-u", "-p", "tank/x", "tank/y"], "-u and -p options are mutually exclusive");
    u(&["rename", "-q", "tank/x", "tank/y"], "invalid option 'q'");
    for (args, msg) in [
        (&["rename", "tank/nope", "tank/y"][..], "cannot open 'tank/nope': dataset does not exist"),
        (&["rename", "tank/x", "tank/nope/y"], "cannot create 'tank/nope/y': parent does not exist"),
        (&["rename", "tank/x", "nosuch/y"], "cannot create 'nosuch/y': no such pool 'nosuch'"),
        (
            &["rename", "tank/x", "other/y"],
            "cannot rename to 'other/y': datasets must be within same pool",
        ),
        (
            &["rename", "tank/x", "tank/x/b/y"],
            "cannot rename to 'tank/x/b/y': New dataset name cannot be a descendant of current dataset name",
        ),
        (&["rename", "tank/x", "tank/cl"], "cannot rename 'tank/x': dataset already exists"),
        (
            &["rename", "tank/x", "tank/y@z"],
            "cannot rename to 'tank/y@z': snapshot delimiter '@' is not expected here",
        ),
        (&["rename", "tank/x", "tank/y*"], "cannot rename to 'tank/y*': invalid character '*' in name"),
        (&["rename", "tank", "tank2"], "cannot create 'tank2': missing dataset name"),
        (
            &["rename", "tank", "tank/y"],
            "cannot rename to 'tank/y': New dataset name cannot be a descendant of current dataset name",
        ),
        (
            &["rename", "tank/x@w", "tank/cl@w"],
            "cannot rename to 'tank/cl@w': snapshots must be part of same dataset",
        ),
        (&["rename", "tank/x@nope", "tank/x@y"], "cannot open 'tank/x@nope': dataset does not exist"),
        (&["rename", "tank/x/b@w", "@w"], ""),
        (
            &["rename", "-p", "tank/x@w", "tank/x@y"],
            "cannot open 'tank/x@w': operation not applicable to datasets of this type",
        ),
    ] {
        if msg.is_empty() {
            // The same name: nothing to do, success as in OpenZFS.
            env.zfs(args).ok();
        } else {
            env.zfs(args).fails_with(msg);
        }
        assert_eq!(listing(&env), before, "{args:?} changed something");
    }
    env.zfs(&["snapshot", "tank/x/b@y"]).ok();
    let before = listing(&env);
    env.zfs(&["rename", "-r", "tank/x@w", "tank/x@y"])
        .fails_with("cannot rename 'tank/x@w': a child dataset already has a snapshot with the new name");
    env.zfs(&["rename", "tank/x/b@w", "tank/x/b@y"])
        .fails_with("cannot rename 'tank/x/b@w': dataset already exists");
    assert_eq!(listing(&env), before);
    // Renamed names survive export/import.
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-N", "-d", &env.vdir().display().to_string(), "-R", &alt, "tank"]).ok();
    assert_eq!(listing(&env), before);
    let h = env.zpool(&["history", "tank"]).ok().stdout;
    assert!(h.contains("zfs rename tank/a tank/x") && h.contains("zfs rename -r tank/x@v tank/x@w"), "{h}");
}

#[test]
fn rename_mounted_file_systems() {
    if !fuse_usable("rename_mounted_file_systems") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.zpool(&["create", "-m", &ms, "-o", "size=128M", "tank", "mirror", "v/a", "v/b"]).ok();
    env.zfs(&["create", "tank/a"]).ok();
    env.zfs(&["create", "tank/a/b"]).ok();
    env.zfs(&["create", "-o", &format!("mountpoint={ms}/fixed"), "tank/a/f"]).ok();
    std::fs::write(m.join("a/top"), b"top file\n").unwrap();
    std::fs::write(m.join("a/b/deep"), b"deep file\n").unwrap();
    std::fs::write(m.join("fixed/own"), b"own mountpoint\n").unwrap();
    env.zfs(&["snapshot", "-r", "tank/a@s"]).ok();
    // The moved file systems are mounted again at their new (inherited) mountpoints;
    // one with its own mountpoint stays there.
    env.zfs(&["rename", "tank/a", "tank/z"]).ok();
    assert_eq!(std::fs::read(m.join("z/top")).unwrap(), b"top file\n");
    assert_eq!(std::fs::read(m.join("z/b/deep")).unwrap(), b"deep file\n");
    assert_eq!(std::fs::read(m.join("fixed/own")).unwrap(), b"own mountpoint\n");
    assert!(!m.join("a/top").exists());
    let mounts = env.zfs(&["mount"]).ok().stdout;
    for (n, p) in [("tank/z", "z"), ("tank/z/b", "z/b"), ("tank/z/f", "fixed")] {
        assert!(
            mounts.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [n, &format!("{ms}/{p}")]),
            "{n}: {mounts}"
        );
    }
    assert!(!mounts.contains("tank/a"), "{mounts}");
    assert_eq!(get(&env, "mounted", "tank/z/b"), "yes");
    // The files stay writable there, and the snapshots moved along.
    std::fs::write(m.join("z/b/after"), b"after rename\n").unwrap();
    assert_eq!(names(&env, "snapshot"), "tank/z@s\ntank/z/b@s\ntank/z/f@s\n");
    // -p: the new parents are mounted like new file systems, then the moved one.
    env.zfs(&["rename", "-p", "tank/z/b", "tank/n/d/b"]).ok();
    assert_eq!(std::fs::read(m.join("n/d/b/deep")).unwrap(), b"deep file\n");
    assert_eq!(get(&env, "mounted", "tank/n/d"), "yes");
    // -u: the mount stays where it was, under the new name.
    env.zfs(&["rename", "-u", "tank/n/d/b", "tank/n/b2"]).ok();
    assert_eq!(std::fs::read(m.join("n/d/b/after")).unwrap(), b"after rename\n");
    assert!(env
        .zfs(&["mount"])
        .ok()
        .stdout
        .lines()
        .any(|l| l.starts_with("tank/n/b2 ") && l.ends_with("/n/d/b")));
    env.zfs(&["unmount", "tank/n/b2"]).ok();
    env.zfs(&["mount", "tank/n/b2"]).ok();
    assert_eq!(std::fs::read(m.join("n/b2/after")).unwrap(), b"after rename\n");
    // A refused rename leaves the mounts as they were.
    env.zfs(&["rename", "tank/z", "tank/n"])
        .fails_with("cannot rename 'tank/z': dataset already exists");
    assert_eq!(std::fs::read(m.join("z/top")).unwrap(), b"top file\n");
    // Everything is there after export/import (import mounts at the new names).
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    assert_eq!(std::fs::read(m.join("z/top")).unwrap(), b"top file\n");
    assert_eq!(std::fs::read(m.join("n/b2/after")).unwrap(), b"after rename\n");
    assert_eq!(std::fs::read(m.join("fixed/own")).unwrap(), b"own mountpoint\n");
    env.zpool(&["export", "tank"]).ok();
}
