//! Pool suspension (`suspend.rs` theory): a panic in the txg sync thread or a sync that
//! cannot reach the disks suspends the pool; reads of synced data go on; `failmode`
//! decides what writers see; `zpool clear` resumes, in place when the failed sync had
//! changed nothing, else by re-importing from disk; no acknowledged data is lost.
//!
//! How: the sync fault points of `tarn_spa::inject` (a panic before the quiesce or
//! after the data writes) and `zinject`-style write errors on every leaf of the only
//! top-level vdev. No timing: each test waits for states, never for durations.

mod common;
use common::*;
use std::sync::Arc;
use tarn_spa::inject::{inject_sync_fault, Action, Fault, IoType, SyncFault, FREQ_ALWAYS_PPM};
use tarn_spa::{Pool, Resume, SuspendCause};

const LEAF_BYTES: u64 = 128 << 20;

fn reopened(r: tarn_spa::Result<Resume>) -> Arc<Pool> {
    match r.unwrap() {
        Resume::Reopened(p) => p,
        Resume::InPlace => panic!("resumed in place; a re-import was needed"),
        Resume::NotSuspended => panic!("pool was not suspended"),
    }
}

#[test]
fn sync_panic_suspends_and_clear_resumes_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "susp1", LEAF_BYTES);
    assert_eq!(pool.get_prop("failmode").unwrap(), ("wait".into(), "default".into()));
    let os = pool.objset("susp1").unwrap();
    let a = put(&*os, &pattern(1, 300_000));
    pool.sync().unwrap();

    inject_sync_fault("susp1", SyncFault::PanicAtStart);
    let b = put(&*os, &pattern(2, 200_000));
    let e = err_of(pool.sync());
    assert!(e.contains("suspended"), "{e}");
    let s = pool.suspension().expect("suspended");
    match &s.cause {
        SuspendCause::Panic { thread, message } => {
            assert_eq!(thread, "txg_sync");
            assert!(message.contains("injected sync fault"), "{message}");
        }
        other => panic!("cause {other:?}"),
    }
    assert!(!s.reopen, "a panic before the quiesce changed nothing");
    assert!(s.to_string().contains("txg_sync thread panicked"), "{s}");
    assert_eq!(pool.health(), "SUSPENDED");
    assert_eq!(pool.status().state, "SUSPENDED");

    // Reads of synced data go on; administrative changes fail at once.
    assert_eq!(get(&*os, a), pattern(1, 300_000));
    let e = err_of(pool.set_prop("comment", "x"));
    assert!(e.contains("suspended"), "{e}");

    // failmode=wait: a writer blocks until the pool resumes.
    let writer = {
        let (os, pool) = (os.clone(), pool.clone());
        std::thread::spawn(move || {
            let c = put(&*os, &pattern(3, 100_000));
            (c, pool.suspension().is_none())
        })
    };
    pool.clear(None).unwrap();
    assert!(matches!(pool.resume().unwrap(), Resume::InPlace));
    let (c, resumed_first) = writer.join().unwrap();
    assert!(resumed_first, "a write returned while the pool was suspended (failmode=wait)");
    assert!(pool.suspension().is_none());
    assert_eq!(pool.health(), "ONLINE");
    pool.sync().unwrap();

    // Everything written before, during and after the suspension is on disk.
    let pool = reimport(pool, dir.path(), "susp1");
    let os = pool.objset("susp1").unwrap();
    assert_eq!(get(&*os, a), pattern(1, 300_000));
    assert_eq!(get(&*os, b), pattern(2, 200_000));
    assert_eq!(get(&*os, c), pattern(3, 100_000));
    pool.leak_check().unwrap();
    pool.export().unwrap();
}

#[test]
fn failmode_continue_returns_eio_to_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "susp2", LEAF_BYTES);
    pool.set_prop("failmode", "continue").unwrap();
    assert_eq!(pool.get_prop("failmode").unwrap(), ("continue".into(), "local".into()));
    assert!(err_of(pool.set_prop("failmode", "sometimes")).contains("must be one of"));
    let os = pool.objset("susp2").unwrap();
    let a = put(&*os, &pattern(4, 50_000));
    pool.sync().unwrap();

    inject_sync_fault("susp2", SyncFault::PanicAtStart);
    let b = put(&*os, &pattern(5, 50_000));
    assert!(pool.sync().is_err());
    assert!(pool.suspension().is_some());
    match os.hold_tx() {
        Err(tarn_dmu::DmuError::Io(m)) => assert!(m.contains("suspended"), "{m}"),
        Err(e) => panic!("expected EIO, got {e:?}"),
        Ok(_) => panic!("a write was accepted by a suspended pool (failmode=continue)"),
    }
    assert!(os.wait_synced().is_err());
    assert_eq!(get(&*os, a), pattern(4, 50_000));

    pool.clear(None).unwrap();
    assert!(matches!(pool.resume().unwrap(), Resume::InPlace));
    let c = put(&*os, &pattern(6, 50_000));
    pool.sync().unwrap();
    // The property survives export/import.
    let pool = reimport(pool, dir.path(), "susp2");
    assert_eq!(pool.failmode(), tarn_spa::FailMode::Continue);
    let os = pool.objset("susp2").unwrap();
    assert_eq!(get(&*os, a), pattern(4, 50_000));
    assert_eq!(get(&*os, b), pattern(5, 50_000));
    assert_eq!(get(&*os, c), pattern(6, 50_000));
    pool.export().unwrap();
}

#[test]
fn panic_mid_sync_resumes_by_reimporting_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "susp3", LEAF_BYTES);
    let os = pool.objset("susp3").unwrap();
    let a = put(&*os, &pattern(7, 400_000));
    pool.sync().unwrap();
    let synced = pool.synced_txg();

    inject_sync_fault("susp3", SyncFault::PanicAfterData);
    let _b = put(&*os, &pattern(8, 100_000));
    assert!(pool.sync().is_err());
    let s = pool.suspension().unwrap();
    assert!(s.reopen, "memory was half-synced: {s}");
    assert_eq!(pool.synced_txg(), synced);
    assert_eq!(get(&*os, a), pattern(7, 400_000));

    let old = pool.clone();
    let pool = reopened(pool.resume());
    // The old handle is closed: writes through it fail instead of serving stale state.
    assert!(os.hold_tx().is_err());
    drop(old);
    assert!(pool.suspension().is_none());
    assert_eq!(pool.synced_txg(), synced);
    let os = pool.objset("susp3").unwrap();
    assert_eq!(get(&*os, a), pattern(7, 400_000));
    let c = put(&*os, &pattern(9, 100_000));
    pool.sync().unwrap();
    pool.leak_check().unwrap();
    let pool = reimport(pool, dir.path(), "susp3");
    let os = pool.objset("susp3").unwrap();
    assert_eq!(get(&*os, a), pattern(7, 400_000));
    assert_eq!(get(&*os, c), pattern(9, 100_000));
    pool.export().unwrap();
}

#[test]
fn writes_failing_on_every_leaf_suspend_instead_of_looping() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "susp4", LEAF_BYTES);
    pool.set_prop("failmode", "continue").unwrap();
    let os = pool.objset("susp4").unwrap();
    let a = put(&*os, &pattern(10, 300_000));
    pool.sync().unwrap();

    let ids: Vec<u64> = pool
        .leaf_devices()
        .iter()
        .map(|l| pool.inject(l.guid, IoType::Write, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM).unwrap())
        .collect();
    let _b = put(&*os, &pattern(11, 300_000));
    assert!(pool.sync().is_err());
    let s = pool.suspension().expect("suspended");
    assert!(matches!(s.cause, SuspendCause::Io(_)), "{s}");
    assert!(s.reopen);
    assert_eq!(get(&*os, a), pattern(10, 300_000));
    // Still failing: the pool stays suspended, the sync thread does not spin on it.
    assert!(pool.sync().is_err());

    for id in ids {
        assert!(tarn_vdev::inject::remove_handler(id));
    }
    pool.clear(None).unwrap();
    let pool = reopened(pool.resume());
    let os = pool.objset("susp4").unwrap();
    assert_eq!(get(&*os, a), pattern(10, 300_000));
    let c = put(&*os, &pattern(12, 100_000));
    pool.sync().unwrap();
    pool.leak_check().unwrap();
    let pool = reimport(pool, dir.path(), "susp4");
    let os = pool.objset("susp4").unwrap();
    assert_eq!(get(&*os, a), pattern(10, 300_000));
    assert_eq!(get(&*os, c), pattern(12, 100_000));
    pool.export().unwrap();
}

/// A raidz1 txg is durable only when all but one leaf flushed (the write rule read as
/// a durability rule); one leaf that lost its flush is tolerated, two suspend the pool
/// instead of committing a txg that could not be reconstructed.
#[test]
fn raidz_txg_needs_all_but_nparity_leaves_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let leaves: Vec<_> = ["a", "b", "c"].iter().map(|n| mkfile(dir.path(), &format!("{n}.img"), LEAF_BYTES)).collect();
    let pool = Pool::create(&tarn_spa::CreateSpec {
        name: "susp5".into(),
        vdevs: vec![tarn_spa::TopSpec::Raidz { nparity: 1, leaves }],
        ..Default::default()
    })
    .unwrap();
    pool.set_prop("failmode", "continue").unwrap();
    let os = pool.objset("susp5").unwrap();
    let a = put(&*os, &pattern(13, 300_000));
    pool.sync().unwrap();
    let devs = pool.leaf_devices();
    let flush_fault = |guid| pool.inject(guid, IoType::Flush, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM).unwrap();

    // One leaf's flush lost: within parity, the txg commits.
    let one = flush_fault(devs[0].guid);
    let b = put(&*os, &pattern(14, 300_000));
    pool.sync().unwrap();
    assert!(pool.suspension().is_none());
    let synced = pool.synced_txg();

    // Two leaves' flushes lost: beyond parity, the pool suspends.
    let two = flush_fault(devs[1].guid);
    let _c = put(&*os, &pattern(15, 300_000));
    assert!(pool.sync().is_err(), "a raidz1 txg committed with only one of three leaves flushed");
    let s = pool.suspension().expect("suspended");
    assert!(s.to_string().contains("too few leaves"), "{s}");
    assert_eq!(pool.synced_txg(), synced);

    for id in [one, two] {
        assert!(tarn_vdev::inject::remove_handler(id));
    }
    pool.clear(None).unwrap();
    let pool = reopened(pool.resume());
    let os = pool.objset("susp5").unwrap();
    assert_eq!(get(&*os, a), pattern(13, 300_000));
    assert_eq!(get(&*os, b), pattern(14, 300_000));
    pool.leak_check().unwrap();
    pool.export().unwrap();
}

/// A panic in the scan thread suspends the pool (cause "scan", marked for a reopen:
/// the scan's record may be half-changed) instead of ending the scan silently or the
/// process; synced data stays readable; `zpool clear` re-imports from disk, after
/// which a scrub runs to the end and the pool checks clean.
#[test]
fn scan_thread_panic_suspends_and_clear_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "susp_scan", LEAF_BYTES);
    let os = pool.objset("susp_scan").unwrap();
    let a = put(&*os, &pattern(21, 500_000));
    pool.sync().unwrap();

    inject_sync_fault("susp_scan", SyncFault::PanicInScan);
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.suspension().expect("a panic in the scan thread suspends the pool");
    match &s.cause {
        SuspendCause::Panic { thread, message } => {
            assert_eq!(thread, "scan");
            assert!(message.contains("injected sync fault PanicInScan"), "{message}");
        }
        other => panic!("cause {other:?}"),
    }
    assert!(s.reopen, "the scan record may be half-changed: {s}");
    assert_eq!(pool.health(), "SUSPENDED");
    assert_eq!(get(&*os, a), pattern(21, 500_000));

    let pool = reopened(pool.resume());
    assert!(pool.suspension().is_none());
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let st = pool.scan_status().unwrap().phys;
    assert_eq!(st.state, tarn_spa::scan::ScanState::Finished);
    assert_eq!(st.errors, 0);
    let os = pool.objset("susp_scan").unwrap();
    assert_eq!(get(&*os, a), pattern(21, 500_000));
    pool.leak_check().unwrap();
    pool.export().unwrap();
}
