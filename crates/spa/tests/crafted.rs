//! Crafted and corrupted pools: a pool written by the real code, then one on-disk
//! structure rewritten by hand (label config, block pointer, space map …) with its
//! checksum recomputed so the damage gets past verification. Each test checks that
//! import or the read that meets the damage returns an error — never a panic, a hang
//! or a huge allocation (issue 11 §1). Every case here panicked or was accepted
//! before the checks it exercises existed.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use tarn_phys::label::LabelConfig;
use tarn_spa::{CreateSpec, Pool, Rewind, TopSpec};
use tarn_vdev::{label, Leaf};

/// The image files of the pool in `dir`, in name order.
fn images(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "img"))
        .collect();
    v.sort();
    v
}

/// A raidz1 pool of three 64 MiB files in `dir`, with a few synced txgs (history
/// lines), exported.
fn raidz_pool(dir: &Path, name: &str) {
    let leaves: Vec<PathBuf> = (0..3).map(|i| mkfile(dir, &format!("{i}.img"), 64 << 20)).collect();
    let pool = Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Raidz { nparity: 1, leaves }],
        ashift: 12,
        ..Default::default()
    })
    .unwrap();
    for i in 0..3 {
        pool.log_history(&format!("crafted {i}")).unwrap();
        pool.sync().unwrap();
    }
    pool.export().unwrap();
}

/// Rewrite every label config on every image in `dir` through `f`, re-sealed with a
/// valid checksum (what a crafted image would carry).
fn craft_labels(dir: &Path, f: &dyn Fn(&mut LabelConfig)) {
    for p in images(dir) {
        let leaf = Leaf::open(&p).unwrap();
        let mut cfg = label::read_configs(&leaf).into_iter().flatten().max_by_key(|c| c.txg).unwrap();
        f(&mut cfg);
        label::write_config(&leaf, &cfg, label::LabelHalf::Both).unwrap();
    }
}

/// Import `name` from `dir` and return the error it must give.
fn import_err(dir: &Path, name: &str) -> String {
    match Pool::import(name, &[dir.to_path_buf()], Rewind::None, None) {
        Ok(p) => {
            let _ = p.export();
            panic!("crafted pool imported");
        }
        Err(e) => e.to_string(),
    }
}

fn label_case(name: &str, f: &dyn Fn(&mut LabelConfig), want: &str) {
    let dir = tempfile::tempdir().unwrap();
    raidz_pool(dir.path(), name);
    craft_labels(dir.path(), f);
    let e = import_err(dir.path(), name);
    assert!(e.contains("invalid label config") && e.contains(want), "{name}: {e}");
}

#[test]
fn raidz_parity_out_of_range_is_refused() {
    label_case("np0", &|c| c.vdev_tree.children[0].nparity = 0, "nparity 0");
    label_case("np4", &|c| c.vdev_tree.children[0].nparity = 4, "nparity 4");
}

#[test]
fn raidz_with_too_few_children_is_refused() {
    label_case("np2", &|c| c.vdev_tree.children[0].nparity = 3, "raidz3");
}

#[test]
fn ashift_out_of_range_is_refused() {
    label_case("as8", &|c| c.vdev_tree.children[0].ashift = 8, "ashift 8");
    label_case("as40", &|c| c.vdev_tree.children[0].ashift = 40, "ashift 40");
}

#[test]
fn duplicate_guids_are_refused() {
    label_case(
        "dupg",
        &|c| {
            let g = c.vdev_tree.children[0].children[0].guid;
            c.vdev_tree.children[0].children[1].guid = g;
        },
        "appears twice",
    );
}

#[test]
fn absurd_child_count_and_kind_are_refused() {
    label_case(
        "wide",
        &|c| {
            let one = c.vdev_tree.children[0].children[0].clone();
            c.vdev_tree.children[0].children = (0..400).map(|i| tarn_phys::label::VdevConfig { guid: 1000 + i, ..one.clone() }).collect();
        },
        "400 children",
    );
    label_case("kind", &|c| c.vdev_tree.children[0].kind = "draid".into(), "unknown kind");
}

/// A size within the format's cap but beyond what the devices hold is refused at
/// import (it would let allocations run past the end of the leaves).
#[test]
fn vdev_size_beyond_devices_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    raidz_pool(dir.path(), "big");
    craft_labels(dir.path(), &|c| c.vdev_tree.children[0].asize_bytes = 1 << 50);
    let e = import_err(dir.path(), "big");
    assert!(e.contains("devices hold"), "{e}");
    // Absurd beyond the format's cap: refused when the label is read.
    craft_labels(dir.path(), &|c| c.vdev_tree.children[0].asize_bytes = u64::MAX);
    let e = import_err(dir.path(), "big");
    assert!(e.contains("invalid label config"), "{e}");
}

/// The untouched pool imports: the helpers above damage only what each case names.
#[test]
fn untouched_pool_imports() {
    let dir = tempfile::tempdir().unwrap();
    raidz_pool(dir.path(), "fine");
    craft_labels(dir.path(), &|_| {});
    let p = Pool::import("fine", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    p.export().unwrap();
}

// ---- a crafted block DAG ------------------------------------------------------------

use std::sync::atomic::Ordering;
use tarn_dmu::objset::{Objset, DNODE_BLOCK_BYTES};
use tarn_dmu::txg::TxgGate;
use tarn_dmu::ObjectStore;
use tarn_phys::{BlkPtr, DnodePhys, ObjectType, ObjsetPhys, ZilHeader, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};
use tarn_zio::{WriteProps, Zio};

fn put_block(zio: &Zio, data: &[u8], otype: ObjectType, level: u8, txg: u64) -> BlkPtr {
    zio.write_block(data, WriteProps::meta(otype, level, 1, txg, 1)).unwrap()
}

/// Write, with the pool's real pipeline (so every checksum is right), an object set
/// whose object 1 is an 8-level tree in which every indirect block's 1024 pointers
/// all name the same child: 8 distinct blocks, 1024^7 paths from root to data.
/// Returns the object-set root.
fn dag_objset(zio: &Zio, txg: u64) -> BlkPtr {
    let mut bp = put_block(zio, &[0x5a; 4096], ObjectType::FileData, 0, txg);
    for level in 1..=7u8 {
        let mut ind = vec![0u8; 1 << 17];
        for c in ind.chunks_exact_mut(BLKPTR_SIZE_BYTES) {
            bp.encode_into(c);
        }
        bp = put_block(zio, &ind, ObjectType::Indirect, level, txg);
    }
    let mut dn = DnodePhys::free();
    dn.otype = ObjectType::FileData;
    dn.indblkshift = 17;
    dn.nlevels = 8;
    dn.datablksz_bytes = 4096;
    dn.max_blksz_bytes = 4096;
    dn.maxblkid = 1 << 40;
    dn.blkptr = bp;
    let mut dnodes = vec![0u8; DNODE_BLOCK_BYTES as usize];
    dn.encode_into(&mut dnodes[DNODE_SIZE_BYTES..2 * DNODE_SIZE_BYTES]);
    let dnode_bp = put_block(zio, &dnodes, ObjectType::Dnode, 0, txg);
    let mut meta = DnodePhys::free();
    meta.otype = ObjectType::Dnode;
    meta.indblkshift = 17;
    meta.nlevels = 1;
    meta.datablksz_bytes = DNODE_BLOCK_BYTES;
    meta.max_blksz_bytes = DNODE_BLOCK_BYTES;
    meta.blkptr = dnode_bp;
    let os = ObjsetPhys {
        meta_dnode: meta,
        os_type: 2,
        zil_header: ZilHeader::default(),
    };
    put_block(zio, &os.encode(), ObjectType::Objset, 0, txg)
}

/// Fail (instead of running for ages) once a walk visits more than this many pointers.
const VISITS_MAX: u64 = 100_000;

/// Traversal and scan walks of a block DAG stay linear in its distinct blocks: each
/// indirect block is expanded once per walk (a naive walk visits 1024^7 paths).
#[test]
fn block_dag_walks_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "dag", 128 << 20);
    let zio = pool.zio().clone();
    let root = dag_objset(&zio, pool.synced_txg());
    let mut visits = 0u64;
    tarn_dmu::traverse::traverse(&zio, &root, &mut |_| {
        visits += 1;
        assert!(visits <= VISITS_MAX, "traverse visited more than {VISITS_MAX} pointers");
    })
    .unwrap();
    // 7 indirect blocks + up to 1024 repetitions of the data pointer, the dnode
    // block and the root.
    assert!((10..=1024 + 9).contains(&visits), "{visits} visits");
    let mut visits = 0u64;
    let walked = tarn_dmu::traverse::traverse_resumable(
        &zio,
        &root,
        0,
        0,
        &mut |_, _| {
            visits += 1;
            assert!(visits <= VISITS_MAX, "scan walk visited more than {VISITS_MAX} pointers");
        },
        &mut |_| false,
    )
    .unwrap();
    assert_eq!(walked, tarn_dmu::traverse::Walked::Done);
    assert!((10..=1024 + 9).contains(&visits), "{visits} visits");
    pool.export().unwrap();
}

/// Deleting the object whose tree is such a DAG frees each block once: no double
/// free (which panicked in syncing context) and no exponential walk.
#[test]
fn block_dag_free_frees_each_block_once() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "dagfree", 128 << 20);
    let zio = pool.zio().clone();
    let txg = pool.synced_txg();
    let root = dag_objset(&zio, txg);
    let gate = std::sync::Arc::new(TxgGate::new(txg + 1, 64 << 20));
    let os = Objset::open(zio.clone(), gate, &root, 0).unwrap();
    let tx = os.hold_tx().unwrap();
    os.free_object(&tx, 1).unwrap();
    let open = tx.txg;
    drop(tx);
    let deferred = zio.deferred_bytes();
    let mut batch = os.sync_collect(open);
    os.sync_write_data(&mut batch, 1).unwrap();
    os.sync_finish(batch).unwrap();
    assert_eq!(zio.refused_frees.load(Ordering::Relaxed), 0, "a block was freed twice");
    // The tree was freed: its 8 blocks (4 KiB of data among them) are on their way back.
    assert!(zio.deferred_bytes() >= deferred + 4096, "the DAG's blocks were not freed");
    pool.export().unwrap();
}

// ---- crafted uberblocks -------------------------------------------------------------

use tarn_phys::{ChecksumAlg, UberblockPhys};

/// Rewrite every uberblock in every label of every image in `dir` through `f`,
/// re-sealed (an uberblock carries its own checksum). `f` must keep `txg % 32`.
fn craft_uberblocks(dir: &Path, f: &dyn Fn(&mut UberblockPhys)) -> usize {
    let mut n = 0;
    for p in images(dir) {
        let leaf = Leaf::open(&p).unwrap();
        for mut ub in label::read_uberblocks(&leaf) {
            f(&mut ub);
            label::write_uberblock(&leaf, &ub).unwrap();
            n += 1;
        }
    }
    assert!(n > 0, "no uberblock found to craft");
    n
}

fn uberblock_case(name: &str, f: &dyn Fn(&mut UberblockPhys)) -> String {
    let dir = tempfile::tempdir().unwrap();
    raidz_pool(dir.path(), name);
    craft_uberblocks(dir.path(), f);
    import_err(dir.path(), name)
}

/// A txg at the top of the range (`txg + 1` overflowed at import) is refused.
#[test]
fn uberblock_txg_overflow_is_refused() {
    let e = uberblock_case("ubtxg", &|u| u.txg = u64::MAX - 31 + u.txg % 32);
    assert!(e.contains("no valid uberblock"), "{e}");
}

/// A root pointer that claims no checksum would switch verification off; refused.
#[test]
fn root_pointer_without_checksum_is_refused() {
    let e = uberblock_case("ubsum", &|u| {
        u.rootbp.checksum_alg = ChecksumAlg::Off;
        u.rootbp.checksum = [0; 32];
    });
    assert!(e.contains("no valid uberblock"), "{e}");
}

/// A root pointer that claims a 4 GiB block (one read would allocate 4 GiB) is
/// refused before anything is read.
#[test]
fn root_pointer_of_4_gib_is_refused() {
    let e = uberblock_case("ub4g", &|u| {
        u.spacemap_bp.lsize_bytes = u32::MAX;
        u.spacemap_bp.psize_bytes = u32::MAX;
    });
    assert!(e.contains("no valid uberblock"), "{e}");
}

/// Only the newest uberblock crafted (its root claims no checksum, which would make
/// any bytes verify): import skips it and opens the txg before, as OpenZFS skips an
/// uberblock whose root does not verify.
#[test]
fn newest_uberblock_crafted_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    raidz_pool(dir.path(), "ubnew");
    let newest = images(dir.path())
        .iter()
        .flat_map(|p| label::read_uberblocks(&Leaf::open(p).unwrap()))
        .map(|u| u.txg)
        .max()
        .unwrap();
    craft_uberblocks(dir.path(), &|u| {
        if u.txg == newest {
            u.rootbp.checksum_alg = ChecksumAlg::Off;
            u.rootbp.checksum = [0; 32];
        }
    });
    let p = Pool::import("ubnew", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    assert!(p.synced_txg() < newest, "imported at {} (crafted {newest})", p.synced_txg());
    p.export().unwrap();
}

// ---- a crafted space map ------------------------------------------------------------

use tarn_metaslab::ondisk::RootPhys;
use tarn_phys::label::DATA_START_BYTES;

/// The metaslab directory root of the newest txg of the mirror pool in `dir` is
/// rewritten through `f` on both sides at every copy, and the newest uberblock's
/// pointer to it re-sealed with the new checksum: what a crafted image carries.
fn craft_space_map_root(dir: &Path, f: &dyn Fn(&mut RootPhys)) {
    let leaves: Vec<Leaf> = images(dir).iter().map(|p| Leaf::open(p).unwrap()).collect();
    let newest = label::read_uberblocks(&leaves[0]).into_iter().max_by_key(|u| u.txg).unwrap();
    let bp = newest.spacemap_bp;
    let mut payload = vec![0u8; bp.psize_bytes as usize];
    leaves[0].pread(DATA_START_BYTES + bp.dva[0].offset_bytes, &mut payload).unwrap();
    let mut root = RootPhys::decode(&payload).unwrap();
    f(&mut root);
    let mut bytes = root.encode();
    assert!(bytes.len() <= payload.len());
    bytes.resize(payload.len(), 0);
    for leaf in &leaves {
        for d in bp.dvas() {
            leaf.pwrite(DATA_START_BYTES + d.offset_bytes, &bytes).unwrap();
        }
    }
    let mut ub = newest;
    ub.spacemap_bp.checksum = ChecksumAlg::Blake3.compute(&bytes);
    for leaf in &leaves {
        label::write_uberblock(leaf, &ub).unwrap();
        leaf.flush().unwrap();
    }
}

/// A directory page pointer in the space map root that claims a 4 GiB block: import
/// refuses the pointer itself (it used to read — and allocate — 4 GiB).
#[test]
fn space_map_page_pointer_of_4_gib_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "smbig", 128 << 20);
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    craft_space_map_root(dir.path(), &|r| {
        let page = r.vdevs[0].pages.iter_mut().find(|p| !p.is_hole()).expect("a directory page");
        page.lsize_bytes = u32::MAX;
        page.psize_bytes = u32::MAX;
    });
    let e = import_err(dir.path(), "smbig");
    assert!(e.contains("space map") && e.contains("lsize"), "{e}");
}

/// The same image with the root left as it was imports: the helper re-seals
/// correctly, so the refusal above is about the crafted pointer.
#[test]
fn space_map_resealed_unchanged_imports() {
    let dir = tempfile::tempdir().unwrap();
    let pool = mirror_pool(dir.path(), "smsame", 128 << 20);
    pool.sync().unwrap();
    pool.export().unwrap();
    drop(pool);
    craft_space_map_root(dir.path(), &|_| {});
    let p = Pool::import("smsame", &[dir.path().to_path_buf()], Rewind::None, None).unwrap();
    p.export().unwrap();
}
