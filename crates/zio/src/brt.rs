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
//! Durability: every change is tagged with its txg — a clone with the open txg it
//! was made in, a free with the txg it belongs to — and folded into the committed
//! table when that txg syncs ([`Brt::apply`], called by spa after the txg's frees),
//! which spa then writes into the MOS in the same txg. The stored table therefore
//! always matches the trees of the same uberblock: a clone made in the open txg
//! while an older one syncs is not in the older txg's table. A clone record dropped
//! before its sync (overwritten or freed in open context) gives its reference back
//! in its own txg, like a free.
//!
//! Called by: [`crate::Zio`] (frees consult it), dmu (clones), spa (persistence,
//! pool properties, the leak check). Calls nothing.

use parking_lot::Mutex;
use std::collections::BTreeMap;
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
///
/// Changes are kept per txg until that txg syncs ([`Brt::apply`]): a clone made in
/// the open txg while an older one syncs must not reach the older txg's copy of the
/// table, or a crash right after it would leave a count with no clone behind it.
/// Whether a free may free (`release`) looks at the committed count plus every
/// pending change.
#[derive(Debug, Default)]
pub struct Brt {
    inner: Mutex<Inner>,
}

/// A block's key: its first DVA's (vdev, offset).
type Key = (u32, u64);
/// Changes of one txg: key → (asize, refcount change).
type TxgChanges = BTreeMap<Key, (u64, i64)>;

#[derive(Debug, Default)]
struct Inner {
    /// As of the last applied txg.
    committed: BTreeMap<(u32, u64), BrtEntry>,
    /// Changes not yet applied: txg → key → (asize, refcount change).
    pending: BTreeMap<u64, TxgChanges>,
}

impl Inner {
    /// Committed count plus every pending change of `k`.
    fn total(&self, k: &(u32, u64)) -> (u64, i64) {
        let base = self.committed.get(k).map(|e| (e.asize_bytes, e.refcount as i64)).unwrap_or((0, 0));
        self.pending.values().filter_map(|m| m.get(k)).fold(base, |(a, n), &(pa, d)| (a.max(pa), n + d))
    }

    /// Every block with a positive total, in key order.
    fn merged(&self) -> BTreeMap<(u32, u64), BrtEntry> {
        let mut keys: std::collections::BTreeSet<(u32, u64)> = self.committed.keys().copied().collect();
        for m in self.pending.values() {
            keys.extend(m.keys().copied());
        }
        keys.into_iter()
            .filter_map(|k| {
                let (asize_bytes, n) = self.total(&k);
                (n > 0).then_some((
                    k,
                    BrtEntry {
                        asize_bytes,
                        refcount: n as u64,
                    },
                ))
            })
            .collect()
    }
}

fn key(bp: &BlkPtr) -> (u32, u64) {
    (bp.dva[0].vdev, bp.dva[0].offset_bytes)
}

impl Brt {
    /// Count one more reference to `bp`'s block: a clone of it made in `txg`.
    pub fn add_ref(&self, bp: &BlkPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        let mut g = self.inner.lock();
        let e = g.pending.entry(txg).or_default().entry(key(bp)).or_insert((bp.dva[0].asize_bytes, 0));
        e.1 += 1;
    }

    /// A pointer to `bp`'s block goes away in `txg`: true when the block is still
    /// named by another (one reference was dropped, nothing may be freed), false when
    /// this was its last reference (the caller frees it).
    pub fn release(&self, bp: &BlkPtr, txg: u64) -> bool {
        if bp.is_hole() {
            return false;
        }
        let mut g = self.inner.lock();
        let k = key(bp);
        if g.total(&k).1 <= 0 {
            return false;
        }
        let e = g.pending.entry(txg).or_default().entry(k).or_insert((bp.dva[0].asize_bytes, 0));
        e.1 -= 1;
        true
    }

    /// Fold the changes of every txg up to `txg` into the committed table (at the
    /// sync of `txg`, after its frees). True when the committed table changed (it
    /// must be written).
    pub fn apply(&self, txg: u64) -> bool {
        let mut g = self.inner.lock();
        let later = g.pending.split_off(&(txg + 1));
        let due = std::mem::replace(&mut g.pending, later);
        let mut changed = false;
        for (_, m) in due {
            for (k, (asize_bytes, d)) in m {
                if d == 0 {
                    continue;
                }
                changed = true;
                let n = g.committed.get(&k).map(|e| e.refcount as i64).unwrap_or(0) + d;
                if n > 0 {
                    g.committed.insert(
                        k,
                        BrtEntry {
                            asize_bytes,
                            refcount: n as u64,
                        },
                    );
                } else {
                    g.committed.remove(&k);
                }
            }
        }
        changed
    }

    /// The entry of the block at first DVA (vdev, offset), if shared (pending changes
    /// included).
    pub fn get(&self, vdev: u32, offset_bytes: u64) -> Option<BrtEntry> {
        let g = self.inner.lock();
        let (asize_bytes, n) = g.total(&(vdev, offset_bytes));
        (n > 0).then_some(BrtEntry {
            asize_bytes,
            refcount: n as u64,
        })
    }

    /// Whether `n` more blocks can be shared without passing [`BRT_ENTRIES_MAX`].
    pub fn has_room(&self, n: usize) -> bool {
        self.len().saturating_add(n) <= BRT_ENTRIES_MAX
    }

    /// Number of shared blocks (pending changes included).
    pub fn len(&self) -> usize {
        self.inner.lock().merged().len()
    }

    /// Whether no block is shared.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (`bcloneused`, `bclonesaved`) in bytes: allocated bytes of the shared blocks,
    /// and the bytes their extra references would have taken as copies (OpenZFS's
    /// pool properties of those names, counting the first DVA).
    pub fn space_bytes(&self) -> (u64, u64) {
        let m = self.inner.lock().merged();
        let used = m.values().map(|v| v.asize_bytes).sum();
        let saved = m.values().map(|v| v.asize_bytes.saturating_mul(v.refcount)).sum();
        (used, saved)
    }

    /// Every entry as (vdev, offset, entry), in key order (pending changes included).
    pub fn entries(&self) -> Vec<(u32, u64, BrtEntry)> {
        self.inner.lock().merged().into_iter().map(|((v, o), e)| (v, o, e)).collect()
    }

    /// The committed table as stored: entries in key order, [`BRT_ENTRY_BYTES`] each.
    pub fn encode(&self) -> Vec<u8> {
        let g = self.inner.lock();
        let mut b = Vec::with_capacity(g.committed.len() * BRT_ENTRY_BYTES);
        for (&(v, o), ent) in g.committed.iter() {
            b.extend_from_slice(&v.to_le_bytes());
            b.extend_from_slice(&o.to_le_bytes());
            b.extend_from_slice(&ent.asize_bytes.to_le_bytes());
            b.extend_from_slice(&ent.refcount.to_le_bytes());
        }
        b
    }

    /// Replace the table with stored bytes (pending changes dropped). Errors
    /// (`Corrupt`, table unchanged): a length that is not a whole number of entries
    /// or holds more than [`BRT_ENTRIES_MAX`], keys out of order or repeated, a zero
    /// refcount or size.
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
            if refcount == 0 || asize_bytes == 0 || refcount > i64::MAX as u64 {
                return Err(bad("entry with a zero or impossible refcount or size"));
            }
            last = Some((v, o));
            m.insert((v, o), BrtEntry { asize_bytes, refcount });
        }
        let mut g = self.inner.lock();
        g.committed = m;
        g.pending.clear();
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
        assert!(!t.release(&bp(0), 5), "an unshared block is freed by its one reference");
        t.add_ref(&bp(0), 5);
        t.add_ref(&bp(0), 5);
        assert_eq!(t.space_bytes(), (8192, 16384));
        assert!(t.release(&bp(0), 6));
        assert!(t.release(&bp(0), 6));
        assert!(t.is_empty());
        assert!(!t.release(&bp(0), 6));
    }

    #[test]
    fn a_txg_stores_only_its_own_changes() {
        let t = Brt::default();
        t.add_ref(&bp(0), 5);
        // A clone in the open txg 6 while txg 5 syncs.
        t.add_ref(&bp(4096), 6);
        assert!(t.apply(5));
        let stored = Brt::default();
        stored.load(&t.encode()).unwrap();
        assert_eq!(stored.len(), 1, "txg 5's table holds txg 6's clone");
        assert!(t.apply(6));
        assert!(!t.apply(7), "nothing changed");
        stored.load(&t.encode()).unwrap();
        assert_eq!(stored.entries(), t.entries());
    }

    #[test]
    fn stored_form_round_trips_and_refuses_damage() {
        let t = Brt::default();
        t.add_ref(&bp(4096), 5);
        t.add_ref(&bp(0), 5);
        t.add_ref(&bp(0), 5);
        t.apply(5);
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
