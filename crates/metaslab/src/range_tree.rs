//! [`RangeTree`]: a set of disjoint byte ranges with a size index and a histogram.
//!
//! Owns no on-disk structure. Invariants: ranges are non-empty, sorted, neither
//! overlapping nor adjacent (adjacent ranges are merged on insert); `by_size` holds
//! exactly one `(len, start)` per range; `space_bytes` and `hist_bytes` equal the sums
//! over the ranges. [`RangeTree::verify`] checks all of them (run by the owners' own
//! `verify` after every mutation under `cfg(test)` or the `verify` feature).

use std::collections::{BTreeMap, BTreeSet};

/// Buckets of [`RangeTree::histogram_bytes`]: bucket `b` holds the bytes of the
/// ranges whose length `len` has `floor(log2(len)) == b`.
pub const HISTOGRAM_BUCKETS: usize = 64;

/// A set of disjoint half-open byte ranges `[start, end)`, kept as a `BTreeMap` from
/// start to end plus a `(len, start)` index for best-fit and largest-segment queries
/// (OpenZFS keeps the same pair of trees per metaslab). Adjacent ranges are merged on
/// insert, so each maximal extent is one entry. The total size and a power-of-two
/// histogram of range lengths (bytes per bucket) are kept up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTree {
    map: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    space_bytes: u64,
    hist_bytes: [u64; HISTOGRAM_BUCKETS],
}

impl Default for RangeTree {
    fn default() -> Self {
        RangeTree {
            map: BTreeMap::new(),
            by_size: BTreeSet::new(),
            space_bytes: 0,
            hist_bytes: [0; HISTOGRAM_BUCKETS],
        }
    }
}

fn bucket(len: u64) -> usize {
    63 - len.leading_zeros() as usize
}

impl RangeTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert_raw(&mut self, s: u64, e: u64) {
        self.map.insert(s, e);
        self.by_size.insert((e - s, s));
        self.hist_bytes[bucket(e - s)] += e - s;
    }

    fn remove_raw(&mut self, s: u64) -> Option<u64> {
        let e = self.map.remove(&s)?;
        self.by_size.remove(&(e - s, s));
        self.hist_bytes[bucket(e - s)] -= e - s;
        Some(e)
    }

    /// Adds `[start, start + len)`, merging with adjacent ranges.
    ///
    /// Panics if `len` is zero, the range overflows, or it overlaps a range already in
    /// the tree: adding space twice is a double free, which is a bug.
    pub fn add(&mut self, start: u64, len: u64) {
        assert!(self.try_add(start, len), "RangeTree::add: [{start}, +{len}) overlaps (double free)");
    }

    /// Adds `[start, start + len)` unless it overlaps; returns whether it was added.
    /// Panics on zero length or overflow (caller bugs); decoders check those first.
    pub(crate) fn try_add(&mut self, start: u64, len: u64) -> bool {
        assert!(len > 0, "RangeTree: empty range at {start}");
        let end = start.checked_add(len).expect("RangeTree: range overflows u64");
        if self.overlaps(start, len) {
            return false;
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&s, &e)) = self.map.range(..start).next_back() {
            if e == start {
                new_start = s;
                self.remove_raw(s);
            }
        }
        if let Some(e) = self.remove_raw(end) {
            new_end = e;
        }
        self.insert_raw(new_start, new_end);
        self.space_bytes += len;
        true
    }

    /// Removes `[start, start + len)`, splitting the range that holds it.
    ///
    /// Panics unless the whole range is contained in one extent of the tree.
    pub fn remove(&mut self, start: u64, len: u64) {
        assert!(len > 0, "RangeTree::remove: empty range at {start}");
        assert!(self.contains(start, len), "RangeTree::remove: [{start}, +{len}) not contained");
        let end = start + len; // no overflow: contained in a range
        let (&s, _) = self.map.range(..=start).next_back().expect("contained");
        let e = self.remove_raw(s).expect("present");
        if s < start {
            self.insert_raw(s, start);
        }
        if end < e {
            self.insert_raw(end, e);
        }
        self.space_bytes -= len;
    }

    /// Whether all of `[start, start + len)` is in the tree (true for `len == 0`).
    pub fn contains(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        match self.map.range(..=start).next_back() {
            Some((_, &e)) => e >= end,
            None => false,
        }
    }

    /// Whether any byte of `[start, start + len)` is in the tree.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let end = start.saturating_add(len);
        // Ranges are disjoint and sorted, so ends increase with starts: only the last
        // range that starts before `end` can reach past `start`.
        match self.map.range(..end).next_back() {
            Some((_, &e)) => e > start,
            None => false,
        }
    }

    /// Total bytes in the tree.
    pub fn space_bytes(&self) -> u64 {
        self.space_bytes
    }

    /// Length in bytes of the largest range (0 when empty). O(log n).
    pub fn max_segment_bytes(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// Start of the smallest range of at least `size_bytes` (lowest start among equal
    /// lengths): OpenZFS's best fit. O(log n).
    pub fn best_fit(&self, size_bytes: u64) -> Option<u64> {
        self.by_size.range((size_bytes, 0)..).next().map(|&(_, s)| s)
    }

    /// Bytes per power-of-two length bucket (see [`HISTOGRAM_BUCKETS`]).
    pub fn histogram_bytes(&self) -> &[u64; HISTOGRAM_BUCKETS] {
        &self.hist_bytes
    }

    /// The ranges as `(start, len)`, in increasing order of start.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e - s))
    }

    /// The ranges that start at or after `from` or contain it, as `(start, end)`.
    pub(crate) fn iter_from(&self, from: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let head = self.map.range(..=from).next_back().filter(|&(_, &e)| e > from);
        let tail = self.map.range(from.saturating_add(1)..);
        head.into_iter().chain(tail).map(|(&s, &e)| (s, e))
    }

    /// Number of (maximal) ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the tree holds no range.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Removes every range.
    pub fn clear(&mut self) {
        *self = RangeTree::new();
    }

    /// Panics unless the tree is well-formed: non-empty, non-adjacent, sorted ranges
    /// whose lengths sum to the cached size, a size index and a histogram that match.
    pub fn verify(&self) {
        let mut prev_end: Option<u64> = None;
        let mut sum = 0u64;
        let mut hist = [0u64; HISTOGRAM_BUCKETS];
        for (&s, &e) in &self.map {
            assert!(s < e, "RangeTree: empty or inverted range [{s}, {e})");
            if let Some(p) = prev_end {
                assert!(p < s, "RangeTree: ranges overlap or touch at {s}");
            }
            assert!(self.by_size.contains(&(e - s, s)), "RangeTree: size index misses [{s}, {e})");
            prev_end = Some(e);
            sum += e - s;
            hist[bucket(e - s)] += e - s;
        }
        assert_eq!(self.by_size.len(), self.map.len(), "RangeTree: size index has extra entries");
        assert_eq!(sum, self.space_bytes, "RangeTree: cached space_bytes is stale");
        assert_eq!(hist, self.hist_bytes, "RangeTree: histogram is stale");
    }
}
