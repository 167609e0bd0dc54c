//! `tarn zdb`: every option on an exported pool (the device files' bytes unchanged) and
//! on an imported one (the daemon keeps working), the leak check passing after a
//! workload and failing on a pool with a leaked allocation, a corrupt label, `-R`
//! returning a file's bytes, and refused options.

mod common;
use common::{xorshift_bytes, Env};
use std::hash::Hasher;
use std::path::Path;

/// A hash of every byte of a file (to prove zdb wrote nothing).
fn file_hash(path: &str) -> u64 {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.write(&buf[..n]);
    }
    h.finish()
}

fn zdb(env: &Env, args: &[&str]) -> common::Out {
    let mut v = vec!["zdb"];
    v.extend_from_slice(args);
    env.tarn(&v)
}

/// Deterministic incompressible bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    xorshift_bytes(len, seed)
}

/// Pool `tank` on v/a with file systems, snapshots and a destroy; with FUSE also a
/// file `tank/fs/f` of 64 KiB of random bytes and a compressible one `tank/fs/z`
/// (`compression=lz4`), returned with their object ids.
fn workload(env: &Env) -> Option<[(u64, Vec<u8>); 2]> {
    let m = env.mounted_pool(&[]);
    env.zfs(&["create", "-o", "compression=lz4", "tank/fs"]).ok();
    env.zfs(&["snapshot", "tank/fs@s1"]).ok();
    env.zfs(&["create", "tank/gone"]).ok();
    env.zfs(&["snapshot", "tank/gone@x"]).ok();
    env.zfs(&["destroy", "-r", "tank/gone"]).ok();
    let mut file = None;
    if common::fuse_usable("zdb workload file") {
        let p = m.join("fs").join("f");
        let data = pattern(64 << 10, 7);
        std::fs::write(&p, &data).unwrap();
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
        let z = m.join("fs").join("z");
        let text: Vec<u8> = (0..4096)
            .flat_map(|i| format!("line {i:08} of a text file\n").into_bytes())
            .take(64 << 10)
            .collect();
        std::fs::write(&z, &text).unwrap();
        let zino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&z).unwrap());
        file = Some([(ino, data), (zino, text)]);
    }
    env.zfs(&["snapshot", "tank/fs@s2"]).ok();
    env.zfs(&["destroy", "tank/fs@s1"]).ok();
    env.zpool(&["sync", "tank"]).ok();
    file
}

#[test]
fn every_option_on_an_exported_pool_writes_nothing() {
    let env = Env::new();
    let a = env.make_vdev("a", 256 << 20);
    let file = workload(&env);
    env.zpool(&["export", "tank"]).ok();
    let mut before = file_hash(&a);
    let v = env.vdir().display().to_string();

    let c = zdb(&env, &["-e", "-p", &v, "-C", "tank"]).ok();
    assert!(c.stdout.contains("MOS Configuration:"), "{c:?}");
    assert!(c.stdout.contains("name: 'tank'"), "{c:?}");
    assert!(c.stdout.contains(&format!("path: '{a}'")), "{c:?}");

    let u = zdb(&env, &["-e", "-p", &v, "-u", "tank"]).ok();
    assert!(u.stdout.contains("Uberblock:"), "{u:?}");
    assert!(u.stdout.contains(&format!("\tmagic = {:016x}\n", tarn_phys::UBERBLOCK_MAGIC)), "{u:?}");
    assert!(u.stdout.contains(&format!("\tversion = {}\n", tarn_phys::TARN_FORMAT_VERSION)), "{u:?}");
    assert!(u.stdout.contains("rootbp = DVA[0]=<0:"), "{u:?}");
    assert!(u.stdout.contains("[L0 DMU objset]"), "{u:?}");

    let h = zdb(&env, &["-e", "-p", &v, "-h", "tank"]).ok();
    assert!(h.stdout.contains("History:"), "{h:?}");
    assert!(h.stdout.contains("zfs create -o compression=lz4 tank/fs"), "{h:?}");
    assert!(h.stdout.contains("zfs destroy tank/fs@s1"), "{h:?}");

    let m = zdb(&env, &["-e", "-p", &v, "-m", "tank"]).ok();
    assert!(m.stdout.contains("Metaslabs:"), "{m:?}");
    assert!(m.stdout.contains("\tmetaslab      0   offset            0   spacemap"), "{m:?}");
    assert!(!m.stdout.contains("space map: flushed txg"), "{m:?}");
    let mm = zdb(&env, &["-e", "-p", &v, "-mm", "tank"]).ok();
    assert!(mm.stdout.contains("space map: flushed txg"), "{mm:?}");

    let b = zdb(&env, &["-e", "-p", &v, "-b", "tank"]).ok();
    assert!(b.stdout.contains("No leaks (block sum matches space maps exactly)"), "{b:?}");
    assert!(b.stdout.contains("bp count:"), "{b:?}");
    assert!(!b.stdout.contains("\tType\n"), "{b:?}");
    let bb = zdb(&env, &["-e", "-p", &v, "-bb", "tank"]).ok();
    assert!(bb.stdout.contains("Blocks\tLSIZE\tPSIZE\tASIZE\t  avg\t comp\t%Total\tType\n"), "{bb:?}");
    assert!(bb.stdout.contains("\tDMU dnode\n"), "{bb:?}");
    assert!(bb.stdout.contains("\tZAP\n"), "{bb:?}");
    if file.is_some() {
        assert!(bb.stdout.contains("\tZFS plain file\n"), "{bb:?}");
    }
    let total = bb.stdout.lines().find(|l| l.ends_with("\tTotal")).expect("Total row");
    assert!(total.contains("100.00"), "{total}");

    let d = zdb(&env, &["-e", "-p", &v, "-d", "tank"]).ok();
    assert!(d.stdout.contains("Dataset tank [ZPL], ID "), "{d:?}");
    assert!(d.stdout.contains("Dataset tank/fs [ZPL], ID "), "{d:?}");
    assert!(d.stdout.contains("Dataset tank/fs@s2 [ZPL], ID "), "{d:?}");
    assert!(!d.stdout.contains("tank/fs@s1"), "{d:?}");
    assert!(!d.stdout.contains("tank/gone"), "{d:?}");
    let dd = zdb(&env, &["-e", "-p", &v, "-dd", "tank/fs"]).ok();
    assert!(
        dd.stdout.contains("    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type"),
        "{dd:?}"
    );
    assert!(dd.stdout.contains("DMU dnode"), "{dd:?}");

    let l = zdb(&env, &["-l", &a]).ok();
    assert_eq!(l.stdout.matches("LABEL ").count(), 4, "{l:?}");
    assert!(l.stdout.contains("name: 'tank'") && l.stdout.contains("state: 1"), "{l:?}");

    if let Some([(ino, data), (zino, text)]) = file {
        let d4 = zdb(&env, &["-e", "-p", &v, "-dddd", "tank/fs", &ino.to_string()]).ok();
        assert!(d4.stdout.contains("ZFS plain file"), "{d4:?}");
        assert!(d4.stdout.contains("\tdnode maxblkid: 0"), "{d4:?}");
        // The file's one block: read it back raw with -R.
        let after = &d4.stdout[d4.stdout.find("ZFS plain file").unwrap()..];
        let bp = after.lines().find(|l| l.starts_with("\tblkptr: DVA[0]=<")).expect("blkptr line");
        assert!(bp.contains("[L0 ZFS plain file]"), "{bp}");
        let dva = &bp[bp.find('<').unwrap() + 1..bp.find('>').unwrap()];
        let parts: Vec<&str> = dva.split(':').collect();
        let sizes = bp.split("size=").nth(1).unwrap();
        let psize = sizes.split('/').nth(1).unwrap().split('P').next().unwrap();
        let spec = format!("{}:{}:{}:r", parts[0], parts[1], psize);
        let r = env.command(&["zdb", "-e", "-p", &v, "-R", "tank", &spec]).output().unwrap();
        assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(&r.stdout[..data.len()], &data[..], "-R returns the file's bytes");
        let hexed = zdb(&env, &["-e", "-p", &v, "-R", "tank", &format!("{}:{}:{}", parts[0], parts[1], psize)]).ok();
        let first = u64::from_le_bytes(data[..8].try_into().unwrap());
        assert!(hexed.stdout.contains(&format!("000000:  {first:016x}")), "{hexed:?}");

        // The compressible file's block is stored lz4: -R with `d` gives its bytes.
        let dz = zdb(&env, &["-e", "-p", &v, "-dddd", "tank/fs", &zino.to_string()]).ok();
        let bp = dz.stdout.lines().rfind(|l| l.contains("[L0 ZFS plain file]")).expect("blkptr line");
        assert!(bp.contains(" lz4 size=10000L/"), "{bp}");
        let dva = &bp[bp.find('<').unwrap() + 1..bp.find('>').unwrap()];
        let parts: Vec<&str> = dva.split(':').collect();
        let sizes = bp.split("size=").nth(1).unwrap();
        let psize = sizes.split('/').nth(1).unwrap().split('P').next().unwrap();
        let spec = format!("{}:{}:10000/{}:dr", parts[0], parts[1], psize);
        let r = env.command(&["zdb", "-e", "-p", &v, "-R", "tank", &spec]).output().unwrap();
        assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(r.stdout, text, "-R :dr returns the decompressed block");
        assert!(String::from_utf8_lossy(&r.stderr).contains("(lz4) succeeded"));

        // -S: a copy of the random file makes its one block a refcount-2 entry.
        env.zpool(&["import", "-d", &v, "tank"]).ok();
        let m = env.path().join("mnt");
        std::fs::write(m.join("fs").join("copy"), &data).unwrap();
        env.zpool(&["export", "tank"]).ok();
        let sim = zdb(&env, &["-e", "-p", &v, "-S", "tank"]).ok();
        assert!(sim.stdout.contains("Simulated DDT histogram:"), "{sim:?}");
        assert!(
            sim.stdout.contains("refcnt   blocks   LSIZE   PSIZE   DSIZE   blocks   LSIZE   PSIZE   DSIZE"),
            "{sim:?}"
        );
        let two = sim.stdout.lines().find(|l| l.starts_with("     2 ")).expect("refcnt 2 row");
        let cols: Vec<&str> = two.split_whitespace().collect();
        assert_eq!((cols[1], cols[2], cols[5], cols[6]), ("1", "64K", "2", "128K"), "{two}");
        let summary = sim.stdout.lines().find(|l| l.starts_with("dedup = ")).expect("summary");
        assert!(
            summary.contains(", compress = ") && summary.contains(", copies = 1.00, dedup * compress / copies = "),
            "{summary}"
        );
        assert!(!summary.starts_with("dedup = 1.00,"), "{summary}");

        // -D / -DD: the pool's own dedup table (empty until dedup is on).
        let d = zdb(&env, &["-e", "-p", &v, "-D", "tank"]).ok();
        assert!(d.stdout.contains("All DDTs are empty"), "{d:?}");
        env.zpool(&["import", "-d", &v, "tank"]).ok();
        env.zfs(&["set", "dedup=on", "tank/fs"]).ok();
        for n in ["d1", "d2"] {
            std::fs::write(m.join("fs").join(n), &data[..32 << 10]).unwrap();
        }
        env.zpool(&["export", "tank"]).ok();
        let dd = zdb(&env, &["-e", "-p", &v, "-DD", "tank"]).ok();
        assert!(
            dd.stdout.contains("DDT-sha256-zap-duplicate: 1 entries, size 128 on disk, 144 in core\n"),
            "{dd:?}"
        );
        assert!(dd.stdout.contains("DDT histogram (aggregated over all DDTs):"), "{dd:?}");
        let two = dd.stdout.lines().rfind(|l| l.starts_with("     2 ")).expect("refcnt 2 row");
        let cols: Vec<&str> = two.split_whitespace().collect();
        assert_eq!((cols[1], cols[5]), ("1", "2"), "{two}");
        assert!(dd.stdout.contains("dedup = 2.00, compress = 1.00, copies = 1.00"), "{dd:?}");
        zdb(&env, &["-e", "-p", &v, "-DDDD", "tank"]).fails_with("is not supported");
        before = file_hash(&a);
    }

    assert_eq!(file_hash(&a), before, "zdb changed the device file");
    // Still importable, and what zdb read is what the pool holds.
    env.zpool(&["import", "-d", &v, "tank"]).ok();
    env.zfs(&["list", "tank/fs@s2"]).ok();
}

#[test]
fn zdb_beside_the_daemon_sees_the_pool_and_disturbs_nothing() {
    let env = Env::new();
    env.make_vdev("a", 256 << 20);
    workload(&env);
    let c = zdb(&env, &["-C", "tank"]).ok();
    assert!(c.stdout.contains("name: 'tank'"), "{c:?}");
    let b = zdb(&env, &["-bb", "tank"]).ok();
    assert!(b.stdout.contains("No leaks"), "{b:?}");
    for opt in ["-u", "-h", "-m", "-d"] {
        zdb(&env, &[opt, "tank"]).ok();
    }
    zdb(&env, &["-dddd", "tank/fs"]).ok();
    // The daemon still owns the pool and keeps writing.
    // Not mounted: its object set is never written, an empty file system to zdb.
    env.zfs(&["create", "-u", "tank/after"]).ok();
    env.zpool(&["sync", "tank"]).ok();
    let d = zdb(&env, &["-d", "tank"]).ok();
    assert!(d.stdout.contains("Dataset tank/after [ZPL]"), "zdb sees the last synced txg: {d:?}");
    let st = env.zpool(&["status", "tank"]).ok();
    assert!(st.stdout.contains("ONLINE"), "{st:?}");
    zdb(&env, &["-b", "tank"]).ok();
    // A pool the daemon does not know, without -e: zdb's wording.
    zdb(&env, &["-C", "nosuch"]).fails_with("zdb: can't open 'nosuch': No such file or directory");
}

#[test]
fn a_leaked_allocation_fails_the_block_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a");
    std::fs::File::create(&path).unwrap().set_len(128 << 20).unwrap();
    {
        let pool = tarn_spa::Pool::create(&tarn_spa::CreateSpec {
            name: "leaky".into(),
            vdevs: vec![tarn_spa::TopSpec::Leaf(path.clone())],
            ..Default::default()
        })
        .unwrap();
        pool.create_dataset("leaky/fs", &Default::default()).unwrap();
        pool.sync().unwrap();
        pool.leak_check().unwrap();
        // Allocate space that no block pointer names, and make it durable.
        let off = pool.zio().with_space(|s| s.vdevs[0].alloc(64 << 10)).expect("space");
        assert!(off > 0);
        pool.sync().unwrap();
        pool.export().unwrap();
    }
    let env = Env::new();
    let d = dir.path().display().to_string();
    let out = zdb(&env, &["-e", "-p", &d, "-b", "leaky"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stdout.contains("leak in ["), "{out:?}");
    assert!(!out.stdout.contains("No leaks"), "{out:?}");
}

#[test]
fn corrupt_labels_and_bad_input_get_clear_errors() {
    let env = Env::new();
    let a = env.make_vdev("a", 256 << 20);
    env.mounted_pool(&[]);
    env.zpool(&["export", "tank"]).ok();
    // Garbage over every label (two at the front, two at the end).
    let size = std::fs::metadata(&a).unwrap().len();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        let junk = pattern(512 << 10, 3);
        f.write_all_at(&junk, 0).unwrap();
        f.write_all_at(&junk, size - (512 << 10)).unwrap();
    }
    let before = file_hash(&a);
    let l = zdb(&env, &["-l", &a]);
    assert_eq!(l.code, 2, "{l:?}");
    assert_eq!(l.stdout.matches("failed to unpack label").count(), 4, "{l:?}");
    let v = env.vdir().display().to_string();
    zdb(&env, &["-e", "-p", &v, "-C", "tank"]).fails_with("zdb: can't open 'tank'");
    assert_eq!(file_hash(&a), before);
    // A device that is not there.
    zdb(&env, &["-l", &env.vdev("missing")]).fails_with("zdb: can't open");
    // Options Tarn does not implement are refused with the usage text.
    zdb(&env, &["-c", "tank"]).fails_with("zdb: invalid option -- 'c'");
    zdb(&env, &["-G", "tank"]).fails_with("Usage:");
    // -R with a malformed specifier or flag.
    let b = env.make_vdev("b", 256 << 20);
    let _ = b;
    env.zpool(&["create", "t2", "v/b"]).ok();
    zdb(&env, &["-R", "t2", "0:zz:200"]).fails_with("Invalid block specifier");
    zdb(&env, &["-R", "t2", "0:0:200:x"]).fails_with("***Invalid flag x");
    zdb(&env, &["-R", "t2", "7:0:200"]).fails_with("invalid vdev 7");
    zdb(&env, &["-R", "t2", "0:0:ffffffff"]).fails_with("invalid block size");
    assert!(Path::new(&a).exists());
}

/// Every byte zdb reads is untrusted: with junk written over a metadata block (the MOS
/// root, a meta-dnode, an object's block), one at a time, every option ends with output or an error, never a
/// panic; and the copy of the device under test is the only thing changed.
#[test]
fn damaged_pools_give_errors_not_panics() {
    let env = Env::new();
    let a = env.make_vdev("a", 256 << 20);
    workload(&env);
    env.zpool(&["export", "tank"]).ok();
    let pristine = std::fs::read(&a).unwrap();
    let v = env.vdir().display().to_string();
    // Where metadata lives: the MOS root and every object's root block pointer.
    let mut text = zdb(&env, &["-e", "-p", &v, "-u", "tank"]).ok().stdout;
    text += &zdb(&env, &["-e", "-p", &v, "-dddd", "tank"]).ok().stdout;
    // One entry per block pointer: the offsets of all its copies (metadata has two,
    // and a read heals from the good one, so every copy is smeared).
    let blocks: Vec<Vec<u64>> = text
        .lines()
        .filter(|l| l.contains("DVA[0]=<0:"))
        .map(|l| {
            l.match_indices("=<0:")
                .map(|(i, _)| {
                    let rest = &l[i + 4..];
                    u64::from_str_radix(&rest[..rest.find(':').unwrap()], 16).unwrap()
                })
                .collect()
        })
        .collect();
    assert!(blocks.len() > 4, "{text}");
    let start = tarn_phys::label::DATA_START_BYTES;
    let mut errors = 0;
    for (seed, copies) in blocks.iter().enumerate() {
        let seed = seed as u64 + 1;
        std::fs::write(&a, &pristine).unwrap();
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
            for off in copies {
                f.write_all_at(&pattern(64, seed), start + off + 8 * seed).unwrap();
            }
        }
        for opts in [&["-C"][..], &["-u"], &["-h"], &["-mm"], &["-bb"], &["-dddd"]] {
            let mut args: Vec<&str> = vec!["-e", "-p", &v];
            args.extend_from_slice(opts);
            args.push("tank");
            let out = zdb(&env, &args);
            assert!(out.code == 0 || out.code == 1 || out.code == 2, "seed {seed} {opts:?}: {out:?}");
            assert!(!out.stderr.contains("panicked"), "seed {seed} {opts:?}: {out:?}");
            errors += usize::from(out.code != 0 || out.stdout.contains("traversal failed"));
        }
    }
    // Every smear lands on a block zdb reads: each is noticed somewhere.
    assert!(errors >= blocks.len(), "damage went unnoticed ({errors} errors)");
    // Undamaged again, for the leak check on drop.
    std::fs::write(&a, &pristine).unwrap();
}
