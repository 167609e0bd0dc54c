//! Early writes (`tarn_dmu::objset` module `early`): whole records a streaming writer
//! completes are written before their txg syncs; the sync installs those blocks
//! instead of writing the records again, and frees every early block whose record
//! changed or went away meanwhile. The contents, the space maps (`Pool::leak_check`)
//! and a re-import must agree either way.

mod common;

use common::{abandon, mirror_pool, on_every_write, pattern, reimport, slow_mirror_writes};
use std::time::{Duration, Instant};
use tarn_dmu::objset::{EarlyStats, Objset, EARLY_BACKLOG_RECORDS, EARLY_BACKLOG_WAIT_MAX};
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::Pool;
use tarn_vdev::inject::{self, Action, Fault};

const RECORD: usize = 128 << 10;

/// A synced pool `name` on a fresh 2-way mirror of 128 MiB files, and its root file
/// system's object set (the directory holds the files: keep it for the test).
fn fresh_pool(name: &str) -> (tempfile::TempDir, std::sync::Arc<Pool>, std::sync::Arc<Objset>) {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), name, 128 << 20);
    pool.sync().unwrap();
    let os = pool.objset_concrete(name).unwrap();
    (d, pool, os)
}

/// A new 128 KiB-record file-data object.
fn new_file(os: &Objset) -> u64 {
    let tx = os.hold_tx().unwrap();
    os.create_object(&tx, ObjectType::FileData, 512, RECORD as u32, &[]).unwrap()
}

/// Append `data` to `obj` at `at` in 8 KiB writes, as an fio appender does.
fn append(os: &Objset, obj: u64, at: usize, data: &[u8]) {
    for (i, piece) in data.chunks(8 << 10).enumerate() {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, (at + i * (8 << 10)) as u64, piece).unwrap();
    }
}

/// Write record `b` of `data` (whole 128 KiB records) to `obj`, under one hold.
fn write_record(os: &Objset, obj: u64, data: &[u8], b: usize) {
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, (b * RECORD) as u64, &data[b * RECORD..(b + 1) * RECORD]).unwrap();
}

/// Wait (at most 20 s) until `ready` holds, polling every millisecond.
fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let t = Instant::now();
    while !ready() {
        assert!(t.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn read(os: &dyn ObjectStore, obj: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    os.read(obj, 0, &mut b).unwrap();
    b
}

/// Wait (at most 20 s) until the early writer has written `n` records.
fn wait_written(os: &Objset, n: u64) -> EarlyStats {
    let t = Instant::now();
    loop {
        let s = os.early_stats();
        if s.written >= n {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "early writer stuck at {s:?}, wanted {n} written");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Dirty data for a slow sync: a new file of three whole records, which the early
/// writer writes (waited for), and a partial one; then every leaf write of the mirror
/// in `dir` takes `latency_ms`. Returns the early-write counters once those three are
/// written, and the delay handlers (for `inject::remove_handler`).
fn dirty_for_a_slow_sync(dir: &std::path::Path, os: &Objset, seed: u64, latency_ms: u64) -> (EarlyStats, Vec<u64>) {
    let start = os.early_stats().written;
    let slow = new_file(os);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, slow, 0, &pattern(seed, 3 * RECORD + 100)).unwrap();
    drop(tx);
    let before = wait_written(os, start + 3);
    (before, slow_mirror_writes(dir, latency_ms))
}

fn leak_free(pool: &Pool, ctx: &str) {
    pool.leak_check().unwrap_or_else(|e| panic!("{ctx}: leak check: {e}"));
}

/// Sixteen records appended 8 KiB at a time: the early writer writes the completed
/// ones, the sync installs them (at least one, and no more than it wrote), and the
/// file reads back the same before and after an export and import.
#[test]
fn streamed_records_are_written_early_and_installed_by_the_sync() {
    let (d, pool, os) = fresh_pool("early1");
    let data = pattern(7, 16 * RECORD);
    let obj = new_file(&os);
    append(&os, obj, 0, &data);
    let before = wait_written(&os, 8);
    assert_eq!(read(&*os, obj, data.len()), data, "content before the sync");
    pool.sync().unwrap();
    let after = os.early_stats();
    assert!(after.used >= 1, "the sync installed no early block: {after:?}");
    assert!(
        after.used + after.discarded <= after.written,
        "more early blocks accounted than written: {after:?}"
    );
    assert!(before.written <= 16, "a record was written early twice without changing: {before:?}");
    assert_eq!(read(&*os, obj, data.len()), data, "content after the sync");
    leak_free(&pool, "after the sync");
    drop(os);
    let pool = reimport(pool, d.path(), "early1");
    let os = pool.objset_concrete("early1").unwrap();
    assert_eq!(read(&*os, obj, data.len()), data, "content after import");
    leak_free(&pool, "after import");
}

/// Records written early, then changed before their sync: one partly overwritten,
/// one rewritten whole, one truncated away, and a whole object freed. The sync must
/// write the new contents and free each stale early block (the leak check fails on
/// a block left allocated or freed twice).
#[test]
fn early_blocks_of_changed_records_are_freed_not_installed() {
    let (d, pool, os) = fresh_pool("early2");
    let mut model = pattern(11, 8 * RECORD);
    let obj = new_file(&os);
    append(&os, obj, 0, &model);
    let gone = new_file(&os);
    append(&os, gone, 0, &pattern(12, 4 * RECORD));
    wait_written(&os, 8);
    let tx = os.hold_tx().unwrap();
    // Record 1: 8 KiB in the middle.
    let patch = pattern(13, 8 << 10);
    os.write(&tx, obj, (RECORD + 4096) as u64, &patch).unwrap();
    model[RECORD + 4096..RECORD + 4096 + patch.len()].copy_from_slice(&patch);
    // Record 2: rewritten whole.
    let whole = pattern(14, RECORD);
    os.write(&tx, obj, 2 * RECORD as u64, &whole).unwrap();
    model[2 * RECORD..3 * RECORD].copy_from_slice(&whole);
    // Records 6 and 7: truncated away.
    os.free_range(&tx, obj, 6 * RECORD as u64, u64::MAX).unwrap();
    model.truncate(6 * RECORD);
    // A whole object whose records were written early.
    os.free_object(&tx, gone).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let s = os.early_stats();
    assert!(s.discarded >= 1, "no stale early block was freed: {s:?}");
    let got = read(&*os, obj, 8 * RECORD);
    assert_eq!(&got[..model.len()], &model[..], "content after the sync");
    assert!(got[model.len()..].iter().all(|&b| b == 0), "truncated records still read back");
    leak_free(&pool, "after the sync");
    drop(os);
    let pool = reimport(pool, d.path(), "early2");
    let os = pool.objset_concrete("early2").unwrap();
    assert_eq!(&read(&*os, obj, model.len())[..], &model[..], "content after import");
    leak_free(&pool, "after import");
}

/// A crash after records were written early and before their txg synced, where the
/// records were completed and written while the sync of the txg before was still
/// writing (made slow by a delay on every leaf write): their allocations must be made
/// ahead, or they go into that txg's space records and the blocks, referenced by no
/// synced tree, stay allocated after the crash — which the leak check finds (it did,
/// with the allocations logged by the running sync).
#[test]
fn early_blocks_of_an_unsynced_txg_are_not_allocated_after_a_crash() {
    let (d, pool, os) = fresh_pool("early3");
    let base = pattern(21, 2 * RECORD);
    let kept = new_file(&os);
    append(&os, kept, 0, &base);
    pool.sync().unwrap();
    let (_, delays) = dirty_for_a_slow_sync(d.path(), &os, 23, 60);
    let synced_before = pool.synced_txg();
    // Asked for, not waited for: a thread waiting for a sync pauses early writes.
    let syncing = pool.request_sync();
    // The sync has quiesced (its writes take hundreds of ms): these records belong to
    // the next txg, and the early writer finds the sync in progress.
    std::thread::sleep(Duration::from_millis(40));
    let before = os.early_stats().written;
    let lost = new_file(&os);
    append(&os, lost, 0, &pattern(22, 12 * RECORD));
    let s = wait_written(&os, before + 6);
    assert_eq!(
        pool.synced_txg(),
        synced_before,
        "the sync ended before the early writes ({s:?}): nothing was allocated ahead"
    );
    wait_until("the sync never ended", || pool.synced_txg() >= syncing);
    for id in delays {
        inject::remove_handler(id);
    }
    drop(os);
    abandon(pool, "early3-none");
    let pool = Pool::import("early3", &[d.path().to_path_buf()], tarn_spa::Rewind::None, None).unwrap();
    let os = pool.objset_concrete("early3").unwrap();
    assert_eq!(read(&*os, kept, base.len()), base, "synced file after the crash");
    leak_free(&pool, "after the crash");
}

/// Early writes while one side of the mirror fails every write: each early block
/// landed on one side only, so none may be kept (the sync writes the records itself,
/// and only the sync records the failing side's missing txg); the data still reads
/// back, from the good side.
#[test]
fn an_early_write_that_a_leaf_failed_is_left_to_the_sync() {
    let (d, pool, os) = fresh_pool("early5");
    let fail = on_every_write(&d.path().join("b.img"), Action::Fault(Fault::Io));
    let data = pattern(41, 8 * RECORD);
    let obj = new_file(&os);
    append(&os, obj, 0, &data);
    wait_written(&os, 4);
    pool.sync().unwrap();
    inject::remove_handler(fail);
    let s = os.early_stats();
    assert_eq!(s.used, 0, "an early block missing from one side was installed: {s:?}");
    assert_eq!(s.discarded, s.written, "{s:?}");
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "after the failed side");
}

/// With early writes off (`Objset::set_early_writes`), nothing is written early and
/// the same stream reads back the same.
#[test]
fn early_writes_can_be_turned_off() {
    let (_d, pool, os) = fresh_pool("early4");
    os.set_early_writes(false);
    let data = pattern(31, 6 * RECORD);
    let obj = new_file(&os);
    append(&os, obj, 0, &data);
    std::thread::sleep(Duration::from_millis(200));
    pool.sync().unwrap();
    assert_eq!(os.early_stats(), EarlyStats::default());
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "early writes off");
}

/// An early batch is allocated under a hold on its txg and written after releasing
/// it, so a sync may quiesce while the batch is still on its way to the disk. The
/// sync must wait for it and install its blocks: taking early blocks before the
/// batch lands would leave them to a later sync to free, after this txg had drained
/// their allocations into its space maps.
#[test]
fn a_sync_waits_for_an_early_batch_in_flight_and_installs_it() {
    let (d, pool, os) = fresh_pool("early6");
    let delays = slow_mirror_writes(d.path(), 200);
    let data = pattern(61, RECORD);
    let obj = new_file(&os);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &data).unwrap();
    drop(tx);
    // The early writer took the record and is writing it (200 ms per device write).
    let t = Instant::now();
    while os.early_batches_in_flight() == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "no early batch started: {:?}", os.early_stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    pool.sync().unwrap();
    for id in delays {
        inject::remove_handler(id);
    }
    let s = os.early_stats();
    assert_eq!((s.written, s.used, s.discarded), (1, 1, 0), "the sync took the batch in flight: {s:?}");
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "after the sync that waited");
    drop(os);
    let pool = reimport(pool, d.path(), "early6");
    let os = pool.objset_concrete("early6").unwrap();
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "reimported");
}

/// A writer that gets ahead of the early writer (its device is slow) waits before its
/// next hold once more than `EARLY_BACKLOG_RECORDS` records are queued, and only for
/// `EARLY_BACKLOG_WAIT_MAX`: a stuck early writer slows writers, never stops them.
/// Below the mark no hold waits. The data reads back whole after the sync.
#[test]
fn writers_wait_for_a_long_early_backlog_but_not_for_ever() {
    let (d, pool, os) = fresh_pool("early7");
    let delays = slow_mirror_writes(d.path(), 500);
    let obj = new_file(&os);
    let data = pattern(61, (EARLY_BACKLOG_RECORDS + 2) * RECORD);
    let write_record = |b: usize| write_record(&os, obj, &data, b);
    // The early writer takes the first record and is stuck writing it for 500 ms.
    write_record(0);
    wait_until("the early writer never started", || os.early_batches_in_flight() > 0);
    // Up to the mark (and the record that passes it) nobody waits.
    for b in 1..=EARLY_BACKLOG_RECORDS + 1 {
        write_record(b);
    }
    assert_eq!(os.early_stats().throttled, 0, "a hold waited below the backlog mark");
    // Over it, the next hold waits, for the bounded time only.
    let t = Instant::now();
    drop(os.hold_tx().unwrap());
    let waited = t.elapsed();
    assert_eq!(os.early_stats().throttled, 1);
    assert!(
        waited >= EARLY_BACKLOG_WAIT_MAX.mul_f64(0.8),
        "a hold over the backlog mark went through after {waited:?}"
    );
    // The stuck batch takes 500 ms per leaf write: a hold that waited for it, rather
    // than for the bounded time, would have taken longer than this.
    assert!(waited < Duration::from_millis(450), "a hold waited {waited:?} for a stuck early writer");
    for id in delays {
        inject::remove_handler(id);
    }
    pool.sync().unwrap();
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "after the backlog");
}

/// Records completed while the sync of the txg before runs are written early at once
/// (their allocations made ahead, not logged by that sync), then installed by the
/// sync of their own txg rather than written again; the data and the space maps
/// agree before and after a re-import. Before allocations could be made ahead, the
/// early writer waited for the running sync and wrote none of them meanwhile.
#[test]
fn records_completed_while_a_sync_runs_are_written_early_at_once() {
    let (d, pool, os) = fresh_pool("early8");
    let (before, delays) = dirty_for_a_slow_sync(d.path(), &os, 71, 100);
    let synced_before = pool.synced_txg();
    // Asked for, not waited for: a thread waiting for a sync pauses early writes.
    let syncing = pool.request_sync();
    std::thread::sleep(Duration::from_millis(40));
    // Records of the next txg.
    let obj = new_file(&os);
    let data = pattern(72, 8 * RECORD);
    for b in 0..8 {
        write_record(&os, obj, &data, b);
    }
    let s = wait_written(&os, before.written + 8);
    assert_eq!(pool.synced_txg(), synced_before, "the sync ended before the early writes: {s:?}");
    wait_until("the sync never ended", || pool.synced_txg() >= syncing);
    for id in delays {
        inject::remove_handler(id);
    }
    pool.sync().unwrap();
    let after = os.early_stats();
    // The slow sync installed the first file's three, the next one these eight.
    assert!(
        after.used >= before.used + 3 + 8,
        "the sync of their txg wrote the records again: {before:?} -> {after:?}"
    );
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "after the sync");
    drop(os);
    let pool = reimport(pool, d.path(), "early8");
    let os = pool.objset_concrete("early8").unwrap();
    assert_eq!(read(&*os, obj, data.len()), data, "after a re-import");
    leak_free(&pool, "re-imported");
}

/// While a thread waits for a sync (here `Pool::sync`; a snapshot is another), the
/// early writer writes nothing ahead during the running sync: the waiter would wait
/// for the device those writes share (a snapshot under a `dd` stream, 14 → 23 ms in
/// the median). The records are left to their own txg's sync, and read back.
#[test]
fn records_of_the_next_txg_wait_while_a_thread_waits_for_a_sync() {
    let (d, pool, os) = fresh_pool("early9");
    let (before, delays) = dirty_for_a_slow_sync(d.path(), &os, 91, 100);
    let synced_before = pool.synced_txg();
    let syncing = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    std::thread::sleep(Duration::from_millis(40));
    let obj = new_file(&os);
    let data = pattern(92, 8 * RECORD);
    for b in 0..8 {
        write_record(&os, obj, &data, b);
    }
    let mut polls = 0;
    while pool.synced_txg() == synced_before {
        assert_eq!(
            os.early_stats().written,
            before.written,
            "a record was written ahead while a thread waited for the sync"
        );
        polls += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(polls > 10, "the sync ended before the check ({polls} polls)");
    syncing.join().unwrap();
    for id in delays {
        inject::remove_handler(id);
    }
    pool.sync().unwrap();
    assert_eq!(read(&*os, obj, data.len()), data);
    leak_free(&pool, "after the sync");
}
