//! Read-only inspection of a pool for `zdb`: open without writing, and report what is
//! on disk.
//!
//! Theory. `zdb` (OpenZFS `cmd/zdb`) reads a pool's leaves directly, in its own
//! process, and never writes. [`Pool::open_inspect`] is the import path with every
//! leaf opened `O_RDONLY` and without the exclusive lock
//! ([`tarn_vdev::Leaf::open_readonly`]), the pool marked read-only (no label or
//! uberblock write, no sync thread, no scan, no receive cleanup), and the process's
//! table of pool names left alone. The intent log is claimed in memory only (so the
//! leak check counts its blocks); the claim is never written, because nothing is
//! synced and the kernel refuses writes on the descriptors anyway. On a pool the daemon
//! has imported it sees the newest uberblock on disk, that is the last synced txg, and
//! disturbs nothing: it takes no lock and sends no request.
//!
//! The reports here are plain data ([`BlockStats`], [`VdevMetaslabs`],
//! [`DatasetDump`]); the CLI formats them as OpenZFS's zdb does. Every byte comes from
//! disk and is untrusted: walks are bounded (depth by the dnode's level count, work by
//! [`WALK_POINTERS_MAX`]), sizes are checked before allocation, and errors are
//! returned, never panics.
//!
//! Called by: `tarn zdb` (`crates/cli/src/zdb.rs`) and tests.

use crate::dsl::DslDatasetPhys;
use crate::pool::{dmu_err, Pool};
use crate::{ImportOptions, Result, SpaError};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use tarn_dmu::objset::{Objset, INDBLKSHIFT};
use tarn_dmu::ObjectStore;
use tarn_phys::label::VdevConfig;
use tarn_phys::{BlkPtr, DnodePhys, ObjectType, ObjsetPhys, UberblockPhys, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};

/// Most block pointers one object walk ([`Pool::dataset_dump`]) decodes before it
/// gives up: 2^26, some 64 Ti of 1 MiB records. A crafted pool whose indirect blocks
/// all name one child cannot make a walk run for ever.
pub const WALK_POINTERS_MAX: u64 = 1 << 26;

/// Largest block [`Pool::read_raw`] reads: 16 MiB (OpenZFS `SPA_MAXBLOCKSIZE`).
pub const RAW_READ_MAX_BYTES: u64 = 16 << 20;

/// Count and sizes of a set of blocks (one row of `zdb -bb`), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeStats {
    /// Blocks.
    pub count: u64,
    /// Logical bytes.
    pub lsize_bytes: u64,
    /// Physical (compressed) bytes.
    pub psize_bytes: u64,
    /// Allocated bytes, every copy (DVA) counted.
    pub asize_bytes: u64,
}

impl TypeStats {
    fn add(&mut self, bp: &BlkPtr) {
        self.count += 1;
        self.lsize_bytes += u64::from(bp.lsize_bytes);
        self.psize_bytes += u64::from(bp.psize_bytes);
        self.asize_bytes += bp.asize_total_bytes();
    }
}

/// What `zdb -b` counts: every block of the last synced txg once (a block shared by a
/// snapshot and its head, or a clone and its origin, once), by object type.
#[derive(Debug, Clone, Default)]
pub struct BlockStats {
    /// Per object type, in the order of the type's on-disk code.
    pub by_type: Vec<(ObjectType, TypeStats)>,
    /// Sum of every row.
    pub total: TypeStats,
    /// Bytes the space maps say are allocated (normal and log vdevs).
    pub space_map_alloc_bytes: u64,
    /// Pool size in bytes (every top-level vdev's allocatable size).
    pub size_bytes: u64,
}

/// One distinct data block of a simulated dedup table (`zdb -S`): how many block
/// pointers of the pool name blocks with these bytes, and one copy's sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimDdtEntry {
    /// Distinct blocks (by DVA) holding the same logical bytes.
    pub refcount: u64,
    /// Logical size of one.
    pub lsize_bytes: u64,
    /// Physical size of one.
    pub psize_bytes: u64,
    /// Allocated size of one, every copy counted (OpenZFS's DSIZE).
    pub asize_bytes: u64,
}

/// One metaslab, as `zdb -m` prints it (offsets and sizes in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaslabInfo {
    /// Index within its vdev.
    pub index: u64,
    /// Start offset in the vdev.
    pub start_bytes: u64,
    /// Size.
    pub size_bytes: u64,
    /// Free bytes (deferred frees not counted as free).
    pub free_bytes: u64,
    /// Bytes freed but held until their txg is safely past (deferred frees).
    pub deferred_bytes: u64,
    /// Txg of the last flush of its condensed free map (Tarn's per-metaslab space map).
    pub flush_txg: u64,
    /// Fragmentation of its free space, 0–100 (OpenZFS `metaslab_set_fragmentation`).
    pub fragmentation_pct: u64,
    /// Free segments.
    pub free_segments: u64,
    /// Largest free segment.
    pub max_free_segment_bytes: u64,
}

/// The metaslabs of one top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevMetaslabs {
    /// Top-level vdev id.
    pub vdev: u32,
    /// Allocation class ("normal", "log", "hole").
    pub class: String,
    /// log2 of the metaslab size.
    pub ms_shift: u32,
    /// The vdev's fragmentation, 0–100; `None` without metaslabs.
    pub fragmentation_pct: Option<u64>,
    /// Its metaslabs, by index.
    pub metaslabs: Vec<MetaslabInfo>,
}

/// One object of a dataset (a row of `zdb -d`), read from its dnode on disk.
#[derive(Debug, Clone)]
pub struct ObjectDump {
    /// Object id (0 is the meta-dnode).
    pub object: u64,
    /// The dnode as stored.
    pub dnode: DnodePhys,
    /// Level-0 blocks that are not holes.
    pub filled_blocks: u64,
}

impl ObjectDump {
    /// Logical size in bytes: `(maxblkid + 1) × data block size`.
    pub fn lsize_bytes(&self) -> u64 {
        self.dnode.maxblkid.saturating_add(1).saturating_mul(u64::from(self.dnode.datablksz_bytes))
    }

    /// Percentage of the logical size that is not a hole, 0–100.
    pub fn full_pct(&self) -> f64 {
        let n = self.dnode.maxblkid.saturating_add(1);
        100.0 * self.filled_blocks as f64 / n as f64
    }
}

/// A dataset's objects (`zdb -d DATASET`).
#[derive(Debug, Clone)]
pub struct DatasetDump {
    /// Full name.
    pub name: String,
    /// Its dataset record's MOS object id (OpenZFS prints the objset id here).
    pub id: u64,
    /// Txg the dataset was created in.
    pub creation_txg: u64,
    /// Bytes its tree references.
    pub referenced_bytes: u64,
    /// Object-set type (1 MOS, 2 file system).
    pub os_type: u64,
    /// The objects asked for (all when none were named), the meta-dnode first.
    pub objects: Vec<ObjectDump>,
    /// Objects in the dataset (the meta-dnode not counted).
    pub object_count: u64,
}

fn corrupt(c: tarn_phys::Corrupt) -> SpaError {
    SpaError::Corrupt(c.to_string())
}

/// A bounded walk of one dnode's block tree: calls `visit(blkid, bp)` for every
/// level-0 pointer that is not a hole.
struct TreeWalk<'a> {
    pool: &'a Pool,
    pointers_left: u64,
}

impl TreeWalk<'_> {
    fn walk(&mut self, dn: &DnodePhys, visit: &mut dyn FnMut(u64, &BlkPtr) -> Result<()>) -> Result<()> {
        let root = dn.blkptr;
        if root.is_hole() {
            return Ok(());
        }
        let levels = u32::from(dn.nlevels.max(1));
        if u32::from(root.level) + 1 != levels {
            return Err(SpaError::Corrupt(format!("dnode has {levels} levels and a level-{} root", root.level)));
        }
        self.walk_bp(&root, 0, visit)
    }

    fn walk_bp(&mut self, bp: &BlkPtr, blkid: u64, visit: &mut dyn FnMut(u64, &BlkPtr) -> Result<()>) -> Result<()> {
        if self.pointers_left == 0 {
            return Err(SpaError::Corrupt(format!("walk gave up after {WALK_POINTERS_MAX} block pointers")));
        }
        self.pointers_left -= 1;
        if bp.level == 0 {
            return visit(blkid, bp);
        }
        let ind = self.pool.zio.read_block(bp).map_err(|e| SpaError::Io(e.to_string()))?;
        if ind.len() != 1 << INDBLKSHIFT {
            return Err(SpaError::Corrupt(format!("indirect block of {} bytes", ind.len())));
        }
        for (i, chunk) in ind.chunks_exact(BLKPTR_SIZE_BYTES).enumerate() {
            let child = BlkPtr::decode(chunk).map_err(corrupt)?;
            if child.is_hole() {
                continue;
            }
            if child.level + 1 != bp.level {
                return Err(SpaError::Corrupt(format!("level-{} block under a level-{} block", child.level, bp.level)));
            }
            let id = blkid.checked_mul(1 << (INDBLKSHIFT as usize - 7)).and_then(|b| b.checked_add(i as u64));
            let id = id.ok_or_else(|| SpaError::Corrupt("block id overflows".into()))?;
            self.walk_bp(&child, id, visit)?;
        }
        Ok(())
    }
}

impl Pool {
    /// Open pool `name_or_guid` from leaves found under `search_dirs` for inspection
    /// (see the module theory): nothing is ever written, no lock is taken, and a pool
    /// another process has imported can be opened beside it (the view is its last
    /// synced txg). Errors: as [`Pool::import_with`] ("no such pool available", a
    /// damaged label or uberblock, an unreadable MOS).
    pub fn open_inspect(name_or_guid: &str, search_dirs: &[PathBuf]) -> Result<Arc<Pool>> {
        let opts = ImportOptions {
            readonly: true,
            ..ImportOptions::default()
        };
        Self::import_mode(name_or_guid, search_dirs, &opts, true)
    }

    /// The vdev tree from the label the pool was opened with.
    pub fn vdev_config(&self) -> VdevConfig {
        self.config.lock().clone()
    }

    /// The uberblock the pool was opened at (its txg is [`Pool::synced_txg`]), read
    /// again from the leaves: the newest one found with that txg. `None` if no leaf
    /// holds it any more (the daemon has since written many txgs).
    pub fn active_uberblock(&self) -> Option<UberblockPhys> {
        let txg = self.synced_txg();
        let tops = self.zio.vdevs();
        tops.iter()
            .flat_map(|t| t.leaves())
            .filter_map(|l| l.device().map(tarn_vdev::label::read_uberblocks))
            .flatten()
            .filter(|u| u.txg == txg)
            .max_by_key(|u| u.timestamp_s)
    }

    /// Every top-level vdev's metaslabs as the space maps of the last synced txg give
    /// them (`zdb -m`).
    pub fn metaslab_report(&self) -> Vec<VdevMetaslabs> {
        self.zio.with_space(|sm| {
            sm.vdevs
                .iter()
                .enumerate()
                .map(|(i, vs)| VdevMetaslabs {
                    vdev: i as u32,
                    class: format!("{:?}", vs.class()).to_lowercase(),
                    ms_shift: vs.ms_shift(),
                    fragmentation_pct: vs.fragmentation_pct(),
                    metaslabs: vs
                        .metaslabs()
                        .iter()
                        .enumerate()
                        .map(|(j, m)| {
                            let free = m.free_tree();
                            MetaslabInfo {
                                index: j as u64,
                                start_bytes: m.start_bytes(),
                                size_bytes: m.size_bytes(),
                                free_bytes: m.free_bytes(),
                                deferred_bytes: m.deferred_bytes(),
                                flush_txg: m.flush_txg(),
                                fragmentation_pct: m.fragmentation_pct(),
                                free_segments: free.iter().count() as u64,
                                max_free_segment_bytes: free.iter().map(|(_, l)| l).max().unwrap_or(0),
                            }
                        })
                        .collect(),
                })
                .collect()
        })
    }

    /// Count every block of the last synced txg by type (`zdb -b`): the space
    /// structures, the MOS, every dataset record's tree (a block several trees share
    /// counted once, by its first DVA) and the blocks open intent logs hold. Errors:
    /// a tree that cannot be read.
    pub fn block_stats(&self) -> Result<BlockStats> {
        let _s = self.sync_lock.lock();
        let mut seen: HashSet<(u32, u64)> = HashSet::new();
        let mut by: BTreeMap<u8, (ObjectType, TypeStats)> = BTreeMap::new();
        let mut add = |bp: &BlkPtr| {
            if bp.is_hole() || !seen.insert((bp.dva[0].vdev, bp.dva[0].offset_bytes)) {
                return;
            }
            by.entry(bp.otype as u8).or_insert((bp.otype, TypeStats::default())).1.add(bp);
        };
        for bp in self.zio.with_space(|s| s.structure_bps()) {
            add(&bp);
        }
        let mos_root = self.mos.root_bp();
        let walk = |root: &BlkPtr, add: &mut dyn FnMut(&BlkPtr), what: &str| {
            tarn_dmu::traverse::traverse(&self.zio, root, &mut |bp| add(bp)).map_err(|e| SpaError::Corrupt(format!("{what}: unreadable: {e}")))
        };
        walk(&mos_root, &mut add, "the MOS")?;
        let mos = Objset::open(self.zio.clone(), self.gate.clone(), &mos_root, 0).map_err(dmu_err)?;
        mos.set_readonly(true);
        for obj in 1..mos.object_id_end() {
            let Ok(info) = mos.object_info(obj) else { continue };
            if info.otype != ObjectType::DslDataset {
                continue;
            }
            let phys = DslDatasetPhys::decode(&mos.bonus(obj).map_err(dmu_err)?)?;
            walk(&phys.rootbp, &mut add, &format!("dataset record {obj}"))?;
        }
        let logs: Vec<Arc<tarn_zil::Zilog>> = self.zilogs.lock().values().cloned().collect();
        for zl in &logs {
            let (_, bps) = zl.owned_blocks();
            for bp in &bps {
                add(bp);
            }
        }
        let by_type: Vec<(ObjectType, TypeStats)> = by.into_values().collect();
        let mut total = TypeStats::default();
        for (_, t) in &by_type {
            total.count += t.count;
            total.lsize_bytes += t.lsize_bytes;
            total.psize_bytes += t.psize_bytes;
            total.asize_bytes += t.asize_bytes;
        }
        let (space_map_alloc_bytes, size_bytes) = self.zio.with_space(|s| (s.alloc_bytes(), s.asize_bytes()));
        Ok(BlockStats {
            by_type,
            total,
            space_map_alloc_bytes,
            size_bytes,
        })
    }

    /// Simulate dedup over the pool's file data (`zdb -S`): every level-0 file-data
    /// block of every dataset tree, a block shared by snapshots or clones counted once
    /// (by its first DVA), is read and its logical bytes hashed with BLAKE3; blocks with
    /// equal hashes and sizes make one entry, with the number of blocks as refcount.
    /// Reads all file data, so it costs a full read of the pool's data. Errors: a block
    /// or tree that cannot be read.
    pub fn simulated_ddt(&self) -> Result<Vec<SimDdtEntry>> {
        let _s = self.sync_lock.lock();
        let mos_root = self.mos.root_bp();
        let mos = Objset::open(self.zio.clone(), self.gate.clone(), &mos_root, 0).map_err(dmu_err)?;
        mos.set_readonly(true);
        let mut seen: HashSet<(u32, u64)> = HashSet::new();
        let mut data: Vec<BlkPtr> = Vec::new();
        for obj in 1..mos.object_id_end() {
            let Ok(info) = mos.object_info(obj) else { continue };
            if info.otype != ObjectType::DslDataset {
                continue;
            }
            let phys = DslDatasetPhys::decode(&mos.bonus(obj).map_err(dmu_err)?)?;
            tarn_dmu::traverse::traverse(&self.zio, &phys.rootbp, &mut |bp| {
                if bp.level == 0 && bp.otype == ObjectType::FileData && seen.insert((bp.dva[0].vdev, bp.dva[0].offset_bytes)) {
                    data.push(*bp);
                }
            })
            .map_err(|e| SpaError::Corrupt(format!("dataset record {obj}: unreadable: {e}")))?;
        }
        let mut table: BTreeMap<([u8; 32], u32, u32), SimDdtEntry> = BTreeMap::new();
        for bp in &data {
            let bytes = self.zio.read_block(bp).map_err(|e| SpaError::Io(e.to_string()))?;
            let key = (tarn_phys::ChecksumAlg::Blake3.compute(&bytes), bp.lsize_bytes, bp.psize_bytes);
            let e = table.entry(key).or_insert(SimDdtEntry {
                refcount: 0,
                lsize_bytes: u64::from(bp.lsize_bytes),
                psize_bytes: u64::from(bp.psize_bytes),
                asize_bytes: bp.asize_total_bytes(),
            });
            e.refcount += 1;
        }
        Ok(table.into_values().collect())
    }

    /// The objects of dataset or snapshot `name` as its last synced tree holds them
    /// (`zdb -d NAME [OBJECT…]`): all of them when `objects` is empty, else those
    /// (the meta-dnode, object 0, always first). Errors: `NotFound` for an unknown
    /// dataset or object; `Corrupt`/`Io` for a tree that cannot be read.
    pub fn dataset_dump(&self, name: &str, objects: &[u64]) -> Result<DatasetDump> {
        let obj = {
            let d = self.dir.lock();
            d.datasets.get(name).or_else(|| d.snaps.get(name)).map(|r| r.obj)
        };
        let id = obj.ok_or_else(|| SpaError::NotFound(format!("dataset '{name}' does not exist")))?;
        let phys = DslDatasetPhys::decode(&self.mos.bonus(id).map_err(dmu_err)?)?;
        let mut dump = DatasetDump {
            name: name.to_string(),
            id,
            creation_txg: phys.creation_txg,
            referenced_bytes: phys.used_bytes,
            os_type: 0,
            objects: Vec::new(),
            object_count: 0,
        };
        if phys.rootbp.is_hole() {
            return Ok(dump);
        }
        let root = self.zio.read_block(&phys.rootbp).map_err(|e| SpaError::Io(e.to_string()))?;
        let os = ObjsetPhys::decode(&root).map_err(corrupt)?;
        dump.os_type = os.os_type;
        let mut w = TreeWalk {
            pool: self,
            pointers_left: WALK_POINTERS_MAX,
        };
        let meta = os.meta_dnode.clone();
        let mut meta_filled = 0u64;
        let mut found: Vec<ObjectDump> = Vec::new();
        let want: HashSet<u64> = objects.iter().copied().collect();
        let per_block = u64::from(meta.datablksz_bytes) / DNODE_SIZE_BYTES as u64;
        if per_block == 0 {
            return Err(SpaError::Corrupt(format!("meta-dnode block size {}", meta.datablksz_bytes)));
        }
        let mut dnodes: Vec<(u64, DnodePhys)> = Vec::new();
        w.walk(&meta, &mut |blkid, bp| {
            meta_filled += 1;
            let blk = self.zio.read_block(bp).map_err(|e| SpaError::Io(e.to_string()))?;
            for (i, chunk) in blk.chunks_exact(DNODE_SIZE_BYTES).enumerate() {
                let Some(obj) = blkid.checked_mul(per_block).and_then(|b| b.checked_add(i as u64)) else {
                    continue;
                };
                if obj == 0 {
                    continue;
                }
                let dn = DnodePhys::decode(chunk).map_err(corrupt)?;
                if dn.is_free() {
                    continue;
                }
                if want.is_empty() || want.contains(&obj) {
                    dnodes.push((obj, dn));
                }
                dump.object_count += 1;
            }
            Ok(())
        })?;
        for (obj, dn) in dnodes {
            let mut filled = 0u64;
            w.walk(&dn, &mut |_, _| {
                filled += 1;
                Ok(())
            })?;
            found.push(ObjectDump {
                object: obj,
                dnode: dn,
                filled_blocks: filled,
            });
        }
        if let Some(missing) = objects.iter().find(|o| **o != 0 && !found.iter().any(|f| f.object == **o)) {
            return Err(SpaError::NotFound(format!("object {missing} does not exist in '{name}'")));
        }
        dump.objects.push(ObjectDump {
            object: 0,
            dnode: meta,
            filled_blocks: meta_filled,
        });
        dump.objects.extend(found);
        Ok(dump)
    }

    /// `psize_bytes` read at `offset_bytes` of top-level vdev `vdev` as stored (no
    /// checksum to verify against: `zdb -R`). For a mirror the first readable child
    /// answers. Errors: `Invalid` for a vdev that does not exist, a size of 0, over
    /// [`RAW_READ_MAX_BYTES`], or a range past the vdev's end;
    /// `Io` when the device cannot be read.
    pub fn read_raw(&self, vdev: u64, offset_bytes: u64, psize_bytes: u64) -> Result<Vec<u8>> {
        let tops = self.zio.vdevs();
        let v = usize::try_from(vdev)
            .ok()
            .and_then(|i| tops.get(i))
            .ok_or_else(|| SpaError::Invalid(format!("invalid vdev {vdev}")))?;
        if psize_bytes == 0 || psize_bytes > RAW_READ_MAX_BYTES {
            return Err(SpaError::Invalid(format!("invalid block size {psize_bytes}")));
        }
        if offset_bytes.checked_add(psize_bytes).is_none_or(|end| end > v.asize_bytes()) {
            return Err(SpaError::Invalid(format!(
                "offset {offset_bytes:#x} + size {psize_bytes:#x} is past the end of vdev {vdev}"
            )));
        }
        v.read(offset_bytes, psize_bytes, &|_| true).map_err(|e| SpaError::Io(e.to_string()))
    }
}
