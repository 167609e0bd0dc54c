//! Block pointers and DVAs (ZFS `blkptr_t`, `dva_t`; OpenZFS `include/sys/spa.h`).
//!
//! Layout of a [`BlkPtr`] (128 bytes, little-endian):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 48   | dva[3], 16 bytes each (see [`Dva`]) |
//! | 48  | 4    | lsize_bytes (logical size) |
//! | 52  | 4    | psize_bytes (physical size, after compression) |
//! | 56  | 1    | object type ([`ObjectType`]) |
//! | 57  | 1    | level (0 = data, n = indirect) |
//! | 58  | 1    | checksum algorithm |
//! | 59  | 1    | compression |
//! | 60  | 4    | reserved, zero |
//! | 64  | 8    | birth_txg |
//! | 72  | 8    | fill (non-hole level-0 blocks beneath) |
//! | 80  | 32   | checksum of the physical block |
//! | 112 | 16   | reserved, zero |
//!
//! A hole is the all-zero pointer (birth_txg 0). Layout of a [`Dva`] (16 bytes):
//! vdev u32 @0 (top-level vdev id), asize_sectors u32 @4 (allocated size in 512-byte
//! units), offset_bytes u64 @8 (from the start of the top-level vdev's allocatable
//! space). A DVA with asize 0 is empty.

use crate::checksum::{Checksum, ChecksumAlg};
use crate::compress::Compression;
use crate::le::*;
use crate::Corrupt;

/// Size of an encoded block pointer.
pub const BLKPTR_SIZE_BYTES: usize = 128;
/// Size of an encoded DVA.
pub const DVA_SIZE_BYTES: usize = 16;

/// Data virtual address: one copy of a block on one top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Dva {
    /// Top-level vdev id (index in the pool's vdev tree).
    pub vdev: u32,
    /// Allocated bytes on that top-level vdev (a multiple of 512, includes parity).
    pub asize_bytes: u64,
    /// Offset in bytes within the top-level vdev's allocatable space.
    pub offset_bytes: u64,
}

impl Dva {
    /// True for an unused DVA slot.
    pub fn is_empty(&self) -> bool {
        self.asize_bytes == 0
    }
    fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.vdev);
        put_u32(b, 4, (self.asize_bytes >> 9) as u32);
        put_u64(b, 8, self.offset_bytes);
    }
    fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let d = Dva {
            vdev: u32_at(b, 0),
            asize_bytes: (u32_at(b, 4) as u64) << 9,
            offset_bytes: u64_at(b, 8),
        };
        if d.asize_bytes == 0 && (d.vdev != 0 || d.offset_bytes != 0) {
            return Err(Corrupt::new("dva", "empty DVA with non-zero fields"));
        }
        Ok(d)
    }
}

/// What a block holds; recorded in the block pointer for traversal and `zdb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjectType {
    /// Unused / hole.
    None = 0,
    /// Dnode array (the meta-dnode's data blocks).
    Dnode = 1,
    /// Object set root ([`crate::ObjsetPhys`]).
    Objset = 2,
    /// Indirect block (array of block pointers).
    Indirect = 3,
    /// Plain file contents.
    FileData = 4,
    /// Directory ZAP blocks.
    DirZap = 5,
    /// Generic ZAP blocks (properties, directories of datasets).
    Zap = 6,
    /// Packed configuration / small records encoded as JSON.
    Packed = 7,
    /// Pool space map.
    SpaceMap = 8,
    /// Pool history log.
    History = 9,
    /// Symlink target.
    Symlink = 10,
    /// DSL dataset record.
    DslDataset = 11,
    /// Intent log block (reserved for the ZIL issue).
    IntentLog = 12,
    /// Dead list of a dataset or snapshot: an array of block pointers that died
    /// while a snapshot still referenced them (OpenZFS `bpobj` under a deadlist).
    Deadlist = 13,
    /// Metaslab directory root: per top-level vdev its metaslab geometry and directory
    /// pages, plus the space-map log chain head (what the uberblock's `spacemap_bp`
    /// points at).
    MetaslabRoot = 20,
    /// Metaslab directory page: flush txg and condensed-map pointer of a run of metaslabs.
    MetaslabPage = 21,
    /// One metaslab's condensed free-space map as of its flush txg.
    MetaslabMap = 22,
    /// One block of the pool-wide space-map log (a txg's alloc/free records).
    SpaceMapLog = 23,
}

impl ObjectType {
    /// Decode from the on-disk byte.
    pub fn from_u8(v: u8) -> Result<Self, Corrupt> {
        use ObjectType::*;
        Ok(match v {
            0 => None,
            1 => Dnode,
            2 => Objset,
            3 => Indirect,
            4 => FileData,
            5 => DirZap,
            6 => Zap,
            7 => Packed,
            8 => SpaceMap,
            9 => History,
            10 => Symlink,
            11 => DslDataset,
            12 => IntentLog,
            13 => Deadlist,
            20 => MetaslabRoot,
            21 => MetaslabPage,
            22 => MetaslabMap,
            23 => SpaceMapLog,
            _ => return Err(Corrupt::new("blkptr", format!("unknown object type {v}"))),
        })
    }

    /// Metadata gets ditto copies (invariant 5); file data does not.
    pub fn is_metadata(self) -> bool {
        !matches!(self, ObjectType::FileData | ObjectType::None)
    }
}

/// A block pointer: where a block's copies live and how to verify them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlkPtr {
    /// Up to three copies; unused slots are empty.
    pub dva: [Dva; 3],
    /// Logical (uncompressed) size in bytes.
    pub lsize_bytes: u32,
    /// Physical (stored, possibly compressed) size in bytes.
    pub psize_bytes: u32,
    /// What the block holds.
    pub otype: ObjectType,
    /// Indirection level: 0 for data, n for an indirect block n levels up.
    pub level: u8,
    /// Checksum algorithm of `checksum`.
    pub checksum_alg: ChecksumAlg,
    /// How the physical bytes are compressed.
    pub compression: Compression,
    /// Txg in which this block was written (0 = hole).
    pub birth_txg: u64,
    /// Number of non-hole level-0 blocks at or below this pointer.
    pub fill: u64,
    /// Checksum of the `psize_bytes` physical bytes.
    pub checksum: Checksum,
}

impl Default for BlkPtr {
    fn default() -> Self {
        Self::HOLE
    }
}

impl BlkPtr {
    /// The hole: no data, reads as zeros.
    pub const HOLE: BlkPtr = BlkPtr {
        dva: [Dva {
            vdev: 0,
            asize_bytes: 0,
            offset_bytes: 0,
        }; 3],
        lsize_bytes: 0,
        psize_bytes: 0,
        otype: ObjectType::None,
        level: 0,
        checksum_alg: ChecksumAlg::Off,
        compression: Compression::Off,
        birth_txg: 0,
        fill: 0,
        checksum: [0; 32],
    };

    /// True when this pointer is a hole.
    pub fn is_hole(&self) -> bool {
        self.birth_txg == 0
    }

    /// The non-empty DVAs.
    pub fn dvas(&self) -> impl Iterator<Item = &Dva> {
        self.dva.iter().filter(|d| !d.is_empty())
    }

    /// Allocated bytes summed over all copies.
    pub fn asize_total_bytes(&self) -> u64 {
        self.dvas().map(|d| d.asize_bytes).sum()
    }

    /// Encode into exactly [`BLKPTR_SIZE_BYTES`] bytes at `b[..128]`.
    pub fn encode_into(&self, b: &mut [u8]) {
        let b = &mut b[..BLKPTR_SIZE_BYTES];
        b.fill(0);
        if self.is_hole() {
            return;
        }
        for (i, d) in self.dva.iter().enumerate() {
            d.encode(&mut b[i * 16..i * 16 + 16]);
        }
        put_u32(b, 48, self.lsize_bytes);
        put_u32(b, 52, self.psize_bytes);
        b[56] = self.otype as u8;
        b[57] = self.level;
        b[58] = self.checksum_alg as u8;
        b[59] = self.compression as u8;
        put_u64(b, 64, self.birth_txg);
        put_u64(b, 72, self.fill);
        b[80..112].copy_from_slice(&self.checksum);
    }

    /// Encode to a fresh array.
    pub fn encode(&self) -> [u8; BLKPTR_SIZE_BYTES] {
        let mut b = [0u8; BLKPTR_SIZE_BYTES];
        self.encode_into(&mut b);
        b
    }

    /// Decode and validate 128 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < BLKPTR_SIZE_BYTES {
            return Err(Corrupt::new("blkptr", "short buffer"));
        }
        let b = &b[..BLKPTR_SIZE_BYTES];
        let birth_txg = u64_at(b, 64);
        if birth_txg == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err(Corrupt::new("blkptr", "hole with non-zero fields"));
            }
            return Ok(Self::HOLE);
        }
        if u32_at(b, 60) != 0 || b[112..128].iter().any(|&x| x != 0) {
            return Err(Corrupt::new("blkptr", "reserved bytes not zero"));
        }
        let mut dva = [Dva::default(); 3];
        for (i, d) in dva.iter_mut().enumerate() {
            *d = Dva::decode(&b[i * 16..i * 16 + 16])?;
        }
        let bp = BlkPtr {
            dva,
            lsize_bytes: u32_at(b, 48),
            psize_bytes: u32_at(b, 52),
            otype: ObjectType::from_u8(b[56])?,
            level: b[57],
            checksum_alg: ChecksumAlg::from_u8(b[58])?,
            compression: Compression::from_u8(b[59])?,
            birth_txg,
            fill: u64_at(b, 72),
            checksum: b[80..112].try_into().unwrap(),
        };
        if bp.dva[0].is_empty() {
            return Err(Corrupt::new("blkptr", "non-hole without a DVA"));
        }
        if bp.psize_bytes == 0 || bp.lsize_bytes == 0 || bp.psize_bytes > bp.lsize_bytes {
            return Err(Corrupt::new("blkptr", "bad lsize/psize"));
        }
        if bp.level > 8 {
            return Err(Corrupt::new("blkptr", format!("level {} too deep", bp.level)));
        }
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hole_is_all_zero() {
        assert_eq!(BlkPtr::HOLE.encode(), [0u8; 128]);
        assert!(BlkPtr::decode(&[0u8; 128]).unwrap().is_hole());
    }

    #[test]
    fn offsets_match_format_doc() {
        let mut bp = BlkPtr::HOLE;
        bp.dva[0] = Dva {
            vdev: 1,
            asize_bytes: 4096,
            offset_bytes: 0x1000,
        };
        bp.lsize_bytes = 0x2000;
        bp.psize_bytes = 0x1000;
        bp.birth_txg = 0x1234;
        bp.otype = ObjectType::FileData;
        bp.checksum_alg = ChecksumAlg::Blake3;
        bp.checksum = [0xab; 32];
        let b = bp.encode();
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 8);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0x1000);
        assert_eq!(u32::from_le_bytes(b[48..52].try_into().unwrap()), 0x2000);
        assert_eq!(b[56], 4);
        assert_eq!(u64::from_le_bytes(b[64..72].try_into().unwrap()), 0x1234);
        assert_eq!(b[80], 0xab);
    }

    /// Every object type has its own code (format.md §4): decoding each code gives the
    /// type back, and the unused codes (14–19, 24 and up) are refused.
    #[test]
    fn object_type_codes_are_distinct_and_round_trip() {
        use ObjectType::*;
        let all = [
            None,
            Dnode,
            Objset,
            Indirect,
            FileData,
            DirZap,
            Zap,
            Packed,
            SpaceMap,
            History,
            Symlink,
            DslDataset,
            IntentLog,
            Deadlist,
            MetaslabRoot,
            MetaslabPage,
            MetaslabMap,
            SpaceMapLog,
        ];
        let codes: Vec<u8> = all.iter().map(|&t| t as u8).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 22, 23]);
        for v in 0..=u8::MAX {
            match ObjectType::from_u8(v) {
                Ok(t) => assert_eq!(t as u8, v),
                Err(_) => assert!(!codes.contains(&v), "code {v} refused"),
            }
        }
        assert_eq!((0..=u8::MAX).filter(|&v| ObjectType::from_u8(v).is_ok()).count(), all.len());
    }

    #[test]
    fn reserved_must_be_zero() {
        let mut bp = BlkPtr::HOLE;
        bp.dva[0] = Dva {
            vdev: 0,
            asize_bytes: 512,
            offset_bytes: 0,
        };
        bp.lsize_bytes = 512;
        bp.psize_bytes = 512;
        bp.birth_txg = 5;
        let mut b = bp.encode();
        assert!(BlkPtr::decode(&b).is_ok());
        b[120] = 1;
        assert!(BlkPtr::decode(&b).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(vdev in 0u32..64, sectors in 1u64..1_000_000, off in 0u64..(1u64<<50),
                     lsize in 1u32..(1<<24), birth in 1u64..u64::MAX, fill in 0u64..1000,
                     level in 0u8..6, sum in proptest::array::uniform32(any::<u8>())) {
            let mut bp = BlkPtr::HOLE;
            bp.dva[0] = Dva { vdev, asize_bytes: sectors << 9, offset_bytes: off };
            bp.dva[2] = Dva { vdev: vdev + 1, asize_bytes: sectors << 9, offset_bytes: off / 2 };
            bp.lsize_bytes = lsize;
            bp.psize_bytes = lsize;
            bp.birth_txg = birth;
            bp.fill = fill;
            bp.level = level;
            bp.otype = ObjectType::Indirect;
            bp.checksum_alg = ChecksumAlg::Fletcher4;
            bp.compression = Compression::Lz4;
            bp.checksum = sum;
            prop_assert_eq!(BlkPtr::decode(&bp.encode()).unwrap(), bp);
        }
    }
}
