//! Data reduction end to end through the pool (issue 15): the `compression`,
//! `checksum` and `copies` properties, nopwrite, and the space they account for.
//!
//! * Every compression setting round-trips a mixed real corpus (text from /usr/share,
//!   shared libraries from /usr/lib, already-compressed .gz files) plus adversarial
//!   contents, is recorded in each data block's pointer, and stays readable after the
//!   property changes and the pool is exported and imported.
//! * Bad values are refused with OpenZFS's wording and change nothing.
//! * Checksum families: each data block carries the dataset's algorithm, metadata
//!   always BLAKE3; `checksum=off` data is not verified (damage reads back as is and
//!   scrub cannot see it), while a checksummed block's damage is an I/O error.
//! * nopwrite: identical rewrites with a strong checksum and compression write no
//!   data block and keep the old pointers; snapshots stay correct.
//! * copies: DVAs on distinct top-level vdevs (else apart on one), reads fall back,
//!   scrub repairs, `used` counts every copy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_dmu::ObjectStore;
use tarn_phys::{BlkPtr, ChecksumAlg, CompressSetting, Compression, ObjectType};
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};

mod common;
use common::{pattern, put};

fn mkpool(dir: &Path, name: &str, leaves: usize, leaf_bytes: u64) -> Arc<Pool> {
    let vdevs = (0..leaves)
        .map(|i| {
            let p = dir.join(format!("{name}{i}.img"));
            std::fs::File::create(&p).unwrap().set_len(leaf_bytes).unwrap();
            TopSpec::Leaf(p)
        })
        .collect();
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs,
        ..CreateSpec::default()
    })
    .unwrap()
}

fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Up to `max_bytes` of real files: text, binaries and already-compressed files, each
/// cut to at most 200 KiB, plus adversarial contents (empty, zeros, random, sizes
/// around the record sizes).
fn corpus(max_bytes: usize) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut budget = max_bytes;
    let mut take = |dir: &str, pred: &dyn Fn(&Path) -> bool, n: usize, out: &mut Vec<(String, Vec<u8>)>| {
        let mut stack = vec![PathBuf::from(dir)];
        let mut got = 0;
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            let mut ents: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            ents.sort();
            for p in ents {
                if got >= n || budget == 0 {
                    return;
                }
                let Ok(md) = std::fs::symlink_metadata(&p) else { continue };
                if md.is_dir() {
                    stack.push(p);
                } else if md.is_file() && md.len() > 0 && pred(&p) {
                    if let Ok(mut b) = std::fs::read(&p) {
                        b.truncate((200 << 10).min(budget));
                        budget -= b.len();
                        out.push((p.display().to_string(), b));
                        got += 1;
                    }
                }
            }
        }
    };
    let ext = |e: &'static str| move |p: &Path| p.extension().is_some_and(|x| x == e);
    take("/usr/share/common-licenses", &|_| true, 4, &mut out);
    take("/usr/share/doc", &ext("gz"), 3, &mut out);
    take("/usr/lib/x86_64-linux-gnu", &|p: &Path| p.to_string_lossy().contains(".so"), 3, &mut out);
    take("/usr/share", &|_| true, 6, &mut out);
    for n in [1usize, 511, 512, 4095, 4096, 4097, (128 << 10) - 1, 128 << 10, (128 << 10) + 1] {
        out.push((format!("zeros-{n}"), vec![0u8; n]));
        out.push((format!("random-{n}"), pattern(n as u64, n)));
    }
    out.push(("empty".into(), Vec::new()));
    out
}

fn read_obj(os: &dyn ObjectStore, obj: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    os.read(obj, 0, &mut buf).unwrap();
    buf
}

/// Level-0 file data pointers of every object in `objs` (in block order).
fn data_bps(pool: &Pool, fs: &str) -> Vec<BlkPtr> {
    let root = pool.objset_concrete(fs).unwrap().root_bp();
    let mut out = Vec::new();
    tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| {
        if bp.otype == ObjectType::FileData && bp.level == 0 {
            out.push(*bp)
        }
    })
    .unwrap();
    out
}

fn meta_bps(pool: &Pool, fs: &str) -> Vec<BlkPtr> {
    let root = pool.objset_concrete(fs).unwrap().root_bp();
    let mut out = Vec::new();
    tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| {
        if bp.otype != ObjectType::FileData {
            out.push(*bp)
        }
    })
    .unwrap();
    out
}

fn all_settings() -> Vec<String> {
    let mut v: Vec<String> = ["on", "off", "lz4", "zle", "gzip", "zstd", "zstd-fast"].iter().map(|s| s.to_string()).collect();
    v.extend((1..=9).map(|n| format!("gzip-{n}")));
    v.extend((1..=19).map(|n| format!("zstd-{n}")));
    v.extend(tarn_phys::compress::ZSTD_FAST_LEVELS.iter().map(|n| format!("zstd-fast-{n}")));
    v
}

/// Every setting: the corpus round-trips, each data block names the algorithm (and
/// zstd level) it was written with, compressible files are stored smaller; after the
/// property changes (to a different algorithm, then off) and an export/import, the
/// old blocks still read back and keep their codes.
#[test]
fn every_algorithm_roundtrips_and_survives_property_changes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "cz", 1, 768 << 20);
    let files = corpus(700 << 10);
    assert!(
        files.iter().any(|(n, _)| n.ends_with(".gz")) && files.iter().any(|(n, _)| n.contains(".so")),
        "corpus lacks real files"
    );
    let settings = all_settings();
    let mut written: Vec<(String, Vec<u64>)> = Vec::new();
    for (i, s) in settings.iter().enumerate() {
        let fs = format!("cz/d{i}");
        pool.create_dataset(&fs, &props(&[("compression", s)])).unwrap();
        let os = pool.objset(&fs).unwrap();
        let objs: Vec<u64> = files.iter().map(|(_, d)| put(os.as_ref(), d)).collect();
        os.wait_synced().unwrap();
        let setting = CompressSetting::parse(s).unwrap();
        let bps = data_bps(&pool, &fs);
        assert!(bps.iter().all(|bp| bp.compression == setting.alg || bp.compression == Compression::Off), "{s}");
        if setting.alg != Compression::Off {
            assert!(bps.iter().any(|bp| bp.compression == setting.alg), "{s}: nothing compressed");
            let logical: u64 = bps.iter().map(|bp| u64::from(bp.lsize_bytes)).sum();
            let physical: u64 = bps.iter().map(|bp| u64::from(bp.psize_bytes)).sum();
            assert!(physical < logical, "{s}: {physical} >= {logical}");
        }
        // Change the property: new blocks use the new algorithm, old ones keep theirs.
        let next = &settings[(i + 7) % settings.len()];
        pool.set_dataset_prop(&fs, "compression", next).unwrap();
        let extra = put(os.as_ref(), &files[0].1);
        os.wait_synced().unwrap();
        let mut objs = objs;
        objs.push(extra);
        written.push((fs, objs));
    }
    // Read back from disk after export/import (nothing cached).
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("cz", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    for (i, (fs, objs)) in written.iter().enumerate() {
        let os = pool.objset(fs).unwrap();
        for (k, obj) in objs.iter().enumerate() {
            let want = if k < files.len() { &files[k].1 } else { &files[0].1 };
            assert_eq!(&read_obj(os.as_ref(), *obj, want.len()), want, "{fs} ({}) object {k}", settings[i]);
        }
        let setting = CompressSetting::parse(&settings[i]).unwrap();
        let next = CompressSetting::parse(&settings[(i + 7) % settings.len()]).unwrap();
        for bp in data_bps(&pool, fs) {
            assert!([setting.alg, next.alg, Compression::Off].contains(&bp.compression), "{fs}: {bp:?}");
        }
    }
    pool.export().unwrap();
}

/// zstd blocks carry their level in the payload header; a dataset written at zstd-19
/// and then at zstd-fast-10 holds blocks of both levels.
#[test]
fn zstd_level_is_recorded_with_each_block() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "zl", 1, 256 << 20);
    pool.create_dataset("zl/fs", &props(&[("compression", "zstd-19")])).unwrap();
    let os = pool.objset("zl/fs").unwrap();
    let text: Vec<u8> = b"zstd level bookkeeping ".iter().copied().cycle().take(256 << 10).collect();
    put(os.as_ref(), &text);
    os.wait_synced().unwrap();
    pool.set_dataset_prop("zl/fs", "compression", "zstd-fast-10").unwrap();
    put(os.as_ref(), &text);
    os.wait_synced().unwrap();
    let mut levels = std::collections::BTreeSet::new();
    for bp in data_bps(&pool, "zl/fs") {
        assert_eq!(bp.compression, Compression::Zstd);
        let phys = read_raw(&pool, &bp);
        levels.insert(Compression::Zstd.zstd_level_of(&phys).unwrap());
    }
    assert_eq!(levels.into_iter().collect::<Vec<_>>(), vec![-10, 19]);
    pool.export().unwrap();
}

/// The physical bytes of `bp`'s first copy, checked against its checksum.
fn read_raw(pool: &Pool, bp: &BlkPtr) -> Vec<u8> {
    let d = bp.dva[0];
    let v = &pool.zio().vdevs()[d.vdev as usize];
    let sum = |b: &[u8]| bp.checksum_alg.compute(b) == bp.checksum;
    v.read_birth(d.offset_bytes, u64::from(bp.psize_bytes), bp.birth_txg, &sum).unwrap()
}

/// Unknown algorithms, `copies=4`, and property changes on snapshots are refused
/// with OpenZFS's wording and change nothing.
#[test]
fn bad_values_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "bv", 1, 128 << 20);
    pool.create_dataset("bv/fs", &props(&[("compression", "gzip-3"), ("checksum", "sha256"), ("copies", "2")]))
        .unwrap();
    let cases = [
        ("compression", "foo", "'compression' must be one of 'on | off | gzip | gzip-[1-9] | zle | lz4 | zstd | zstd-[1-19] | zstd-fast | zstd-fast-[1-10,20,30,40,50,60,70,80,90,100,500,1000]'"),
        ("compression", "lzjb", "'compression' must be one of"),
        ("compression", "zstd-20", "'compression' must be one of"),
        ("compression", "gzip-10", "'compression' must be one of"),
        ("compression", "zstd-fast-11", "'compression' must be one of"),
        ("checksum", "skein", "'checksum' must be one of 'on | off | fletcher4 | sha256 | sha512 | blake3'"),
        ("checksum", "foo", "'checksum' must be one of"),
        ("copies", "4", "'copies' must be one of '1 | 2 | 3'"),
        ("copies", "0", "'copies' must be one of '1 | 2 | 3'"),
    ];
    for (p, v, want) in cases {
        let e = pool.set_dataset_prop("bv/fs", p, v).unwrap_err().to_string();
        assert!(e.contains(want), "{p}={v}: {e}");
        let e = pool.create_dataset("bv/other", &props(&[(p, v)])).unwrap_err().to_string();
        assert!(e.contains(want), "create -o {p}={v}: {e}");
    }
    assert!(!pool.dataset_names().contains(&"bv/other".to_string()));
    pool.snapshot(&["bv/fs@s".into()], false).unwrap();
    for (p, v) in [("checksum", "off"), ("compression", "lz4"), ("copies", "1")] {
        let e = pool.set_dataset_prop("bv/fs@s", p, v).unwrap_err().to_string();
        assert!(e.contains("this property can not be modified for snapshots"), "{e}");
    }
    for (p, v) in [("compression", "gzip-3"), ("checksum", "sha256"), ("copies", "2")] {
        assert_eq!(pool.dataset_prop("bv/fs", p).unwrap().0, v);
    }
    pool.export().unwrap();
}

/// Each data block carries the dataset's checksum; metadata is BLAKE3 whatever the
/// property says (off included). Damage to a checksummed data block is an I/O error;
/// to a `checksum=off` block it reads back damaged and scrub does not see it (as in
/// OpenZFS: without a checksum there is nothing to detect or heal with).
#[test]
fn checksum_families_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "ck", 1, 256 << 20);
    let data = pattern(11, 256 << 10);
    let mut objs = BTreeMap::new();
    for (v, alg) in [
        ("on", ChecksumAlg::Fletcher4),
        ("fletcher4", ChecksumAlg::Fletcher4),
        ("sha256", ChecksumAlg::Sha256),
        ("sha512", ChecksumAlg::Sha512),
        ("blake3", ChecksumAlg::Blake3),
        ("off", ChecksumAlg::Off),
    ] {
        let fs = format!("ck/{v}");
        pool.create_dataset(&fs, &props(&[("checksum", v)])).unwrap();
        let os = pool.objset(&fs).unwrap();
        objs.insert(v, put(os.as_ref(), &data));
        os.wait_synced().unwrap();
        let bps = data_bps(&pool, &fs);
        assert_eq!(bps.len(), 2);
        assert!(bps.iter().all(|bp| bp.checksum_alg == alg), "{v}: {bps:?}");
        assert!(meta_bps(&pool, &fs).iter().all(|bp| bp.checksum_alg == ChecksumAlg::Blake3), "{v}: metadata");
    }
    let victims: Vec<(&str, BlkPtr)> = ["off", "sha256"].iter().map(|v| (*v, data_bps(&pool, &format!("ck/{v}"))[0])).collect();
    pool.export().unwrap();
    drop(pool);
    let img = dir.path().join("ck0.img");
    for (_, bp) in &victims {
        scribble(&img, bp.dva[0].offset_bytes, 4096);
    }
    let pool = Pool::import("ck", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("ck/off").unwrap();
    let got = read_obj(os.as_ref(), objs["off"], data.len());
    assert_ne!(got, data, "checksum=off: damage is not detected");
    assert_eq!(&got[4096..], &data[4096..]);
    let os = pool.objset("ck/sha256").unwrap();
    let mut buf = vec![0u8; data.len()];
    assert!(os.read(objs["sha256"], 0, &mut buf).is_err(), "sha256: damage must be an I/O error");
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!(s.errors, 1, "scrub sees the sha256 block only: {s:?}");
    pool.export().unwrap();
}

fn scribble(path: &Path, dva_offset: u64, len: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&vec![0xa5; len as usize], tarn_phys::label::DATA_START_BYTES + dva_offset)
        .unwrap();
    f.sync_all().unwrap();
}

/// nopwrite: with sha256 and compression on, rewriting identical bytes writes no data
/// block and keeps every pointer; with fletcher4, or with compression off, the same
/// rewrite writes new blocks. A snapshot taken before the rewrite still reads its
/// content after the blocks are later overwritten with different bytes, and the
/// rewrite costs the snapshot no space.
#[test]
fn nopwrite_keeps_identical_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "nw", 1, 256 << 20);
    // 8 records, each half repetitive and half random: about 2:1 for every algorithm.
    let noise = pattern(77, 1 << 20);
    let data: Vec<u8> = (0..(1usize << 20))
        .map(|i| if (i >> 16) % 2 == 0 { (i / 7 % 253) as u8 } else { noise[i] })
        .collect();
    let mut rewrite_blocks = BTreeMap::new();
    for (v, comp, nop) in [
        ("sha256", "lz4", true),
        ("blake3", "zstd", true),
        ("sha512", "gzip", true),
        ("fletcher4", "lz4", false),
        ("sha256", "off", false),
    ] {
        let fs = format!("nw/{v}-{comp}");
        pool.create_dataset(&fs, &props(&[("checksum", v), ("compression", comp)])).unwrap();
        let os = pool.objset(&fs).unwrap();
        let obj = put(os.as_ref(), &data);
        os.wait_synced().unwrap();
        let before = data_bps(&pool, &fs);
        assert_eq!(before.len(), 8);
        let zio = pool.zio();
        let (nops, writes) = (zio.nop_writes.load(Ordering::Relaxed), zio.blocks_written.load(Ordering::Relaxed));
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, 0, &data).unwrap();
        drop(tx);
        os.wait_synced().unwrap();
        let after = data_bps(&pool, &fs);
        let (nops, writes) = (
            zio.nop_writes.load(Ordering::Relaxed) - nops,
            zio.blocks_written.load(Ordering::Relaxed) - writes,
        );
        if nop {
            assert_eq!(nops, 8, "{fs}");
            assert_eq!(after, before, "{fs}: pointers changed");
        } else {
            assert_eq!(nops, 0, "{fs}");
            assert!(after.iter().zip(&before).all(|(a, b)| a.dva[0] != b.dva[0]), "{fs}");
            assert!(writes >= 8, "{fs}");
        }
        rewrite_blocks.insert(fs.clone(), writes);
        assert_eq!(read_obj(os.as_ref(), obj, data.len()), data);
    }
    // Blocks written by the rewrite's sync (pool-wide, so metadata and the MOS too):
    // fewer for every nopwrite than for any rewrite that writes its 8 data blocks.
    let most_nop = ["nw/sha256-lz4", "nw/blake3-zstd", "nw/sha512-gzip"]
        .iter()
        .map(|f| rewrite_blocks[*f])
        .max()
        .unwrap();
    let least_full = ["nw/fletcher4-lz4", "nw/sha256-off"].iter().map(|f| rewrite_blocks[*f]).min().unwrap();
    assert!(most_nop < least_full, "{rewrite_blocks:?}");
    // Snapshots stay correct.
    let fs = "nw/sha256-lz4";
    let os = pool.objset(fs).unwrap();
    pool.snapshot(&[format!("{fs}@s")], false).unwrap();
    let used = |n: &str| pool.list_all().unwrap().into_iter().find(|i| i.name == n).unwrap().used_bytes;
    let obj = 1..=u64::MAX;
    let obj = obj
        .into_iter()
        .find(|o| os.object_info(*o).is_ok_and(|i| i.otype == ObjectType::FileData))
        .unwrap();
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &data).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    // Only rewritten metadata (indirect, dnode and root blocks) becomes the snapshot's own.
    let data_asize: u64 = data_bps(&pool, fs).iter().map(|bp| bp.asize_total_bytes()).sum();
    let meta_only = used(&format!("{fs}@s"));
    assert!(
        meta_only < data_asize / 2,
        "a nopwrite gave the snapshot data blocks: {meta_only} of {data_asize}"
    );
    let other: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &other).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    assert!(used(&format!("{fs}@s")) >= meta_only + data_asize, "overwritten data now the snapshot's own");
    assert_eq!(read_obj(os.as_ref(), obj, data.len()), other);
    pool.export().unwrap();
    drop(pool);
    let pool = Pool::import("nw", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    let snap_root = pool.list_snapshots().unwrap().iter().any(|i| i.name == format!("{fs}@s"));
    assert!(snap_root);
    let mut seen = Vec::new();
    let snap_bps = {
        let root = pool_snapshot_root(&pool, &format!("{fs}@s"));
        tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| {
            if bp.otype == ObjectType::FileData && bp.level == 0 {
                seen.push(*bp)
            }
        })
        .unwrap();
        seen
    };
    let mut content = Vec::new();
    for bp in &snap_bps {
        content.extend_from_slice(&pool.zio().read_block(bp).unwrap());
    }
    assert_eq!(content, data, "the snapshot still reads the original bytes");
    pool.export().unwrap();
}

fn pool_snapshot_root(pool: &Pool, snap: &str) -> BlkPtr {
    pool.snapshot_root_bp(snap).unwrap()
}

/// copies=2|3: data DVAs on distinct top-level vdevs (3 leaves), metadata one copy
/// more (at most 3); on one leaf, copies of a block on the same vdev at different
/// offsets. `used` counts every copy. With one copy of every data block damaged, reads
/// fall back to another copy, and a scrub repairs the damage (a second finds none).
#[test]
fn copies_are_placed_apart_read_back_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "cp", 3, 128 << 20);
    let data = pattern(5, 512 << 10);
    let mut used = BTreeMap::new();
    for c in ["1", "2", "3"] {
        let fs = format!("cp/c{c}");
        pool.create_dataset(&fs, &props(&[("copies", c)])).unwrap();
        let os = pool.objset(&fs).unwrap();
        put(os.as_ref(), &data);
        os.wait_synced().unwrap();
        let n: usize = c.parse().unwrap();
        for bp in data_bps(&pool, &fs) {
            let vdevs: std::collections::BTreeSet<u32> = bp.dvas().map(|d| d.vdev).collect();
            assert_eq!((bp.dvas().count(), vdevs.len()), (n, n), "{fs}: {bp:?}");
        }
        for bp in meta_bps(&pool, &fs) {
            assert_eq!(bp.dvas().count(), (n + 1).min(3), "{fs} metadata");
        }
        used.insert(n, pool.list_all().unwrap().into_iter().find(|i| i.name == fs).unwrap().used_bytes);
    }
    assert!(used[&2] >= 2 * used[&1] - (64 << 10) && used[&3] >= 3 * used[&1] - (64 << 10), "{used:?}");
    pool.export().unwrap();
    drop(pool);

    // One leaf, copies=2: same vdev, distinct offsets; damage copy 0 of every block.
    let one = tempfile::tempdir().unwrap();
    let pool = mkpool(one.path(), "one", 1, 128 << 20);
    pool.create_dataset("one/fs", &props(&[("copies", "2")])).unwrap();
    let os = pool.objset("one/fs").unwrap();
    let obj = put(os.as_ref(), &data);
    os.wait_synced().unwrap();
    let bps = data_bps(&pool, "one/fs");
    for bp in &bps {
        assert_eq!(bp.dvas().count(), 2);
        assert_ne!(bp.dva[0].offset_bytes, bp.dva[1].offset_bytes);
    }
    pool.export().unwrap();
    drop(pool);
    for bp in &bps {
        scribble(&one.path().join("one0.img"), bp.dva[0].offset_bytes, 4096);
    }
    let pool = Pool::import("one", &[one.path().to_path_buf()], Rewind::None, None).unwrap();
    let s = {
        pool.scrub_start().unwrap();
        pool.scan_wait();
        pool.scan_status().unwrap().phys
    };
    assert!(s.repaired_bytes >= 4096 * bps.len() as u64 && s.errors == 0, "{s:?}");
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!((s.repaired_bytes, s.errors), (0, 0), "second scrub: {s:?}");
    let os = pool.objset("one/fs").unwrap();
    assert_eq!(read_obj(os.as_ref(), obj, data.len()), data);
    pool.export().unwrap();
    drop(pool);
    // Damage the other copy now: reads fall back to the repaired first one.
    for bp in &bps {
        scribble(&one.path().join("one0.img"), bp.dva[1].offset_bytes, 4096);
    }
    let pool = Pool::import("one", &[one.path().to_path_buf()], Rewind::None, None).unwrap();
    let os = pool.objset("one/fs").unwrap();
    assert_eq!(read_obj(os.as_ref(), obj, data.len()), data);
    pool.export().unwrap();
}

/// `refcompressratio` counts what a dataset references; `compressratio` its used
/// space, snapshots included: a snapshot of compressible text, then the text
/// overwritten by noise, leaves compressratio above refcompressratio.
#[test]
fn compressratio_covers_snapshots_and_refcompressratio_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "cr", 1, 256 << 20);
    pool.create_dataset("cr/fs", &props(&[("compression", "gzip")])).unwrap();
    let os = pool.objset("cr/fs").unwrap();
    let text: Vec<u8> = b"compressratio is logical over physical; ".iter().copied().cycle().take(2 << 20).collect();
    let obj = put(os.as_ref(), &text);
    os.wait_synced().unwrap();
    pool.snapshot(&["cr/fs@s".into()], false).unwrap();
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &pattern(3, 2 << 20)).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    let (ul, up) = pool.used_lsize_psize("cr/fs").unwrap();
    let (rl, rp) = pool.referenced_lsize_psize("cr/fs").unwrap();
    let (sl, sp) = pool.referenced_lsize_psize("cr/fs@s").unwrap();
    let ratio = |l: u64, p: u64| l as f64 / p as f64;
    assert!(ratio(rl, rp) < 1.1, "head holds noise: {rl}/{rp}");
    assert!(ratio(sl, sp) > 5.0, "snapshot holds text: {sl}/{sp}");
    assert!(ratio(ul, up) > 1.5 && ratio(ul, up) < ratio(sl, sp), "used: {ul}/{up}");
    // Exactly the sums over the distinct blocks of head and snapshot.
    let mut seen = std::collections::HashSet::new();
    let (mut l, mut p) = (0u64, 0u64);
    for root in [pool.objset_concrete("cr/fs").unwrap().root_bp(), pool.snapshot_root_bp("cr/fs@s").unwrap()] {
        tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| {
            if seen.insert((bp.dva[0].vdev, bp.dva[0].offset_bytes)) {
                l += bp.ucsize_bytes();
                p += u64::from(bp.psize_bytes);
            }
        })
        .unwrap();
    }
    assert_eq!((ul, up), (l, p));
    assert_eq!(pool.logical_used("cr/fs").unwrap(), l);
    pool.export().unwrap();
}

/// With compression on, all-zero data blocks are stored as holes (zfsprops(7)); with
/// compression off they are written. Either way they read back as zeros, and an
/// all-zero rewrite of written data frees its blocks.
#[test]
fn zero_blocks_become_holes_when_compression_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mkpool(dir.path(), "zh", 1, 128 << 20);
    for (comp, blocks) in [("lz4", 0usize), ("zstd-fast", 0), ("off", 8)] {
        let fs = format!("zh/{comp}");
        pool.create_dataset(&fs, &props(&[("compression", comp)])).unwrap();
        let os = pool.objset(&fs).unwrap();
        let obj = put(os.as_ref(), &vec![0u8; 1 << 20]);
        os.wait_synced().unwrap();
        assert_eq!(data_bps(&pool, &fs).len(), blocks, "{comp}");
        assert_eq!(read_obj(os.as_ref(), obj, 1 << 20), vec![0u8; 1 << 20]);
    }
    let os = pool.objset("zh/lz4").unwrap();
    let obj = put(os.as_ref(), &pattern(1, 256 << 10));
    os.wait_synced().unwrap();
    assert_eq!(data_bps(&pool, "zh/lz4").len(), 2);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &vec![0u8; 128 << 10]).unwrap();
    drop(tx);
    os.wait_synced().unwrap();
    assert_eq!(data_bps(&pool, "zh/lz4").len(), 1);
    let mut want = vec![0u8; 128 << 10];
    want.extend_from_slice(&pattern(1, 256 << 10)[128 << 10..]);
    assert_eq!(read_obj(os.as_ref(), obj, 256 << 10), want);
    pool.export().unwrap();
}
