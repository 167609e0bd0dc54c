//! Block pointers and DVAs (ZFS `blkptr_t`, `dva_t`; OpenZFS `include/sys/spa.h`).
//!
//! Layout of a [`BlkPtr`] (128 bytes, little-endian):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0   | 48   | `dva[3]`, 16 bytes each (see [`Dva`]) |
//! | 48  | 4    | lsize_bytes (logical size) |
//! | 52  | 4    | psize_bytes (physical size, after compression) |
//! | 56  | 1    | object type ([`ObjectType`]) |
//! | 57  | 1    | level (0 = data, n = indirect) |
//! | 58  | 1    | checksum algorithm |
//! | 59  | 1    | compression |
//! | 60  | 4    | flags: bit 0 dedup (the block is in the dedup table); other bits zero |
//! | 64  | 8    | birth_txg |
//! | 72  | 8    | fill (non-hole level-0 blocks beneath) |
//! | 80  | 32   | checksum of the physical block |
//! | 112 | 8    | phys_birth_txg (0: same as birth_txg; set on cloned pointers) |
//! | 120 | 8    | reserved, zero |
//!
//! A hole is the all-zero pointer (birth_txg 0). Every other pointer is checked on
//! decode the way OpenZFS's `zfs_blkptr_verify` checks one before trusting it: a
//! known type, checksum and compression; an `Off` checksum only on a level-0 file
//! data block (what `checksum=off` writes; OpenZFS allows it for user data too) with
//! an all-zero checksum field — never on metadata, whose verification a crafted
//! pointer could otherwise switch off; lsize and
//! psize within [`ObjectType::lsize_max_bytes`] (the largest record, 1 MiB, or 2 MiB
//! for the metaslab directory's blocks); level at most [`BLKPTR_LEVEL_MAX`], non-zero
//! exactly for indirect blocks; and each DVA's allocated size covers psize without
//! absurd inflation, inside [`crate::label::VDEV_ASIZE_MAX_BYTES`].
//!
//! Layout of a [`Dva`] (16 bytes):
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
/// Deepest indirection level a pointer may claim (a tree has at most 8 levels:
/// `DnodePhys::nlevels` ≤ 8, so its root is at most level 7; 8 leaves room for the
/// level a growing tree adds).
pub const BLKPTR_LEVEL_MAX: u8 = 8;
/// Largest block of the metaslab directory (root, pages, maps, log): a directory page
/// of a vdev at the metaslab count limit is a little over 1 MiB.
pub const SPACE_BLOCK_SIZE_MAX_BYTES: u32 = 2 << 20;
/// Largest allocated-to-physical inflation a DVA may show: raidz3 of a one-sector
/// block at ashift 16 allocates 4 sectors (`asize ≤ 4 × (psize + 64 KiB)`).
const ASIZE_INFLATION_MAX: u64 = 4;

// Field offsets of an encoded [`Dva`].
const DVA_VDEV_OFF: usize = 0;
const DVA_ASIZE_OFF: usize = 4;
const DVA_OFFSET_OFF: usize = 8;

// Field offsets of an encoded [`BlkPtr`]; DVA `i` is at `i * DVA_SIZE_BYTES`.
const LSIZE_OFF: usize = 48;
const PSIZE_OFF: usize = 52;
const TYPE_OFF: usize = 56;
const LEVEL_OFF: usize = 57;
const CHECKSUM_ALG_OFF: usize = 58;
const COMPRESSION_OFF: usize = 59;
const FLAGS_OFF: usize = 60;
const BIRTH_OFF: usize = 64;
const FILL_OFF: usize = 72;
const CHECKSUM_OFF: usize = 80;
const PHYS_BIRTH_OFF: usize = 112;
/// 8 reserved bytes, zero, to the end.
const RESERVED_OFF: usize = 120;

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
        put_u32(b, DVA_VDEV_OFF, self.vdev);
        put_u32(b, DVA_ASIZE_OFF, (self.asize_bytes >> 9) as u32);
        put_u64(b, DVA_OFFSET_OFF, self.offset_bytes);
    }
    fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let d = Dva {
            vdev: u32_at(b, DVA_VDEV_OFF),
            asize_bytes: (u32_at(b, DVA_ASIZE_OFF) as u64) << 9,
            offset_bytes: u64_at(b, DVA_OFFSET_OFF),
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

    /// Largest lsize/psize a pointer to a block of this type may claim: the largest
    /// record ([`crate::MAX_BLOCK_SIZE_BYTES`], 1 MiB) for every object's blocks,
    /// [`SPACE_BLOCK_SIZE_MAX_BYTES`] for the metaslab directory's. OpenZFS's
    /// `SPA_MAXBLOCKSIZE` (16 MiB) plays this part there.
    pub fn lsize_max_bytes(self) -> u32 {
        match self {
            ObjectType::MetaslabRoot | ObjectType::MetaslabPage | ObjectType::MetaslabMap | ObjectType::SpaceMapLog => SPACE_BLOCK_SIZE_MAX_BYTES,
            _ => crate::MAX_BLOCK_SIZE_BYTES,
        }
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
    /// Txg in which this pointer was made (0 = hole): when the block was written,
    /// or, for a pointer made by cloning (`copy_file_range`), the txg of the clone.
    /// Snapshots, dead lists and incremental sends go by it.
    pub birth_txg: u64,
    /// Txg in which the block's bytes were written when that is earlier than
    /// `birth_txg` (a cloned pointer, OpenZFS's physical birth), else 0. Only level-0
    /// file data carries one. See [`BlkPtr::physical_birth_txg`].
    pub phys_birth_txg: u64,
    /// The block is deduplicated (OpenZFS `BP_GET_DEDUP`): the pool's dedup table
    /// counts the pointers naming it, and a free drops one reference there. Only
    /// level-0 file data with a strong checksum carries it.
    pub dedup: bool,
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
        phys_birth_txg: 0,
        dedup: false,
        fill: 0,
        checksum: [0; 32],
    };

    /// When the block's bytes were written (scans, resilvers and dirty time logs go
    /// by it): `phys_birth_txg` when set, else `birth_txg`.
    pub fn physical_birth_txg(&self) -> u64 {
        if self.phys_birth_txg == 0 {
            self.birth_txg
        } else {
            self.phys_birth_txg
        }
    }

    /// True when this pointer is a hole.
    pub fn is_hole(&self) -> bool {
        self.birth_txg == 0
    }

    /// The non-empty DVAs.
    pub fn dvas(&self) -> impl Iterator<Item = &Dva> {
        self.dva.iter().filter(|d| !d.is_empty())
    }

    /// Bytes this block counts for in the logical ("uncompressed") space figures
    /// (`logicalused`, `logicalreferenced`, the numerator of `compressratio`): lsize
    /// for file data, psize for metadata, whose compression is not the user's doing
    /// (OpenZFS `BP_GET_UCSIZE`). 0 for a hole.
    pub fn ucsize_bytes(&self) -> u64 {
        if self.is_hole() {
            0
        } else if self.otype.is_metadata() {
            u64::from(self.psize_bytes)
        } else {
            u64::from(self.lsize_bytes)
        }
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
            d.encode(&mut b[i * DVA_SIZE_BYTES..(i + 1) * DVA_SIZE_BYTES]);
        }
        put_u32(b, LSIZE_OFF, self.lsize_bytes);
        put_u32(b, PSIZE_OFF, self.psize_bytes);
        b[TYPE_OFF] = self.otype as u8;
        b[LEVEL_OFF] = self.level;
        b[CHECKSUM_ALG_OFF] = self.checksum_alg as u8;
        b[COMPRESSION_OFF] = self.compression as u8;
        put_u32(b, FLAGS_OFF, u32::from(self.dedup));
        put_u64(b, BIRTH_OFF, self.birth_txg);
        put_u64(b, FILL_OFF, self.fill);
        b[CHECKSUM_OFF..PHYS_BIRTH_OFF].copy_from_slice(&self.checksum);
        put_u64(b, PHYS_BIRTH_OFF, self.phys_birth_txg);
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
        let birth_txg = u64_at(b, BIRTH_OFF);
        if birth_txg == 0 {
            if b.iter().any(|&x| x != 0) {
                return Err(Corrupt::new("blkptr", "hole with non-zero fields"));
            }
            return Ok(Self::HOLE);
        }
        if u32_at(b, FLAGS_OFF) > 1 || b[RESERVED_OFF..BLKPTR_SIZE_BYTES].iter().any(|&x| x != 0) {
            return Err(Corrupt::new("blkptr", "reserved bytes not zero"));
        }
        let mut dva = [Dva::default(); 3];
        for (i, d) in dva.iter_mut().enumerate() {
            *d = Dva::decode(&b[i * DVA_SIZE_BYTES..(i + 1) * DVA_SIZE_BYTES])?;
        }
        let bp = BlkPtr {
            dva,
            lsize_bytes: u32_at(b, LSIZE_OFF),
            psize_bytes: u32_at(b, PSIZE_OFF),
            otype: ObjectType::from_u8(b[TYPE_OFF])?,
            level: b[LEVEL_OFF],
            checksum_alg: ChecksumAlg::from_u8(b[CHECKSUM_ALG_OFF])?,
            compression: Compression::from_u8(b[COMPRESSION_OFF])?,
            birth_txg,
            phys_birth_txg: u64_at(b, PHYS_BIRTH_OFF),
            dedup: u32_at(b, FLAGS_OFF) == 1,
            fill: u64_at(b, FILL_OFF),
            checksum: b[CHECKSUM_OFF..PHYS_BIRTH_OFF].try_into().unwrap(),
        };
        if bp.dedup && (bp.otype != ObjectType::FileData || bp.level != 0 || !bp.checksum_alg.is_strong()) {
            return Err(Corrupt::new(
                "blkptr",
                format!("dedup flag on a {:?} block with {:?}", bp.otype, bp.checksum_alg),
            ));
        }
        if bp.phys_birth_txg != 0 && (bp.phys_birth_txg >= birth_txg || bp.otype != ObjectType::FileData || bp.level != 0) {
            return Err(Corrupt::new(
                "blkptr",
                format!("physical birth {} for a {:?} block born in {birth_txg}", bp.phys_birth_txg, bp.otype),
            ));
        }
        if bp.dva[0].is_empty() {
            return Err(Corrupt::new("blkptr", "non-hole without a DVA"));
        }
        if bp.psize_bytes == 0 || bp.lsize_bytes == 0 || bp.psize_bytes > bp.lsize_bytes {
            return Err(Corrupt::new("blkptr", "bad lsize/psize"));
        }
        if bp.lsize_bytes > bp.otype.lsize_max_bytes() {
            return Err(Corrupt::new(
                "blkptr",
                format!(
                    "lsize {} above the largest {:?} block ({})",
                    bp.lsize_bytes,
                    bp.otype,
                    bp.otype.lsize_max_bytes()
                ),
            ));
        }
        if bp.checksum_alg == ChecksumAlg::Off && (bp.otype != ObjectType::FileData || bp.checksum != [0; 32]) {
            return Err(Corrupt::new("blkptr", "block without a checksum"));
        }
        if bp.otype == ObjectType::None {
            return Err(Corrupt::new("blkptr", "non-hole of type none"));
        }
        if bp.level > BLKPTR_LEVEL_MAX {
            return Err(Corrupt::new("blkptr", format!("level {} too deep", bp.level)));
        }
        if (bp.level > 0) != (bp.otype == ObjectType::Indirect) {
            return Err(Corrupt::new("blkptr", format!("level {} for a {:?} block", bp.level, bp.otype)));
        }
        let psize = bp.psize_bytes as u64;
        for d in bp.dvas() {
            if d.asize_bytes < psize || d.asize_bytes > ASIZE_INFLATION_MAX * (psize + (64 << 10)) {
                return Err(Corrupt::new("blkptr", format!("DVA asize {} for psize {psize}", d.asize_bytes)));
            }
            if d.offset_bytes.checked_add(d.asize_bytes).is_none_or(|e| e > crate::label::VDEV_ASIZE_MAX_BYTES) {
                return Err(Corrupt::new("blkptr", format!("DVA offset {} beyond any vdev", d.offset_bytes)));
            }
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
        bp.otype = ObjectType::FileData;
        bp.checksum_alg = ChecksumAlg::Fletcher4;
        let mut b = bp.encode();
        assert!(BlkPtr::decode(&b).is_ok());
        b[120] = 1;
        assert!(BlkPtr::decode(&b).is_err());
    }

    #[test]
    fn physical_birth_only_before_birth_and_on_file_data() {
        let mut bp = data_bp();
        bp.birth_txg = 9;
        bp.phys_birth_txg = 4;
        let back = BlkPtr::decode(&bp.encode()).unwrap();
        assert_eq!((back.birth_txg, back.physical_birth_txg()), (9, 4));
        assert_eq!(data_bp().physical_birth_txg(), data_bp().birth_txg);
        for (phys, otype, level) in [(9, ObjectType::FileData, 0), (10, ObjectType::FileData, 0), (4, ObjectType::Zap, 0)] {
            let mut b = bp;
            b.phys_birth_txg = phys;
            b.otype = otype;
            b.level = level;
            assert!(BlkPtr::decode(&b.encode()).is_err(), "physical birth {phys} on {otype:?}");
        }
    }

    fn data_bp() -> BlkPtr {
        BlkPtr {
            dva: [
                Dva {
                    vdev: 0,
                    asize_bytes: 128 << 10,
                    offset_bytes: 1 << 20,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize_bytes: 128 << 10,
            psize_bytes: 128 << 10,
            otype: ObjectType::FileData,
            level: 0,
            checksum_alg: ChecksumAlg::Fletcher4,
            compression: Compression::Off,
            birth_txg: 9,
            phys_birth_txg: 0,
            dedup: false,
            fill: 1,
            checksum: [7; 32],
        }
    }

    /// Pointers that pass the layout checks but claim what Tarn never writes are
    /// refused (OpenZFS `zfs_blkptr_verify`), each next to one that is accepted.
    #[test]
    fn semantic_checks_refuse_crafted_pointers() {
        let good = data_bp();
        assert_eq!(BlkPtr::decode(&good.encode()).unwrap(), good);
        type Craft = fn(&mut BlkPtr);
        let cases: Vec<(&str, Craft)> = vec![
            ("lsize 4 GiB", |b| {
                b.lsize_bytes = u32::MAX;
                b.psize_bytes = u32::MAX;
                b.dva[0].asize_bytes = (u32::MAX as u64).div_ceil(512) * 512;
            }),
            ("lsize 2 MiB of file data", |b| {
                b.lsize_bytes = 2 << 20;
                b.psize_bytes = 2 << 20;
                b.dva[0].asize_bytes = 2 << 20;
            }),
            ("checksum off with a sum", |b| b.checksum_alg = ChecksumAlg::Off),
            ("checksum off on metadata", |b| {
                b.checksum_alg = ChecksumAlg::Off;
                b.checksum = [0; 32];
                b.otype = ObjectType::Zap;
            }),
            ("type none", |b| b.otype = ObjectType::None),
            ("level 9", |b| {
                b.otype = ObjectType::Indirect;
                b.level = 9;
            }),
            ("data at level 1", |b| b.level = 1),
            ("indirect at level 0", |b| b.otype = ObjectType::Indirect),
            ("asize below psize", |b| b.dva[0].asize_bytes = 512),
            ("asize absurd", |b| b.dva[0].asize_bytes = 1 << 40),
            ("offset past every vdev", |b| b.dva[0].offset_bytes = u64::MAX - 4096),
        ];
        for (what, f) in cases {
            let mut bp = good;
            f(&mut bp);
            assert!(BlkPtr::decode(&bp.encode()).is_err(), "{what} accepted");
        }
        // Unknown checksum and compression codes.
        for (off, v) in [(58usize, 5u8), (58, 255), (59, 13), (59, 200)] {
            let mut b = good.encode();
            b[off] = v;
            assert!(BlkPtr::decode(&b).is_err(), "byte {off} = {v} accepted");
        }
        // File data with `checksum=off`: accepted (all-zero sum), as are the other codes.
        let mut off = good;
        off.checksum_alg = ChecksumAlg::Off;
        off.checksum = [0; 32];
        assert_eq!(BlkPtr::decode(&off.encode()).unwrap(), off);
        for alg in [ChecksumAlg::Sha256, ChecksumAlg::Sha512, ChecksumAlg::Blake3] {
            for c in Compression::ALL {
                let mut b = good;
                b.checksum_alg = alg;
                b.compression = c;
                assert_eq!(BlkPtr::decode(&b.encode()).unwrap(), b);
            }
        }
        // The metaslab directory may use 2 MiB blocks.
        let mut page = good;
        page.otype = ObjectType::MetaslabPage;
        page.lsize_bytes = 2 << 20;
        page.psize_bytes = 2 << 20;
        page.dva[0].asize_bytes = 2 << 20;
        page.checksum_alg = ChecksumAlg::Blake3;
        assert!(BlkPtr::decode(&page.encode()).is_ok());
    }

    proptest! {
        #[test]
        fn roundtrip(vdev in 0u32..64, sectors in 1u64..1_000_000, off in 0u64..(1u64<<50),
                     lsize in 1u32..=(1<<20), birth in 1u64..u64::MAX, fill in 0u64..1000,
                     level in 1u8..=8, sum in proptest::array::uniform32(any::<u8>())) {
            let mut bp = BlkPtr::HOLE;
            let asize = (lsize as u64).div_ceil(512) * 512 + (sectors % 128) * 512;
            bp.dva[0] = Dva { vdev, asize_bytes: asize, offset_bytes: off };
            bp.dva[2] = Dva { vdev: vdev + 1, asize_bytes: asize, offset_bytes: off / 2 };
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
