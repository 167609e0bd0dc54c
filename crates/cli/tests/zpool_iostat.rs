//! End-to-end: `zpool iostat` (OpenZFS suite area cli_root/zpool_iostat).
//!
//! How: each test starts a private daemon (see `common`) on 128 MiB sparse vdev files,
//! pools made with `-m none` (no FUSE needed), and runs the real `tarn zpool iostat`:
//! the header lines byte for byte as OpenZFS prints them; `-v` lists every vdev
//! (top-level vdevs two spaces in, leaves four, capacity `-` on leaves, log vdevs
//! after a `logs` row, a dashed line after the pool); naming vdevs shows only those;
//! interval and count print that many reports, the header once (every report with
//! `-v`), `-y` skips the since-import report; the write counters are non-zero after
//! pool creation and rise while datasets are being created; bad operands and options
//! fail with OpenZFS's messages and exit status (2 for usage errors, 1 otherwise).

mod common;
use common::*;

const MB: u64 = 1 << 20;

const HEADER: &str = "              capacity     operations     bandwidth \n\
                      pool        alloc   free   read  write   read  write\n\
                      ----------  -----  -----  -----  -----  -----  -----\n";

/// The six value fields of a `-Hp` row, after the name.
fn fields(line: &str) -> (String, Vec<u64>) {
    let mut it = line.split('\t');
    let name = it.next().unwrap().to_string();
    let vals: Vec<u64> = it.map(|v| v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"))).collect();
    assert_eq!(vals.len(), 6, "{line:?}");
    (name, vals)
}

#[test]
fn header_and_pool_row() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    // No pools yet.
    env.zpool(&["iostat"]).fails_with("no pools available");
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    let out = env.zpool(&["iostat"]).ok().stdout;
    assert!(out.starts_with(HEADER), "{out}");
    let rows: Vec<&str> = out[HEADER.len()..].lines().collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert!(rows[0].starts_with("tank        "), "{out}");
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(cells.len(), 7, "{out}");
    // Every value is right-aligned in five characters after two spaces.
    assert_eq!(rows[0].len(), 10 + 6 * 7, "{out}");
    // Same pool named explicitly.
    let named = env.zpool(&["iostat", "tank"]).ok().stdout;
    assert!(
        named.starts_with(HEADER) && named[HEADER.len()..].starts_with("tank ") && named.lines().count() == 4,
        "{named}"
    );
    // Creating the pool wrote through the vdev tree: writes since import are non-zero.
    let raw = env.zpool(&["iostat", "-Hp", "tank"]).ok().stdout;
    let (name, v) = fields(raw.trim_end());
    assert_eq!(name, "tank");
    assert!(v[0] > 0 && v[1] > 0, "alloc and free: {raw}");
    assert!(v[3] > 0 && v[5] > 0, "write ops and bytes since import: {raw}");
    // A second pool: one more row and a closing dashed line.
    let b = env.make_vdev("b", 128 * MB);
    env.zpool(&["create", "-m", "none", "pool2", &b]).ok();
    let out = env.zpool(&["iostat"]).ok().stdout;
    let rows: Vec<&str> = out[HEADER.len()..].lines().collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[0].starts_with("pool2 ") && rows[1].starts_with("tank "), "{out}");
    assert_eq!(rows[2], "----------  -----  -----  -----  -----  -----  -----");
}

#[test]
fn verbose_lists_every_vdev() {
    let env = Env::new();
    let [a, b, c, d, e, f] = ["a", "b", "c", "d", "e", "f"].map(|n| env.make_vdev(n, 128 * MB));
    env.zpool(&["create", "-f", "-m", "none", "tank", "mirror", &a, &b, "raidz1", &c, &d, &e, "log", &f])
        .ok();
    let out = env.zpool(&["iostat", "-v", "tank"]).ok().stdout;
    let w = 4 + a.len();
    let dashes = format!("{}  -----  -----  -----  -----  -----  -----", "-".repeat(w));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{}    capacity     operations     bandwidth ", " ".repeat(w)));
    assert_eq!(lines[1], format!("{:<w$}  alloc   free   read  write   read  write", "pool"));
    assert_eq!(lines[2], dashes);
    let names: Vec<String> = lines[3..].iter().map(|l| l[..w].trim_end().to_string()).collect();
    let expect = [
        "tank".to_string(),
        "  mirror-0".into(),
        format!("    {a}"),
        format!("    {b}"),
        "  raidz1-1".into(),
        format!("    {c}"),
        format!("    {d}"),
        format!("    {e}"),
        "logs".into(),
        format!("  {f}"),
        "-".repeat(w),
    ];
    assert_eq!(names, expect, "{out}");
    assert_eq!(lines.len(), 3 + expect.len(), "{out}");
    assert_eq!(*lines.last().unwrap(), dashes);
    // Leaves have no capacity; the pool, its top-level vdevs and the log vdev do.
    for (name, l) in names.iter().zip(&lines[3..]) {
        let cap = &l[w..w + 14];
        if name == "logs" {
            assert_eq!(&l[w..], "      -      -      -      -      -      -");
        } else if name.starts_with("    ") {
            assert_eq!(cap, "      -      -", "{l}");
        } else if !name.starts_with('-') {
            assert!(!cap.contains('-'), "{l}");
        }
    }
    // Every leaf took writes when the pool was created (the log's labels aside, it
    // may not have: only check the normal class).
    let raw = env.zpool(&["iostat", "-Hpv", "tank"]).ok().stdout;
    for l in raw.lines().filter(|l| !l.is_empty()) {
        let (name, v) = fields(l);
        if [&a, &b, &c, &d, &e].contains(&&name) {
            assert_eq!((v[0], v[1]), (0, 0), "no capacity on leaves with -p: {l}");
            assert!(v[3] > 0, "leaf wrote nothing: {l}");
        }
    }
    // Naming vdevs shows just those, flush left, under the title "vdev".
    let out = env.zpool(&["iostat", "tank", &c, "mirror-0"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], format!("{:<w$}  alloc   free   read  write   read  write", "vdev"));
    let names: Vec<&str> = lines[3..].iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    // The blank line is OpenZFS's: the `logs` row is left out, its line end is not.
    assert_eq!(names, ["mirror-0", c.as_str(), "", &"-".repeat(w)], "{out}");
}

#[test]
fn intervals_counts_and_rates() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    // interval count: the header once, `count` rows.
    let out = env.zpool(&["iostat", "tank", "0.2", "3"]).ok().stdout;
    assert!(out.starts_with(HEADER), "{out}");
    assert_eq!(out[HEADER.len()..].lines().filter(|l| l.starts_with("tank ")).count(), 3, "{out}");
    assert_eq!(out.matches("capacity").count(), 1, "{out}");
    // -v repeats the header before every report.
    let out = env.zpool(&["iostat", "-v", "tank", "0.2", "2"]).ok().stdout;
    assert_eq!(out.matches("capacity").count(), 2, "{out}");
    // -y: no since-import report, still `count` reports of the interval.
    let out = env.zpool(&["iostat", "-y", "tank", "0.2", "2"]).ok().stdout;
    assert_eq!(out[HEADER.len()..].lines().count(), 2, "{out}");
    // Datasets created while a report's interval runs are written by a txg sync (at
    // most TXG_TIMEOUT_S = 5 s after they dirtied the pool), so a 6 s report shows
    // write operations.
    let writer = {
        let env_dir = env.path().to_path_buf();
        let bin = env!("CARGO_BIN_EXE_tarn");
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut i = 0;
            while start.elapsed() < std::time::Duration::from_millis(6500) {
                let ds = format!("tank/fs{i}");
                let st = std::process::Command::new(bin)
                    .args(["zfs", "create", &ds])
                    .current_dir(&env_dir)
                    .env("TARN_SOCKET", env_dir.join("tarn.sock"))
                    .env("TARN_STATE_DIR", env_dir.join("state"))
                    .output()
                    .unwrap();
                assert!(st.status.success(), "{st:?}");
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            i
        })
    };
    let out = env.zpool(&["iostat", "-Hpy", "tank", "6", "1"]).ok().stdout;
    let created = writer.join().unwrap();
    assert!(created > 0);
    let writes: Vec<u64> = out.lines().map(|l| fields(l).1[3]).collect();
    assert_eq!(writes.len(), 1, "{out}");
    assert!(writes[0] > 0, "no writes seen while creating {created} datasets: {out}");
}

#[test]
fn bad_input_is_refused() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    let o = env.zpool(&["iostat", "tank", "abc"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr
            .starts_with("Expected either a list of pools, or list of vdevs in \"tank\", but got:\n\tabc (unknown)\n\nusage:\n\tiostat "),
        "{o:?}"
    );
    let o = env.zpool(&["iostat", "abc"]);
    assert_eq!((o.code, o.stderr.as_str()), (1, "Unable to parse pools/vdevs list.\n\n"), "{o:?}");
    let o = env.zpool(&["iostat", "tank", "0"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.starts_with("interval cannot be zero\nusage:\n"), "{o:?}");
    let o = env.zpool(&["iostat", "-x", "tank"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.starts_with("invalid option 'x'\nusage:\n"), "{o:?}");
    // A negative interval is an option to getopt, as in OpenZFS.
    let o = env.zpool(&["iostat", "tank", "-1"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.starts_with("invalid option '1'\n"), "{o:?}");
    // Nothing printed on stdout for any of them.
    assert!(o.stdout.is_empty());
}
