//! Property test: a random sequence of namespace and file operations applied both to
//! tarn-zpl (on a MemStore) and to a simple in-memory model (path -> node, inode ->
//! bytes). After every operation the results (success or error kind) must agree, and
//! at the end the whole tree, every file's bytes and link counts must agree and
//! `fsck` must pass.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use tarn_zpl::{FileKind, Fs, SetAttr, ZplError, ZplOptions};

/// The fixed set of paths operations draw from (depth ≤ 3, so parents are often
/// missing or files, and renames into subtrees happen).
const PATHS: &[&str] = &["a", "b", "d", "e", "a", "d", "e", "d/a", "d/b", "d/e", "e/a", "e/d", "d/e/a", "d/e/b", "e/d/a"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Mkdir(usize),
    Write(usize, u64, usize, u8),
    Truncate(usize, u64),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize),
    Link(usize, usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    prop_oneof![
        4 => p.clone().prop_map(Op::Create),
        4 => p.clone().prop_map(Op::Mkdir),
        4 => (p.clone(), 0..20_000u64, 0..6000usize, any::<u8>()).prop_map(|(a, o, l, b)| Op::Write(a, o, l, b)),
        2 => (p.clone(), 0..25_000u64).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => p.clone().prop_map(Op::Unlink),
        2 => p.clone().prop_map(Op::Rmdir),
        4 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (p.clone(), p).prop_map(|(a, b)| Op::Link(a, b)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir,
    File(u32),
}

#[derive(Default)]
struct Model {
    names: BTreeMap<String, Node>,
    files: BTreeMap<u32, Vec<u8>>,
    next: u32,
}

fn parent_of(p: &str) -> &str {
    split(p).0
}

impl Model {
    fn node(&self, p: &str) -> Option<Node> {
        if p.is_empty() {
            Some(Node::Dir)
        } else {
            self.names.get(p).copied()
        }
    }

    /// Resolve `p` the way a lookup walk does.
    fn resolve(&self, p: &str) -> Result<Node, ZplError> {
        let mut cur = String::new();
        let mut node = Node::Dir;
        for c in p.split('/').filter(|c| !c.is_empty()) {
            if node != Node::Dir {
                return Err(ZplError::NotDir);
            }
            cur = if cur.is_empty() { c.to_string() } else { format!("{cur}/{c}") };
            node = self.node(&cur).ok_or(ZplError::NotFound)?;
        }
        Ok(node)
    }

    fn parent_dir(&self, p: &str) -> Result<(), ZplError> {
        match self.resolve(parent_of(p))? {
            Node::Dir => Ok(()),
            Node::File(_) => Err(ZplError::NotDir),
        }
    }

    fn has_children(&self, p: &str) -> bool {
        let prefix = format!("{p}/");
        self.names.keys().any(|k| k.starts_with(&prefix))
    }

    fn links(&self, id: u32) -> usize {
        self.names.values().filter(|n| **n == Node::File(id)).count()
    }

    fn drop_name(&mut self, p: &str) {
        if let Some(Node::File(id)) = self.names.remove(p) {
            if self.links(id) == 0 {
                self.files.remove(&id);
            }
        }
    }

    fn file(&self, p: &str) -> Result<u32, ZplError> {
        match self.resolve(p)? {
            Node::File(id) => Ok(id),
            Node::Dir => Err(ZplError::IsDir),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), ZplError> {
        match *op {
            Op::Create(p) | Op::Mkdir(p) => {
                let p = PATHS[p];
                self.parent_dir(p)?;
                if self.names.contains_key(p) {
                    return Err(ZplError::Exists);
                }
                if matches!(op, Op::Create(_)) {
                    self.next += 1;
                    self.names.insert(p.into(), Node::File(self.next));
                    self.files.insert(self.next, Vec::new());
                } else {
                    self.names.insert(p.into(), Node::Dir);
                }
                Ok(())
            }
            Op::Write(p, off, len, byte) => {
                let id = self.file(PATHS[p])?;
                if len == 0 {
                    return Ok(());
                }
                let f = self.files.get_mut(&id).unwrap();
                let end = off as usize + len;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].fill(byte);
                Ok(())
            }
            Op::Truncate(p, size) => {
                let id = self.file(PATHS[p])?;
                self.files.get_mut(&id).unwrap().resize(size as usize, 0);
                Ok(())
            }
            Op::Unlink(p) => {
                let p = PATHS[p];
                self.parent_dir(p)?;
                match self.names.get(p) {
                    None => Err(ZplError::NotFound),
                    Some(Node::Dir) => Err(ZplError::IsDir),
                    Some(Node::File(_)) => {
                        self.drop_name(p);
                        Ok(())
                    }
                }
            }
            Op::Rmdir(p) => {
                let p = PATHS[p];
                self.parent_dir(p)?;
                match self.names.get(p) {
                    None => Err(ZplError::NotFound),
                    Some(Node::File(_)) => Err(ZplError::NotDir),
                    Some(Node::Dir) if self.has_children(p) => Err(ZplError::NotEmpty),
                    Some(Node::Dir) => {
                        self.names.remove(p);
                        Ok(())
                    }
                }
            }
            Op::Rename(s, d) => {
                let (s, d) = (PATHS[s], PATHS[d]);
                self.parent_dir(s)?;
                self.parent_dir(d)?;
                let src = self.names.get(s).copied().ok_or(ZplError::NotFound)?;
                let dst = self.names.get(d).copied();
                if s == d || (dst.is_some() && dst == Some(src) && src != Node::Dir) {
                    return Ok(());
                }
                if src == Node::Dir && parent_of(s) != parent_of(d) && (parent_of(d) == s || parent_of(d).starts_with(&format!("{s}/"))) {
                    return Err(ZplError::Invalid("subtree"));
                }
                match (src, dst) {
                    (Node::Dir, Some(Node::File(_))) => return Err(ZplError::NotDir),
                    (Node::File(_), Some(Node::Dir)) => return Err(ZplError::IsDir),
                    (Node::Dir, Some(Node::Dir)) if self.has_children(d) => return Err(ZplError::NotEmpty),
                    _ => {}
                }
                if dst.is_some() {
                    self.drop_name(d);
                }
                let prefix = format!("{s}/");
                let moved: Vec<(String, Node)> = self
                    .names
                    .iter()
                    .filter(|(k, _)| *k == s || k.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                for (k, _) in &moved {
                    self.names.remove(k);
                }
                for (k, v) in moved {
                    self.names.insert(format!("{d}{}", &k[s.len()..]), v);
                }
                Ok(())
            }
            Op::Link(s, d) => {
                let (s, d) = (PATHS[s], PATHS[d]);
                let src = self.resolve(s)?;
                self.parent_dir(d)?;
                let Node::File(_) = src else {
                    return Err(ZplError::Perm);
                };
                if self.names.contains_key(d) {
                    return Err(ZplError::Exists);
                }
                self.names.insert(d.into(), src);
                Ok(())
            }
        }
    }
}

fn apply_fs(fs: &Fs, op: &Op) -> Result<(), ZplError> {
    match *op {
        Op::Create(p) => {
            let (dir, name) = parent(fs, PATHS[p])?;
            fs.create(dir, name, 0o644, 0, 0).map(|_| ())
        }
        Op::Mkdir(p) => {
            let (dir, name) = parent(fs, PATHS[p])?;
            fs.mkdir(dir, name, 0o755, 0, 0).map(|_| ())
        }
        Op::Write(p, off, len, byte) => {
            let a = resolve(fs, PATHS[p])?;
            fs.write(a.ino, off, &vec![byte; len]).map(|_| ())
        }
        Op::Truncate(p, size) => {
            let a = resolve(fs, PATHS[p])?;
            fs.setattr(
                a.ino,
                SetAttr {
                    size: Some(size),
                    ..Default::default()
                },
            )
            .map(|_| ())
        }
        Op::Unlink(p) => {
            let (dir, name) = parent(fs, PATHS[p])?;
            fs.unlink(dir, name)
        }
        Op::Rmdir(p) => {
            let (dir, name) = parent(fs, PATHS[p])?;
            fs.rmdir(dir, name)
        }
        Op::Rename(s, d) => {
            let (sd, sn) = parent(fs, PATHS[s])?;
            let (dd, dn) = parent(fs, PATHS[d])?;
            fs.rename(sd, sn, dd, dn, 0)
        }
        Op::Link(s, d) => {
            let a = resolve(fs, PATHS[s])?;
            let (dd, dn) = parent(fs, PATHS[d])?;
            fs.link(a.ino, dd, dn).map(|_| ())
        }
    }
}

/// Compare error kinds (the `Invalid` message is not part of the contract).
fn same(a: &Result<(), ZplError>, b: &Result<(), ZplError>) -> bool {
    match (a, b) {
        (Err(ZplError::Invalid(_)), Err(ZplError::Invalid(_))) => true,
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn zpl_matches_model(ops in prop::collection::vec(op_strategy(), 1..120), recordsize_shift in 9u32..14) {
        let (store, fs) = new_fs_with(ZplOptions { recordsize_bytes: 1 << recordsize_shift, ..Default::default() });
        let mut model = Model::default();
        // Start from a small populated tree so that most random operations can succeed.
        let idx = |p: &str| PATHS.iter().position(|x| *x == p).unwrap();
        let setup = [Op::Mkdir(idx("d")), Op::Mkdir(idx("e")), Op::Mkdir(idx("d/e")), Op::Create(idx("a")), Op::Create(idx("d/a")), Op::Create(idx("d/e/a"))];
        for (i, op) in setup.iter().chain(ops.iter()).enumerate() {
            let want = model.apply(op);
            let got = apply_fs(&fs, op);
            prop_assert!(same(&want, &got), "op #{} {:?}: model {:?}, zpl {:?}", i, op, want, got);
        }
        let tree = fsck(&store, &fs, 0);
        let want: BTreeMap<String, FileKind> = model.names.iter().map(|(k, v)| (k.clone(), if *v == Node::Dir { FileKind::Dir } else { FileKind::File })).collect();
        let got: BTreeMap<String, FileKind> = tree.iter().map(|(k, a)| (k.clone(), a.kind)).collect();
        prop_assert_eq!(&want, &got);
        for (path, node) in &model.names {
            if let Node::File(id) = node {
                let a = &tree[path];
                prop_assert_eq!(u64::from(a.nlink), model.links(*id) as u64);
                prop_assert_eq!(&read_all(&fs, a.ino), &model.files[id], "contents of {}", path);
            }
        }
    }
}
