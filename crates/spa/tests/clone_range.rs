//! Block cloning by model (issue 15: "cloned and punched ranges by model"): random
//! clones between files, overwrites of either copy, punches, truncates and deletes,
//! against a model of the files' bytes. After every step the files read as the
//! model; after syncs the leak check (which checks the block reference table against
//! the trees) passes; after export and import the data and the table are the same;
//! and a shared block's space comes back only when its last reference goes.

use std::path::Path;
use std::sync::Arc;
use tarn_spa::{Pool, Rewind};
use tarn_zpl::{Fs, SetAttr};

mod common;
use common::{pattern, Rng};

const REC: u64 = 16 << 10;

fn make_pool(dir: &Path, name: &str) -> Arc<Pool> {
    common::mirror_pool(dir, name, 160 << 20)
}

fn mount(pool: &Pool, name: &str) -> Arc<Fs> {
    common::zpl_mount(pool, name, REC as u32)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    common::file_bytes(fs, ino)
}

/// The block reference table the files' synced trees call for (no snapshots here:
/// every pointer is one reference): (vdev, offset) → pointers beyond the first.
fn expected_refcounts(pool: &Pool, inos: &[u64]) -> Vec<(u32, u64, u64)> {
    let os = pool.objset(&pool.name()).unwrap();
    let mut count: std::collections::BTreeMap<(u32, u64), u64> = Default::default();
    for &ino in inos {
        let n = os.object_info(ino).unwrap().maxblkid + 1;
        let (_, bps) = os.block_pointers(ino, 0, n).unwrap().expect("synced");
        for bp in bps.iter().filter(|b| !b.is_hole()) {
            *count.entry((bp.dva[0].vdev, bp.dva[0].offset_bytes)).or_default() += 1;
        }
    }
    count.into_iter().filter(|(_, n)| *n > 1).map(|((v, o), n)| (v, o, n - 1)).collect()
}

fn table(pool: &Pool) -> Vec<(u32, u64, u64)> {
    pool.zio().brt().entries().into_iter().map(|(v, o, e)| (v, o, e.refcount)).collect()
}

fn write_model(m: &mut Vec<u8>, off: usize, data: &[u8]) {
    if m.len() < off + data.len() {
        m.resize(off + data.len(), 0);
    }
    m[off..off + data.len()].copy_from_slice(data);
}

#[test]
fn shared_blocks_by_model() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "cl");
    let fs = mount(&pool, "cl");
    let mut rng = Rng(0x5eed_c10e);
    let names: Vec<String> = (0..4).map(|i| format!("f{i}")).collect();
    let mut inos: Vec<u64> = Vec::new();
    let mut model: Vec<Vec<u8>> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let ino = fs.create(fs.root(), n.as_bytes(), 0o644, 0, 0).unwrap().ino;
        let data = pattern(i as u64 + 1, (8 * REC + 1000 * i as u64) as usize);
        fs.write(ino, 0, &data).unwrap();
        inos.push(ino);
        model.push(data);
    }
    pool.sync().unwrap();
    let mut cloned_total = 0u64;
    let mut most_shared = 0usize;
    for step in 0..120 {
        let f = rng.below(4) as usize;
        match rng.below(10) {
            0..=3 => {
                // Clone whole records (sometimes to the end of the source).
                let g = rng.below(4) as usize;
                let src_blocks = (model[f].len() as u64).div_ceil(REC);
                if src_blocks == 0 {
                    continue;
                }
                let b_in = rng.below(src_blocks);
                let b_out = rng.below(12);
                let nblk = 1 + rng.below(4);
                if f == g && b_in < b_out + nblk && b_out < b_in + nblk {
                    continue;
                }
                let (off_in, off_out) = (b_in * REC, b_out * REC);
                let len = nblk * REC;
                let n = fs.clone_range(inos[f], off_in, inos[g], off_out, len).unwrap();
                let avail = (model[f].len() as u64).saturating_sub(off_in).min(len);
                let whole = avail / REC * REC;
                assert!(n == whole || n == avail, "step {step}: cloned {n} of {avail} (whole records {whole})");
                if n > 0 {
                    let src = model[f][off_in as usize..(off_in + n) as usize].to_vec();
                    write_model(&mut model[g], off_out as usize, &src);
                    cloned_total += n;
                }
            }
            4 | 5 => {
                // Overwrite part of a file, on or off record boundaries.
                let len = 1 + rng.below(2 * REC) as usize;
                let off = rng.below(model[f].len() as u64 + REC) as usize;
                let data = pattern(1000 + step, len);
                fs.write(inos[f], off as u64, &data).unwrap();
                write_model(&mut model[f], off, &data);
            }
            6 => {
                // Punch a hole.
                let off = rng.below(model[f].len() as u64 + 1) as usize;
                let len = rng.below(3 * REC) as usize;
                fs.fallocate(inos[f], off as u64, len as u64, tarn_zpl::FALLOC_FL_PUNCH_HOLE | tarn_zpl::FALLOC_FL_KEEP_SIZE)
                    .unwrap();
                let end = (off + len).min(model[f].len());
                if off < end {
                    model[f][off..end].fill(0);
                }
            }
            7 => {
                // Truncate.
                let size = rng.below(model[f].len() as u64 + 1);
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
            8 => {
                // Delete and recreate.
                fs.unlink(fs.root(), names[f].as_bytes()).unwrap();
                inos[f] = fs.create(fs.root(), names[f].as_bytes(), 0o644, 0, 0).unwrap().ino;
                model[f].clear();
            }
            _ => {
                pool.sync().unwrap();
                pool.sync().unwrap();
                pool.leak_check().unwrap_or_else(|e| panic!("step {step}: {e}"));
                assert_eq!(table(&pool), expected_refcounts(&pool, &inos), "step {step}: reference counts");
            }
        }
        for (i, ino) in inos.iter().enumerate() {
            assert!(read_all(&fs, *ino) == model[i], "step {step}: file {i} differs from the model");
        }
        most_shared = most_shared.max(pool.zio().brt().len());
    }
    assert!(cloned_total > 0 && most_shared > 0, "the random walk never shared a block");
    pool.sync().unwrap();
    pool.sync().unwrap();
    pool.leak_check().unwrap();
    assert_eq!(table(&pool), expected_refcounts(&pool, &inos));
    let before = pool.zio().brt().entries();
    // Export and import: same bytes, same table.
    drop(fs);
    let pool = common::reimport(pool, d.path(), "cl");
    assert_eq!(pool.zio().brt().entries(), before);
    let fs = mount(&pool, "cl");
    common::files_match(&fs, &names, &model, "after import");
    pool.leak_check().unwrap();
    // Every file gone: every reference gone.
    common::delete_all(&pool, &fs, &names);
    assert!(pool.zio().brt().is_empty(), "{} entries left", pool.zio().brt().len());
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn space_comes_back_only_with_the_last_reference() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "sp");
    let fs = mount(&pool, "sp");
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    let size = 64 * REC;
    fs.write(a, 0, &pattern(9, size as usize)).unwrap();
    common::settle(&pool);
    let base = pool.alloc_bytes();
    let b = fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.clone_range(a, 0, b, 0, size).unwrap(), size);
    common::settle(&pool);
    let after_clone = pool.alloc_bytes();
    // Two copies' worth of data, one copy's worth of space (metadata aside).
    assert!(after_clone < base + size / 4, "clone allocated {} bytes", after_clone - base);
    let (used, saved) = pool.zio().brt().space_bytes();
    assert!(used >= size && saved == used, "bcloneused {used}, bclonesaved {saved}");
    assert_eq!(read_all(&fs, b), pattern(9, size as usize));
    // A snapshot holds b's pointers; deleting a and b frees nothing yet.
    pool.snapshot(&["sp@s".to_string()], false).unwrap();
    fs.unlink(fs.root(), b"a").unwrap();
    fs.unlink(fs.root(), b"b").unwrap();
    common::settle(&pool);
    assert!(pool.alloc_bytes() + size / 4 > base, "space came back while the snapshot still names it");
    pool.leak_check().unwrap();
    // The snapshot goes: so does the last reference.
    pool.destroy_snapshot("sp@s").unwrap();
    common::settle(&pool);
    assert!(
        pool.alloc_bytes() + size / 2 < base,
        "space did not come back: {} of {base}",
        pool.alloc_bytes()
    );
    assert!(pool.zio().brt().is_empty());
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn unaligned_or_mismatched_ranges_share_nothing() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "un");
    let fs = mount(&pool, "un");
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(3, (4 * REC) as usize)).unwrap();
    let b = fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &pattern(4, 100)).unwrap();
    // Unaligned offsets, a range under one record, a target with data in another
    // block size: nothing shared, nothing changed.
    assert_eq!(fs.clone_range(a, 512, b, 0, REC).unwrap(), 0);
    assert_eq!(fs.clone_range(a, 0, b, 512, REC).unwrap(), 0);
    assert_eq!(fs.clone_range(a, 0, b, 0, REC - 1).unwrap(), 0);
    assert_eq!(fs.clone_range(a, 0, b, 0, REC).unwrap(), 0, "b holds 100 bytes in a 512-byte block");
    assert_eq!(read_all(&fs, b), pattern(4, 100));
    assert!(pool.zio().brt().is_empty());
    // Dirty source records are synced first, then shared.
    let c = fs.create(fs.root(), b"c", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.clone_range(a, REC, c, 0, 2 * REC).unwrap(), 2 * REC);
    assert_eq!(read_all(&fs, c), pattern(3, (4 * REC) as usize)[REC as usize..3 * REC as usize].to_vec());
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn a_clone_survives_export_and_import() {
    let d = tempfile::tempdir().unwrap();
    let pool = make_pool(d.path(), "pb");
    let fs = mount(&pool, "pb");
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(5, REC as usize)).unwrap();
    let b = fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.clone_range(a, 0, b, 0, REC).unwrap(), REC);
    drop(fs);
    pool.export().unwrap();
    let pool = Pool::import("pb", &[d.path().to_path_buf()], Rewind::None, None).unwrap();
    let fs = mount(&pool, "pb");
    let b = fs.lookup(fs.root(), b"b").unwrap().ino;
    assert_eq!(read_all(&fs, b), pattern(5, REC as usize));
    drop(fs);
    pool.export().unwrap();
}

/// Power cuts at many points of a clone-heavy workload (clones, writes into shared
/// records, deletes, each followed by its txg): after every import the reference
/// table matches the files' trees exactly and the leak check passes, so no block is
/// ever freed while named, and none is left counted once nothing names it.
#[test]
fn power_cuts_never_leave_a_reference_count_the_trees_disagree_with() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let mut shared_after = Vec::new();
    for cut in [0u64, 3, 7, 12, 20, 30, 45, 70, 110, 160] {
        for f in ["a.img", "b.img"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let pool = make_pool(&dir, "cp");
        let fs = mount(&pool, "cp");
        let names = ["f0", "f1", "f2"];
        let mut inos: Vec<u64> = names.iter().map(|n| fs.create(fs.root(), n.as_bytes(), 0o644, 0, 0).unwrap().ino).collect();
        fs.write(inos[0], 0, &pattern(1, (6 * REC) as usize)).unwrap();
        pool.sync().unwrap();
        tarn_vdev::inject::power_cut_after(&prefix, cut);
        // Everything from here may fail once the power is gone.
        let _ = (|| -> Result<(), tarn_zpl::ZplError> {
            fs.clone_range(inos[0], 0, inos[1], 0, 6 * REC)?;
            fs.write(inos[0], REC + 100, &pattern(2, 5000))?;
            fs.clone_range(inos[1], 2 * REC, inos[2], 0, 3 * REC)?;
            fs.unlink(fs.root(), b"f1")?;
            inos[1] = fs.create(fs.root(), b"f1", 0o644, 0, 0)?.ino;
            fs.clone_range(inos[2], 0, inos[1], REC, 2 * REC)?;
            fs.write(inos[2], 0, &pattern(3, REC as usize))?;
            Ok(())
        })();
        let _ = pool.sync();
        drop(fs);
        common::abandon(pool, &prefix);
        let pool = Pool::import("cp", std::slice::from_ref(&dir), Rewind::None, None).unwrap();
        let fs = mount(&pool, "cp");
        pool.sync().unwrap();
        pool.sync().unwrap();
        let inos: Vec<u64> = names.iter().map(|n| fs.lookup(fs.root(), n.as_bytes()).unwrap().ino).collect();
        for ino in &inos {
            read_all(&fs, *ino);
        }
        pool.leak_check().unwrap_or_else(|e| panic!("cut after {cut} writes: {e}"));
        assert_eq!(table(&pool), expected_refcounts(&pool, &inos), "cut after {cut} writes");
        shared_after.push(table(&pool).len());
        drop(fs);
        pool.export().unwrap();
    }
    // The cuts fall before, among and after the clones.
    assert!(shared_after.contains(&0) && shared_after.iter().any(|&n| n > 0), "{shared_after:?}");
}

/// A clone is durable when `clone_range` returns (it waits for its txg; the intent
/// log has no record for it): the power going right after the call loses nothing.
#[test]
fn a_returned_clone_survives_a_power_cut() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = make_pool(&dir, "cd");
    let fs = mount(&pool, "cd");
    let a = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(11, (4 * REC) as usize)).unwrap();
    let b = fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.clone_range(a, 0, b, 0, 4 * REC).unwrap(), 4 * REC);
    tarn_vdev::inject::power_cut_after(&prefix, 0);
    drop(fs);
    common::abandon(pool, &prefix);
    let pool = Pool::import("cd", std::slice::from_ref(&dir), Rewind::None, None).unwrap();
    let fs = mount(&pool, "cd");
    let b = fs.lookup(fs.root(), b"b").unwrap().ino;
    assert_eq!(read_all(&fs, b), pattern(11, (4 * REC) as usize));
    pool.leak_check().unwrap();
    drop(fs);
    pool.export().unwrap();
}
