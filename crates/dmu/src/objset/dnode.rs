//! Dnodes in memory and the block-pointer trees under them (OpenZFS `dnode.c`).
//!
//! Theory: an object's dnode ([`Dn`](super::Dn)) is loaded from the dnode array (object 0's
//! tree) on first use and cached; its tree is walked one checked indirect block at a
//! time (`read_indirect` verifies level, type and length before anything indexes
//! it), so a crafted tree gives `DmuError::Corrupt`, never a panic. New objects take
//! the lowest free slot (`scan_free_slots` finds free slots a few dnode blocks at a
//! time). Everything here runs under the object set's lock. Called by the rest of
//! the object set (open context and phase 3 of the sync).

use super::*;

impl Objset {
    pub(super) fn check_new_object(&self, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) -> Result<()> {
        self.check_writable()?;
        if bonus.len() > tarn_phys::DNODE_BONUS_SIZE_BYTES {
            return Err(DmuError::Invalid("bonus too long"));
        }
        let valid = |b: u32| (512..=tarn_phys::MAX_BLOCK_SIZE_BYTES).contains(&b) && b.is_multiple_of(512);
        if !valid(blksz_bytes) || !valid(max_blksz_bytes) || max_blksz_bytes < blksz_bytes {
            return Err(DmuError::Invalid("block size"));
        }
        Ok(())
    }

    /// Put a new, empty object at id `obj` (free, checked by the caller) and mark it dirty.
    pub(super) fn install_object(st: &mut OsState, obj: u64, otype: ObjectType, blksz_bytes: u32, max_blksz_bytes: u32, bonus: &[u8]) {
        st.next_obj = st.next_obj.max(obj + 1);
        st.dnodes.insert(
            obj,
            Dn {
                attrs: Attrs {
                    otype,
                    blksz: blksz_bytes,
                    max_blksz: max_blksz_bytes,
                    maxblkid: 0,
                    bonus_type: 1,
                    bonus: bonus.to_vec(),
                    freed: false,
                },
                tree: Tree {
                    root: BlkPtr::HOLE,
                    nlevels: 1,
                    used_bytes: 0,
                },
                open: OpenRec::default(),
                syncing: None,
            },
        );
        Self::mark_dirty(st, obj);
    }

    /// Read the indirect block `bp`, which its place in the tree says is at `level`
    /// (≥ 1), and check it before anything slices it: a pointer at the wrong level,
    /// of another type, or a block that is not exactly one indirect block long is
    /// `Corrupt` (a crafted pool), never an index panic further down.
    pub(super) fn read_indirect(&self, bp: &BlkPtr, level: u32) -> Result<Arc<Vec<u8>>> {
        Self::check_indirect_bp(bp, level)?;
        let ind = self.read_bp(bp).map_err(zio_err)?;
        Self::check_indirect_len(&ind, level)?;
        Ok(ind)
    }

    /// [`Objset::read_indirect`] of a block that this txg's sync replaces (its
    /// pointers are about to change): the cached copy leaves the ARC
    /// ([`tarn_zio::Zio::take_block`]) and, when nothing else holds it, becomes the
    /// returned buffer without a copy. A reader that still walks the old tree while
    /// the sync runs reads the old block again from disk, where it stays until its
    /// deferred free. Same checks and errors as `read_indirect`.
    pub(super) fn take_indirect(&self, bp: &BlkPtr, level: u32) -> Result<Vec<u8>> {
        Self::check_indirect_bp(bp, level)?;
        let ind = self.zio.take_block(bp).map_err(zio_err)?;
        Self::check_indirect_len(&ind, level)?;
        Ok(Arc::unwrap_or_clone(ind))
    }

    fn check_indirect_bp(bp: &BlkPtr, level: u32) -> Result<()> {
        if bp.level as u32 != level || bp.otype != ObjectType::Indirect {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "indirect",
                format!("expected a level-{level} indirect block, found level {} {:?}", bp.level, bp.otype),
            )));
        }
        Ok(())
    }

    fn check_indirect_len(ind: &[u8], level: u32) -> Result<()> {
        if ind.len() != 1 << INDBLKSHIFT {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
                "indirect",
                format!("indirect block of {} bytes (level {level})", ind.len()),
            )));
        }
        Ok(())
    }

    /// The level-0 pointer for `blkid` in `tree` (hole if beyond the tree).
    pub(super) fn tree_lookup(&self, tree: &Tree, blkid: u64) -> Result<BlkPtr> {
        let levels = tree.nlevels.max(1) as u32;
        if levels == 1 {
            return Ok(if blkid == 0 { tree.root } else { BlkPtr::HOLE });
        }
        let span = BPS_PER_INDIRECT.checked_pow(levels - 1).unwrap_or(u64::MAX);
        if blkid >= span {
            return Ok(BlkPtr::HOLE);
        }
        let mut bp = tree.root;
        for level in (1..levels).rev() {
            if bp.is_hole() {
                return Ok(BlkPtr::HOLE);
            }
            let ind = self.read_indirect(&bp, level)?;
            let idx = (blkid / BPS_PER_INDIRECT.pow(level - 1)) % BPS_PER_INDIRECT;
            let off = idx as usize * BLKPTR_SIZE_BYTES;
            bp = BlkPtr::decode(&ind[off..off + BLKPTR_SIZE_BYTES])?;
        }
        Ok(bp)
    }

    /// Look for free slots below `next_obj` in the next few dnode blocks after
    /// `scan_cursor` and add them to `free_ids`. A slot counts when it is free on disk
    /// and has no dnode in memory (one created, or freed, in a txg not yet synced).
    pub(super) fn scan_free_slots(&self, st: &mut OsState) -> Result<()> {
        let mut blocks = 0;
        while st.scan_cursor < st.next_obj && blocks < Self::SCAN_BLOCKS && st.free_ids.is_empty() {
            let blkid = st.scan_cursor / DNODES_PER_BLOCK;
            let first = blkid * DNODES_PER_BLOCK;
            let end = (first + DNODES_PER_BLOCK).min(st.next_obj);
            let bp = self.tree_lookup(&st.meta, blkid)?;
            let blk = if bp.is_hole() { None } else { Some(self.read_bp(&bp).map_err(zio_err)?) };
            for obj in st.scan_cursor.max(first).max(1)..end {
                let free_on_disk = match &blk {
                    None => true,
                    Some(b) => {
                        let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
                        let d = b
                            .get(off..off + DNODE_SIZE_BYTES)
                            .ok_or(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode", "short dnode block")))?;
                        DnodePhys::decode(d)?.is_free()
                    }
                };
                if free_on_disk && !st.dnodes.contains_key(&obj) {
                    st.free_ids.insert(obj);
                }
            }
            st.scan_cursor = end;
            blocks += 1;
        }
        Ok(())
    }

    pub(super) fn load_dnode<'a>(&self, st: &'a mut OsState, obj: u64) -> Result<&'a mut Dn> {
        if obj == 0 {
            return Err(DmuError::NoSuchObject(0));
        }
        if !st.dnodes.contains_key(&obj) {
            let bp = self.tree_lookup(&st.meta, obj / DNODES_PER_BLOCK)?;
            if bp.is_hole() {
                return Err(DmuError::NoSuchObject(obj));
            }
            let blk = self.read_bp(&bp).map_err(zio_err)?;
            let off = (obj % DNODES_PER_BLOCK) as usize * DNODE_SIZE_BYTES;
            if blk.len() < off + DNODE_SIZE_BYTES {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode", "short dnode block")));
            }
            let phys = DnodePhys::decode(&blk[off..off + DNODE_SIZE_BYTES])?;
            if phys.is_free() {
                return Err(DmuError::NoSuchObject(obj));
            }
            if st.dnodes.len() >= DNODE_CACHE_MAX {
                let dirty = &st.dirty;
                st.dnodes.retain(|id, d| dirty.contains(id) || d.syncing.is_some());
            }
            st.dnodes.insert(
                obj,
                Dn {
                    attrs: Attrs {
                        otype: phys.otype,
                        blksz: phys.datablksz_bytes,
                        max_blksz: phys.max_blksz_bytes,
                        maxblkid: phys.maxblkid,
                        bonus_type: phys.bonus_type,
                        bonus: phys.bonus,
                        freed: false,
                    },
                    tree: Tree {
                        root: phys.blkptr,
                        nlevels: phys.nlevels,
                        used_bytes: phys.used_bytes,
                    },
                    open: OpenRec::default(),
                    syncing: None,
                },
            );
        }
        let dn = st.dnodes.get_mut(&obj).unwrap();
        if dn.attrs.freed {
            return Err(DmuError::NoSuchObject(obj));
        }
        Ok(dn)
    }
}
