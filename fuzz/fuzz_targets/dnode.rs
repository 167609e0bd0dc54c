//! Dnode and object-set root decoders; accepted dnodes round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::{DnodePhys, ObjsetPhys, DNODE_SIZE_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = DnodePhys::decode(data) {
        let mut b = [0u8; DNODE_SIZE_BYTES];
        d.encode_into(&mut b);
        assert_eq!(DnodePhys::decode(&b).expect("round trip"), d);
    }
    if let Ok(os) = ObjsetPhys::decode(data) {
        assert_eq!(ObjsetPhys::decode(&os.encode()).expect("round trip"), os);
    }
});
