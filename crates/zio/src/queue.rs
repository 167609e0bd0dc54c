//! I/O classes: the intent log's writes go ahead of the txg's bulk I/O.
//!
//! Theory: an `fsync` waits for one small log write and a flush; a txg sync (and the
//! early writer ahead of it, and the fill of partial records) moves hundreds of
//! megabytes in aggregated runs of up to [`crate::AGGREGATE_MAX_BYTES`], several at
//! once. On one disk the two meet in the device's queue, and the small write waits
//! behind the large ones: measured on this project's development machine
//! (`bench/ioclass.sh`: fio, prefilled files on its virtual disk), 8 KiB `O_DIRECT`
//! writes with an `fdatasync` after each did 8,562 a second alone, 51 beside a stream
//! of 1 MiB writes two at a time, 2,002 beside one 1 MiB write at a time, 5,171 beside
//! 256 KiB writes one at a time, 5,766 beside 128 KiB ones; beside 1 MiB reads two at
//! a time 26, 128 KiB reads one at a time 5,093. OpenZFS keeps the same order with
//! its per-leaf queue (`vdev_queue.c`): synchronous writes are issued before
//! asynchronous ones, at most a few asynchronous writes are in flight while the dirty
//! data is low, and on non-rotating media it aggregates only up to 128 KiB
//! (`zfs_vdev_aggregation_limit_non_rotating`).
//!
//! Ours is smaller, per pool: [`IoQueue`] counts the intent log's I/O in flight and
//! stamps when the last one ended. While log I/O is in flight or ended less than
//! [`SYNC_WINDOW_NS`] ago (an `fsync` workload is running), the pool's asynchronous
//! I/O — the batched block writes of `aggregate` and the batched reads of
//! `read_batch` — goes out in pieces of at most [`ASYNC_PIECE_BYTES`], one piece at a
//! time for the whole pool (the `gate`), so a log write finds at most one such piece
//! ahead of it on each leaf. Otherwise nothing changes: full runs, every worker at
//! once. The rule changes speed only, never what is written or read.
//!
//! Invariants: `inflight` counts live [`SyncIo`] guards exactly (incremented on
//! creation, decremented on drop); pieces of one run cover it exactly, in order.
//!
//! Block writes that an `fsync` waits for (the early blocks it adopts) are
//! [`IoClass::Sync`]: whole, ungated, and counted like the log's own I/O.
//!
//! Called by: `log` (every intent-log write and flush holds a [`SyncIo`]),
//! `aggregate::write_copies` and `read_batch` (each device I/O through
//! [`IoQueue::issue_async`] or [`IoQueue::gated`]).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// Largest asynchronous device I/O while the intent log is active. OpenZFS limits
/// aggregation to 128 KiB on non-rotating media
/// (`zfs_vdev_aggregation_limit_non_rotating`); here 128 KiB pieces cut the 99th
/// percentile of a random-write `fsync` only a little further than 256 KiB ones
/// (1.0 against 1.4 ms, `bench/fsyncab.sh --rw randwrite`) for a quarter more daemon
/// CPU per write (more device calls and mirror fan-outs), so pieces are 256 KiB.
pub const ASYNC_PIECE_BYTES: usize = 256 << 10;

/// How long after its last I/O the intent log still counts as active, nanoseconds:
/// long enough to span the gap between one `fsync` and the next of a writer that
/// fsyncs every write (a few hundred microseconds here), short enough that a single
/// `fsync` slows the bulk I/O after it for no noticeable time.
pub const SYNC_WINDOW_NS: u64 = 20_000_000;

/// Which class a batch of block writes belongs to (OpenZFS's `zio_priority_t`
/// `ZIO_PRIORITY_SYNC_WRITE` and `ZIO_PRIORITY_ASYNC_WRITE`, reduced to two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    /// Someone waits for it now: the blocks an `fsync` writes before logging their
    /// pointers. Issued whole, and counted as log I/O while it runs, so the bulk I/O
    /// yields to it as to the log's own writes.
    Sync,
    /// The txg's bulk I/O: a sync's writes and fills, the early writer's. Yields while
    /// the log is active.
    Async,
}

/// The pool's two I/O classes (see the module's theory statement).
pub(crate) struct IoQueue {
    /// Intent-log I/Os in flight.
    inflight: AtomicU32,
    /// When the last intent-log I/O ended, nanoseconds after `epoch` (0: never).
    last_done_ns: AtomicU64,
    epoch: Instant,
    /// Held by each asynchronous I/O issued while the log is active.
    gate: Mutex<()>,
}

/// An intent-log I/O in flight: counted by [`IoQueue`] until dropped.
pub(crate) struct SyncIo<'a> {
    queue: &'a IoQueue,
}

impl Drop for SyncIo<'_> {
    fn drop(&mut self) {
        let q = self.queue;
        q.last_done_ns.store(q.now_ns().max(1), Ordering::Relaxed);
        q.inflight.fetch_sub(1, Ordering::Release);
    }
}

impl IoQueue {
    pub(crate) fn new() -> IoQueue {
        IoQueue {
            inflight: AtomicU32::new(0),
            last_done_ns: AtomicU64::new(0),
            epoch: Instant::now(),
            gate: Mutex::new(()),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Mark an intent-log I/O as in flight until the guard is dropped.
    pub(crate) fn sync_io(&self) -> SyncIo<'_> {
        self.inflight.fetch_add(1, Ordering::Acquire);
        SyncIo { queue: self }
    }

    /// Whether asynchronous I/O should yield now: log I/O in flight, or ended less
    /// than [`SYNC_WINDOW_NS`] ago.
    pub(crate) fn sync_active(&self) -> bool {
        self.active_at(self.now_ns())
    }

    /// [`IoQueue::sync_active`] at `now_ns` (nanoseconds after `epoch`).
    fn active_at(&self, now_ns: u64) -> bool {
        if self.inflight.load(Ordering::Acquire) > 0 {
            return true;
        }
        let last = self.last_done_ns.load(Ordering::Relaxed);
        last != 0 && now_ns.saturating_sub(last) < SYNC_WINDOW_NS
    }

    /// Run one asynchronous device I/O: under the gate while the log is active, else
    /// at once.
    pub(crate) fn gated<T>(&self, io: impl FnOnce() -> T) -> T {
        if self.sync_active() {
            let _one_at_a_time = self.gate.lock();
            io()
        } else {
            io()
        }
    }

    /// Issue an asynchronous I/O of `len_bytes` that may be split: `io(at, len)` does
    /// the part `[at, at + len)` and says whether it succeeded. While the log is
    /// active (checked before each piece) the parts are at most [`ASYNC_PIECE_BYTES`],
    /// each under the gate; otherwise the rest goes as one part. Stops at the first
    /// part that fails. Returns whether every part succeeded (true for 0 bytes).
    pub(crate) fn issue_async(&self, len_bytes: usize, mut io: impl FnMut(usize, usize) -> bool) -> bool {
        let mut at = 0;
        while at < len_bytes {
            if self.sync_active() {
                let len = (len_bytes - at).min(ASYNC_PIECE_BYTES);
                let ok = {
                    let _one_at_a_time = self.gate.lock();
                    io(at, len)
                };
                if !ok {
                    return false;
                }
                at += len;
            } else {
                return io(at, len_bytes - at);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The parts issued for `len` bytes, as (offset, length).
    fn parts(q: &IoQueue, len: usize) -> (bool, Vec<(usize, usize)>) {
        let mut seen = Vec::new();
        let ok = q.issue_async(len, |at, n| {
            seen.push((at, n));
            true
        });
        (ok, seen)
    }

    #[test]
    fn idle_log_leaves_async_io_whole() {
        let q = IoQueue::new();
        assert!(!q.sync_active());
        assert_eq!(parts(&q, 1 << 20), (true, vec![(0, 1 << 20)]));
        assert_eq!(parts(&q, 0), (true, vec![]));
    }

    #[test]
    fn active_log_splits_async_io_into_pieces_that_cover_it() {
        let q = IoQueue::new();
        let len = 3 * ASYNC_PIECE_BYTES + 4096;
        {
            let _log = q.sync_io();
            assert!(q.sync_active());
            let (ok, seen) = parts(&q, len);
            assert!(ok);
            assert_eq!(seen.len(), 4);
            let mut next = 0;
            for (at, n) in seen {
                assert_eq!(at, next, "pieces in order, no gap or overlap");
                assert!(n <= ASYNC_PIECE_BYTES);
                next = at + n;
            }
            assert_eq!(next, len);
        }
        // Ended just now: still inside the window.
        assert!(q.sync_active());
        assert_eq!(parts(&q, len).1.len(), 4);
    }

    #[test]
    fn log_counts_as_idle_once_the_window_has_passed() {
        let q = IoQueue::new();
        drop(q.sync_io());
        let ended = q.last_done_ns.load(Ordering::Relaxed);
        assert_ne!(ended, 0, "the end of a log I/O is stamped");
        assert!(q.active_at(ended + SYNC_WINDOW_NS - 1));
        assert!(!q.active_at(ended + SYNC_WINDOW_NS));
        // A log I/O in flight keeps it active however long ago the last one ended.
        let _log = q.sync_io();
        assert!(q.active_at(ended + 10 * SYNC_WINDOW_NS));
    }

    #[test]
    fn a_failed_piece_stops_the_io() {
        let q = IoQueue::new();
        let _log = q.sync_io();
        let calls = AtomicUsize::new(0);
        let ok = q.issue_async(4 * ASYNC_PIECE_BYTES, |at, _| {
            calls.fetch_add(1, Ordering::Relaxed);
            at < ASYNC_PIECE_BYTES
        });
        assert!(!ok);
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn gated_io_runs_one_at_a_time_while_the_log_is_active() {
        let q = IoQueue::new();
        let _log = q.sync_io();
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        q.gated(|| {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::yield_now();
                            running.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
