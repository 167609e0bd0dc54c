//! Deferred fill of partial records (`tarn_dmu::objset` theory statement): a write of
//! part of a record on disk reads nothing; reads merge the new bytes over the old;
//! the txg sync fills the records in batches of aggregated reads; snapshots keep the
//! old blocks; a fill that cannot read its old block loses that write but the record
//! then reads as an error, never as zeros.
//!
//! The model test is seeded and replayable: TARN_FILL_SEED, TARN_FILL_ROUNDS.

mod common;

use common::{mirror_pool, mkfile, pattern, reimport, Rng};
use std::sync::atomic::Ordering;
use tarn_dmu::objset::Objset;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::{CreateSpec, Pool, TopSpec};

const RECORD: u64 = 128 << 10;

/// A new 128 KiB-record file-data object holding `data`, synced to disk.
fn file_on_disk(pool: &Pool, os: &Objset, data: &[u8]) -> u64 {
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, RECORD as u32, &[]).unwrap();
    os.write(&tx, obj, 0, data).unwrap();
    drop(tx);
    pool.sync().unwrap();
    obj
}

fn read(os: &dyn ObjectStore, obj: u64, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    os.read(obj, off, &mut b).unwrap();
    b
}

/// `model` read at `[off, off + len)`, zeros past its end.
fn model_read(model: &[u8], off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let off = off as usize;
    if off < model.len() {
        let n = len.min(model.len() - off);
        b[..n].copy_from_slice(&model[off..off + n]);
    }
    b
}

fn check_whole(os: &dyn ObjectStore, obj: u64, model: &[u8], ctx: &str) {
    let got = read(os, obj, 0, model.len() + 3 * RECORD as usize);
    let want = model_read(model, 0, got.len());
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        panic!("{ctx}: differs from the model at byte {first}");
    }
}

/// Random writes (mostly small, into records on disk), reads, punched holes,
/// truncates, snapshots and txg syncs on one file, against a byte-vector model: every
/// read is checked, every snapshot is checked against the model of its time at the end,
/// and after export/import the whole file and every snapshot again.
#[test]
fn partial_records_match_model() {
    let seed: u64 = std::env::var("TARN_FILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_F111);
    let rounds: u64 = std::env::var("TARN_FILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for round in 0..rounds {
        let mut rng = Rng((seed + round * 7919) | 1);
        let d = tempfile::tempdir().unwrap();
        let name = format!("fill{round}");
        let mut pool = mirror_pool(d.path(), &name, 192 << 20);
        let os = pool.objset_concrete(&name).unwrap();
        // Start with 24 records on disk, so that small writes land in cold records.
        let mut model = pattern(seed ^ round, 24 * RECORD as usize);
        let obj = file_on_disk(&pool, &os, &model);
        let mut snaps: Vec<(String, Vec<u8>)> = Vec::new();
        let size_max = 40 * RECORD;
        for step in 0..600 {
            let ctx = format!("seed {seed} round {round} step {step}");
            let op = rng.below(100);
            match op {
                52..=54 => {
                    // A whole record rewritten in pieces, in order or backwards: it
                    // becomes a full record with its last piece (no fill).
                    let rec = rng.below(size_max / RECORD);
                    let piece = [4096, 8192, 16384][rng.below(3) as usize];
                    let mut offs: Vec<u64> = (0..RECORD / piece).map(|k| rec * RECORD + k * piece).collect();
                    if rng.below(2) == 0 {
                        offs.reverse();
                    }
                    let tx = os.hold_tx().unwrap();
                    for off in offs {
                        let data = pattern(rng.next(), piece as usize);
                        os.write(&tx, obj, off, &data).unwrap();
                        let end = (off + piece) as usize;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[off as usize..end].copy_from_slice(&data);
                    }
                    drop(tx);
                }
                0..=51 => {
                    let off = rng.below(size_max);
                    let len = match rng.below(10) {
                        0 => 1 + rng.below(3 * RECORD),
                        1..=3 => 1 + rng.below(512),
                        _ => 1 + rng.below(16 << 10),
                    };
                    let data = pattern(rng.next(), len as usize);
                    let tx = os.hold_tx().unwrap();
                    os.write(&tx, obj, off, &data).unwrap();
                    drop(tx);
                    let end = (off + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                55..=74 => {
                    let off = rng.below(size_max);
                    let cap = if rng.below(2) == 0 { 600 } else { 2 * RECORD };
                    let len = 1 + rng.below(cap);
                    let got = read(&*os, obj, off, len as usize);
                    assert!(got == model_read(&model, off, len as usize), "{ctx}: read {off}+{len} differs");
                }
                75..=81 => {
                    // Punch a hole (the file keeps its length).
                    let off = rng.below(model.len() as u64 + 1);
                    let len = 1 + rng.below(2 * RECORD);
                    let tx = os.hold_tx().unwrap();
                    os.free_range(&tx, obj, off, len).unwrap();
                    drop(tx);
                    let end = ((off + len) as usize).min(model.len());
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
                82..=85 => {
                    // Truncate (to anywhere, often inside a record).
                    let off = rng.below(model.len() as u64 + RECORD);
                    let tx = os.hold_tx().unwrap();
                    os.free_range(&tx, obj, off, u64::MAX).unwrap();
                    drop(tx);
                    model.truncate(off as usize);
                }
                86..=89 => {
                    let snap = format!("{name}@s{step}");
                    pool.snapshot(std::slice::from_ref(&snap), false).unwrap();
                    snaps.push((snap, model.clone()));
                }
                _ => pool.sync().unwrap(),
            }
        }
        check_whole(&*os, obj, &model, &format!("seed {seed} round {round} before sync"));
        pool.sync().unwrap();
        check_whole(&*os, obj, &model, &format!("seed {seed} round {round} after sync"));
        for (snap, img) in &snaps {
            let sos = pool.snapshot_objset(snap).unwrap();
            check_whole(&*sos, obj, img, &format!("seed {seed} round {round} {snap}"));
        }
        assert!(os.fill_stats().synced_fills > 0, "no record was ever filled: the test misses its target");
        assert_eq!(os.fill_stats().failed_fills, 0);
        drop(os);
        pool = reimport(pool, d.path(), &name);
        let os = pool.objset_concrete(&name).unwrap();
        check_whole(&*os, obj, &model, &format!("seed {seed} round {round} after import"));
        for (snap, img) in &snaps {
            let sos = pool.snapshot_objset(snap).unwrap();
            check_whole(&*sos, obj, img, &format!("seed {seed} round {round} {snap} after import"));
        }
        assert_eq!(pool.data_errors(), 0);
        // Whole records written early (objset module `early`) and then rewritten,
        // truncated or snapshotted: none left allocated, none freed twice.
        pool.leak_check().unwrap_or_else(|e| panic!("seed {seed} round {round}: leak check: {e}"));
        drop(os);
        pool.export().unwrap();
    }
}

/// N small writes into N cold records read no block before the sync; the sync fills
/// all N with aggregated reads (fewer device reads than records), and the result is
/// right.
#[test]
fn cold_partial_writes_read_nothing_until_sync_and_fill_in_batches() {
    const N: u64 = 64;
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "coldfill", 128 << 20);
    let os = pool.objset_concrete("coldfill").unwrap();
    let mut model = pattern(1, (N * RECORD) as usize);
    let obj = file_on_disk(&pool, &os, &model);
    let zio = pool.zio().clone();
    let top = zio.vdevs()[0].clone();
    // Cold: nothing cached. The first write (into record 0) loads the tree's
    // indirect block; from then on no write reads anything.
    zio.clear_cache();
    let first = pattern(100, 8192);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 40_000, &first).unwrap();
    drop(tx);
    model[40_000..40_000 + 8192].copy_from_slice(&first);
    let blocks_read = zio.blocks_read.load(Ordering::Relaxed);
    let read_ops = top.stats().read_ops.load(Ordering::Relaxed);
    // One 8 KiB write into the middle of every other record, in a scattered order.
    for i in 1..N {
        let rec = (i * 37) % N;
        let off = rec * RECORD + 40_000;
        let data = pattern(100 + rec, 8192);
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, off, &data).unwrap();
        drop(tx);
        model[off as usize..off as usize + 8192].copy_from_slice(&data);
    }
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), blocks_read, "a partial write read a block");
    assert_eq!(top.stats().read_ops.load(Ordering::Relaxed), read_ops, "a partial write read the device");
    // Reading a written range back needs no fill either (what the intent log does).
    assert_eq!(read(&*os, obj, 5 * RECORD + 40_000, 8192), model_read(&model, 5 * RECORD + 40_000, 8192));
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), blocks_read);
    let before = os.fill_stats();
    pool.sync().unwrap();
    let after = os.fill_stats();
    assert_eq!(after.synced_fills - before.synced_fills, N, "every record filled at sync");
    assert_eq!(after.fill_batches - before.fill_batches, 1, "8 MiB of fills is one batch");
    let blocks = zio.blocks_read.load(Ordering::Relaxed) - blocks_read;
    let ops = top.stats().read_ops.load(Ordering::Relaxed) - read_ops;
    assert!(blocks >= N - 1, "{blocks} blocks read for {N} fills");
    // The records were written contiguously: 1 MiB runs of 8 records, plus a few
    // metadata reads at most.
    assert!(ops <= N / 8 + 8, "{ops} device reads for {N} fills: not aggregated");
    check_whole(&*os, obj, &model, "after sync");
    drop(os);
    let pool = reimport(pool, d.path(), "coldfill");
    let os = pool.objset("coldfill").unwrap();
    check_whole(&*os, obj, &model, "after import");
    pool.export().unwrap();
}

/// Whole-record overwrites need no fill at all.
#[test]
fn full_record_overwrites_need_no_fill() {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "fullfill", 64 << 20);
    let os = pool.objset_concrete("fullfill").unwrap();
    let obj = file_on_disk(&pool, &os, &pattern(2, 8 * RECORD as usize));
    // Two halves of one record in one txg make it whole without a read.
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 0, &pattern(3, 4 * RECORD as usize)).unwrap();
    os.write(&tx, obj, 4 * RECORD, &pattern(4, RECORD as usize / 2)).unwrap();
    drop(tx);
    let blocks_read = pool.zio().blocks_read.load(Ordering::Relaxed);
    pool.sync().unwrap();
    let s = os.fill_stats();
    assert_eq!((s.synced_fills, s.hole_fills), (1, 0), "only the half-written record is filled");
    // One read at most: the record may still be cached from its write.
    assert!(pool.zio().blocks_read.load(Ordering::Relaxed) - blocks_read <= 1);
    pool.export().unwrap();
}

/// A record on disk overwritten whole in small pieces within one txg (a file rewritten
/// 8 KiB at a time, in order or not) becomes a whole record as its last piece lands:
/// its sync reads and fills nothing. A record left one piece short is filled.
#[test]
fn a_record_overwritten_piece_by_piece_needs_no_fill() {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "piecefill", 64 << 20);
    let os = pool.objset_concrete("piecefill").unwrap();
    let mut model = pattern(5, 4 * RECORD as usize);
    let obj = file_on_disk(&pool, &os, &model);
    pool.zio().clear_cache();
    const PIECE: u64 = 8 << 10;
    let pieces = RECORD / PIECE;
    let tx = os.hold_tx().unwrap();
    let mut put = |off: u64, seed: u64| {
        let data = pattern(seed, PIECE as usize);
        os.write(&tx, obj, off, &data).unwrap();
        model[off as usize..(off + PIECE) as usize].copy_from_slice(&data);
    };
    // Record 1 in order, record 2 backwards, record 3 all but its last piece.
    for k in 0..pieces {
        put(RECORD + k * PIECE, 10 + k);
    }
    for k in (0..pieces).rev() {
        put(2 * RECORD + k * PIECE, 40 + k);
    }
    for k in 0..pieces - 1 {
        put(3 * RECORD + k * PIECE, 70 + k);
    }
    drop(tx);
    let before = os.fill_stats();
    pool.sync().unwrap();
    let after = os.fill_stats();
    assert_eq!(after.synced_fills - before.synced_fills, 1, "only the record one piece short is filled");
    check_whole(&*os, obj, &model, "after sync");
    drop(os);
    let pool = reimport(pool, d.path(), "piecefill");
    let os = pool.objset("piecefill").unwrap();
    check_whole(&*os, obj, &model, "after import");
    pool.export().unwrap();
}

/// A warm fill takes its old blocks out of the ARC (`Zio::take_blocks`): the records
/// written by the previous txg are filled from memory without a device read, the
/// replaced blocks are no longer cached, the new ones are, and the file reads back
/// as written.
#[test]
fn warm_fill_takes_the_old_blocks_out_of_the_arc() {
    const N: u64 = 6;
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "warmfill", 64 << 20);
    let os = pool.objset_concrete("warmfill").unwrap();
    let mut model = pattern(5, (N * RECORD) as usize);
    let obj = file_on_disk(&pool, &os, &model);
    let zio = pool.zio().clone();
    let (_, old) = os.block_pointers(obj, 0, N).unwrap().expect("synced");
    // Where each cached buffer's bytes live (the pattern does not compress, so the
    // ARC keeps the logical bytes themselves).
    let old_at: Vec<usize> = old
        .iter()
        .map(|bp| zio.arc().peek(&zio.arc_key(bp)).expect("a block just written is cached").as_ptr() as usize)
        .collect();
    let tx = os.hold_tx().unwrap();
    for r in 0..N {
        let at = r * RECORD + 1000 * r + 3;
        let bytes = pattern(50 + r, 8192);
        os.write(&tx, obj, at, &bytes).unwrap();
        model[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
    }
    drop(tx);
    let (blocks_read, deleted) = (zio.blocks_read.load(Ordering::Relaxed), zio.arc().counters().deleted);
    let before = os.fill_stats();
    pool.sync().unwrap();
    let after = os.fill_stats();
    assert_eq!(after.synced_fills - before.synced_fills, N, "every record was partial");
    assert_eq!(zio.blocks_read.load(Ordering::Relaxed), blocks_read, "filled from the ARC, no device read");
    assert!(zio.arc().counters().deleted >= deleted + N, "each old block left the ARC");
    let (_, new) = os.block_pointers(obj, 0, N).unwrap().expect("synced");
    for ((o, n), at) in old.iter().zip(&new).zip(old_at) {
        assert_ne!(o.dva[0], n.dva[0], "copy-on-write: a new block");
        assert!(!zio.arc().contains(&zio.arc_key(o)), "the replaced block is not cached");
        let cached = zio.arc().peek(&zio.arc_key(n)).expect("the new block is cached");
        assert_eq!(cached.as_ptr() as usize, at, "the old block's buffer became the new record, not a copy");
    }
    check_whole(&*os, obj, &model, "after the warm fill");
    let pool = reimport(pool, d.path(), "warmfill");
    let os = pool.objset("warmfill").unwrap();
    check_whole(&*os, obj, &model, "after export and import");
    pool.export().unwrap();
}

/// The indirect block a sync rewrites leaves the ARC (`Zio::take_block`): the sync
/// edits the cached buffer instead of a copy of it. A snapshot keeps the old block
/// allocated (a plain free would also drop it from the cache), so the test can see
/// that it left the ARC, and that no device read brought it in; the file reads back
/// as written, before and after export and import.
#[test]
fn a_rewritten_indirect_block_leaves_the_arc() {
    const N: u64 = 6;
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "indtake", 64 << 20);
    let os = pool.objset_concrete("indtake").unwrap();
    let mut model = pattern(8, (N * RECORD) as usize);
    let obj = file_on_disk(&pool, &os, &model);
    let zio = pool.zio().clone();
    let l1 = |pool: &Pool| {
        let dump = pool.dataset_dump("indtake", &[obj]).unwrap();
        let dn = &dump.objects.iter().find(|o| o.object == obj).expect("dumped").dnode;
        assert_eq!((dn.nlevels, dn.blkptr.level), (2, 1), "one level-1 block over the records");
        dn.blkptr
    };
    let old = l1(&pool);
    assert!(zio.arc().contains(&zio.arc_key(&old)), "a block just written is cached");
    pool.snapshot(&["indtake@keep".to_string()], false).unwrap();
    let tx = os.hold_tx().unwrap();
    let bytes = pattern(81, 8192);
    os.write(&tx, obj, 2 * RECORD + 100, &bytes).unwrap();
    model[2 * RECORD as usize + 100..2 * RECORD as usize + 100 + bytes.len()].copy_from_slice(&bytes);
    drop(tx);
    let blocks_read = zio.blocks_read.load(Ordering::Relaxed);
    pool.sync().unwrap();
    let new = l1(&pool);
    assert_ne!(old.dva[0], new.dva[0], "copy-on-write: a new indirect block");
    assert!(!zio.arc().contains(&zio.arc_key(&old)), "the replaced indirect block left the ARC");
    assert_eq!(
        zio.blocks_read.load(Ordering::Relaxed),
        blocks_read,
        "taken from the ARC, not read from a device"
    );
    assert!(zio.arc().contains(&zio.arc_key(&new)), "the new one is");
    check_whole(&*os, obj, &model, "after the sync");
    let pool = reimport(pool, d.path(), "indtake");
    let os = pool.objset("indtake").unwrap();
    check_whole(&*os, obj, &model, "after export and import");
    pool.export().unwrap();
}

/// A partial write into a record whose only copy is damaged: the sync does not fail
/// (the pool stays healthy for everything else), the write is dropped, and reading the
/// record reports the checksum error instead of returning zeros or half-new bytes.
#[test]
fn failed_fill_keeps_the_error_visible() {
    let d = tempfile::tempdir().unwrap();
    let leaf = mkfile(d.path(), "one.img", 64 << 20);
    let pool = Pool::create(&CreateSpec {
        name: "badfill".into(),
        vdevs: vec![TopSpec::Leaf(leaf.clone())],
        ashift: 12,
        ..Default::default()
    })
    .unwrap();
    let os = pool.objset_concrete("badfill").unwrap();
    let data = pattern(7, 4 * RECORD as usize);
    let obj = file_on_disk(&pool, &os, &data);
    // Damage record 2 on disk: find its bytes in the image (data is stored raw).
    let image = std::fs::read(&leaf).unwrap();
    let marker = &data[2 * RECORD as usize + 1000..2 * RECORD as usize + 1064];
    let at = image.windows(marker.len()).position(|w| w == marker).expect("record 2 on disk");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&leaf).unwrap();
        f.write_all_at(&[0x55u8; 512], at as u64).unwrap();
    }
    pool.zio().clear_cache();
    // Partial writes into records 1 (healthy) and 2 (damaged).
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, RECORD + 10, b"fine").unwrap();
    os.write(&tx, obj, 2 * RECORD + 10, b"lost").unwrap();
    drop(tx);
    // Before the sync the written bytes read back, the rest of record 2 does not.
    assert_eq!(read(&*os, obj, 2 * RECORD + 10, 4), b"lost");
    let mut buf = vec![0u8; RECORD as usize];
    assert!(os.read(obj, 2 * RECORD, &mut buf).is_err(), "merged read of a damaged record succeeded");
    pool.sync().unwrap();
    assert_eq!(os.fill_stats().failed_fills, 1);
    assert_eq!(os.fill_stats().synced_fills, 1);
    let mut want = data.clone();
    want[RECORD as usize + 10..RECORD as usize + 14].copy_from_slice(b"fine");
    assert_eq!(read(&*os, obj, RECORD, RECORD as usize), &want[RECORD as usize..2 * RECORD as usize]);
    // Record 2 kept its old, damaged block: every read of it fails, the small one too.
    assert!(os.read(obj, 2 * RECORD, &mut buf).is_err(), "record 2 read after a failed fill");
    let mut small = [0u8; 4];
    assert!(os.read(obj, 2 * RECORD + 10, &mut small).is_err(), "dropped bytes read back");
    assert!(pool.data_errors() >= 1);
    // The rest of the file is intact, and the pool goes on syncing.
    assert_eq!(read(&*os, obj, 0, RECORD as usize), &data[..RECORD as usize]);
    let tx = os.hold_tx().unwrap();
    os.write(&tx, obj, 3 * RECORD + 5, b"more").unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert_eq!(read(&*os, obj, 3 * RECORD + 5, 4), b"more");
    pool.export().unwrap();
}

/// Dirty accounting of a partial record is a whole record (what its sync will
/// allocate, which the space check weighs), and it goes back to zero after the sync.
#[test]
fn partial_records_count_whole_records_as_dirty() {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "dirtyfill", 64 << 20);
    let os = pool.objset_concrete("dirtyfill").unwrap();
    let obj = file_on_disk(&pool, &os, &pattern(9, 8 * RECORD as usize));
    assert_eq!(pool.dirty_bytes(), 0);
    let tx = os.hold_tx().unwrap();
    for r in 0..8u64 {
        os.write(&tx, obj, r * RECORD + 100, &[1u8; 8192]).unwrap();
    }
    // Overlapping and adjacent writes into the same record count once.
    os.write(&tx, obj, 100 + 4096, &[2u8; 8192]).unwrap();
    drop(tx);
    assert_eq!(pool.dirty_bytes(), 8 * RECORD);
    pool.sync().unwrap();
    assert_eq!(pool.dirty_bytes(), 0);
    pool.export().unwrap();
}

/// A second handle of `os` with a txg gate of its own (1 GiB limit, its open txg well
/// past the pool's), which the pool's sync thread never touches: the tests below drive
/// its sync phases by hand and read its dirty counts.
fn second_handle(pool: &Pool, os: &Objset) -> (std::sync::Arc<tarn_dmu::txg::TxgGate>, std::sync::Arc<Objset>) {
    let gate = std::sync::Arc::new(tarn_dmu::txg::TxgGate::new(pool.synced_txg() + 100, 1 << 30));
    let mine = Objset::open(pool.zio().clone(), gate.clone(), &os.root_bp(), 0).unwrap();
    (gate, mine)
}

/// Sync txg `txg` of a [`second_handle`]: collect, write the data (two threads), finish.
fn sync_by_hand(os: &Objset, txg: u64) {
    let mut batch = os.sync_collect(txg);
    os.sync_write_data(&mut batch, 2).unwrap();
    os.sync_finish(batch).unwrap();
}

/// Each record leaves the dirty count when the sync's data phase has written it (as
/// OpenZFS's `dbuf_write_done` undirties it), not when the whole txg ends: after phase
/// 2 only what phase 2 could not write is still counted (here a fill whose old block
/// cannot be read), and phase 3 takes that. The phases are driven by hand on a
/// second handle of the object set with a gate of its own, which the pool's sync
/// thread never touches.
#[test]
fn written_records_leave_the_dirty_count_in_the_data_phase() {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "undirty", 64 << 20);
    let os = pool.objset_concrete("undirty").unwrap();
    let obj = file_on_disk(&pool, &os, &pattern(12, 4 * RECORD as usize));
    let zio = pool.zio().clone();
    let (_, bps) = os.block_pointers(obj, 0, 4).unwrap().expect("synced");
    let (gate, mine) = second_handle(&pool, &os);
    let tx = mine.hold_tx().unwrap();
    let txg = tx.txg;
    mine.write(&tx, obj, 0, &pattern(13, 2 * RECORD as usize)).unwrap(); // two whole records
    mine.write(&tx, obj, 2 * RECORD + 5, &[7u8; 8192]).unwrap(); // partial: filled
    mine.write(&tx, obj, 3 * RECORD + 5, &[8u8; 8192]).unwrap(); // partial: its fill fails
    drop(tx);
    assert_eq!(gate.dirty_bytes(), 4 * RECORD, "partial records count whole");
    assert_eq!(gate.dirty_partial_bytes(), 2 * RECORD, "of which two partial records");
    assert_eq!(gate.dirty_partial_held_bytes(), 2 * 8192, "holding their written bytes");
    // Record 3's old block: garbage on both mirror sides, and out of the ARC.
    zio.clear_cache();
    for leaf in zio.vdevs()[0].leaves() {
        let at = tarn_phys::label::DATA_START_BYTES + bps[3].dva[0].offset_bytes;
        let path = leaf.path().clone().expect("a file leaf");
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &vec![0xEE; RECORD as usize], at).unwrap();
    }
    let mut batch = mine.sync_collect(txg);
    mine.sync_write_data(&mut batch, 2).unwrap();
    assert_eq!(gate.dirty_bytes(), RECORD, "after phase 2 only the failed fill is counted");
    assert_eq!(gate.dirty_partial_bytes(), RECORD, "the failed fill is a partial record");
    assert_eq!(gate.dirty_partial_held_bytes(), 8192);
    mine.sync_finish(batch).unwrap();
    assert_eq!(gate.dirty_bytes(), 0, "phase 3 takes the rest");
    assert_eq!(gate.dirty_partial_bytes(), 0);
    assert_eq!(gate.dirty_partial_held_bytes(), 0);
    assert_eq!(mine.fill_stats().failed_fills, 1);
    drop(mine);
    pool.export().unwrap();
}

/// The gate counts partial records apart from whole ones (`tarn_dmu::txg`: whole
/// records ask for a sync at a quarter of the dirty limit, all dirty data at half): a
/// partial record completed by later writes of the same txg, one replaced by a whole
/// record, one truncated away and a freed object's all leave the partial share, and
/// the total stays what the space check counts. Driven on a second handle with a gate
/// of its own, as above.
#[test]
fn partial_records_are_counted_apart_until_completed_or_released() {
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "partshare", 64 << 20);
    let os = pool.objset_concrete("partshare").unwrap();
    let obj = file_on_disk(&pool, &os, &pattern(14, 4 * RECORD as usize));
    let other = file_on_disk(&pool, &os, &pattern(15, 2 * RECORD as usize));
    let (gate, mine) = second_handle(&pool, &os);
    let tx = mine.hold_tx().unwrap();
    for r in 0..4u64 {
        mine.write(&tx, obj, r * RECORD + 5, &[r as u8 + 1; 8192]).unwrap();
    }
    mine.write(&tx, other, 7, &[9u8; 100]).unwrap();
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (5 * RECORD, 5 * RECORD));
    // What they hold: their written bytes, following writes into them.
    assert_eq!(gate.dirty_partial_held_bytes(), 4 * 8192 + 100);
    // Record 0 completed piece by piece: a whole record now, still counted whole.
    mine.write(&tx, obj, 0, &[6u8; 5]).unwrap();
    assert_eq!(gate.dirty_partial_held_bytes(), 4 * 8192 + 100 + 5);
    mine.write(&tx, obj, 5 + 8192, &vec![6u8; RECORD as usize - 5 - 8192]).unwrap();
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (5 * RECORD, 4 * RECORD));
    assert_eq!(gate.dirty_partial_held_bytes(), 3 * 8192 + 100);
    // Record 1 replaced by one whole write.
    mine.write(&tx, obj, RECORD, &vec![7u8; RECORD as usize]).unwrap();
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (5 * RECORD, 3 * RECORD));
    assert_eq!(gate.dirty_partial_held_bytes(), 2 * 8192 + 100);
    // Records 2 and 3 truncated away, then the other object freed.
    mine.free_range(&tx, obj, 2 * RECORD, u64::MAX).unwrap();
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (3 * RECORD, RECORD));
    assert_eq!(gate.dirty_partial_held_bytes(), 100);
    mine.free_object(&tx, other).unwrap();
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (2 * RECORD, 0));
    assert_eq!(gate.dirty_partial_held_bytes(), 0);
    let txg = tx.txg;
    drop(tx);
    sync_by_hand(&mine, txg);
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes()), (0, 0));
    let mut back = vec![0u8; 2 * RECORD as usize];
    mine.read(obj, 0, &mut back).unwrap();
    assert_eq!(&back[..5], &[6u8; 5]);
    assert_eq!(&back[5..5 + 8192], &[1u8; 8192][..]);
    assert!(back[5 + 8192..RECORD as usize].iter().all(|&b| b == 6));
    assert!(back[RECORD as usize..].iter().all(|&b| b == 7));
    drop(mine);
    pool.export().unwrap();
}

/// What a record of the test below is in the open txg, as the object set should see
/// it (`tarn_dmu::objset`'s "Deferred fill").
#[derive(Clone, PartialEq)]
enum RecState {
    /// Not dirty: its content is the block on disk.
    Clean,
    /// Written in parts: the written bytes of the record, one flag per byte.
    Partial(Vec<bool>),
    /// Dirty and whole (written whole, completed, or written after a free).
    Full,
    /// Freed in this txg (a later write into it makes it whole).
    Freed,
}

/// Random writes (into clean, partial and whole records, some completing a record
/// piece by piece, some covering records whole), whole records freed at the end of the
/// file and written again, all in one txg on a second handle with a gate of its own:
/// after every step the gate's three counts equal what a model of the records says
/// (all dirty bytes counted whole, the partial records counted whole, and the bytes
/// they hold, `tarn_dmu::txg`), the sync's two phases bring all three back to zero,
/// and the file reads back as the model's bytes.
#[test]
fn partial_record_counts_follow_a_random_model() {
    const RECORDS: u64 = 12;
    let d = tempfile::tempdir().unwrap();
    let pool = mirror_pool(d.path(), "heldmodel", 64 << 20);
    let os = pool.objset_concrete("heldmodel").unwrap();
    let mut model = pattern(31, (RECORDS * RECORD) as usize);
    let obj = file_on_disk(&pool, &os, &model);
    let (gate, mine) = second_handle(&pool, &os);
    let mut recs = vec![RecState::Clean; RECORDS as usize];
    let mut rng = Rng(0x4E1D_B17E5);
    // How often each path of the accounting was taken: completed in pieces, grown in
    // place, written after a free.
    let (mut completed, mut grown, mut after_free) = (0, 0, 0);
    let tx = mine.hold_tx().unwrap();
    for step in 0..400 {
        match rng.below(20) {
            0 => {
                // Free the file's last records (whole records only: the model keeps
                // no partial truncation).
                let from = RECORDS - 1 - rng.below(3);
                mine.free_range(&tx, obj, from * RECORD, u64::MAX).unwrap();
                for r in from..RECORDS {
                    recs[r as usize] = RecState::Freed;
                    model[(r * RECORD) as usize..((r + 1) * RECORD) as usize].fill(0);
                }
            }
            k => {
                let off = rng.below(RECORDS * RECORD);
                let len = match k {
                    1 => 2 * RECORD,
                    2..=4 => RECORD - off % RECORD, // to the record's end: completes some
                    _ => 1 + rng.below(20 << 10),
                }
                .min(RECORDS * RECORD - off);
                let data = pattern(rng.next(), len as usize);
                mine.write(&tx, obj, off, &data).unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                let (mut at, end) = (off, off + len);
                while at < end {
                    let r = (at / RECORD) as usize;
                    let (lo, hi) = ((at % RECORD) as usize, ((end - r as u64 * RECORD).min(RECORD)) as usize);
                    recs[r] = match std::mem::replace(&mut recs[r], RecState::Clean) {
                        _ if lo == 0 && hi == RECORD as usize => RecState::Full,
                        RecState::Full => RecState::Full,
                        RecState::Freed => {
                            after_free += 1;
                            RecState::Full
                        }
                        RecState::Clean => {
                            let mut w = vec![false; RECORD as usize];
                            w[lo..hi].fill(true);
                            RecState::Partial(w)
                        }
                        RecState::Partial(mut w) => {
                            w[lo..hi].fill(true);
                            if w.iter().all(|&b| b) {
                                completed += 1;
                                RecState::Full
                            } else {
                                grown += 1;
                                RecState::Partial(w)
                            }
                        }
                    };
                    at = (r as u64 + 1) * RECORD;
                }
            }
        }
        let dirty = recs.iter().filter(|r| matches!(r, RecState::Partial(_) | RecState::Full)).count() as u64 * RECORD;
        let partial = recs.iter().filter(|r| matches!(r, RecState::Partial(_))).count() as u64 * RECORD;
        let held: u64 = recs
            .iter()
            .map(|r| match r {
                RecState::Partial(w) => w.iter().filter(|&&b| b).count() as u64,
                _ => 0,
            })
            .sum();
        assert_eq!(
            (gate.dirty_bytes(), gate.dirty_partial_bytes(), gate.dirty_partial_held_bytes()),
            (dirty, partial, held),
            "step {step}: the gate's counts (all, partial, held) differ from the model's"
        );
    }
    assert!(
        recs.iter().any(|r| matches!(r, RecState::Partial(_))),
        "no partial record left: the test misses its target"
    );
    assert!(
        completed > 0 && grown > 0 && after_free > 0,
        "paths taken: {completed} completed, {grown} grown, {after_free} after a free"
    );
    let txg = tx.txg;
    drop(tx);
    sync_by_hand(&mine, txg);
    assert_eq!((gate.dirty_bytes(), gate.dirty_partial_bytes(), gate.dirty_partial_held_bytes()), (0, 0, 0));
    let mut back = vec![0u8; model.len()];
    mine.read(obj, 0, &mut back).unwrap();
    assert!(back == model, "the synced file differs from the model");
    drop(mine);
    pool.export().unwrap();
}

/// A synchronous write into a record on disk: the intent log records only the written
/// bytes, fetched from the partial record without reading the old block, and after a
/// power cut replay rebuilds the file with the new bytes over the old.
#[test]
fn fsync_of_a_partial_record_reads_nothing_and_replays() {
    let d = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(d.path()).unwrap();
    let prefix = dir.display().to_string();
    let pool = mirror_pool(&dir, "zilfill", 96 << 20);
    let mount = |pool: &Pool| {
        tarn_zpl::Fs::open_logged(pool.objset("zilfill").unwrap(), pool.zilog("zilfill").unwrap(), tarn_zpl::ZplOptions::default())
            .unwrap()
            .0
    };
    let fs = mount(&pool);
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let mut model = pattern(11, 16 * RECORD as usize);
    fs.write(f, 0, &model).unwrap();
    fs.fsync(f).unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    pool.zio().clear_cache();
    // The first write loads the tree's indirect block; from then on nothing is read.
    // (Records far apart, so that the log's reads of the written ranges do not look
    // like a sequential stream to the prefetcher.)
    let mut write = |off: usize, data: &[u8]| {
        fs.write(f, off as u64, data).unwrap();
        model[off..off + data.len()].copy_from_slice(data);
    };
    write(6 * RECORD as usize + 100, b"warm");
    let blocks_read = pool.zio().blocks_read.load(Ordering::Relaxed);
    write(3 * RECORD as usize + 5000, &pattern(12, 8192));
    write(9 * RECORD as usize + 70_000, &pattern(13, 8192));
    fs.fsync(f).unwrap();
    assert_eq!(pool.zio().blocks_read.load(Ordering::Relaxed), blocks_read, "the log commit read a record");
    // Power cut before any txg sync: the log alone carries the writes.
    tarn_vdev::inject::power_cut_after(&prefix, 0);
    drop(fs);
    common::abandon(pool, &prefix);
    let pool = Pool::import("zilfill", std::slice::from_ref(&dir), tarn_spa::Rewind::None, None).unwrap();
    let fs = mount(&pool);
    let f = fs.lookup(fs.root(), b"f").unwrap().ino;
    assert_eq!(fs.read(f, 0, model.len() as u32).unwrap(), model);
    drop(fs);
    pool.export().unwrap();
}
