//! Leaf devices: a regular file or a block device, opened with an exclusive lock.
//!
//! Theory: a [`Leaf`] is an open file descriptor plus the device size, and nothing
//! else. It owns no layout: callers address it with raw device offsets (labels use
//! [`Leaf::pread`]/[`Leaf::pwrite`] directly; the vdev tree adds `DATA_START_BYTES`).
//!
//! Invariants:
//! - the descriptor holds `flock(LOCK_EX)` for as long as the `Leaf` lives (checked in
//!   [`Leaf::open`]; the kernel drops the lock when the descriptor is closed on drop), so
//!   two imports — in two processes, or twice in one process — cannot share a device;
//! - `size_bytes >= LEAF_MIN_SIZE_BYTES`, so every label offset is inside the device
//!   (checked in [`Leaf::open`]).
//!
//! Errors: every OS error becomes [`VdevError::Io`] carrying the path; a short read
//! past the end of a regular file is an `Io` error (`UnexpectedEof`), never zeros.
//! `flush` is `fdatasync`; a failed flush is reported and never retried here.
//!
//! Fault injection: when any injection is registered ([`crate::inject`]; otherwise the
//! cost is one relaxed atomic load), `pread`/`pwrite`/`flush` first ask the registry,
//! which may sleep out an injected latency, fail the request with `EIO` before it
//! reaches the device, drop it (power cut), or have a bit of the read buffer flipped
//! after the read. The callers above cannot tell these from a real disk's.
//!
//! Direct I/O: like ZFS, which talks to disks directly, a leaf also opens a second
//! descriptor with `O_DIRECT` and uses it for every sector-aligned write of at least
//! 64 KiB, straight from the caller's memory when it is 4 KiB-aligned (an
//! [`AlignedBuf`], which zio builds its aggregated writes in), else through a
//! per-thread 4 KiB-aligned bounce buffer. That avoids the kernel
//! copying every large block into page-cache folios, which profiling showed was most of
//! the write path's CPU. Smaller writes (metadata) stay buffered so that the txg's one
//! `fdatasync` per leaf flushes them together. Reads stay buffered (the kernel's
//! readahead on the leaf complements the dmu's prefetch), except a scan's whole
//! extents ([`Leaf::pread_direct`] into an [`AlignedVec`]): a scrub reads every
//! allocated byte once, and the page-cache copy was most of its CPU. When the file system refuses
//! `O_DIRECT` (tmpfs) or a request is not 512-byte aligned, the buffered descriptor is
//! used; Linux keeps the two coherent
//! (direct reads write back dirty cached pages first; direct writes invalidate them).
//!
//! Called by: `tree` (leaf vdev nodes), `label`, and spa (open at create/import).

use crate::inject::{self, Op, Verdict};
use crate::VdevError;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use tarn_phys::label::{DATA_START_BYTES, LABEL_SIZE_BYTES};

/// `BLKGETSIZE64` from `<linux/fs.h>`: device size in bytes as a u64.
const BLKGETSIZE64: u64 = 0x8008_1272;

/// Smallest device `Leaf::open` accepts: the front reserve (L0, L1, boot area) plus
/// the two trailing labels. Pool creation enforces the larger
/// `tarn_phys::MIN_DEVICE_SIZE_BYTES`.
pub const LEAF_MIN_SIZE_BYTES: u64 = DATA_START_BYTES + 2 * LABEL_SIZE_BYTES;

/// An open leaf device.
pub struct Leaf {
    /// Path as given.
    pub path: String,
    /// Device size in bytes.
    pub size_bytes: u64,
    file: std::fs::File,
    direct: Option<std::fs::File>,
}

/// Alignment of direct-I/O buffers, offsets and lengths.
const DIRECT_ALIGN_BYTES: usize = 4096;
/// Largest bounce buffer kept per thread between requests.
const BOUNCE_KEEP_BYTES: usize = 16 << 20;

/// A heap buffer aligned for `O_DIRECT`.
struct Bounce {
    ptr: *mut u8,
    cap: usize,
}

impl Bounce {
    fn layout(cap: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(cap, DIRECT_ALIGN_BYTES).expect("bounce layout")
    }
    fn with_capacity(cap: usize) -> Bounce {
        let cap = cap.max(DIRECT_ALIGN_BYTES).next_multiple_of(DIRECT_ALIGN_BYTES);
        // SAFETY: non-zero size, valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc(Self::layout(cap)) };
        assert!(!ptr.is_null(), "out of memory for a {cap}-byte I/O buffer");
        Bounce { ptr, cap }
    }
    fn slice(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.cap);
        // SAFETY: ptr is valid for cap bytes, uniquely borrowed through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len) }
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in with_capacity with the same layout.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout(self.cap)) }
    }
}

/// A heap buffer of initialized bytes whose start is aligned for `O_DIRECT`
/// ([`AlignedBuf::ALIGN_BYTES`]): a [`Leaf::pwrite`] of it (at an aligned offset, of an
/// aligned length) goes to the device straight from it, with no bounce copy. zio
/// builds its aggregated writes in one, so that a run written to both sides of a
/// mirror is copied once in all, not once per side.
///
/// Dropped, its memory goes to a small shared free list ([`ALIGNED_KEEP`] buffers of
/// at most [`ALIGNED_KEEP_BYTES`]) that the next one reuses: a fresh 1 MiB allocation
/// faults in and zeroes up to 256 pages, which under buffered random writes cost the
/// sync more than the copy it holds (the kernel's page faults under `concat_padded`
/// were 21% of the daemon's profile before the reuse).
pub struct AlignedBuf {
    buf: Option<Bounce>,
    len: usize,
}

/// Most [`AlignedBuf`] allocations kept for reuse.
const ALIGNED_KEEP: usize = 8;
/// Largest [`AlignedBuf`] allocation kept for reuse, bytes (a 1 MiB aggregated run).
const ALIGNED_KEEP_BYTES: usize = 1 << 20;

/// Free [`AlignedBuf`] allocations, each of at most [`ALIGNED_KEEP_BYTES`].
static ALIGNED_FREE: parking_lot::Mutex<Vec<Bounce>> = parking_lot::Mutex::new(Vec::new());

// SAFETY: a Bounce owns its allocation outright; nothing else points into it.
unsafe impl Send for Bounce {}

impl AlignedBuf {
    /// Alignment of the buffer's first byte, bytes.
    pub const ALIGN_BYTES: usize = DIRECT_ALIGN_BYTES;

    /// The concatenation of `parts`, each `(bytes, slot_bytes)` taking `slot_bytes`
    /// bytes: its bytes, then zeros up to the slot's end (an allocation's padding).
    /// Each byte is written once, no zero-fill first. Panics if a part's bytes are
    /// longer than its slot.
    pub fn concat_padded<'a>(parts: impl IntoIterator<Item = (&'a [u8], usize)> + Clone) -> AlignedBuf {
        let mut len = 0usize;
        for (bytes, slot) in parts.clone() {
            assert!(bytes.len() <= slot, "a part of {} bytes in a {slot}-byte slot", bytes.len());
            len += slot;
        }
        let reused = {
            let mut free = ALIGNED_FREE.lock();
            free.iter().position(|b| b.cap >= len).map(|i| free.swap_remove(i))
        };
        let buf = reused.unwrap_or_else(|| Bounce::with_capacity(len));
        let mut at = 0usize;
        for (bytes, slot) in parts {
            // Checked again: a second pass of the iterator need not yield the same.
            assert!(bytes.len() <= slot && slot <= len - at, "parts changed between passes");
            // SAFETY: `at + slot <= len <= cap` (checked above); the source is a live
            // slice that cannot overlap a buffer this function owns.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr.add(at), bytes.len());
                std::ptr::write_bytes(buf.ptr.add(at + bytes.len()), 0, slot - bytes.len());
            }
            at += slot;
        }
        // SAFETY: `at <= len <= cap`; every byte below `len` is now written.
        unsafe { std::ptr::write_bytes(buf.ptr.add(at), 0, len - at) };
        AlignedBuf { buf: Some(buf), len }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take().filter(|b| b.cap <= ALIGNED_KEEP_BYTES) {
            let mut free = ALIGNED_FREE.lock();
            if free.len() < ALIGNED_KEEP {
                free.push(b);
            }
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let b = self.buf.as_ref().expect("present until dropped");
        // SAFETY: ptr is valid for cap >= len bytes, every one of the first `len`
        // written by `concat_padded`; shared borrow of self.
        unsafe { std::slice::from_raw_parts(b.ptr, self.len) }
    }
}

// SAFETY: AlignedBuf owns its allocation outright (no aliasing pointer survives
// construction) and `&AlignedBuf` only gives out `&[u8]`, so sharing it between
// threads is as safe as sharing a Vec<u8>.
unsafe impl Sync for AlignedBuf {}

/// An owned, zero-initialized heap buffer aligned for `O_DIRECT` whose length can be
/// set anywhere up to its capacity (every byte of the capacity was zeroed when it was
/// allocated, so any length shows initialized bytes): what a scan reads whole extents
/// into with [`Leaf::pread_direct`], reused from extent to extent.
pub struct AlignedVec {
    buf: Bounce,
    len: usize,
}

impl AlignedVec {
    /// A buffer of `len_bytes` zero bytes (capacity rounded up to the alignment).
    pub fn zeroed(len_bytes: usize) -> AlignedVec {
        let cap = len_bytes.max(DIRECT_ALIGN_BYTES).next_multiple_of(DIRECT_ALIGN_BYTES);
        // SAFETY: non-zero size, valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(Bounce::layout(cap)) };
        assert!(!ptr.is_null(), "out of memory for a {cap}-byte I/O buffer");
        AlignedVec {
            buf: Bounce { ptr, cap },
            len: len_bytes,
        }
    }

    /// Bytes it can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.buf.cap
    }

    /// Set the length to `len_bytes` (at most [`AlignedVec::capacity`]; panics
    /// otherwise). The bytes it then shows are whatever the buffer last held.
    pub fn set_len(&mut self, len_bytes: usize) {
        assert!(len_bytes <= self.buf.cap, "{len_bytes} bytes in a {}-byte buffer", self.buf.cap);
        self.len = len_bytes;
    }
}

impl std::ops::Deref for AlignedVec {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len bytes, all initialized (zeroed at
        // allocation, written only through `&mut`); shared borrow of self.
        unsafe { std::slice::from_raw_parts(self.buf.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, uniquely borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr, self.len) }
    }
}

// SAFETY: an AlignedVec owns its allocation outright; `&AlignedVec` gives out only
// `&[u8]`, so sharing it between threads is as safe as sharing a Vec<u8>.
unsafe impl Sync for AlignedVec {}

/// Read buffers reused from one whole-extent read to the next: a scan's extents
/// ([`crate::scan`]) and the runs of adjacent blocks that batched reads issue
/// ([`crate::Vdev::read_run`]). A fresh multi-megabyte buffer per read cost more CPU
/// than the read's copy itself (the kernel zeroing new pages and faulting them in,
/// then the allocator handing them back). At most `kept` idle buffers are kept
/// ([`RUN_BUFFERS_KEPT`] by default); they go when this does.
pub struct RunBuffers {
    idle: parking_lot::Mutex<Vec<AlignedVec>>,
    kept: usize,
}

/// Idle read buffers a default [`RunBuffers`] keeps (enough for a few extents in
/// flight on a wide raidz).
pub const RUN_BUFFERS_KEPT: usize = 32;

impl Default for RunBuffers {
    fn default() -> Self {
        RunBuffers::with_limit(RUN_BUFFERS_KEPT)
    }
}

impl RunBuffers {
    /// A pool that keeps at most `kept` idle buffers (their memory stays allocated
    /// between reads: `kept` times the largest read).
    pub fn with_limit(kept: usize) -> RunBuffers {
        RunBuffers {
            idle: parking_lot::Mutex::new(Vec::new()),
            kept,
        }
    }

    /// A buffer of exactly `len_bytes` bytes whose contents are unspecified (the
    /// read overwrites all of them, or fails and the buffer is not looked at).
    pub fn take(&self, len_bytes: usize) -> AlignedVec {
        let reused = {
            let mut idle = self.idle.lock();
            let best = idle.iter().position(|b| b.capacity() >= len_bytes);
            best.map(|i| idle.swap_remove(i))
        };
        match reused {
            Some(mut b) => {
                b.set_len(len_bytes);
                b
            }
            None => AlignedVec::zeroed(len_bytes),
        }
    }

    /// Buffers idle now (tests and diagnostics).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().len()
    }

    /// Hand a buffer back for a later [`RunBuffers::take`] (dropped when `kept` are
    /// already idle).
    pub fn give(&self, buf: AlignedVec) {
        let mut idle = self.idle.lock();
        if idle.len() < self.kept {
            idle.push(buf);
        }
    }
}

thread_local! {
    static BOUNCE: std::cell::RefCell<Option<Bounce>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` with a thread-local aligned buffer of `len` bytes.
fn with_bounce<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BOUNCE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let mut buf = match slot.take() {
            Some(b) if b.cap >= len => b,
            _ => Bounce::with_capacity(len),
        };
        let r = f(buf.slice(len));
        if buf.cap <= BOUNCE_KEEP_BYTES {
            *slot = Some(buf);
        }
        r
    })
}

/// Writes smaller than this stay buffered: a txg writes dozens of small metadata
/// blocks (ditto copies on every mirror side, label rings) and one `fdatasync` per
/// leaf flushes them together, whereas each small `O_DIRECT` write would be its own
/// synchronous device round trip.
pub(crate) const DIRECT_MIN_BYTES: usize = 64 << 10;

fn direct_ok(offset: u64, len: usize) -> bool {
    offset.is_multiple_of(512) && len.is_multiple_of(512) && len >= DIRECT_MIN_BYTES
}

/// The error an injected I/O fault returns: `EIO`, as a failing disk would.
fn injected_eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EIO)
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf").field("path", &self.path).field("size_bytes", &self.size_bytes).finish()
    }
}

impl Leaf {
    /// Open `path` read-write with an exclusive non-blocking `flock`; `Busy` if another
    /// process holds it. Block devices get their size from BLKGETSIZE64.
    ///
    /// Errors: `Busy` when the lock is held (also by another open of the same path in
    /// this process: `flock` locks belong to the open file description); `Io` when the
    /// path cannot be opened, is neither a regular file nor a block device, or is
    /// smaller than [`LEAF_MIN_SIZE_BYTES`].
    pub fn open(path: &Path) -> Result<Leaf, VdevError> {
        let path_str = path.display().to_string();
        let io = |source: std::io::Error| VdevError::Io {
            path: path_str.clone(),
            source,
        };
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
        // SAFETY: `file` owns a valid descriptor for the duration of the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(VdevError::Busy { path: path_str });
            }
            return Err(io(err));
        }
        let meta = file.metadata().map_err(io)?;
        let size_bytes = if meta.file_type().is_block_device() {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is live.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
            if rc != 0 {
                return Err(io(std::io::Error::last_os_error()));
            }
            size
        } else if meta.file_type().is_file() {
            meta.len()
        } else {
            return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file or block device")));
        };
        if size_bytes < LEAF_MIN_SIZE_BYTES {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("device is {size_bytes} bytes; at least {LEAF_MIN_SIZE_BYTES} needed"),
            )));
        }
        use std::os::unix::fs::OpenOptionsExt;
        let direct = if std::env::var_os("TARN_NO_DIRECT_IO").is_some() {
            None
        } else {
            OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path).ok()
        };
        Ok(Leaf {
            path: path_str,
            size_bytes,
            file,
            direct,
        })
    }

    /// Open `path` for inspection (`zdb`): read-only (`O_RDONLY`, so the kernel refuses
    /// every write through it), without the exclusive `flock` and without the direct
    /// descriptor, so that a pool the daemon has imported can be read beside it and is
    /// never disturbed. A [`Leaf::pwrite`] on it fails with `EBADF`.
    ///
    /// Errors: as [`Leaf::open`], except that a held lock is not `Busy`.
    pub fn open_readonly(path: &Path) -> Result<Leaf, VdevError> {
        let path_str = path.display().to_string();
        let io = |source: std::io::Error| VdevError::Io {
            path: path_str.clone(),
            source,
        };
        let file = OpenOptions::new().read(true).open(path).map_err(io)?;
        let size_bytes = Self::size_of(&file).map_err(io)?;
        Ok(Leaf {
            path: path_str,
            size_bytes,
            file,
            direct: None,
        })
    }

    /// Size of an open regular file or block device, checked against
    /// [`LEAF_MIN_SIZE_BYTES`].
    fn size_of(file: &std::fs::File) -> std::io::Result<u64> {
        let meta = file.metadata()?;
        let size_bytes = if meta.file_type().is_block_device() {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is live.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            size
        } else if meta.file_type().is_file() {
            meta.len()
        } else {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file or block device"));
        };
        if size_bytes < LEAF_MIN_SIZE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("device is {size_bytes} bytes; at least {LEAF_MIN_SIZE_BYTES} needed"),
            ));
        }
        Ok(size_bytes)
    }

    /// Raw positional read of `buf.len()` bytes at a device offset (labels use this
    /// directly). Errors: `Io`, including `UnexpectedEof` past the end of the device.
    pub fn pread(&self, device_offset_bytes: u64, buf: &mut [u8]) -> Result<(), VdevError> {
        let mut corrupt = None;
        if inject::active() {
            match inject::check(&self.path, Op::Read, device_offset_bytes, buf.len() as u64, self.size_bytes) {
                Verdict::Proceed { corrupt: c } => corrupt = c,
                Verdict::Fail => return Err(self.io(injected_eio())),
                // Power cuts drop writes and flushes only; a read sees what landed.
                Verdict::Drop => {}
            }
        }
        self.file.read_exact_at(buf, device_offset_bytes).map_err(|source| self.io(source))?;
        if let Some(r) = corrupt {
            inject::flip_bit(buf, r);
        }
        Ok(())
    }

    /// [`Leaf::pread`] through the direct descriptor (`O_DIRECT`: the device's bytes
    /// straight into `buf`, no page-cache copy) when it can be: no injection
    /// registered, `buf` 4 KiB-aligned, offset and length multiples of 512; otherwise,
    /// or when the file system refuses the request (`EINVAL`), a plain
    /// [`Leaf::pread`]. Linux writes dirty cached pages of the range back before a
    /// direct read, so it returns what a buffered read would. For a scan's whole
    /// extents: measured on this project's VM (2026-12-07), a cold 1 MiB-at-a-time read
    /// of a laid-out file did 1,498–1,691 MiB/s buffered and 2,643–2,947 direct.
    /// Errors: `Io` (a short read past the end is `UnexpectedEof`).
    pub fn pread_direct(&self, device_offset_bytes: u64, buf: &mut [u8]) -> Result<(), VdevError> {
        let aligned = (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN_BYTES) && !buf.is_empty();
        let fd = match &self.direct {
            Some(d) if aligned && !inject::active() && device_offset_bytes.is_multiple_of(512) && buf.len().is_multiple_of(512) => d.as_raw_fd(),
            _ => return self.pread(device_offset_bytes, buf),
        };
        let mut done = 0usize;
        while done < buf.len() {
            let want = buf.len() - done;
            // SAFETY: the destination is the rest of `buf` (`want` bytes, uniquely
            // borrowed); the kernel writes at most `want` bytes there.
            let got = unsafe { libc::pread(fd, buf[done..].as_mut_ptr().cast(), want, (device_offset_bytes + done as u64) as libc::off_t) };
            match got {
                n if n > 0 => done += n as usize,
                0 => return Err(self.io(std::io::ErrorKind::UnexpectedEof.into())),
                _ => {
                    let e = std::io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EINTR) => continue,
                        // A file system that takes O_DIRECT opens but refuses this read.
                        Some(libc::EINVAL) if done == 0 => return self.pread(device_offset_bytes, buf),
                        _ => return Err(self.io(e)),
                    }
                }
            }
        }
        Ok(())
    }

    /// [`Leaf::pread`] of `len_bytes` into a new buffer that is never zero-filled
    /// first: the kernel's copy is the only pass over it (profiling a cold sequential
    /// read showed the zeroing of every block buffer, and the page faults it takes on
    /// fresh memory, costing as much CPU as the copy). Same errors and injections as
    /// [`Leaf::pread`].
    pub fn pread_vec(&self, device_offset_bytes: u64, len_bytes: usize) -> Result<Vec<u8>, VdevError> {
        if inject::active() {
            let mut buf = vec![0u8; len_bytes];
            self.pread(device_offset_bytes, &mut buf)?;
            return Ok(buf);
        }
        let mut buf: Vec<u8> = Vec::with_capacity(len_bytes);
        let fd = self.file.as_raw_fd();
        while buf.len() < len_bytes {
            let done = buf.len();
            let want = len_bytes - done;
            // SAFETY: the destination is the vector's spare capacity (`want` bytes
            // past its length, inside the allocation); the kernel writes at most
            // `want` bytes there, and the length grows only by what it reported.
            let got = unsafe { libc::pread(fd, buf.as_mut_ptr().add(done).cast(), want, (device_offset_bytes + done as u64) as libc::off_t) };
            match got {
                n if n > 0 => unsafe { buf.set_len(done + n as usize) },
                0 => return Err(self.io(std::io::ErrorKind::UnexpectedEof.into())),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(self.io(e));
                    }
                }
            }
        }
        Ok(buf)
    }

    /// Raw positional write of all of `data` at a device offset. Not durable until
    /// [`Leaf::flush`]. Errors: `Io`.
    pub fn pwrite(&self, device_offset_bytes: u64, data: &[u8]) -> Result<(), VdevError> {
        if inject::active() {
            // Before the cut counts this write (it may be the last to land). Saving the
            // bytes of a write then dropped or failed is harmless: they are unchanged.
            if inject::wants_old_bytes(&self.path) {
                let mut old = vec![0u8; data.len()];
                self.file.read_exact_at(&mut old, device_offset_bytes).map_err(|source| self.io(source))?;
                inject::record_unflushed(&self.path, device_offset_bytes, old);
            }
            match inject::check(&self.path, Op::Write, device_offset_bytes, data.len() as u64, self.size_bytes) {
                Verdict::Proceed { .. } => {}
                Verdict::Fail => return Err(self.io(injected_eio())),
                Verdict::Drop => return Ok(()),
            }
        }
        if let Some(d) = self.direct.as_ref().filter(|_| direct_ok(device_offset_bytes, data.len())) {
            // Already aligned in memory (an `AlignedBuf`): straight from it.
            let r = if (data.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN_BYTES) {
                d.write_all_at(data, device_offset_bytes)
            } else {
                with_bounce(data.len(), |b| {
                    b.copy_from_slice(data);
                    d.write_all_at(b, device_offset_bytes)
                })
            };
            return r.map_err(|source| self.io(source));
        }
        self.file.write_all_at(data, device_offset_bytes).map_err(|source| self.io(source))
    }

    /// [`Leaf::pwrite`] of the concatenation of `parts`: on the direct path the parts
    /// are copied straight into the aligned bounce buffer (one copy of the bytes, where
    /// joining them first would be two); otherwise, or while injections are
    /// registered, they are joined and written by [`Leaf::pwrite`]. Same errors.
    pub fn pwrite_gather(&self, device_offset_bytes: u64, parts: &[&[u8]]) -> Result<(), VdevError> {
        if let [one] = parts {
            return self.pwrite(device_offset_bytes, one);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if let Some(d) = self.direct.as_ref().filter(|_| !inject::active() && direct_ok(device_offset_bytes, len)) {
            return with_bounce(len, |b| {
                let mut at = 0;
                for p in parts {
                    b[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                d.write_all_at(b, device_offset_bytes)
            })
            .map_err(|source| self.io(source));
        }
        self.pwrite(device_offset_bytes, &parts.concat())
    }

    /// [`Leaf::pwrite`] then [`Leaf::flush`], in one system call where it can: a
    /// 512-byte-aligned write on a leaf with a direct descriptor goes out as
    /// `pwritev2(RWF_DSYNC)` through `O_DIRECT`, durable when it returns (the kernel
    /// writes it to the device and then flushes the device's cache, or sends it with
    /// FUA), with no page-cache copy and no writeback pass of `fdatasync`. For the
    /// intent log's blocks, whose `fsync` waits for exactly this: fio's 8 KiB random
    /// writes here did 6,962-7,717 IOPS that way against 5,805 with `write` +
    /// `fdatasync`. Anything else, and every write while injections are registered
    /// (a power cut must see the write and the flush apart), takes the two calls; so
    /// does a kernel or file system that refuses the flag (`EINVAL`, `EOPNOTSUPP`).
    /// Unlike [`Leaf::flush`] it leaves the file's other dirty pages alone: only
    /// `data` is made durable. Errors: `Io`.
    pub fn write_durable(&self, device_offset_bytes: u64, data: &[u8]) -> Result<(), VdevError> {
        if let Some(fd) = self.direct_fd(device_offset_bytes, data.len()) {
            let r = with_bounce(data.len(), |b| {
                b.copy_from_slice(data);
                let mut done = 0usize;
                while done < b.len() {
                    let iov = libc::iovec {
                        iov_base: b[done..].as_mut_ptr().cast(),
                        iov_len: b.len() - done,
                    };
                    // SAFETY: one iovec over the live bounce buffer, on the direct
                    // descriptor `self` owns; the kernel reads at most `iov_len` bytes.
                    let n = unsafe { libc::pwritev2(fd, &iov, 1, (device_offset_bytes + done as u64) as libc::off_t, libc::RWF_DSYNC) };
                    if n < 0 {
                        let e = std::io::Error::last_os_error();
                        if e.kind() == std::io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(e);
                    }
                    if n == 0 {
                        return Err(std::io::ErrorKind::WriteZero.into());
                    }
                    done += n as usize;
                }
                Ok(())
            });
            match r {
                Ok(()) => return Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)) => {}
                Err(e) => return Err(self.io(e)),
            }
        }
        self.pwrite(device_offset_bytes, data)?;
        self.flush()
    }

    /// [`Leaf::write_durable`] of the same `data` at the same offset on every leaf of
    /// `leaves` (a mirror's sides), from this thread: when every leaf can take the
    /// direct path, one Linux AIO submission of all the writes and one wait for them
    /// ([`crate::aio`]) instead of a helper thread per side. A side that was submitted
    /// but did not complete whole, or was not submitted, is then written by
    /// [`Leaf::write_durable`] itself, so each result is what that call would have
    /// given. Results are in the order of `leaves`; `None` when nothing could be
    /// submitted (some leaf has no direct path, injections are registered, or this
    /// thread has no AIO context), and nothing was written: the caller writes the sides
    /// its usual way.
    pub fn write_durable_all(leaves: &[&Leaf], device_offset_bytes: u64, data: &[u8]) -> Option<Vec<Result<(), VdevError>>> {
        let fds: Vec<std::os::fd::RawFd> = leaves.iter().map(|l| l.direct_fd(device_offset_bytes, data.len())).collect::<Option<_>>()?;
        let done = with_bounce(data.len(), |b| {
            b.copy_from_slice(data);
            crate::aio::pwrite_dsync_all(&fds, device_offset_bytes, b)
        })?;
        Some(
            leaves
                .iter()
                .zip(done)
                .map(|(l, side)| match side {
                    Some(Ok(())) => Ok(()),
                    _ => l.write_durable(device_offset_bytes, data),
                })
                .collect(),
        )
    }

    /// The direct descriptor, when a write of `len_bytes` at `device_offset_bytes` may
    /// use it durably (see [`Leaf::write_durable`]).
    fn direct_fd(&self, device_offset_bytes: u64, len_bytes: usize) -> Option<std::os::fd::RawFd> {
        self.direct
            .as_ref()
            .filter(|_| !inject::active() && device_offset_bytes.is_multiple_of(512) && len_bytes.is_multiple_of(512) && len_bytes > 0)
            .map(|d| d.as_raw_fd())
    }

    /// Release the exclusive lock early (export/destroy: the pool no longer uses the
    /// device even if some in-memory handle still refers to it).
    pub fn unlock(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a valid descriptor owned by self.file.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }

    /// fdatasync. Errors: `Io`; the caller must treat a failed flush as lost writes.
    pub fn flush(&self) -> Result<(), VdevError> {
        if inject::active() {
            match inject::check(&self.path, Op::Flush, 0, 0, self.size_bytes) {
                Verdict::Proceed { .. } => {}
                Verdict::Fail => return Err(self.io(injected_eio())),
                Verdict::Drop => return Ok(()),
            }
            self.file.sync_data().map_err(|source| self.io(source))?;
            inject::flushed(&self.path);
            return Ok(());
        }
        self.file.sync_data().map_err(|source| self.io(source))
    }

    fn io(&self, source: std::io::Error) -> VdevError {
        VdevError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_file(dir: &tempfile::TempDir, name: &str, size: u64) -> std::path::PathBuf {
        let p = dir.path().join(name);
        std::fs::File::create(&p).unwrap().set_len(size).unwrap();
        p
    }

    #[test]
    fn open_reports_size_and_second_open_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let p = make_file(&dir, "a", 80 << 20);
        let leaf = Leaf::open(&p).unwrap();
        assert_eq!(leaf.size_bytes, 80 << 20);
        assert!(matches!(Leaf::open(&p), Err(VdevError::Busy { .. })));
        drop(leaf);
        // The lock goes with the descriptor.
        Leaf::open(&p).unwrap();
    }

    /// A direct read returns what was written, dirty cached pages included (written
    /// buffered a moment ago); an unaligned buffer or offset takes the buffered path
    /// with the same bytes; a read past the end fails as `pread` does.
    #[test]
    fn pread_direct_sees_buffered_writes_and_falls_back_when_unaligned() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = Leaf::open(&make_file(&dir, "a", 8 << 20)).unwrap();
        assert!(leaf.direct.is_some(), "the test directory refuses O_DIRECT");
        let data: Vec<u8> = (0..(256u32 << 10)).map(|i| (i * 31 + 7) as u8).collect();
        // Small writes stay buffered: still dirty in the page cache when read back.
        for (k, chunk) in data.chunks(4096).enumerate() {
            leaf.pwrite((1 << 20) + (k as u64) * 4096, chunk).unwrap();
        }
        let mut buf = AlignedVec::zeroed(data.len());
        assert!((buf.as_ptr() as usize).is_multiple_of(AlignedBuf::ALIGN_BYTES));
        leaf.pread_direct(1 << 20, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[..]);
        // A shorter length within the capacity, at an offset 512 bytes in.
        buf.set_len(64 << 10);
        leaf.pread_direct((1 << 20) + 512, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[512..512 + (64 << 10)]);
        // Unaligned offset, and an unaligned slice of the buffer: the buffered path.
        let mut odd = AlignedVec::zeroed(9000);
        leaf.pread_direct((1 << 20) + 3, &mut odd).unwrap();
        assert_eq!(&odd[..], &data[3..9003]);
        leaf.pread_direct(1 << 20, &mut odd[1..]).unwrap();
        assert_eq!(&odd[1..], &data[..8999]);
        // Past the end of the file.
        let mut tail = AlignedVec::zeroed(8192);
        assert!(leaf.pread_direct((8 << 20) - 4096, &mut tail).is_err());
    }

    #[test]
    fn aligned_buf_pads_each_part_and_pwrite_of_it_lands() {
        let a: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let b: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 1) as u8).collect();
        let c: Vec<u8> = (0..65000u32).map(|i| (i * 3 + 2) as u8).collect();
        let buf = AlignedBuf::concat_padded([(&a[..], 8192), (&b[..], 8192), (&c[..], 65536)]);
        assert_eq!(buf.len(), 8192 + 8192 + 65536);
        assert!((buf.as_ptr() as usize).is_multiple_of(AlignedBuf::ALIGN_BYTES));
        let mut want = Vec::new();
        for (p, slot) in [(&a, 8192), (&b, 8192), (&c, 65536)] {
            want.extend_from_slice(p);
            want.resize(want.len() + slot - p.len(), 0);
        }
        assert_eq!(&buf[..], &want[..], "bytes, then zeros to each slot's end");
        // Large and aligned: written straight from the buffer through O_DIRECT.
        let dir = tempfile::tempdir().unwrap();
        let leaf = Leaf::open(&make_file(&dir, "a", 80 << 20)).unwrap();
        assert!(leaf.direct.is_some(), "the test directory refuses O_DIRECT");
        leaf.pwrite(1 << 20, &buf).unwrap();
        // The same bytes from an unaligned slice take the bounce buffer.
        let mut shifted = vec![0u8; want.len() + 1];
        shifted[1..].copy_from_slice(&want);
        leaf.pwrite(4 << 20, &shifted[1..]).unwrap();
        for at in [1u64 << 20, 4 << 20] {
            let mut back = vec![0u8; want.len()];
            leaf.pread(at, &mut back).unwrap();
            assert_eq!(back, want);
        }
        // Dropped, its memory serves the next buffer that fits (no other test of this
        // crate makes one).
        let at = buf.as_ptr() as usize;
        drop(buf);
        let again = AlignedBuf::concat_padded([(&b[..], 8192)]);
        assert_eq!(again.as_ptr() as usize, at, "the freed allocation is reused");
        assert_eq!(&again[..], &b[..]);
        let empty = AlignedBuf::concat_padded(std::iter::empty::<(&[u8], usize)>());
        assert!(empty.is_empty());
    }

    /// Parts that grow between the sizing pass and the copying pass (a `Clone` whose
    /// copies differ) panic instead of writing past the allocation.
    #[test]
    #[should_panic(expected = "parts changed between passes")]
    fn aligned_buf_refuses_parts_that_change_between_passes() {
        use std::cell::Cell;
        #[derive(Clone)]
        struct Growing<'a> {
            passes: &'a Cell<usize>,
            left: usize,
        }
        impl<'a> Iterator for Growing<'a> {
            type Item = (&'a [u8], usize);
            fn next(&mut self) -> Option<Self::Item> {
                if self.left == 0 {
                    return None;
                }
                if self.left == 2 {
                    self.passes.set(self.passes.get() + 1);
                }
                self.left -= 1;
                Some((&[9u8; 16][..], 4096 * self.passes.get()))
            }
        }
        let passes = Cell::new(0);
        let _ = AlignedBuf::concat_padded(Growing { passes: &passes, left: 2 });
    }

    #[test]
    #[should_panic(expected = "slot")]
    fn aligned_buf_refuses_a_part_longer_than_its_slot() {
        let _ = AlignedBuf::concat_padded([(&[1u8; 10][..], 8)]);
    }

    #[test]
    fn pwrite_gather_writes_the_parts_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = make_file(&dir, "a", 80 << 20);
        let leaf = Leaf::open(&p).unwrap();
        let part = |len: usize, seed: u8| (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect::<Vec<u8>>();
        // Large and aligned: the direct path (this file system takes O_DIRECT), one
        // copy into the bounce buffer.
        assert!(leaf.direct.is_some(), "the test directory refuses O_DIRECT");
        let big = [part(65536, 1), part(4096, 2), part(131072, 3)];
        leaf.pwrite_gather(1 << 20, &[&big[0], &big[1], &big[2]]).unwrap();
        let mut back = vec![0u8; 65536 + 4096 + 131072];
        leaf.pread(1 << 20, &mut back).unwrap();
        assert_eq!(back, big.concat());
        // Small and unaligned: joined and written buffered; one part: a plain write.
        let small = [part(100, 4), part(7, 5), part(3000, 6)];
        leaf.pwrite_gather(5_000_001, &[&small[0], &small[1], &small[2]]).unwrap();
        leaf.pwrite_gather(6_000_000, &[&small[1]]).unwrap();
        let mut back = vec![0u8; 3107];
        leaf.pread(5_000_001, &mut back).unwrap();
        assert_eq!(back, small.concat());
        let mut one = vec![0u8; 7];
        leaf.pread(6_000_000, &mut one).unwrap();
        assert_eq!(one, small[1]);
    }

    #[test]
    fn pread_pwrite_roundtrip_and_eof_is_io() {
        let dir = tempfile::tempdir().unwrap();
        let p = make_file(&dir, "a", 80 << 20);
        let leaf = Leaf::open(&p).unwrap();
        leaf.pwrite(12345, b"hello").unwrap();
        leaf.flush().unwrap();
        let mut b = [0u8; 5];
        leaf.pread(12345, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        let mut big = vec![0u8; 8192];
        assert!(matches!(leaf.pread((80 << 20) - 4096, &mut big), Err(VdevError::Io { .. })));
        // The unzeroed variant: the same bytes, and the same error past the end.
        assert_eq!(leaf.pread_vec(12345, 5).unwrap(), b"hello");
        let pattern: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        leaf.pwrite(1 << 20, &pattern).unwrap();
        assert_eq!(leaf.pread_vec(1 << 20, pattern.len()).unwrap(), pattern);
        assert!(matches!(leaf.pread_vec((80 << 20) - 4096, 8192), Err(VdevError::Io { .. })));
        assert!(leaf.pread_vec(0, 0).unwrap().is_empty());
        // A durable write, aligned (the direct path where the file system allows it)
        // and not, reads back like any other.
        let block: Vec<u8> = (0..12_288u32).map(|i| (i % 253) as u8).collect();
        leaf.write_durable(4 << 20, &block).unwrap();
        assert_eq!(leaf.pread_vec(4 << 20, block.len()).unwrap(), block);
        leaf.write_durable((4 << 20) + 7, b"odd").unwrap();
        assert_eq!(leaf.pread_vec((4 << 20) + 7, 3).unwrap(), b"odd");
    }

    #[test]
    fn durable_writes_to_several_leaves_land_on_each() {
        let dir = tempfile::tempdir().unwrap();
        let a = Leaf::open(&make_file(&dir, "a", 80 << 20)).unwrap();
        let b = Leaf::open(&make_file(&dir, "b", 80 << 20)).unwrap();
        let block: Vec<u8> = (0..8192u32).map(|i| (i % 241) as u8 + 1).collect();
        match Leaf::write_durable_all(&[&a, &b], 1 << 20, &block) {
            Some(rs) => {
                assert!(rs.iter().all(|r| r.is_ok()), "{rs:?}");
                assert_eq!(a.pread_vec(1 << 20, block.len()).unwrap(), block);
                assert_eq!(b.pread_vec(1 << 20, block.len()).unwrap(), block);
            }
            // No direct I/O or no AIO on this machine: nothing was written.
            None => assert_eq!(a.pread_vec(1 << 20, block.len()).unwrap(), vec![0u8; block.len()]),
        }
        // Unaligned: never submitted, the caller's own path writes it.
        assert!(Leaf::write_durable_all(&[&a, &b], (1 << 20) + 3, &block[..100]).is_none());
    }

    #[test]
    fn missing_and_tiny_devices_are_io_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(Leaf::open(&dir.path().join("nope")), Err(VdevError::Io { .. })));
        let p = make_file(&dir, "tiny", 1 << 20);
        assert!(matches!(Leaf::open(&p), Err(VdevError::Io { .. })));
    }
}
