//! Adopted records (`tarn_zil::Zilog::adopt_whole_records`, `tarn_dmu::objset` module
//! `early`): an `fsync` of whole records logs, for each, the block the txg sync will
//! install in the file instead of a second copy of its bytes. A power cut before that
//! sync replays them from those blocks; one after it must leave them to the file's
//! tree (never claim or free them at import); a record written again before its sync
//! frees its adopted block with that txg. The contents and the space maps
//! (`Pool::leak_check`) must agree every time.

mod common;

use common::pattern;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_spa::{Pool, Rewind};
use tarn_vdev::inject;
use tarn_zpl::{Fs, ZplOptions};

const RECORD: usize = 128 << 10;

/// A pool `name` on a 2-way mirror of 96 MiB files (`a.img`, `b.img`) in `dir`, its
/// file system mounted with the intent log, and a warm log chain (so that no commit
/// below waits for a new chain's header to sync).
fn setup(dir: &Path, name: &str) -> (Arc<Pool>, Arc<Fs>) {
    let pool = common::mirror_pool(dir, name, 96 << 20);
    let fs = mount(&pool, name);
    let warm = fs.create(fs.root(), b"warm", 0o644, 0, 0).unwrap().ino;
    fs.write(warm, 0, b"warm").unwrap();
    fs.fsync(warm).unwrap();
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    (pool, fs)
}

fn mount(pool: &Pool, name: &str) -> Arc<Fs> {
    Fs::open_logged(pool.objset(name).unwrap(), pool.zilog(name).unwrap(), ZplOptions::default())
        .unwrap()
        .0
}

/// Abandon `pool` with every device write from now on dropped, then import it again.
fn power_cut_and_import(pool: Arc<Pool>, fs: Arc<Fs>, dir: &Path, name: &str) -> Arc<Pool> {
    let prefix = dir.display().to_string();
    inject::power_cut_after(&prefix, 0);
    drop(fs);
    common::abandon(pool, &prefix);
    Pool::import(name, &[dir.to_path_buf()], Rewind::None, None).unwrap()
}

fn adopted(pool: &Pool, name: &str) -> u64 {
    pool.zilog(name).unwrap().stats.adopted.load(Ordering::Relaxed)
}

/// Wait (at most 30 s) until the log of `name` has adopted `n` records.
fn wait_adopted(pool: &Pool, name: &str, n: u64) {
    let t = Instant::now();
    while adopted(pool, name) < n {
        assert!(t.elapsed() < Duration::from_secs(30), "the fsync adopted {} records", adopted(pool, name));
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn leak_free(pool: &Pool, ctx: &str) {
    pool.leak_check().unwrap_or_else(|e| panic!("{ctx}: leak check: {e}"));
}

fn file(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// Two MiB and a bit written in 1 MiB writes, then `fsync`: each of the sixteen whole
/// records is logged by pointer (the tail, a partial record, is copied). A power cut
/// before any txg sync loses nothing: replay reads the adopted blocks, and after it
/// and a few syncs every block is accounted for.
#[test]
fn whole_records_fsynced_are_logged_by_pointer_and_survive_a_power_cut() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let (pool, fs) = setup(&dir, "adopt1");
    let data = pattern(1, 16 * RECORD + 5000);
    let f = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &data[..8 * RECORD]).unwrap();
    fs.write(f, 8 * RECORD as u64, &data[8 * RECORD..]).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(adopted(&pool, "adopt1"), 16, "every whole record is logged by pointer");
    assert_eq!(pool.objset_concrete("adopt1").unwrap().early_stats().adopted, 16);
    // A write that starts inside a record covers no record with pieces of its own
    // alone: copied and log-owned blocks as before.
    let odd = pattern(11, 3 * RECORD);
    let g = fs.create(fs.root(), b"odd", 0o644, 0, 0).unwrap().ino;
    fs.write(g, 4096, &odd).unwrap();
    fs.fsync(g).unwrap();
    assert_eq!(adopted(&pool, "adopt1"), 16, "an unaligned write adopts nothing");
    let mut want_g = vec![0u8; 4096];
    want_g.extend_from_slice(&odd);
    let pool = power_cut_and_import(pool, fs, &dir, "adopt1");
    // Claimed by the log until replay retires the chain.
    leak_free(&pool, "imported, before replay");
    let fs = mount(&pool, "adopt1");
    assert!(file(&fs, f) == data, "the fsynced file after the power cut");
    assert!(file(&fs, g) == want_g, "the unaligned file after the power cut");
    common::settle(&pool);
    leak_free(&pool, "after replay");
    drop(fs);
    pool.export().unwrap();
}

/// A file appended one whole record at a time with an `fsync` after each: the early
/// writer thread takes each record from its queue as the write completes, and the
/// `fsync` that follows at once must not write it a second time — it claims a record
/// the writer has not started, or waits for the writer's write of it
/// (`Objset::adopt_records`). Every record is written exactly once, and every one is
/// adopted by the log; a power cut before any sync loses none of them.
#[test]
fn records_fsynced_one_at_a_time_are_written_once() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let (pool, fs) = setup(&dir, "adopt_once");
    const N: usize = 48;
    let data = pattern(5, N * RECORD);
    let f = fs.create(fs.root(), b"log", 0o644, 0, 0).unwrap().ino;
    let before = pool.objset_concrete("adopt_once").unwrap().early_stats();
    for i in 0..N {
        fs.write(f, (i * RECORD) as u64, &data[i * RECORD..(i + 1) * RECORD]).unwrap();
        // The fsync arrives at different points of the writer's work on the record:
        // before it wakes, while it prepares or writes the block, after.
        std::thread::sleep(Duration::from_micros([0, 30, 100, 250, 600][i % 5]));
        fs.fsync(f).unwrap();
    }
    let after = pool.objset_concrete("adopt_once").unwrap().early_stats();
    assert_eq!(after.adopted - before.adopted, N as u64, "every record is logged by pointer");
    // Without the claim about half the records were written twice (22–27 of 48 in
    // four runs); a writer thread descheduled for longer than the fsync's bounded wait
    // on a loaded machine may cost a record or two, which is allowed.
    let twice = after.discarded - before.discarded;
    assert!(twice <= 2, "{twice} of {N} records were written twice");
    assert_eq!(after.written - before.written, N as u64 + twice, "each record written once, but for those");
    let pool = power_cut_and_import(pool, fs, &dir, "adopt_once");
    let fs = mount(&pool, "adopt_once");
    assert!(file(&fs, f) == data, "the fsynced file after the power cut");
    common::settle(&pool);
    leak_free(&pool, "after replay");
    drop(fs);
    pool.export().unwrap();
}

/// The log block naming adopted records is still being written when their txg syncs,
/// so that sync installs the blocks in the file but cannot free the log block, and the
/// chain read at import still names them. They belong to the file now: the import
/// must neither claim them for the log nor free them after replay (without the check
/// of their birth txg the claim took them, and the leak check found every one named
/// twice).
#[test]
fn an_adopted_block_its_txg_installed_is_not_claimed_again_at_import() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let (pool, fs) = setup(&dir, "adopt2");
    let data = pattern(2, 8 * RECORD);
    let f = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &data).unwrap();
    let handlers = common::slow_mirror_writes(&dir, 150);
    let fsyncing = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.fsync(f).unwrap())
    };
    wait_adopted(&pool, "adopt2", 8);
    // The log block is in flight (each write takes 150 ms): this sync installs the
    // adopted blocks and keeps the log block.
    pool.sync().unwrap();
    fsyncing.join().unwrap();
    for id in handlers {
        inject::remove_handler(id);
    }
    let s = pool.objset_concrete("adopt2").unwrap().early_stats();
    assert_eq!((s.adopted, s.used), (8, 8), "the sync installed the adopted blocks: {s:?}");
    let pool = power_cut_and_import(pool, fs, &dir, "adopt2");
    leak_free(&pool, "imported with the chain naming installed blocks");
    let fs = mount(&pool, "adopt2");
    assert!(file(&fs, f) == data, "the file after the power cut");
    common::settle(&pool);
    leak_free(&pool, "after the chain was retired");
    drop(fs);
    pool.export().unwrap();
}

/// A record logged by pointer and then written again before its txg syncs: the sync
/// installs a new block and frees the adopted one with its txg. A power cut before
/// that sync replays the adopted block and then the later write over it.
#[test]
fn an_adopted_record_written_again_keeps_its_block_until_its_txg_syncs() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let (pool, fs) = setup(&dir, "adopt3");
    let mut want = pattern(3, 8 * RECORD);
    let f = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &want).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(adopted(&pool, "adopt3"), 8);
    let patch = vec![0x5a; 4096];
    let at = 2 * RECORD + 100;
    fs.write(f, at as u64, &patch).unwrap();
    fs.fsync(f).unwrap();
    want[at..at + patch.len()].copy_from_slice(&patch);
    // A second round on fresh records, cut by a power cut before any sync.
    let more = pattern(4, 8 * RECORD);
    fs.write(f, want.len() as u64, &more).unwrap();
    want.extend_from_slice(&more);
    fs.fsync(f).unwrap();
    let at2 = 13 * RECORD + 7;
    fs.write(f, at2 as u64, &patch).unwrap();
    fs.fsync(f).unwrap();
    want[at2..at2 + patch.len()].copy_from_slice(&patch);
    assert_eq!(adopted(&pool, "adopt3"), 16);
    let pool = power_cut_and_import(pool, fs, &dir, "adopt3");
    leak_free(&pool, "imported, before replay");
    let fs = mount(&pool, "adopt3");
    assert!(file(&fs, f) == want, "adopted records and the writes over them after the power cut");
    // Now the same without a crash: the sync installs seven of the eight blocks and
    // frees the rewritten one. (Replay retired the chain: a first fsync starts a new
    // one, and waits for a txg to make its header durable.)
    fs.fsync(f).unwrap();
    fs.write(f, 0, b"warm").unwrap();
    fs.fsync(f).unwrap();
    want[..4].copy_from_slice(b"warm");
    pool.sync().unwrap();
    let os = pool.objset_concrete("adopt3").unwrap();
    let before = os.early_stats();
    let g = fs.create(fs.root(), b"again", 0o644, 0, 0).unwrap().ino;
    let mut want_g = pattern(5, 8 * RECORD);
    fs.write(g, 0, &want_g).unwrap();
    fs.fsync(g).unwrap();
    fs.write(g, at as u64, &patch).unwrap();
    fs.fsync(g).unwrap();
    want_g[at..at + patch.len()].copy_from_slice(&patch);
    pool.sync().unwrap();
    let s = os.early_stats();
    assert_eq!((s.adopted - before.adopted, s.used - before.used), (8, 7), "{s:?} after {before:?}");
    common::settle(&pool);
    assert!(file(&fs, g) == want_g && file(&fs, f) == want);
    leak_free(&pool, "after the rewritten record's txg synced");
    drop(fs);
    drop(os);
    pool.export().unwrap();
}

/// Records fsynced while the sync of the txg before is still writing (slowed by a
/// delay on every leaf write): their blocks are allocated ahead, so that sync's space
/// records do not log them. A power cut right after that sync imports its txg, where
/// they are free: the log claims them and replay reads them (logged by the running
/// sync, they would be allocated in that txg and named by no tree).
#[test]
fn records_adopted_while_a_sync_runs_are_claimed_after_a_power_cut_that_follows_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let (pool, fs) = setup(&dir, "adopt5");
    let slow = fs.create(fs.root(), b"slow", 0o644, 0, 0).unwrap().ino;
    fs.write(slow, 0, &pattern(51, 3 * RECORD + 100)).unwrap();
    let handlers = common::slow_mirror_writes(&dir, 100);
    let synced_before = pool.synced_txg();
    // Asked for, not waited for (a waiter pauses early writes).
    let syncing = pool.request_sync();
    std::thread::sleep(Duration::from_millis(40));
    let data = pattern(52, 8 * RECORD);
    let f = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &data).unwrap();
    let fsyncing = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.fsync(f).unwrap())
    };
    wait_adopted(&pool, "adopt5", 8);
    assert_eq!(pool.synced_txg(), synced_before, "the sync ended before the records were adopted");
    fsyncing.join().unwrap();
    let t = Instant::now();
    while pool.synced_txg() < syncing {
        assert!(t.elapsed() < Duration::from_secs(30), "the sync never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
    for id in handlers {
        inject::remove_handler(id);
    }
    let pool = power_cut_and_import(pool, fs, &dir, "adopt5");
    leak_free(&pool, "imported, the adopted blocks claimed by the log");
    let fs = mount(&pool, "adopt5");
    assert!(file(&fs, f) == data, "the records adopted during the sync, after the power cut");
    common::settle(&pool);
    leak_free(&pool, "after replay");
    drop(fs);
    pool.export().unwrap();
}

/// Contents of the files `inos` (in order).
fn contents(fs: &Fs, inos: &[u64]) -> Vec<Vec<u8>> {
    inos.iter().map(|&i| file(fs, i)).collect()
}

/// One random run: appends to three files, most of them whole records at record
/// boundaries (logged by pointer), some small or starting inside a record, `fsync`s
/// and txg syncs, with the power cut after 1–24 device writes. After import and
/// replay the files must hold a state the workload passed through, no older than the
/// last `fsync` acknowledged before the cut. Appends only, as in `zil.rs`: a record
/// takes the bytes current at its commit. Returns (cut inside the workload, records
/// adopted).
fn random_run(seed: u64) -> (bool, u64) {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let name = format!("adoptrand{seed}");
    let (pool, fs) = setup(&dir, &name);
    let inos: Vec<u64> = (0..3)
        .map(|i| fs.create(fs.root(), format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino)
        .collect();
    fs.fsync(fs.root()).unwrap();
    let mut rng = common::Rng(seed | 1);
    let cut = inject::power_cut_after(&prefix, 1 + rng.below(24));
    let mut snaps = vec![contents(&fs, &inos)];
    let mut acked = 0usize;
    for _ in 0..40 {
        let ino = inos[rng.below(3) as usize];
        let size = fs.getattr(ino).unwrap().size;
        let fill = rng.next() as u8;
        let r = match rng.below(8) {
            0..=3 => {
                let at = size.next_multiple_of(RECORD as u64) + if rng.below(4) == 0 { 4096 } else { 0 };
                let len = RECORD * (1 + rng.below(4) as usize);
                fs.write(ino, at, &vec![fill; len]).map(|_| ())
            }
            4 => fs.write(ino, size, &vec![fill; 1 + rng.below(20_000) as usize]).map(|_| ()),
            5 => pool.sync().map_err(|e| tarn_zpl::ZplError::Io(e.to_string())),
            _ => {
                let r = fs.fsync(ino);
                if r.is_ok() && cut.dropped_writes() == 0 {
                    acked = snaps.len() - 1;
                }
                r
            }
        };
        match r {
            Ok(()) => snaps.push(contents(&fs, &inos)),
            Err(_) if cut.dropped_writes() > 0 => break,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    let adopted_here = adopted(&pool, &name);
    let happened = cut.dropped_writes() > 0;
    let pool = power_cut_and_import(pool, fs, &dir, &name);
    let fs = mount(&pool, &name);
    let got = contents(&fs, &inos);
    let at = snaps.iter().rposition(|s| *s == got);
    let sizes = |s: &Vec<Vec<u8>>| s.iter().map(Vec::len).collect::<Vec<_>>();
    match at {
        Some(i) => assert!(i >= acked, "seed {seed}: recovered state {i} is older than the acknowledged {acked}"),
        None => panic!(
            "seed {seed}: recovered a state the workload never passed through: sizes {:?}; acknowledged {:?}, last {:?}",
            sizes(&got),
            sizes(&snaps[acked]),
            sizes(snaps.last().unwrap())
        ),
    }
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    leak_free(&pool, &format!("seed {seed}: after replay"));
    drop(fs);
    pool.export().unwrap();
    (happened, adopted_here)
}

#[test]
fn random_whole_record_appends_recover_a_real_state_no_older_than_the_last_fsync() {
    let n: u64 = std::env::var("TARN_ADOPT_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let base: u64 = std::env::var("TARN_ADOPT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0xad0b_2026);
    let (mut mid, mut adopted_total) = (0, 0);
    for i in 0..n {
        let (inside, a) = random_run(base.wrapping_add(i * 7919));
        mid += u64::from(inside);
        adopted_total += a;
    }
    eprintln!("{mid} of {n} cuts fell inside the workload; {adopted_total} records adopted");
    assert!(mid * 2 >= n, "only {mid} of {n} cuts fell inside the workload");
    assert!(adopted_total > 0, "no run logged a whole record by pointer");
}
