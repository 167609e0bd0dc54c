//! Device repair: offline/online/clear, attach/detach/replace, hot spares, and what a
//! finished resilver changes in the vdev tree.
//!
//! (Being written; see the issue "Redundancy at work".)

use crate::pool::Pool;

impl Pool {
    /// Called by the scan when a resilver that copied every block born up to
    /// `scanned_through_txg` has finished: clear those txgs from the DTL of every
    /// usable leaf, detach the old leaf of each completed `replacing` vdev, and mark
    /// the config dirty so the next txg sync records it.
    pub(crate) fn resilver_done(&self, scanned_through_txg: u64) {
        for top in self.zio.vdevs() {
            for leaf in top.leaves() {
                if leaf.state().is_usable() {
                    leaf.dtl.clear_through(scanned_through_txg);
                }
            }
        }
    }
}
