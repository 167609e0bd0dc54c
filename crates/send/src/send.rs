//! The sending side: walk an object set's block tree and write records.
//!
//! The walk goes down the meta-dnode tree in object-id order; for each dnode block
//! born after `from_txg` it emits, per slot, `FREEOBJECTS` (free slots, merged into
//! runs) or `OBJECT` + the object's changed blocks + a truncating `FREE`. Every
//! pointer at or before `from_txg` is pruned with its subtree. Holes found in a
//! changed block (a hole pointer carries no birth txg in Tarn, so a hole inside a
//! changed parent may be new) become `FREE` / `FREEOBJECTS` in incremental streams;
//! a full stream goes to an empty target and needs none.
//!
//! Depth is bounded: a pointer's level must be one less than its parent's and the
//! walk never goes deeper than the dnode's `nlevels` (a corrupt tree is an error,
//! never a runaway recursion). Memory is one block per level plus one record, and
//! for a send (not an estimate) the read-ahead's: a second walk of the same tree on a
//! helper thread (one block per level) and about twice [`READ_AHEAD_BATCH_BYTES`] of
//! data blocks read ahead of the one being written.

use crate::stream::{flags, ObjectRec, Record, StreamHeader, StreamWriter, FREE_TO_END, OBJECT_ID_END, WRITE_FIXED_BYTES};
use crate::token::ResumeToken;
use crate::{Result, SendError};
use std::io::Write;
use std::sync::Arc;
use tarn_dmu::objset::{BPS_PER_INDIRECT, DNODES_PER_BLOCK};
use tarn_dmu::DmuError;
use tarn_phys::{BlkPtr, Compression, Corrupt, DnodePhys, ObjectType, ObjsetPhys, BLKPTR_SIZE_BYTES, DNODE_SIZE_BYTES};
use tarn_zio::Zio;

/// Blocks larger than this are split into pieces of this size unless `large_blocks`.
pub const SPLIT_BLOCK_BYTES: u32 = 128 << 10;
/// Most levels a block tree may have (format.md §6).
const LEVELS_MAX: u8 = 8;

/// What to send: the object set and the header fields that name it.
#[derive(Debug, Clone)]
pub struct SendSource {
    /// Root block pointer of the object set to send (a snapshot's `rootbp`). Its
    /// `birth_txg` becomes the header's `to_txg`.
    pub root: BlkPtr,
    /// Incremental base: send only blocks born after this txg (the base snapshot's
    /// creation txg, or the `to_txg` of the stream that made the target). `None`: a
    /// full stream.
    pub from_txg: Option<u64>,
    /// GUID of the snapshot being sent (non-zero).
    pub to_guid: u64,
    /// GUID of the base snapshot; non-zero exactly when `from_txg` is `Some`.
    pub from_guid: u64,
    /// Full snapshot name (`pool/fs@snap`), ≤ 256 bytes.
    pub to_name: String,
    /// Snapshot creation time, seconds since the epoch.
    pub creation_time_s: u64,
}

/// `zfs send` options.
#[derive(Debug, Clone, Default)]
pub struct SendOpts {
    /// `-c`: carry blocks stored compressed (LZ4) as compressed payloads.
    pub compressed: bool,
    /// `-L`: send blocks larger than 128 KiB whole (otherwise they are split and the
    /// receiver gets 128 KiB blocks).
    pub large_blocks: bool,
    /// `-e`: recorded in the header only (Tarn has no embedded block pointers).
    pub embed: bool,
    /// `-t`: resume an interrupted receive from this token (its guids must match the
    /// source's).
    pub resume: Option<ResumeToken>,
}

/// What a send wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Stream bytes written (for [`estimate`]: that would be written).
    pub stream_bytes: u64,
    /// Records written, BEGIN and END included.
    pub records: u64,
    /// `OBJECT` records.
    pub objects: u64,
    /// `WRITE` records.
    pub writes: u64,
    /// Logical bytes carried by `WRITE` records.
    pub write_logical_bytes: u64,
    /// `FREE` records.
    pub frees: u64,
    /// `FREEOBJECTS` records.
    pub freeobjects: u64,
}

/// Write the stream of `src` to `out`. The source must not change while it is read
/// (send a snapshot). Returns what was written.
///
/// Errors: `Invalid` (bad guids, name, or a resume token for another stream), `Dmu`
/// (a block of the source could not be read or is corrupt), `Io` (writing `out`).
pub fn send(zio: &Zio, src: &SendSource, opts: &SendOpts, out: &mut dyn Write) -> Result<SendStats> {
    run(zio, src, opts, Some(out))
}

/// The exact number of bytes [`send`] would write with these arguments (the figure
/// `zfs send -nv` prints), computed from block pointers without reading data blocks.
/// Errors: as [`send`], without `Io`.
pub fn estimate(zio: &Zio, src: &SendSource, opts: &SendOpts) -> Result<SendStats> {
    run(zio, src, opts, None)
}

/// Most ids [`changed_objects`] returns (a hole of a huge dnode array could otherwise
/// name billions).
pub const CHANGED_OBJECTS_MAX: u64 = 1 << 26;

/// Ids of the objects that may differ between the object set rooted at `root` and
/// its state at `from_txg` (`zfs diff`): every slot of every dnode block born after
/// `from_txg`, allocated or free, found by the same birth-pruned walk an incremental
/// send makes. A superset: an unchanged object sharing a block with a changed one is
/// listed too; the caller compares. Errors: `Dmu` for unreadable or corrupt blocks,
/// `Invalid` past [`CHANGED_OBJECTS_MAX`].
pub fn changed_objects(zio: &Zio, root: &BlkPtr, from_txg: u64) -> Result<Vec<u64>> {
    let mut w = Walk::new(zio, StreamWriter::new(None)?, Some(from_txg), &SendOpts::default(), (0, 0));
    w.collect = Some(Vec::new());
    w.root(root)?;
    Ok(w.collect.take().unwrap_or_default())
}

fn run(zio: &Zio, src: &SendSource, opts: &SendOpts, out: Option<&mut dyn Write>) -> Result<SendStats> {
    if src.to_guid == 0 {
        return Err(SendError::Invalid("to_guid must be non-zero"));
    }
    if src.from_txg.is_some() != (src.from_guid != 0) {
        return Err(SendError::Invalid("from_guid must be given exactly for an incremental send"));
    }
    let mut fl = 0;
    if src.from_txg.is_some() {
        fl |= flags::INCREMENTAL;
    }
    if opts.compressed {
        fl |= flags::COMPRESSED;
    }
    if opts.large_blocks {
        fl |= flags::LARGE_BLOCKS;
    }
    if opts.embed {
        fl |= flags::EMBED;
    }
    let (resume_object, resume_offset_bytes) = match &opts.resume {
        Some(t) => {
            if t.to_guid != src.to_guid || t.from_guid != src.from_guid {
                return Err(SendError::Invalid("resume token is for another stream"));
            }
            fl |= flags::RESUMING;
            (t.object, t.offset_bytes)
        }
        None => (0, 0),
    };
    let header = StreamHeader {
        flags: fl,
        to_guid: src.to_guid,
        from_guid: src.from_guid,
        from_txg: src.from_txg.unwrap_or(0),
        to_txg: src.root.birth_txg,
        creation_time_s: src.creation_time_s,
        resume_object,
        resume_offset_bytes,
        to_name: src.to_name.clone(),
    };
    let resume = (resume_object, resume_offset_bytes);
    let writing = out.is_some();
    let w = Walk::new(zio, StreamWriter::new(out)?, src.from_txg, opts, resume);
    std::thread::scope(move |s| {
        // Owned by this closure: dropped (with the read-ahead's receiver) when it
        // returns, also by an error, which stops the reader and with it the predicting
        // walk before the scope waits for them.
        let mut w = w;
        if writing {
            // The same walk, counting only, names the data blocks this one will
            // read, in order; a reader reads them in batches (see `READ_AHEAD_BLOCKS`).
            let (bp_tx, bp_rx) = std::sync::mpsc::sync_channel(2 * READ_AHEAD_BLOCKS);
            let (data_tx, data_rx) = std::sync::mpsc::sync_channel(READ_AHEAD_BLOCKS);
            s.spawn(move || {
                // Ends at the walk's end, at an error (the send meets it too and
                // reports it), or when the reader is gone.
                let Ok(counter) = StreamWriter::new(None) else { return };
                let mut p = Walk::new(zio, counter, src.from_txg, opts, resume);
                p.predict = Some(bp_tx);
                let _ = p.root(&src.root);
            });
            s.spawn(move || read_ahead(zio, bp_rx, data_tx));
            w.ahead = Some(data_rx);
        }
        w.w.record(&Record::Begin(header))?;
        w.root(&src.root)?;
        w.flush_pending()?;
        let n = w.w.records();
        w.w.record(&Record::End {
            record_count: n,
            to_guid: src.to_guid,
        })?;
        w.stats.records = w.w.records();
        w.stats.stream_bytes = w.w.offset_bytes();
        Ok(std::mem::take(&mut w.stats))
    })
}

/// The read-ahead's reader: takes the block pointers the predicting walk sends, reads
/// them with `Zio::read_blocks` in batches of up to [`READ_AHEAD_BLOCKS`] blocks and
/// about [`READ_AHEAD_BATCH_BYTES`] (whatever has arrived when a batch starts), and
/// passes each block on in order. Returns when the walk ends or the send stops
/// listening.
fn read_ahead(zio: &Zio, bps: std::sync::mpsc::Receiver<BlkPtr>, out: std::sync::mpsc::SyncSender<ReadAhead>) {
    while let Ok(first) = bps.recv() {
        let mut batch = vec![first];
        let mut bytes = u64::from(first.lsize_bytes);
        while batch.len() < READ_AHEAD_BLOCKS && bytes < READ_AHEAD_BATCH_BYTES {
            match bps.try_recv() {
                Ok(bp) => {
                    bytes += u64::from(bp.lsize_bytes);
                    batch.push(bp);
                }
                Err(_) => break,
            }
        }
        for (c, r) in batch.iter().zip(zio.read_blocks(&batch, 2)) {
            if out.send((*c, r)).is_err() {
                return;
            }
        }
    }
}

fn corrupt(kind: &'static str, detail: &'static str) -> SendError {
    SendError::Dmu(DmuError::Corrupt(Corrupt::new(kind, detail)))
}

struct Walk<'z, 'o> {
    zio: &'z Zio,
    w: StreamWriter<'o>,
    from_txg: u64,
    incremental: bool,
    opts: SendOpts,
    resume_object: u64,
    resume_offset_bytes: u64,
    /// A FREE being extended: (object, offset, end).
    pending_free: Option<(u64, u64, u64)>,
    /// A FREEOBJECTS run being extended: (first, end).
    pending_freeobjects: Option<(u64, u64)>,
    stats: SendStats,
    /// One past the last object id the sender's dnode array covers.
    object_end: u64,
    /// [`changed_objects`]: collect object ids instead of writing records.
    collect: Option<Vec<u64>>,
    /// Read-ahead of data blocks: the blocks `write` will ask for, in that order,
    /// read by a helper thread (see `run`).
    ahead: Option<std::sync::mpsc::Receiver<ReadAhead>>,
    /// A counting walk that predicts the writing walk's data reads: `write` sends
    /// each block pointer here instead of reading it.
    predict: Option<std::sync::mpsc::SyncSender<BlkPtr>>,
}

/// One block of the read-ahead: which block, and what reading it gave.
type ReadAhead = (BlkPtr, std::result::Result<Arc<Vec<u8>>, tarn_zio::ZioError>);

/// Data blocks a send reads ahead of the one it is writing. A second walk of the
/// same tree, counting only, runs ahead on a helper thread (reading the dnode and
/// indirect blocks first, so the writing walk finds them in the ARC) and names every
/// data block the send will read, in order; a reader thread reads them in batches of
/// at most this many blocks with `Zio::read_blocks`, which merges blocks adjacent on
/// disk into large device reads and verifies them on two workers, while the stream is
/// written. The read-ahead crosses object boundaries, so a tree of small files streams
/// like one big file (OpenZFS's send likewise runs a traversal thread and a prefetch
/// thread ahead of the thread that writes, `dmu_send.c`).
pub const READ_AHEAD_BLOCKS: usize = 32;

/// Logical bytes of one read-ahead batch, about (a batch stops growing once it holds
/// this much). One batch waits in the channel while the next is read, so a send holds
/// about twice this much read-ahead.
pub const READ_AHEAD_BATCH_BYTES: u64 = 4 << 20;

fn zio_err(e: tarn_zio::ZioError) -> SendError {
    match e {
        tarn_zio::ZioError::Corrupt(c) => SendError::Dmu(DmuError::Corrupt(c)),
        other => SendError::Dmu(DmuError::Io(other.to_string())),
    }
}

impl<'z, 'o> Walk<'z, 'o> {
    /// A walk of the blocks born after `from_txg` (`None`: every block, a full
    /// stream) into `w`, resuming at `resume` (object, offset in bytes; `(0, 0)`: from
    /// the start).
    fn new(zio: &'z Zio, w: StreamWriter<'o>, from_txg: Option<u64>, opts: &SendOpts, resume: (u64, u64)) -> Self {
        Walk {
            zio,
            w,
            from_txg: from_txg.unwrap_or(0),
            incremental: from_txg.is_some(),
            opts: opts.clone(),
            resume_object: resume.0,
            resume_offset_bytes: resume.1,
            pending_free: None,
            pending_freeobjects: None,
            stats: SendStats::default(),
            object_end: 0,
            collect: None,
            ahead: None,
            predict: None,
        }
    }

    fn read(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.zio.read_block(bp).map_err(zio_err)
    }

    /// A data block: from the read-ahead when it delivers exactly `bp` next; any
    /// disagreement ends the read-ahead and reads directly (never the wrong bytes).
    fn read_data(&mut self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        if let Some(rx) = &self.ahead {
            match rx.recv() {
                Ok((got, r)) if got == *bp => return r.map_err(zio_err),
                _ => self.ahead = None,
            }
        }
        self.read(bp)
    }

    fn changed(&self, bp: &BlkPtr) -> bool {
        !bp.is_hole() && bp.birth_txg > self.from_txg
    }

    fn root(&mut self, root: &BlkPtr) -> Result<()> {
        if !self.changed(root) {
            return Ok(());
        }
        let phys = ObjsetPhys::decode(&self.read(root)?)?;
        if phys.os_type == tarn_dmu::objset::OS_TYPE_MOS {
            return Err(SendError::Invalid("the MOS is not a dataset and cannot be sent"));
        }
        let md = &phys.meta_dnode;
        if md.nlevels == 0 || md.nlevels > LEVELS_MAX {
            return Err(corrupt("meta-dnode", "nlevels out of range"));
        }
        self.object_end = md.maxblkid.saturating_add(1).saturating_mul(DNODES_PER_BLOCK).min(OBJECT_ID_END);
        self.meta(&md.blkptr.clone(), 0, md.nlevels - 1)
    }

    /// Objects covered by one pointer at `level` of the meta-dnode tree.
    fn meta_span(level: u8) -> u64 {
        DNODES_PER_BLOCK.saturating_mul(BPS_PER_INDIRECT.saturating_pow(level as u32))
    }

    fn meta(&mut self, bp: &BlkPtr, blkid: u64, level: u8) -> Result<()> {
        let span = Self::meta_span(level);
        let first = blkid.saturating_mul(span);
        if first >= self.object_end || first.saturating_add(span) <= self.resume_object {
            return Ok(());
        }
        if bp.is_hole() {
            // Inside a changed parent: every id it covers may have been freed.
            let from = first.max(1).max(self.resume_object);
            let end = first.saturating_add(span).min(self.object_end);
            return self.free_objects(from, end);
        }
        if !self.changed(bp) {
            return Ok(());
        }
        if bp.level != level {
            return Err(corrupt("meta-dnode tree", "block level does not match its position"));
        }
        let blk = self.read(bp)?;
        if level > 0 {
            for (i, c) in blk.chunks_exact(BLKPTR_SIZE_BYTES).enumerate() {
                let child = BlkPtr::decode(c)?;
                self.meta(&child, blkid.saturating_mul(BPS_PER_INDIRECT).saturating_add(i as u64), level - 1)?;
            }
            return Ok(());
        }
        if bp.otype != ObjectType::Dnode {
            return Err(corrupt("dnode block", "wrong type"));
        }
        for (j, d) in blk.chunks_exact(DNODE_SIZE_BYTES).enumerate() {
            let object = first.saturating_add(j as u64);
            if object == 0 || object < self.resume_object || object >= self.object_end {
                continue;
            }
            let dn = DnodePhys::decode(d)?;
            if dn.is_free() {
                self.free_objects(object, object + 1)?;
            } else {
                self.object(object, &dn)?;
            }
        }
        Ok(())
    }

    fn free_objects(&mut self, first: u64, end: u64) -> Result<()> {
        if !self.incremental || first >= end {
            return Ok(());
        }
        if let Some(ids) = self.collect.as_mut() {
            // Freed slots of a changed dnode block, or of a hole under a changed
            // parent: objects that may have existed before.
            if ids.len() as u64 + (end - first) > CHANGED_OBJECTS_MAX {
                return Err(SendError::Invalid("too many changed objects"));
            }
            ids.extend(first..end);
            return Ok(());
        }
        if let Some((f, e)) = self.pending_freeobjects {
            if e == first {
                self.pending_freeobjects = Some((f, end));
                return Ok(());
            }
        }
        self.flush_pending()?;
        self.pending_freeobjects = Some((first, end));
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<()> {
        if let Some((object, offset_bytes, end)) = self.pending_free.take() {
            self.emit(&Record::Free {
                object,
                offset_bytes,
                length_bytes: end - offset_bytes,
            })?;
            self.stats.frees += 1;
        }
        if let Some((first, end)) = self.pending_freeobjects.take() {
            self.emit(&Record::FreeObjects { first, count: end - first })?;
            self.stats.freeobjects += 1;
        }
        Ok(())
    }

    fn emit(&mut self, r: &Record) -> Result<()> {
        self.w.record(r)
    }

    fn object(&mut self, object: u64, dn: &DnodePhys) -> Result<()> {
        if let Some(ids) = self.collect.as_mut() {
            if ids.len() as u64 >= CHANGED_OBJECTS_MAX {
                return Err(SendError::Invalid("too many changed objects"));
            }
            ids.push(object);
            return Ok(());
        }
        self.flush_pending()?;
        if dn.nlevels == 0 || dn.nlevels > LEVELS_MAX {
            return Err(corrupt("dnode", "nlevels out of range"));
        }
        let split = !self.opts.large_blocks;
        let cap = |b: u32| if split { b.min(SPLIT_BLOCK_BYTES) } else { b };
        self.emit(&Record::Object(ObjectRec {
            object,
            otype: dn.otype,
            datablksz_bytes: cap(dn.datablksz_bytes),
            max_blksz_bytes: cap(dn.max_blksz_bytes),
            maxblkid: dn.maxblkid,
            bonus: dn.bonus.clone(),
        }))
        .map_err(|e| match e {
            SendError::Invalid(_) => corrupt("dnode", "fields out of range for a stream"),
            other => other,
        })?;
        self.stats.objects += 1;
        let blksz = dn.datablksz_bytes as u64;
        let end_bytes = dn.maxblkid.saturating_add(1).saturating_mul(blksz);
        self.tree(object, blksz, end_bytes, &dn.blkptr, 0, dn.nlevels - 1)?;
        // Everything past the last block is gone (the object may have shrunk); this
        // also sets the receiver's end of object.
        self.free(object, end_bytes, FREE_TO_END)?;
        self.flush_pending()
    }

    fn free(&mut self, object: u64, offset_bytes: u64, end: u64) -> Result<()> {
        if object == self.resume_object && end <= self.resume_offset_bytes {
            return Ok(());
        }
        let offset_bytes = if object == self.resume_object && end != FREE_TO_END {
            offset_bytes.max(self.resume_offset_bytes)
        } else {
            offset_bytes
        };
        if let Some((o, s, e)) = self.pending_free {
            if o == object && e == offset_bytes && end != FREE_TO_END {
                self.pending_free = Some((o, s, end));
                return Ok(());
            }
        }
        self.flush_pending()?;
        if end == FREE_TO_END {
            self.emit(&Record::Free {
                object,
                offset_bytes,
                length_bytes: FREE_TO_END,
            })?;
            self.stats.frees += 1;
        } else {
            self.pending_free = Some((object, offset_bytes, end));
        }
        Ok(())
    }

    /// One pointer of an object's tree: block `blkid` at `level`, with at most
    /// `depth_left` levels below it.
    /// Bytes `[first, end)` of `object` that pointer `blkid` at `level` covers, or
    /// `None` when that is past the object's end or before where a resumed stream
    /// starts (nothing to send there).
    fn span(&self, object: u64, blksz: u64, end_bytes: u64, blkid: u64, level: u8) -> Option<(u64, u64)> {
        let span_bytes = blksz.saturating_mul(BPS_PER_INDIRECT.saturating_pow(level as u32));
        let first = blkid.saturating_mul(span_bytes);
        let end = first.saturating_add(span_bytes).min(end_bytes);
        if first >= end_bytes || (object == self.resume_object && end <= self.resume_offset_bytes) {
            return None;
        }
        Some((first, end))
    }

    fn tree(&mut self, object: u64, blksz: u64, end_bytes: u64, bp: &BlkPtr, blkid: u64, level: u8) -> Result<()> {
        let Some((first, end)) = self.span(object, blksz, end_bytes, blkid, level) else {
            return Ok(());
        };
        if bp.is_hole() {
            if self.incremental {
                return self.free(object, first, end);
            }
            return Ok(());
        }
        if !self.changed(bp) {
            return Ok(());
        }
        if bp.level != level {
            return Err(corrupt("indirect", "block level does not match its position"));
        }
        if level > 0 {
            let blk = self.read(bp)?;
            let children = blk
                .chunks_exact(BLKPTR_SIZE_BYTES)
                .map(BlkPtr::decode)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let first_child = blkid.saturating_mul(BPS_PER_INDIRECT);
            for (i, child) in children.iter().enumerate() {
                self.tree(object, blksz, end_bytes, child, first_child.saturating_add(i as u64), level - 1)?;
            }
            return Ok(());
        }
        self.write(object, first, bp)
    }

    fn write(&mut self, object: u64, offset_bytes: u64, bp: &BlkPtr) -> Result<()> {
        self.flush_pending()?;
        let lsize = bp.lsize_bytes;
        let whole = self.opts.large_blocks || lsize <= SPLIT_BLOCK_BYTES;
        if let Some(tx) = &self.predict {
            // The writing walk reads every block that reaches here.
            if tx.send(*bp).is_err() {
                return Err(SendError::Invalid("read-ahead stopped"));
            }
        }
        if self.w.is_counting() {
            let mut off = 0u32;
            while off < lsize {
                let n = if whole { lsize } else { SPLIT_BLOCK_BYTES.min(lsize - off) };
                let resumed_past = object == self.resume_object && offset_bytes + (off as u64) < self.resume_offset_bytes;
                if !resumed_past {
                    let payload = if whole && self.opts.compressed && bp.compression != Compression::Off {
                        bp.psize_bytes
                    } else {
                        n
                    };
                    self.w.count_record((WRITE_FIXED_BYTES as u32 + payload) as u64)?;
                    self.stats.writes += 1;
                    self.stats.write_logical_bytes += n as u64;
                }
                off += n;
            }
            return Ok(());
        }
        let data = self.read_data(bp)?;
        let mut off = 0usize;
        while off < data.len() {
            let n = if whole {
                data.len()
            } else {
                (SPLIT_BLOCK_BYTES as usize).min(data.len() - off)
            };
            let at = offset_bytes + off as u64;
            if !(object == self.resume_object && at < self.resume_offset_bytes) {
                let piece = &data[off..off + n];
                let packed = match (whole && self.opts.compressed, bp.compression) {
                    // The block's own algorithm (zstd at its default level 3: the
                    // stored level is not kept once the block is decompressed).
                    (true, c) if c != Compression::Off => c.compress(piece).map(|p| (c, p)),
                    _ => None,
                };
                // Uncompressed data goes out borrowed, never copied into a record.
                let (compression, payload) = match &packed {
                    Some((c, p)) => (*c, &p[..]),
                    None => (Compression::Off, piece),
                };
                self.w.write_record(object, at, n as u32, compression, payload)?;
                self.stats.writes += 1;
                self.stats.write_logical_bytes += n as u64;
            }
            off += n;
        }
        Ok(())
    }
}
