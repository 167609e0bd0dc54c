//! Dirty time log (DTL): the txgs a leaf missed.
//!
//! Theory: when a leaf cannot take a txg's writes (offline, missing, failing, or newly
//! attached and not yet resilvered), the txgs it missed are recorded here as inclusive
//! ranges `[first_txg, last_txg]`. A block whose birth txg lies in a leaf's DTL is not
//! on that leaf: reads skip it there, and resilver copies exactly those blocks back
//! (OpenZFS `vdev_dtl_*`, `DTL_MISSING`). An *open* DTL (a leaf that is missing right
//! now) is stored with `last_txg = u64::MAX` and closed with [`Dtl::close`] when the
//! leaf returns. The ranges are kept sorted and disjoint (adjacent ranges merge).
//!
//! Reads ask [`Dtl::contains`] for every child of every mirror/raidz read, so an empty
//! log (the common case) answers from an atomic flag without taking the lock.
//!
//! Owned by: each leaf [`crate::Vdev`]. Persisted by spa in the label config.
//! Called by: spa (sync, online, attach, resilver completion), vdev reads, scan.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, Ordering};

/// A set of txgs, as sorted disjoint inclusive ranges.
#[derive(Debug, Default)]
pub struct Dtl {
    ranges: Mutex<Vec<(u64, u64)>>,
    /// Whether `ranges` is non-empty; written under the lock by [`Dtl::store`].
    any: AtomicBool,
}

impl Dtl {
    /// Put `r` back and publish whether it is empty.
    fn store(&self, mut guard: MutexGuard<'_, Vec<(u64, u64)>>, r: Vec<(u64, u64)>) {
        self.any.store(!r.is_empty(), Ordering::Release);
        *guard = r;
    }

    /// Add txgs `first_txg..=last_txg` (`last_txg = u64::MAX` for "still missing").
    /// No effect when `first_txg > last_txg`.
    pub fn add(&self, first_txg: u64, last_txg: u64) {
        if first_txg > last_txg {
            return;
        }
        let mut r = self.ranges.lock();
        r.push((first_txg, last_txg));
        r.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for &(a, b) in r.iter() {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.store(r, merged);
    }

    /// Whether `txg` is in the log (the leaf lacks blocks born in it).
    pub fn contains(&self, txg: u64) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        self.ranges.lock().iter().any(|&(a, b)| a <= txg && txg <= b)
    }

    /// Whether the leaf missed nothing.
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Whether an open range (a leaf still missing) is present.
    pub fn is_open(&self) -> bool {
        self.ranges.lock().iter().any(|&(_, b)| b == u64::MAX)
    }

    /// The ranges, sorted, inclusive.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.ranges.lock().clone()
    }

    /// Replace the ranges (from a label config at import); merges and sorts.
    pub fn set(&self, ranges: &[(u64, u64)]) {
        let r = self.ranges.lock();
        self.store(r, Vec::new());
        for &(a, b) in ranges {
            self.add(a, b);
        }
    }

    /// Close an open range at `last_txg` (the leaf came back after that txg).
    pub fn close(&self, last_txg: u64) {
        let mut r = self.ranges.lock();
        for range in r.iter_mut().filter(|x| x.1 == u64::MAX) {
            range.1 = last_txg.max(range.0);
        }
    }

    /// Forget every txg `<= txg` (a resilver that copied all blocks born up to `txg`
    /// finished). Ranges straddling `txg` keep their part above it.
    pub fn clear_through(&self, txg: u64) {
        let r = self.ranges.lock();
        let kept = r.iter().filter(|&&(_, b)| b > txg).map(|&(a, b)| (a.max(txg + 1), b)).collect();
        self.store(r, kept);
    }

    /// Smallest and largest txg in the log, or None when empty.
    pub fn bounds(&self) -> Option<(u64, u64)> {
        let r = self.ranges.lock();
        Some((r.first()?.0, r.last()?.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_merges_and_clears() {
        let d = Dtl::default();
        assert!(d.is_empty() && d.bounds().is_none());
        d.add(10, 12);
        d.add(13, 15);
        d.add(20, 20);
        d.add(5, 3);
        assert_eq!(d.ranges(), vec![(10, 15), (20, 20)]);
        assert!(d.contains(14) && !d.contains(16) && d.contains(20));
        d.clear_through(12);
        assert_eq!(d.ranges(), vec![(13, 15), (20, 20)]);
        d.add(30, u64::MAX);
        assert!(d.is_open() && d.contains(1 << 40));
        d.close(35);
        assert!(!d.is_open());
        assert_eq!(d.bounds(), Some((13, 35)));
        d.clear_through(35);
        assert!(d.is_empty());
    }
}
