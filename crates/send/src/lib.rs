//! # send — send and receive streams
//!
//! Theory. This crate turns one object set (the tree under an `ObjsetPhys` root block
//! pointer) into a byte stream, and a byte stream back into objects of another object
//! set. It is the engine of `zfs send` / `zfs recv`; the DSL and the CLI above it own
//! snapshots, dataset names and the decision where a stream lands. It owns no on-disk
//! structure, only the stream format (docs/format.md, "Send streams").
//!
//! A stream is a 16-byte prefix (magic `TARNSEND`, version) followed by typed records:
//! `BEGIN` (the header: guids, name, flags), then per object in increasing id order an
//! `OBJECT` record (type, block sizes, bonus), its `WRITE`s and `FREE`s in increasing
//! offset order, `FREEOBJECTS` for runs of freed ids between objects, and `END`.
//!
//! * A full stream ([`send()`] with `from_txg = None`) carries every allocated object and
//!   every non-hole level-0 block.
//! * An incremental stream (`from_txg = Some(t)`) walks only block pointers born after
//!   txg `t`: a subtree whose pointer is older is pruned whole (a parent is rewritten
//!   whenever a child is, so nothing under it changed), which makes its cost grow with
//!   the change, not the dataset. A changed dnode block reveals freed slots
//!   (`FREEOBJECTS`); a changed indirect block reveals holes (`FREE`); every object of a
//!   changed dnode block gets a `FREE` past its end (truncation).
//!
//! Stream invariants, each enforced by [`stream::StreamReader`]:
//! 1. Every record ends with a 32-byte BLAKE3 of *all* stream bytes before it (prefix,
//!    earlier records and their checksums, its own header and payload): a flipped byte,
//!    a truncation, or a record spliced in from another stream fails that check
//!    ([`SendError::Checksum`]).
//! 2. Lengths are checked against per-type caps before any allocation (a `WRITE`
//!    payload ≤ [`stream::WRITE_LSIZE_MAX_BYTES`], a name ≤ [`stream::NAME_MAX_BYTES`]);
//!    reserved bytes must be zero; object ids are in `1..`[`stream::OBJECT_ID_END`].
//! 3. Records come in object order; `WRITE`/`FREE` name the object of the last
//!    `OBJECT`; `END` carries the record count and to-guid. Checked by [`recv`].
//! 4. An incremental stream applies only to a target whose newest snapshot has the
//!    stream's from-guid ([`SendError::WrongBase`]); a full stream only to an empty
//!    object set ([`SendError::TargetNotEmpty`]).
//!
//! Errors never panic: every decode returns [`SendError`]. A receive that fails leaves
//! the records applied so far in the target's open txgs; the library cannot undo them,
//! so the caller (the DSL) receives into a dataset nobody else sees (a new dataset, or
//! a clone of the base snapshot) and only renames or swaps it in after success, or
//! keeps it for a resumable receive ([`token::ResumeToken`]).
//!
//! What the caller (DSL / CLI) does:
//!
//! * `zfs send [-i @a] fs@b`: build a [`SendSource`] from snapshot `@b`'s dataset
//!   record (root block pointer, guid, creation time, name); for `-i`, `from_txg` is
//!   `@a`'s creation txg (or the birth txg of `@a`'s root; both give the same stream)
//!   and `from_guid` its guid, where `@a` is an earlier snapshot of the same dataset.
//!   [`estimate`] gives the `-nv`/`-v` size, [`send()`] writes the stream.
//! * `zfs recv target`: [`StreamReader::new`] reads and verifies the header; from its
//!   `to_name`, flags and `from_guid` pick the target and check the base. A full
//!   stream goes into a new, empty, unmounted dataset; an incremental one into a clone
//!   of (or a dataset rolled back to) the snapshot whose guid is `from_guid`, passed
//!   as [`RecvOpts::expected_from_guid`]. [`receive_stream`] applies it and syncs.
//!   On success the DSL snapshots the result **with guid = the stream's `to_guid`**
//!   (so the next incremental finds its base) and renames/swaps it into place; on
//!   failure it destroys the temporary dataset, or (`recv -s`) syncs it and stores
//!   [`RecvProgress::resume_token`] as `receive_resume_token` for `zfs send -t`.
//!
//! Limits: the source must not change during the send (send a snapshot's root; a live
//! object set frees blocks four txgs after they are replaced, and a long send may then
//! read a reallocated block and fail with a checksum error). Compressed (`-c`) streams
//! carry blocks as stored (LZ4), but the receiver decompresses and rewrites them
//! under its own `compression` property. There are no embedded block pointers in
//! Tarn, so the `embed` option only sets a header flag.
//!
//! Several streams with their datasets' names and properties (`-R`, `-p`, `-I`) go
//! as a [`package`]: a checksummed header listing them, then the streams back to back.
//!
//! Called by: the DSL and the CLI (`zfs send`, `zfs recv`). Calls: dmu, zio, phys.

pub mod package;
pub mod recv;
pub mod send;
pub mod stream;
pub mod token;

pub use package::{read_package, write_package, Package, PackageDataset, PackageStream, PACKAGE_MAGIC};
pub use recv::{receive, receive_stream, RecvInfo, RecvOpts, RecvProgress};
pub use send::{changed_objects, estimate, send, SendOpts, SendSource, SendStats};
pub use stream::{Record, StreamHeader, StreamReader};
pub use token::ResumeToken;

/// Everything that can go wrong sending or receiving. Stream damage (`Corrupt`,
/// `Checksum`, `Truncated`, `BadMagic`, `Version`) is kept apart from a stream that is
/// fine but does not fit the target (`WrongBase`, `TargetNotEmpty`, `ResumeMismatch`)
/// and from errors of the object sets themselves (`Dmu`) and of the byte channel (`Io`).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Reading or writing the stream failed (other than a short read).
    #[error("stream I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The stream ended before its `END` record (at `offset_bytes`).
    #[error("send stream truncated at byte {offset_bytes}")]
    Truncated {
        /// Stream bytes read before the end came.
        offset_bytes: u64,
    },
    /// The first bytes are not a Tarn send stream.
    #[error("not a Tarn send stream (bad magic)")]
    BadMagic,
    /// The stream was written by a newer format version.
    #[error("unsupported send stream version {0}")]
    Version(u32),
    /// A record's running checksum does not match: a damaged byte, or a record from
    /// another stream.
    #[error("send stream checksum mismatch in record {record_index} at byte {offset_bytes}")]
    Checksum {
        /// 0-based index of the record (0 = BEGIN).
        record_index: u64,
        /// Stream offset of the record's first byte.
        offset_bytes: u64,
    },
    /// A record is malformed (bad type, length, reserved bytes, field value or order).
    #[error("corrupt send stream: record {record_index} at byte {offset_bytes}: {what}")]
    Corrupt {
        /// 0-based index of the record.
        record_index: u64,
        /// Stream offset of the record's first byte.
        offset_bytes: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// The stream's base does not match the target: an incremental stream whose
    /// from-guid is not the target's newest snapshot, an incremental stream for a
    /// target without base, or a full stream where a base was expected.
    #[error("stream base does not match target: stream from-guid {stream_from_guid:#x}, target base {expected_from_guid:?}")]
    WrongBase {
        /// The stream's from-guid (0 for a full stream).
        stream_from_guid: u64,
        /// The guid the caller said the target's base has (`None`: no base).
        expected_from_guid: Option<u64>,
    },
    /// A full stream was offered to an object set that already holds objects.
    #[error("full stream into an object set that is not empty")]
    TargetNotEmpty,
    /// A resuming stream without the matching token, or a token for another stream.
    #[error("resume mismatch: {0}")]
    ResumeMismatch(&'static str),
    /// An incremental stream without `-L` for a target whose object `object` was
    /// received with large blocks (OpenZFS: "incremental send stream requires -L").
    #[error("object {object} was received with blocks over 128 KiB; send the incremental stream with -L")]
    NeedsLargeBlocks {
        /// The object whose block size does not match.
        object: u64,
    },
    /// A resume token could not be parsed.
    #[error("invalid resume token: {0}")]
    BadToken(&'static str),
    /// A caller-supplied argument is invalid.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The source object set could not be read or the target could not be changed.
    #[error(transparent)]
    Dmu(#[from] tarn_dmu::DmuError),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, SendError>;

impl From<tarn_phys::Corrupt> for SendError {
    fn from(c: tarn_phys::Corrupt) -> Self {
        SendError::Dmu(tarn_dmu::DmuError::Corrupt(c))
    }
}
