//! Label config area (header, BLAKE3, JSON, semantic checks): `decode_config` must
//! return `Ok` or `Corrupt`, never panic. The input is taken twice: as raw bytes of
//! the config area, and as JSON sealed with a correct header and checksum, so the
//! fuzzer reaches the JSON parser and `LabelConfig::validate` without forging BLAKE3.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::label::{decode_config, decode_config_unchecked, LABEL_MAGIC};

fuzz_target!(|data: &[u8]| {
    let _ = decode_config(data);
    let mut sealed = vec![0u8; 64 + data.len()];
    sealed[..8].copy_from_slice(&LABEL_MAGIC.to_le_bytes());
    sealed[8..16].copy_from_slice(&3u64.to_le_bytes());
    sealed[16..24].copy_from_slice(&(data.len() as u64).to_le_bytes());
    sealed[32..64].copy_from_slice(blake3::hash(data).as_bytes());
    sealed[64..].copy_from_slice(data);
    if let Ok(cfg) = decode_config(&sealed) {
        // What decodes as valid must stay valid through a round trip.
        let again = tarn_phys::label::encode_config(&cfg).expect("valid config encodes");
        assert_eq!(decode_config(&again).expect("re-encoded config decodes"), cfg);
    }
    let _ = decode_config_unchecked(&sealed);
});
