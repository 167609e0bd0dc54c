//! Label I/O on a leaf: the four label copies and their uberblock rings; and the
//! fan-out of label writes over the leaves of a pool.
//!
//! Theory: every leaf carries four 256 KiB labels (two at the front, two at the end;
//! offsets from `tarn_phys::label::label_offsets`). Each holds a config area (header +
//! JSON at `CONFIG_OFFSET_BYTES`) and a ring of 32 uberblock slots of 4 KiB at
//! `UBERBLOCK_RING_OFFSET_BYTES`, slot `txg % 32`. The byte layout is owned by
//! `tarn_phys::label` and `tarn_phys::uberblock`; this module only moves bytes.
//!
//! **Config updates are two-phase** (OpenZFS `vdev_label_sync_list` called from
//! `vdev_config_sync` once for the even and once for the odd labels): a config is
//! rewritten in place, so [`sync_configs`] writes the even labels (L0, L2) of every
//! leaf, flushes every leaf, then writes the odd labels (L1, L3) and flushes again.
//! A power cut — even one that tears every write still in a disk's volatile cache —
//! can therefore damage at most one half of the copies on each leaf: before the first
//! flush the odd labels still hold the old config whole, after it the even labels
//! hold the new one. Import reads every copy and rejects torn ones by magic and
//! BLAKE3, so it always finds the old or the new config.
//!
//! **Uberblocks** go to ring slot `txg % 32` of all four labels at once
//! ([`sync_uberblock`]): the slot written never holds the newest uberblock, so a torn
//! write there loses nothing the import needs.
//!
//! The fan-out functions ([`sync_configs`], [`sync_uberblock`],
//! [`clear_uberblocks_after_all`], [`clear_and_release`]) are the one place the
//! write-flush-count idiom lives: they skip leaves that have no device, work on every
//! leaf in parallel, count a failed write or flush as a WRITE error on that leaf
//! (logged), and return a [`FanOut`] the caller judges (spa requires one uberblock
//! copy per txg, as OpenZFS's `vdev_uberblock_sync_list` does).
//!
//! Called by: spa (create, import, txg sync, export, attach/replace/remove,
//! labelclear).

use crate::tree::{bump, each_parallel};
use crate::{Leaf, Vdev, VdevError};
use tarn_phys::label::{
    decode_config, decode_config_unchecked, encode_config, label_offsets, LabelConfig, CONFIG_MAX_BYTES, CONFIG_OFFSET_BYTES, LABEL_SIZE_BYTES,
    UBERBLOCK_RING_OFFSET_BYTES, UBERBLOCK_RING_SLOTS,
};
use tarn_phys::{Corrupt, UberblockPhys, UBERBLOCK_SLOT_SIZE_BYTES};

/// Bytes of the config area read back: header (64) + the largest JSON.
const CONFIG_AREA_BYTES: usize = CONFIG_MAX_BYTES + 64;

/// Which copies of a leaf's four labels a config write touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelHalf {
    /// L0 and L2 (first at the front, first at the end).
    Even,
    /// L1 and L3.
    Odd,
    /// All four (a new or cleared leaf that holds no config to protect; tests).
    Both,
}

/// Write `cfg` into the config area of the labels of `leaf` that `half` names (not
/// flushed). Pools update configs through [`sync_configs`], which orders the halves.
///
/// Errors: `Io` (kind `InvalidData`) if the config does not encode (too large); `Io`
/// from the first label write that fails (later labels are not attempted).
pub fn write_config(leaf: &Leaf, cfg: &LabelConfig, half: LabelHalf) -> Result<(), VdevError> {
    let bytes = encode_config(cfg).map_err(|c| VdevError::Io {
        path: leaf.path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("label config: {}", c.detail)),
    })?;
    for (i, off) in label_offsets(leaf.size_bytes).into_iter().enumerate() {
        let mine = match half {
            LabelHalf::Even => i % 2 == 0,
            LabelHalf::Odd => i % 2 == 1,
            LabelHalf::Both => true,
        };
        if mine {
            leaf.pwrite(off + CONFIG_OFFSET_BYTES, &bytes)?;
        }
    }
    Ok(())
}

/// What a fan-out did: leaves whose labels were written and flushed, leaves where a
/// write or flush failed (counted as WRITE errors on them), leaves passed over (no
/// device, or not usable where usability matters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FanOut {
    /// Written and flushed.
    pub written: usize,
    /// A write or flush failed.
    pub failed: usize,
    /// Not attempted.
    pub skipped: usize,
}

fn device(v: &Vdev) -> Option<&Leaf> {
    v.device()
}

/// Run `op` on the device of every leaf in `leaves` (in parallel), each followed by a
/// flush; count failures on the leaf. `None` from `op`'s leaf filter means skipped.
fn fan_out(leaves: &[&Vdev], what: &str, op: impl Fn(&Vdev, &Leaf) -> Option<Result<(), VdevError>> + Sync) -> (FanOut, Vec<bool>) {
    let results = each_parallel(leaves, |v| device(v).and_then(|l| op(v, l).map(|r| r.and_then(|_| l.flush()))));
    let mut out = FanOut::default();
    let mut ok = Vec::with_capacity(leaves.len());
    for (v, r) in leaves.iter().zip(results) {
        ok.push(matches!(r, Some(Ok(()))));
        match r {
            None => out.skipped += 1,
            Some(Ok(())) => out.written += 1,
            Some(Err(e)) => {
                bump(&v.stats.write_errors, 1);
                tracing::warn!("{what} failed on {:?}: {e}", v.path);
                out.failed += 1;
            }
        }
    }
    (out, ok)
}

/// Write each leaf's config (pairs of leaf node and the config its labels get) in
/// two phases — even labels of every leaf, flush, odd labels, flush (module theory).
/// A leaf whose even half failed is not given the odd half, so its old config
/// survives there. Leaves without a device are skipped.
pub fn sync_configs(items: &[(&Vdev, LabelConfig)]) -> FanOut {
    let leaves: Vec<&Vdev> = items.iter().map(|(v, _)| *v).collect();
    let cfg_of = |v: &Vdev| items.iter().find(|(x, _)| std::ptr::eq(*x, v)).map(|(_, c)| c);
    let (_, even_ok) = fan_out(&leaves, "label config write (even labels)", |v, l| {
        cfg_of(v).map(|c| write_config(l, c, LabelHalf::Even))
    });
    let odd: Vec<&Vdev> = leaves.iter().zip(&even_ok).filter(|(_, ok)| **ok).map(|(v, _)| *v).collect();
    let (mut out, _) = fan_out(&odd, "label config write (odd labels)", |v, l| {
        cfg_of(v).map(|c| write_config(l, c, LabelHalf::Odd))
    });
    let devices = leaves.iter().filter(|v| device(v).is_some()).count();
    out.failed = devices - out.written;
    out.skipped = leaves.len() - devices;
    out
}

/// Write `ub` into the ring of every usable leaf in `leaves` and flush each, in
/// parallel (one device round trip per txg). Offline, faulted and missing leaves are
/// skipped: they did not get the txg's blocks.
pub fn sync_uberblock(leaves: &[&Vdev], ub: &UberblockPhys) -> FanOut {
    fan_out(leaves, "uberblock write", |v, l| v.state().is_usable().then(|| write_uberblock(l, ub))).0
}

/// Zero, on every leaf in `leaves`, the ring slots holding uberblocks newer than
/// `txg` (after a rewind import), and flush.
pub fn clear_uberblocks_after_all(leaves: &[&Vdev], txg: u64) -> FanOut {
    fan_out(leaves, "uberblock clear", |_, l| Some(clear_uberblocks_after(l, txg).map(|_| ()))).0
}

/// Zero all four labels of every leaf in `leaves`, flush, and release the device
/// lock (leaves that left the pool: detach, replace, remove).
pub fn clear_and_release(leaves: &[&Vdev]) -> FanOut {
    let out = fan_out(leaves, "label clear", |_, l| Some(clear(l))).0;
    for l in leaves.iter().filter_map(|v| device(v)) {
        l.unlock();
    }
    out
}

/// Read the config from each of the four labels (index = label number). A copy that
/// cannot be read or fails magic/checksum/JSON decoding is `Err(Corrupt)`.
/// A copy that decodes but describes an impossible vdev tree (a crafted label) is
/// `Err` too ([`tarn_phys::label::LabelConfig::validate`]).
pub fn read_configs(leaf: &Leaf) -> Vec<Result<LabelConfig, Corrupt>> {
    read_configs_with(leaf, decode_config)
}

/// [`read_configs`] without the semantic checks
/// ([`tarn_phys::label::decode_config_unchecked`]): what import uses to name the pool
/// of a label it refused. Nothing may be built from these configs.
pub fn read_configs_unchecked(leaf: &Leaf) -> Vec<Result<LabelConfig, Corrupt>> {
    read_configs_with(leaf, decode_config_unchecked)
}

fn read_configs_with(leaf: &Leaf, decode: fn(&[u8]) -> Result<LabelConfig, Corrupt>) -> Vec<Result<LabelConfig, Corrupt>> {
    let mut buf = vec![0u8; CONFIG_AREA_BYTES];
    label_offsets(leaf.size_bytes)
        .iter()
        .map(|&off| {
            leaf.pread(off + CONFIG_OFFSET_BYTES, &mut buf)
                .map_err(|e| Corrupt::new("label", format!("read: {e}")))?;
            decode(&buf)
        })
        .collect()
}

/// Write `ub` into ring slot `ub.txg % 32` of all four labels (not flushed).
/// Errors: `Io` from the first label write that fails.
pub fn write_uberblock(leaf: &Leaf, ub: &UberblockPhys) -> Result<(), VdevError> {
    let bytes = ub.encode();
    let slot_off = UBERBLOCK_RING_OFFSET_BYTES + (ub.txg % UBERBLOCK_RING_SLOTS) * UBERBLOCK_SLOT_SIZE_BYTES as u64;
    for off in label_offsets(leaf.size_bytes) {
        leaf.pwrite(off + slot_off, &bytes)?;
    }
    Ok(())
}

/// Zero every ring slot, in all four labels, that holds an uberblock newer than
/// `txg` (after a rewind import those trees may point at blocks that get reused).
/// Returns how many slots were cleared (not flushed). Errors: `Io` from a write.
pub fn clear_uberblocks_after(leaf: &Leaf, txg: u64) -> Result<usize, VdevError> {
    let mut ring = vec![0u8; UBERBLOCK_RING_SLOTS as usize * UBERBLOCK_SLOT_SIZE_BYTES];
    let zero = vec![0u8; UBERBLOCK_SLOT_SIZE_BYTES];
    let mut cleared = 0;
    for off in label_offsets(leaf.size_bytes) {
        if leaf.pread(off + UBERBLOCK_RING_OFFSET_BYTES, &mut ring).is_err() {
            continue;
        }
        for (i, slot) in ring.chunks_exact(UBERBLOCK_SLOT_SIZE_BYTES).enumerate() {
            if UberblockPhys::decode(slot).is_ok_and(|ub| ub.txg > txg) {
                leaf.pwrite(off + UBERBLOCK_RING_OFFSET_BYTES + (i * UBERBLOCK_SLOT_SIZE_BYTES) as u64, &zero)?;
                cleared += 1;
            }
        }
    }
    Ok(cleared)
}

/// Every uberblock that decodes, from all four labels' rings (duplicates allowed), in
/// label then slot order. Unreadable rings and undecodable slots are skipped.
pub fn read_uberblocks(leaf: &Leaf) -> Vec<UberblockPhys> {
    let mut ring = vec![0u8; UBERBLOCK_RING_SLOTS as usize * UBERBLOCK_SLOT_SIZE_BYTES];
    let mut out = Vec::new();
    for off in label_offsets(leaf.size_bytes) {
        if leaf.pread(off + UBERBLOCK_RING_OFFSET_BYTES, &mut ring).is_err() {
            continue;
        }
        out.extend(ring.chunks_exact(UBERBLOCK_SLOT_SIZE_BYTES).filter_map(|s| UberblockPhys::decode(s).ok()));
    }
    out
}

/// Zero all four labels (`zpool labelclear`, tests). Not flushed. Errors: `Io`.
pub fn clear(leaf: &Leaf) -> Result<(), VdevError> {
    let zeros = vec![0u8; LABEL_SIZE_BYTES as usize];
    for off in label_offsets(leaf.size_bytes) {
        leaf.pwrite(off, &zeros)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_phys::label::{PoolState, VdevConfig};
    use tarn_phys::BlkPtr;

    fn leaf(dir: &tempfile::TempDir) -> Leaf {
        let p = dir.path().join("d");
        std::fs::File::create(&p).unwrap().set_len(80 << 20).unwrap();
        Leaf::open(&p).unwrap()
    }

    fn cfg(txg: u64) -> LabelConfig {
        LabelConfig {
            version: 1,
            name: "tank".into(),
            pool_guid: 11,
            guid: 22,
            top_guid: 33,
            txg,
            state: PoolState::Active,
            hostname: "host".into(),
            features_for_read: vec![],
            vdev_tree: VdevConfig {
                kind: "root".into(),
                id: 0,
                guid: 11,
                path: None,
                nparity: 0,
                ashift: 0,
                asize_bytes: 0,
                is_log: false,
                children: vec![VdevConfig::hole(0)],
                ..VdevConfig::default()
            },
        }
    }

    fn ub(txg: u64) -> UberblockPhys {
        UberblockPhys {
            version: 1,
            txg,
            guid_sum: 5,
            timestamp_s: 99,
            rootbp: BlkPtr::HOLE,
            spacemap_bp: BlkPtr::HOLE,
        }
    }

    #[test]
    fn config_roundtrip_all_four() {
        let dir = tempfile::tempdir().unwrap();
        let l = leaf(&dir);
        assert!(read_configs(&l).iter().all(|c| c.is_err()));
        write_config(&l, &cfg(7), LabelHalf::Both).unwrap();
        let got = read_configs(&l);
        assert_eq!(got.len(), 4);
        for c in got {
            assert_eq!(c.unwrap(), cfg(7));
        }
    }

    #[test]
    fn labels_survive_front_damage() {
        let dir = tempfile::tempdir().unwrap();
        let l = leaf(&dir);
        write_config(&l, &cfg(3), LabelHalf::Both).unwrap();
        write_uberblock(&l, &ub(3)).unwrap();
        // Zero L0 and L1 (the first 512 KiB).
        l.pwrite(0, &vec![0u8; 2 * LABEL_SIZE_BYTES as usize]).unwrap();
        let got = read_configs(&l);
        assert!(got[0].is_err() && got[1].is_err());
        assert_eq!(got[2].as_ref().unwrap(), &cfg(3));
        assert_eq!(got[3].as_ref().unwrap(), &cfg(3));
        assert_eq!(read_uberblocks(&l), vec![ub(3), ub(3)]);
    }

    #[test]
    fn uberblock_ring_slots_and_clear() {
        let dir = tempfile::tempdir().unwrap();
        let l = leaf(&dir);
        write_config(&l, &cfg(1), LabelHalf::Both).unwrap();
        for txg in [1, 2, 33] {
            write_uberblock(&l, &ub(txg)).unwrap();
        }
        // txg 33 overwrote slot 1 (txg 1).
        let got = read_uberblocks(&l);
        assert_eq!(got.len(), 8);
        assert_eq!(got.iter().filter(|u| u.txg == 33).count(), 4);
        assert_eq!(got.iter().filter(|u| u.txg == 2).count(), 4);
        let off = label_offsets(l.size_bytes)[3] + UBERBLOCK_RING_OFFSET_BYTES + 2 * 4096;
        let mut b = vec![0u8; 4096];
        l.pread(off, &mut b).unwrap();
        assert_eq!(UberblockPhys::decode(&b).unwrap(), ub(2));
        clear(&l).unwrap();
        assert!(read_uberblocks(&l).is_empty());
        assert!(read_configs(&l).iter().all(|c| c.is_err()));
    }
}
