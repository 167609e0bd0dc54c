//! # mem — an in-memory [`ObjectStore`] for unit tests
//!
//! Theory: [`MemStore`] models one object set with no pool underneath, so that the
//! ZAP and the POSIX layer can be tested without block trees, checksums or txgs. It
//! keeps the [`ObjectStore`] semantics that callers can observe and nothing else:
//!
//! - Objects live in a map from object id to a `MemObject`; ids start at 1 and only
//!   grow (a freed id is never handed out again, unlike a real dnode array).
//! - An object's bytes are held in fixed 4 KiB chunks (`CHUNK_BYTES`) keyed by chunk
//!   index, so a sparse write at a huge offset costs one chunk, and never-written
//!   bytes read as zeros. Chunk size is an implementation detail, unrelated to the
//!   object's block size.
//! - `len_bytes` is the high-water mark of written bytes; it gives `maxblkid`
//!   (`(len_bytes - 1) / blksz`, 0 when empty) and is cut back by a truncating
//!   `free_range` (`len_bytes == u64::MAX`).
//! - The block size follows ZFS's growing first block: while the object has at most
//!   one block, a write that ends past the block size grows it (rounded up to 512
//!   bytes) up to `max_blksz_bytes`.
//! - Transactions are trivial: [`ObjectStore::hold_tx`] returns txg 0 with no guard,
//!   every change is "durable" at once, and `wait_synced` returns immediately.
//! - `space()` reports the bytes held in chunks as used and 1 TiB as available.
//! - [`MemStore::set_readonly`] makes every mutating call fail with
//!   [`DmuError::ReadOnly`], to test read-only paths; [`MemStore::snapshot`] is a
//!   read-only deep copy, standing in for a snapshot's object set.
//!
//! Locks: `objects` (the object map), then `next_obj` (only in `claim_object`); each
//! taken once per call and never held across calls. Crash, EIO, ENOSPC: never happen here.
//!
//! Limits: everything lives in RAM; no accounting of indirect blocks or dnodes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::{DmuError, ObjectInfo, ObjectStore, ObjectType, Result, SpaceInfo, TxHold};

/// Bytes per storage chunk (an implementation detail of the map, not a block size).
const CHUNK_BYTES: u64 = 4096;
/// Largest bonus buffer accepted (the dnode's bonus area).
const BONUS_MAX_BYTES: usize = 320;
/// Smallest block size.
const BLKSZ_MIN_BYTES: u32 = 512;
/// Largest block size.
const BLKSZ_MAX_BYTES: u32 = 1 << 20;
/// Available bytes reported by `space()`.
const AVAIL_BYTES: u64 = 1 << 40;

/// One object of a [`MemStore`].
#[derive(Debug, Clone)]
struct MemObject {
    otype: ObjectType,
    blksz_bytes: u32,
    max_blksz_bytes: u32,
    bonus: Vec<u8>,
    /// Chunk index → `CHUNK_BYTES` bytes.
    chunks: BTreeMap<u64, Vec<u8>>,
    /// High-water mark of written bytes (drives `maxblkid`).
    len_bytes: u64,
}

impl MemObject {
    fn stored_bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK_BYTES
    }

    fn maxblkid(&self) -> u64 {
        if self.len_bytes == 0 {
            0
        } else {
            (self.len_bytes - 1) / u64::from(self.blksz_bytes)
        }
    }

    /// Zero `[start, end)`, dropping chunks that become entirely zero-by-absence.
    fn zero(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let first = start / CHUNK_BYTES;
        let last = (end - 1) / CHUNK_BYTES;
        let keys: Vec<u64> = self.chunks.range(first..=last).map(|(k, _)| *k).collect();
        for k in keys {
            let cstart = k * CHUNK_BYTES;
            let cend = cstart + CHUNK_BYTES;
            if start <= cstart && cend <= end {
                self.chunks.remove(&k);
            } else if let Some(c) = self.chunks.get_mut(&k) {
                let a = (start.max(cstart) - cstart) as usize;
                let b = (end.min(cend) - cstart) as usize;
                c[a..b].fill(0);
            }
        }
    }
}

/// An in-memory object set implementing [`ObjectStore`]; see the module docs.
#[derive(Debug, Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<u64, MemObject>>,
    next_obj: Mutex<u64>,
    readonly: AtomicBool,
    /// Writes still to be refused with `NoSpace` before they change anything.
    refuse_writes: std::sync::atomic::AtomicU32,
}

impl MemStore {
    /// An empty store; the first object created gets id 1.
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Number of live objects (for leak checks in tests).
    pub fn object_count(&self) -> usize {
        self.objects.lock().len()
    }

    /// Refuse the next `n` writes with [`DmuError::NoSpace`] before they change
    /// anything, as a pool does when the room is taken by other writers between the
    /// wait for space and the check under the hold (for the callers' retry tests).
    pub fn refuse_writes_for_space(&self, n: u32) {
        self.refuse_writes.store(n, Ordering::SeqCst);
    }

    /// Make every later mutating call fail with [`DmuError::ReadOnly`] (or allow again).
    pub fn set_readonly(&self, readonly: bool) {
        self.readonly.store(readonly, Ordering::SeqCst);
    }

    /// A read-only copy of the store as it is now: what a snapshot of this object set
    /// would show (for tests of snapshot views; later changes to either copy do not
    /// reach the other).
    pub fn snapshot(&self) -> MemStore {
        MemStore {
            objects: Mutex::new(self.objects.lock().clone()),
            next_obj: Mutex::new(*self.next_obj.lock()),
            readonly: AtomicBool::new(true),
            refuse_writes: std::sync::atomic::AtomicU32::new(0),
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.is_readonly() {
            Err(DmuError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

impl ObjectStore for MemStore {
    fn hold_tx(&self) -> Result<TxHold> {
        Ok(TxHold { txg: 0, _guard: None })
    }

    fn create_object(&self, tx: &TxHold, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<u64> {
        // A concurrent creator may take the id between the read and the claim: retry.
        loop {
            let id = *self.next_obj.lock() + 1;
            match self.claim_object(tx, id, otype, blksz_bytes, max_blksz_bytes, bonus) {
                Err(DmuError::Exists) => continue,
                r => return r.map(|()| id),
            }
        }
    }

    fn claim_object(&self, _tx: &TxHold, obj: u64, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<()> {
        self.check_writable()?;
        if !(BLKSZ_MIN_BYTES..=BLKSZ_MAX_BYTES).contains(&blksz_bytes) || !blksz_bytes.is_multiple_of(BLKSZ_MIN_BYTES) {
            return Err(DmuError::Invalid("block size must be 512..=1 MiB, a multiple of 512"));
        }
        if max_blksz_bytes < blksz_bytes || max_blksz_bytes > BLKSZ_MAX_BYTES || !max_blksz_bytes.is_multiple_of(BLKSZ_MIN_BYTES) {
            return Err(DmuError::Invalid("max block size must be blksz..=1 MiB, a multiple of 512"));
        }
        if bonus.len() > BONUS_MAX_BYTES {
            return Err(DmuError::Invalid("bonus buffer larger than 320 bytes"));
        }
        if obj == 0 {
            return Err(DmuError::Invalid("object 0 is the meta-dnode"));
        }
        let mut objects = self.objects.lock();
        if objects.contains_key(&obj) {
            return Err(DmuError::Exists);
        }
        let mut next = self.next_obj.lock();
        *next = (*next).max(obj);
        objects.insert(
            obj,
            MemObject {
                otype,
                blksz_bytes,
                max_blksz_bytes,
                bonus: bonus.to_vec(),
                chunks: BTreeMap::new(),
                len_bytes: 0,
            },
        );
        Ok(())
    }

    fn free_object(&self, _tx: &TxHold, obj: u64) -> Result<()> {
        self.check_writable()?;
        self.objects.lock().remove(&obj).map(|_| ()).ok_or(DmuError::NoSuchObject(obj))
    }

    fn read(&self, obj: u64, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let objects = self.objects.lock();
        let o = objects.get(&obj).ok_or(DmuError::NoSuchObject(obj))?;
        let end = offset_bytes.checked_add(buf.len() as u64).ok_or(DmuError::Invalid("read range overflows"))?;
        buf.fill(0);
        if buf.is_empty() {
            return Ok(());
        }
        let first = offset_bytes / CHUNK_BYTES;
        let last = (end - 1) / CHUNK_BYTES;
        for (&k, c) in o.chunks.range(first..=last) {
            let cstart = k * CHUNK_BYTES;
            let s = offset_bytes.max(cstart);
            let e = end.min(cstart + CHUNK_BYTES);
            buf[(s - offset_bytes) as usize..(e - offset_bytes) as usize].copy_from_slice(&c[(s - cstart) as usize..(e - cstart) as usize]);
        }
        Ok(())
    }

    fn write(&self, _tx: &TxHold, obj: u64, offset_bytes: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        if self
            .refuse_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(DmuError::NoSpace);
        }
        let mut objects = self.objects.lock();
        let o = objects.get_mut(&obj).ok_or(DmuError::NoSuchObject(obj))?;
        let end = offset_bytes.checked_add(data.len() as u64).ok_or(DmuError::Invalid("write range overflows"))?;
        if data.is_empty() {
            return Ok(());
        }
        // Growing first block: only while the object has at most one block.
        if o.len_bytes <= u64::from(o.blksz_bytes) && end > u64::from(o.blksz_bytes) && o.blksz_bytes < o.max_blksz_bytes {
            let want = end.div_ceil(u64::from(BLKSZ_MIN_BYTES)) * u64::from(BLKSZ_MIN_BYTES);
            o.blksz_bytes = want.min(u64::from(o.max_blksz_bytes)) as u32;
        }
        let mut pos = offset_bytes;
        while pos < end {
            let k = pos / CHUNK_BYTES;
            let cstart = k * CHUNK_BYTES;
            let e = end.min(cstart + CHUNK_BYTES);
            let c = o.chunks.entry(k).or_insert_with(|| vec![0; CHUNK_BYTES as usize]);
            c[(pos - cstart) as usize..(e - cstart) as usize].copy_from_slice(&data[(pos - offset_bytes) as usize..(e - offset_bytes) as usize]);
            pos = e;
        }
        o.len_bytes = o.len_bytes.max(end);
        Ok(())
    }

    fn free_range(&self, _tx: &TxHold, obj: u64, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.check_writable()?;
        let mut objects = self.objects.lock();
        let o = objects.get_mut(&obj).ok_or(DmuError::NoSuchObject(obj))?;
        if len_bytes == u64::MAX {
            let top = o.chunks.keys().next_back().map_or(0, |k| (k + 1) * CHUNK_BYTES);
            o.zero(offset_bytes, top.max(offset_bytes));
            o.len_bytes = o.len_bytes.min(offset_bytes);
        } else {
            let end = offset_bytes.saturating_add(len_bytes);
            o.zero(offset_bytes, end);
        }
        Ok(())
    }

    fn bonus(&self, obj: u64) -> Result<Vec<u8>> {
        let objects = self.objects.lock();
        objects.get(&obj).map(|o| o.bonus.clone()).ok_or(DmuError::NoSuchObject(obj))
    }

    fn set_bonus(&self, _tx: &TxHold, obj: u64, bonus: &[u8]) -> Result<()> {
        self.check_writable()?;
        if bonus.len() > BONUS_MAX_BYTES {
            return Err(DmuError::Invalid("bonus buffer larger than 320 bytes"));
        }
        let mut objects = self.objects.lock();
        let o = objects.get_mut(&obj).ok_or(DmuError::NoSuchObject(obj))?;
        o.bonus = bonus.to_vec();
        Ok(())
    }

    fn object_info(&self, obj: u64) -> Result<ObjectInfo> {
        let objects = self.objects.lock();
        let o = objects.get(&obj).ok_or(DmuError::NoSuchObject(obj))?;
        Ok(ObjectInfo {
            otype: o.otype,
            datablksz_bytes: o.blksz_bytes,
            maxblkid: o.maxblkid(),
            used_bytes: o.stored_bytes(),
        })
    }

    fn wait_synced(&self) -> Result<()> {
        Ok(())
    }

    fn space(&self) -> SpaceInfo {
        let used_bytes = self.objects.lock().values().map(MemObject::stored_bytes).sum();
        SpaceInfo {
            used_bytes,
            avail_bytes: AVAIL_BYTES,
        }
    }

    fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_read_write_free() {
        let s = MemStore::new();
        let tx = s.hold_tx().unwrap();
        assert_eq!(tx.txg, 0);
        let a = s.create_object(&tx, ObjectType::FileData, 512, 131072, b"bonus").unwrap();
        let b = s.create_object(&tx, ObjectType::FileData, 4096, 4096, &[]).unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(s.object_count(), 2);
        assert_eq!(s.bonus(a).unwrap(), b"bonus");

        let mut buf = [7u8; 100];
        s.read(a, 1 << 40, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));

        s.write(&tx, a, 4090, b"hello world").unwrap();
        let mut buf = [0u8; 11];
        s.read(a, 4090, &mut buf).unwrap();
        assert_eq!(&buf, b"hello world");
        // Growing first block: 4101 bytes round up to 4608.
        let info = s.object_info(a).unwrap();
        assert_eq!(info.datablksz_bytes, 4608);
        assert_eq!(info.maxblkid, 0);

        s.write(&tx, b, 3 * 4096 + 1, b"x").unwrap();
        assert_eq!(s.object_info(b).unwrap().maxblkid, 3);
        assert_eq!(s.object_info(b).unwrap().datablksz_bytes, 4096);

        s.free_range(&tx, a, 4092, 2).unwrap();
        s.read(a, 4090, &mut buf).unwrap();
        assert_eq!(&buf, b"he\0\0o world");
        s.free_range(&tx, b, 4096, u64::MAX).unwrap();
        assert_eq!(s.object_info(b).unwrap().maxblkid, 0);
        let mut one = [9u8; 1];
        s.read(b, 3 * 4096 + 1, &mut one).unwrap();
        assert_eq!(one, [0]);

        assert!(s.space().used_bytes > 0);
        s.free_object(&tx, a).unwrap();
        assert!(matches!(s.read(a, 0, &mut one), Err(DmuError::NoSuchObject(1))));
        assert!(matches!(s.free_object(&tx, a), Err(DmuError::NoSuchObject(1))));
        assert_eq!(s.create_object(&tx, ObjectType::FileData, 512, 512, &[]).unwrap(), 3);
        assert_eq!(s.object_count(), 2);
    }

    #[test]
    fn invalid_arguments_and_readonly() {
        let s = MemStore::new();
        let tx = s.hold_tx().unwrap();
        assert!(matches!(
            s.create_object(&tx, ObjectType::FileData, 512, 512, &[0; 321]),
            Err(DmuError::Invalid(_))
        ));
        assert!(matches!(s.create_object(&tx, ObjectType::FileData, 100, 512, &[]), Err(DmuError::Invalid(_))));
        let a = s.create_object(&tx, ObjectType::FileData, 512, 512, &[0; 320]).unwrap();
        assert!(matches!(s.set_bonus(&tx, a, &[0; 321]), Err(DmuError::Invalid(_))));
        s.set_readonly(true);
        assert!(matches!(s.write(&tx, a, 0, b"x"), Err(DmuError::ReadOnly)));
        s.set_readonly(false);
        s.write(&tx, a, 0, b"x").unwrap();
        s.wait_synced().unwrap();
    }

    #[test]
    fn snapshot_is_a_frozen_copy() {
        let s = MemStore::new();
        let tx = s.hold_tx().unwrap();
        let a = s.create_object(&tx, ObjectType::FileData, 512, 512, b"old").unwrap();
        s.write(&tx, a, 0, b"before").unwrap();
        let snap = s.snapshot();
        s.write(&tx, a, 0, b"after!").unwrap();
        s.set_bonus(&tx, a, b"new").unwrap();
        let mut buf = [0u8; 6];
        snap.read(a, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"before");
        assert_eq!(snap.bonus(a).unwrap(), b"old");
        assert!(snap.is_readonly());
        assert!(matches!(snap.write(&tx, a, 0, b"x"), Err(DmuError::ReadOnly)));
        // New objects in the original do not reuse ids the copy knows, and vice versa.
        assert_eq!(s.create_object(&tx, ObjectType::FileData, 512, 512, &[]).unwrap(), 2);
        assert!(matches!(snap.bonus(2), Err(DmuError::NoSuchObject(2))));
    }
}
