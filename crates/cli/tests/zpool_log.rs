//! End-to-end: separate intent-log vdevs and `zpool add` / `zpool remove` (OpenZFS
//! suite areas cli_root/zpool_add, zpool_remove, slog, zpool_import -m).
//!
//! How: each test starts a private daemon (see `common`) on 128 MiB sparse vdev files
//! and compares what `tarn zpool …` prints with OpenZFS: the `logs` section of
//! `zpool status` and `zpool import` column by column, the error wording of bad
//! `log` specifications, of `zpool add` and `zpool remove`, and the `-m` refusal of
//! `zpool import`. Refused commands are checked to change nothing (same status, no
//! new pool, device files still unlabelled). Pools use `-m none`: no FUSE needed.

mod common;
use common::*;

const MB: u64 = 1 << 20;

/// One `zpool status` config line: name padded to `w` after `indent` spaces.
fn row(indent: usize, name: &str, state: &str, w: usize) -> String {
    let pad = w - indent;
    format!("\t{}{name:<pad$}  {state:<8}     0     0     0\n", " ".repeat(indent))
}

fn status_of(env: &Env, pool: &str) -> String {
    env.zpool(&["status", pool]).ok().stdout
}

#[test]
fn create_with_logs_status_and_list() {
    let env = Env::new();
    let [a, b, c, d, e, f, g] = ["a", "b", "c", "d", "e", "f", "g"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "tank", "mirror", &a, &b, "log", &c, "mirror", &d, &e]).ok();
    let w = (4 + a.len()).max(10);
    let expected = format!(
        "  pool: tank\n state: ONLINE\nconfig:\n\n\
         \t{:<w$}  STATE     READ WRITE CKSUM\n{}{}{}{}\tlogs\t\n{}{}{}{}\n\
         errors: No known data errors\n",
        "NAME",
        row(0, "tank", "ONLINE", w),
        row(2, "mirror-0", "ONLINE", w),
        row(4, &a, "ONLINE", w),
        row(4, &b, "ONLINE", w),
        row(2, &c, "ONLINE", w),
        row(2, "mirror-2", "ONLINE", w),
        row(4, &d, "ONLINE", w),
        row(4, &e, "ONLINE", w),
    );
    assert_eq!(status_of(&env, "tank"), expected);
    // SIZE leaves the log vdevs out: the same as a pool of the mirror alone.
    env.zpool(&["create", "-m", "none", "plain", "mirror", &f, &g]).ok();
    let sizes = env.zpool(&["list", "-Hp", "-o", "name,size"]).ok().stdout;
    let sizes: Vec<&str> = sizes.lines().map(|l| l.split('\t').nth(1).unwrap()).collect();
    assert_eq!(sizes[0], sizes[1], "plain and tank");
    // Everything survives export/import, and the listing shows the logs too.
    env.zpool(&["export", "tank"]).ok();
    let listing = env.zpool(&["import", "-d", "v"]).ok().stdout;
    let wi = w;
    assert!(
        listing.ends_with(&format!(
            "\t{:<wi$}  ONLINE\n\t  {:<w2$}  ONLINE\n\t    {:<w4$}  ONLINE\n\t    {:<w4$}  ONLINE\n\tlogs\t\n\t  {:<w2$}  ONLINE\n\t  {:<w2$}  ONLINE\n\t    {:<w4$}  ONLINE\n\t    {:<w4$}  ONLINE\n",
            "tank",
            "mirror-0",
            a,
            b,
            c,
            "mirror-2",
            d,
            e,
            w2 = w - 2,
            w4 = w - 4
        )),
        "{listing}"
    );
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(status_of(&env, "tank"), expected);
    // -n shows the layout with the log section and creates nothing.
    let [h, i, j] = ["h", "i", "j"].map(|n| env.make_vdev(n, 128 * MB));
    let out = env.zpool(&["create", "-n", "dry", &h, "log", "mirror", &i, &j]).ok().stdout;
    assert_eq!(
        out,
        format!("would create 'dry' with the following layout:\n\n\tdry\n\t  {h}\n\tlogs\n\t  mirror\n\t    {i}\n\t    {j}\n")
    );
    assert!(untouched(&h, 512 << 10));
}

#[test]
fn bad_log_specifications_change_nothing() {
    let env = Env::new();
    let [a, b, c] = ["a", "b", "c"].map(|n| env.make_vdev(n, 128 * MB));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["create", "tank", &a, "log"],
            "invalid vdev specification: log requires at least 1 device\n",
        ),
        (
            vec!["create", "tank", &a, "log", "raidz", &b, &c],
            "invalid vdev specification: unsupported 'log' device: raidz\n",
        ),
        (
            vec!["create", "tank", &a, "log", &b, "log", &c],
            "invalid vdev specification: 'log' can be specified only once\n",
        ),
        (
            vec!["create", "tank", "log", &a],
            "invalid vdev specification\nuse '-f' to override the following errors:\nat least one general top-level vdev must be specified\n",
        ),
        (
            vec!["create", "tank", &a, "log", "mirror", &b],
            "invalid vdev specification: mirror requires at least 2 devices\n",
        ),
    ];
    for (args, msg) in cases {
        let out = env.zpool(&args);
        assert_eq!((out.code, out.stderr.as_str()), (1, msg), "{args:?}");
        assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n", "after {args:?}");
    }
    for v in [&a, &b, &c] {
        assert!(untouched(v, 512 << 10), "{v} was written");
    }
}

#[test]
fn add_log_and_normal_vdevs() {
    let env = Env::new();
    let [a, b, c, d, e, f] = ["a", "b", "c", "d", "e", "f"].map(|n| env.make_vdev(n, 128 * MB));
    let small = env.make_vdev("small", 32 * MB);
    env.zpool(&["create", "-m", "none", "tank", "mirror", &a, &b]).ok();
    let before = status_of(&env, "tank");
    let size = env.zpool(&["list", "-Hp", "-o", "size", "tank"]).ok().stdout;
    // Refused, with OpenZFS's words, and nothing changes.
    let refused: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["add", "tank", &c],
            "invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: pool uses mirror and new vdev is file\n".into(),
        ),
        (
            vec!["add", "tank", "mirror", &c, &d, &e],
            "invalid vdev specification\nuse '-f' to override the following errors:\nmismatched replication level: pool uses 2-way mirror and new vdev uses 3-way mirror\n".into(),
        ),
        (
            vec!["add", "tank", "log", "raidz", &c, &d],
            "invalid vdev specification: unsupported 'log' device: raidz\n".into(),
        ),
        (vec!["add", "tank", "log"], "invalid vdev specification: log requires at least 1 device\n".into()),
        (
            vec!["add", "tank", "log", &small],
            "cannot add to 'tank': device is less than the minimum size (64M)\n".into(),
        ),
        (
            vec!["add", "tank", "log", &a],
            format!("invalid vdev specification\nthe following errors must be manually repaired:\n{a} is part of active pool 'tank'\n"),
        ),
        (vec!["add", "nosuch", "log", &c], "cannot open 'nosuch': no such pool\n".into()),
    ];
    for (args, msg) in refused {
        let out = env.zpool(&args);
        assert_eq!((out.code, out.stderr.as_str()), (1, msg.as_str()), "{args:?}");
        assert_eq!(status_of(&env, "tank"), before, "after {args:?}");
    }
    assert_eq!(env.zpool(&["add", "tank"]).code, 2, "usage error");
    for v in [&c, &d, &e] {
        assert!(untouched(v, 512 << 10), "{v} was written");
    }
    // -n shows the result and changes nothing.
    let out = env.zpool(&["add", "-n", "tank", "mirror", &c, &d, "log", &e]).ok().stdout;
    assert_eq!(
        out,
        format!(
            "would update 'tank' to the following configuration:\n\n\ttank\n\t  mirror-0\n\t    {a}\n\t    {b}\n\t  mirror\n\t    {c}\n\t    {d}\n\tlogs\n\t  {e}\n"
        )
    );
    assert_eq!(status_of(&env, "tank"), before);
    // A log device, then a matching mirror: both show up where they belong.
    env.zpool(&["add", "tank", "log", &e]).ok();
    assert_eq!(env.zpool(&["list", "-Hp", "-o", "size", "tank"]).ok().stdout, size, "logs add no space");
    env.zpool(&["add", "tank", "mirror", &c, &d]).ok();
    let w = (4 + a.len()).max(10);
    let expected = format!(
        "\t{}\n{}{}{}{}{}{}{}\tlogs\t\n{}",
        format_args!("{:<w$}  STATE     READ WRITE CKSUM", "NAME"),
        row(0, "tank", "ONLINE", w),
        row(2, "mirror-0", "ONLINE", w),
        row(4, &a, "ONLINE", w),
        row(4, &b, "ONLINE", w),
        row(2, "mirror-2", "ONLINE", w),
        row(4, &c, "ONLINE", w),
        row(4, &d, "ONLINE", w),
        row(2, &e, "ONLINE", w),
    );
    assert!(status_of(&env, "tank").contains(&expected), "{}", status_of(&env, "tank"));
    let grown: u64 = env.zpool(&["list", "-Hp", "-o", "size", "tank"]).ok().stdout.trim().parse().unwrap();
    assert!(grown > size.trim().parse::<u64>().unwrap() + 100 * MB);
    // -f accepts a mismatched replication level.
    env.zpool(&["add", "-f", "tank", &f]).ok();
    let h = env.zpool(&["history", "tank"]).ok().stdout;
    assert!(h.contains(&format!("zpool add tank log {e}\n")), "{h}");
    assert!(h.contains(&format!("zpool add -f tank {f}\n")), "{h}");
    // The new layout survives export/import.
    let now = status_of(&env, "tank");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(status_of(&env, "tank"), now);
}

#[test]
fn remove_log_vdevs() {
    let env = Env::new();
    let [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "tank", "mirror", &a, &b, "log", &c, "mirror", &d, &e]).ok();
    let before = status_of(&env, "tank");
    let only = "only inactive hot spares, cache, or log devices can be removed";
    let refused: Vec<(Vec<&str>, String)> = vec![
        (vec!["remove", "tank", "mirror-0"], format!("cannot remove mirror-0: {only}\n")),
        (vec!["remove", "tank", &a], format!("cannot remove {a}: {only}\n")),
        (vec!["remove", "tank", &d], format!("cannot remove {d}: {only}\n")),
        (
            vec!["remove", "tank", "/no/such/dev"],
            "cannot remove /no/such/dev: no such device in pool\n".into(),
        ),
        (vec!["remove", "tank", "mirror-7"], "cannot remove mirror-7: no such device in pool\n".into()),
        (vec!["remove", "nosuch", &c], "cannot open 'nosuch': no such pool\n".into()),
    ];
    for (args, msg) in refused {
        let out = env.zpool(&args);
        assert_eq!((out.code, out.stderr.as_str()), (1, msg.as_str()), "{args:?}");
        assert_eq!(status_of(&env, "tank"), before, "after {args:?}");
    }
    assert_eq!(env.zpool(&["remove", "tank"]).code, 2, "usage error");
    // The single log device by a path relative to the cwd, the mirror by name.
    env.zpool(&["remove", "tank", "v/c"]).ok();
    let s = status_of(&env, "tank");
    let w = (4 + a.len()).max(10);
    assert!(
        s.contains(&format!(
            "\tlogs\t\n{}{}{}\n",
            row(2, "mirror-2", "ONLINE", w),
            row(4, &d, "ONLINE", w),
            row(4, &e, "ONLINE", w)
        )),
        "{s}"
    );
    env.zpool(&["remove", "tank", "mirror-2"]).ok();
    let s = status_of(&env, "tank");
    assert!(!s.contains("logs"), "{s}");
    assert!(s.ends_with(&format!("{}\nerrors: No known data errors\n", row(4, &b, "ONLINE", w))), "{s}");
    // The removed devices are free: another pool takes them without -f.
    env.zpool(&["create", "-m", "none", "other", "mirror", &c, &d]).ok();
    // tank still works and imports; a new log fills the hole left at id 1.
    env.zfs(&["create", "tank/fs"]).ok();
    env.zpool(&["add", "tank", "log", &e]).ok();
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    let s = status_of(&env, "tank");
    assert!(s.contains(&format!("\tlogs\t\n{}", row(2, &e, "ONLINE", w))), "{s}");
    let h = env.zpool(&["history", "tank"]).ok().stdout;
    assert!(h.contains("zpool remove tank mirror-2\n"), "{h}");
    assert_eq!(env.zfs(&["list", "-H", "-o", "name", "tank/fs"]).ok().stdout, "tank/fs\n");
}

#[test]
fn import_with_missing_log_needs_m() {
    let env = Env::new();
    let [a, c, d, e] = ["a", "c", "d", "e"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-m", "none", "tank", &a, "log", &c, "mirror", &d, &e]).ok();
    env.zfs(&["create", "tank/before"]).ok();
    env.zpool(&["export", "tank"]).ok();
    std::fs::create_dir(env.path().join("away")).unwrap();
    // One leg of the log mirror gone: the pool imports DEGRADED without -m.
    std::fs::rename(&e, env.path().join("away/e")).unwrap();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert!(status_of(&env, "tank").contains(" state: DEGRADED\n"));
    env.zpool(&["export", "tank"]).ok();
    // Every leaf of both log vdevs gone: refused, OpenZFS printing the missing devices
    // on stdout and the error on stderr.
    for n in ["c", "d"] {
        std::fs::rename(env.vdev(n), env.path().join("away").join(n)).unwrap();
    }
    let out = env.zpool(&["import", "-d", "v", "tank"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stderr, "cannot import 'tank': one or more devices is currently unavailable\n");
    assert_eq!(
        out.stdout,
        format!(
            "The devices below are missing or corrupted, use '-m' to import the pool anyway:\n\t    {c} [log]\n\t    mirror-2 [log]\n\t      {d}\n\t      {e}\n\n"
        )
    );
    assert_eq!(env.zpool(&["list"]).ok().stdout, "no pools available\n");
    // The listing shows why.
    let listing = env.zpool(&["import", "-d", "v"]).ok().stdout;
    let w = 4 + d.len();
    assert!(listing.contains("  state: DEGRADED\n"), "{listing}");
    assert!(
        listing.ends_with(&format!(
            "\tlogs\t\n\t  {c:<w2$}  UNAVAIL  cannot open\n\t  {:<w2$}  UNAVAIL  insufficient replicas\n\t    {d:<w4$}  UNAVAIL  cannot open\n\t    {e:<w4$}  UNAVAIL  cannot open\n",
            "mirror-2",
            w2 = w - 2,
            w4 = w - 4
        )),
        "{listing}"
    );
    // With -m: imported, DEGRADED, the logs UNAVAIL under `logs`, and usable.
    env.zpool(&["import", "-m", "-d", "v", "tank"]).ok();
    let s = status_of(&env, "tank");
    assert!(
        s.starts_with("  pool: tank\n state: DEGRADED\nstatus: One or more devices could not be opened."),
        "{s}"
    );
    let unavail = |indent: usize, name: &str, why: &str| {
        let pad = w - indent;
        format!("\t{}{name:<pad$}  UNAVAIL      0     0     0  {why}\n", " ".repeat(indent))
    };
    let expected = format!(
        "{}{}\tlogs\t\n{}{}{}{}\n",
        row(0, "tank", "DEGRADED", w),
        row(2, &a, "ONLINE", w),
        unavail(2, &c, "cannot open"),
        unavail(2, "mirror-2", "insufficient replicas"),
        unavail(4, &d, "cannot open"),
        unavail(4, &e, "cannot open"),
    );
    assert!(s.contains(&expected), "{s}");
    env.zfs(&["create", "tank/after"]).ok();
    let list = env.zfs(&["list", "-H", "-o", "name"]).ok().stdout;
    assert_eq!(list, "tank\ntank/after\ntank/before\n");
    // The lost log vdevs can be removed (two in one command); then the pool imports
    // without -m.
    env.zpool(&["remove", "tank", &c, "mirror-2"]).ok();
    assert!(status_of(&env, "tank").starts_with("  pool: tank\n state: ONLINE\nconfig:"));
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", "v", "tank"]).ok();
    assert_eq!(env.zfs(&["list", "-H", "-o", "name"]).ok().stdout, list);
}
