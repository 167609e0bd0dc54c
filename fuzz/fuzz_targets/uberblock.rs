//! Uberblock slot: `UberblockPhys::decode` on raw bytes, and on the same bytes with a
//! correct magic and self-checksum so the field checks are reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_phys::{UberblockPhys, UBERBLOCK_MAGIC, UBERBLOCK_SLOT_SIZE_BYTES};

fuzz_target!(|data: &[u8]| {
    let _ = UberblockPhys::decode(data);
    let mut slot = vec![0u8; UBERBLOCK_SLOT_SIZE_BYTES];
    let n = data.len().min(UBERBLOCK_SLOT_SIZE_BYTES - 32);
    slot[..n].copy_from_slice(&data[..n]);
    slot[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
    let sum = *blake3::hash(&slot[..UBERBLOCK_SLOT_SIZE_BYTES - 32]).as_bytes();
    slot[UBERBLOCK_SLOT_SIZE_BYTES - 32..].copy_from_slice(&sum);
    if let Ok(ub) = UberblockPhys::decode(&slot) {
        assert_eq!(UberblockPhys::decode(&ub.encode()).expect("round trip"), ub);
    }
});
