//! Block checksums. Every block's checksum lives in its parent's block pointer
//! (invariant 4); self-checksummed structures (uberblock, label config) carry their own.
//!
//! Algorithms (one byte in the block pointer): BLAKE3-256; fletcher4 (ZFS's fast
//! non-crypto sum: four u64 accumulators over little-endian u32 words, no modulus;
//! OpenZFS `module/zcommon/zfs_fletcher.c`); SHA-256; and SHA-512/256 (what OpenZFS
//! calls `sha512`: SHA-512 truncated to 256 bits with its own initial values, FIPS
//! 180-4). BLAKE3, SHA-256 and SHA-512/256 are cryptographic ([`ChecksumAlg::is_strong`]):
//! metadata always uses one, and only they allow nopwrite (OpenZFS
//! `ZCHECKSUM_FLAG_NOPWRITE`). `Off` is allowed for file data only
//! (`checksum=off`): its stored sum is all zeros and every read "verifies".

use crate::Corrupt;
use sha2::Digest;

/// A 256-bit checksum value as stored in a block pointer.
pub type Checksum = [u8; 32];

/// Checksum algorithm recorded in a block pointer (one byte on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum ChecksumAlg {
    /// No checksum: holes, and file data of a dataset with `checksum=off`.
    Off = 0,
    /// BLAKE3-256 over the physical (post-compression) bytes.
    Blake3 = 1,
    /// ZFS fletcher4; 4×u64 = 256 bits.
    Fletcher4 = 2,
    /// SHA-256.
    Sha256 = 3,
    /// SHA-512/256 (OpenZFS `sha512`).
    Sha512 = 4,
}

impl ChecksumAlg {
    /// Decode from the on-disk byte.
    pub fn from_u8(v: u8) -> Result<Self, Corrupt> {
        match v {
            0 => Ok(Self::Off),
            1 => Ok(Self::Blake3),
            2 => Ok(Self::Fletcher4),
            3 => Ok(Self::Sha256),
            4 => Ok(Self::Sha512),
            _ => Err(Corrupt::new("blkptr", format!("unknown checksum algorithm {v}"))),
        }
    }

    /// Compute this algorithm's checksum of `data`. `Off` yields all zeros.
    pub fn compute(self, data: &[u8]) -> Checksum {
        match self {
            Self::Off => [0; 32],
            Self::Blake3 => *blake3::hash(data).as_bytes(),
            Self::Fletcher4 => fletcher4(data),
            Self::Sha256 => sha2::Sha256::digest(data).into(),
            Self::Sha512 => sha2::Sha512_256::digest(data).into(),
        }
    }

    /// Cryptographically strong (collision resistant): BLAKE3, SHA-256, SHA-512/256.
    pub fn is_strong(self) -> bool {
        matches!(self, Self::Blake3 | Self::Sha256 | Self::Sha512)
    }

    /// The `checksum` property value naming this algorithm.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Blake3 => "blake3",
            Self::Fletcher4 => "fletcher4",
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }

    /// Parse a `checksum` property value: `on` (fletcher4, OpenZFS's default),
    /// `off`, `fletcher4`, `sha256`, `sha512`, `blake3`. `fletcher2`, `skein`, `edonr`
    /// and `noparity` are not implemented and give `None`, as anything else does.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "on" | "fletcher4" => Self::Fletcher4,
            "off" => Self::Off,
            "sha256" => Self::Sha256,
            "sha512" => Self::Sha512,
            "blake3" => Self::Blake3,
            _ => return None,
        })
    }
}

/// ZFS fletcher4 over `data` (length is padded with zeros to a multiple of 4 bytes).
pub fn fletcher4(data: &[u8]) -> Checksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(4);
    for w in &mut chunks {
        let v = u32::from_le_bytes(w.try_into().unwrap()) as u64;
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        let v = u32::from_le_bytes(w) as u64;
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let mut out = [0u8; 32];
    for (i, x) in [a, b, c, d].iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn fletcher4_known_small() {
        // words 1,2: a=3, b=1+3=4, c=1+4=5, d=1+5=6
        let mut data = Vec::new();
        data.extend_from_slice(&1u32.to_le_bytes());
        data.extend_from_slice(&2u32.to_le_bytes());
        let c = fletcher4(&data);
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(c[8..16].try_into().unwrap()), 4);
        assert_eq!(u64::from_le_bytes(c[16..24].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(c[24..32].try_into().unwrap()), 6);
    }
    /// Known answers: FIPS 180-4 test vectors for "abc".
    #[test]
    fn sha_known_answers() {
        let hex = |c: Checksum| c.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(ChecksumAlg::Sha256.compute(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(ChecksumAlg::Sha512.compute(b"abc")),
            "53048e2681941ef99b2e29b76b4c7dabe4c2d0c634fc6d46e0e2f13107e7af23"
        );
        for v in 0..=u8::MAX {
            match ChecksumAlg::from_u8(v) {
                Ok(a) => {
                    assert_eq!(a as u8, v);
                    assert_eq!(ChecksumAlg::parse(a.name()), Some(a));
                }
                Err(_) => assert!(v > 4),
            }
        }
        assert_eq!(ChecksumAlg::parse("on"), Some(ChecksumAlg::Fletcher4));
        for bad in ["skein", "edonr", "fletcher2", "noparity", "SHA256", ""] {
            assert_eq!(ChecksumAlg::parse(bad), None);
        }
    }

    #[test]
    fn blake3_detects_flip() {
        let mut d = vec![7u8; 4096];
        let a = ChecksumAlg::Blake3.compute(&d);
        d[100] ^= 1;
        assert_ne!(a, ChecksumAlg::Blake3.compute(&d));
    }
}
