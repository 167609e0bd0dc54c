//! Scrub and resilver through the pool API: damage on leaf files is found and
//! repaired by a scrub (a second scrub repairs nothing), a paused scrub survives
//! export/import and finishes, a resilver fills a leaf that missed txgs, and damage
//! beyond what the layout tolerates is reported as errors, never hidden.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_phys::label::DATA_START_BYTES;
use tarn_spa::scan::{ScanKind, ScanState, ScanTunables};
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};

mod common;
use common::pattern;

const DEV_BYTES: u64 = 96 << 20;

fn mkfiles(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(DEV_BYTES).unwrap();
            p
        })
        .collect()
}

fn create(name: &str, top: TopSpec) -> Arc<Pool> {
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![top],
        ..CreateSpec::default()
    })
    .unwrap()
}

/// Write `n` objects of mixed sizes (4 KiB .. 1 MiB), sync, and return (object, seed, len).
fn fill(pool: &Pool, name: &str, n: u64) -> Vec<(u64, u64, usize)> {
    let os = pool.objset(name).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let len = [4096usize, 70_000, 300_000, 1 << 20][(i % 4) as usize];
        let tx = os.hold_tx().unwrap();
        let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
        os.write(&tx, obj, 0, &pattern(i, len)).unwrap();
        drop(tx);
        out.push((obj, i, len));
    }
    pool.sync().unwrap();
    out
}

fn check(pool: &Pool, name: &str, objs: &[(u64, u64, usize)]) {
    let os = pool.objset(name).unwrap();
    for &(obj, seed, len) in objs {
        let mut buf = vec![0u8; len];
        os.read(obj, 0, &mut buf).unwrap();
        assert!(buf == pattern(seed, len), "object {obj} differs");
    }
}

/// Overwrite `len` bytes at `off` in the data area of a leaf file with garbage.
fn scribble(path: &Path, off: u64, len: usize, seed: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&pattern(seed ^ 0xdead, len), DATA_START_BYTES + off).unwrap();
}

fn reopen(pool: Arc<Pool>, name: &str, dir: &Path) -> Arc<Pool> {
    pool.export().unwrap();
    drop(pool);
    Pool::import(name, &[dir.to_path_buf()], Rewind::None, None).unwrap()
}

fn scrub(pool: &Arc<Pool>) -> tarn_spa::scan::ScanPhys {
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.func, s.state), (ScanKind::Scrub, ScanState::Finished));
    s
}

/// Slow every read of the leaf with `guid` by `ms` (with `lanes` in flight); returns
/// the handler id for `inject::clear`.
fn slow_reads(pool: &Pool, guid: u64, ms: u64, lanes: u32) -> u64 {
    let delay = tarn_spa::inject::Delay::Fixed {
        latency: std::time::Duration::from_millis(ms),
        lanes,
    };
    pool.inject(
        guid,
        tarn_spa::inject::IoType::Read,
        tarn_spa::inject::Action::Delay(delay),
        tarn_spa::inject::FREQ_ALWAYS_PPM,
    )
    .unwrap()
}

fn leaf_cksum(pool: &Pool) -> Vec<u64> {
    pool.zio().vdevs()[0]
        .leaves()
        .iter()
        .map(|l| l.stats().checksum_errors.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
}

#[test]
fn scrub_repairs_mirror_and_raidz_damage_then_finds_none() {
    for (k, layout) in ["mirror", "raidz1", "raidz2", "raidz3"].into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let files = mkfiles(d.path(), 5);
        let top = match layout {
            "mirror" => TopSpec::Mirror(files[..3].to_vec()),
            _ => TopSpec::Raidz {
                nparity: k as u8,
                leaves: files.clone(),
            },
        };
        let name = format!("scr{k}");
        let pool = create(&name, top);
        let objs = fill(&pool, &name, 24);
        let pool = reopen(pool, &name, d.path());
        // Damage as many leaves as the layout tolerates, over the whole written area
        // (data and metadata alike), each leaf in different places.
        let tolerance = if layout == "mirror" { 2 } else { k };
        for (i, f) in files.iter().take(tolerance).enumerate() {
            for j in 0..6u64 {
                scribble(f, (j * 5 + i as u64) * 512 * 1024, 100_000, j + 10 * i as u64);
            }
        }
        let s = scrub(&pool);
        assert!(s.repaired_bytes > 0, "{layout}: nothing repaired");
        assert_eq!(s.errors, 0, "{layout}: unrecoverable blocks");
        assert!(
            leaf_cksum(&pool).iter().take(tolerance).all(|&c| c > 0),
            "{layout}: CKSUM not counted: {:?}",
            leaf_cksum(&pool)
        );
        assert!(s.examined_bytes > 0 && s.issued_bytes >= s.examined_bytes / 2);
        let again = scrub(&pool);
        assert_eq!((again.repaired_bytes, again.errors), (0, 0), "{layout}: second scrub");
        // The repair is on disk: after re-import every object reads back, with no
        // new checksum errors.
        let pool = reopen(pool, &name, d.path());
        check(&pool, &name, &objs);
        assert!(leaf_cksum(&pool).iter().all(|&c| c == 0), "{layout}: {:?}", leaf_cksum(&pool));
        let report = pool.scan_io_report();
        assert!(report.leaves.is_empty(), "no scan in this import yet");
        pool.export().unwrap();
    }
}

#[test]
fn sorted_scrub_issues_few_ascending_ios_and_naive_many() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("order", TopSpec::Mirror(files.clone()));
    // Interleave two objects' writes across txgs so their blocks alternate on disk.
    let os = pool.objset("order").unwrap();
    let tx = os.hold_tx().unwrap();
    let a = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    let b = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    drop(tx);
    for i in 0..40u64 {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, a, i * 131072, &pattern(i, 131072)).unwrap();
        os.write(&tx, b, i * 131072, &pattern(i + 100, 131072)).unwrap();
        drop(tx);
        pool.sync().unwrap();
    }
    drop(os);
    let sorted = {
        scrub(&pool);
        pool.scan_io_report()
    };
    pool.set_scan_tunables(ScanTunables {
        sorted: false,
        ..pool.scan_tunables()
    });
    let naive = {
        scrub(&pool);
        pool.scan_io_report()
    };
    let total = |r: &tarn_spa::scan::ScanIoReport| r.leaves.iter().fold((0, 0), |(i, a), (_, t)| (i + t.ios, a + t.ascending));
    let (s_ios, s_asc) = total(&sorted);
    let (n_ios, n_asc) = total(&naive);
    assert_eq!(sorted.leaves.len(), 2, "both mirror sides read");
    assert_eq!(s_asc, s_ios, "sorted scan issues in ascending order per leaf");
    assert!(s_ios * 5 < n_ios, "aggregation: sorted {s_ios} I/Os vs naive {n_ios}");
    assert!(n_asc < n_ios, "the naive order goes back and forth ({n_asc} of {n_ios} ascending)");
    pool.export().unwrap();
}

#[test]
fn paused_scrub_survives_export_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("pause", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "pause", 40);
    scribble(&files[1], 3 << 20, 200_000, 1);
    // Tiny batches so that the scrub takes many of them; slow extents so that the
    // pause lands mid-scan.
    pool.set_scan_tunables(ScanTunables {
        batch_max_entries: 4,
        ..pool.scan_tunables()
    });
    let id = slow_reads(&pool, pool.leaf_devices()[0].guid, 5, 1);
    pool.scrub_start().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    pool.scrub_pause().unwrap();
    let paused = pool.scan_status().unwrap().phys;
    assert_eq!(paused.state, ScanState::Scanning);
    assert!(paused.paused_since_s.is_some());
    assert!(paused.bookmark != Default::default(), "progress recorded before the pause");
    assert!(pool.scrub_pause().is_err(), "pausing twice");
    tarn_spa::inject::clear(id);
    let pool = pool;
    let pool = reopen(pool, "pause", d.path());
    let st = pool.scan_status().unwrap().phys;
    assert_eq!((st.state, st.bookmark), (ScanState::Scanning, paused.bookmark), "pause is persistent");
    pool.scan_wait();
    assert!(
        pool.scan_status().unwrap().phys.paused_since_s.is_some(),
        "a paused scrub does not resume by itself"
    );
    pool.scrub_start().unwrap(); // resumes
    pool.scan_wait();
    let done = pool.scan_status().unwrap().phys;
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    assert!(done.issued_bytes >= paused.issued_bytes);
    check(&pool, "pause", &objs);
    assert_eq!(scrub(&pool).repaired_bytes, 0);
    // Cancel.
    pool.scrub_start().unwrap();
    let _ = pool.scrub_cancel();
    pool.scan_wait();
    assert!(pool.scrub_cancel().is_err());
    pool.export().unwrap();
}

#[test]
fn resilver_fills_a_leaf_that_missed_txgs() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("resil", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "resil", 30);
    let pool = reopen(pool, "resil", d.path());
    // Leaf 1 "missed" everything so far: wipe its data area and say so in its DTL.
    let synced = pool.synced_txg();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .unwrap()
        .write_all_at(&vec![0u8; 64 << 20], DATA_START_BYTES)
        .unwrap();
    let top = pool.zio().vdevs()[0].clone();
    top.children()[1].dtl().add(1, synced);
    pool.request_resilver();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.func, s.state, s.errors), (ScanKind::Resilver, ScanState::Finished, 0));
    assert!(s.repaired_bytes > 0);
    assert!(top.children()[1].dtl().is_empty(), "resilver completion clears the DTL");
    // DTL-known misses are not damage.
    assert_eq!(leaf_cksum(&pool), vec![0, 0]);
    // Leaf 1 alone now holds everything: destroy leaf 0's data and read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap()
        .write_all_at(&vec![0u8; 64 << 20], DATA_START_BYTES)
        .unwrap();
    pool.zio().clear_cache();
    check(&pool, "resil", &objs);
    let io = pool.scan_io_report();
    let written: u64 = io.leaves.iter().filter(|(n, _)| n.ends_with("d1")).map(|(_, t)| t.ios).sum();
    assert!(written > 0 && io.leaves.iter().all(|(_, t)| t.ascending == t.ios), "{io:?}");
    pool.export().unwrap();
}

#[test]
fn damage_beyond_tolerance_is_an_error_not_wrong_data() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("beyond", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "beyond", 16);
    let pool = reopen(pool, "beyond", d.path());
    // Both sides damaged at the same place.
    for f in &files {
        scribble(f, 4 << 20, 300_000, 7);
    }
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!(s.state, ScanState::Finished);
    assert!(s.errors > 0, "unrecoverable blocks are counted");
    let log = pool.error_log();
    assert!(!log.is_empty() && log.iter().all(|(ds, _)| ds == "beyond"), "{log:?}");
    // Every object either reads back exactly or fails; never wrong bytes.
    let os = pool.objset("beyond").unwrap();
    let mut failed = 0;
    for &(obj, seed, len) in &objs {
        let mut buf = vec![0u8; len];
        match os.read(obj, 0, &mut buf) {
            Ok(_) => assert!(buf == pattern(seed, len), "object {obj}: wrong data"),
            Err(_) => failed += 1,
        }
    }
    assert!(failed > 0);
    assert!(
        log.iter().any(|&(_, o)| objs.iter().any(|&(obj, _, _)| obj == o)),
        "the damaged file's object is listed: {log:?}"
    );
    pool.export().unwrap();
}

#[test]
fn application_reads_keep_working_during_a_scrub() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("busy", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "busy", 40);
    // Slow leaves so that the scrub lasts long enough to overlap the readers.
    let ids: Vec<u64> = pool.leaf_devices().iter().map(|l| slow_reads(&pool, l.guid, 2, 4)).collect();
    pool.set_scan_tunables(ScanTunables {
        batch_max_entries: 16,
        ..pool.scan_tunables()
    });
    pool.scrub_start().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (pool, objs, stop) = (pool.clone(), objs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pool.zio().clear_cache();
                check(&pool, "busy", &objs[..4]);
                reads += 1;
            }
            reads
        })
    };
    pool.scan_wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    for id in ids {
        tarn_spa::inject::clear(id);
    }
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.state, s.errors), (ScanState::Finished, 0), "the scan finishes under load");
    assert!(reads > 0, "the application made progress");
    assert!(pool.scan_io_report().busy_delays > 0, "the scan yielded to application I/O");
    pool.export().unwrap();
}

#[test]
fn a_scrub_does_not_wait_for_its_own_metadata_reads() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("selfio", TopSpec::Mirror(files.clone()));
    fill(&pool, "selfio", 40);
    // Cold: the scan's walk reads every metadata block from the leaves.
    let pool = reopen(pool, "selfio", d.path());
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.state, s.errors), (ScanState::Finished, 0));
    assert!(s.issued_bytes > 0);
    // Only application I/O makes a scan wait; nothing else ran here.
    assert_eq!(pool.scan_io_report().busy_delays, 0);
    pool.export().unwrap();
}

#[test]
fn scrub_progress_survives_a_crash() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("crashscan", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "crashscan", 40);
    pool.set_scan_tunables(ScanTunables {
        batch_max_entries: 4,
        ..pool.scan_tunables()
    });
    let id = slow_reads(&pool, pool.leaf_devices()[0].guid, 5, 1);
    pool.scrub_start().unwrap();
    // Wait until a few batches are recorded and a txg has made them durable.
    let t = std::time::Instant::now();
    while pool.scan_status().unwrap().phys.bookmark == Default::default() {
        assert!(t.elapsed().as_secs() < 30, "no batch recorded");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // What the directory holds now is on disk after this sync (later batches may be too).
    let saved = pool.scan_status().unwrap().phys;
    pool.sync().unwrap();
    tarn_spa::inject::clear(id);
    // Power cut: no export.
    let prefix = d.path().display().to_string();
    common::abandon(pool, &prefix);
    let pool = Pool::import("crashscan", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let resumed = pool.scan_status().unwrap();
    assert_eq!(resumed.phys.state, ScanState::Scanning, "the scrub resumes after import");
    // `saved` merges the live counters of the batch in flight, which a crash loses; the
    // bookmark and the bytes counted up to it are what must survive.
    assert!(
        resumed.phys.bookmark >= saved.bookmark && resumed.phys.examined_bytes > 0,
        "not from zero: saved {:?}, resumed {:?} with {} bytes examined",
        saved.bookmark,
        resumed.phys.bookmark,
        resumed.phys.examined_bytes
    );
    assert!(resumed.pass_examined_start_bytes > 0, "the new pass starts where the old one stopped");
    pool.scan_wait();
    let done = pool.scan_status().unwrap().phys;
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    check(&pool, "crashscan", &objs);
    pool.export().unwrap();
}

#[test]
fn replace_in_a_70_percent_full_pool_resilvers_everything() {
    for raidz in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let files = mkfiles(d.path(), 4);
        let name = if raidz { "fullrz" } else { "fullm" };
        let top = if raidz {
            TopSpec::Raidz {
                nparity: 1,
                leaves: files[..3].to_vec(),
            }
        } else {
            TopSpec::Mirror(files[..2].to_vec())
        };
        let pool = create(name, top);
        // Fill to about 70 % with objects of 1 MiB.
        let os = pool.objset(name).unwrap();
        let mut objs = Vec::new();
        let mut i = 0u64;
        while (pool.alloc_bytes() as f64) < 0.7 * pool.size_bytes() as f64 {
            let tx = os.hold_tx().unwrap();
            let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
            os.write(&tx, obj, 0, &pattern(i, 1 << 20)).unwrap();
            drop(tx);
            objs.push((obj, i, 1 << 20));
            i += 1;
            if i.is_multiple_of(8) {
                pool.sync().unwrap();
            }
        }
        pool.sync().unwrap();
        drop(os);
        let old = files[1].display().to_string();
        pool.replace(&old, Some(&files[3]), false).unwrap();
        pool.scan_wait();
        let s = pool.scan_status().unwrap().phys;
        assert_eq!((s.func, s.state, s.errors), (ScanKind::Resilver, ScanState::Finished, 0), "{name}");
        assert!(
            s.repaired_bytes as f64 > 0.6 * pool.alloc_bytes() as f64 / if raidz { 3.0 } else { 1.0 },
            "{name}: {s:?}"
        );
        // The replaced leaf leaves the pool once a txg records the finished replace.
        pool.sync().unwrap();
        pool.sync().unwrap();
        let leaves: Vec<String> = pool.zio().vdevs()[0].leaves().iter().map(|l| l.display_name()).collect();
        assert!(!leaves.contains(&old) && leaves.contains(&files[3].display().to_string()), "{name}: {leaves:?}");
        // Every block verifies: a scrub repairs nothing; the new leaf alone (with the
        // other sides' help for raidz) serves every object.
        assert_eq!(scrub(&pool).repaired_bytes, 0, "{name}");
        let pool = reopen(pool, name, d.path());
        if !raidz {
            pool.offline(&files[0].display().to_string(), true).unwrap();
        }
        check(&pool, name, &objs);
        pool.export().unwrap();
    }
}

#[test]
fn online_after_offline_resilvers_only_the_missed_txgs() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("dtl", TopSpec::Mirror(files.clone()));
    let before = fill(&pool, "dtl", 30);
    let leaf = files[1].display().to_string();
    pool.offline(&leaf, false).unwrap();
    let first_missed = pool.synced_txg() + 1;
    let os = pool.objset("dtl").unwrap();
    let mut after = Vec::new();
    for i in 0..6u64 {
        let tx = os.hold_tx().unwrap();
        let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
        os.write(&tx, obj, 0, &pattern(1000 + i, 300_000)).unwrap();
        drop(tx);
        after.push((obj, 1000 + i, 300_000));
        pool.sync().unwrap();
    }
    drop(os);
    let dtl = pool.dtl_of(&leaf).unwrap();
    assert!(dtl.len() == 1 && dtl[0].0 <= first_missed, "{dtl:?}");
    pool.online(&leaf).unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.func, s.state, s.errors), (ScanKind::Resilver, ScanState::Finished, 0));
    assert!(s.min_txg >= first_missed - 1, "only the missed txgs: {s:?}");
    // Much less than the whole pool was copied.
    assert!(s.repaired_bytes < pool.alloc_bytes() / 2, "{s:?} vs {}", pool.alloc_bytes());
    assert!(pool.dtl_of(&leaf).unwrap().is_empty());
    // The returned leaf now holds everything, old and new.
    pool.offline(&files[0].display().to_string(), true).unwrap();
    pool.zio().clear_cache();
    check(&pool, "dtl", &before);
    check(&pool, "dtl", &after);
    pool.export().unwrap();
}

#[test]
fn a_failed_read_lists_its_object_without_a_scrub() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("readerr", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "readerr", 16);
    let pool = reopen(pool, "readerr", d.path());
    for f in &files {
        scribble(f, 4 << 20, 300_000, 7);
    }
    assert!(pool.error_log().is_empty());
    let os = pool.objset("readerr").unwrap();
    let failed: Vec<u64> = objs
        .iter()
        .filter(|&&(obj, _, len)| {
            let mut buf = vec![0u8; len];
            os.read(obj, 0, &mut buf).is_err()
        })
        .map(|&(obj, _, _)| obj)
        .collect();
    assert!(!failed.is_empty(), "the damage hit no object");
    let log = pool.error_log();
    for obj in &failed {
        assert!(log.contains(&("readerr".to_string(), *obj)), "{obj} not in {log:?}");
    }
    pool.export().unwrap();
}

/// Blocks only a snapshot holds are scrubbed too: damage on one side of a mirror is
/// repaired from the other, so the snapshot still reads after the other side is
/// damaged in the same places.
#[test]
fn scrub_repairs_blocks_only_a_snapshot_holds() {
    let d = tempfile::tempdir().unwrap();
    let files = mkfiles(d.path(), 2);
    let pool = create("scrsnap", TopSpec::Mirror(files.clone()));
    let objs = fill(&pool, "scrsnap", 24);
    pool.snapshot(&["scrsnap@s".into()], false).unwrap();
    {
        let os = pool.objset("scrsnap").unwrap();
        let tx = os.hold_tx().unwrap();
        for &(obj, _, _) in &objs {
            os.free_object(&tx, obj).unwrap();
        }
    }
    pool.sync().unwrap();
    let pool = reopen(pool, "scrsnap", d.path());
    for j in 0..6u64 {
        scribble(&files[0], j * 5 * 512 * 1024, 100_000, j);
    }
    let s = scrub(&pool);
    assert!(s.repaired_bytes > 0, "nothing repaired");
    assert_eq!(s.errors, 0);
    let pool = reopen(pool, "scrsnap", d.path());
    for j in 0..6u64 {
        scribble(&files[1], j * 5 * 512 * 1024, 100_000, j + 100);
    }
    let pool = reopen(pool, "scrsnap", d.path());
    let snap = pool.snapshot_objset("scrsnap@s").unwrap();
    for &(obj, seed, len) in &objs {
        let mut buf = vec![0u8; len];
        snap.read(obj, 0, &mut buf).unwrap();
        assert!(buf == pattern(seed, len), "snapshot object {obj} differs");
    }
    pool.export().unwrap();
}
