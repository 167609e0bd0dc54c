//! Send-stream record payloads fed random bytes under every record type (what
//! `Record::decode` sees once a record's checksum has passed), and whole random
//! streams through `StreamReader`, as the `send_record` fuzz target does: each
//! returns a record or an error, never panics or allocates from an unchecked length.

use proptest::prelude::*;
use tarn_send::{Record, StreamReader};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_payloads_never_panic(t in 0u16..9, p in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(r) = Record::decode(t, &p) {
            let again = r.encode_payload().unwrap();
            prop_assert_eq!(Record::decode(t, &again).unwrap().rtype(), r.rtype());
        }
    }

    #[test]
    fn random_streams_never_panic(mut b in proptest::collection::vec(any::<u8>(), 0..600), magic in any::<bool>()) {
        if magic && b.len() >= 16 {
            b[..8].copy_from_slice(b"TARNSEND");
            b[8..16].copy_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        }
        if let Ok(mut r) = StreamReader::new(&b[..]) {
            for _ in 0..64 {
                if r.next_record().is_err() {
                    break;
                }
            }
        }
    }
}
