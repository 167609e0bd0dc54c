//! The vdev config tree (`VdevConfig`, the plain data the labels store) and the
//! runtime tree built from it (`tarn_vdev::Vdev` nodes).
//!
//! Theory. The config tree is the pool's description of itself: root → top-level
//! vdevs (holes included, so ids never move) → interior nodes ("mirror", "replacing",
//! "spare", "raidz") → leaves (a device path and GUID). A node is addressed by its
//! *index path*: the top-level id, then child indices. Device changes edit the config
//! tree with these helpers (find, walk, collapse a one-child mirror-shaped node,
//! renumber) and then rebuild the runtime node from it ([`build_vdev`]), reusing every
//! existing runtime node by GUID so counters, DTLs and open devices carry over
//! (`repair.rs` theory, "Tree surgery"). Nothing here does I/O or takes a lock; the
//! callers hold `sync_lock` and `config`.
//!
//! Invariants: leaves are the nodes without children that are neither holes nor the
//! root ([`is_leaf_cfg`]); a child's `id` is its index ([`renumber`], after every
//! removal); a collapsed node keeps its parent's id, and a collapsed top-level vdev
//! keeps its `asize_bytes`, `is_log` and `ashift` ([`collapse_into`]), so DVAs stay
//! valid.
//!
//! Called by: `repair.rs` (offline/online/attach/detach/replace/spares), `pool.rs`
//! (import builds the runtime tree, status names nodes).

use crate::vdevs::same_device;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::label::{data_end_bytes, VdevConfig, DATA_START_BYTES};
use tarn_vdev::{MirrorRole, Vdev};

/// Role of a mirror-shaped config node kind ("mirror", "replacing", "spare").
pub(crate) fn role_of(kind: &str) -> Option<MirrorRole> {
    match kind {
        "mirror" => Some(MirrorRole::Mirror),
        "replacing" => Some(MirrorRole::Replacing),
        "spare" => Some(MirrorRole::Spare),
        _ => None,
    }
}

/// Whether a config node is a leaf (a device).
pub(crate) fn is_leaf_cfg(c: &VdevConfig) -> bool {
    c.children.is_empty() && !c.is_hole() && c.kind != "root"
}

/// Build the runtime node for config `c` (id `id`, sector size `ashift`), taking leaves
/// from `leaf`. Interior nodes are new, with the config's GUID.
pub(crate) fn build_vdev(c: &VdevConfig, id: u32, ashift: u8, leaf: &mut dyn FnMut(&VdevConfig, u32, u8) -> Arc<Vdev>) -> Arc<Vdev> {
    if c.is_hole() {
        return Arc::new(Vdev::new_hole(id));
    }
    if is_leaf_cfg(c) {
        return leaf(c, id, ashift);
    }
    let children: Vec<Arc<Vdev>> = c.children.iter().enumerate().map(|(i, ch)| build_vdev(ch, i as u32, ashift, leaf)).collect();
    let v = match role_of(&c.kind) {
        Some(role) => Vdev::new_mirror_role(id, c.guid, ashift, role, children),
        None => Vdev::new_raidz(id, c.guid, ashift, c.nparity, children),
    };
    Arc::new(v)
}

/// A new single leaf (a hot spare or a cache device) for the opened device `leaf` at
/// `path`: its config (new GUID, canonical path, id `id`) and its runtime node.
pub(crate) fn new_single_leaf(path: &std::path::Path, leaf: tarn_vdev::Leaf, id: u32, ashift: u8) -> (VdevConfig, Arc<Vdev>) {
    let guid = crate::pool::new_guid();
    let shown = std::fs::canonicalize(path).unwrap_or(path.to_path_buf()).display().to_string();
    let cfg = VdevConfig {
        kind: crate::pool::kind_of_leaf(path).into(),
        id: id as u64,
        guid,
        path: Some(shown.clone()),
        ashift,
        ..VdevConfig::default()
    };
    (cfg, Arc::new(Vdev::new_leaf(id, guid, ashift, shown, Some(leaf))))
}

/// Every node below (and including) `v` by GUID.
pub(crate) fn collect_nodes(v: &Arc<Vdev>, out: &mut HashMap<u64, Arc<Vdev>>) {
    out.insert(v.guid(), v.clone());
    for c in v.children() {
        collect_nodes(c, out);
    }
}

/// Copy the error counters of interior nodes that kept their GUID across a rebuild.
pub(crate) fn copy_counters(v: &Vdev, old: &HashMap<u64, Arc<Vdev>>) {
    if let (false, Some(o)) = (v.is_leaf(), old.get(&v.guid())) {
        if !std::ptr::eq(o.as_ref(), v) {
            for (a, b) in [
                (&v.stats().read_errors, &o.stats().read_errors),
                (&v.stats().write_errors, &o.stats().write_errors),
                (&v.stats().checksum_errors, &o.stats().checksum_errors),
            ] {
                a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }
    for c in v.children() {
        copy_counters(c, old);
    }
}

/// The config node at index path `at` below the root (`at[0]` is the top-level id).
pub(crate) fn node<'a>(root: &'a VdevConfig, at: &[usize]) -> &'a VdevConfig {
    at.iter().fold(root, |n, &i| &n.children[i])
}

pub(crate) fn node_mut<'a>(root: &'a mut VdevConfig, at: &[usize]) -> &'a mut VdevConfig {
    at.iter().fold(root, |n, &i| &mut n.children[i])
}

/// Index path (top-level index, then child indices) of the first node, depth first,
/// for which `hit` is true; holes are skipped.
pub(crate) fn find_path(root: &VdevConfig, hit: &dyn Fn(&VdevConfig) -> bool) -> Option<Vec<usize>> {
    let mut at = Vec::new();
    for (i, t) in root.children.iter().enumerate().filter(|(_, t)| !t.is_hole()) {
        at.push(i);
        if walk_path(t, hit, &mut at) {
            return Some(at);
        }
        at.pop();
    }
    None
}

/// Depth-first search below `n` (included) for a node where `hit` is true; on success
/// `at` ends with the child indices leading to it from `n`.
pub(crate) fn walk_path(n: &VdevConfig, hit: &dyn Fn(&VdevConfig) -> bool, at: &mut Vec<usize>) -> bool {
    if hit(n) {
        return true;
    }
    for (i, c) in n.children.iter().enumerate() {
        at.push(i);
        if walk_path(c, hit, at) {
            return true;
        }
        at.pop();
    }
    false
}

/// Index path of the leaf named `device` (path or GUID) in the tree, if any.
pub(crate) fn find_leaf_path(root: &VdevConfig, device: &str) -> Option<Vec<usize>> {
    find_path(root, &|n| {
        is_leaf_cfg(n) && (n.path.as_deref().is_some_and(|p| same_device(p, device)) || n.guid.to_string() == device)
    })
}

/// Index path of any node (leaf, or interior by its `zpool status` name or GUID).
pub(crate) fn find_node_path(root: &VdevConfig, device: &str) -> Option<Vec<usize>> {
    find_path(root, &|n| {
        let named = if is_leaf_cfg(n) {
            n.path.as_deref().is_some_and(|p| same_device(p, device))
        } else {
            display_name(n) == device
        };
        named || n.guid.to_string() == device
    })
}

/// `zpool status` name of any config node.
pub(crate) fn display_name(c: &VdevConfig) -> String {
    match c.kind.as_str() {
        "mirror" | "replacing" | "spare" => format!("{}-{}", c.kind, c.id),
        "raidz" => format!("raidz{}-{}", c.nparity, c.id),
        _ => c.path.clone().unwrap_or_default(),
    }
}

/// Visit every leaf config below `c` mutably.
pub(crate) fn for_leaves_mut(c: &mut VdevConfig, f: &mut dyn FnMut(&mut VdevConfig)) {
    if is_leaf_cfg(c) {
        f(c);
        return;
    }
    for ch in c.children.iter_mut() {
        for_leaves_mut(ch, f);
    }
}

/// Put `child` in place of its one-child parent `parent` (the parent's id, and for a
/// top-level vdev its top-level fields).
pub(crate) fn collapse_into(parent: &mut VdevConfig, top_level: bool) {
    let mut child = parent.children.pop().expect("one child");
    child.id = parent.id;
    if top_level {
        child.asize_bytes = parent.asize_bytes;
        child.is_log = parent.is_log;
        child.ashift = parent.ashift;
    }
    *parent = child;
}

/// Give the children of `c` their index as id.
pub(crate) fn renumber(c: &mut VdevConfig) {
    for (i, ch) in c.children.iter_mut().enumerate() {
        ch.id = i as u64;
    }
}

/// Allocatable bytes of a leaf device of `size_bytes` with sector `ashift`.
pub(crate) fn leaf_asize(size_bytes: u64, ashift: u8) -> u64 {
    let s = 1u64 << ashift;
    data_end_bytes(size_bytes).saturating_sub(DATA_START_BYTES) / s * s
}

/// Bytes a leaf at index path `at` must offer (mirror side or top-level leaf: the top
/// vdev's size; raidz column: its share).
pub(crate) fn needed_asize(root: &VdevConfig, at: &[usize]) -> u64 {
    let top = &root.children[at[0]];
    let s = 1u64 << top.ashift.max(9);
    if top.kind == "raidz" && at.len() > 1 {
        let n = top.children.len().max(1) as u64;
        top.asize_bytes.div_ceil(n).div_ceil(s) * s
    } else {
        top.asize_bytes
    }
}

/// The runtime leaf with `guid` among the top-level vdevs `top`.
pub(crate) fn tree_leaf(top: &[Arc<Vdev>], guid: u64) -> Option<Arc<Vdev>> {
    let mut m = HashMap::new();
    for t in top {
        collect_nodes(t, &mut m);
    }
    m.remove(&guid)
}

/// Renumber the spares list (ids are indexes).
pub(crate) fn renumber_spares(cfg: &mut VdevConfig) {
    for (i, s) in cfg.spares.iter_mut().enumerate() {
        s.id = i as u64;
    }
}

/// Index path of a replacing node in top-level vdev `id` whose last child is a usable
/// leaf with an empty DTL.
pub(crate) fn find_complete_replacing(cfg: &VdevConfig, id: usize, nodes: &HashMap<u64, Arc<Vdev>>) -> Option<Vec<usize>> {
    let complete = |n: &VdevConfig| {
        n.kind == "replacing"
            && n.children
                .last()
                .and_then(|c| nodes.get(&c.guid))
                .is_some_and(|v| v.is_leaf() && v.state().is_usable() && v.dtl().is_empty())
    };
    let mut at = vec![id];
    walk_path(&cfg.children[id], &complete, &mut at).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(guid: u64) -> VdevConfig {
        VdevConfig {
            kind: "file".into(),
            guid,
            path: Some(format!("/nonexistent/{guid}")),
            ..VdevConfig::default()
        }
    }

    #[test]
    fn paths_and_collapse() {
        let mut root = VdevConfig {
            kind: "root".into(),
            children: vec![
                leaf(1),
                VdevConfig {
                    kind: "mirror".into(),
                    id: 1,
                    guid: 10,
                    asize_bytes: 99,
                    children: vec![leaf(2), leaf(3)],
                    ..VdevConfig::default()
                },
            ],
            ..VdevConfig::default()
        };
        assert_eq!(find_leaf_path(&root, "/nonexistent/3"), Some(vec![1, 1]));
        assert_eq!(find_leaf_path(&root, "1"), Some(vec![0]));
        assert_eq!(find_node_path(&root, "mirror-1"), Some(vec![1]));
        assert_eq!(find_leaf_path(&root, "/nonexistent/9"), None);
        let m = node_mut(&mut root, &[1]);
        m.children.remove(0);
        collapse_into(m, true);
        assert_eq!((root.children[1].guid, root.children[1].id, root.children[1].asize_bytes), (3, 1, 99));
        assert_eq!(display_name(&root.children[1]), "/nonexistent/3");
    }
}
