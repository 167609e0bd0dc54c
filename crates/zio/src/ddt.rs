//! # ddt — the dedup table
//!
//! Theory: OpenZFS's dedup (`module/zfs/ddt.c`, `zio_ddt_write`, `zio_ddt_free`). A
//! file data block written by a dataset with `dedup` on is looked up by its strong
//! checksum (with its checksum algorithm, compression and sizes: [`DdtKey`]) before
//! anything is allocated. On a hit the new pointer takes the existing block's DVAs
//! and physical birth and the entry's reference count goes up: nothing is written.
//! On a miss the block is written as usual and an entry with one reference is
//! created. Such pointers carry the dedup flag ([`BlkPtr::dedup`]); freeing one
//! drops a reference, and only the last one frees the DVAs. With `verify`, a hit is
//! confirmed by reading the stored block and comparing bytes (a different block
//! with the same checksum, a collision, is then written apart, without dedup).
//!
//! Entries are (key → DVAs, physical birth, refcount, last change time):
//! [`DDT_ENTRY_CORE_BYTES`] in memory each (OpenZFS's classic in-core entry is about
//! 320 B). The whole table is in memory; `dedup_table_quota` bounds it: when full,
//! new blocks are written without dedup (OpenZFS 2.3's quota).
//!
//! Pruning (`zpool ddtprune`, OpenZFS 2.3 `ddt_prune_unique_entries`): entries with
//! one reference whose last change is older than a cutoff are dropped from the
//! table ([`Ddt::prune`]); their blocks stay allocated, named by their one pointer,
//! which keeps its dedup flag. So a pointer with the flag may have no entry, or an
//! entry of a later block with the same contents: an entry is a pointer's only when
//! the DVAs agree (OpenZFS `ddt_phys_select`). A pointer without its entry is an
//! ordinary block: its free frees it (or releases a block-reference-table
//! reference), a clone of it counts in the block reference table.
//!
//! Durability: the table changes only in syncing context (the write path of phase
//! 2, frees, clones installed), so at the end of a txg's frees spa appends the
//! entries that changed to the MOS *DDT log* (OpenZFS 2.3's "fast dedup" log: a txg
//! costs a few appended records, not a rewrite of random table blocks), in the same
//! txg as the trees that name them, and rewrites the whole table, emptying the log,
//! only when the log has grown past the table. An import loads the table and
//! replays the log.
//!
//! Called by: [`crate::Zio`] (the write and free paths), spa (persistence,
//! `dedupratio`, `zpool status -D`, the leak check). Calls nothing.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use tarn_phys::{BlkPtr, ChecksumAlg, Compression, Corrupt, Dva};

/// What identifies a deduplicated block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DdtKey {
    /// Checksum of the physical bytes.
    pub checksum: [u8; 32],
    /// Its algorithm (a strong one).
    pub checksum_alg: u8,
    /// Compression of the physical bytes.
    pub compression: u8,
    /// Logical size, bytes.
    pub lsize_bytes: u32,
    /// Physical size, bytes.
    pub psize_bytes: u32,
}

/// Test hook: every key gets the same checksum, as if all blocks collided.
static FORCE_COLLISIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make every block's key collide (tests of `dedup=verify`; process-wide, so only for
/// a test binary of its own).
#[doc(hidden)]
pub fn force_collisions(on: bool) {
    FORCE_COLLISIONS.store(on, std::sync::atomic::Ordering::SeqCst);
}

impl DdtKey {
    /// The key of pointer `bp`.
    pub fn of(bp: &BlkPtr) -> DdtKey {
        let collide = FORCE_COLLISIONS.load(std::sync::atomic::Ordering::Relaxed);
        DdtKey {
            checksum: if collide { [0xa5; 32] } else { bp.checksum },
            checksum_alg: bp.checksum_alg as u8,
            compression: bp.compression as u8,
            lsize_bytes: bp.lsize_bytes,
            psize_bytes: bp.psize_bytes,
        }
    }
}

/// A deduplicated block: where it is and how many pointers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdtEntry {
    /// Its DVAs.
    pub dva: [Dva; 3],
    /// Txg its bytes were written in (every pointer's physical birth).
    pub birth_txg: u64,
    /// Pointers naming it.
    pub refcount: u64,
    /// When the entry last changed, seconds since the Unix epoch (OpenZFS's
    /// `ddp_class_start`); `zpool ddtprune -d` compares it with its cutoff.
    pub modified_secs: u64,
}

/// Memory one entry costs in the table (key and entry; the tree adds its node
/// overhead, about a fifth more).
pub const DDT_ENTRY_CORE_BYTES: usize = std::mem::size_of::<(DdtKey, DdtEntry)>();
/// Bytes of one stored entry (table and log records) since format version 6.
pub const DDT_RECORD_BYTES: usize = DDT_RECORD_V5_BYTES + 8;
/// Bytes of one stored entry in format version 5 (no change time; such entries load
/// with the import's time).
pub const DDT_RECORD_V5_BYTES: usize = 32 + 1 + 1 + 2 + 4 + 4 + 3 * 20 + 8 + 8;
/// Largest table or log an import reads, bytes (read and checked a piece of
/// [`DdtLoader::piece_bytes`] at a time, so memory follows the valid records).
pub const DDT_STORED_MAX_BYTES: u64 = 4 << 30;

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<DdtKey, DdtEntry>,
    /// Keys changed since the last [`Ddt::take_changes`].
    changed: BTreeSet<DdtKey>,
    /// Largest number of entries (`dedup_table_quota` / entry bytes); 0: no limit.
    max_entries: usize,
    /// The table was loaded from older records: the next save rewrites it whole.
    rewrite_due: bool,
}

/// What a free of a deduplicated pointer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Other pointers still name the block: free nothing.
    Shared,
    /// That was the last reference: free the DVAs.
    Last,
    /// The table has no entry for this block (pruned, or the entry is a later
    /// block's): free it as an ordinary block.
    NotInTable,
}

/// Which unique entries `zpool ddtprune` drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// Those last changed before this time, seconds since the Unix epoch (`-d days`).
    ChangedBefore(u64),
    /// This percentage (1..=100) of the unique entries, oldest first (`-p percent`).
    Percent(u8),
}

/// Seconds since the Unix epoch now.
fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The pool's dedup table. Every method takes `&self`.
#[derive(Debug, Default)]
pub struct Ddt {
    inner: Mutex<Inner>,
}

fn put_dva(b: &mut Vec<u8>, d: &Dva) {
    b.extend_from_slice(&d.vdev.to_le_bytes());
    b.extend_from_slice(&d.asize_bytes.to_le_bytes());
    b.extend_from_slice(&d.offset_bytes.to_le_bytes());
}

fn encode_record(b: &mut Vec<u8>, k: &DdtKey, e: &DdtEntry) {
    b.extend_from_slice(&k.checksum);
    b.push(k.checksum_alg);
    b.push(k.compression);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&k.lsize_bytes.to_le_bytes());
    b.extend_from_slice(&k.psize_bytes.to_le_bytes());
    for d in &e.dva {
        put_dva(b, d);
    }
    b.extend_from_slice(&e.birth_txg.to_le_bytes());
    b.extend_from_slice(&e.refcount.to_le_bytes());
    b.extend_from_slice(&e.modified_secs.to_le_bytes());
}

/// Decode the key of one stored record (untrusted): a known strong checksum, a known
/// compression, zero padding, sizes in range.
fn decode_key(c: &[u8]) -> Result<DdtKey, Corrupt> {
    let bad = |why: &str| Corrupt::new("dedup table", why);
    let u32_at = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().expect("4 bytes"));
    let key = DdtKey {
        checksum: c[0..32].try_into().expect("32 bytes"),
        checksum_alg: c[32],
        compression: c[33],
        lsize_bytes: u32_at(36),
        psize_bytes: u32_at(40),
    };
    let alg = ChecksumAlg::from_u8(key.checksum_alg).map_err(|_| bad("unknown checksum"))?;
    if !alg.is_strong() || Compression::from_u8(key.compression).is_err() || c[34] != 0 || c[35] != 0 {
        return Err(bad("bad key"));
    }
    if key.psize_bytes == 0 || key.psize_bytes > key.lsize_bytes || key.lsize_bytes > 16 << 20 {
        return Err(bad("bad sizes"));
    }
    Ok(key)
}

/// Decode one stored record (untrusted; [`DDT_RECORD_BYTES`] long, or
/// [`DDT_RECORD_V5_BYTES`] with change time `loaded_secs`): a known strong checksum
/// and compression, a first DVA, sizes in range.
fn decode_record(c: &[u8], loaded_secs: u64) -> Result<(DdtKey, DdtEntry), Corrupt> {
    let bad = |why: &str| Corrupt::new("dedup table", why);
    let u32_at = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(c[o..o + 8].try_into().expect("8 bytes"));
    let key = decode_key(c)?;
    let mut dva = [Dva::default(); 3];
    for (i, d) in dva.iter_mut().enumerate() {
        let o = 44 + i * 20;
        *d = Dva {
            vdev: u32_at(o),
            asize_bytes: u64_at(o + 4),
            offset_bytes: u64_at(o + 12),
        };
    }
    if dva[0].is_empty() {
        return Err(bad("entry without a DVA"));
    }
    let e = DdtEntry {
        dva,
        birth_txg: u64_at(104),
        refcount: u64_at(112),
        modified_secs: if c.len() >= DDT_RECORD_BYTES { u64_at(120) } else { loaded_secs },
    };
    if e.birth_txg == 0 || e.refcount > i64::MAX as u64 {
        return Err(bad("bad birth or refcount"));
    }
    Ok((key, e))
}

impl Ddt {
    /// Set the most entries the table may hold (`dedup_table_quota` divided by the
    /// entry size); 0 for no limit.
    pub fn set_max_entries(&self, n: usize) {
        self.inner.lock().max_entries = n;
    }

    /// Whether `n` new entries may be created (the quota is not reached).
    pub fn has_room(&self, n: usize) -> bool {
        let g = self.inner.lock();
        g.max_entries == 0 || g.entries.len().saturating_add(n) <= g.max_entries
    }

    /// The entry of `k`, if any pointer names its block.
    pub fn lookup(&self, k: &DdtKey) -> Option<DdtEntry> {
        self.inner.lock().entries.get(k).copied()
    }

    /// A new deduplicated block written in `txg` at `dva`: one reference.
    pub fn insert(&self, k: DdtKey, dva: [Dva; 3], txg: u64) {
        let mut g = self.inner.lock();
        g.entries.insert(
            k,
            DdtEntry {
                dva,
                birth_txg: txg,
                refcount: 1,
                modified_secs: now_secs(),
            },
        );
        g.changed.insert(k);
    }

    /// One more pointer to the block of `k` (a dedup hit). False when `k` has no
    /// entry.
    pub fn add_ref(&self, k: &DdtKey) -> bool {
        let mut g = self.inner.lock();
        let Some(e) = g.entries.get_mut(k) else { return false };
        e.refcount += 1;
        e.modified_secs = now_secs();
        g.changed.insert(*k);
        true
    }

    /// One more pointer to `bp`'s block (a clone being installed). False when the
    /// table has no entry for that block (none for its key, or one whose DVAs differ:
    /// see the module theory on pruning).
    pub fn add_ref_block(&self, bp: &BlkPtr) -> bool {
        let k = DdtKey::of(bp);
        let mut g = self.inner.lock();
        let Some(e) = g.entries.get_mut(&k).filter(|e| e.dva == bp.dva) else {
            return false;
        };
        e.refcount += 1;
        e.modified_secs = now_secs();
        g.changed.insert(k);
        true
    }

    /// Deduplicated pointer `bp` goes away: one reference less for its entry when the
    /// table has one for that block (same key and DVAs).
    pub fn release(&self, bp: &BlkPtr) -> Release {
        let k = DdtKey::of(bp);
        let mut g = self.inner.lock();
        let Some(e) = g.entries.get_mut(&k).filter(|e| e.dva == bp.dva) else {
            return Release::NotInTable;
        };
        e.refcount -= 1;
        e.modified_secs = now_secs();
        let last = e.refcount == 0;
        if last {
            g.entries.remove(&k);
        }
        g.changed.insert(k);
        if last {
            Release::Last
        } else {
            Release::Shared
        }
    }

    /// Drop the unique entries `rule` picks (module theory: the blocks stay, named by
    /// their one pointer) and return how many went. Called in syncing context, like
    /// every other change, so the removal is logged in the txg it happens in.
    pub fn prune(&self, rule: Prune) -> u64 {
        let mut g = self.inner.lock();
        let mut unique: Vec<(u64, DdtKey)> = g.entries.iter().filter(|(_, e)| e.refcount == 1).map(|(k, e)| (e.modified_secs, *k)).collect();
        let victims: Vec<DdtKey> = match rule {
            Prune::ChangedBefore(cutoff_secs) => unique.into_iter().filter(|(t, _)| *t < cutoff_secs).map(|(_, k)| k).collect(),
            Prune::Percent(pct) => {
                let n = unique.len() * usize::from(pct.min(100)) / 100;
                unique.sort_unstable();
                unique.into_iter().take(n).map(|(_, k)| k).collect()
            }
        };
        for k in &victims {
            g.entries.remove(k);
            g.changed.insert(*k);
        }
        victims.len() as u64
    }

    /// Test hook: make every entry `secs` older (as OpenZFS's `ddt_prune_artificial_age`
    /// does, so a test need not wait days).
    #[doc(hidden)]
    pub fn backdate(&self, secs: u64) {
        for e in self.inner.lock().entries.values_mut() {
            e.modified_secs = e.modified_secs.saturating_sub(secs);
        }
    }

    /// Whether entries changed since the last [`Ddt::take_changes`], or the table
    /// must be rewritten in the current format ([`Ddt::take_rewrite_due`]).
    pub fn is_dirty(&self) -> bool {
        let g = self.inner.lock();
        !g.changed.is_empty() || g.rewrite_due
    }

    /// Whether the table was loaded from records of an older format, which the next
    /// save must replace with a whole table (and an empty log); clears the flag.
    pub fn take_rewrite_due(&self) -> bool {
        std::mem::take(&mut self.inner.lock().rewrite_due)
    }

    /// The log records of the keys changed since the last call: each key's entry, or
    /// refcount 0 for a removed one.
    pub fn take_changes(&self) -> Vec<u8> {
        let mut g = self.inner.lock();
        let keys = std::mem::take(&mut g.changed);
        let mut b = Vec::with_capacity(keys.len() * DDT_RECORD_BYTES);
        for k in keys {
            let e = g.entries.get(&k).copied().unwrap_or(DdtEntry {
                dva: [Dva::default(); 3],
                birth_txg: 0,
                refcount: 0,
                modified_secs: 0,
            });
            encode_record(&mut b, &k, &e);
        }
        b
    }

    /// The table as stored (records in key order).
    pub fn encode(&self) -> Vec<u8> {
        let g = self.inner.lock();
        let mut b = Vec::with_capacity(g.entries.len() * DDT_RECORD_BYTES);
        for (k, e) in &g.entries {
            encode_record(&mut b, k, e);
        }
        b
    }

    /// Replace the table with a stored table and log (see [`DdtLoader`]). Errors
    /// (`Corrupt`, table unchanged) for a length that is not a whole number of
    /// records or a bad record.
    pub fn load(&self, table: &[u8], log: &[u8]) -> Result<(), Corrupt> {
        let mut l = DdtLoader::new(tarn_phys::TARN_FORMAT_VERSION);
        l.table(table)?;
        l.log(log)?;
        self.install(l);
        Ok(())
    }

    /// Replace the table with what `loader` decoded.
    pub fn install(&self, loader: DdtLoader) {
        let mut g = self.inner.lock();
        g.rewrite_due = loader.record_bytes != DDT_RECORD_BYTES && !loader.entries.is_empty();
        g.entries = loader.entries;
        g.changed.clear();
    }

    /// Every entry, in key order.
    pub fn entries(&self) -> Vec<(DdtKey, DdtEntry)> {
        self.inner.lock().entries.iter().map(|(k, e)| (*k, *e)).collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (bytes allocated by the deduplicated blocks, bytes their references would take
    /// without dedup): `dedupratio` is the second over the first (OpenZFS
    /// `ddt_get_pool_dedup_ratio`, allocated sizes of every DVA).
    pub fn space_bytes(&self) -> (u64, u64) {
        let g = self.inner.lock();
        let mut alloc = 0u64;
        let mut referenced = 0u64;
        for e in g.entries.values() {
            let a: u64 = e.dva.iter().map(|d| d.asize_bytes).sum();
            alloc += a;
            referenced += a.saturating_mul(e.refcount);
        }
        (alloc, referenced)
    }
}

/// Decodes a stored table and then its log, a piece at a time (each a whole number
/// of records), so that memory grows only with the valid records read: a table
/// record has refcount ≥ 1 and keys in order; a log record replaces its key's entry,
/// refcount 0 removing it.
#[derive(Debug)]
pub struct DdtLoader {
    entries: BTreeMap<DdtKey, DdtEntry>,
    last: Option<DdtKey>,
    /// Record length of the pool's format version.
    record_bytes: usize,
    /// Change time given to records without one (format version 5).
    loaded_secs: u64,
}

impl DdtLoader {
    /// A loader for the records of a pool whose uberblock has format `version`
    /// (version 5 records have no change time: they get the time of this call). The
    /// piece size to read is [`DdtLoader::piece_bytes`].
    pub fn new(version: u64) -> DdtLoader {
        DdtLoader {
            entries: BTreeMap::new(),
            last: None,
            record_bytes: if version <= 5 { DDT_RECORD_V5_BYTES } else { DDT_RECORD_BYTES },
            loaded_secs: now_secs(),
        }
    }

    /// Bytes to read at once: 8192 of this format's records (1 MiB; 960 KiB for
    /// format 5).
    pub fn piece_bytes(&self) -> usize {
        self.record_bytes * 8192
    }

    /// The next piece of the table.
    pub fn table(&mut self, piece: &[u8]) -> Result<(), Corrupt> {
        for c in whole_records(piece, self.record_bytes)? {
            let (k, e) = decode_record(c, self.loaded_secs)?;
            if e.refcount == 0 || self.last.is_some_and(|l| l >= k) {
                return Err(Corrupt::new("dedup table", "table records out of order or unreferenced"));
            }
            self.last = Some(k);
            self.entries.insert(k, e);
        }
        Ok(())
    }

    /// The next piece of the log.
    pub fn log(&mut self, piece: &[u8]) -> Result<(), Corrupt> {
        for c in whole_records(piece, self.record_bytes)? {
            if c[112..120].iter().all(|&x| x == 0) {
                self.entries.remove(&decode_key(c)?);
            } else {
                let (k, e) = decode_record(c, self.loaded_secs)?;
                self.entries.insert(k, e);
            }
        }
        Ok(())
    }
}

fn whole_records(b: &[u8], record_bytes: usize) -> Result<std::slice::ChunksExact<'_, u8>, Corrupt> {
    if !b.len().is_multiple_of(record_bytes) {
        return Err(Corrupt::new("dedup table", "length is not a whole number of records"));
    }
    Ok(b.chunks_exact(record_bytes))
}

/// Whether `bp` names a deduplicated block (see [`BlkPtr::dedup`]).
pub fn is_dedup(bp: &BlkPtr) -> bool {
    !bp.is_hole() && bp.dedup
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> DdtKey {
        DdtKey {
            checksum: [n; 32],
            checksum_alg: ChecksumAlg::Sha256 as u8,
            compression: 0,
            lsize_bytes: 8192,
            psize_bytes: 8192,
        }
    }

    fn dva(off: u64) -> [Dva; 3] {
        let mut d = [Dva::default(); 3];
        d[0] = Dva {
            vdev: 0,
            asize_bytes: 8192,
            offset_bytes: off,
        };
        d
    }

    /// A deduplicated pointer with key `key(n)` at `dva(off)`.
    fn bp(n: u8, off: u64) -> BlkPtr {
        let k = key(n);
        BlkPtr {
            dva: dva(off),
            checksum: k.checksum,
            checksum_alg: ChecksumAlg::Sha256,
            lsize_bytes: k.lsize_bytes,
            psize_bytes: k.psize_bytes,
            birth_txg: 5,
            dedup: true,
            ..BlkPtr::default()
        }
    }

    #[test]
    fn references_come_and_go_and_the_last_frees() {
        let t = Ddt::default();
        assert!(t.lookup(&key(1)).is_none());
        t.insert(key(1), dva(0), 5);
        assert!(t.add_ref(&key(1)));
        assert_eq!(t.lookup(&key(1)).unwrap().refcount, 2);
        assert_eq!(t.release(&bp(1, 0)), Release::Shared);
        assert_eq!(t.release(&bp(1, 0)), Release::Last);
        assert_eq!(t.release(&bp(1, 0)), Release::NotInTable);
        assert!(!t.add_ref(&key(1)));
        assert!(t.is_empty());
    }

    #[test]
    fn an_entry_is_a_pointers_only_when_the_dvas_agree() {
        // After a prune, the same contents written again make a new entry for a new
        // block: the old (pruned) pointer must neither release nor clone it.
        let t = Ddt::default();
        t.insert(key(1), dva(8192), 7);
        assert_eq!(t.release(&bp(1, 0)), Release::NotInTable);
        assert!(!t.add_ref_block(&bp(1, 0)));
        assert_eq!(t.lookup(&key(1)).unwrap().refcount, 1);
        assert!(t.add_ref_block(&bp(1, 8192)));
        assert_eq!(t.lookup(&key(1)).unwrap().refcount, 2);
    }

    #[test]
    fn prune_drops_old_unique_entries_only() {
        let t = Ddt::default();
        for n in 1..=4 {
            t.insert(key(n), dva(u64::from(n) * 8192), 5);
        }
        t.add_ref(&key(4)); // a duplicate: never pruned
        let _ = t.take_changes();
        let table = t.encode();
        assert_eq!(t.prune(Prune::ChangedBefore(now_secs() - 3600)), 0, "nothing is an hour old");
        t.backdate(2 * 86400);
        t.insert(key(5), dva(5 * 8192), 6); // young
        assert_eq!(t.prune(Prune::ChangedBefore(now_secs() - 86400)), 3);
        let left: Vec<DdtKey> = t.entries().into_iter().map(|(k, _)| k).collect();
        assert_eq!(left, vec![key(4), key(5)]);
        // The removals are logged (refcount 0 records).
        let u = Ddt::default();
        let log = t.take_changes();
        assert_eq!(log.len(), 4 * DDT_RECORD_BYTES);
        u.load(&table, &log).unwrap();
        assert_eq!(u.entries().into_iter().map(|(k, _)| k).collect::<Vec<_>>(), left);
    }

    #[test]
    fn prune_by_percent_takes_the_oldest_unique_entries() {
        let t = Ddt::default();
        for n in 1..=10 {
            t.insert(key(n), dva(u64::from(n) * 8192), 5);
            if n <= 5 {
                t.backdate(100); // 1..=5 older, key(1) oldest
            }
        }
        t.add_ref(&key(1));
        // 9 unique: 50% is 4, the oldest unique ones (2..=5).
        assert_eq!(t.prune(Prune::Percent(50)), 4);
        let left: Vec<DdtKey> = t.entries().into_iter().map(|(k, _)| k).collect();
        let want: Vec<DdtKey> = [1, 6, 7, 8, 9, 10].into_iter().map(key).collect();
        assert_eq!(left, want);
        assert_eq!(t.prune(Prune::Percent(100)), 5);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn version_5_records_load_and_are_rewritten() {
        let t = Ddt::default();
        t.insert(key(1), dva(0), 5);
        t.insert(key(2), dva(8192), 5);
        // Version 5 records: the same without the trailing change time.
        let v5: Vec<u8> = t.encode().chunks(DDT_RECORD_BYTES).flat_map(|c| c[..DDT_RECORD_V5_BYTES].to_vec()).collect();
        let mut l = DdtLoader::new(5);
        l.table(&v5).unwrap();
        let u = Ddt::default();
        u.install(l);
        assert_eq!(u.len(), 2);
        assert!(u.entries().iter().all(|(_, e)| e.modified_secs + 60 >= now_secs()));
        assert!(u.is_dirty() && u.take_rewrite_due() && !u.is_dirty());
        // This version's loader refuses the short records.
        assert!(DdtLoader::new(6).table(&v5).is_err());
    }

    #[test]
    fn table_and_log_round_trip_and_refuse_damage() {
        let t = Ddt::default();
        t.insert(key(1), dva(0), 5);
        t.insert(key(2), dva(8192), 5);
        t.add_ref(&key(2));
        let table = t.encode();
        let _ = t.take_changes();
        // Next txg: key 1 goes, key 3 comes, key 2 gains one.
        assert_eq!(t.release(&bp(1, 0)), Release::Last);
        t.insert(key(3), dva(16384), 6);
        t.add_ref(&key(2));
        assert!(t.is_dirty());
        let log = t.take_changes();
        assert!(!t.is_dirty());
        assert_eq!(log.len(), 3 * DDT_RECORD_BYTES);
        let u = Ddt::default();
        u.load(&table, &log).unwrap();
        let got: Vec<(DdtKey, u64)> = u.entries().into_iter().map(|(k, e)| (k, e.refcount)).collect();
        assert_eq!(got, vec![(key(2), 3), (key(3), 1)]);
        assert_eq!(u.entries(), t.entries());
        assert!(u.load(&table[1..], &log).is_err());
        let mut bad = table.clone();
        bad[32] = 2; // fletcher4: not a dedup checksum
        assert!(u.load(&bad, &[]).is_err());
        assert_eq!(u.entries().len(), 2, "a refused load changed the table");
    }

    #[test]
    fn an_entry_costs_144_bytes_in_core() {
        // README: against classic OpenZFS's ~320 B per in-core entry.
        assert_eq!(DDT_ENTRY_CORE_BYTES, 144);
    }

    #[test]
    fn the_quota_stops_new_entries() {
        let t = Ddt::default();
        t.set_max_entries(1);
        assert!(t.has_room(1) && !t.has_room(2));
        t.insert(key(1), dva(0), 5);
        assert!(!t.has_room(1));
    }
}
