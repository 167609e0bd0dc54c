//! The receiving side: verify records and apply them to an object set.
//!
//! Before the first change the receiver checks that the stream fits the target: an
//! incremental stream's from-guid must be the guid the caller names as the target's
//! base, a full stream needs an empty object set, a resuming stream needs the token of
//! the interrupted receive. Then each record is verified by the [`StreamReader`]
//! (checksum, lengths, ranges) and by the order rules below before it is applied, each
//! in its own txg hold:
//!
//! * `OBJECT` ids strictly increase, and so do `FREEOBJECTS` ranges around them;
//! * `WRITE` and `FREE` name the object of the last `OBJECT`; the truncating `FREE`
//!   (length [`FREE_TO_END`]) ends that object.
//!
//! Applying: `OBJECT` creates the object at its id ([`ObjectStore::claim_object`]) or,
//! when it exists with the same type and a compatible block size, replaces its bonus;
//! an object of another type or block size is freed and created again (after a txg
//! sync, which the DMU needs before an id is reused), except that a stream without
//! `-L` meeting an object received with large blocks is refused
//! ([`SendError::NeedsLargeBlocks`]) instead of dropping the object's data. `WRITE` writes the logical bytes
//! (a compressed payload is decompressed first and stored under the target's own
//! `compression`). `FREE` frees the range. `FREEOBJECTS` frees every existing object in
//! the range, clipped to [`Objset::object_id_end`] so a huge range costs what exists.
//! `END` waits until everything is synced.
//!
//! On error the records already applied stay in the target (in open or synced txgs).
//! The caller must receive into a dataset nobody else uses and destroy it (or keep it
//! for resuming: sync it, then save [`RecvProgress::resume_token`]) on failure.

use crate::send::SPLIT_BLOCK_BYTES;
use crate::stream::{Record, StreamHeader, StreamReader, FREE_TO_END};
use crate::token::ResumeToken;
use crate::{Result, SendError};
use std::io::Read;
use tarn_dmu::objset::Objset;
use tarn_dmu::{DmuError, ObjectStore};

/// What the caller knows about the target.
#[derive(Debug, Clone, Default)]
pub struct RecvOpts {
    /// GUID of the target's newest snapshot, which an incremental stream must name as
    /// its from-guid. `None`: the target is a new, empty object set (full streams only).
    pub expected_from_guid: Option<u64>,
    /// The token saved from an interrupted receive into this same target; required
    /// for (and only accepted with) a resuming stream.
    pub resume: Option<ResumeToken>,
}

/// How far a receive got; kept by the caller across a failure to build a resume token.
#[derive(Debug, Clone, Default)]
pub struct RecvProgress {
    /// The stream being received (set once its header passed the checks).
    pub header: Option<StreamHeader>,
    /// First object not completely applied.
    pub object: u64,
    /// First byte of `object` not applied.
    pub offset_bytes: u64,
    /// Stream bytes whose records were applied.
    pub bytes: u64,
}

impl RecvProgress {
    /// The token that resumes this receive (`None` before the header was accepted).
    /// Valid only once the target has synced what was applied (`wait_synced`).
    pub fn resume_token(&self) -> Option<ResumeToken> {
        let h = self.header.as_ref()?;
        Some(ResumeToken {
            object: self.object,
            offset_bytes: self.offset_bytes,
            bytes: self.bytes,
            to_guid: h.to_guid,
            from_guid: h.from_guid,
            to_name: h.to_name.clone(),
        })
    }
}

/// What a completed receive applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvInfo {
    /// The stream's header.
    pub header: StreamHeader,
    /// Stream bytes read, END included.
    pub stream_bytes: u64,
    /// Records read, BEGIN and END included.
    pub records: u64,
    /// `OBJECT` records applied.
    pub objects: u64,
    /// `WRITE` records applied.
    pub writes: u64,
    /// Logical bytes written.
    pub write_logical_bytes: u64,
    /// `FREE` records applied.
    pub frees: u64,
    /// Objects freed by `FREEOBJECTS` records.
    pub objects_freed: u64,
}

/// Receive a whole stream from `input` into `target` (see [`receive_stream`]).
pub fn receive(input: &mut dyn Read, target: &Objset, opts: &RecvOpts) -> Result<RecvInfo> {
    let mut reader = StreamReader::new(input)?;
    receive_stream(&mut reader, target, opts, &mut RecvProgress::default())
}

/// Check that the stream read by `reader` (whose header is already read) fits
/// `target` and `opts`, then apply all its records; `progress` follows every applied
/// record. Returns after the target has synced everything.
///
/// Errors: `WrongBase`, `TargetNotEmpty`, `ResumeMismatch` before anything changes;
/// `Truncated`, `Checksum`, `Corrupt`, `Io` for a damaged stream; `Dmu` when the
/// target refuses a change (no space, read-only, I/O).
pub fn receive_stream<R: Read>(reader: &mut StreamReader<R>, target: &Objset, opts: &RecvOpts, progress: &mut RecvProgress) -> Result<RecvInfo> {
    let h = reader.header().clone();
    check_fits(&h, target, opts)?;
    progress.header = Some(h.clone());
    progress.object = h.resume_object;
    progress.offset_bytes = h.resume_offset_bytes;
    progress.bytes = reader.offset_bytes();
    let mut info = RecvInfo {
        header: h.clone(),
        stream_bytes: 0,
        records: 0,
        objects: 0,
        writes: 0,
        write_logical_bytes: 0,
        frees: 0,
        objects_freed: 0,
    };
    // Next object id an OBJECT or FREEOBJECTS may name, and the object WRITE/FREE
    // records may name.
    let mut floor = h.resume_object.max(1);
    let mut current: Option<u64> = None;
    loop {
        let index = reader.records();
        let at = reader.offset_bytes();
        let order = |what| SendError::Corrupt {
            record_index: index,
            offset_bytes: at,
            what,
        };
        match reader.next_record()? {
            Record::Begin(_) => return Err(order("second BEGIN")),
            Record::Object(o) => {
                if o.object < floor {
                    return Err(order("OBJECT out of order"));
                }
                apply_object(target, &o, h.flags & crate::stream::flags::LARGE_BLOCKS != 0)?;
                floor = o.object + 1;
                current = Some(o.object);
                info.objects += 1;
                progress.object = o.object;
                progress.offset_bytes = 0;
            }
            Record::Write(w) => {
                if current != Some(w.object) {
                    return Err(order("WRITE for an object without OBJECT record"));
                }
                let data = w.data().map_err(order)?;
                let tx = target.hold_tx()?;
                target.write(&tx, w.object, w.offset_bytes, &data)?;
                drop(tx);
                info.writes += 1;
                info.write_logical_bytes += data.len() as u64;
                progress.offset_bytes = progress.offset_bytes.max(w.offset_bytes + data.len() as u64);
            }
            Record::Free {
                object,
                offset_bytes,
                length_bytes,
            } => {
                if current != Some(object) {
                    return Err(order("FREE for an object without OBJECT record"));
                }
                let tx = target.hold_tx()?;
                target.free_range(&tx, object, offset_bytes, length_bytes)?;
                drop(tx);
                info.frees += 1;
                if length_bytes == FREE_TO_END {
                    current = None;
                    progress.object = object + 1;
                    progress.offset_bytes = 0;
                } else {
                    progress.offset_bytes = progress.offset_bytes.max(offset_bytes + length_bytes);
                }
            }
            Record::FreeObjects { first, count } => {
                if first < floor {
                    return Err(order("FREEOBJECTS out of order"));
                }
                info.objects_freed += free_objects(target, first, first + count)?;
                floor = first + count;
                current = None;
                progress.object = floor;
                progress.offset_bytes = 0;
            }
            Record::End { .. } => break,
        }
        progress.bytes = reader.offset_bytes();
    }
    target.wait_synced()?;
    info.stream_bytes = reader.offset_bytes();
    info.records = reader.records();
    progress.bytes = info.stream_bytes;
    Ok(info)
}

/// Free every object of `target` with an id in `[first, end)` (clamped to the ids the
/// object set has), in one tx; ids with no object are skipped. Returns how many were
/// freed. For FREEOBJECTS records, and for emptying a clone a full stream is received
/// into (`zfs recv -o origin=`). Errors: the object set's.
pub fn free_objects(target: &Objset, first: u64, end: u64) -> std::result::Result<u64, DmuError> {
    let end = end.min(target.object_id_end());
    let tx = target.hold_tx()?;
    let mut freed = 0;
    for obj in first..end {
        match target.free_object(&tx, obj) {
            Ok(()) => freed += 1,
            Err(DmuError::NoSuchObject(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(freed)
}

/// The checks made before the first change.
fn check_fits(h: &StreamHeader, target: &Objset, opts: &RecvOpts) -> Result<()> {
    let base_ok = if h.is_incremental() {
        opts.expected_from_guid == Some(h.from_guid)
    } else {
        opts.expected_from_guid.is_none()
    };
    if !base_ok {
        return Err(SendError::WrongBase {
            stream_from_guid: h.from_guid,
            expected_from_guid: opts.expected_from_guid,
        });
    }
    match (&opts.resume, h.is_resuming()) {
        (None, false) => {}
        (None, true) => return Err(SendError::ResumeMismatch("resuming stream but no resume token for the target")),
        (Some(_), false) => return Err(SendError::ResumeMismatch("target has a resume token but the stream does not resume")),
        (Some(t), true) => {
            if t.to_guid != h.to_guid || t.from_guid != h.from_guid {
                return Err(SendError::ResumeMismatch("stream is not the one the token was made for"));
            }
            if t.object != h.resume_object || t.offset_bytes != h.resume_offset_bytes {
                return Err(SendError::ResumeMismatch("stream resumes at another position than the token"));
            }
        }
    }
    if !h.is_incremental() && !h.is_resuming() {
        for obj in 1..target.object_id_end() {
            match target.object_info(obj) {
                Ok(_) => return Err(SendError::TargetNotEmpty),
                Err(DmuError::NoSuchObject(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

fn apply_object(target: &Objset, o: &crate::stream::ObjectRec, large_blocks: bool) -> Result<()> {
    let tx = target.hold_tx()?;
    match target.object_info(o.object) {
        Ok(info) => {
            let grows = info.maxblkid == 0 && info.datablksz_bytes < o.datablksz_bytes;
            if info.otype == o.otype && (info.datablksz_bytes == o.datablksz_bytes || grows) {
                target.set_bonus(&tx, o.object, &o.bonus)?;
                return Ok(());
            }
            // Large blocks split by a stream without -L: the same object, not a new
            // one; recreating it would drop its unchanged blocks.
            if info.otype == o.otype && !large_blocks && info.datablksz_bytes > SPLIT_BLOCK_BYTES && o.datablksz_bytes == SPLIT_BLOCK_BYTES {
                return Err(SendError::NeedsLargeBlocks { object: o.object });
            }
            // Another object under the same id: free it; the id can be claimed again
            // once that free has synced.
            target.free_object(&tx, o.object)?;
        }
        Err(DmuError::NoSuchObject(_)) => {}
        Err(e) => return Err(e.into()),
    }
    match target.claim_object(&tx, o.object, o.otype, o.datablksz_bytes, o.max_blksz_bytes, &o.bonus) {
        Ok(()) => Ok(()),
        Err(DmuError::Invalid(_)) => {
            drop(tx);
            target.wait_synced()?;
            let tx = target.hold_tx()?;
            target.claim_object(&tx, o.object, o.otype, o.datablksz_bytes, o.max_blksz_bytes, &o.bonus)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
