//! Block compression: the algorithms a block pointer may name and the `compression`
//! dataset property that picks one (zfsprops(7)).
//!
//! Theory. A block is stored compressed only when that saves at least 1/8 of its
//! logical size (OpenZFS's 12.5% threshold in `zio_compress_data`) *and* at least one
//! 512-byte unit once the payload is rounded up to 512 bytes (OpenZFS rounds `psize`
//! to `SPA_MINBLOCKSIZE`); otherwise it is stored as is and the block pointer says
//! `Off`. The algorithm is recorded in the pointer's compression byte (one code per
//! algorithm, and one per gzip level, as OpenZFS's `enum zio_compress`); a zstd level
//! is recorded in the payload's header, as OpenZFS keeps it in `zfs_zstdhdr_t`, so a
//! block reads back whatever the dataset's property says later.
//!
//! Payload layout (docs/format.md §5): every compressed payload starts with a 4-byte
//! little-endian length of the algorithm's output (`c_len`), so trailing padding is
//! ignored; zstd payloads add a 4-byte little-endian signed level (1..=19, or −N for
//! `zstd-fast-N`) before the frame. The rest, up to `psize`, is zero padding.
//!
//! Invariants: decompression never allocates more than the block's logical size
//! (every decoder writes into a buffer of exactly `lsize` bytes and fails when the
//! stream wants more: zstd and gzip bombs, over-long zle runs), never panics, and
//! returns [`Corrupt`] for a truncated, padded-wrong or trailing-garbage stream.
//!
//! Early abort (OpenZFS 2.2 `zfs_zstd_compress_buf`): for zstd level 3 and up on
//! blocks of at least 128 KiB, LZ4 is tried first as a cheap predictor; if LZ4 saves
//! the 1/8 the expensive level runs; if not, zstd-1 is tried, and when that fails too
//! the block is stored as is without running the expensive level.
//!
//! Called by: zio's write pipeline (`compress`), its read pipeline and send/receive
//! (`decompress`), spa's property checks (`CompressSetting::parse`).

use crate::Corrupt;
use std::cell::RefCell;

/// Compression algorithm recorded in a block pointer (one byte on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is.
    Off = 0,
    /// LZ4 block format (lz4_flex).
    Lz4 = 1,
    /// Zero-length encoding: runs of zero bytes (OpenZFS `zle`, our own coder).
    Zle = 2,
    /// zlib stream (deflate, as OpenZFS's gzip uses `compress2`), level 1.
    Gzip1 = 3,
    /// gzip level 2.
    Gzip2 = 4,
    /// gzip level 3.
    Gzip3 = 5,
    /// gzip level 4.
    Gzip4 = 6,
    /// gzip level 5.
    Gzip5 = 7,
    /// gzip level 6 (`gzip`).
    Gzip6 = 8,
    /// gzip level 7.
    Gzip7 = 9,
    /// gzip level 8.
    Gzip8 = 10,
    /// gzip level 9.
    Gzip9 = 11,
    /// zstd frame; the level is in the payload header.
    Zstd = 12,
}

/// Smallest block that zstd's early abort looks at (OpenZFS `zstd_abort_size`).
pub const ZSTD_ABORT_SIZE_BYTES: usize = 128 << 10;
/// Lowest zstd level that gets the early-abort passes (OpenZFS `zstd_cutoff_level`).
pub const ZSTD_CUTOFF_LEVEL: i32 = 3;
/// zstd-fast levels OpenZFS accepts (`zstd-fast-N`), as positive N.
pub const ZSTD_FAST_LEVELS: &[i32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 500, 1000];
/// Largest zstd window a frame may ask for when decoded: 2^21 bytes, above the
/// largest block ([`crate::MAX_BLOCK_SIZE_BYTES`], 1 MiB) and its metaslab pages.
const ZSTD_WINDOW_LOG_MAX: u32 = 21;
/// Bytes of the length prefix every compressed payload starts with.
const CLEN_BYTES: usize = 4;
/// Bytes of a zstd payload header (length + level).
const ZSTD_HDR_BYTES: usize = 8;
/// A compressed payload is rounded up to this (OpenZFS `SPA_MINBLOCKSIZE`).
const PSIZE_ROUND_BYTES: usize = 512;
/// zle: token values below this start a literal run of `token + 1` bytes; the others a
/// run of `token − ZLE_N + 1` zero bytes (OpenZFS uses the same split, n = 64).
const ZLE_N: usize = 64;

impl Compression {
    /// Every code, in code order.
    pub const ALL: [Compression; 13] = [
        Self::Off,
        Self::Lz4,
        Self::Zle,
        Self::Gzip1,
        Self::Gzip2,
        Self::Gzip3,
        Self::Gzip4,
        Self::Gzip5,
        Self::Gzip6,
        Self::Gzip7,
        Self::Gzip8,
        Self::Gzip9,
        Self::Zstd,
    ];

    /// Decode from the on-disk byte. Errors: `Corrupt` for an unknown code.
    pub fn from_u8(v: u8) -> Result<Self, Corrupt> {
        Self::ALL
            .get(v as usize)
            .copied()
            .ok_or_else(|| Corrupt::new("blkptr", format!("unknown compression {v}")))
    }

    /// OpenZFS's name of the algorithm (`off`, `lz4`, `zle`, `gzip-6`, `zstd`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Lz4 => "lz4",
            Self::Zle => "zle",
            Self::Gzip1 => "gzip-1",
            Self::Gzip2 => "gzip-2",
            Self::Gzip3 => "gzip-3",
            Self::Gzip4 => "gzip-4",
            Self::Gzip5 => "gzip-5",
            Self::Gzip6 => "gzip-6",
            Self::Gzip7 => "gzip-7",
            Self::Gzip8 => "gzip-8",
            Self::Gzip9 => "gzip-9",
            Self::Zstd => "zstd",
        }
    }

    /// gzip level 1..=9 of a gzip code, `None` for the others.
    pub fn gzip_level(self) -> Option<u32> {
        let c = self as u8;
        (Self::Gzip1 as u8..=Self::Gzip9 as u8)
            .contains(&c)
            .then(|| u32::from(c - Self::Gzip1 as u8 + 1))
    }

    /// Parse a property value (see [`CompressSetting::parse`]) and keep the algorithm.
    pub fn parse(s: &str) -> Option<Self> {
        CompressSetting::parse(s).map(|c| c.alg)
    }

    /// Compress `data` with this algorithm (zstd at level 3). `None` when `Off`, or
    /// when the result would not save the threshold.
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        CompressSetting {
            alg: self,
            zstd_level: if self == Self::Zstd { 3 } else { 0 },
        }
        .compress(data)
    }

    /// Decompress `data` (physical bytes, possibly padded) into exactly `lsize` bytes.
    /// Never allocates more than `lsize` bytes for the output.
    ///
    /// Errors: `Corrupt` when the payload is truncated, names a length past its end,
    /// decodes to more or fewer than `lsize` bytes, or is not a valid stream.
    pub fn decompress(self, data: &[u8], lsize: usize) -> Result<Vec<u8>, Corrupt> {
        let bad = |why: String| Corrupt::new("block", format!("{}: {why}", self.name()));
        if self == Self::Off {
            if data.len() < lsize {
                return Err(Corrupt::new("block", "physical shorter than logical"));
            }
            return Ok(data[..lsize].to_vec());
        }
        let hdr = if self == Self::Zstd { ZSTD_HDR_BYTES } else { CLEN_BYTES };
        if data.len() < hdr {
            return Err(bad("payload shorter than its header".into()));
        }
        let clen = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize;
        let body = data.get(hdr..hdr + clen).ok_or_else(|| bad(format!("length {clen} past the end")))?;
        let out = match self {
            Self::Off => unreachable!("handled above"),
            Self::Lz4 => lz4_flex::block::decompress(body, lsize).map_err(|e| bad(e.to_string()))?,
            Self::Zle => zle_decode(body, lsize).map_err(|e| bad(e.into()))?,
            Self::Zstd => {
                let level = i32::from_le_bytes(data[4..8].try_into().unwrap());
                if !zstd_level_valid(level) {
                    return Err(bad(format!("unknown level {level}")));
                }
                zstd_decode(body, lsize).map_err(bad)?
            }
            _ => gzip_decode(body, lsize).map_err(bad)?,
        };
        if out.len() != lsize {
            return Err(bad(format!("{} bytes decoded for a {lsize}-byte block", out.len())));
        }
        Ok(out)
    }

    /// The zstd level recorded in a zstd payload's header (1..=19, or −N for
    /// zstd-fast-N); `None` for other algorithms or a short or invalid header.
    pub fn zstd_level_of(self, data: &[u8]) -> Option<i32> {
        let l = i32::from_le_bytes(data.get(4..8)?.try_into().ok()?);
        (self == Self::Zstd && zstd_level_valid(l)).then_some(l)
    }
}

/// Whether `level` is a zstd level a payload may carry: 1..=19, or −N for an N of
/// [`ZSTD_FAST_LEVELS`].
fn zstd_level_valid(level: i32) -> bool {
    (1..=19).contains(&level) || (level < 0 && level.checked_neg().is_some_and(|n| ZSTD_FAST_LEVELS.contains(&n)))
}

/// A dataset's `compression` setting: the algorithm and, for zstd, the level (OpenZFS's
/// `zp_compress` and `zp_complevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompressSetting {
    /// Algorithm written into new blocks' pointers.
    pub alg: Compression,
    /// zstd level: 1..=19, or −N for `zstd-fast-N`; 0 for the other algorithms.
    pub zstd_level: i32,
}

impl CompressSetting {
    /// No compression.
    pub const OFF: CompressSetting = CompressSetting {
        alg: Compression::Off,
        zstd_level: 0,
    };
    /// LZ4 (what `on` means, and what metadata uses).
    pub const LZ4: CompressSetting = CompressSetting {
        alg: Compression::Lz4,
        zstd_level: 0,
    };

    /// Parse a `compression` property value with OpenZFS's meaning: `on` (lz4, the
    /// default algorithm of OpenZFS 2.x), `off`, `lz4`, `zle`, `gzip` (= gzip-6),
    /// `gzip-1`..`gzip-9`, `zstd` (= zstd-3), `zstd-1`..`zstd-19`, `zstd-fast`
    /// (= zstd-fast-1), `zstd-fast-N` for N in [`ZSTD_FAST_LEVELS`]. `lzjb` is not
    /// implemented and gives `None`, as does anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let simple = |alg| Some(CompressSetting { alg, zstd_level: 0 });
        let zstd = |zstd_level| {
            Some(CompressSetting {
                alg: Compression::Zstd,
                zstd_level,
            })
        };
        match s {
            "off" => simple(Compression::Off),
            "on" | "lz4" => simple(Compression::Lz4),
            "zle" => simple(Compression::Zle),
            "gzip" => simple(Compression::Gzip6),
            "zstd" => zstd(3),
            "zstd-fast" => zstd(-1),
            _ => {
                let num = |t: &str| -> Option<i32> {
                    if t.is_empty() || t.starts_with('0') || !t.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    t.parse().ok()
                };
                if let Some(n) = s.strip_prefix("gzip-").and_then(num) {
                    return (1..=9).contains(&n).then(|| CompressSetting {
                        alg: Compression::ALL[Compression::Gzip1 as usize + n as usize - 1],
                        zstd_level: 0,
                    });
                }
                if let Some(n) = s.strip_prefix("zstd-fast-").and_then(num) {
                    return ZSTD_FAST_LEVELS.contains(&n).then_some(()).and(zstd(-n));
                }
                if let Some(n) = s.strip_prefix("zstd-").and_then(num) {
                    return (1..=19).contains(&n).then_some(()).and(zstd(n));
                }
                None
            }
        }
    }

    /// Pack into 32 bits (algorithm code in the low byte, zstd level above) so an
    /// object set can keep its setting in an atomic.
    pub fn to_bits(self) -> u32 {
        u32::from(self.alg as u8) | ((self.zstd_level as i16 as u16 as u32) << 8)
    }

    /// Inverse of [`CompressSetting::to_bits`]; an invalid packing gives `OFF`.
    pub fn from_bits(v: u32) -> Self {
        let alg = Compression::from_u8(v as u8).unwrap_or(Compression::Off);
        let zstd_level = i32::from((v >> 8) as u16 as i16);
        if alg == Compression::Zstd && !zstd_level_valid(zstd_level) {
            return Self::OFF;
        }
        CompressSetting { alg, zstd_level }
    }

    /// Try to compress `data`. Returns the payload (header, compressed bytes, zero
    /// padding to a multiple of 512 bytes) to store with `self.alg` in the pointer,
    /// or `None` when the algorithm is `Off`, the block is too small to save a 512-byte
    /// unit, or the result would not save 1/8 of the input (zstd ≥ 3 on a block of
    /// 128 KiB or more may give up early, see the module doc).
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        if self.alg == Compression::Off || data.is_empty() {
            return None;
        }
        // The most bytes a payload may take: 1/8 saved (OpenZFS's `d_len`).
        let d_len = data.len() - data.len() / 8;
        let hdr = if self.alg == Compression::Zstd { ZSTD_HDR_BYTES } else { CLEN_BYTES };
        if d_len <= hdr {
            return None;
        }
        let room = d_len - hdr;
        let body = match self.alg {
            Compression::Off => return None,
            Compression::Lz4 => lz4_encode(data, room)?,
            Compression::Zle => zle_encode(data, room)?,
            Compression::Zstd => {
                if self.zstd_level >= ZSTD_CUTOFF_LEVEL && data.len() >= ZSTD_ABORT_SIZE_BYTES && lz4_encode(data, room).is_none() {
                    // LZ4 says no: ask zstd-1 before paying for the real level.
                    zstd_encode(data, room, 1)?;
                }
                zstd_encode(data, room, self.zstd_level)?
            }
            g => gzip_encode(data, room, g.gzip_level().expect("gzip code"))?,
        };
        let mut out = Vec::with_capacity((hdr + body.len()).div_ceil(PSIZE_ROUND_BYTES) * PSIZE_ROUND_BYTES);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        if self.alg == Compression::Zstd {
            out.extend_from_slice(&self.zstd_level.to_le_bytes());
        }
        out.extend_from_slice(&body);
        out.resize(out.len().div_ceil(PSIZE_ROUND_BYTES) * PSIZE_ROUND_BYTES, 0);
        (out.len() < data.len()).then_some(out)
    }
}

fn lz4_encode(data: &[u8], room: usize) -> Option<Vec<u8>> {
    let c = lz4_flex::block::compress(data);
    (c.len() <= room).then_some(c)
}

thread_local! {
    static ZSTD_C: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// zstd at `level` into at most `room` bytes (libzstd stops with dstSize_tooSmall
/// when it does not fit, which is OpenZFS's way of not compressing).
fn zstd_encode(data: &[u8], room: usize, level: i32) -> Option<Vec<u8>> {
    ZSTD_C.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(level).ok()?);
        }
        let comp = c.as_mut()?;
        comp.set_compression_level(level).ok()?;
        let mut out = Vec::with_capacity(room);
        comp.compress_to_buffer(data, &mut out).ok()?;
        Some(out)
    })
}

/// zstd frame into a buffer of capacity `lsize`: libzstd fails rather than write past it.
fn zstd_decode(body: &[u8], lsize: usize) -> Result<Vec<u8>, String> {
    ZSTD_D.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            let mut dec = zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?;
            // No frame may ask for a window beyond the largest block (a crafted header
            // could otherwise make libzstd allocate up to 2 GiB).
            dec.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                .map_err(|e| e.to_string())?;
            *d = Some(dec);
        }
        let mut out = Vec::with_capacity(lsize);
        d.as_mut()
            .expect("decompressor")
            .decompress_to_buffer(body, &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    })
}

fn gzip_encode(data: &[u8], room: usize, level: u32) -> Option<Vec<u8>> {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), true);
    let mut out = Vec::with_capacity(room);
    match c.compress_vec(data, &mut out, flate2::FlushCompress::Finish) {
        Ok(flate2::Status::StreamEnd) => Some(out),
        _ => None,
    }
}

/// zlib stream into a buffer of capacity `lsize`; it must end exactly there.
fn gzip_decode(body: &[u8], lsize: usize) -> Result<Vec<u8>, String> {
    let mut d = flate2::Decompress::new(true);
    let mut out = Vec::with_capacity(lsize);
    match d.decompress_vec(body, &mut out, flate2::FlushDecompress::Finish) {
        Ok(flate2::Status::StreamEnd) => Ok(out),
        Ok(_) => Err("stream truncated or longer than the block".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Zero-length encoding into at most `room` bytes: token `t < 64` is followed by
/// `t + 1` literal bytes; token `t ≥ 64` stands for `t − 63` zero bytes. A zero run
/// shorter than 2 bytes stays inside a literal.
fn zle_encode(data: &[u8], room: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(room);
    let mut i = 0;
    while i < data.len() {
        let zeros = data[i..].iter().take(256 - ZLE_N).take_while(|&&b| b == 0).count();
        if zeros >= 2 || (zeros == 1 && i + 1 == data.len()) {
            out.push((ZLE_N + zeros - 1) as u8);
            i += zeros;
        } else {
            let start = i;
            while i < data.len() && i - start < ZLE_N {
                if data[i] == 0 && data.get(i + 1) == Some(&0) {
                    break;
                }
                i += 1;
            }
            out.push((i - start - 1) as u8);
            out.extend_from_slice(&data[start..i]);
        }
        if out.len() > room {
            return None;
        }
    }
    Some(out)
}

/// Inverse of [`zle_encode`]; refuses output past `lsize` and a literal cut short.
fn zle_decode(body: &[u8], lsize: usize) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(lsize);
    let mut i = 0;
    while i < body.len() {
        let t = body[i] as usize;
        i += 1;
        if t < ZLE_N {
            let lit = body.get(i..i + t + 1).ok_or("literal past the end")?;
            if out.len() + lit.len() > lsize {
                return Err("decodes past the block size");
            }
            out.extend_from_slice(lit);
            i += t + 1;
        } else {
            let n = t - ZLE_N + 1;
            if out.len() + n > lsize {
                return Err("decodes past the block size");
            }
            out.resize(out.len() + n, 0);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn every_setting() -> Vec<(String, CompressSetting)> {
        let mut names: Vec<String> = ["on", "lz4", "zle", "gzip", "zstd", "zstd-fast"].iter().map(|s| s.to_string()).collect();
        names.extend((1..=9).map(|n| format!("gzip-{n}")));
        names.extend((1..=19).map(|n| format!("zstd-{n}")));
        names.extend(ZSTD_FAST_LEVELS.iter().map(|n| format!("zstd-fast-{n}")));
        names.into_iter().map(|n| (n.clone(), CompressSetting::parse(&n).unwrap())).collect()
    }

    #[test]
    fn lz4_roundtrip_and_skip_incompressible() {
        let text = b"hello tarn ".repeat(1000);
        let c = Compression::Lz4.compress(&text).expect("compressible");
        assert_eq!(c.len() % 512, 0, "payload rounded to 512 bytes");
        let mut padded = c.clone();
        padded.resize(c.len() + 100, 0);
        assert_eq!(Compression::Lz4.decompress(&padded, text.len()).unwrap(), text);
        assert!(Compression::Lz4.compress(&noise(4096, 7)).is_none());
    }

    /// The property values of zfsprops(7) parse to what OpenZFS means by them, and
    /// everything else (lzjb included: not implemented) is refused.
    #[test]
    fn property_values_parse_as_openzfs() {
        let p = |s| CompressSetting::parse(s);
        assert_eq!(p("on"), Some(CompressSetting::LZ4));
        assert_eq!(p("gzip").unwrap().alg, Compression::Gzip6);
        assert_eq!(p("gzip-1").unwrap().alg, Compression::Gzip1);
        assert_eq!(p("gzip-9").unwrap().alg, Compression::Gzip9);
        assert_eq!(p("zstd").unwrap().zstd_level, 3);
        assert_eq!(p("zstd-19").unwrap().zstd_level, 19);
        assert_eq!(p("zstd-fast").unwrap().zstd_level, -1);
        assert_eq!(p("zstd-fast-1000").unwrap().zstd_level, -1000);
        for bad in [
            "",
            "foo",
            "lzjb",
            "gzip-0",
            "gzip-10",
            "gzip-06",
            "zstd-0",
            "zstd-20",
            "zstd-fast-11",
            "zstd-fast-0",
            "zstd-fast-",
            "zstd--1",
            "ON",
            "gzip-+1",
        ] {
            assert_eq!(p(bad), None, "{bad:?} accepted");
        }
        assert_eq!(every_setting().len(), 6 + 9 + 19 + ZSTD_FAST_LEVELS.len());
        for (_, s) in every_setting() {
            assert_eq!(CompressSetting::from_bits(s.to_bits()), s);
        }
    }

    /// Every algorithm and level round-trips adversarial inputs of sizes around every
    /// record size: all zeros, random, text, mixed, and one byte.
    #[test]
    fn every_setting_roundtrips_adversarial_inputs() {
        let mut sizes = vec![1usize, 2, 511, 512, 513, 4095];
        for shift in [12, 13, 14, 15, 16, 17] {
            let n = 1usize << shift;
            sizes.extend([n - 1, n, n + 1]);
        }
        sizes.extend([1 << 20]);
        let settings = every_setting();
        for &n in &sizes {
            let text: Vec<u8> = b"The quick brown fox jumps over the lazy dog; ".iter().cycle().take(n).copied().collect();
            let mut mixed = noise(n, n as u64);
            for (i, b) in mixed.iter_mut().enumerate() {
                if (i / 300) % 2 == 0 {
                    *b = 0;
                }
            }
            for data in [vec![0u8; n], noise(n, 3), text, mixed] {
                // All settings on the small sizes; a few on the 1 MiB ones (speed).
                for (name, s) in settings
                    .iter()
                    .filter(|(name, _)| n < 1 << 20 || ["zstd-19", "gzip-9", "zle", "lz4", "zstd-fast-1000"].contains(&name.as_str()))
                {
                    if let Some(c) = s.compress(&data) {
                        assert!(c.len() < n && c.len() <= n - n / 8 + 511, "{name} {n}: {} bytes", c.len());
                        assert_eq!(c.len() % 512, 0);
                        assert_eq!(s.alg.decompress(&c, n).unwrap(), data, "{name} {n}");
                        if s.alg == Compression::Zstd {
                            assert_eq!(s.alg.zstd_level_of(&c), Some(s.zstd_level));
                        }
                    }
                }
            }
        }
        // Zeros always compress at 4 KiB and up; noise never does.
        for (name, s) in &settings {
            assert!(s.compress(&vec![0u8; 4096]).is_some(), "{name}");
            assert!(s.compress(&noise(128 << 10, 9)).is_none(), "{name}");
            assert!(s.compress(&[]).is_none());
        }
    }

    /// zstd ≥ 3 on a 128 KiB block: LZ4 and zstd-1 predict incompressible data and the
    /// expensive level is skipped; compressible data still gets the real level.
    #[test]
    fn zstd_early_abort_follows_openzfs() {
        let s = CompressSetting::parse("zstd-19").unwrap();
        assert!(s.compress(&noise(128 << 10, 5)).is_none());
        let text: Vec<u8> = (0..(128 << 10)).map(|i: u32| (i % 251) as u8 ^ (i / 4096) as u8).collect();
        let c = s.compress(&text).expect("compressible");
        assert_eq!(Compression::Zstd.zstd_level_of(&c), Some(19));
        assert_eq!(Compression::Zstd.decompress(&c, text.len()).unwrap(), text);
    }

    /// Crafted payloads: bombs (a stream that decodes to more than the block), a
    /// length past the end, truncation, a bad zstd level, garbage: errors, never a
    /// panic, and never an output larger than the block.
    #[test]
    fn crafted_payloads_are_refused() {
        let lsize = 4096;
        let big = vec![0u8; 1 << 20];
        for s in ["lz4", "zle", "gzip-9", "zstd-19", "zstd-fast-1"] {
            let s = CompressSetting::parse(s).unwrap();
            let bomb = s.compress(&big).unwrap();
            assert!(s.alg.decompress(&bomb, lsize).is_err(), "{:?} bomb accepted", s.alg);
            // Each prefix of the real stream, its length field fixed to match: refused.
            let good = s.compress(&vec![0u8; lsize]).unwrap();
            let hdr = if s.alg == Compression::Zstd { 8 } else { 4 };
            let clen = u32::from_le_bytes(good[0..4].try_into().unwrap()) as usize;
            for cut in 0..clen {
                let mut t = good[..hdr + cut].to_vec();
                t[0..4].copy_from_slice(&(cut as u32).to_le_bytes());
                assert!(s.alg.decompress(&t, lsize).is_err(), "{:?} cut at {cut} accepted", s.alg);
            }
            let mut past = good.clone();
            past[0..4].copy_from_slice(&(u32::MAX).to_le_bytes());
            assert!(s.alg.decompress(&past, lsize).is_err());
            assert!(s.alg.decompress(&good[..2], lsize).is_err());
            for seed in 1..50u64 {
                let mut g = noise(600, seed);
                g[0..4].copy_from_slice(&500u32.to_le_bytes());
                if s.alg == Compression::Zstd {
                    g[4..8].copy_from_slice(&3i32.to_le_bytes());
                }
                if let Ok(out) = s.alg.decompress(&g, lsize) {
                    assert_eq!(out.len(), lsize);
                }
            }
        }
        let mut z = CompressSetting::parse("zstd").unwrap().compress(&vec![0u8; lsize]).unwrap();
        z[4..8].copy_from_slice(&77i32.to_le_bytes());
        assert!(Compression::Zstd.decompress(&z, lsize).is_err());
        assert!(Compression::Off.decompress(&[0u8; 10], 11).is_err());
        assert!(Compression::from_u8(13).is_err());
    }
}
