//! # znode — the POSIX attributes of one object, kept in its bonus buffer
//!
//! Theory: every file, directory, symlink and special file is one DMU object; its
//! inode attributes live in the object's bonus buffer as a [`ZnodePhys`] (OpenZFS keeps
//! `znode_phys_t` / SA attributes in the same place). The bonus buffer is written in
//! the same transaction as the data and directory changes it describes, so after a
//! crash the attributes and the contents belong to the same txg.
//!
//! On-disk layout (little-endian, [`ZNODE_PHYS_SIZE_BYTES`] = 128 bytes, fits the
//! 320-byte bonus):
//!
//! | offset | size | field        | meaning                                             |
//! |-------:|-----:|--------------|-----------------------------------------------------|
//! | 0      | 4    | magic        | [`ZNODE_MAGIC`] ("ZNOD" as a little-endian u32)      |
//! | 4      | 4    | mode         | `st_mode`: S_IFMT type bits and 12 permission bits  |
//! | 8      | 4    | uid          | owner                                               |
//! | 12     | 4    | gid          | group                                               |
//! | 16     | 8    | links        | hard links (directories: 2 + subdirectories)        |
//! | 24     | 8    | size         | bytes (file, symlink); 2 + entries (directory)      |
//! | 32     | 8    | parent       | object id of the parent directory (`..`)            |
//! | 40     | 8    | gen          | txg of creation (NFS-style generation)              |
//! | 48     | 8    | rdev         | device number of block/char special files           |
//! | 56     | 8    | flags        | reserved for chattr-style flags; must be 0 today    |
//! | 64     | 16   | atime        | i64 seconds, u32 nanoseconds, u32 zero              |
//! | 80     | 16   | mtime        | same                                                |
//! | 96     | 16   | ctime        | same                                                |
//! | 112    | 16   | crtime       | same                                                |
//!
//! Invariants (checked by [`ZnodePhys::decode`], which returns `Corrupt` rather than
//! panicking): the magic matches, the mode's type bits name a known [`FileKind`],
//! nanoseconds are below 10^9 and the padding words are zero.
//!
//! Limits: no extended attributes or ACLs yet (there is room in the bonus for them).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::ZplError;

/// Size of an encoded [`ZnodePhys`] in bytes.
pub const ZNODE_PHYS_SIZE_BYTES: usize = 128;
/// Magic number at offset 0 of every znode ("ZNOD").
pub const ZNODE_MAGIC: u32 = u32::from_le_bytes(*b"ZNOD");

/// Byte offsets of the znode fields (documented in `docs/format.md`).
pub mod offset {
    /// `magic` (u32).
    pub const MAGIC: usize = 0;
    /// `mode` (u32).
    pub const MODE: usize = 4;
    /// `uid` (u32).
    pub const UID: usize = 8;
    /// `gid` (u32).
    pub const GID: usize = 12;
    /// `links` (u64).
    pub const LINKS: usize = 16;
    /// `size` (u64).
    pub const SIZE: usize = 24;
    /// `parent` (u64).
    pub const PARENT: usize = 32;
    /// `gen` (u64).
    pub const GEN: usize = 40;
    /// `rdev` (u64).
    pub const RDEV: usize = 48;
    /// `flags` (u64).
    pub const FLAGS: usize = 56;
    /// `atime` (i64 + u32 + u32 zero).
    pub const ATIME: usize = 64;
    /// `mtime`.
    pub const MTIME: usize = 80;
    /// `ctime`.
    pub const CTIME: usize = 96;
    /// `crtime`.
    pub const CRTIME: usize = 112;
}

const _: () = assert!(offset::CRTIME + 16 == ZNODE_PHYS_SIZE_BYTES);
const _: () = assert!(ZNODE_PHYS_SIZE_BYTES <= 320);

/// File-type bits of `st_mode`.
pub const S_IFMT: u32 = 0o170000;
/// Permission bits (including setuid, setgid, sticky).
pub const S_IPERM: u32 = 0o7777;
/// Set-group-id bit.
pub const S_ISGID: u32 = 0o2000;

/// The type of a file, as stored in the S_IFMT bits of its mode and in the top four
/// bits of its directory entries (ZFS's `ZFS_DIRENT_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Block special file.
    BlockDev,
    /// Character special file.
    CharDev,
    /// Named pipe.
    Fifo,
    /// Unix-domain socket.
    Socket,
}

impl FileKind {
    /// The S_IFMT bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Fifo => 0o010000,
            FileKind::CharDev => 0o020000,
            FileKind::Dir => 0o040000,
            FileKind::BlockDev => 0o060000,
            FileKind::File => 0o100000,
            FileKind::Symlink => 0o120000,
            FileKind::Socket => 0o140000,
        }
    }

    /// The kind named by the S_IFMT bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & S_IFMT {
            0o010000 => FileKind::Fifo,
            0o020000 => FileKind::CharDev,
            0o040000 => FileKind::Dir,
            0o060000 => FileKind::BlockDev,
            0o100000 => FileKind::File,
            0o120000 => FileKind::Symlink,
            0o140000 => FileKind::Socket,
            _ => return None,
        })
    }

    /// The 4-bit code stored in a directory entry (`mode >> 12`, i.e. DT_*).
    pub fn dirent_code(self) -> u64 {
        u64::from(self.mode_bits() >> 12)
    }

    /// Decode a directory-entry type code.
    pub fn from_dirent_code(code: u64) -> Option<FileKind> {
        FileKind::from_mode((code as u32) << 12)
    }
}

/// A POSIX timestamp: seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timespec {
    /// Seconds since 1970-01-01 UTC (negative before).
    pub sec: i64,
    /// Nanoseconds, below 1_000_000_000.
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        Timespec::from_system_time(SystemTime::now())
    }

    /// Convert from `SystemTime` (times before the epoch are supported).
    pub fn from_system_time(t: SystemTime) -> Timespec {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                Timespec { sec, nsec }
            }
        }
    }

    /// Convert to `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        if self.sec >= 0 {
            UNIX_EPOCH + std::time::Duration::new(self.sec as u64, self.nsec)
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs(self.sec.unsigned_abs()) + std::time::Duration::from_nanos(u64::from(self.nsec))
        }
    }
}

/// The decoded znode attributes of one object (the in-memory twin of the on-disk
/// layout described in the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZnodePhys {
    /// `st_mode` including type bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub links: u64,
    /// Size in bytes (directories: 2 + entries).
    pub size: u64,
    /// Parent directory object.
    pub parent: u64,
    /// Creation txg.
    pub gen: u64,
    /// Device number.
    pub rdev: u64,
    /// Reserved flags (0).
    pub flags: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last content modification.
    pub mtime: Timespec,
    /// Last attribute change.
    pub ctime: Timespec,
    /// Creation.
    pub crtime: Timespec,
}

fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl ZnodePhys {
    /// The file kind named by `mode` (valid after `decode` or construction by `Fs`).
    pub fn kind(&self) -> FileKind {
        FileKind::from_mode(self.mode).expect("znode mode validated at decode")
    }

    /// True for directories.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == FileKind::Dir.mode_bits()
    }

    /// Encode into the fixed little-endian layout.
    pub fn encode(&self) -> [u8; ZNODE_PHYS_SIZE_BYTES] {
        let mut b = [0u8; ZNODE_PHYS_SIZE_BYTES];
        b[offset::MAGIC..][..4].copy_from_slice(&ZNODE_MAGIC.to_le_bytes());
        b[offset::MODE..][..4].copy_from_slice(&self.mode.to_le_bytes());
        b[offset::UID..][..4].copy_from_slice(&self.uid.to_le_bytes());
        b[offset::GID..][..4].copy_from_slice(&self.gid.to_le_bytes());
        b[offset::LINKS..][..8].copy_from_slice(&self.links.to_le_bytes());
        b[offset::SIZE..][..8].copy_from_slice(&self.size.to_le_bytes());
        b[offset::PARENT..][..8].copy_from_slice(&self.parent.to_le_bytes());
        b[offset::GEN..][..8].copy_from_slice(&self.gen.to_le_bytes());
        b[offset::RDEV..][..8].copy_from_slice(&self.rdev.to_le_bytes());
        b[offset::FLAGS..][..8].copy_from_slice(&self.flags.to_le_bytes());
        for (at, t) in [
            (offset::ATIME, self.atime),
            (offset::MTIME, self.mtime),
            (offset::CTIME, self.ctime),
            (offset::CRTIME, self.crtime),
        ] {
            b[at..][..8].copy_from_slice(&t.sec.to_le_bytes());
            b[at + 8..][..4].copy_from_slice(&t.nsec.to_le_bytes());
        }
        b
    }

    /// Decode and validate a bonus buffer of object `object`.
    pub fn decode(object: u64, b: &[u8]) -> Result<ZnodePhys, ZplError> {
        let corrupt = |what| ZplError::Corrupt { object, what };
        if b.len() < ZNODE_PHYS_SIZE_BYTES {
            return Err(corrupt("znode bonus too short"));
        }
        if rd_u32(b, offset::MAGIC) != ZNODE_MAGIC {
            return Err(corrupt("znode magic mismatch"));
        }
        let mode = rd_u32(b, offset::MODE);
        if FileKind::from_mode(mode).is_none() || mode & !(S_IFMT | S_IPERM) != 0 {
            return Err(corrupt("znode mode has unknown type bits"));
        }
        let mut times = [Timespec::default(); 4];
        for (i, at) in [offset::ATIME, offset::MTIME, offset::CTIME, offset::CRTIME].into_iter().enumerate() {
            let sec = rd_u64(b, at) as i64;
            let nsec = rd_u32(b, at + 8);
            if nsec >= 1_000_000_000 || rd_u32(b, at + 12) != 0 {
                return Err(corrupt("znode timestamp invalid"));
            }
            times[i] = Timespec { sec, nsec };
        }
        let flags = rd_u64(b, offset::FLAGS);
        if flags != 0 {
            return Err(corrupt("znode has unknown flags"));
        }
        Ok(ZnodePhys {
            mode,
            uid: rd_u32(b, offset::UID),
            gid: rd_u32(b, offset::GID),
            links: rd_u64(b, offset::LINKS),
            size: rd_u64(b, offset::SIZE),
            parent: rd_u64(b, offset::PARENT),
            gen: rd_u64(b, offset::GEN),
            rdev: rd_u64(b, offset::RDEV),
            flags,
            atime: times[0],
            mtime: times[1],
            ctime: times[2],
            crtime: times[3],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ZnodePhys {
        ZnodePhys {
            mode: 0o100644,
            uid: 1000,
            gid: 100,
            links: 3,
            size: 1 << 40,
            parent: 7,
            gen: 99,
            rdev: 0x0801,
            flags: 0,
            atime: Timespec { sec: -5, nsec: 1 },
            mtime: Timespec {
                sec: 1_700_000_000,
                nsec: 999_999_999,
            },
            ctime: Timespec { sec: 2, nsec: 3 },
            crtime: Timespec { sec: 4, nsec: 5 },
        }
    }

    #[test]
    fn roundtrip_and_offsets() {
        let z = sample();
        let b = z.encode();
        assert_eq!(ZnodePhys::decode(9, &b).unwrap(), z);
        assert_eq!(&b[0..4], b"ZNOD");
        assert_eq!(rd_u32(&b, offset::MODE), 0o100644);
        assert_eq!(rd_u64(&b, offset::SIZE), 1 << 40);
        assert_eq!(rd_u64(&b, offset::PARENT), 7);
        assert_eq!(rd_u64(&b, offset::MTIME), 1_700_000_000);
        assert_eq!(rd_u32(&b, offset::MTIME + 8), 999_999_999);
    }

    #[test]
    fn decode_rejects_garbage() {
        let good = sample().encode();
        for (at, val) in [
            (offset::MAGIC, 1u8),
            (offset::MODE + 1, 0xff),
            (offset::ATIME + 11, 0x7f),
            (offset::CTIME + 12, 1),
            (offset::FLAGS, 1),
        ] {
            let mut b = good;
            b[at] ^= val;
            assert!(matches!(ZnodePhys::decode(3, &b), Err(ZplError::Corrupt { object: 3, .. })), "byte {at}");
        }
        assert!(ZnodePhys::decode(3, &good[..100]).is_err());
        assert!(ZnodePhys::decode(3, &[]).is_err());
    }

    #[test]
    fn kinds_and_times() {
        for k in [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::BlockDev,
            FileKind::CharDev,
            FileKind::Fifo,
            FileKind::Socket,
        ] {
            assert_eq!(FileKind::from_mode(k.mode_bits() | 0o755), Some(k));
            assert_eq!(FileKind::from_dirent_code(k.dirent_code()), Some(k));
            assert!(k.dirent_code() < 16);
        }
        assert_eq!(FileKind::from_mode(0o644), None);
        let t = Timespec { sec: -3, nsec: 250 };
        assert_eq!(Timespec::from_system_time(t.to_system_time()), t);
        let t = Timespec { sec: 1_600_000_000, nsec: 7 };
        assert_eq!(Timespec::from_system_time(t.to_system_time()), t);
    }
}
