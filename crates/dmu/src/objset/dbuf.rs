//! Dirty records and where a block's content lives (OpenZFS `dbuf.c`).
//!
//! Theory: each dnode has an open and a syncing generation of dirty level-0 records
//! ([`Dirty`]: full, partial — deferred fill — or a cloned pointer). A read resolves a
//! block through open → syncing → tree ([`Src`]), merging partial records over what
//! lies below; a write puts or extends a record of the open generation, never
//! reading the record it only partly covers. See the object set's theory statement
//! (`super`) for the invariants. Called under the object set's lock by the
//! `ObjectStore` methods and the sync phases.

use super::*;

/// A dirty level-0 record of one generation (open or syncing) of a dnode.
#[derive(Clone)]
pub(super) enum Dirty {
    /// Every byte of the record: exactly `blksz` bytes.
    Full(Arc<Vec<u8>>),
    /// Only the byte ranges written in this generation (deferred fill); every other
    /// byte is whatever lies below this generation. See the theory statement.
    Partial(Arc<Partial>),
    /// Another block's pointer, shared by cloning (`ObjectStore::clone_blocks`): its
    /// sync writes nothing, counts the reference (block reference table, or dedup
    /// table for a deduplicated block) and installs the pointer.
    Clone(BlkPtr),
}

impl Dirty {
    /// Bytes this record counts as dirty data: the whole record, partial or not. A
    /// partial record holds only its written bytes in memory, but its sync allocates a
    /// whole record while the old one is still allocated, and the dirty count is what
    /// the space check (`Objset::space_check`) weighs against free space: counting
    /// only the written bytes let random 8 KiB overwrites of 128 KiB records dirty 16
    /// times more than the pool could hold, and the txg sync failed with ENOSPC.
    pub(super) fn dirty_bytes(&self) -> u64 {
        match self {
            Dirty::Full(d) => d.len() as u64,
            Dirty::Partial(p) => p.record_bytes,
            Dirty::Clone(_) => 0,
        }
    }

    /// Of [`Dirty::dirty_bytes`], what the txg gate counts as partial records' (the
    /// whole record for a partial one, else 0): see `tarn_dmu::txg`'s theory.
    pub(super) fn partial_bytes(&self) -> u64 {
        match self {
            Dirty::Partial(p) => p.record_bytes,
            _ => 0,
        }
    }

    /// The bytes a partial record holds in memory (its written bytes), else 0.
    pub(super) fn partial_held_bytes(&self) -> u64 {
        match self {
            Dirty::Partial(p) => p.held_bytes(),
            _ => 0,
        }
    }
}

/// Sums over `records` of [`Dirty::dirty_bytes`], [`Dirty::partial_bytes`] and
/// [`Dirty::partial_held_bytes`], as the signed deltas of
/// [`crate::txg::TxgGate::add_dirty_split`].
pub(super) fn dirty_split<'a>(records: impl IntoIterator<Item = &'a Dirty>) -> (i64, i64, i64) {
    records.into_iter().fold((0, 0, 0), |(b, p, h), r| {
        (b + r.dirty_bytes() as i64, p + r.partial_bytes() as i64, h + r.partial_held_bytes() as i64)
    })
}

/// The written ranges of a partial record: offset in the record → bytes. Extents are
/// disjoint and never touch (`Partial::insert` merges them), so their number is at
/// most one per write and their bytes are exactly the valid bytes.
#[derive(Clone, Default, Debug)]
pub(crate) struct Partial {
    extents: BTreeMap<usize, Vec<u8>>,
    /// Size of the whole record (the dnode's block size when the record was made).
    record_bytes: u64,
}

impl Partial {
    /// Bytes the extents hold: the record's written bytes.
    pub(super) fn held_bytes(&self) -> u64 {
        self.extents.values().map(|e| e.len() as u64).sum()
    }

    /// Record `data` as written at byte `at` of the record, over whatever was there.
    ///
    /// Extents that overlap or touch the new range merge with it into one. The lowest
    /// of them grows in place (amortized, as a `Vec` grows) when it starts at or before
    /// `at`, so a run of small writes in order (a file rewritten 8 KiB at a time) no
    /// longer reallocates and recopies the whole growing extent at every write. A new
    /// extent is a copy of `data`, never zero-filled first.
    pub(super) fn insert(&mut self, at: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = at + data.len();
        // Extents that overlap or touch [at, end), lowest start first.
        let mut touching: Vec<usize> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(&s, e)| s + e.len() >= at)
            .map(|(&s, _)| s)
            .collect();
        touching.reverse();
        let Some(&first) = touching.first() else {
            self.extents.insert(at, data.to_vec());
            return;
        };
        let last = touching[touching.len() - 1];
        let hi = end.max(last + self.extents[&last].len());
        let (lo, mut merged, others) = if first <= at {
            (first, self.extents.remove(&first).expect("listed above"), &touching[1..])
        } else {
            (at, Vec::new(), &touching[..])
        };
        merged.reserve(hi - lo - merged.len());
        if others.is_empty() && first <= at {
            // One extent, starting at or before `at`: overwrite its overlap with
            // `data`, append the rest.
            let overlap = (lo + merged.len() - at).min(data.len());
            merged[at - lo..at - lo + overlap].copy_from_slice(&data[..overlap]);
            merged.extend_from_slice(&data[overlap..]);
        } else {
            merged.resize(hi - lo, 0);
            for &s in others {
                let e = self.extents.remove(&s).expect("listed above");
                merged[s - lo..s - lo + e.len()].copy_from_slice(&e);
            }
            // The new bytes over the old.
            merged[at - lo..end - lo].copy_from_slice(data);
        }
        self.extents.insert(lo, merged);
    }

    /// The record's bytes when one extent now holds all `blksz` of them (the record
    /// was overwritten whole, piece by piece) and the record is that size: the extent,
    /// taken out (the partial record is left empty). `None` otherwise.
    pub(super) fn take_whole(&mut self, blksz: usize) -> Option<Vec<u8>> {
        let whole = self.record_bytes as usize == blksz && self.extents.get(&0).is_some_and(|e| e.len() == blksz);
        whole.then(|| self.extents.remove(&0).expect("checked above"))
    }

    /// Copy bytes `[at, at + dst.len())` of the record into `dst` when one extent
    /// holds them all; false (and `dst` untouched) otherwise.
    pub(super) fn read_covered(&self, at: usize, dst: &mut [u8]) -> bool {
        match self.extents.range(..=at).next_back() {
            Some((&s, e)) if s + e.len() >= at + dst.len() => {
                dst.copy_from_slice(&e[at - s..at - s + dst.len()]);
                true
            }
            _ => false,
        }
    }

    /// Lay the written ranges over `record` (the bytes below, `blksz` long).
    pub(super) fn overlay(&self, record: &mut [u8]) {
        for (&s, e) in &self.extents {
            let end = (s + e.len()).min(record.len());
            if s < end {
                record[s..end].copy_from_slice(&e[..end - s]);
            }
        }
    }
}

#[derive(Default)]
pub(super) struct OpenRec {
    pub(super) blocks: BTreeMap<u64, Dirty>,
    pub(super) frees: Vec<(u64, u64)>,
}

pub(super) struct SyncRec {
    pub(super) blocks: BTreeMap<u64, Dirty>,
    pub(super) frees: Vec<(u64, u64)>,
    pub(super) attrs: Attrs,
}

/// Where the current content of a level-0 block is.
pub(super) enum Src {
    Data(Arc<Vec<u8>>),
    Zero,
    Bp(BlkPtr),
    /// Partial records (the newest first) over the content below them (never itself
    /// `Partial`).
    Partial(Vec<Arc<Partial>>, Box<Src>),
}

impl Src {
    /// The content a block pointer names: zeros for a hole.
    pub(super) fn of(bp: BlkPtr) -> Src {
        if bp.is_hole() {
            Src::Zero
        } else {
            Src::Bp(bp)
        }
    }

    /// `layers` (newest first) over `self`.
    pub(super) fn under(self, mut layers: Vec<Arc<Partial>>) -> Src {
        if layers.is_empty() {
            return self;
        }
        match self {
            Src::Partial(more, base) => {
                layers.extend(more);
                Src::Partial(layers, base)
            }
            base => Src::Partial(layers, Box::new(base)),
        }
    }
}

impl Objset {
    /// Where the content of block `blkid` is: the open generation, then the syncing
    /// one, then the synced tree. Partial records are returned as layers over what
    /// lies below them.
    pub(super) fn resolve(&self, dn: &Dn, blkid: u64) -> Result<Src> {
        match dn.open.blocks.get(&blkid) {
            Some(Dirty::Full(b)) => Ok(Src::Data(b.clone())),
            Some(Dirty::Partial(p)) => Ok(self.resolve_below_open(dn, blkid)?.under(vec![p.clone()])),
            Some(Dirty::Clone(bp)) => Ok(Src::of(*bp)),
            None if in_ranges(&dn.open.frees, blkid) => Ok(Src::Zero),
            None => self.resolve_below_open(dn, blkid),
        }
    }

    /// Where the content of block `blkid` is as the open generation found it: the
    /// syncing generation, then the synced tree.
    pub(super) fn resolve_below_open(&self, dn: &Dn, blkid: u64) -> Result<Src> {
        if let Some(s) = &dn.syncing {
            match s.blocks.get(&blkid) {
                Some(Dirty::Full(b)) => return Ok(Src::Data(b.clone())),
                Some(Dirty::Partial(p)) => return Ok(self.resolve_tree(&dn.tree, blkid)?.under(vec![p.clone()])),
                Some(Dirty::Clone(bp)) => return Ok(Src::of(*bp)),
                None if in_ranges(&s.frees, blkid) => return Ok(Src::Zero),
                None => {}
            }
        }
        self.resolve_tree(&dn.tree, blkid)
    }

    /// Block `blkid` of the synced tree.
    pub(super) fn resolve_tree(&self, tree: &Tree, blkid: u64) -> Result<Src> {
        Ok(Src::of(self.tree_lookup(tree, blkid)?))
    }

    /// The bytes of `src`, exactly `blksz` bytes for a merged partial record (the
    /// fill on read: new bytes over old); other sources as stored.
    pub(super) fn fetch(&self, src: Src, blksz: u32) -> Result<Arc<Vec<u8>>> {
        match src {
            Src::Data(d) => Ok(d),
            Src::Zero => Ok(Arc::new(vec![0u8; blksz as usize])),
            Src::Bp(bp) => self.read_bp(&bp).map_err(zio_err),
            src @ Src::Partial(..) => self.fetch_owned(src, blksz).map(Arc::new),
        }
    }

    /// The content of `src` as a buffer of its own, exactly `blksz` bytes
    /// (zero-extended), for a caller that changes it: zeros are allocated zeroed
    /// once, where fetching them and copying the result allocated and filled two
    /// buffers (a new file's first write did that for every file of a tree copy).
    pub(super) fn fetch_owned(&self, src: Src, blksz: u32) -> Result<Vec<u8>> {
        let mut v = match src {
            Src::Zero => return Ok(vec![0u8; blksz as usize]),
            Src::Partial(layers, base) => {
                let mut v = self.fetch_owned(*base, blksz)?;
                for p in layers.iter().rev() {
                    p.overlay(&mut v);
                }
                v
            }
            src => self.fetch(src, blksz)?.as_ref().clone(),
        };
        v.resize(blksz as usize, 0);
        Ok(v)
    }

    /// Current content of block `blkid`, exactly `blksz` bytes (zero-extended).
    pub(super) fn block_content(&self, dn: &Dn, blkid: u64) -> Result<Vec<u8>> {
        let src = self.resolve(dn, blkid)?;
        self.fetch_owned(src, dn.attrs.blksz)
    }

    pub(super) fn mark_dirty(st: &mut OsState, obj: u64) {
        st.dirty.insert(obj);
    }

    /// Make `record` the open generation's block `blkid` of `obj`, accounting the
    /// change of dirty bytes.
    pub(super) fn put_block(&self, st: &mut OsState, obj: u64, blkid: u64, record: Dirty) {
        let (len, partial, held) = dirty_split([&record]);
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let (old_len, old_partial, old_held) = dirty_split(dn.open.blocks.insert(blkid, record).as_ref());
        if blkid > dn.attrs.maxblkid {
            dn.attrs.maxblkid = blkid;
        }
        Self::mark_dirty(st, obj);
        if (len, partial, held) != (old_len, old_partial, old_held) {
            self.gate.add_dirty_split(len - old_len, partial - old_partial, held - old_held);
        }
    }

    /// Write `data` at byte `in_blk` of block `blkid` of `obj` (the range lies within
    /// the block). Never reads a data block: a whole record replaces what was there; a
    /// part of a record already dirty in the open txg is patched in place; a part of
    /// a record whose content below the open txg is a hole, freed, or dirty and whole
    /// in the syncing txg is copied from memory; any other part (the record is on
    /// disk, or partial in the syncing txg) becomes or extends a partial record and
    /// its fill is deferred (theory statement). Indirect blocks may be read to find
    /// the record.
    pub(super) fn write_in_block(&self, st: &mut OsState, obj: u64, blkid: u64, in_blk: usize, data: &[u8]) -> Result<()> {
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let blksz = dn.attrs.blksz as usize;
        debug_assert!(in_blk + data.len() <= blksz, "write crosses a record boundary");
        if in_blk == 0 && data.len() == blksz {
            self.put_block(st, obj, blkid, Dirty::Full(Arc::new(data.to_vec())));
            return Ok(());
        }
        let record = match dn.open.blocks.get_mut(&blkid) {
            Some(Dirty::Full(existing)) => {
                let v = Arc::make_mut(existing);
                v.resize(blksz, 0);
                v[in_blk..in_blk + data.len()].copy_from_slice(data);
                if blkid > dn.attrs.maxblkid {
                    dn.attrs.maxblkid = blkid;
                }
                return Ok(());
            }
            Some(Dirty::Partial(p)) => {
                let part = Arc::make_mut(p);
                let held_before = part.held_bytes() as i64;
                part.insert(in_blk, data);
                // Overwritten whole: a full record, which needs no fill at sync and may
                // be written early. Counted whole before and after (`Dirty::dirty_bytes`),
                // no longer as a partial record.
                if let Some(bytes) = part.take_whole(blksz) {
                    let record_bytes = part.record_bytes as i64;
                    dn.open.blocks.insert(blkid, Dirty::Full(Arc::new(bytes)));
                    self.gate.add_dirty_split(0, -record_bytes, -held_before);
                } else {
                    let grown = part.held_bytes() as i64 - held_before;
                    if grown != 0 {
                        self.gate.add_dirty_split(0, 0, grown);
                    }
                }
                if blkid > dn.attrs.maxblkid {
                    dn.attrs.maxblkid = blkid;
                }
                return Ok(());
            }
            Some(Dirty::Clone(bp)) => {
                // A write into a block cloned in this txg: it becomes a copy (read
                // now); the clone took no reference yet, so dropping it costs nothing.
                let mut b = self.fetch_owned(Src::of(*bp), blksz as u32)?;
                b[in_blk..in_blk + data.len()].copy_from_slice(data);
                Dirty::Full(Arc::new(b))
            }
            None => {
                let below = if in_ranges(&dn.open.frees, blkid) {
                    Src::Zero
                } else {
                    self.resolve_below_open(dn, blkid)?
                };
                match below {
                    Src::Zero | Src::Data(_) => {
                        let mut b = self.fetch_owned(below, blksz as u32)?;
                        b[in_blk..in_blk + data.len()].copy_from_slice(data);
                        Dirty::Full(Arc::new(b))
                    }
                    Src::Bp(_) | Src::Partial(..) => {
                        let mut p = Partial {
                            record_bytes: blksz as u64,
                            ..Partial::default()
                        };
                        p.insert(in_blk, data);
                        Dirty::Partial(Arc::new(p))
                    }
                }
            }
        };
        self.put_block(st, obj, blkid, record);
        Ok(())
    }

    /// A read merged the partial record `top` of block `blkid` of `obj` into `merged`
    /// (new bytes over old): when `top` is still the open generation's record,
    /// unchanged since (a write would have replaced the shared `Arc`), keep the merge
    /// as the whole record, so later reads and writes of it need no merge. The
    /// content below cannot have changed meanwhile (theory statement), so `merged` is
    /// the record's content. Accounts the record's growth to `blksz` bytes.
    pub(super) fn promote(&self, obj: u64, blkid: u64, top: &Arc<Partial>, merged: &Arc<Vec<u8>>) {
        let mut st = self.st.lock();
        let Some(dn) = st.dnodes.get_mut(&obj) else { return };
        if dn.attrs.freed || merged.len() != dn.attrs.blksz as usize {
            return;
        }
        let same = matches!(dn.open.blocks.get(&blkid), Some(Dirty::Partial(p)) if Arc::ptr_eq(p, top));
        if same {
            self.put_block(&mut st, obj, blkid, Dirty::Full(merged.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Partial;

    /// The extents' shape: disjoint, never touching, each non-empty and inside the
    /// record.
    fn check_shape(p: &Partial) {
        let mut end = None;
        for (&s, e) in &p.extents {
            assert!(!e.is_empty(), "empty extent at {s}");
            assert!(s + e.len() <= p.record_bytes as usize, "extent at {s} past the record");
            if let Some(prev) = end {
                assert!(s > prev, "extent at {s} touches or overlaps the one ending at {prev}");
            }
            end = Some(s + e.len());
        }
    }

    proptest::proptest! {
        /// Any sequence of writes into a partial record: the extents hold exactly the
        /// bytes written (newest wins), in the shape `insert` promises.
        #[test]
        fn insert_keeps_the_written_bytes(writes in proptest::collection::vec((0usize..4096, 1usize..700, proptest::prelude::any::<u8>()), 1..40)) {
            const RECORD: usize = 4096;
            let mut p = Partial { record_bytes: RECORD as u64, ..Partial::default() };
            let mut model = vec![0u8; RECORD];
            let mut written = vec![false; RECORD];
            for (i, &(at, len, byte)) in writes.iter().enumerate() {
                let len = len.min(RECORD - at);
                let data: Vec<u8> = (0..len).map(|k| byte.wrapping_add((k + i) as u8)).collect();
                p.insert(at, &data);
                model[at..at + len].copy_from_slice(&data);
                written[at..at + len].fill(true);
                check_shape(&p);
            }
            let mut laid = vec![0u8; RECORD];
            p.overlay(&mut laid);
            proptest::prop_assert_eq!(&laid, &model);
            let held: usize = p.extents.values().map(Vec::len).sum();
            proptest::prop_assert_eq!(held, written.iter().filter(|&&w| w).count());
            for (&s, e) in &p.extents {
                proptest::prop_assert!(written[s..s + e.len()].iter().all(|&w| w), "extent at {} holds bytes never written", s);
            }
        }
    }

    /// A record written whole in pieces, in order or not, becomes one extent that
    /// `take_whole` hands over; a record with a gap, or of another size, does not.
    #[test]
    fn pieces_covering_the_record_make_it_whole() {
        const RECORD: usize = 8192;
        let piece = |k: usize| vec![k as u8 + 1; 1024];
        for order in [[0, 1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0], [3, 0, 6, 1, 7, 2, 5, 4]] {
            let mut p = Partial {
                record_bytes: RECORD as u64,
                ..Partial::default()
            };
            for (n, &k) in order.iter().enumerate() {
                assert!(p.take_whole(RECORD).is_none(), "whole after {n} of 8 pieces");
                p.insert(k * 1024, &piece(k));
            }
            let whole = p.take_whole(RECORD).expect("every byte written");
            assert_eq!(whole, (0..8).flat_map(piece).collect::<Vec<u8>>());
            assert!(p.extents.is_empty(), "the extent was taken out");
        }
        let mut gap = Partial {
            record_bytes: RECORD as u64,
            ..Partial::default()
        };
        gap.insert(0, &[1; RECORD - 1]);
        assert!(gap.take_whole(RECORD).is_none(), "one byte missing");
        let mut other = Partial {
            record_bytes: RECORD as u64,
            ..Partial::default()
        };
        other.insert(0, &[1; RECORD]);
        assert!(other.take_whole(2 * RECORD).is_none(), "the dnode's block size changed");
        assert!(other.take_whole(RECORD).is_some());
    }
}
