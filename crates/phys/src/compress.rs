//! Block compression. A block is stored compressed only when that saves at least
//! 1/8 of its size (OpenZFS's rule in `zio_compress_data`); otherwise it is stored
//! as is and the block pointer says `Off`. Compressed LZ4 payloads carry a 4-byte
//! little-endian length prefix so that trailing sector padding can be ignored.

use crate::Corrupt;

/// Compression algorithm recorded in a block pointer and used as the `compression`
/// dataset property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is.
    Off = 0,
    /// LZ4 block format (lz4_flex), 4-byte LE compressed-length prefix.
    Lz4 = 1,
}

impl Compression {
    /// Decode from the on-disk byte.
    pub fn from_u8(v: u8) -> Result<Self, Corrupt> {
        match v {
            0 => Ok(Self::Off),
            1 => Ok(Self::Lz4),
            _ => Err(Corrupt::new("blkptr", format!("unknown compression {v}"))),
        }
    }

    /// Property spelling (`off`, `lz4`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Lz4 => "lz4",
        }
    }

    /// Parse a property value; `on` means lz4 as in OpenZFS 2.x.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "lz4" | "on" => Some(Self::Lz4),
            _ => None,
        }
    }

    /// Try to compress `data`. Returns `None` when the algorithm is `Off` or the
    /// result would not save at least 1/8 of the input.
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Off => None,
            Self::Lz4 => {
                let c = lz4_flex::block::compress(data);
                if c.len() + 4 > data.len() - data.len() / 8 {
                    return None;
                }
                let mut out = Vec::with_capacity(c.len() + 4);
                out.extend_from_slice(&(c.len() as u32).to_le_bytes());
                out.extend_from_slice(&c);
                Some(out)
            }
        }
    }

    /// Decompress `data` (physical bytes, possibly padded) into exactly `lsize` bytes.
    pub fn decompress(self, data: &[u8], lsize: usize) -> Result<Vec<u8>, Corrupt> {
        match self {
            Self::Off => {
                if data.len() < lsize {
                    return Err(Corrupt::new("block", "physical shorter than logical"));
                }
                Ok(data[..lsize].to_vec())
            }
            Self::Lz4 => {
                if data.len() < 4 {
                    return Err(Corrupt::new("block", "lz4 payload too short"));
                }
                let clen = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize;
                if 4 + clen > data.len() {
                    return Err(Corrupt::new("block", "lz4 length past end"));
                }
                let out = lz4_flex::block::decompress(&data[4..4 + clen], lsize).map_err(|e| Corrupt::new("block", format!("lz4: {e}")))?;
                if out.len() != lsize {
                    return Err(Corrupt::new("block", "lz4 output size mismatch"));
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn lz4_roundtrip_and_skip_incompressible() {
        let text = b"hello tarn ".repeat(1000);
        let c = Compression::Lz4.compress(&text).expect("compressible");
        let mut padded = c.clone();
        padded.resize(c.len() + 100, 0);
        assert_eq!(Compression::Lz4.decompress(&padded, text.len()).unwrap(), text);
        let mut x = 0x9e3779b97f4a7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        assert!(Compression::Lz4.compress(&noise).is_none());
    }
}
