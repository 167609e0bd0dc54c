//! The fuzz targets' bodies, one function per target of `fuzz/` (see the crate's
//! theory statement). Each takes the raw input; [`run`] dispatches by target name.

use tarn_dmu::mem::MemStore;
use tarn_dmu::{zap, ObjectStore, ObjectType};
use tarn_metaslab::ondisk::{LogBlockPhys, MapPhys, PagePhys, RootPhys};
use tarn_phys::label::{decode_config, decode_config_unchecked, LABEL_MAGIC};
use tarn_phys::{
    BlkPtr, Compression, DnodePhys, LwbHeader, ObjsetPhys, RecordHeader, UberblockPhys, ZilHeader, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES, UBERBLOCK_MAGIC,
    UBERBLOCK_SLOT_SIZE_BYTES,
};
use tarn_send::{read_package, Record, ResumeToken, StreamReader};
use tarn_zpl::ZnodePhys;

/// Names of the decoder targets (the image target is driven by [`crate::run_case`]).
pub const TARGETS: [&str; 12] = [
    "blkptr",
    "decompress",
    "dnode",
    "l2arc",
    "label_config",
    "pool_records",
    "send_record",
    "space_map",
    "uberblock",
    "zap",
    "zil",
    "znode",
];

/// Run target `name` on `data`. Returns false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "blkptr" => blkptr(data),
        "decompress" => decompress(data),
        "dnode" => dnode(data),
        "l2arc" => l2arc(data),
        "label_config" => label_config(data),
        "pool_records" => tarn_spa::fuzzing::pool_records(data),
        "send_record" => send_record(data),
        "space_map" => space_map(data),
        "uberblock" => uberblock(data),
        "zap" => zap_object(data),
        "zil" => zil(data),
        "znode" => znode(data),
        _ => return false,
    }
    true
}

/// L2ARC device header and log block, as read and sealed with their checksum
/// (`tarn_zio::l2arc::fuzz_decode`).
pub fn l2arc(data: &[u8]) {
    tarn_zio::l2arc::fuzz_decode(data);
}

/// `BlkPtr::decode`; an accepted pointer re-encodes to the same bytes.
pub fn blkptr(data: &[u8]) {
    if let Ok(bp) = BlkPtr::decode(data) {
        assert_eq!(&bp.encode()[..], &data[..BLKPTR_SIZE_BYTES]);
        let _ = bp.asize_total_bytes();
    }
}

/// Every block decompressor on untrusted payloads (byte 0 picks the algorithm, bytes
/// 1..3 the logical size in 512-byte units up to 1 MiB), and a compress/decompress
/// round trip of the payload itself.
pub fn decompress(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let Ok(alg) = Compression::from_u8(data[0] % Compression::ALL.len() as u8) else {
        return;
    };
    let lsize = (u16::from_le_bytes([data[1], data[2]]) as usize % 2048 + 1) * 512;
    let payload = &data[3..];
    if let Ok(out) = alg.decompress(payload, lsize) {
        assert_eq!(out.len(), lsize);
    }
    if let Some(c) = alg.compress(payload) {
        assert_eq!(alg.decompress(&c, payload.len()).expect("own payload"), payload);
    }
}

/// `DnodePhys::decode` and `ObjsetPhys::decode`; accepted values round-trip.
pub fn dnode(data: &[u8]) {
    if let Ok(d) = DnodePhys::decode(data) {
        let mut b = [0u8; DNODE_SIZE_BYTES];
        d.encode_into(&mut b);
        assert_eq!(DnodePhys::decode(&b).expect("round trip"), d);
    }
    if let Ok(os) = ObjsetPhys::decode(data) {
        assert_eq!(ObjsetPhys::decode(&os.encode()).expect("round trip"), os);
    }
}

/// The label config area raw, and the input as JSON sealed with a correct header and
/// BLAKE3 (so `LabelConfig::validate` is reached); accepted configs round-trip.
pub fn label_config(data: &[u8]) {
    let _ = decode_config(data);
    let mut sealed = vec![0u8; 64 + data.len()];
    sealed[..8].copy_from_slice(&LABEL_MAGIC.to_le_bytes());
    sealed[8..16].copy_from_slice(&3u64.to_le_bytes());
    sealed[16..24].copy_from_slice(&(data.len() as u64).to_le_bytes());
    sealed[32..64].copy_from_slice(blake3::hash(data).as_bytes());
    sealed[64..].copy_from_slice(data);
    if let Ok(cfg) = decode_config(&sealed) {
        let again = tarn_phys::label::encode_config(&cfg).expect("valid config encodes");
        assert_eq!(decode_config(&again).expect("re-encoded config decodes"), cfg);
    }
    let _ = decode_config_unchecked(&sealed);
}

/// One send record payload by type, a whole stream through `StreamReader`, a resume
/// token, a package.
pub fn send_record(data: &[u8]) {
    if data.len() >= 2 {
        let t = u16::from_le_bytes([data[0], data[1]]);
        if let Ok(r) = Record::decode(t, &data[2..]) {
            let _ = r.encode_payload();
        }
    }
    if let Ok(mut rd) = StreamReader::new(data) {
        for _ in 0..1024 {
            if rd.next_record().is_err() {
                break;
            }
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = ResumeToken::decode(s);
    }
    let _ = read_package(&mut &data[..]);
}

/// Metaslab directory root (round trip), page, condensed map (and `chain_trees`),
/// space-map log block.
pub fn space_map(data: &[u8]) {
    if let Ok(r) = RootPhys::decode(data) {
        assert_eq!(RootPhys::decode(&r.encode()).expect("round trip"), r);
    }
    let _ = PagePhys::decode(data);
    if let Ok(m) = MapPhys::decode(data) {
        let (start, size) = (m.start_bytes, m.size_bytes);
        let _ = MapPhys::chain_trees(std::slice::from_ref(&m), start, size, 512);
        let _ = MapPhys::chain_trees(&[m.clone(), m], start, size, 4096);
    }
    let _ = LogBlockPhys::decode(data);
}

/// An uberblock slot raw, and re-sealed with its magic and self-checksum; accepted
/// uberblocks round-trip.
pub fn uberblock(data: &[u8]) {
    let _ = UberblockPhys::decode(data);
    let mut slot = vec![0u8; UBERBLOCK_SLOT_SIZE_BYTES];
    let n = data.len().min(UBERBLOCK_SLOT_SIZE_BYTES - 32);
    slot[..n].copy_from_slice(&data[..n]);
    slot[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
    let sum = *blake3::hash(&slot[..UBERBLOCK_SLOT_SIZE_BYTES - 32]).as_bytes();
    slot[UBERBLOCK_SLOT_SIZE_BYTES - 32..].copy_from_slice(&sum);
    if let Ok(ub) = UberblockPhys::decode(&slot) {
        assert_eq!(UberblockPhys::decode(&ub.encode()).expect("round trip"), ub);
    }
}

/// The input as a whole ZAP object (byte 0 picks the block size, 512 << 0..=3), then
/// count, verify, lookup, list, add, update and remove on it.
pub fn zap_object(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let block = 512u32 << (data[0] % 4);
    let body = &data[1..];
    let os = MemStore::new();
    let tx = os.hold_tx().expect("memory store");
    let obj = os.create_object(&tx, ObjectType::DirZap, block, block, &[]).expect("memory store");
    os.write(&tx, obj, 0, body).expect("memory store");
    let _ = zap::count(&os, obj);
    let _ = zap::verify(&os, obj);
    let _ = zap::lookup(&os, obj, b"name");
    let _ = zap::list(&os, obj, 0, 64);
    let _ = zap::list(&os, obj, u64::from_le_bytes(*b"cursor\0\0") & (i64::MAX as u64), 8);
    let _ = zap::add(&os, &tx, obj, b"new-name", 7);
    let _ = zap::update(&os, &tx, obj, b"name", 8);
    let _ = zap::remove(&os, &tx, obj, b"new-name");
}

/// ZIL header, log-block header (`LwbHeader::open`, unsealed and with the first 8
/// bytes as the expected guid), record headers, write records.
pub fn zil(data: &[u8]) {
    let _ = ZilHeader::decode(data);
    let _ = LwbHeader::open(data, 1, 1);
    if data.len() >= 8 {
        let guid = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        let _ = LwbHeader::open(&data[8..], guid, 1);
    }
    let _ = RecordHeader::decode(data);
    let _ = tarn_phys::zil::WriteRecord::decode(data);
}

/// `ZnodePhys::decode`; an accepted znode round-trips.
pub fn znode(data: &[u8]) {
    if let Ok(z) = ZnodePhys::decode(7, data) {
        assert_eq!(ZnodePhys::decode(7, &z.encode()).expect("round trip"), z);
    }
}
