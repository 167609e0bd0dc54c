//! # memory — the daemon's resident memory and its bound
//!
//! Theory: the daemon promises (issue 14) that its resident set stays under
//!
//! ```text
//!   arc_max + Σ dirty-data limits of the open pools + hdr_size + l2_hdr_size
//!           + FIXED_OVERHEAD_BYTES + MOUNT_OVERHEAD_BYTES per mounted file system
//! ```
//!
//! where `arc_max` bounds the ARC's buffers and its decompressed copies together
//! (`size + overhead_size ≤ c ≤ c_max`), a pool's dirty-data limit is a quarter of
//! `TARN_CACHE_MAX` (the write throttle counts the open and the syncing txg together
//! against it), `hdr_size` and `l2_hdr_size` are the ARC's and the L2ARC's header
//! bytes as `tarn kstat arcstats` reports them (they grow with the number of blocks
//! cached, as OpenZFS's do; OpenZFS counts them inside `arc_size`), and the two
//! constants cover the rest: code and thread stacks, in-flight I/O buffers, metadata
//! held outside the ARC (space maps, in-core dnodes), the allocator's free memory up
//! to the reaper's slack, and, per mount, the FUSE workers' request buffers
//! ([`MOUNT_OVERHEAD_BYTES`]). `bench/rss.sh` and the test `tests/rss_bound.rs`
//! measure it (`bench/README.md`).
//!
//! The buffers themselves are bounded by the ARC and the write throttle. What kept
//! the resident set far above them was glibc's allocator (`bench/rss.sh` measured 730
//! to 850 MiB for a 256 MiB `arc_max` and a 128 MiB dirty limit): up to 8 arenas per
//! CPU each keep what their threads freed, free memory inside a heap is never
//! returned, and its mmap threshold rises to the largest mapped block freed (up to
//! 32 MiB), after which even large buffers come from the heaps. Worse, a large zeroed
//! request that finds a free chunk of the right size in a heap is cleared byte by
//! byte: each FUSE worker's 16 MiB request buffer (fuser's `FuseReadBuf`, 8 per mount
//! then) became wholly resident when a file system was mounted after a pool had been
//! exported, 128 MiB per mount. Three measures, taken when the daemon starts:
//!
//! - [`MapLarge`], the `tarn` binary's global allocator: the system allocator, except
//!   that blocks of [`MAP_MIN_BYTES`] (4 MiB) or more are anonymous mappings of their
//!   own, zero and resident only where touched, unmapped when freed. Below 4 MiB stay
//!   in the heaps: mapping the 1 MiB aggregated writes and FUSE replies each time cost
//!   the sequential write 1.5 to 2 times its CPU time.
//! - [`tune_allocator`]: `mallopt(M_ARENA_MAX, ARENA_MAX)` (2 arenas: the largest RSS
//!   fell from about 800 to about 530 MiB on its own; the daemon allocates tens of
//!   thousands of times a second, far below where arena contention shows) and a fixed
//!   `M_MMAP_THRESHOLD` of [`MMAP_THRESHOLD_BYTES`] (glibc then never raises it; with
//!   [`MapLarge`] no request that large reaches it). A threshold of 128 KiB, mapping
//!   every record, halved random-I/O IOPS: unmapping in a threaded process costs a TLB
//!   shootdown each time.
//! - The reaper ([`start_reaper`], thread `mem_reap`): every [`REAP_INTERVAL`] it
//!   reads the resident set (`/proc/self/statm`) and compares it with what it expects
//!   to be resident ([`expected_bytes`]: the ARC's size, header and decompressed
//!   bytes, the L2ARC's headers, the pools' dirty data, plus [`REAP_SLACK_BYTES`]).
//!   Over it, it calls `malloc_trim(0)`, which hands every free page inside the heaps
//!   back to the kernel; so the allocator's free memory goes back within a second
//!   after a pool's buffers are freed or the ARC shrinks (`tarn daemon --set
//!   arc_max=…`, memory pressure). A trim that leaves the process over the mark
//!   doubles the interval (up to [`REAP_INTERVAL_MAX`]), so memory that really is in
//!   use is not trimmed for nothing again and again; under the mark the interval
//!   resets. Trimmed pages fault back in when reused: checked every 100 ms the reaper
//!   cost the random read/write mix a fifth to a third more CPU per I/O; once a
//!   second it is within the noise of the measurements.
//!
//! Locks: none of its own; it reads the ARC's counters and each open pool's dirty
//! count, and `malloc_trim` takes the allocator's arena locks (other threads'
//! allocations wait for the trim of their arena, a few ms).
//!
//! Limits: the `mallopt` settings and the reaper are glibc's (other C libraries keep
//! their own behaviour). The bound is measured (`bench/README.md`), not enforced:
//! nothing fails an allocation that would cross it, and a workload that keeps more
//! than the fixed overhead in flight outside the caches (say, many concurrent
//! `zfs send` streams) can exceed it.

use std::time::Duration;

/// Fixed part of the daemon's memory beyond `arc_max`, the dirty-data limits and the
/// header bytes, bytes (see the module theory for what it covers).
pub const FIXED_OVERHEAD_BYTES: u64 = 64 << 20;

/// FUSE worker threads of each of the daemon's mounts (`tarn_fuse::MountOptions::
/// threads`). A worker that sends a write to the intent log waits for its commit, so
/// at most this many synchronous writes meet in one log commit: with 128 threads of
/// 8 KiB `O_SYNC` writes (`bench/eleven.sh`), 16 workers gave 3,800 and 3,955 IOPS
/// against 3,272 and 3,237 with 8, 32 workers 4,160 and 4,439 (`bench/README.md`).
pub const MOUNT_FUSE_THREADS: usize = 16;

/// Memory of each mounted file system beyond the caches, bytes: its
/// [`MOUNT_FUSE_THREADS`] FUSE workers each keep a request buffer of which a 1 MiB
/// write touches 1 MiB + a page, and a read reply buffer of up to 1 MiB that it keeps
/// between requests: 2 MiB each.
pub const MOUNT_OVERHEAD_BYTES: u64 = MOUNT_FUSE_THREADS as u64 * (2 << 20);

/// Largest number of malloc arenas (`M_ARENA_MAX`; glibc's default is 8 per CPU).
pub const ARENA_MAX: i32 = 2;

/// glibc's mmap threshold (`M_MMAP_THRESHOLD`), bytes: fixing it stops glibc from
/// raising it; requests this large are [`MapLarge`]'s and never reach glibc.
pub const MMAP_THRESHOLD_BYTES: i32 = 4 << 20;

/// How often the reaper looks at the resident set while under its mark.
pub const REAP_INTERVAL: Duration = Duration::from_secs(1);

/// Longest wait between two looks of the reaper (after trims that did not help).
pub const REAP_INTERVAL_MAX: Duration = Duration::from_secs(8);

/// Resident memory tolerated beyond [`expected_bytes`] before the reaper trims, bytes.
/// Half of [`FIXED_OVERHEAD_BYTES`]: the other half is code, stacks and what is in
/// flight.
pub const REAP_SLACK_BYTES: u64 = FIXED_OVERHEAD_BYTES / 2;

/// The documented overhead beyond `arc_max`, the dirty-data limits and the header
/// bytes with `mounts` file systems mounted, bytes.
pub fn overhead_bytes(mounts: u64) -> u64 {
    FIXED_OVERHEAD_BYTES + mounts * MOUNT_OVERHEAD_BYTES
}

/// Allocations of at least this many bytes (with at most page alignment) are made
/// by [`MapLarge`] as mappings of their own.
pub const MAP_MIN_BYTES: usize = MMAP_THRESHOLD_BYTES as usize;

/// The `tarn` binary's global allocator: the system allocator (glibc's malloc), except
/// that an allocation of [`MAP_MIN_BYTES`] or more is an anonymous mapping of its
/// own, unmapped when freed.
///
/// glibc maps a large request only when no free chunk in the arena fits it; after a
/// pool's buffers are freed one usually does, and a zeroed request (`calloc`) is then
/// cleared byte by byte, so all of it becomes resident. Each FUSE worker allocates
/// a zeroed 16 MiB request buffer (fuser's `FuseReadBuf`) of which a 1 MiB write
/// uses 1 MiB: a file system mounted after an export and import cost 128 MiB resident
/// instead of 8 (an idle daemon with one empty pool: 90 MiB resident before, 10
/// after). A fresh mapping is zero and resident only where it is touched.
pub struct MapLarge;

impl MapLarge {
    fn mapped(layout: std::alloc::Layout) -> bool {
        layout.size() >= MAP_MIN_BYTES && layout.align() <= 4096
    }

    fn map(size_bytes: usize) -> *mut u8 {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }
}

// SAFETY: every block is either the system allocator's (small layouts) or a mapping of
// exactly `layout.size()` bytes (large ones, page aligned, which satisfies any
// alignment up to a page); `dealloc` and `realloc` tell the two apart by the layout
// the block was allocated with, as the `GlobalAlloc` contract guarantees they get.
unsafe impl std::alloc::GlobalAlloc for MapLarge {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if Self::mapped(layout) {
            Self::map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
            unsafe { std::alloc::System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if Self::mapped(layout) {
            // A fresh anonymous mapping reads as zeros.
            Self::map(layout.size())
        } else {
            // SAFETY: as in `alloc`.
            unsafe { std::alloc::System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if Self::mapped(layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map`.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: `ptr` came from the system allocator with this layout.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to the alignment, does
        // not overflow, so this layout is valid.
        let new_layout = unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (Self::mapped(layout), Self::mapped(new_layout)) {
            // SAFETY: a system block resized by the system allocator.
            (false, false) => unsafe { std::alloc::System.realloc(ptr, layout, new_size) },
            (true, true) => {
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes; the kernel moves
                // or grows it in place.
                let p = unsafe { libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE) };
                if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            _ => {
                // SAFETY: a new block of the new layout, the common prefix copied, the
                // old block freed with its own layout.
                unsafe {
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}

/// `mallopt` the arena count and the mmap threshold (module theory). Call first
/// thing in the daemon, before any thread is started (arenas are made as threads
/// first allocate). A no-op outside glibc.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; both are valid values.
    unsafe {
        if libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX) != 1 {
            tracing::warn!("mallopt(M_ARENA_MAX, {ARENA_MAX}) refused");
        }
        if libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1 {
            tracing::warn!("mallopt(M_MMAP_THRESHOLD, {MMAP_THRESHOLD_BYTES}) refused");
        }
    }
}

/// What the daemon expects to be resident beyond its fixed overhead, bytes: the ARC's
/// buffers, headers and decompressed blocks, the L2ARC's headers and the open pools'
/// dirty data.
pub fn expected_bytes() -> u64 {
    let arc = tarn_spa::arc();
    let l2_hdr_bytes = arc.stats().iter().find(|(n, _, _)| *n == "l2_hdr_size").map_or(0, |s| s.2.max(0) as u64);
    arc.size_bytes() + arc.hdr_bytes() + arc.overhead_bytes() + l2_hdr_bytes + tarn_spa::open_pools_dirty_bytes()
}

/// This process's resident set, bytes (`/proc/self/statm`), if readable.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Start the reaper thread (module theory), once the shared ARC has its tunables
/// (it reads [`tarn_spa::arc`], which makes the ARC on first use). A no-op outside
/// glibc.
pub fn start_reaper() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let spawned = std::thread::Builder::new().name("mem_reap".into()).spawn(|| {
        let mut wait = REAP_INTERVAL;
        loop {
            std::thread::sleep(wait);
            let Some(before) = resident_bytes() else { return };
            let mark = expected_bytes() + REAP_SLACK_BYTES;
            if before <= mark {
                wait = REAP_INTERVAL;
                continue;
            }
            trim();
            let after = resident_bytes().unwrap_or(before);
            tracing::debug!("malloc_trim: resident {} -> {} MiB (mark {} MiB)", before >> 20, after >> 20, mark >> 20);
            wait = if after > mark { (wait * 2).min(REAP_INTERVAL_MAX) } else { REAP_INTERVAL };
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the memory reaper: {e}");
    }
}

/// Give the allocator's free pages back to the kernel (`malloc_trim(0)`).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
