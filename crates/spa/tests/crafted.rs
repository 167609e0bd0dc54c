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

/// A raidz1 pool of three 64 MiB files in `dir`, with one small file system
/// dataset's worth of data, exported.
fn raidz_pool(dir: &Path, name: &str) {
    let leaves: Vec<PathBuf> = (0..3).map(|i| mkfile(dir, &format!("{i}.img"), 64 << 20)).collect();
    let pool = Pool::create(&CreateSpec {
        name: name.into(),
        vdevs: vec![TopSpec::Raidz { nparity: 1, leaves }],
        ashift: 12,
        ..Default::default()
    })
    .unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
}

/// Rewrite every label config on every image in `dir` through `f`, re-sealed with a
/// valid checksum (what a crafted image would carry).
fn craft_labels(dir: &Path, f: &dyn Fn(&mut LabelConfig)) {
    for p in images(dir) {
        let leaf = Leaf::open(&p).unwrap();
        let mut cfg = label::read_configs(&leaf).into_iter().flatten().max_by_key(|c| c.txg).unwrap();
        f(&mut cfg);
        label::write_config(&leaf, &cfg).unwrap();
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
