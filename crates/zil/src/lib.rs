//! # zil — the ZFS intent log: durable synchronous operations without a txg sync
//!
//! Theory (OpenZFS `module/zfs/zil.c`, Bonwick's "ZFS: The Last Word in File Systems";
//! our own implementation). A txg makes changes durable every few seconds, all at
//! once. An application that calls `fsync` cannot wait that long, so every change is
//! also described by an *in-memory transaction* (itx) appended to its dataset's
//! [`Zilog`] as it is made. [`Zilog::commit`] turns the pending itxs into log records,
//! packs them into log blocks (lwbs), writes those to their pre-allocated places on a
//! log vdev (or the main pool), flushes just those devices, and returns: one device
//! round trip instead of a txg sync.
//!
//! The chain. The object-set root holds a [`ZilHeader`] naming the chain and its first
//! live block. Each block names the next one, allocated before the block itself was
//! written, so block N can be written while N+1 is still being filled. That successor
//! is sized for the largest of the last few commits, so a group commit usually fits
//! one block (one write and flush per mirror side), and only a block's used part is
//! written on a leaf or mirror (the checksum covers only that part). A new chain's
//! header must be on disk before anything in it is acknowledged (one txg sync per
//! chain, as `zil_create` does); after that the chain lives on and the header only moves
//! forward as txg syncs make its oldest blocks unnecessary ([`Zilog::sync`]).
//!
//! Invariants:
//! - Records are written in the order their itxs were logged (one issuer at a time,
//!   `issue` lock), and block sequence numbers follow chain order.
//! - A commit returns only when every block holding its records *and every earlier
//!   block* is written and flushed (the blocks of one batch are in flight at once: commit
//!   pipelining), so the on-disk chain read from the header always yields a prefix of
//!   the acknowledged history plus possibly some unacknowledged records.
//! - A block is freed only by the sync of a txg that contains every change recorded in
//!   it and that writes a header no longer pointing at it; frees are deferred like all
//!   frees, so a rewind import still finds it.
//! - Replay applies a record only if its txg is at least `claim_txg` (older changes are
//!   already in the pool) and its seq is above `replay_seq`; the replay handler notes
//!   the txg each record lands in, and that txg's sync writes the new `replay_seq`
//!   with the changes. So a crash during replay followed by a second replay applies
//!   every record exactly once.
//! - A failed log write makes the committer fall back to a txg sync (the changes are
//!   made durable the slow way) and retires the chain; the next commit starts a new one.
//! - The log owns the data blocks of its indirect records (object type intent log) and
//!   frees them with the log block naming them, but never an *adopted* block (a
//!   file's own record block, which the txg sync installs or frees: `tarn_dmu`'s
//!   `early` module); at import it claims one only when its birth txg is at least
//!   `claim_txg`, and reads no indirect data of records older than `claim_txg`.
//!
//! Locks (in order): `issue` (one thread builds and allocates log blocks), then `st`.
//! Neither is held across a txg wait; `st` is never held across I/O. `Objset` locks
//! nest inside `st` (via `set_zil_header`), never the other way round.
//!
//! Called by: zpl (log, commit, replay), spa (open, claim at import, sync, close).
//! Calls: dmu (objset header, txg gate), zio (raw log-block I/O).

use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tarn_dmu::objset::Objset;
use tarn_dmu::txg::TxgGate;
use tarn_phys::zil::{WriteData, WriteRecord, LWB_HEADER_SIZE_BYTES, LWB_MAX_SIZE_BYTES, LWB_MIN_SIZE_BYTES, RECORD_HEADER_SIZE_BYTES, TX_WRITE};
use tarn_phys::{BlkPtr, Dva, LwbHeader, LwbPtr, ObjectType, RecordHeader, ZilHeader};
use tarn_zio::{WriteProps, Zio, ZioError};

/// Errors of the intent log.
#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    /// The log could not be written and the fallback txg sync failed too.
    #[error("intent log: {0}")]
    Io(String),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ZilError>;

/// Largest write carried inside one record; longer writes are logged as several itxs
/// so that every record fits one log block.
pub const WRITE_CHUNK_BYTES: u64 = 64 << 10;

/// How many recent issues size the next pre-allocated log block.
const RECENT_ISSUES: usize = 8;

/// Writes longer than this go to a block of their own and the record points at it
/// (`WR_INDIRECT`) when there is no SLOG or `logbias=throughput` (OpenZFS
/// `zfs_immediate_write_sz`, 32 KiB).
pub const IMMEDIATE_WRITE_MAX_BYTES: u64 = 32 << 10;

/// Fetches the current bytes of `[offset, offset + len)` of an object for a write
/// record (ZFS `zl_get_data`). `None` when the object no longer exists: its removal is
/// logged after the write, so the record can be left out.
pub type GetData<'a> = &'a dyn Fn(u64, u64, u64) -> Option<Vec<u8>>;

/// One logged change waiting to be committed.
#[derive(Debug, Clone)]
struct Itx {
    seq: u64,
    txg: u64,
    rtype: u16,
    /// Body for namespace/attribute records; empty for writes.
    body: Vec<u8>,
    /// (object, offset, length) for writes: the bytes are fetched at commit.
    write: Option<(u64, u64, u64)>,
    /// A write's bytes, fetched early because the object is about to be freed.
    data: Option<Vec<u8>>,
}

/// A log block of the current chain that has been issued.
#[derive(Debug, Clone)]
struct Lwb {
    ptr: LwbPtr,
    /// Records with seq < this were issued before this block.
    first_seq: u64,
    /// Highest txg of the changes recorded here.
    max_txg: u64,
    done: bool,
    /// Data blocks of indirect write records in this block, freed with it.
    indirect: Vec<BlkPtr>,
}

/// One record read back from a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    /// Record type (`tarn_phys::zil::TX_*`).
    pub rtype: u16,
    /// Sequence number.
    pub seq: u64,
    /// Txg the change was originally made in.
    pub txg: u64,
    /// Body bytes (for `TX_WRITE`, the decoded [`WriteRecord`] is in `write`).
    pub body: Vec<u8>,
    /// Write records: object, offset and the bytes (indirect data already read).
    pub write: Option<(u64, u64, Vec<u8>)>,
}

/// What [`Zilog::claim`] found at import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimInfo {
    /// Log blocks claimed (valid blocks of the chain).
    pub blocks: usize,
    /// Set when the chain could not be read to its end (its device is missing or
    /// failing): changes acknowledged after txg `since_txg` may be lost.
    pub unreadable: Option<String>,
    /// Last txg in the pool when the chain was claimed.
    pub since_txg: u64,
}

/// What [`Zilog::replay`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Log blocks read.
    pub blocks: u64,
    /// Records applied.
    pub applied: u64,
    /// Records skipped because they were already in the pool or already replayed.
    pub skipped: u64,
    /// Records whose handler returned an error (logged, replay continued).
    pub failed: u64,
}

/// Counters for tests and `zpool iostat`-style reporting.
#[derive(Debug, Default)]
pub struct ZilStats {
    /// Commits that wrote log blocks.
    pub commits: AtomicU64,
    /// Log blocks written.
    pub lwbs_written: AtomicU64,
    /// Commits that fell back to a txg sync.
    pub fallbacks: AtomicU64,
    /// Records written.
    pub records: AtomicU64,
    /// Write records that name a whole-record block of the file instead of a copy
    /// (adopted from the object set, [`Objset::adopt_records`]).
    pub adopted: AtomicU64,
}

#[derive(Default)]
struct ZilState {
    /// Logged, not yet issued (in seq order).
    pending: VecDeque<Itx>,
    /// Next itx sequence number.
    next_seq: u64,
    /// Every itx with seq ≤ this has been issued (or dropped as synced).
    issued_seq: u64,
    /// Every itx with seq ≤ this is durable (log or txg).
    committed_seq: u64,
    /// Issued blocks of the chain not yet freed, in chain order: every block logged
    /// since the last txg sync freed its prefix (thousands under a steady `fsync`
    /// load with 5 s txgs), so nothing on the commit path scans it from the front.
    lwbs: VecDeque<Lwb>,
    /// The first `done_prefix` blocks of `lwbs` are done (a lower bound: it only lags
    /// the truth), where [`Zilog::advance_committed`] resumes its search for the
    /// first block still in flight.
    done_prefix: usize,
    /// Where the next block goes (pre-allocated); none when there is no chain.
    tail: LwbPtr,
    /// Txg whose sync makes the current chain's header durable (0: already durable).
    chain_header_txg: u64,
    /// A log write failed: commits fall back to txg syncs until `sync` retires the chain.
    broken: bool,
    /// Blocks (and indirect data) of retired or replayed chains, freed by the next sync
    /// once no block of theirs is in flight.
    retired: Vec<Dva>,
    retired_bps: Vec<BlkPtr>,
    /// The header most recently handed to the object set.
    header: ZilHeader,
    /// A chain found at open that has not been replayed yet: no logging until it is.
    replay_pending: bool,
    /// Replay bookkeeping: txg → highest seq applied in it.
    replayed: BTreeMap<u64, u64>,
    /// Seq of the record being replayed (0 when not replaying).
    replaying_seq: u64,
    /// Bytes of the last [`RECENT_ISSUES`] issues (header and records), a ring: the
    /// next pre-allocated block is sized for the largest, so that the next group
    /// commit of that size fits one block (OpenZFS `zil_lwb_predict` keeps the
    /// recent commit sizes for the same reason).
    recent_issue_bytes: [u32; RECENT_ISSUES],
    /// Where the next issue's size goes in `recent_issue_bytes`.
    recent_at: usize,
    /// Blocks in flight (issued, not done).
    in_flight: usize,
    /// Vdevs a log write failed on: no more log blocks there until the next import.
    failed_vdevs: Vec<u32>,
}

/// A dataset's intent log (ZFS `zilog_t`).
pub struct Zilog {
    zio: Arc<Zio>,
    gate: Arc<TxgGate>,
    os: Arc<Objset>,
    issue: Mutex<()>,
    st: Mutex<ZilState>,
    cv: Condvar,
    /// `logbias=throughput`: large writes go to their own blocks, not the log.
    logbias_throughput: AtomicBool,
    /// Counters.
    pub stats: ZilStats,
}

/// What an issue does with one pending itx ([`Zilog::adopt_whole_records`]).
#[derive(Debug, Clone, Copy)]
enum Adoption {
    /// Logged as itself.
    None,
    /// Part of a whole record logged by a later itx's adopted record: left out.
    Covered,
    /// Logged as one write record of the whole record, naming the object set's block
    /// (of txg `txg`) that holds its current bytes.
    Record {
        obj: u64,
        offset_bytes: u64,
        length_bytes: u64,
        bp: BlkPtr,
        txg: u64,
    },
}

/// Whole records offered to [`Objset::adopt_records`] per call (4 MiB of 128 KiB
/// records): it allocates those without a block under a hold on the open txg (a
/// quiesce waits for that, not for the writes).
pub const ADOPT_BATCH_RECORDS: usize = 32;

/// Why a commit could not use the log.
enum Fallback {
    /// Expected (chain retired or awaiting replay): wait for a txg quietly.
    Quiet,
    /// A log allocation or write failed: retire the chain.
    Failed(ZilError),
}

fn zio_err(e: ZioError) -> ZilError {
    ZilError::Io(e.to_string())
}

fn round_lwb_size(bytes: usize) -> u32 {
    let b = (bytes as u64).clamp(LWB_MIN_SIZE_BYTES as u64, LWB_MAX_SIZE_BYTES as u64);
    b.div_ceil(LWB_MIN_SIZE_BYTES as u64) as u32 * LWB_MIN_SIZE_BYTES
}

fn random_guid() -> u64 {
    loop {
        let g: u64 = rand::random();
        if g != 0 {
            return g;
        }
    }
}

/// One valid block of a chain read back from disk.
struct ChainBlock {
    ptr: LwbPtr,
    records: Vec<ReplayRecord>,
    /// Data blocks of its indirect write records.
    indirect: Vec<BlkPtr>,
}

/// A block being filled during one issue.
struct Building {
    ptr: LwbPtr,
    buf: Vec<u8>,
    used: usize,
    nrecords: u32,
    first_seq: u64,
    last_seq: u64,
    max_txg: u64,
    indirect: Vec<BlkPtr>,
    /// The successor promised in the sealed header.
    next: LwbPtr,
}

impl Zilog {
    /// The log of object set `os`, starting from the header stored in its root. A
    /// non-empty header means a chain awaits replay: call [`Zilog::claim`] at import
    /// and [`Zilog::replay`] before logging anything.
    pub fn open(zio: Arc<Zio>, gate: Arc<TxgGate>, os: Arc<Objset>) -> Arc<Zilog> {
        let header = os.zil_header();
        Arc::new(Zilog {
            zio,
            gate,
            os,
            issue: Mutex::new(()),
            st: Mutex::new(ZilState {
                next_seq: 1,
                header,
                replay_pending: !header.is_empty(),
                recent_issue_bytes: [LWB_MIN_SIZE_BYTES * 4; RECENT_ISSUES],
                ..ZilState::default()
            }),
            cv: Condvar::new(),
            logbias_throughput: AtomicBool::new(false),
            stats: ZilStats::default(),
        })
    }

    /// Set `logbias` (`true` = throughput).
    pub fn set_logbias_throughput(&self, throughput: bool) {
        self.logbias_throughput.store(throughput, Ordering::Relaxed);
    }

    /// True while a chain found at open still waits for [`Zilog::replay`].
    pub fn replay_pending(&self) -> bool {
        self.st.lock().replay_pending
    }

    /// Log a namespace or attribute change made in `txg` (call while still holding the
    /// tx, so the itx is queued before that txg can sync).
    pub fn log(&self, txg: u64, rtype: u16, body: Vec<u8>) {
        debug_assert_ne!(rtype, TX_WRITE, "use log_write");
        let mut st = self.st.lock();
        if st.replay_pending {
            return; // replayed changes are made durable by replay's own txg wait
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.pending.push_back(Itx {
            seq,
            txg,
            rtype,
            body,
            write: None,
            data: None,
        });
    }

    /// Log a write of `len_bytes` at `offset_bytes` of object `obj` made in `txg`. The
    /// bytes are fetched when the record is committed.
    pub fn log_write(&self, txg: u64, obj: u64, offset_bytes: u64, len_bytes: u64) {
        let mut st = self.st.lock();
        if st.replay_pending {
            return;
        }
        let mut off = offset_bytes;
        let end = offset_bytes + len_bytes;
        while off < end {
            let n = (end - off).min(WRITE_CHUNK_BYTES);
            let seq = st.next_seq;
            st.next_seq += 1;
            st.pending.push_back(Itx {
                seq,
                txg,
                rtype: TX_WRITE,
                body: Vec::new(),
                write: Some((obj, off, n)),
                data: None,
            });
            off += n;
        }
    }

    /// Object `obj` is about to be freed (its last link goes): fetch the bytes of its
    /// pending write records now, while they can still be read, so those records keep
    /// their place in the log (a record left out would let a crash replay later
    /// changes without it). Waits for an issue in progress, which may hold some of
    /// them. Call with the change that frees the object not yet made.
    pub fn materialize_writes(&self, obj: u64, get_data: GetData<'_>) {
        let _issue = self.issue.lock();
        let mut st = self.st.lock();
        for itx in st.pending.iter_mut() {
            if let (Some((o, off, len)), None) = (itx.write, &itx.data) {
                if o == obj {
                    itx.data = get_data(o, off, len);
                }
            }
        }
    }

    /// Make every change logged so far durable: write it to the log (or, if the log
    /// cannot be written, wait for a txg sync). Concurrent callers share block writes
    /// (group commit): while one batch of blocks is in flight, later commits wait for
    /// it and the first of them issues everything logged meanwhile as the next batch.
    pub fn commit(&self, get_data: GetData<'_>) -> Result<()> {
        let target = {
            let st = self.st.lock();
            st.next_seq - 1
        };
        loop {
            {
                let mut st = self.st.lock();
                loop {
                    if st.committed_seq >= target {
                        return Ok(());
                    }
                    if st.broken {
                        // A block before ours failed: ours may sit behind a hole in
                        // the chain. Only a txg sync makes them durable now.
                        drop(st);
                        return self.fallback(false);
                    }
                    if st.issued_seq < target {
                        if st.in_flight == 0 {
                            break;
                        }
                        // Group commit: while blocks are being written, records pile
                        // up; the first committer woken when they are done issues all
                        // of them in one block (OpenZFS batches the same way in its
                        // open lwb). Issuing at once instead would cost a block and a
                        // flush per fsync. The timeout only guards against a missed
                        // wake-up.
                        self.cv.wait_for(&mut st, std::time::Duration::from_millis(20));
                        continue;
                    }
                    // Our records are in blocks someone else is writing.
                    self.cv.wait(&mut st);
                }
            }
            // Become the issuer for everything pending (or wait for the current one).
            let Some(issue) = self.issue.try_lock() else {
                let _wait = self.issue.lock();
                continue;
            };
            let issued = self.issue_pending(get_data);
            drop(issue);
            match issued {
                Ok(Some(batch)) => self.write_batch(batch)?,
                Ok(None) => {}
                Err(Fallback::Quiet) => self.fallback(false)?,
                Err(Fallback::Failed(e)) => {
                    tracing::warn!("intent log: {e}; falling back to a txg sync");
                    self.fallback(true)?;
                }
            }
        }
    }

    /// Make everything logged so far durable with a txg sync; with `retire`, the
    /// chain is also retired (a log write failed, so it has a hole).
    fn fallback(&self, retire: bool) -> Result<()> {
        self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        // Every itx logged so far carries a txg no newer than the open one.
        let (txg, upto) = {
            let mut st = self.st.lock();
            st.broken |= retire && !st.replay_pending;
            (self.gate.open_txg(), st.next_seq - 1)
        };
        self.gate.wait_synced(txg).map_err(|e| ZilError::Io(e.to_string()))?;
        let mut st = self.st.lock();
        // Every change logged before the wait is in the pool now (later ones are not).
        st.pending.retain(|i| i.seq > upto);
        st.issued_seq = st.issued_seq.max(upto);
        st.committed_seq = st.committed_seq.max(upto);
        self.cv.notify_all();
        Ok(())
    }

    /// Under `issue`: turn pending itxs into sealed blocks at their allocated places.
    /// Returns None when nothing needed writing.
    fn issue_pending(&self, get_data: GetData<'_>) -> std::result::Result<Option<Vec<Building>>, Fallback> {
        let (itxs, upto) = {
            let mut st = self.st.lock();
            if st.broken || st.replay_pending {
                // A retired chain waits for the next sync; an unreplayed one must
                // not be extended. Either way a txg sync does the job.
                return Err(Fallback::Quiet);
            }
            let upto = st.next_seq - 1;
            let itxs: Vec<Itx> = st.pending.drain(..).collect();
            if itxs.is_empty() {
                st.issued_seq = st.issued_seq.max(upto);
                Self::advance_committed(&mut st);
                self.cv.notify_all();
                return Ok(None);
            }
            (itxs, upto)
        };
        // Encode records outside `st` (fetching write data may read from disk).
        let slog = self.zio.has_slog();
        let indirect_ok = !slog || self.logbias_throughput.load(Ordering::Relaxed);
        let mut records: Vec<(Vec<u8>, u64, u64, Option<BlkPtr>)> = Vec::with_capacity(itxs.len());
        // Every indirect data block written for this issue (freed again on failure).
        let mut written: Vec<BlkPtr> = Vec::new();
        let adoption = if indirect_ok {
            self.adopt_whole_records(&itxs)
        } else {
            vec![Adoption::None; itxs.len()]
        };
        for (itx, adoption) in itxs.iter().zip(adoption) {
            let mut txg = itx.txg;
            let (rtype, body, ind) = match (adoption, itx.write) {
                (Adoption::Covered, _) => continue,
                (
                    Adoption::Record {
                        obj,
                        offset_bytes,
                        length_bytes,
                        bp,
                        txg: block_txg,
                    },
                    _,
                ) => {
                    // The record's bytes are those of the whole-record block the txg
                    // sync installs; the log does not own it (`indirect` stays empty).
                    txg = txg.max(block_txg);
                    self.stats.adopted.fetch_add(1, Ordering::Relaxed);
                    let w = WriteRecord {
                        obj,
                        offset_bytes,
                        length_bytes,
                        data: WriteData::Indirect(bp),
                    };
                    (TX_WRITE, w.encode(), None)
                }
                (Adoption::None, None) => (itx.rtype, itx.body.clone(), None),
                (Adoption::None, Some((obj, off, len))) => {
                    // Objects are only freed after `materialize_writes`, so the bytes
                    // are either here already or still readable.
                    let Some(data) = itx.data.clone().or_else(|| get_data(obj, off, len)) else {
                        tracing::error!("intent log: data of write record {} (object {obj}) unavailable", itx.seq);
                        return Err(Fallback::Failed(ZilError::Io(format!("object {obj} vanished before its write was logged"))));
                    };
                    // Indirect data lands on the normal class: only while that keeps
                    // the space promised to the next sync.
                    if indirect_ok && len > IMMEDIATE_WRITE_MAX_BYTES && self.zio.free_bytes() >= self.normal_reserve_bytes() + 2 * len {
                        let bp = self
                            .zio
                            .write_block(
                                &data,
                                WriteProps {
                                    otype: ObjectType::IntentLog,
                                    level: 0,
                                    compression: tarn_phys::CompressSetting::OFF,
                                    checksum: tarn_phys::ChecksumAlg::Blake3,
                                    copies: 1,
                                    txg: itx.txg,
                                    fill: 1,
                                    nop_prev: None,
                                    dedup: tarn_zio::Dedup::Off,
                                },
                            )
                            .map_err(|e| {
                                for bp in &written {
                                    self.zio.free_now(bp);
                                }
                                Fallback::Failed(zio_err(e))
                            })?;
                        written.push(bp);
                        let w = WriteRecord {
                            obj,
                            offset_bytes: off,
                            length_bytes: len,
                            data: WriteData::Indirect(bp),
                        };
                        (TX_WRITE, w.encode(), Some(bp))
                    } else {
                        let w = WriteRecord {
                            obj,
                            offset_bytes: off,
                            length_bytes: len,
                            data: WriteData::Copied(data),
                        };
                        (TX_WRITE, w.encode(), None)
                    }
                }
            };
            let rlen = (RECORD_HEADER_SIZE_BYTES + body.len()).next_multiple_of(8);
            let mut rec = vec![0u8; rlen];
            RecordHeader {
                rtype,
                rlen_bytes: rlen as u32,
                seq: itx.seq,
                txg,
            }
            .encode(&mut rec);
            rec[RECORD_HEADER_SIZE_BYTES..RECORD_HEADER_SIZE_BYTES + body.len()].copy_from_slice(&body);
            records.push((rec, itx.seq, txg, ind));
        }
        let total: usize = records.iter().map(|r| r.0.len()).sum();
        // A new chain needs its header in the pool before anything in it counts.
        let need_chain = self.st.lock().tail.is_none();
        if need_chain {
            let size = round_lwb_size(LWB_HEADER_SIZE_BYTES + total);
            let dva = match self.alloc_block(size) {
                Ok(d) => d,
                Err(e) => {
                    for bp in &written {
                        self.zio.free_now(bp);
                    }
                    return Err(Fallback::Failed(e));
                }
            };
            let mut st = self.st.lock();
            st.tail = LwbPtr {
                vdev: dva.vdev,
                size_bytes: size,
                offset_bytes: dva.offset_bytes,
                asize_bytes: dva.asize_bytes,
                seq: 1,
            };
            st.chain_header_txg = self.gate.open_txg();
            let h = ZilHeader {
                claim_txg: 0,
                replay_seq: 0,
                chain_guid: random_guid(),
                head: st.tail,
            };
            st.header = h;
            self.os.set_zil_header(h);
        }
        // Pack records into blocks, allocating each block's successor as we go.
        let mut blocks: Vec<Building> = Vec::new();
        // The chain's identity is the one in the header handed to the object set.
        let (guid, tail, mut first_seq) = {
            let st = self.st.lock();
            (st.header.chain_guid, st.tail, st.issued_seq + 1)
        };
        let mut cur = Building::new(tail, first_seq);
        let mut remaining = total;
        let mut result: std::result::Result<(), ZilError> = Ok(());
        for (rec, seq, txg, ind) in records {
            if cur.used + rec.len() > cur.buf.len() {
                // Close this block; the next one is sized for what is left.
                let next = match self.alloc_next(LWB_HEADER_SIZE_BYTES + remaining) {
                    Ok(n) => n,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                cur.seal(guid, next);
                first_seq = cur.last_seq + 1;
                let next = cur.next;
                blocks.push(std::mem::replace(&mut cur, Building::new(next, first_seq)));
            }
            remaining -= rec.len();
            cur.buf[cur.used..cur.used + rec.len()].copy_from_slice(&rec);
            cur.used += rec.len();
            cur.nrecords += 1;
            cur.last_seq = seq;
            cur.max_txg = cur.max_txg.max(txg);
            cur.indirect.extend(ind);
        }
        if result.is_ok() {
            // The successor of the last block: sized for the largest recent issue,
            // this one included. Only its used part is written (`log_write_len`), so
            // room that a smaller commit leaves empty costs no device time on a leaf
            // or mirror.
            let hint = {
                let mut st = self.st.lock();
                let at = st.recent_at;
                st.recent_issue_bytes[at] = (LWB_HEADER_SIZE_BYTES + total).min(LWB_MAX_SIZE_BYTES as usize) as u32;
                st.recent_at = (at + 1) % RECENT_ISSUES;
                st.recent_issue_bytes.iter().copied().max().expect("RECENT_ISSUES > 0") as usize
            };
            match self.alloc_next(hint.max(cur.used)) {
                Ok(next) => {
                    cur.seal(guid, next);
                    cur.last_seq = upto;
                    blocks.push(cur);
                }
                Err(e) => result = Err(e),
            }
        }
        let mut st = self.st.lock();
        if let Err(e) = result {
            // Nothing of this issue reaches the chain: give the allocations back.
            for b in &blocks {
                self.zio.free_dva_now(&b.next.dva());
            }
            for bp in &written {
                self.zio.free_now(bp);
            }
            drop(st);
            return Err(Fallback::Failed(e));
        }
        let last = blocks.last().expect("at least one block");
        st.tail = last.next;
        for b in &blocks {
            st.lwbs.push_back(Lwb {
                ptr: b.ptr,
                first_seq: b.first_seq,
                max_txg: b.max_txg,
                done: false,
                indirect: b.indirect.clone(),
            });
            st.in_flight += 1;
        }
        st.issued_seq = st.issued_seq.max(upto);
        Ok(Some(blocks))
    }

    /// The pending write itxs that together cover whole records of a file, each
    /// record given a block already on disk by the object set
    /// ([`Objset::adopt_records`], OpenZFS's `dmu_sync`): the issue then logs one
    /// record naming that block in place of the itxs, and the bytes are written once,
    /// not once for the log and again at the txg sync. Only runs of consecutive write
    /// itxs of one object, contiguous and starting on a record boundary, qualify (a
    /// streaming writer's chunks): the adopted record takes the place and the seq of
    /// the run's last itx, so seqs stay increasing and no other change is reordered
    /// across it. Returns one entry per itx.
    fn adopt_whole_records(&self, itxs: &[Itx]) -> Vec<Adoption> {
        let mut out = vec![Adoption::None; itxs.len()];
        let mut record_bytes: std::collections::HashMap<u64, Option<u64>> = std::collections::HashMap::new();
        // (first itx, last itx, object, block id, record bytes)
        let mut runs: Vec<(usize, usize, u64, u64, u64)> = Vec::new();
        let write_of = |i: usize| itxs.get(i).filter(|x| x.data.is_none()).and_then(|x| x.write);
        let mut i = 0;
        while i < itxs.len() {
            let Some((obj, off, _)) = write_of(i) else {
                i += 1;
                continue;
            };
            let rs = *record_bytes.entry(obj).or_insert_with(|| self.os.adoptable_record_bytes(obj));
            let Some(rs) = rs.filter(|&rs| rs > IMMEDIATE_WRITE_MAX_BYTES && off % rs == 0) else {
                i += 1;
                continue;
            };
            let (mut end, mut j) = (off, i);
            while let Some((o, at, len)) = write_of(j) {
                if o != obj || at != end || end + len > off + rs {
                    break;
                }
                end += len;
                j += 1;
                if end == off + rs {
                    break;
                }
            }
            if end == off + rs {
                runs.push((i, j - 1, obj, off / rs, rs));
                i = j;
            } else {
                i += 1;
            }
        }
        // A bounded batch per call: the object set holds the open txg while it
        // allocates the records that have no block yet.
        for chunk in runs.chunks(ADOPT_BATCH_RECORDS) {
            let want: Vec<(u64, u64)> = chunk.iter().map(|&(_, _, obj, blkid, _)| (obj, blkid)).collect();
            for (&(first, last, obj, blkid, rs), got) in chunk.iter().zip(self.os.adopt_records(&want)) {
                let Some((bp, txg)) = got else { continue };
                for slot in &mut out[first..last] {
                    *slot = Adoption::Covered;
                }
                out[last] = Adoption::Record {
                    obj,
                    offset_bytes: blkid * rs,
                    length_bytes: rs,
                    bp,
                    txg,
                };
            }
        }
        out
    }

    /// Normal-class space a log block must leave free: the dirty data waiting for the
    /// next sync (as allocated) plus the pool's slop (1/32, at least 4 MiB).
    fn normal_reserve_bytes(&self) -> u64 {
        let slop = (self.zio.size_bytes() >> 5).max(4 << 20);
        (self.gate.dirty_bytes() as f64 * self.zio.inflation()) as u64 + slop
    }

    fn alloc_block(&self, size_bytes: u32) -> std::result::Result<Dva, ZilError> {
        let avoid = self.st.lock().failed_vdevs.clone();
        self.zio
            .alloc_log_block(size_bytes as u64, self.normal_reserve_bytes(), &avoid)
            .map_err(zio_err)
    }

    /// `zpool remove` of log vdev `vdev` (allocation there has stopped): if the chain
    /// has a block on it, retire the chain so the next syncs free them all. Returns
    /// whether there was anything to retire.
    pub fn evacuate(&self, vdev: u32) -> bool {
        let mut st = self.st.lock();
        let on = st.lwbs.iter().any(|l| l.ptr.vdev == vdev) || (!st.tail.is_none() && st.tail.vdev == vdev);
        if on && !st.replay_pending {
            st.broken = true;
        }
        on
    }

    /// Allocate a successor block able to hold `block_bytes` (header included).
    fn alloc_next(&self, block_bytes: usize) -> std::result::Result<LwbPtr, ZilError> {
        let size = round_lwb_size(block_bytes);
        let dva = self.alloc_block(size)?;
        Ok(LwbPtr {
            vdev: dva.vdev,
            size_bytes: size,
            offset_bytes: dva.offset_bytes,
            asize_bytes: dva.asize_bytes,
            seq: 0, // set by seal
        })
    }

    /// Write and flush one issue's blocks, then publish what became durable.
    fn write_batch(&self, blocks: Vec<Building>) -> Result<()> {
        let mut vdevs: Vec<u32> = blocks.iter().map(|b| b.ptr.vdev).collect();
        for b in &blocks {
            vdevs.extend(b.indirect.iter().flat_map(|bp| bp.dvas().map(|d| d.vdev)));
        }
        vdevs.sort_unstable();
        vdevs.dedup();
        let ok = match blocks.as_slice() {
            // The usual commit: one block and nothing else to flush. Each mirror side
            // writes and flushes on its own, one fan-out instead of two.
            [b] if b.indirect.is_empty() => self.zio.write_raw_flushed(&b.ptr.dva(), b.written_part(&self.zio)),
            _ => {
                let write = |b: &Building| self.zio.write_raw(&b.ptr.dva(), b.written_part(&self.zio));
                let wrote: std::result::Result<(), ZioError> = tarn_zio::each_parallel(&blocks, write).into_iter().collect();
                wrote.and_then(|()| self.zio.flush_vdevs(&vdevs))
            }
        };
        self.stats.lwbs_written.fetch_add(blocks.len() as u64, Ordering::Relaxed);
        self.stats.records.fetch_add(blocks.iter().map(|b| b.nrecords as u64).sum(), Ordering::Relaxed);
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let chain_header_txg = {
            let mut st = self.st.lock();
            for b in &blocks {
                if ok.is_ok() {
                    // The blocks of this issue were pushed last: search from the back.
                    if let Some(l) = st
                        .lwbs
                        .iter_mut()
                        .rev()
                        .find(|l| l.ptr.seq == b.ptr.seq && l.ptr.offset_bytes == b.ptr.offset_bytes)
                    {
                        l.done = true;
                    }
                }
                st.in_flight -= 1;
            }
            if ok.is_err() {
                st.broken = true;
                // Which of them failed is not known here: avoid all that were written.
                for v in &vdevs {
                    if !st.failed_vdevs.contains(v) {
                        st.failed_vdevs.push(*v);
                    }
                }
            }
            st.chain_header_txg
        };
        if let Err(e) = ok {
            tracing::warn!("intent log write failed: {e}; falling back to a txg sync");
            return self.fallback(true);
        }
        // A young chain counts only once its header is in the pool.
        if chain_header_txg != 0 && self.gate.synced_txg() < chain_header_txg {
            self.gate.wait_synced(chain_header_txg).map_err(|e| ZilError::Io(e.to_string()))?;
        }
        let mut st = self.st.lock();
        if st.chain_header_txg != 0 && self.gate.synced_txg() >= st.chain_header_txg {
            st.chain_header_txg = 0;
        }
        Self::advance_committed(&mut st);
        self.cv.notify_all();
        Ok(())
    }

    /// committed = everything before the first block still in flight (or everything
    /// issued when none is), provided the chain's header is durable.
    fn advance_committed(st: &mut ZilState) {
        if st.chain_header_txg != 0 {
            return;
        }
        while st.lwbs.get(st.done_prefix).is_some_and(|l| l.done) {
            st.done_prefix += 1;
        }
        let c = match st.lwbs.get(st.done_prefix) {
            Some(l) => l.first_seq - 1,
            None => st.issued_seq,
        };
        st.committed_seq = st.committed_seq.max(c);
    }

    /// Txg sync hook, called by spa after quiescing `txg` and before the object set's
    /// root is written: drop itxs that `txg` makes durable, free blocks holding only
    /// such changes (deferred), record replay progress, and hand the object set the
    /// header to write.
    pub fn sync(&self, txg: u64) {
        let mut st = self.st.lock();
        let mut h = st.header;
        // Replay progress.
        let done: Vec<u64> = st.replayed.range(..=txg).map(|(&t, _)| t).collect();
        for t in done {
            let s = st.replayed.remove(&t).unwrap();
            h.replay_seq = h.replay_seq.max(s);
        }
        // Retire a broken chain once nothing is being issued or written into it and
        // every change it recorded is in this txg or an earlier one.
        let issuing = self.issue.try_lock().is_none();
        if st.broken && st.in_flight == 0 && !st.replay_pending && !issuing && st.lwbs.iter().all(|l| l.max_txg <= txg) {
            let lwbs: Vec<Lwb> = st.lwbs.drain(..).collect();
            st.done_prefix = 0;
            for l in lwbs {
                st.retired.push(l.ptr.dva());
                st.retired_bps.extend(l.indirect);
            }
            if !st.tail.is_none() {
                let t = st.tail.dva();
                st.retired.push(t);
            }
            st.tail = LwbPtr::default();
            st.chain_header_txg = 0;
            st.broken = false;
            h = ZilHeader::default();
        } else if !st.replay_pending && !st.tail.is_none() {
            // Free the prefix of blocks whose changes are all in txgs ≤ txg.
            let mut freed = Vec::new();
            while st.lwbs.front().is_some_and(|l| l.done && l.max_txg <= txg) {
                let l = st.lwbs.pop_front().unwrap();
                st.done_prefix = st.done_prefix.saturating_sub(1);
                freed.push(l.ptr.dva());
                for bp in &l.indirect {
                    self.zio.free_block(bp, txg);
                }
            }
            self.zio.free_log_dvas(&mut freed, txg);
            h.head = st.lwbs.front().map(|l| l.ptr).unwrap_or(st.tail);
        }
        if st.in_flight == 0 && !st.replay_pending && st.tail.is_none() {
            let mut retired = std::mem::take(&mut st.retired);
            self.zio.free_log_dvas(&mut retired, txg);
            for bp in std::mem::take(&mut st.retired_bps) {
                self.zio.free_block(&bp, txg);
            }
        }
        if h != st.header {
            st.header = h;
            self.os.set_zil_header(h);
        }
    }

    /// Called by spa after `txg` is in the pool: itxs of txgs ≤ `txg` no longer need
    /// the log (a committer waiting only on those issues nothing and returns), and a
    /// young chain whose header was in `txg` starts counting.
    pub fn synced(&self, txg: u64) {
        let mut st = self.st.lock();
        st.pending.retain(|i| i.txg > txg);
        if st.chain_header_txg != 0 && txg >= st.chain_header_txg {
            st.chain_header_txg = 0;
            Self::advance_committed(&mut st);
        }
        self.cv.notify_all();
    }

    /// Read the chain named by the header: every valid block in order with its records,
    /// and the pointer at which the chain ends (the first block that failed to verify).
    /// The indirect data of write records older than `floor_txg` (in the pool already,
    /// never replayed) is not read: an adopted block of such a record may have been
    /// freed by its txg's sync and its space reused.
    fn read_chain(&self, h: &ZilHeader, floor_txg: u64) -> (Vec<ChainBlock>, LwbPtr, Option<String>) {
        let mut out = Vec::new();
        let mut unreadable = None;
        let mut ptr = h.head;
        loop {
            if ptr.is_none() {
                break;
            }
            let guid = h.chain_guid;
            let seq = ptr.seq;
            let verify = |b: &[u8]| LwbHeader::open(b, guid, seq).is_ok();
            let block = match self.zio.read_raw(&ptr.dva(), ptr.size_bytes as u64, &verify) {
                Ok(b) => b,
                // No copy carries the promised block: the chain ends here (normal).
                Err(ZioError::Checksum { .. }) => break,
                // The block cannot be read at all (its device is missing): records
                // from here on are lost, which the caller reports.
                Err(e) => {
                    unreadable = Some(e.to_string());
                    break;
                }
            };
            let Ok(lh) = LwbHeader::open(&block, guid, seq) else { break };
            let mut recs = Vec::new();
            let mut bps = Vec::new();
            let mut off = LWB_HEADER_SIZE_BYTES;
            let used = lh.used_bytes as usize;
            let mut intact = true;
            while off < used {
                let Ok(rh) = RecordHeader::decode(&block[off..used]) else {
                    intact = false;
                    break;
                };
                let body = block[off + RECORD_HEADER_SIZE_BYTES..off + rh.rlen_bytes as usize].to_vec();
                let mut write = None;
                if rh.rtype == TX_WRITE {
                    match WriteRecord::decode(&body) {
                        Ok(w) => {
                            let data = match w.data {
                                WriteData::Copied(d) => Some(d),
                                WriteData::Indirect(bp) if rh.txg < floor_txg => {
                                    bps.push(bp);
                                    Some(Vec::new())
                                }
                                WriteData::Indirect(bp) => {
                                    bps.push(bp);
                                    self.zio.read_block(&bp).ok().and_then(|d| d.get(..w.length_bytes as usize).map(<[u8]>::to_vec))
                                }
                            };
                            match data {
                                Some(d) => write = Some((w.obj, w.offset_bytes, d)),
                                None => {
                                    // The data block of an acknowledged write is gone:
                                    // stop here rather than replay past a hole.
                                    tracing::error!("intent log: indirect write data of record {} unreadable; replay stops", rh.seq);
                                    intact = false;
                                    break;
                                }
                            }
                        }
                        Err(_) => {
                            intact = false;
                            break;
                        }
                    }
                }
                recs.push(ReplayRecord {
                    rtype: rh.rtype,
                    seq: rh.seq,
                    txg: rh.txg,
                    body,
                    write,
                });
                off += rh.rlen_bytes as usize;
            }
            out.push(ChainBlock {
                ptr,
                records: recs,
                indirect: bps,
            });
            if !intact {
                return (out, LwbPtr::default(), unreadable);
            }
            ptr = lh.next;
        }
        (out, ptr, unreadable)
    }

    /// The first txg whose records a replay of the chain under `h` applies: the one
    /// its first claim fixed, else the one after the last synced txg `synced_txg`.
    fn claim_floor(h: &ZilHeader, synced_txg: u64) -> u64 {
        if h.claim_txg != 0 {
            h.claim_txg
        } else {
            synced_txg + 1
        }
    }

    /// Import: take ownership of the blocks of a chain awaiting replay, so the
    /// allocator cannot hand them out (they may postdate the last space map), and fix
    /// `claim_txg` = first txg of this import.
    pub fn claim(&self) -> ClaimInfo {
        let h = self.st.lock().header;
        if h.is_empty() {
            return ClaimInfo::default();
        }
        let floor_txg = Self::claim_floor(&h, self.gate.synced_txg());
        let (blocks, end, unreadable) = self.read_chain(&h, floor_txg);
        let mut st = self.st.lock();
        let mut n = 0;
        for b in &blocks {
            self.zio.claim_dva(&b.ptr.dva());
            st.retired.push(b.ptr.dva());
            for bp in &b.indirect {
                // An adopted block (a file's record, not a log data block: module docs
                // of `tarn_dmu::objset::early`) born in a txg that reached the pool is
                // the tree's, or was freed by that txg's sync: never the log's.
                if bp.otype != ObjectType::IntentLog && bp.birth_txg < floor_txg {
                    continue;
                }
                for d in bp.dvas() {
                    self.zio.claim_dva(d);
                }
                st.retired_bps.push(*bp);
            }
            n += 1;
        }
        // The block the chain ends at was allocated by the writer before the block
        // naming it was written: it is the chain's, so take it too and free it with the
        // rest. Free in this space map when its allocation never synced (claim it);
        // allocated already when it did, as the tail of a quiet chain always is (the
        // header names it once syncs have freed every block before it). Partly
        // allocated, it cannot be the chain's block: left alone.
        if !end.is_none() && (self.zio.claim_dva(&end.dva()) || self.zio.dva_allocated(&end.dva())) {
            st.retired.push(end.dva());
        }
        if h.claim_txg == 0 {
            let mut nh = h;
            nh.claim_txg = self.gate.synced_txg() + 1;
            st.header = nh;
            self.os.set_zil_header(nh);
        }
        ClaimInfo {
            blocks: n,
            unreadable,
            since_txg: h.claim_txg.max(self.gate.synced_txg()),
        }
    }

    /// Replay the chain found at open: call `apply` for every record not yet in the
    /// pool, in log order. `apply` must call [`Zilog::replaying_in`] with the txg of
    /// the hold it applies the record under, while holding it. Afterwards the chain is
    /// discarded and that is synced, so a later crash replays nothing twice.
    pub fn replay(&self, apply: &mut dyn FnMut(&ReplayRecord) -> std::result::Result<(), String>) -> Result<ReplayStats> {
        let h = {
            let st = self.st.lock();
            if !st.replay_pending {
                return Ok(ReplayStats::default());
            }
            st.header
        };
        let claim_txg = Self::claim_floor(&h, self.gate.synced_txg());
        let (blocks, _, _) = self.read_chain(&h, claim_txg);
        let mut stats = ReplayStats::default();
        for b in &blocks {
            stats.blocks += 1;
            for r in &b.records {
                if r.txg < claim_txg || r.seq <= h.replay_seq {
                    stats.skipped += 1;
                    continue;
                }
                self.st.lock().replaying_seq = r.seq;
                match apply(r) {
                    Ok(()) => stats.applied += 1,
                    Err(e) => {
                        tracing::warn!("intent log replay: record {} (type {}) failed: {e}", r.seq, r.rtype);
                        stats.failed += 1;
                    }
                }
            }
        }
        // Discard the chain in the txg after the last replayed change and wait for it.
        {
            let mut st = self.st.lock();
            st.replaying_seq = 0;
            st.replay_pending = false;
            st.broken = true; // retire: sync frees the claimed blocks and clears the header
        }
        let txg = self.gate.open_txg();
        self.gate.wait_synced(txg).map_err(|e| ZilError::Io(e.to_string()))?;
        Ok(stats)
    }

    /// Replay handlers call this under the hold they apply a record with: the record
    /// counts as replayed exactly when txg `txg` is in the pool.
    pub fn replaying_in(&self, txg: u64) {
        let mut st = self.st.lock();
        let seq = st.replaying_seq;
        if seq != 0 {
            let e = st.replayed.entry(txg).or_insert(0);
            *e = (*e).max(seq);
        }
    }

    /// Export/unmount: nothing needs the chain once the final txg syncs; retire it so
    /// the pool is left with an empty log. A chain still awaiting replay is kept.
    pub fn close(&self) {
        let mut st = self.st.lock();
        if !st.replay_pending && !st.tail.is_none() {
            st.broken = true;
        }
    }

    /// The header most recently handed to the object set.
    pub fn header(&self) -> ZilHeader {
        self.st.lock().header
    }

    /// Every block this log holds allocated now, for the pool's leak check: the
    /// chain's issued blocks and its pre-allocated tail, blocks of retired or claimed
    /// chains that a sync has yet to free (as DVAs), and the data blocks of indirect
    /// write records (as block pointers).
    /// Waits for an issue in progress (whose allocations are not in the chain yet).
    pub fn owned_blocks(&self) -> (Vec<Dva>, Vec<BlkPtr>) {
        let _issue = self.issue.lock();
        let st = self.st.lock();
        let mut dvas: Vec<Dva> = st.lwbs.iter().map(|l| l.ptr.dva()).collect();
        if !st.tail.is_none() {
            dvas.push(st.tail.dva());
        }
        dvas.extend(st.retired.iter().copied());
        let mut bps: Vec<BlkPtr> = st.lwbs.iter().flat_map(|l| l.indirect.iter().copied()).collect();
        bps.extend(st.retired_bps.iter().copied());
        (dvas, bps)
    }

    /// The object set this log belongs to.
    pub fn objset(&self) -> &Arc<Objset> {
        &self.os
    }

    /// The dataset is being destroyed in txg `txg`: free every block of the chain with
    /// it (deferred) and forget everything. Nothing may be in flight (it is unmounted).
    pub fn destroy(&self, txg: u64) {
        let mut st = self.st.lock();
        let mut freed = std::mem::take(&mut st.retired);
        st.done_prefix = 0;
        for l in st.lwbs.drain(..) {
            freed.push(l.ptr.dva());
            for bp in &l.indirect {
                self.zio.free_block(bp, txg);
            }
        }
        if !st.tail.is_none() {
            freed.push(st.tail.dva());
        }
        self.zio.free_log_dvas(&mut freed, txg);
        for bp in std::mem::take(&mut st.retired_bps) {
            self.zio.free_block(&bp, txg);
        }
        st.tail = LwbPtr::default();
        st.pending.clear();
        st.replay_pending = false;
    }
}

impl Building {
    fn new(ptr: LwbPtr, first_seq: u64) -> Building {
        Building {
            ptr,
            buf: vec![0u8; ptr.size_bytes as usize],
            used: LWB_HEADER_SIZE_BYTES,
            nrecords: 0,
            first_seq,
            last_seq: first_seq.saturating_sub(1),
            max_txg: 0,
            indirect: Vec::new(),
            next: LwbPtr::default(),
        }
    }

    /// The bytes a write of this sealed block must cover: the used part rounded to
    /// sectors where the vdev allows it ([`Zio::log_write_len`]), else all of it.
    /// The checksum covers only the used part, so what the block's tail held before
    /// is never read as records.
    fn written_part(&self, zio: &Zio) -> &[u8] {
        &self.buf[..zio.log_write_len(&self.ptr.dva(), self.used, self.buf.len())]
    }

    fn seal(&mut self, guid: u64, mut next: LwbPtr) {
        next.seq = self.ptr.seq + 1;
        self.next = next;
        LwbHeader {
            chain_guid: guid,
            seq: self.ptr.seq,
            used_bytes: self.used as u32,
            nrecords: self.nrecords,
            next,
        }
        .seal(&mut self.buf);
    }
}
