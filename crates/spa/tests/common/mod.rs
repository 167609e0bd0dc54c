//! Helpers shared by the spa integration tests.
#![allow(dead_code)]

/// xorshift64: a tiny seeded generator so failing seeds replay exactly.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish value in `0..n` (`n` = 0 is treated as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Abandon `pool` as a crash would (no export): drop it and wait until it and its sync
/// thread are gone and its leaves are closed (a power cut registered on `prefix` stays
/// in force meanwhile, since a dead machine writes nothing more), then lift the cut.
pub fn abandon(pool: std::sync::Arc<tarn_spa::Pool>, prefix: &str) {
    let leaves: Vec<String> = pool
        .zio()
        .vdevs()
        .iter()
        .flat_map(|t| t.leaves().into_iter().filter_map(|l| l.path().clone()))
        .collect();
    let weak = std::sync::Arc::downgrade(&pool);
    drop(pool);
    let t = std::time::Instant::now();
    while weak.strong_count() > 0 {
        assert!(t.elapsed().as_secs() < 30, "abandoned pool never went away");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The count reaches zero before the pool is dropped: when another thread (the sync
    // thread) held the last reference, the leaves may still be open there, holding
    // their flock, and an import now would pass them over as busy ("no such pool").
    for leaf in &leaves {
        while locked(leaf) {
            assert!(t.elapsed().as_secs() < 30, "abandoned pool never closed {leaf}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    tarn_vdev::inject::clear(prefix);
}

/// True while another open file description holds the `flock` of `path`.
fn locked(path: &str) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else { return false };
    // SAFETY: flock on a descriptor owned by `f`; closing `f` releases the lock.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

/// Deterministic incompressible bytes: [`tarn_testkit::pattern`].
// Not every test binary that includes this module uses it.
#[allow(unused_imports)]
pub use tarn_testkit::pattern;

/// Store `data` in a new file-data object whose bonus holds its length; returns the id.
pub fn put(os: &dyn tarn_dmu::ObjectStore, data: &[u8]) -> u64 {
    let tx = os.hold_tx().unwrap();
    let obj = os
        .create_object(&tx, tarn_dmu::ObjectType::FileData, 512, 128 << 10, &(data.len() as u64).to_le_bytes())
        .unwrap();
    os.write(&tx, obj, 0, data).unwrap();
    obj
}

/// The bytes stored by [`put`].
pub fn get(os: &dyn tarn_dmu::ObjectStore, obj: u64) -> Vec<u8> {
    let len = u64::from_le_bytes(os.bonus(obj).unwrap()[..8].try_into().unwrap());
    let mut buf = vec![0u8; len as usize];
    os.read(obj, 0, &mut buf).unwrap();
    buf
}

/// Create a sparse file of `size` bytes at `dir/name`.
pub fn mkfile(dir: &std::path::Path, name: &str, size: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

/// A pool named `name` on a 2-way mirror of `a.img`/`b.img` of `leaf_bytes` each in
/// `dir`, ashift 12.
pub fn mirror_pool(dir: &std::path::Path, name: &str, leaf_bytes: u64) -> std::sync::Arc<tarn_spa::Pool> {
    let a = mkfile(dir, "a.img", leaf_bytes);
    let b = mkfile(dir, "b.img", leaf_bytes);
    tarn_spa::Pool::create(&tarn_spa::CreateSpec {
        name: name.into(),
        vdevs: vec![tarn_spa::TopSpec::Mirror(vec![a, b])],
        ashift: 12,
        ..Default::default()
    })
    .unwrap()
}

/// Export `pool` and import it again from `dir`.
pub fn reimport(pool: std::sync::Arc<tarn_spa::Pool>, dir: &std::path::Path, name: &str) -> std::sync::Arc<tarn_spa::Pool> {
    pool.export().unwrap();
    drop(pool);
    tarn_spa::Pool::import(name, &[dir.to_path_buf()], tarn_spa::Rewind::None, None).unwrap()
}

/// Sync enough txgs for every deferred free to come back.
pub fn settle(pool: &tarn_spa::Pool) {
    for _ in 0..6 {
        pool.sync().unwrap();
    }
}

/// Property `p` of dataset `name` as `zfs get` shows it.
pub fn prop_value(pool: &tarn_spa::Pool, name: &str, p: &str) -> String {
    let all = pool.list_all().unwrap();
    let i = all.iter().find(|i| i.name == name).unwrap_or_else(|| panic!("{name} not listed"));
    i.props[p].0.clone()
}

/// Every file system and snapshot name, in listing order.
pub fn names(pool: &tarn_spa::Pool) -> Vec<String> {
    pool.list_all().unwrap().into_iter().map(|i| i.name).collect()
}

/// Everything a refused command must leave alone: every name with its origin, its
/// user-hold count and its defer flag, and the holds themselves.
pub fn state(pool: &tarn_spa::Pool) -> Vec<String> {
    pool.list_all()
        .unwrap()
        .into_iter()
        .map(|i| {
            let p = |k: &str| i.props.get(k).map(|v| v.0.clone()).unwrap_or_default();
            let holds = if i.name.contains('@') {
                format!("{:?}", pool.holds(&i.name).unwrap())
            } else {
                String::new()
            };
            format!(
                "{} origin={} userrefs={} defer={} {holds}",
                i.name,
                p("origin"),
                p("userrefs"),
                p("defer_destroy")
            )
        })
        .collect()
}

/// The message of an error the test expects.
pub fn err_of<T: std::fmt::Debug>(r: Result<T, tarn_spa::SpaError>) -> String {
    r.unwrap_err().to_string()
}

/// Mount dataset `name` of `pool` with its intent log and `recordsize_bytes` records.
pub fn zpl_mount(pool: &tarn_spa::Pool, name: &str, recordsize_bytes: u32) -> std::sync::Arc<tarn_zpl::Fs> {
    let opts = tarn_zpl::ZplOptions {
        recordsize_bytes,
        ..tarn_zpl::ZplOptions::default()
    };
    tarn_zpl::Fs::open_logged(pool.objset(name).unwrap(), pool.zilog(name).unwrap(), opts)
        .unwrap()
        .0
}

/// The whole content of file `ino`.
pub fn file_bytes(fs: &tarn_zpl::Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// A new object in dataset `ds` holding `blocks` records of `record_bytes` of
/// `pattern(seed, …)`, synced; returns the object set and the object.
pub fn write_object(pool: &tarn_spa::Pool, ds: &str, seed: u64, record_bytes: usize, blocks: usize) -> (std::sync::Arc<dyn tarn_dmu::ObjectStore>, u64) {
    let os = pool.objset(ds).unwrap();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, tarn_dmu::ObjectType::FileData, 512, record_bytes as u32, &[]).unwrap();
    os.write(&tx, obj, 0, &pattern(seed, record_bytes * blocks)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    (os, obj)
}

/// Each file `names[i]` in the root of `fs` holds exactly `model[i]` (`when` names the
/// moment for the message).
pub fn files_match(fs: &tarn_zpl::Fs, names: &[String], model: &[Vec<u8>], when: &str) {
    for (i, n) in names.iter().enumerate() {
        let ino = fs.lookup(fs.root(), n.as_bytes()).unwrap().ino;
        assert!(file_bytes(fs, ino) == model[i], "file {i} differs {when}");
    }
}

/// Unlink every file of `names` from the root of `fs`, then sync until every
/// deferred free is back.
pub fn delete_all(pool: &tarn_spa::Pool, fs: &tarn_zpl::Fs, names: &[String]) {
    for n in names {
        fs.unlink(fs.root(), n.as_bytes()).unwrap();
    }
    settle(pool);
}

/// Register `action` on every write to the leaf file at `path` (any pool); returns the
/// handler id for `tarn_vdev::inject::remove_handler`.
pub fn on_every_write(path: &std::path::Path, action: tarn_vdev::inject::Action) -> u64 {
    tarn_vdev::inject::add_handler(tarn_vdev::inject::HandlerSpec {
        pool: "test".into(),
        vdev_guid: 0,
        path: path.display().to_string(),
        io_type: tarn_vdev::inject::IoType::Write,
        action,
        freq_ppm: tarn_vdev::inject::FREQ_ALWAYS_PPM,
    })
}

/// Make every write to `a.img` and `b.img` in `dir` (the leaves of [`mirror_pool`])
/// take `latency_ms`, one at a time per leaf; returns the handler ids.
pub fn slow_mirror_writes(dir: &std::path::Path, latency_ms: u64) -> Vec<u64> {
    let slow = tarn_vdev::inject::Action::Delay(tarn_vdev::inject::Delay::Fixed {
        latency: std::time::Duration::from_millis(latency_ms),
        lanes: 1,
    });
    ["a.img", "b.img"].iter().map(|leaf| on_every_write(&dir.join(leaf), slow)).collect()
}
