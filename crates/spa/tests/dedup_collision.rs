//! `dedup=verify` catches a hash collision (issue 15): a test hook gives every block
//! the same dedup key, as if all checksums collided. With `verify` the stored bytes
//! are compared before sharing, so different blocks are written apart and every file
//! reads back right. Its own test binary: the hook is process-wide.

use std::collections::BTreeMap;
use tarn_spa::{CreateSpec, Pool, TopSpec};
use tarn_zpl::{Fs, ZplOptions};

mod common;
use common::{mkfile, pattern};

#[test]
fn verify_writes_colliding_blocks_apart() {
    let d = tempfile::tempdir().unwrap();
    let pool = Pool::create(&CreateSpec {
        name: "dc".into(),
        vdevs: vec![TopSpec::Leaf(mkfile(d.path(), "a", 128 << 20))],
        ..CreateSpec::default()
    })
    .unwrap();
    pool.create_dataset("dc/v", &BTreeMap::new()).unwrap();
    pool.set_dataset_prop("dc/v", "dedup", "verify").unwrap();
    let fs = Fs::open_logged(pool.objset("dc/v").unwrap(), pool.zilog("dc/v").unwrap(), ZplOptions::default())
        .unwrap()
        .0;
    tarn_zio::ddt::force_collisions(true);
    let files: Vec<(u64, Vec<u8>)> = (0..4u64)
        .map(|i| {
            let ino = fs.create(fs.root(), format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
            // f0 and f3 hold the same bytes: a real duplicate among the collisions.
            let data = pattern(if i == 3 { 0 } else { i }, 128 << 10);
            fs.write(ino, 0, &data).unwrap();
            (ino, data)
        })
        .collect();
    pool.sync().unwrap();
    pool.sync().unwrap();
    pool.zio().clear_cache();
    for (ino, data) in &files {
        assert!(&fs.read(*ino, 0, data.len() as u32).unwrap() == data, "a colliding block was shared");
    }
    // Only the true duplicate was shared.
    let shared: u64 = pool.zio().ddt().entries().iter().map(|(_, e)| e.refcount).sum();
    assert_eq!(shared, 2, "{:?}", pool.zio().ddt().entries());
    pool.leak_check().unwrap();
    tarn_zio::ddt::force_collisions(false);
    drop(fs);
    pool.export().unwrap();
}
