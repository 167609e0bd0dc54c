//! Dedup by model (issue 15): random writes of records drawn from a small pool of
//! contents, overwrites, truncates, deletes and clones, in a file system with
//! `dedup=on`. After every step the files read as the model; after syncs the dedup
//! table's reference counts equal the number of pointers the files' trees hold per
//! block, and the leak check (which checks the table against the trees) passes;
//! after export and import the table is the same; when everything is deleted the
//! table is empty and the space is back. Snapshots hold references too.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_spa::Pool;
use tarn_zio::ddt::DdtKey;
use tarn_zpl::{Fs, SetAttr};

mod common;
use common::{pattern, Rng};

const REC: u64 = 16 << 10;

fn make_pool(dir: &Path, name: &str) -> Arc<Pool> {
    let pool = common::mirror_pool(dir, name, 160 << 20);
    pool.set_dataset_prop(name, "dedup", "on").unwrap();
    pool
}

fn mount(pool: &Pool, name: &str) -> Arc<Fs> {
    common::zpl_mount(pool, name, REC as u32)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    common::file_bytes(fs, ino)
}

/// Reference counts the files' synced trees call for: deduplicated pointers per key.
fn expected(pool: &Pool, inos: &[u64]) -> BTreeMap<DdtKey, u64> {
    let os = pool.objset(&pool.name()).unwrap();
    let mut m = BTreeMap::new();
    for &ino in inos {
        let n = os.object_info(ino).unwrap().maxblkid + 1;
        let (_, bps) = os.block_pointers(ino, 0, n).unwrap().expect("synced");
        for bp in bps.iter().filter(|b| !b.is_hole() && b.dedup) {
            *m.entry(DdtKey::of(bp)).or_default() += 1;
        }
    }
    m
}

fn table(pool: &Pool) -> BTreeMap<DdtKey, u64> {
    pool.zio().ddt().entries().into_iter().map(|(k, e)| (k, e.refcount)).collect()
}

#[test]
fn dedup_table_by_model() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "dd");
    let fs = mount(&pool, "dd");
    let contents: Vec<Vec<u8>> = (0..6).map(|i| pattern(100 + i, REC as usize)).collect();
    let names: Vec<String> = (0..4).map(|i| format!("f{i}")).collect();
    let mut inos: Vec<u64> = names.iter().map(|n| fs.create(fs.root(), n.as_bytes(), 0o644, 0, 0).unwrap().ino).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); 4];
    let mut rng = Rng(0xdd_0001);
    let mut most = 0usize;
    for step in 0..150 {
        let f = rng.below(4) as usize;
        match rng.below(10) {
            0..=4 => {
                let c = &contents[rng.below(6) as usize];
                let blk = rng.below(8);
                fs.write(inos[f], blk * REC, c).unwrap();
                let at = (blk * REC) as usize;
                if model[f].len() < at + c.len() {
                    model[f].resize(at + c.len(), 0);
                }
                model[f][at..at + c.len()].copy_from_slice(c);
            }
            5 => {
                let size = rng.below(model[f].len() as u64 / REC + 1) * REC;
                fs.setattr(
                    inos[f],
                    SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )
                .unwrap();
                model[f].resize(size as usize, 0);
            }
            6 => {
                fs.unlink(fs.root(), names[f].as_bytes()).unwrap();
                inos[f] = fs.create(fs.root(), names[f].as_bytes(), 0o644, 0, 0).unwrap().ino;
                model[f].clear();
            }
            7 => {
                // A clone of a deduplicated block counts in the dedup table.
                let g = (f + 1) % 4;
                let blocks = model[f].len() as u64 / REC;
                if blocks > 0 {
                    let b = rng.below(blocks);
                    let n = fs.clone_range(inos[f], b * REC, inos[g], 0, REC).unwrap();
                    if n > 0 {
                        let src = model[f][(b * REC) as usize..((b + 1) * REC) as usize].to_vec();
                        if model[g].len() < src.len() {
                            model[g].resize(src.len(), 0);
                        }
                        model[g][..src.len()].copy_from_slice(&src);
                    }
                }
            }
            _ => {
                pool.sync().unwrap();
                pool.sync().unwrap();
                assert_eq!(table(&pool), expected(&pool, &inos), "step {step}: dedup table");
                pool.leak_check().unwrap_or_else(|e| panic!("step {step}: {e}"));
            }
        }
        for (i, ino) in inos.iter().enumerate() {
            assert!(read_all(&fs, *ino) == model[i], "step {step}: file {i} differs from the model");
        }
        most = most.max(pool.zio().ddt().entries().iter().filter(|(_, e)| e.refcount > 1).count());
    }
    assert!(most > 0, "no block was ever shared by dedup");
    assert!(pool.zio().dedup_hits.load(std::sync::atomic::Ordering::Relaxed) > 0);
    pool.sync().unwrap();
    pool.sync().unwrap();
    let before = table(&pool);
    assert_eq!(before, expected(&pool, &inos));
    drop(fs);
    let pool = common::reimport(pool, d.path(), "dd");
    assert_eq!(table(&pool), before, "the dedup table changed across export and import");
    let fs = mount(&pool, "dd");
    common::files_match(&fs, &names, &model, "after import");
    pool.leak_check().unwrap();
    common::delete_all(&pool, &fs, &names);
    assert!(pool.zio().ddt().is_empty(), "{} entries left", pool.zio().ddt().len());
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn duplicates_take_no_space_and_snapshots_hold_references() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "ds");
    let fs = mount(&pool, "ds");
    let data = pattern(7, (64 * REC) as usize);
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &data).unwrap();
    common::settle(&pool);
    let base = pool.alloc_bytes();
    for name in ["b", "c", "d"] {
        let ino = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
    }
    common::settle(&pool);
    let grown = pool.alloc_bytes() - base;
    assert!(grown < data.len() as u64 / 4, "three duplicates allocated {grown} bytes");
    let (alloc, referenced) = pool.zio().ddt().space_bytes();
    assert_eq!(referenced, 4 * alloc, "dedup ratio 4");
    pool.snapshot(&["ds@s".to_string()], false).unwrap();
    for name in ["a", "b", "c", "d"] {
        fs.unlink(fs.root(), name.as_bytes()).unwrap();
    }
    common::settle(&pool);
    assert!(!pool.zio().ddt().is_empty(), "the snapshot's references were dropped");
    pool.leak_check().unwrap();
    pool.destroy_snapshot("ds@s").unwrap();
    common::settle(&pool);
    assert!(pool.zio().ddt().is_empty());
    assert!(pool.alloc_bytes() + (data.len() as u64) / 2 < base, "space not back");
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn the_table_quota_stops_new_entries_not_references() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "dq");
    // Room for two entries.
    let quota = 2 * tarn_zio::ddt::DDT_RECORD_BYTES;
    pool.set_prop("dedup_table_quota", &quota.to_string()).unwrap();
    assert!(pool.set_prop("dedup_table_quota", "lots").is_err());
    let fs = mount(&pool, "dq");
    let data: Vec<u8> = (0..4).flat_map(|i| pattern(300 + i, REC as usize)).collect();
    for name in ["a", "b"] {
        let ino = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
        pool.sync().unwrap();
    }
    let t = table(&pool);
    assert_eq!(t.len(), 2, "entries beyond the quota");
    assert!(t.values().all(|&n| n == 2), "existing entries still count references: {t:?}");
    assert_eq!(pool.get_prop("dedup_table_size").unwrap().0, quota.to_string());
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn dedup_property_values_and_refusals() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "dp");
    let none = BTreeMap::new();
    pool.create_dataset("dp/x", &none).unwrap();
    for v in ["off", "on", "verify", "sha256", "sha256,verify", "sha512", "blake3,verify"] {
        pool.set_dataset_prop("dp/x", "dedup", v).unwrap();
    }
    for v in ["skein", "edonr,verify", "fletcher4", "on,verify", ""] {
        let e = common::err_of(pool.set_dataset_prop("dp/x", "dedup", v));
        assert!(e.contains("'dedup' must be one of"), "{v}: {e}");
    }
    pool.set_dataset_prop("dp/x", "checksum", "off").unwrap_err();
    pool.set_dataset_prop("dp/x", "dedup", "off").unwrap();
    pool.set_dataset_prop("dp/x", "checksum", "off").unwrap();
    let e = common::err_of(pool.set_dataset_prop("dp/x", "dedup", "verify"));
    assert!(e.contains("'checksum' would be 'off'"), "{e}");
    pool.export().unwrap();
}

/// Power cuts at many points of a dedup workload (duplicate writes, overwrites,
/// deletes, each txg synced): after every import the dedup table equals the
/// pointers of the files' trees and the leak check passes.
#[test]
fn power_cuts_never_leave_a_dedup_count_the_trees_disagree_with() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let contents: Vec<Vec<u8>> = (0..3).map(|i| pattern(200 + i, REC as usize)).collect();
    let mut seen = Vec::new();
    for cut in [0u64, 4, 9, 15, 25, 40, 60, 90, 140] {
        for f in ["a.img", "b.img"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let pool = make_pool(&dir, "pc");
        let fs = mount(&pool, "pc");
        let names = ["f0", "f1", "f2"];
        let inos: Vec<u64> = names.iter().map(|n| fs.create(fs.root(), n.as_bytes(), 0o644, 0, 0).unwrap().ino).collect();
        fs.write(inos[0], 0, &contents[0]).unwrap();
        pool.sync().unwrap();
        tarn_vdev::inject::power_cut_after(&prefix, cut);
        let _ = (|| -> Result<(), Box<dyn std::error::Error>> {
            for round in 0..4u64 {
                for (i, ino) in inos.iter().enumerate() {
                    let c = &contents[(i as u64 + round) as usize % 3];
                    fs.write(*ino, (round % 3) * REC, c)?;
                }
                pool.sync()?;
            }
            fs.unlink(fs.root(), b"f1")?;
            pool.sync()?;
            Ok(())
        })();
        drop(fs);
        common::abandon(pool, &prefix);
        let pool = Pool::import("pc", std::slice::from_ref(&dir), tarn_spa::Rewind::None, None).unwrap();
        let fs = mount(&pool, "pc");
        pool.sync().unwrap();
        pool.sync().unwrap();
        let inos: Vec<u64> = names.iter().filter_map(|n| fs.lookup(fs.root(), n.as_bytes()).ok()).map(|a| a.ino).collect();
        for ino in &inos {
            read_all(&fs, *ino);
        }
        pool.leak_check().unwrap_or_else(|e| panic!("cut after {cut} writes: {e}"));
        assert_eq!(table(&pool), expected(&pool, &inos), "cut after {cut} writes");
        seen.push(table(&pool).values().sum::<u64>());
        drop(fs);
        pool.export().unwrap();
    }
    assert!(seen.iter().min() < seen.iter().max(), "every cut found the same table: {seen:?}");
}

/// `zpool ddtprune` (OpenZFS 2.3): unique entries older than the cutoff leave the
/// table, duplicates stay; a pruned block is still read, cloned (through the block
/// reference table) and freed as an ordinary block; the same contents written again
/// make a new entry for a new block that the old pointer never touches; the table
/// survives export and import; the leak check passes after every step and all the
/// space comes back at the end.
#[test]
fn pruned_entries_leave_ordinary_blocks() {
    use tarn_zio::ddt::Prune;
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "dpr");
    let fs = mount(&pool, "dpr");
    let file = |name: &str, data: &[u8]| {
        let ino = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, data).unwrap();
        ino
    };
    common::settle(&pool);
    let empty = pool.alloc_bytes();
    let unique = pattern(400, (4 * REC) as usize); // 4 unique blocks
    let shared = pattern(401, (2 * REC) as usize); // 2 blocks, 2 references each
    let a = file("a", &unique);
    file("b", &shared);
    file("c", &shared);
    common::settle(&pool);
    assert_eq!(pool.zio().ddt().len(), 6);
    // Nothing is a day old yet.
    let day_ago = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 86_400;
    assert_eq!(pool.ddt_prune(Prune::ChangedBefore(day_ago())).unwrap(), 0);
    pool.zio().ddt().backdate(2 * 86_400);
    assert_eq!(pool.ddt_prune(Prune::ChangedBefore(day_ago())).unwrap(), 4, "the four unique entries");
    let t = table(&pool);
    assert_eq!(t.len(), 2);
    assert!(t.values().all(|&n| n == 2), "duplicates were pruned: {t:?}");
    pool.leak_check().unwrap();
    assert_eq!(read_all(&fs, a), unique);
    // The same contents again: new entries for new blocks, stored again.
    let before = pool.alloc_bytes();
    let e = file("e", &unique);
    common::settle(&pool);
    assert_eq!(pool.zio().ddt().len(), 6);
    assert!(pool.alloc_bytes() >= before + 4 * REC, "contents of pruned entries were deduplicated");
    // A clone of the pruned blocks counts in the block reference table.
    let f = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.clone_range(a, 0, f, 0, 4 * REC).unwrap(), 4 * REC);
    common::settle(&pool);
    pool.leak_check().unwrap();
    // Freeing the pruned blocks' pointers: the clone holds them, then nothing does;
    // the new entries (same keys) keep their one reference.
    fs.unlink(fs.root(), b"a").unwrap();
    common::settle(&pool);
    assert_eq!(read_all(&fs, f), unique);
    let mut counts: Vec<u64> = table(&pool).into_values().collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 1, 1, 1, 2, 2], "e's four entries and the two shared ones");
    pool.leak_check().unwrap();
    let before = pool.alloc_bytes();
    fs.unlink(fs.root(), b"f").unwrap();
    common::settle(&pool);
    assert!(pool.alloc_bytes() + 4 * REC <= before, "the pruned blocks were not freed");
    assert_eq!(pool.zio().ddt().len(), 6, "a pruned pointer's free touched a later entry");
    pool.leak_check().unwrap();
    assert_eq!(read_all(&fs, e), unique);
    // Percent: half of the four unique entries (e's), oldest first.
    assert_eq!(pool.ddt_prune(Prune::Percent(50)).unwrap(), 2);
    drop(fs);
    let want = table(&pool);
    pool.export().unwrap();
    let pool = Pool::import("dpr", &[d.path().to_path_buf()], tarn_spa::Rewind::None, None).unwrap();
    assert_eq!(table(&pool), want, "the pruned table after import");
    pool.leak_check().unwrap();
    let fs = mount(&pool, "dpr");
    for name in ["b", "c", "e"] {
        fs.unlink(fs.root(), name.as_bytes()).unwrap();
    }
    common::settle(&pool);
    assert!(pool.zio().ddt().is_empty());
    pool.leak_check().unwrap();
    assert!(pool.alloc_bytes() < empty + 2 * REC, "space not back: {} against {empty}", pool.alloc_bytes());
    drop(fs);
    pool.export().unwrap();
}

/// The leak check compares reference counts with the trees: a dedup entry or a block
/// reference table entry that counts one reference too many (a block that would
/// never be freed) fails it, as does a missing one.
#[test]
fn the_leak_check_catches_a_wrong_reference_count() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "drc");
    let fs = mount(&pool, "drc");
    let data = pattern(500, REC as usize);
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &data).unwrap();
    fs.write(b, 0, &data).unwrap();
    common::settle(&pool);
    pool.snapshot(&["drc@s".to_string()], false).unwrap();
    common::settle(&pool);
    pool.leak_check().unwrap();
    let (key, entry) = pool.zio().ddt().entries()[0];
    assert_eq!(entry.refcount, 2, "two files, snapshot shares both pointers");
    assert!(pool.zio().ddt().add_ref(&key));
    let e = pool.leak_check().unwrap_err();
    assert!(e.contains("has refcount 3, the trees hold 2 references"), "{e}");
    let os = pool.objset("drc").unwrap();
    let (_, bps) = os.block_pointers(a, 0, 1).unwrap().expect("synced");
    assert_eq!(pool.zio().ddt().release(&bps[0]), tarn_zio::ddt::Release::Shared);
    pool.leak_check().unwrap();
    // An ordinary block counted twice by the block reference table.
    pool.set_dataset_prop("drc", "dedup", "off").unwrap();
    let c = fs.create(fs.root(), b"c", 0o644, 0, 0).unwrap().ino;
    fs.write(c, 0, &pattern(501, REC as usize)).unwrap();
    common::settle(&pool);
    let (_, bps) = os.block_pointers(c, 0, 1).unwrap().expect("synced");
    pool.zio().clone_ref(&bps[0]);
    let e = pool.leak_check().unwrap_err();
    assert!(e.contains("counts 2 references, the trees hold 1"), "{e}");
    assert!(pool.zio().brt().release(&bps[0]));
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}
