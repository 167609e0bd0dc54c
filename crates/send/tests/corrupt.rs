//! Damaged and misdirected streams: every flipped byte, every truncation point, records
//! spliced in from another stream, and streams for the wrong base are refused with a
//! clear error and never a panic; refused-before-start streams leave the target alone.

mod common;
use common::*;
use tarn_send::stream::{CHECKSUM_SIZE_BYTES, PREFIX_SIZE_BYTES, RECORD_HEADER_SIZE_BYTES};
use tarn_send::{receive, RecvOpts, SendError, SendOpts, StreamReader};

/// Read every record of `bytes`; the first error, or `None` when it reads to END.
fn read_all(bytes: &[u8]) -> Option<SendError> {
    let mut r = match StreamReader::new(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    loop {
        match r.next_record() {
            Ok(tarn_send::Record::End { .. }) => return None,
            Ok(_) => {}
            Err(e) => return Some(e),
        }
    }
}

/// Byte ranges of the records of a well-formed stream.
fn record_spans(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = PREFIX_SIZE_BYTES;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = at + RECORD_HEADER_SIZE_BYTES + len + CHECKSUM_SIZE_BYTES;
        out.push(at..end);
        at = end;
    }
    assert_eq!(at, bytes.len());
    out
}

struct Setup {
    _dir: tempfile::TempDir,
    pool: std::sync::Arc<tarn_spa::Pool>,
    full: Vec<u8>,
    inc: Vec<u8>,
    other: Vec<u8>,
}

fn setup(name: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), name);
    let src = dataset(&pool, &format!("{name}/src"), &[]);
    let sfs = fs(&src);
    // A small tree keeps every-Nth-byte damage cheap: each trial rereads the stream.
    let root = sfs.root();
    let d = sfs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..6u64 {
        write_file(&sfs, d, &format!("f{i}"), &pattern(i, 700 + 1500 * i as usize));
    }
    sfs.symlink(root, b"l", b"d/f1", 0, 0).unwrap();
    let sp = write_file(&sfs, root, "sparse", &pattern(9, 100));
    sfs.write(sp, 1 << 20, b"end").unwrap();
    pool.sync().unwrap();
    let s1 = source(&src, None, 0x10, "x@1");
    let full = send_vec(&pool, &s1, &SendOpts::default());
    // The same objects sent as another stream (another to-guid).
    let other = send_vec(&pool, &source(&src, None, 0x99, "x@1"), &SendOpts::default());
    let from = s1.root.birth_txg;
    write_file(&sfs, sfs.root(), "later", &pattern(5, 3000));
    pool.sync().unwrap();
    let inc = send_vec(&pool, &source(&src, Some((from, 0x10)), 0x20, "x@2"), &SendOpts::default());
    Setup {
        _dir: dir,
        pool,
        full,
        inc,
        other,
    }
}

#[test]
fn flipped_bytes_and_truncations_are_refused() {
    let s = setup("corr1");
    assert!(read_all(&s.full).is_none());
    // Flip one byte at every Nth position (and each of the first 200): always an error.
    let step = (s.full.len() / 1500).max(1) | 1;
    let positions: Vec<usize> = (0..200).chain((200..s.full.len()).step_by(step)).collect();
    for &i in &positions {
        let mut b = s.full.clone();
        b[i] ^= 0x5a;
        let e = read_all(&b).unwrap_or_else(|| panic!("flip at {i} accepted"));
        assert!(
            matches!(
                e,
                SendError::Checksum { .. } | SendError::Corrupt { .. } | SendError::Truncated { .. } | SendError::BadMagic | SendError::Version(_)
            ),
            "flip at {i}: {e}"
        );
        assert!(!e.to_string().is_empty());
    }
    // Cut anywhere: always "truncated".
    for cut in (0..s.full.len()).step_by(step * 3).chain([s.full.len() - 1, s.full.len() - 33]) {
        let e = read_all(&s.full[..cut]).unwrap_or_else(|| panic!("cut at {cut} accepted"));
        assert!(matches!(e, SendError::Truncated { .. }), "cut at {cut}: {e}");
    }
    // A few damaged streams through a real receive: refused, never a panic.
    for (k, &i) in [20usize, 200, s.full.len() / 2, s.full.len() - 10].iter().enumerate() {
        let dst = dataset(&s.pool, &format!("corr1/d{k}"), &[]);
        let mut b = s.full.clone();
        b[i] ^= 1;
        let e = receive(&mut &b[..], &dst, &RecvOpts::default()).unwrap_err();
        assert!(matches!(e, SendError::Checksum { .. } | SendError::Corrupt { .. }), "flip at {i}: {e}");
    }
    s.pool.export().unwrap();
}

#[test]
fn spliced_records_and_wrong_base_are_refused() {
    let s = setup("corr2");
    // Same objects, different stream: swapping any record (but BEGIN, which differs)
    // with its twin from the other stream breaks the checksum chain.
    let a = record_spans(&s.full);
    let b = record_spans(&s.other);
    assert_eq!(a.len(), b.len());
    for k in 1..a.len() {
        let mut spliced = s.full[..a[k].start].to_vec();
        spliced.extend_from_slice(&s.other[b[k].clone()]);
        spliced.extend_from_slice(&s.full[a[k].end..]);
        match read_all(&spliced) {
            Some(SendError::Checksum { record_index, .. }) => assert_eq!(record_index as usize, k),
            other => panic!("splice of record {k}: {other:?}"),
        }
    }
    // Records of the incremental stream appended to the full one (after its END is cut).
    let cut = a.last().unwrap().start;
    let mut mixed = s.full[..cut].to_vec();
    let inc_spans = record_spans(&s.inc);
    mixed.extend_from_slice(&s.inc[inc_spans[1].start..]);
    assert!(matches!(read_all(&mixed), Some(SendError::Checksum { .. })));

    // Wrong bases: refused before anything changes.
    let dst = dataset(&s.pool, "corr2/dst", &[]);
    let wrong = |expected| RecvOpts {
        expected_from_guid: expected,
        resume: None,
    };
    let e = receive(&mut &s.inc[..], &dst, &wrong(None)).unwrap_err();
    assert!(matches!(e, SendError::WrongBase { .. }), "{e}");
    assert_eq!(dst.object_id_end(), 1, "refused stream changed the target");
    receive(&mut &s.full[..], &dst, &RecvOpts::default()).unwrap();
    let before = dst.root_bp();
    for opts in [wrong(Some(0x11)), wrong(None)] {
        let e = receive(&mut &s.inc[..], &dst, &opts).unwrap_err();
        assert!(matches!(e, SendError::WrongBase { stream_from_guid: 0x10, .. }), "{e}");
    }
    let e = receive(&mut &s.full[..], &dst, &wrong(Some(0x10))).unwrap_err();
    assert!(matches!(e, SendError::WrongBase { stream_from_guid: 0, .. }), "{e}");
    let e = receive(&mut &s.full[..], &dst, &wrong(None)).unwrap_err();
    assert!(matches!(e, SendError::TargetNotEmpty), "{e}");
    s.pool.sync().unwrap();
    assert_eq!(dst.root_bp(), before, "refused streams changed the target");
    receive(&mut &s.inc[..], &dst, &wrong(Some(0x10))).unwrap();
    // Garbage is not a stream.
    let e = receive(&mut &b"hello world, not a stream"[..], &dst, &RecvOpts::default()).unwrap_err();
    assert!(matches!(e, SendError::BadMagic), "{e}");
    s.pool.export().unwrap();
}
