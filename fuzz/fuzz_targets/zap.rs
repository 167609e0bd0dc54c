//! ZAP blocks: the input becomes the content of a ZAP object (header block, pointer
//! table, leaves, overflow chains) in an in-memory object store, and every read and
//! write operation runs against it. Each must return a value or an error (`Corrupt`
//! for bad structure), never panic, loop forever or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_dmu::mem::MemStore;
use tarn_dmu::{zap, ObjectStore, ObjectType};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    // First byte picks the block size (512 << 0..=3), the rest is the object.
    let block = 512u32 << (data[0] % 4);
    let body = &data[1..];
    let os = MemStore::new();
    let tx = os.hold_tx().unwrap();
    let obj = os.create_object(&tx, ObjectType::DirZap, block, block, &[]).unwrap();
    os.write(&tx, obj, 0, body).unwrap();
    let _ = zap::count(&os, obj);
    let _ = zap::verify(&os, obj);
    let _ = zap::lookup(&os, obj, b"name");
    let _ = zap::list(&os, obj, 0, 64);
    let _ = zap::list(&os, obj, u64::from_le_bytes(*b"cursor\0\0") & (i64::MAX as u64), 8);
    let _ = zap::add(&os, &tx, obj, b"new-name", 7);
    let _ = zap::update(&os, &tx, obj, b"name", 8);
    let _ = zap::remove(&os, &tx, obj, b"new-name");
});
