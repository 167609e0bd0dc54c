//! The intent log end to end, in process: POSIX changes acknowledged by `fsync` survive
//! a power cut that no txg sync followed, replay applies each record exactly once even
//! when it is itself cut short, and a random workload always recovers to a state it
//! really passed through, no older than its last acknowledged `fsync`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};
use tarn_zpl::{Fs, SetAttr, ZplOptions};

mod common;
use common::Rng;

type Snapshot = BTreeMap<String, Vec<u8>>;

fn make_pool(dir: &Path, name: &str) -> Arc<Pool> {
    let mk = |n: &str| {
        let p = dir.join(n);
        std::fs::File::create(&p).unwrap().set_len(96 << 20).unwrap();
        p
    };
    let spec = CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Mirror(vec![mk("a"), mk("b")])],
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: false,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    };
    Pool::create(&spec).unwrap()
}

fn mount(pool: &Pool, name: &str) -> (Arc<Fs>, tarn_zpl::ReplayStats) {
    Fs::open_logged(pool.objset(name).unwrap(), pool.zilog(name).unwrap(), ZplOptions::default()).unwrap()
}

/// Every path (directories end in '/') with its content.
fn snapshot(fs: &Fs) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack = vec![(fs.root(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut cursor = 0;
        loop {
            let ents = fs.readdir(dir, cursor, 128).unwrap();
            if ents.is_empty() {
                break;
            }
            for e in &ents {
                cursor = e.next_cursor;
                let name = String::from_utf8(e.name.clone()).unwrap();
                if name == "." || name == ".." {
                    continue;
                }
                let path = format!("{prefix}{name}");
                let attr = fs.getattr(e.ino).unwrap();
                if attr.kind == tarn_zpl::FileKind::Dir {
                    out.insert(format!("{path}/"), Vec::new());
                    stack.push((e.ino, format!("{path}/")));
                } else if attr.kind == tarn_zpl::FileKind::Symlink {
                    out.insert(path, fs.readlink(e.ino).unwrap());
                } else {
                    let mut data = fs.read(e.ino, 0, attr.size as u32).unwrap();
                    data.extend_from_slice(format!("|mode {:o}", attr.perm).as_bytes());
                    out.insert(path, data);
                }
            }
        }
    }
    out
}

/// Abandon `pool` with every device write from now on dropped, as if the power went.
fn crash(pool: Arc<Pool>, fs: Option<Arc<Fs>>, prefix: &str, writes_before_cut: u64) {
    tarn_vdev::inject::power_cut_after(prefix, writes_before_cut);
    drop(fs);
    common::abandon(pool, prefix);
}

fn lookup(fs: &Fs, dir: u64, name: &str) -> u64 {
    fs.lookup(dir, name.as_bytes()).unwrap().ino
}

#[test]
fn fsynced_namespace_and_data_changes_survive_a_power_cut() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilbasic");
    let (fs, _) = mount(&pool, "zilbasic");
    let root = fs.root();
    // The first commit creates the chain (one txg sync); everything after rides the log.
    let keep = fs.create(root, b"keep", 0o644, 0, 0).unwrap().ino;
    fs.write(keep, 0, b"before").unwrap();
    fs.fsync(keep).unwrap();
    let synced_before = pool.synced_txg();

    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &vec![7u8; 100_000]).unwrap();
    let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
    let b = fs.create(sub, b"b", 0o600, 0, 0).unwrap().ino;
    fs.write(b, 0, b"hello world").unwrap();
    fs.rename(sub, b"b", sub, b"c", 0).unwrap();
    fs.link(b, root, b"c-link").unwrap();
    fs.symlink(root, b"sym", b"sub/c", 0, 0).unwrap();
    fs.setattr(
        a,
        SetAttr {
            size: Some(50_000),
            mode: Some(0o640),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(keep, 6, b" and after").unwrap();
    let gone = fs.create(root, b"gone", 0o644, 0, 0).unwrap().ino;
    fs.write(gone, 0, b"x").unwrap();
    fs.unlink(root, b"gone").unwrap();
    let e = fs.mkdir(root, b"empty", 0o755, 0, 0).unwrap().ino;
    let _ = e;
    fs.rmdir(root, b"empty").unwrap();
    fs.fsync(a).unwrap();
    let expect = snapshot(&fs);
    let commits = pool.zilog("zilbasic").unwrap().stats.commits.load(std::sync::atomic::Ordering::Relaxed);
    assert!(commits >= 2, "{commits} log commits");
    // The fsync did not need a txg: the changes are in the log only.
    assert!(
        pool.synced_txg() <= synced_before + 1,
        "fsync forced txg syncs: {synced_before} -> {}",
        pool.synced_txg()
    );
    crash(pool, Some(fs), &prefix, 0);

    let pool = Pool::import("zilbasic", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilbasic");
    assert!(stats.applied >= 10, "replay applied {stats:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    assert_eq!(fs.getattr(lookup(&fs, root, "c-link")).unwrap().nlink, 2);
    assert_eq!(fs.readlink(lookup(&fs, root, "sym")).unwrap(), b"sub/c");
    // The log is discarded after replay: a second crash and import replays nothing.
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("zilbasic", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilbasic");
    assert_eq!(stats.applied, 0, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn replay_cut_short_then_repeated_applies_every_record_once() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilidem");
    let (fs, _) = mount(&pool, "zilidem");
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.fsync(f).unwrap();
    // Non-idempotent sequences: the same name created, removed and created again,
    // renames that chain, appends.
    for i in 0..40u32 {
        let n = format!("n{}", i % 3);
        match i % 4 {
            0 => {
                let ino = fs.create(root, n.as_bytes(), 0o644, 0, 0).map(|a| a.ino);
                if let Ok(ino) = ino {
                    fs.write(ino, 0, format!("gen{i}").as_bytes()).unwrap();
                }
            }
            1 => {
                let _ = fs.rename(root, n.as_bytes(), root, format!("r{i}").as_bytes(), 0);
            }
            2 => {
                let _ = fs.unlink(root, format!("r{}", i - 1).as_bytes());
            }
            _ => {
                let size = fs.getattr(f).unwrap().size;
                fs.write(f, size, format!("<{i}>").as_bytes()).unwrap();
            }
        }
    }
    fs.fsync(f).unwrap();
    let expect = snapshot(&fs);
    crash(pool, Some(fs), &prefix, 0);
    // Replay, cut off after a few device writes, several times over.
    for cut in [2u64, 5, 9, 15] {
        let pool = Pool::import("zilidem", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
        tarn_vdev::inject::power_cut_after(&prefix, cut);
        let opened = Fs::open_logged(pool.objset("zilidem").unwrap(), pool.zilog("zilidem").unwrap(), ZplOptions::default());
        crash(pool, opened.ok().map(|(fs, _)| fs), &prefix, 0);
    }
    let pool = Pool::import("zilidem", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilidem");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    pool.export().unwrap();
}

/// One random run: returns whether the cut fell inside the workload.
fn random_run(seed: u64) -> bool {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let name = format!("zilrand{seed}");
    let pool = make_pool(&dir, &name);
    let (fs, _) = mount(&pool, &name);
    let root = fs.root();
    let mut rng = Rng(seed | 1);
    let dirs = [
        root,
        fs.mkdir(root, b"d1", 0o755, 0, 0).unwrap().ino,
        fs.mkdir(root, b"d2", 0o755, 0, 0).unwrap().ino,
    ];
    fs.fsync(root).unwrap();
    let cut = tarn_vdev::inject::power_cut_after(&prefix, 1 + rng.below(16));
    let mut snaps = vec![snapshot(&fs)];
    let mut acked = 0usize;
    let pick_name = |rng: &mut Rng| format!("f{}", rng.below(12));
    for _ in 0..80 {
        let dirx = dirs[rng.below(3) as usize];
        let n = pick_name(&mut rng);
        let r = match rng.below(10) {
            0 | 1 => fs.create(dirx, n.as_bytes(), 0o644, 0, 0).map(|_| ()),
            2..=4 => match fs.lookup(dirx, n.as_bytes()) {
                // Appends only: a record fetched at commit time never sees later bytes.
                Ok(a) if a.kind == tarn_zpl::FileKind::File => {
                    let len = 1 + rng.below(20_000) as usize;
                    let fill = rng.next() as u8;
                    fs.write(a.ino, a.size, &vec![fill; len]).map(|_| ())
                }
                _ => Ok(()),
            },
            5 => fs.unlink(dirx, n.as_bytes()),
            6 => {
                let to = dirs[rng.below(3) as usize];
                fs.rename(dirx, n.as_bytes(), to, pick_name(&mut rng).as_bytes(), 0)
            }
            7 => match fs.lookup(dirx, n.as_bytes()) {
                Ok(a) => fs.link(a.ino, dirs[rng.below(3) as usize], pick_name(&mut rng).as_bytes()).map(|_| ()),
                Err(e) => Err(e),
            },
            8 => match fs.lookup(dirx, n.as_bytes()) {
                Ok(a) => fs
                    .setattr(
                        a.ino,
                        SetAttr {
                            mode: Some(0o600 + rng.below(0o100) as u32),
                            ..Default::default()
                        },
                    )
                    .map(|_| ()),
                Err(e) => Err(e),
            },
            _ => {
                let r = fs.fsync(root);
                if r.is_ok() && cut.dropped_writes() == 0 {
                    acked = snaps.len() - 1;
                }
                r
            }
        };
        match r {
            Ok(()) => snaps.push(snapshot(&fs)),
            Err(tarn_zpl::ZplError::Io(_)) if cut.dropped_writes() > 0 => break,
            Err(_) => {} // expected failures (exists, not found) change nothing
        }
    }
    let happened = cut.dropped_writes() > 0;
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import(&name, &[PathBuf::from(&dir)], Rewind::None, None).unwrap_or_else(|e| panic!("seed {seed}: import: {e}"));
    let (fs, stats) = mount(&pool, &name);
    assert_eq!(stats.failed, 0, "seed {seed}: {stats:?}");
    let got = snapshot(&fs);
    let at = snaps.iter().rposition(|s| *s == got);
    match at {
        Some(i) => assert!(i >= acked, "seed {seed}: recovered state {i} is older than the acknowledged {acked}"),
        None => {
            let brief = |s: &Snapshot| -> Vec<String> {
                s.iter()
                    .map(|(k, v)| format!("{k}:{}:{}", v.len(), String::from_utf8_lossy(&v[v.len().saturating_sub(9)..])))
                    .collect()
            };
            let differs = |i: usize| brief(&snaps[i]).iter().filter(|l| !brief(&got).contains(l)).count();
            let nearest = (acked..snaps.len()).min_by_key(|&i| differs(i)).unwrap();
            for (i, snap) in snaps.iter().enumerate().skip(acked) {
                let (a, b) = (brief(snap), brief(&got));
                let missing: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
                let extra: Vec<&String> = b.iter().filter(|l| !a.contains(l)).collect();
                eprintln!("snap {i}: got lacks {missing:?}, got has extra {extra:?}");
            }
            panic!(
                "seed {seed}: recovered a state the workload never passed through ({} snapshots, acked {acked}, nearest {nearest})\ngot:     {:?}\nnearest: {:?}\nnext:    {:?}",
                snaps.len(),
                brief(&got),
                brief(&snaps[nearest]),
                snaps.get(nearest + 1).map(brief)
            )
        }
    }
    drop(fs);
    pool.export().unwrap();
    happened
}

#[test]
fn random_workload_recovers_a_real_state_no_older_than_the_last_fsync() {
    let n: u64 = std::env::var("TARN_ZIL_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let base: u64 = std::env::var("TARN_ZIL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_2026);
    let mut mid = 0;
    for i in 0..n {
        if random_run(base.wrapping_add(i * 7919)) {
            mid += 1;
        }
    }
    eprintln!("{mid} of {n} cuts fell inside the workload");
    assert!(mid * 2 >= n, "only {mid} of {n} cuts fell inside the workload");
}

#[test]
fn log_blocks_and_indirect_data_are_freed_once_synced() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let pool = make_pool(&dir, "zilfree");
    let (fs, _) = mount(&pool, "zilfree");
    let root = fs.root();
    let f0 = fs.create(root, b"warm", 0o644, 0, 0).unwrap().ino;
    fs.fsync(f0).unwrap();
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    let before = pool.alloc_bytes();
    for i in 0..40u32 {
        let f = fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        // Both kinds of write record: copied (small) and indirect (over 32 KiB).
        fs.write(f, 0, &vec![i as u8; 1000]).unwrap();
        fs.write(f, 1000, &vec![i as u8; 100_000]).unwrap();
        fs.fsync(f).unwrap();
    }
    let zl = pool.zilog("zilfree").unwrap();
    assert!(zl.stats.lwbs_written.load(std::sync::atomic::Ordering::Relaxed) >= 40);
    drop(zl);
    // The live chain and its indirect data are allocated, and the leak check counts
    // them: no sync since the fsyncs, so they are named by the log alone.
    let r = pool.leak_check().unwrap();
    assert!(r.zil_blocks > 0 && r.zil_bytes > 0, "{r:?}");
    for i in 0..40u32 {
        fs.unlink(root, format!("f{i}").as_bytes()).unwrap();
    }
    fs.fsync(root).unwrap();
    // Deferred frees need TXG_DEFER_SIZE more txgs.
    for _ in 0..8 {
        pool.sync().unwrap();
    }
    let after = pool.alloc_bytes();
    assert!(
        after <= before + (256 << 10),
        "allocation grew from {before} to {after} bytes: log blocks or indirect data leaked"
    );
    drop(fs);
    pool.export().unwrap();
}

/// A quiet chain (every block freed by txg syncs) still has a header naming its
/// pre-allocated tail, whose allocation is in the synced space map. Whoever opens the
/// pool from disk owns that tail with the rest of the chain: `zdb` beside the pool
/// counts it in the leak check, and an import after a power cut claims it and frees it
/// once replay retires the chain (issue 15: it was leaked, 16 KiB per crash).
#[test]
fn a_quiet_chains_tail_is_owned_after_import_and_freed_after_replay() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "ziltail");
    let (fs, _) = mount(&pool, "ziltail");
    let f = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"fsynced").unwrap();
    fs.fsync(f).unwrap();
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    assert!(!pool.zilog("ziltail").unwrap().header().is_empty(), "the chain lives on, quiet");
    pool.leak_check().unwrap();
    // As zdb sees it beside the pool.
    Pool::open_inspect("ziltail", std::slice::from_ref(&dir)).unwrap().leak_check().unwrap();
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("ziltail", std::slice::from_ref(&dir), Rewind::None, None).unwrap();
    pool.leak_check().unwrap();
    let (fs, _) = mount(&pool, "ziltail");
    assert_eq!(fs.read(f, 0, 64).unwrap(), b"fsynced");
    drop(fs);
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    pool.leak_check().unwrap();
    pool.export().unwrap();
}

fn make_pool_with_log(dir: &Path, name: &str, log_mirror: bool) -> Arc<Pool> {
    let mk = |n: &str| {
        let p = dir.join(n);
        std::fs::File::create(&p).unwrap().set_len(96 << 20).unwrap();
        p
    };
    let logs = if log_mirror {
        vec![TopSpec::Mirror(vec![mk("la"), mk("lb")])]
    } else {
        vec![TopSpec::Leaf(mk("la"))]
    };
    let spec = CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Mirror(vec![mk("a"), mk("b")])],
        logs,
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: false,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    };
    Pool::create(&spec).unwrap()
}

fn log_class_alloc(pool: &Pool) -> u64 {
    pool.zio().with_space(|s| s.class_alloc_bytes(tarn_metaslab::AllocClass::Log))
}

/// Write `n` files of `len` bytes with an fsync each; returns the expected snapshot.
fn fsynced_files(fs: &Fs, prefix: &str, n: u32, len: usize) -> Snapshot {
    let root = fs.root();
    for i in 0..n {
        let f = fs.create(root, format!("{prefix}{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, &vec![(i as u8).wrapping_add(1); len]).unwrap();
        fs.fsync(f).unwrap();
    }
    snapshot(fs)
}

#[test]
fn slog_takes_the_log_blocks_and_replays_after_a_power_cut() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool_with_log(&dir, "zilslog", true);
    let (fs, _) = mount(&pool, "zilslog");
    let normal_before = pool.alloc_bytes();
    // Large writes too: with a SLOG and logbias=latency they are copied into the log.
    let expect = fsynced_files(&fs, "s", 20, 100_000);
    assert!(log_class_alloc(&pool) > 0, "no log block on the log vdev");
    // The log vdev's space is exactly the chain's blocks.
    let r = pool.leak_check().unwrap();
    assert!(r.zil_bytes >= log_class_alloc(&pool), "{r:?}");
    // The main pool took only the chain's first txg, not the 2 MB of file data.
    assert!(pool.alloc_bytes() < normal_before + (1 << 20), "{normal_before} -> {}", pool.alloc_bytes());
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("zilslog", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    // The claimed chain is the log's until replay retires it.
    let r = pool.leak_check().unwrap();
    assert!(r.zil_blocks > 0, "{r:?}");
    let (fs, stats) = mount(&pool, "zilslog");
    assert!(stats.applied >= 40, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    // After replay and export nothing is left on the log vdev.
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    assert_eq!(log_class_alloc(&pool), 0);
    pool.leak_check().unwrap();
    pool.export().unwrap();
}

#[test]
fn failing_slog_falls_back_to_the_main_pool_without_losing_fsyncs() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool_with_log(&dir, "zilfail", false);
    let (fs, _) = mount(&pool, "zilfail");
    fsynced_files(&fs, "before", 3, 5000);
    // Every write and flush to the log device now fails.
    let la = pool.leaf_devices().into_iter().find(|l| l.path.ends_with("/la")).unwrap();
    let h = pool
        .inject(
            la.guid,
            tarn_spa::inject::IoType::All,
            tarn_spa::inject::Action::Fault(tarn_spa::inject::Fault::Io),
            tarn_vdev::inject::FREQ_ALWAYS_PPM,
        )
        .unwrap();
    let expect = fsynced_files(&fs, "after", 10, 5000);
    let zl = pool.zilog("zilfail").unwrap();
    assert!(
        zl.stats.fallbacks.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "the failed log write was not noticed"
    );
    drop(zl);
    assert!(tarn_spa::inject::clear(h));
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("zilfail", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, _) = mount(&pool, "zilfail");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn removing_a_slog_with_a_live_chain_keeps_every_change() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool_with_log(&dir, "zilrm", false);
    let (fs, _) = mount(&pool, "zilrm");
    fsynced_files(&fs, "a", 5, 3000);
    assert!(log_class_alloc(&pool) > 0);
    pool.remove_vdev(&dir.join("la").display().to_string()).unwrap();
    // The log goes on in the main pool; a crash right after loses nothing.
    let expect = fsynced_files(&fs, "b", 5, 3000);
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("zilrm", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilrm");
    assert!(stats.applied >= 5, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn missing_slog_at_import_needs_m_and_reports_what_may_be_lost() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool_with_log(&dir, "zilgone", false);
    let (fs, _) = mount(&pool, "zilgone");
    let durable = fsynced_files(&fs, "d", 2, 1000);
    for _ in 0..2 {
        pool.sync().unwrap();
    }
    fsynced_files(&fs, "l", 3, 1000);
    crash(pool, Some(fs), &prefix, 0);
    std::fs::remove_file(dir.join("la")).unwrap();
    assert!(Pool::import("zilgone", &[PathBuf::from(&dir)], Rewind::None, None).is_err());
    let opts = tarn_spa::ImportOptions {
        rewind: Rewind::None,
        new_name: None,
        missing_log: true,
        readonly: false,
    };
    let pool = Pool::import_with("zilgone", &[PathBuf::from(&dir)], &opts).unwrap();
    let notes = pool.import_notes();
    assert!(
        notes.iter().any(|n| n.contains("intent log unreadable") && n.contains("may be lost")),
        "{notes:?}"
    );
    let (fs, _) = mount(&pool, "zilgone");
    // What a txg made durable is there; the log-only changes are gone with the device.
    assert_eq!(snapshot(&fs), durable);
    // The pool keeps working: new fsyncs go to the main pool.
    let more = fsynced_files(&fs, "m", 2, 1000);
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import_with("zilgone", &[PathBuf::from(&dir)], &opts).unwrap();
    let (fs, _) = mount(&pool, "zilgone");
    assert_eq!(snapshot(&fs), more);
    drop(fs);
    pool.export().unwrap();
}

/// `fallocate` hole punches and extensions are in the intent log: after an fsync and a
/// power cut, replay gives the punched ranges back as zeros (whole records and partial
/// edges), the grown sizes, and the untouched bytes around them.
#[test]
fn fsynced_punched_holes_survive_a_power_cut() {
    use tarn_zpl::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilpunch");
    let (fs, _) = mount(&pool, "zilpunch");
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(f, 0, &data).unwrap();
    fs.fsync(f).unwrap();
    pool.sync().unwrap();
    // A punch over two whole 128 KiB records and parts of their neighbours, a zeroed
    // range at the end of the file that grows it, and a mode-0 extension.
    fs.fallocate(f, 100_000, 300_000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap();
    fs.fallocate(f, 590_000, 20_000, FALLOC_FL_ZERO_RANGE).unwrap();
    let g = fs.create(root, b"g", 0o644, 0, 0).unwrap().ino;
    fs.fallocate(g, 0, 1 << 20, 0).unwrap();
    fs.fsync(f).unwrap();
    let mut want = data.clone();
    want[100_000..400_000].fill(0);
    want.resize(610_000, 0);
    want[590_000..].fill(0);
    assert_eq!(fs.read(f, 0, 700_000).unwrap(), want);
    crash(pool, Some(fs), &prefix, 0);

    let pool = Pool::import("zilpunch", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilpunch");
    assert_eq!(stats.failed, 0, "{stats:?}");
    // The punches, the create and the extension came back from the log, not a txg.
    assert!(stats.applied >= 4, "replay applied {stats:?}");
    let f = lookup(&fs, root, "f");
    assert_eq!(fs.getattr(f).unwrap().size, 610_000);
    assert_eq!(fs.read(f, 0, 700_000).unwrap(), want);
    assert_eq!(fs.getattr(lookup(&fs, root, "g")).unwrap().size, 1 << 20);
    drop(fs);
    pool.export().unwrap();
}

/// A punched hole gives its whole records back to the pool once the frees have aged
/// past the deferral; a snapshot taken before keeps them (they go to its dead list).
#[test]
fn punched_space_comes_back_unless_a_snapshot_holds_it() {
    use tarn_zpl::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "punchspace");
    let (fs, _) = mount(&pool, "punchspace");
    let root = fs.root();
    let write_file = |name: &[u8]| {
        let f = fs.create(root, name, 0o644, 0, 0).unwrap().ino;
        let data: Vec<u8> = (0..(8u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        fs.write(f, 0, &data).unwrap();
        f
    };
    let settle = || {
        for _ in 0..6 {
            pool.sync().unwrap();
        }
    };
    let a = write_file(b"a");
    settle();
    let before = pool.alloc_bytes();
    fs.fallocate(a, 1 << 20, 6 << 20, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap();
    settle();
    let freed = before - pool.alloc_bytes();
    // 6 MiB of incompressible data in whole 128 KiB records (a mirror's allocation
    // counts once, as in `zpool list`).
    assert!(freed >= 6 << 20, "punching 6 MiB freed {freed} bytes");

    let b = write_file(b"b");
    settle();
    pool.snapshot(&["punchspace@keep".to_string()], false).unwrap();
    settle();
    let before = pool.alloc_bytes();
    fs.fallocate(b, 1 << 20, 6 << 20, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).unwrap();
    settle();
    assert!(
        pool.alloc_bytes() + (1 << 20) >= before,
        "a snapshot's blocks were freed: {before} -> {}",
        pool.alloc_bytes()
    );
    drop(fs);
    pool.export().unwrap();
}

/// Concurrent `fsync`s while a log block is being flushed wait for it and then go out
/// together in the next block (group commit), instead of one block and flush each: with
/// 30 ms writes and flushes on both mirror sides, 4 threads × 8 fsyncs need fewer than 32
/// commits. Every acknowledged file survives a power cut.
#[test]
fn concurrent_fsyncs_share_log_blocks_and_survive_a_power_cut() {
    use tarn_spa::inject::{Action, Delay, IoType, FREQ_ALWAYS_PPM};
    // A write delay also delays flushes (zinject -D); there is no flush-only delay.
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilgroup");
    let (fs, _) = mount(&pool, "zilgroup");
    let root = fs.root();
    // The first commit starts the chain with a txg sync; time only what follows.
    let first = fs.create(root, b"first", 0o644, 0, 0).unwrap().ino;
    fs.fsync(first).unwrap();
    let slow_flush = Action::Delay(Delay::Fixed {
        latency: std::time::Duration::from_millis(30),
        lanes: 4,
    });
    let handlers: Vec<u64> = pool
        .leaf_devices()
        .iter()
        .map(|l| pool.inject(l.guid, IoType::Write, slow_flush, FREQ_ALWAYS_PPM).unwrap())
        .collect();
    let zl = pool.zilog("zilgroup").unwrap();
    let commits_before = zl.stats.commits.load(std::sync::atomic::Ordering::Relaxed);
    let (threads, per_thread) = (4u8, 8u8);
    let start = std::sync::Barrier::new(threads as usize);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (fs, start) = (&fs, &start);
            s.spawn(move || {
                start.wait();
                for k in 0..per_thread {
                    let ino = fs.create(root, format!("t{t}-{k}").as_bytes(), 0o644, 0, 0).unwrap().ino;
                    fs.write(ino, 0, &vec![t * 16 + k; 8192]).unwrap();
                    fs.fsync(ino).unwrap();
                }
            });
        }
    });
    let commits = zl.stats.commits.load(std::sync::atomic::Ordering::Relaxed) - commits_before;
    let fsyncs = u64::from(threads) * u64::from(per_thread);
    // One commit per fsync without group commit; how many share a block depends on
    // the threads' timing (17 commits were seen under a loaded test run), so the
    // bound only asks that a quarter of them were saved.
    assert!(commits <= fsyncs * 3 / 4, "{commits} log commits for {fsyncs} concurrent fsyncs");
    for id in handlers {
        assert!(tarn_vdev::inject::remove_handler(id));
    }
    drop(zl);
    let expect = snapshot(&fs);
    crash(pool, Some(fs), &prefix, 0);

    let pool = Pool::import("zilgroup", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilgroup");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    for t in 0..threads {
        for k in 0..per_thread {
            let ino = lookup(&fs, root, &format!("t{t}-{k}"));
            assert_eq!(fs.read(ino, 0, 8192).unwrap(), vec![t * 16 + k; 8192]);
        }
    }
    drop(fs);
    pool.export().unwrap();
}

/// A log block whose flush fails on one mirror side is still durable through the other
/// side (each side writes and flushes on its own); the fsync is acknowledged and the
/// change survives a power cut.
#[test]
fn a_log_block_flushed_by_one_mirror_side_survives_a_power_cut() {
    use tarn_spa::inject::{Action, Fault, IoType, FREQ_ALWAYS_PPM};
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilside");
    let (fs, _) = mount(&pool, "zilside");
    let root = fs.root();
    let first = fs.create(root, b"first", 0o644, 0, 0).unwrap().ino;
    fs.fsync(first).unwrap();
    let leaves = pool.leaf_devices();
    let bad = pool.inject(leaves[0].guid, IoType::Flush, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM).unwrap();
    let synced = pool.synced_txg();
    let zl = pool.zilog("zilside").unwrap();
    let fallbacks = zl.stats.fallbacks.load(std::sync::atomic::Ordering::Relaxed);
    let f = fs.create(root, b"one-side", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"flushed by b only").unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(zl.stats.fallbacks.load(std::sync::atomic::Ordering::Relaxed), fallbacks, "no txg fallback");
    assert!(pool.synced_txg() <= synced + 1, "the fsync rode the log");
    assert!(tarn_vdev::inject::remove_handler(bad));
    drop(zl);
    crash(pool, Some(fs), &prefix, 0);

    let pool = Pool::import("zilside", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilside");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(fs.read(lookup(&fs, root, "one-side"), 0, 64).unwrap(), b"flushed by b only");
    drop(fs);
    pool.export().unwrap();
}

/// Bytes written so far to the log device `la` of a `make_pool_with_log` pool.
fn log_leaf_write_bytes(pool: &Pool) -> u64 {
    let tops = pool.zio().vdevs();
    let leaf = tops
        .iter()
        .flat_map(|t| t.leaves())
        .find(|l| l.path().as_deref().is_some_and(|p| p.ends_with("/la")))
        .expect("the log leaf");
    leaf.stats().write_bytes.load(std::sync::atomic::Ordering::Relaxed)
}

/// The next log block is pre-allocated for the largest of the recent commits, so a
/// large commit after a small one still fits one block (one write and flush instead
/// of several blocks in parallel and a flush of every leaf); and a block is written
/// only up to its used part, so the room a small commit leaves empty costs no device
/// bytes.
#[test]
fn a_large_commit_after_a_small_one_fits_one_log_block() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool_with_log(&dir, "lwbsize", false);
    let (fs, _) = mount(&pool, "lwbsize");
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.fsync(f).unwrap();
    let zl = pool.zilog("lwbsize").unwrap();
    let lwbs = || zl.stats.lwbs_written.load(std::sync::atomic::Ordering::Relaxed);
    // Five 8 KiB writes, one commit of about 41 KiB of records.
    let large = |at: u64| {
        for i in 0..5u64 {
            fs.write(f, at + i * 8192, &[i as u8 + 1; 8192]).unwrap();
        }
        fs.fsync(f).unwrap();
    };
    large(0);
    // A small commit: about 8 KiB of records in a block sized for the large one.
    let (blocks, bytes) = (lwbs(), log_leaf_write_bytes(&pool));
    fs.write(f, 1 << 20, &[9u8; 8192]).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(lwbs() - blocks, 1, "a small commit is one block");
    let written = log_leaf_write_bytes(&pool) - bytes;
    assert!(written <= 12 << 10, "the small commit wrote {written} bytes: more than its used part");
    // The large one again: it fits the block pre-allocated after the small commit.
    let blocks = lwbs();
    large(2 << 20);
    assert_eq!(lwbs() - blocks, 1, "the large commit after a small one took more than one block");
    // Blocks written only in part replay whole: the log is the only copy of these.
    let expect = snapshot(&fs);
    drop(zl);
    crash(pool, Some(fs), &prefix, 0);
    let pool = Pool::import("lwbsize", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "lwbsize");
    assert!(stats.applied >= 11, "replay applied {stats:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(snapshot(&fs), expect);
    drop(fs);
    pool.export().unwrap();
}

/// Many log blocks between txg syncs, completed by several committers while syncs free
/// the chain's synced prefix: the chain bookkeeping (which blocks are done, which are
/// freed) keeps every acknowledged append. Three threads append 4 KiB records to their
/// own files with an `fsync` after each while another thread syncs a txg after every 30
/// of them, and the power is cut somewhere in the run; after import every file holds at
/// least the records acknowledged before the cut, each with its own bytes.
#[test]
fn fsyncs_across_txg_syncs_keep_every_acknowledged_append() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const RECORD_BYTES: u64 = 4096;
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "zilmany");
    let (fs, _) = mount(&pool, "zilmany");
    let root = fs.root();
    let threads = 3u8;
    let inos: Vec<u64> = (0..threads)
        .map(|t| fs.create(root, format!("t{t}").as_bytes(), 0o644, 0, 0).unwrap().ino)
        .collect();
    fs.fsync(root).unwrap();
    let lwbs_before = pool.zilog("zilmany").unwrap().stats.lwbs_written.load(Ordering::Relaxed);
    let synced_before = pool.synced_txg();
    let cut = tarn_vdev::inject::power_cut_after(&prefix, 900 + Rng(0x2026_1207).below(300));
    let acked: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (pool, done, cut, acked) = (&pool, &done, &cut, &acked);
        // A txg sync after every 30 acknowledged appends (not on a timer, so that a
        // slow machine spends no more of the write budget on syncs per log block).
        s.spawn(move || {
            let mut last = 0;
            while !done.load(Ordering::SeqCst) && cut.dropped_writes() == 0 {
                let n: u64 = acked.iter().map(|a| a.load(Ordering::SeqCst)).sum();
                if n >= last + 30 {
                    let _ = pool.sync();
                    last = n;
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let (fs, ino, acked) = (&fs, inos[t as usize], &acked[t as usize]);
                s.spawn(move || {
                    for k in 0..400u64 {
                        let fill = (u64::from(t) * 97 + k) as u8;
                        if fs.write(ino, k * RECORD_BYTES, &[fill; RECORD_BYTES as usize]).is_err() || fs.fsync(ino).is_err() {
                            break;
                        }
                        // Acknowledged while every write so far reached the device.
                        if cut.dropped_writes() > 0 {
                            break;
                        }
                        acked.store(k + 1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    let lwbs = pool.zilog("zilmany").unwrap().stats.lwbs_written.load(Ordering::Relaxed) - lwbs_before;
    assert!(lwbs >= 200, "only {lwbs} log blocks were written");
    let syncs = pool.synced_txg() - synced_before;
    assert!(syncs >= 3, "only {syncs} txgs synced while the log grew");
    assert!(
        acked.iter().all(|a| a.load(Ordering::SeqCst) > 0),
        "the cut came before any acknowledged append"
    );
    crash(pool, Some(fs), &prefix, 0);

    let pool = Pool::import("zilmany", &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    let (fs, stats) = mount(&pool, "zilmany");
    assert_eq!(stats.failed, 0, "{stats:?}");
    for t in 0..threads {
        let ino = lookup(&fs, root, &format!("t{t}"));
        let want = acked[t as usize].load(Ordering::SeqCst);
        let size = fs.getattr(ino).unwrap().size;
        assert!(size >= want * RECORD_BYTES, "t{t}: {size} bytes survived, {want} records were acknowledged");
        let data = fs.read(ino, 0, (want * RECORD_BYTES) as u32).unwrap();
        for k in 0..want {
            let fill = (u64::from(t) * 97 + k) as u8;
            let rec = &data[(k * RECORD_BYTES) as usize..((k + 1) * RECORD_BYTES) as usize];
            assert!(rec.iter().all(|&b| b == fill), "t{t}: record {k} of {want} acknowledged lost its bytes");
        }
    }
    drop(fs);
    pool.export().unwrap();
}
