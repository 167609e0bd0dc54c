//! The stream format: prefix, record framing, record payloads, the running checksum.
//!
//! Layout (docs/format.md, "Send streams", is the byte-level spec):
//!
//! ```text
//! prefix (16):  magic "TARNSEND" u64 | version u32 | reserved u32 (0)
//! record:       type u16 | reserved u16 (0) | payload_len u32 | payload | checksum (32)
//! ```
//!
//! `checksum` is BLAKE3-256 of every stream byte before it (from the prefix on). The
//! writer and the reader keep one incremental hasher over the whole stream, so a record
//! checks out only in its own place of its own stream. [`StreamReader`] verifies it
//! before decoding the payload, checks payload lengths against per-type caps before
//! allocating, and never panics on any input.

use crate::{Result, SendError};
use std::io::{Read, Write};
use tarn_phys::{Compression, ObjectType};

/// `TARNSEND` as a little-endian u64 (appears as the text in a hex dump).
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"TARNSEND");
/// Stream format version written and understood.
pub const STREAM_VERSION: u32 = 1;
/// Bytes of the prefix before the first record.
pub const PREFIX_SIZE_BYTES: usize = 16;
/// Bytes of a record header (type, reserved, payload length).
pub const RECORD_HEADER_SIZE_BYTES: usize = 8;
/// Bytes of the running checksum after each payload.
pub const CHECKSUM_SIZE_BYTES: usize = 32;
/// Largest logical length of one `WRITE` (16 MiB).
pub const WRITE_LSIZE_MAX_BYTES: u32 = 16 << 20;
/// Longest dataset name in a `BEGIN` record.
pub const NAME_MAX_BYTES: usize = 256;
/// Object ids in a stream are below this (2^48).
pub const OBJECT_ID_END: u64 = 1 << 48;
/// Offsets and lengths of `WRITE`/`FREE` stay below this (2^62 bytes), except the
/// `FREE` length [`FREE_TO_END`].
pub const OFFSET_END_BYTES: u64 = 1 << 62;
/// `FREE` length meaning "to the end of the object" (truncate there).
pub const FREE_TO_END: u64 = u64::MAX;
/// Longest bonus buffer (the dnode's).
pub const BONUS_MAX_BYTES: usize = tarn_phys::DNODE_BONUS_SIZE_BYTES;

/// Record type numbers (the `type` field).
pub mod rtype {
    /// Stream header.
    pub const BEGIN: u16 = 1;
    /// An object's type, block size and bonus.
    pub const OBJECT: u16 = 2;
    /// Data of one block (or part of one).
    pub const WRITE: u16 = 3;
    /// A byte range of an object that reads as zeros.
    pub const FREE: u16 = 4;
    /// A run of object ids that hold no object.
    pub const FREEOBJECTS: u16 = 5;
    /// End of stream.
    pub const END: u16 = 6;
}

/// `BEGIN` flag bits.
pub mod flags {
    /// Incremental stream: applies on top of the snapshot with `from_guid`.
    pub const INCREMENTAL: u64 = 1 << 0;
    /// `-c`: `WRITE` payloads may be compressed as stored.
    pub const COMPRESSED: u64 = 1 << 1;
    /// `-L`: blocks larger than 128 KiB are sent whole.
    pub const LARGE_BLOCKS: u64 = 1 << 2;
    /// `-e`: embedded block pointers allowed (Tarn has none; informational).
    pub const EMBED: u64 = 1 << 3;
    /// The stream resumes an interrupted one at (`resume_object`, `resume_offset`).
    pub const RESUMING: u64 = 1 << 4;
    /// Every defined bit.
    pub const ALL: u64 = INCREMENTAL | COMPRESSED | LARGE_BLOCKS | EMBED | RESUMING;
}

/// The `BEGIN` record: what the stream is and where it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    /// [`flags`] bits.
    pub flags: u64,
    /// GUID of the snapshot the stream recreates.
    pub to_guid: u64,
    /// GUID of the base snapshot (0 for a full stream).
    pub from_guid: u64,
    /// Blocks born after this txg are in the stream (0 for a full stream).
    pub from_txg: u64,
    /// Birth txg of the sent object-set root (the snapshot's txg).
    pub to_txg: u64,
    /// Creation time of the sent snapshot, seconds since the epoch.
    pub creation_time_s: u64,
    /// First object of a resuming stream (0 otherwise).
    pub resume_object: u64,
    /// First byte offset within `resume_object` (0 otherwise).
    pub resume_offset_bytes: u64,
    /// Full name of the sent snapshot (`pool/fs@snap`), ≤ [`NAME_MAX_BYTES`] bytes.
    pub to_name: String,
}

impl StreamHeader {
    /// True for an incremental stream.
    pub fn is_incremental(&self) -> bool {
        self.flags & flags::INCREMENTAL != 0
    }
    /// True for a stream that resumes an interrupted one.
    pub fn is_resuming(&self) -> bool {
        self.flags & flags::RESUMING != 0
    }
}

/// An `OBJECT` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRec {
    /// Object id (1 .. [`OBJECT_ID_END`]).
    pub object: u64,
    /// Object type (never None, Dnode, Objset or Indirect).
    pub otype: ObjectType,
    /// Data block size in bytes (512 ..= 1 MiB, multiple of 512).
    pub datablksz_bytes: u32,
    /// Size the single first block may grow to (≥ `datablksz_bytes`, same rules).
    pub max_blksz_bytes: u32,
    /// Highest level-0 block id on the sender (informational).
    pub maxblkid: u64,
    /// Bonus buffer (≤ 320 bytes).
    pub bonus: Vec<u8>,
}

/// A `WRITE` record: `lsize_bytes` bytes of `object` at `offset_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRec {
    /// Object id.
    pub object: u64,
    /// Byte offset in the object.
    pub offset_bytes: u64,
    /// Logical length in bytes (1 ..= [`WRITE_LSIZE_MAX_BYTES`]).
    pub lsize_bytes: u32,
    /// How `payload` is compressed (`Off`: payload is the `lsize_bytes` bytes).
    pub compression: Compression,
    /// The bytes as carried (compressed payloads keep the 4-byte LZ4 length prefix).
    pub payload: Vec<u8>,
}

impl WriteRec {
    /// The logical bytes. Errors: a compressed payload that does not decompress to
    /// exactly `lsize_bytes` (`Corrupt` with `what`).
    pub fn data(&self) -> std::result::Result<std::borrow::Cow<'_, [u8]>, &'static str> {
        match self.compression {
            Compression::Off => Ok(std::borrow::Cow::Borrowed(&self.payload)),
            c => c
                .decompress(&self.payload, self.lsize_bytes as usize)
                .map(std::borrow::Cow::Owned)
                .map_err(|_| "WRITE payload does not decompress"),
        }
    }
}

/// One record of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Stream header; always the first record.
    Begin(StreamHeader),
    /// An object's metadata.
    Object(ObjectRec),
    /// Block data.
    Write(WriteRec),
    /// `[offset_bytes, offset_bytes + length_bytes)` of `object` reads as zeros;
    /// `length_bytes == FREE_TO_END` truncates the object at `offset_bytes`.
    Free {
        /// Object id.
        object: u64,
        /// First byte.
        offset_bytes: u64,
        /// Bytes, or [`FREE_TO_END`].
        length_bytes: u64,
    },
    /// Ids `first .. first + count` hold no object.
    FreeObjects {
        /// First id.
        first: u64,
        /// Number of ids.
        count: u64,
    },
    /// End of stream.
    End {
        /// Records before this one, BEGIN included.
        record_count: u64,
        /// The stream's to-guid again.
        to_guid: u64,
    },
}

/// The fixed part of a WRITE record's payload (the bytes before the data), after the
/// checks [`Record::decode`] makes of it. Errors: `Invalid` when out of range.
fn write_fixed(object: u64, offset_bytes: u64, lsize_bytes: u32, compression: Compression, payload_bytes: usize) -> Result<[u8; WRITE_FIXED_BYTES]> {
    if !valid_object(object)
        || lsize_bytes == 0
        || lsize_bytes > WRITE_LSIZE_MAX_BYTES
        || offset_bytes.checked_add(lsize_bytes as u64).is_none_or(|e| e > OFFSET_END_BYTES)
        || (compression == Compression::Off && payload_bytes != lsize_bytes as usize)
        || payload_bytes == 0
        || payload_bytes > WRITE_LSIZE_MAX_BYTES as usize + 1024
    {
        return Err(SendError::Invalid("WRITE record out of range"));
    }
    let mut v = Vec::with_capacity(WRITE_FIXED_BYTES);
    put64(&mut v, object);
    put64(&mut v, offset_bytes);
    put32(&mut v, lsize_bytes);
    put32(&mut v, payload_bytes as u32);
    v.push(compression as u8);
    v.extend_from_slice(&[0u8; 7]);
    Ok(v.try_into().expect("32 bytes"))
}

fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn get64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
fn get32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
fn get16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Fixed part of a `BEGIN` payload; the name follows.
const BEGIN_FIXED_BYTES: usize = 72;
/// Fixed part of an `OBJECT` payload; the bonus follows.
const OBJECT_FIXED_BYTES: usize = 32;
/// Fixed part of a `WRITE` payload; the data follows.
pub const WRITE_FIXED_BYTES: usize = 32;
const FREE_BYTES: usize = 24;

// Field offsets read by the decoder. The encoder appends the same fields in this
// order; `tests/format_doc.rs` holds both to docs/format.md.
const PREFIX_MAGIC_OFF: usize = 0;
const PREFIX_VERSION_OFF: usize = 8;
const PREFIX_RESERVED_OFF: usize = 12;
const HDR_TYPE_OFF: usize = 0;
const HDR_RESERVED_OFF: usize = 2;
const HDR_PAYLOAD_LEN_OFF: usize = 4;
const BEGIN_FLAGS_OFF: usize = 0;
const BEGIN_TO_GUID_OFF: usize = 8;
const BEGIN_FROM_GUID_OFF: usize = 16;
const BEGIN_FROM_TXG_OFF: usize = 24;
const BEGIN_TO_TXG_OFF: usize = 32;
const BEGIN_CREATION_TIME_OFF: usize = 40;
const BEGIN_RESUME_OBJECT_OFF: usize = 48;
const BEGIN_RESUME_OFFSET_OFF: usize = 56;
const BEGIN_NAME_LEN_OFF: usize = 64;
const BEGIN_RESERVED_OFF: usize = 68;
const OBJECT_OBJECT_OFF: usize = 0;
const OBJECT_BLKSZ_OFF: usize = 8;
const OBJECT_MAX_BLKSZ_OFF: usize = 12;
const OBJECT_MAXBLKID_OFF: usize = 16;
const OBJECT_TYPE_OFF: usize = 24;
const OBJECT_RESERVED0_OFF: usize = 25;
const OBJECT_BONUS_LEN_OFF: usize = 26;
const OBJECT_RESERVED1_OFF: usize = 28;
const WRITE_OBJECT_OFF: usize = 0;
const WRITE_OFFSET_OFF: usize = 8;
const WRITE_LSIZE_OFF: usize = 16;
const WRITE_PSIZE_OFF: usize = 20;
const WRITE_COMPRESSION_OFF: usize = 24;
/// 7 reserved bytes, zero, to [`WRITE_FIXED_BYTES`].
const WRITE_RESERVED_OFF: usize = 25;
const FREEOBJECTS_BYTES: usize = 16;
const END_BYTES: usize = 16;

/// Largest payload a record of type `t` may have, or `None` for an unknown type.
pub fn payload_max_bytes(t: u16) -> Option<usize> {
    Some(match t {
        rtype::BEGIN => BEGIN_FIXED_BYTES + NAME_MAX_BYTES,
        rtype::OBJECT => OBJECT_FIXED_BYTES + BONUS_MAX_BYTES,
        rtype::WRITE => WRITE_FIXED_BYTES + WRITE_LSIZE_MAX_BYTES as usize + 1024,
        rtype::FREE => FREE_BYTES,
        rtype::FREEOBJECTS => FREEOBJECTS_BYTES,
        rtype::END => END_BYTES,
        _ => return None,
    })
}

fn valid_blksz(b: u32) -> bool {
    (512..=tarn_phys::MAX_BLOCK_SIZE_BYTES).contains(&b) && b.is_multiple_of(512)
}

fn valid_object(o: u64) -> bool {
    (1..OBJECT_ID_END).contains(&o)
}

impl Record {
    /// The record's type number.
    pub fn rtype(&self) -> u16 {
        match self {
            Record::Begin(_) => rtype::BEGIN,
            Record::Object(_) => rtype::OBJECT,
            Record::Write(_) => rtype::WRITE,
            Record::Free { .. } => rtype::FREE,
            Record::FreeObjects { .. } => rtype::FREEOBJECTS,
            Record::End { .. } => rtype::END,
        }
    }

    /// Encode the payload (without the record header and checksum). The record must
    /// satisfy what [`Record::decode`] checks; an invalid one is a bug of the caller
    /// and is refused with `Invalid`.
    pub fn encode_payload(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        match self {
            Record::Begin(h) => {
                if h.to_name.len() > NAME_MAX_BYTES {
                    return Err(SendError::Invalid("snapshot name longer than 256 bytes"));
                }
                if h.flags & !flags::ALL != 0 {
                    return Err(SendError::Invalid("unknown stream flag"));
                }
                for x in [
                    h.flags,
                    h.to_guid,
                    h.from_guid,
                    h.from_txg,
                    h.to_txg,
                    h.creation_time_s,
                    h.resume_object,
                    h.resume_offset_bytes,
                ] {
                    put64(&mut v, x);
                }
                put32(&mut v, h.to_name.len() as u32);
                put32(&mut v, 0);
                v.extend_from_slice(h.to_name.as_bytes());
            }
            Record::Object(o) => {
                if !valid_object(o.object)
                    || o.bonus.len() > BONUS_MAX_BYTES
                    || !valid_blksz(o.datablksz_bytes)
                    || !valid_blksz(o.max_blksz_bytes)
                    || o.max_blksz_bytes < o.datablksz_bytes
                {
                    return Err(SendError::Invalid("OBJECT record out of range"));
                }
                put64(&mut v, o.object);
                put32(&mut v, o.datablksz_bytes);
                put32(&mut v, o.max_blksz_bytes);
                put64(&mut v, o.maxblkid);
                v.push(o.otype as u8);
                v.push(0);
                v.extend_from_slice(&(o.bonus.len() as u16).to_le_bytes());
                put32(&mut v, 0);
                v.extend_from_slice(&o.bonus);
            }
            Record::Write(w) => {
                let fixed = write_fixed(w.object, w.offset_bytes, w.lsize_bytes, w.compression, w.payload.len())?;
                v.reserve(WRITE_FIXED_BYTES + w.payload.len());
                v.extend_from_slice(&fixed);
                v.extend_from_slice(&w.payload);
            }
            Record::Free {
                object,
                offset_bytes,
                length_bytes,
            } => {
                if !valid_object(*object) || *offset_bytes > OFFSET_END_BYTES || (*length_bytes != FREE_TO_END && *length_bytes > OFFSET_END_BYTES) {
                    return Err(SendError::Invalid("FREE record out of range"));
                }
                for x in [*object, *offset_bytes, *length_bytes] {
                    put64(&mut v, x);
                }
            }
            Record::FreeObjects { first, count } => {
                if !valid_object(*first) || first.checked_add(*count).is_none_or(|e| e > OBJECT_ID_END) {
                    return Err(SendError::Invalid("FREEOBJECTS record out of range"));
                }
                put64(&mut v, *first);
                put64(&mut v, *count);
            }
            Record::End { record_count, to_guid } => {
                put64(&mut v, *record_count);
                put64(&mut v, *to_guid);
            }
        }
        Ok(v)
    }

    /// Decode a payload of type `t`. Errors: a description of the first check that
    /// failed (the caller wraps it in [`SendError::Corrupt`] with the position).
    pub fn decode(t: u16, p: &[u8]) -> std::result::Result<Record, &'static str> {
        let exact = |n: usize| if p.len() == n { Ok(()) } else { Err("wrong payload length") };
        match t {
            rtype::BEGIN => {
                if p.len() < BEGIN_FIXED_BYTES {
                    return Err("BEGIN too short");
                }
                let name_len = get32(p, BEGIN_NAME_LEN_OFF) as usize;
                if name_len > NAME_MAX_BYTES {
                    return Err("name longer than 256 bytes");
                }
                exact(BEGIN_FIXED_BYTES + name_len)?;
                if get32(p, BEGIN_RESERVED_OFF) != 0 {
                    return Err("BEGIN reserved bytes not zero");
                }
                let flags_v = get64(p, BEGIN_FLAGS_OFF);
                if flags_v & !flags::ALL != 0 {
                    return Err("unknown stream flag");
                }
                let to_name = std::str::from_utf8(&p[BEGIN_FIXED_BYTES..]).map_err(|_| "name not UTF-8")?.to_string();
                let h = StreamHeader {
                    flags: flags_v,
                    to_guid: get64(p, BEGIN_TO_GUID_OFF),
                    from_guid: get64(p, BEGIN_FROM_GUID_OFF),
                    from_txg: get64(p, BEGIN_FROM_TXG_OFF),
                    to_txg: get64(p, BEGIN_TO_TXG_OFF),
                    creation_time_s: get64(p, BEGIN_CREATION_TIME_OFF),
                    resume_object: get64(p, BEGIN_RESUME_OBJECT_OFF),
                    resume_offset_bytes: get64(p, BEGIN_RESUME_OFFSET_OFF),
                    to_name,
                };
                if h.is_incremental() != (h.from_guid != 0) {
                    return Err("from-guid does not match the incremental flag");
                }
                if !h.is_resuming() && (h.resume_object != 0 || h.resume_offset_bytes != 0) {
                    return Err("resume position in a stream that does not resume");
                }
                if h.resume_object >= OBJECT_ID_END || h.resume_offset_bytes > OFFSET_END_BYTES {
                    return Err("resume position out of range");
                }
                Ok(Record::Begin(h))
            }
            rtype::OBJECT => {
                if p.len() < OBJECT_FIXED_BYTES {
                    return Err("OBJECT too short");
                }
                let bonus_len = get16(p, OBJECT_BONUS_LEN_OFF) as usize;
                if bonus_len > BONUS_MAX_BYTES {
                    return Err("bonus longer than 320 bytes");
                }
                exact(OBJECT_FIXED_BYTES + bonus_len)?;
                if p[OBJECT_RESERVED0_OFF] != 0 || get32(p, OBJECT_RESERVED1_OFF) != 0 {
                    return Err("OBJECT reserved bytes not zero");
                }
                let object = get64(p, OBJECT_OBJECT_OFF);
                if !valid_object(object) {
                    return Err("object id out of range");
                }
                let otype = ObjectType::from_u8(p[OBJECT_TYPE_OFF]).map_err(|_| "unknown object type")?;
                if matches!(otype, ObjectType::None | ObjectType::Dnode | ObjectType::Objset | ObjectType::Indirect) {
                    return Err("object type not allowed in a stream");
                }
                let datablksz_bytes = get32(p, OBJECT_BLKSZ_OFF);
                let max_blksz_bytes = get32(p, OBJECT_MAX_BLKSZ_OFF);
                if !valid_blksz(datablksz_bytes) || !valid_blksz(max_blksz_bytes) || max_blksz_bytes < datablksz_bytes {
                    return Err("bad block size");
                }
                Ok(Record::Object(ObjectRec {
                    object,
                    otype,
                    datablksz_bytes,
                    max_blksz_bytes,
                    maxblkid: get64(p, OBJECT_MAXBLKID_OFF),
                    bonus: p[OBJECT_FIXED_BYTES..].to_vec(),
                }))
            }
            rtype::WRITE => {
                if p.len() < WRITE_FIXED_BYTES {
                    return Err("WRITE too short");
                }
                let object = get64(p, WRITE_OBJECT_OFF);
                let offset_bytes = get64(p, WRITE_OFFSET_OFF);
                let lsize_bytes = get32(p, WRITE_LSIZE_OFF);
                let psize = get32(p, WRITE_PSIZE_OFF) as usize;
                if p[WRITE_RESERVED_OFF..WRITE_FIXED_BYTES].iter().any(|&b| b != 0) {
                    return Err("WRITE reserved bytes not zero");
                }
                if !valid_object(object) {
                    return Err("object id out of range");
                }
                if lsize_bytes == 0 || lsize_bytes > WRITE_LSIZE_MAX_BYTES {
                    return Err("WRITE length out of range");
                }
                if offset_bytes.checked_add(lsize_bytes as u64).is_none_or(|e| e > OFFSET_END_BYTES) {
                    return Err("WRITE offset out of range");
                }
                exact(WRITE_FIXED_BYTES + psize)?;
                let compression = Compression::from_u8(p[WRITE_COMPRESSION_OFF]).map_err(|_| "unknown compression")?;
                if psize == 0 || (compression == Compression::Off && psize != lsize_bytes as usize) {
                    return Err("WRITE payload length does not match");
                }
                Ok(Record::Write(WriteRec {
                    object,
                    offset_bytes,
                    lsize_bytes,
                    compression,
                    payload: p[WRITE_FIXED_BYTES..].to_vec(),
                }))
            }
            rtype::FREE => {
                exact(FREE_BYTES)?;
                let (object, offset_bytes, length_bytes) = (get64(p, 0), get64(p, 8), get64(p, 16));
                if !valid_object(object) {
                    return Err("object id out of range");
                }
                if offset_bytes > OFFSET_END_BYTES || (length_bytes != FREE_TO_END && length_bytes > OFFSET_END_BYTES) {
                    return Err("FREE range out of range");
                }
                Ok(Record::Free {
                    object,
                    offset_bytes,
                    length_bytes,
                })
            }
            rtype::FREEOBJECTS => {
                exact(FREEOBJECTS_BYTES)?;
                let (first, count) = (get64(p, 0), get64(p, 8));
                if !valid_object(first) || first.checked_add(count).is_none_or(|e| e > OBJECT_ID_END) {
                    return Err("FREEOBJECTS range out of range");
                }
                Ok(Record::FreeObjects { first, count })
            }
            rtype::END => {
                exact(END_BYTES)?;
                Ok(Record::End {
                    record_count: get64(p, 0),
                    to_guid: get64(p, 8),
                })
            }
            _ => Err("unknown record type"),
        }
    }
}

/// Writes a stream: the prefix, then records with their running checksums.
/// With `out = None` it only counts bytes (the size estimate of `zfs send -nv`).
pub struct StreamWriter<'a> {
    out: Option<&'a mut dyn Write>,
    hasher: blake3::Hasher,
    offset_bytes: u64,
    records: u64,
}

impl<'a> StreamWriter<'a> {
    /// Start a stream on `out` (writes the prefix). `None`: count only.
    pub fn new(out: Option<&'a mut dyn Write>) -> Result<Self> {
        let mut w = StreamWriter {
            out,
            hasher: blake3::Hasher::new(),
            offset_bytes: 0,
            records: 0,
        };
        let mut prefix = Vec::with_capacity(PREFIX_SIZE_BYTES);
        put64(&mut prefix, STREAM_MAGIC);
        put32(&mut prefix, STREAM_VERSION);
        put32(&mut prefix, 0);
        w.emit(&prefix)?;
        Ok(w)
    }

    fn emit(&mut self, b: &[u8]) -> Result<()> {
        if let Some(o) = self.out.as_mut() {
            self.hasher.update(b);
            o.write_all(b)?;
        }
        self.offset_bytes += b.len() as u64;
        Ok(())
    }

    /// Append one record. Errors: `Invalid` for a record out of range, `Io`.
    pub fn record(&mut self, r: &Record) -> Result<()> {
        let payload = r.encode_payload()?;
        self.raw_record(r.rtype(), &payload)
    }

    /// Append a WRITE record whose data is borrowed: the same bytes as
    /// [`StreamWriter::record`] of a [`WriteRec`] with these fields, without first
    /// copying `payload` into a record (a full send carries every data block this
    /// way). Errors: `Invalid` for fields out of range (as `record`), `Io`.
    pub fn write_record(&mut self, object: u64, offset_bytes: u64, lsize_bytes: u32, compression: Compression, payload: &[u8]) -> Result<()> {
        let fixed = write_fixed(object, offset_bytes, lsize_bytes, compression, payload.len())?;
        self.record_parts(rtype::WRITE, &[&fixed, payload])
    }

    /// Append a record of type `t` with an already encoded payload (tests use this to
    /// build damaged streams; the checksum is still right).
    pub fn raw_record(&mut self, t: u16, payload: &[u8]) -> Result<()> {
        self.record_parts(t, &[payload])
    }

    /// A record of type `t` whose payload is the concatenation of `parts`.
    fn record_parts(&mut self, t: u16, parts: &[&[u8]]) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut h = Vec::with_capacity(RECORD_HEADER_SIZE_BYTES);
        h.extend_from_slice(&t.to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        put32(&mut h, len as u32);
        self.emit(&h)?;
        for p in parts {
            self.emit(p)?;
        }
        let sum = *self.hasher.finalize().as_bytes();
        self.emit(&sum)?;
        self.records += 1;
        Ok(())
    }

    /// Count a record of type `t` with a payload of `payload_bytes` without writing it
    /// (estimates only; a writer with an output refuses with `Invalid`).
    pub fn count_record(&mut self, payload_bytes: u64) -> Result<()> {
        if self.out.is_some() {
            return Err(SendError::Invalid("count_record on a writing stream"));
        }
        self.offset_bytes += (RECORD_HEADER_SIZE_BYTES + CHECKSUM_SIZE_BYTES) as u64 + payload_bytes;
        self.records += 1;
        Ok(())
    }

    /// True when this writer only counts.
    pub fn is_counting(&self) -> bool {
        self.out.is_none()
    }

    /// Bytes written (or counted) so far.
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }
}

/// Reads and verifies a stream record by record. Construction reads the prefix and
/// the `BEGIN` record, so [`StreamReader::header`] is available before anything is
/// applied (`zfs recv` picks the target name and checks the base from it).
pub struct StreamReader<R: Read> {
    input: R,
    hasher: blake3::Hasher,
    offset_bytes: u64,
    records: u64,
    header: StreamHeader,
    ended: bool,
}

impl<R: Read> StreamReader<R> {
    /// Read and verify the prefix and the `BEGIN` record.
    /// Errors: `BadMagic`, `Version`, `Truncated`, `Checksum`, `Corrupt`, `Io`.
    pub fn new(input: R) -> Result<Self> {
        let mut r = StreamReader {
            input,
            hasher: blake3::Hasher::new(),
            offset_bytes: 0,
            records: 0,
            header: StreamHeader {
                flags: 0,
                to_guid: 0,
                from_guid: 0,
                from_txg: 0,
                to_txg: 0,
                creation_time_s: 0,
                resume_object: 0,
                resume_offset_bytes: 0,
                to_name: String::new(),
            },
            ended: false,
        };
        let mut prefix = [0u8; PREFIX_SIZE_BYTES];
        r.fill(&mut prefix)?;
        if get64(&prefix, PREFIX_MAGIC_OFF) != STREAM_MAGIC {
            return Err(SendError::BadMagic);
        }
        let version = get32(&prefix, PREFIX_VERSION_OFF);
        if version != STREAM_VERSION {
            return Err(SendError::Version(version));
        }
        if get32(&prefix, PREFIX_RESERVED_OFF) != 0 {
            return Err(SendError::Corrupt {
                record_index: 0,
                offset_bytes: 0,
                what: "prefix reserved bytes not zero",
            });
        }
        r.hasher.update(&prefix);
        let at = r.offset_bytes;
        match r.next_record()? {
            Record::Begin(h) => r.header = h,
            _ => {
                return Err(SendError::Corrupt {
                    record_index: 0,
                    offset_bytes: at,
                    what: "first record is not BEGIN",
                })
            }
        }
        Ok(r)
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(SendError::Truncated {
                        offset_bytes: self.offset_bytes + got as u64,
                    })
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SendError::Io(e)),
            }
        }
        self.offset_bytes += buf.len() as u64;
        Ok(())
    }

    /// The stream header (the `BEGIN` record).
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Stream bytes consumed so far.
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// Records read so far (BEGIN included).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Read, verify and decode the next record. After `END` has been returned, a
    /// further call fails with `Invalid`. Errors: `Truncated`, `Checksum`, `Corrupt`,
    /// `Io`.
    pub fn next_record(&mut self) -> Result<Record> {
        if self.ended {
            return Err(SendError::Invalid("read past END"));
        }
        let index = self.records;
        let start = self.offset_bytes;
        let corrupt = |what| SendError::Corrupt {
            record_index: index,
            offset_bytes: start,
            what,
        };
        let mut h = [0u8; RECORD_HEADER_SIZE_BYTES];
        self.fill(&mut h)?;
        let t = get16(&h, HDR_TYPE_OFF);
        let len = get32(&h, HDR_PAYLOAD_LEN_OFF) as usize;
        let max = payload_max_bytes(t).ok_or_else(|| corrupt("unknown record type"))?;
        if get16(&h, HDR_RESERVED_OFF) != 0 {
            return Err(corrupt("record reserved bytes not zero"));
        }
        if len > max {
            return Err(corrupt("record longer than its type allows"));
        }
        if (t == rtype::BEGIN) != (index == 0) {
            return Err(corrupt("BEGIN must be the first record and only the first"));
        }
        self.hasher.update(&h);
        let mut payload = vec![0u8; len];
        self.fill(&mut payload)?;
        self.hasher.update(&payload);
        let want = *self.hasher.finalize().as_bytes();
        let mut sum = [0u8; CHECKSUM_SIZE_BYTES];
        self.fill(&mut sum)?;
        if sum != want {
            return Err(SendError::Checksum {
                record_index: index,
                offset_bytes: start,
            });
        }
        self.hasher.update(&sum);
        let rec = Record::decode(t, &payload).map_err(corrupt)?;
        if let Record::End { record_count, to_guid } = &rec {
            if *record_count != index || *to_guid != self.header.to_guid {
                return Err(corrupt("END does not match the stream"));
            }
            self.ended = true;
        }
        self.records += 1;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets of docs/format.md §15, checked against the encoder.
    #[test]
    fn layout_matches_format_md() {
        let mut out = Vec::new();
        let mut w = StreamWriter::new(Some(&mut out)).unwrap();
        w.record(&Record::Begin(StreamHeader {
            flags: flags::INCREMENTAL | flags::COMPRESSED,
            to_guid: 0x1111,
            from_guid: 0x2222,
            from_txg: 5,
            to_txg: 9,
            creation_time_s: 77,
            resume_object: 0,
            resume_offset_bytes: 0,
            to_name: "p/fs@s".into(),
        }))
        .unwrap();
        w.record(&Record::Write(WriteRec {
            object: 3,
            offset_bytes: 4096,
            lsize_bytes: 4,
            compression: Compression::Off,
            payload: b"abcd".to_vec(),
        }))
        .unwrap();
        let u64_at = |o: usize| get64(&out, o);
        // Prefix.
        assert_eq!(&out[0..8], b"TARNSEND");
        assert_eq!(get32(&out, 8), 1);
        assert_eq!(get32(&out, 12), 0);
        // BEGIN framing and payload.
        assert_eq!(get16(&out, 16), rtype::BEGIN);
        assert_eq!(get16(&out, 18), 0);
        assert_eq!(get32(&out, 20) as usize, 72 + 6);
        let p = 24;
        assert_eq!(u64_at(p), 3);
        assert_eq!(u64_at(p + 8), 0x1111);
        assert_eq!(u64_at(p + 16), 0x2222);
        assert_eq!(u64_at(p + 24), 5);
        assert_eq!(u64_at(p + 32), 9);
        assert_eq!(u64_at(p + 40), 77);
        assert_eq!(get32(&out, p + 64), 6);
        assert_eq!(&out[p + 72..p + 78], b"p/fs@s");
        let sum_at = p + 78;
        assert_eq!(&out[sum_at..sum_at + 32], blake3::hash(&out[..sum_at]).as_bytes());
        // WRITE.
        let r = sum_at + 32;
        assert_eq!(get16(&out, r), rtype::WRITE);
        assert_eq!(get32(&out, r + 4), 32 + 4);
        let p = r + 8;
        assert_eq!(u64_at(p), 3);
        assert_eq!(u64_at(p + 8), 4096);
        assert_eq!(get32(&out, p + 16), 4);
        assert_eq!(get32(&out, p + 20), 4);
        assert_eq!(out[p + 24], 0);
        assert_eq!(&out[p + 32..p + 36], b"abcd");
        assert_eq!(&out[p + 36..p + 68], blake3::hash(&out[..p + 36]).as_bytes());
        assert_eq!(out.len(), p + 68);
    }

    #[test]
    fn borrowed_write_records_are_the_same_bytes() {
        let recs = [
            (3u64, 4096u64, 4u32, Compression::Off, b"abcd".to_vec()),
            (9, 1 << 20, 131072, Compression::Lz4, vec![7u8; 600]),
        ];
        let (mut owned, mut borrowed) = (Vec::new(), Vec::new());
        {
            let mut a = StreamWriter::new(Some(&mut owned)).unwrap();
            let mut b = StreamWriter::new(Some(&mut borrowed)).unwrap();
            for (object, offset_bytes, lsize_bytes, compression, payload) in &recs {
                a.record(&Record::Write(WriteRec {
                    object: *object,
                    offset_bytes: *offset_bytes,
                    lsize_bytes: *lsize_bytes,
                    compression: *compression,
                    payload: payload.clone(),
                }))
                .unwrap();
                b.write_record(*object, *offset_bytes, *lsize_bytes, *compression, payload).unwrap();
            }
            assert_eq!((a.records(), a.offset_bytes()), (b.records(), b.offset_bytes()));
            // Out of range, as for `record`: a length that does not match, object 0,
            // an empty payload. Nothing is written.
            let at = b.offset_bytes();
            assert!(matches!(b.write_record(3, 0, 5, Compression::Off, b"abcd"), Err(SendError::Invalid(_))));
            assert!(matches!(b.write_record(0, 0, 4, Compression::Off, b"abcd"), Err(SendError::Invalid(_))));
            assert!(matches!(b.write_record(3, 0, 4, Compression::Lz4, b""), Err(SendError::Invalid(_))));
            assert_eq!(b.offset_bytes(), at);
        }
        assert_eq!(owned, borrowed);
    }
}
