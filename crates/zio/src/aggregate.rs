//! Batched block writes with I/O aggregation (OpenZFS `vdev_queue.c` aggregation, our
//! own implementation).
//!
//! Theory: a txg writes many blocks at once, and copy-on-write allocation places the
//! blocks of one txg next to each other. Writing each block as its own device I/O
//! makes a disk pay a full per-I/O cost (seek, rotation, a request round trip) for
//! every block; writing each run of adjacent blocks as one I/O pays it once. So
//! [`Zio::write_blocks`] first prepares every block (compress, checksum — in parallel),
//! then allocates them in order, then merges DVAs that are adjacent on the same
//! top-level vdev into runs of at most [`AGGREGATE_MAX_BYTES`] and issues one write per
//! run. The result is identical to calling [`Zio::write_block`] per block: the same
//! block pointers, each block padded to its allocated size.
//!
//! Only leaf and mirror vdevs aggregate: a raidz block's columns are laid out per
//! block (its parity covers that block alone), so raidz blocks go out one by one.
//!
//! While the intent log is active, each run goes out through `queue::IoQueue` in
//! pieces of at most `queue::ASYNC_PIECE_BYTES`, one at a time, so that a log write
//! does not wait behind megabytes of them.
//!
//! Errors: a run that fails is a failed copy for every block in it; a block with no
//! copy written fails with `Io` and its allocation is given back, as in `write_block`.
//!
//! Called by: dmu (phase 2 of a txg sync).

use crate::{IoClass, Result, WriteProps, Zio, ZioError};
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tarn_phys::{BlkPtr, ChecksumAlg, Compression, ObjectType};
use tarn_vdev::leaf::AlignedBuf;
use tarn_vdev::VdevKind;

/// Largest single aggregated write (OpenZFS `zfs_vdev_aggregation_limit` is 1 MiB).
pub const AGGREGATE_MAX_BYTES: u64 = 1 << 20;

/// A batch of at most this many logical bytes is prepared and issued on the calling
/// thread: spawning helpers costs more than the work (a txg of a few metadata blocks
/// — an idle sync, a snapshot's — paid a thread start per step, and a scheduling delay
/// of milliseconds per start on a busy machine).
pub const INLINE_BATCH_MAX_BYTES: usize = 512 << 10;

/// Block writes staged by [`Zio::stage_blocks`]: allocated, checksummed, not yet on
/// any device. Hand them to [`Zio::write_staged`]; dropping them unwritten leaks
/// their allocations until the pool is reopened.
#[derive(Default)]
pub struct StagedWrites {
    blocks: Vec<StagedBlock>,
}

/// One staged block.
struct StagedBlock {
    /// The bytes to store when they differ from `data` (compressed, or mutated).
    payload: Option<Vec<u8>>,
    bp: BlkPtr,
    /// The logical bytes (for the ARC, and the payload when `payload` is `None`).
    data: Arc<Vec<u8>>,
}

/// One block prepared for writing: its payload (compressed, or the caller's bytes
/// borrowed) and every pointer field except the DVAs.
pub(crate) struct Prepared<'a> {
    pub(crate) payload: Cow<'a, [u8]>,
    pub(crate) bp: BlkPtr,
    /// nopwrite: `bp` is the caller's old pointer; allocate and write nothing.
    pub(crate) nop: bool,
}

/// The compress and checksum steps of a block write (shared by [`Zio::write_block`]
/// and [`Zio::write_blocks`]). File data gets the checksum the caller asks for (the
/// dataset's `checksum` property; `Off` leaves the sum all zeros); every other type
/// gets BLAKE3, a cryptographic 256-bit sum, whatever is asked (metadata is always
/// strongly checksummed). Returns `nop: true` when the result equals `props.nop_prev`
/// (see [`WriteProps::nop_prev`]): then `bp` is that old pointer and nothing is to be
/// allocated or written.
pub(crate) fn prepare<'a>(data: &'a [u8], props: &WriteProps) -> Prepared<'a> {
    assert!(!data.is_empty() && data.len() <= u32::MAX as usize, "block size out of range");
    let data = crate::craft::mutate(data, props.otype, props.level);
    let lsize_bytes = data.len() as u32;
    let (payload, compression) = match props.compression.compress(&data) {
        Some(c) => (Cow::Owned(c), props.compression.alg),
        None => (data, Compression::Off),
    };
    let checksum_alg = if props.otype == ObjectType::FileData {
        props.checksum
    } else {
        ChecksumAlg::Blake3
    };
    let checksum = checksum_alg.compute(&payload);
    let bp = BlkPtr {
        lsize_bytes,
        psize_bytes: payload.len() as u32,
        otype: props.otype,
        level: props.level,
        checksum_alg,
        compression,
        birth_txg: props.txg,
        phys_birth_txg: 0,
        dedup: false,
        fill: props.fill,
        checksum,
        ..BlkPtr::HOLE
    };
    if let Some(old) = props.nop_prev.filter(|old| nop_write_matches(old, &bp, props.copies)) {
        return Prepared { payload, bp: old, nop: true };
    }
    Prepared { bp, payload, nop: false }
}

/// [`prepare`] every block, in `threads` workers (1..=8) unless the batch is small
/// (at most [`INLINE_BATCH_MAX_BYTES`]); the flag says it was prepared inline.
fn prepare_all(blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize) -> (Vec<Prepared<'_>>, bool) {
    let n = blocks.len();
    let threads = threads.clamp(1, 8).min(n.max(1));
    let chunk = n.div_ceil(threads).max(1);
    let mut prepared: Vec<Option<Prepared>> = (0..n).map(|_| None).collect();
    let inline = threads == 1 || blocks.iter().map(|(d, _)| d.len()).sum::<usize>() <= INLINE_BATCH_MAX_BYTES;
    fn prepare_chunk<'a>(items: &'a [(Arc<Vec<u8>>, WriteProps)], outs: &mut [Option<Prepared<'a>>]) {
        for ((data, props), o) in items.iter().zip(outs.iter_mut()) {
            *o = Some(prepare(data, props));
        }
    }
    if inline {
        prepare_chunk(blocks, &mut prepared);
    } else {
        std::thread::scope(|s| {
            for (items, outs) in blocks.chunks(chunk).zip(prepared.chunks_mut(chunk)) {
                s.spawn(move || prepare_chunk(items, outs));
            }
        });
    }
    (prepared.into_iter().map(|p| p.expect("prepared")).collect(), inline)
}

/// OpenZFS `zio_nop_write`'s test: the old pointer is a level-0 block of the same
/// type whose strong checksum algorithm, compression, sizes and number of copies
/// match the new block's, and whose checksum equals the new content's.
fn nop_write_matches(old: &BlkPtr, new: &BlkPtr, copies: u8) -> bool {
    !old.is_hole()
        && old.level == 0
        && new.level == 0
        && old.otype == new.otype
        && new.checksum_alg.is_strong()
        && old.checksum_alg == new.checksum_alg
        && old.compression == new.compression
        && old.lsize_bytes == new.lsize_bytes
        && old.psize_bytes == new.psize_bytes
        && old.dvas().count() == usize::from(copies.clamp(1, 3))
        && old.checksum == new.checksum
}

/// What dedup made of one block of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DedupRole {
    /// Not deduplicated: written as usual.
    None,
    /// The table had it: nothing written, `bp` names the stored block.
    Hit,
    /// The first of its content in the batch and not in the table: written, then
    /// entered in the table.
    New,
    /// Same content as the batch's block at this index (a `New` one): nothing
    /// written, it takes that block's DVAs.
    CopyOf(usize),
}

impl Zio {
    /// Dedup, before allocation (module [`crate::ddt`]): every file data block of a
    /// dataset with `dedup` on and a strong checksum is looked up by its key. A hit
    /// (verified against the stored bytes under `verify`) takes the stored block's
    /// DVAs and physical birth, gains a reference and is not written; a block whose
    /// content came earlier in the same batch will take that block's DVAs; any other
    /// becomes a new entry once written, unless the table is at its quota.
    fn dedup_lookup(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], prepared: &mut [Prepared<'_>]) -> Vec<DedupRole> {
        let mut roles = vec![DedupRole::None; blocks.len()];
        let mut first: std::collections::HashMap<crate::ddt::DdtKey, usize> = std::collections::HashMap::new();
        for i in 0..blocks.len() {
            let props = &blocks[i].1;
            let p = &prepared[i];
            if props.dedup == crate::Dedup::Off || p.nop || props.otype != ObjectType::FileData || props.level != 0 || !p.bp.checksum_alg.is_strong() {
                continue;
            }
            let key = crate::ddt::DdtKey::of(&p.bp);
            let verify = props.dedup == crate::Dedup::Verify;
            if let Some(e) = self.ddt.lookup(&key) {
                if verify && !self.same_bytes(&e, &p.payload) {
                    continue; // a collision: written apart, without dedup
                }
                if self.ddt.add_ref(&key) {
                    let p = &mut prepared[i];
                    p.bp.dva = e.dva;
                    p.bp.dedup = true;
                    p.bp.phys_birth_txg = if e.birth_txg < props.txg { e.birth_txg } else { 0 };
                    p.nop = true;
                    roles[i] = DedupRole::Hit;
                }
                continue;
            }
            match first.get(&key) {
                Some(&j) => {
                    if verify && prepared[j].payload != p.payload {
                        continue;
                    }
                    prepared[i].nop = true;
                    roles[i] = DedupRole::CopyOf(j);
                }
                None if self.ddt.has_room(first.len() + 1) => {
                    first.insert(key, i);
                    roles[i] = DedupRole::New;
                }
                None => {}
            }
        }
        roles
    }

    /// After the writes: enter every written `New` block in the dedup table, and give
    /// each `CopyOf` block its first's DVAs and a reference (or mark it unwritten
    /// when its first failed).
    fn dedup_finish(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], prepared: &mut [Prepared<'_>], roles: &[DedupRole], written: &mut [bool]) {
        for i in 0..roles.len() {
            if roles[i] == DedupRole::New && written[i] {
                prepared[i].bp.dedup = true;
                self.ddt.insert(crate::ddt::DdtKey::of(&prepared[i].bp), prepared[i].bp.dva, blocks[i].1.txg);
            }
        }
        for i in 0..roles.len() {
            match roles[i] {
                DedupRole::CopyOf(j) if written[j] => {
                    let key = crate::ddt::DdtKey::of(&prepared[j].bp);
                    prepared[i].bp.dva = prepared[j].bp.dva;
                    prepared[i].bp.dedup = true;
                    written[i] = self.ddt.add_ref(&key);
                }
                DedupRole::CopyOf(_) => written[i] = false,
                DedupRole::Hit => written[i] = true,
                _ => {}
            }
        }
    }

    /// Write the sealed blocks of a txg's space accounting (metaslab directory pages,
    /// condensed maps, the log block, the root) to every DVA, aggregated as
    /// [`Zio::write_blocks`] aggregates: one device write per run of adjacent copies
    /// instead of one per copy (an idle txg wrote about 30 of them one by one).
    /// Errors: `Io` for the first block none of whose copies landed.
    pub fn write_sealed_all(&self, blocks: &[tarn_metaslab::SyncBlock]) -> Result<()> {
        let payloads: Vec<&[u8]> = blocks.iter().map(|b| b.payload.as_slice()).collect();
        let bps: Vec<BlkPtr> = blocks.iter().map(|b| b.bp).collect();
        let landed = self.write_copies(&payloads, &bps, &vec![true; blocks.len()], 1, IoClass::Async);
        if let Some(i) = landed.iter().position(|ok| !ok) {
            return Err(ZioError::Io(format!("no copy of space-map block {i} of this txg was written")));
        }
        self.blocks_written.fetch_add(blocks.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Write `payloads[i]` to every DVA of `bps[i]` where `wanted[i]`, merging copies
    /// adjacent on one leaf or mirror top-level vdev into runs of at most
    /// [`AGGREGATE_MAX_BYTES`] (each copy padded to its allocated size), issued from
    /// `threads` workers (1: this thread), as I/O of `class` (module `queue`). Returns,
    /// per block, whether any copy landed.
    fn write_copies(&self, payloads: &[&[u8]], bps: &[BlkPtr], wanted: &[bool], threads: usize, class: IoClass) -> Vec<bool> {
        // Synchronous writes count as the log's I/O while they run; bulk ones yield.
        let _sync = (class == IoClass::Sync).then(|| self.queue.sync_io());
        let yielding = class == IoClass::Async && self.queue.sync_active();
        let mut copies: Vec<(u32, u64, u64, usize)> = Vec::new(); // (vdev, offset, asize, block)
        for (i, bp) in bps.iter().enumerate() {
            if wanted[i] {
                copies.extend(bp.dvas().map(|d| (d.vdev, d.offset_bytes, d.asize_bytes, i)));
            }
        }
        copies.sort_unstable_by_key(|&(v, off, _, _)| (v, off));
        let vdevs = self.vdevs.read();
        let aggregatable = |v: u32| matches!(vdevs[v as usize].kind(), VdevKind::Leaf(_) | VdevKind::Mirror(_));
        let mut runs: Vec<(u32, u64, Vec<usize>)> = Vec::new(); // (vdev, offset, copies)
        let mut end = 0u64;
        for (k, &(v, off, asize, _)) in copies.iter().enumerate() {
            let extend = runs
                .last()
                .is_some_and(|(rv, roff, _)| *rv == v && aggregatable(v) && off == end && end + asize - roff <= AGGREGATE_MAX_BYTES);
            if extend {
                runs.last_mut().expect("a run to extend").2.push(k);
            } else {
                runs.push((v, off, vec![k]));
            }
            end = off + asize;
        }
        // A block counts as written when any of its copies landed. With one worker
        // (a small batch) the runs go out from this thread; a mirror still writes its
        // children in parallel, from the vdev I/O pool.
        // While the intent log is active its writes go first (module `queue`): the runs
        // go out one at a time anyway, so from this thread alone, without helpers
        // taking turns at the gate.
        let workers = if threads <= 1 || yielding { 1 } else { threads.max(2).min(runs.len().max(1)) };
        let issue = |w: usize| -> Vec<usize> {
            let mut ok_copies: Vec<usize> = Vec::new();
            for (v, off, members) in runs.iter().skip(w).step_by(workers) {
                let top = &vdevs[*v as usize];
                let ok = if members.len() == 1 {
                    self.write_run(top, *off, payloads[copies[members[0]].3], aggregatable(*v), class)
                } else {
                    // The copies lie back to back (each starts where the previous
                    // allocation ends), so the run is their payloads, each padded to
                    // its allocated size. Built once in a buffer aligned for direct
                    // I/O: every mirror side writes it as it is, without a bounce copy.
                    let buf = AlignedBuf::concat_padded(members.iter().map(|&k| (payloads[copies[k].3], copies[k].2 as usize)));
                    self.write_run(top, *off, &buf, true, class)
                };
                if ok {
                    ok_copies.extend(members.iter().copied());
                }
            }
            ok_copies
        };
        let ok_copies: Vec<usize> = if workers <= 1 {
            issue(0)
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..workers).map(|w| s.spawn(move || issue(w))).collect();
                handles.into_iter().flat_map(|h| h.join().expect("aggregated write")).collect()
            })
        };
        let mut landed = vec![false; bps.len()];
        for k in ok_copies {
            landed[copies[k].3] = true;
        }
        landed
    }

    /// Write `data` at `off` on `top` as I/O of `class`: synchronous at once and
    /// whole; asynchronous through the queue (module `queue`), in pieces while the
    /// intent log is active when `splittable` (a leaf or mirror lays bytes out in
    /// order; a raidz block's columns depend on its whole length, so it goes whole),
    /// one I/O at a time then. Whether all of it was written.
    fn write_run(&self, top: &tarn_vdev::Vdev, off: u64, data: &[u8], splittable: bool, class: IoClass) -> bool {
        match class {
            IoClass::Sync => top.write(off, data).is_ok(),
            IoClass::Async if splittable => self
                .queue
                .issue_async(data.len(), |at, len| top.write(off + at as u64, &data[at..at + len]).is_ok()),
            IoClass::Async => self.queue.gated(|| top.write(off, data).is_ok()),
        }
    }

    /// A block has just been written: the ARC takes over its (compressed) payload, as
    /// OpenZFS's ARC keeps a buffer it has just written (`arc_write`).
    fn cache_written(&self, bp: &BlkPtr, data: &Arc<Vec<u8>>, payload: impl FnOnce() -> Vec<u8>) {
        let stored = crate::arc::Stored::choose(bp.compression, bp.lsize_bytes, data, payload, self.arc.compressed_enabled());
        let meta = crate::bp_is_metadata(bp);
        // Metadata the next txg reads again (the indirect and dnode blocks this sync
        // just rewrote) keeps its logical bytes beside the compressed copy, so that read
        // does not decompress what the writer still holds. Not while a mutator may have
        // changed the bytes.
        let logical = (meta && !crate::craft::installed()).then_some(data);
        self.arc.insert_written_stored(self.arc_key(bp), stored, meta, logical);
    }

    /// Compress, checksum and allocate `blocks` as [`Zio::write_blocks`] does (no
    /// deduplication or nopwrite: for metadata, and for the file records the object
    /// set writes early, allocated under a txg hold and written after it) and return
    /// their pointers at once, leaving the device writes in `staged` for
    /// [`Zio::write_staged`] (or [`Zio::write_staged_each`]). A txg sync
    /// builds each tree level's blocks from the pointers of the level below: staging
    /// lets it build every level first and write all of them in one aggregated batch,
    /// one device round trip instead of one per level (OpenZFS's parents take their
    /// children's pointers when the children are "ready", not when written). Nothing
    /// staged may be read until written. Errors: `NoSpace` for a block that found no
    /// room (nothing staged for it).
    pub fn stage_blocks(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize, staged: &mut StagedWrites) -> Vec<Result<BlkPtr>> {
        self.stage_blocks_with(blocks, threads, staged, false)
    }

    /// [`Zio::stage_blocks`] in open context, for blocks born in the open txg
    /// (`WriteProps::txg`) while that txg's sync may not have begun: when a sync of an
    /// earlier txg is in progress, the allocations are made ahead and logged by the
    /// blocks' own txg, not by that sync ([`tarn_metaslab::SpaceMap::allocates_ahead`]).
    /// The early writer's path.
    pub fn stage_blocks_open(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize, staged: &mut StagedWrites) -> Vec<Result<BlkPtr>> {
        self.stage_blocks_with(blocks, threads, staged, true)
    }

    fn stage_blocks_with(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize, staged: &mut StagedWrites, open: bool) -> Vec<Result<BlkPtr>> {
        let (prepared, _) = prepare_all(blocks, threads);
        prepared
            .into_iter()
            .zip(blocks)
            .map(|(p, (data, props))| {
                debug_assert!(props.nop_prev.is_none() && matches!(props.dedup, crate::Dedup::Off), "staged writes are plain");
                let mut bp = p.bp;
                bp.dva = if open {
                    self.allocate_open(p.payload.len() as u64, props.copies, props.txg)?
                } else {
                    self.allocate(p.payload.len() as u64, props.copies)?
                };
                // A borrowed payload is the logical bytes themselves: keep no copy.
                let payload = match p.payload {
                    Cow::Owned(v) => Some(v),
                    Cow::Borrowed(_) => None,
                };
                staged.blocks.push(StagedBlock {
                    payload,
                    bp,
                    data: data.clone(),
                });
                Ok(bp)
            })
            .collect()
    }

    /// Give back the allocations of staged writes that will not be issued (their txg
    /// failed before writing them).
    pub fn discard_staged(&self, staged: StagedWrites) {
        for b in &staged.blocks {
            self.free_now(&b.bp);
        }
    }

    /// Issue every write of `staged` (aggregated, from `threads` workers, as
    /// [`IoClass::Async`]: a txg sync's) and cache the blocks that landed. Returns the
    /// pointers written, in staging order. Errors: `Io` when some block has no copy
    /// written; every such block is freed (the txg that staged it fails).
    pub fn write_staged(&self, staged: StagedWrites, threads: usize) -> Result<Vec<BlkPtr>> {
        let bps: Vec<BlkPtr> = staged.blocks.iter().map(|b| b.bp).collect();
        let landed = self.write_staged_each(staged, threads, IoClass::Async);
        match bps.iter().zip(&landed).find(|(_, ok)| !**ok) {
            Some((bp, _)) => Err(ZioError::Io(format!(
                "no copy of a block at vdev {} offset {} could be written",
                bp.dva[0].vdev, bp.dva[0].offset_bytes
            ))),
            None => Ok(bps),
        }
    }

    /// [`Zio::write_staged`] as I/O of `class`, reporting each block: `true` where a
    /// copy landed (the block is cached), `false` where none did (its allocation is
    /// freed at once). In staging order.
    pub fn write_staged_each(&self, staged: StagedWrites, threads: usize, class: IoClass) -> Vec<bool> {
        let StagedWrites { blocks } = staged;
        let payloads: Vec<&[u8]> = blocks.iter().map(|b| b.payload.as_deref().unwrap_or(&b.data)).collect();
        let bps: Vec<BlkPtr> = blocks.iter().map(|b| b.bp).collect();
        // A small batch (an idle txg's) goes out from this thread: helpers cost more.
        let bytes: usize = payloads.iter().map(|p| p.len()).sum();
        let threads = if bytes <= INLINE_BATCH_MAX_BYTES { 1 } else { threads };
        let landed = self.write_copies(&payloads, &bps, &vec![true; blocks.len()], threads, class);
        drop(payloads);
        for (StagedBlock { payload, bp, data }, ok) in blocks.into_iter().zip(&landed) {
            if *ok {
                self.blocks_written.fetch_add(1, Ordering::Relaxed);
                self.cache_written(&bp, &data, || payload.unwrap_or_else(|| data.to_vec()));
            } else {
                self.free_now(&bp);
            }
        }
        landed
    }

    /// Whether the stored block of `e` holds exactly `payload` (dedup `verify`).
    fn same_bytes(&self, e: &crate::ddt::DdtEntry, payload: &[u8]) -> bool {
        let vdevs = self.vdevs.read();
        e.dva.iter().filter(|d| !d.is_empty()).any(|d| {
            vdevs
                .get(d.vdev as usize)
                .is_some_and(|v| v.read(d.offset_bytes, payload.len() as u64, &|b| b == payload).is_ok())
        })
    }

    /// Write many blocks (`(logical bytes, props)` each) as [`Zio::write_block`] would,
    /// merging adjacent allocations into larger device writes. `threads` (1..=8)
    /// compress and checksum in parallel. Returns one result per block, in order.
    ///
    /// Every block written is also put in the read cache under its new identity, as
    /// OpenZFS's ARC keeps a buffer it has just written (`arc_write`): a later partial
    /// overwrite of the same record then needs no read-back from disk.
    pub fn write_blocks(&self, blocks: &[(Arc<Vec<u8>>, WriteProps)], threads: usize) -> Vec<Result<BlkPtr>> {
        let n = blocks.len();
        let (mut prepared, inline) = prepare_all(blocks, threads);
        let threads = threads.clamp(1, 8).min(n.max(1));
        let dedup = self.dedup_lookup(blocks, &mut prepared);
        // Allocate in order, so that a txg's blocks lie next to each other.
        let mut results: Vec<Result<()>> = Vec::with_capacity(n);
        for (p, (_, props)) in prepared.iter_mut().zip(blocks) {
            if p.nop {
                results.push(Ok(()));
                continue;
            }
            match self.allocate(p.payload.len() as u64, props.copies) {
                Ok(dva) => {
                    p.bp.dva = dva;
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        // Every (block, copy) to write, grouped into runs of adjacent allocations.
        let payloads: Vec<&[u8]> = prepared.iter().map(|p| &*p.payload).collect();
        let wanted: Vec<bool> = prepared.iter().zip(&results).map(|(p, r)| r.is_ok() && !p.nop).collect();
        let landed = self.write_copies(
            &payloads,
            &prepared.iter().map(|p| p.bp).collect::<Vec<_>>(),
            &wanted,
            if inline { 1 } else { threads },
            IoClass::Async,
        );
        let mut written = landed;
        self.dedup_finish(blocks, &mut prepared, &dedup, &mut written);
        for ((p, (data, _)), ok) in prepared.iter_mut().zip(blocks).zip(&written) {
            if *ok && !p.nop {
                let payload = &mut p.payload;
                self.cache_written(&p.bp, data, || std::mem::take(payload).into_owned());
            }
        }
        prepared
            .into_iter()
            .zip(results)
            .enumerate()
            .map(|(i, (p, r))| {
                r?;
                if matches!(dedup[i], DedupRole::Hit | DedupRole::CopyOf(_)) {
                    if !written[i] {
                        return Err(ZioError::Io("the block this one duplicates could not be written".into()));
                    }
                    self.dedup_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(p.bp);
                }
                if p.nop {
                    self.nop_writes.fetch_add(1, Ordering::Relaxed);
                    return Ok(p.bp);
                }
                if !written[i] {
                    self.free_now(&p.bp);
                    return Err(ZioError::Io(format!(
                        "no copy of a block at vdev {} offset {} could be written",
                        p.bp.dva[0].vdev, p.bp.dva[0].offset_bytes
                    )));
                }
                self.blocks_written.fetch_add(1, Ordering::Relaxed);
                Ok(p.bp)
            })
            .collect()
    }
}
