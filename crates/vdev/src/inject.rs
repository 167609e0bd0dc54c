//! Fault injection on leaves: the engine half of `tarn zinject` and of the crash tests.
//!
//! Theory: a process-wide registry of injections that [`crate::Leaf`] consults on every
//! `pread`, `pwrite` and `flush`. Everything above the leaf (mirror and raidz healing,
//! the READ/WRITE/CKSUM counters of `zpool status`, pool suspension after a failed
//! sync) sees an injected fault exactly as it would see a real one, because the leaf
//! returns the same `VdevError::Io` (errno `EIO`) or the same flipped bytes a bad
//! disk would. Two kinds of entries:
//!
//! - **power cuts** (crash tests), matched by *path prefix* so that parallel tests in
//!   one process do not disturb each other: after `n` more writes to matching leaves,
//!   every further write and flush is silently dropped — the device keeps what reached
//!   it before the cut, like a machine that lost power ([`power_cut_after`], [`clear`]).
//!   A *volatile* cut ([`power_cut_volatile`]) also models a disk write cache: the
//!   writes since a leaf's last flush are torn afterwards ([`PowerCut::tear_unflushed`]),
//!   so tests can check that nothing relies on the order of writes within one flush.
//! - **handlers** (`zinject -d`), matched by the *exact* leaf path and numbered from 1
//!   in registration order ([`add_handler`], [`remove_handler`], [`remove_all_handlers`],
//!   [`handlers`]). A handler applies to the I/O types of its [`IoType`] and, when its
//!   frequency is below 100 %, to a random share of the matching I/Os. Its action is:
//!   - [`Action::Fault`]`(`[`Fault::Io`]`)`: the I/O fails with `EIO` without reaching
//!     the device (a failed write leaves the old bytes; a failed flush is a lost flush);
//!   - [`Action::Fault`]`(`[`Fault::Checksum`]`)`: reads only; the read reaches the device
//!     and then one random bit of the returned buffer is flipped, so the checksum check
//!     above fails and the copy is healed from redundancy (OpenZFS `-e corrupt`);
//!   - [`Action::Delay`]: the I/O completes no earlier than its computed target time.
//!     [`Delay::Fixed`] is OpenZFS's `-D latency:lanes`: each handler has `lanes`
//!     servers; an I/O takes the lane that becomes idle soonest and completes
//!     `latency` after that (so with 1 lane I/Os queue behind each other like a single
//!     disk head, and with `n` lanes up to `n` overlap). [`Delay::Seek`] models a disk
//!     head: one lane, and an I/O at `offset` costs
//!     `min + (max - min) * |offset - head| / device_size` where `head` is where the
//!     previous I/O of that handler ended; a flush costs `min` (a cache flush) and does
//!     not move the head. Several delay handlers on one leaf add lanes: each I/O goes
//!     to the matching lane that finishes it soonest, as in OpenZFS
//!     `zio_handle_io_delay`.
//!
//! Errors and corruption apply only to the data area of a leaf
//! (`[DATA_START_BYTES, data_end_bytes(size))`) and to flushes; label I/O is never
//! failed or corrupted, as OpenZFS skips label offsets in device injection. Delays apply
//! to every I/O, labels included (a slow disk is slow everywhere). `IoType::All` covers
//! reads, writes and flushes; a delay with `IoType::Write` also delays flushes.
//!
//! Each handler counts the I/Os it matched (before the frequency draw) and those it
//! acted on (`MATCH` and `INJECT` in the `zinject` listing).
//!
//! Invariants: handler ids are unique and never reused within a process
//! (`Inner::next_id` only grows); a fixed delay has at least one lane and a seek delay
//! has `min <= max` (asserted in `Registry::add`); `ANY` is true whenever a power cut
//! or a handler exists (recomputed under both locks by `refresh_any` after every
//! change), so the fast path — no injection registered — is one relaxed atomic load.
//!
//! Locks, in order: `CUTS`, then the handler registry's mutex. Neither is held while an
//! injected delay sleeps or while device I/O runs.
//!
//! Limits: frequencies are drawn from a small xorshift generator, not a cryptographic
//! one; a delay sleeps the calling thread (the device is "busy" for that thread only,
//! other threads queue through the lane times, not by blocking on a lock).
//!
//! Called by: `Leaf::pread`/`pwrite`/`flush`; spa and the daemon (`zinject`); tests.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn_phys::label::{data_end_bytes, DATA_START_BYTES};

// ---- power cuts -------------------------------------------------------------------

/// One registered power cut.
pub struct PowerCut {
    prefix: String,
    remaining: AtomicU64,
    dropped: AtomicU64,
    /// Writes that landed (before the cut).
    landed: AtomicU64,
    /// A volatile write cache ([`power_cut_volatile`]): per leaf path, the writes not
    /// yet flushed, as (device offset, the bytes they replaced), oldest first.
    unflushed: Option<Mutex<Unflushed>>,
}

/// Per leaf path, the writes not yet flushed: (device offset, the bytes replaced).
type Unflushed = std::collections::BTreeMap<String, Vec<(u64, Vec<u8>)>>;

/// Bytes of the sector that a torn write keeps whole ([`PowerCut::tear_unflushed`]).
const TEAR_SECTOR_BYTES: usize = 512;

impl PowerCut {
    /// Writes dropped so far (0 means the cut has not happened yet).
    pub fn dropped_writes(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Writes that reached the device before the cut.
    pub fn landed_writes(&self) -> u64 {
        self.landed.load(Ordering::SeqCst)
    }

    /// For a cut made with [`power_cut_volatile`], once the pool is gone: undo what
    /// the device's volatile cache lost. Every write not followed by a flush of its
    /// leaf before the cut is *torn*: the first half of its 512-byte sectors (rounded
    /// down, at least one) stays, the rest gets back the bytes it replaced; a write of
    /// one sector or less is lost whole. The later of two overlapping writes is undone
    /// first. Returns how many writes were torn or lost. Errors: opening or writing
    /// a leaf file.
    pub fn tear_unflushed(&self) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let Some(u) = &self.unflushed else { return Ok(0) };
        let mut u = u.lock();
        let mut n = 0;
        for (path, writes) in u.iter() {
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            for (off, old) in writes.iter().rev() {
                let sectors = old.len().div_ceil(TEAR_SECTOR_BYTES);
                let keep = if sectors > 1 { (sectors / 2) * TEAR_SECTOR_BYTES } else { 0 };
                f.write_all_at(&old[keep..], off + keep as u64)?;
                n += 1;
            }
        }
        u.clear();
        Ok(n)
    }
}

/// True while any power cut or handler is registered (the fast-path flag).
static ANY: AtomicBool = AtomicBool::new(false);
static CUTS: Mutex<Vec<Arc<PowerCut>>> = Mutex::new(Vec::new());
static HANDLERS: Registry = Registry::new();

/// Recompute `ANY` under both locks, so the last writer stores the current truth.
fn refresh_any() {
    let cuts = CUTS.lock();
    let handlers = HANDLERS.inner.lock();
    ANY.store(!cuts.is_empty() || !handlers.handlers.is_empty(), Ordering::SeqCst);
}

/// Register a power cut for leaves whose path starts with `prefix`: the next
/// `writes_before_cut` writes land, later ones are dropped. Returns a handle to
/// observe it; remove it with [`clear`].
pub fn power_cut_after(prefix: &str, writes_before_cut: u64) -> Arc<PowerCut> {
    register_cut(prefix, writes_before_cut, false)
}

/// [`power_cut_after`] on devices with a volatile write cache: until the cut, every
/// write to a matching leaf first saves the bytes it replaces, and a flush of that
/// leaf makes them durable (forgets them). After the pool is gone,
/// [`PowerCut::tear_unflushed`] tears every write that no flush covered — the
/// strongest adversary for in-place updates such as label configs, where a cut
/// between two writes of the same flush window can damage both.
pub fn power_cut_volatile(prefix: &str, writes_before_cut: u64) -> Arc<PowerCut> {
    register_cut(prefix, writes_before_cut, true)
}

fn register_cut(prefix: &str, writes_before_cut: u64, volatile: bool) -> Arc<PowerCut> {
    let cut = Arc::new(PowerCut {
        prefix: prefix.to_string(),
        remaining: AtomicU64::new(writes_before_cut),
        dropped: AtomicU64::new(0),
        landed: AtomicU64::new(0),
        unflushed: volatile.then(|| Mutex::new(std::collections::BTreeMap::new())),
    });
    CUTS.lock().push(cut.clone());
    refresh_any();
    cut
}

/// Whether a volatile power cut that has not happened yet covers `path`: the leaf
/// must then pass the bytes a write replaces to [`record_unflushed`].
pub(crate) fn wants_old_bytes(path: &str) -> bool {
    CUTS.lock()
        .iter()
        .any(|c| c.unflushed.is_some() && path.starts_with(&c.prefix) && c.remaining.load(Ordering::SeqCst) > 0)
}

/// A write to `path` at `offset_bytes` replaced `old` and is in the volatile cache.
pub(crate) fn record_unflushed(path: &str, offset_bytes: u64, old: Vec<u8>) {
    for c in CUTS.lock().iter().filter(|c| path.starts_with(&c.prefix)) {
        if let Some(u) = &c.unflushed {
            u.lock().entry(path.to_string()).or_default().push((offset_bytes, old.clone()));
        }
    }
}

/// A flush of `path` reached the device: its cached writes are durable.
pub(crate) fn flushed(path: &str) {
    for c in CUTS.lock().iter().filter(|c| path.starts_with(&c.prefix)) {
        if let Some(u) = &c.unflushed {
            u.lock().remove(path);
        }
    }
}

/// Remove every power cut registered with exactly this `prefix` (handlers are removed
/// with [`remove_handler`] / [`remove_all_handlers`]).
pub fn clear(prefix: &str) {
    CUTS.lock().retain(|x| x.prefix != prefix);
    refresh_any();
}

/// Should this write to `path` be dropped by a power cut? Counts it either way.
fn drop_write(path: &str) -> bool {
    let c = CUTS.lock();
    for cut in c.iter().filter(|c| path.starts_with(&c.prefix)) {
        let left = cut.remaining.load(Ordering::SeqCst);
        if left == 0 {
            cut.dropped.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        cut.remaining.store(left - 1, Ordering::SeqCst);
        cut.landed.fetch_add(1, Ordering::SeqCst);
    }
    false
}

/// Is `path` past a power cut (flushes are dropped too)?
fn is_cut(path: &str) -> bool {
    CUTS.lock()
        .iter()
        .any(|c| path.starts_with(&c.prefix) && c.remaining.load(Ordering::SeqCst) == 0)
}

// ---- handlers ---------------------------------------------------------------------

/// Frequency meaning "every matching I/O", in parts per million (OpenZFS
/// `ZI_PERCENTAGE_MAX`).
pub const FREQ_ALWAYS_PPM: u32 = 1_000_000;

/// Which leaf operations a handler applies to (`zinject -T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoType {
    /// `pread`.
    Read,
    /// `pwrite` (and, for delays, `flush`).
    Write,
    /// `flush` (fdatasync).
    Flush,
    /// Reads, writes and flushes.
    All,
}

impl IoType {
    /// The word `zinject` uses ("read", "write", "flush", "all").
    pub fn as_str(self) -> &'static str {
        match self {
            IoType::Read => "read",
            IoType::Write => "write",
            IoType::Flush => "flush",
            IoType::All => "all",
        }
    }

    /// Parse a `-T` word (case-insensitive, as OpenZFS does).
    pub fn parse(word: &str) -> Option<IoType> {
        Some(match word.to_ascii_lowercase().as_str() {
            "read" => IoType::Read,
            "write" => IoType::Write,
            "flush" => IoType::Flush,
            "all" => IoType::All,
            _ => return None,
        })
    }

    /// Does a handler of this type apply to `op`? Delays on writes also cover flushes.
    fn covers(self, op: Op, is_delay: bool) -> bool {
        match (self, op) {
            (IoType::All, _) => true,
            (IoType::Read, Op::Read) | (IoType::Write, Op::Write) | (IoType::Flush, Op::Flush) => true,
            (IoType::Write, Op::Flush) => is_delay,
            _ => false,
        }
    }
}

/// An error a handler injects (`zinject -e`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The I/O fails with `EIO` without reaching the device.
    Io,
    /// The read succeeds and one random bit of the buffer is flipped (reads only).
    Checksum,
}

impl Fault {
    /// The word `zinject` prints in its ERROR column.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Io => "io",
            Fault::Checksum => "checksum",
        }
    }
}

/// A latency model (`zinject -D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// Every I/O takes `latency`; `lanes` of them may be in flight at once.
    Fixed {
        /// Time from start of service to completion.
        latency: Duration,
        /// Concurrent I/Os (at least 1).
        lanes: u32,
    },
    /// A single disk head: `min_latency` per I/O plus a seek cost proportional to the
    /// distance from the end of the previous I/O, reaching `max_latency` for a
    /// full-stroke seek across the device.
    Seek {
        /// Fixed cost of every I/O and of every flush.
        min_latency: Duration,
        /// Cost of an I/O one whole device away from the head.
        max_latency: Duration,
    },
}

/// What a handler does to the I/Os it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Fail or corrupt the I/O.
    Fault(Fault),
    /// Make the I/O slow.
    Delay(Delay),
}

/// What to register: where, on which I/O types, what, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerSpec {
    /// Pool the leaf belongs to (shown by `zinject`; not used for matching).
    pub pool: String,
    /// GUID of the leaf vdev (shown by `zinject`; not used for matching).
    pub vdev_guid: u64,
    /// Leaf path, matched exactly against `Leaf::path`.
    pub path: String,
    /// Operations the handler applies to.
    pub io_type: IoType,
    /// Fault or delay.
    pub action: Action,
    /// Share of matching I/Os acted on, parts per million (1..=[`FREQ_ALWAYS_PPM`]; 0
    /// matches but never acts).
    pub freq_ppm: u32,
}

/// A registered handler as listed: its id, what it was registered with, and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerInfo {
    /// Handler id (from 1, never reused).
    pub id: u64,
    /// What it was registered with.
    pub spec: HandlerSpec,
    /// I/Os that matched path and type (before the frequency draw).
    pub match_count: u64,
    /// I/Os it acted on.
    pub inject_count: u64,
}

/// A leaf operation, as seen by the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    Flush,
}

/// What the registry decided for one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Decision {
    /// Fail the I/O with EIO.
    pub(crate) fail: bool,
    /// Flip a bit of the buffer after the read, at a position drawn from this word.
    pub(crate) corrupt: Option<u64>,
    /// Do not complete before this instant.
    pub(crate) delay_until: Option<Instant>,
}

struct Handler {
    info: HandlerInfo,
    /// Fixed delay: when each lane becomes idle (`None`: idle since ever). Seek
    /// delay: one entry.
    lanes_idle_at: Vec<Option<Instant>>,
    /// Seek delay: device offset where the previous I/O ended.
    head_bytes: u64,
}

struct Inner {
    handlers: Vec<Handler>,
    next_id: u64,
    rng: u64,
}

/// A set of numbered handlers. The process-wide one behind [`add_handler`] and the
/// leaf hooks is a static; unit tests build their own to check matching without
/// touching it.
pub(crate) struct Registry {
    inner: Mutex<Inner>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// An empty registry; ids start at 1.
    pub(crate) const fn new() -> Registry {
        Registry {
            inner: Mutex::new(Inner {
                handlers: Vec::new(),
                next_id: 1,
                rng: 0,
            }),
        }
    }

    /// Register a handler; returns its id. Panics (a caller bug) on a fixed delay with
    /// zero lanes or a seek delay with `min_latency > max_latency`, or a frequency
    /// above [`FREQ_ALWAYS_PPM`].
    pub(crate) fn add(&self, spec: HandlerSpec) -> u64 {
        assert!(spec.freq_ppm <= FREQ_ALWAYS_PPM, "frequency {} ppm", spec.freq_ppm);
        let lanes = match spec.action {
            Action::Delay(Delay::Fixed { lanes, .. }) => {
                assert!(lanes >= 1, "a delay needs at least one lane");
                lanes as usize
            }
            Action::Delay(Delay::Seek { min_latency, max_latency }) => {
                assert!(min_latency <= max_latency, "seek min {min_latency:?} > max {max_latency:?}");
                1
            }
            Action::Fault(_) => 0,
        };
        let mut g = self.inner.lock();
        let id = g.next_id;
        g.next_id += 1;
        g.handlers.push(Handler {
            info: HandlerInfo {
                id,
                spec,
                match_count: 0,
                inject_count: 0,
            },
            lanes_idle_at: vec![None; lanes],
            head_bytes: 0,
        });
        id
    }

    /// Remove handler `id`; false when there is none.
    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut g = self.inner.lock();
        let before = g.handlers.len();
        g.handlers.retain(|h| h.info.id != id);
        g.handlers.len() != before
    }

    /// Remove every handler; returns the ids removed, in registration order.
    pub(crate) fn remove_all(&self) -> Vec<u64> {
        let mut g = self.inner.lock();
        g.handlers.drain(..).map(|h| h.info.id).collect()
    }

    /// Every handler, in registration order, with its counters.
    pub(crate) fn list(&self) -> Vec<HandlerInfo> {
        self.inner.lock().handlers.iter().map(|h| h.info.clone()).collect()
    }

    /// Decide what happens to one I/O of `len_bytes` at `offset_bytes` on the leaf at
    /// `path` (`device_bytes` long), as of `now`: counts matches, draws frequencies,
    /// claims a delay lane. Does not sleep.
    pub(crate) fn decide(&self, path: &str, op: Op, offset_bytes: u64, len_bytes: u64, device_bytes: u64, now: Instant) -> Decision {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let in_data = op == Op::Flush || (offset_bytes >= DATA_START_BYTES && offset_bytes < data_end_bytes(device_bytes));
        let mut d = Decision::default();
        // The delay lane that completes this I/O soonest: (handler index, lane, target).
        let mut best: Option<(usize, usize, Instant)> = None;
        for (i, h) in g.handlers.iter_mut().enumerate() {
            let spec = &h.info.spec;
            if spec.path != path {
                continue;
            }
            let is_delay = matches!(spec.action, Action::Delay(_));
            if !spec.io_type.covers(op, is_delay) {
                continue;
            }
            match spec.action {
                Action::Fault(Fault::Io) if !in_data || d.fail => continue,
                Action::Fault(Fault::Checksum) if !in_data || op != Op::Read || d.corrupt.is_some() || d.fail => continue,
                _ => {}
            }
            h.info.match_count += 1;
            if !freq_triggered(&mut g.rng, spec.freq_ppm) {
                continue;
            }
            match spec.action {
                Action::Fault(Fault::Io) => {
                    h.info.inject_count += 1;
                    d.fail = true;
                }
                Action::Fault(Fault::Checksum) => {
                    h.info.inject_count += 1;
                    d.corrupt = Some(next_random(&mut g.rng));
                }
                Action::Delay(delay) => {
                    // The lane that becomes idle soonest (`None` sorts first: idle).
                    let (lane, idle_at) = h
                        .lanes_idle_at
                        .iter()
                        .copied()
                        .enumerate()
                        .min_by_key(|&(_, t)| t)
                        .expect("delay handler has lanes");
                    let service = match delay {
                        Delay::Fixed { latency, .. } => latency,
                        Delay::Seek { min_latency, max_latency } => seek_latency(min_latency, max_latency, op, h.head_bytes, offset_bytes, device_bytes),
                    };
                    let target = idle_at.map_or(now, |t| t.max(now)) + service;
                    if best.is_none_or(|(_, _, t)| target < t) {
                        best = Some((i, lane, target));
                    }
                }
            }
        }
        if let Some((i, lane, target)) = best {
            let h = &mut g.handlers[i];
            h.lanes_idle_at[lane] = Some(target);
            h.info.inject_count += 1;
            if op != Op::Flush {
                h.head_bytes = offset_bytes.saturating_add(len_bytes);
            }
            d.delay_until = Some(target);
        }
        if d.fail {
            // A failed I/O returns no data to corrupt.
            d.corrupt = None;
        }
        d
    }
}

/// Seek model: `min + (max - min) * distance / device_bytes`; flushes pay `min`.
fn seek_latency(min: Duration, max: Duration, op: Op, head_bytes: u64, offset_bytes: u64, device_bytes: u64) -> Duration {
    if op == Op::Flush || device_bytes == 0 {
        return min;
    }
    let distance = head_bytes.abs_diff(offset_bytes).min(device_bytes);
    let span_ns = (max - min).as_nanos();
    let seek_ns = span_ns * distance as u128 / device_bytes as u128;
    min + Duration::from_nanos(seek_ns as u64)
}

/// Draw whether a handler with frequency `freq_ppm` acts on this I/O.
fn freq_triggered(rng: &mut u64, freq_ppm: u32) -> bool {
    if freq_ppm >= FREQ_ALWAYS_PPM {
        return true;
    }
    if freq_ppm == 0 {
        return false;
    }
    next_random(rng) % u64::from(FREQ_ALWAYS_PPM) < u64::from(freq_ppm)
}

/// xorshift64, seeded from the clock on first use.
fn next_random(rng: &mut u64) -> u64 {
    if *rng == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        *rng = seed | 1;
    }
    let mut x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    x
}

/// Register a handler in the process-wide registry the leaves consult; returns its id.
/// Panics (a caller bug) on a fixed delay with zero lanes, a seek delay with
/// `min_latency > max_latency`, or a frequency above [`FREQ_ALWAYS_PPM`]; spa checks
/// requests before calling this.
pub fn add_handler(spec: HandlerSpec) -> u64 {
    let id = HANDLERS.add(spec);
    refresh_any();
    id
}

/// Remove process-wide handler `id`; false when there is none.
pub fn remove_handler(id: u64) -> bool {
    let found = HANDLERS.remove(id);
    refresh_any();
    found
}

/// Remove every process-wide handler (power cuts stay); returns the ids removed.
pub fn remove_all_handlers() -> Vec<u64> {
    let ids = HANDLERS.remove_all();
    refresh_any();
    ids
}

/// The process-wide handlers, in registration order.
pub fn handlers() -> Vec<HandlerInfo> {
    HANDLERS.list()
}

// ---- leaf hooks -------------------------------------------------------------------

/// Is any injection registered? The leaves' fast path: one relaxed load.
#[inline]
pub(crate) fn active() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// What a leaf must do with one I/O.
pub(crate) enum Verdict {
    /// Issue it (and flip a bit of a read buffer afterwards when `corrupt`).
    Proceed {
        /// Flip a bit of the read buffer afterwards, chosen by this random word.
        corrupt: Option<u64>,
    },
    /// Fail it with EIO.
    Fail,
    /// Report success without issuing it (power cut).
    Drop,
}

/// Consult power cuts and handlers for one I/O and sleep out any injected delay.
/// Call only when [`active`] is true.
pub(crate) fn check(path: &str, op: Op, offset_bytes: u64, len_bytes: u64, device_bytes: u64) -> Verdict {
    let dropped = match op {
        Op::Read => false,
        Op::Write => drop_write(path),
        Op::Flush => is_cut(path),
    };
    if dropped {
        return Verdict::Drop;
    }
    let d = HANDLERS.decide(path, op, offset_bytes, len_bytes, device_bytes, Instant::now());
    if let Some(t) = d.delay_until {
        let left = t.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
    if d.fail {
        Verdict::Fail
    } else {
        Verdict::Proceed { corrupt: d.corrupt }
    }
}

/// Flip one bit of `buf`, chosen by the random word `r` (nothing to do when empty).
pub(crate) fn flip_bit(buf: &mut [u8], r: u64) {
    if buf.is_empty() {
        return;
    }
    let byte = (r % buf.len() as u64) as usize;
    buf[byte] ^= 1 << ((r >> 32) % 8);
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: u64 = 80 << 20;
    const DATA: u64 = DATA_START_BYTES + 4096;

    fn spec(path: &str, io_type: IoType, action: Action, freq_ppm: u32) -> HandlerSpec {
        HandlerSpec {
            pool: "tank".into(),
            vdev_guid: 0xabc,
            path: path.into(),
            io_type,
            action,
            freq_ppm,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn matching_by_exact_path_type_and_data_area() {
        let r = Registry::new();
        let id = r.add(spec("/d/a", IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        assert_eq!(id, 1);
        let now = Instant::now();
        assert!(r.decide("/d/a", Op::Read, DATA, 512, DEV, now).fail);
        // Exact path, not prefix; other types; labels are never failed.
        assert!(!r.decide("/d/ab", Op::Read, DATA, 512, DEV, now).fail);
        assert!(!r.decide("/d", Op::Read, DATA, 512, DEV, now).fail);
        assert!(!r.decide("/d/a", Op::Write, DATA, 512, DEV, now).fail);
        assert!(!r.decide("/d/a", Op::Flush, 0, 0, DEV, now).fail);
        assert!(!r.decide("/d/a", Op::Read, 0, 512, DEV, now).fail);
        assert!(!r.decide("/d/a", Op::Read, data_end_bytes(DEV), 512, DEV, now).fail);
        let l = r.list();
        assert_eq!((l[0].match_count, l[0].inject_count), (1, 1));

        let all = r.add(spec("/d/b", IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        assert_eq!(all, 2);
        for op in [Op::Read, Op::Write, Op::Flush] {
            assert!(r.decide("/d/b", op, DATA, 512, DEV, now).fail, "{op:?}");
        }
        let w = r.add(spec("/d/c", IoType::Write, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        assert!(r.decide("/d/c", Op::Write, DATA, 512, DEV, now).fail);
        assert!(
            !r.decide("/d/c", Op::Flush, 0, 0, DEV, now).fail,
            "an error on writes is not an error on flushes"
        );
        assert!(r.remove(w));
    }

    #[test]
    fn checksum_corrupts_reads_only_and_io_wins() {
        let r = Registry::new();
        r.add(spec("/d/a", IoType::All, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM));
        let now = Instant::now();
        let d = r.decide("/d/a", Op::Read, DATA, 512, DEV, now);
        assert!(d.corrupt.is_some() && !d.fail);
        assert_eq!(r.decide("/d/a", Op::Write, DATA, 512, DEV, now), Decision::default());
        assert_eq!(r.decide("/d/a", Op::Read, 4096, 512, DEV, now), Decision::default(), "labels");
        r.add(spec("/d/a", IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        let d = r.decide("/d/a", Op::Read, DATA, 512, DEV, now);
        assert!(d.fail && d.corrupt.is_none(), "a failed read has no buffer to corrupt");
    }

    #[test]
    fn frequency_edges_and_share() {
        let r = Registry::new();
        let never = r.add(spec("/d/a", IoType::Read, Action::Fault(Fault::Io), 0));
        let now = Instant::now();
        for _ in 0..1000 {
            assert!(!r.decide("/d/a", Op::Read, DATA, 512, DEV, now).fail);
        }
        let l = r.list();
        assert_eq!((l[0].match_count, l[0].inject_count), (1000, 0), "0 %: matches, never acts");
        r.remove(never);
        r.add(spec("/d/a", IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        for _ in 0..1000 {
            assert!(r.decide("/d/a", Op::Read, DATA, 512, DEV, now).fail);
        }
        r.remove_all();
        r.add(spec("/d/a", IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM / 4));
        let hits = (0..20_000).filter(|_| r.decide("/d/a", Op::Read, DATA, 512, DEV, now).fail).count();
        assert!((4000..6000).contains(&hits), "25 % of 20000 gave {hits}");
        let l = r.list();
        assert_eq!((l[0].match_count, l[0].inject_count), (20_000, hits as u64));
    }

    #[test]
    fn ids_grow_and_clear_removes() {
        let r = Registry::new();
        let a = r.add(spec("/d/a", IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        let b = r.add(spec("/d/b", IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        assert_eq!((a, b), (1, 2));
        assert!(r.remove(a));
        assert!(!r.remove(a), "already gone");
        assert!(!r.decide("/d/a", Op::Read, DATA, 512, DEV, Instant::now()).fail);
        let c = r.add(spec("/d/c", IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        assert_eq!(c, 3, "ids are not reused");
        assert_eq!(r.list().iter().map(|h| h.id).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(r.remove_all(), vec![2, 3]);
        assert!(r.list().is_empty());
        assert_eq!(r.add(spec("/d/a", IoType::All, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM)), 4);
    }

    #[test]
    fn fixed_delay_lanes_queue() {
        let r = Registry::new();
        let one = r.add(spec(
            "/d/a",
            IoType::All,
            Action::Delay(Delay::Fixed { latency: ms(10), lanes: 1 }),
            FREQ_ALWAYS_PPM,
        ));
        let now = Instant::now();
        let t: Vec<Duration> = (0..3)
            .map(|_| r.decide("/d/a", Op::Read, DATA, 512, DEV, now).delay_until.unwrap() - now)
            .collect();
        assert_eq!(t, vec![ms(10), ms(20), ms(30)], "one lane: each I/O waits for the previous");
        // Labels and flushes are delayed too.
        assert_eq!(r.decide("/d/a", Op::Flush, 0, 0, DEV, now).delay_until.unwrap() - now, ms(40));
        assert_eq!(r.decide("/d/a", Op::Write, 0, 512, DEV, now).delay_until.unwrap() - now, ms(50));
        // A later I/O on an idle lane waits only its own latency.
        let later = now + ms(500);
        assert_eq!(r.decide("/d/a", Op::Read, DATA, 512, DEV, later).delay_until.unwrap() - later, ms(10));
        r.remove(one);

        r.add(spec(
            "/d/a",
            IoType::Read,
            Action::Delay(Delay::Fixed { latency: ms(10), lanes: 2 }),
            FREQ_ALWAYS_PPM,
        ));
        let t: Vec<Duration> = (0..4)
            .map(|_| r.decide("/d/a", Op::Read, DATA, 512, DEV, now).delay_until.unwrap() - now)
            .collect();
        assert_eq!(t, vec![ms(10), ms(10), ms(20), ms(20)], "two lanes: two at a time");
        assert_eq!(r.decide("/d/a", Op::Write, DATA, 512, DEV, now).delay_until, None, "-T read");
        // Handlers add lanes: a second 25 ms lane takes the I/O when it is sooner.
        r.add(spec(
            "/d/a",
            IoType::Read,
            Action::Delay(Delay::Fixed { latency: ms(25), lanes: 1 }),
            FREQ_ALWAYS_PPM,
        ));
        assert_eq!(r.decide("/d/a", Op::Read, DATA, 512, DEV, now).delay_until.unwrap() - now, ms(25));
        assert_eq!(r.decide("/d/a", Op::Read, DATA, 512, DEV, now).delay_until.unwrap() - now, ms(30));
    }

    #[test]
    fn write_delay_covers_flush() {
        let r = Registry::new();
        r.add(spec(
            "/d/a",
            IoType::Write,
            Action::Delay(Delay::Fixed { latency: ms(7), lanes: 4 }),
            FREQ_ALWAYS_PPM,
        ));
        let now = Instant::now();
        assert_eq!(r.decide("/d/a", Op::Flush, 0, 0, DEV, now).delay_until.unwrap() - now, ms(7));
        assert_eq!(r.decide("/d/a", Op::Read, DATA, 512, DEV, now).delay_until, None);
    }

    #[test]
    fn seek_delay_follows_the_head() {
        let r = Registry::new();
        let seek = Delay::Seek {
            min_latency: ms(1),
            max_latency: ms(21),
        };
        r.add(spec("/d/a", IoType::All, Action::Delay(seek), FREQ_ALWAYS_PPM));
        let dev = 1000 << 20;
        let mut now = Instant::now();
        let mut cost = |op: Op, off: u64, len: u64| {
            let t = r.decide("/d/a", op, off, len, dev, now).delay_until.unwrap() - now;
            now += ms(1000); // each I/O starts on an idle head
            t
        };
        // Head starts at 0: half a device away costs min + half the span.
        assert_eq!(cost(Op::Read, dev / 2, 4096), ms(11));
        // Sequential: the head is at the end of the previous I/O.
        assert_eq!(cost(Op::Read, dev / 2 + 4096, 4096), ms(1));
        // A flush costs the fixed part and does not move the head.
        assert_eq!(cost(Op::Flush, 0, 0), ms(1));
        assert_eq!(cost(Op::Write, dev / 2 + 8192, 4096), ms(1));
        // Back to the start: the head is at dev/2 + 12288, just over half the span.
        let back = cost(Op::Read, 0, 4096);
        assert!(back > ms(11) && back < ms(12), "{back:?}");
        // Queued I/Os on the one head add up.
        let start = now;
        let a = r.decide("/d/a", Op::Read, 4096, 4096, dev, start).delay_until.unwrap() - start;
        let b = r.decide("/d/a", Op::Read, 8192, 4096, dev, start).delay_until.unwrap() - start;
        assert_eq!((a, b), (ms(1), ms(2)));
    }

    #[test]
    #[should_panic(expected = "at least one lane")]
    fn zero_lanes_is_a_bug() {
        Registry::new().add(spec(
            "/d/a",
            IoType::All,
            Action::Delay(Delay::Fixed { latency: ms(1), lanes: 0 }),
            FREQ_ALWAYS_PPM,
        ));
    }

    #[test]
    fn io_type_words() {
        for t in [IoType::Read, IoType::Write, IoType::Flush, IoType::All] {
            assert_eq!(IoType::parse(t.as_str()), Some(t));
        }
        assert_eq!(IoType::parse("READ"), Some(IoType::Read));
        assert_eq!(IoType::parse("free"), None);
    }

    #[test]
    fn flip_bit_changes_exactly_one_bit() {
        let mut rng = 0;
        for _ in 0..100 {
            let mut b = vec![0u8; 4096];
            flip_bit(&mut b, next_random(&mut rng));
            assert_eq!(b.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
        }
        flip_bit(&mut [], 7);
    }

    /// The process-wide registry through real leaves and a mirror: errors are counted
    /// as READ errors, corruption as CKSUM and healed, delays slow the I/O, and
    /// removal restores normal behaviour. Paths are unique to this test.
    #[test]
    fn handlers_reach_leaves_and_the_tree() {
        use crate::{Leaf, Vdev, VdevError};
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<String> = (0..2)
            .map(|i| {
                let p = dir.path().join(format!("inject-leaf-{i}"));
                std::fs::File::create(&p).unwrap().set_len(DEV).unwrap();
                p.display().to_string()
            })
            .collect();
        let children = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Arc::new(Vdev::new_leaf(
                    i as u32,
                    10 + i as u64,
                    9,
                    p.clone(),
                    Some(Leaf::open(std::path::Path::new(p)).unwrap()),
                ))
            })
            .collect();
        let m = Vdev::new_mirror(0, 1, 9, children);
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        let ok = |b: &[u8]| b == &data[..];
        m.write(65536, &data).unwrap();
        let ch = m.children();
        let count = |v: &Vdev| {
            let s = &v.stats;
            [&s.read_errors, &s.write_errors, &s.checksum_errors].map(|c| c.load(Ordering::Relaxed))
        };

        // Checksum corruption on the first side: the read verifies from the second,
        // the first counts CKSUM and is rewritten.
        let id = add_handler(spec(&paths[0], IoType::Read, Action::Fault(Fault::Checksum), FREQ_ALWAYS_PPM));
        assert!(active());
        assert_eq!(m.read(65536, 8192, &ok).unwrap(), data);
        assert_eq!(count(&ch[0]), [0, 0, 1]);
        assert_eq!(count(&ch[1]), [0, 0, 0]);
        assert!(handlers().iter().any(|h| h.id == id && h.inject_count == 1));
        assert!(remove_handler(id));
        assert!(!remove_handler(id));
        assert_eq!(m.read(65536, 8192, &ok).unwrap(), data);
        assert_eq!(count(&ch[0]), [0, 0, 1], "no new errors once removed");

        // I/O errors on reads of the second leaf alone: READ counted, EIO returned.
        let id = add_handler(spec(&paths[1], IoType::Read, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        match ch[1].read(65536, 8192, &ok) {
            Err(VdevError::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
            other => panic!("expected EIO, got {other:?}"),
        }
        assert_eq!(count(&ch[1]), [1, 0, 0]);
        assert_eq!(m.read(65536, 8192, &ok).unwrap(), data, "the mirror reads the other side");
        remove_handler(id);

        // Write errors: counted as WRITE, the mirror write still succeeds.
        let id = add_handler(spec(&paths[1], IoType::Write, Action::Fault(Fault::Io), FREQ_ALWAYS_PPM));
        m.write(131072, &data).unwrap();
        assert_eq!(count(&ch[1]), [1, 1, 0]);
        remove_handler(id);

        // Latency: a flush waits at least the injected delay.
        let id = add_handler(spec(
            &paths[0],
            IoType::All,
            Action::Delay(Delay::Fixed { latency: ms(30), lanes: 1 }),
            FREQ_ALWAYS_PPM,
        ));
        let t = Instant::now();
        m.flush().unwrap();
        assert!(t.elapsed() >= ms(30), "{:?}", t.elapsed());
        remove_handler(id);
    }
}
