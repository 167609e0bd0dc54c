//! Vdev labels (ZFS `vdev_label_t`, OpenZFS `include/sys/vdev_impl.h`).
//!
//! Every leaf carries four 256 KiB labels: L0 at 0, L1 at 256 KiB, L2 and L3 in the
//! last 512 KiB of the device (size rounded down to 256 KiB). The allocatable area
//! is `[DATA_START_BYTES, label_area_end)`: the first 4 MiB hold L0, L1 and a
//! reserved boot region, as in ZFS.
//!
//! One label:
//!
//! | off     | size    | content |
//! |--------:|--------:|---------|
//! | 0       | 8 KiB   | reserved, zero |
//! | 8 KiB   | 64      | config header: magic "TARNLABL" u64, version u64, json_len u64, reserved u64, BLAKE3 of the JSON (32) |
//! | 8K+64   | ≤ 120 KiB−64 | config, UTF-8 JSON ([`LabelConfig`]) |
//! | 128 KiB | 128 KiB | uberblock ring: 32 slots × 4 KiB, slot = txg % 32 |
//!
//! The config is JSON (our stand-in for ZFS's packed nvlist): small, read once at
//! import, versioned by `version` and `features_for_read`.
//!
//! A label may come from anywhere (a disk image from a stranger), so a config that
//! passes its checksum is not trusted yet: [`decode_config`] also runs
//! [`LabelConfig::validate`], which refuses any vdev tree the pool layer could not
//! build — raidz parity outside 1..=3 or too few children, ashift outside 9..=16,
//! absurd child counts, sizes or depth, duplicate GUIDs — so the code that builds
//! vdevs from a config may assert those invariants.

use crate::le::*;
use crate::Corrupt;
use serde::{Deserialize, Serialize};

/// Size of one label.
pub const LABEL_SIZE_BYTES: u64 = 256 << 10;
/// Start of the allocatable area on every leaf.
pub const DATA_START_BYTES: u64 = 4 << 20;
/// Offset of the config header inside a label.
pub const CONFIG_OFFSET_BYTES: u64 = 8 << 10;
/// Maximum JSON config length.
pub const CONFIG_MAX_BYTES: usize = (120 << 10) - 64;
/// Offset of the uberblock ring inside a label.
pub const UBERBLOCK_RING_OFFSET_BYTES: u64 = 128 << 10;
/// Slots in the uberblock ring.
pub const UBERBLOCK_RING_SLOTS: u64 = 32;
/// "TARNLABL" as a little-endian u64.
pub const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"TARNLABL");

/// Bytes of the config header that precedes the JSON.
const CONFIG_HEADER_BYTES: usize = 64;
// Field offsets of the config header (8 bytes at 24 are written as zero, not checked).
const CFG_MAGIC_OFF: usize = 0;
const CFG_VERSION_OFF: usize = 8;
const CFG_JSON_LEN_OFF: usize = 16;
const CFG_SUM_OFF: usize = 32;

/// Offsets of the four labels on a device of `device_size_bytes`.
pub fn label_offsets(device_size_bytes: u64) -> [u64; 4] {
    let size = device_size_bytes / LABEL_SIZE_BYTES * LABEL_SIZE_BYTES;
    [0, LABEL_SIZE_BYTES, size - 2 * LABEL_SIZE_BYTES, size - LABEL_SIZE_BYTES]
}

/// End (exclusive) of the allocatable area of a device of `device_size_bytes`.
pub fn data_end_bytes(device_size_bytes: u64) -> u64 {
    label_offsets(device_size_bytes)[2]
}

/// Pool state recorded in the label (ZFS `pool_state_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    /// Imported (or was, when the host died).
    Active,
    /// Cleanly exported.
    Exported,
    /// Destroyed with `zpool destroy`.
    Destroyed,
}

/// `kind` of a removed top-level vdev (OpenZFS `VDEV_TYPE_HOLE`).
pub const VDEV_KIND_HOLE: &str = "hole";

/// Smallest sector size (log2) a vdev may record: 512 bytes (OpenZFS `ASHIFT_MIN`).
pub const ASHIFT_MIN: u8 = 9;
/// Largest sector size (log2) a vdev may record: 64 KiB (OpenZFS `ASHIFT_MAX`).
pub const ASHIFT_MAX: u8 = 16;
/// Most children one interior vdev (mirror, raidz, replacing, spare) may have. The
/// raidz layout addresses children with one byte, so 255 is its limit too.
pub const VDEV_CHILDREN_MAX: usize = 255;
/// Most top-level vdevs (holes included) a pool may have. The metaslab root block
/// grows by about 2 KiB per top-level vdev and must stay within one block.
pub const TOP_VDEVS_MAX: usize = 256;
/// Most hot spares (and, apart, most cache devices) a pool may list.
pub const SPARES_MAX: usize = 255;
/// Deepest vdev tree below the root: top-level → replacing/spare → (spare) → leaf.
pub const VDEV_TREE_DEPTH_MAX: usize = 4;
/// Largest `asize_bytes` a top-level vdev may record (64 PiB): beyond it the
/// metaslab array alone would be an absurd allocation. Import also checks the
/// recorded size against the devices actually found.
pub const VDEV_ASIZE_MAX_BYTES: u64 = 1 << 56;
/// Most parity columns of a raidz vdev (raidz3).
pub const RAIDZ_PARITY_MAX: u8 = 3;

/// A node of the vdev tree as stored in the label (ZFS's `vdev_tree` nvlist).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevConfig {
    /// "root", "mirror", "raidz", "file", "disk", or "hole" for a removed top-level
    /// vdev (a hole keeps its id so the ids of the others never change).
    pub kind: String,
    /// Index among siblings (for a top-level vdev: its id in DVAs).
    pub id: u64,
    /// Random 64-bit identity.
    pub guid: u64,
    /// Leaf path at last import (leaves only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Parity count for raidz (1..=3), 0 otherwise.
    #[serde(default)]
    pub nparity: u8,
    /// log2 of the sector size (9 or 12); top-level vdevs.
    #[serde(default)]
    pub ashift: u8,
    /// Allocatable bytes of a top-level vdev.
    #[serde(default)]
    pub asize_bytes: u64,
    /// A top-level vdev that is a separate intent log (SLOG, OpenZFS `is_log`): it
    /// holds only intent-log blocks and is not part of the pool's capacity.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_log: bool,
    /// Children (mirror/raidz/replacing/spare/root).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<VdevConfig>,
    /// A leaf taken offline with `zpool offline` (not `-t`): it stays offline across
    /// export and import until `zpool online`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
    /// A leaf faulted for too many I/O errors: it stays unused until `zpool clear`
    /// or `zpool online`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub faulted: bool,
    /// A leaf's dirty time log: inclusive txg ranges it lacks, `u64::MAX` as the end
    /// of a range still open (the leaf is missing, offline or faulted right now).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtl: Vec<(u64, u64)>,
    /// The root's hot spares (leaves; each carries a label naming the pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<VdevConfig>,
    /// The root's cache devices (L2ARC leaves, OpenZFS's `l2cache` list; each carries
    /// a label naming the pool). Never part of the pool's capacity or GUID sum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub l2cache: Vec<VdevConfig>,
}

impl VdevConfig {
    /// All leaves beneath (or self if a leaf), depth-first. A hole has none; the
    /// root's spares are not among them.
    pub fn leaves(&self) -> Vec<&VdevConfig> {
        if self.is_hole() {
            return Vec::new();
        }
        if self.children.is_empty() {
            return vec![self];
        }
        self.children.iter().flat_map(|c| c.leaves()).collect()
    }

    /// Whether this is a hole left by a removed top-level vdev.
    pub fn is_hole(&self) -> bool {
        self.kind == VDEV_KIND_HOLE
    }

    /// The hole that replaces removed top-level vdev `id`: no guid, no space, no leaves.
    pub fn hole(id: u64) -> VdevConfig {
        VdevConfig {
            kind: VDEV_KIND_HOLE.into(),
            id,
            ..VdevConfig::default()
        }
    }
}

/// The label's config (ZFS label nvlist: name, guids, txg, state, vdev_tree).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelConfig {
    /// Format version; import refuses a newer one.
    pub version: u64,
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub pool_guid: u64,
    /// This leaf's GUID.
    pub guid: u64,
    /// GUID of this leaf's top-level vdev.
    pub top_guid: u64,
    /// Txg at which this config was written.
    pub txg: u64,
    /// Pool state.
    pub state: PoolState,
    /// Host that last imported the pool.
    pub hostname: String,
    /// Features an importer must understand to read the pool (none in format 1).
    #[serde(default)]
    pub features_for_read: Vec<String>,
    /// The whole pool's vdev tree (kind "root").
    pub vdev_tree: VdevConfig,
}

/// Encode the config header + JSON into the 120 KiB config area.
pub fn encode_config(cfg: &LabelConfig) -> Result<Vec<u8>, Corrupt> {
    let json = serde_json::to_vec(cfg).map_err(|e| Corrupt::new("label", e.to_string()))?;
    if json.len() > CONFIG_MAX_BYTES {
        return Err(Corrupt::new("label", "config too large"));
    }
    let mut b = vec![0u8; CONFIG_HEADER_BYTES + json.len()];
    put_u64(&mut b, CFG_MAGIC_OFF, LABEL_MAGIC);
    put_u64(&mut b, CFG_VERSION_OFF, cfg.version);
    put_u64(&mut b, CFG_JSON_LEN_OFF, json.len() as u64);
    b[CFG_SUM_OFF..CONFIG_HEADER_BYTES].copy_from_slice(blake3::hash(&json).as_bytes());
    b[CONFIG_HEADER_BYTES..].copy_from_slice(&json);
    Ok(b)
}

/// Decode the config area (starting at the header). Checks magic and checksum, then
/// the config's meaning ([`LabelConfig::validate`]); the caller checks the version
/// against [`crate::TARN_FORMAT_VERSION`].
///
/// Errors: `Corrupt { kind: "label" }` for a bad magic, length or checksum, JSON that
/// does not parse, or a config that passes the checksum but describes an impossible
/// vdev tree (a crafted label).
pub fn decode_config(b: &[u8]) -> Result<LabelConfig, Corrupt> {
    let cfg = decode_config_unchecked(b)?;
    cfg.validate()?;
    Ok(cfg)
}

/// [`decode_config`] without the semantic checks: magic, length, checksum and JSON
/// only. Import uses it to name the pool of a label it refuses, so the refusal can
/// say why; nothing may be built from what it returns.
pub fn decode_config_unchecked(b: &[u8]) -> Result<LabelConfig, Corrupt> {
    if b.len() < CONFIG_HEADER_BYTES || u64_at(b, CFG_MAGIC_OFF) != LABEL_MAGIC {
        return Err(Corrupt::new("label", "bad magic"));
    }
    let len = u64_at(b, CFG_JSON_LEN_OFF) as usize;
    if len > CONFIG_MAX_BYTES || CONFIG_HEADER_BYTES + len > b.len() {
        return Err(Corrupt::new("label", "bad config length"));
    }
    let json = &b[CONFIG_HEADER_BYTES..CONFIG_HEADER_BYTES + len];
    if blake3::hash(json).as_bytes() != &b[CFG_SUM_OFF..CONFIG_HEADER_BYTES] {
        return Err(Corrupt::new("label", "config checksum mismatch"));
    }
    serde_json::from_slice(json).map_err(|e| Corrupt::new("label", format!("config: {e}")))
}

fn bad(detail: String) -> Corrupt {
    Corrupt::new("label", detail)
}

impl LabelConfig {
    /// Check that the config describes a vdev tree Tarn can build (OpenZFS checks the
    /// same things while parsing the nvlist in `vdev_alloc` and `spa_config_valid`):
    /// a "root" with 1..=[`TOP_VDEVS_MAX`] top-level children whose ids are their
    /// positions; every top-level vdev (other than a hole) has an `ashift` in
    /// [`ASHIFT_MIN`]..=[`ASHIFT_MAX`] and a size in 1..=[`VDEV_ASIZE_MAX_BYTES`];
    /// raidz has 1..=3 parity and more children than parity; mirrors, replacing and
    /// spare nodes have 1..=[`VDEV_CHILDREN_MAX`] children; leaves are "file" or
    /// "disk" without children; holes only at the top; no two nodes share a GUID
    /// (spares may name a leaf of the tree they are in use in); the tree is at most
    /// [`VDEV_TREE_DEPTH_MAX`] deep. Errors: `Corrupt { kind: "label" }` naming the
    /// first violation.
    pub fn validate(&self) -> Result<(), Corrupt> {
        let root = &self.vdev_tree;
        if root.kind != "root" {
            return Err(bad(format!("vdev tree root has kind '{}'", root.kind)));
        }
        if root.children.is_empty() || root.children.len() > TOP_VDEVS_MAX {
            return Err(bad(format!("{} top-level vdevs (1..={TOP_VDEVS_MAX})", root.children.len())));
        }
        if root.spares.len() > SPARES_MAX {
            return Err(bad(format!("{} spares (at most {SPARES_MAX})", root.spares.len())));
        }
        let mut guids = std::collections::HashSet::new();
        guids.insert(root.guid);
        for (i, top) in root.children.iter().enumerate() {
            if top.id != i as u64 {
                return Err(bad(format!("top-level vdev {i} records id {}", top.id)));
            }
            if top.is_hole() {
                if !top.children.is_empty() {
                    return Err(bad(format!("hole {i} has children")));
                }
                continue;
            }
            if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&top.ashift) {
                return Err(bad(format!("top-level vdev {i}: ashift {} outside {ASHIFT_MIN}..={ASHIFT_MAX}", top.ashift)));
            }
            if top.asize_bytes == 0 || top.asize_bytes > VDEV_ASIZE_MAX_BYTES {
                return Err(bad(format!("top-level vdev {i}: size {} bytes", top.asize_bytes)));
            }
            validate_node(top, 1, &mut guids)?;
        }
        if root.l2cache.len() > SPARES_MAX {
            return Err(bad(format!("{} cache devices (at most {SPARES_MAX})", root.l2cache.len())));
        }
        for c in &root.l2cache {
            if !is_leaf_kind(&c.kind) || !c.children.is_empty() || c.guid == 0 {
                return Err(bad(format!("cache device {} is not a leaf", c.guid)));
            }
            if c.ashift != 0 && !(ASHIFT_MIN..=ASHIFT_MAX).contains(&c.ashift) {
                return Err(bad(format!("cache device {}: ashift {}", c.guid, c.ashift)));
            }
            if !guids.insert(c.guid) {
                return Err(bad(format!("cache device GUID {} listed twice", c.guid)));
            }
        }
        let mut spare_guids = std::collections::HashSet::new();
        for s in &root.spares {
            if !is_leaf_kind(&s.kind) || !s.children.is_empty() || s.guid == 0 {
                return Err(bad(format!("spare {} is not a leaf", s.guid)));
            }
            if s.ashift != 0 && !(ASHIFT_MIN..=ASHIFT_MAX).contains(&s.ashift) {
                return Err(bad(format!("spare {}: ashift {}", s.guid, s.ashift)));
            }
            if !spare_guids.insert(s.guid) {
                return Err(bad(format!("spare GUID {} listed twice", s.guid)));
            }
        }
        Ok(())
    }
}

fn is_leaf_kind(kind: &str) -> bool {
    matches!(kind, "file" | "disk")
}

/// Check one node below the root (`depth` 1 = top-level) and its subtree.
fn validate_node(v: &VdevConfig, depth: usize, guids: &mut std::collections::HashSet<u64>) -> Result<(), Corrupt> {
    if depth > VDEV_TREE_DEPTH_MAX {
        return Err(bad(format!("vdev tree deeper than {VDEV_TREE_DEPTH_MAX}")));
    }
    if v.guid == 0 {
        return Err(bad(format!("vdev '{}' has GUID 0", v.kind)));
    }
    if !guids.insert(v.guid) {
        return Err(bad(format!("GUID {} appears twice in the vdev tree", v.guid)));
    }
    if v.ashift != 0 && !(ASHIFT_MIN..=ASHIFT_MAX).contains(&v.ashift) {
        return Err(bad(format!("vdev {}: ashift {} outside {ASHIFT_MIN}..={ASHIFT_MAX}", v.guid, v.ashift)));
    }
    let n = v.children.len();
    match v.kind.as_str() {
        k if is_leaf_kind(k) => {
            if n != 0 {
                return Err(bad(format!("leaf {} has {n} children", v.guid)));
            }
            return Ok(());
        }
        "raidz" => {
            if !(1..=RAIDZ_PARITY_MAX).contains(&v.nparity) {
                return Err(bad(format!("raidz {}: nparity {} outside 1..={RAIDZ_PARITY_MAX}", v.guid, v.nparity)));
            }
            if n <= v.nparity as usize || n > VDEV_CHILDREN_MAX {
                return Err(bad(format!("raidz{} {} with {n} children", v.nparity, v.guid)));
            }
        }
        "mirror" | "replacing" | "spare" => {
            if n == 0 || n > VDEV_CHILDREN_MAX {
                return Err(bad(format!("{} {} with {n} children", v.kind, v.guid)));
            }
        }
        other => return Err(bad(format!("vdev {} has unknown kind '{other}'", v.guid))),
    }
    for c in &v.children {
        validate_node(c, depth + 1, guids)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn offsets() {
        let o = label_offsets(64 << 20);
        assert_eq!(o, [0, 256 << 10, (64 << 20) - (512 << 10), (64 << 20) - (256 << 10)]);
        assert_eq!(label_offsets((64 << 20) + 1000), o);
    }
    #[test]
    fn config_roundtrip_and_damage() {
        let cfg = LabelConfig {
            version: 1,
            name: "tank".into(),
            pool_guid: 1,
            guid: 2,
            top_guid: 3,
            txg: 4,
            state: PoolState::Active,
            hostname: "h".into(),
            features_for_read: vec![],
            vdev_tree: VdevConfig {
                kind: "root".into(),
                id: 0,
                guid: 1,
                path: None,
                nparity: 0,
                ashift: 0,
                asize_bytes: 0,
                is_log: false,
                children: vec![VdevConfig::hole(0)],
                ..VdevConfig::default()
            },
        };
        let mut b = encode_config(&cfg).unwrap();
        assert_eq!(decode_config(&b).unwrap(), cfg);
        let n = b.len();
        b[n - 3] ^= 0x20;
        assert!(decode_config(&b).is_err());
    }

    #[test]
    fn log_flag_and_holes_in_json() {
        let log = VdevConfig {
            kind: "file".into(),
            id: 1,
            guid: 7,
            path: Some("/v/slog".into()),
            is_log: true,
            ..VdevConfig::default()
        };
        let json = serde_json::to_string(&log).unwrap();
        assert!(json.contains("\"is_log\":true"), "{json}");
        // Absent means false, and false is not written (older labels stay readable).
        let normal = VdevConfig { is_log: false, ..log.clone() };
        assert!(!serde_json::to_string(&normal).unwrap().contains("is_log"));
        let old: VdevConfig = serde_json::from_str(r#"{"kind":"file","id":0,"guid":3}"#).unwrap();
        assert!(!old.is_log);
        let hole = VdevConfig::hole(2);
        assert!(hole.is_hole() && hole.leaves().is_empty());
        assert_eq!(
            serde_json::to_string(&hole).unwrap(),
            r#"{"kind":"hole","id":2,"guid":0,"nparity":0,"ashift":0,"asize_bytes":0}"#
        );
        assert_eq!(log.leaves().len(), 1);
    }

    #[test]
    fn repair_fields_in_json() {
        let leaf = VdevConfig {
            kind: "file".into(),
            id: 0,
            guid: 9,
            ..VdevConfig::default()
        };
        // Defaults are not written, so labels without them read back the same.
        let json = serde_json::to_string(&leaf).unwrap();
        assert!(!json.contains("offline") && !json.contains("dtl") && !json.contains("spares") && !json.contains("faulted"));
        let marked = VdevConfig {
            offline: true,
            dtl: vec![(5, 9), (12, u64::MAX)],
            ..leaf.clone()
        };
        let json = serde_json::to_string(&marked).unwrap();
        assert!(json.contains("\"offline\":true") && json.contains("[12,18446744073709551615]"), "{json}");
        assert_eq!(serde_json::from_str::<VdevConfig>(&json).unwrap(), marked);
        let root = VdevConfig {
            kind: "root".into(),
            spares: vec![leaf],
            ..VdevConfig::default()
        };
        let back: VdevConfig = serde_json::from_str(&serde_json::to_string(&root).unwrap()).unwrap();
        assert_eq!(back.spares.len(), 1);
        assert!(back.leaves().iter().all(|l| l.guid != 9));
    }

    fn leaf(guid: u64) -> VdevConfig {
        VdevConfig {
            kind: "file".into(),
            guid,
            ashift: 12,
            ..VdevConfig::default()
        }
    }

    fn pool_of(tops: Vec<VdevConfig>) -> LabelConfig {
        LabelConfig {
            version: 3,
            name: "tank".into(),
            pool_guid: 1,
            guid: 2,
            top_guid: 3,
            txg: 4,
            state: PoolState::Active,
            hostname: "h".into(),
            features_for_read: vec![],
            vdev_tree: VdevConfig {
                kind: "root".into(),
                guid: 1,
                children: tops,
                ..VdevConfig::default()
            },
        }
    }

    fn raidz(nparity: u8, n: u64) -> VdevConfig {
        VdevConfig {
            kind: "raidz".into(),
            guid: 100,
            nparity,
            ashift: 12,
            asize_bytes: 1 << 30,
            children: (0..n).map(|i| leaf(200 + i)).collect(),
            ..VdevConfig::default()
        }
    }

    /// Each impossible tree is refused by `decode_config` (after the checksum passed),
    /// and the valid one next to it is accepted: the checks are semantic, not a
    /// refusal of everything.
    #[test]
    fn semantic_checks_refuse_crafted_trees() {
        let good = pool_of(vec![raidz(2, 4)]);
        assert_eq!(decode_config(&encode_config(&good).unwrap()).unwrap(), good);
        let mut cases: Vec<(&str, LabelConfig)> = Vec::new();
        cases.push(("nparity 0", pool_of(vec![raidz(0, 4)])));
        cases.push(("nparity 4", pool_of(vec![raidz(4, 6)])));
        cases.push(("raidz2 of 2", pool_of(vec![raidz(2, 2)])));
        let mut wide = raidz(1, 2);
        wide.children = (0..300).map(|i| leaf(1000 + i)).collect();
        cases.push(("300 children", pool_of(vec![wide])));
        for a in [0u8, 8, 17, 255] {
            let mut r = raidz(1, 3);
            r.ashift = a;
            cases.push(("ashift", pool_of(vec![r])));
        }
        let mut dup = raidz(1, 3);
        dup.children[2].guid = dup.children[0].guid;
        cases.push(("duplicate leaf guid", pool_of(vec![dup])));
        let mut dup_top = raidz(1, 3);
        dup_top.guid = 1;
        cases.push(("top guid = root guid", pool_of(vec![dup_top])));
        let mut mirror0 = raidz(1, 3);
        mirror0.kind = "mirror".into();
        mirror0.children.clear();
        cases.push(("empty mirror", pool_of(vec![mirror0])));
        let mut huge = raidz(1, 3);
        huge.asize_bytes = u64::MAX;
        cases.push(("absurd size", pool_of(vec![huge])));
        let mut badid = raidz(1, 3);
        badid.id = 7;
        cases.push(("top id not its index", pool_of(vec![badid])));
        let mut weird = raidz(1, 3);
        weird.kind = "draid".into();
        cases.push(("unknown kind", pool_of(vec![weird])));
        let mut deep = leaf(9);
        for g in 10..20 {
            deep = VdevConfig {
                kind: "spare".into(),
                guid: g,
                ashift: 12,
                asize_bytes: 1 << 30,
                children: vec![deep],
                ..VdevConfig::default()
            };
        }
        cases.push(("too deep", pool_of(vec![deep])));
        cases.push(("no top-level vdev", pool_of(vec![])));
        let mut many = pool_of(vec![]);
        many.vdev_tree.children = (0..=TOP_VDEVS_MAX as u64).map(VdevConfig::hole).collect();
        cases.push(("too many top-level vdevs", many));
        let mut spares = pool_of(vec![raidz(1, 3)]);
        spares.vdev_tree.spares = vec![leaf(500), leaf(500)];
        cases.push(("spare listed twice", spares));
        for (what, cfg) in cases {
            let b = encode_config(&cfg).unwrap();
            assert!(decode_config_unchecked(&b).is_ok(), "{what}: checksum and JSON pass");
            let e = decode_config(&b).expect_err(what);
            assert_eq!(e.kind, "label", "{what}");
        }
        // A spare in use is also a leaf of the tree: same GUID, accepted.
        let mut in_use = pool_of(vec![raidz(1, 3)]);
        in_use.vdev_tree.spares = vec![leaf(201)];
        assert!(in_use.validate().is_ok());
    }
}
