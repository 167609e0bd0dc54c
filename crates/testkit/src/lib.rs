//! # testkit — helpers the test trees of several crates share
//!
//! Theory: integration tests of one crate cannot call another crate's `tests/common`,
//! so a helper that several test trees need lives here, once, instead of a copy in
//! each. Nothing here is reachable from a `tarn` binary: every user names this crate
//! under `[dev-dependencies]` only. Each helper is deterministic, so a failing test
//! replays with the same bytes.
//!
//! Called by: the `tests/common` modules of `tarn-zio`, `tarn-spa` and `tarn-send`.

/// `len` deterministic pseudo-random bytes from `seed` (xorshift64, one byte per
/// step): the same seed gives the same bytes, and no compressor shrinks them (so a
/// block of them is stored and cached as it is).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pattern;

    /// Same seed, same bytes; another seed, other bytes; and lz4 cannot shrink them.
    #[test]
    fn pattern_is_repeatable_and_incompressible() {
        assert_eq!(pattern(7, 4096), pattern(7, 4096));
        assert_ne!(pattern(7, 4096), pattern(8, 4096));
        assert_eq!(pattern(7, 100), pattern(7, 4096)[..100]);
        let distinct = pattern(3, 4096).iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct > 200, "only {distinct} distinct byte values");
        let bytes = pattern(11, 128 << 10);
        let packed = lz4_flex::block::compress(&bytes).len();
        assert!(packed >= bytes.len(), "lz4 shrank 128 KiB of the pattern to {packed} bytes");
    }
}
