//! Scale probe: create N files (8 bytes each) in directories of 1,000 through the POSIX
//! layer on a real pool, sync and export, then time a library import and a lookup.
//! Usage: cargo run --release -p tarn-cli --example many_files -- DIR N
//! Afterwards `tarn zpool import -d DIR many` times the full CLI import with mounting.

use std::collections::BTreeMap;
use std::time::Instant;
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};
use tarn_zpl::{Fs, ZplOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let n: u64 = args[2].parse().unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let mk = |name: &str| {
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        std::fs::File::create(&p).unwrap().set_len(8 << 30).unwrap();
        p
    };
    let mut fs_props = BTreeMap::new();
    fs_props.insert("mountpoint".to_string(), dir.join("mnt").display().to_string());
    let spec = CreateSpec {
        name: "many".into(),
        vdevs: vec![TopSpec::Mirror(vec![mk("a.img"), mk("b.img")])],
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: true,
        pool_props: BTreeMap::new(),
        fs_props,
    };
    let pool = Pool::create(&spec).unwrap();
    let fs = Fs::open(pool.objset("many").unwrap(), ZplOptions::default()).unwrap();
    let t = Instant::now();
    let mut d = 0;
    for i in 0..n {
        if i % 1000 == 0 {
            d = fs.mkdir(fs.root(), format!("d{}", i / 1000).as_bytes(), 0o755, 0, 0).unwrap().ino;
        }
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &i.to_le_bytes()).unwrap();
    }
    pool.sync().unwrap();
    println!("created {n} files in {:.1}s", t.elapsed().as_secs_f64());
    drop(fs);
    pool.export().unwrap();
    drop(pool);
    let t = Instant::now();
    let pool = Pool::import("many", std::slice::from_ref(&dir), Rewind::None, None).unwrap();
    let fs = Fs::open(pool.objset("many").unwrap(), ZplOptions::default()).unwrap();
    let sub = fs.lookup(fs.root(), format!("d{}", (n - 1) / 1000).as_bytes()).unwrap();
    let f = fs.lookup(sub.ino, format!("f{}", n - 1).as_bytes()).unwrap();
    let data = fs.read(f.ino, 0, 8).unwrap();
    assert_eq!(data, (n - 1).to_le_bytes());
    println!("import + open + lookup of the last file: {:.3}s", t.elapsed().as_secs_f64());
    drop(fs);
    pool.export().unwrap();
}
