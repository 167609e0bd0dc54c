//! Exact space accounting of snapshots, clones and rollback on the metaslab space
//! maps: a random sequence of writes, overwrites, frees, snapshots, clones, rollbacks
//! and destroys (snapshots in random order, clones, `-R`) runs against a model, and
//! after every step a sync and [`Pool::leak_check`] prove that the allocated space
//! is exactly what the MOS, the space structures and every head, snapshot and clone
//! name (shared blocks once), that no dead-list entry was freed, and that the
//! datasets and snapshots on disk are the model's. An export/import in the middle
//! checks the same against the space maps as loaded from disk. At the end everything
//! is destroyed and the dataset trees are back at their baseline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tarn_dmu::ObjectStore;
use tarn_spa::{CreateSpec, LeakReport, Pool, Rewind, SpaError, TopSpec};

mod common;
use common::{get, mkfile, pattern, put, Rng};

/// A mirror and a raidz1 (so blocks and ditto copies land on both kinds).
fn new_pool(dir: &Path, name: &str) -> Arc<Pool> {
    let m: Vec<PathBuf> = (0..2).map(|i| mkfile(dir, &format!("m{i}.img"), 192 << 20)).collect();
    let r: Vec<PathBuf> = (0..3).map(|i| mkfile(dir, &format!("r{i}.img"), 128 << 20)).collect();
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Mirror(m), TopSpec::Raidz { nparity: 1, leaves: r }],
        ashift: 12,
        ..Default::default()
    })
    .unwrap()
}

/// object id → contents, for one head or snapshot.
type Image = BTreeMap<u64, Vec<u8>>;

struct Model {
    heads: BTreeMap<String, Image>,
    snaps: BTreeMap<String, Image>,
}

impl Model {
    /// Forget what a destroy removed.
    fn destroyed(&mut self, names: &[String]) {
        for n in names {
            self.heads.remove(n);
            self.snaps.remove(n);
        }
    }
}

fn overwrite(os: &dyn ObjectStore, obj: u64, off: usize, bytes: &[u8], img: &mut Image) {
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, off as u64, bytes).unwrap();
    img.get_mut(&obj).unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
}

/// Sync, then the exact check; the report must count what the model holds.
fn checked(pool: &Pool, m: &Model, ctx: &str) -> LeakReport {
    pool.sync().unwrap();
    let r = pool.leak_check().unwrap_or_else(|e| panic!("{ctx}: leak check: {e}"));
    // The pool's root dataset, the heads (file systems and clones), the snapshots.
    assert_eq!(r.datasets as usize, 1 + m.heads.len() + m.snaps.len(), "{ctx}: {r:?}");
    assert_eq!(r.snapshots as usize, m.snaps.len(), "{ctx}: {r:?}");
    assert_eq!(r.allocated_bytes, pool.alloc_bytes(), "{ctx}: normal-class allocation (no log vdev) {r:?}");
    r
}

fn check_contents(pool: &Pool, m: &Model, ctx: &str) {
    for (name, img) in &m.heads {
        let os = pool.objset(name).unwrap();
        for (obj, data) in img {
            assert_eq!(&get(&*os, *obj), data, "{ctx}: {name} object {obj}");
        }
    }
    for (name, img) in &m.snaps {
        let os = pool.snapshot_objset(name).unwrap();
        for (obj, data) in img {
            assert_eq!(&get(&*os, *obj), data, "{ctx}: {name} object {obj}");
        }
    }
}

fn pick<'a>(rng: &mut Rng, v: &'a [String]) -> Option<&'a String> {
    (!v.is_empty()).then(|| &v[rng.below(v.len() as u64) as usize])
}

/// What a run did: writes, overwrites, object frees, snapshots, snapshot destroys,
/// destroys with -R, clones, clone destroys, rollbacks, promotes, renames.
type Events = [u32; 11];

fn run(seed: u64, steps: u32) -> Events {
    let d = tempfile::tempdir().unwrap();
    let name = "snl";
    let mut pool = new_pool(d.path(), name);
    let mut m = Model {
        heads: BTreeMap::new(),
        snaps: BTreeMap::new(),
    };
    let base = checked(&pool, &m, &format!("seed {seed}: empty pool"));
    let base_alloc = pool.alloc_bytes();
    let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    pool.create_dataset("snl/a", &BTreeMap::new()).unwrap();
    m.heads.insert("snl/a".into(), Image::new());
    let mut n = 0u64;
    let mut ev: Events = [0; 11];
    for step in 0..steps {
        n += 1;
        let ctx = format!("seed {seed} step {step}");
        let heads: Vec<String> = m.heads.keys().cloned().collect();
        let snaps: Vec<String> = m.snaps.keys().cloned().collect();
        match rng.below(12) {
            // Write a new object into a head.
            0 | 1 => {
                let Some(h) = pick(&mut rng, &heads) else { continue };
                let os = pool.objset(h).unwrap();
                let data = pattern(rng.next(), 1 + rng.below(400_000) as usize);
                let obj = put(&*os, &data);
                m.heads.get_mut(h).unwrap().insert(obj, data);
                ev[0] += 1;
            }
            // Overwrite part of an object (the old blocks go to a dead list or are freed).
            2 | 3 => {
                let Some(h) = pick(&mut rng, &heads) else { continue };
                let img = m.heads.get_mut(h).unwrap();
                let Some(&obj) = img.keys().nth(rng.below(img.len() as u64) as usize) else {
                    continue;
                };
                let len = img[&obj].len();
                let off = rng.below(len as u64) as usize;
                let l = (1 + rng.below(300_000) as usize).min(len - off);
                let os = pool.objset(h).unwrap();
                overwrite(&*os, obj, off, &pattern(rng.next(), l), img);
                ev[1] += 1;
            }
            // Free a whole object.
            4 => {
                let Some(h) = pick(&mut rng, &heads) else { continue };
                let img = m.heads.get_mut(h).unwrap();
                let Some(&obj) = img.keys().nth(rng.below(img.len() as u64) as usize) else {
                    continue;
                };
                let os = pool.objset(h).unwrap();
                let tx = os.hold_tx().unwrap();
                os.free_object(&tx, obj).unwrap();
                img.remove(&obj);
                ev[2] += 1;
            }
            // Snapshot a head.
            5 => {
                let Some(h) = pick(&mut rng, &heads) else { continue };
                let s = format!("{h}@s{n}");
                pool.snapshot(std::slice::from_ref(&s), false).unwrap();
                m.snaps.insert(s, m.heads[h].clone());
                ev[3] += 1;
            }
            // Destroy a snapshot chosen at random; one with clones only with -R.
            6 | 7 => {
                let Some(s) = pick(&mut rng, &snaps) else { continue };
                match pool.destroy_snapshot(s) {
                    Ok(()) => {
                        m.destroyed(std::slice::from_ref(s));
                        ev[4] += 1;
                    }
                    Err(SpaError::Busy(_)) => {
                        let gone = pool
                            .destroy_dataset_ext(s, false, true)
                            .unwrap_or_else(|e| panic!("{ctx}: destroy -R {s}: {e}"));
                        assert!(gone.contains(s), "{ctx}: {gone:?}");
                        m.destroyed(&gone);
                        ev[5] += 1;
                    }
                    Err(e) => panic!("{ctx}: destroy {s}: {e}"),
                }
            }
            // Clone a snapshot.
            8 => {
                let Some(s) = pick(&mut rng, &snaps) else { continue };
                if m.heads.len() >= 5 {
                    continue;
                }
                let c = format!("snl/c{n}");
                pool.clone_snapshot(s, &c, &BTreeMap::new(), false).unwrap();
                m.heads.insert(c, m.snaps[s].clone());
                ev[6] += 1;
            }
            // Promote a head: a clone takes its origin's older snapshots (renamed
            // under it); anything else is refused and changes nothing.
            10 => {
                let Some(h) = pick(&mut rng, &heads) else { continue };
                match pool.promote(h) {
                    Ok(moved) => {
                        for (old, new) in moved {
                            let img = m.snaps.remove(&old).unwrap_or_else(|| panic!("{ctx}: promote moved unknown {old}"));
                            m.snaps.insert(new, img);
                        }
                        ev[9] += 1;
                    }
                    Err(SpaError::Invalid(e)) if e.contains("not a cloned filesystem") => {}
                    Err(e) => panic!("{ctx}: promote {h}: {e}"),
                }
            }
            // Rename a snapshot, or a clone with its snapshots (keeping the `snl/c`
            // prefix the clone steps look for).
            11 => {
                if rng.below(2) == 0 {
                    let Some(s) = pick(&mut rng, &snaps) else { continue };
                    let new = format!("{}@r{n}", s.split('@').next().unwrap());
                    pool.rename_snapshot(s, &new, false).unwrap_or_else(|e| panic!("{ctx}: rename {s}: {e}"));
                    let img = m.snaps.remove(s).unwrap();
                    m.snaps.insert(new, img);
                } else {
                    let clones: Vec<String> = heads.iter().filter(|h| h.starts_with("snl/c")).cloned().collect();
                    let Some(h) = pick(&mut rng, &clones).cloned() else { continue };
                    let new = format!("snl/c{n}r");
                    pool.rename_dataset(&h, &new, None).unwrap_or_else(|e| panic!("{ctx}: rename {h}: {e}"));
                    let img = m.heads.remove(&h).unwrap();
                    m.heads.insert(new.clone(), img);
                    let moved: Vec<String> = m.snaps.keys().filter(|k| k.starts_with(&format!("{h}@"))).cloned().collect();
                    for k in moved {
                        let img = m.snaps.remove(&k).unwrap();
                        m.snaps.insert(k.replacen(&h, &new, 1), img);
                    }
                }
                ev[10] += 1;
            }
            // Roll a head back, or destroy a clone (with its snapshots, and their
            // clones when the coin says -R).
            _ => {
                let clones: Vec<String> = heads.iter().filter(|h| h.starts_with("snl/c")).cloned().collect();
                let destroy = !clones.is_empty() && rng.below(2) == 0;
                let Some(h) = pick(&mut rng, if destroy { &clones } else { &heads }).cloned() else {
                    continue;
                };
                if destroy {
                    match pool.destroy_dataset_ext(&h, true, rng.below(2) == 0) {
                        Ok(gone) => {
                            m.destroyed(&gone);
                            ev[7] += 1;
                        }
                        Err(SpaError::Busy(_)) => {}
                        Err(e) => panic!("{ctx}: destroy {h}: {e}"),
                    }
                } else {
                    // To the newest snapshot, or (-r) to any, destroying the newer ones;
                    // refused when one of those has clones.
                    let all = pool.snapshots_of(&h);
                    let Some(to) = (if rng.below(2) == 0 { all.last() } else { pick(&mut rng, &all) }).cloned() else {
                        continue;
                    };
                    match pool.rollback(&to, true) {
                        Ok(gone) => {
                            assert_eq!(gone, all[all.iter().position(|s| *s == to).unwrap() + 1..], "{ctx}");
                            m.destroyed(&gone);
                            m.heads.insert(h.clone(), m.snaps[&to].clone());
                            ev[8] += 1;
                        }
                        Err(SpaError::Busy(_)) => {}
                        Err(e) => panic!("{ctx}: rollback -r {to}: {e}"),
                    }
                }
            }
        }
        checked(&pool, &m, &ctx);
        if step % 8 == 7 {
            check_contents(&pool, &m, &ctx);
        }
        if step == steps / 2 {
            // The same, with the space maps loaded from disk.
            pool.export().unwrap();
            drop(pool);
            pool = Pool::import(name, &[d.path().to_path_buf()], Rewind::None, None).unwrap();
            checked(&pool, &m, &format!("{ctx}: after import"));
            check_contents(&pool, &m, &format!("{ctx}: after import"));
        }
    }
    check_contents(&pool, &m, &format!("seed {seed}: end"));
    // Destroy everything: clones (and whatever depends on them) with -R first.
    while let Some(h) = m.heads.keys().next().cloned() {
        let gone = pool
            .destroy_dataset_ext(&h, true, true)
            .unwrap_or_else(|e| panic!("seed {seed}: destroy -R {h}: {e}"));
        assert!(gone.contains(&h), "{gone:?}");
        m.destroyed(&gone);
        checked(&pool, &m, &format!("seed {seed}: after destroying {h}"));
    }
    assert!(m.snaps.is_empty(), "seed {seed}: {:?} left", m.snaps.keys());
    // The frees have aged out: the dataset trees are back at the baseline exactly; the
    // rest of the pool differs by what the MOS and the space log grew or shrank (each
    // txg also frees the space structures it replaces, so something is always
    // deferred).
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    let end = checked(&pool, &m, &format!("seed {seed}: end"));
    assert_eq!(end.dataset_bytes, base.dataset_bytes, "seed {seed}: base {base:?}, end {end:?}");
    assert_eq!(end.deadlist_entries, 0, "seed {seed}: {end:?}");
    let alloc = pool.alloc_bytes();
    assert!(
        alloc.abs_diff(base_alloc) <= 256 << 10,
        "seed {seed}: space not returned: base {base_alloc}, end {alloc}"
    );
    pool.export().unwrap();
    ev
}

/// `TARN_SNAP_LEAK_ROUNDS` seeds of `TARN_SNAP_LEAK_STEPS` steps (default 3 × 60).
#[test]
fn snapshots_clones_promotes_renames_and_destroys_leak_nothing() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let rounds = env("TARN_SNAP_LEAK_ROUNDS", 3);
    let steps = env("TARN_SNAP_LEAK_STEPS", 60) as u32;
    let mut all: Events = [0; 11];
    for seed in 1..=rounds {
        let ev = run(seed, steps);
        all.iter_mut().zip(ev).for_each(|(a, e)| *a += e);
    }
    // The runs together must have done each kind of operation.
    if rounds >= 3 && steps >= 60 {
        assert!(all.iter().all(|&k| k > 0), "operations done {all:?}");
    }
}

/// A block freed behind the snapshot code's back while only a snapshot holds it (it
/// is on the head's dead list) is found as a named block on free space.
#[test]
fn leak_check_finds_a_snapshot_block_freed_early() {
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "snf");
    pool.create_dataset("snf/fs", &BTreeMap::new()).unwrap();
    let os = pool.objset("snf/fs").unwrap();
    let obj = put(&*os, &pattern(1, 1 << 20));
    pool.snapshot(&["snf/fs@a".into()], false).unwrap();
    {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, 0, &pattern(2, 1 << 20)).unwrap();
    }
    pool.sync().unwrap();
    let r = pool.leak_check().unwrap();
    assert!(r.deadlist_entries >= 8, "{r:?}");
    assert_eq!(r.snapshots, 1);
    // A data block only @a holds (it is on the head's dead list): free it.
    let snap = pool.snapshot_objset("snf/fs@a").unwrap();
    let mut victim = None;
    tarn_dmu::traverse::traverse(pool.zio(), &snap.root_bp(), &mut |bp| {
        if bp.otype == tarn_phys::ObjectType::FileData && victim.is_none() {
            victim = Some(*bp);
        }
    })
    .unwrap();
    let bp = victim.unwrap();
    let dva = bp.dva[0];
    pool.zio()
        .with_space(|s| s.vdevs[dva.vdev as usize].free_now(dva.offset_bytes, dva.asize_bytes));
    let e = pool.leak_check().unwrap_err();
    assert!(e.contains("not allocated") && e.contains("snf/fs@a"), "{e}");
    assert!(pool.zio().with_space(|s| s.vdevs[dva.vdev as usize].claim(dva.offset_bytes, dva.asize_bytes)));
    pool.leak_check().unwrap();
    drop((os, snap));
    pool.export().unwrap();
}

/// Live intent logs of a head and of a clone, next to snapshots: the leak check counts
/// the log blocks (not yet synced into any tree) and the shared trees together, and
/// after everything is destroyed the dataset trees and logs are gone.
#[test]
fn intent_logs_snapshots_and_clones_are_counted_together() {
    use tarn_zpl::{Fs, ZplOptions};
    let d = tempfile::tempdir().unwrap();
    let pool = new_pool(d.path(), "snz");
    pool.sync().unwrap();
    let base = pool.leak_check().unwrap();
    let mount = |name: &str| {
        Fs::open_logged(pool.objset(name).unwrap(), pool.zilog(name).unwrap(), ZplOptions::default())
            .unwrap()
            .0
    };
    let fsynced = |fs: &Fs, prefix: &str, n: u32| {
        for i in 0..n {
            let f = fs.create(fs.root(), format!("{prefix}{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
            // Small (copied into the record) and large (indirect) writes.
            fs.write(f, 0, &pattern(u64::from(i), 3000)).unwrap();
            fs.write(f, 3000, &pattern(u64::from(i) + 100, 60_000)).unwrap();
            fs.fsync(f).unwrap();
        }
    };
    pool.create_dataset("snz/fs", &BTreeMap::new()).unwrap();
    let fs = mount("snz/fs");
    fsynced(&fs, "a", 8);
    pool.snapshot(&["snz/fs@a".into()], false).unwrap();
    fsynced(&fs, "b", 8);
    // No sync since the fsyncs: the newest log blocks are named by the log alone.
    let r = pool.leak_check().unwrap();
    assert!(r.zil_blocks > 0 && r.snapshots == 1, "{r:?}");
    pool.clone_snapshot("snz/fs@a", "snz/c", &BTreeMap::new(), false).unwrap();
    let c = mount("snz/c");
    fsynced(&c, "c", 8);
    let r = pool.leak_check().unwrap();
    assert!(r.zil_blocks > 0 && r.datasets == 4, "{r:?}");
    pool.sync().unwrap();
    pool.leak_check().unwrap();
    drop((fs, c));
    pool.destroy_dataset_ext("snz/fs", true, true).unwrap();
    for _ in 0..6 {
        pool.sync().unwrap();
    }
    let end = pool.leak_check().unwrap();
    assert_eq!((end.datasets, end.snapshots, end.zil_blocks), (1, 0, 0), "{end:?}");
    assert_eq!(end.dataset_bytes, base.dataset_bytes, "base {base:?}, end {end:?}");
    pool.export().unwrap();
}
