//! ZAP operations over random and mutated object contents, as the `zap` fuzz target
//! does: the object's bytes (header block, pointer table, leaves, overflow chains) are
//! replaced, and lookup, list, verify, add, update and remove must each return a
//! value or an error — never panic, loop or allocate from an unchecked size.

use proptest::prelude::*;
use tarn_dmu::mem::MemStore;
use tarn_dmu::{zap, ObjectStore, ObjectType};

const BLOCK: u32 = 512;

fn exercise(os: &MemStore, obj: u64) {
    let tx = os.hold_tx().unwrap();
    let _ = zap::count(os, obj);
    let _ = zap::verify(os, obj);
    let _ = zap::lookup(os, obj, b"name-3");
    let _ = zap::list(os, obj, 0, 64);
    let _ = zap::list(os, obj, 12345 << 15, 8);
    let _ = zap::add(os, &tx, obj, b"brand-new", 7);
    let _ = zap::update(os, &tx, obj, b"name-4", 8);
    let _ = zap::remove(os, &tx, obj, b"name-5");
    let _ = zap::verify(os, obj);
}

/// A ZAP (16 KiB blocks) with `n` entries and its whole object image.
fn populated(n: u64) -> (MemStore, u64, Vec<u8>) {
    let os = MemStore::new();
    let tx = os.hold_tx().unwrap();
    let obj = zap::create(&os, &tx, ObjectType::DirZap).unwrap();
    for i in 0..n {
        zap::add(&os, &tx, obj, format!("name-{i}").as_bytes(), i).unwrap();
    }
    let info = os.object_info(obj).unwrap();
    let len = (info.maxblkid + 1) * u64::from(info.datablksz_bytes);
    let mut image = vec![0u8; len as usize];
    os.read(obj, 0, &mut image).unwrap();
    (os, obj, image)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_contents_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4096), magic in any::<bool>()) {
        let os = MemStore::new();
        let tx = os.hold_tx().unwrap();
        let obj = os.create_object(&tx, ObjectType::DirZap, BLOCK, BLOCK, &[]).unwrap();
        let mut b = b;
        if magic && b.len() >= 8 {
            b[..8].copy_from_slice(b"TARNZAPH");
        }
        os.write(&tx, obj, 0, &b).unwrap();
        drop(tx);
        exercise(&os, obj);
    }

    #[test]
    fn mutated_zap_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let (os, obj, mut image) = populated(40);
        let n = image.len();
        for (i, v) in edits {
            image[i % n] = v;
        }
        let tx = os.hold_tx().unwrap();
        os.write(&tx, obj, 0, &image).unwrap();
        drop(tx);
        exercise(&os, obj);
    }
}
