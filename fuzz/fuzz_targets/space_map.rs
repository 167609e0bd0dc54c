//! Space-map structures: the metaslab directory root, pages, condensed maps (with the
//! range checks of `chain_trees`) and space-map log blocks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_metaslab::ondisk::{LogBlockPhys, MapPhys, PagePhys, RootPhys};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RootPhys::decode(data) {
        assert_eq!(RootPhys::decode(&r.encode()).expect("round trip"), r);
    }
    let _ = PagePhys::decode(data);
    if let Ok(m) = MapPhys::decode(data) {
        let (start, size) = (m.start_bytes, m.size_bytes);
        let _ = MapPhys::chain_trees(std::slice::from_ref(&m), start, size, 512);
        let _ = MapPhys::chain_trees(&[m.clone(), m], start, size, 4096);
    }
    let _ = LogBlockPhys::decode(data);
});
