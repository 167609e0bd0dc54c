//! The real object set against the in-memory model (`MemStore`): random writes,
//! punched holes, truncates, first-block growth, object frees and bonus updates,
//! with txg syncs and an export/import in between, must read back identically.
//! Seeded and replayable: TARN_MODEL_SEED, TARN_MODEL_ROUNDS.

use std::collections::BTreeMap;
use tarn_dmu::mem::MemStore;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};

mod common;
use common::Rng;

fn compare(real: &dyn ObjectStore, model: &MemStore, map: &BTreeMap<u64, u64>, extent: &BTreeMap<u64, u64>, ctx: &str) {
    for (&m, &r) in map {
        let len = extent[&m] as usize + 300_000;
        let mut a = vec![0u8; len];
        let mut b = vec![0u8; len];
        model.read(m, 0, &mut a).unwrap();
        real.read(r, 0, &mut b).unwrap();
        if a != b {
            let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap();
            panic!("{ctx}: object {r} differs from model at byte {first}");
        }
        assert_eq!(model.bonus(m).unwrap(), real.bonus(r).unwrap(), "{ctx}: bonus of {r}");
    }
}

#[test]
fn objset_matches_memstore() {
    let seed: u64 = std::env::var("TARN_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xA5A5_1234);
    let rounds: u64 = std::env::var("TARN_MODEL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
    for round in 0..rounds {
        let mut rng = Rng((seed + round * 104_729) | 1);
        let d = tempfile::tempdir().unwrap();
        let mk = |n: &str| {
            let p = d.path().join(n);
            std::fs::File::create(&p).unwrap().set_len(160 << 20).unwrap();
            p
        };
        let name = format!("model{round}");
        let spec = CreateSpec {
            name: name.clone(),
            vdevs: vec![TopSpec::Mirror(vec![mk("a"), mk("b")])],
            logs: Vec::new(),
            spares: Vec::new(),
            caches: Vec::new(),
            ashift: 9 + 3 * (round % 2) as u8,
            force: false,
            pool_props: BTreeMap::new(),
            fs_props: BTreeMap::new(),
        };
        let mut pool = Pool::create(&spec).unwrap();
        let mut real = pool.objset(&name).unwrap();
        let model = MemStore::new();
        let mut map: BTreeMap<u64, u64> = BTreeMap::new(); // model id -> real id
        let mut extent: BTreeMap<u64, u64> = BTreeMap::new();
        for step in 0..400 {
            let ctx = format!("seed {seed} round {round} step {step}");
            let op = rng.below(100);
            let tx_r = real.hold_tx().unwrap();
            let tx_m = model.hold_tx().unwrap();
            if map.is_empty() || op < 10 {
                let max = [512u32, 4096, 16384, 131072][rng.below(4) as usize];
                let m = model.create_object(&tx_m, ObjectType::FileData, 512, max, &[]).unwrap();
                let r = real.create_object(&tx_r, ObjectType::FileData, 512, max, &[]).unwrap();
                map.insert(m, r);
                extent.insert(m, 0);
            } else {
                let keys: Vec<u64> = map.keys().copied().collect();
                let m = keys[rng.below(keys.len() as u64) as usize];
                let r = map[&m];
                match op {
                    10..=59 => {
                        let off = if rng.below(4) == 0 { rng.below(3 << 20) } else { rng.below(extent[&m] + 1) };
                        let cap = if rng.below(3) == 0 { 400_000 } else { 9000 };
                        let len = 1 + rng.below(cap);
                        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                        model.write(&tx_m, m, off, &data).unwrap();
                        real.write(&tx_r, r, off, &data).unwrap();
                        extent.insert(m, extent[&m].max(off + len));
                    }
                    60..=74 => {
                        let off = rng.below(extent[&m] + 1);
                        let len = if rng.below(3) == 0 { u64::MAX } else { 1 + rng.below(300_000) };
                        model.free_range(&tx_m, m, off, len).unwrap();
                        real.free_range(&tx_r, r, off, len).unwrap();
                        if len == u64::MAX {
                            extent.insert(m, off);
                        }
                    }
                    75..=84 => {
                        let b: Vec<u8> = (0..rng.below(320)).map(|_| rng.next() as u8).collect();
                        model.set_bonus(&tx_m, m, &b).unwrap();
                        real.set_bonus(&tx_r, r, &b).unwrap();
                    }
                    85..=89 => {
                        model.free_object(&tx_m, m).unwrap();
                        real.free_object(&tx_r, r).unwrap();
                        map.remove(&m);
                        extent.remove(&m);
                    }
                    _ => {}
                }
            }
            drop(tx_r);
            drop(tx_m);
            if step % 37 == 36 {
                real.wait_synced().unwrap();
            }
            if step % 50 == 49 {
                compare(&*real, &model, &map, &extent, &ctx);
            }
            if step == 250 {
                drop(real);
                pool.export().unwrap();
                drop(pool);
                pool = Pool::import(&name, &[d.path().to_path_buf()], Rewind::None, None).unwrap();
                real = pool.objset(&name).unwrap();
                compare(&*real, &model, &map, &extent, &format!("{ctx} after import"));
            }
        }
        real.wait_synced().unwrap();
        compare(&*real, &model, &map, &extent, &format!("seed {seed} round {round} end"));
        drop(real);
        pool.export().unwrap();
    }
}

/// Create/delete churn reuses freed ids once their free has synced (OpenZFS
/// `dmu_object_alloc`): the dnode array stays at its high-water mark, also across an
/// export/import (free slots found by scanning the array), and an id freed in a txg
/// not yet synced is never handed out again in that txg.
#[test]
fn object_ids_are_reused_after_their_free_syncs() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a");
    std::fs::File::create(&p).unwrap().set_len(128 << 20).unwrap();
    let spec = CreateSpec {
        name: "reuse".into(),
        vdevs: vec![TopSpec::Leaf(p)],
        ashift: 12,
        ..Default::default()
    };
    let pool = Pool::create(&spec).unwrap();
    let os = pool.objset_concrete("reuse").unwrap();
    let make = |n: usize| -> Vec<u64> {
        let tx = os.hold_tx().unwrap();
        (0..n).map(|_| os.create_object(&tx, ObjectType::FileData, 512, 512, &[]).unwrap()).collect()
    };
    let first = make(200);
    pool.sync().unwrap();
    let end = os.object_id_end();
    // Free half, and create in the same txg: no freed id comes back yet.
    {
        let tx = os.hold_tx().unwrap();
        for id in first.iter().step_by(2) {
            os.free_object(&tx, *id).unwrap();
        }
    }
    let same_txg = make(10);
    assert!(same_txg.iter().all(|id| !first.iter().step_by(2).any(|f| f == id)), "{same_txg:?}");
    pool.sync().unwrap();
    // Many rounds of churn after the frees synced: the array does not grow.
    let high = os.object_id_end();
    for round in 0..20 {
        let ids = make(50);
        pool.sync().unwrap();
        let tx = os.hold_tx().unwrap();
        for id in &ids {
            os.free_object(&tx, *id).unwrap();
        }
        drop(tx);
        pool.sync().unwrap();
        assert_eq!(os.object_id_end(), high, "round {round}: dnode array grew");
    }
    assert!(high <= end + 64, "high-water {high} vs {end}");
    // After export/import the free slots are found again by the scan.
    drop(os);
    pool.export().unwrap();
    let pool = Pool::import("reuse", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset_concrete("reuse").unwrap();
    // At open the end is the dnode array's end, rounded up to a whole dnode block.
    let high_at_import = os.object_id_end();
    assert!(high_at_import >= high && high_at_import < high + 32, "{high_at_import} vs {high}");
    let tx = os.hold_tx().unwrap();
    let again: Vec<u64> = (0..60).map(|_| os.create_object(&tx, ObjectType::FileData, 512, 512, &[]).unwrap()).collect();
    drop(tx);
    assert!(again.iter().all(|id| *id < high), "ids past the high-water mark after import: {again:?}");
    pool.sync().unwrap();
    assert_eq!(os.object_id_end(), high_at_import);
    pool.export().unwrap();
}
