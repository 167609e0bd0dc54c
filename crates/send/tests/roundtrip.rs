//! Full and incremental send/receive between datasets on real pools (file vdevs),
//! compared file by file through zpl; compressed and large-block streams; resuming an
//! interrupted receive with its token.

mod common;
use common::*;
use tarn_dmu::ObjectStore;
use tarn_send::{receive, receive_stream, RecvOpts, RecvProgress, SendError, SendOpts, StreamReader};
use tarn_zpl::SetAttr;

/// Change about 1% of what `populate` wrote: overwrite, append, truncate, delete,
/// create, punch a hole, chmod, rename.
fn change_a_little(fs: &tarn_zpl::Fs, os: &dyn ObjectStore) {
    let big = lookup(fs, "a/big");
    fs.write(big, 1 << 20, &pattern(7, 8192)).unwrap();
    let small = lookup(fs, "small");
    let size = fs.getattr(small).unwrap().size;
    fs.write(small, size, b" appended").unwrap();
    let medium = lookup(fs, "a/b/medium");
    fs.setattr(
        medium,
        SetAttr {
            size: Some(70_000),
            ..Default::default()
        },
    )
    .unwrap();
    let many = lookup(fs, "many");
    fs.unlink(many, b"f0003").unwrap();
    fs.unlink(many, b"f0100").unwrap();
    write_file(fs, many, "new-one", &pattern(77, 5000));
    let d = fs.mkdir(fs.root(), b"newdir", 0o750, 5, 6).unwrap().ino;
    write_file(fs, d, "inside", &pattern(78, 50_000));
    fs.symlink(d, b"ln", b"../small", 0, 0).unwrap();
    // Punch a hole in the middle of the big file (two whole 128 KiB blocks).
    let tx = os.hold_tx().unwrap();
    os.free_range(&tx, big, 2 << 20, 256 << 10).unwrap();
    drop(tx);
    fs.setattr(
        lookup(fs, "many/f0005"),
        SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    fs.rename(many, b"f0006", fs.root(), b"moved", 0).unwrap();
}

#[test]
fn full_then_incremental_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), "sendrt");
    let src = dataset(&pool, "sendrt/src", &[]);
    let sfs = fs(&src);
    let written = populate(&sfs, 300, false);
    pool.sync().unwrap();

    // Full stream of the live dataset into a fresh one.
    let s1 = source(&src, None, 0x1111, "sendrt/src@one");
    let full = send_vec(&pool, &s1, &SendOpts::default());
    assert!(full.len() as u64 > written, "full stream {} < data {}", full.len(), written);
    let dst = dataset(&pool, "sendrt/dst", &[]);
    let info = receive(&mut &full[..], &dst, &RecvOpts::default()).unwrap();
    assert_eq!(info.header.to_guid, 0x1111);
    assert_eq!(info.stream_bytes, full.len() as u64);
    let n = compare(&sfs, &fs(&dst));
    assert!(n > 300, "compared {n} entries");

    // A full stream never goes into a dataset that has objects.
    let again = receive(&mut &full[..], &dst, &RecvOpts::default());
    assert!(matches!(again, Err(SendError::TargetNotEmpty)), "{again:?}");

    // Incremental: ~1% changed.
    let from_txg = s1.root.birth_txg;
    change_a_little(&sfs, &*src);
    pool.sync().unwrap();
    let s2 = source(&src, Some((from_txg, 0x1111)), 0x2222, "sendrt/src@two");
    let inc = send_vec(&pool, &s2, &SendOpts::default());
    eprintln!("full stream {} bytes, incremental {} bytes", full.len(), inc.len());
    assert!(inc.len() * 10 < full.len(), "incremental {} vs full {}", inc.len(), full.len());
    let info = receive(
        &mut &inc[..],
        &dst,
        &RecvOpts {
            expected_from_guid: Some(0x1111),
            resume: None,
        },
    )
    .unwrap();
    assert!(info.objects_freed >= 2, "{info:?}");
    compare(&sfs, &fs(&dst));

    // The incremental walk reads only what changed: count block reads (cold cache)
    // of a full and an incremental send of the same state.
    let reads = |src: &tarn_send::SendSource| {
        pool.zio().clear_cache();
        let before = pool.zio().io_activity();
        tarn_send::send(pool.zio(), src, &SendOpts::default(), &mut std::io::sink()).unwrap();
        pool.zio().io_activity() - before
    };
    let s2_full = tarn_send::SendSource {
        from_txg: None,
        from_guid: 0,
        ..s2.clone()
    };
    let (full_reads, inc_reads) = (reads(&s2_full), reads(&s2));
    eprintln!("block reads: full {full_reads}, incremental {inc_reads}");
    assert!(inc_reads * 5 < full_reads, "incremental read {inc_reads} blocks, full {full_reads}");

    // An empty incremental (nothing changed) is tiny and applies.
    let s3 = source(&src, Some((s2.root.birth_txg, 0x2222)), 0x3333, "sendrt/src@three");
    let empty = send_vec(&pool, &s3, &SendOpts::default());
    assert!(empty.len() < 300, "empty incremental is {} bytes", empty.len());
    receive(
        &mut &empty[..],
        &dst,
        &RecvOpts {
            expected_from_guid: Some(0x2222),
            resume: None,
        },
    )
    .unwrap();
    compare(&sfs, &fs(&dst));
    drop((sfs, src, dst));
    pool.export().unwrap();
}

/// `send -c` of datasets compressed with gzip, zstd and zle: the stream carries the
/// blocks compressed with their own algorithm (far smaller than a plain stream) and
/// receives identical.
#[test]
fn compressed_streams_of_every_family() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), "sendf");
    for (i, alg) in ["gzip-6", "zstd", "zle"].iter().enumerate() {
        let src = dataset(&pool, &format!("sendf/s{i}"), &[("compression", alg)]);
        let sfs = fs_recordsize(&src, 128 << 10);
        populate(&sfs, 20, true);
        pool.sync().unwrap();
        let s = source(&src, None, 0x100 + i as u64, &format!("sendf/s{i}@c"));
        let plain = send_vec(&pool, &s, &SendOpts::default());
        let comp = send_vec(
            &pool,
            &s,
            &SendOpts {
                compressed: true,
                ..Default::default()
            },
        );
        assert!(comp.len() < plain.len(), "{alg}: compressed {} vs plain {}", comp.len(), plain.len());
        let dst = dataset(&pool, &format!("sendf/d{i}"), &[]);
        receive(&mut &comp[..], &dst, &RecvOpts::default()).unwrap();
        compare(&sfs, &fs(&dst));
    }
    pool.export().unwrap();
}

#[test]
fn compressed_and_large_block_streams() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), "sendc");
    let src = dataset(&pool, "sendc/src", &[("compression", "lz4"), ("recordsize", "1M")]);
    let sfs = fs_recordsize(&src, 1 << 20);
    populate(&sfs, 40, true);
    pool.sync().unwrap();
    let s = source(&src, None, 0xabc, "sendc/src@c");

    let plain = send_vec(&pool, &s, &SendOpts::default());
    let comp = send_vec(
        &pool,
        &s,
        &SendOpts {
            compressed: true,
            large_blocks: true,
            ..Default::default()
        },
    );
    assert!(comp.len() * 2 < plain.len(), "compressed {} vs plain {}", comp.len(), plain.len());
    for (name, stream) in [("plain", &plain), ("comp", &comp)] {
        let dst = dataset(&pool, &format!("sendc/{name}"), &[]);
        receive(&mut &stream[..], &dst, &RecvOpts::default()).unwrap();
        if name == "plain" {
            compare_split(&sfs, &fs(&dst));
        } else {
            compare(&sfs, &fs(&dst));
        }
    }
    // Without -L the 1 MiB blocks arrive as 128 KiB blocks.
    let dst = pool.objset_concrete("sendc/plain").unwrap();
    let big = lookup(&fs(&dst), "a/big");
    assert_eq!(dst.object_info(big).unwrap().datablksz_bytes, 128 << 10);
    let big_src = lookup(&sfs, "a/big");
    assert_eq!(src.object_info(big_src).unwrap().datablksz_bytes, 1 << 20);

    // An incremental onto the -L copy must be sent with -L too.
    sfs.write(big_src, 100, b"changed").unwrap();
    pool.sync().unwrap();
    let s2 = source(&src, Some((s.root.birth_txg, 0xabc)), 0xabd, "sendc/src@d");
    let comp_dst = pool.objset_concrete("sendc/comp").unwrap();
    let opts = RecvOpts {
        expected_from_guid: Some(0xabc),
        resume: None,
    };
    let split = send_vec(&pool, &s2, &SendOpts::default());
    let e = receive(&mut &split[..], &comp_dst, &opts).unwrap_err();
    assert!(matches!(e, SendError::NeedsLargeBlocks { .. }), "{e}");
    let whole = send_vec(
        &pool,
        &s2,
        &SendOpts {
            large_blocks: true,
            ..Default::default()
        },
    );
    receive(&mut &whole[..], &comp_dst, &opts).unwrap();
    compare(&sfs, &fs(&comp_dst));
    drop(comp_dst);
    drop((sfs, src, dst));
    pool.export().unwrap();
}

#[test]
fn interrupted_receive_resumes_with_token() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), "sendres");
    let src = dataset(&pool, "sendres/src", &[]);
    let sfs = fs(&src);
    populate(&sfs, 120, false);
    pool.sync().unwrap();
    let s = source(&src, None, 0x5151, "sendres/src@r");
    let full = send_vec(&pool, &s, &SendOpts::default());
    let dst = dataset(&pool, "sendres/dst", &[]);

    // The connection drops after 60% of the stream.
    let cut = &full[..full.len() * 6 / 10];
    let mut reader = StreamReader::new(cut).unwrap();
    assert_eq!(reader.header().to_name, "sendres/src@r");
    let mut progress = RecvProgress::default();
    let err = receive_stream(&mut reader, &dst, &RecvOpts::default(), &mut progress).unwrap_err();
    assert!(matches!(err, SendError::Truncated { .. }), "{err}");
    dst.wait_synced().unwrap();
    let token = progress.resume_token().unwrap();
    assert!(token.object > 1 && token.bytes > 0, "{token:?}");
    let text = token.encode();
    let token = tarn_send::ResumeToken::decode(&text).unwrap();

    // Resuming needs the token on both sides.
    let resumed = send_vec(
        &pool,
        &s,
        &SendOpts {
            resume: Some(token.clone()),
            ..Default::default()
        },
    );
    assert!(resumed.len() < full.len() * 6 / 10, "resumed {} of {}", resumed.len(), full.len());
    let no_token = receive(&mut &resumed[..], &dst, &RecvOpts::default());
    assert!(matches!(no_token, Err(SendError::ResumeMismatch(_))), "{no_token:?}");
    receive(
        &mut &resumed[..],
        &dst,
        &RecvOpts {
            expected_from_guid: None,
            resume: Some(token),
        },
    )
    .unwrap();
    compare(&sfs, &fs(&dst));

    // The same for an incremental stream, cut in its middle.
    change_a_little(&sfs, &*src);
    pool.sync().unwrap();
    let s2 = source(&src, Some((s.root.birth_txg, 0x5151)), 0x5252, "sendres/src@r2");
    let inc = send_vec(&pool, &s2, &SendOpts::default());
    let base = RecvOpts {
        expected_from_guid: Some(0x5151),
        resume: None,
    };
    let mut reader = StreamReader::new(&inc[..inc.len() / 2]).unwrap();
    let mut progress = RecvProgress::default();
    let err = receive_stream(&mut reader, &dst, &base, &mut progress).unwrap_err();
    assert!(matches!(err, SendError::Truncated { .. }), "{err}");
    dst.wait_synced().unwrap();
    let token = progress.resume_token().unwrap();
    assert_eq!((token.to_guid, token.from_guid), (0x5252, 0x5151));
    let resumed = send_vec(
        &pool,
        &s2,
        &SendOpts {
            resume: Some(token.clone()),
            ..Default::default()
        },
    );
    receive(&mut &resumed[..], &dst, &RecvOpts { resume: Some(token), ..base }).unwrap();
    compare(&sfs, &fs(&dst));
    drop((sfs, src, dst));
    pool.export().unwrap();
}

/// Object-level checks through the DMU alone: an id freed and claimed again with
/// another type and block size, a growing first block, a truncation to zero, and a
/// receive into another pool.
#[test]
fn objects_replaced_grown_and_truncated() {
    use tarn_dmu::ObjectType;
    let dir = tempfile::tempdir().unwrap();
    let pool_a = pool(dir.path(), "sendobja");
    let pool_b = pool(dir.path(), "sendobjb");
    let src = dataset(&pool_a, "sendobja/src", &[]);
    let tx = src.hold_tx().unwrap();
    let a = src.create_object(&tx, ObjectType::FileData, 512, 128 << 10, b"bonus-a").unwrap();
    src.write(&tx, a, 0, &pattern(1, 300 << 10)).unwrap();
    let b = src.create_object(&tx, ObjectType::FileData, 512, 128 << 10, b"bonus-b").unwrap();
    src.write(&tx, b, 0, &pattern(2, 3000)).unwrap();
    let c = src.create_object(&tx, ObjectType::FileData, 512, 128 << 10, b"").unwrap();
    src.write(&tx, c, 0, &pattern(3, 200 << 10)).unwrap();
    drop(tx);
    pool_a.sync().unwrap();
    let s1 = source(&src, None, 0x71, "sendobja/src@1");
    let full = send_vec(&pool_a, &s1, &SendOpts::default());
    let dst = dataset(&pool_b, "sendobjb/dst", &[]);
    receive(&mut &full[..], &dst, &RecvOpts::default()).unwrap();

    let tx = src.hold_tx().unwrap();
    src.free_object(&tx, a).unwrap();
    src.write(&tx, b, 3000, &pattern(4, 7000)).unwrap(); // first block grows 3072 -> 10240
    src.free_range(&tx, c, 0, u64::MAX).unwrap();
    drop(tx);
    pool_a.sync().unwrap();
    let tx = src.hold_tx().unwrap();
    src.claim_object(&tx, a, ObjectType::Zap, 4096, 4096, b"zap now").unwrap();
    src.write(&tx, a, 0, &pattern(5, 20_000)).unwrap();
    drop(tx);
    pool_a.sync().unwrap();
    let s2 = source(&src, Some((s1.root.birth_txg, 0x71)), 0x72, "sendobja/src@2");
    let inc = send_vec(&pool_a, &s2, &SendOpts::default());
    receive(
        &mut &inc[..],
        &dst,
        &RecvOpts {
            expected_from_guid: Some(0x71),
            resume: None,
        },
    )
    .unwrap();
    for obj in [a, b, c] {
        let (i, j) = (src.object_info(obj).unwrap(), dst.object_info(obj).unwrap());
        assert_eq!(
            (i.otype, i.datablksz_bytes, i.maxblkid),
            (j.otype, j.datablksz_bytes, j.maxblkid),
            "object {obj}"
        );
        assert_eq!(src.bonus(obj).unwrap(), dst.bonus(obj).unwrap());
        let len = (i.maxblkid + 1) * i.datablksz_bytes as u64;
        let (mut x, mut y) = (vec![0u8; len as usize], vec![0u8; len as usize]);
        src.read(obj, 0, &mut x).unwrap();
        dst.read(obj, 0, &mut y).unwrap();
        assert!(x == y, "object {obj} contents");
    }
    assert_eq!(dst.object_info(a).unwrap().otype, ObjectType::Zap);
    assert_eq!(dst.object_info(b).unwrap().datablksz_bytes, 10240);
    drop((src, dst));
    pool_a.export().unwrap();
    pool_b.export().unwrap();
}

/// The read-ahead runs ahead of the object being written: the data blocks of many
/// one-block files, adjacent on disk, are read in aggregated batches (a few device
/// reads), not one device read per file, and the stream is still exact.
#[test]
fn read_ahead_crosses_files() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), "sendra");
    let src = dataset(&pool, "sendra/src", &[]);
    let sfs = fs(&src);
    const FILES: usize = 64;
    for i in 0..FILES {
        write_file(&sfs, sfs.root(), &format!("f{i:03}"), &pattern(i as u64, 64 << 10));
    }
    pool.sync().unwrap();
    let s = source(&src, None, 0x5151, "sendra/src@one");
    let device_reads = || -> u64 {
        pool.zio()
            .vdevs()
            .iter()
            .map(|v| v.stats().read_ops.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    };
    pool.zio().clear_cache();
    let before = device_reads();
    let full = send_vec(&pool, &s, &SendOpts::default());
    let reads = device_reads() - before;
    eprintln!("{reads} device reads for {FILES} one-block files and their metadata");
    assert!(reads < FILES as u64 / 2, "{reads} device reads for {FILES} files");
    let dst = dataset(&pool, "sendra/dst", &[]);
    receive(&mut &full[..], &dst, &RecvOpts::default()).unwrap();
    assert_eq!(compare(&sfs, &fs(&dst)), FILES);
}
