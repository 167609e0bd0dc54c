//! # vdev — virtual devices
//!
//! Theory: a top-level vdev presents one flat address space `[0, asize_bytes)` to the
//! allocator and the zio pipeline, and hides how bytes reach leaves:
//! - a **leaf** (file or block device) maps offset `o` to device offset
//!   `DATA_START_BYTES + o` (labels and the boot area are outside the address space);
//! - a **mirror** writes every child and reads any child;
//! - a **raidz** vdev of `n` children with `p` parity stores each block in a variable
//!   number of columns (`p + 1 ..= n`; no read-modify-write, no write hole): linear
//!   sector `x` is sector `x / n` of child `x % n`, a block takes
//!   `s + p·ceil(s / (n − p))` sectors rounded up to a multiple of `p + 1` (OpenZFS's
//!   `vdev_raidz_asize`) and may start on any child. Parity P (XOR), Q (GF(2^8)
//!   generator 2), R (generator 4) come first, as in OpenZFS
//!   `module/zfs/vdev_raidz.c`; see [`raidz`] for the layout.
//!
//! Reads take a `verify` callback (the zio layer's checksum check): a vdev returns the
//! first candidate that verifies — a mirror tries each child, raidz first the plain
//! data columns and then every combination of up to `p` missing columns rebuilt from
//! parity — and rewrites copies that failed when a good one was found (self-healing).
//! Each node counts READ/WRITE/CKSUM errors for `zpool status`.
//!
//! Invariants: a write returns Ok when at least one usable child accepted it (mirror,
//! as ZFS does; failures on the others are counted as WRITE errors) / when at most p
//! columns failed or were skipped (raidz); a flush is Ok only when the leaves that
//! flushed hold the node whole by the same rule (`Vdev::durable_with`: one mirror
//! side, all but p raidz children), so a txg never commits on fewer leaves than it
//! was written to need; leaves are opened with an exclusive `flock` so a second opener
//! — another process, or another open in this one — gets `Busy`. `Vdev`'s fields are
//! private to this crate: callers read them through accessors and change state only
//! through its methods (offline, fault, DTL).
//!
//! Modules: [`leaf`] (the OS device), [`tree`] (node ops, states, counters), [`raidz`]
//! (pure GF(2^8) parity math and column mapping), [`label`] (label and uberblock-ring
//! I/O, and the one fan-out of label writes over a pool's leaves: two-phase config
//! updates, uberblocks, clears, with their error counts; the byte layouts belong to
//! `tarn_phys::label`), [`inject`] (fault injection — errors, corruption, latency,
//! power cuts with or without a volatile write cache — that every leaf I/O consults,
//! so the layers above see injected faults exactly like real ones).
//!
//! Called by: zio (read/write/flush), spa (open/label I/O). Calls: the OS (pread/pwrite).

pub mod aio;
pub mod dtl;
pub mod inject;
pub mod iopool;
pub mod leaf;
pub mod raidz;
pub mod scan;
pub mod tree;

pub use dtl::Dtl;
pub use leaf::Leaf;
pub use tree::{MirrorRole, Vdev, VdevKind, VdevState, VdevStats};

/// Errors from vdev I/O and opening.
#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    /// An OS-level I/O error on a leaf.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// Leaf path.
        path: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No candidate copy/reconstruction passed `verify`.
    #[error("checksum mismatch at offset {offset_bytes} on vdev {vdev}")]
    Checksum {
        /// Top-level vdev id.
        vdev: u32,
        /// Offset in the top-level address space.
        offset_bytes: u64,
    },
    /// Too many children are unavailable to satisfy the request.
    #[error("vdev {vdev} has too many unavailable children")]
    Unavailable {
        /// Top-level vdev id.
        vdev: u32,
    },
    /// Device is already locked by another process.
    #[error("{path} is in use by another process")]
    Busy {
        /// Leaf path.
        path: String,
    },
}

pub mod label;
