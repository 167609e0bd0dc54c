//! # scan — scrub and resilver: one traversal, sorted and aggregated issue
//!
//! Theory. Scrub and resilver are the same walk with a different action per block
//! (DESIGN "Redundancy and repair"; the two-phase *sequential resilver* of
//! `seeds/003`, which OpenZFS calls sorted scan):
//! 1. **Populate.** [`collect`] traverses the pool's block trees — the MOS, the space
//!    map block, then each dataset's object set in id order — and queues one
//!    [`Entry`] per DVA of every block born in `[min_txg, max_txg]`. Subtrees born
//!    before `min_txg` are pruned (a resilver of a leaf that missed txgs 100..=200
//!    never descends into older trees). Memory is bounded: the walk stops after the
//!    object that takes the queue past `batch_max_entries` and returns a
//!    [`Bookmark`] to resume from.
//! 2. **Issue.** [`issue`] sorts each top-level vdev's entries by offset, merges
//!    runs of blocks that are adjacent or separated by at most `gap_max_bytes` into
//!    extents of at most `extent_max_bytes`, and hands each extent to
//!    the top-level vdev, which reads it from each leaf in one I/O, verifies every
//!    block, and rewrites what is damaged or missing. Top-level vdevs are issued in
//!    parallel, each in ascending offset order by two reader threads that stay a few
//!    extents ahead of a finisher thread that verifies and repairs
//!    (`Vdev::scan_plan`, `Vdev::scan_read_planned`, `Vdev::scan_finish`): the
//!    leaves stream while a core
//!    checksums, in reused buffers (a scrub of a mirror spent more CPU faulting in
//!    and zeroing fresh buffers than on its checksums). The *naive* order
//!    (`sorted = false`) issues block by block in traversal order, as ZFS did before
//!    sequential resilver; it is kept for comparison benchmarks.
//!
//! Invariants the caller (spa) provides: the roots come from one synced txg, and
//! frees from the next txg on are held deferred (`SpaceMap::hold_frees_from`) until
//! the batch is issued, so no block queued here can be reallocated and rewritten
//! before the scan reads or repairs it. Blocks born after `max_txg` need nothing:
//! they were written with every leaf present.
//!
//! Low priority: before each extent is read, `throttle` is called; the
//! spa's throttle sleeps while application I/O is active (OpenZFS's `zfs_scan_idle`
//! / `zfs_scrub_delay` scheme), so applications keep their latency and the scan
//! still progresses.
//!
//! Not scanned: intent-log chains (their blocks are short-lived and replay verifies
//! them) and the labels (rewritten every txg).
//!
//! Called by: spa (the scan thread). Calls: dmu (traversal), zio (vdevs), vdev.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use tarn_dmu::traverse::{traverse_resumable, Walked, META_OBJECT};
use tarn_phys::{BlkPtr, ChecksumAlg};
use tarn_vdev::scan::{IoTrace, ScanBlock, ScanFunc};
use tarn_zio::Zio;

/// Dataset id under which the MOS (and the space map block) is walked: it comes first.
pub const MOS_DATASET: u64 = 0;

/// Where a scan resumes: a dataset (its MOS object id; [`MOS_DATASET`] for the
/// MOS) and an object id within it (OpenZFS `zbookmark_phys_t`, coarser).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Bookmark {
    /// Dataset MOS object id; 0 = the MOS.
    pub dataset: u64,
    /// First object not yet visited.
    pub object: u64,
}

/// The trees of one synced txg.
#[derive(Debug, Clone)]
pub struct Roots {
    /// Root of the MOS.
    pub mos: BlkPtr,
    /// Every space-structure block of the txg (metaslab root, directory pages,
    /// condensed maps, space-map log blocks; `metaslab::SpaceMap::structure_bps`).
    pub spacemap: Vec<BlkPtr>,
    /// Each dataset's MOS object id and object-set root, any order.
    pub datasets: Vec<(u64, BlkPtr)>,
}

/// What to scan and how.
#[derive(Debug, Clone)]
pub struct Params {
    /// Scrub or resilver.
    pub func: ScanFunc,
    /// Blocks born before this txg are skipped (resilver: first DTL txg; scrub: 0).
    pub min_txg: u64,
    /// Blocks born after this txg are skipped (the last txg synced at scan start).
    pub max_txg: u64,
    /// Sorted, aggregated issue (true) or the naive traversal order (false).
    pub sorted: bool,
    /// Largest extent handed to a vdev (bytes of address space).
    pub extent_max_bytes: u64,
    /// Largest hole between two blocks of one extent (bytes; read and discarded).
    pub gap_max_bytes: u64,
    /// Queue bound per batch (entries; one entry is about 100 bytes).
    pub batch_max_entries: usize,
}

impl Params {
    /// Defaults for `func` over txgs `[min_txg, max_txg]`: sorted, extents of up to
    /// 2 MiB with holes of up to 64 KiB, batches of up to 1M entries (about 100 MiB).
    pub fn new(func: ScanFunc, min_txg: u64, max_txg: u64) -> Params {
        Params {
            func,
            min_txg,
            max_txg,
            sorted: true,
            extent_max_bytes: 2 << 20,
            gap_max_bytes: 64 << 10,
            batch_max_entries: 1 << 20,
        }
    }
}

/// One DVA of one block, queued for issue.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Top-level vdev id.
    pub vdev: u32,
    /// Offset in the top-level vdev (bytes).
    pub offset_bytes: u64,
    /// Allocated size (bytes).
    pub asize_bytes: u64,
    /// Physical size (bytes).
    pub psize_bytes: u32,
    /// Birth txg.
    pub birth_txg: u64,
    /// Checksum algorithm and value of the physical bytes.
    pub checksum_alg: ChecksumAlg,
    /// Expected checksum.
    pub checksum: tarn_phys::Checksum,
    /// Dataset (MOS object id, 0 = MOS) and object the block belongs to.
    pub dataset: u64,
    /// Object id ([`META_OBJECT`] for object-set metadata).
    pub object: u64,
    /// The whole block pointer (its other DVAs repair a ditto copy no vdev can).
    pub bp: BlkPtr,
}

/// A populate pass's result.
#[derive(Debug, Default)]
pub struct Collected {
    /// Queued DVAs, in traversal order.
    pub entries: Vec<Entry>,
    /// Where the next batch starts; None when the walk reached the end.
    pub next: Option<Bookmark>,
    /// Blocks that could not be read during the walk (their subtrees are lost to
    /// the scan): dataset and object.
    pub unreadable: Vec<(u64, u64)>,
}

/// Walk from `from` and queue the blocks `params` selects (see the crate theory).
///
/// A tree that cannot be read is reported in `unreadable` and skipped; the walk
/// goes on with the next dataset.
pub fn collect(zio: &Zio, roots: &Roots, params: &Params, from: Bookmark) -> Collected {
    let mut out = Collected::default();
    let mut datasets: Vec<(u64, BlkPtr)> = roots.datasets.iter().copied().filter(|(id, _)| *id != MOS_DATASET).collect();
    datasets.sort_by_key(|(id, _)| *id);
    let mut all = vec![(MOS_DATASET, roots.mos)];
    all.extend(datasets);
    if from == Bookmark::default() {
        for bp in &roots.spacemap {
            queue(zio, params, bp, MOS_DATASET, META_OBJECT, &mut out.entries);
        }
    }
    for (ds, root) in all.into_iter().filter(|(ds, _)| *ds >= from.dataset) {
        let start = if ds == from.dataset { from.object } else { 0 };
        let entries = std::cell::RefCell::new(std::mem::take(&mut out.entries));
        let limit = params.batch_max_entries;
        let walked = traverse_resumable(
            zio,
            &root,
            params.min_txg,
            start,
            &mut |bp, object| queue(zio, params, bp, ds, object, &mut entries.borrow_mut()),
            &mut |_| entries.borrow().len() >= limit,
        );
        out.entries = entries.into_inner();
        match walked {
            Ok(Walked::Done) => {}
            Ok(Walked::StoppedBefore(object)) => {
                out.next = Some(Bookmark { dataset: ds, object });
                return out;
            }
            Err(e) => {
                tracing::warn!("scan: dataset {ds}: traversal stopped: {e}");
                out.unreadable.push((ds, META_OBJECT));
            }
        }
    }
    out
}

fn queue(zio: &Zio, params: &Params, bp: &BlkPtr, dataset: u64, object: u64, entries: &mut Vec<Entry>) {
    // A cloned pointer's bytes were written at its physical birth: that is what a
    // resilver's txg range (the DTL) is about.
    let birth = bp.physical_birth_txg();
    if bp.is_hole() || birth < params.min_txg || birth > params.max_txg {
        return;
    }
    for d in bp.dvas() {
        entries.push(Entry {
            vdev: d.vdev,
            offset_bytes: d.offset_bytes,
            asize_bytes: zio.asize_of(d.vdev, bp.psize_bytes as u64),
            psize_bytes: bp.psize_bytes,
            birth_txg: birth,
            checksum_alg: bp.checksum_alg,
            checksum: bp.checksum,
            dataset,
            object,
            bp: *bp,
        });
    }
}

/// Counters of a scan, updated as extents complete (read by `zpool status`).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes (allocated) of blocks queued by traversal.
    pub examined_bytes: AtomicU64,
    /// Bytes (allocated) of blocks issued to vdevs.
    pub issued_bytes: AtomicU64,
    /// Bytes written to repair or resilver.
    pub repaired_bytes: AtomicU64,
    /// Blocks no copy of which verified.
    pub errors: AtomicU64,
}

/// What [`issue`] found besides the counters: the damaged objects.
#[derive(Debug, Default)]
pub struct Issued {
    /// (dataset, object) of every unrecoverable block.
    pub damaged: Vec<(u64, u64)>,
}

/// Group entries into extents: per vdev, sorted by offset, merged per `params`
/// (sorted mode); or one entry per extent in the given order (naive mode).
/// Duplicate DVAs (a block visited twice) are dropped in sorted mode.
pub fn plan(entries: &mut [Entry], params: &Params) -> Vec<(u32, Vec<Entry>)> {
    if !params.sorted {
        return entries.iter().map(|e| (e.vdev, vec![*e])).collect();
    }
    entries.sort_by_key(|e| (e.vdev, e.offset_bytes));
    let mut extents: Vec<(u32, Vec<Entry>)> = Vec::new();
    for e in entries.iter() {
        if let Some((v, ext)) = extents.last_mut() {
            let first = ext[0].offset_bytes;
            let last = ext[ext.len() - 1];
            // Saturating: offsets come from block pointers (the vdev refuses what lies
            // outside its address space).
            let end = last.offset_bytes.saturating_add(last.asize_bytes);
            if *v == e.vdev && e.offset_bytes < end {
                continue; // the same DVA again (or an overlap, which would be a bug elsewhere)
            }
            if *v == e.vdev && e.offset_bytes - end <= params.gap_max_bytes && e.offset_bytes.saturating_add(e.asize_bytes) - first <= params.extent_max_bytes {
                ext.push(*e);
                continue;
            }
        }
        extents.push((e.vdev, vec![*e]));
    }
    extents
}

/// A block's checksum check, owned.
type Verifier = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Reader threads per top-level vdev, each reading one extent at a time (all its
/// leaf reads in flight together) and handing it to the vdev's finisher: while one
/// waits for its slowest leaf read, the other's reads keep the leaves busy. (One
/// reader of two extents at a time left the leaves idle at every group's end: a
/// scrub of a 2 GiB mirror took 1.81 s in the median of nine runs against 1.65 s with
/// two readers; bench/README "Scrub readers").
pub const SCAN_READERS_PER_VDEV: usize = 2;

/// Bytes of leaf reads one [`issue`] may hold in flight over all its top-level vdevs
/// (read, queued or being verified). A vdev's reader waits for room before reading an
/// extent, except when nothing of its vdev is in flight, so every vdev always
/// progresses (the finisher frees what its readers hold) and the worst case is this
/// plus one extent for each vdev that had nothing in flight when it read.
pub const SCAN_IN_FLIGHT_BYTES_MAX: u64 = 32 << 20;

/// The pool-wide bound on scan reads in flight ([`SCAN_IN_FLIGHT_BYTES_MAX`]): bytes
/// held in all and per top-level vdev.
struct InFlight {
    cap_bytes: u64,
    held: std::sync::Mutex<(u64, Vec<u64>)>,
    released: std::sync::Condvar,
}

/// Bytes of one extent's reads held in an [`InFlight`], given back when dropped
/// (after the finisher is done with the extent).
struct Held<'a> {
    budget: &'a InFlight,
    vdev: usize,
    bytes: u64,
}

impl InFlight {
    fn new(cap_bytes: u64, vdevs: usize) -> InFlight {
        InFlight {
            cap_bytes,
            held: std::sync::Mutex::new((0, vec![0; vdevs])),
            released: std::sync::Condvar::new(),
        }
    }

    /// Hold `bytes` for `vdev` if that fits under the cap or the vdev holds nothing.
    #[cfg(test)]
    fn try_hold(&self, vdev: usize, bytes: u64) -> Option<Held<'_>> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        Self::admit(&mut h, self.cap_bytes, vdev, bytes).then(|| Held { budget: self, vdev, bytes })
    }

    /// [`InFlight::try_hold`], waiting for releases until it succeeds.
    fn hold(&self, vdev: usize, bytes: u64) -> Held<'_> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while !Self::admit(&mut h, self.cap_bytes, vdev, bytes) {
            h = self.released.wait(h).unwrap_or_else(|e| e.into_inner());
        }
        Held { budget: self, vdev, bytes }
    }

    fn admit(h: &mut (u64, Vec<u64>), cap_bytes: u64, vdev: usize, bytes: u64) -> bool {
        if h.1[vdev] > 0 && h.0 + bytes > cap_bytes {
            return false;
        }
        h.0 += bytes;
        h.1[vdev] += bytes;
        true
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut h = self.budget.held.lock().unwrap_or_else(|e| e.into_inner());
        h.0 -= self.bytes;
        h.1[self.vdev] -= self.bytes;
        drop(h);
        self.budget.released.notify_all();
    }
}

/// Leaf bytes an extent's reads take at most: its address span from every leaf of a
/// mirror (or the single leaf), or about its span over all the children of a raidz
/// (each child reads its share of the rows).
fn extent_read_bytes(vdev: &tarn_vdev::Vdev, ext: &[Entry]) -> u64 {
    let copies = if vdev.geometry().is_some() { 1 } else { vdev.leaves().len().max(1) as u64 };
    let span = match (ext.first(), ext.last()) {
        (Some(first), Some(last)) => last.offset_bytes.saturating_add(last.asize_bytes) - first.offset_bytes,
        _ => 0,
    };
    span.saturating_mul(copies)
}

/// Read extents that may wait in the channel while the finisher verifies (more wait
/// in its reorder map while an earlier extent is still being read; the bytes of all of
/// them are bounded by [`SCAN_IN_FLIGHT_BYTES_MAX`]).
pub const READ_AHEAD_EXTENTS: usize = 2;

/// Each entry's checksum check.
fn verifiers(ext: &[Entry]) -> Vec<Verifier> {
    ext.iter()
        .map(|e| {
            let (alg, sum) = (e.checksum_alg, e.checksum);
            Box::new(move |d: &[u8]| alg.compute(d) == sum) as Verifier
        })
        .collect()
}

/// The [`ScanBlock`]s of an extent's entries, with their checks from [`verifiers`].
fn scan_blocks<'a>(ext: &[Entry], verifiers: &'a [Verifier]) -> Vec<ScanBlock<'a>> {
    ext.iter()
        .zip(verifiers)
        .map(|(e, f)| ScanBlock {
            offset_bytes: e.offset_bytes,
            psize_bytes: e.psize_bytes as u64,
            birth_txg: e.birth_txg,
            verify: f.as_ref(),
        })
        .collect()
}

/// Issue `entries` (see the crate theory), calling `throttle` before each extent is
/// read; when it returns false the issue stops there (pause, cancel,
/// export: the extents already read are still verified) and the
/// caller must not treat the batch as done. Progress and errors are added to
/// `progress`; every leaf I/O to `trace`.
///
/// Each top-level vdev is issued by [`SCAN_READERS_PER_VDEV`] readers that take its
/// extents in ascending order, one at a time, and read them (`Vdev::scan_plan`,
/// `Vdev::scan_read_planned`) up to [`READ_AHEAD_EXTENTS`] ahead of a finisher that
/// verifies and repairs them as they come (`Vdev::scan_finish`), so the leaves stream
/// while a core checksums. Read buffers are reused across extents; the bytes in flight over all
/// vdevs are bounded by [`SCAN_IN_FLIGHT_BYTES_MAX`].
pub fn issue(zio: &Zio, mut entries: Vec<Entry>, params: &Params, progress: &Progress, trace: &IoTrace, throttle: &(dyn Fn() -> bool + Sync)) -> Issued {
    let vdevs = zio.vdevs();
    let extents = plan(&mut entries, params);
    // Per top-level vdev, in order; vdevs in parallel.
    let mut per_vdev: Vec<Vec<Vec<Entry>>> = vec![Vec::new(); vdevs.len()];
    for (v, ext) in extents {
        if let Some(q) = per_vdev.get_mut(v as usize) {
            q.push(ext);
        }
    }
    let damaged = std::sync::Mutex::new(Vec::new());
    let in_flight = InFlight::new(SCAN_IN_FLIGHT_BYTES_MAX, per_vdev.len());
    let in_flight = &in_flight;
    std::thread::scope(|s| {
        for (v, queue) in per_vdev.into_iter().enumerate().filter(|(_, q)| !q.is_empty()) {
            let vdev: &tarn_vdev::Vdev = &vdevs[v];
            let damaged = &damaged;
            s.spawn(move || {
                // The finisher: owns the buffers' pool so it outlives every read.
                let buffers = tarn_vdev::leaf::RunBuffers::default();
                let buffers = &buffers;
                let queue = std::sync::Mutex::new(queue.into_iter().enumerate());
                let queue = &queue;
                let (tx, rx) = std::sync::mpsc::sync_channel(READ_AHEAD_EXTENTS);
                std::thread::scope(|inner| {
                    for _ in 0..SCAN_READERS_PER_VDEV {
                        let tx = tx.clone();
                        inner.spawn(move || loop {
                            if !throttle() {
                                return;
                            }
                            let readable = !vdev.is_hole() && vdev.state().is_usable();
                            // Taken, admitted and recorded under the queue's lock, so
                            // extents hold their bytes and show in the trace in the
                            // order they were taken (the finisher waits for them in
                            // that order: a later extent never holds bytes an earlier
                            // one waits for). The check is built once, here, and goes
                            // to the finisher with what was read.
                            let (seq, ext, checks, planned, held) = {
                                let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                                let Some((seq, ext)) = q.next() else { return };
                                let held = in_flight.hold(v, extent_read_bytes(vdev, &ext));
                                let checks: Vec<Verifier> = if readable { verifiers(&ext) } else { Vec::new() };
                                let planned = readable.then(|| vdev.scan_plan(params.func, &scan_blocks(&ext, &checks), trace, buffers));
                                (seq, ext, checks, planned, held)
                            };
                            let read = planned.map(tarn_vdev::Vdev::scan_read_planned);
                            if tx.send((seq, (ext, checks, read, held))).is_err() {
                                return;
                            }
                        });
                    }
                    drop(tx);
                    // Finished in the order taken (repairs are written in ascending
                    // order), whichever reader is done first.
                    let mut early = std::collections::BTreeMap::new();
                    let mut next = 0usize;
                    for (seq, item) in rx {
                        early.insert(seq, item);
                        while let Some((ext, checks, read, held)) = early.remove(&next) {
                            next += 1;
                            let r = match read {
                                None => tarn_vdev::scan::ExtentReport {
                                    repaired_bytes: 0,
                                    unrecoverable: (0..ext.len()).collect(),
                                },
                                Some(read) => vdev.scan_finish(&scan_blocks(&ext, &checks), read, trace),
                            };
                            account(zio, &ext, &r, progress, damaged);
                            drop(held);
                        }
                    }
                });
            });
        }
    });
    Issued {
        damaged: damaged.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

/// Count one finished extent in `progress`, heal what another vdev's ditto copy can,
/// and note the damaged objects of what is lost.
fn account(zio: &Zio, ext: &[Entry], r: &tarn_vdev::scan::ExtentReport, progress: &Progress, damaged: &std::sync::Mutex<Vec<(u64, u64)>>) {
    let bytes: u64 = ext.iter().map(|e| e.asize_bytes).sum();
    progress.issued_bytes.fetch_add(bytes, Ordering::Relaxed);
    progress.repaired_bytes.fetch_add(r.repaired_bytes, Ordering::Relaxed);
    // A copy this vdev cannot rebuild may have a ditto copy elsewhere.
    let (healed, lost): (Vec<&Entry>, Vec<&Entry>) = r.unrecoverable.iter().map(|&i| &ext[i]).partition(|e| {
        let dva = tarn_phys::Dva {
            vdev: e.vdev,
            offset_bytes: e.offset_bytes,
            asize_bytes: e.asize_bytes,
        };
        zio.repair_copy(&e.bp, &dva)
    });
    progress.repaired_bytes.fetch_add(healed.iter().map(|e| e.asize_bytes).sum(), Ordering::Relaxed);
    if !lost.is_empty() {
        progress.errors.fetch_add(lost.len() as u64, Ordering::Relaxed);
        let mut d = damaged.lock().unwrap_or_else(|e| e.into_inner());
        d.extend(lost.iter().map(|e| (e.dataset, e.object)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(vdev: u32, off: u64, asize: u64) -> Entry {
        Entry {
            vdev,
            offset_bytes: off,
            asize_bytes: asize,
            psize_bytes: asize as u32,
            birth_txg: 1,
            checksum_alg: ChecksumAlg::Blake3,
            checksum: Default::default(),
            dataset: 0,
            object: 0,
            bp: BlkPtr::HOLE,
        }
    }

    #[test]
    fn in_flight_waits_over_the_cap_unless_the_vdev_holds_nothing() {
        let b = InFlight::new(10, 2);
        let first = b.try_hold(0, 8).expect("room");
        assert!(b.try_hold(0, 4).is_none(), "over the cap while vdev 0 holds bytes");
        // Vdev 1 holds nothing: it may always start one extent, even over the cap.
        let other = b.try_hold(1, 6).expect("an idle vdev always progresses");
        assert!(b.try_hold(1, 1).is_none());
        drop(first);
        let again = b.try_hold(0, 4).expect("6 + 4 fits the cap of 10");
        assert_eq!(b.held.lock().unwrap().0, 10);
        // A blocked hold is woken by a release.
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let b = &b;
            s.spawn(move || {
                let h = b.hold(0, 3);
                tx.send(h.bytes).unwrap();
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(rx.try_recv().is_err(), "10 + 3 is over the cap and vdev 0 holds bytes");
            drop(other);
            assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap(), 3);
        });
        drop(again);
        assert_eq!(*b.held.lock().unwrap(), (0, vec![0, 0]), "every hold given back");
    }

    #[test]
    fn extent_read_bytes_counts_every_mirror_side_and_a_raidz_span_once() {
        use std::sync::Arc;
        use tarn_vdev::Vdev;
        let leaf = |i: u32| Arc::new(Vdev::new_leaf(i, 100 + i as u64, 12, format!("l{i}"), None));
        let k = 1024;
        let group = [vec![entry(0, 0, 128 * k), entry(0, 128 * k, 128 * k)], vec![entry(0, 1 << 20, 4 * k)]];
        let mirror = Vdev::new_mirror(0, 1, 12, vec![leaf(0), leaf(1)]);
        let bytes = |v: &Vdev| group.iter().map(|ext| extent_read_bytes(v, ext)).sum::<u64>();
        assert_eq!(bytes(&mirror), 2 * (256 + 4) * k);
        let raidz = Vdev::new_raidz(0, 1, 12, 1, vec![leaf(0), leaf(1), leaf(2)]);
        assert_eq!(bytes(&raidz), (256 + 4) * k);
    }

    #[test]
    fn plan_and_group_bytes_take_offsets_past_u64_without_overflow() {
        use std::sync::Arc;
        let k = 1024;
        // The first block's end is past u64 (saturated to u64::MAX), so the second,
        // which starts before that, overlaps it and is dropped.
        let mut e = vec![entry(0, u64::MAX - 65535, 128 * k), entry(0, u64::MAX - 4095, 4 * k), entry(0, 0, 4 * k)];
        let ext = plan(&mut e, &Params::new(ScanFunc::Scrub, 0, 10));
        let shape: Vec<Vec<u64>> = ext.iter().map(|(_, x)| x.iter().map(|e| e.offset_bytes).collect()).collect();
        assert_eq!(shape, vec![vec![0], vec![u64::MAX - 65535]]);
        let leaf = |i: u32| Arc::new(tarn_vdev::Vdev::new_leaf(i, 100 + i as u64, 12, format!("l{i}"), None));
        let mirror = tarn_vdev::Vdev::new_mirror(0, 1, 12, vec![leaf(0), leaf(1)]);
        let group: Vec<Vec<Entry>> = ext.into_iter().map(|(_, x)| x).collect();
        assert_eq!(group.iter().map(|ext| extent_read_bytes(&mirror, ext)).sum::<u64>(), 2 * (4 * k + 65535));
    }

    #[test]
    fn plan_sorts_merges_and_dedups() {
        let k = 1024;
        let mut e = vec![
            entry(0, 300 * k, 4 * k),
            entry(1, 0, 4 * k),
            entry(0, 0, 128 * k),
            entry(0, 128 * k, 128 * k),
            entry(0, 0, 128 * k), // the same DVA again
            entry(0, 256 * k + 8 * k, 4 * k),
        ];
        let mut p = Params::new(ScanFunc::Scrub, 0, 10);
        p.gap_max_bytes = 16 * k;
        p.extent_max_bytes = 1 << 20;
        let ext = plan(&mut e, &p);
        let shape: Vec<(u32, Vec<u64>)> = ext.iter().map(|(v, x)| (*v, x.iter().map(|e| e.offset_bytes / k).collect())).collect();
        // 0..256K adjacent, 264K within the 16K gap, 300K beyond it.
        assert_eq!(shape, vec![(0, vec![0, 128, 264]), (0, vec![300]), (1, vec![0])]);
        // Extent size limit.
        p.extent_max_bytes = 200 * k;
        let ext = plan(&mut e, &p);
        assert_eq!(ext.len(), 4);
        // Naive mode keeps traversal order, one block per extent.
        p.sorted = false;
        let mut e2 = vec![entry(0, 300 * k, 4 * k), entry(0, 0, 4 * k)];
        let ext = plan(&mut e2, &p);
        assert_eq!(ext.iter().map(|(_, x)| x[0].offset_bytes / k).collect::<Vec<_>>(), vec![300, 0]);
    }
}
