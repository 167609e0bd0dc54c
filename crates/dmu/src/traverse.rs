//! Traversal: visit every block pointer reachable from an object-set root.
//!
//! Theory: an object set is a tree — root → meta-dnode tree → dnode blocks → each
//! dnode's block tree. `traverse` walks it depth first, calling `visit` for every
//! non-hole pointer *after* its children (so a caller that frees blocks frees leaves
//! before the indirect blocks that name them). Used by dataset destroy, and later by
//! scrub and `zdb`. Every walk is bounded: levels are checked against the dnode's
//! `nlevels` and a pointer's level must be one less than its parent's.

use crate::{DmuError, Result};
use tarn_phys::{BlkPtr, DnodePhys, ObjectType, ObjsetPhys, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};
use tarn_zio::Zio;

fn read(zio: &Zio, bp: &BlkPtr) -> Result<std::sync::Arc<Vec<u8>>> {
    zio.read_block(bp).map_err(|e| DmuError::Io(e.to_string()))
}

fn walk_tree(zio: &Zio, bp: &BlkPtr, depth_left: u8, on_data: &mut dyn FnMut(&BlkPtr) -> Result<()>, visit: &mut dyn FnMut(&BlkPtr)) -> Result<()> {
    if bp.is_hole() {
        return Ok(());
    }
    if bp.level > 0 {
        if depth_left == 0 {
            return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "tree deeper than nlevels")));
        }
        let ind = read(zio, bp)?;
        for c in ind.chunks_exact(BLKPTR_SIZE_BYTES) {
            let child = BlkPtr::decode(c)?;
            if !child.is_hole() && child.level + 1 != bp.level {
                return Err(DmuError::Corrupt(tarn_phys::Corrupt::new("indirect", "child level mismatch")));
            }
            walk_tree(zio, &child, depth_left - 1, on_data, visit)?;
        }
    } else {
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
    walk_tree(
        zio,
        &md.blkptr,
        md.nlevels.saturating_sub(1),
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
        walk_tree(zio, &dn.blkptr, dn.nlevels.saturating_sub(1), &mut |_| Ok(()), visit)?;
    }
    for bp in &meta_blocks {
        visit(bp);
    }
    visit(root);
    Ok(())
}
