//! The space-map blocks against their tables in `docs/format.md` §9: the metaslab
//! root and its vdev entry, the directory page, the condensed map chunk, and the
//! space-map log block and its record.
//!
//! Each block is encoded from a value whose every field holds a distinct marker, with
//! one entry of each repeated kind (so `i`, `k`, `j`, `r` are bound to 0 and the
//! counts to 1), and every documented row is checked against the bytes (see
//! `crates/phys/tests/support/format_doc.rs`); each block also decodes back to the
//! value it came from. These codecs write their fields in order through a cursor, so
//! they have no offset constants: the table is the only place offsets are stated.

#[path = "../../phys/tests/support/format_doc.rs"]
mod format_doc;

use format_doc::{le, table};
use tarn_metaslab::ondisk::*;
use tarn_metaslab::{AllocClass, LogRecord, RecordKind};
use tarn_phys::{BlkPtr, ChecksumAlg, Dva, ObjectType};

/// A valid pointer with markers in its variable fields (`k` varies them).
fn bp(k: u64) -> BlkPtr {
    let mut p = BlkPtr::HOLE;
    p.dva[0] = Dva {
        vdev: k as u32,
        asize_bytes: 4096,
        offset_bytes: (0x1234 + k) << 12,
    };
    p.lsize_bytes = 4096;
    p.psize_bytes = 4096;
    p.otype = ObjectType::MetaslabMap;
    p.checksum_alg = ChecksumAlg::Blake3;
    p.birth_txg = 0x100 + k;
    p.fill = 1;
    p.checksum = [0x40 + k as u8; 32];
    p
}

fn bpb(p: &BlkPtr) -> Vec<u8> {
    p.encode().to_vec()
}

#[test]
fn root_and_vdev_entry() {
    let pages: [BlkPtr; 16] = std::array::from_fn(|i| bp(10 + i as u64));
    let root = RootPhys {
        txg: 0x1112_1314_1516_1718,
        log_tail_txg: 0x2122_2324_2526_2728,
        log_head: bp(1),
        vdevs: vec![RootVdevPhys {
            class: AllocClass::Log,
            asize_bytes: 0x3132_3334_3536_3738,
            ms_shift: 0x27,
            ms_count: 0x4142_4344_4546_4748,
            pages,
        }],
    };
    let b = root.encode();
    assert_eq!(b.len(), RootPhys::encoded_bytes(1));
    let t = table("### Root (`MetaslabRoot`", &[("i", 0)]);
    t.assert_tiles(b.len());
    let e = t.row("vdev entry");
    assert_eq!(e.off, ROOT_HEADER_BYTES);
    let entry = b[e.off..e.off + ROOT_VDEV_BYTES].to_vec();
    t.check(
        &b,
        &[
            ("magic", b"TARNMSRT".to_vec()),
            ("version", le(1, 8)),
            ("txg", le(root.txg, 8)),
            ("vdev_count", le(1, 8)),
            ("log_tail_txg", le(root.log_tail_txg, 8)),
            ("log_head", bpb(&root.log_head)),
            ("vdev entry", entry.clone()),
        ],
    );
    let v = &root.vdevs[0];
    let t = table("Vdev entry:", &[]);
    t.assert_tiles(ROOT_VDEV_BYTES);
    t.check(
        &entry,
        &[
            ("class", le(1, 8)),
            ("asize", le(v.asize_bytes, 8)),
            ("ms_shift", le(v.ms_shift.into(), 8)),
            ("ms_count", le(v.ms_count, 8)),
            ("directory page pointers", v.pages.iter().flat_map(|p| p.encode()).collect()),
        ],
    );
    assert_eq!(RootPhys::decode(&b).unwrap(), root);
}

#[test]
fn directory_page() {
    let page = PagePhys {
        vdev: 0x0102_0304_0506_0708,
        page: 0x1112_1314_1516_1718,
        first_ms: 0x2122_2324_2526_2728,
        entries: vec![(0x3132_3334_3536_3738, bp(2))],
    };
    let b = page.encode();
    let t = table("### Directory page (`MetaslabPage`", &[("k", 0)]);
    t.assert_tiles(PagePhys::encoded_bytes(1));
    t.assert_tiles(b.len());
    t.check(
        &b,
        &[
            ("magic", b"TARNMSPG".to_vec()),
            ("version", le(1, 8)),
            ("vdev id", le(page.vdev, 8)),
            ("page index", le(page.page, 8)),
            ("first_ms", le(page.first_ms, 8)),
            ("count", le(1, 8)),
            ("entry", [le(page.entries[0].0, 8), bpb(&page.entries[0].1)].concat()),
        ],
    );
    assert_eq!(PagePhys::decode(&b).unwrap(), page);
}

#[test]
fn map_chunk() {
    let map = MapPhys {
        vdev: 0x0102_0304_0506_0708,
        ms_index: 0x1112_1314_1516_1718,
        start_bytes: 0x2122_2324_2526_2728,
        size_bytes: 0x3132_3334_3536_3738,
        flush_txg: 0x4142_4344_4546_4748,
        chunk: 0x5152_5354_5556_5758,
        next: bp(3),
        free: vec![(0x6162_6364_6566_6768, 0x7172_7374_7576_7778)],
        deferred: vec![(0x8182_8384_8586_8788, 0x9192_9394_9596_9798, 0xa1a2_a3a4_a5a6_a7a8)],
    };
    let b = map.encode();
    let t = table("### Condensed metaslab map (`MetaslabMap`", &[("i", 0), ("j", 0), ("F", 1)]);
    t.assert_tiles(MapPhys::encoded_bytes(1, 1));
    t.assert_tiles(b.len());
    assert_eq!(t.row("next").off + 128, MAP_HEADER_BYTES);
    let (fs, fl) = map.free[0];
    let (dt, ds, dl) = map.deferred[0];
    t.check(
        &b,
        &[
            ("magic", b"TARNMSMP".to_vec()),
            ("version", le(1, 8)),
            ("vdev id", le(map.vdev, 8)),
            ("metaslab index", le(map.ms_index, 8)),
            ("start", le(map.start_bytes, 8)),
            ("size of the metaslab", le(map.size_bytes, 8)),
            ("flush_txg", le(map.flush_txg, 8)),
            ("chunk index", le(map.chunk, 8)),
            ("free_count", le(1, 8)),
            ("deferred_count", le(1, 8)),
            ("next", bpb(&map.next)),
            ("free range", [le(fs, 8), le(fl, 8)].concat()),
            ("deferred free", [le(dt, 8), le(ds, 8), le(dl, 8)].concat()),
        ],
    );
    assert_eq!(MapPhys::decode(&b).unwrap(), map);
}

#[test]
fn log_block_and_record() {
    let rec = LogRecord {
        vdev: 0x0102_0304,
        kind: RecordKind::Release,
        start_bytes: 0x1112_1314_1516_1718,
        len_bytes: 0x2122_2324_2526_2728,
        txg: 0x3132_3334_3536_3738,
    };
    let log = LogBlockPhys {
        txg: 0x4142_4344_4546_4748,
        prev: bp(4),
        records: vec![rec],
    };
    let b = log.encode();
    let t = table("### Space-map log block (`SpaceMapLog`", &[("r", 0)]);
    t.assert_tiles(LogBlockPhys::encoded_bytes(1));
    t.assert_tiles(b.len());
    let r = t.row("record");
    assert_eq!(r.off, LOG_HEADER_BYTES);
    let rb = b[r.off..r.off + LOG_RECORD_BYTES].to_vec();
    t.check(
        &b,
        &[
            ("magic", b"TARNSMLG".to_vec()),
            ("version", le(1, 8)),
            ("txg", le(log.txg, 8)),
            ("record_count", le(1, 8)),
            ("prev", bpb(&log.prev)),
            ("record", rb.clone()),
        ],
    );
    let t = table("Record:", &[]);
    t.assert_tiles(LOG_RECORD_BYTES);
    t.check(
        &rb,
        &[
            ("start", le(rec.start_bytes, 8)),
            ("length", le(rec.len_bytes, 8)),
            ("vdev id", le(rec.vdev.into(), 4)),
            ("kind", vec![4]),
            ("txg", le(rec.txg, 8)),
        ],
    );
    assert_eq!(LogBlockPhys::decode(&b).unwrap(), log);
}
