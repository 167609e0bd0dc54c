//! Label I/O on a leaf: the four label copies and their uberblock rings.
//!
//! Theory: every leaf carries four 256 KiB labels (two at the front, two at the end;
//! offsets from `tarn_phys::label::label_offsets`). Each holds a config area (header +
//! JSON at `CONFIG_OFFSET_BYTES`) and a ring of 32 uberblock slots of 4 KiB at
//! `UBERBLOCK_RING_OFFSET_BYTES`, slot `txg % 32`. The byte layout is owned by
//! `tarn_phys::label` and `tarn_phys::uberblock`; this module only moves bytes.
//!
//! Writes go to all four copies and are not flushed: spa orders them (ZFS's two-phase
//! label update: even labels, flush, uberblocks, flush, odd labels) and flushes.
//! Reads return every copy separately so the importer can survive damage to any
//! three of them; decoding rejects torn or foreign copies by magic and BLAKE3.
//!
//! Called by: spa (create, import, txg sync, export, labelclear).

use crate::{Leaf, VdevError};
use tarn_phys::label::{
    decode_config, decode_config_unchecked, encode_config, label_offsets, LabelConfig, CONFIG_MAX_BYTES, CONFIG_OFFSET_BYTES, LABEL_SIZE_BYTES,
    UBERBLOCK_RING_OFFSET_BYTES, UBERBLOCK_RING_SLOTS,
};
use tarn_phys::{Corrupt, UberblockPhys, UBERBLOCK_SLOT_SIZE_BYTES};

/// Bytes of the config area read back: header (64) + the largest JSON.
const CONFIG_AREA_BYTES: usize = CONFIG_MAX_BYTES + 64;

/// Write `cfg` into the config area of all four labels of `leaf` (not flushed).
///
/// Errors: `Io` (kind `InvalidData`) if the config does not encode (too large); `Io`
/// from the first label write that fails (later labels are not attempted).
pub fn write_config(leaf: &Leaf, cfg: &LabelConfig) -> Result<(), VdevError> {
    let bytes = encode_config(cfg).map_err(|c| VdevError::Io {
        path: leaf.path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("label config: {}", c.detail)),
    })?;
    for off in label_offsets(leaf.size_bytes) {
        leaf.pwrite(off + CONFIG_OFFSET_BYTES, &bytes)?;
    }
    Ok(())
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
        write_config(&l, &cfg(7)).unwrap();
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
        write_config(&l, &cfg(3)).unwrap();
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
        write_config(&l, &cfg(1)).unwrap();
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
