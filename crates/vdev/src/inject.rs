//! Fault injection on leaves: the foundation `tarn zinject` will build on.
//!
//! Theory: a process-wide list of injections, each matching leaves by path prefix
//! (so parallel tests in one process do not disturb each other). Implemented now:
//! - **power cut**: after `n` more writes to matching leaves, every further write and
//!   flush is silently dropped — the device keeps what reached it before the cut,
//!   like a machine that lost power. Crash-consistency tests use it.
//!
//! The fast path is one relaxed atomic load when no injection is registered.
//! Called by: `Leaf::pwrite`/`flush`; tests and (later) the zinject command.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One registered power cut.
pub struct PowerCut {
    prefix: String,
    remaining: AtomicU64,
    dropped: AtomicU64,
}

impl PowerCut {
    /// Writes dropped so far (0 means the cut has not happened yet).
    pub fn dropped_writes(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

static ANY: AtomicBool = AtomicBool::new(false);
static CUTS: Mutex<Vec<Arc<PowerCut>>> = Mutex::new(Vec::new());

/// Register a power cut for leaves whose path starts with `prefix`: the next
/// `writes_before_cut` writes land, later ones are dropped. Returns a handle to
/// observe it; remove it with [`clear`].
pub fn power_cut_after(prefix: &str, writes_before_cut: u64) -> Arc<PowerCut> {
    let cut = Arc::new(PowerCut {
        prefix: prefix.to_string(),
        remaining: AtomicU64::new(writes_before_cut),
        dropped: AtomicU64::new(0),
    });
    CUTS.lock().push(cut.clone());
    ANY.store(true, Ordering::SeqCst);
    cut
}

/// Remove every injection whose prefix equals `prefix`.
pub fn clear(prefix: &str) {
    let mut c = CUTS.lock();
    c.retain(|x| x.prefix != prefix);
    ANY.store(!c.is_empty(), Ordering::SeqCst);
}

/// Should this write to `path` be dropped? Counts it either way.
pub(crate) fn drop_write(path: &str) -> bool {
    if !ANY.load(Ordering::Relaxed) {
        return false;
    }
    let c = CUTS.lock();
    for cut in c.iter().filter(|c| path.starts_with(&c.prefix)) {
        let left = cut.remaining.load(Ordering::SeqCst);
        if left == 0 {
            cut.dropped.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        cut.remaining.store(left - 1, Ordering::SeqCst);
    }
    false
}

/// Is `path` past a power cut (flushes are dropped too)?
pub(crate) fn is_cut(path: &str) -> bool {
    if !ANY.load(Ordering::Relaxed) {
        return false;
    }
    CUTS.lock()
        .iter()
        .any(|c| path.starts_with(&c.prefix) && c.remaining.load(Ordering::SeqCst) == 0)
}
