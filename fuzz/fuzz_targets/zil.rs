//! Intent-log structures: the ZIL header, log-block headers and record headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::{LwbHeader, RecordHeader, ZilHeader};

fuzz_target!(|data: &[u8]| {
    let _ = ZilHeader::decode(data);
    // An unsealed block is refused by its checksum; the fields are checked after it.
    let _ = LwbHeader::open(data, 1, 1);
    if data.len() >= 8 {
        let (guid, seq) = (u64::from_le_bytes(data[..8].try_into().unwrap()), 1);
        let _ = LwbHeader::open(&data[8..], guid, seq);
    }
    let _ = RecordHeader::decode(data);
    let _ = tarn_phys::zil::WriteRecord::decode(data);
});
