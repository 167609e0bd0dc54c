//! `zfs diff`: what changed between two states of one file system.
//!
//! Theory. The caller (the DSL, through `tarn_send::changed_objects`) finds the
//! candidate objects cheaply: every slot of every dnode block born after the older
//! snapshot, so the work follows the change, not the file system. This module decides
//! for each candidate what happened, from the two object sets' znodes (OpenZFS
//! `libzfs_diff.c` is the model for the rules and the output):
//!
//! * live in the new state only, or with another generation than in the old one (the
//!   id was reused): `+` (after `-` of the old object when it was reused);
//! * live in the old state only: `-`;
//! * live in both: `R old -> new` when its path changed, else `M` when any attribute
//!   but the access time changed (a file's data change moves its mtime; a directory
//!   whose entries changed is modified too).
//!
//! Objects that are not files or directories of the tree (the master node, the delete
//! queue, unlinked files still open) are skipped. Paths are found by parent pointers
//! ([`crate::object_path`]). Read-only: it never changes either object set.

use crate::znode::{FileKind, Timespec, ZnodePhys};
use crate::{object_path, Result};
use tarn_dmu::ObjectStore;

/// One line of `zfs diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffEntry {
    /// `+` added, `-` removed, `M` modified, `R` renamed.
    pub change: char,
    /// The file's type (of the new state, or the old one for a removal).
    pub kind: FileKind,
    /// Path inside the file system (`/dir/file`), old path for `-` and `R`.
    pub path: String,
    /// New path of a rename.
    pub new_path: Option<String>,
    /// Status-change time of the state shown (`-t`).
    pub ctime: Timespec,
}

fn znode(os: &dyn ObjectStore, obj: u64) -> Option<(ZnodePhys, String)> {
    let b = os.bonus(obj).ok()?;
    let z = ZnodePhys::decode(obj, &b).ok()?;
    let path = object_path(os, obj)?;
    Some((z, path))
}

fn same_but_atime(a: &ZnodePhys, b: &ZnodePhys) -> bool {
    let mut a = a.clone();
    a.atime = b.atime;
    a == *b
}

/// The changes among `candidates` (object ids) from `old` to `new`, in object-id
/// order. Errors: none today (an unreadable object is treated as absent); the
/// `Result` leaves room for a stricter walk.
pub fn diff(old: &dyn ObjectStore, new: &dyn ObjectStore, candidates: &[u64]) -> Result<Vec<DiffEntry>> {
    let mut ids = candidates.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    for id in ids {
        let (o, n) = (znode(old, id), znode(new, id));
        match (o, n) {
            (None, None) => {}
            (Some((z, p)), None) => out.push(DiffEntry {
                change: '-',
                kind: z.kind(),
                path: p,
                new_path: None,
                ctime: z.ctime,
            }),
            (None, Some((z, p))) => out.push(DiffEntry {
                change: '+',
                kind: z.kind(),
                path: p,
                new_path: None,
                ctime: z.ctime,
            }),
            (Some((zo, po)), Some((zn, pn))) => {
                if zo.gen != zn.gen || zo.kind() != zn.kind() {
                    out.push(DiffEntry {
                        change: '-',
                        kind: zo.kind(),
                        path: po,
                        new_path: None,
                        ctime: zo.ctime,
                    });
                    out.push(DiffEntry {
                        change: '+',
                        kind: zn.kind(),
                        path: pn,
                        new_path: None,
                        ctime: zn.ctime,
                    });
                } else if po != pn {
                    out.push(DiffEntry {
                        change: 'R',
                        kind: zn.kind(),
                        path: po,
                        new_path: Some(pn),
                        ctime: zn.ctime,
                    });
                } else if !same_but_atime(&zo, &zn) {
                    out.push(DiffEntry {
                        change: 'M',
                        kind: zn.kind(),
                        path: pn,
                        new_path: None,
                        ctime: zn.ctime,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// A path as `zfs diff` prints it: bytes above space and below DEL other than `\`
/// as they are, every other byte as `\` and four octal digits (OpenZFS
/// `stream_bytes`).
pub fn escape_path(p: &str) -> String {
    let mut s = String::with_capacity(p.len());
    for &b in p.as_bytes() {
        if b > b' ' && b != b'\\' && b < 0x7f {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\{b:04o}"));
        }
    }
    s
}

/// The type column of `zfs diff -F` (OpenZFS `get_what`).
pub fn kind_char(k: FileKind) -> char {
    match k {
        FileKind::File => 'F',
        FileKind::Dir => '/',
        FileKind::Symlink => '@',
        FileKind::BlockDev => 'B',
        FileKind::CharDev => 'C',
        FileKind::Fifo => '|',
        FileKind::Socket => '=',
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fs, ZplOptions};
    use std::sync::Arc;
    use tarn_dmu::mem::MemStore;

    #[test]
    fn escapes_like_openzfs() {
        assert_eq!(escape_path("/a b/c\\d"), "/a\\0040b/c\\0134d");
        assert_eq!(escape_path("/plain"), "/plain");
    }

    #[test]
    fn classifies_added_removed_modified_renamed() {
        let store = Arc::new(MemStore::new());
        let fs = Fs::open(store.clone() as Arc<dyn ObjectStore>, ZplOptions::default()).unwrap();
        let root = fs.root();
        let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
        let b = fs.create(root, b"b", 0o644, 0, 0).unwrap().ino;
        let c = fs.create(root, b"c", 0o644, 0, 0).unwrap().ino;
        fs.write(a, 0, b"one").unwrap();
        let old = store.snapshot();
        fs.write(a, 0, b"two").unwrap();
        fs.unlink(root, b"b").unwrap();
        fs.rename(root, b"c", root, b"c2", 0).unwrap();
        let d = fs.create(root, b"d", 0o644, 0, 0).unwrap().ino;
        let all: Vec<u64> = vec![root, a, b, c, d];
        let got = diff(&old, &*store, &all).unwrap();
        let lines: Vec<(char, String, Option<String>)> = got.iter().map(|e| (e.change, e.path.clone(), e.new_path.clone())).collect();
        assert!(lines.contains(&('M', "/a".into(), None)), "{lines:?}");
        assert!(lines.contains(&('-', "/b".into(), None)), "{lines:?}");
        assert!(lines.contains(&('R', "/c".into(), Some("/c2".into()))), "{lines:?}");
        assert!(lines.contains(&('+', "/d".into(), None)), "{lines:?}");
        assert!(lines.contains(&('M', "/".into(), None)), "{lines:?}");
        // No change, no line.
        assert!(diff(&*store, &*store, &all).unwrap().is_empty());
    }
}
