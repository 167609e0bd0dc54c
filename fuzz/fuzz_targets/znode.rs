//! The znode (a file's attributes in its dnode's bonus buffer); accepted znodes
//! round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_zpl::ZnodePhys;

fuzz_target!(|data: &[u8]| {
    if let Ok(z) = ZnodePhys::decode(7, data) {
        assert_eq!(ZnodePhys::decode(7, &z.encode()).expect("round trip"), z);
    }
});
