//! The phys layouts against their tables in `docs/format.md`: config header (§1),
//! uberblock (§3), block pointer and DVA (§4), dnode (§6), `ObjsetPhys` (§7), and the
//! ZIL header, log-block pointer, log block and record header (§13).
//!
//! Each test encodes a value whose fields hold distinct markers and checks every
//! documented row against the bytes (see `support/format_doc.rs`), so an offset moved
//! in the code or in the document fails here.

#[path = "support/format_doc.rs"]
mod format_doc;

use format_doc::{le, table};
use tarn_phys::label::{encode_config, LabelConfig, PoolState, VdevConfig};
use tarn_phys::zil::{LWB_HEADER_SIZE_BYTES, LWB_PTR_SIZE_BYTES, RECORD_HEADER_SIZE_BYTES, ZIL_HEADER_SIZE_BYTES};
use tarn_phys::*;

fn dva(k: u64) -> Dva {
    Dva {
        vdev: 0x0a0b_0c00 | k as u32,
        asize_bytes: u64::from(0x1a1b_1c00 | k as u32) << 9,
        offset_bytes: 0x2a2b_2c2d_2e2f_3000 | k,
    }
}

fn dva_bytes(d: &Dva) -> Vec<u8> {
    [le(d.vdev.into(), 4), le(d.asize_bytes >> 9, 4), le(d.offset_bytes, 8)].concat()
}

/// A pointer whose every field holds a distinct marker (`k` varies them).
fn marker_bp(k: u64) -> BlkPtr {
    let mut checksum = [0u8; 32];
    for (i, c) in checksum.iter_mut().enumerate() {
        *c = 0xc0 + i as u8 + k as u8;
    }
    BlkPtr {
        dva: [dva(1 + 4 * k), dva(2 + 4 * k), dva(3 + 4 * k)],
        lsize_bytes: 0x4142_4300 | k as u32,
        psize_bytes: 0x5152_5300 | k as u32,
        otype: ObjectType::Deadlist,
        level: 0x37,
        checksum_alg: ChecksumAlg::Sha512,
        compression: Compression::Gzip7,
        birth_txg: 0x6162_6364_6566_6700 | k,
        phys_birth_txg: 0x7172_7374_7576_7700 | k,
        dedup: true,
        fill: 0x8182_8384_8586_8700 | k,
        checksum,
    }
}

#[test]
fn block_pointer_and_dva() {
    let bp = marker_bp(0);
    let b = bp.encode();
    let t = table("### Block pointer (128 bytes)", &[]);
    t.assert_tiles(BLKPTR_SIZE_BYTES);
    t.assert_tiles(b.len());
    t.check(
        &b,
        &[
            ("dva[0]", dva_bytes(&bp.dva[0])),
            ("dva[1]", dva_bytes(&bp.dva[1])),
            ("dva[2]", dva_bytes(&bp.dva[2])),
            ("lsize", le(bp.lsize_bytes.into(), 4)),
            ("psize", le(bp.psize_bytes.into(), 4)),
            ("object type", vec![ObjectType::Deadlist as u8]),
            ("level", vec![0x37]),
            ("checksum algorithm", vec![ChecksumAlg::Sha512 as u8]),
            ("compression", vec![Compression::Gzip7 as u8]),
            ("flags", le(1, 4)),
            ("birth_txg", le(bp.birth_txg, 8)),
            ("fill", le(bp.fill, 8)),
            ("checksum", bp.checksum.to_vec()),
            ("phys_birth_txg", le(bp.phys_birth_txg, 8)),
        ],
    );

    let t = table("### DVA (16 bytes)", &[]);
    t.assert_tiles(DVA_SIZE_BYTES);
    // Every DVA slot has the same layout; check the second.
    let d = bp.dva[1];
    let slot = &b[DVA_SIZE_BYTES..2 * DVA_SIZE_BYTES];
    t.check(
        slot,
        &[
            ("vdev", le(d.vdev.into(), 4)),
            ("asize", le(d.asize_bytes >> 9, 4)),
            ("offset", le(d.offset_bytes, 8)),
        ],
    );
}

#[test]
fn uberblock() {
    let ub = UberblockPhys {
        version: 0x0102_0304_0506_0708,
        txg: 0x1112_1314_1516_1718,
        guid_sum: 0x2122_2324_2526_2728,
        timestamp_s: 0x3132_3334_3536_3738,
        rootbp: marker_bp(1),
        spacemap_bp: marker_bp(2),
    };
    let b = ub.encode();
    let t = table("## 3. Uberblock", &[]);
    t.assert_tiles(UBERBLOCK_SLOT_SIZE_BYTES);
    t.assert_tiles(b.len());
    let sum_off = t.row("checksum").off;
    t.check(
        &b,
        &[
            ("magic", le(UBERBLOCK_MAGIC, 8)),
            ("version", le(ub.version, 8)),
            ("txg", le(ub.txg, 8)),
            ("guid_sum", le(ub.guid_sum, 8)),
            ("timestamp", le(ub.timestamp_s, 8)),
            ("rootbp", ub.rootbp.encode().to_vec()),
            ("spacemap_bp", ub.spacemap_bp.encode().to_vec()),
            ("checksum", blake3::hash(&b[..sum_off]).as_bytes().to_vec()),
        ],
    );
    assert_eq!(&b[..8], b"tarnuber");
}

fn marker_dnode(bonus_len: usize) -> DnodePhys {
    DnodePhys {
        otype: ObjectType::Symlink,
        indblkshift: 0x0b,
        nlevels: 0x07,
        bonus_type: 0x2a,
        datablksz_bytes: 0x0123 << 9,
        max_blksz_bytes: 0x0456 << 9,
        maxblkid: 0x4142_4344_4546_4748,
        used_bytes: 0x5152_5354_5556_5758,
        blkptr: marker_bp(3),
        bonus: (0..bonus_len).map(|i| 0x80 | i as u8).collect(),
    }
}

fn dnode_bytes(d: &DnodePhys) -> Vec<u8> {
    let mut b = vec![0u8; DNODE_SIZE_BYTES];
    d.encode_into(&mut b);
    b
}

fn check_dnode(b: &[u8], d: &DnodePhys) {
    let t = table("## 6. Dnode", &[]);
    t.assert_tiles(DNODE_SIZE_BYTES);
    let mut bonus = d.bonus.clone();
    bonus.resize(DNODE_BONUS_SIZE_BYTES, 0);
    t.check(
        b,
        &[
            ("object type", vec![d.otype as u8]),
            ("indblkshift", vec![d.indblkshift]),
            ("nlevels", vec![d.nlevels]),
            ("nblkptr", vec![1]),
            ("bonus type", vec![d.bonus_type]),
            ("data block size", le(u64::from(d.datablksz_bytes >> 9), 2)),
            ("bonus length", le(d.bonus.len() as u64, 2)),
            ("max data block size", le(u64::from(d.max_blksz_bytes >> 9), 2)),
            ("maxblkid", le(d.maxblkid, 8)),
            ("used", le(d.used_bytes, 8)),
            ("block pointer", d.blkptr.encode().to_vec()),
            ("bonus buffer", bonus),
        ],
    );
}

#[test]
fn dnode() {
    let d = marker_dnode(0x0137);
    let b = dnode_bytes(&d);
    check_dnode(&b, &d);
}

fn marker_lwb_ptr(k: u64) -> LwbPtr {
    LwbPtr {
        vdev: 0x0102_0300 | k as u32,
        size_bytes: 0x1112_1300 | k as u32,
        offset_bytes: 0x2122_2324_2526_2700 | k,
        asize_bytes: 0x3132_3334_3536_3700 | k,
        seq: 0x4142_4344_4546_4700 | k,
    }
}

fn check_lwb_ptr(b: &[u8], p: &LwbPtr) {
    let t = table("### Log-block pointer (32 bytes)", &[]);
    t.assert_tiles(LWB_PTR_SIZE_BYTES);
    t.check(
        b,
        &[
            ("vdev", le(p.vdev.into(), 4)),
            ("size", le(p.size_bytes.into(), 4)),
            ("offset", le(p.offset_bytes, 8)),
            ("asize", le(p.asize_bytes, 8)),
            ("seq", le(p.seq, 8)),
        ],
    );
}

fn marker_zil_header() -> ZilHeader {
    ZilHeader {
        claim_txg: 0x5152_5354_5556_5758,
        replay_seq: 0x6162_6364_6566_6768,
        chain_guid: 0x7172_7374_7576_7778,
        head: marker_lwb_ptr(1),
    }
}

#[test]
fn objset_and_zil_header() {
    let os = ObjsetPhys {
        meta_dnode: marker_dnode(0x11),
        os_type: 0x0102_0304_0506_0708,
        zil_header: marker_zil_header(),
    };
    let b = os.encode();
    let t = table("## 7. Object set root (`ObjsetPhys`)", &[]);
    t.assert_tiles(OBJSET_PHYS_SIZE_BYTES);
    t.assert_tiles(b.len());
    t.check(
        &b,
        &[
            ("meta-dnode", dnode_bytes(&os.meta_dnode)),
            ("object-set type", le(os.os_type, 8)),
            ("ZIL header", os.zil_header.encode().to_vec()),
        ],
    );
    let d = t.row("meta-dnode");
    check_dnode(&b[d.off..d.off + DNODE_SIZE_BYTES], &os.meta_dnode);

    let h = os.zil_header;
    let zb = h.encode();
    let t = table("### ZIL header (192 bytes", &[]);
    t.assert_tiles(ZIL_HEADER_SIZE_BYTES);
    t.assert_tiles(zb.len());
    let head_off = t.row("head").off;
    t.check(
        &zb,
        &[
            ("claim_txg", le(h.claim_txg, 8)),
            ("replay_seq", le(h.replay_seq, 8)),
            ("chain_guid", le(h.chain_guid, 8)),
            ("head", zb[head_off..head_off + LWB_PTR_SIZE_BYTES].to_vec()),
        ],
    );
    check_lwb_ptr(&zb[head_off..head_off + LWB_PTR_SIZE_BYTES], &h.head);
    // The heading says "object-set root offset 1024": so must §7's table.
    assert_eq!(table("## 7. Object set root (`ObjsetPhys`)", &[]).row("ZIL header").off, 1024);
}

#[test]
fn log_block_and_record_header() {
    let rec = RecordHeader {
        rtype: 0x0102,
        rlen_bytes: 0x1112_1314,
        seq: 0x2122_2324_2526_2728,
        txg: 0x3132_3334_3536_3738,
    };
    let mut rb = [0u8; RECORD_HEADER_SIZE_BYTES];
    rec.encode(&mut rb);
    let t = table("### Record header (32 bytes", &[]);
    t.assert_tiles(RECORD_HEADER_SIZE_BYTES);
    t.check(
        &rb,
        &[
            ("type", le(rec.rtype.into(), 2)),
            ("rlen", le(rec.rlen_bytes.into(), 4)),
            ("seq", le(rec.seq, 8)),
            ("txg", le(rec.txg, 8)),
        ],
    );

    let size = 4096;
    let used = LWB_HEADER_SIZE_BYTES + RECORD_HEADER_SIZE_BYTES;
    let mut block = vec![0u8; size];
    block[LWB_HEADER_SIZE_BYTES..used].copy_from_slice(&rb);
    let h = LwbHeader {
        chain_guid: 0x4142_4344_4546_4748,
        seq: 0x5152_5354_5556_5758,
        used_bytes: used as u32,
        nrecords: 0x6162_6364,
        next: marker_lwb_ptr(2),
    };
    h.seal(&mut block);
    let t = table("### Log block (`size` bytes)", &[]);
    t.assert_tiles(size);
    let sum = t.row("checksum");
    let next = t.row("next");
    let records = t.row("records").off;
    assert_eq!(records, LWB_HEADER_SIZE_BYTES);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&block[..sum.off]);
    hasher.update(&block[records..used]);
    let mut rest = rb.to_vec();
    rest.resize(size - records, 0);
    t.check(
        &block,
        &[
            ("magic", b"TARNLWB1".to_vec()),
            ("chain_guid", le(h.chain_guid, 8)),
            ("seq", le(h.seq, 8)),
            ("used", le(h.used_bytes.into(), 4)),
            ("nrecords", le(h.nrecords.into(), 4)),
            ("next", block[next.off..next.off + LWB_PTR_SIZE_BYTES].to_vec()),
            ("checksum", hasher.finalize().as_bytes().to_vec()),
            ("records", rest),
        ],
    );
    check_lwb_ptr(&block[next.off..next.off + LWB_PTR_SIZE_BYTES], &h.next);
}

#[test]
fn config_header() {
    let cfg = LabelConfig {
        version: 0x0102_0304_0506_0708,
        name: "tank".into(),
        pool_guid: 1,
        guid: 2,
        top_guid: 2,
        txg: 4,
        state: PoolState::Active,
        hostname: "h".into(),
        features_for_read: vec![],
        vdev_tree: VdevConfig {
            kind: "root".into(),
            ..VdevConfig::default()
        },
    };
    let b = encode_config(&cfg).unwrap();
    let t = table("### Config header (64 bytes", &[]);
    t.assert_tiles(64);
    let json = &b[64..];
    t.check(
        &b[..64],
        &[
            ("magic", b"TARNLABL".to_vec()),
            ("version", le(cfg.version, 8)),
            ("json_len", le(json.len() as u64, 8)),
            ("BLAKE3-256", blake3::hash(json).as_bytes().to_vec()),
        ],
    );
}
