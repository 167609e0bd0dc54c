//! Crash consistency at the engine level: a "power cut" drops every device write after
//! a random point while a workload runs and syncs; the pool is then abandoned without
//! export (a crash) and imported again. The imported state must equal the model state
//! of some synced txg no older than the last txg whose sync completed before the cut
//! (DESIGN invariant 8). Seeds are printed so a failure reproduces.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};

mod common;
use common::Rng;

type Model = BTreeMap<u64, Vec<u8>>;

fn read_all(os: &dyn ObjectStore, ids: &[u64]) -> Model {
    let mut m = Model::new();
    for &id in ids {
        // Only "no such object" means absent; any other error is damage and fails.
        let b = match os.bonus(id) {
            Ok(b) => b,
            Err(tarn_dmu::DmuError::NoSuchObject(_)) => continue,
            Err(e) => panic!("object {id}: {e}"),
        };
        let len = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        let mut buf = vec![0u8; len];
        os.read(id, 0, &mut buf).unwrap();
        m.insert(id, buf);
    }
    m
}

/// Returns whether the cut happened during the workload.
fn run_one(seed: u64, layout: &str) -> bool {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let mk = |n: &str| {
        let p = dir.join(n);
        std::fs::File::create(&p).unwrap().set_len(96 << 20).unwrap();
        p
    };
    let vdevs = match layout {
        "mirror" => vec![TopSpec::Mirror(vec![mk("a"), mk("b")])],
        "raidz" => vec![TopSpec::Raidz {
            nparity: 1,
            leaves: vec![mk("a"), mk("b"), mk("c")],
        }],
        _ => vec![TopSpec::Leaf(mk("a")), TopSpec::Leaf(mk("b"))],
    };
    let name = format!("crash{seed}");
    let spec = CreateSpec {
        name: name.clone(),
        vdevs,
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: false,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    };
    let pool = Pool::create(&spec).unwrap();
    let os = pool.objset(&name).unwrap();
    let mut rng = Rng(seed | 1);
    let mut model = Model::new();
    let mut snapshots: Vec<(u64, Model)> = vec![(pool.synced_txg(), Model::new())];
    let prefix = dir.display().to_string();
    let cut = tarn_vdev::inject::power_cut_after(&prefix, 20 + rng.below(400));
    let mut last_durable_txg = 0;
    let mut ids: Vec<u64> = Vec::new();
    // Once the cut has happened the "machine" is dead: any error ends the workload.
    // Before the cut, every operation must succeed.
    macro_rules! ok {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => {
                    assert!(cut.dropped_writes() > 0, "seed {seed} {layout}: error before the power cut: {e}");
                    break;
                }
            }
        };
    }
    for step in 0..60 {
        let tx = ok!(os.hold_tx());
        let op = rng.below(10);
        if ids.is_empty() || op < 3 {
            let len = rng.below(300_000) as usize;
            let fill = rng.next() as u8;
            let data = vec![fill; len];
            let id = ok!(os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &(len as u64).to_le_bytes()));
            ok!(os.write(&tx, id, 0, &data));
            model.insert(id, data);
            ids.push(id);
        } else if op < 8 {
            let id = ids[rng.below(ids.len() as u64) as usize];
            let cur = model.get_mut(&id).unwrap();
            let off = rng.below(cur.len() as u64 + 1) as usize;
            let len = rng.below(200_000) as usize;
            let fill = rng.next() as u8;
            if cur.len() < off + len {
                cur.resize(off + len, 0);
                ok!(os.set_bonus(&tx, id, &(cur.len() as u64).to_le_bytes()));
            }
            cur[off..off + len].fill(fill);
            ok!(os.write(&tx, id, off as u64, &vec![fill; len]));
        } else {
            let i = rng.below(ids.len() as u64) as usize;
            let id = ids.swap_remove(i);
            ok!(os.free_object(&tx, id));
            model.remove(&id);
        }
        drop(tx);
        if step % 4 == 3 {
            ok!(os.wait_synced());
            let txg = pool.synced_txg();
            snapshots.push((txg, model.clone()));
            if cut.dropped_writes() == 0 {
                last_durable_txg = txg;
            }
        }
    }
    let cut_happened = cut.dropped_writes() > 0;
    // Crash: abandon the pool without export.
    let all_ids: Vec<u64> = (1..200).collect();
    // A dead machine writes nothing more: keep the cut in force until the abandoned
    // pool (and its sync thread, which may be mid-txg) is completely gone.
    drop(os);
    common::abandon(pool, &prefix);
    let pool = Pool::import(&name, &[PathBuf::from(&dir)], Rewind::None, None).unwrap_or_else(|e| panic!("seed {seed} {layout}: import failed: {e}"));
    let os = pool.objset(&name).unwrap();
    let got = read_all(&*os, &all_ids);
    let txg = pool.synced_txg();
    // The state must be that of some synced txg no older than the last one that was
    // durable before the cut (several txgs can share one state, e.g. all empty).
    let txgs = |pred: &dyn Fn(u64) -> bool| snapshots.iter().filter(|(t, m)| pred(*t) && *m == got).map(|(t, _)| *t).collect::<Vec<_>>();
    let ok = txgs(&|t| t >= last_durable_txg);
    assert!(
        !ok.is_empty(),
        "seed {seed} {layout}: imported state (txg {txg}) matches no synced txg at or after {last_durable_txg} (it matches {:?}); snapshots {:?}; objects {:?}",
        txgs(&|_| true),
        snapshots.iter().map(|(t, m)| (*t, m.len())).collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>()
    );
    // Space accounting after the crash: exactly the reachable blocks are allocated
    // (no leak from the lost txg, nothing reachable on free space), and it stays so
    // across more txgs and a clean re-import.
    pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} {layout}: after import: {e}"));
    {
        let tx = os.hold_tx().unwrap();
        let id = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &8u64.to_le_bytes()).unwrap();
        os.write(&tx, id, 0, &[1u8; 8]).unwrap();
    }
    for _ in 0..3 {
        os.wait_synced().unwrap();
        pool.sync().unwrap();
    }
    pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} {layout}: after more txgs: {e}"));
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import(&name, &[PathBuf::from(&dir)], Rewind::None, None).unwrap();
    pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} {layout}: after re-import: {e}"));
    pool.export().unwrap();
    cut_happened
}

#[test]
fn power_cut_during_workload_recovers_a_synced_txg() {
    let base: u64 = std::env::var("TARN_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let iterations: u64 = std::env::var("TARN_CRASH_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(24);
    let mut cuts = 0;
    for i in 0..iterations {
        let layout = ["mirror", "raidz", "stripe"][(i % 3) as usize];
        if run_one(base.wrapping_add(i * 7919), layout) {
            cuts += 1;
        }
    }
    // The test only means something if most cuts land inside the workload.
    assert!(
        cuts * 3 >= iterations * 2,
        "only {cuts} of {iterations} power cuts happened during the workload"
    );
    eprintln!("{cuts} of {iterations} iterations crashed mid-workload and recovered a synced txg");
}

/// One run of [`power_cut_between_every_write_of_a_config_update`]: a one-leaf pool
/// gains a second top-level vdev (`zpool add`, so the next sync writes an uberblock and
/// rewrites every label config); the power fails after `cut_after` writes of that, on
/// disks whose volatile caches then tear every write no flush covered. Returns the
/// writes the update made before the cut (all of them when it finished) and the number
/// of top-level vdevs the re-imported pool has.
fn config_update_cut(cut_after: u64) -> (u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().display().to_string();
    let a = common::mkfile(dir.path(), "a.img", 96 << 20);
    let b = common::mkfile(dir.path(), "b.img", 96 << 20);
    let pool = Pool::create(&CreateSpec {
        name: "labelcut".into(),
        vdevs: vec![TopSpec::Leaf(a)],
        ..Default::default()
    })
    .unwrap();
    let os = pool.objset("labelcut").unwrap();
    let obj = common::put(&*os, &common::pattern(1, 200_000));
    pool.sync().unwrap();
    let cut = tarn_vdev::inject::power_cut_volatile(&prefix, cut_after);
    pool.add_vdevs(&tarn_spa::AddSpec {
        vdevs: vec![TopSpec::Leaf(b)],
        ..Default::default()
    })
    .unwrap();
    pool.sync().unwrap();
    drop(os);
    let landed = cut.landed_writes();
    common::abandon(pool, &prefix);
    cut.tear_unflushed().unwrap();
    let pool = Pool::import("labelcut", &[dir.path().to_path_buf()], Rewind::None, None)
        .unwrap_or_else(|e| panic!("cut after {cut_after} writes of a config update: import failed: {e}"));
    let tops = pool.status().children.len();
    let os = pool.objset("labelcut").unwrap();
    assert_eq!(common::get(&*os, obj), common::pattern(1, 200_000), "cut after {cut_after}");
    pool.leak_check().unwrap_or_else(|e| panic!("cut after {cut_after}: {e}"));
    drop(os);
    pool.export().unwrap();
    (landed, tops)
}

/// Label configs are rewritten in place; OpenZFS writes the even labels, flushes, then
/// the odd ones, so that no power cut can damage every copy. Cut the power after each
/// write of a config update in turn (disks with volatile caches: every unflushed write
/// is torn afterwards): the pool must import every time, with the old config (one
/// top-level vdev) or the new one (two), and its data and space accounting intact.
#[test]
fn power_cut_between_every_write_of_a_config_update() {
    let (total, tops) = config_update_cut(u64::MAX);
    assert_eq!(tops, 2, "the update itself did not take");
    let mut seen = [0u64; 3];
    for k in 0..total {
        let (landed, tops) = config_update_cut(k);
        assert_eq!(landed, k);
        assert!(tops == 1 || tops == 2, "cut after {k}: {tops} top-level vdevs");
        seen[tops] += 1;
    }
    // Both outcomes must occur, or the cuts missed the label writes.
    assert!(
        seen[1] > 0 && seen[2] > 0,
        "{total} writes; old config {} times, new {} times",
        seen[1],
        seen[2]
    );
    eprintln!("{total} writes per config update; old config after {} cuts, new after {}", seen[1], seen[2]);
}
