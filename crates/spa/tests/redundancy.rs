//! Redundancy under damage, engine level: what each layout promises to survive, it
//! survives, heals, and then reads clean; what it cannot survive fails loudly.
//!
//! How: for every redundant layout — 2- and 3-way mirror, raidz1, raidz2, raidz3, and a
//! single disk (whose only redundancy is the ditto copies of metadata) — a pool on
//! 64 MiB temporary files gets a directory and files of mixed sizes (empty, sub-sector,
//! multi-block) written through the ZPL and synced. The pool is exported, the leaf
//! files are damaged with the pool closed, and the pool is imported again so that every
//! read reaches the disks. Damage up to the layout's tolerance `t` (mirror: n-1 sides,
//! raidz: p columns, single disk: one ditto copy of metadata):
//!
//! * every block of the dataset (found by traversing its object set) overwritten with
//!   random bytes on `t` leaves, rotating which leaves per block copy;
//! * the data area (beyond the label/boot area, `DATA_START_BYTES`) of `t` whole leaves
//!   zeroed, then those leaves deleted and the pool imported DEGRADED;
//! * zinject checksum corruption, then I/O errors, on reads of `t` leaves of the live
//!   pool.
//!
//! Each time every file must read back byte-identical and the damaged leaves' CKSUM or
//! READ counters must rise; after another export/import, reading everything again must
//! count no error at all (the damage was rewritten). Beyond tolerance (a data block of
//! one file damaged on `t + 1` leaves, or its only copy on a single disk), reading that
//! block fails with an I/O error — never wrong bytes, never a panic — while the rest of
//! the file and every other file still read correctly.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_dmu::{ObjectStore, ObjectType};
use tarn_phys::label::{data_end_bytes, DATA_START_BYTES};
use tarn_phys::BlkPtr;
use tarn_spa::inject::{self, Action, Fault, IoType, FREQ_ALWAYS_PPM};
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec, VdevStatus};
use tarn_vdev::raidz::Geometry;
use tarn_zpl::{Fs, ZplError, ZplOptions};

mod common;
use common::Rng;

const LEAF_BYTES: u64 = 64 << 20;
const SECTOR_BYTES: u64 = 4096;
const RECORD_BYTES: usize = 128 << 10;
/// The file that beyond-tolerance damage targets (three records).
const TARGET: &str = "d/target";

/// Path → content.
type Files = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone, Copy)]
enum Layout {
    Single,
    Mirror(usize),
    Raidz { nparity: usize, ncols: usize },
}

impl Layout {
    fn nleaves(self) -> usize {
        match self {
            Layout::Single => 1,
            Layout::Mirror(n) => n,
            Layout::Raidz { ncols, .. } => ncols,
        }
    }
    /// Leaves whose loss the layout survives.
    fn tolerance(self) -> usize {
        match self {
            Layout::Single => 0,
            Layout::Mirror(n) => n - 1,
            Layout::Raidz { nparity, .. } => nparity,
        }
    }
}

/// A pool on temporary leaf files (removed with the directory).
struct Rig {
    dir: tempfile::TempDir,
    name: String,
    layout: Layout,
    leaves: Vec<PathBuf>,
}

impl Rig {
    fn new(layout: Layout, name: &str) -> (Rig, Arc<Pool>) {
        let dir = tempfile::Builder::new().prefix("tarn-redundancy").tempdir().unwrap();
        let leaves: Vec<PathBuf> = (0..layout.nleaves())
            .map(|i| {
                let p = dir.path().join(format!("leaf{i}"));
                std::fs::File::create(&p).unwrap().set_len(LEAF_BYTES).unwrap();
                p
            })
            .collect();
        let top = match layout {
            Layout::Single => TopSpec::Leaf(leaves[0].clone()),
            Layout::Mirror(_) => TopSpec::Mirror(leaves.clone()),
            Layout::Raidz { nparity, .. } => TopSpec::Raidz {
                nparity: nparity as u8,
                leaves: leaves.clone(),
            },
        };
        let pool = Pool::create(&CreateSpec {
            name: name.into(),
            vdevs: vec![top],
            ..CreateSpec::default()
        })
        .unwrap();
        let rig = Rig {
            dir,
            name: name.into(),
            layout,
            leaves,
        };
        (rig, pool)
    }

    fn import(&self) -> Arc<Pool> {
        Pool::import(&self.name, &[self.dir.path().to_path_buf()], Rewind::None, None).unwrap()
    }

    /// Export and import again: nothing read before is cached any more.
    fn reopen(&self, pool: Arc<Pool>) -> Arc<Pool> {
        pool.export().unwrap();
        drop(pool);
        self.import()
    }

    /// Where a block copy `dva` lives: (leaf index, file offset, length) per column
    /// (raidz: the block's map, parity first; `p + 1 ..= n` columns) or per side
    /// (mirror).
    fn copy_ranges(&self, bp: &BlkPtr, copy: usize) -> Vec<(usize, u64, u64)> {
        let dva = bp.dva[copy];
        let psize = bp.psize_bytes as u64;
        match self.layout {
            Layout::Single | Layout::Mirror(_) => {
                let len = psize.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
                (0..self.layout.nleaves()).map(|i| (i, DATA_START_BYTES + dva.offset_bytes, len)).collect()
            }
            Layout::Raidz { nparity, ncols } => {
                let g = Geometry {
                    ncols,
                    nparity,
                    sector_bytes: SECTOR_BYTES,
                };
                let map = g.map(dva.offset_bytes, psize);
                map.columns
                    .iter()
                    .map(|c| (c.child, DATA_START_BYTES + c.child_offset_bytes, c.size_bytes))
                    .collect()
            }
        }
    }
}

/// Overwrite `[offset, offset + len)` of `path` with random bytes.
fn scribble(path: &Path, offset: u64, len: u64, rng: &mut Rng) {
    let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&junk).unwrap();
    f.sync_all().unwrap();
}

/// Zero the data area of a leaf (its labels stay, so it still belongs to the pool).
fn zero_data_area(path: &Path) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let end = data_end_bytes(f.metadata().unwrap().len());
    let chunk = vec![0u8; 1 << 20];
    let mut at = DATA_START_BYTES;
    f.seek(SeekFrom::Start(at)).unwrap();
    while at < end {
        let n = chunk.len().min((end - at) as usize);
        f.write_all(&chunk[..n]).unwrap();
        at += n as u64;
    }
    f.sync_all().unwrap();
}

fn mount(pool: &Pool, name: &str) -> Arc<Fs> {
    let opts = ZplOptions {
        atime: false,
        ..ZplOptions::default()
    };
    Fs::open(pool.objset(name).unwrap(), opts).unwrap()
}

/// Write the test files (mixed sizes, some of several records) and sync.
fn write_files(pool: &Pool, name: &str, seed: u64) -> Files {
    let fs = mount(pool, name);
    let mut rng = Rng(seed);
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
    let sizes = [0usize, 1, 511, 4096, 5000, 65536, RECORD_BYTES, RECORD_BYTES + 1, 1_000_003];
    let mut files = Files::new();
    for (i, size) in sizes.iter().enumerate() {
        let path = if i % 2 == 0 { format!("f{i}") } else { format!("d/f{i}") };
        files.insert(path, (0..*size).map(|_| rng.next() as u8).collect());
    }
    files.insert(TARGET.into(), (0..3 * RECORD_BYTES - 100).map(|_| rng.next() as u8).collect());
    for (path, data) in &files {
        let (dir, leaf) = match path.split_once('/') {
            Some((_, leaf)) => (d, leaf),
            None => (fs.root(), path.as_str()),
        };
        let ino = fs.create(dir, leaf.as_bytes(), 0o644, 0, 0).unwrap().ino;
        for (k, chunk) in data.chunks(RECORD_BYTES).enumerate() {
            assert_eq!(fs.write(ino, (k * RECORD_BYTES) as u64, chunk).unwrap() as usize, chunk.len());
        }
    }
    fs.sync_fs().unwrap();
    drop(fs);
    pool.sync().unwrap();
    files
}

fn lookup(fs: &Fs, path: &str) -> Result<u64, ZplError> {
    let mut ino = fs.root();
    for part in path.split('/') {
        ino = fs.lookup(ino, part.as_bytes())?.ino;
    }
    Ok(ino)
}

fn read_range(fs: &Fs, ino: u64, offset: u64, len: u64) -> Result<Vec<u8>, ZplError> {
    let mut out = Vec::new();
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(RECORD_BYTES as u64) as u32;
        let chunk = fs.read(ino, at, n)?;
        if chunk.is_empty() {
            break;
        }
        at += chunk.len() as u64;
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Read every file of `expected` (sizes from the directory, content from the disks).
fn read_all(pool: &Pool, name: &str, expected: &Files) -> BTreeMap<String, Result<Vec<u8>, ZplError>> {
    let fs = mount(pool, name);
    expected
        .keys()
        .map(|path| {
            let r = lookup(&fs, path).and_then(|ino| {
                let size = fs.getattr(ino)?.size;
                read_range(&fs, ino, 0, size)
            });
            (path.clone(), r)
        })
        .collect()
}

/// Every file reads back byte-identical.
fn assert_intact(pool: &Pool, name: &str, expected: &Files, when: &str) {
    for (path, got) in read_all(pool, name, expected) {
        match got {
            Ok(bytes) => assert!(bytes == expected[&path], "{when}: {path} read back different bytes"),
            Err(e) => panic!("{when}: {path} unreadable: {e}"),
        }
    }
}

/// (path, READ, CKSUM) of every leaf.
fn leaf_errors(pool: &Pool) -> Vec<(String, u64, u64)> {
    fn walk(v: &VdevStatus, out: &mut Vec<(String, u64, u64)>) {
        if v.children.is_empty() {
            out.push((v.name.clone(), v.read_errors, v.checksum_errors));
        }
        v.children.iter().for_each(|c| walk(c, out));
    }
    let mut out = Vec::new();
    pool.status().children.iter().for_each(|t| walk(t, &mut out));
    out
}

fn total_errors(pool: &Pool) -> u64 {
    leaf_errors(pool).iter().map(|(_, r, c)| r + c).sum()
}

/// Every block of the dataset's object set (metadata and file data).
fn dataset_blocks(pool: &Pool, name: &str) -> Vec<BlkPtr> {
    let root = pool.objset_concrete(name).unwrap().root_bp();
    let mut out = Vec::new();
    tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| out.push(*bp)).unwrap();
    assert!(out.len() > 10, "only {} blocks", out.len());
    out
}

/// After damage within tolerance was healed (by reads or a scrub): a scrub finds no
/// unrecoverable block, a second one repairs 0 bytes, and every file reads back intact.
fn scrub_slot(pool: &Arc<Pool>, name: &str, expected: &Files) {
    let first = scrub(pool);
    assert_eq!(first.errors, 0, "{first:?}");
    let second = scrub(pool);
    assert_eq!((second.repaired_bytes, second.errors), (0, 0), "second scrub: {second:?}");
    assert_intact(pool, name, expected, "after scrubs");
}

/// Run a scrub to the end and return its record.
fn scrub(pool: &Arc<Pool>) -> tarn_spa::scan::ScanPhys {
    pool.scrub_start().unwrap();
    pool.scan_wait();
    let s = pool.scan_status().unwrap().phys;
    assert_eq!(s.state, tarn_spa::scan::ScanState::Finished);
    s
}

/// Damage every block copy of the dataset on `t` leaves (rotating), or on a single disk
/// one ditto copy of each metadata block; then read, heal, and read clean.
fn blocks_within_tolerance(layout: Layout, name: &str, scrub_first: bool) {
    let (rig, pool) = Rig::new(layout, name);
    let files = write_files(&pool, name, 0x5eed_0001);
    let blocks = dataset_blocks(&pool, name);
    pool.export().unwrap();
    drop(pool);
    let mut rng = Rng(0xdead_beef);
    let t = layout.tolerance();
    let mut damaged = 0;
    for (i, bp) in blocks.iter().enumerate() {
        let ncopies = bp.dvas().count();
        match layout {
            Layout::Single => {
                // Only metadata has a second copy; spoil one of them.
                if ncopies < 2 {
                    continue;
                }
                let (leaf, off, len) = rig.copy_ranges(bp, i % ncopies)[0];
                scribble(&rig.leaves[leaf], off, len, &mut rng);
                damaged += 1;
            }
            _ => {
                for copy in 0..ncopies {
                    let ranges = rig.copy_ranges(bp, copy);
                    for k in 0..t {
                        let (leaf, off, len) = ranges[(i + copy + k) % ranges.len()];
                        scribble(&rig.leaves[leaf], off, len, &mut rng);
                    }
                    damaged += 1;
                }
            }
        }
    }
    assert!(damaged > 0);
    let pool = rig.import();
    if scrub_first {
        // The scrub, not a reader, finds and repairs every damaged copy.
        let s = scrub(&pool);
        assert!(s.repaired_bytes > 0 && s.errors == 0, "first scrub: {s:?}");
    }
    assert_intact(&pool, name, &files, "after damage");
    assert!(total_errors(&pool) > 0, "damage went unnoticed: {:?}", leaf_errors(&pool));
    assert_eq!(pool.data_errors(), 0);
    scrub_slot(&pool, name, &files);
    let pool = rig.reopen(pool);
    assert_intact(&pool, name, &files, "after healing");
    assert_eq!(leaf_errors(&pool).iter().map(|(_, r, c)| r + c).sum::<u64>(), 0, "{:?}", leaf_errors(&pool));
    pool.export().unwrap();
}

/// Zero the data area of `t` leaves, read and heal; then delete those leaves and read
/// from the DEGRADED pool.
fn whole_leaves(layout: Layout, name: &str) {
    let (rig, pool) = Rig::new(layout, name);
    let files = write_files(&pool, name, 0x5eed_0002);
    pool.export().unwrap();
    drop(pool);
    let t = layout.tolerance();
    for leaf in &rig.leaves[..t] {
        zero_data_area(leaf);
    }
    let pool = rig.import();
    assert_eq!(pool.health(), "ONLINE");
    assert_intact(&pool, name, &files, "leaves zeroed");
    let errs = leaf_errors(&pool);
    assert!(errs[..t].iter().all(|(_, r, c)| r + c > 0), "{errs:?}");
    assert!(errs[t..].iter().all(|(_, r, c)| r + c == 0), "{errs:?}");
    let pool = rig.reopen(pool);
    assert_intact(&pool, name, &files, "zeroed leaves healed");
    assert_eq!(total_errors(&pool), 0, "{:?}", leaf_errors(&pool));
    pool.export().unwrap();
    drop(pool);
    for leaf in &rig.leaves[..t] {
        std::fs::remove_file(leaf).unwrap();
    }
    let pool = rig.import();
    assert_eq!(pool.health(), "DEGRADED");
    assert_intact(&pool, name, &files, "leaves missing");
    assert_eq!(total_errors(&pool), 0, "{:?}", leaf_errors(&pool));
    let pool = rig.reopen(pool);
    assert_eq!(pool.health(), "DEGRADED");
    assert_intact(&pool, name, &files, "leaves missing, again");
    pool.export().unwrap();
}

/// zinject on the live pool: checksum corruption, then I/O errors, on reads of `t`
/// leaves.
fn injected(layout: Layout, name: &str) {
    let (rig, pool) = Rig::new(layout, name);
    let files = write_files(&pool, name, 0x5eed_0003);
    let t = layout.tolerance();
    let n = layout.nleaves();
    // A mirror reads its first side first: only damage there is met by reads.
    let io_victims = if matches!(layout, Layout::Mirror(_)) { 0..t } else { n - t..n };
    let mut pool = pool;
    for (fault, victims) in [(Fault::Checksum, 0..t), (Fault::Io, io_victims)] {
        // Nothing cached: every read below reaches the leaves.
        pool = rig.reopen(pool);
        let guids: Vec<u64> = pool.leaf_devices()[victims.clone()].iter().map(|l| l.guid).collect();
        let ids: Vec<u64> = guids
            .iter()
            .map(|g| pool.inject(*g, IoType::Read, Action::Fault(fault), FREQ_ALWAYS_PPM).unwrap())
            .collect();
        assert_intact(&pool, name, &files, &format!("{fault:?} injected"));
        let errs = leaf_errors(&pool);
        for (i, (leaf, r, c)) in errs.iter().enumerate() {
            let counted = if fault == Fault::Checksum { *c } else { *r };
            if victims.contains(&i) {
                assert!(counted > 0, "{fault:?} on {leaf} not counted: {errs:?}");
            } else {
                assert_eq!(r + c, 0, "{leaf} was not injected: {errs:?}");
            }
        }
        assert_eq!(pool.data_errors(), 0);
        for id in ids {
            assert!(inject::clear(id));
        }
        pool = rig.reopen(pool);
        assert_intact(&pool, name, &files, &format!("{fault:?} cleared"));
        assert_eq!(total_errors(&pool), 0, "{:?}", leaf_errors(&pool));
    }
    pool.export().unwrap();
}

/// One data block of `TARGET` damaged on `t + 1` leaves: that block fails with an I/O
/// error, every other byte of every file still reads.
fn beyond_tolerance(layout: Layout, name: &str) {
    let (rig, pool) = Rig::new(layout, name);
    let files = write_files(&pool, name, 0x5eed_0004);
    let first = &files[TARGET][..RECORD_BYTES];
    let target = dataset_blocks(&pool, name)
        .into_iter()
        .find(|bp| bp.otype == ObjectType::FileData && bp.level == 0 && bp.checksum == bp.checksum_alg.compute(first))
        .expect("the target's first block");
    pool.export().unwrap();
    drop(pool);
    let mut rng = Rng(0xbad_b10c);
    let ranges = rig.copy_ranges(&target, 0);
    for (leaf, off, len) in &ranges[..layout.tolerance() + 1] {
        scribble(&rig.leaves[*leaf], *off, *len, &mut rng);
    }
    for round in ["damaged", "damaged, after reopen"] {
        let pool = rig.import();
        let got = read_all(&pool, name, &files);
        for (path, r) in &got {
            match r {
                Ok(bytes) if path != TARGET => assert!(*bytes == files[path], "{round}: {path} read back different bytes"),
                Ok(_) => panic!("{round}: {TARGET} read without error despite damage beyond redundancy"),
                Err(ZplError::Io(_)) if path == TARGET => {}
                Err(e) => panic!("{round}: {path}: unexpected {e:?}"),
            }
        }
        assert!(pool.data_errors() > 0);
        // The target's other records are intact.
        let fs = mount(&pool, name);
        let ino = lookup(&fs, TARGET).unwrap();
        let rest = read_range(&fs, ino, RECORD_BYTES as u64, (files[TARGET].len() - RECORD_BYTES) as u64).unwrap();
        assert!(rest == files[TARGET][RECORD_BYTES..], "{round}: undamaged records of the target differ");
        assert!(matches!(read_range(&fs, ino, 0, 10), Err(ZplError::Io(_))));
        drop(fs);
        pool.export().unwrap();
    }
}

fn all_scenarios(layout: Layout, tag: &str) {
    blocks_within_tolerance(layout, &format!("rb{tag}"), false);
    blocks_within_tolerance(layout, &format!("rs{tag}"), true);
    if layout.tolerance() > 0 {
        whole_leaves(layout, &format!("rw{tag}"));
        injected(layout, &format!("ri{tag}"));
    }
    beyond_tolerance(layout, &format!("rx{tag}"));
}

#[test]
fn mirror_2way() {
    all_scenarios(Layout::Mirror(2), "m2");
}

#[test]
fn mirror_3way() {
    all_scenarios(Layout::Mirror(3), "m3");
}

#[test]
fn raidz1() {
    all_scenarios(Layout::Raidz { nparity: 1, ncols: 3 }, "z1");
}

#[test]
fn raidz2() {
    all_scenarios(Layout::Raidz { nparity: 2, ncols: 4 }, "z2");
}

#[test]
fn raidz3() {
    all_scenarios(Layout::Raidz { nparity: 3, ncols: 5 }, "z3");
}

#[test]
fn single_disk_ditto_metadata() {
    all_scenarios(Layout::Single, "s1");
}

/// Seed 004's layout: 19 disks in raidz3. Every damage scenario within (and beyond)
/// three failed children, and a 4 KiB block takes 16 KiB on disk (one data sector,
/// three parity, already a multiple of nparity + 1) where a whole-row layout took 76.
#[test]
fn raidz3_19_wide() {
    let layout = Layout::Raidz { nparity: 3, ncols: 19 };
    all_scenarios(layout, "z19");
    let (rig, pool) = Rig::new(layout, "z19a");
    let os = pool.objset_concrete("z19a").unwrap();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 4096, 4096, &[]).unwrap();
    os.write(&tx, obj, 0, &[0x5a; 4096]).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let small: Vec<BlkPtr> = dataset_blocks_any(&pool, "z19a")
        .into_iter()
        .filter(|b| b.otype == ObjectType::FileData && b.lsize_bytes == 4096)
        .collect();
    assert!(!small.is_empty());
    let sector = 1u64 << pool.zio().vdevs()[0].ashift();
    for b in &small {
        assert_eq!(b.dva[0].asize_bytes, 4 * sector, "{b:?}");
    }
    drop(os);
    pool.export().unwrap();
    drop(rig);
}

fn dataset_blocks_any(pool: &Pool, name: &str) -> Vec<BlkPtr> {
    let root = pool.objset_concrete(name).unwrap().root_bp();
    let mut out = Vec::new();
    tarn_dmu::traverse::traverse(pool.zio(), &root, &mut |bp| out.push(*bp)).unwrap();
    out
}
