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
    /// Record `data` as written at byte `at` of the record, over whatever was there.
    pub(super) fn insert(&mut self, at: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = at + data.len();
        // Extents that overlap or touch [at, end) merge into one.
        let mut lo = at;
        let mut hi = end;
        let touching: Vec<usize> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(&s, e)| s + e.len() >= at)
            .map(|(&s, _)| s)
            .collect();
        for &s in &touching {
            lo = lo.min(s);
            hi = hi.max(s + self.extents[&s].len());
        }
        let mut merged = vec![0u8; hi - lo];
        for s in touching {
            let e = self.extents.remove(&s).expect("listed above");
            merged[s - lo..s - lo + e.len()].copy_from_slice(&e);
        }
        merged[at - lo..end - lo].copy_from_slice(data);
        self.extents.insert(lo, merged);
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
        let len = record.dirty_bytes() as i64;
        let dn = st.dnodes.get_mut(&obj).unwrap();
        let old = dn.open.blocks.insert(blkid, record);
        let delta = len - old.map(|o| o.dirty_bytes() as i64).unwrap_or(0);
        if blkid > dn.attrs.maxblkid {
            dn.attrs.maxblkid = blkid;
        }
        Self::mark_dirty(st, obj);
        if delta != 0 {
            self.gate.add_dirty(delta);
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
                // Already counted whole (`Dirty::dirty_bytes`).
                Arc::make_mut(p).insert(in_blk, data);
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
