//! # phys — every persistent byte layout in Tarn
//!
//! Theory: this crate owns the on-disk format and nothing else. Each structure has an
//! in-memory Rust type and a fixed little-endian encoding produced by `encode` and
//! checked by `decode`, which returns [`Corrupt`] instead of panicking on bad input.
//! The layouts are documented byte for byte in `docs/format.md`; the unit tests
//! assert the sizes and offsets stated there.
//!
//! Structures (ZFS names, our layouts):
//! - [`Dva`] (16 B) and [`BlkPtr`] (128 B): where a block lives and how to verify it
//!   (256-bit checksum, birth txg, logical/physical size, up to three DVAs). ZFS
//!   `blkptr_t`, see OpenZFS `include/sys/spa.h`.
//! - [`DnodePhys`] (512 B): an object's header, one top-level block pointer and a
//!   320-byte bonus buffer. ZFS `dnode_phys_t`.
//! - [`ObjsetPhys`] (2 KiB): the root of an object set: its meta-dnode and ZIL header.
//! - [`UberblockPhys`] (one 4 KiB ring slot): txg, timestamp, GUID sum, the MOS root
//!   and the pool space map, self-checksummed.
//! - [`label`]: the 256 KiB vdev label (config + uberblock ring), four copies per leaf.
//! - [`zil`]: the intent-log header, log blocks and record headers.
//!
//! Invariants: decode(encode(x)) == x for every valid x (property-tested); a structure
//! with a wrong magic, bad self-checksum, unknown enum value or non-zero reserved
//! bytes is rejected with `Corrupt`.
//!
//! Called by: every engine crate. Calls: nothing but hash/compression libraries.

pub mod blkptr;
pub mod checksum;
pub mod compress;
pub mod dnode;
pub mod label;
pub mod uberblock;
pub mod zil;

pub use blkptr::{BlkPtr, Dva, ObjectType, BLKPTR_SIZE_BYTES, DVA_SIZE_BYTES};
pub use checksum::{Checksum, ChecksumAlg};
pub use compress::{CompressSetting, Compression};
pub use dnode::{DnodePhys, ObjsetPhys, DNODE_BONUS_SIZE_BYTES, DNODE_SIZE_BYTES, OBJSET_PHYS_SIZE_BYTES};
pub use uberblock::{UberblockPhys, UBERBLOCK_MAGIC, UBERBLOCK_SLOT_SIZE_BYTES};
pub use zil::{LwbHeader, LwbPtr, RecordHeader, ZilHeader};

/// Format version written into labels and uberblocks. An import refuses a pool whose
/// version is greater (invariant 9 in DESIGN.md), and one whose version is older than
/// [`TARN_FORMAT_VERSION_MIN`].
///
/// Version 2: the pool directory, dataset and snapshot records, properties and error
/// log are MOS objects (ZAPs and fixed records) instead of one JSON object; dataset
/// records carry snapshot links and dead lists; raidz blocks are variable width as in
/// OpenZFS (asize = data + parity sectors rounded up to a multiple of nparity + 1,
/// columns starting on child `(offset >> ashift) % n`).
///
/// Version 3: free space is kept per metaslab (about 200 per top-level vdev) in
/// condensed space maps plus a pool-wide space-map log (OpenZFS 2.0's log space map)
/// instead of one whole-pool space map rewritten every txg; dataset records may carry
/// user holds, the inconsistent (receive in progress) and defer-destroy flags; the pool
/// directory may name a bookmark record.
///
/// Version 4: block pointers may name the compression codes 2..=12 (zle, gzip-1..9,
/// zstd) and the checksum codes 3 (SHA-256) and 4 (SHA-512/256), and a file data block
/// may have no checksum (`checksum=off`); compressed payloads are rounded up to 512
/// bytes. A version 3 pool holds none of these and imports unchanged (its labels say 4
/// from the next label write on, since new blocks may then use the new codes).
///
/// Version 5: block cloning. A level-0 file data pointer may carry a physical birth
/// txg (bytes 112..120, earlier than its birth) when `copy_file_range` made it from
/// another pointer, and the pool directory may name a block reference table (MOS
/// object `brt`) counting the extra references of shared blocks; the root config may
/// list cache devices (`l2cache`). A version 3 or 4 pool holds none of these and
/// imports unchanged.
///
/// Version 6: a dedup table record (table and log) ends with the entry's last change
/// time, Unix seconds (128 bytes instead of 120), which `zpool ddtprune -d` reads; a
/// pointer with the dedup flag may have no entry (pruned) and is then an ordinary
/// block. A version 5 pool's table loads with the import's time as every entry's
/// change time and is rewritten in the new records by the first txg synced.
///
/// Version 7: an intent-log write record may name the file's own record block (object
/// type file data, not intent log): a block written before its txg synced that the
/// sync installs in the file's tree, which the log must never free and claims at
/// import only when its birth txg never reached the pool (docs/format.md §13). A
/// version 6 pool's logs hold none and import unchanged.
pub const TARN_FORMAT_VERSION: u64 = 7;

/// Oldest format version this build imports. Version 1 pools (JSON pool directory)
/// and version 2 pools (one whole-pool space map) are refused with a message that
/// names both versions.
pub const TARN_FORMAT_VERSION_MIN: u64 = 3;

/// Smallest leaf device accepted by `zpool create`, as in OpenZFS (`SPA_MINDEVSIZE`).
pub const MIN_DEVICE_SIZE_BYTES: u64 = 64 << 20;

/// Largest logical block (the `recordsize` maximum we accept): 1 MiB.
pub const MAX_BLOCK_SIZE_BYTES: u32 = 1 << 20;

/// Smallest block: one 512-byte sector (`SPA_MINBLOCKSIZE`).
pub const MIN_BLOCK_SIZE_BYTES: u32 = 512;

/// A decode failure: the bytes are not a valid encoding of `kind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt {kind}: {detail}")]
pub struct Corrupt {
    /// Which structure failed to decode (e.g. "blkptr", "uberblock").
    pub kind: &'static str,
    /// What was wrong with it.
    pub detail: String,
}

impl Corrupt {
    /// Build a `Corrupt` for structure `kind`.
    pub fn new(kind: &'static str, detail: impl Into<String>) -> Self {
        Corrupt { kind, detail: detail.into() }
    }
}

/// Little-endian field access on a byte slice; callers have checked the length.
pub(crate) mod le {
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
    }
    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }
    pub fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }
    pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
}
