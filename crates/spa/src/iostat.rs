//! # iostat — snapshots of the pool's I/O counters for `zpool iostat`
//!
//! Theory: every vdev node counts the operations and bytes it completed
//! ([`tarn_vdev::VdevStats`]: `read_ops`, `write_ops`, `read_bytes`, `write_bytes`,
//! monotonic atomics, never reset while the pool is open). A snapshot
//! ([`Pool::iostat`]) copies those counters for the whole tree at one moment, together
//! with the time elapsed since the pool was created or imported by this process and
//! the allocated and total bytes of each top-level vdev. Rates are the business of the
//! caller: the difference of two snapshots divided by the difference of their
//! `elapsed`, or one snapshot divided by its own `elapsed` (the average since import,
//! OpenZFS's first report). Nothing here is persistent and nothing is locked for
//! longer than one read of the space map; the counters of different nodes are read
//! one after another, so a snapshot taken during I/O may be off by the operations in
//! flight (as OpenZFS's, which reads `vdev_stat_t` under no common lock either).
//!
//! The tree has the shape `zpool status` shows: the root (the pool; its counters are
//! the sums over its top-level vdevs, log vdevs included, since every pool I/O goes
//! through exactly one of them), the top-level vdevs other than holes (log vdevs
//! flagged), and below them their children down to the leaves. Only the root and the
//! top-level vdevs carry capacity (`space_bytes > 0`); for other nodes it is 0, which
//! `zpool iostat -v` prints as `-`. The root's capacity is the normal class only, as
//! `zpool list` reports it.
//!
//! Limits: counts are per node operation, not per device request: one aggregated
//! write is one operation, a raidz read counts once on the raidz node and once on each
//! column child it touched, and reads served from the block cache reach no vdev.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use tarn_vdev::Vdev;

use crate::Pool;

/// The counters of one vdev node and its children at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdevIostat {
    /// Display name: the pool name (root), "mirror-0", "raidz2-1", or the leaf path.
    pub name: String,
    /// A top-level separate intent-log vdev (listed under `logs`).
    pub is_log: bool,
    /// A cache device (listed under `cache`; not counted in the pool's row).
    #[serde(default)]
    pub is_cache: bool,
    /// Allocated bytes (root and top-level vdevs; 0 elsewhere).
    pub alloc_bytes: u64,
    /// Total allocatable bytes (root and top-level vdevs; 0 elsewhere: no capacity).
    pub space_bytes: u64,
    /// Completed read operations since import.
    pub read_ops: u64,
    /// Completed write operations since import.
    pub write_ops: u64,
    /// Bytes read since import.
    pub read_bytes: u64,
    /// Bytes written since import.
    pub write_bytes: u64,
    /// Children in `zpool status` order.
    pub children: Vec<VdevIostat>,
}

/// A snapshot of a whole pool: its counter tree and when it was taken.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolIostat {
    /// Nanoseconds between the pool's create/import in this process and the snapshot.
    pub elapsed_ns: u64,
    /// The root: the pool itself, named after it.
    pub root: VdevIostat,
}

impl VdevIostat {
    fn of(v: &Vdev) -> VdevIostat {
        let s = &v.stats();
        VdevIostat {
            name: v.display_name(),
            is_log: false,
            is_cache: false,
            alloc_bytes: 0,
            space_bytes: 0,
            read_ops: s.read_ops.load(Ordering::Relaxed),
            write_ops: s.write_ops.load(Ordering::Relaxed),
            read_bytes: s.read_bytes.load(Ordering::Relaxed),
            write_bytes: s.write_bytes.load(Ordering::Relaxed),
            children: v.children().iter().map(|c| VdevIostat::of(c)).collect(),
        }
    }

    /// This node and every node below it, depth first (self first).
    pub fn walk(&self) -> Vec<&VdevIostat> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }
}

impl Pool {
    /// A snapshot of every vdev's I/O counters, with capacity for the root and the
    /// top-level vdevs and the time since this process created or imported the pool.
    pub fn iostat(&self) -> PoolIostat {
        let elapsed_ns = u64::try_from(self.imported_at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let spaces: Vec<(u64, u64)> = self.zio.with_space(|s| s.vdevs.iter().map(|v| (v.alloc_bytes(), v.asize_bytes())).collect());
        let logs: Vec<bool> = self.config.lock().children.iter().map(|c| c.is_log).collect();
        let tops: Vec<VdevIostat> = self
            .zio
            .vdevs()
            .iter()
            .zip(spaces)
            .zip(logs)
            .filter(|((t, _), _)| !t.is_hole())
            .map(|((t, (alloc_bytes, space_bytes)), is_log)| VdevIostat {
                is_log,
                alloc_bytes,
                space_bytes,
                ..VdevIostat::of(t)
            })
            .collect();
        let sum = |f: fn(&VdevIostat) -> u64| tops.iter().map(f).sum::<u64>();
        let (read_ops, write_ops, read_bytes, write_bytes) = (sum(|t| t.read_ops), sum(|t| t.write_ops), sum(|t| t.read_bytes), sum(|t| t.write_bytes));
        // Cache devices after the top-level vdevs, with what the L2ARC holds there as
        // their allocated space (OpenZFS shows l2arc capacity the same way).
        let mut tops = tops;
        tops.extend(self.zio.l2arc().devices().iter().map(|d| VdevIostat {
            is_cache: true,
            alloc_bytes: d.asize_bytes(),
            space_bytes: d.vdev().asize_bytes(),
            ..VdevIostat::of(d.vdev())
        }));
        let root = VdevIostat {
            name: self.name.clone(),
            is_log: false,
            is_cache: false,
            alloc_bytes: self.alloc_bytes(),
            space_bytes: self.size_bytes(),
            read_ops,
            write_ops,
            read_bytes,
            write_bytes,
            children: tops,
        };
        PoolIostat { elapsed_ns, root }
    }
}
