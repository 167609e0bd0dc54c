//! Every block decompressor on untrusted payloads (byte 0 picks the algorithm, bytes
//! 1..3 the logical size in 512-byte units up to 1 MiB), and a compress/decompress
//! round trip of the input itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::Compression;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let Ok(alg) = Compression::from_u8(data[0] % Compression::ALL.len() as u8) else { return };
    let lsize = (u16::from_le_bytes([data[1], data[2]]) as usize % 2048 + 1) * 512;
    let payload = &data[3..];
    if let Ok(out) = alg.decompress(payload, lsize) {
        assert_eq!(out.len(), lsize);
    }
    if let Some(c) = alg.compress(payload) {
        assert_eq!(alg.decompress(&c, payload.len()).expect("own payload"), payload);
    }
});
