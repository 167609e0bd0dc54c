//! Syncing a txg's dirty state (OpenZFS `dnode_sync.c` and `dbuf_sync`).
//!
//! Theory: the three phases of the object set's theory statement (`super`) — collect
//! (move open records to syncing, under the txg gate's write lock), write data (the
//! level-0 blocks, partial records filled in batches, no object-set lock), finish
//! (frees, new pointers, indirect blocks bottom-up, dnode blocks, the root, under the
//! lock). Every replaced block goes to the block-kill hook or is freed, deferred.
//! Called by spa's txg sync, one txg at a time.

use super::*;

/// One block for [`Zio::write_blocks`]: its logical bytes and write properties.
pub(super) type WriteItem = (Arc<Vec<u8>>, WriteProps);

/// Records one deferred-fill batch reads at most: the fill's memory (the old blocks
/// read plus the merged records waiting for their write) stays below twice this many
/// bytes however many partial records a txg holds.
pub const FILL_BATCH_BYTES: u64 = 32 << 20;

/// Counters of the deferred fill since the object set was opened (for tests and
/// benchmarks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FillStats {
    /// Partial records completed at txg sync (their old block read and merged).
    pub synced_fills: u64,
    /// Partial records completed at txg sync with nothing to read (a hole below).
    pub hole_fills: u64,
    /// Fills whose old block could not be read: their new bytes were dropped.
    pub failed_fills: u64,
    /// Batched read calls issued for fills.
    pub fill_batches: u64,
}

/// Everything phase 2 must write for one txg: (object, blkid, otype, record).
pub struct SyncBatch {
    txg: u64,
    blocks: Vec<(u64, u64, ObjectType, Dirty)>,
    /// One entry per block: the new pointer, or `None` when nothing may be installed
    /// (a fill that failed keeps the old block).
    written: Vec<Option<BlkPtr>>,
    dirty_bytes: u64,
    /// Of `dirty_bytes`, the partial records' (counted whole; `tarn_dmu::txg`).
    partial_bytes: u64,
    /// The partial records' written bytes (what they hold in memory).
    partial_held_bytes: u64,
    /// Of `dirty_bytes`, `partial_bytes` and `partial_held_bytes`, what phase 2
    /// already took off the gate's counts (records written); phase 3 takes the rest.
    undirtied_bytes: u64,
    undirtied_partial_bytes: u64,
    undirtied_partial_held_bytes: u64,
    /// Objects with changes in this txg (data, attributes or frees).
    objects: usize,
    /// Records whose early block phase 2 installed (module `early`).
    early_blocks: usize,
}

impl SyncBatch {
    /// The txg being synced.
    pub fn txg(&self) -> u64 {
        self.txg
    }
    /// Bytes of dirty data the batch holds (what the write throttle counted).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }
    /// Level-0 blocks of the batch (written in phase 2, or written early).
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }
    /// Records of the batch that phase 2 found written early (module `early`).
    pub fn early_blocks(&self) -> usize {
        self.early_blocks
    }
    /// True when nothing in this object set changed in the txg.
    pub fn is_empty(&self) -> bool {
        self.objects == 0
    }
}

/// A tree being rewritten in phase 3: its tree (root and levels already grown), the
/// dirty indirect blocks keyed (level, index), and its used bytes before and now.
pub(super) struct TreeWork {
    tree: Tree,
    dirty: BTreeMap<(u32, u64), Vec<u8>>,
    used: i64,
    before: i64,
}

impl TreeWork {
    /// Change of the tree's used bytes in this txg.
    pub(super) fn used_delta_bytes(&self) -> i64 {
        self.tree.used_bytes as i64 - self.before
    }
}

impl Objset {
    /// Deferred-fill counters since the object set was opened.
    pub fn fill_stats(&self) -> FillStats {
        *self.fill_stats.lock()
    }

    /// Phase 1 (call inside [`TxgGate::quiesce`]): move open dirty state to syncing.
    pub fn sync_collect(&self, txg: u64) -> SyncBatch {
        let mut st = self.st.lock();
        let dirty = std::mem::take(&mut st.dirty);
        let mut blocks = Vec::new();
        let (mut dirty_bytes, mut partial_bytes, mut partial_held_bytes) = (0u64, 0u64, 0u64);
        for &obj in &dirty {
            let dn = st.dnodes.get_mut(&obj).unwrap();
            assert!(dn.syncing.is_none(), "object {obj} still syncing from an earlier txg");
            let open = std::mem::take(&mut dn.open);
            let otype = dn.attrs.otype;
            for (blkid, record) in &open.blocks {
                dirty_bytes += record.dirty_bytes();
                partial_bytes += record.partial_bytes();
                partial_held_bytes += record.partial_held_bytes();
                if !dn.attrs.freed {
                    blocks.push((obj, *blkid, otype, record.clone()));
                }
            }
            dn.syncing = Some(SyncRec {
                blocks: open.blocks,
                frees: open.frees,
                attrs: dn.attrs.clone(),
            });
        }
        st.syncing = dirty.into_iter().collect();
        SyncBatch {
            txg,
            blocks,
            written: Vec::new(),
            dirty_bytes,
            partial_bytes,
            partial_held_bytes,
            undirtied_bytes: 0,
            undirtied_partial_bytes: 0,
            undirtied_partial_held_bytes: 0,
            objects: st.syncing.len(),
            early_blocks: 0,
        }
    }

    /// Phase 2: write the batch's level-0 blocks (in `threads` parallel workers).
    ///
    /// Whole records go out first, as one batch. Then the partial records are filled
    /// (theory statement, "Deferred fill"): the block each one lies over is looked up
    /// in the synced tree, the fills are sorted by the old block's (vdev, offset) and
    /// read with [`Zio::take_blocks`] in batches of at most [`FILL_BATCH_BYTES`], each
    /// batch merged (new bytes over old) and written before the next is read.
    pub fn sync_write_data(&self, batch: &mut SyncBatch, threads: usize) -> Result<()> {
        let (compression, checksum, data_copies, dedup) = (self.compression(), self.checksum(), self.data_copies(), self.dedup());
        let txg = batch.txg;
        // nopwrite (OpenZFS `dmu_write_policy`: a strong checksum and compression on):
        // each file data block is offered the pointer it replaces, unless a free of
        // this txg covers it (then that pointer is being freed).
        let nop = checksum.is_strong() && compression.alg != tarn_phys::Compression::Off;
        let prev: Vec<Option<BlkPtr>> = if nop {
            let st = self.st.lock();
            batch
                .blocks
                .iter()
                .map(|(obj, blkid, otype, _)| {
                    let dn = st.dnodes.get(obj)?;
                    let rec = dn.syncing.as_ref()?;
                    if *otype != ObjectType::FileData || rec.frees.iter().any(|&(s, e)| (s..e).contains(blkid)) {
                        return None;
                    }
                    self.tree_lookup(&dn.tree, *blkid).ok().filter(|bp| !bp.is_hole())
                })
                .collect()
        } else {
            vec![None; batch.blocks.len()]
        };
        // Write properties of the batch's block `i` of type `otype`.
        let props = |i: usize, otype: ObjectType| {
            if otype == ObjectType::FileData {
                WriteProps {
                    otype,
                    level: 0,
                    compression,
                    checksum,
                    copies: copies_for(otype, self.os_type, data_copies),
                    txg,
                    fill: 1,
                    nop_prev: prev[i],
                    dedup,
                }
            } else {
                WriteProps::meta(otype, 0, copies_for(otype, self.os_type, data_copies), txg, 1)
            }
        };
        // Whole records written early (module `early`) keep the block they have.
        batch.written = self.early_take(txg, &batch.blocks);
        batch.early_blocks = batch.written.iter().flatten().count();
        self.undirty_written(batch, 0..batch.blocks.len());
        let mut first_err = None;
        // One batch through zio: compressed and checksummed in parallel, then written
        // with adjacent blocks merged into larger device writes.
        let full: Vec<usize> = (0..batch.blocks.len())
            .filter(|&i| matches!(batch.blocks[i].3, Dirty::Full(_)) && batch.written[i].is_none())
            .collect();
        let items: Vec<(Arc<Vec<u8>>, WriteProps)> = full
            .iter()
            .map(|&i| match &batch.blocks[i].3 {
                Dirty::Full(d) => (d.clone(), props(i, batch.blocks[i].2)),
                Dirty::Partial(_) | Dirty::Clone(_) => unreachable!("filtered above"),
            })
            .collect();
        // With compression on, an all-zero file data block is stored as a hole, not
        // written (zfsprops(7) `compression`; OpenZFS `zio_write_compress`).
        let zero: Vec<bool> = items
            .iter()
            .map(|(d, p)| p.otype == ObjectType::FileData && compression.alg != tarn_phys::Compression::Off && d.iter().all(|&b| b == 0))
            .collect();
        let to_write: Vec<(Arc<Vec<u8>>, WriteProps)> = items.iter().zip(&zero).filter(|(_, z)| !**z).map(|(i, _)| i.clone()).collect();
        let mut out = self.write_bps(&to_write, threads).into_iter();
        for (k, &i) in full.iter().enumerate() {
            let r = if zero[k] {
                Ok(BlkPtr::HOLE)
            } else {
                out.next().expect("one result per block")
            };
            match r {
                Ok(bp) => batch.written[i] = Some(bp),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        drop(items);
        self.undirty_written(batch, full.iter().copied());
        // Cloned records: the shared pointer itself, counted now in the block
        // reference table (or the dedup table) — in syncing context, so that the
        // tables written at the end of this txg match its trees.
        let mut clones = Vec::new();
        for (i, (_, _, _, record)) in batch.blocks.iter().enumerate() {
            if let Dirty::Clone(bp) = record {
                // A deduplicated block missing from its table (a damaged pool) counts
                // nowhere: its frees then leave it allocated (`refused_frees`).
                if !bp.is_hole() {
                    self.zio.clone_ref(bp);
                }
                batch.written[i] = Some(*bp);
                clones.push(i);
            }
        }
        self.undirty_written(batch, clones);
        // Deferred fills: what each partial record lies over, from the synced tree
        // (unchanged since the write, see the theory statement).
        let mut fills: Vec<(usize, Src, u32)> = Vec::new(); // (batch index, old block, blksz)
        {
            let st = self.st.lock();
            for (i, (obj, blkid, _, record)) in batch.blocks.iter().enumerate() {
                if !matches!(record, Dirty::Partial(_)) {
                    continue;
                }
                let dn = st.dnodes.get(obj).expect("a syncing object stays loaded");
                let rec = dn.syncing.as_ref().expect("a syncing object has a syncing record");
                let below = if in_ranges(&rec.frees, *blkid) {
                    Src::Zero
                } else {
                    self.resolve_tree(&dn.tree, *blkid)?
                };
                fills.push((i, below, rec.attrs.blksz));
            }
        }
        let key = |s: &Src| match s {
            Src::Bp(bp) => (1, bp.dva[0].vdev, bp.dva[0].offset_bytes),
            _ => (0, 0, 0),
        };
        fills.sort_by_key(|(_, s, _)| key(s));
        let mut rest = &fills[..];
        while !rest.is_empty() {
            let mut take = 0usize;
            let mut bytes = 0u64;
            while take < rest.len() && (take == 0 || bytes + rest[take].2 as u64 <= FILL_BATCH_BYTES) {
                bytes += rest[take].2 as u64;
                take += 1;
            }
            let (chunk, tail) = rest.split_at(take);
            rest = tail;
            let bps: Vec<BlkPtr> = chunk
                .iter()
                .map(|(_, s, _)| match s {
                    Src::Bp(bp) => *bp,
                    _ => BlkPtr::HOLE,
                })
                .collect();
            let olds = self.zio.take_blocks(&bps, threads);
            let mut stats = FillStats {
                fill_batches: 1,
                ..FillStats::default()
            };
            let mut idx: Vec<usize> = Vec::new();
            let mut items: Vec<WriteItem> = Vec::new();
            for ((i, below, blksz), old) in chunk.iter().zip(olds) {
                let (obj, _, otype, record) = &batch.blocks[*i];
                let Dirty::Partial(p) = record else { unreachable!("fills are partial") };
                let old = match below {
                    Src::Bp(_) => match old {
                        Ok(old) => {
                            stats.synced_fills += 1;
                            old
                        }
                        Err(_) => {
                            // The old bytes are gone (no copy verified; zio counted the
                            // error): install nothing, so the record keeps its old,
                            // unreadable block and every later read reports the error.
                            // The new bytes are dropped; the object goes to the error log.
                            stats.failed_fills += 1;
                            if let Some(sink) = self.error_sink.lock().clone() {
                                sink(*obj);
                            }
                            continue;
                        }
                    },
                    _ => {
                        stats.hole_fills += 1;
                        Arc::new(Vec::new())
                    }
                };
                // The old block's buffer becomes the new record: taken out of the
                // ARC, it is usually ours alone (no copy); shared, it is copied.
                let mut v = Arc::try_unwrap(old).unwrap_or_else(|shared| shared.as_ref().clone());
                v.resize(*blksz as usize, 0);
                p.overlay(&mut v);
                idx.push(*i);
                items.push((Arc::new(v), props(*i, *otype)));
            }
            for (&i, r) in idx.iter().zip(self.write_bps(&items, threads)) {
                match r {
                    Ok(bp) => batch.written[i] = Some(bp),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            self.undirty_written(batch, idx);
            let mut total = self.fill_stats.lock();
            total.synced_fills += stats.synced_fills;
            total.hole_fills += stats.hole_fills;
            total.failed_fills += stats.failed_fills;
            total.fill_batches += stats.fill_batches;
        }
        match first_err {
            Some(e) => Err(zio_err(e)),
            None => Ok(()),
        }
    }

    /// Phase 3: install pointers, rewrite indirect and dnode blocks and the root.
    /// Returns the new root pointer, or `None` if nothing changed in this txg.
    ///
    /// The metadata is built level by level across all objects of the txg: every
    /// dirty level-1 indirect block, then level 2, and so on, then all dnode blocks,
    /// then object 0's indirect blocks, then the root. Each level is compressed,
    /// checksummed and allocated as one batch ([`Zio::stage_blocks`]), which gives the
    /// pointers the next level needs without waiting for a device; all levels are then
    /// written as one aggregated batch ([`Zio::write_staged`]) before the new tree is
    /// published. A txg's metadata therefore costs one device round trip, not one per
    /// level or per block (OpenZFS issues these as one tree of parallel zios, a parent
    /// taking its children's pointers when they are ready). On an error the staged
    /// allocations are given back.
    pub fn sync_finish(&self, batch: SyncBatch) -> Result<Option<BlkPtr>> {
        let mut staged = StagedWrites::default();
        let r = self.sync_finish_staged(batch, &mut staged);
        if r.is_err() {
            self.zio.discard_staged(staged);
        }
        r
    }

    /// [`Objset::sync_finish`], staging every metadata write in `staged` and issuing
    /// them all at the end, in one aggregated batch, before the new tree is published
    /// (the object-set lock is held throughout).
    fn sync_finish_staged(&self, batch: SyncBatch, staged: &mut StagedWrites) -> Result<Option<BlkPtr>> {
        let txg = batch.txg;
        let mut st = self.st.lock();
        let syncing = std::mem::take(&mut st.syncing);
        if syncing.is_empty() && !st.zil_dirty {
            return Ok(None);
        }
        let mut installs: HashMap<u64, Vec<(u64, BlkPtr)>> = HashMap::new();
        for ((obj, blkid, _, _), bp) in batch.blocks.iter().zip(batch.written.iter()) {
            if let Some(bp) = bp {
                installs.entry(*obj).or_default().push((*blkid, *bp));
            }
        }
        let mut used_delta: i64 = 0;
        // Every surviving object's tree, with its level-1 blocks already patched.
        let mut works: Vec<(u64, SyncRec, TreeWork)> = Vec::new();
        let mut dnode_updates: BTreeMap<u64, DnodePhys> = BTreeMap::new();
        for obj in syncing {
            let dn = st.dnodes.get_mut(&obj).unwrap();
            let rec = dn.syncing.take().unwrap();
            let tree = std::mem::take(&mut dn.tree);
            if rec.attrs.freed {
                self.free_tree(&tree, txg)?;
                used_delta -= tree.used_bytes as i64;
                dnode_updates.insert(obj, DnodePhys::free());
                let dn = st.dnodes.get_mut(&obj).unwrap();
                dn.tree = Tree {
                    root: BlkPtr::HOLE,
                    nlevels: 1,
                    used_bytes: 0,
                };
                if dn.attrs.freed && !st.dirty.contains(&obj) {
                    st.dnodes.remove(&obj);
                    // Free on disk once this txg's dnode blocks are written, which
                    // happens before any later txg writes the slot again.
                    st.free_ids.insert(obj);
                }
            } else {
                let ins = installs.remove(&obj).unwrap_or_default();
                let work = self.tree_prepare(tree, &rec.frees, &ins, txg)?;
                works.push((obj, rec, work));
            }
        }
        {
            let mut trees: Vec<&mut TreeWork> = works.iter_mut().map(|(_, _, w)| w).collect();
            self.trees_write(&mut trees, txg, staged)?;
        }
        for (obj, rec, work) in works {
            used_delta += work.used_delta_bytes();
            let tree = work.tree;
            let a = &rec.attrs;
            dnode_updates.insert(
                obj,
                DnodePhys {
                    otype: a.otype,
                    indblkshift: INDBLKSHIFT,
                    nlevels: tree.nlevels,
                    bonus_type: a.bonus_type,
                    datablksz_bytes: a.blksz,
                    max_blksz_bytes: a.max_blksz,
                    maxblkid: a.maxblkid,
                    used_bytes: tree.used_bytes,
                    blkptr: tree.root,
                    bonus: a.bonus.clone(),
                },
            );
            st.dnodes.get_mut(&obj).unwrap().tree = tree;
        }
        // Dnode blocks, through object 0's tree: patched in memory, written as one batch.
        let mut by_block: BTreeMap<u64, Vec<(u64, DnodePhys)>> = BTreeMap::new();
        for (obj, phys) in dnode_updates {
            by_block.entry(obj / DNODES_PER_BLOCK).or_default().push((obj, phys));
        }
        let mut meta_installs = Vec::new();
        let mut dnode_blocks: Vec<(Arc<Vec<u8>>, WriteProps)> = Vec::new();
        let mut dnode_bids = Vec::new();
        for (bid, entries) in by_block {
            let old_bp = self.tree_lookup(&st.meta, bid)?;
            let mut blk = if old_bp.is_hole() {
                vec![0u8; DNODE_BLOCK_BYTES as usize]
            } else {
                let mut v = self.read_bp(&old_bp).map_err(zio_err)?.as_ref().clone();
                v.resize(DNODE_BLOCK_BYTES as usize, 0);
                v
            };
            for (obj, phys) in entries {
                let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
                phys.encode_into(&mut blk[off..off + DNODE_SIZE_BYTES]);
            }
            if blk.iter().all(|&b| b == 0) {
                meta_installs.push((bid, BlkPtr::HOLE));
            } else {
                dnode_blocks.push((Arc::new(blk), self.meta_props(ObjectType::Dnode, 0, txg, 1)));
                dnode_bids.push(bid);
            }
        }
        for (bid, r) in dnode_bids.into_iter().zip(self.zio.stage_blocks(&dnode_blocks, 2, staged)) {
            meta_installs.push((bid, r.map_err(zio_err)?));
        }
        let meta = std::mem::take(&mut st.meta);
        let mut work = self.tree_prepare(meta, &[], &meta_installs, txg)?;
        self.trees_write(&mut [&mut work], txg, staged)?;
        used_delta += work.used_delta_bytes();
        let meta = work.tree;
        let maxblkid = (st.next_obj.saturating_sub(1)) / DNODES_PER_BLOCK;
        let meta_dnode = DnodePhys {
            otype: ObjectType::Dnode,
            indblkshift: INDBLKSHIFT,
            nlevels: meta.nlevels,
            bonus_type: 0,
            datablksz_bytes: DNODE_BLOCK_BYTES,
            max_blksz_bytes: DNODE_BLOCK_BYTES,
            maxblkid,
            used_bytes: meta.used_bytes,
            blkptr: meta.root,
            bonus: Vec::new(),
        };
        st.meta = meta;
        let phys = ObjsetPhys {
            meta_dnode,
            os_type: self.os_type,
            zil_header: st.zil_header,
        };
        st.zil_dirty = false;
        let root_block = [(Arc::new(phys.encode()), self.meta_props(ObjectType::Objset, 0, txg, 1))];
        let root = self.zio.stage_blocks(&root_block, 1, staged).pop().expect("one block").map_err(zio_err)?;
        // Every level at once; the tree is published only after the writes landed.
        let written = self.zio.write_staged(std::mem::take(staged), 2).map_err(zio_err)?;
        self.cache_policy(written.iter());
        let old_root = std::mem::replace(&mut st.root, root);
        used_delta += root.asize_total_bytes() as i64 - old_root.asize_total_bytes() as i64;
        self.kill(&old_root, txg);
        st.used_bytes = (st.used_bytes as i64 + used_delta).max(0) as u64;
        drop(st);
        self.gate.add_dirty_split(
            -((batch.dirty_bytes - batch.undirtied_bytes) as i64),
            -((batch.partial_bytes - batch.undirtied_partial_bytes) as i64),
            -((batch.partial_held_bytes - batch.undirtied_partial_held_bytes) as i64),
        );
        Ok(Some(root))
    }

    /// Records `idx` of `batch` that phase 2 wrote (or installed) leave the gate's
    /// dirty count now, as OpenZFS undirties each record when its write is done
    /// (`dbuf_write_done` → `dsl_pool_undirty_space`), not when the whole txg is: the
    /// write throttle then sees the sync's progress, and the space check stops
    /// counting a block both as dirty data and as allocated space. Phase 3 takes the
    /// rest (records dropped or freed, a failed fill's).
    fn undirty_written(&self, batch: &mut SyncBatch, idx: impl IntoIterator<Item = usize>) {
        let (bytes, partial, held) = super::dbuf::dirty_split(idx.into_iter().filter(|&i| batch.written[i].is_some()).map(|i| &batch.blocks[i].3));
        if bytes > 0 {
            batch.undirtied_bytes += bytes as u64;
            batch.undirtied_partial_bytes += partial as u64;
            batch.undirtied_partial_held_bytes += held as u64;
            self.gate.add_dirty_split(-bytes, -partial, -held);
        }
    }

    /// A block leaves the tree in txg `txg`: hand it to the kill hook, or free it
    /// (deferred) when there is none. Holes are ignored.
    pub(super) fn kill(&self, bp: &BlkPtr, txg: u64) {
        if bp.is_hole() {
            return;
        }
        let hook = self.block_kill.lock().clone();
        match hook {
            Some(k) => k(bp, txg),
            None => self.zio.free_block(bp, txg),
        }
    }

    /// Write properties of a metadata block of this object set (LZ4, BLAKE3, ditto copies).
    pub(super) fn meta_props(&self, otype: ObjectType, level: u8, txg: u64, fill: u64) -> WriteProps {
        WriteProps::meta(otype, level, copies_for(otype, self.os_type, self.data_copies()), txg, fill)
    }

    /// Free every block of a tree (object deletion). The root must sit at the level
    /// `nlevels` gives it, and every child one level below its parent, so the walk is
    /// at most 8 deep. A pointer met twice in one tree (a crafted DAG: a tree never
    /// shares a block with itself) is freed once and its subtree walked once, so the
    /// walk costs at most 1024 decodes per distinct indirect block and never frees a
    /// block twice.
    pub(super) fn free_tree(&self, tree: &Tree, txg: u64) -> Result<()> {
        if !tree.root.is_hole() && tree.root.level as u32 + 1 != tree.nlevels.max(1) as u32 {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "dnode",
                format!("{} levels with a level-{} root", tree.nlevels, tree.root.level),
            )));
        }
        self.free_subtree(&tree.root, txg, &mut std::collections::HashSet::new())
    }

    pub(super) fn free_subtree(&self, bp: &BlkPtr, txg: u64, seen: &mut std::collections::HashSet<(tarn_phys::Dva, u64)>) -> Result<()> {
        // A block is freed once however often a (crafted) tree names it, except the
        // level-0 pointers that legitimately repeat — deduplicated and cloned ones,
        // two of which may be identical — each of which is a reference to give back.
        let shared = bp.level == 0 && (bp.dedup || bp.phys_birth_txg != 0);
        if bp.is_hole() || (!shared && !seen.insert((bp.dva[0], bp.birth_txg))) {
            return Ok(());
        }
        if bp.level > 0 {
            let ind = self.read_indirect(bp, bp.level as u32)?;
            for c in ind.chunks_exact(BLKPTR_SIZE_BYTES) {
                let c = BlkPtr::decode(c)?;
                if !c.is_hole() && c.level + 1 != bp.level {
                    return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
                }
                self.free_subtree(&c, txg, seen)?;
            }
        }
        self.kill(bp, txg);
        Ok(())
    }

    /// First half of rewriting a tree in phase 3: grow it to reach every installed
    /// block id, then apply `frees` (level-0 block-id ranges) and `installs` to its
    /// level-1 blocks in memory. Only reads happen here; [`Objset::trees_write`] writes.
    pub(super) fn tree_prepare(&self, mut tree: Tree, frees: &[(u64, u64)], installs: &[(u64, BlkPtr)], txg: u64) -> Result<TreeWork> {
        let before = tree.used_bytes as i64;
        let mut dirty: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
        let old_levels = tree.nlevels.max(1) as u32;
        let mut levels = old_levels;
        if let Some(maxb) = installs.iter().map(|(b, _)| *b).max() {
            while levels < 8 && BPS_PER_INDIRECT.checked_pow(levels - 1).map(|s| maxb >= s).unwrap_or(false) {
                levels += 1;
            }
        }
        if levels > old_levels {
            // Grow: the old root becomes entry 0 of a new indirect block one level up,
            // which is entry 0 of the next, up to the new top; all are written below.
            for level in old_levels..levels {
                dirty.insert((level, 0), vec![0u8; 1 << INDBLKSHIFT]);
            }
            if !tree.root.is_hole() {
                tree.root.encode_into(&mut dirty.get_mut(&(old_levels, 0)).unwrap()[0..BLKPTR_SIZE_BYTES]);
            }
            tree.root = BlkPtr::HOLE;
        }
        tree.nlevels = levels as u8;
        let mut used = before;
        if levels == 1 {
            for &(s, e) in frees {
                if s == 0 && e > 0 && !tree.root.is_hole() {
                    used -= tree.root.asize_total_bytes() as i64;
                    self.kill(&tree.root, txg);
                    tree.root = BlkPtr::HOLE;
                }
            }
            for (blkid, bp) in installs {
                assert_eq!(*blkid, 0);
                if tree.root == *bp {
                    continue; // nopwrite: the block stays as it is
                }
                used -= tree.root.asize_total_bytes() as i64;
                self.kill(&tree.root, txg);
                used += bp.asize_total_bytes() as i64;
                tree.root = *bp;
            }
            // `trees_write` sets `tree.used_bytes` from `used` for every tree.
            return Ok(TreeWork { tree, dirty, used, before });
        }
        let top = levels - 1;
        let span = |level: u32| BPS_PER_INDIRECT.pow(level);
        // Frees: for each range, walk the level-1 blocks that overlap existing data.
        for &(s, e) in frees {
            let e = e.min(span(levels - 1));
            if s >= e {
                continue;
            }
            let mut l1 = s / BPS_PER_INDIRECT;
            let last = (e - 1) / BPS_PER_INDIRECT;
            while l1 <= last {
                // Skip level-1 blocks that are holes without loading them.
                if self.l1_exists(&tree, &dirty, top, l1)? {
                    self.load_indirect(&mut dirty, &tree, top, 1, l1)?;
                    let blk = dirty.get_mut(&(1, l1)).unwrap();
                    let lo = s.max(l1 * BPS_PER_INDIRECT);
                    let hi = e.min((l1 + 1) * BPS_PER_INDIRECT);
                    for b in lo..hi {
                        let o = (b % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                        let old = BlkPtr::decode(&blk[o..o + BLKPTR_SIZE_BYTES])?;
                        if !old.is_hole() {
                            used -= old.asize_total_bytes() as i64;
                            self.kill(&old, txg);
                            blk[o..o + BLKPTR_SIZE_BYTES].fill(0);
                        }
                    }
                }
                l1 += 1;
            }
        }
        for &(blkid, bp) in installs {
            self.load_indirect(&mut dirty, &tree, top, 1, blkid / BPS_PER_INDIRECT)?;
            let blk = dirty.get_mut(&(1, blkid / BPS_PER_INDIRECT)).unwrap();
            let o = (blkid % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
            let old = BlkPtr::decode(&blk[o..o + BLKPTR_SIZE_BYTES])?;
            if old == bp {
                continue; // nopwrite: the block stays as it is
            }
            if !old.is_hole() {
                used -= old.asize_total_bytes() as i64;
                self.kill(&old, txg);
            }
            used += bp.asize_total_bytes() as i64;
            bp.encode_into(&mut blk[o..o + BLKPTR_SIZE_BYTES]);
        }
        Ok(TreeWork { tree, dirty, used, before })
    }

    /// Load indirect block (`level`, `index`) of a tree of top level `top` into
    /// `dirty`, with every ancestor on the way down (a dirty copy wins over disk).
    pub(super) fn load_indirect(&self, dirty: &mut BTreeMap<(u32, u64), Vec<u8>>, tree: &Tree, top: u32, level: u32, index: u64) -> Result<()> {
        for l in (level..=top).rev() {
            let idx = index / BPS_PER_INDIRECT.pow(l - level);
            if dirty.contains_key(&(l, idx)) {
                continue;
            }
            let bp = if l == top {
                tree.root
            } else {
                let parent = &dirty[&(l + 1, idx / BPS_PER_INDIRECT)];
                let o = (idx % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                BlkPtr::decode(&parent[o..o + BLKPTR_SIZE_BYTES])?
            };
            let bytes = if bp.is_hole() {
                vec![0u8; 1 << INDBLKSHIFT]
            } else {
                self.take_indirect(&bp, l)?
            };
            dirty.insert((l, idx), bytes);
        }
        Ok(())
    }

    /// Second half of phase 3 for a set of trees: stage their dirty indirect blocks
    /// bottom-up in `staged`, one [`Zio::stage_blocks`] batch per level across all
    /// trees, each new pointer installed in its (loaded) parent or as the tree's new
    /// root. The caller writes what was staged.
    pub(super) fn trees_write(&self, works: &mut [&mut TreeWork], txg: u64, staged: &mut StagedWrites) -> Result<()> {
        let max_top = works.iter().map(|w| w.tree.nlevels.max(1) as u32 - 1).max().unwrap_or(0);
        for level in 1..=max_top {
            // (tree, index, bytes) of every dirty block at this level; empty ones are holes.
            let mut members: Vec<(usize, u64)> = Vec::new();
            let mut blocks: Vec<(Arc<Vec<u8>>, WriteProps)> = Vec::new();
            let mut results: Vec<(usize, u64, BlkPtr)> = Vec::new();
            for (w, work) in works.iter_mut().enumerate() {
                let keys: Vec<u64> = work.dirty.range((level, 0)..(level + 1, 0)).map(|((_, i), _)| *i).collect();
                for idx in keys {
                    let blk = work.dirty.remove(&(level, idx)).unwrap();
                    let mut fill = 0u64;
                    for i in 0..BPS_PER_INDIRECT as usize {
                        let c = &blk[i * BLKPTR_SIZE_BYTES..(i + 1) * BLKPTR_SIZE_BYTES];
                        if c[64..72] != [0u8; 8] {
                            fill += u64::from_le_bytes(c[72..80].try_into().unwrap());
                        }
                    }
                    if blk.iter().all(|&b| b == 0) {
                        results.push((w, idx, BlkPtr::HOLE));
                    } else {
                        members.push((w, idx));
                        blocks.push((Arc::new(blk), self.meta_props(ObjectType::Indirect, level as u8, txg, fill)));
                    }
                }
            }
            for ((w, idx), r) in members.into_iter().zip(self.zio.stage_blocks(&blocks, 2, staged)) {
                results.push((w, idx, r.map_err(zio_err)?));
            }
            for (w, idx, new_bp) in results {
                let work = &mut *works[w];
                let top = work.tree.nlevels.max(1) as u32 - 1;
                work.used += new_bp.asize_total_bytes() as i64;
                if level == top {
                    work.used -= work.tree.root.asize_total_bytes() as i64;
                    self.kill(&work.tree.root, txg);
                    work.tree.root = new_bp;
                } else {
                    let pidx = idx / BPS_PER_INDIRECT;
                    if !work.dirty.contains_key(&(level + 1, pidx)) {
                        self.load_indirect(&mut work.dirty, &work.tree, top, level + 1, pidx)?;
                    }
                    let parent = work.dirty.get_mut(&(level + 1, pidx)).unwrap();
                    let o = (idx % BPS_PER_INDIRECT) as usize * BLKPTR_SIZE_BYTES;
                    let old = BlkPtr::decode(&parent[o..o + BLKPTR_SIZE_BYTES])?;
                    if !old.is_hole() {
                        work.used -= old.asize_total_bytes() as i64;
                        self.kill(&old, txg);
                    }
                    new_bp.encode_into(&mut parent[o..o + BLKPTR_SIZE_BYTES]);
                }
            }
        }
        for work in works.iter_mut() {
            work.tree.used_bytes = work.used.max(0) as u64;
        }
        Ok(())
    }

    /// Whether level-1 block `l1` of `tree` exists (or is already loaded).
    pub(super) fn l1_exists(&self, tree: &Tree, dirty: &BTreeMap<(u32, u64), Vec<u8>>, top: u32, l1: u64) -> Result<bool> {
        if dirty.contains_key(&(1, l1)) {
            return Ok(true);
        }
        // Find the pointer to (1, l1) by walking down from the root; a dirty block on
        // the way (a tree grown this txg has a hole for a root) wins over disk.
        let mut bp = tree.root;
        for l in (2..=top).rev() {
            let idx_here = l1 / BPS_PER_INDIRECT.pow(l - 1);
            let child = (l1 / BPS_PER_INDIRECT.pow(l - 2)) % BPS_PER_INDIRECT;
            let o = child as usize * BLKPTR_SIZE_BYTES;
            bp = match dirty.get(&(l, idx_here)) {
                Some(b) => BlkPtr::decode(&b[o..o + BLKPTR_SIZE_BYTES])?,
                None if bp.is_hole() => return Ok(false),
                None => BlkPtr::decode(&self.read_indirect(&bp, l)?[o..o + BLKPTR_SIZE_BYTES])?,
            };
        }
        Ok(!bp.is_hole())
    }
}
