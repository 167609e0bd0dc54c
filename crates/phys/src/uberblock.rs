//! The uberblock (ZFS `uberblock_t`, OpenZFS `include/sys/uberblock_impl.h`).
//!
//! One 4 KiB slot of the label's uberblock ring; slot index is `txg % 32`. The
//! newest slot that decodes and whose GUID sum matches the pool wins at import;
//! older ones allow rewind (`zpool import -F` / `-T`).
//!
//! | off  | size | field |
//! |-----:|-----:|-------|
//! | 0    | 8    | magic `UBERBLOCK_MAGIC` |
//! | 8    | 8    | format version |
//! | 16   | 8    | txg |
//! | 24   | 8    | guid_sum (sum of all leaf GUIDs, wrapping) |
//! | 32   | 8    | timestamp, seconds since the epoch |
//! | 40   | 8    | reserved, zero |
//! | 48   | 128  | root block pointer (the MOS object set) |
//! | 176  | 128  | space map block pointer |
//! | 304  | 3760 | reserved, zero |
//! | 4064 | 32   | BLAKE3 of bytes 0..4064 |
//!
//! Beyond magic and checksum, decode refuses a txg of 0 or above [`TXG_MAX`] (so
//! `txg + 1` and the deferred-free horizon cannot overflow) and root pointers born
//! after the uberblock's own txg.

use crate::blkptr::BlkPtr;
use crate::le::*;
use crate::Corrupt;

/// "tarnuber" read as a little-endian u64.
pub const UBERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"tarnuber");
/// One ring slot.
pub const UBERBLOCK_SLOT_SIZE_BYTES: usize = 4096;
/// Largest txg an uberblock may carry (2^62: a txg a microsecond for 146,000
/// years); txg arithmetic above it could overflow.
pub const TXG_MAX: u64 = 1 << 62;
const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = 8;
const TXG_OFF: usize = 16;
const GUID_SUM_OFF: usize = 24;
const TIMESTAMP_OFF: usize = 32;
/// 8 reserved bytes, zero.
const RESERVED_OFF: usize = 40;
const ROOTBP_OFF: usize = 48;
const SPACEMAP_BP_OFF: usize = 176;
/// Reserved and zero from here to the checksum.
const TAIL_OFF: usize = 304;
const SUM_OFF: usize = UBERBLOCK_SLOT_SIZE_BYTES - 32;

/// The root of everything for one txg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UberblockPhys {
    /// Format version that wrote it.
    pub version: u64,
    /// The txg this uberblock completes.
    pub txg: u64,
    /// Wrapping sum of leaf GUIDs; must match the config at import.
    pub guid_sum: u64,
    /// Seconds since the epoch at sync.
    pub timestamp_s: u64,
    /// The MOS object set root.
    pub rootbp: BlkPtr,
    /// The pool space map block.
    pub spacemap_bp: BlkPtr,
}

impl UberblockPhys {
    /// Encode to one 4 KiB slot with the self-checksum filled in.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; UBERBLOCK_SLOT_SIZE_BYTES];
        put_u64(&mut b, MAGIC_OFF, UBERBLOCK_MAGIC);
        put_u64(&mut b, VERSION_OFF, self.version);
        put_u64(&mut b, TXG_OFF, self.txg);
        put_u64(&mut b, GUID_SUM_OFF, self.guid_sum);
        put_u64(&mut b, TIMESTAMP_OFF, self.timestamp_s);
        self.rootbp.encode_into(&mut b[ROOTBP_OFF..SPACEMAP_BP_OFF]);
        self.spacemap_bp.encode_into(&mut b[SPACEMAP_BP_OFF..TAIL_OFF]);
        let sum = blake3::hash(&b[..SUM_OFF]);
        b[SUM_OFF..].copy_from_slice(sum.as_bytes());
        b
    }

    /// Decode a slot; an empty (all-zero) slot, bad magic or bad checksum is `Corrupt`.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < UBERBLOCK_SLOT_SIZE_BYTES {
            return Err(Corrupt::new("uberblock", "short buffer"));
        }
        if u64_at(b, MAGIC_OFF) != UBERBLOCK_MAGIC {
            return Err(Corrupt::new("uberblock", "bad magic"));
        }
        if blake3::hash(&b[..SUM_OFF]).as_bytes() != &b[SUM_OFF..UBERBLOCK_SLOT_SIZE_BYTES] {
            return Err(Corrupt::new("uberblock", "checksum mismatch"));
        }
        if u64_at(b, RESERVED_OFF) != 0 || b[TAIL_OFF..SUM_OFF].iter().any(|&x| x != 0) {
            return Err(Corrupt::new("uberblock", "reserved bytes not zero"));
        }
        let txg = u64_at(b, TXG_OFF);
        if txg == 0 || txg > TXG_MAX {
            return Err(Corrupt::new("uberblock", format!("txg {txg} outside 1..={TXG_MAX}")));
        }
        let rootbp = BlkPtr::decode(&b[ROOTBP_OFF..SPACEMAP_BP_OFF])?;
        let spacemap_bp = BlkPtr::decode(&b[SPACEMAP_BP_OFF..TAIL_OFF])?;
        if rootbp.birth_txg > txg || spacemap_bp.birth_txg > txg {
            return Err(Corrupt::new("uberblock", format!("txg {txg} points at blocks born later")));
        }
        Ok(UberblockPhys {
            version: u64_at(b, VERSION_OFF),
            txg,
            guid_sum: u64_at(b, GUID_SUM_OFF),
            timestamp_s: u64_at(b, TIMESTAMP_OFF),
            rootbp,
            spacemap_bp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn roundtrip_and_detect_damage() {
        let ub = UberblockPhys {
            version: 1,
            txg: 42,
            guid_sum: 7,
            timestamp_s: 1000,
            rootbp: BlkPtr::HOLE,
            spacemap_bp: BlkPtr::HOLE,
        };
        let mut b = ub.encode();
        assert_eq!(UberblockPhys::decode(&b).unwrap(), ub);
        b[17] ^= 1;
        assert!(UberblockPhys::decode(&b).is_err());
        assert!(UberblockPhys::decode(&vec![0u8; 4096]).is_err());
    }
}
