//! Helpers shared by the spa integration tests.
#![allow(dead_code)]

/// xorshift64: a tiny seeded generator so failing seeds replay exactly.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish value in `0..n` (`n` = 0 is treated as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
