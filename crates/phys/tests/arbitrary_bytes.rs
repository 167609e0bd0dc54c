//! Every phys decoder fed random and mutated bytes (the fuzz targets in `fuzz/`, run
//! by CI as ordinary tests): each returns `Ok` or `Corrupt`, never panics, and what
//! it accepts encodes back to an equal value. Mutations start from valid encodings so
//! that the checks past the magic numbers and checksums are reached too.

use proptest::prelude::*;
use tarn_phys::label::{decode_config, encode_config, LabelConfig, PoolState, VdevConfig};
use tarn_phys::*;

fn valid_bp() -> BlkPtr {
    BlkPtr {
        dva: [
            Dva {
                vdev: 0,
                asize_bytes: 8192,
                offset_bytes: 1 << 20,
            },
            Dva::default(),
            Dva::default(),
        ],
        lsize_bytes: 8192,
        psize_bytes: 8192,
        otype: ObjectType::FileData,
        level: 0,
        checksum_alg: ChecksumAlg::Fletcher4,
        compression: Compression::Off,
        birth_txg: 5,
        phys_birth_txg: 0,
        dedup: false,
        fill: 1,
        checksum: [3; 32],
    }
}

fn valid_dnode() -> DnodePhys {
    let mut d = DnodePhys::free();
    d.otype = ObjectType::FileData;
    d.indblkshift = 17;
    d.nlevels = 1;
    d.datablksz_bytes = 8192;
    d.max_blksz_bytes = 8192;
    d.blkptr = valid_bp();
    d.bonus = vec![1; 40];
    d
}

fn valid_config() -> LabelConfig {
    let leaf = |g: u64| VdevConfig {
        kind: "file".into(),
        id: g - 11,
        guid: g,
        ashift: 12,
        ..VdevConfig::default()
    };
    LabelConfig {
        version: 3,
        name: "tank".into(),
        pool_guid: 1,
        guid: 11,
        top_guid: 10,
        txg: 4,
        state: PoolState::Active,
        hostname: "h".into(),
        features_for_read: vec![],
        vdev_tree: VdevConfig {
            kind: "root".into(),
            guid: 1,
            children: vec![VdevConfig {
                kind: "raidz".into(),
                guid: 10,
                nparity: 1,
                ashift: 12,
                asize_bytes: 1 << 30,
                children: (11..14).map(leaf).collect(),
                ..VdevConfig::default()
            }],
            ..VdevConfig::default()
        },
    }
}

/// `base` with the bytes at `edits` (position modulo length, value) replaced.
fn mutate(mut base: Vec<u8>, edits: &[(usize, u8)]) -> Vec<u8> {
    let n = base.len();
    for &(i, v) in edits {
        base[i % n] = v;
    }
    base
}

fn check_all(b: &[u8]) {
    if let Ok(bp) = BlkPtr::decode(b) {
        assert_eq!(BlkPtr::decode(&bp.encode()).unwrap(), bp);
    }
    if let Ok(d) = DnodePhys::decode(b) {
        let mut out = [0u8; DNODE_SIZE_BYTES];
        d.encode_into(&mut out);
        assert_eq!(DnodePhys::decode(&out).unwrap(), d);
    }
    if let Ok(os) = ObjsetPhys::decode(b) {
        assert_eq!(ObjsetPhys::decode(&os.encode()).unwrap(), os);
    }
    if let Ok(ub) = UberblockPhys::decode(b) {
        assert_eq!(UberblockPhys::decode(&ub.encode()).unwrap(), ub);
    }
    if let Ok(cfg) = decode_config(b) {
        assert_eq!(decode_config(&encode_config(&cfg).unwrap()).unwrap(), cfg);
    }
    let _ = ZilHeader::decode(b);
    let _ = RecordHeader::decode(b);
    let _ = zil::WriteRecord::decode(b);
    let _ = LwbHeader::open(b, 1, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4200)) {
        check_all(&b);
    }

    #[test]
    fn mutated_blkptr(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        check_all(&mutate(valid_bp().encode().to_vec(), &edits));
    }

    #[test]
    fn mutated_dnode_and_objset(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut b = [0u8; DNODE_SIZE_BYTES];
        valid_dnode().encode_into(&mut b);
        check_all(&mutate(b.to_vec(), &edits));
        let os = ObjsetPhys { meta_dnode: valid_dnode(), os_type: 2, zil_header: ZilHeader::default() };
        check_all(&mutate(os.encode(), &edits));
    }

    /// Uberblocks re-sealed after the mutation, so the field checks are reached.
    #[test]
    fn mutated_uberblock_resealed(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let ub = UberblockPhys { version: 3, txg: 9, guid_sum: 7, timestamp_s: 1, rootbp: valid_bp(), spacemap_bp: BlkPtr::HOLE };
        let mut b = mutate(ub.encode().to_vec(), &edits);
        b[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
        let sum = *blake3::hash(&b[..UBERBLOCK_SLOT_SIZE_BYTES - 32]).as_bytes();
        b[UBERBLOCK_SLOT_SIZE_BYTES - 32..].copy_from_slice(&sum);
        check_all(&b);
    }

    /// Label configs: mutated JSON re-sealed (header and BLAKE3 recomputed), so the
    /// parser and the semantic checks see it.
    #[test]
    fn mutated_label_config_resealed(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let sealed = encode_config(&valid_config()).unwrap();
        let json = mutate(sealed[64..].to_vec(), &edits);
        let mut b = sealed[..64].to_vec();
        b[16..24].copy_from_slice(&(json.len() as u64).to_le_bytes());
        b[32..64].copy_from_slice(blake3::hash(&json).as_bytes());
        b.extend_from_slice(&json);
        check_all(&b);
    }
}
