//! # dmu — the data management unit
//!
//! Theory: the DMU turns a pool of checksummed blocks into *object sets*: flat arrays
//! of objects, each a sparse array of bytes (a block-pointer tree under a dnode) plus a
//! 320-byte bonus buffer. Everything above (POSIX files, directories, datasets) is an
//! object. Changes are made inside a transaction hold ([`TxHold`]) and land in the
//! open txg; `spa`'s sync loop writes each txg's dirty blocks bottom-up (data,
//! indirect blocks, dnode blocks, object-set root), copy-on-write, so an uberblock
//! always points at a complete tree of one txg.
//!
//! The [`ObjectStore`] trait is the contract upward: `zpl` and the [`zap`] are written
//! against it and tested on [`mem::MemStore`]; the real implementation is
//! [`objset::Objset`].
//!
//! Called by: zpl, spa (dsl). Calls: zio.

pub mod mem;
pub mod objset;
pub mod traverse;
pub mod txg;
pub mod zap;

pub use tarn_phys::ObjectType;

/// Errors from DMU operations. Expected outcomes are kept apart from media errors.
#[derive(Debug, thiserror::Error)]
pub enum DmuError {
    /// The object does not exist (free dnode slot or beyond the dnode array).
    #[error("object {0} not found")]
    NoSuchObject(u64),
    /// A ZAP entry does not exist.
    #[error("entry not found")]
    NotFound,
    /// A ZAP entry already exists.
    #[error("entry exists")]
    Exists,
    /// The pool has no space left for this change.
    #[error("out of space")]
    NoSpace,
    /// Name too long or otherwise invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A block could not be read correctly from any copy.
    #[error("I/O error: {0}")]
    Io(String),
    /// On-disk structure failed validation.
    #[error(transparent)]
    Corrupt(#[from] tarn_phys::Corrupt),
    /// The pool is suspended or read-only; no changes accepted.
    #[error("pool is suspended or read-only")]
    ReadOnly,
}

/// Result alias for the DMU.
pub type Result<T> = std::result::Result<T, DmuError>;

/// A hold on the open transaction group. All changes made while it is held land in
/// txg `txg` together; the txg cannot sync until every hold is released (dropped).
/// Obtain one with [`ObjectStore::hold_tx`]; keep it for the duration of one POSIX
/// operation (e.g. create = new object + directory entry + parent mtime).
pub struct TxHold {
    /// The txg this hold belongs to (0 for in-memory stores).
    pub txg: u64,
    /// Keeps the txg open; released on drop.
    pub _guard: Option<Box<dyn std::any::Any + Send>>,
}

/// Metadata of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Object type.
    pub otype: ObjectType,
    /// Data block size in bytes.
    pub datablksz_bytes: u32,
    /// Highest level-0 block id written so far.
    pub maxblkid: u64,
    /// Allocated bytes on disk as of the last synced txg (approximate for dirty objects).
    pub used_bytes: u64,
}

/// Space numbers for `statfs` and `zfs list` (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpaceInfo {
    /// Bytes referenced by this object set.
    pub used_bytes: u64,
    /// Bytes still available to it (pool free minus reservations).
    pub avail_bytes: u64,
}

/// The object-set contract used by the ZAP and the POSIX layer.
///
/// Semantics:
/// - Object ids are u64; 0 is the meta-dnode and never returned by `create_object`.
/// - `read` of bytes never written (holes, or past the last block) yields zeros.
/// - A write past the current end of an object simply extends it; the DMU does not
///   track byte length (the POSIX layer keeps file size in the bonus buffer).
/// - The block size of an object is fixed at creation, except that while the object
///   has at most one block (maxblkid == 0) a write may grow that block up to
///   `max_blksz_bytes` given at creation (ZFS's growing first block).
/// - All mutating calls need a `TxHold` from this store.
pub trait ObjectStore: Send + Sync {
    /// Hold the open txg (may block while dirty data is over its limit: write throttle).
    fn hold_tx(&self) -> Result<TxHold>;
    /// Allocate a new object. `blksz_bytes`: initial block size (512..=1 MiB, multiple
    /// of 512); `max_blksz_bytes`: the size the single first block may grow to
    /// (recordsize). Bonus ≤ 320 bytes.
    fn create_object(&self, tx: &TxHold, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<u64>;
    /// Create an object at a chosen id (intent-log replay recreates objects under the
    /// ids they had). Errors: `Exists` if `obj` is in use, `Invalid` as for
    /// `create_object` or if `obj` was freed in a txg that has not synced yet.
    fn claim_object(&self, tx: &TxHold, obj: u64, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<()>;
    /// Free an object and all its blocks.
    fn free_object(&self, tx: &TxHold, obj: u64) -> Result<()>;
    /// Read `buf.len()` bytes at `offset_bytes`.
    fn read(&self, obj: u64, offset_bytes: u64, buf: &mut [u8]) -> Result<()>;
    /// Write `data` at `offset_bytes`.
    fn write(&self, tx: &TxHold, obj: u64, offset_bytes: u64, data: &[u8]) -> Result<()>;
    /// Make `[offset_bytes, offset_bytes + len_bytes)` read as zeros, freeing whole
    /// blocks inside it (`len_bytes == u64::MAX` means to the end: truncate).
    fn free_range(&self, tx: &TxHold, obj: u64, offset_bytes: u64, len_bytes: u64) -> Result<()>;
    /// The object's bonus buffer.
    fn bonus(&self, obj: u64) -> Result<Vec<u8>>;
    /// Replace the object's bonus buffer (≤ 320 bytes).
    fn set_bonus(&self, tx: &TxHold, obj: u64, bonus: &[u8]) -> Result<()>;
    /// Object metadata.
    fn object_info(&self, obj: u64) -> Result<ObjectInfo>;
    /// Block until every change made before this call is durable on disk
    /// by forcing a txg sync (the POSIX layer's `fsync` uses the intent log instead).
    fn wait_synced(&self) -> Result<()>;
    /// Space numbers for this object set.
    fn space(&self) -> SpaceInfo;
    /// True when the store refuses changes (readonly dataset or pool).
    fn is_readonly(&self) -> bool {
        false
    }
    /// For block cloning: the block size of `obj` and the synced pointers of its
    /// blocks `[first_blkid, first_blkid + n)` (holes included). `Ok(None)` when a
    /// block of the range has a change that has not synced yet (wait for a sync and
    /// ask again), or when this store cannot share blocks (the default).
    fn block_pointers(&self, obj: u64, first_blkid: u64, n: u64) -> Result<Option<(u32, Vec<tarn_phys::BlkPtr>)>> {
        let _ = (obj, first_blkid, n);
        Ok(None)
    }
    /// For block cloning: make blocks `[first_blkid, first_blkid + bps.len())` of
    /// `obj` share `bps` (from [`ObjectStore::block_pointers`] of this store) in the
    /// held txg, replacing what was there. `blksz_bytes` is the source's block size:
    /// an object with data and another block size is refused (`Invalid`). Default:
    /// `Invalid` (no sharing).
    fn clone_blocks(&self, tx: &TxHold, obj: u64, first_blkid: u64, blksz_bytes: u32, bps: &[tarn_phys::BlkPtr]) -> Result<()> {
        let _ = (tx, obj, first_blkid, blksz_bytes, bps);
        Err(DmuError::Invalid("this object store cannot share blocks"))
    }
}
