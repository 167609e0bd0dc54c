//! Intent-log records of the POSIX layer and their replay (ZFS `zfs_log.c` and
//! `zfs_replay.c`, our own encodings).
//!
//! Theory: every operation that changes the file system queues one record with the
//! dataset's [`Zilog`](tarn_zil::Zilog) while it still holds its tx, under the same
//! locks that ordered the change, so the log's order is the order the changes were
//! made. Records describe *results*, not requests: a create carries the object id and
//! the complete znode it got, a setattr the resulting attributes; so replay reproduces
//! the same inode numbers and attributes. Writes carry only (object, offset, length);
//! the log fetches the bytes when it commits.
//!
//! Body layouts (little-endian; names are raw bytes):
//! - create / mkdir / symlink: dir u64, obj u64, znode (128 bytes, [`ZnodePhys`]),
//!   name_len u16, target_len u16, name, target (symlinks only).
//! - remove / rmdir: dir u64, name_len u16, name.
//! - link: dir u64, obj u64, name_len u16, name.
//! - rename: sdir u64, tdir u64, flags u32, sname_len u16, tname_len u16, sname, tname.
//! - setattr: obj u64, has_size u8, pad 7, mode u32, uid u32, gid u32, pad 4, size u64,
//!   atime, mtime, ctime (each sec i64, nsec u32, pad 4).
//! - truncate (a punched hole): obj u64, offset u64, length u64.
//!
//! Replay runs once at mount, single-threaded, before the file system is shown to
//! anyone. Each record is applied by the ordinary operation (or, for creates, a variant
//! that takes the logged object id) under exactly one tx hold, and [`Fs::hold`] tells
//! the log which txg that is, so `replay_seq` advances atomically with the change.

use crate::znode::{ZnodePhys, ZNODE_PHYS_SIZE_BYTES};
use crate::{Fs, Result, SetAttr, SetTime, Timespec, ZplError};
use tarn_phys::zil::{TX_CREATE, TX_LINK, TX_MKDIR, TX_REMOVE, TX_RENAME, TX_RMDIR, TX_SETATTR, TX_SYMLINK, TX_TRUNCATE, TX_WRITE};
use tarn_zil::ReplayRecord;

/// Appends little-endian fields.
#[derive(Default)]
pub(crate) struct Body(pub(crate) Vec<u8>);

impl Body {
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    pub(crate) fn time(self, t: Timespec) -> Self {
        self.u64(t.sec as u64).u32(t.nsec).u32(0)
    }
}

/// Reads little-endian fields, failing cleanly on a short body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

fn short() -> ZplError {
    ZplError::Invalid("intent-log record body too short")
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(short)?;
        self.at += n;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn time(&mut self) -> Result<Timespec> {
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        self.u32()?;
        Ok(Timespec { sec, nsec })
    }
}

/// Body of a create/mkdir/symlink record.
pub(crate) fn create_body(dir: u64, obj: u64, z: &ZnodePhys, name: &[u8], target: &[u8]) -> Vec<u8> {
    Body::default()
        .u64(dir)
        .u64(obj)
        .bytes(&z.encode())
        .u16(name.len() as u16)
        .u16(target.len() as u16)
        .bytes(name)
        .bytes(target)
        .0
}

/// Body of a remove/rmdir record.
pub(crate) fn remove_body(dir: u64, name: &[u8]) -> Vec<u8> {
    Body::default().u64(dir).u16(name.len() as u16).bytes(name).0
}

/// Body of a link record.
pub(crate) fn link_body(dir: u64, obj: u64, name: &[u8]) -> Vec<u8> {
    Body::default().u64(dir).u64(obj).u16(name.len() as u16).bytes(name).0
}

/// Body of a rename record.
pub(crate) fn rename_body(sdir: u64, sname: &[u8], tdir: u64, tname: &[u8], flags: u32) -> Vec<u8> {
    Body::default()
        .u64(sdir)
        .u64(tdir)
        .u32(flags)
        .u16(sname.len() as u16)
        .u16(tname.len() as u16)
        .bytes(sname)
        .bytes(tname)
        .0
}

/// Body of a setattr record: the attributes `z` ended up with.
pub(crate) fn setattr_body(obj: u64, z: &ZnodePhys, size_changed: bool) -> Vec<u8> {
    Body::default()
        .u64(obj)
        .u64(u64::from(size_changed))
        .u32(z.mode)
        .u32(z.uid)
        .u32(z.gid)
        .u32(0)
        .u64(z.size)
        .time(z.atime)
        .time(z.mtime)
        .time(z.ctime)
        .0
}

/// Body of a truncate record (a hole punched in `[offset, offset + len)`).
pub(crate) fn truncate_body(obj: u64, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
    Body::default().u64(obj).u64(offset_bytes).u64(len_bytes).0
}

impl Fs {
    /// Apply one replayed record (see the module theory). Expected-outcome errors
    /// (the change is already there) are reported like any other failure.
    pub(crate) fn replay_record(&self, r: &ReplayRecord) -> Result<()> {
        let mut rd = Reader { b: &r.body, at: 0 };
        match r.rtype {
            TX_CREATE | TX_MKDIR | TX_SYMLINK => {
                let dir = rd.u64()?;
                let obj = rd.u64()?;
                let z = ZnodePhys::decode(obj, rd.take(ZNODE_PHYS_SIZE_BYTES)?)?;
                let name_len = rd.u16()? as usize;
                let target_len = rd.u16()? as usize;
                let name = rd.take(name_len)?;
                let target = rd.take(target_len)?;
                self.replay_create(dir, name, obj, z, target)
            }
            TX_REMOVE | TX_RMDIR => {
                let dir = rd.u64()?;
                let n = rd.u16()? as usize;
                let name = rd.take(n)?;
                if r.rtype == TX_RMDIR {
                    self.rmdir(dir, name)
                } else {
                    self.unlink(dir, name)
                }
            }
            TX_LINK => {
                let dir = rd.u64()?;
                let obj = rd.u64()?;
                let n = rd.u16()? as usize;
                self.link(obj, dir, rd.take(n)?).map(|_| ())
            }
            TX_RENAME => {
                let sdir = rd.u64()?;
                let tdir = rd.u64()?;
                let flags = rd.u32()?;
                let sn = rd.u16()? as usize;
                let tn = rd.u16()? as usize;
                let sname = rd.take(sn)?;
                let tname = rd.take(tn)?;
                self.rename(sdir, sname, tdir, tname, flags)
            }
            TX_SETATTR => {
                let obj = rd.u64()?;
                let has_size = rd.u64()? != 0;
                let mode = rd.u32()?;
                let uid = rd.u32()?;
                let gid = rd.u32()?;
                rd.u32()?;
                let size = rd.u64()?;
                let atime = rd.time()?;
                let mtime = rd.time()?;
                let ctime = rd.time()?;
                let s = SetAttr {
                    mode: Some(mode),
                    uid: Some(uid),
                    gid: Some(gid),
                    size: has_size.then_some(size),
                    atime: Some(SetTime::At(atime)),
                    mtime: Some(SetTime::At(mtime)),
                    ctime: Some(ctime),
                };
                self.setattr(obj, s).map(|_| ())
            }
            TX_TRUNCATE => {
                let obj = rd.u64()?;
                let off = rd.u64()?;
                let len = rd.u64()?;
                match self.punch_hole(obj, off, len) {
                    // The file was removed later in the log (or was already gone).
                    Ok(()) | Err(ZplError::NotFound) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            TX_WRITE => {
                let Some((obj, off, data)) = &r.write else {
                    return Err(ZplError::Invalid("write record without data"));
                };
                match self.write(*obj, *off, data) {
                    // The file was removed later in the log (or was already gone).
                    Ok(_) | Err(ZplError::NotFound) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            _ => Err(ZplError::Invalid("unknown intent-log record type")),
        }
    }
}
