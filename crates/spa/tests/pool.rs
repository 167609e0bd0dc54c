//! Engine-level pool tests on file vdevs: create, write through the DMU, sync,
//! export/import, rewind (-T), checksum damage, bad input, ENOSPC.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tarn_dmu::ObjectType;
use tarn_spa::{CreateSpec, Pool, Rewind, SpaError, TopSpec};

mod common;
use common::{get, pattern, put};

fn mkfile(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(size).unwrap();
    p
}

fn spec(name: &str, vdevs: Vec<TopSpec>) -> CreateSpec {
    CreateSpec {
        name: name.into(),
        vdevs,
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: false,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    }
}

/// Write `data` into a new object of `os`; returns the object id.
#[test]
fn mirror_roundtrip_export_import() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 96 << 20);
    let b = mkfile(d.path(), "b.img", 96 << 20);
    let pool = Pool::create(&spec("rt1", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])])).unwrap();
    pool.create_dataset("rt1/home", &BTreeMap::new()).unwrap();
    let os = pool.objset("rt1/home").unwrap();
    let small = pattern(1, 3000);
    let big = pattern(2, 5 << 20);
    let o1 = put(&*os, &small);
    let o2 = put(&*os, &big);
    // Overwrite part of the big object and make a hole.
    {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, o2, 1 << 20, &[7u8; 100]).unwrap();
        os.free_range(&tx, o2, 3 << 20, 256 << 10).unwrap();
    }
    os.wait_synced().unwrap();
    let mut expect = big.clone();
    expect[1 << 20..(1 << 20) + 100].fill(7);
    expect[3 << 20..(3 << 20) + (256 << 10)].fill(0);
    assert_eq!(get(&*os, o2), expect);
    drop(os);
    pool.export().unwrap();
    drop(pool);

    let found = Pool::find_importable(&[d.path().to_path_buf()]).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, "rt1");
    assert_eq!(found[0].state, "exported");
    let pool = Pool::import("rt1", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let names: Vec<String> = pool.list_datasets().unwrap().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["rt1", "rt1/home"]);
    let os = pool.objset("rt1/home").unwrap();
    assert_eq!(get(&*os, o1), small);
    assert_eq!(get(&*os, o2), expect);
    assert!(pool.alloc_bytes() > (4 << 20), "allocated {}", pool.alloc_bytes());
    drop(os);
    pool.export().unwrap();
}

#[test]
fn raidz_survives_missing_leaves() {
    for nparity in 1..=3u8 {
        let d = tempfile::tempdir().unwrap();
        let leaves: Vec<PathBuf> = (0..5).map(|i| mkfile(d.path(), &format!("r{i}.img"), 80 << 20)).collect();
        let name = format!("rz{nparity}");
        let pool = Pool::create(&spec(
            &name,
            vec![TopSpec::Raidz {
                nparity,
                leaves: leaves.clone(),
            }],
        ))
        .unwrap();
        let os = pool.objset(&name).unwrap();
        let data = pattern(nparity as u64, 3 << 20);
        let o = put(&*os, &data);
        os.wait_synced().unwrap();
        drop(os);
        pool.export().unwrap();
        drop(pool);
        for l in leaves.iter().take(nparity as usize) {
            std::fs::remove_file(l).unwrap();
        }
        let pool = Pool::import(&name, &[d.path().to_path_buf()], Rewind::None, None).unwrap();
        assert_eq!(pool.health(), "DEGRADED");
        let os = pool.objset(&name).unwrap();
        assert_eq!(get(&*os, o), data, "raidz{nparity} with {nparity} leaves missing");
        drop(os);
        pool.export().unwrap();
    }
}

#[test]
fn rewind_to_older_txg() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let pool = Pool::create(&spec("rw1", vec![TopSpec::Leaf(a)])).unwrap();
    let os = pool.objset("rw1").unwrap();
    let v1 = pattern(10, 200_000);
    let o = put(&*os, &v1);
    os.wait_synced().unwrap();
    let txg1 = pool.synced_txg();
    for round in 0..3u8 {
        let tx = os.hold_tx().unwrap();
        os.write(&tx, o, 0, &vec![round + 1; 200_000]).unwrap();
        drop(tx);
        os.wait_synced().unwrap();
    }
    assert!(pool.synced_txg() > txg1);
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("rw1", &[d.path().to_path_buf()], Rewind::Txg(txg1), None).unwrap();
    let os = pool.objset("rw1").unwrap();
    assert_eq!(get(&*os, o), v1, "txg {txg1} tree intact after later txgs");
    drop(os);
    pool.export().unwrap();
    drop(pool);
    // The rewind discarded the newer uberblocks: a plain import now sees the old data.
    let pool = Pool::import("rw1", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("rw1").unwrap();
    assert_eq!(get(&*os, o), v1);
    drop(os);
    pool.export().unwrap();
}

#[test]
fn corruption_on_single_disk_is_eio_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let pool = Pool::create(&spec("ck1", vec![TopSpec::Leaf(a.clone())])).unwrap();
    let os = pool.objset("ck1").unwrap();
    let data = vec![0x5au8; 1 << 20];
    let o = put(&*os, &data);
    os.wait_synced().unwrap();
    drop(os);
    pool.export().unwrap();
    drop(pool);
    // Flip every 0x5a run in the data area: file data has a single copy.
    let mut img = std::fs::read(&a).unwrap();
    let mut flipped = 0;
    for i in (4 << 20)..img.len() - 4096 {
        if img[i..i + 64].iter().all(|&x| x == 0x5a) {
            img[i] ^= 0xff;
            flipped += 1;
        }
    }
    assert!(flipped > 0);
    std::fs::write(&a, &img).unwrap();
    let pool = Pool::import("ck1", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("ck1").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let r = os.read(o, 0, &mut buf);
    assert!(r.is_err(), "corrupt data must not be returned");
    assert!(pool.data_errors() > 0);
    let st = pool.status();
    assert!(st.children[0].checksum_errors > 0, "CKSUM counted on the leaf");
    drop(os);
    pool.export().unwrap();
}

#[test]
fn bad_input_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let b = mkfile(d.path(), "b.img", 80 << 20);
    let small = mkfile(d.path(), "small.img", 32 << 20);
    let bad = |s: CreateSpec| Pool::create(&s).err().expect("must fail").to_string();
    assert!(bad(spec("t1", vec![TopSpec::Mirror(vec![a.clone()])])).contains("mirror requires at least 2"));
    assert!(bad(spec(
        "t1",
        vec![TopSpec::Raidz {
            nparity: 2,
            leaves: vec![a.clone(), b.clone()]
        }]
    ))
    .contains("raidz2 requires at least 3"));
    assert!(bad(spec("t1", vec![TopSpec::Mirror(vec![a.clone(), a.clone()])])).contains("more than once"));
    assert!(matches!(Pool::create(&spec("t1", vec![TopSpec::Leaf(small)])), Err(SpaError::TooSmall(_))));
    assert!(bad(spec("1bad", vec![TopSpec::Leaf(a.clone())])).contains("must begin with a letter"));
    // Nothing was written: no labels on a or b.
    assert!(Pool::find_importable(&[d.path().to_path_buf()]).unwrap().is_empty());
    // A device of an exported pool needs -f.
    let p = Pool::create(&spec("t2", vec![TopSpec::Leaf(a.clone())])).unwrap();
    assert!(matches!(p.create_dataset("t2/x/y", &BTreeMap::new()), Err(SpaError::NotFound(_))));
    p.create_dataset("t2/x", &BTreeMap::new()).unwrap();
    p.create_dataset("t2/x/y", &BTreeMap::new()).unwrap();
    assert!(matches!(p.destroy_dataset("t2/x", false), Err(SpaError::HasChildren(_))));
    assert_eq!(p.list_datasets().unwrap().len(), 3);
    assert_eq!(p.destroy_dataset("t2/x", true).unwrap(), vec!["t2/x/y".to_string(), "t2/x".to_string()]);
    p.export().unwrap();
    drop(p);
    match Pool::create(&spec("t3", vec![TopSpec::Leaf(a.clone())])) {
        Err(SpaError::InUse { pool, state, .. }) => {
            assert_eq!(pool, "t2");
            assert_eq!(state, "exported");
        }
        other => panic!("expected InUse, got {:?}", other.map(|_| ())),
    }
    // t2 still imports intact.
    let p = Pool::import("t2", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    assert_eq!(p.list_datasets().unwrap().len(), 1);
    p.export().unwrap();
}

#[test]
fn full_pool_enospc_then_free() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let pool = Pool::create(&spec("full1", vec![TopSpec::Leaf(a)])).unwrap();
    let os = pool.objset("full1").unwrap();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    drop(tx);
    let chunk = pattern(3, 1 << 20);
    let mut written = 0u64;
    let mut hit = false;
    for i in 0..200u64 {
        let tx = os.hold_tx().unwrap();
        match os.write(&tx, obj, i << 20, &chunk) {
            Ok(()) => written += 1,
            Err(tarn_dmu::DmuError::NoSpace) => {
                hit = true;
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
        drop(tx);
        if i % 8 == 0 {
            os.wait_synced().unwrap();
        }
    }
    assert!(hit, "a full pool must return ENOSPC");
    assert!(written > 40, "only {written} MiB fit");
    os.wait_synced().unwrap();
    // Free everything; after the deferred-free window space returns.
    let tx = os.hold_tx().unwrap();
    os.free_object(&tx, obj).unwrap();
    drop(tx);
    for _ in 0..6 {
        let tx = os.hold_tx().unwrap();
        let o = os.create_object(&tx, ObjectType::FileData, 512, 512, &[]).unwrap();
        drop(tx);
        let _ = o;
        os.wait_synced().unwrap();
    }
    let tx = os.hold_tx().unwrap();
    let obj2 = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    os.write(&tx, obj2, 0, &chunk).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("full1", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("full1").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    os.read(obj2, 0, &mut buf).unwrap();
    assert_eq!(buf, chunk);
    drop(os);
    pool.export().unwrap();
}

#[test]
fn overwrites_wait_for_deferred_frees_instead_of_failing_with_enospc() {
    // A file of about a third of the pool, overwritten whole again and again with a
    // sync after each pass: every pass leaves its old copy in the frees deferred for
    // TXG_DEFER_SIZE txgs, so after two passes free space alone cannot hold the next.
    // The live data always fits, so the writer must wait for those frees to come back
    // (as OpenZFS's dmu_tx_assign waits on ERESTART), never see ENOSPC.
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 96 << 20);
    let pool = Pool::create(&spec("tight", vec![TopSpec::Leaf(a)])).unwrap();
    let os = pool.objset("tight").unwrap();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    drop(tx);
    let mib = 28u64;
    for pass in 0..6u64 {
        let chunk = pattern(pass, 1 << 20);
        for i in 0..mib {
            let tx = os.hold_tx().unwrap();
            os.write(&tx, obj, i << 20, &chunk)
                .unwrap_or_else(|e| panic!("pass {pass}, MiB {i}: {e} (free {} MiB)", pool.zio().free_bytes() >> 20));
        }
        os.wait_synced().unwrap();
    }
    drop(os);
    pool.export().unwrap();
    let pool = Pool::import("tight", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("tight").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in [0, mib / 2, mib - 1] {
        os.read(obj, i << 20, &mut buf).unwrap();
        assert_eq!(buf, pattern(5, 1 << 20), "MiB {i}");
    }
    drop(os);
    pool.export().unwrap();
}

#[test]
fn sparse_64_gib_object_costs_only_written_blocks() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let pool = Pool::create(&spec("sp1", vec![TopSpec::Leaf(a)])).unwrap();
    let os = pool.objset("sp1").unwrap();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    let end = 64u64 << 30;
    os.write(&tx, obj, end - 4096, &[0xee; 4096]).unwrap();
    os.write(&tx, obj, 5 << 30, &[0x11; 1000]).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    let before = pool.alloc_bytes();
    assert!(before < 8 << 20, "64 GiB sparse object allocated {before} bytes");
    drop(os);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("sp1", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("sp1").unwrap();
    let mut buf = vec![1u8; 8192];
    os.read(obj, end - 8192, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0) && buf[4096..].iter().all(|&b| b == 0xee));
    let mut mid = vec![1u8; 4096];
    os.read(obj, 30 << 30, &mut mid).unwrap();
    assert!(mid.iter().all(|&b| b == 0), "holes read as zeros");
    let mut five = vec![0u8; 1000];
    os.read(obj, 5 << 30, &mut five).unwrap();
    assert!(five.iter().all(|&b| b == 0x11));
    // Truncate it back down: the far blocks are freed.
    let tx = os.hold_tx().unwrap();
    os.free_range(&tx, obj, 1 << 20, u64::MAX).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    let mut tail = vec![1u8; 4096];
    os.read(obj, end - 4096, &mut tail).unwrap();
    assert!(tail.iter().all(|&b| b == 0));
    drop(os);
    pool.export().unwrap();
}

#[test]
fn corrupt_labels_and_newer_version_refuse_import() {
    use tarn_phys::label::{label_offsets, CONFIG_OFFSET_BYTES};
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 80 << 20);
    let pool = Pool::create(&spec("lb1", vec![TopSpec::Leaf(a.clone())])).unwrap();
    pool.export().unwrap();
    drop(pool);
    // A newer format version in every label: refused with a clear message, nothing changed.
    {
        let leaf = tarn_vdev::Leaf::open(&a).unwrap();
        let mut cfg = tarn_vdev::label::read_configs(&leaf).into_iter().flatten().next().unwrap();
        cfg.version = tarn_phys::TARN_FORMAT_VERSION + 1;
        tarn_vdev::label::write_config(&leaf, &cfg, tarn_vdev::label::LabelHalf::Both).unwrap();
    }
    let e = Pool::import("lb1", &[d.path().to_path_buf()], Rewind::None, None)
        .err()
        .expect("newer version must be refused")
        .to_string();
    assert!(e.contains("newer on-disk format"), "{e}");
    // A version 2 pool (one whole-pool space map) is refused by its version number.
    {
        let leaf = tarn_vdev::Leaf::open(&a).unwrap();
        let mut cfg = tarn_vdev::label::read_configs(&leaf).into_iter().flatten().next().unwrap();
        cfg.version = 2;
        tarn_vdev::label::write_config(&leaf, &cfg, tarn_vdev::label::LabelHalf::Both).unwrap();
    }
    let e = Pool::import("lb1", &[d.path().to_path_buf()], Rewind::None, None)
        .err()
        .expect("version 2 must be refused")
        .to_string();
    assert!(e.contains("older on-disk format version (2)"), "{e}");
    // A format 3 pool (before the compression and checksum families) still imports;
    // then damage every label's config: the pool is no longer found.
    {
        let leaf = tarn_vdev::Leaf::open(&a).unwrap();
        let mut cfg = tarn_vdev::label::read_configs(&leaf).into_iter().flatten().next().unwrap();
        cfg.version = 3;
        tarn_vdev::label::write_config(&leaf, &cfg, tarn_vdev::label::LabelHalf::Both).unwrap();
    }
    assert!(Pool::import("lb1", &[d.path().to_path_buf()], Rewind::None, None).map(|p| p.export()).is_ok());
    let size = std::fs::metadata(&a).unwrap().len();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        for off in label_offsets(size) {
            f.write_all_at(&[0xffu8; 200], off + CONFIG_OFFSET_BYTES + 100).unwrap();
        }
    }
    let e = Pool::import("lb1", &[d.path().to_path_buf()], Rewind::None, None)
        .err()
        .expect("corrupt labels must refuse import")
        .to_string();
    assert!(e.contains("no such pool"), "{e}");
    // Damaging only two of the four labels is survivable.
    let b = mkfile(d.path(), "b.img", 80 << 20);
    let pool = Pool::create(&spec("lb2", vec![TopSpec::Leaf(b.clone())])).unwrap();
    pool.export().unwrap();
    drop(pool);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&b).unwrap();
        for off in &label_offsets(size)[..2] {
            f.write_all_at(&vec![0u8; 256 << 10], *off).unwrap();
        }
    }
    let p = Pool::import("lb2", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    p.export().unwrap();
}

#[test]
fn a_txg_writes_its_metadata_in_a_few_batches_not_block_by_block() {
    // One txg that dirties hundreds of level-1 indirect blocks (one object written at
    // the start of 300 different level-1 spans) and hundreds of new objects (a dozen
    // dnode blocks). Its sync must go out as a few large aggregated device writes per
    // tree level, not one write per metadata block copy.
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 256 << 20);
    let pool = Pool::create(&spec("batch", vec![TopSpec::Leaf(a)])).unwrap();
    let os = pool.objset("batch").unwrap();
    let wide = put(&*os, b"x");
    pool.sync().unwrap();
    let leaf = pool.zio().vdevs()[0].clone();
    let ops = |l: &tarn_vdev::Vdev| l.stats().write_ops.load(std::sync::atomic::Ordering::Relaxed);
    let (ops_before, blocks_before) = (ops(&leaf), pool.zio().blocks_written.load(std::sync::atomic::Ordering::Relaxed));
    {
        let tx = os.hold_tx().unwrap();
        for i in 0..300u64 {
            // Block size 128 KiB: block i * 1024 is the first of level-1 span i.
            os.write(&tx, wide, i * 1024 * (128 << 10), &pattern(i, 4096)).unwrap();
        }
    }
    let objs: Vec<u64> = (0..400u64).map(|i| put(&*os, &pattern(1000 + i, 2000))).collect();
    pool.sync().unwrap();
    let device_writes = ops(&leaf) - ops_before;
    let blocks = pool.zio().blocks_written.load(std::sync::atomic::Ordering::Relaxed) - blocks_before;
    // 300 + 400 data blocks, 300 level-1 blocks and a dozen dnode blocks (two copies
    // of each metadata block), plus the MOS.
    assert!(blocks >= 1000, "only {blocks} blocks written");
    // Measured: about 60 writes for ~1000 blocks; block by block it was ~700. A fifth
    // leaves room for the txg being split in two by a timer sync on a slow machine.
    assert!(
        device_writes * 5 <= blocks,
        "{device_writes} device writes for {blocks} blocks: metadata not batched"
    );
    // And it all reads back after a cold import.
    drop(os);
    pool.export().unwrap();
    let pool = Pool::import("batch", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("batch").unwrap();
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(get(&*os, *o), pattern(1000 + i as u64, 2000));
    }
    for i in [0u64, 1, 150, 299] {
        let mut buf = vec![0u8; 4096];
        os.read(wide, i * 1024 * (128 << 10), &mut buf).unwrap();
        assert_eq!(buf, pattern(i, 4096), "span {i}");
    }
    drop(os);
    pool.export().unwrap();
}

/// Space accounting per txg is proportional to the txg's work, not to the pool: the
/// same small txgs on a 1 GiB and on a 1 TiB (sparse) pool write the same number of
/// space-structure bytes (engine counter, no timing).
#[test]
fn space_sync_bytes_do_not_grow_with_pool_size() {
    let run = |size: u64, name: &str| -> Vec<u64> {
        let d = tempfile::tempdir().unwrap();
        let f = mkfile(d.path(), "a.img", size);
        let pool = Pool::create(&spec(name, vec![TopSpec::Leaf(f)])).unwrap();
        let os = pool.objset(name).unwrap();
        pool.sync().unwrap();
        let mut bytes = Vec::new();
        for i in 0..6u64 {
            for k in 0..3 {
                put(&*os, &pattern(i * 3 + k, 8192));
            }
            pool.sync().unwrap();
            bytes.push(pool.space_sync_bytes());
        }
        assert_eq!(pool.fragmentation_pct().map(|f| f <= 100), Some(true));
        drop(os);
        pool.export().unwrap();
        bytes
    };
    let small = run(1 << 30, "flat1g");
    let large = run(1 << 40, "flat1t");
    assert!(small.iter().all(|&b| b > 0), "{small:?}");
    assert_eq!(small, large, "space-structure bytes per txg: 1 GiB {small:?}, 1 TiB {large:?}");
}

/// The leak check finds exactly the reachable blocks allocated, and notices a block
/// allocated behind its back (a leak) and one freed while still referenced.
#[test]
fn leak_check_matches_reachable_blocks() {
    let d = tempfile::tempdir().unwrap();
    let a = mkfile(d.path(), "a.img", 96 << 20);
    let b = mkfile(d.path(), "b.img", 96 << 20);
    let pool = Pool::create(&spec("leaks", vec![TopSpec::Leaf(a), TopSpec::Leaf(b)])).unwrap();
    let os = pool.objset("leaks").unwrap();
    for i in 0..5 {
        put(&*os, &pattern(i, 200_000));
        pool.sync().unwrap();
    }
    pool.leak_check().unwrap();
    let off = pool.zio().with_space(|s| s.vdevs[1].alloc(4096).unwrap());
    let err = pool.leak_check().unwrap_err();
    assert!(err.contains("leak"), "{err}");
    pool.zio().with_space(|s| s.vdevs[1].free_now(off, 4096));
    pool.leak_check().unwrap();
    // The dataset's root block freed while the dataset still names it.
    let root = pool.objset_concrete("leaks").unwrap().root_bp();
    let d0 = root.dva[0];
    pool.zio().with_space(|s| s.vdevs[d0.vdev as usize].free_now(d0.offset_bytes, d0.asize_bytes));
    let err = pool.leak_check().unwrap_err();
    assert!(err.contains("not allocated"), "{err}");
    assert!(pool.zio().with_space(|s| s.vdevs[d0.vdev as usize].claim(d0.offset_bytes, d0.asize_bytes)));
    let r = pool.leak_check().unwrap();
    assert_eq!(r.allocated_bytes, pool.alloc_bytes(), "{r:?}");
    assert_eq!((r.datasets, r.snapshots, r.zil_blocks), (1, 0, 0), "{r:?}");
    drop(os);
    pool.export().unwrap();
}
