//! Helpers shared by the send/receive tests: pools on file vdevs, a file tree built
//! through zpl, and a tree comparison.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tarn_dmu::objset::Objset;
use tarn_send::{SendOpts, SendSource};
use tarn_spa::{CreateSpec, Pool, TopSpec};
use tarn_zpl::{FileKind, Fs, ZplOptions};

/// A pool named `name` on one 256 MiB file vdev in `dir`.
pub fn pool(dir: &Path, name: &str) -> Arc<Pool> {
    let p = dir.join(format!("{name}.img"));
    std::fs::File::create(&p).unwrap().set_len(256 << 20).unwrap();
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Leaf(p)],
        logs: Vec::new(),
        spares: Vec::new(),
        caches: Vec::new(),
        ashift: 12,
        force: false,
        pool_props: BTreeMap::new(),
        fs_props: BTreeMap::new(),
    })
    .unwrap()
}

/// Create dataset `name` (with `props`) and return its object set.
pub fn dataset(pool: &Pool, name: &str, props: &[(&str, &str)]) -> Arc<Objset> {
    let props: BTreeMap<String, String> = props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    pool.create_dataset(name, &props).unwrap();
    pool.objset_concrete(name).unwrap()
}

/// A file system on `os` that never changes what it only reads (no atime updates).
pub fn fs(os: &Arc<Objset>) -> Arc<Fs> {
    fs_recordsize(os, 128 << 10)
}

/// [`fs`] with new files growing to `recordsize_bytes` blocks.
pub fn fs_recordsize(os: &Arc<Objset>, recordsize_bytes: u32) -> Arc<Fs> {
    let os: Arc<dyn tarn_dmu::ObjectStore> = os.clone();
    Fs::open(
        os,
        ZplOptions {
            atime: false,
            recordsize_bytes,
            ..ZplOptions::default()
        },
    )
    .unwrap()
}

/// Deterministic incompressible bytes: [`tarn_testkit::pattern`].
// Not every test binary that includes this module uses it.
#[allow(unused_imports)]
pub use tarn_testkit::pattern;

/// Compressible bytes (text-like).
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [&b"tarn "[..], b"pool ", b"block ", b"stream ", b"snapshot\n"];
    let mut out = Vec::with_capacity(len);
    let mut i = seed;
    while out.len() < len {
        out.extend_from_slice(words[(i % 5) as usize]);
        i = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 7;
    }
    out.truncate(len);
    out
}

pub fn lookup(fs: &Fs, path: &str) -> u64 {
    let mut ino = fs.root();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes()).unwrap().ino;
    }
    ino
}

pub fn write_file(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let ino = fs.create(dir, name.as_bytes(), 0o644, 1000, 100).unwrap().ino;
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        fs.write(ino, (i << 20) as u64, chunk).unwrap();
    }
    ino
}

/// Build a tree of `nfiles` small files plus directories, large, sparse, empty and
/// special files and symlinks. Returns the logical bytes written.
pub fn populate(fs: &Fs, nfiles: usize, compressible: bool) -> u64 {
    let data = |seed: u64, len: usize| if compressible { text(seed, len) } else { pattern(seed, len) };
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, 0, 0).unwrap().ino;
    let b = fs.mkdir(a, b"b", 0o700, 1000, 100).unwrap().ino;
    let many = fs.mkdir(root, b"many", 0o755, 0, 0).unwrap().ino;
    let mut bytes = 0u64;
    for i in 0..nfiles {
        let len = 1000 + (i * 7919) % 20_000;
        write_file(fs, many, &format!("f{i:04}"), &data(i as u64, len));
        bytes += len as u64;
    }
    write_file(fs, a, "big", &data(1000, 3 << 20));
    write_file(fs, b, "medium", &data(1001, 300 << 10));
    write_file(fs, root, "small", &data(1002, 100));
    fs.create(root, b"empty", 0o600, 0, 0).unwrap();
    // Sparse: data at 0 and at 5 MiB, a hole between.
    let sp = write_file(fs, root, "sparse", &data(1003, 4096));
    fs.write(sp, 5 << 20, &data(1004, 10_000)).unwrap();
    fs.symlink(root, b"link", b"a/b/medium", 0, 0).unwrap();
    fs.symlink(b, b"dangling", b"/nowhere/at/all", 0, 0).unwrap();
    fs.mknod(root, b"fifo", 0o010644, 0, 0, 0).unwrap();
    fs.link(lookup(fs, "small"), a, b"hardlink").unwrap();
    bytes + (3 << 20) + (300 << 10) + 100 + 4096 + 10_000
}

/// All entries of directory `dir` (without "." and ".."), by name.
fn entries(fs: &Fs, dir: u64) -> BTreeMap<Vec<u8>, (u64, FileKind)> {
    let mut out = BTreeMap::new();
    let mut cursor = 0;
    loop {
        let batch = fs.readdir(dir, cursor, 64).unwrap();
        if batch.is_empty() {
            return out;
        }
        for e in batch {
            cursor = e.next_cursor;
            if e.name != b"." && e.name != b".." {
                out.insert(e.name, (e.ino, e.kind));
            }
        }
    }
}

fn read_all(fs: &Fs, ino: u64, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(size as usize);
    while (out.len() as u64) < size {
        let chunk = fs.read(ino, out.len() as u64, 1 << 20).unwrap();
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    out
}

/// Compare the trees of `a` and `b` from their roots: names, inode numbers, kinds,
/// attributes (all but allocated blocks) and contents. Returns the entries compared.
pub fn compare(a: &Fs, b: &Fs) -> usize {
    compare_dir(a, b, a.root(), b.root(), "/", true)
}

/// [`compare`] without the preferred I/O size (the block size), for streams that
/// split large blocks.
pub fn compare_split(a: &Fs, b: &Fs) -> usize {
    compare_dir(a, b, a.root(), b.root(), "/", false)
}

fn compare_dir(a: &Fs, b: &Fs, da: u64, db: u64, path: &str, same_blocks: bool) -> usize {
    let ea = entries(a, da);
    let eb = entries(b, db);
    let names_a: Vec<_> = ea.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
    let names_b: Vec<_> = eb.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
    assert_eq!(names_a, names_b, "entries of {path}");
    let mut n = 0;
    for (name, (ia, ka)) in &ea {
        let (ib, kb) = eb[name];
        let p = format!("{path}{}", String::from_utf8_lossy(name));
        assert_eq!((ia, ka), (&ib, &kb), "{p}");
        let mut at_a = a.getattr(*ia).unwrap();
        let mut at_b = b.getattr(ib).unwrap();
        at_a.blocks = 0;
        at_b.blocks = 0;
        if !same_blocks {
            at_a.blksize = 0;
            at_b.blksize = 0;
        }
        assert_eq!(at_a, at_b, "attributes of {p}");
        match ka {
            FileKind::File => assert!(read_all(a, *ia, at_a.size) == read_all(b, ib, at_b.size), "contents of {p}"),
            FileKind::Symlink => assert_eq!(a.readlink(*ia).unwrap(), b.readlink(ib).unwrap(), "{p}"),
            FileKind::Dir => n += compare_dir(a, b, *ia, ib, &format!("{p}/"), same_blocks),
            _ => {}
        }
        n += 1;
    }
    n
}

/// The source descriptor of `os` as of its last sync.
pub fn source(os: &Objset, from: Option<(u64, u64)>, to_guid: u64, name: &str) -> SendSource {
    SendSource {
        root: os.root_bp(),
        from_txg: from.map(|f| f.0),
        to_guid,
        from_guid: from.map(|f| f.1).unwrap_or(0),
        to_name: name.into(),
        creation_time_s: 1_700_000_000,
    }
}

/// Send `src` to a buffer.
pub fn send_vec(pool: &Pool, src: &SendSource, opts: &SendOpts) -> Vec<u8> {
    let mut out = Vec::new();
    let stats = tarn_send::send(pool.zio(), src, opts, &mut out).unwrap();
    assert_eq!(stats.stream_bytes, out.len() as u64);
    let est = tarn_send::estimate(pool.zio(), src, opts).unwrap();
    assert_eq!(est, stats, "estimate must match what send writes");
    out
}
