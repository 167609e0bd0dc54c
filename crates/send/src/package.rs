//! Package streams: what `zfs send -R`, `-p` and `-I` carry besides object data.
//!
//! A package is a header naming the datasets (with their local properties) and the
//! send streams that follow it back to back, each a complete stream of
//! [`crate::stream`] with its own running checksum. OpenZFS's equivalent is the
//! compound stream whose first `BEGIN` carries an nvlist of file systems and
//! snapshots (`libzfs_sendrecv.c`); ours is a separate, simpler header.
//!
//! Layout (docs/format.md, "Package streams"):
//!
//! ```text
//! magic "TARNSPKG" u64 | version u32 (1) | reserved u32 (0) | payload_len u32 |
//! reserved u32 (0) | payload (JSON, ≤ PACKAGE_PAYLOAD_MAX_BYTES) | BLAKE3-256 of all
//! bytes before it
//! ```
//!
//! then `streams.len()` send streams in the listed order. The reader checks the
//! checksum before parsing the JSON, caps the payload before allocating, and checks
//! every name and the order (a dataset's parent is listed before it; each stream names
//! a listed dataset). A stream that follows must carry the to-guid the package lists
//! for it, which the receiver checks ([`PackageStream::to_guid`]).

use crate::stream::NAME_MAX_BYTES;
use crate::{Result, SendError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// `TARNSPKG` as a little-endian u64.
pub const PACKAGE_MAGIC: u64 = u64::from_le_bytes(*b"TARNSPKG");
/// Package header version written and understood.
pub const PACKAGE_VERSION: u32 = 1;
/// Largest JSON payload (16 MiB: tens of thousands of snapshots).
pub const PACKAGE_PAYLOAD_MAX_BYTES: u32 = 16 << 20;
/// Bytes before the payload.
const FIXED_BYTES: usize = 24;

/// One dataset of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageDataset {
    /// Name relative to the package's top dataset: `""` for the top, `"a/b"` for
    /// `top/a/b`.
    pub name: String,
    /// Locally set properties (`-p`, `-R`); empty otherwise.
    pub props: BTreeMap<String, String>,
}

/// One send stream of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageStream {
    /// Relative dataset name (one of [`Package::datasets`]).
    pub dataset: String,
    /// Short name of the snapshot the stream recreates (after `@`).
    pub snap: String,
    /// The stream's to-guid.
    pub to_guid: u64,
    /// Its from-guid (0 for a full stream).
    pub from_guid: u64,
}

/// A package header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    /// Full name of the sent top dataset on the sender (`pool/fs`).
    pub top: String,
    /// Datasets, parents before children.
    pub datasets: Vec<PackageDataset>,
    /// Streams in the order they follow the header.
    pub streams: Vec<PackageStream>,
}

fn corrupt(what: &'static str) -> SendError {
    SendError::Corrupt {
        record_index: 0,
        offset_bytes: 0,
        what,
    }
}

fn name_ok(n: &str, may_be_empty: bool) -> bool {
    (may_be_empty || !n.is_empty())
        && n.len() <= NAME_MAX_BYTES
        && !n.starts_with('/')
        && !n.ends_with('/')
        && !n.contains("//")
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:/ ".contains(&b))
        && n.split('/').all(|c| c != "." && c != "..")
}

impl Package {
    /// Check names, order and references (what [`read_package`] enforces).
    pub fn validate(&self) -> Result<()> {
        if !name_ok(&self.top, false) {
            return Err(corrupt("package top dataset name is invalid"));
        }
        let mut seen: Vec<&str> = Vec::new();
        for d in &self.datasets {
            if !name_ok(&d.name, true) || seen.contains(&d.name.as_str()) {
                return Err(corrupt("package dataset name is invalid or repeated"));
            }
            let parent_listed = match d.name.rfind('/') {
                Some(i) => seen.contains(&&d.name[..i]),
                None => d.name.is_empty() || seen.contains(&""),
            };
            if !parent_listed {
                return Err(corrupt("package lists a dataset before its parent"));
            }
            if d.props.iter().any(|(k, v)| k.is_empty() || k.len() > 256 || v.len() > 4096) {
                return Err(corrupt("package property is invalid"));
            }
            seen.push(&d.name);
        }
        for s in &self.streams {
            if !seen.contains(&s.dataset.as_str()) || !name_ok(&s.snap, false) || s.snap.contains('/') || s.to_guid == 0 {
                return Err(corrupt("package stream names an unknown dataset or a bad snapshot"));
            }
        }
        Ok(())
    }
}

/// Write the header of `p` (its streams follow, written by the caller).
/// Errors: `Invalid` for a package [`Package::validate`] refuses; `Io`.
pub fn write_package(out: &mut dyn Write, p: &Package) -> Result<u64> {
    p.validate().map_err(|_| SendError::Invalid("package fails its own checks"))?;
    let payload = serde_json::to_vec(p).map_err(|_| SendError::Invalid("package does not serialize"))?;
    if payload.len() > PACKAGE_PAYLOAD_MAX_BYTES as usize {
        return Err(SendError::Invalid("package header over 16 MiB"));
    }
    let mut b = Vec::with_capacity(FIXED_BYTES + payload.len() + 32);
    b.extend_from_slice(&PACKAGE_MAGIC.to_le_bytes());
    b.extend_from_slice(&PACKAGE_VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&payload);
    let sum = blake3::hash(&b);
    b.extend_from_slice(sum.as_bytes());
    out.write_all(&b)?;
    Ok(b.len() as u64)
}

fn fill(input: &mut dyn Read, buf: &mut [u8], at: u64) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => return Err(SendError::Truncated { offset_bytes: at + got as u64 }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SendError::Io(e)),
        }
    }
    Ok(())
}

/// Read a package header whose 8 magic bytes were already read (and matched
/// [`PACKAGE_MAGIC`]). Errors: `Version`, `Truncated`, `Checksum`, `Corrupt`, `Io`.
pub fn read_package(input: &mut dyn Read) -> Result<Package> {
    let mut fixed = [0u8; FIXED_BYTES];
    fixed[..8].copy_from_slice(&PACKAGE_MAGIC.to_le_bytes());
    fill(input, &mut fixed[8..], 8)?;
    let u32_at = |o: usize| u32::from_le_bytes([fixed[o], fixed[o + 1], fixed[o + 2], fixed[o + 3]]);
    let version = u32_at(8);
    if version != PACKAGE_VERSION {
        return Err(SendError::Version(version));
    }
    if u32_at(12) != 0 || u32_at(20) != 0 {
        return Err(corrupt("package reserved bytes not zero"));
    }
    let len = u32_at(16);
    if len > PACKAGE_PAYLOAD_MAX_BYTES {
        return Err(corrupt("package header longer than allowed"));
    }
    let mut payload = vec![0u8; len as usize];
    fill(input, &mut payload, FIXED_BYTES as u64)?;
    let mut sum = [0u8; 32];
    fill(input, &mut sum, (FIXED_BYTES + payload.len()) as u64)?;
    let mut h = blake3::Hasher::new();
    h.update(&fixed);
    h.update(&payload);
    if h.finalize().as_bytes() != &sum {
        return Err(SendError::Checksum {
            record_index: 0,
            offset_bytes: 0,
        });
    }
    let p: Package = serde_json::from_slice(&payload).map_err(|_| corrupt("package header is not valid JSON of the expected shape"))?;
    p.validate()?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Package {
        Package {
            top: "tank/a".into(),
            datasets: vec![
                PackageDataset {
                    name: "".into(),
                    props: [("compression".to_string(), "lz4".to_string())].into(),
                },
                PackageDataset {
                    name: "b".into(),
                    props: BTreeMap::new(),
                },
            ],
            streams: vec![
                PackageStream {
                    dataset: "".into(),
                    snap: "s1".into(),
                    to_guid: 7,
                    from_guid: 0,
                },
                PackageStream {
                    dataset: "b".into(),
                    snap: "s1".into(),
                    to_guid: 9,
                    from_guid: 0,
                },
            ],
        }
    }

    fn roundtrip(bytes: &[u8]) -> Result<Package> {
        let mut r = bytes;
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(SendError::Io)?;
        assert_eq!(u64::from_le_bytes(magic), PACKAGE_MAGIC);
        read_package(&mut r)
    }

    #[test]
    fn package_round_trips_and_every_damage_is_refused() {
        let p = sample();
        let mut b = Vec::new();
        let n = write_package(&mut b, &p).unwrap();
        assert_eq!(n as usize, b.len());
        assert_eq!(roundtrip(&b).unwrap(), p);
        for i in 8..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x20;
            assert!(roundtrip(&c).is_err(), "flip at byte {i} accepted");
        }
        for cut in 8..b.len() {
            assert!(roundtrip(&b[..cut]).is_err(), "truncation at {cut} accepted");
        }
    }

    #[test]
    fn bad_packages_are_refused() {
        let mut p = sample();
        p.datasets.swap(0, 1);
        assert!(p.validate().is_err(), "child before parent");
        let mut p = sample();
        p.streams[0].dataset = "zz".into();
        assert!(p.validate().is_err(), "unknown dataset");
        let mut p = sample();
        p.datasets[1].name = "../x".into();
        assert!(p.validate().is_err(), "dot-dot name");
        let mut p = sample();
        p.streams[1].snap = "a/b".into();
        assert!(p.validate().is_err(), "slash in snapshot");
        // A huge declared length is refused before allocating.
        let mut b = Vec::new();
        write_package(&mut b, &sample()).unwrap();
        b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(roundtrip(&b), Err(SendError::Corrupt { .. })));
    }
}
