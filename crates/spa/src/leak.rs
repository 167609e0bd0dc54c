//! The pool's leak check: `zdb -b` in miniature.
//!
//! Theory. In a quiet pool (the last txg synced, nothing changed since), every
//! allocated byte of every normal and log vdev belongs to exactly one block that
//! something names, and every block something names is allocated. "Something" is:
//!
//! - the space structures of the last synced txg (metaslab root, directory pages,
//!   condensed maps, log blocks: `SpaceMap::structure_bps`);
//! - the MOS tree of the last synced txg, every object of it: directory and name
//!   ZAPs, history, property lists, dataset records, dead lists;
//! - the object-set tree of every dataset record in that MOS: heads, snapshots and
//!   clones alike (found by walking the synced MOS, not the in-memory directory);
//! - every intent-log block an open dataset's [`tarn_zil::Zilog`] holds (its chain,
//!   the pre-allocated tail, claimed or retired chains awaiting their free, and the
//!   data blocks of indirect write records).
//!
//! A snapshot shares every block born before it with its head, and a clone shares its
//! origin's: a block named by several dataset trees is counted once, by DVA (the
//! pointers must agree on physical birth txg, checksum and sizes). Pointers of
//! different logical births to one block are clones (`copy_file_range`): the block
//! reference table must have an entry for it, and every entry there must name a
//! block some tree names. Reference counts are checked too: each pointer is counted
//! once, in the tree where it was born (born after that record's `prev_snap_txg`,
//! as OpenZFS zdb's birth-pruned walk counts), and a dedup entry's refcount must
//! equal the pointers to its block, a block reference table entry's must equal them
//! less one, and a block named by several pointers must be in one of the tables.
//! Two *different* block
//! pointers naming the same DVA, one DVA named twice outside the dataset trees, or
//! two blocks overlapping, are a double allocation. Dead lists are checked too: every entry must still be named by some
//! tree (a dead-list entry is a block a snapshot holds; one that is not reachable was
//! freed while still listed, and destroying that snapshot would free it again), their
//! byte totals must match their entries, and every dead list must belong to exactly
//! one dataset record.
//!
//! Cost: every tree is walked in full (indirect and dnode blocks are read, file data
//! is not), so a block shared by `k` snapshots is visited `k` times. It is a test and
//! debugging tool, not something the pool runs by itself.
//!
//! Called by: tests (`crates/spa/tests`), after a sync.

use crate::dsl::DslDatasetPhys;
use crate::pool::Pool;
use crate::snapshot::{bytes_born_after, deadlist_header, deadlist_read};
use std::collections::{BTreeMap, BTreeSet};
use tarn_dmu::objset::Objset;
use tarn_dmu::ObjectStore;
use tarn_metaslab::AllocClass;
use tarn_phys::{BlkPtr, Checksum, Dva, ObjectType};

/// Who names a block (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    SpaceMap,
    Mos,
    /// Object-set tree of the dataset record with this MOS object id.
    Dataset(u64),
    /// Intent log of the dataset record with this MOS object id.
    Zil(u64),
}

/// What identifies a block beyond its place: two names of one place must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ident {
    Block {
        birth_txg: u64,
        checksum: Checksum,
        psize_bytes: u32,
    },
    /// An intent-log block (named by a DVA only).
    LogBlock,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    asize_bytes: u64,
    ident: Ident,
    owner: Owner,
    /// Logical birth txg of the first pointer seen naming it (0 for log blocks).
    birth_txg: u64,
    /// Dataset-tree pointers naming it, each counted in the one tree where it was
    /// born (see [`Walk::floor_txg`]): what the dedup or block reference table must
    /// count.
    references: u64,
}

/// What [`Pool::leak_check`] found in a pool that passed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// Distinct blocks' DVAs counted (a block shared by several trees once).
    pub dvas: u64,
    /// Allocated bytes they cover (normal and log vdevs; equal to the space maps').
    pub allocated_bytes: u64,
    /// Dataset records walked: heads, snapshots and clones.
    pub datasets: u64,
    /// Of those, snapshots.
    pub snapshots: u64,
    /// Dead-list entries checked.
    pub deadlist_entries: u64,
    /// Intent-log block DVAs and indirect-write blocks counted.
    pub zil_blocks: u64,
    /// Of `allocated_bytes`: what dataset trees (heads, snapshots, clones) name.
    pub dataset_bytes: u64,
    /// Of `allocated_bytes`: the MOS tree (dead lists and records included).
    pub mos_bytes: u64,
    /// Of `allocated_bytes`: the space structures.
    pub space_map_bytes: u64,
    /// Of `allocated_bytes`: intent-log blocks and their indirect data.
    pub zil_bytes: u64,
}

struct Walk<'a> {
    pool: &'a Pool,
    seen: BTreeMap<(u32, u64), Seen>,
    /// While a dataset tree is walked, its record's `prev_snap_txg`: a pointer born
    /// after it belongs to this tree alone, an older one to an older snapshot (or a
    /// clone's origin), which counts it (OpenZFS zdb's walk, pruned by birth, counts
    /// each reference once the same way).
    floor_txg: Option<u64>,
}

impl Walk<'_> {
    fn name(&self, owner: Owner) -> String {
        let ds = |obj: u64| {
            let d = self.pool.dir.lock();
            d.datasets
                .iter()
                .chain(d.snaps.iter())
                .find(|(_, r)| r.obj == obj)
                .map(|(n, _)| format!("'{n}'"))
                .unwrap_or_else(|| format!("record {obj}"))
        };
        match owner {
            Owner::SpaceMap => "the space structures".into(),
            Owner::Mos => "the MOS".into(),
            Owner::Dataset(obj) => format!("dataset {}", ds(obj)),
            Owner::Zil(obj) => format!("the intent log of {}", ds(obj)),
        }
    }

    /// Count DVA `d` of a block named by `owner`; `birth_txg` is the naming pointer's
    /// logical birth, and `counted` whether a table (block reference table or dedup
    /// table) counts the block's several pointers.
    fn add_dva(&mut self, d: &Dva, ident: Ident, psize_bytes: Option<u32>, owner: Owner, birth_txg: u64, counted: bool) -> Result<(), String> {
        let nvdevs = self.pool.zio.vdevs().len();
        if d.vdev as usize >= nvdevs {
            return Err(format!("{}: block on vdev {}, which does not exist", self.name(owner), d.vdev));
        }
        if let Some(psize) = psize_bytes {
            let want = self.pool.zio.asize_of(d.vdev, u64::from(psize));
            if d.asize_bytes != want {
                return Err(format!(
                    "{}: block at vdev {} offset {} has asize {}, its psize {psize} needs {want}",
                    self.name(owner),
                    d.vdev,
                    d.offset_bytes,
                    d.asize_bytes
                ));
            }
        }
        let key = (d.vdev, d.offset_bytes);
        if let Some(prev) = self.seen.get(&key) {
            // Only dataset trees share blocks (a snapshot with its head, a clone with
            // its origin); anything else naming one place twice is an error.
            let shared = matches!((prev.owner, owner), (Owner::Dataset(_), Owner::Dataset(_)));
            if shared && prev.ident == ident && prev.asize_bytes == d.asize_bytes {
                // Two pointers of different births to one block: a clone
                // (copy_file_range) or a dedup hit, which a table must count.
                if prev.birth_txg != birth_txg && !counted {
                    return Err(format!(
                        "vdev {} offset {}: named by pointers born in txgs {} and {} without a block reference or dedup table entry",
                        d.vdev, d.offset_bytes, prev.birth_txg, birth_txg
                    ));
                }
                return Ok(());
            }
            return Err(format!(
                "vdev {} offset {}: two different blocks, named by {} and by {} (double allocation)",
                d.vdev,
                d.offset_bytes,
                self.name(prev.owner),
                self.name(owner)
            ));
        }
        self.seen.insert(
            key,
            Seen {
                asize_bytes: d.asize_bytes,
                ident,
                owner,
                birth_txg,
                references: 0,
            },
        );
        Ok(())
    }

    fn add_bp(&mut self, bp: &BlkPtr, owner: Owner) -> Result<(), String> {
        if bp.is_hole() {
            return Ok(());
        }
        let ident = ident_of(bp);
        // A deduplicated pointer is counted by its table entry when it has one
        // (same DVAs); without one (pruned) it is an ordinary block.
        let counted = (bp.dedup && self.pool.zio.ddt().lookup(&tarn_zio::ddt::DdtKey::of(bp)).is_some_and(|e| e.dva == bp.dva))
            || self.pool.zio.brt().get(bp.dva[0].vdev, bp.dva[0].offset_bytes).is_some();
        for d in bp.dvas() {
            self.add_dva(d, ident, Some(bp.psize_bytes), owner, bp.birth_txg, counted)?;
        }
        if self.floor_txg.is_some_and(|floor| bp.birth_txg > floor) {
            if let Some(s) = self.seen.get_mut(&(bp.dva[0].vdev, bp.dva[0].offset_bytes)) {
                s.references += 1;
            }
        }
        Ok(())
    }

    /// Every block of the object set rooted at `root`.
    fn add_tree(&mut self, root: &BlkPtr, owner: Owner) -> Result<(), String> {
        let mut bps = Vec::new();
        tarn_dmu::traverse::traverse(&self.pool.zio, root, &mut |bp| bps.push(*bp)).map_err(|e| format!("{}: unreadable: {e}", self.name(owner)))?;
        for bp in &bps {
            self.add_bp(bp, owner)?;
        }
        Ok(())
    }

    /// Whether `bp` (every DVA) is a block some tree names.
    fn names(&self, bp: &BlkPtr) -> bool {
        let ident = ident_of(bp);
        bp.dvas().all(|d| {
            self.seen
                .get(&(d.vdev, d.offset_bytes))
                .is_some_and(|s| s.ident == ident && s.asize_bytes == d.asize_bytes)
        })
    }
}

/// A block's identity: its physical birth (a clone's pointer and its source's agree
/// on it), checksum and size.
fn ident_of(bp: &BlkPtr) -> Ident {
    Ident::Block {
        birth_txg: bp.physical_birth_txg(),
        checksum: bp.checksum,
        psize_bytes: bp.psize_bytes,
    }
}

impl Pool {
    /// Walk every block of the last synced txg and compare with the space maps (see
    /// the module theory above): the MOS and all its objects (dead lists included),
    /// every dataset head, snapshot and clone (a block they share counted once), the
    /// space structures, and the blocks of every open intent log. `Err` names the
    /// first problem: a leak (allocated, named by nothing), a block on free or
    /// deferred space, two blocks on the same space, a dead-list entry no tree names,
    /// or a tree that cannot be read.
    ///
    /// Call it on a quiet pool right after [`Pool::sync`]: frees and allocations made
    /// after the last sync (a snapshot destroy not yet synced, say) change the space
    /// maps but not the synced trees. Holds the sync lock for the whole walk.
    pub fn leak_check(&self) -> std::result::Result<LeakReport, String> {
        let _s = self.sync_lock.lock();
        let mut w = Walk {
            pool: self,
            seen: BTreeMap::new(),
            floor_txg: None,
        };
        let mut report = LeakReport::default();
        for bp in self.zio.with_space(|s| s.structure_bps()) {
            w.add_bp(&bp, Owner::SpaceMap)?;
        }
        // The MOS as of the last synced txg (the live one may have unsynced changes).
        let mos_root = self.mos.root_bp();
        w.add_tree(&mos_root, Owner::Mos)?;
        let mos = Objset::open(self.zio.clone(), self.gate.clone(), &mos_root, 0).map_err(|e| format!("the MOS: unreadable: {e}"))?;
        mos.set_readonly(true);
        let mut records: Vec<(u64, DslDatasetPhys)> = Vec::new();
        let mut deadlists: Vec<u64> = Vec::new();
        for obj in 1..mos.object_id_end() {
            let Ok(info) = mos.object_info(obj) else { continue };
            match info.otype {
                ObjectType::DslDataset => {
                    let bonus = mos.bonus(obj).map_err(|e| format!("dataset record {obj}: {e}"))?;
                    let phys = DslDatasetPhys::decode(&bonus).map_err(|e| format!("dataset record {obj}: {e}"))?;
                    records.push((obj, phys));
                }
                ObjectType::Deadlist => deadlists.push(obj),
                _ => {}
            }
        }
        for (obj, phys) in &records {
            w.floor_txg = Some(phys.prev_snap_txg);
            w.add_tree(&phys.rootbp, Owner::Dataset(*obj))?;
            w.floor_txg = None;
            report.datasets += 1;
            report.snapshots += u64::from(phys.is_snapshot());
        }
        // Intent logs: what each open log holds allocated.
        let logs: Vec<(u64, std::sync::Arc<tarn_zil::Zilog>)> = self.zilogs.lock().iter().map(|(k, v)| (*k, v.clone())).collect();
        for (id, zl) in &logs {
            let (dvas, bps) = zl.owned_blocks();
            for d in &dvas {
                w.add_dva(d, Ident::LogBlock, None, Owner::Zil(*id), 0, false)?;
            }
            for bp in &bps {
                w.add_bp(bp, Owner::Zil(*id))?;
            }
            report.zil_blocks += (dvas.len() + bps.len()) as u64;
        }
        // Dead lists: each belongs to one record, and every entry is still named.
        let mut owned: BTreeSet<u64> = BTreeSet::new();
        for (obj, phys) in &records {
            if phys.deadlist_obj != 0 && !owned.insert(phys.deadlist_obj) {
                return Err(format!("dead list {} belongs to two dataset records (one is {obj})", phys.deadlist_obj));
            }
        }
        for dl in &deadlists {
            if !owned.contains(dl) {
                return Err(format!("dead list {dl} belongs to no dataset record"));
            }
            let header = deadlist_header(&*mos, *dl).map_err(|e| e.to_string())?;
            let bytes = header.bytes;
            let entries = deadlist_read(&*mos, *dl).map_err(|e| e.to_string())?;
            let sum: u64 = entries.iter().map(|b| b.asize_total_bytes()).sum();
            if sum != bytes {
                return Err(format!("dead list {dl}: header says {bytes} bytes, its {} entries hold {sum}", entries.len()));
            }
            if let Some((cut_txg, after)) = header.cut {
                let real = bytes_born_after(&entries, cut_txg);
                if real != after {
                    return Err(format!(
                        "dead list {dl}: header says {after} bytes born after txg {cut_txg}, its entries hold {real}"
                    ));
                }
            }
            if let Some(bp) = entries.iter().find(|b| !w.names(b)) {
                return Err(format!(
                    "dead list {dl}: entry born in txg {} at vdev {} offset {} is named by no tree (freed while listed)",
                    bp.birth_txg, bp.dva[0].vdev, bp.dva[0].offset_bytes
                ));
            }
            report.deadlist_entries += entries.len() as u64;
        }
        if let Some(dl) = owned.iter().find(|o| !deadlists.contains(o)) {
            return Err(format!("a dataset record names dead list {dl}, which is not a dead-list object"));
        }
        // Reference counts: a deduplicated block's entry counts every pointer to it;
        // any other block named by n > 1 pointers has a block reference table entry
        // of n - 1, and none when n = 1 (an entry left over would keep it forever).
        let ddt: BTreeMap<(u32, u64), u64> = self
            .zio
            .ddt()
            .entries()
            .into_iter()
            .map(|(_, e)| ((e.dva[0].vdev, e.dva[0].offset_bytes), e.refcount))
            .collect();
        let brt: BTreeMap<(u32, u64), u64> = self.zio.brt().entries().into_iter().map(|(v, o, e)| ((v, o), e.refcount)).collect();
        for (&(v, o), &refcount) in &ddt {
            let Some(s) = w.seen.get(&(v, o)) else {
                return Err(format!("dedup table: the block at vdev {v} offset {o} is named by no tree"));
            };
            if s.references != refcount {
                return Err(format!(
                    "dedup table: the block at vdev {v} offset {o} has refcount {refcount}, the trees hold {} references to it",
                    s.references
                ));
            }
        }
        for (&(v, o), &extra) in &brt {
            let Some(s) = w.seen.get(&(v, o)) else {
                return Err(format!("block reference table: vdev {v} offset {o} is named by no tree"));
            };
            if ddt.contains_key(&(v, o)) || s.references != extra + 1 {
                return Err(format!(
                    "block reference table: the block at vdev {v} offset {o} counts {} references, the trees hold {}",
                    extra + 1,
                    s.references
                ));
            }
        }
        if let Some(((v, o), s)) = w.seen.iter().find(|(k, s)| s.references > 1 && !ddt.contains_key(k) && !brt.contains_key(k)) {
            return Err(format!(
                "vdev {v} offset {o}: named by {} pointers, counted by neither the dedup nor the block reference table",
                s.references
            ));
        }
        // Compare with the space maps, vdev by vdev (copied out first, so that no
        // other lock is taken under the space lock).
        struct VdevState {
            class: AllocClass,
            allocated: tarn_metaslab::RangeTree,
        }
        let vdevs: Vec<VdevState> = self.zio.with_space(|sm| {
            sm.vdevs
                .iter()
                .map(|vs| {
                    let mut allocated = tarn_metaslab::RangeTree::new();
                    if vs.asize_bytes() > 0 {
                        allocated.add(0, vs.asize_bytes());
                    }
                    for (s, l) in vs.free_tree().iter() {
                        allocated.remove(s, l);
                    }
                    for (_, s, l) in vs.deferred_iter() {
                        allocated.remove(s, l);
                    }
                    VdevState { class: vs.class(), allocated }
                })
                .collect()
        });
        let mut prev: Option<(u32, u64, Owner)> = None;
        for (&(v, off), s) in &w.seen {
            if let Some((pv, pend, po)) = prev {
                if pv == v && pend > off {
                    return Err(format!(
                        "vdev {v}: block [{off}, +{}) of {} overlaps a block of {} (double allocation)",
                        s.asize_bytes,
                        w.name(s.owner),
                        w.name(po)
                    ));
                }
            }
            prev = Some((v, off + s.asize_bytes, s.owner));
            report.dvas += 1;
            report.allocated_bytes += s.asize_bytes;
            *match s.owner {
                Owner::SpaceMap => &mut report.space_map_bytes,
                Owner::Mos => &mut report.mos_bytes,
                Owner::Dataset(_) => &mut report.dataset_bytes,
                Owner::Zil(_) => &mut report.zil_bytes,
            } += s.asize_bytes;
        }
        for (i, vs) in vdevs.iter().enumerate() {
            let v = i as u32;
            let named: Vec<(u64, Seen)> = w.seen.range((v, 0)..=(v, u64::MAX)).map(|(&(_, o), s)| (o, *s)).collect();
            if vs.class == AllocClass::Hole {
                if let Some((off, s)) = named.first() {
                    return Err(format!("vdev {i} is a hole, yet {} names a block at offset {off}", w.name(s.owner)));
                }
                continue;
            }
            let mut want = tarn_metaslab::RangeTree::new();
            for (off, s) in &named {
                if !vs.allocated.contains(*off, s.asize_bytes) {
                    return Err(format!(
                        "vdev {i}: block [{off}, +{}) of {} is not allocated in the space map",
                        s.asize_bytes,
                        w.name(s.owner)
                    ));
                }
                want.add(*off, s.asize_bytes);
            }
            // Every named block is allocated and they are disjoint: any other
            // allocated byte is a leak.
            if let Some((s, l)) = vs.allocated.iter().find(|&(s, l)| !want.contains(s, l)) {
                return Err(format!(
                    "vdev {i}: {} bytes allocated, {} named; leak in [{s}, +{l})",
                    vs.allocated.space_bytes(),
                    want.space_bytes()
                ));
            }
        }
        Ok(report)
    }
}
