//! # brt — the block reference table: blocks shared by cloning
//!
//! Theory: OpenZFS 2.2's BRT (`module/zfs/brt.c`). `copy_file_range` (and, in
//! OpenZFS, `FICLONE`) between files of one pool shares blocks instead of copying
//! them: the destination file gets the source's block pointers. A block named by
//! `n` pointers that cloning made has an entry here with `refcount = n - 1` (the
//! extra references); a block never cloned has no entry. Freeing a pointer whose
//! block has an entry only decrements it (the entry goes at 0); only the last
//! reference frees the space. Entries are keyed by the block's first DVA (vdev,
//! offset), as OpenZFS keys them, and also hold its allocated size for the pool's
//! `bcloneused`/`bclonesaved`.
//!
//! A cloned pointer keeps the block's DVAs, sizes, checksum and *physical* birth
//! txg, and gets the clone's txg as its (logical) birth, so that snapshots, dead
//! lists and incremental sends see it as new in the destination, while scans and
//! resilvers (which ask when the bytes were written) use the physical birth
//! (`BlkPtr::physical_birth_txg`).
//!
//! Durability: the table changes only in syncing context — a clone's reference is
//! taken when its pointer is installed (phase 2 of the txg that carries it; a clone
//! record dropped before then took nothing), and frees happen during the sync — so
//! the table spa writes into the MOS at the end of a txg's frees matches the trees
//! of the same uberblock exactly, whatever a crash cuts.
//!
//! Called by: [`crate::Zio`] (frees consult it), dmu (clones), spa (persistence,
//! pool properties, the leak check). Calls nothing.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tarn_phys::{BlkPtr, Corrupt};

/// Bytes of one encoded entry: vdev u32, offset u64, asize u64, refcount u64.
pub const BRT_ENTRY_BYTES: usize = 28;
/// Most entries the table takes (it is stored as one packed MOS record of at most
/// 16 MiB); a clone that would need more copies instead.
pub const BRT_ENTRIES_MAX: usize = (16 << 20) / BRT_ENTRY_BYTES;

/// One shared block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrtEntry {
    /// Allocated bytes of the block's first DVA.
    pub asize_bytes: u64,
    /// References beyond the first.
    pub refcount: u64,
}

/// The table. Cheap to share; every method takes `&self`.
#[derive(Debug, Default)]
pub struct Brt {
    entries: Mutex<BTreeMap<(u32, u64), BrtEntry>>,
    dirty: AtomicBool,
}

fn key(bp: &BlkPtr) -> (u32, u64) {
    (bp.dva[0].vdev, bp.dva[0].offset_bytes)
}

impl Brt {
    /// Count one more reference to `bp`'s block (a clone of it was installed).
    pub fn add_ref(&self, bp: &BlkPtr) {
        if bp.is_hole() {
            return;
        }
        let mut e = self.entries.lock();
        let ent = e.entry(key(bp)).or_insert(BrtEntry {
            asize_bytes: bp.dva[0].asize_bytes,
            refcount: 0,
        });
        ent.refcount += 1;
        self.dirty.store(true, Ordering::SeqCst);
    }

    /// A pointer to `bp`'s block goes away: true when the block is still named by
    /// another (the entry was decremented, nothing may be freed), false when this was
    /// its last reference (the caller frees it).
    pub fn release(&self, bp: &BlkPtr) -> bool {
        if bp.is_hole() {
            return false;
        }
        let mut e = self.entries.lock();
        let k = key(bp);
        let Some(ent) = e.get_mut(&k) else { return false };
        ent.refcount -= 1;
        if ent.refcount == 0 {
            e.remove(&k);
        }
        self.dirty.store(true, Ordering::SeqCst);
        true
    }

    /// Whether the table changed since the last call (it must be written), clearing
    /// the flag.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::SeqCst)
    }

    /// The entry of the block at first DVA (vdev, offset), if shared.
    pub fn get(&self, vdev: u32, offset_bytes: u64) -> Option<BrtEntry> {
        self.entries.lock().get(&(vdev, offset_bytes)).copied()
    }

    /// Whether `n` more blocks can be shared without passing [`BRT_ENTRIES_MAX`].
    pub fn has_room(&self, n: usize) -> bool {
        self.len().saturating_add(n) <= BRT_ENTRIES_MAX
    }

    /// Number of shared blocks.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no block is shared.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (`bcloneused`, `bclonesaved`) in bytes: allocated bytes of the shared blocks,
    /// and the bytes their extra references would have taken as copies (OpenZFS's
    /// pool properties of those names, counting the first DVA).
    pub fn space_bytes(&self) -> (u64, u64) {
        let e = self.entries.lock();
        let used = e.values().map(|v| v.asize_bytes).sum();
        let saved = e.values().map(|v| v.asize_bytes.saturating_mul(v.refcount)).sum();
        (used, saved)
    }

    /// Every entry as (vdev, offset, entry), in key order.
    pub fn entries(&self) -> Vec<(u32, u64, BrtEntry)> {
        self.entries.lock().iter().map(|(&(v, o), &e)| (v, o, e)).collect()
    }

    /// The table as stored: entries in key order, [`BRT_ENTRY_BYTES`] each.
    pub fn encode(&self) -> Vec<u8> {
        let e = self.entries.lock();
        let mut b = Vec::with_capacity(e.len() * BRT_ENTRY_BYTES);
        for (&(v, o), ent) in e.iter() {
            b.extend_from_slice(&v.to_le_bytes());
            b.extend_from_slice(&o.to_le_bytes());
            b.extend_from_slice(&ent.asize_bytes.to_le_bytes());
            b.extend_from_slice(&ent.refcount.to_le_bytes());
        }
        b
    }

    /// Replace the table with stored bytes. Errors (`Corrupt`, table unchanged): a
    /// length that is not a whole number of entries or holds more than
    /// [`BRT_ENTRIES_MAX`], keys out of order or repeated, a zero refcount or size.
    pub fn load(&self, b: &[u8]) -> Result<(), Corrupt> {
        let bad = |why: &str| Corrupt::new("block reference table", why);
        if !b.len().is_multiple_of(BRT_ENTRY_BYTES) {
            return Err(bad("length is not a whole number of entries"));
        }
        if b.len() / BRT_ENTRY_BYTES > BRT_ENTRIES_MAX {
            return Err(bad("more entries than the table holds"));
        }
        let mut m = BTreeMap::new();
        let mut last: Option<(u32, u64)> = None;
        for c in b.chunks_exact(BRT_ENTRY_BYTES) {
            let v = u32::from_le_bytes(c[0..4].try_into().expect("4 bytes"));
            let o = u64::from_le_bytes(c[4..12].try_into().expect("8 bytes"));
            let asize_bytes = u64::from_le_bytes(c[12..20].try_into().expect("8 bytes"));
            let refcount = u64::from_le_bytes(c[20..28].try_into().expect("8 bytes"));
            if last.is_some_and(|l| l >= (v, o)) {
                return Err(bad("entries out of order"));
            }
            if refcount == 0 || asize_bytes == 0 {
                return Err(bad("entry with a zero refcount or size"));
            }
            last = Some((v, o));
            m.insert((v, o), BrtEntry { asize_bytes, refcount });
        }
        *self.entries.lock() = m;
        self.dirty.store(false, Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_phys::Dva;

    fn bp(off: u64) -> BlkPtr {
        let mut b = BlkPtr::HOLE;
        b.dva[0] = Dva {
            vdev: 1,
            asize_bytes: 8192,
            offset_bytes: off,
        };
        b.birth_txg = 5;
        b
    }

    #[test]
    fn references_count_and_the_last_one_frees() {
        let t = Brt::default();
        assert!(!t.release(&bp(0)), "an unshared block is freed by its one reference");
        t.add_ref(&bp(0));
        t.add_ref(&bp(0));
        assert!(t.take_dirty() && !t.take_dirty());
        assert_eq!(t.space_bytes(), (8192, 16384));
        assert!(t.release(&bp(0)));
        assert!(t.release(&bp(0)));
        assert!(t.is_empty());
        assert!(!t.release(&bp(0)));
    }

    #[test]
    fn stored_form_round_trips_and_refuses_damage() {
        let t = Brt::default();
        t.add_ref(&bp(4096));
        t.add_ref(&bp(0));
        t.add_ref(&bp(0));
        let b = t.encode();
        let u = Brt::default();
        u.load(&b).unwrap();
        assert_eq!(u.entries(), t.entries());
        assert!(u.load(&b[..b.len() - 1]).is_err());
        let mut swapped = b[BRT_ENTRY_BYTES..].to_vec();
        swapped.extend_from_slice(&b[..BRT_ENTRY_BYTES]);
        assert!(u.load(&swapped).is_err());
        let mut zero = b.clone();
        zero[20..28].fill(0);
        assert!(u.load(&zero).is_err());
        assert_eq!(u.entries(), t.entries(), "a refused load changed the table");
    }
}
