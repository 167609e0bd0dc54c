//! User holds and deferred destroy at the engine level.
//!
//! How: pools on file vdevs in a temporary directory. Holds and the defer flag are
//! checked through `Pool::holds` and the `userrefs`/`defer_destroy` properties, before
//! and after export/import; a deferred destroy must happen at the last release (or
//! with the last clone) and give the space back; every refused operation must leave
//! the listing (names, origins, holds) exactly as it was.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_spa::{Pool, SpaError};

mod common;
use common::{err_of, get, names, pattern, prop_value as prop, put, reimport, settle, state};

fn new_pool(dir: &Path, name: &str) -> Arc<Pool> {
    common::mirror_pool(dir, name, 128 << 20)
}

#[test]
fn holds_survive_export_import_and_block_destroy() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "ho1");
    pool.create_dataset("ho1/fs", &BTreeMap::new()).unwrap();
    pool.create_dataset("ho1/fs/kid", &BTreeMap::new()).unwrap();
    let os = pool.objset("ho1/fs").unwrap();
    put(&*os, &pattern(1, 300_000));
    drop(os);
    pool.snapshot(&["ho1/fs@a".into()], true).unwrap();
    pool.snapshot(&["ho1/fs@b".into()], false).unwrap();
    assert_eq!(prop(&pool, "ho1/fs@a", "userrefs"), "0");
    // -r holds the same snapshot of every descendant that has one.
    assert_eq!(pool.hold("ho1/fs@a", "keep", true).unwrap(), vec!["ho1/fs@a", "ho1/fs/kid@a"]);
    assert_eq!(pool.hold("ho1/fs@a", "backup", false).unwrap(), vec!["ho1/fs@a"]);
    let h = pool.holds("ho1/fs@a").unwrap();
    assert_eq!(h.keys().collect::<Vec<_>>(), ["backup", "keep"]);
    assert_eq!(prop(&pool, "ho1/fs@a", "userrefs"), "2");
    assert_eq!(prop(&pool, "ho1/fs/kid@a", "userrefs"), "1");
    // Refusals, in OpenZFS's words, change nothing.
    let before = state(&pool);
    let e = err_of(pool.hold("ho1/fs@a", "keep", false));
    assert_eq!(e, "cannot hold snapshot 'ho1/fs@a': tag already exists on this dataset");
    // -r is all or nothing: the kid has "backup" only after this fails on the parent.
    let e = err_of(pool.hold("ho1/fs@a", "backup", true));
    assert!(e.contains("tag already exists on this dataset"), "{e}");
    let long = "t".repeat(256);
    assert_eq!(err_of(pool.hold("ho1/fs@a", &long, false)), "cannot hold snapshot 'ho1/fs@a': tag too long");
    assert!(pool.hold("ho1/fs@a", &"t".repeat(255), false).is_ok());
    pool.release("ho1/fs@a", &"t".repeat(255), false).unwrap();
    assert_eq!(
        err_of(pool.hold("ho1/fs@nope", "x", false)),
        "cannot hold snapshot 'ho1/fs@nope': dataset does not exist"
    );
    assert_eq!(err_of(pool.hold("ho1/nope@a", "x", false)), "cannot open 'ho1/nope': dataset does not exist");
    assert!(matches!(pool.hold("ho1/fs", "x", false), Err(SpaError::Invalid(_))));
    assert!(matches!(pool.holds("ho1/fs"), Err(SpaError::Invalid(_))));
    assert_eq!(
        err_of(pool.release("ho1/fs@a", "nope", false)),
        "cannot release hold from snapshot 'ho1/fs@a': no such tag on this dataset"
    );
    assert_eq!(
        err_of(pool.release("ho1/fs@zz", "keep", false)),
        "cannot release hold from snapshot 'ho1/fs@zz': dataset does not exist"
    );
    // A held snapshot cannot be destroyed, alone, with its file system, or by rollback.
    let busy = "cannot destroy snapshot ho1/fs@a: dataset is busy";
    assert_eq!(err_of(pool.destroy_snapshot("ho1/fs@a")), busy);
    assert!(matches!(pool.destroy_dataset_ext("ho1/fs@a", false, false), Err(SpaError::Busy(_))));
    // With -r the descendants come first: the kid's held @a is the one named.
    assert_eq!(
        err_of(pool.destroy_plan("ho1/fs", true, false)),
        "cannot destroy snapshot ho1/fs/kid@a: dataset is busy"
    );
    assert!(matches!(pool.destroy_dataset_ext("ho1/fs", true, true), Err(SpaError::Busy(_))));
    pool.hold("ho1/fs@b", "newer", false).unwrap();
    let before_b = state(&pool);
    assert_eq!(err_of(pool.rollback("ho1/fs@a", true)), "cannot destroy snapshot ho1/fs@b: dataset is busy");
    assert_eq!(state(&pool), before_b);
    pool.release("ho1/fs@b", "newer", false).unwrap();
    assert_eq!(state(&pool), before);
    // Holds, with their times, survive export/import.
    let pool = reimport(pool, d.path(), "ho1");
    assert_eq!(pool.holds("ho1/fs@a").unwrap(), h);
    assert_eq!(state(&pool), before);
    // Releasing: -r takes the tag from every snapshot that has it and skips the others.
    let r = pool.release("ho1/fs@a", "backup", true).unwrap();
    assert_eq!(r.released, vec!["ho1/fs@a"]);
    assert!(r.destroyed.is_empty());
    pool.release("ho1/fs@a", "keep", true).unwrap();
    assert_eq!(prop(&pool, "ho1/fs@a", "userrefs"), "0");
    assert_eq!(prop(&pool, "ho1/fs/kid@a", "userrefs"), "0");
    assert!(pool.holds("ho1/fs@a").unwrap().is_empty());
    pool.destroy_dataset_ext("ho1/fs@a", true, false).unwrap();
    assert_eq!(names(&pool), ["ho1", "ho1/fs", "ho1/fs@b", "ho1/fs/kid"]);
    let pool = reimport(pool, d.path(), "ho1");
    assert_eq!(names(&pool), ["ho1", "ho1/fs", "ho1/fs@b", "ho1/fs/kid"]);
    pool.export().unwrap();
}

#[test]
fn deferred_destroy_happens_at_the_last_release_and_frees_space() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "ho2");
    pool.create_dataset("ho2/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("ho2/fs").unwrap();
    let a = put(&*os, &pattern(2, 4 << 20));
    pool.snapshot(&["ho2/fs@a".into()], false).unwrap();
    // Overwrite half: those blocks belong to @a alone.
    let tx = os.hold_tx().unwrap();
    os.write(&tx, a, 0, &pattern(3, 2 << 20)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let used_a: u64 = prop(&pool, "ho2/fs@a", "used").parse().unwrap();
    assert!(used_a >= 2 << 20, "@a used {used_a}");
    pool.hold("ho2/fs@a", "t1", false).unwrap();
    pool.hold("ho2/fs@a", "t2", false).unwrap();
    // -d of a held snapshot only marks it.
    assert!(pool.defer_destroy(&["ho2/fs@a".into()]).unwrap().is_empty());
    assert_eq!(prop(&pool, "ho2/fs@a", "defer_destroy"), "on");
    assert_eq!(prop(&pool, "ho2/fs@a", "userrefs"), "2");
    // Still refused without -d; still there after export/import.
    assert!(matches!(pool.destroy_snapshot("ho2/fs@a"), Err(SpaError::Busy(_))));
    drop(os);
    let pool = reimport(pool, d.path(), "ho2");
    assert_eq!(prop(&pool, "ho2/fs@a", "defer_destroy"), "on");
    assert_eq!(pool.holds("ho2/fs@a").unwrap().len(), 2);
    let r = pool.release("ho2/fs@a", "t1", false).unwrap();
    assert!(r.destroyed.is_empty());
    assert!(names(&pool).contains(&"ho2/fs@a".to_string()));
    settle(&pool);
    let before = pool.alloc_bytes();
    // The last release destroys it, and its blocks come back.
    let r = pool.release("ho2/fs@a", "t2", false).unwrap();
    assert_eq!(r.destroyed, vec!["ho2/fs@a"]);
    assert_eq!(names(&pool), ["ho2", "ho2/fs"]);
    settle(&pool);
    let freed = before - pool.alloc_bytes();
    assert!(freed >= used_a, "freed {freed} < used {used_a}");
    assert_eq!(get(&*pool.objset("ho2/fs").unwrap(), a)[..2 << 20], pattern(3, 2 << 20)[..]);

    // -d of a snapshot with neither holds nor clones destroys it at once.
    pool.snapshot(&["ho2/fs@now".into()], false).unwrap();
    assert_eq!(pool.defer_destroy(&["ho2/fs@now".into(), "ho2/fs@nope".into()]).unwrap(), vec!["ho2/fs@now"]);
    assert!(matches!(pool.defer_destroy(&["ho2/fs@nope".into()]), Err(SpaError::NotFound(_))));
    // A deferred snapshot with a clone goes with its last clone.
    pool.snapshot(&["ho2/fs@b".into()], false).unwrap();
    pool.clone_snapshot("ho2/fs@b", "ho2/c", &BTreeMap::new(), false).unwrap();
    assert!(pool.defer_destroy(&["ho2/fs@b".into()]).unwrap().is_empty());
    assert_eq!(prop(&pool, "ho2/fs@b", "defer_destroy"), "on");
    let pool = reimport(pool, d.path(), "ho2");
    assert_eq!(pool.destroy_dataset("ho2/c", false).unwrap(), vec!["ho2/c", "ho2/fs@b"]);
    assert_eq!(names(&pool), ["ho2", "ho2/fs"]);
    // ... unless it is held: then the last release does it.
    pool.snapshot(&["ho2/fs@c".into()], false).unwrap();
    pool.clone_snapshot("ho2/fs@c", "ho2/c2", &BTreeMap::new(), false).unwrap();
    pool.hold("ho2/fs@c", "h", false).unwrap();
    pool.defer_destroy(&["ho2/fs@c".into()]).unwrap();
    assert_eq!(pool.destroy_dataset("ho2/c2", false).unwrap(), vec!["ho2/c2"]);
    assert_eq!(pool.release("ho2/fs@c", "h", false).unwrap().destroyed, vec!["ho2/fs@c"]);
    // -R names a deferred origin after its clone: the clone's destroy took it already.
    pool.snapshot(&["ho2/fs@d".into()], false).unwrap();
    pool.clone_snapshot("ho2/fs@d", "ho2/c3", &BTreeMap::new(), false).unwrap();
    pool.defer_destroy(&["ho2/fs@d".into()]).unwrap();
    assert_eq!(pool.destroy_dataset_ext("ho2/fs@d", false, true).unwrap(), vec!["ho2/c3", "ho2/fs@d"]);
    assert_eq!(names(&pool), ["ho2", "ho2/fs"]);
    pool.export().unwrap();
}

/// Temporary holds (what `zfs send` takes): they block destroys like user holds, show
/// in `holds` and `userrefs`, refuse a duplicate tag without holding anything, make
/// `destroy -d` defer, destroy the deferred snapshot at their release, and do not
/// survive an export/import.
#[test]
fn temporary_holds_block_destroy_and_vanish_on_import() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "ho3");
    pool.create_dataset("ho3/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("ho3/fs").unwrap();
    put(&*os, &pattern(3, 200_000));
    drop(os);
    pool.snapshot(&["ho3/fs@a".into(), "ho3/fs@b".into()], false).unwrap();
    let snaps = vec!["ho3/fs@a".to_string(), "ho3/fs@b".to_string()];
    let t = pool.hold_temporary(&snaps, ".send-1-0").unwrap();
    assert_eq!(pool.holds("ho3/fs@a").unwrap().keys().collect::<Vec<_>>(), [".send-1-0"]);
    assert_eq!(prop(&pool, "ho3/fs@b", "userrefs"), "1");
    let before = state(&pool);
    let e = pool.destroy_snapshot("ho3/fs@a").unwrap_err();
    assert!(matches!(e, SpaError::Busy(_)), "{e}");
    assert_eq!(e.to_string(), "cannot destroy snapshot ho3/fs@a: dataset is busy");
    // A duplicate tag on any of the names holds nothing new.
    let e = pool.hold_temporary(&["ho3/fs@b".into()], ".send-1-0").unwrap_err();
    assert!(matches!(e, SpaError::Exists(_)), "{e}");
    assert!(err_of(pool.hold_temporary(&["ho3/fs@nope".into()], "x")).contains("dataset does not exist"));
    assert_eq!(state(&pool), before);
    // destroy -d defers while the temporary hold is there; its release destroys @a.
    assert!(pool.defer_destroy(&["ho3/fs@a".into()]).unwrap().is_empty());
    assert_eq!(prop(&pool, "ho3/fs@a", "defer_destroy"), "on");
    assert_eq!(pool.release_temporary(t).unwrap(), ["ho3/fs@a"]);
    assert_eq!(names(&pool), ["ho3", "ho3/fs", "ho3/fs@b"]);
    assert_eq!(prop(&pool, "ho3/fs@b", "userrefs"), "0");
    // Held again, then the pool goes away: after the import nothing holds @b.
    let _t = pool.hold_temporary(&["ho3/fs@b".into()], ".send-1-1").unwrap();
    let pool = reimport(pool, d.path(), "ho3");
    assert!(pool.holds("ho3/fs@b").unwrap().is_empty());
    pool.destroy_snapshot("ho3/fs@b").unwrap();
    settle(&pool);
    pool.export().unwrap();
}
