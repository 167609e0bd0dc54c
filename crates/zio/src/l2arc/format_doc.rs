//! The cache-device layouts (§16 of `docs/format.md`: device header, log block, log
//! entry) against the document.
//!
//! A unit test inside `l2arc`, because `DevHeader` and `LogBlock` are private. Values
//! whose every field holds a distinct marker are encoded and every documented row is
//! checked against the bytes (the table reader is shared with the other crates:
//! `crates/phys/tests/support/format_doc.rs`); the bytes also decode back. The 49-byte
//! log entry is prose, not a table: the entries row is checked against entries laid
//! out in the order the prose lists their fields, and the sizes and limits the prose
//! and headings state are checked against the constants.

#[path = "../../../phys/tests/support/format_doc.rs"]
mod table;

use super::*;
use table::{doc_text, le, table};

#[test]
fn device_header() {
    let h = DevHeader {
        pool_guid: 0x0102_0304_0506_0708,
        dev_guid: 0x1112_1314_1516_1718,
        seq: 0x2122_2324_2526_2728,
        log_off: 0x3132_3334_3536_3738,
        log_len: 0x4142_4344_4546_4748,
        hand: 0x5152_5354_5556_5758,
    };
    let b = h.encode();
    assert_eq!(b.len() as u64, L2_DEVICE_HEADER_BYTES);
    let t = table("**Device header**", &[]);
    t.assert_tiles(b.len());
    let sum = t.row("checksum");
    let body = sum.off;
    t.check(
        &b,
        &[
            ("magic", b"TARNL2DH".to_vec()),
            ("version", le(1, 4)),
            ("pool_guid", le(h.pool_guid, 8)),
            ("dev_guid", le(h.dev_guid, 8)),
            ("seq", le(h.seq, 8)),
            ("log_off", le(h.log_off, 8)),
            ("log_len", le(h.log_len, 8)),
            ("hand", le(h.hand, 8)),
            ("checksum", ChecksumAlg::Blake3.compute(&b[..body]).to_vec()),
        ],
    );
    assert_eq!(DevHeader::decode(&b), Ok(Some(h)));
    let doc = doc_text();
    assert!(doc.contains(&format!("BLAKE3-256 of bytes 0..{body}")), "checksum notes name another range");
    assert!(doc.contains("**Device header** (offset 0, one 4 KiB sector"));
    assert_eq!(L2_DEVICE_HEADER_BYTES, 4096);
}

/// One log entry laid out as the prose lists its fields: DVA `vdev` u32, `asize` u64,
/// `offset` u64, birth txg u64, buffer offset u64, logical size u32, checksum u64,
/// flags u8 (bit 0: metadata).
fn entry_bytes(e: &(L2Key, L2Hdr)) -> Vec<u8> {
    let ((dva, birth), h) = e;
    let mut v = le(u64::from(dva.vdev), 4);
    v.extend(le(dva.asize_bytes, 8));
    v.extend(le(dva.offset_bytes, 8));
    v.extend(le(*birth, 8));
    v.extend(le(h.offset_bytes, 8));
    v.extend(le(u64::from(h.size_bytes), 4));
    v.extend(le(h.checksum, 8));
    v.push(u8::from(h.meta));
    v
}

#[test]
fn log_block() {
    let entry = |k: u64, meta: bool| {
        (
            (
                Dva {
                    vdev: 0x6100_0000 | k as u32,
                    asize_bytes: 0x6200_0000_0000_0000 | k,
                    offset_bytes: 0x6300_0000_0000_0000 | k,
                },
                0x6400_0000_0000_0000 | k,
            ),
            L2Hdr {
                offset_bytes: 0x6500_0000_0000_0000 | k,
                checksum: 0x6600_0000_0000_0000 | k,
                size_bytes: 0x6700_0000 | k as u32,
                dev: 3,
                meta,
            },
        )
    };
    let lb = LogBlock {
        pool_guid: 0x0102_0304_0506_0708,
        dev_guid: 0x1112_1314_1516_1718,
        seq: 0x2122_2324_2526_2728,
        batch_start: 0x3132_3334_3536_3738,
        batch_len: 0x4142_4344_4546_4748,
        prev: (0x5152_5354_5556_5758, 0x5a5b_5c5d_5e5f_6061),
        entries: vec![entry(1, true), entry(2, false), entry(3, true)],
    };
    let n = lb.entries.len();
    let b = lb.encode();
    let t = table("**Log block**", &[("n", n)]);
    t.assert_tiles(b.len());
    let body = t.row("checksum").off;
    let packed: Vec<u8> = lb.entries.iter().flat_map(entry_bytes).collect();
    t.check(
        &b,
        &[
            ("magic", b"TARNL2LB".to_vec()),
            ("version", le(1, 4)),
            ("n", le(n as u64, 4)),
            ("pool_guid", le(lb.pool_guid, 8)),
            ("dev_guid", le(lb.dev_guid, 8)),
            ("seq", le(lb.seq, 8)),
            ("batch_start", le(lb.batch_start, 8)),
            ("batch_len", le(lb.batch_len, 8)),
            ("prev_off", le(lb.prev.0, 8)),
            ("prev_len", le(lb.prev.1, 8)),
            ("entries", packed),
            ("checksum", ChecksumAlg::Blake3.compute(&b[..body]).to_vec()),
        ],
    );
    let back = LogBlock::decode(&b, 3).unwrap();
    assert_eq!(back.entries, lb.entries);
    assert_eq!((back.seq, back.prev), (lb.seq, lb.prev));

    // The numbers the prose and headings state.
    let doc = doc_text();
    let heading = format!("**Log block** ({LB_HEAD_BYTES} + {LB_ENTRY_BYTES}·n + 32 bytes)");
    assert!(doc.contains(&heading), "format.md lacks {heading:?}");
    let prose = format!("Entry ({LB_ENTRY_BYTES} bytes)");
    assert!(doc.contains(&prose), "format.md lacks {prose:?}");
    let limit = format!("at most {L2_LOG_ENTRIES_MAX};");
    assert!(doc.contains(&limit), "format.md lacks {limit:?}");
    assert_eq!(entry_bytes(&lb.entries[0]).len(), LB_ENTRY_BYTES);
}
