//! # tarn-cli — the `tarn` and `tarnd` binaries: `zpool`/`zfs`/`zinject` command families and the daemon
//!
//! Theory: there are two roles, in two binaries built from this crate. As a client
//! (`tarn zpool …`, `tarn zfs …`, or invoked through a `zpool`/`zfs` symlink) `tarn` is
//! thin: it forwards its argv and cwd to the daemon over a Unix socket ([`proto`]) and
//! prints the answer, starting the daemon when none answers; it links nothing else, so
//! it starts fast. The engine, `tarnd` (beside `tarn`, which runs it for every other
//! role, [`proto::exec_engine`]), is the daemon (`tarn daemon`): it holds every imported pool, runs
//! commands against them ([`zpool`], [`zfs`]) one at a time under one lock, and owns
//! the FUSE mounts of their datasets ([`mounts`]). `tarn zinject` ([`zinject`]) registers
//! fault-injection handlers on the leaves of those pools, so faults hit the live pool. A pool is open in exactly one
//! process, the daemon; the engine crates never depend on this one.
//!
//! Output follows OpenZFS byte for byte where Tarn implements the same command
//! ([`format`](mod@format)); argument syntax is OpenZFS's getopt ([`args`]).
//!
//! Limits: commands are serialized in the daemon (a slow `zpool export` delays a
//! concurrent `zfs list`), except the stream of `zfs send`/`zfs recv`, which moves
//! after the lock is released ([`zfs_send`]); the daemon answers only local clients that may open the
//! socket: root, and for read-only commands a configured group (see [`daemon`] and
//! [`access`] for who may ask and the limits on a request). The daemon's tables are
//! [`state`], the dataset mount policy [`zfs_mount`], and the pools it brings back
//! when it starts are listed in the [`cachefile`]. The ARC's tunables and statistics
//! (`tarn daemon --set`, `tarn kstat arcstats`, `tarn arcstat`) are [`arcstat`].
//! `tarn zdb` ([`zdb`]) is the exception to "a pool is open in one process": it reads
//! the leaves itself, read-only and unlocked, and never writes.

pub mod access;
pub mod arcstat;
pub mod args;
pub mod cachefile;
pub mod daemon;
pub mod format;
pub mod iostat;
pub mod memory;
pub mod mounts;
/// The client ↔ daemon protocol, its own crate (`crates/proto`) so that the client
/// binary can be built without the engine (`scripts/build.sh`, the static musl build).
pub use tarn_proto as proto;
pub mod scrub;
pub mod state;
pub mod zdb;
pub mod zfs;
pub mod zfs_holds;
pub mod zfs_mount;
pub mod zfs_rename;
pub mod zfs_send;
pub mod zfs_snap;
pub mod zinject;
pub mod zpool;
