//! Regression test for issue 13's ENOSPC: buffered 8 KiB random overwrites of a file
//! filling half of a pool with a separate log device, by four writers, then `fsync`,
//! must never fail, and every byte must read back as last written, also after an
//! export/import. (The issue measured fio error 28 with `bench/fio.sh`'s random-write
//! workload on a 4 GiB mirror with a 1 GiB log file; this is that shape, scaled down.)
//! Skipped, with a message, when FUSE is not usable here.

mod common;
use common::*;
use std::os::unix::fs::FileExt;

const MB: u64 = 1 << 20;
const FILE_BYTES: u64 = 96 * MB;
const WRITERS: u64 = 4;
const WRITES_PER_WRITER: u64 = 2500;
const BLOCK: u64 = 8192;

/// The bytes of one 8 KiB write: writer, sequence number and offset, repeated.
fn block(writer: u64, seq: u64, off: u64) -> Vec<u8> {
    let stamp = [writer.to_le_bytes(), seq.to_le_bytes(), off.to_le_bytes()].concat();
    stamp.iter().copied().cycle().take(BLOCK as usize).collect()
}

#[test]
fn random_overwrites_with_a_log_device_never_fail() {
    if !fuse_usable("random_overwrites_with_a_log_device_never_fail") {
        return;
    }
    let env = Env::new();
    let m = env.path().join("mnt");
    let ms = m.display().to_string();
    env.make_vdev("log.img", 64 * MB);
    let log = env.vdev("log.img");
    env.zpool(&["create", "-m", &ms, "-o", "size=192M", "tank", "mirror", "v/a", "v/b", "log", &log])
        .ok();
    let path = m.join("bench.dat");
    {
        // Fill half the pool with 1 MiB writes, as fio's sequential job does.
        let f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0x5au8; MB as usize];
        for i in 0..FILE_BYTES / MB {
            f.write_all_at(&chunk, i * MB).unwrap();
        }
        f.sync_all().unwrap();
    }
    // Cold, as the benchmark's random-write step runs: the overwrites' fills then read
    // every old record from disk and the txg syncs fall behind the writers, so dirty
    // data and deferred frees together pass the free space (the ENOSPC appeared only
    // after this step).
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    // Each writer owns the blocks whose index is its number modulo WRITERS, so the
    // last write of each block is known.
    let blocks = FILE_BYTES / BLOCK;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                let mut last = std::collections::BTreeMap::new();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ w;
                for seq in 0..WRITES_PER_WRITER {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let idx = (x % (blocks / WRITERS)) * WRITERS + w;
                    let off = idx * BLOCK;
                    f.write_all_at(&block(w, seq, off), off)
                        .unwrap_or_else(|e| panic!("writer {w}: write {seq} at {off} failed: {e}"));
                    last.insert(off, seq);
                }
                f.sync_all().unwrap_or_else(|e| panic!("writer {w}: fsync failed: {e}"));
                (w, last)
            })
        })
        .collect();
    let mut expect = std::collections::BTreeMap::new();
    for h in handles {
        let (w, last) = h.join().unwrap();
        for (off, seq) in last {
            expect.insert(off, (w, seq));
        }
    }
    let check = |when: &str| {
        let f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; BLOCK as usize];
        for (off, (w, seq)) in &expect {
            f.read_exact_at(&mut buf, *off).unwrap();
            assert!(buf == block(*w, *seq, *off), "{when}: block at {off} is not writer {w}'s write {seq}");
        }
    };
    check("before export");
    env.zpool(&["export", "tank"]).ok();
    env.zpool(&["import", "-d", &env.vdir().display().to_string(), "tank"]).ok();
    check("after import");
    env.zpool(&["export", "tank"]).ok();
}
