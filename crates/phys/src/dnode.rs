//! Dnodes and object-set roots (ZFS `dnode_phys_t`, `objset_phys_t`;
//! OpenZFS `include/sys/dnode.h`, `include/sys/dmu_objset.h`).
//!
//! [`DnodePhys`] layout (512 bytes):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 1    | object type (0 = free slot) |
//! | 1   | 1    | indblkshift (log2 of indirect block size) |
//! | 2   | 1    | nlevels (1 = the block pointer points at data) |
//! | 3   | 1    | nblkptr (always 1 in format 1) |
//! | 4   | 1    | bonus type (0 none, 1 znode, 2 dsl dataset) |
//! | 5   | 3    | reserved, zero |
//! | 8   | 2    | data block size in 512-byte sectors |
//! | 10  | 2    | bonus length in bytes (≤ 320) |
//! | 12  | 2    | max data block size in 512-byte sectors (the first block may grow to it) |
//! | 14  | 2    | reserved, zero |
//! | 16  | 8    | maxblkid (highest level-0 block id ever written; 0 when empty) |
//! | 24  | 8    | used_bytes (allocated bytes of all blocks of the object) |
//! | 32  | 32   | reserved, zero |
//! | 64  | 128  | top block pointer |
//! | 192 | 320  | bonus buffer |
//!
//! Decode checks, beyond the layout: `nlevels` 1..=8, a block size of 1..=2048
//! sectors, `(maxblkid + 1) × block size` fits in a u64 (so byte offsets derived from
//! it cannot overflow), and a non-hole top pointer sits at level `nlevels − 1`.
//!
//! [`ObjsetPhys`] layout (2048 bytes): meta-dnode @0 (512), objset type u64 @512,
//! reserved to 1024, ZIL header ([`crate::ZilHeader`]) @1024..1216, reserved zero to
//! 2048.

use crate::blkptr::{BlkPtr, ObjectType};
use crate::le::*;
use crate::zil::{ZilHeader, ZIL_HEADER_SIZE_BYTES};
use crate::Corrupt;

// Field offsets of an encoded [`DnodePhys`].
const TYPE_OFF: usize = 0;
const INDBLKSHIFT_OFF: usize = 1;
const NLEVELS_OFF: usize = 2;
const NBLKPTR_OFF: usize = 3;
const BONUS_TYPE_OFF: usize = 4;
/// 3 reserved bytes, zero.
const RESERVED0_OFF: usize = 5;
const DATABLKSZ_OFF: usize = 8;
const BONUSLEN_OFF: usize = 10;
const MAX_BLKSZ_OFF: usize = 12;
/// 2 reserved bytes, zero.
const RESERVED1_OFF: usize = 14;
const MAXBLKID_OFF: usize = 16;
const USED_OFF: usize = 24;
/// 32 reserved bytes, zero.
const RESERVED2_OFF: usize = 32;
const BLKPTR_OFF: usize = 64;
const BONUS_OFF: usize = 192;

// Field offsets of an encoded [`ObjsetPhys`].
const META_DNODE_OFF: usize = 0;
const OS_TYPE_OFF: usize = 512;
/// Reserved and zero up to the ZIL header.
const OS_RESERVED_OFF: usize = 520;
/// Offset of the ZIL header inside the object-set root.
const ZIL_OFF: usize = 1024;

/// Bytes per dnode.
pub const DNODE_SIZE_BYTES: usize = 512;
/// Bytes of bonus buffer per dnode.
pub const DNODE_BONUS_SIZE_BYTES: usize = 320;
/// Bytes of an encoded object-set root.
pub const OBJSET_PHYS_SIZE_BYTES: usize = 2048;

/// One object's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnodePhys {
    /// Object type; `ObjectType::None` marks a free slot.
    pub otype: ObjectType,
    /// log2 of the indirect block size (17 = 128 KiB).
    pub indblkshift: u8,
    /// Levels of the block tree; 1 means `blkptr` points at a data block.
    pub nlevels: u8,
    /// Bonus buffer type (0 none, 1 znode attributes, 2 dataset record).
    pub bonus_type: u8,
    /// Data block size in bytes (multiple of 512, ≤ 1 MiB).
    pub datablksz_bytes: u32,
    /// Largest size the single first block may grow to (the dataset's recordsize at creation).
    pub max_blksz_bytes: u32,
    /// Highest level-0 block id that exists.
    pub maxblkid: u64,
    /// Allocated bytes of the object's blocks.
    pub used_bytes: u64,
    /// Root of the block tree.
    pub blkptr: BlkPtr,
    /// Bonus bytes (length ≤ 320).
    pub bonus: Vec<u8>,
}

impl DnodePhys {
    /// A free dnode slot.
    pub fn free() -> Self {
        DnodePhys {
            otype: ObjectType::None,
            indblkshift: 17,
            nlevels: 1,
            bonus_type: 0,
            datablksz_bytes: 512,
            max_blksz_bytes: 512,
            maxblkid: 0,
            used_bytes: 0,
            blkptr: BlkPtr::HOLE,
            bonus: Vec::new(),
        }
    }

    /// True for a free slot.
    pub fn is_free(&self) -> bool {
        self.otype == ObjectType::None
    }

    /// Encode into `b[..512]`. Panics if the bonus is longer than 320 bytes (a bug).
    pub fn encode_into(&self, b: &mut [u8]) {
        assert!(self.bonus.len() <= DNODE_BONUS_SIZE_BYTES, "bonus too long");
        let b = &mut b[..DNODE_SIZE_BYTES];
        b.fill(0);
        if self.is_free() {
            return;
        }
        b[TYPE_OFF] = self.otype as u8;
        b[INDBLKSHIFT_OFF] = self.indblkshift;
        b[NLEVELS_OFF] = self.nlevels;
        b[NBLKPTR_OFF] = 1;
        b[BONUS_TYPE_OFF] = self.bonus_type;
        put_u16(b, DATABLKSZ_OFF, (self.datablksz_bytes >> 9) as u16);
        put_u16(b, BONUSLEN_OFF, self.bonus.len() as u16);
        put_u16(b, MAX_BLKSZ_OFF, (self.max_blksz_bytes >> 9) as u16);
        put_u64(b, MAXBLKID_OFF, self.maxblkid);
        put_u64(b, USED_OFF, self.used_bytes);
        self.blkptr.encode_into(&mut b[BLKPTR_OFF..BONUS_OFF]);
        b[BONUS_OFF..BONUS_OFF + self.bonus.len()].copy_from_slice(&self.bonus);
    }

    /// Decode and validate 512 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < DNODE_SIZE_BYTES {
            return Err(Corrupt::new("dnode", "short buffer"));
        }
        let b = &b[..DNODE_SIZE_BYTES];
        if b[TYPE_OFF] == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err(Corrupt::new("dnode", "free slot with non-zero bytes"));
            }
            return Ok(Self::free());
        }
        let otype = ObjectType::from_u8(b[TYPE_OFF])?;
        let bonuslen = u16_at(b, BONUSLEN_OFF) as usize;
        if bonuslen > DNODE_BONUS_SIZE_BYTES {
            return Err(Corrupt::new("dnode", format!("bonus length {bonuslen}")));
        }
        let nlevels = b[NLEVELS_OFF];
        if nlevels == 0 || nlevels > 8 || b[NBLKPTR_OFF] != 1 {
            return Err(Corrupt::new("dnode", format!("nlevels {nlevels} / nblkptr {}", b[NBLKPTR_OFF])));
        }
        let sectors = u16_at(b, DATABLKSZ_OFF) as u32;
        if sectors == 0 || sectors > 2048 {
            return Err(Corrupt::new("dnode", format!("block size {sectors} sectors")));
        }
        if !(9..=17).contains(&b[INDBLKSHIFT_OFF]) {
            return Err(Corrupt::new("dnode", format!("indblkshift {}", b[INDBLKSHIFT_OFF])));
        }
        let max_sectors = u16_at(b, MAX_BLKSZ_OFF) as u32;
        if max_sectors == 0 || max_sectors > 2048 {
            return Err(Corrupt::new("dnode", format!("max block size {max_sectors} sectors")));
        }
        let reserved = [&b[RESERVED0_OFF..DATABLKSZ_OFF], &b[RESERVED1_OFF..MAXBLKID_OFF], &b[RESERVED2_OFF..BLKPTR_OFF]];
        if reserved.iter().any(|r| r.iter().any(|&x| x != 0)) {
            return Err(Corrupt::new("dnode", "reserved bytes not zero"));
        }
        let maxblkid = u64_at(b, MAXBLKID_OFF);
        if maxblkid.checked_add(1).and_then(|n| n.checked_mul(sectors as u64 * 512)).is_none() {
            return Err(Corrupt::new("dnode", format!("maxblkid {maxblkid} past the end of any object")));
        }
        let blkptr = BlkPtr::decode(&b[BLKPTR_OFF..BONUS_OFF])?;
        if !blkptr.is_hole() && blkptr.level as u32 + 1 != nlevels as u32 {
            return Err(Corrupt::new("dnode", format!("{nlevels} levels with a level-{} root", blkptr.level)));
        }
        Ok(DnodePhys {
            otype,
            indblkshift: b[INDBLKSHIFT_OFF],
            nlevels,
            bonus_type: b[BONUS_TYPE_OFF],
            datablksz_bytes: sectors << 9,
            max_blksz_bytes: max_sectors << 9,
            maxblkid,
            used_bytes: u64_at(b, USED_OFF),
            blkptr,
            bonus: b[BONUS_OFF..BONUS_OFF + bonuslen].to_vec(),
        })
    }
}

/// Root of an object set: its meta-dnode (whose data is the dnode array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjsetPhys {
    /// The meta-dnode (object 0's header).
    pub meta_dnode: DnodePhys,
    /// 1 = MOS (pool metadata), 2 = file system dataset.
    pub os_type: u64,
    /// The dataset's intent-log header (all zero when it has no log).
    pub zil_header: ZilHeader,
}

impl ObjsetPhys {
    /// Encode to 2048 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; OBJSET_PHYS_SIZE_BYTES];
        self.meta_dnode.encode_into(&mut b[META_DNODE_OFF..META_DNODE_OFF + DNODE_SIZE_BYTES]);
        put_u64(&mut b, OS_TYPE_OFF, self.os_type);
        b[ZIL_OFF..ZIL_OFF + ZIL_HEADER_SIZE_BYTES].copy_from_slice(&self.zil_header.encode());
        b
    }

    /// Decode and validate.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < OBJSET_PHYS_SIZE_BYTES {
            return Err(Corrupt::new("objset", "short buffer"));
        }
        let os_type = u64_at(b, OS_TYPE_OFF);
        if !(1..=2).contains(&os_type) {
            return Err(Corrupt::new("objset", format!("type {os_type}")));
        }
        let zil_end = ZIL_OFF + ZIL_HEADER_SIZE_BYTES;
        if b[OS_RESERVED_OFF..ZIL_OFF].iter().chain(&b[zil_end..OBJSET_PHYS_SIZE_BYTES]).any(|&x| x != 0) {
            return Err(Corrupt::new("objset", "reserved bytes not zero"));
        }
        Ok(ObjsetPhys {
            meta_dnode: DnodePhys::decode(&b[META_DNODE_OFF..META_DNODE_OFF + DNODE_SIZE_BYTES])?,
            os_type,
            zil_header: ZilHeader::decode(&b[ZIL_OFF..zil_end])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::Dva;

    #[test]
    fn dnode_roundtrip_and_offsets() {
        let mut d = DnodePhys::free();
        d.otype = ObjectType::FileData;
        d.nlevels = 2;
        d.datablksz_bytes = 128 << 10;
        d.max_blksz_bytes = 128 << 10;
        d.maxblkid = 77;
        d.used_bytes = 999;
        d.bonus = vec![5; 100];
        d.bonus_type = 1;
        d.blkptr.dva[0] = Dva {
            vdev: 0,
            asize_bytes: 512,
            offset_bytes: 4096,
        };
        d.blkptr.lsize_bytes = 512;
        d.blkptr.psize_bytes = 512;
        d.blkptr.birth_txg = 3;
        d.blkptr.otype = ObjectType::Indirect;
        d.blkptr.level = 1;
        d.blkptr.checksum_alg = crate::ChecksumAlg::Blake3;
        let mut b = [0u8; 512];
        d.encode_into(&mut b);
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 256);
        assert_eq!(b[192], 5);
        assert_eq!(DnodePhys::decode(&b).unwrap(), d);
        let os = ObjsetPhys {
            meta_dnode: d,
            os_type: 2,
            zil_header: ZilHeader::default(),
        };
        assert_eq!(ObjsetPhys::decode(&os.encode()).unwrap(), os);
    }

    #[test]
    fn free_slot_is_zero() {
        let mut b = [1u8; 512];
        DnodePhys::free().encode_into(&mut b);
        assert!(b.iter().all(|&x| x == 0));
        assert!(DnodePhys::decode(&b).unwrap().is_free());
    }
}
