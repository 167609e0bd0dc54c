//! The ZAP layouts (§10 of `docs/format.md`: header block, leaf block, entry) against
//! their tables.
//!
//! A unit test inside `zap`, because the codec is private. The header is checked
//! twice: a `Header` whose every field holds a distinct marker (so a row that names
//! the wrong field fails), and block 0 of real ZAPs written through `create` and `add`
//! into a `MemStore` (a fresh one, one whose pointer table is still embedded, one whose
//! table has moved out), whose random salt is read back and whose pointer table is
//! rebuilt from the leaves. The leaf and entry tables are checked against a leaf built
//! with the crate's own `Leaf` methods. Symbolic cells are evaluated with the block
//! size `B` in use. The table reader is shared: `crates/phys/tests/support/format_doc.rs`.

#[path = "../../../phys/tests/support/format_doc.rs"]
mod table;

use super::*;
use crate::mem::MemStore;
use table::{le, table};

const HEADER: &str = "### Header (block 0)";
const LEAF: &str = "### Leaf block";
const ENTRY: &str = "### Entry (20 + name_len";

/// Block 0 of the ZAP `z`, `B` bytes.
fn block0(os: &MemStore, z: u64, b: usize) -> Vec<u8> {
    let mut buf = vec![0u8; b];
    os.read(z, 0, &mut buf).unwrap();
    buf
}

/// The expected `B/2` bytes of the header row "embedded pointer table": while the
/// table fits, slot `i` names the leaf whose prefix covers `i` (found by reading every
/// leaf, not the table); once it has moved out, zeros.
fn expected_table(os: &MemStore, z: u64, hdr: &Header) -> Vec<u8> {
    let b = hdr.block_bytes as usize;
    let mut out = vec![0u8; b / 2];
    if hdr.table_blkid != 0 {
        return out;
    }
    let g = hdr.depth;
    for blkid in 1..hdr.next_blkid {
        let mut buf = vec![0u8; b];
        os.read(z, blkid * hdr.b(), &mut buf).unwrap();
        let leaf = Leaf { blkid, buf };
        leaf.check(z).unwrap();
        let (p, d) = (leaf.prefix(), leaf.depth());
        for slot in 0..1u64 << g {
            if slot >> (g - d) == p {
                out[slot as usize * 8..][..8].copy_from_slice(&blkid.to_le_bytes());
            }
        }
    }
    out
}

/// Every row of the header table against block 0 of the real ZAP `z` holding
/// `count` entries.
fn check_real_header(os: &MemStore, z: u64, count: u64) -> Header {
    let hdr = Zap::open(os, z).unwrap().hdr;
    let b = hdr.block_bytes as usize;
    let bytes = block0(os, z, b);
    let t = table(HEADER, &[("B", b)]);
    t.assert_tiles(b);
    // The salt is random: take it from the header as the ZAP reads it, and confirm it
    // is the one names are hashed with.
    let salt = u64_at(&bytes, H_SALT);
    assert_eq!(salt, hdr.salt);
    assert_ne!(salt, 0, "the salt is never 0");
    t.check(
        &bytes,
        &[
            ("magic", b"TARNZAPH".to_vec()),
            ("block size", le(b as u64, 4)),
            ("global depth", le(u64::from(hdr.depth), 4)),
            ("entry count", le(count, 8)),
            ("salt", le(salt, 8)),
            ("next_blkid", le(hdr.next_blkid, 8)),
            ("table_blkid", le(hdr.table_blkid, 8)),
            ("table_nblks", le(hdr.table_nblks, 8)),
            ("leaf_count", le(hdr.leaf_count, 8)),
            ("embedded pointer table", expected_table(os, z, &hdr)),
        ],
    );
    hdr
}

#[test]
fn header_fields_hold_their_markers() {
    // A valid header whose table lives outside block 0 (8·2^13 > B/2), every field a
    // distinct value.
    let b = 512usize;
    let hdr = Header {
        block_bytes: b as u32,
        depth: 13,
        count: 0x1112_1314_1516_1718,
        salt: 0x2122_2324_2526_2728,
        next_blkid: 0x4000,
        table_blkid: 0x31,
        table_nblks: (8u64 << 13) / b as u64,
        leaf_count: 0x3000,
    };
    let mut block = vec![0u8; b];
    block[..HDR_BYTES].copy_from_slice(&hdr.encode());
    let t = table(HEADER, &[("B", b)]);
    t.assert_tiles(b);
    t.check(
        &block,
        &[
            ("magic", b"TARNZAPH".to_vec()),
            ("block size", le(u64::from(hdr.block_bytes), 4)),
            ("global depth", le(u64::from(hdr.depth), 4)),
            ("entry count", le(hdr.count, 8)),
            ("salt", le(hdr.salt, 8)),
            ("next_blkid", le(hdr.next_blkid, 8)),
            ("table_blkid", le(hdr.table_blkid, 8)),
            ("table_nblks", le(hdr.table_nblks, 8)),
            ("leaf_count", le(hdr.leaf_count, 8)),
            ("embedded pointer table", vec![0; b / 2]),
        ],
    );
    let first: [u8; HDR_BYTES] = block[..HDR_BYTES].try_into().unwrap();
    assert_eq!(Header::decode(&first, 1).unwrap(), hdr);
    // The reserved row is "checked": a non-zero byte there is refused.
    let r = t.row("reserved");
    let mut bad = first;
    bad[r.off + r.size.unwrap() - 1] = 1;
    assert!(Header::decode(&bad, 1).is_err());
}

#[test]
fn real_header_blocks() {
    let os = MemStore::new();
    let tx = os.hold_tx().unwrap();
    // Fresh, at the block size every ZAP gets: G = 0, one slot naming block 1,
    // next_blkid = 2, leaf_count = 1 (the prose under the table).
    let z = create(&os, &tx, ObjectType::DirZap).unwrap();
    let hdr = check_real_header(&os, z, 0);
    assert_eq!(hdr.block_bytes, ZAP_BLOCK_SIZE_BYTES);
    assert_eq!((hdr.depth, hdr.next_blkid, hdr.leaf_count, hdr.table_blkid), (0, 2, 1, 0));
    // Small blocks: split until G ≥ 2 with the table still embedded, then until it
    // has moved out of block 0.
    let z = create_with_block_size(&os, &tx, ObjectType::DirZap, 512).unwrap();
    let mut n = 0u64;
    let mut add_until = |z: u64, done: &dyn Fn(&Header) -> bool| loop {
        let hdr = Zap::open(&os, z).unwrap().hdr;
        if done(&hdr) {
            return hdr;
        }
        add(&os, &tx, z, format!("entry-{n}").as_bytes(), n).unwrap();
        n += 1;
    };
    let hdr = add_until(z, &|h| h.depth >= 2);
    assert_eq!(hdr.table_blkid, 0, "8·2^G ≤ B/2: still embedded");
    check_real_header(&os, z, hdr.count);
    let hdr = add_until(z, &|h| h.table_blkid != 0);
    assert!(hdr.table_nblks >= 1);
    check_real_header(&os, z, hdr.count);
    assert_eq!(hdr.count, n);
}

/// The bytes of one entry as the entry table describes them.
fn entry_bytes(hash: u64, value: u64, cd: u16, name: &[u8]) -> Vec<u8> {
    let mut v = le(hash, 8);
    v.extend(le(value, 8));
    v.extend(le(u64::from(cd), 2));
    v.extend(le(name.len() as u64, 2));
    v.extend_from_slice(name);
    v
}

#[test]
fn leaf_and_entry() {
    let b = 512usize;
    let (prefix, depth) = (0b101u64, 3u32);
    let mut leaf = Leaf::empty(7, b as u32, prefix, depth);
    let hash = |low: u64| prefix << (HASH_BITS - depth) | low;
    // Inserted out of key order; the leaf keeps them sorted by `hash << 15 | cd`.
    let ents: [(u64, u16, &[u8], u64); 3] = [
        (hash(0x000b_0c0d_0e0f), 2, b"second", 0x5152_5354_5556_5758),
        (hash(0x0102_0304), 0x1234, b"first-name", 0x4142_4344_4546_4748),
        (hash(0x000b_0c0d_0e0f), 0, b"ab", 0x6162_6364_6566_6768),
    ];
    for (h, cd, name, value) in ents {
        assert!(leaf.insert_cd(h, cd, name, value).unwrap());
    }
    leaf.set_next(0x0a0b_0c0d);
    leaf.check(1).unwrap();
    let mut sorted = ents;
    sorted.sort_by_key(|&(h, cd, _, _)| h << CD_BITS | u64::from(cd));
    let packed: Vec<u8> = sorted.iter().flat_map(|&(h, cd, name, v)| entry_bytes(h, v, cd, name)).collect();
    let used = leaf.used();
    assert_eq!(used, packed.len());

    let t = table(LEAF, &[("B", b), ("used", used)]);
    t.assert_tiles(LEAF_HDR_BYTES + used);
    t.check(
        &leaf.buf,
        &[
            ("magic", b"TARNZAPL".to_vec()),
            ("prefix", le(prefix, 8)),
            ("local depth", le(u64::from(depth), 4)),
            ("nentries", le(ents.len() as u64, 4)),
            ("used", le(used as u64, 4)),
            ("next", le(0x0a0b_0c0d, 4)),
            ("entries", packed),
        ],
    );
    assert!(leaf.buf[LEAF_HDR_BYTES + used..].iter().all(|&x| x == 0), "rest of the leaf block is zero");

    // Each entry against the entry table, at its place in the leaf.
    let mut off = LEAF_HDR_BYTES;
    for &(h, cd, name, value) in &sorted {
        let t = table(ENTRY, &[("name_len", name.len())]);
        let size = ENTRY_HDR_BYTES + name.len();
        t.assert_tiles(size);
        t.check(
            &leaf.buf[off..off + size],
            &[
                ("hash", le(h, 8)),
                ("value", le(value, 8)),
                ("cd", le(u64::from(cd), 2)),
                ("name_len", le(name.len() as u64, 2)),
                ("name bytes", name.to_vec()),
            ],
        );
        let e = Ent::parse(&leaf.buf, off);
        assert_eq!((e.hash, e.value, e.cd, e.name(&leaf.buf)), (h, value, cd, name));
        off += size;
    }
}
