//! Snapshots, clones, rollback and destroy at the engine level, against an in-memory
//! model: every snapshot and head must read back exactly as the model says after
//! every step and after export/import, and destroying everything gives the space back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_dmu::ObjectStore;
use tarn_spa::{Pool, Rewind, SpaError};

mod common;
use common::{get, pattern, put, settle, Rng};

fn new_pool(dir: &Path, name: &str) -> Arc<Pool> {
    common::mirror_pool(dir, name, 256 << 20)
}

/// object id → contents, for one head or snapshot.
type Image = BTreeMap<u64, Vec<u8>>;

fn check(os: &dyn ObjectStore, img: &Image, what: &str) {
    for (obj, data) in img {
        assert_eq!(&get(os, *obj), data, "{what}: object {obj} differs");
    }
}

fn overwrite(os: &dyn ObjectStore, obj: u64, off: usize, bytes: &[u8], img: &mut Image) {
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, off as u64, bytes).unwrap();
    let v = img.get_mut(&obj).unwrap();
    v[off..off + bytes.len()].copy_from_slice(bytes);
}

fn prop(pool: &Pool, name: &str, p: &str) -> u64 {
    let all = pool.list_all().unwrap();
    let i = all.iter().find(|i| i.name == name).unwrap_or_else(|| panic!("{name} not listed"));
    i.props[p].0.parse().unwrap()
}

#[test]
fn snapshot_keeps_old_blocks_and_destroy_frees_them() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "sn1");
    settle(&pool);
    let base = pool.alloc_bytes();
    pool.create_dataset("sn1/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("sn1/fs").unwrap();
    let mut img = Image::new();
    let a = put(&*os, &pattern(1, 4 << 20));
    img.insert(a, pattern(1, 4 << 20));
    let s1_img = img.clone();
    pool.snapshot(&["sn1/fs@s1".into()], false).unwrap();
    // Overwrite half of the object: the old blocks now belong to s1 alone.
    overwrite(&*os, a, 0, &pattern(2, 2 << 20), &mut img);
    pool.sync().unwrap();
    let s1 = pool.snapshot_objset("sn1/fs@s1").unwrap();
    check(&*s1, &s1_img, "s1");
    check(&*os, &img, "head");
    // s1's unique space is about the 2 MiB overwritten; the head's snapshot usage too.
    let used_s1 = prop(&pool, "sn1/fs@s1", "used");
    assert!((2 << 20..3 << 20).contains(&used_s1), "s1 used {used_s1}");
    assert_eq!(prop(&pool, "sn1/fs", "usedbysnapshots"), used_s1);
    assert!(prop(&pool, "sn1/fs", "written") >= 2 << 20);
    // zfsprops(7): usedbydataset is what destroying the file system (after its
    // snapshots) frees, i.e. all it references; used adds the snapshots' space.
    assert_eq!(prop(&pool, "sn1/fs", "usedbydataset"), prop(&pool, "sn1/fs", "referenced"));
    assert_eq!(
        prop(&pool, "sn1/fs", "used"),
        prop(&pool, "sn1/fs", "usedbydataset") + prop(&pool, "sn1/fs", "usedbysnapshots")
    );
    // Errors change nothing.
    assert!(matches!(pool.snapshot(&["sn1/fs@s1".into()], false), Err(SpaError::Exists(_))));
    assert!(pool.snapshot(&["sn1/nope@x".into()], false).is_err());
    assert!(pool.snapshot(&["sn1/fs@bad/name".into()], false).is_err());
    assert!(matches!(pool.destroy_dataset("sn1/fs", false), Err(SpaError::HasChildren(_))));
    // Destroying s1 gives its unique blocks back.
    settle(&pool);
    let before = pool.alloc_bytes();
    pool.destroy_snapshot("sn1/fs@s1").unwrap();
    settle(&pool);
    let freed = before - pool.alloc_bytes();
    assert!(freed >= used_s1, "freed {freed} < used {used_s1}");
    check(&*os, &img, "head after destroy");
    assert_eq!(prop(&pool, "sn1/fs", "usedbysnapshots"), 0);
    drop(os);
    drop(s1);
    pool.destroy_dataset("sn1/fs", true).unwrap();
    settle(&pool);
    let end = pool.alloc_bytes();
    assert!(end.abs_diff(base) <= 128 << 10, "space not returned: base {base}, end {end}");
    pool.export().unwrap();
}

#[test]
fn rollback_and_clone() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "sn2");
    pool.create_dataset("sn2/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("sn2/fs").unwrap();
    let mut img = Image::new();
    let a = put(&*os, &pattern(3, 1 << 20));
    img.insert(a, pattern(3, 1 << 20));
    pool.snapshot(&["sn2/fs@a".into()], false).unwrap();
    let img_a = img.clone();
    overwrite(&*os, a, 4096, &[9u8; 70000], &mut img);
    pool.snapshot(&["sn2/fs@b".into()], false).unwrap();
    overwrite(&*os, a, 0, &[1u8; 5000], &mut img);
    drop(os);
    // Rollback past a newer snapshot needs -r.
    let e = pool.rollback("sn2/fs@a", false).unwrap_err().to_string();
    assert!(e.contains("more recent snapshots"), "{e}");
    // A clone of @a keeps it from being destroyed.
    pool.clone_snapshot("sn2/fs@a", "sn2/c", &BTreeMap::new(), false).unwrap();
    let c = pool.objset("sn2/c").unwrap();
    check(&*c, &img_a, "clone");
    let mut img_c = img_a.clone();
    overwrite(&*c, a, 0, &[5u8; 10000], &mut img_c);
    pool.sync().unwrap();
    let e = pool.destroy_snapshot("sn2/fs@a").unwrap_err().to_string();
    assert!(e.contains("dependent clones"), "{e}");
    // A clone's usedbydataset counts only what it does not share with its origin:
    // the rewritten 10000 bytes (one 128 KiB block and metadata), not the origin's
    // 1 MiB.
    let c_usedds = prop(&pool, "sn2/c", "usedbydataset");
    assert!(c_usedds > 0 && c_usedds < 512 << 10, "clone usedbydataset {c_usedds}");
    assert!(prop(&pool, "sn2/c", "referenced") >= 1 << 20);
    let listed = pool.list_all().unwrap();
    let origin = &listed.iter().find(|i| i.name == "sn2/c").unwrap().props["origin"].0;
    assert_eq!(origin, "sn2/fs@a");
    // Roll the head back to @a, destroying @b.
    let gone = pool.rollback("sn2/fs@a", true).unwrap();
    assert_eq!(gone, vec!["sn2/fs@b".to_string()]);
    let os = pool.objset("sn2/fs").unwrap();
    check(&*os, &img_a, "head after rollback");
    check(&*c, &img_c, "clone after rollback");
    drop(os);
    drop(c);
    // Everything survives export/import.
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("sn2", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    check(&*pool.objset("sn2/fs").unwrap(), &img_a, "head after import");
    check(&*pool.objset("sn2/c").unwrap(), &img_c, "clone after import");
    check(&*pool.snapshot_objset("sn2/fs@a").unwrap(), &img_a, "@a after import");
    // -R destroys the clone along with the snapshot.
    let plan = pool.destroy_plan("sn2/fs@a", false, true).unwrap();
    assert_eq!(plan, vec!["sn2/c".to_string(), "sn2/fs@a".to_string()]);
    pool.destroy_dataset_ext("sn2/fs@a", false, true).unwrap();
    check(&*pool.objset("sn2/fs").unwrap(), &img_a, "head after -R");
    pool.export().unwrap();
}

/// Random writes, deletes, snapshots, clones, rollbacks and destroys against a model.
#[test]
fn random_model() {
    let rounds: u64 = std::env::var("TARN_SNAP_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    for seed in 1..=rounds {
        run_model(seed);
    }
}

fn run_model(seed: u64) {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "snm");
    settle(&pool);
    let base = pool.alloc_bytes();
    let mut rng = Rng(seed * 7919 + 1);
    // heads: name → image; snaps: name → image.
    let mut heads: BTreeMap<String, Image> = BTreeMap::new();
    let mut snaps: BTreeMap<String, Image> = BTreeMap::new();
    pool.create_dataset("snm/h", &BTreeMap::new()).unwrap();
    heads.insert("snm/h".into(), Image::new());
    let mut n = 0u64;
    for step in 0..60 {
        n += 1;
        let names: Vec<String> = heads.keys().cloned().collect();
        let h = names[rng.below(names.len() as u64) as usize].clone();
        let os = pool.objset(&h).unwrap();
        let ctx = format!("seed {seed} step {step}");
        match rng.below(10) {
            0..=2 => {
                let len = 1 + rng.below(600_000) as usize;
                let data = pattern(rng.next(), len);
                let obj = put(&*os, &data);
                heads.get_mut(&h).unwrap().insert(obj, data);
            }
            3..=4 => {
                let img = heads.get_mut(&h).unwrap();
                if let Some(&obj) = img.keys().nth(rng.below(img.len() as u64) as usize) {
                    let len = img[&obj].len();
                    let off = rng.below(len as u64) as usize;
                    let l = (1 + rng.below(200_000) as usize).min(len - off);
                    overwrite(&*os, obj, off, &pattern(rng.next(), l), img);
                }
            }
            5 => {
                let img = heads.get_mut(&h).unwrap();
                if let Some(&obj) = img.keys().nth(rng.below(img.len() as u64) as usize) {
                    let tx = os.hold_tx().unwrap();
                    os.free_object(&tx, obj).unwrap();
                    img.remove(&obj);
                }
            }
            6 => {
                let s = format!("{h}@s{n}");
                pool.snapshot(std::slice::from_ref(&s), false).unwrap();
                snaps.insert(s, heads[&h].clone());
            }
            7 => {
                // Destroy a random snapshot without clones.
                let cands: Vec<String> = snaps.keys().cloned().collect();
                if !cands.is_empty() {
                    let s = &cands[rng.below(cands.len() as u64) as usize];
                    match pool.destroy_snapshot(s) {
                        Ok(()) => {
                            snaps.remove(s);
                        }
                        Err(SpaError::Busy(_)) => {}
                        Err(e) => panic!("{ctx}: destroy {s}: {e}"),
                    }
                }
            }
            8 => {
                let cands: Vec<String> = snaps.keys().cloned().collect();
                if !cands.is_empty() && heads.len() < 4 {
                    let s = &cands[rng.below(cands.len() as u64) as usize];
                    let c = format!("snm/c{n}");
                    pool.clone_snapshot(s, &c, &BTreeMap::new(), false).unwrap();
                    heads.insert(c, snaps[s].clone());
                }
            }
            _ => {
                // Roll back to the newest snapshot of h.
                drop(os);
                if let Some(last) = pool.snapshots_of(&h).last().cloned() {
                    match pool.rollback(&last, false) {
                        Ok(_) => {
                            heads.insert(h.clone(), snaps[&last].clone());
                        }
                        Err(e) => panic!("{ctx}: rollback {last}: {e}"),
                    }
                }
                continue;
            }
        }
        drop(os);
        if step % 10 == 9 {
            pool.sync().unwrap();
            // Allocated space is exactly what the trees name (snapshots share once).
            let r = pool.leak_check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.snapshots as usize, snaps.len(), "{ctx}: {r:?}");
            for (name, img) in &heads {
                check(&*pool.objset(name).unwrap(), img, &format!("{ctx}: {name}"));
            }
            for (name, img) in &snaps {
                check(&*pool.snapshot_objset(name).unwrap(), img, &format!("{ctx}: {name}"));
            }
        }
    }
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("snm", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    for (name, img) in &heads {
        check(&*pool.objset(name).unwrap(), img, &format!("seed {seed} after import: {name}"));
    }
    for (name, img) in &snaps {
        check(&*pool.snapshot_objset(name).unwrap(), img, &format!("seed {seed} after import: {name}"));
    }
    pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} after import: {e}"));
    // Destroy everything (clones first via -R) and the space comes back.
    pool.destroy_dataset_ext("snm/h", true, true).unwrap();
    for c in heads.keys().filter(|k| k.starts_with("snm/c")) {
        if pool.list_datasets().unwrap().iter().any(|i| &i.name == c) {
            pool.destroy_dataset_ext(c, true, true).unwrap();
        }
    }
    settle(&pool);
    let r = pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} at the end: {e}"));
    assert_eq!((r.snapshots, r.deadlist_entries), (0, 0), "seed {seed}: {r:?}");
    let end = pool.alloc_bytes();
    assert!(end.abs_diff(base) <= 128 << 10, "seed {seed}: space not returned: base {base}, end {end}");
    pool.export().unwrap();
}

#[test]
fn promote_moves_history_and_origin_can_go() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "sn9");
    settle(&pool);
    let base = pool.alloc_bytes();
    pool.create_dataset("sn9/a", &BTreeMap::new()).unwrap();
    let a = pool.objset("sn9/a").unwrap();
    let mut img = Image::new();
    let x = put(&*a, &pattern(7, 1 << 20));
    img.insert(x, pattern(7, 1 << 20));
    pool.snapshot(&["sn9/a@s1".into()], false).unwrap();
    overwrite(&*a, x, 0, &pattern(8, 256 << 10), &mut img);
    pool.snapshot(&["sn9/a@s2".into()], false).unwrap();
    let img_s2 = img.clone();
    overwrite(&*a, x, 512 << 10, &pattern(9, 256 << 10), &mut img);
    pool.snapshot(&["sn9/a@s3".into()], false).unwrap();
    pool.clone_snapshot("sn9/a@s2", "sn9/c", &BTreeMap::new(), false).unwrap();
    let c = pool.objset("sn9/c").unwrap();
    let mut img_c = img_s2.clone();
    overwrite(&*c, x, 0, &pattern(10, 128 << 10), &mut img_c);
    pool.snapshot(&["sn9/c@c1".into()], false).unwrap();
    pool.sync().unwrap();
    // Refusals change nothing.
    assert!(pool.promote("sn9/a").unwrap_err().to_string().contains("not a cloned filesystem"));
    assert!(pool.promote("sn9/a@s1").is_err());
    let moved = pool.promote("sn9/c").unwrap();
    pool.sync().unwrap();
    pool.leak_check().unwrap_or_else(|e| panic!("after promote: {e}"));
    assert_eq!(
        moved,
        vec![
            ("sn9/a@s1".to_string(), "sn9/c@s1".to_string()),
            ("sn9/a@s2".to_string(), "sn9/c@s2".to_string())
        ]
    );
    assert_eq!(pool.snapshots_of("sn9/c"), vec!["sn9/c@s1", "sn9/c@s2", "sn9/c@c1"]);
    assert_eq!(pool.snapshots_of("sn9/a"), vec!["sn9/a@s3"]);
    let listed = pool.list_all().unwrap();
    let origin = |n: &str| listed.iter().find(|i| i.name == n).unwrap().props["origin"].0.clone();
    assert_eq!(origin("sn9/a"), "sn9/c@s2");
    assert_eq!(origin("sn9/c"), "-");
    // Promoting back restores the old shape.
    assert!(pool.promote("sn9/c").unwrap_err().to_string().contains("not a cloned filesystem"));
    // The old file system can now be destroyed with its snapshots; the clone and the
    // moved snapshots keep their data.
    drop(a);
    pool.destroy_dataset("sn9/a", true).unwrap();
    pool.sync().unwrap();
    pool.leak_check().unwrap_or_else(|e| panic!("after destroying the old origin: {e}"));
    check(&*c, &img_c, "promoted clone");
    check(&*pool.snapshot_objset("sn9/c@s2").unwrap(), &img_s2, "moved origin");
    // Survives export/import, and destroying everything returns the space.
    drop(c);
    pool.export().unwrap();
    let pool = tarn_spa::Pool::import("sn9", &[d.path().to_path_buf()], tarn_spa::Rewind::None, None).unwrap();
    assert_eq!(pool.snapshots_of("sn9/c"), vec!["sn9/c@s1", "sn9/c@s2", "sn9/c@c1"]);
    let c = pool.objset("sn9/c").unwrap();
    check(&*c, &img_c, "promoted clone after import");
    drop(c);
    pool.destroy_dataset("sn9/c", true).unwrap();
    settle(&pool);
    let end = pool.alloc_bytes();
    assert!(end.abs_diff(base) <= 128 << 10, "space not returned: base {base}, end {end}");
    pool.export().unwrap();
}

/// A snapshot is one sync task: with nothing else dirty it costs exactly one txg sync,
/// and taken while another thread keeps writing it holds every write acknowledged
/// before the call (each writer round notes what it finished before the snapshot
/// started), and survives an export/import with those contents.
#[test]
fn snapshot_is_one_txg_and_freezes_acknowledged_writes() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "sn5");
    pool.create_dataset("sn5/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("sn5/fs").unwrap();
    let obj = put(&*os, &[0u8; 8192]);
    settle(&pool);
    let t0 = pool.synced_txg();
    pool.snapshot(&["sn5/fs@idle".into()], false).unwrap();
    assert_eq!(pool.synced_txg(), t0 + 1, "an idle snapshot must cost one txg sync");

    // Writer: round r writes r into the first 8 bytes, then publishes r as done.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let w = {
        let (os, stop, done) = (os.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut r = 1usize;
            while !stop.load(Ordering::SeqCst) {
                let tx = os.hold_tx().unwrap();
                os.write(&tx, obj, 0, &(r as u64).to_le_bytes()).unwrap();
                drop(tx);
                done.store(r, Ordering::SeqCst);
                r += 1;
            }
        })
    };
    let mut floors = Vec::new();
    for i in 0..5 {
        while done.load(Ordering::SeqCst) < 10 * (i + 1) {
            std::thread::yield_now();
        }
        let floor = done.load(Ordering::SeqCst) as u64;
        pool.snapshot(&[format!("sn5/fs@w{i}")], false).unwrap();
        floors.push(floor);
    }
    stop.store(true, Ordering::SeqCst);
    w.join().unwrap();
    let read_round = |pool: &Pool, snap: &str| {
        let s = pool.snapshot_objset(snap).unwrap();
        u64::from_le_bytes(get(&*s, obj)[..8].try_into().unwrap())
    };
    let mut seen = Vec::new();
    for (i, floor) in floors.iter().enumerate() {
        let v = read_round(&pool, &format!("sn5/fs@w{i}"));
        assert!(v >= *floor, "@w{i} holds round {v}, but round {floor} was acknowledged before it");
        seen.push(v);
    }
    drop(os);
    let pool = common::reimport(pool, d.path(), "sn5");
    for (i, v) in seen.iter().enumerate() {
        assert_eq!(read_round(&pool, &format!("sn5/fs@w{i}")), *v, "@w{i} changed across import");
    }
    pool.export().unwrap();
}

/// The listings that leave snapshots out (`list_datasets`, `list_under_kinds(_, false)`)
/// or file systems out (`list_snapshots`) read fewer records but give every row they
/// keep exactly as the full listing does: space figures that count snapshots and
/// children, `origin` of a clone whose origin snapshot is not listed, the snapshot count.
#[test]
fn partial_listings_match_the_full_listing() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "sn6");
    pool.create_dataset("sn6/fs", &BTreeMap::new()).unwrap();
    pool.create_dataset("sn6/fs/kid", &BTreeMap::new()).unwrap();
    for (fs, seed) in [("sn6/fs", 1), ("sn6/fs/kid", 2)] {
        let os = pool.objset(fs).unwrap();
        let a = put(&*os, &pattern(seed, 600 << 10));
        pool.snapshot(&[format!("{fs}@one")], false).unwrap();
        overwrite(&*os, a, 0, &[7u8; 300 << 10], &mut Image::from([(a, pattern(seed, 600 << 10))]));
        pool.snapshot(&[format!("{fs}@two")], false).unwrap();
    }
    pool.clone_snapshot("sn6/fs@one", "sn6/c", &BTreeMap::new(), false).unwrap();
    pool.sync().unwrap();
    let rows = |v: Vec<tarn_spa::DatasetInfo>| -> Vec<String> {
        v.iter()
            .map(|i| format!("{} {} {} {} {:?}", i.name, i.used_bytes, i.avail_bytes, i.refer_bytes, i.props))
            .collect()
    };
    let all = pool.list_all().unwrap();
    let (fss, snaps): (Vec<_>, Vec<_>) = all.into_iter().partition(|i| !i.name.contains('@'));
    assert_eq!(fss.len(), 4, "{:?}", rows(fss.clone()));
    assert_eq!(snaps.len(), 4);
    assert!(fss.iter().any(|i| i.name == "sn6/c" && i.props["origin"].0 == "sn6/fs@one"));
    assert!(fss
        .iter()
        .any(|i| i.name == "sn6/fs" && i.props["snapshot_count"].0 == "2" && i.props["usedbysnapshots"].0 != "0"));
    assert_eq!(rows(pool.list_datasets().unwrap()), rows(fss.clone()));
    let snaps_two: Vec<_> = snaps.iter().filter(|i| i.name == "sn6/fs@two").cloned().collect();
    assert_eq!(rows(pool.list_snapshots().unwrap()), rows(snaps));
    let under: Vec<_> = pool.list_under("sn6/fs").unwrap().into_iter().filter(|i| !i.name.contains('@')).collect();
    assert_eq!(under.len(), 2);
    assert_eq!(rows(pool.list_under_kinds("sn6/fs", false).unwrap()), rows(under));
    let one = pool.list_under_kinds("sn6/fs@two", false).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(rows(one), rows(snaps_two));
}
