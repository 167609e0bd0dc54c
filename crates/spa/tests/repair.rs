//! Engine-level tests of device repair on file vdevs: `zpool attach`, `detach`,
//! `replace` (in a mirror, in a raidz, with a hot spare), `offline`/`online`/`clear`,
//! dirty time logs (DTLs), and what a finished resilver changes.
//!
//! What they check: the vdev tree after every operation (names and states as `zpool
//! status` shows them); each new or returning leaf's DTL (attach/replace: `[1, last
//! synced txg]`; offline: an open range from the next txg, closed by online; a leaf
//! missing at import: an open range from the import's first txg, closed when a later
//! import finds it); that offline (unless temporary), DTLs and spares survive export and
//! import; that data reads back byte-identical after every step; that bad requests fail
//! with OpenZFS's wording and change nothing; and that a power cut at any point of an
//! attach or a detach imports the old tree or the new one, never a broken one. A
//! resilver is simulated by calling `Pool::resilver_done` (the scan engine's hook).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tarn_spa::{AddSpec, CreateSpec, Pool, Rewind, SpaError, TopSpec, VdevStatus};

mod common;
use common::{get, pattern, put};

const MB: u64 = 1 << 20;

fn mkfile(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

fn create(name: &str, vdevs: Vec<TopSpec>, spares: Vec<PathBuf>) -> Arc<Pool> {
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs,
        spares,
        ..CreateSpec::default()
    })
    .unwrap()
}

/// Write `data` as a new object of the root dataset and wait for its txg.
fn write(pool: &Pool, data: &[u8]) -> u64 {
    let os = pool.objset(&pool.name()).unwrap();
    let o = put(&*os, data);
    os.wait_synced().unwrap();
    o
}

fn read(pool: &Pool, o: u64) -> Vec<u8> {
    get(&*pool.objset(&pool.name()).unwrap(), o)
}

fn fails<T>(r: tarn_spa::Result<T>) -> SpaError {
    r.err().expect("must fail")
}

fn canon(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The tree as "name:STATE" strings, nested with brackets: `mirror-0:ONLINE[a:ONLINE b:ONLINE]`.
fn shape(v: &VdevStatus) -> String {
    let own = format!("{}:{}", v.name.rsplit('/').next().unwrap(), v.state);
    if v.children.is_empty() {
        own
    } else {
        format!("{own}[{}]", v.children.iter().map(shape).collect::<Vec<_>>().join(" "))
    }
}

fn tree(pool: &Pool) -> String {
    pool.status().children.iter().map(shape).collect::<Vec<_>>().join(" ")
}

fn import(name: &str, dir: &Path) -> Arc<Pool> {
    Pool::import(name, &[dir.to_path_buf()], Rewind::None, None).unwrap()
}

/// A resilver of mirror side `to` from side `from` (same offsets on both): copy the
/// data area, then tell the pool the resilver finished. Nothing may be syncing.
fn resilver_mirror(pool: &Pool, from: &Path, to: &Path) {
    use std::os::unix::fs::FileExt;
    pool.sync().unwrap();
    let src = std::fs::File::open(from).unwrap();
    let dst = std::fs::OpenOptions::new().write(true).open(to).unwrap();
    let end = tarn_phys::label::data_end_bytes(src.metadata().unwrap().len().min(dst.metadata().unwrap().len()));
    let mut buf = vec![0u8; 4 << 20];
    let mut off = tarn_phys::label::DATA_START_BYTES;
    while off < end {
        let n = buf.len().min((end - off) as usize);
        src.read_exact_at(&mut buf[..n], off).unwrap();
        dst.write_all_at(&buf[..n], off).unwrap();
        off += n as u64;
    }
    dst.sync_all().unwrap();
    pool.resilver_done(pool.synced_txg());
    pool.sync().unwrap();
}

/// Whether `p` carries no label (free for another pool without `-f`).
fn unlabelled(p: &Path) -> bool {
    let l = tarn_vdev::Leaf::open(p).unwrap();
    let free = tarn_vdev::label::read_configs(&l).iter().all(|c| c.is_err());
    l.unlock();
    free
}

#[test]
fn attach_single_to_mirror_then_three_way_then_detach() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b, c] = ["a", "b", "c"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("att", vec![TopSpec::Leaf(a.clone())], vec![]);
    let data = pattern(1, 700_000);
    let o = write(&pool, &data);
    let size = pool.size_bytes();
    let synced = pool.synced_txg();
    pool.attach(&s(&a), &b, false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    assert_eq!(pool.dtl_of(&s(&b)).unwrap(), vec![(1, synced)]);
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![]);
    assert_eq!(pool.size_bytes(), size, "space unchanged");
    // A resilver is "running": the new side is annotated.
    let st = pool.status();
    assert!(st.children[0].children[1].resilvering && !st.children[0].children[0].resilvering);
    assert_eq!(read(&pool, o), data);
    // Blocks written now land on both sides.
    let data2 = pattern(2, 300_000);
    let o2 = write(&pool, &data2);
    resilver_mirror(&pool, &a, &b);
    assert_eq!(pool.dtl_of(&s(&b)).unwrap(), vec![]);
    assert!(!pool.status().children[0].children[1].resilvering);
    // 2-way → 3-way by attaching to a side.
    pool.attach(&s(&b), &c, false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE c:ONLINE]");
    pool.export().unwrap();
    drop(pool);
    let pool = import("att", dir);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE c:ONLINE]");
    assert_eq!(pool.dtl_of(&s(&c)).unwrap().len(), 1, "DTL persisted");
    resilver_mirror(&pool, &a, &c);
    // 3 → 2 → 1: the mirror collapses into its last leaf, same top-level id.
    pool.detach(&s(&c)).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    assert!(unlabelled(&c), "detached leaf's labels cleared and lock released");
    pool.detach(&s(&a)).unwrap();
    assert_eq!(tree(&pool), "b:ONLINE");
    assert_eq!(pool.status().children[0].name, canon(&b));
    assert!(unlabelled(&a));
    assert_eq!(read(&pool, o), data);
    assert_eq!(read(&pool, o2), data2);
    // The last leaf cannot be detached.
    assert_eq!(
        fails(pool.detach(&s(&b))).to_string(),
        format!("cannot detach {}: only applicable to mirror and replacing vdevs", s(&b))
    );
    pool.export().unwrap();
    drop(pool);
    let pool = import("att", dir);
    assert_eq!(tree(&pool), "b:ONLINE");
    assert_eq!(read(&pool, o), data);
    assert_eq!(read(&pool, o2), data2);
    pool.export().unwrap();
}

#[test]
fn bad_attach_detach_requests_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b, c, e, f, g] = ["a", "b", "c", "e", "f", "g"].map(|n| mkfile(dir, n, 96 * MB));
    let small = mkfile(dir, "small", 80 * MB);
    let tiny = mkfile(dir, "tiny", 32 * MB);
    let pool = create(
        "bad",
        vec![TopSpec::Raidz {
            nparity: 1,
            leaves: vec![a.clone(), b.clone(), c.clone()],
        }],
        vec![],
    );
    let o = write(&pool, &pattern(3, 100_000));
    let before = tree(&pool);
    let msg = |r: tarn_spa::Result<()>| fails(r).to_string();
    assert_eq!(
        msg(pool.attach(&s(&a), &e, false)),
        format!("cannot attach {} to {}: can only attach to mirrors and top-level disks", s(&e), s(&a))
    );
    assert_eq!(
        msg(pool.attach("/nonexistent/x", &e, false)),
        format!("cannot attach {} to /nonexistent/x: no such device in pool", s(&e))
    );
    assert_eq!(
        msg(pool.detach(&s(&a))),
        format!("cannot detach {}: only applicable to mirror and replacing vdevs", s(&a))
    );
    assert_eq!(msg(pool.detach("/nonexistent/x")), "cannot detach /nonexistent/x: no such device in pool");
    assert_eq!(
        msg(pool.offline("/nonexistent/x", false)),
        "cannot offline /nonexistent/x: no such device in pool"
    );
    assert_eq!(
        msg(pool.clear(Some("/nonexistent/x"))),
        "cannot clear errors for /nonexistent/x: no such device in pool"
    );
    // Offline one raidz1 leaf: fine; a second: no valid replicas.
    pool.offline(&s(&a), false).unwrap();
    assert_eq!(msg(pool.offline(&s(&b), false)), format!("cannot offline {}: no valid replicas", s(&b)));
    pool.online(&s(&a)).unwrap();
    assert_eq!(tree(&pool), before);
    pool.export().unwrap();
    drop(pool);

    // Mirror: too small, in use, own device, a new side that has nothing yet.
    let pool = create("bad2", vec![TopSpec::Mirror(vec![f.clone(), g.clone()])], vec![]);
    let other = create("other", vec![TopSpec::Leaf(e.clone())], vec![]);
    let before = tree(&pool);
    assert_eq!(
        msg(pool.attach(&s(&f), &small, false)),
        format!("cannot attach {} to {}: device is too small", s(&small), s(&f))
    );
    assert_eq!(
        msg(pool.attach(&s(&f), &tiny, false)),
        format!("cannot attach {} to {}: device is too small", s(&tiny), s(&f))
    );
    // A device of another imported pool is locked by it.
    assert!(matches!(fails(pool.attach(&s(&f), &e, false)), SpaError::Busy(_)));
    assert!(matches!(fails(pool.attach(&s(&f), &g, false)), SpaError::InUse { .. }));
    assert!(matches!(fails(pool.attach(&s(&f), Path::new("/nonexistent/q"), false)), SpaError::NotFound(_)));
    assert_eq!(tree(&pool), before);
    other.export().unwrap();
    // Attach a (reused) device, then detaching the only complete side is refused.
    let o2 = write(&pool, &pattern(4, 200_000));
    pool.detach(&s(&g)).unwrap();
    pool.attach(&s(&f), &a, true).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[f:ONLINE a:ONLINE]");
    assert_eq!(msg(pool.detach(&s(&f))), format!("cannot detach {}: no valid replicas", s(&f)));
    assert_eq!(msg(pool.offline(&s(&f), false)), format!("cannot offline {}: no valid replicas", s(&f)));
    assert_eq!(tree(&pool), "mirror-0:ONLINE[f:ONLINE a:ONLINE]");
    assert_eq!(read(&pool, o2), pattern(4, 200_000));
    let _ = o;
    pool.export().unwrap();
}

#[test]
fn replace_in_mirror_and_in_raidz() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b, c, e, f, g, h] = ["a", "b", "c", "e", "f", "g", "h"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("rep", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![]);
    let data = pattern(5, 500_000);
    let o = write(&pool, &data);
    pool.replace(&s(&a), Some(&c), false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[replacing-0:ONLINE[a:ONLINE c:ONLINE] b:ONLINE]");
    assert_eq!(pool.dtl_of(&s(&c)).unwrap().len(), 1);
    assert_eq!(
        fails(pool.replace(&s(&a), Some(&e), false)).to_string(),
        format!(
            "cannot replace {} with {}: already in replacing/spare config; wait for completion or use 'zpool detach'",
            s(&a),
            s(&e)
        )
    );
    assert_eq!(read(&pool, o), data);
    // Survives export/import unfinished.
    pool.export().unwrap();
    drop(pool);
    let pool = import("rep", dir);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[replacing-0:ONLINE[a:ONLINE c:ONLINE] b:ONLINE]");
    resilver_mirror(&pool, &b, &c);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[c:ONLINE b:ONLINE]");
    assert!(unlabelled(&a), "the replaced leaf is released");
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);
    // In place: the leaf is missing, a new disk appears at the same path.
    std::fs::remove_file(&c).unwrap();
    let pool = import("rep", dir);
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[c:UNAVAIL b:ONLINE]");
    assert_eq!(
        fails(pool.replace(&s(&b), None, false)).to_string(),
        format!("{} is part of active pool 'rep'", s(&b))
    );
    mkfile(dir, "c", 96 * MB);
    pool.replace(&s(&c), None, false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[replacing-0:DEGRADED[c:UNAVAIL c:ONLINE] b:ONLINE]");
    resilver_mirror(&pool, &b, &c);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[c:ONLINE b:ONLINE]");
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);
    let pool = import("rep", dir);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[c:ONLINE b:ONLINE]");
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);

    // A raidz1 column whose leaf is missing.
    let pool = create(
        "repz",
        vec![TopSpec::Raidz {
            nparity: 1,
            leaves: vec![e.clone(), f.clone(), g.clone()],
        }],
        vec![],
    );
    let data = pattern(6, 900_000);
    let o = write(&pool, &data);
    pool.export().unwrap();
    drop(pool);
    std::fs::remove_file(&f).unwrap();
    let pool = import("repz", dir);
    assert_eq!(tree(&pool), "raidz1-0:DEGRADED[e:ONLINE f:UNAVAIL g:ONLINE]");
    pool.replace(&s(&f), Some(&h), false).unwrap();
    assert_eq!(tree(&pool), "raidz1-0:DEGRADED[e:ONLINE replacing-1:DEGRADED[f:UNAVAIL h:ONLINE] g:ONLINE]");
    assert_eq!(pool.dtl_of(&s(&h)).unwrap().len(), 1);
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);
    let pool = import("repz", dir);
    assert_eq!(tree(&pool), "raidz1-0:DEGRADED[e:ONLINE replacing-1:DEGRADED[f:UNAVAIL h:ONLINE] g:ONLINE]");
    // (No real resilver here: the new column is rebuilt from parity when read.)
    pool.resilver_done(pool.synced_txg());
    pool.sync().unwrap();
    assert_eq!(tree(&pool), "raidz1-0:ONLINE[e:ONLINE h:ONLINE g:ONLINE]");
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);
    let pool = import("repz", dir);
    assert_eq!(tree(&pool), "raidz1-0:ONLINE[e:ONLINE h:ONLINE g:ONLINE]");
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
}

#[test]
fn hot_spares() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b, s1, s2] = ["a", "b", "s1", "s2"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("sp", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![s1.clone()]);
    let spares = |p: &Pool| {
        p.status()
            .spares
            .iter()
            .map(|x| format!("{}:{}", x.name.rsplit('/').next().unwrap(), x.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(spares(&pool), vec!["s1:AVAIL"]);
    pool.add_vdevs(&AddSpec {
        spares: vec![s2.clone()],
        ..AddSpec::default()
    })
    .unwrap();
    assert_eq!(spares(&pool), vec!["s1:AVAIL", "s2:AVAIL"]);
    // Spares are refused as attach targets and in other pools.
    assert_eq!(
        fails(pool.offline(&s(&s1), false)).to_string(),
        format!("cannot offline {}: device is reserved as a hot spare", s(&s1))
    );
    assert!(matches!(fails(pool.attach(&s(&a), &s1, false)), SpaError::InUse { .. }));
    let data = pattern(7, 400_000);
    let o = write(&pool, &data);
    pool.offline(&s(&a), false).unwrap();
    pool.replace(&s(&a), Some(&s1), false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[spare-0:DEGRADED[a:OFFLINE s1:ONLINE] b:ONLINE]");
    assert_eq!(spares(&pool), vec!["s1:INUSE", "s2:AVAIL"]);
    assert_eq!(
        fails(pool.remove_vdev(&s(&s1))).to_string(),
        format!("cannot remove {}: Pool busy; removal may already be in progress", s(&s1))
    );
    // Stays in use after the resilver, and across export/import.
    pool.resilver_done(pool.synced_txg());
    pool.sync().unwrap();
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[spare-0:DEGRADED[a:OFFLINE s1:ONLINE] b:ONLINE]");
    pool.export().unwrap();
    drop(pool);
    let pool = import("sp", dir);
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[spare-0:DEGRADED[a:OFFLINE s1:ONLINE] b:ONLINE]");
    assert_eq!(spares(&pool), vec!["s1:INUSE", "s2:AVAIL"]);
    assert_eq!(read(&pool, o), data);
    // Detaching the spare returns it to the list.
    pool.online(&s(&a)).unwrap();
    resilver_mirror(&pool, &b, &a);
    pool.detach(&s(&s1)).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    assert_eq!(spares(&pool), vec!["s1:AVAIL", "s2:AVAIL"]);
    // Detaching the original makes the spare a permanent member.
    pool.replace(&s(&a), Some(&s2), false).unwrap();
    resilver_mirror(&pool, &b, &s2);
    pool.detach(&s(&a)).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[s2:ONLINE b:ONLINE]");
    assert_eq!(spares(&pool), vec!["s1:AVAIL"]);
    assert!(unlabelled(&a));
    // An unused spare can be removed; its labels go.
    pool.remove_vdev(&s(&s1)).unwrap();
    assert!(spares(&pool).is_empty());
    assert!(unlabelled(&s1));
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
    drop(pool);
    let pool = import("sp", dir);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[s2:ONLINE b:ONLINE]");
    assert!(spares(&pool).is_empty());
    assert_eq!(read(&pool, o), data);
    pool.export().unwrap();
}

#[test]
fn offline_online_and_dtls_across_import() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b] = ["a", "b"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("off", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![]);
    let o1 = write(&pool, &pattern(8, 300_000));
    let first = pool.synced_txg() + 1;
    pool.offline(&s(&a), false).unwrap();
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[a:OFFLINE b:ONLINE]");
    assert_eq!(pool.health(), "DEGRADED");
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![(first, u64::MAX)]);
    // Writes while offline are covered by the open range.
    let o2 = write(&pool, &pattern(9, 300_000));
    assert_eq!(read(&pool, o2), pattern(9, 300_000));
    // Persistent offline survives export/import, DTL still open.
    pool.export().unwrap();
    drop(pool);
    let pool = import("off", dir);
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[a:OFFLINE b:ONLINE]");
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![(first, u64::MAX)]);
    let o3 = write(&pool, &pattern(10, 300_000));
    assert_eq!(pool.online(&s(&a)).unwrap(), tarn_vdev::VdevState::Online);
    let last = pool.synced_txg();
    let dtl = pool.dtl_of(&s(&a)).unwrap();
    assert_eq!(dtl.len(), 1);
    assert_eq!(dtl[0].0, first);
    assert!(dtl[0].1 >= last - 1 && dtl[0].1 <= last, "{dtl:?} vs {last}");
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    resilver_mirror(&pool, &b, &a);
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![]);
    // Temporary offline: gone after import, its DTL closed there.
    pool.offline(&s(&b), true).unwrap();
    let o4 = write(&pool, &pattern(11, 200_000));
    pool.export().unwrap();
    drop(pool);
    let pool = import("off", dir);
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    let dtl = pool.dtl_of(&s(&b)).unwrap();
    assert!(dtl.len() == 1 && dtl[0].1 != u64::MAX, "{dtl:?}");
    for (o, seed, len) in [(o1, 8, 300_000), (o2, 9, 300_000), (o3, 10, 300_000), (o4, 11, 200_000)] {
        assert_eq!(read(&pool, o), pattern(seed, len));
    }
    // clear zeroes counters.
    pool.status();
    pool.clear(None).unwrap();
    assert_eq!(pool.data_errors(), 0);
    pool.export().unwrap();
}

#[test]
fn leaf_missing_at_import_gets_open_dtl() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b] = ["a", "b"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("miss", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![]);
    let o1 = write(&pool, &pattern(12, 300_000));
    pool.export().unwrap();
    drop(pool);
    let away = dir.join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::rename(&a, away.join("a")).unwrap();
    let pool = import("miss", dir);
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[a:UNAVAIL b:ONLINE]");
    let imported = pool.synced_txg();
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![(imported + 1, u64::MAX)]);
    let o2 = write(&pool, &pattern(13, 300_000));
    pool.export().unwrap();
    drop(pool);
    std::fs::rename(away.join("a"), &a).unwrap();
    let pool = import("miss", dir);
    let imported2 = pool.synced_txg();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    // Only the txgs it missed need resilvering.
    assert_eq!(pool.dtl_of(&s(&a)).unwrap(), vec![(imported + 1, imported2)]);
    assert_eq!(read(&pool, o1), pattern(12, 300_000));
    assert_eq!(read(&pool, o2), pattern(13, 300_000));
    pool.export().unwrap();
}

#[test]
fn write_errors_fill_dtl_and_fault_the_leaf() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let [a, b] = ["a", "b"].map(|n| mkfile(dir, n, 96 * MB));
    let pool = create("flt", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])], vec![]);
    let leaf = pool.zio().vdevs()[0].children()[0].clone();
    leaf.stats().write_errors.store(tarn_spa::FAULT_IO_ERRORS, std::sync::atomic::Ordering::Relaxed);
    let o = write(&pool, &pattern(14, 100_000));
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[a:FAULTED b:ONLINE]");
    assert!(pool.dtl_of(&s(&a)).unwrap()[0].1 == u64::MAX);
    pool.export().unwrap();
    drop(pool);
    // Faulted persists; clear returns it to service.
    let pool = import("flt", dir);
    assert_eq!(tree(&pool), "mirror-0:DEGRADED[a:FAULTED b:ONLINE]");
    pool.clear(None).unwrap();
    assert_eq!(tree(&pool), "mirror-0:ONLINE[a:ONLINE b:ONLINE]");
    assert!(pool.dtl_of(&s(&a)).unwrap()[0].1 != u64::MAX);
    assert_eq!(read(&pool, o), pattern(14, 100_000));
    pool.export().unwrap();
}

/// A power cut at every point of an attach and of a detach: the pool imports with the
/// old tree or the new one (the new one whenever the change returned before the cut),
/// data intact.
#[test]
fn power_cut_during_attach_and_detach() {
    let mut seen = [0u32; 2];
    for (detaching, writes) in [(false, 24u64), (true, 16)] {
        for cut_after in 0..writes {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path().to_path_buf();
            let prefix = dir.display().to_string();
            let (a, b) = (mkfile(&dir, "a", 96 * MB), mkfile(&dir, "b", 96 * MB));
            let name = format!("cut{}{cut_after}", if detaching { "det" } else { "att" });
            let vdevs = if detaching {
                vec![TopSpec::Mirror(vec![a.clone(), b.clone()])]
            } else {
                vec![TopSpec::Leaf(a.clone())]
            };
            let pool = create(&name, vdevs, vec![]);
            let data = pattern(cut_after, 300_000);
            let o = write(&pool, &data);
            let cut = tarn_vdev::inject::power_cut_after(&prefix, cut_after);
            let done = if detaching { pool.detach(&s(&b)) } else { pool.attach(&s(&a), &b, false) };
            let before_cut = done.is_ok() && cut.dropped_writes() == 0;
            common::abandon(pool, &prefix);
            let pool = Pool::import(&name, std::slice::from_ref(&dir), Rewind::None, None)
                .unwrap_or_else(|e| panic!("cut after {cut_after} (detaching: {detaching}): import failed: {e}"));
            assert_eq!(read(&pool, o), data, "cut after {cut_after}");
            let mirrored = tree(&pool).starts_with("mirror-0");
            if before_cut {
                assert_eq!(mirrored, !detaching, "cut after {cut_after}: a completed change was lost");
            }
            seen[mirrored as usize] += 1;
            pool.export().unwrap();
        }
    }
    assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
}
