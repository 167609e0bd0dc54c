//! Rough engine throughput probe (no FUSE): sequential 1 MiB writes into one object on
//! a 2-way mirror of file vdevs, then export, import and read back.
//! Usage: cargo run --release -p tarn-spa --example engine_seqwrite -- DIR SIZE_MIB

use std::collections::BTreeMap;
use std::time::Instant;
use tarn_dmu::ObjectType;
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let mib: u64 = args[2].parse().unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let mk = |n: &str| {
        let p = dir.join(n);
        let _ = std::fs::remove_file(&p);
        std::fs::File::create(&p).unwrap().set_len(4 << 30).unwrap();
        p
    };
    let spec = CreateSpec {
        name: "probe".into(),
        vdevs: vec![TopSpec::Mirror(vec![mk("a.img"), mk("b.img")])],
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: true,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    };
    let pool = Pool::create(&spec).unwrap();
    let os = pool.objset("probe").unwrap();
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    drop(tx);
    let t = Instant::now();
    for i in 0..mib {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, i << 20, &chunk).unwrap();
    }
    os.wait_synced().unwrap();
    let w = t.elapsed().as_secs_f64();
    println!("write {mib} MiB: {:.1} MiB/s", mib as f64 / w);
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let t = Instant::now();
    let pool = Pool::import("probe", std::slice::from_ref(&dir), Rewind::None, None).unwrap();
    println!("import: {:.3}s", t.elapsed().as_secs_f64());
    let os = pool.objset("probe").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    for i in 0..mib {
        os.read(obj, i << 20, &mut buf).unwrap();
        assert_eq!(buf, chunk);
    }
    let r = t.elapsed().as_secs_f64();
    println!("read {mib} MiB: {:.1} MiB/s", mib as f64 / r);
    drop(os);
    pool.export().unwrap();
}
