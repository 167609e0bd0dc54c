//! Read-ahead of sequential streams (OpenZFS `dmu_zfetch.c`, in miniature).
//!
//! Theory: the object set remembers, per object, where the last read ended and how
//! far it has prefetched; a read that continues a stream asks zio to read the next
//! [`PREFETCH_BLOCKS`](super::PREFETCH_BLOCKS) blocks into the ARC as prefetches
//! (counted apart from demand reads), as one request (`Zio::prefetch_blocks`), so
//! that blocks adjacent on disk are read together. At most `PREFETCH_STREAMS_MAX` streams are
//! kept. Called by the object set's read path, never under its lock for the I/O.

use super::*;

impl Objset {
    /// Sequential-stream detection for `read` of blocks `first..=last` of `obj`: when
    /// the read continues the previous one, queue the next [`PREFETCH_BLOCKS`] blocks
    /// (those not queued yet) for background reads into the cache.
    pub(super) fn prefetch_after(&self, obj: u64, first: u64, last: u64) {
        let (from, to) = {
            let mut streams = self.streams.lock();
            let seq = matches!(streams.get(&obj), Some(&(next, _)) if first == next || first + 1 == next);
            if !seq {
                if streams.len() >= PREFETCH_STREAMS_MAX {
                    streams.clear();
                }
                streams.insert(obj, (last + 1, last + 1));
                return;
            }
            let e = streams.get_mut(&obj).unwrap();
            let from = e.1.max(last + 1);
            let to = last + 1 + PREFETCH_BLOCKS;
            *e = (last + 1, to.max(e.1));
            (from, to)
        };
        if from >= to {
            return;
        }
        let mut bps = Vec::new();
        {
            let mut st = self.st.lock();
            let Ok(dn) = self.load_dnode(&mut st, obj) else { return };
            for b in from..to.min(dn.attrs.maxblkid.saturating_add(1)) {
                if let Ok(Src::Bp(bp)) = self.resolve(dn, b) {
                    bps.push(bp);
                }
            }
        }
        // One request: blocks adjacent on disk are read together.
        self.zio.prefetch_blocks(&bps, self.primarycache());
    }
}
