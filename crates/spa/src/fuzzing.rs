//! Entry points for the fuzz targets in `fuzz/` and the byte tests: the pool
//! directory's record decoders, which are private to this crate. Not an API.
//!
//! Theory: every record the pool directory keeps in MOS objects (a dataset's
//! `DslDatasetPhys`, a packed property list, a bookmark list, the scan record) is
//! decoded from bytes an attacker may have written and sealed. [`pool_records`] feeds
//! one input to every decoder; an accepted record must re-encode and decode to itself.
//! [`record_seeds`] gives valid encodings for mutation-based tests and corpora.
//!
//! Called by: `fuzz/fuzz_targets/pool_records.rs`, `tests/record_bytes.rs`.

use crate::{bookmark, dsl, scan};
use std::collections::BTreeMap;

/// Decode `b` as each pool-directory record; panics only if an accepted record does
/// not round-trip (a decoder bug), never on bad bytes.
pub fn pool_records(b: &[u8]) {
    if let Ok(d) = dsl::DslDatasetPhys::decode(b) {
        assert_eq!(dsl::DslDatasetPhys::decode(&d.encode()).expect("dataset record round trip"), d);
    }
    if let Ok(p) = dsl::decode_props(b) {
        assert_eq!(dsl::decode_props(&dsl::encode_props(&p)).expect("property round trip"), p);
    }
    if let Ok(l) = bookmark::decode(b) {
        assert_eq!(bookmark::decode(&bookmark::encode(&l)).expect("bookmark round trip"), l);
    }
    let _ = serde_json::from_slice::<scan::ScanPhys>(b);
    // The block reference table and the dedup table (its table and log halves):
    // an accepted table re-encodes to what was read.
    let brt = tarn_zio::Brt::default();
    if brt.load(b).is_ok() {
        assert_eq!(brt.encode(), b, "block reference table round trip");
    }
    let ddt = tarn_zio::Ddt::default();
    if ddt.load(b, &[]).is_ok() {
        assert_eq!(ddt.encode(), b, "dedup table round trip");
    }
    let (table, log) = b.split_at(b.len() / 2);
    let _ = ddt.load(table, log);
}

/// Valid encodings of each record kind (a property list, a bookmark list, a dataset
/// record), for seeding mutations.
pub fn record_seeds() -> Vec<Vec<u8>> {
    let props = BTreeMap::from([("compression".to_string(), "lz4".to_string()), ("org.tarn:note".to_string(), "x".to_string())]);
    let marks = vec![bookmark::Bookmark {
        name: "tank/fs#b".into(),
        guid: 7,
        creation_txg: 9,
        creation_time_s: 1_700_000_000,
    }];
    vec![dsl::encode_props(&props), bookmark::encode(&marks), dsl::DslDatasetPhys::default().encode()]
}
