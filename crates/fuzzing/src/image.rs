//! The structure-aware image fuzzer: a small real pool whose metadata is
//! damaged and re-sealed, then imported, read, changed, destroyed and scrubbed.
//!
//! Theory. Byte-level fuzzers of single decoders (`fuzz/`) cannot reach the paths
//! that combine them — import loading the pool directory, a dnode pointing at an
//! indirect tree, a scrub walking a snapshot. Flipping bytes on the device does not
//! reach them either: every read is verified against the checksum in the parent
//! pointer, so damage is only ever a checksum error. A crafted pool, the kind a
//! hostile disk image carries, has its damage *sealed*: checksums recomputed all the
//! way up to the uberblock. We get such pools from the engine itself: a case imports
//! a pristine pool ([`Image`]), installs a write mutator
//! ([`tarn_zio::craft::set_write_mutator`]) that damages chosen metadata blocks just
//! before the write path compresses and checksums them, makes a few changes (each
//! rewriting a path of metadata up to the uberblock) and exports. The pool on disk is
//! then validly sealed and damaged. The case imports it again and runs every kind of
//! operation over it: list, read every file of every dataset and snapshot, write,
//! create, unlink, truncate, destroy a snapshot and a clone, scrub, sync, export, and
//! a last import.
//!
//! The contract under test: each step returns `Ok` or an error. A panic in any thread
//! (the test or libFuzzer's hook reports it), a hang (the caller's timeout) or a huge
//! allocation (libFuzzer's `-malloc_limit_mb`) is a defect.
//!
//! Input format of [`run_case`]: byte 0 chooses optional steps ([`Ops`] bits), then
//! up to [`DIRECTIVES_MAX`] eight-byte directives: block index (which metadata block
//! written during the craft phase, in write order, modulo [`BLOCK_WINDOW`]), mode,
//! value, one spare byte, and a little-endian u32 offset (see [`Directive`]).
//!
//! Called by: `fuzz/fuzz_targets/image.rs` (libFuzzer) and this crate's tests (a fixed
//! number of seeded cases in CI).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_phys::ObjectType;
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};
use tarn_zpl::{FileKind, Fs, SetAttr, ZplOptions};

/// Name of the pool every case uses.
pub const POOL: &str = "fz";
/// Size of the pool's one leaf, bytes (the smallest device a pool accepts).
pub const LEAF_SIZE_BYTES: u64 = tarn_phys::MIN_DEVICE_SIZE_BYTES;
/// Largest number of directives read from one input.
pub const DIRECTIVES_MAX: usize = 16;
/// Directive block indices are taken modulo this (about the number of metadata blocks
/// the craft phase writes).
pub const BLOCK_WINDOW: usize = 64;
/// Entries a walk visits at most per dataset (a damaged directory may claim millions).
const WALK_ENTRIES_MAX: usize = 4096;
/// Bytes read at most per file.
const READ_MAX_BYTES: u64 = 1 << 20;
/// How long a scrub may run before the case stops waiting for it.
const SCRUB_WAIT_MAX: Duration = Duration::from_secs(20);
/// How long a dropped pool may take to close its leaves.
const CLOSE_WAIT_MAX: Duration = Duration::from_secs(20);

fn s<E: Display>(e: E) -> String {
    e.to_string()
}

/// A pristine pool, held in memory as the data extents of its leaf so that each case
/// writes a fresh copy quickly (the leaf is sparse: a few MiB of 64).
pub struct Image {
    size_bytes: u64,
    extents: Vec<(u64, Vec<u8>)>,
}

impl Image {
    /// Create the pristine pool in a temporary directory: datasets `fz/a` (files of
    /// several sizes, a directory of 40 entries, a symlink, a hard link), a snapshot
    /// `fz/a@s1`, a bookmark `fz/a#b1`, a clone `fz/c`, later changes to `fz/a`, a user
    /// property and history lines; `failmode=continue` so that a failing sync returns
    /// errors instead of blocking the case. Also caps the process's ARC at 64 MiB.
    /// Errors: any failure of the real code on this pristine path (a defect).
    pub fn build() -> Result<Image, String> {
        tarn_spa::arc().set_max_bytes(64 << 20);
        let dir = tempfile::tempdir().map_err(s)?;
        let leaf = dir.path().join("0.img");
        std::fs::File::create(&leaf).and_then(|f| f.set_len(LEAF_SIZE_BYTES)).map_err(s)?;
        let pool = Pool::create(&CreateSpec {
            name: POOL.into(),
            vdevs: vec![TopSpec::Leaf(leaf.clone())],
            ashift: 12,
            pool_props: BTreeMap::from([("failmode".to_string(), "continue".to_string())]),
            ..Default::default()
        })
        .map_err(s)?;
        populate(&pool)?;
        pool.export().map_err(s)?;
        drop(pool);
        wait_closed(&leaf)?;
        Ok(Image {
            size_bytes: LEAF_SIZE_BYTES,
            extents: data_extents(&leaf).map_err(s)?,
        })
    }

    /// Bytes of data the image holds (its sparse leaf's allocated extents).
    pub fn data_bytes(&self) -> u64 {
        self.extents.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Write the leaf into `dir` (as `0.img`, sparse) and return its path.
    pub fn materialize(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let p = dir.join("0.img");
        let f = std::fs::File::create(&p)?;
        f.set_len(self.size_bytes)?;
        for (off, b) in &self.extents {
            f.write_all_at(b, *off)?;
        }
        Ok(p)
    }
}

/// The data extents of a sparse file (`SEEK_DATA`/`SEEK_HOLE`).
fn data_extents(path: &Path) -> std::io::Result<Vec<(u64, Vec<u8>)>> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < len {
        // SAFETY: lseek on a descriptor owned by `f`.
        let start = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            break; // ENXIO: no data after pos
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(f.as_raw_fd(), start, libc::SEEK_HOLE) };
        let (start, end) = (start as u64, if end < 0 { len } else { end as u64 });
        let mut b = vec![0u8; (end - start) as usize];
        f.read_exact_at(&mut b, start)?;
        out.push((start, b));
        pos = end;
    }
    Ok(out)
}

/// Deterministic bytes for file contents.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|i| {
            if i % 8 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            (x >> ((i % 8) * 8)) as u8
        })
        .collect()
}

fn open_fs(pool: &Pool, name: &str, snapshot: bool) -> Result<Arc<Fs>, String> {
    let os: Arc<dyn tarn_dmu::ObjectStore> = if snapshot {
        pool.snapshot_objset(name).map_err(s)?
    } else {
        pool.objset(name).map_err(s)?
    };
    Fs::open(
        os,
        ZplOptions {
            readonly: snapshot,
            ..ZplOptions::default()
        },
    )
    .map_err(s)
}

fn put_file(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> Result<u64, String> {
    let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0).map_err(s)?;
    for (i, c) in data.chunks(128 << 10).enumerate() {
        fs.write(a.ino, (i as u64) << 17, c).map_err(s)?;
    }
    Ok(a.ino)
}

/// The pristine pool's contents (see [`Image::build`]).
fn populate(pool: &Pool) -> Result<(), String> {
    pool.create_dataset("fz/a", &BTreeMap::from([("compression".to_string(), "lz4".to_string())]))
        .map_err(s)?;
    {
        let fs = open_fs(pool, "fz/a", false)?;
        let root = fs.root();
        put_file(&fs, root, "small", b"a small file\n")?;
        let big = put_file(&fs, root, "big", &pattern(1, 700 << 10))?;
        put_file(&fs, root, "zeros", &vec![0u8; 256 << 10])?;
        let d = fs.mkdir(root, b"d", 0o755, 0, 0).map_err(s)?;
        for i in 0..40 {
            put_file(&fs, d.ino, &format!("f{i:02}"), &pattern(100 + i, 300 + 97 * i as usize))?;
        }
        fs.symlink(root, b"l", b"small", 0, 0).map_err(s)?;
        fs.link(big, d.ino, b"big-link").map_err(s)?;
        fs.sync_fs().map_err(s)?;
        pool.snapshot(&["fz/a@s1".to_string()], false).map_err(s)?;
        fs.write(big, 200 << 10, &pattern(2, 64 << 10)).map_err(s)?;
        fs.unlink(d.ino, b"f03").map_err(s)?;
        fs.sync_fs().map_err(s)?;
    }
    pool.create_bookmark("fz/a@s1", "fz/a#b1").map_err(s)?;
    pool.clone_snapshot("fz/a@s1", "fz/c", &BTreeMap::new(), false).map_err(s)?;
    pool.set_dataset_prop("fz/a", "org.tarn:note", "pristine").map_err(s)?;
    pool.log_history("imgfuzz: pristine pool").map_err(s)?;
    pool.sync().map_err(s)
}

/// True while another open file description holds the `flock` of `path` (an open
/// pool's leaf).
fn locked(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else { return false };
    // SAFETY: flock on a descriptor owned by `f`; closing `f` releases the lock.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

/// Wait until no pool holds `leaf` open. Errors (a hang: a defect) after
/// [`CLOSE_WAIT_MAX`].
fn wait_closed(leaf: &Path) -> Result<(), String> {
    let t = Instant::now();
    while locked(leaf) {
        if t.elapsed() > CLOSE_WAIT_MAX {
            return Err(format!("{} still open {CLOSE_WAIT_MAX:?} after its pool was dropped", leaf.display()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Optional steps of a case (bits of input byte 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ops(pub u8);

impl Ops {
    /// Write, create, unlink and truncate in the head datasets after the import.
    pub const CHANGE: u8 = 1;
    /// Destroy snapshot `fz/a@s1` (it has a clone, so this must fail) and the clone.
    pub const DESTROY: u8 = 2;
    /// Scrub the pool.
    pub const SCRUB: u8 = 4;
    /// Take a snapshot of every head after the import.
    pub const SNAPSHOT: u8 = 8;
    /// Roll `fz/a` back to its newest snapshot.
    pub const ROLLBACK: u8 = 16;
    /// Before the import, open the pool for inspection as `zdb` does and run its walks
    /// (block statistics, leak check, metaslabs, dataset dump).
    pub const INSPECT: u8 = 32;
    /// Send `fz/a@s2` in full and incrementally from `@s1` (to a sink).
    pub const SEND: u8 = 64;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// One damage to one block written during the craft phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directive {
    /// Which metadata block (in write order, modulo [`BLOCK_WINDOW`]).
    pub block: usize,
    /// 0: xor one byte with `value`; 1: store an extreme u64 (chosen by `value`) at an
    /// 8-byte-aligned offset; 2: truncate the block; 3: zero 512 bytes; 4: copy the 128
    /// bytes at `offset` over the 128 bytes at `offset + 128 * value` (a pointer moved).
    pub mode: u8,
    /// Mode argument.
    pub value: u8,
    /// Offset in the block (taken modulo its length).
    pub offset: u32,
}

/// Parse a fuzz input into its optional steps and directives.
pub fn parse_input(input: &[u8]) -> (Ops, Vec<Directive>) {
    let ops = Ops(input.first().copied().unwrap_or(0));
    let dirs = input
        .get(1..)
        .unwrap_or(&[])
        .chunks_exact(8)
        .take(DIRECTIVES_MAX)
        .map(|c| Directive {
            block: c[0] as usize % BLOCK_WINDOW,
            mode: c[1] % 5,
            value: c[2],
            offset: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    (ops, dirs)
}

fn apply(d: &Directive, b: &mut Vec<u8>) {
    if b.is_empty() {
        return;
    }
    let off = d.offset as usize % b.len();
    match d.mode {
        0 => b[off] ^= d.value | 1,
        1 => {
            let at = off & !7;
            if at + 8 <= b.len() {
                let extremes = [0u64, 1, u64::MAX, 1 << 32, 1 << 40, i64::MAX as u64, 0xffff_ffff, 4096];
                let v = extremes[d.value as usize % extremes.len()];
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        2 => b.truncate(off.max(1)),
        3 => {
            let end = (off + 512).min(b.len());
            b[off..end].fill(0);
        }
        _ => {
            let dst = off.saturating_add(128 * (d.value as usize % 8 + 1));
            if dst + 128 <= b.len() && off + 128 <= b.len() {
                let src: Vec<u8> = b[off..off + 128].to_vec();
                b[dst..dst + 128].copy_from_slice(&src);
            }
        }
    }
}

/// What one case did (for tests and statistics; the fuzzer only needs it to return).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Metadata blocks the mutator changed during the craft phase.
    pub mutated_blocks: usize,
    /// Whether the damaged pool imported.
    pub imported: bool,
    /// Steps after the import that returned `Ok`.
    pub steps_ok: usize,
    /// The errors the steps returned, in order (each is an acceptable outcome).
    pub errors: Vec<String>,
}

impl Outcome {
    fn step<T>(&mut self, what: &str, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => {
                self.steps_ok += 1;
                Some(v)
            }
            Err(e) => {
                if self.errors.len() < 32 {
                    self.errors.push(format!("{what}: {e}"));
                }
                None
            }
        }
    }
}

/// Removes the mutator when dropped, so a panic inside a case leaves none behind.
struct MutatorGuard;

impl Drop for MutatorGuard {
    fn drop(&mut self) {
        tarn_zio::craft::set_write_mutator(None);
    }
}

/// Run one case over a fresh copy of `image` in a new directory under `scratch`
/// (cases of one process run one at a time).
/// Errors only for failures of the harness itself on the pristine path (the copy
/// cannot be written, the pristine pool does not import, a leaf is never closed —
/// the last is a hang in the engine and a defect).
pub fn run_case(image: &Image, scratch: &Path, input: &[u8]) -> Result<Outcome, String> {
    // One case at a time per process: the pool name and the mutator are process-wide.
    static CASE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = CASE.lock().unwrap_or_else(|e| e.into_inner());
    let (ops, dirs) = parse_input(input);
    let dir = tempfile::tempdir_in(scratch).map_err(s)?;
    let leaf = image.materialize(dir.path()).map_err(s)?;
    let search = [dir.path().to_path_buf()];
    let mut out = Outcome::default();

    // Craft phase: damage the metadata that a few changes rewrite, sealed by the
    // write path, then export.
    let pool = Pool::import(POOL, &search, Rewind::None, None).map_err(|e| format!("pristine pool: {e}"))?;
    let mutated = Arc::new(AtomicUsize::new(0));
    {
        let seen = Arc::new(AtomicUsize::new(0));
        let (m, d) = (mutated.clone(), dirs.clone());
        let _guard = MutatorGuard;
        if !dirs.is_empty() {
            tarn_zio::craft::set_write_mutator(Some(Arc::new(move |otype: ObjectType, level: u8, b: &mut Vec<u8>| {
                if otype == ObjectType::FileData && level == 0 {
                    return;
                }
                let i = seen.fetch_add(1, Ordering::Relaxed);
                let mut hit = false;
                for x in d.iter().filter(|x| x.block == i) {
                    apply(x, b);
                    hit = true;
                }
                if hit {
                    m.fetch_add(1, Ordering::Relaxed);
                }
            })));
        }
        let _ = craft_changes(&pool);
        let _ = pool.export();
    }
    drop(pool);
    wait_closed(&leaf)?;
    out.mutated_blocks = mutated.load(Ordering::Relaxed);

    // Exercise phase.
    if ops.has(Ops::INSPECT) {
        inspect(&search, &mut out);
    }
    let Some(pool) = out.step("import", Pool::import(POOL, &search, Rewind::None, None).map_err(s)) else {
        return Ok(out);
    };
    out.imported = true;
    exercise(&pool, ops, &mut out);
    out.step("export", pool.export().map_err(s));
    drop(pool);
    wait_closed(&leaf)?;
    // Whatever the case did must leave a pool that imports or is refused cleanly.
    if let Some(p) = out.step("re-import", Pool::import(POOL, &search, Rewind::None, None).map_err(s)) {
        out.step("final export", p.export().map_err(s));
        drop(p);
        wait_closed(&leaf)?;
    }
    Ok(out)
}

/// The craft phase's changes: each rewrites a path of metadata (a dnode block, a
/// directory ZAP, indirect blocks, the dataset records, the MOS, space maps).
fn craft_changes(pool: &Pool) -> Result<(), String> {
    {
        let fs = open_fs(pool, "fz/a", false)?;
        let root = fs.root();
        let small = fs.lookup(root, b"small").map_err(s)?;
        fs.write(small.ino, 0, &pattern(3, 8 << 10)).map_err(s)?;
        put_file(&fs, root, "crafted", &pattern(4, 20 << 10))?;
        fs.mkdir(root, b"cd", 0o700, 0, 0).map_err(s)?;
        let big = fs.lookup(root, b"big").map_err(s)?;
        fs.write(big.ino, 600 << 10, &pattern(5, 4 << 10)).map_err(s)?;
        let d = fs.lookup(root, b"d").map_err(s)?;
        put_file(&fs, d.ino, "g", b"in d")?;
        fs.unlink(d.ino, b"f05").map_err(s)?;
        fs.sync_fs().map_err(s)?;
    }
    {
        let fs = open_fs(pool, "fz/c", false)?;
        put_file(&fs, fs.root(), "in-clone", &pattern(8, 5000))?;
        fs.sync_fs().map_err(s)?;
    }
    pool.set_dataset_prop("fz/a", "org.tarn:note", "crafted").map_err(s)?;
    pool.snapshot(&["fz/a@s2".to_string()], false).map_err(s)?;
    pool.log_history("imgfuzz: craft").map_err(s)?;
    pool.sync().map_err(s)
}

/// Every file system and snapshot name of the pool.
fn all_datasets(pool: &Pool, out: &mut Outcome) -> Vec<(String, bool)> {
    let Some(list) = out.step("list", pool.list_datasets().map_err(s)) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for d in list {
        for snap in pool.snapshots_of(&d.name) {
            v.push((snap, true));
        }
        v.push((d.name, false));
    }
    v
}

/// Walk a file system breadth first, reading every file (up to [`READ_MAX_BYTES`])
/// and link; returns the first regular file seen in the root and its name.
fn walk(fs: &Fs, out: &mut Outcome) -> Option<(u64, Vec<u8>)> {
    let mut queue = vec![(fs.root(), 0u32)];
    let mut visited = 0usize;
    let mut first_file = None;
    while let Some((dir, depth)) = queue.pop() {
        let mut cursor = 0u64;
        while let Some(batch) = out.step("readdir", fs.readdir(dir, cursor, 256).map_err(s)) {
            if batch.is_empty() {
                break;
            }
            for e in &batch {
                visited += 1;
                if visited > WALK_ENTRIES_MAX {
                    return first_file;
                }
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let Some(a) = out.step("getattr", fs.getattr(e.ino).map_err(s)) else {
                    continue;
                };
                match e.kind {
                    FileKind::Dir if depth < 8 => queue.push((e.ino, depth + 1)),
                    FileKind::File => {
                        if dir == fs.root() && first_file.is_none() {
                            first_file = Some((e.ino, e.name.clone()));
                        }
                        let mut off = 0;
                        while off < a.size.min(READ_MAX_BYTES) {
                            match fs.read(e.ino, off, 128 << 10) {
                                Ok(b) if !b.is_empty() => off += b.len() as u64,
                                Ok(_) => break,
                                Err(err) => {
                                    out.step::<()>("read", Err(s(err)));
                                    break;
                                }
                            }
                        }
                    }
                    FileKind::Symlink => {
                        out.step("readlink", fs.readlink(e.ino).map_err(s));
                    }
                    _ => {}
                }
            }
            let next = batch.last().map(|e| e.next_cursor).unwrap_or(u64::MAX);
            if next <= cursor {
                break; // a cursor that does not advance would loop forever
            }
            cursor = next;
        }
    }
    first_file
}

/// What `tarn zdb` does to an exported pool: open it read-only and unlocked, then walk
/// it every way zdb can.
fn inspect(search: &[PathBuf], out: &mut Outcome) {
    let Some(p) = out.step("open for inspection", Pool::open_inspect(POOL, search).map_err(s)) else {
        return;
    };
    out.step("block statistics", p.block_stats().map_err(s));
    out.step("leak check", p.leak_check());
    let _ = p.metaslab_report();
    let _ = p.active_uberblock();
    out.step("dataset dump", p.dataset_dump("fz/a", &[]).map_err(s));
    out.step("dataset dump", p.dataset_dump("fz/c", &[1, 2, 3, 4, 5, 6, 7, 8]).map_err(s));
}

/// The exercise phase over an imported (possibly damaged) pool.
fn exercise(pool: &Pool, ops: Ops, out: &mut Outcome) {
    if ops.has(Ops::SEND) {
        let opts = tarn_send::SendOpts::default();
        for from in [None, Some("@s1")] {
            if let Some(src) = out.step("send source", pool.send_source("fz/a@s2", from).map_err(s)) {
                out.step("send", tarn_send::send(pool.zio(), &src, &opts, &mut std::io::sink()).map_err(s));
            }
        }
    }
    for (name, is_snap) in all_datasets(pool, out) {
        let Some(fs) = out.step("open", open_fs(pool, &name, is_snap)) else {
            continue;
        };
        let first = walk(&fs, out);
        if ops.has(Ops::CHANGE) && !is_snap {
            let root = fs.root();
            if let Some((ino, fname)) = first {
                out.step("write", fs.write(ino, 4096, &pattern(6, 12 << 10)).map_err(s));
                out.step(
                    "truncate",
                    fs.setattr(
                        ino,
                        SetAttr {
                            size: Some(1000),
                            ..Default::default()
                        },
                    )
                    .map_err(s),
                );
                out.step("unlink", fs.unlink(root, &fname).map_err(s));
            }
            out.step("create", put_file(&fs, root, "after-import", &pattern(7, 40 << 10)));
            out.step("sync_fs", fs.sync_fs().map_err(s));
        }
    }
    if ops.has(Ops::SNAPSHOT) {
        let heads: Vec<String> = pool
            .list_datasets()
            .map(|l| l.into_iter().map(|d| format!("{}@later", d.name)).collect())
            .unwrap_or_default();
        out.step("snapshot", pool.snapshot(&heads, false).map_err(s));
    }
    if ops.has(Ops::ROLLBACK) {
        if let Some(newest) = pool.snapshots_of("fz/a").last().cloned() {
            out.step("rollback", pool.rollback(&newest, false).map_err(s));
        }
    }
    if ops.has(Ops::DESTROY) {
        out.step("destroy snapshot", pool.destroy_snapshot("fz/a@s1").map_err(s));
        out.step("destroy clone", pool.destroy_dataset("fz/c", true).map_err(s));
        out.step("destroy snapshot", pool.destroy_snapshot("fz/a@s1").map_err(s));
    }
    if ops.has(Ops::SCRUB) && out.step("scrub", pool.scrub_start().map_err(s)).is_some() {
        let t = Instant::now();
        while t.elapsed() < SCRUB_WAIT_MAX {
            match pool.scan_status() {
                Some(st) if st.phys.state == tarn_spa::scan::ScanState::Scanning => std::thread::sleep(Duration::from_millis(5)),
                _ => break,
            }
        }
    }
    out.step("sync", pool.sync().map_err(s));
}
