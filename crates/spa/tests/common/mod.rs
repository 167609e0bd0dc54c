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

/// Abandon `pool` as a crash would (no export): drop it and wait until it and its sync
/// thread are gone (a power cut registered on `prefix` stays in force meanwhile, since
/// a dead machine writes nothing more), then lift the cut.
pub fn abandon(pool: std::sync::Arc<tarn_spa::Pool>, prefix: &str) {
    let weak = std::sync::Arc::downgrade(&pool);
    drop(pool);
    let t = std::time::Instant::now();
    while weak.strong_count() > 0 {
        assert!(t.elapsed().as_secs() < 30, "abandoned pool never went away");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    tarn_vdev::inject::clear(prefix);
}
