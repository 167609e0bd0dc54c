//! End-to-end: the ARC's command-line surface. `tarn kstat arcstats` prints the
//! OpenZFS arcstats names in the SPL kstat text form; `tarn arcstat [-f fields]
//! [interval [count]]` prints arcstat's default columns or the ones asked for; `tarn daemon --set` changes
//! `arc_max`/`arc_min`/`arc_policy` at run time (seen in `c_max`, `c`), and refuses bad
//! settings without changing anything; `primarycache` and `secondarycache` are
//! dataset properties with OpenZFS's values and wording.

mod common;
use common::*;
use std::collections::HashMap;

const MB: u64 = 1 << 20;

/// Names a script written for OpenZFS's arcstats may rely on.
const NAMES: &[&str] = &[
    "hits",
    "misses",
    "demand_data_hits",
    "demand_data_misses",
    "demand_metadata_hits",
    "demand_metadata_misses",
    "prefetch_data_hits",
    "prefetch_data_misses",
    "prefetch_metadata_hits",
    "prefetch_metadata_misses",
    "mru_hits",
    "mru_ghost_hits",
    "mfu_hits",
    "mfu_ghost_hits",
    "p",
    "c",
    "c_min",
    "c_max",
    "size",
    "data_size",
    "metadata_size",
    "mru_size",
    "mfu_size",
    "mru_ghost_size",
    "mfu_ghost_size",
    "memory_available_bytes",
    "demand_hit_predictive_prefetch",
];

fn kstat(env: &Env) -> HashMap<String, i64> {
    let out = env.tarn(&["kstat", "arcstats"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0].split_whitespace().count(), 7, "kstat header: {out}");
    assert_eq!(lines[1], "name                            type data");
    lines[2..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "{l:?}");
            assert!(f[1] == "4" || f[1] == "3", "{l:?}");
            (f[0].to_string(), f[2].parse::<i64>().unwrap())
        })
        .collect()
}

#[test]
fn kstat_arcstat_tunables_and_primarycache() {
    let env = Env::new();
    let a = env.make_vdev("a", 128 * MB);
    env.zpool(&["create", "-m", "none", "tank", &a]).ok();
    env.zfs(&["create", "tank/fs"]).ok();

    let k = kstat(&env);
    for n in NAMES {
        assert!(k.contains_key(*n), "arcstats lacks {n}");
    }
    assert!(k["hits"] + k["misses"] > 0, "creating a pool and a dataset read nothing through the ARC");
    assert!(k["size"] <= k["c"] && k["c"] <= k["c_max"] && k["c_min"] <= k["c"]);
    assert_eq!(k["size"], k["data_size"] + k["metadata_size"]);
    env.tarn(&["kstat", "zfetchstats"]).fails_with("no kstat 'zfetchstats'");

    // Tunables: arc_max lowered at run time is in force when the command returns.
    env.tarn(&["daemon", "--set", "arc_max=96M", "arc_min=32M"]).ok();
    let k = kstat(&env);
    assert_eq!((k["c_max"], k["c_min"]), ((96 * MB) as i64, (32 * MB) as i64));
    assert!(k["c"] <= k["c_max"] && k["size"] <= k["c"]);
    env.tarn(&["daemon", "--set", "zfs_arc_max=80M"]).ok();
    assert_eq!(kstat(&env)["c_max"], (80 * MB) as i64);
    // An arc_max under arc_min alone lowers arc_min to half of it (OpenZFS arc_init).
    env.tarn(&["daemon", "--set", "arc_min=80M"]).ok();
    env.tarn(&["daemon", "--set", "arc_max=70M"]).ok();
    let k = kstat(&env);
    assert_eq!((k["c_max"], k["c_min"]), ((70 * MB) as i64, (35 * MB) as i64));
    env.tarn(&["daemon", "--set", "arc_max=80M", "arc_min=32M"]).ok();
    // Refused settings change nothing, even the valid ones beside them.
    env.tarn(&["daemon", "--set", "arc_min=40M", "arc_max=1M"]).fails_with("must be at least");
    env.tarn(&["daemon", "--set", "arc_min=100M"]).fails_with("must not exceed arc_max");
    env.tarn(&["daemon", "--set", "arc_max=lots"]).fails_with("bad size 'lots'");
    env.tarn(&["daemon", "--set", "arc_policy=random"]).fails_with("not one of 'arc | lru | fifo'");
    env.tarn(&["daemon", "--set", "arc_sys_free=1G"]).fails_with("unknown tunable 'arc_sys_free'");
    env.tarn(&["daemon", "--set", "arc_max"]).fails_with("expected NAME=VALUE");
    // The L2ARC's feed sizes (their effect: zio's tests/l2arc_tunables.rs).
    env.tarn(&["daemon", "--set", "l2arc_write_max=16M", "l2arc_write_boost=0"]).ok();
    env.tarn(&["daemon", "--set", "l2arc_write_max=lots"]).fails_with("bad size 'lots'");
    // Compressed ARC on by default; 0 caches blocks decompressed (effect: zio's
    // tests/l2arc.rs `compressed_blocks_stay_compressed_in_the_arc_and_the_l2arc`).
    env.tarn(&["daemon", "--set", "compressed_arc_enabled=0"]).ok();
    env.tarn(&["daemon", "--set", "compressed_arc_enabled=yes"]).fails_with("is not 0 or 1");
    env.tarn(&["daemon", "--set", "compressed_arc_enabled=1"]).ok();
    let k = kstat(&env);
    assert_eq!((k["c_max"], k["c_min"]), ((80 * MB) as i64, (32 * MB) as i64));

    // arcstat: the header, then one line per report with every column.
    let out = env.tarn(&["arcstat", "1", "2"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["time", "read", "miss", "miss%", "dmis", "dm%", "pmis", "pm%", "mmis", "mm%", "size", "c", "avail"]
    );
    assert_eq!(lines[0], "    time  read  miss  miss%  dmis  dm%  pmis  pm%  mmis  mm%   size      c  avail");
    for l in &lines[1..] {
        assert_eq!(l.split_whitespace().count(), 13, "{l:?}");
    }
    assert!(lines[2].split_whitespace().nth(11).unwrap().ends_with('M'), "c of 80M: {}", lines[2]);
    let bad = env.tarn(&["arcstat", "0"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("Usage: tarn arcstat [-f field[,field]...] [interval [count]]"));
    // -f: arcstat's field names; unknown ones and L2ARC fields without an L2ARC are
    // refused in arcstat's words.
    let out = env.tarn(&["arcstat", "-f", "time,hits,hit%,size", "1", "1"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "    time  hits  hit%   size", "{out}");
    assert_eq!(lines.len(), 2, "{out}");
    let bad = env.tarn(&["arcstat", "-f", "time,bogus", "1", "1"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.starts_with("Invalid column definition! -- ['bogus']\n"), "{bad:?}");
    let bad = env.tarn(&["arcstat", "-f", "time,l2hits", "1", "1"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert_eq!(bad.stdout, "No L2ARC Here\nl2hits\n");
    assert!(bad.stderr.starts_with("Incompatible field specified! -- ['l2hits']\n"), "{bad:?}");

    // primarycache: OpenZFS's values, inherited, refused values change nothing.
    env.zfs(&["set", "primarycache=metadata", "tank"]).ok();
    let got = env.zfs(&["get", "-H", "-o", "value,source", "primarycache", "tank/fs"]).ok().stdout;
    assert_eq!(got, "metadata\tinherited from tank\n");
    env.zfs(&["set", "primarycache=some", "tank/fs"])
        .fails_with("'primarycache' must be one of 'all | none | metadata'");
    env.zfs(&["set", "secondarycache=metadata", "tank/fs"]).ok();
    let got = env.zfs(&["get", "-H", "-o", "value,source", "secondarycache", "tank/fs"]).ok().stdout;
    assert_eq!(got, "metadata\tlocal\n");
    env.zfs(&["set", "secondarycache=ssd", "tank/fs"])
        .fails_with("'secondarycache' must be one of 'all | none | metadata'");
    env.zfs(&["inherit", "primarycache", "tank"]).ok();
    let got = env.zfs(&["get", "-H", "-o", "value,source", "primarycache", "tank/fs"]).ok().stdout;
    assert_eq!(got, "all\tdefault\n");
}
