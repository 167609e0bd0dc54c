//! The send-stream byte format against its tables in `docs/format.md` §15: the
//! prefix, record framing, and the BEGIN, OBJECT, WRITE, FREE, FREEOBJECTS and END
//! payloads.
//!
//! A stream of one record of each type, every field a distinct marker, is written
//! with [`StreamWriter`]; every documented row is checked against its bytes (see
//! `crates/phys/tests/support/format_doc.rs`), and each payload decodes back to the
//! record it came from, so the decoder's offsets agree too.

#[path = "../../phys/tests/support/format_doc.rs"]
mod format_doc;

use format_doc::{le, table};
use tarn_phys::{Compression, ObjectType};
use tarn_send::stream::{flags, ObjectRec, Record, StreamHeader, StreamWriter, WriteRec, CHECKSUM_SIZE_BYTES, PREFIX_SIZE_BYTES, RECORD_HEADER_SIZE_BYTES};

fn records() -> Vec<Record> {
    let name = "pool/fs@snap";
    vec![
        Record::Begin(StreamHeader {
            flags: flags::ALL,
            to_guid: 0x1112_1314_1516_1718,
            from_guid: 0x2122_2324_2526_2728,
            from_txg: 0x3132_3334_3536_3738,
            to_txg: 0x4142_4344_4546_4748,
            creation_time_s: 0x5152_5354_5556_5758,
            resume_object: 0x0000_6162_6364_6566,
            resume_offset_bytes: 0x0172_7374_7576_7778,
            to_name: name.into(),
        }),
        Record::Object(ObjectRec {
            object: 0x0000_0102_0304_0506,
            otype: ObjectType::History,
            datablksz_bytes: 145 << 9,
            max_blksz_bytes: 1315 << 9,
            maxblkid: 0x3132_3334_3536_3738,
            bonus: (0..261).map(|i| 0x80 ^ i as u8).collect(),
        }),
        Record::Write(WriteRec {
            object: 0x0000_0102_0304_0506,
            offset_bytes: 0x0011_2233_4455_6600,
            lsize_bytes: 0x0001_2345,
            compression: Compression::Lz4,
            payload: (0..0x123).map(|i| 0x40 ^ i as u8).collect(),
        }),
        Record::Free {
            object: 0x0000_0102_0304_0506,
            offset_bytes: 0x0102_0304_0506_0708,
            length_bytes: 0x0203_0405_0607_0809,
        },
        Record::FreeObjects {
            first: 0x0000_1112_1314_1516,
            count: 0x0000_0000_2122_2324,
        },
        Record::End {
            record_count: 5,
            to_guid: 0x1112_1314_1516_1718,
        },
    ]
}

/// The stream bytes and, per record, its start offset.
fn stream() -> (Vec<u8>, Vec<usize>) {
    let recs = records();
    let mut out = Vec::new();
    let mut starts = Vec::new();
    {
        let mut w = StreamWriter::new(Some(&mut out)).unwrap();
        for r in &recs {
            starts.push(w.offset_bytes() as usize);
            w.record(r).unwrap();
        }
    }
    (out, starts)
}

#[test]
fn prefix_and_framing() {
    let (out, starts) = stream();
    let t = table("## 15. Send streams", &[]);
    t.assert_tiles(PREFIX_SIZE_BYTES);
    t.check(&out[..PREFIX_SIZE_BYTES], &[("magic", b"TARNSEND".to_vec()), ("version", le(1, 4))]);
    assert_eq!(starts[0], PREFIX_SIZE_BYTES);

    for (k, r) in records().iter().enumerate() {
        let payload = r.encode_payload().unwrap();
        let len = payload.len();
        let t = table("### Record framing", &[("payload_len", len)]);
        let total = RECORD_HEADER_SIZE_BYTES + len + CHECKSUM_SIZE_BYTES;
        t.assert_tiles(total);
        let at = starts[k];
        let end = at + total;
        assert_eq!(end, starts.get(k + 1).copied().unwrap_or(out.len()));
        let sum_off = t.row("checksum").off;
        t.check(
            &out[at..end],
            &[
                ("type", le(r.rtype().into(), 2)),
                ("payload_len", le(len as u64, 4)),
                ("payload", payload.clone()),
                ("checksum", blake3::hash(&out[..at + sum_off]).as_bytes().to_vec()),
            ],
        );
        assert_eq!(Record::decode(r.rtype(), &payload).unwrap(), *r, "decode(encode) of record {k}");
    }
}

#[test]
fn payloads() {
    let recs = records();
    let p: Vec<Vec<u8>> = recs.iter().map(|r| r.encode_payload().unwrap()).collect();

    let Record::Begin(h) = &recs[0] else { unreachable!() };
    let t = table("### BEGIN (72 + name_len bytes)", &[("name_len", h.to_name.len())]);
    t.assert_tiles(p[0].len());
    t.check(
        &p[0],
        &[
            ("flags", le(h.flags, 8)),
            ("to_guid", le(h.to_guid, 8)),
            ("from_guid", le(h.from_guid, 8)),
            ("from_txg", le(h.from_txg, 8)),
            ("to_txg", le(h.to_txg, 8)),
            ("creation_time", le(h.creation_time_s, 8)),
            ("resume_object", le(h.resume_object, 8)),
            ("resume_offset", le(h.resume_offset_bytes, 8)),
            ("name_len", le(h.to_name.len() as u64, 4)),
            ("to_name", h.to_name.as_bytes().to_vec()),
        ],
    );

    let Record::Object(o) = &recs[1] else { unreachable!() };
    let t = table("### OBJECT (32 + bonus_len bytes)", &[("bonus_len", o.bonus.len())]);
    t.assert_tiles(p[1].len());
    t.check(
        &p[1],
        &[
            ("object", le(o.object, 8)),
            ("data block size", le(o.datablksz_bytes.into(), 4)),
            ("max data block size", le(o.max_blksz_bytes.into(), 4)),
            ("maxblkid", le(o.maxblkid, 8)),
            ("object type", vec![o.otype as u8]),
            ("bonus_len", le(o.bonus.len() as u64, 2)),
            ("bonus", o.bonus.clone()),
        ],
    );

    let Record::Write(w) = &recs[2] else { unreachable!() };
    let t = table("### WRITE (32 + psize bytes)", &[("psize", w.payload.len())]);
    t.assert_tiles(p[2].len());
    t.check(
        &p[2],
        &[
            ("object", le(w.object, 8)),
            ("offset", le(w.offset_bytes, 8)),
            ("lsize", le(w.lsize_bytes.into(), 4)),
            ("psize", le(w.payload.len() as u64, 4)),
            ("compression", vec![w.compression as u8]),
            ("payload", w.payload.clone()),
        ],
    );

    let all = table("### FREE (24 bytes), FREEOBJECTS (16 bytes), END (16 bytes)", &[]);
    let Record::Free {
        object,
        offset_bytes,
        length_bytes,
    } = recs[3]
    else {
        unreachable!()
    };
    let t = all.only("FREE");
    t.assert_tiles(p[3].len());
    t.check(
        &p[3],
        &[("object", le(object, 8)), ("offset", le(offset_bytes, 8)), ("length", le(length_bytes, 8))],
    );
    let Record::FreeObjects { first, count } = recs[4] else { unreachable!() };
    let t = all.only("FREEOBJECTS");
    t.assert_tiles(p[4].len());
    t.check(&p[4], &[("first", le(first, 8)), ("count", le(count, 8))]);
    let Record::End { record_count, to_guid } = recs[5] else { unreachable!() };
    let t = all.only("END");
    t.assert_tiles(p[5].len());
    t.check(&p[5], &[("record_count", le(record_count, 8)), ("to_guid", le(to_guid, 8))]);
}
