//! End-to-end: the daemon's resident memory stays under its documented bound (issue
//! 14): `arc_max` + the pool's dirty-data limit + the fixed overhead of
//! `tarn_cli::memory` (plus the ARC's and the L2ARC's header bytes, `hdr_size` and
//! `l2_hdr_size` in the arcstats).
//!
//! How: a private daemon started with `TARN_ARC_MAX=64M` and `TARN_CACHE_MAX=256M`
//! (dirty limit a quarter of it, 64 MiB), one pool on a file vdev mounted through FUSE,
//! and a mixed workload through the mount: a sequential write of 256 MiB (4× `arc_max`)
//! with an fsync, an export and import, a sequential `O_DIRECT` read of it, random 8 KiB `O_DIRECT` reads and
//! random 8 KiB overwrites, then 3,000 small files written by 4 threads and read back.
//! The daemon's `VmHWM` (the peak resident set since it started, from
//! `/proc/PID/status`, pid from `daemon.pid`) must be under the bound at the end, and
//! so must `VmRSS`, sampled every 50 ms (which also says in which phase the peak fell). It checks
//! memory, never speed. Skipped, with a message, when FUSE is not usable here.

mod common;
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;
const ARC_MAX_BYTES: u64 = 64 * MIB;
const CACHE_MAX_BYTES: u64 = 256 * MIB;
const DATA_BYTES: u64 = 4 * ARC_MAX_BYTES;

/// `VmRSS` or `VmHWM` (`field`) of process `pid`, bytes.
fn status_bytes(pid: i32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// A page-aligned buffer of `len` bytes inside `v` (for `O_DIRECT`).
fn aligned(v: &mut Vec<u8>, len: usize) -> &mut [u8] {
    v.resize(len + 4096, 0);
    let off = v.as_ptr().align_offset(4096);
    &mut v[off..off + len]
}

fn open_direct(p: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(p).unwrap()
}

/// Deterministic offsets: `n` multiples of `step` below `limit`.
fn offsets(n: usize, step: u64, limit: u64, seed: u64) -> Vec<u64> {
    xorshift(seed).take(n).map(|x| (x % (limit / step)) * step).collect()
}

/// The arcstats of the running daemon, by name.
fn arcstat(env: &Env, name: &str) -> u64 {
    let out = env.tarn(&["kstat", "arcstats"]).ok().stdout;
    out.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[0] == name).then(|| f[2].parse().unwrap())
        })
        .unwrap_or(0)
}

#[test]
fn daemon_rss_stays_under_arc_max_plus_dirty_limit_plus_overhead() {
    if !fuse_usable("daemon_rss_stays_under_arc_max_plus_dirty_limit_plus_overhead") {
        return;
    }
    let env = Env::new();
    // The first command starts the daemon with these budgets.
    let mut start = env.command(&["daemon"]);
    start
        .env("TARN_ARC_MAX", ARC_MAX_BYTES.to_string())
        .env("TARN_CACHE_MAX", CACHE_MAX_BYTES.to_string());
    run(start).ok();
    let pid: i32 = std::fs::read_to_string(env.state().join("daemon.pid")).unwrap().trim().parse().unwrap();
    env.make_vdev("a", 2 << 30);
    let mnt = env.path().join("mnt");
    env.zpool(&["create", "-m", mnt.to_str().unwrap(), "tank", "v/a"]).ok();
    assert_eq!(arcstat(&env, "c_max"), ARC_MAX_BYTES);

    // Sample VmRSS with the phase it was seen in.
    let phase = Arc::new(Mutex::new("setup"));
    let peaks: Arc<Mutex<Vec<(&'static str, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (phase, peaks, stop) = (phase.clone(), peaks.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let rss = status_bytes(pid, "VmRSS:");
                let p = *phase.lock().unwrap();
                let mut v = peaks.lock().unwrap();
                match v.iter_mut().find(|(n, _)| *n == p) {
                    Some(e) => e.1 = e.1.max(rss),
                    None => v.push((p, rss)),
                }
                drop(v);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let set_phase = |p: &'static str| *phase.lock().unwrap() = p;

    // Sequential write, 1 MiB at a time, of incompressible data.
    set_phase("seq write");
    let data = mnt.join("data");
    {
        let chunk = xorshift_bytes(MIB as usize, 7);
        let mut f = std::fs::File::create(&data).unwrap();
        for i in 0..DATA_BYTES / MIB {
            let mut c = chunk.clone();
            c[..8].copy_from_slice(&i.to_le_bytes());
            f.write_all(&c).unwrap();
        }
        f.sync_all().unwrap();
    }

    // Export and import: the pool's buffers go back to the allocator, and the mount's
    // FUSE workers allocate their request buffers again from what they left.
    set_phase("export/import");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", env.vdir().to_str().unwrap(), "tank"]).ok();

    // Sequential read around the page cache.
    set_phase("seq read");
    {
        let mut f = open_direct(&data);
        let mut v = Vec::new();
        let buf = aligned(&mut v, MIB as usize);
        for i in 0..DATA_BYTES / MIB {
            f.read_exact(buf).unwrap();
            assert_eq!(buf[..8], i.to_le_bytes(), "block {i} read back wrong");
        }
    }

    // Random 8 KiB reads and overwrites.
    set_phase("random 8K");
    {
        let r = open_direct(&data);
        let w = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
        let mut v = Vec::new();
        let buf = aligned(&mut v, 8192);
        let patch = xorshift_bytes(8192, 11);
        for (i, (ro, wo)) in offsets(3000, 8192, DATA_BYTES, 3)
            .into_iter()
            .zip(offsets(3000, 8192, DATA_BYTES, 5))
            .enumerate()
        {
            r.read_exact_at(buf, ro).unwrap();
            w.write_all_at(&patch, wo).unwrap();
            if i % 500 == 499 {
                w.sync_data().unwrap();
            }
        }
        w.sync_all().unwrap();
    }

    // Many small files from 4 threads, then read back.
    set_phase("small files");
    let dir = mnt.join("small");
    std::fs::create_dir(&dir).unwrap();
    let small = |dir: PathBuf, t: u64| {
        std::thread::spawn(move || {
            for n in 0..750u64 {
                let p = dir.join(format!("t{t}-{n}"));
                let mut f = std::fs::File::create(&p).unwrap();
                f.write_all(&xorshift_bytes(8192, t * 1000 + n + 1)).unwrap();
            }
        })
    };
    let workers: Vec<_> = (0..4).map(|t| small(dir.clone(), t)).collect();
    for w in workers {
        w.join().unwrap();
    }
    env.zpool(&["sync", "tank"]).ok();
    for t in 0..4u64 {
        for n in (0..750u64).step_by(7) {
            let mut f = open_direct(&dir.join(format!("t{t}-{n}")));
            let mut v = Vec::new();
            let buf = aligned(&mut v, 8192);
            f.seek(SeekFrom::Start(0)).unwrap();
            f.read_exact(buf).unwrap();
            assert_eq!(buf, &xorshift_bytes(8192, t * 1000 + n + 1)[..], "small file t{t}-{n}");
        }
    }

    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    // VmHWM is the kernel's record; a sample can read a little above it (per-thread
    // RSS counters are folded in lazily), so the larger of the two is checked.
    let sampled = peaks.lock().unwrap().iter().map(|p| p.1).max().unwrap_or(0);
    let hwm = status_bytes(pid, "VmHWM:").max(sampled);
    let (hdr, l2hdr) = (arcstat(&env, "hdr_size"), arcstat(&env, "l2_hdr_size"));
    let dirty_limit = CACHE_MAX_BYTES / 4;
    let overhead = tarn_cli::memory::overhead_bytes(1);
    let bound = ARC_MAX_BYTES + dirty_limit + overhead + hdr + l2hdr;
    let mut report = format!(
        "VmHWM {:.1} MiB; bound {:.1} MiB = arc_max {} + dirty limit {} + overhead {:.1} + hdr_size {:.1} + l2_hdr_size {:.1} MiB\n",
        hwm as f64 / MIB as f64,
        bound as f64 / MIB as f64,
        ARC_MAX_BYTES / MIB,
        dirty_limit / MIB,
        overhead as f64 / MIB as f64,
        hdr as f64 / MIB as f64,
        l2hdr as f64 / MIB as f64
    );
    for (p, rss) in peaks.lock().unwrap().iter() {
        report += &format!("  largest VmRSS during {p}: {:.1} MiB\n", *rss as f64 / MIB as f64);
    }
    eprint!("{report}");
    assert!(hwm > 0, "no VmHWM for pid {pid}");
    assert!(hwm <= bound, "the daemon's peak resident memory is over its bound:\n{report}");
}
