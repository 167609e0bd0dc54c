//! Helpers shared by zio's integration tests: a file leaf, a pipeline over one vdev,
//! and the write properties of an uncompressed, fletcher4-summed file data block.

// Each test binary uses only some of these.
#![allow(dead_code)]

use std::sync::Arc;
use tarn_metaslab::{SpaceMap, VdevSpace};
use tarn_phys::{ChecksumAlg, CompressSetting, ObjectType};
use tarn_vdev::leaf::Leaf;
use tarn_vdev::Vdev;
use tarn_zio::{ArcCache, WriteProps, Zio};

/// A leaf vdev (id 0, ashift 12) over a new sparse file `name` of `size_bytes` in `dir`.
pub fn leaf(dir: &tempfile::TempDir, name: &str, guid: u64, size_bytes: u64) -> Arc<Vdev> {
    let p = dir.path().join(name);
    std::fs::File::create(&p).unwrap().set_len(size_bytes).unwrap();
    Arc::new(Vdev::new_leaf(0, guid, 12, p.display().to_string(), Some(Leaf::open(&p).unwrap())))
}

/// A pipeline over the single top-level vdev `top` (all of its space allocatable)
/// with a private ARC of `arc_bytes`.
pub fn zio_over(top: Arc<Vdev>, arc_bytes: u64) -> Zio {
    let space = SpaceMap::new(vec![VdevSpace::new(top.asize_bytes(), top.alloc_align_bytes())]);
    Zio::with_arc(vec![top], space, Arc::new(ArcCache::with_max(arc_bytes)))
}

/// Properties of a level-0 file data block born in `txg`: one copy, no compression,
/// fletcher4, no dedup.
pub fn data_props(txg: u64) -> WriteProps {
    WriteProps {
        otype: ObjectType::FileData,
        level: 0,
        compression: CompressSetting::OFF,
        checksum: ChecksumAlg::Fletcher4,
        copies: 1,
        txg,
        fill: 1,
        nop_prev: None,
        dedup: tarn_zio::Dedup::Off,
    }
}

/// Deterministic incompressible bytes: [`tarn_testkit::pattern`].
// Not every test binary that includes this module uses it.
#[allow(unused_imports)]
pub use tarn_testkit::pattern;
