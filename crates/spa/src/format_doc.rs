//! The dataset record (`DslDatasetPhys`, §11 of `docs/format.md`) against its table.
//!
//! A unit test rather than one under `tests/`, because the record's codec is
//! crate-private. A record whose every field holds a distinct marker is encoded and
//! every documented row is checked against its bytes (the reader is shared with the
//! other crates: `crates/phys/tests/support/format_doc.rs`); the bytes also decode
//! back to the record, so the decoder's offsets agree.

#[path = "../../phys/tests/support/format_doc.rs"]
mod table;

use crate::dsl::{DslDatasetPhys, DS_FLAG_DEFER_DESTROY, DS_FLAG_INCONSISTENT, DS_FLAG_SNAPSHOT};
use table::{le, table};
use tarn_phys::{BlkPtr, ChecksumAlg, Dva, ObjectType};

#[test]
fn dataset_record() {
    let mut rootbp = BlkPtr::HOLE;
    rootbp.dva[0] = Dva {
        vdev: 1,
        asize_bytes: 4096,
        offset_bytes: 0x0001_2345_6000,
    };
    rootbp.lsize_bytes = 2048;
    rootbp.psize_bytes = 2048;
    rootbp.otype = ObjectType::Objset;
    rootbp.checksum_alg = ChecksumAlg::Blake3;
    rootbp.birth_txg = 0x77;
    rootbp.fill = 9;
    rootbp.checksum = [0x5a; 32];
    let ds = DslDatasetPhys {
        rootbp,
        guid: 0x0102_0304_0506_0708,
        creation_txg: 0x1112_1314_1516_1718,
        creation_time_s: 0x2122_2324_2526_2728,
        used_bytes: 0x3132_3334_3536_3738,
        flags: DS_FLAG_SNAPSHOT | DS_FLAG_INCONSISTENT | DS_FLAG_DEFER_DESTROY,
        props_obj: 0x4142_4344_4546_4748,
        prev_snap_obj: 0x5152_5354_5556_5758,
        prev_snap_txg: 0x6162_6364_6566_6768,
        next_snap_obj: 0x7172_7374_7576_7778,
        deadlist_obj: 0x8182_8384_8586_8788,
        origin_obj: 0x9192_9394_9596_9798,
        num_clones: 0xa1a2_a3a4_a5a6_a7a8,
        userrefs: 0xb1b2_b3b4_b5b6_b7b8,
        userrefs_obj: 0xc1c2_c3c4_c5c6_c7c8,
    };
    let b = ds.encode();
    let t = table("### Dataset record (`DslDatasetPhys`", &[]);
    t.assert_tiles(DslDatasetPhys::SIZE_BYTES);
    t.assert_tiles(b.len());
    t.check(
        &b,
        &[
            ("rootbp", ds.rootbp.encode().to_vec()),
            ("guid", le(ds.guid, 8)),
            ("creation txg", le(ds.creation_txg, 8)),
            ("creation time", le(ds.creation_time_s, 8)),
            ("referenced bytes", le(ds.used_bytes, 8)),
            ("flags", le(ds.flags, 8)),
            ("props_obj", le(ds.props_obj, 8)),
            ("prev_snap_obj", le(ds.prev_snap_obj, 8)),
            ("prev_snap_txg", le(ds.prev_snap_txg, 8)),
            ("next_snap_obj", le(ds.next_snap_obj, 8)),
            ("deadlist_obj", le(ds.deadlist_obj, 8)),
            ("origin_obj", le(ds.origin_obj, 8)),
            ("num_clones", le(ds.num_clones, 8)),
            ("userrefs", le(ds.userrefs, 8)),
            ("userrefs_obj", le(ds.userrefs_obj, 8)),
        ],
    );
    assert_eq!(DslDatasetPhys::decode(&b).unwrap(), ds);
}
