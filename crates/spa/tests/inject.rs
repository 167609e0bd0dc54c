//! Fault injection through the pool API: device lookup and request checks, then a
//! checksum fault on one side of a mirror that reads heal around, and I/O errors on a
//! single-disk pool that surface as errors of the object read. Each test uses its own
//! files, and removes only the handlers it added (the registry is process-wide).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tarn_dmu::{ObjectStore, ObjectType};
use tarn_spa::inject::{self, Action, Delay, Fault, IoType, FREQ_ALWAYS_PPM};
use tarn_spa::{CreateSpec, Pool, Rewind, SpaError, TopSpec};

fn mkfile(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(96 << 20).unwrap();
    p
}

fn create(name: &str, vdevs: Vec<TopSpec>) -> std::sync::Arc<Pool> {
    Pool::create(&CreateSpec {
        name: name.into(),
        vdevs,
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

fn put(os: &dyn ObjectStore, data: &[u8]) -> u64 {
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::FileData, 512, 128 << 10, &[]).unwrap();
    os.write(&tx, obj, 0, data).unwrap();
    obj
}

/// Export and import again, so that nothing read before is cached.
fn reopen(pool: std::sync::Arc<Pool>, name: &str, dir: &Path) -> std::sync::Arc<Pool> {
    pool.export().unwrap();
    drop(pool);
    Pool::import(name, &[dir.to_path_buf()], Rewind::None, None).unwrap()
}

#[test]
fn requests_are_checked_before_registering() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (mkfile(d.path(), "a"), mkfile(d.path(), "b"));
    let pool = create("injchk", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])]);
    let leaves = pool.leaf_devices();
    assert_eq!(
        leaves.iter().map(|l| l.path.clone()).collect::<Vec<_>>(),
        vec![a.display().to_string(), b.display().to_string()]
    );
    assert_ne!(leaves[0].guid, leaves[1].guid);
    let before = inject::handlers().len();
    let fixed = |lanes| {
        Action::Delay(Delay::Fixed {
            latency: Duration::from_millis(5),
            lanes,
        })
    };
    let refused = [
        pool.inject(12345, IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM),
        pool.inject(leaves[0].guid, IoType::Write, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM),
        pool.inject(leaves[0].guid, IoType::Flush, fixed(1), FREQ_ALWAYS_PPM),
        pool.inject(leaves[0].guid, IoType::All, fixed(0), FREQ_ALWAYS_PPM),
        pool.inject(leaves[0].guid, IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM + 1),
    ];
    assert!(matches!(&refused[0], Err(SpaError::NotFound(m)) if m == "cannot find device '3039' in pool 'injchk'"));
    assert!(refused[1..].iter().all(|r| matches!(r, Err(SpaError::Invalid(_)))), "{refused:?}");
    assert!(pool.inject_handlers().is_empty());
    assert_eq!(inject::handlers().len() - before, 0, "nothing registered");

    // Checksum faults on "all" I/O types are narrowed to reads.
    let id = pool
        .inject(leaves[1].guid, IoType::All, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM)
        .unwrap();
    let mine = pool.inject_handlers();
    assert_eq!(mine.len(), 1);
    assert_eq!((mine[0].id, mine[0].spec.io_type, mine[0].spec.vdev_guid), (id, IoType::Read, leaves[1].guid));
    assert!(inject::clear(id));
    assert!(pool.inject_handlers().is_empty());
    pool.export().unwrap();
}

#[test]
fn checksum_fault_on_a_mirror_side_heals_and_io_fault_fails_a_single_disk() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (mkfile(d.path(), "a"), mkfile(d.path(), "b"));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    let pool = create("injmir", vec![TopSpec::Mirror(vec![a.clone(), b.clone()])]);
    let obj = {
        let os = pool.objset("injmir").unwrap();
        let obj = put(&*os, &data);
        os.wait_synced().unwrap();
        obj
    };
    let pool = reopen(pool, "injmir", d.path());
    let first = pool.leaf_devices()[0].clone();
    let id = pool.inject(first.guid, IoType::Read, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM).unwrap();
    let os = pool.objset("injmir").unwrap();
    let mut buf = vec![0u8; data.len()];
    os.read(obj, 0, &mut buf).unwrap();
    assert_eq!(buf, data);
    let status = pool.status();
    let mirror = &status.children[0];
    assert!(mirror.children[0].checksum_errors > 0, "{status:?}");
    assert_eq!(mirror.children[1].checksum_errors, 0);
    assert_eq!(pool.data_errors(), 0);
    assert!(inject::clear(id));
    drop(os);
    pool.export().unwrap();

    let c = mkfile(d.path(), "c");
    let pool = create("injone", vec![TopSpec::Leaf(c.clone())]);
    let obj = {
        let os = pool.objset("injone").unwrap();
        let obj = put(&*os, &data);
        os.wait_synced().unwrap();
        obj
    };
    let pool = reopen(pool, "injone", d.path());
    let leaf = pool.leaf_devices()[0].clone();
    let os = pool.objset("injone").unwrap();
    let id = pool.inject(leaf.guid, IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM).unwrap();
    assert!(os.read(obj, 0, &mut buf).is_err());
    let v = &pool.status().children[0];
    assert!(v.read_errors > 0, "{v:?}");
    assert!(pool.data_errors() > 0);
    assert!(inject::clear(id));
    os.read(obj, 0, &mut buf).unwrap();
    assert_eq!(buf, data, "normal again once cleared");
    drop(os);
    pool.export().unwrap();
}
