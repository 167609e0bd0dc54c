//! Traversal: visit every block pointer reachable from an object-set root.
//!
//! Theory: an object set is a tree — root → meta-dnode tree → dnode blocks → each
//! dnode's block tree. `traverse` walks it depth first, calling `visit` for every
//! non-hole pointer *after* its children (so a caller that frees blocks frees leaves
//! before the indirect blocks that name them). Used by dataset destroy, and later by
//! scrub and `zdb`. Every walk is bounded in depth: levels are checked against the
//! dnode's `nlevels` and a pointer's level must be one less than its parent's; an
//! indirect block must be exactly one indirect block long (128 KiB, 1024 pointers).
//!
//! Every walk is also bounded in work. A crafted pool can make one indirect block's
//! 1024 pointers all name the same child, and that child's name the same grandchild,
//! and so on: a DAG of 8 blocks that a naive walk visits 1024^7 times. A real object
//! set never references one block twice (copy-on-write gives every block one parent;
//! clones share blocks only across object sets), so each walk remembers the indirect
//! and dnode blocks it has expanded — a set keyed by (first DVA, birth txg), one entry
//! per expanded block, about 1/1024 of the walk's pointers — and skips a pointer it
//! has already expanded or visited. The work is then at most 1024 decodes per
//! distinct indirect block, and no block is reported twice to `visit` (so a caller
//! that frees what it visits cannot free one twice). Level-0 data blocks are not
//! remembered (that set would be as large as the walk); a data pointer repeated in
//! one indirect block is reported once per repetition, at most 1024 times per
//! distinct parent.

use crate::{DmuError, Result};
use std::collections::HashSet;
use tarn_phys::{BlkPtr, DnodePhys, Dva, ObjectType, ObjsetPhys, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};
use tarn_zio::Zio;

/// Bytes of an indirect block (1024 block pointers).
const INDIRECT_BYTES: usize = 1 << crate::objset::INDBLKSHIFT;

/// Blocks one walk has expanded (see the module docs).
type Seen = HashSet<(Dva, u64)>;

fn read(zio: &Zio, bp: &BlkPtr) -> Result<std::sync::Arc<Vec<u8>>> {
    zio.read_block(bp).map_err(|e| DmuError::Io(e.to_string()))
}

/// Read an indirect block and check its length before it is split into pointers.
fn read_indirect(zio: &Zio, bp: &BlkPtr) -> Result<std::sync::Arc<Vec<u8>>> {
    let ind = read(zio, bp)?;
    if ind.len() != INDIRECT_BYTES {
        return Err(DmuError::Corrupt(tarn_phys::Corrupt::new(
            "indirect",
            format!("indirect block of {} bytes", ind.len()),
        )));
    }
    Ok(ind)
}

/// True the first time a walk meets block `bp` (a hole is never "met").
fn first_visit(seen: &mut Seen, bp: &BlkPtr) -> bool {
    seen.insert((bp.dva[0], bp.birth_txg))
}

fn walk_tree(
    zio: &Zio,
    bp: &BlkPtr,
    depth_left: u8,
    seen: &mut Seen,
    on_data: &mut dyn FnMut(&BlkPtr) -> Result<()>,
    visit: &mut dyn FnMut(&BlkPtr),
) -> Result<()> {
    if bp.is_hole() {
        return Ok(());
    }
    if bp.level > 0 {
        if depth_left == 0 {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "tree deeper than nlevels")));
        }
        if !first_visit(seen, bp) {
            return Ok(());
        }
        let ind = read_indirect(zio, bp)?;
        for c in ind.chunks_exact(BLKPTR_SIZE_BYTES) {
            let child = BlkPtr::decode(c)?;
            if !child.is_hole() && child.level + 1 != bp.level {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
            }
            walk_tree(zio, &child, depth_left - 1, seen, on_data, visit)?;
        }
    } else {
        if bp.otype == ObjectType::Dnode && !first_visit(seen, bp) {
            return Ok(());
        }
        on_data(bp)?;
    }
    visit(bp);
    Ok(())
}

/// Visit every block of the object set rooted at `root` (including `root`).
pub fn traverse(zio: &Zio, root: &BlkPtr, visit: &mut dyn FnMut(&BlkPtr)) -> Result<()> {
    if root.is_hole() {
        return Ok(());
    }
    let phys = ObjsetPhys::decode(&read(zio, root)?)?;
    let md = &phys.meta_dnode;
    // Collect dnodes first (visiting meta blocks), then walk each object's tree.
    let mut dnodes: Vec<DnodePhys> = Vec::new();
    let mut meta_blocks: Vec<BlkPtr> = Vec::new();
    let mut seen = Seen::new();
    walk_tree(
        zio,
        &md.blkptr,
        md.nlevels.saturating_sub(1),
        &mut seen,
        &mut |bp| {
            if bp.otype != ObjectType::Dnode {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode block", "wrong type")));
            }
            let blk = read(zio, bp)?;
            for d in blk.chunks_exact(DNODE_SIZE_BYTES) {
                let dn = DnodePhys::decode(d)?;
                if !dn.is_free() {
                    dnodes.push(dn);
                }
            }
            Ok(())
        },
        &mut |bp| meta_blocks.push(*bp),
    )?;
    for dn in &dnodes {
        walk_tree(zio, &dn.blkptr, dn.nlevels.saturating_sub(1), &mut seen, &mut |_| Ok(()), visit)?;
    }
    for bp in &meta_blocks {
        visit(bp);
    }
    visit(root);
    Ok(())
}

/// How a resumable traversal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walked {
    /// Every object from the start object on was visited.
    Done,
    /// `object_done` asked to stop; resume with this object id.
    StoppedBefore(u64),
}

/// State of one [`traverse_resumable`] walk.
struct Resumable<'a> {
    zio: &'a Zio,
    min_birth_txg: u64,
    start_object: u64,
    dnodes_per_block: u64,
    visit: &'a mut dyn FnMut(&BlkPtr, u64),
    object_done: &'a mut dyn FnMut(u64) -> bool,
    /// Indirect and dnode blocks expanded in this walk (see the module docs).
    seen: Seen,
}

/// Object id the meta-dnode's own blocks are reported under.
pub const META_OBJECT: u64 = u64::MAX;

impl Resumable<'_> {
    /// Visit `bp`'s subtree, pruning blocks born before `min_birth_txg` (their
    /// children are no younger, since a parent is rewritten whenever a child is).
    fn tree(&mut self, bp: &BlkPtr, depth_left: u8, object: u64) -> Result<()> {
        if bp.is_hole() || bp.birth_txg < self.min_birth_txg {
            return Ok(());
        }
        if bp.level > 0 {
            if depth_left == 0 {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "tree deeper than nlevels")));
            }
            if !first_visit(&mut self.seen, bp) {
                return Ok(());
            }
            let ind = read_indirect(self.zio, bp)?;
            for c in ind.chunks_exact(BLKPTR_SIZE_BYTES) {
                let child = BlkPtr::decode(c)?;
                if !child.is_hole() && child.level + 1 != bp.level {
                    return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
                }
                self.tree(&child, depth_left - 1, object)?;
            }
        }
        (self.visit)(bp, object);
        Ok(())
    }

    /// Walk the meta-dnode tree below `bp` (block `blkid` at its level); for each
    /// dnode block, visit it and then each allocated object's tree in id order.
    fn meta(&mut self, bp: &BlkPtr, blkid: u64, depth_left: u8) -> Result<Walked> {
        if bp.is_hole() || bp.birth_txg < self.min_birth_txg {
            return Ok(Walked::Done);
        }
        if bp.level > 0 {
            if depth_left == 0 {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "tree deeper than nlevels")));
            }
            if !first_visit(&mut self.seen, bp) {
                return Ok(Walked::Done);
            }
            let ind = read_indirect(self.zio, bp)?;
            let fanout = (ind.len() / BLKPTR_SIZE_BYTES) as u64;
            // Objects below child i start at (blkid * fanout + i) << (level - 1 fanouts).
            // Saturating: an 8-level meta-dnode tree spans more ids than a u64 holds,
            // and ids past u64::MAX cannot be below `start_object`.
            let span = self.dnodes_per_block.saturating_mul(fanout.saturating_pow(bp.level as u32 - 1));
            for (i, c) in ind.chunks_exact(BLKPTR_SIZE_BYTES).enumerate() {
                let child_blkid = blkid.saturating_mul(fanout).saturating_add(i as u64);
                if child_blkid.saturating_add(1).saturating_mul(span) <= self.start_object {
                    continue;
                }
                let child = BlkPtr::decode(c)?;
                if !child.is_hole() && child.level + 1 != bp.level {
                    return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
                }
                if let Walked::StoppedBefore(o) = self.meta(&child, child_blkid, depth_left - 1)? {
                    return Ok(Walked::StoppedBefore(o));
                }
            }
            (self.visit)(bp, META_OBJECT);
            return Ok(Walked::Done);
        }
        if bp.otype != ObjectType::Dnode {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("dnode block", "wrong type")));
        }
        if !first_visit(&mut self.seen, bp) {
            return Ok(Walked::Done);
        }
        let blk = read(self.zio, bp)?;
        (self.visit)(bp, META_OBJECT);
        let first = blkid.saturating_mul(self.dnodes_per_block);
        for (j, d) in blk.chunks_exact(DNODE_SIZE_BYTES).enumerate() {
            let object = first.saturating_add(j as u64);
            if object < self.start_object {
                continue;
            }
            let dn = DnodePhys::decode(d)?;
            if dn.is_free() {
                continue;
            }
            self.tree(&dn.blkptr, dn.nlevels.saturating_sub(1), object)?;
            if (self.object_done)(object) {
                return Ok(Walked::StoppedBefore(object.saturating_add(1)));
            }
        }
        Ok(Walked::Done)
    }
}

/// The scan's walk of one object set: visit every block born at or after
/// `min_birth_txg` (subtrees older than that are pruned) of every object with id
/// `>= start_object`, object by object in id order, each block with the object it
/// belongs to ([`META_OBJECT`] for the meta-dnode tree and the object-set root).
/// After each object, `object_done(id)` may return true to stop: the walk then
/// returns [`Walked::StoppedBefore`] with the id to resume from. Blocks of the
/// meta-dnode tree above the resume point are visited again on resumption (a few
/// blocks read twice; the caller tolerates duplicates).
///
/// Errors: the first block that cannot be read or decoded (the walk stops there).
pub fn traverse_resumable(
    zio: &Zio,
    root: &BlkPtr,
    min_birth_txg: u64,
    start_object: u64,
    visit: &mut dyn FnMut(&BlkPtr, u64),
    object_done: &mut dyn FnMut(u64) -> bool,
) -> Result<Walked> {
    if root.is_hole() || root.birth_txg < min_birth_txg {
        return Ok(Walked::Done);
    }
    let phys = ObjsetPhys::decode(&read(zio, root)?)?;
    let md = &phys.meta_dnode;
    let mut w = Resumable {
        zio,
        min_birth_txg,
        start_object,
        dnodes_per_block: (md.datablksz_bytes as u64 / DNODE_SIZE_BYTES as u64).max(1),
        visit,
        object_done,
        seen: Seen::new(),
    };
    if let Walked::StoppedBefore(o) = w.meta(&md.blkptr, 0, md.nlevels.saturating_sub(1))? {
        return Ok(Walked::StoppedBefore(o));
    }
    (w.visit)(root, META_OBJECT);
    Ok(Walked::Done)
}
