//! Unit tests of the `.zfs` control directory over in-memory object sets: a
//! `MemStore::snapshot` copy stands in for each snapshot.

use std::sync::Arc;

use parking_lot::Mutex;
use tarn_dmu::mem::MemStore;

use super::*;
use crate::ctldir::{CTL_INO_BIT, CTL_INO_ROOT, CTL_INO_SHARES, CTL_INO_SNAPDIR};

/// Snapshots kept by name, oldest first.
#[derive(Default)]
struct Snaps(Mutex<Vec<(String, Arc<dyn ObjectStore>)>>);

impl Snaps {
    fn take(&self, name: &str, live: &MemStore) {
        self.0.lock().push((name.into(), Arc::new(live.snapshot())));
    }
    fn destroy(&self, name: &str) {
        self.0.lock().retain(|(n, _)| n != name);
    }
}

impl SnapshotSource for Snaps {
    fn list(&self) -> Vec<String> {
        self.0.lock().iter().map(|(n, _)| n.clone()).collect()
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ObjectStore>> {
        self.0.lock().iter().find(|(n, _)| n == name).map(|(_, o)| o.clone()).ok_or(ZplError::NotFound)
    }
}

struct T {
    store: Arc<MemStore>,
    snaps: Arc<Snaps>,
    vfs: Arc<Vfs>,
}

fn setup() -> T {
    let store = Arc::new(MemStore::new());
    let fs = Fs::open(store.clone(), ZplOptions::default()).unwrap();
    let snaps = Arc::new(Snaps::default());
    let vfs = Vfs::new(fs, snaps.clone(), SnapDir::Hidden);
    T { store, snaps, vfs }
}

impl T {
    fn root(&self) -> u64 {
        self.vfs.root()
    }
    fn write(&self, dir: u64, name: &str, data: &[u8]) -> u64 {
        let a = match self.vfs.lookup(dir, name.as_bytes()) {
            Ok(a) => a,
            Err(_) => self.vfs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap(),
        };
        self.vfs
            .setattr(
                a.ino,
                SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )
            .unwrap();
        self.vfs.write(a.ino, 0, data).unwrap();
        a.ino
    }
    fn read(&self, ino: u64) -> Result<Vec<u8>> {
        self.vfs.read(ino, 0, 1 << 20)
    }
    /// Every name of `dir`, fetched `batch` entries at a time.
    fn names(&self, dir: u64, batch: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let b = self.vfs.readdir(dir, cursor, batch).unwrap();
            if b.is_empty() {
                return out;
            }
            for e in b {
                assert!(e.next_cursor > cursor && e.next_cursor <= DIR_CURSOR_END);
                cursor = e.next_cursor;
                out.push(String::from_utf8(e.name).unwrap());
            }
        }
    }
    /// [`T::names`] of a live directory: the first `fixed` in listing order (".", "..",
    /// ".zfs"), the rest (in ZAP hash order) sorted.
    fn live_names(&self, dir: u64, batch: usize, fixed: usize) -> Vec<String> {
        let mut v = self.names(dir, batch);
        v[fixed..].sort();
        v
    }
    fn at(&self, path: &str) -> Result<Attr> {
        let mut a = self.vfs.getattr(self.root())?;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            a = self.vfs.lookup(a.ino, part.as_bytes())?;
        }
        Ok(a)
    }
}

#[test]
fn ctldir_hidden_but_reachable_and_shown_when_visible() {
    let t = setup();
    t.write(t.root(), "a", b"1");
    t.write(t.root(), "b", b"2");
    for batch in [1, 2, 100] {
        assert_eq!(t.live_names(t.root(), batch, 2), [".", "..", "a", "b"]);
    }
    let z = t.vfs.lookup(t.root(), b".zfs").unwrap();
    assert_eq!((z.ino, z.kind, z.perm, z.uid), (CTL_INO_ROOT, FileKind::Dir, 0o777, 0));
    assert_eq!(t.names(CTL_INO_ROOT, 100), [".", "..", "snapshot", "shares"]);
    assert_eq!(t.names(CTL_INO_ROOT, 1), [".", "..", "snapshot", "shares"]);
    assert_eq!(t.names(CTL_INO_SHARES, 100), [".", ".."]);
    assert_eq!(t.names(CTL_INO_SNAPDIR, 100), [".", ".."]);
    assert_eq!(t.vfs.lookup(CTL_INO_ROOT, b"..").unwrap().ino, t.root());
    assert_eq!(t.vfs.lookup(CTL_INO_SNAPDIR, b"..").unwrap().ino, CTL_INO_ROOT);
    assert_eq!(t.vfs.lookup(CTL_INO_ROOT, b"nope"), Err(ZplError::NotFound));
    t.vfs.set_snapdir(SnapDir::Visible);
    for batch in [1, 2, 3, 100] {
        assert_eq!(t.live_names(t.root(), batch, 3), [".", "..", ".zfs", "a", "b"]);
    }
    // A listing resumed after the property changed neither repeats nor loses entries.
    let first = t.vfs.readdir(t.root(), 0, 3).unwrap();
    t.vfs.set_snapdir(SnapDir::Hidden);
    let rest = t.vfs.readdir(t.root(), first.last().unwrap().next_cursor, 100).unwrap();
    let mut names: Vec<&[u8]> = rest.iter().map(|e| &e.name[..]).collect();
    names.sort();
    assert_eq!(names, [&b"a"[..], b"b"]);
}

#[test]
fn a_real_dotzfs_entry_is_shadowed() {
    let t = setup();
    // Made behind the Vfs's back (as a received or pre-existing file system could).
    t.vfs.fs().mkdir(t.root(), b".zfs", 0o755, 0, 0).unwrap();
    t.write(t.root(), "f", b"x");
    assert_eq!(t.names(t.root(), 1), [".", "..", "f"]);
    t.vfs.set_snapdir(SnapDir::Visible);
    assert_eq!(t.names(t.root(), 1), [".", "..", ".zfs", "f"]);
    assert_eq!(t.vfs.lookup(t.root(), b".zfs").unwrap().ino, CTL_INO_ROOT);
    assert_eq!(t.vfs.mkdir(t.root(), b".zfs", 0o755, 0, 0), Err(ZplError::Exists));
    assert_eq!(t.vfs.create(t.root(), b".zfs", 0o644, 0, 0), Err(ZplError::Exists));
    assert_eq!(t.vfs.rmdir(t.root(), b".zfs"), Err(ZplError::ReadOnly));
    assert_eq!(t.vfs.rename(t.root(), b"f", t.root(), b".zfs", 0), Err(ZplError::ReadOnly));
    assert_eq!(t.vfs.rename(t.root(), b".zfs", t.root(), b"g", 0), Err(ZplError::ReadOnly));
    // In any other directory the name is ordinary.
    let d = t.vfs.mkdir(t.root(), b"d", 0o755, 0, 0).unwrap();
    t.vfs.mkdir(d.ino, b".zfs", 0o755, 0, 0).unwrap();
}

#[test]
fn snapshots_show_old_contents_read_only() {
    let t = setup();
    let f = t.write(t.root(), "file", b"old");
    let d = t.vfs.mkdir(t.root(), b"dir", 0o755, 0, 0).unwrap();
    t.write(d.ino, "inner", b"inner old");
    t.vfs.symlink(t.root(), b"link", b"file", 0, 0).unwrap();
    t.snaps.take("one", &t.store);
    t.write(t.root(), "file", b"new contents");
    t.vfs.unlink(d.ino, b"inner").unwrap();
    t.write(t.root(), "born", b"after");

    assert_eq!(t.names(CTL_INO_SNAPDIR, 100), [".", "..", "one"]);
    let s = t.at(".zfs/snapshot/one").unwrap();
    assert_eq!(s.kind, FileKind::Dir);
    assert_ne!(s.ino & CTL_INO_BIT, 0);
    assert_eq!(t.vfs.getattr(CTL_INO_SNAPDIR).unwrap().nlink, 3);
    assert_eq!(t.live_names(s.ino, 100, 2), [".", "..", "dir", "file", "link"]);
    let sf = t.at(".zfs/snapshot/one/file").unwrap();
    assert_eq!(t.read(sf.ino).unwrap(), b"old");
    assert_eq!(t.read(f).unwrap(), b"new contents");
    assert_ne!(sf.ino, f);
    assert_eq!(t.read(t.at(".zfs/snapshot/one/dir/inner").unwrap().ino).unwrap(), b"inner old");
    assert_eq!(t.vfs.readlink(t.at(".zfs/snapshot/one/link").unwrap().ino).unwrap(), b"file");
    assert_eq!(t.at(".zfs/snapshot/one/born"), Err(ZplError::NotFound));
    // ".." of the snapshot's root is .zfs/snapshot, "." is itself; entries carry the
    // same numbers as lookups.
    assert_eq!(t.vfs.lookup(s.ino, b"..").unwrap().ino, CTL_INO_SNAPDIR);
    let ents = t.vfs.readdir(s.ino, 0, 100).unwrap();
    assert_eq!((ents[0].ino, ents[1].ino), (s.ino, CTL_INO_SNAPDIR));
    assert_eq!(ents.iter().find(|e| e.name == b"file").unwrap().ino, sf.ino);
    let sd = t.at(".zfs/snapshot/one/dir").unwrap();
    assert_eq!(t.vfs.lookup(sd.ino, b"..").unwrap().ino, s.ino);
    assert_eq!(t.vfs.getattr(sf.ino).unwrap().size, 3);

    // Read-only everywhere under .zfs.
    let ro = Err(ZplError::ReadOnly);
    assert_eq!(t.vfs.write(sf.ino, 0, b"x").map(drop), ro);
    assert_eq!(
        t.vfs
            .setattr(
                sf.ino,
                SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                }
            )
            .map(drop),
        ro
    );
    assert_eq!(
        t.vfs
            .setattr(
                sf.ino,
                SetAttr {
                    size: Some(0),
                    ..Default::default()
                }
            )
            .map(drop),
        ro
    );
    assert_eq!(t.vfs.create(s.ino, b"n", 0o644, 0, 0).map(drop), ro);
    assert_eq!(t.vfs.mkdir(s.ino, b"n", 0o755, 0, 0).map(drop), ro);
    assert_eq!(t.vfs.mknod(s.ino, b"n", 0o10644, 0, 0, 0).map(drop), ro);
    assert_eq!(t.vfs.symlink(s.ino, b"n", b"t", 0, 0).map(drop), ro);
    assert_eq!(t.vfs.unlink(s.ino, b"file"), ro);
    assert_eq!(t.vfs.rmdir(s.ino, b"dir"), ro);
    assert_eq!(t.vfs.rename(s.ino, b"file", s.ino, b"g", 0), ro);
    assert_eq!(t.vfs.rename(s.ino, b"file", t.root(), b"g", 0), ro);
    assert_eq!(t.vfs.rename(t.root(), b"born", s.ino, b"g", 0), ro);
    assert_eq!(t.vfs.link(f, s.ino, b"g").map(drop), ro);
    assert_eq!(t.vfs.link(sf.ino, t.root(), b"g").map(drop), Err(ZplError::CrossDevice));
    assert_eq!(t.vfs.open_file(sf.ino, true), ro);
    assert_eq!(t.vfs.mkdir(CTL_INO_SNAPDIR, b"new", 0o755, 0, 0).map(drop), ro);
    assert_eq!(t.vfs.rmdir(CTL_INO_SNAPDIR, b"one"), ro);
    assert_eq!(t.vfs.rename(CTL_INO_SNAPDIR, b"one", CTL_INO_SNAPDIR, b"two", 0), ro);
    assert_eq!(t.vfs.create(CTL_INO_ROOT, b"x", 0o644, 0, 0).map(drop), ro);
    assert_eq!(t.vfs.setattr(CTL_INO_ROOT, SetAttr::default()).map(drop), ro);
    assert_eq!(t.vfs.read(CTL_INO_SNAPDIR, 0, 10), Err(ZplError::IsDir));
    t.vfs.open_file(sf.ino, false).unwrap();
    t.vfs.release_file(sf.ino).unwrap();
    t.vfs.fsync(sf.ino).unwrap();
    // The live file system is untouched by all that.
    assert_eq!(t.live_names(t.root(), 100, 2), [".", "..", "born", "dir", "file", "link"]);
}

#[test]
fn list_follows_the_source_and_destroyed_snapshots_go_stale() {
    let t = setup();
    t.write(t.root(), "f", b"1");
    t.snaps.take("a", &t.store);
    t.write(t.root(), "f", b"2");
    t.snaps.take("b", &t.store);
    assert_eq!(t.names(CTL_INO_SNAPDIR, 100), [".", "..", "a", "b"]);
    let fa = t.at(".zfs/snapshot/a/f").unwrap();
    let ra = t.at(".zfs/snapshot/a").unwrap();
    t.vfs.open_file(fa.ino, false).unwrap();
    // A snapshot taken while mounted appears at once; a destroyed one goes.
    t.write(t.root(), "f", b"3");
    t.snaps.take("c", &t.store);
    assert_eq!(t.names(CTL_INO_SNAPDIR, 1), [".", "..", "a", "b", "c"]);
    assert_eq!(t.vfs.getattr(CTL_INO_SNAPDIR).unwrap().size, 5);
    t.snaps.destroy("a");
    assert_eq!(t.names(CTL_INO_SNAPDIR, 100), [".", "..", "b", "c"]);
    assert_eq!(t.at(".zfs/snapshot/a"), Err(ZplError::NotFound));
    // Held inodes of the destroyed snapshot are stale, not a panic or other data.
    assert_eq!(t.vfs.read(fa.ino, 0, 10), Err(ZplError::Stale));
    assert_eq!(t.vfs.getattr(fa.ino), Err(ZplError::Stale));
    assert_eq!(t.vfs.lookup(ra.ino, b"f"), Err(ZplError::Stale));
    assert_eq!(t.vfs.readdir(ra.ino, 0, 10), Err(ZplError::Stale));
    t.vfs.release_file(fa.ino).unwrap();
    assert_eq!(t.read(t.at(".zfs/snapshot/b/f").unwrap().ino).unwrap(), b"2");
    assert_eq!(t.read(t.at(".zfs/snapshot/c/f").unwrap().ino).unwrap(), b"3");

    // Re-created under the same name: the old inodes stay stale, the name shows the
    // new snapshot under new numbers.
    let fb = t.at(".zfs/snapshot/b/f").unwrap();
    t.snaps.destroy("b");
    t.write(t.root(), "f", b"4");
    t.snaps.take("b", &t.store);
    let fb2 = t.at(".zfs/snapshot/b/f").unwrap();
    assert_ne!(fb2.ino, fb.ino);
    assert_eq!(t.read(fb2.ino).unwrap(), b"4");
    assert_eq!(t.read(fb.ino), Err(ZplError::Stale));
    assert_eq!(t.names(CTL_INO_SNAPDIR, 100), [".", "..", "c", "b"]);
}

#[test]
fn slots_are_renumbered_only_after_forget() {
    let t = setup();
    t.write(t.root(), "f", b"1");
    t.snaps.take("a", &t.store);
    let ra = t.at(".zfs/snapshot/a").unwrap();
    let fa = t.vfs.lookup(ra.ino, b"f").unwrap();
    t.snaps.destroy("a");
    t.snaps.take("b", &t.store);
    // "a" is dead but the kernel still holds two of its inodes: "b" gets another slot.
    let rb = t.at(".zfs/snapshot/b").unwrap();
    assert_ne!(rb.ino >> 48, ra.ino >> 48);
    assert_eq!(t.vfs.slots.lock().in_use(), 2);
    t.vfs.forget(fa.ino, 1);
    t.vfs.getattr(rb.ino).unwrap();
    assert_eq!(t.vfs.getattr(ra.ino), Err(ZplError::Stale));
    assert_eq!(t.vfs.slots.lock().in_use(), 2);
    t.vfs.forget(ra.ino, 1);
    assert_eq!(t.vfs.slots.lock().in_use(), 1);
    t.snaps.take("c", &t.store);
    let rc = t.at(".zfs/snapshot/c").unwrap();
    assert_eq!(rc.ino >> 48, ra.ino >> 48, "the freed slot is reused");
    // Forgetting live or fixed inodes is harmless.
    t.vfs.forget(t.root(), 5);
    t.vfs.forget(CTL_INO_ROOT, 5);
}

#[test]
fn snapshot_of_a_never_mounted_file_system_is_empty() {
    let store = Arc::new(MemStore::new());
    let snaps = Arc::new(Snaps::default());
    snaps.take("empty", &store);
    let fs = Fs::open(store.clone(), ZplOptions::default()).unwrap();
    let vfs = Vfs::new(fs, snaps, SnapDir::Hidden);
    let t = T {
        store,
        snaps: Arc::new(Snaps::default()),
        vfs,
    };
    let e = t.at(".zfs/snapshot/empty").unwrap();
    assert_eq!(e.kind, FileKind::Dir);
    assert_eq!(t.names(e.ino, 10), [".", ".."]);
    assert_eq!(t.vfs.create(e.ino, b"x", 0o644, 0, 0).map(drop), Err(ZplError::ReadOnly));
}

#[test]
fn unknown_control_numbers_are_stale() {
    let t = setup();
    assert_eq!(t.vfs.getattr(CTL_INO_BIT | 77), Err(ZplError::Stale));
    assert_eq!(t.vfs.getattr(CTL_INO_BIT | 5 << 48), Err(ZplError::Stale));
}
