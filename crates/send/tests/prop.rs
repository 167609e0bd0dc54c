//! Property tests of the stream encoding: records round-trip through a writer and a
//! reader, decoding is canonical, and no input bytes make the decoder panic.

use proptest::prelude::*;
use tarn_phys::{Compression, ObjectType};
use tarn_send::stream::{ObjectRec, StreamWriter, WriteRec, OBJECT_ID_END, OFFSET_END_BYTES};
use tarn_send::{Record, StreamHeader, StreamReader};

fn otype() -> impl Strategy<Value = ObjectType> {
    prop_oneof![
        Just(ObjectType::FileData),
        Just(ObjectType::DirZap),
        Just(ObjectType::Zap),
        Just(ObjectType::Packed),
        Just(ObjectType::History),
        Just(ObjectType::Symlink),
        Just(ObjectType::DslDataset),
    ]
}

fn object_id() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..100, 1u64..OBJECT_ID_END]
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            object_id(),
            otype(),
            1u32..=2048,
            0u32..=2048,
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..=320)
        )
            .prop_map(|(object, otype, b, extra, maxblkid, bonus)| {
                let datablksz_bytes = b * 512;
                let max_blksz_bytes = (b + extra).min(2048) * 512;
                Record::Object(ObjectRec {
                    object,
                    otype,
                    datablksz_bytes,
                    max_blksz_bytes,
                    maxblkid,
                    bonus,
                })
            }),
        (
            object_id(),
            0u64..OFFSET_END_BYTES - (1 << 20),
            prop::collection::vec(any::<u8>(), 1..3000),
            any::<bool>()
        )
            .prop_map(|(object, offset_bytes, data, lz4)| {
                let compressed = if lz4 { Compression::Lz4.compress(&data) } else { None };
                let (compression, payload) = match compressed {
                    Some(p) => (Compression::Lz4, p),
                    None => (Compression::Off, data.clone()),
                };
                Record::Write(WriteRec {
                    object,
                    offset_bytes,
                    lsize_bytes: data.len() as u32,
                    compression,
                    payload,
                })
            }),
        (object_id(), 0u64..OFFSET_END_BYTES, prop_oneof![0u64..OFFSET_END_BYTES, Just(u64::MAX)]).prop_map(|(object, offset_bytes, length_bytes)| {
            Record::Free {
                object,
                offset_bytes,
                length_bytes,
            }
        }),
        (1u64..OBJECT_ID_END / 2, 0u64..OBJECT_ID_END / 2).prop_map(|(first, count)| Record::FreeObjects { first, count }),
    ]
}

fn header() -> impl Strategy<Value = StreamHeader> {
    (
        any::<u64>(),
        prop::option::of((1u64.., any::<u64>())),
        "[a-z/@]{0,64}",
        prop::option::of((0u64..OBJECT_ID_END, 0u64..OFFSET_END_BYTES)),
    )
        .prop_map(|(to_guid, from, to_name, resume)| {
            let mut flags = 0;
            if from.is_some() {
                flags |= tarn_send::stream::flags::INCREMENTAL;
            }
            if resume.is_some() {
                flags |= tarn_send::stream::flags::RESUMING;
            }
            StreamHeader {
                flags,
                to_guid,
                from_guid: from.map(|f| f.0).unwrap_or(0),
                from_txg: from.map(|f| f.1).unwrap_or(0),
                to_txg: 7,
                creation_time_s: 1_700_000_000,
                resume_object: resume.map(|r| r.0).unwrap_or(0),
                resume_offset_bytes: resume.map(|r| r.1).unwrap_or(0),
                to_name,
            }
        })
}

fn encode(h: &StreamHeader, recs: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = StreamWriter::new(Some(&mut out)).unwrap();
    w.record(&Record::Begin(h.clone())).unwrap();
    for r in recs {
        w.record(r).unwrap();
    }
    let n = w.records();
    w.record(&Record::End {
        record_count: n,
        to_guid: h.to_guid,
    })
    .unwrap();
    out
}

/// Read a stream to its end or first error; never panics.
fn drain(bytes: &[u8]) -> Result<Vec<Record>, tarn_send::SendError> {
    let mut r = StreamReader::new(bytes)?;
    let mut out = vec![Record::Begin(r.header().clone())];
    loop {
        let rec = r.next_record()?;
        let end = matches!(rec, Record::End { .. });
        out.push(rec);
        if end {
            return Ok(out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn records_roundtrip(h in header(), recs in prop::collection::vec(record(), 0..12)) {
        let bytes = encode(&h, &recs);
        let got = drain(&bytes).unwrap();
        prop_assert_eq!(&got[0], &Record::Begin(h.clone()));
        prop_assert_eq!(&got[1..got.len() - 1], &recs[..]);
        for r in &recs {
            if let Record::Write(w) = r {
                prop_assert_eq!(w.data().unwrap().len(), w.lsize_bytes as usize);
            }
        }
    }

    #[test]
    fn decode_is_canonical_and_total(t in 0u16..8, payload in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(r) = Record::decode(t, &payload) {
            prop_assert_eq!(r.rtype(), t);
            prop_assert_eq!(r.encode_payload().unwrap(), payload);
        }
    }

    #[test]
    fn mutated_payloads_decode_canonically(r in record(), pos in any::<prop::sample::Index>(), x in 1u8..=255, cut in any::<prop::sample::Index>()) {
        let mut p = r.encode_payload().unwrap();
        let i = pos.index(p.len());
        p[i] ^= x;
        if let Ok(d) = Record::decode(r.rtype(), &p) {
            prop_assert_eq!(d.encode_payload().unwrap(), p.clone());
        }
        let short = &p[..cut.index(p.len())];
        if let Ok(d) = Record::decode(r.rtype(), short) {
            prop_assert_eq!(d.encode_payload().unwrap(), short.to_vec());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = drain(&bytes);
    }

    #[test]
    fn arbitrary_tail_after_valid_start_never_panics(h in header(), tail in prop::collection::vec(any::<u8>(), 0..2000)) {
        let mut bytes = encode(&h, &[]);
        let end = bytes.len() - (8 + 16 + 32);
        bytes.truncate(end);
        bytes.extend_from_slice(&tail);
        prop_assert!(drain(&bytes).is_err());
    }

    #[test]
    fn damaged_valid_streams_are_refused(h in header(), recs in prop::collection::vec(record(), 1..6), pos in any::<prop::sample::Index>(), x in 1u8..=255) {
        let mut bytes = encode(&h, &recs);
        let i = pos.index(bytes.len());
        bytes[i] ^= x;
        prop_assert!(drain(&bytes).is_err());
    }
}
