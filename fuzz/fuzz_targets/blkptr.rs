//! Block pointer: `BlkPtr::decode` never panics, and what it accepts re-encodes to the
//! same bytes (the decoder checks every field it keeps).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::{BlkPtr, BLKPTR_SIZE_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(bp) = BlkPtr::decode(data) {
        assert_eq!(&bp.encode()[..], &data[..BLKPTR_SIZE_BYTES]);
        let _ = bp.asize_total_bytes();
    }
});
