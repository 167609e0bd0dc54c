//! The znode (§12 of `docs/format.md`) against its table: a znode whose every field
//! holds a distinct marker is encoded and every documented row is checked against
//! its bytes (see `crates/phys/tests/support/format_doc.rs`).

#[path = "../../phys/tests/support/format_doc.rs"]
mod format_doc;

use format_doc::{le, table};
use tarn_zpl::znode::{ZNODE_MAGIC, ZNODE_PHYS_SIZE_BYTES};
use tarn_zpl::{Timespec, ZnodePhys};

fn ts(k: u64) -> Timespec {
    Timespec {
        sec: (0x0102_0304_0506_0700 | k) as i64,
        nsec: 0x1112_1300 | k as u32,
    }
}

fn ts_bytes(t: Timespec) -> Vec<u8> {
    [le(t.sec as u64, 8), le(t.nsec.into(), 4), vec![0; 4]].concat()
}

#[test]
fn znode() {
    let z = ZnodePhys {
        mode: 0o100_644,
        uid: 0x2122_2324,
        gid: 0x3132_3334,
        links: 0x4142_4344_4546_4748,
        size: 0x5152_5354_5556_5758,
        parent: 0x6162_6364_6566_6768,
        gen: 0x7172_7374_7576_7778,
        rdev: 0x8182_8384_8586_8788,
        flags: 0x9192_9394_9596_9798,
        atime: ts(1),
        mtime: ts(2),
        ctime: ts(3),
        crtime: ts(4),
    };
    let b = z.encode();
    let t = table("### Znode (bonus of every file", &[]);
    t.assert_tiles(ZNODE_PHYS_SIZE_BYTES);
    t.assert_tiles(b.len());
    t.check(
        &b,
        &[
            ("magic", le(ZNODE_MAGIC.into(), 4)),
            ("mode", le(z.mode.into(), 4)),
            ("uid", le(z.uid.into(), 4)),
            ("gid", le(z.gid.into(), 4)),
            ("links", le(z.links, 8)),
            ("size", le(z.size, 8)),
            ("parent", le(z.parent, 8)),
            ("gen", le(z.gen, 8)),
            ("rdev", le(z.rdev, 8)),
            ("flags", le(z.flags, 8)),
            ("atime", ts_bytes(z.atime)),
            ("mtime", ts_bytes(z.mtime)),
            ("ctime", ts_bytes(z.ctime)),
            ("crtime", ts_bytes(z.crtime)),
        ],
    );
    assert_eq!(&b[..4], b"ZNOD");
}
