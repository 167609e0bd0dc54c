//! Linux native AIO for the intent log's mirrored block writes.
//!
//! Theory: an `fsync` waits for one log block to be durable on the sides of a mirror.
//! Written from the caller's thread on one side and from a pool thread on the other
//! ([`crate::iopool`]), that costs a wakeup of the helper, the helper's own sleeps in
//! the write and a latch at the end: three of the eight or so context switches of a
//! whole `fsync` round trip, on a machine where each costs microseconds of CPU. Here
//! the caller hands the kernel one `IOCB_CMD_PWRITE` per side with `RWF_DSYNC` on the
//! sides' `O_DIRECT` descriptors (`io_submit`), all at once, and sleeps once in
//! `io_getevents` until every side has completed; a completed write is durable
//! (`RWF_DSYNC`: written, then the device cache flushed, or sent with FUA), as
//! [`crate::Leaf::write_durable`]'s single `pwritev2` is.
//!
//! Invariants: [`pwrite_dsync_all`] returns only after every request it submitted has
//! completed (the kernel reads the caller's buffer until then); when the wait itself
//! fails, the thread's context is destroyed, which blocks until the kernel is done
//! with every request. Nothing here is retried: a side that was not submitted or did
//! not complete whole is reported so, and the caller writes it the other way.
//!
//! Limits: each thread has its own context of [`MAX_SIDES`] slots, made on first use
//! (`io_setup`) and destroyed when the thread exits; a thread that cannot get one
//! (`fs.aio-max-nr` reached, a kernel without AIO) remembers it and never asks again.
//! Little-endian only (the `iocb` layout below); elsewhere the caller's fallback runs.
//!
//! Called by: `leaf` ([`crate::Leaf::write_durable_all`]).

use std::cell::RefCell;
use std::os::fd::RawFd;

/// Most sides written at once (a mirror's children; wider requests use the fallback).
pub const MAX_SIDES: usize = 8;

/// `IOCB_CMD_PWRITE` of `<linux/aio_abi.h>`.
const IOCB_CMD_PWRITE: u16 = 1;

/// `struct iocb` of `<linux/aio_abi.h>` on a little-endian machine (64 bytes).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event` of `<linux/aio_abi.h>`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// A thread's AIO context (`aio_context_t`), destroyed with the thread.
struct Ctx(libc::c_ulong);

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: destroys a context this thread made; blocks until its requests end.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.0);
        }
    }
}

thread_local! {
    /// `None`: not tried yet; `Some(None)`: `io_setup` failed on this thread.
    static CTX: RefCell<Option<Option<Ctx>>> = const { RefCell::new(None) };
}

/// The outcome of one side: `None` when it was never submitted (nothing was written
/// by this call), else what the kernel reported.
pub type SideResult = Option<std::io::Result<()>>;

/// Write all of `buf` at `offset_bytes` of every descriptor in `fds` (each opened
/// with `O_DIRECT`; `buf`, its length and the offset 512-byte aligned) with
/// `RWF_DSYNC`, all submitted before waiting once for every completion. Returns one
/// [`SideResult`] per descriptor, or `None` when nothing was submitted: this thread
/// has no AIO context, `fds` is wider than [`MAX_SIDES`], or the kernel refused the
/// first request (a descriptor refused after the first leaves the sides before it
/// submitted and itself `None`).
pub fn pwrite_dsync_all(fds: &[RawFd], offset_bytes: u64, buf: &[u8]) -> Option<Vec<SideResult>> {
    if !cfg!(target_endian = "little") || fds.is_empty() || fds.len() > MAX_SIDES {
        return None;
    }
    CTX.with_borrow_mut(|slot| {
        let ctx = slot.get_or_insert_with(setup).as_ref()?.0;
        let mut iocbs: Vec<Iocb> = fds
            .iter()
            .enumerate()
            .map(|(i, &fd)| Iocb {
                aio_data: i as u64,
                aio_rw_flags: libc::RWF_DSYNC,
                aio_lio_opcode: IOCB_CMD_PWRITE,
                aio_fildes: fd as u32,
                aio_buf: buf.as_ptr() as u64,
                aio_nbytes: buf.len() as u64,
                aio_offset: offset_bytes as i64,
                ..Iocb::default()
            })
            .collect();
        let mut ptrs: Vec<*mut Iocb> = iocbs.iter_mut().map(|c| c as *mut Iocb).collect();
        let mut out: Vec<SideResult> = (0..fds.len()).map(|_| None).collect();
        // SAFETY: `ptrs` points at `iocbs`, alive until every submitted request has
        // completed (waited for below); each names `buf`, which outlives the call.
        let submitted = unsafe { libc::syscall(libc::SYS_io_submit, ctx, ptrs.len() as libc::c_long, ptrs.as_mut_ptr()) };
        if submitted <= 0 {
            // Refused as a whole: nothing is in flight. EINVAL is a kernel without
            // `RWF_DSYNC` for AIO (before 4.13): this thread stops asking.
            if submitted < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                *slot = Some(None);
            }
            return None;
        }
        let mut pending = submitted as usize;
        let mut events = [IoEvent::default(); MAX_SIDES];
        while pending > 0 {
            // SAFETY: `events` has room for `pending` (≤ MAX_SIDES) events; a null
            // timeout waits until they are there.
            let got = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    ctx,
                    pending as libc::c_long,
                    pending as libc::c_long,
                    events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if got < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Cannot wait: destroying the context waits for the requests instead.
                // Sides not reported stay `None` and are written the other way.
                *slot = Some(None);
                return Some(out);
            }
            for e in &events[..got as usize] {
                let r = if e.res == buf.len() as i64 {
                    Ok(())
                } else if e.res < 0 {
                    Err(std::io::Error::from_raw_os_error(-e.res as i32))
                } else {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("short direct write: {} of {} bytes", e.res, buf.len()),
                    ))
                };
                if let Some(o) = out.get_mut(e.data as usize) {
                    *o = Some(r);
                }
            }
            pending -= got as usize;
        }
        Some(out)
    })
}

fn setup() -> Option<Ctx> {
    let mut id: libc::c_ulong = 0;
    // SAFETY: `id` is zero as io_setup requires, and lives across the call.
    let r = unsafe { libc::syscall(libc::SYS_io_setup, MAX_SIDES as libc::c_long, &mut id as *mut libc::c_ulong) };
    (r == 0).then_some(Ctx(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    /// A 4 KiB-aligned buffer (O_DIRECT needs one).
    fn aligned(len: usize, byte: u8) -> (Vec<u8>, usize) {
        let v = vec![byte; len + 4096];
        let skip = v.as_ptr().align_offset(4096);
        (v, skip)
    }

    #[test]
    fn every_side_gets_the_bytes_and_a_bad_descriptor_is_reported_alone() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            let p = dir.path().join(name);
            std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
            let direct = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&p);
            (p, direct)
        };
        let (pa, da) = open("a");
        let (pb, db) = open("b");
        let (Ok(da), Ok(db)) = (da, db) else {
            // No O_DIRECT on this file system (tmpfs): nothing to test here.
            return;
        };
        let (v, skip) = aligned(8192, 0x5a);
        let buf = &v[skip..skip + 8192];
        let Some(rs) = pwrite_dsync_all(&[da.as_raw_fd(), db.as_raw_fd()], 65536, buf) else {
            // No AIO context on this machine: the callers' fallback is what runs.
            return;
        };
        assert!(rs.iter().all(|r| matches!(r, Some(Ok(())))), "{rs:?}");
        for p in [&pa, &pb] {
            let mut back = vec![0u8; 8192];
            std::fs::File::open(p).unwrap().read_exact_at(&mut back, 65536).unwrap();
            assert_eq!(back, buf);
        }
        // A descriptor opened read-only fails on its own (refused at submission, so
        // never submitted, or failed at completion); the side before it still lands.
        let ro = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&pa).unwrap();
        let (v2, skip2) = aligned(4096, 0x33);
        let buf2 = &v2[skip2..skip2 + 4096];
        let rs = pwrite_dsync_all(&[db.as_raw_fd(), ro.as_raw_fd()], 0, buf2).unwrap();
        assert!(matches!(rs[0], Some(Ok(()))), "{rs:?}");
        assert!(matches!(rs[1], None | Some(Err(_))), "{rs:?}");
        let mut back = vec![0u8; 4096];
        std::fs::File::open(&pb).unwrap().read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, buf2);
    }
}
