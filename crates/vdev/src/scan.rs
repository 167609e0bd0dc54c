//! Scan I/O: scrub or resilver one extent of a top-level vdev in a few large I/Os.
//!
//! Theory: the scan engine (crate `tarn-scan`) hands a top-level vdev an *extent*: a
//! run of blocks sorted by offset whose address ranges are adjacent or separated by
//! small gaps. [`Vdev::scan_extent`] reads the whole extent from each leaf it needs
//! with **one** positional read (so a resilver of a disk streams at disk bandwidth, as
//! in the sequential resilver of the seeds), then works block by block in memory:
//! - it finds the block's true bytes the way a normal read does — the first mirror
//!   copy that verifies, or the raidz assembly (plain, then up to `p` columns rebuilt
//!   from parity) that verifies — and, when the extent reads cannot produce it, falls
//!   back to [`Vdev::read_birth`] for that block alone;
//! - it then compares every copy it read with the truth: a copy that differs is
//!   damage (CKSUM on its leaf, unless the leaf's DTL says it was known to miss that
//!   txg) and is rewritten; a leaf that was not read but whose DTL holds the block's
//!   birth txg is a resilver target and is written.
//!
//! Where a block lies on a leaf: a mirror's leaves hold the zero-padded block at its
//! own offset; a raidz block has one column per child it touches (`p + 1 ..= n` of
//! them, of one or two lengths, starting on any child — see [`crate::raidz`]), so the
//! extent read from every raidz child covers child sectors
//! `[start_sector / n, (end_sector − 1) / n]` and each column is sliced out of it by
//! the block's [`crate::raidz::Map`]. Skip sectors are neither checked nor written.
//!
//! The work comes in two halves so that a scan can pipeline them: [`Vdev::scan_read`]
//! (itself [`Vdev::scan_plan`] then [`Vdev::scan_read_planned`], which readers working
//! in parallel call apart, to record their reads in the order they took the extents)
//! does the I/O into buffers a [`RunBuffers`] hands out and takes back, and
//! [`Vdev::scan_finish`] does the verifying and repairing; [`Vdev::scan_extent`] is
//! the two in turn. A mirror block's truth is the verified copy itself, borrowed
//! from the read buffer, unless its padding is not zeros.
//!
//! Writes to each leaf are sorted and coalesced, so a resilvering leaf also sees few
//! large ascending writes. Only block ranges are ever written — never the gaps between
//! blocks, which may be free space that a concurrent txg is allocating.
//!
//! Which leaves are read: a **scrub** reads every usable leaf (every copy must be
//! checked, parity included); a **resilver** reads, per mirror side set or raidz
//! column, the first usable leaf that holds at least one of the extent's blocks, and
//! skips leaves whose DTL covers every block (the targets).
//!
//! Every leaf I/O is recorded in the caller's [`IoTrace`] (count, bytes, and whether it
//! started at or after the previous I/O's offset on that leaf), which is how the scan
//! reports how sequential it was. Leaf counters (`zpool iostat`) count scan I/O too.
//!
//! Called by: the scan engine, with extents of one top-level vdev. Calls: leaves.

use crate::leaf::{AlignedVec, RunBuffers};
use crate::tree::{bump, raidz_solve, Column};
use crate::{Vdev, VdevKind};
use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::HashMap;
use tarn_phys::label::DATA_START_BYTES;

/// One block (one DVA of a block pointer) inside an extent.
pub struct ScanBlock<'a> {
    /// Offset of this DVA in the top-level vdev's address space (bytes).
    pub offset_bytes: u64,
    /// Physical size of the block (bytes); the allocation is `psize_to_asize` of it.
    pub psize_bytes: u64,
    /// Birth txg of the block (selects resilver targets through DTLs).
    pub birth_txg: u64,
    /// The block's checksum check (true when the bytes are the block).
    pub verify: &'a (dyn Fn(&[u8]) -> bool + Sync),
}

/// What a scan does with the blocks it visits (OpenZFS `pool_scan_func_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanFunc {
    /// Verify every copy and parity; rewrite damage.
    Scrub,
    /// Copy blocks onto leaves whose DTL holds their birth txg; rewrite damage seen.
    Resilver,
}

/// What one extent's scan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExtentReport {
    /// Bytes written to leaves to repair damage or fill DTL gaps.
    pub repaired_bytes: u64,
    /// Indices (into the extent's blocks) of blocks no copy of which verified.
    pub unrecoverable: Vec<usize>,
}

/// I/O counts of one leaf during a scan.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LeafTrace {
    /// I/Os issued (reads and writes).
    pub ios: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// I/Os whose offset was at or after the previous I/O's offset on this leaf.
    pub ascending: u64,
    /// Offset of the last I/O (device data-area offset, bytes).
    pub last_offset_bytes: u64,
}

/// Per-leaf I/O record of one scan, keyed by leaf GUID.
#[derive(Debug, Default)]
pub struct IoTrace {
    leaves: Mutex<HashMap<u64, LeafTrace>>,
}

impl IoTrace {
    fn record(&self, leaf_guid: u64, offset_bytes: u64, len_bytes: u64) {
        let mut m = self.leaves.lock();
        let t = m.entry(leaf_guid).or_default();
        if t.ios == 0 || offset_bytes >= t.last_offset_bytes {
            t.ascending += 1;
        }
        t.ios += 1;
        t.bytes += len_bytes;
        t.last_offset_bytes = offset_bytes;
    }

    /// A copy of the per-leaf counts (leaf GUID → counts).
    pub fn snapshot(&self) -> HashMap<u64, LeafTrace> {
        self.leaves.lock().clone()
    }

    /// Sum over all leaves.
    pub fn total(&self) -> LeafTrace {
        self.leaves.lock().values().fold(LeafTrace::default(), |a, t| LeafTrace {
            ios: a.ios + t.ios,
            bytes: a.bytes + t.bytes,
            ascending: a.ascending + t.ascending,
            last_offset_bytes: 0,
        })
    }
}

/// One leaf that holds a copy (mirror) or a column (raidz), and what its extent read gave.
struct Copy<'v> {
    leaf: &'v Vdev,
    /// Whether it was read, and what came back.
    read: Option<Result<AlignedVec, ()>>,
}

impl Copy<'_> {
    /// `len` bytes at leaf offset `off` of what the extent read (which started at leaf
    /// offset `start`) returned, if it succeeded and covers them (a block pointer that
    /// lies about its extent gets `None`, not a panic).
    fn part(&self, start: u64, off: u64, len: u64) -> Option<&[u8]> {
        let rel = usize::try_from(off.checked_sub(start)?).ok()?;
        match &self.read {
            Some(Ok(buf)) => buf.get(rel..rel.checked_add(len as usize)?),
            _ => None,
        }
    }
}

/// An extent's leaf reads planned (and recorded) by [`Vdev::scan_plan`], not yet
/// issued: give it to [`Vdev::scan_read_planned`].
pub struct PlannedRead<'v, 'b> {
    read: ExtentRead<'v, 'b>,
    len_bytes: u64,
}

/// What [`Vdev::scan_read`] read of one extent, for [`Vdev::scan_finish`]; its
/// buffers go back to their [`RunBuffers`] when it is dropped.
pub struct ExtentRead<'v, 'b> {
    /// Leaf offset (data area, bytes) at which every leaf's read started.
    leaf_start: u64,
    /// Per column set (mirror: one), per leaf: what was read.
    copies: Vec<Vec<Copy<'v>>>,
    buffers: &'b RunBuffers,
}

impl Drop for ExtentRead<'_, '_> {
    fn drop(&mut self) {
        for c in self.copies.iter_mut().flatten() {
            if let Some(Ok(buf)) = c.read.take() {
                self.buffers.give(buf);
            }
        }
    }
}

/// A block's true bytes per placement (mirror: the padded block; raidz: each column),
/// borrowed from a read buffer where they can be.
type Truth<'a> = Vec<Cow<'a, [u8]>>;

/// One leaf write of a scan: the leaf, its offset and length (bytes), and the pieces
/// whose concatenation it writes.
type Run<'a> = (&'a Vdev, u64, u64, Vec<&'a [u8]>);

/// Where one column (raidz) or the whole padded block (mirror, leaf) of a block lies:
/// the column set (raidz child, or 0), the leaf offset and the length (bytes).
#[derive(Clone, Copy)]
struct Placement {
    set: usize,
    leaf_offset_bytes: u64,
    size_bytes: u64,
}

impl Vdev {
    /// Scrub or resilver `blocks` (sorted by offset, non-overlapping, all on this
    /// top-level vdev) with one read per needed leaf; see the module theory.
    /// [`Vdev::scan_read`] then [`Vdev::scan_finish`], with buffers of its own.
    ///
    /// Never fails as a whole: a block no copy of which verifies is listed in
    /// `unrecoverable` (and counted as a CKSUM error on this vdev); leaf read and
    /// write errors are counted on the leaves. Panics (a bug) on an empty extent.
    pub fn scan_extent(&self, func: ScanFunc, blocks: &[ScanBlock<'_>], trace: &IoTrace) -> ExtentReport {
        let buffers = RunBuffers::default();
        let read = self.scan_read(func, blocks, trace, &buffers);
        self.scan_finish(blocks, read, trace)
    }

    /// The I/O half of [`Vdev::scan_extent`]: read the extent that holds `blocks`
    /// from every leaf the scan needs (a scrub: every usable leaf; a resilver: one
    /// source per mirror side set or raidz column), all leaves in parallel, into
    /// buffers from `buffers`. What it read goes to [`Vdev::scan_finish`] with the
    /// same `blocks`; a scan may read the next extents while an earlier one is being
    /// finished. Read errors are counted on the leaves and leave that copy out.
    /// Panics (a bug) on an empty extent.
    pub fn scan_read<'v, 'b>(&'v self, func: ScanFunc, blocks: &[ScanBlock<'_>], trace: &IoTrace, buffers: &'b RunBuffers) -> ExtentRead<'v, 'b> {
        Self::scan_read_planned(self.scan_plan(func, blocks, trace, buffers))
    }

    /// The first half of [`Vdev::scan_read`]: which leaves the extent holding
    /// `blocks` is read from, and where, with those reads recorded in `trace` at once
    /// (so that readers working in parallel record their extents in the order they
    /// took them); [`Vdev::scan_read_planned`] does the I/O. Panics (a bug) on an
    /// empty extent.
    pub fn scan_plan<'v, 'b>(&'v self, func: ScanFunc, blocks: &[ScanBlock<'_>], trace: &IoTrace, buffers: &'b RunBuffers) -> PlannedRead<'v, 'b> {
        let (read, len_bytes) = self.plan_read(func, blocks, buffers);
        for set in &read.copies {
            for c in set.iter().filter(|c| c.read.is_some()) {
                trace.record(c.leaf.guid, read.leaf_start, len_bytes);
            }
        }
        PlannedRead { read, len_bytes }
    }

    /// The second half of [`Vdev::scan_read`]: the planned leaf reads, all in
    /// parallel. Read errors are counted on the leaves and leave that copy out.
    pub fn scan_read_planned<'v, 'b>(planned: PlannedRead<'v, 'b>) -> ExtentRead<'v, 'b> {
        let PlannedRead { mut read, len_bytes } = planned;
        // (set, copy) of every leaf read.
        let wanted: Vec<(usize, usize)> = read
            .copies
            .iter()
            .enumerate()
            .flat_map(|(si, set)| set.iter().enumerate().filter(|(_, c)| c.read.is_some()).map(move |(ci, _)| (si, ci)))
            .collect();
        let got = crate::iopool::each_parallel(&wanted, |&(si, ci)| {
            read_leaf(read.copies[si][ci].leaf, read.leaf_start, len_bytes, read.buffers)
        });
        for ((si, ci), r) in wanted.into_iter().zip(got) {
            read.copies[si][ci].read = Some(r);
        }
        read
    }

    /// Which leaves an extent's scan reads, and where: an [`ExtentRead`] whose copies
    /// to read are marked (`read: Some(Err(()))` until read), and the length to read
    /// from each (bytes). Panics (a bug) on an empty extent.
    fn plan_read<'v, 'b>(&'v self, func: ScanFunc, blocks: &[ScanBlock<'_>], buffers: &'b RunBuffers) -> (ExtentRead<'v, 'b>, u64) {
        assert!(!blocks.is_empty(), "empty scan extent");
        let geometry = self.geometry();
        let ext_start = blocks[0].offset_bytes;
        let last = &blocks[blocks.len() - 1];
        // Offsets come from block pointers, which a damaged or crafted pool can set
        // anywhere: an extent whose first or last block fails the vdev's range check
        // (the one every read makes) is not read at all (no read of its length is
        // attempted or allocated); `scan_finish` then reads each block on its own,
        // where the same check reports the bad ones as unrecoverable.
        let in_range = |b: &ScanBlock<'_>| self.check_range(b.offset_bytes, b.psize_bytes).is_ok();
        let ext_end =
            (ext_start <= last.offset_bytes && in_range(&blocks[0]) && in_range(last)).then(|| last.offset_bytes + self.psize_to_asize(last.psize_bytes));
        // The leaf range that holds the extent: every leaf of a mirror holds the same
        // range; a raidz child holds the child sectors of linear sectors
        // [ext_start, ext_end) (the same range on every child, give or take a sector).
        let (leaf_start, leaf_len) = match (&geometry, ext_end) {
            (_, None) => (ext_start, 0),
            (None, Some(ext_end)) => (ext_start, ext_end - ext_start),
            (Some(g), Some(ext_end)) => {
                let (sb, n) = (g.sector_bytes, g.ncols as u64);
                let first = ext_start / sb / n;
                let end = (ext_end.max(ext_start + sb) / sb - 1) / n + 1;
                (first * sb, (end - first) * sb)
            }
        };
        // Column sets: all leaves of a mirror hold the whole block; raidz child c's
        // leaves hold column c.
        let sets: Vec<Vec<&Vdev>> = match &self.kind {
            VdevKind::Raidz { children, .. } => children.iter().map(|c| c.leaves()).collect(),
            _ => vec![self.leaves()],
        };
        let copies: Vec<Vec<Copy<'_>>> = sets
            .iter()
            .map(|set| {
                let useful = |leaf: &Vdev| leaf.state().is_usable() && !blocks.iter().all(|b| leaf.dtl.contains(b.birth_txg));
                // A resilver reads one source per set: a leaf that missed nothing if
                // there is one, else any leaf holding some of the blocks.
                let source = set
                    .iter()
                    .position(|l| useful(l) && l.dtl.is_empty())
                    .or_else(|| set.iter().position(|l| useful(l)));
                set.iter()
                    .enumerate()
                    .map(|(i, &leaf)| {
                        let read = ext_end.is_some() && useful(leaf) && (func == ScanFunc::Scrub || source == Some(i));
                        Copy {
                            leaf,
                            read: read.then_some(Err(())),
                        }
                    })
                    .collect()
            })
            .collect();
        (ExtentRead { leaf_start, copies, buffers }, leaf_len)
    }

    /// The verify-and-repair half of [`Vdev::scan_extent`], for what
    /// [`Vdev::scan_read`] read of the same `blocks`: finds each
    /// block's true bytes, counts and rewrites damaged or missing copies (each
    /// leaf's writes coalesced and in ascending order), and gives the read buffers
    /// back. Never fails as a whole (see [`Vdev::scan_extent`]).
    pub fn scan_finish(&self, blocks: &[ScanBlock<'_>], read: ExtentRead<'_, '_>, trace: &IoTrace) -> ExtentReport {
        let geometry = self.geometry();
        let leaf_start = read.leaf_start;
        let copies = &read.copies;
        let mut report = ExtentReport::default();
        // Every block's truth, kept until the writes are done; each write names a
        // truth and one of its placements, so the bytes are copied once, into the
        // leaf write itself.
        let mut truths: Vec<Truth<'_>> = Vec::new();
        let mut writes: Vec<(usize, usize, u64, usize, usize)> = Vec::new(); // (set, copy, leaf offset, truth, placement)
        for (i, b) in blocks.iter().enumerate() {
            let asize = self.psize_to_asize(b.psize_bytes);
            // Where the block lies, and its true bytes there (a mirror has one
            // placement: the padded block).
            let (places, truth): (Vec<Placement>, Option<Truth<'_>>) = match &geometry {
                None => {
                    let place = Placement {
                        set: 0,
                        leaf_offset_bytes: b.offset_bytes,
                        size_bytes: asize,
                    };
                    // The padded block of the first copy that verifies, as read when
                    // its padding is zeros (no copy of the bytes), else rebuilt.
                    let found = copies[0].iter().find_map(|c| {
                        let d = c.part(leaf_start, b.offset_bytes, b.psize_bytes)?;
                        (b.verify)(d).then(|| match c.part(leaf_start, b.offset_bytes, asize) {
                            Some(padded) if padded[d.len()..].iter().all(|&x| x == 0) => Cow::Borrowed(padded),
                            _ => Cow::Owned(d.to_vec()),
                        })
                    });
                    let truth = found
                        .or_else(|| self.read_birth(b.offset_bytes, b.psize_bytes, b.birth_txg, b.verify).ok().map(Cow::Owned))
                        .map(|d| {
                            if d.len() == asize as usize {
                                vec![d]
                            } else {
                                let mut d = d.into_owned();
                                d.resize(asize as usize, 0);
                                vec![Cow::Owned(d)]
                            }
                        });
                    (vec![place], truth)
                }
                // A block pointer no raidz map can describe (from a corrupt DVA).
                Some(g) if b.psize_bytes == 0 || !b.offset_bytes.is_multiple_of(g.sector_bytes) => (Vec::new(), None),
                Some(g) => {
                    let map = g.map(b.offset_bytes, b.psize_bytes);
                    let places: Vec<Placement> = map
                        .columns
                        .iter()
                        .map(|mc| Placement {
                            set: mc.child,
                            leaf_offset_bytes: mc.child_offset_bytes,
                            size_bytes: mc.size_bytes,
                        })
                        .collect();
                    let cols: Vec<Column> = places
                        .iter()
                        .map(|pl| {
                            let fresh = copies[pl.set]
                                .iter()
                                .filter(|c| !c.leaf.dtl.contains(b.birth_txg))
                                .find_map(|c| c.part(leaf_start, pl.leaf_offset_bytes, pl.size_bytes));
                            match fresh {
                                Some(d) => Column::Read(d.to_vec()),
                                None => Column::Failed,
                            }
                        })
                        .collect();
                    let truth = raidz_solve(&map, &cols, b.verify)
                        .or_else(|| self.read_birth(b.offset_bytes, b.psize_bytes, b.birth_txg, b.verify).ok())
                        .map(|d| map.encode(&d).into_iter().map(Cow::Owned).collect());
                    (places, truth)
                }
            };
            let Some(truth) = truth else {
                bump(&self.stats.checksum_errors, 1);
                report.unrecoverable.push(i);
                continue;
            };
            for (pi, (pl, want)) in places.iter().zip(&truth).enumerate() {
                for (ci, c) in copies[pl.set].iter().enumerate() {
                    if !c.leaf.state().is_usable() {
                        continue;
                    }
                    let missing = c.leaf.dtl.contains(b.birth_txg);
                    let fix = match (&c.read, c.part(leaf_start, pl.leaf_offset_bytes, pl.size_bytes)) {
                        (Some(_), Some(d)) if std::ptr::eq(d, &want[..]) || d == &want[..] => false,
                        (Some(_), Some(_)) => {
                            if !missing {
                                bump(&c.leaf.stats.checksum_errors, 1);
                            }
                            true
                        }
                        (Some(_), None) => true, // the read failed (counted by read_leaf)
                        (None, _) => missing,
                    };
                    if fix {
                        report.repaired_bytes += pl.size_bytes;
                        writes.push((pl.set, ci, pl.leaf_offset_bytes, truths.len(), pi));
                    }
                }
            }
            truths.push(truth);
        }
        // Coalesce each leaf's writes into runs of adjacent ranges.
        writes.sort_by_key(|w| (w.0, w.1, w.2));
        let mut runs: Vec<Run<'_>> = Vec::new();
        let mut last_key = None;
        for (si, ci, off, ti, pi) in writes {
            let data: &[u8] = &truths[ti][pi];
            match runs.last_mut() {
                Some((_, start, len, parts)) if last_key == Some((si, ci)) && *start + *len == off => {
                    parts.push(data);
                    *len += data.len() as u64;
                }
                _ => runs.push((copies[si][ci].leaf, off, data.len() as u64, vec![data])),
            }
            last_key = Some((si, ci));
        }
        // Leaves in parallel; each leaf's runs in ascending order.
        let mut per_leaf: Vec<Vec<Run<'_>>> = Vec::new();
        for run in runs {
            match per_leaf.last_mut() {
                Some(l) if std::ptr::eq(l[0].0, run.0) => l.push(run),
                _ => per_leaf.push(vec![run]),
            }
        }
        crate::iopool::each_parallel(&per_leaf, |leaf_runs| {
            for (leaf, off, _, parts) in leaf_runs {
                write_leaf(leaf, *off, parts, trace);
            }
        });
        report
    }
}

/// One positional read of `len` bytes at data-area offset `off` of a leaf node, into
/// a buffer from `buffers` (the caller records it in the trace).
fn read_leaf(v: &Vdev, off: u64, len: u64, buffers: &RunBuffers) -> Result<AlignedVec, ()> {
    let VdevKind::Leaf(Some(leaf)) = &v.kind else { return Err(()) };
    let mut buf = buffers.take(len as usize);
    match leaf.pread_direct(DATA_START_BYTES + off, &mut buf) {
        Ok(()) => {
            bump(&v.stats.read_ops, 1);
            bump(&v.stats.read_bytes, len);
            Ok(buf)
        }
        Err(_) => {
            buffers.give(buf);
            bump(&v.stats.read_errors, 1);
            Err(())
        }
    }
}

/// One positional write at data-area offset `off` of a leaf node of the
/// concatenation of `parts` (errors are counted).
fn write_leaf(v: &Vdev, off: u64, parts: &[&[u8]], trace: &IoTrace) {
    let VdevKind::Leaf(Some(leaf)) = &v.kind else { return };
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    trace.record(v.guid, off, len);
    match leaf.pwrite_gather(DATA_START_BYTES + off, parts) {
        Ok(()) => {
            bump(&v.stats.write_ops, 1);
            bump(&v.stats.write_bytes, len);
        }
        Err(_) => bump(&v.stats.write_errors, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Leaf;
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    const DEV_BYTES: u64 = 32 << 20;

    fn leaves(dir: &tempfile::TempDir, n: usize) -> (Vec<PathBuf>, Vec<Arc<Vdev>>) {
        let paths: Vec<PathBuf> = (0..n)
            .map(|i| {
                let p = dir.path().join(format!("l{i}"));
                std::fs::File::create(&p).unwrap().set_len(DEV_BYTES).unwrap();
                p
            })
            .collect();
        let nodes = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Arc::new(Vdev::new_leaf(
                    i as u32,
                    100 + i as u64,
                    12,
                    p.display().to_string(),
                    Some(Leaf::open(p).unwrap()),
                ))
            })
            .collect();
        (paths, nodes)
    }

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ (i >> 9) as u8).collect()
    }

    fn flip(p: &PathBuf, off: u64, len: usize) {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
        let mut b = vec![0u8; len];
        f.read_exact_at(&mut b, DATA_START_BYTES + off).unwrap();
        b.iter_mut().for_each(|x| *x = !*x);
        f.write_all_at(&b, DATA_START_BYTES + off).unwrap();
    }

    /// Three adjacent 64 KiB blocks written at 0, 64K, 128K; returns their bytes.
    fn write3(v: &Vdev, stride: u64) -> Vec<Vec<u8>> {
        (0..3u8)
            .map(|i| {
                let d = data(65536, i);
                v.write(i as u64 * stride, &d).unwrap();
                d
            })
            .collect()
    }

    /// Scan blocks laid out every `stride` bytes from offset 0.
    fn scan(v: &Vdev, func: ScanFunc, blocks: &[Vec<u8>], stride: u64, trace: &IoTrace) -> ExtentReport {
        let placed: Vec<(u64, Vec<u8>)> = blocks.iter().enumerate().map(|(i, b)| (i as u64 * stride, b.clone())).collect();
        scan_mixed(v, func, &placed, trace)
    }

    #[test]
    fn mirror_scrub_reads_each_side_once_and_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, nodes) = leaves(&dir, 2);
        let m = Vdev::new_mirror(0, 1, 12, nodes.clone());
        let blocks = write3(&m, 65536);
        flip(&paths[1], 70_000, 1000); // inside block 1 on side 1
        let trace = IoTrace::default();
        let r = scan(&m, ScanFunc::Scrub, &blocks, 65536, &trace);
        assert_eq!(
            r,
            ExtentReport {
                repaired_bytes: 65536,
                unrecoverable: vec![]
            }
        );
        assert_eq!(nodes[1].stats.checksum_errors.load(Ordering::Relaxed), 1);
        assert_eq!(nodes[0].stats.checksum_errors.load(Ordering::Relaxed), 0);
        // One 192 KiB read per side, one 64 KiB repair write on side 1.
        let t = trace.snapshot();
        assert_eq!((t[&100].ios, t[&100].bytes), (1, 196_608));
        assert_eq!((t[&101].ios, t[&101].bytes), (2, 196_608 + 65536));
        let again = IoTrace::default();
        assert_eq!(scan(&m, ScanFunc::Scrub, &blocks, 65536, &again).repaired_bytes, 0);
    }

    #[test]
    fn extents_read_together_then_finished_repair_each_and_reuse_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, nodes) = leaves(&dir, 2);
        let m = Vdev::new_mirror(0, 1, 12, nodes.clone());
        let blocks = write3(&m, 65536);
        // A 1000-byte block (one 4 KiB sector: 3,096 bytes of zero padding) at 1 MiB.
        let small = data(1000, 9);
        m.write(1 << 20, &small).unwrap();
        flip(&paths[1], 70_000, 1000); // inside block 1 on side 1
        flip(&paths[0], (1 << 20) + 2000, 10); // the small block's padding on side 0
        let all: Vec<(u64, Vec<u8>)> = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u64 * 65536, b.clone()))
            .chain([(1 << 20, small.clone())])
            .collect();
        with_scan_blocks(&all, |sb| {
            let buffers = RunBuffers::default();
            let trace = IoTrace::default();
            let mut reads = vec![
                m.scan_read(ScanFunc::Scrub, &sb[..3], &trace, &buffers),
                m.scan_read(ScanFunc::Scrub, &sb[3..], &trace, &buffers),
            ];
            assert_eq!(reads.len(), 2);
            // Both extents' reads were issued before either was finished, in order per leaf.
            for (guid, t) in trace.snapshot() {
                assert_eq!((t.ios, t.ascending, t.bytes), (2, 2, 196_608 + 4096), "leaf {guid}");
            }
            let second = reads.pop().unwrap();
            let first = reads.pop().unwrap();
            let r1 = m.scan_finish(&sb[..3], first, &trace);
            assert_eq!(
                r1,
                ExtentReport {
                    repaired_bytes: 65536,
                    unrecoverable: vec![]
                }
            );
            assert_eq!(buffers.idle_count(), 2, "the first extent's buffers are back");
            // The first copy verifies but its padding is not zeros: rewritten, and counted.
            let r2 = m.scan_finish(&sb[3..], second, &trace);
            assert_eq!(
                r2,
                ExtentReport {
                    repaired_bytes: 4096,
                    unrecoverable: vec![]
                }
            );
            assert_eq!(buffers.idle_count(), 4);
            assert_eq!(nodes[0].stats.checksum_errors.load(Ordering::Relaxed), 1);
            assert_eq!(nodes[1].stats.checksum_errors.load(Ordering::Relaxed), 1);
            let mut pad = vec![1u8; 4096];
            std::fs::File::open(&paths[0])
                .unwrap()
                .read_exact_at(&mut pad, DATA_START_BYTES + (1 << 20))
                .unwrap();
            assert_eq!((&pad[..1000], pad[1000..].iter().all(|&x| x == 0)), (&small[..], true));
            // Reading again reuses the idle buffers, and finds nothing left to repair.
            let again = [
                m.scan_read(ScanFunc::Scrub, &sb[..3], &IoTrace::default(), &buffers),
                m.scan_read(ScanFunc::Scrub, &sb[3..], &IoTrace::default(), &buffers),
            ];
            assert!(buffers.idle_count() == 0, "all four buffers taken again");
            let repaired: u64 = again
                .into_iter()
                .zip([&sb[..3], &sb[3..]])
                .map(|(r, b)| m.scan_finish(b, r, &IoTrace::default()).repaired_bytes)
                .sum();
            assert_eq!(repaired, 0);
        });
    }

    #[test]
    fn an_extent_outside_the_address_space_is_not_read_and_its_blocks_are_unrecoverable() {
        let dir = tempfile::tempdir().unwrap();
        let (_paths, nodes) = leaves(&dir, 2);
        let m = Vdev::new_mirror(0, 1, 12, nodes.clone());
        let blocks = write3(&m, 65536);
        let end = m.asize_bytes();
        // Pointers a crafted pool could hold: past the end of the vdev, and past u64.
        for bad_offset in [end, u64::MAX - 4095] {
            let placed = vec![(0, blocks[0].clone()), (65536, blocks[1].clone()), (bad_offset, blocks[2].clone())];
            let trace = IoTrace::default();
            let r = scan_mixed(&m, ScanFunc::Scrub, &placed, &trace);
            // The two good blocks are still verified (each by its own read), the bad
            // one is reported, and no extent read of the impossible length happened.
            assert_eq!((r.repaired_bytes, r.unrecoverable), (0, vec![2]), "offset {bad_offset}");
            assert!(trace.snapshot().is_empty(), "no extent read: {:?}", trace.snapshot());
        }
    }

    #[test]
    fn resilver_writes_only_the_dtl_leaf_in_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, nodes) = leaves(&dir, 2);
        let m = Vdev::new_mirror(0, 1, 12, nodes.clone());
        let blocks = write3(&m, 65536);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&paths[1])
            .unwrap()
            .write_all_at(&vec![0u8; 1 << 20], DATA_START_BYTES)
            .unwrap();
        nodes[1].dtl.add(1, 10);
        let trace = IoTrace::default();
        let r = scan(&m, ScanFunc::Resilver, &blocks, 65536, &trace);
        assert_eq!(r.repaired_bytes, 3 * 65536);
        let t = trace.snapshot();
        assert_eq!((t[&100].ios, t[&101].ios, t[&101].bytes), (1, 1, 3 * 65536), "{t:?}");
        assert_eq!(nodes[1].stats.checksum_errors.load(Ordering::Relaxed), 0, "a DTL miss is not damage");
        nodes[1].dtl.clear_through(10);
        nodes[0].set_offline(true);
        for (i, b) in blocks.iter().enumerate() {
            assert_eq!(m.read(i as u64 * 65536, 65536, &|d| d == &b[..]).unwrap(), *b);
        }
    }

    #[test]
    fn raidz2_scrub_finds_parity_damage_and_two_bad_columns() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, nodes) = leaves(&dir, 5);
        let rz = Vdev::new_raidz(0, 1, 12, 2, nodes.clone());
        // 64 KiB = 16 data sectors on 3 data columns: 5 full rows and 1 data sector
        // more, so columns of 6, 6, 6, 5, 5 sectors (28) and 2 skip sectors: asize 30
        // sectors = 120 KiB. 30 is a multiple of 5, so every block starts on child 0.
        let stride = rz.psize_to_asize(65536);
        assert_eq!(stride, 30 * 4096);
        let blocks = write3(&rz, stride);
        let col = stride / 5;
        flip(&paths[0], col + 100, 50); // P of block 1 only: data still verifies
        let trace = IoTrace::default();
        let r = scan(&rz, ScanFunc::Scrub, &blocks, stride, &trace);
        assert_eq!((r.repaired_bytes, r.unrecoverable.len()), (col, 0));
        assert_eq!(nodes[0].stats.checksum_errors.load(Ordering::Relaxed), 1, "parity damage is found by a scrub");
        flip(&paths[3], 10, 50);
        flip(&paths[4], 2 * col + 10, 50);
        flip(&paths[2], 2 * col + 10, 50);
        let r = scan(&rz, ScanFunc::Scrub, &blocks, stride, &IoTrace::default());
        // Children 3 and 4 hold small (5-sector) columns, child 2 a big one.
        assert_eq!((r.repaired_bytes, r.unrecoverable.len()), ((5 + 5 + 6) * 4096, 0));
        assert_eq!(scan(&rz, ScanFunc::Scrub, &blocks, stride, &IoTrace::default()).repaired_bytes, 0);
        // Three bad columns in one block is beyond raidz2.
        for p in &paths[2..5] {
            flip(p, col + 10, 50);
        }
        let r = scan(&rz, ScanFunc::Scrub, &blocks, stride, &IoTrace::default());
        assert_eq!(r.unrecoverable, vec![1]);
    }

    /// Blocks of mixed sizes back to back (so of every width, starting on every
    /// child, with skip sectors between them) on a 5-wide raidz2; returns
    /// (offset, bytes) of each.
    fn write_mixed(rz: &Vdev) -> Vec<(u64, Vec<u8>)> {
        let sizes = [
            4096usize,
            1000,
            65536,
            12288,
            3 * 8192 + 5,
            512,
            8192,
            20_000,
            4096,
            100_000,
            1,
            16384,
            4096,
            4096,
            4096,
            4096,
        ];
        let mut off = 0;
        let mut out = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let d = data(len, i as u8);
            rz.write(off, &d).unwrap();
            out.push((off, d));
            off += rz.psize_to_asize(len as u64);
        }
        let starts: std::collections::BTreeSet<u64> = out.iter().map(|(o, _)| (o >> 12) % 5).collect();
        assert_eq!(starts.len(), 5, "blocks start on every child");
        out
    }

    fn scan_mixed(v: &Vdev, func: ScanFunc, blocks: &[(u64, Vec<u8>)], trace: &IoTrace) -> ExtentReport {
        with_scan_blocks(blocks, |sb| v.scan_extent(func, sb, trace))
    }

    /// `f` with the scan blocks of (offset, bytes) pairs, born in txg 5, each checked
    /// against its bytes' BLAKE3 hash.
    fn with_scan_blocks<R>(blocks: &[(u64, Vec<u8>)], f: impl FnOnce(&[ScanBlock<'_>]) -> R) -> R {
        type Verifier = Box<dyn Fn(&[u8]) -> bool + Sync>;
        let verifiers: Vec<Verifier> = blocks
            .iter()
            .map(|(_, b)| {
                let h = blake3::hash(b);
                Box::new(move |d: &[u8]| blake3::hash(d) == h) as Verifier
            })
            .collect();
        let sb: Vec<ScanBlock<'_>> = blocks
            .iter()
            .zip(&verifiers)
            .map(|((off, b), f)| ScanBlock {
                offset_bytes: *off,
                psize_bytes: b.len() as u64,
                birth_txg: 5,
                verify: f.as_ref(),
            })
            .collect();
        f(&sb)
    }

    #[test]
    fn raidz_scrub_and_resilver_of_variable_width_blocks_in_one_extent() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, nodes) = leaves(&dir, 5);
        let rz = Vdev::new_raidz(0, 1, 12, 2, nodes.clone());
        let blocks = write_mixed(&rz);
        let g = rz.geometry().unwrap();
        // Damage up to two columns of every block, on children that vary by block.
        let mut want_cksum = [0u64; 5];
        let mut want_repaired = 0;
        for (i, (off, b)) in blocks.iter().enumerate() {
            let map = g.map(*off, b.len() as u64);
            for k in 0..(i % 3).min(map.columns.len()) {
                let col = map.columns[(i + 2 * k) % map.columns.len()];
                flip(&paths[col.child], col.child_offset_bytes + 7, 100);
                want_cksum[col.child] += 1;
                want_repaired += col.size_bytes;
            }
        }
        let trace = IoTrace::default();
        let r = scan_mixed(&rz, ScanFunc::Scrub, &blocks, &trace);
        assert_eq!((r.repaired_bytes, r.unrecoverable.clone()), (want_repaired, vec![]));
        let got: Vec<u64> = nodes.iter().map(|n| n.stats.checksum_errors.load(Ordering::Relaxed)).collect();
        assert_eq!(got, want_cksum);
        // One read per leaf; the repair writes go up each leaf in ascending order.
        for (guid, t) in trace.snapshot() {
            assert_eq!(t.ascending, t.ios, "leaf {guid}: {t:?}");
        }
        assert_eq!(scan_mixed(&rz, ScanFunc::Scrub, &blocks, &IoTrace::default()).repaired_bytes, 0);
        // Resilver a leaf that lost everything: only its columns are written.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&paths[3])
            .unwrap()
            .write_all_at(&vec![0u8; 4 << 20], DATA_START_BYTES)
            .unwrap();
        nodes[3].dtl.add(1, 10);
        let trace = IoTrace::default();
        let r = scan_mixed(&rz, ScanFunc::Resilver, &blocks, &trace);
        let on_3: u64 = blocks
            .iter()
            .filter_map(|(o, b)| g.map(*o, b.len() as u64).columns.into_iter().find(|c| c.child == 3))
            .map(|c| c.size_bytes)
            .sum();
        assert_eq!((r.repaired_bytes, r.unrecoverable.len()), (on_3, 0));
        let t = trace.snapshot();
        assert_eq!(t[&103].bytes, on_3, "only the resilvered leaf's columns are written");
        assert_eq!(t[&103].ascending, t[&103].ios);
        assert_eq!(
            nodes[3].stats.checksum_errors.load(Ordering::Relaxed),
            want_cksum[3],
            "a DTL miss is not damage"
        );
        nodes[3].dtl.clear_through(10);
        // With two other leaves gone, the resilvered leaf is needed for every block.
        nodes[0].set_offline(true);
        nodes[1].set_offline(true);
        for (off, b) in &blocks {
            assert_eq!(rz.read(*off, b.len() as u64, &|d| d == &b[..]).unwrap(), *b);
        }
    }
}
