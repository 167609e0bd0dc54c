//! Intent-log layouts: the ZIL header in the object-set root, log blocks (lwbs) and the
//! common log-record header.
//!
//! Theory (OpenZFS `include/sys/zil.h`, our own encoding): a dataset's intent log is a
//! singly linked chain of log blocks. The header in [`crate::ObjsetPhys`] (bytes
//! 1024..1216) names the chain (`chain_guid`) and its first live block (`head`). Every
//! block carries the pointer to the *next* block, allocated before this one was
//! written, so a block can reach disk before its successor's contents exist. A block
//! is valid only if its magic, chain GUID, sequence number and self-checksum all match
//! what its predecessor promised; the first block that fails ends the chain. That is
//! how a torn write, a block never written, or stale bytes from an older chain end
//! replay cleanly instead of being misread.
//!
//! Header layout (192 bytes): claim_txg u64 @0, replay_seq u64 @8, chain_guid u64 @16,
//! head [`LwbPtr`] @24 (32 bytes), reserved zero to 192.
//!
//! Log block layout (`size_bytes` of the block, a multiple of 4 KiB): magic u64 @0,
//! chain_guid u64 @8, seq u64 @16, used_bytes u32 @24, nrecords u32 @28, next
//! [`LwbPtr`] @32 (32 bytes), zero @64..72, BLAKE3 checksum @72..104 over bytes `0..72`
//! and `128..used_bytes`, zero to 128, then records. Bytes past `used_bytes` are
//! padding and unchecked.
//!
//! [`LwbPtr`] layout (32 bytes): vdev u32 @0, size_bytes u32 @4, offset u64 @8,
//! asize u64 @16, seq u64 @24.
//!
//! Record layout: [`RecordHeader`] (32 bytes: rtype u16 @0, reserved u16 @2, rlen u32
//! @4 = total bytes including the header, a multiple of 8; seq u64 @8; txg u64 @16;
//! reserved u64 @24), then `rlen - 32` body bytes whose layout depends on `rtype`
//! (the POSIX layer owns them, except [`WriteRecord`]'s fixed prefix, which the log
//! itself reads to fetch indirect data).

use crate::blkptr::{BlkPtr, Dva};
use crate::le::*;
use crate::{Corrupt, BLKPTR_SIZE_BYTES};

/// Bytes of the ZIL header inside the object-set root.
pub const ZIL_HEADER_SIZE_BYTES: usize = 192;
/// Bytes of a log block's own header.
pub const LWB_HEADER_SIZE_BYTES: usize = 128;
/// Bytes of a record header.
pub const RECORD_HEADER_SIZE_BYTES: usize = 32;
/// Magic number at the start of every log block ("TARNLWB1" little-endian).
pub const LWB_MAGIC: u64 = u64::from_le_bytes(*b"TARNLWB1");
/// Smallest log block.
pub const LWB_MIN_SIZE_BYTES: u32 = 4 << 10;
/// Largest log block (OpenZFS caps lwbs at 128 KiB as well).
pub const LWB_MAX_SIZE_BYTES: u32 = 128 << 10;

// Field offsets of an encoded [`LwbPtr`].
const PTR_VDEV_OFF: usize = 0;
const PTR_SIZE_OFF: usize = 4;
const PTR_OFFSET_OFF: usize = 8;
const PTR_ASIZE_OFF: usize = 16;
const PTR_SEQ_OFF: usize = 24;

// Field offsets of an encoded [`ZilHeader`]; reserved and zero after the head pointer.
const HDR_CLAIM_TXG_OFF: usize = 0;
const HDR_REPLAY_SEQ_OFF: usize = 8;
const HDR_CHAIN_GUID_OFF: usize = 16;
const HDR_HEAD_OFF: usize = 24;

// Field offsets of a log block's header ([`LwbHeader`]); records start at
// [`LWB_HEADER_SIZE_BYTES`].
const LWB_MAGIC_OFF: usize = 0;
const LWB_CHAIN_GUID_OFF: usize = 8;
const LWB_SEQ_OFF: usize = 16;
const LWB_USED_OFF: usize = 24;
const LWB_NRECORDS_OFF: usize = 28;
const LWB_NEXT_OFF: usize = 32;
/// Zero from the end of `next` to here, and from the checksum's end to the records.
const LWB_CKSUM_OFF: usize = 72;

// Field offsets of an encoded [`RecordHeader`] (2 zero bytes at 2, 8 at 24).
const REC_TYPE_OFF: usize = 0;
const REC_RLEN_OFF: usize = 4;
const REC_SEQ_OFF: usize = 8;
const REC_TXG_OFF: usize = 16;

/// Where a log block lives and which sequence number it must carry (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LwbPtr {
    /// Top-level vdev id.
    pub vdev: u32,
    /// Bytes written (the whole block, 4 KiB multiple); 0 means "no block".
    pub size_bytes: u32,
    /// Offset in the top-level vdev's allocatable space.
    pub offset_bytes: u64,
    /// Allocated bytes (includes raidz parity/padding).
    pub asize_bytes: u64,
    /// Sequence number the block must carry (the chain's position).
    pub seq: u64,
}

impl LwbPtr {
    /// True when no block is named.
    pub fn is_none(&self) -> bool {
        self.size_bytes == 0
    }
    /// The allocation as a DVA.
    pub fn dva(&self) -> Dva {
        Dva {
            vdev: self.vdev,
            asize_bytes: self.asize_bytes,
            offset_bytes: self.offset_bytes,
        }
    }
    fn encode(&self, b: &mut [u8]) {
        put_u32(b, PTR_VDEV_OFF, self.vdev);
        put_u32(b, PTR_SIZE_OFF, self.size_bytes);
        put_u64(b, PTR_OFFSET_OFF, self.offset_bytes);
        put_u64(b, PTR_ASIZE_OFF, self.asize_bytes);
        put_u64(b, PTR_SEQ_OFF, self.seq);
    }
    fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        let p = LwbPtr {
            vdev: u32_at(b, PTR_VDEV_OFF),
            size_bytes: u32_at(b, PTR_SIZE_OFF),
            offset_bytes: u64_at(b, PTR_OFFSET_OFF),
            asize_bytes: u64_at(b, PTR_ASIZE_OFF),
            seq: u64_at(b, PTR_SEQ_OFF),
        };
        if !p.is_none() && (!p.size_bytes.is_multiple_of(LWB_MIN_SIZE_BYTES) || p.size_bytes > LWB_MAX_SIZE_BYTES || p.asize_bytes < p.size_bytes as u64) {
            return Err(Corrupt::new("lwb pointer", format!("size {} asize {}", p.size_bytes, p.asize_bytes)));
        }
        Ok(p)
    }
}

/// Bytes of an encoded [`LwbPtr`].
pub const LWB_PTR_SIZE_BYTES: usize = 32;

/// The per-dataset intent-log header kept in the object-set root (ZFS `zil_header_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZilHeader {
    /// First txg of the import that claimed this log for replay (0: not claimed).
    /// Records born in an earlier txg are already in the pool and are skipped.
    pub claim_txg: u64,
    /// Highest record sequence number whose replay is in the pool (0: none).
    pub replay_seq: u64,
    /// Identity of the current chain; 0 means the dataset has no log.
    pub chain_guid: u64,
    /// First live block of the chain (or the pre-allocated empty block after the last).
    pub head: LwbPtr,
}

impl ZilHeader {
    /// True when there is no chain.
    pub fn is_empty(&self) -> bool {
        self.chain_guid == 0
    }

    /// Encode into `ZIL_HEADER_SIZE_BYTES` bytes.
    pub fn encode(&self) -> [u8; ZIL_HEADER_SIZE_BYTES] {
        let mut b = [0u8; ZIL_HEADER_SIZE_BYTES];
        put_u64(&mut b, HDR_CLAIM_TXG_OFF, self.claim_txg);
        put_u64(&mut b, HDR_REPLAY_SEQ_OFF, self.replay_seq);
        put_u64(&mut b, HDR_CHAIN_GUID_OFF, self.chain_guid);
        self.head.encode(&mut b[HDR_HEAD_OFF..HDR_HEAD_OFF + LWB_PTR_SIZE_BYTES]);
        b
    }

    /// Decode and validate.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < ZIL_HEADER_SIZE_BYTES {
            return Err(Corrupt::new("zil header", "short buffer"));
        }
        if b[HDR_HEAD_OFF + LWB_PTR_SIZE_BYTES..ZIL_HEADER_SIZE_BYTES].iter().any(|&x| x != 0) {
            return Err(Corrupt::new("zil header", "reserved bytes not zero"));
        }
        let h = ZilHeader {
            claim_txg: u64_at(b, HDR_CLAIM_TXG_OFF),
            replay_seq: u64_at(b, HDR_REPLAY_SEQ_OFF),
            chain_guid: u64_at(b, HDR_CHAIN_GUID_OFF),
            head: LwbPtr::decode(&b[HDR_HEAD_OFF..HDR_HEAD_OFF + LWB_PTR_SIZE_BYTES])?,
        };
        if h.chain_guid == 0 && (h != ZilHeader::default()) {
            return Err(Corrupt::new("zil header", "fields set without a chain"));
        }
        Ok(h)
    }
}

/// The fixed header of one log block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LwbHeader {
    /// Chain identity (must equal the ZIL header's).
    pub chain_guid: u64,
    /// Position in the chain.
    pub seq: u64,
    /// Header plus record bytes.
    pub used_bytes: u32,
    /// Records in the block.
    pub nrecords: u32,
    /// The block that follows (allocated before this one was written).
    pub next: LwbPtr,
}

impl LwbHeader {
    /// Seal a log block: write this header into `block[..128]` and the checksum over
    /// the header and `block[128..used_bytes]`. `block.len()` is the block size.
    pub fn seal(&self, block: &mut [u8]) {
        assert!(self.used_bytes as usize <= block.len() && self.used_bytes as usize >= LWB_HEADER_SIZE_BYTES);
        block[..LWB_HEADER_SIZE_BYTES].fill(0);
        put_u64(block, LWB_MAGIC_OFF, LWB_MAGIC);
        put_u64(block, LWB_CHAIN_GUID_OFF, self.chain_guid);
        put_u64(block, LWB_SEQ_OFF, self.seq);
        put_u32(block, LWB_USED_OFF, self.used_bytes);
        put_u32(block, LWB_NRECORDS_OFF, self.nrecords);
        self.next.encode(&mut block[LWB_NEXT_OFF..LWB_NEXT_OFF + LWB_PTR_SIZE_BYTES]);
        let sum = Self::checksum(block, self.used_bytes as usize);
        block[LWB_CKSUM_OFF..LWB_CKSUM_OFF + 32].copy_from_slice(&sum);
    }

    fn checksum(block: &[u8], used: usize) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(&block[..LWB_CKSUM_OFF]);
        h.update(&block[LWB_HEADER_SIZE_BYTES..used]);
        *h.finalize().as_bytes()
    }

    /// Open a log block read from `ptr`: it must carry `chain_guid` and `ptr.seq` and
    /// its checksum must match. Any failure means "the chain ends before this block".
    pub fn open(block: &[u8], chain_guid: u64, seq: u64) -> Result<LwbHeader, Corrupt> {
        let bad = |d: String| Err(Corrupt::new("log block", d));
        if block.len() < LWB_HEADER_SIZE_BYTES || u64_at(block, LWB_MAGIC_OFF) != LWB_MAGIC {
            return bad("bad magic".into());
        }
        let h = LwbHeader {
            chain_guid: u64_at(block, LWB_CHAIN_GUID_OFF),
            seq: u64_at(block, LWB_SEQ_OFF),
            used_bytes: u32_at(block, LWB_USED_OFF),
            nrecords: u32_at(block, LWB_NRECORDS_OFF),
            next: LwbPtr::decode(&block[LWB_NEXT_OFF..LWB_NEXT_OFF + LWB_PTR_SIZE_BYTES])?,
        };
        if h.chain_guid != chain_guid || h.seq != seq {
            return bad(format!(
                "chain {:#x} seq {} where {:#x} seq {} was expected",
                h.chain_guid, h.seq, chain_guid, seq
            ));
        }
        let used = h.used_bytes as usize;
        if used < LWB_HEADER_SIZE_BYTES || used > block.len() {
            return bad(format!("used {used} of {}", block.len()));
        }
        if block[LWB_CKSUM_OFF..LWB_CKSUM_OFF + 32] != Self::checksum(block, used) {
            return bad("checksum mismatch".into());
        }
        if h.next.seq != seq + 1 {
            return bad(format!("next seq {} after {seq}", h.next.seq));
        }
        Ok(h)
    }
}

/// The common header of one log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Record type (owned by the layer that logs it; see `docs/format.md`).
    pub rtype: u16,
    /// Total bytes including this header (multiple of 8).
    pub rlen_bytes: u32,
    /// Log sequence number, unique and increasing within a dataset's log.
    pub seq: u64,
    /// The txg the logged change was made in.
    pub txg: u64,
}

impl RecordHeader {
    /// Encode into the first 32 bytes of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        b[..RECORD_HEADER_SIZE_BYTES].fill(0);
        put_u16(b, REC_TYPE_OFF, self.rtype);
        put_u32(b, REC_RLEN_OFF, self.rlen_bytes);
        put_u64(b, REC_SEQ_OFF, self.seq);
        put_u64(b, REC_TXG_OFF, self.txg);
    }

    /// Decode from `b` (the rest of a block's record area); checks that the record fits.
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < RECORD_HEADER_SIZE_BYTES {
            return Err(Corrupt::new("log record", "short header"));
        }
        let h = RecordHeader {
            rtype: u16_at(b, REC_TYPE_OFF),
            rlen_bytes: u32_at(b, REC_RLEN_OFF),
            seq: u64_at(b, REC_SEQ_OFF),
            txg: u64_at(b, REC_TXG_OFF),
        };
        let len = h.rlen_bytes as usize;
        if len < RECORD_HEADER_SIZE_BYTES || !len.is_multiple_of(8) || len > b.len() {
            return Err(Corrupt::new("log record", format!("length {len} with {} left", b.len())));
        }
        Ok(h)
    }
}

/// Record type: create a regular or special file (numbers as OpenZFS `TX_*`).
pub const TX_CREATE: u16 = 1;
/// Record type: create a directory.
pub const TX_MKDIR: u16 = 2;
/// Record type: create a symbolic link.
pub const TX_SYMLINK: u16 = 4;
/// Record type: remove a non-directory name.
pub const TX_REMOVE: u16 = 5;
/// Record type: remove a directory.
pub const TX_RMDIR: u16 = 6;
/// Record type: add a hard link.
pub const TX_LINK: u16 = 7;
/// Record type: rename (with `renameat2` flags).
pub const TX_RENAME: u16 = 8;
/// Record type of a file write. The log layer itself understands this one body prefix,
/// because it must copy the data in (or write it elsewhere and point at it).
pub const TX_WRITE: u16 = 9;
/// Record type: free a byte range of a file, a hole punched by `fallocate(2)`; the
/// file grows to the range's end when that is past it (OpenZFS `TX_TRUNCATE`).
pub const TX_TRUNCATE: u16 = 10;
/// Record type: change attributes (mode, owner, size, times).
pub const TX_SETATTR: u16 = 11;

/// How a write record carries its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteData {
    /// The bytes follow the prefix inside the record (ZFS `WR_COPIED`).
    Copied(Vec<u8>),
    /// The bytes were written to a block of their own; the record holds its pointer
    /// (ZFS `WR_INDIRECT`). The block's logical size may exceed `length_bytes`.
    Indirect(BlkPtr),
}

/// The body of a [`TX_WRITE`] record: object, offset, length (8+8+8 bytes), a mode byte
/// (0 copied, 1 indirect) padded to 32, then the data or a 128-byte block pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    /// Object (inode) written.
    pub obj: u64,
    /// File offset in bytes.
    pub offset_bytes: u64,
    /// Bytes written.
    pub length_bytes: u64,
    /// Where the bytes are.
    pub data: WriteData,
}

/// Bytes of the fixed part of a write record body.
pub const WRITE_PREFIX_BYTES: usize = 32;
// Field offsets of the fixed part of a write record body (7 zero bytes after the mode).
const WR_OBJECT_OFF: usize = 0;
const WR_OFFSET_OFF: usize = 8;
const WR_LENGTH_OFF: usize = 16;
const WR_MODE_OFF: usize = 24;

impl WriteRecord {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        let extra = match &self.data {
            WriteData::Copied(d) => d.len(),
            WriteData::Indirect(_) => BLKPTR_SIZE_BYTES,
        };
        let mut b = vec![0u8; WRITE_PREFIX_BYTES + extra];
        put_u64(&mut b, WR_OBJECT_OFF, self.obj);
        put_u64(&mut b, WR_OFFSET_OFF, self.offset_bytes);
        put_u64(&mut b, WR_LENGTH_OFF, self.length_bytes);
        match &self.data {
            WriteData::Copied(d) => b[WRITE_PREFIX_BYTES..].copy_from_slice(d),
            WriteData::Indirect(bp) => {
                b[WR_MODE_OFF] = 1;
                bp.encode_into(&mut b[WRITE_PREFIX_BYTES..]);
            }
        }
        b
    }

    /// Decode a body (which may carry trailing padding).
    pub fn decode(b: &[u8]) -> Result<Self, Corrupt> {
        if b.len() < WRITE_PREFIX_BYTES {
            return Err(Corrupt::new("write record", "short"));
        }
        let length = u64_at(b, WR_LENGTH_OFF);
        let data = match b[WR_MODE_OFF] {
            0 => {
                let end = WRITE_PREFIX_BYTES.checked_add(length as usize).filter(|&e| e <= b.len());
                let Some(end) = end else {
                    return Err(Corrupt::new("write record", format!("{length} bytes do not fit")));
                };
                WriteData::Copied(b[WRITE_PREFIX_BYTES..end].to_vec())
            }
            1 => {
                if b.len() < WRITE_PREFIX_BYTES + BLKPTR_SIZE_BYTES {
                    return Err(Corrupt::new("write record", "short block pointer"));
                }
                let bp = BlkPtr::decode(&b[WRITE_PREFIX_BYTES..WRITE_PREFIX_BYTES + BLKPTR_SIZE_BYTES])?;
                if (bp.lsize_bytes as u64) < length {
                    return Err(Corrupt::new("write record", "block shorter than the write"));
                }
                WriteData::Indirect(bp)
            }
            m => return Err(Corrupt::new("write record", format!("mode {m}"))),
        };
        Ok(WriteRecord {
            obj: u64_at(b, WR_OBJECT_OFF),
            offset_bytes: u64_at(b, WR_OFFSET_OFF),
            length_bytes: length,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(seq: u64) -> LwbPtr {
        LwbPtr {
            vdev: 1,
            size_bytes: 8192,
            offset_bytes: 1 << 20,
            asize_bytes: 8192,
            seq,
        }
    }

    #[test]
    fn header_roundtrip_and_validation() {
        let h = ZilHeader {
            claim_txg: 7,
            replay_seq: 3,
            chain_guid: 0xabc,
            head: ptr(5),
        };
        assert_eq!(ZilHeader::decode(&h.encode()).unwrap(), h);
        assert_eq!(ZilHeader::decode(&[0u8; 192]).unwrap(), ZilHeader::default());
        let mut b = h.encode();
        b[191] = 1;
        assert!(ZilHeader::decode(&b).is_err());
        let orphan = ZilHeader { chain_guid: 0, ..h };
        assert!(ZilHeader::decode(&orphan.encode()).is_err());
    }

    #[test]
    fn lwb_seal_open_and_rejections() {
        let mut block = vec![0u8; 8192];
        let rec = RecordHeader {
            rtype: TX_WRITE,
            rlen_bytes: 64,
            seq: 9,
            txg: 4,
        };
        rec.encode(&mut block[128..]);
        block[160..192].fill(0x5a);
        let h = LwbHeader {
            chain_guid: 42,
            seq: 5,
            used_bytes: 192,
            nrecords: 1,
            next: ptr(6),
        };
        h.seal(&mut block);
        assert_eq!(LwbHeader::open(&block, 42, 5).unwrap(), h);
        assert_eq!(RecordHeader::decode(&block[128..192]).unwrap(), rec);
        // Padding past used_bytes is not covered.
        block[4000] ^= 1;
        assert!(LwbHeader::open(&block, 42, 5).is_ok());
        // Wrong chain, wrong seq, flipped record byte: all end the chain.
        assert!(LwbHeader::open(&block, 43, 5).is_err());
        assert!(LwbHeader::open(&block, 42, 6).is_err());
        block[170] ^= 1;
        assert!(LwbHeader::open(&block, 42, 5).is_err());
        assert!(LwbHeader::open(&[0u8; 8192], 42, 5).is_err());
    }

    #[test]
    fn record_header_bounds() {
        let mut b = vec![0u8; 40];
        RecordHeader {
            rtype: 1,
            rlen_bytes: 48,
            seq: 1,
            txg: 1,
        }
        .encode(&mut b);
        assert!(RecordHeader::decode(&b).is_err(), "48-byte record in 40 bytes");
        RecordHeader {
            rtype: 1,
            rlen_bytes: 36,
            seq: 1,
            txg: 1,
        }
        .encode(&mut b);
        assert!(RecordHeader::decode(&b).is_err(), "length not a multiple of 8");
    }

    #[test]
    fn write_record_roundtrip() {
        let w = WriteRecord {
            obj: 9,
            offset_bytes: 4096,
            length_bytes: 5,
            data: WriteData::Copied(b"hello".to_vec()),
        };
        let mut enc = w.encode();
        enc.extend_from_slice(&[0, 0, 0]);
        assert_eq!(WriteRecord::decode(&enc).unwrap(), w);
        let mut bad = w.encode();
        bad[16] = 200;
        assert!(WriteRecord::decode(&bad).is_err());
    }
}
