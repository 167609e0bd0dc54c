//! Shared helpers for the ZPL tests: a MemStore-backed file system, path resolution
//! and `fsck`, a whole-tree consistency check.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_dmu::mem::MemStore;
use tarn_zpl::{Attr, DirEntry, FileKind, Fs, ZplError, ZplOptions};

/// A fresh file system on a fresh MemStore.
pub fn new_fs() -> (Arc<MemStore>, Arc<Fs>) {
    new_fs_with(ZplOptions::default())
}

/// A fresh file system with options.
pub fn new_fs_with(opts: ZplOptions) -> (Arc<MemStore>, Arc<Fs>) {
    let store = Arc::new(MemStore::new());
    let fs = Fs::open(store.clone(), opts).expect("format");
    (store, fs)
}

/// Resolve a '/'-separated path relative to the root ("" is the root).
pub fn resolve(fs: &Fs, path: &str) -> Result<Attr, ZplError> {
    let mut cur = fs.getattr(fs.root())?;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur = fs.lookup(cur.ino, c.as_bytes())?;
    }
    Ok(cur)
}

/// Split "a/b/c" into ("a/b", "c").
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Resolve the parent directory of `path`; returns (parent ino, last name).
pub fn parent<'a>(fs: &Fs, path: &'a str) -> Result<(u64, &'a [u8]), ZplError> {
    let (p, n) = split(path);
    let a = resolve(fs, p)?;
    if a.kind != FileKind::Dir {
        return Err(ZplError::NotDir);
    }
    Ok((a.ino, n.as_bytes()))
}

/// Every entry of `dir`, read `chunk` at a time.
pub fn list_all(fs: &Fs, dir: u64, chunk: usize) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let batch = fs.readdir(dir, cursor, chunk).expect("readdir");
        if batch.is_empty() {
            return out;
        }
        assert!(batch.len() <= chunk);
        cursor = batch.last().unwrap().next_cursor;
        out.extend(batch);
    }
}

/// Read a whole file.
pub fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let b = fs.read(ino, out.len() as u64, 1 << 20).unwrap();
        assert!(!b.is_empty());
        out.extend(b);
    }
    assert_eq!(fs.read(ino, size, 10).unwrap(), b"");
    out
}

/// Walk the whole tree and check the namespace invariants: "." and "..", directory
/// sizes and link counts, entry kinds, non-directory link counts, and (given the
/// number of unlinked-but-open inodes) that no object leaked. Returns path -> attr.
pub fn fsck(store: &MemStore, fs: &Fs, unlinked_open: usize) -> BTreeMap<String, Attr> {
    let mut paths = BTreeMap::new();
    let mut names_per_ino: HashMap<u64, u64> = HashMap::new();
    let mut nondir_attr: HashMap<u64, Attr> = HashMap::new();
    let mut dirs = 0usize;
    let mut stack = vec![(String::new(), fs.root(), fs.root())];
    while let Some((path, dir, parent)) = stack.pop() {
        dirs += 1;
        let da = fs.getattr(dir).unwrap();
        assert_eq!(da.kind, FileKind::Dir);
        let entries = list_all(fs, dir, 37);
        assert_eq!(entries[0].name, b".");
        assert_eq!(entries[0].ino, dir);
        assert_eq!(entries[1].name, b"..");
        assert_eq!(entries[1].ino, parent, "'..' of /{path}");
        assert_eq!(da.size, entries.len() as u64, "size of /{path}");
        let mut subdirs = 0;
        for e in &entries[2..] {
            let name = String::from_utf8(e.name.clone()).unwrap();
            let child = if path.is_empty() { name.clone() } else { format!("{path}/{name}") };
            let a = fs.lookup(dir, &e.name).unwrap();
            assert_eq!(a.ino, e.ino);
            assert_eq!(a.kind, e.kind, "kind of /{child}");
            if e.kind == FileKind::Dir {
                subdirs += 1;
                stack.push((child.clone(), e.ino, dir));
            } else {
                *names_per_ino.entry(e.ino).or_default() += 1;
                nondir_attr.insert(e.ino, a.clone());
            }
            assert!(paths.insert(child, a).is_none());
        }
        assert_eq!(u64::from(da.nlink), 2 + subdirs, "nlink of /{path}");
    }
    for (ino, n) in &names_per_ino {
        assert_eq!(u64::from(nondir_attr[ino].nlink), *n, "nlink of inode {ino}");
    }
    // master node + delete queue + directories + files + unlinked-open files
    assert_eq!(store.object_count(), 2 + dirs + names_per_ino.len() + unlinked_open, "object leak");
    paths
}
