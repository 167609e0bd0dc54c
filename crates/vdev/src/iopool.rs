//! The I/O pool: parked threads that run the per-child parts of a vdev request
//! (a mirror's side writes, a raidz's column writes, the leaf flushes of a txg or a log
//! commit) so that one request costs one device round trip, not one per child.
//!
//! Theory: spawning a thread per child per request (what `std::thread::scope` does)
//! costs a `clone3`, a stack `mmap`, `mprotect` and `munmap` per thread: on a 2-way
//! mirror three per `fsync`, a large share of a 1 ms intent-log commit. The pool keeps
//! [`IO_POOL_THREADS`] threads waiting on a condition variable over a job queue (a
//! futex sleep: no spinning, which would steal the CPU of a small machine from the
//! request itself) and hands them jobs, each waking one thread; the caller runs the
//! first item itself and waits on a latch for the rest.
//!
//! Invariants: [`each_parallel`] returns only after every job it handed out has
//! finished (the jobs borrow the caller's data; a guard waits even while a panic
//! unwinds), and a panic in a job is re-raised in the caller. A job is handed to the
//! pool only while some pool thread is idle; otherwise the caller runs it itself, so a
//! job that issues parallel I/O of its own (an intent-log block written to a mirror)
//! can never wait for threads that are all waiting on it.
//!
//! Called by: `tree` (mirror and raidz writes, flushes), `label`, and through
//! `tarn_zio::each_parallel` the txg and intent-log flushes and log-block writes.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Threads in the pool: every child of the widest raidz (20) can have a request in
/// flight while flushes of other vdevs wait.
pub const IO_POOL_THREADS: usize = 32;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The job queue: idle workers wait on `ready`, and a job wakes exactly one of them
/// (`notify_one`). A channel receiver shared behind a mutex, as before, woke two
/// threads per job (the receiver, then the next thread queued on the mutex, which
/// only went back to sleep in the receive): on an `fsync` through a mirror that was
/// two extra context switches of the four the helper side cost.
struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    idle: AtomicUsize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Arc<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let p = Arc::new(Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            idle: AtomicUsize::new(0),
        });
        for i in 0..IO_POOL_THREADS {
            let pw = p.clone();
            let spawned = std::thread::Builder::new().name(format!("vdev_io{i}")).spawn(move || worker(&pw));
            if spawned.is_ok() {
                p.idle.fetch_add(1, Ordering::SeqCst);
            }
        }
        p
    })
}

fn worker(p: &Pool) {
    loop {
        let job = {
            let mut q = p.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = q.pop_front() {
                    break job;
                }
                q = p.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        job();
        p.idle.fetch_add(1, Ordering::SeqCst);
    }
}

/// Claim an idle pool thread; false when none is idle.
fn claim(idle: &AtomicUsize) -> bool {
    idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

/// Counts the jobs still running and holds the first panic among them.
struct Latch {
    state: Mutex<(usize, Option<Box<dyn Any + Send>>)>,
    done: Condvar,
}

impl Latch {
    fn finish(&self, panic: Option<Box<dyn Any + Send>>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 -= 1;
        if st.1.is_none() {
            st.1 = panic;
        }
        if st.0 == 0 {
            self.done.notify_all();
        }
    }

    /// Wait for every job; returns the first panic.
    fn wait(&self) -> Option<Box<dyn Any + Send>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.0 > 0 {
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.1.take()
    }
}

/// Waits for the handed-out jobs when dropped, so that borrowed data outlives them even
/// while a panic of the caller's own item unwinds.
struct WaitGuard<'a>(&'a Latch);

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.wait();
    }
}

/// Run `f` on every item at once: the first on this thread, the others on idle pool
/// threads (or on this thread when none is idle). Results are in item order. A panic
/// in `f` reaches the caller after every item has finished.
pub fn each_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let (first, rest) = match items {
        [] => return Vec::new(),
        [one] => return vec![f(one)],
        [first, rest @ ..] => (first, rest),
    };
    let p = pool();
    let slots: Vec<Mutex<Option<R>>> = rest.iter().map(|_| Mutex::new(None)).collect();
    let latch = Latch {
        state: Mutex::new((0, None)),
        done: Condvar::new(),
    };
    let mut inline: Vec<usize> = Vec::new();
    let out_first;
    {
        let guard = WaitGuard(&latch);
        for (i, item) in rest.iter().enumerate() {
            if !claim(&p.idle) {
                inline.push(i);
                continue;
            }
            latch.state.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
            let (f, slot, latch) = (&f, &slots[i], &latch);
            let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item)));
                match r {
                    Ok(v) => {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                        latch.finish(None);
                    }
                    Err(e) => latch.finish(Some(e)),
                }
            });
            // SAFETY: the job borrows `f`, `item`, `slots` and `latch`, all of which
            // outlive `guard`, whose drop (on return or unwind) waits until every
            // handed-out job has called `latch.finish`, the job's last use of them.
            let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
            p.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(job);
            p.ready.notify_one();
        }
        out_first = f(first);
        for &i in &inline {
            *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(f(&rest[i]));
        }
        if let Some(panic) = guard.0.wait() {
            std::panic::resume_unwind(panic);
        }
    }
    let mut out = Vec::with_capacity(items.len());
    out.push(out_first);
    out.extend(
        slots
            .into_iter()
            .map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every item ran")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the pool: one at a time, each starting with every thread idle.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn alone() -> std::sync::MutexGuard<'static, ()> {
        let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = std::time::Instant::now();
        while pool().idle.load(Ordering::SeqCst) < IO_POOL_THREADS && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        g
    }

    #[test]
    fn results_are_in_item_order_and_run_on_pool_threads() {
        let _alone = alone();
        let items: Vec<u64> = (0..10).collect();
        let out = each_parallel(&items, |&x| (x * 2, std::thread::current().name().map(str::to_string)));
        assert_eq!(out.iter().map(|(v, _)| *v).collect::<Vec<_>>(), (0..10).map(|x| x * 2).collect::<Vec<_>>());
        assert!(out[1..].iter().any(|(_, n)| n.as_deref().is_some_and(|n| n.starts_with("vdev_io"))), "{out:?}");
    }

    #[test]
    fn a_panic_in_a_job_reaches_the_caller_after_all_items_ran() {
        let _alone = alone();
        let ran = AtomicUsize::new(0);
        let items: Vec<u32> = (0..6).collect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            each_parallel(&items, |&x| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                ran.fetch_add(1, Ordering::SeqCst);
                assert_ne!(x, 3, "item three fails");
                x
            })
        }));
        assert!(r.is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 6);
    }

    #[test]
    fn nested_calls_with_every_thread_busy_complete() {
        let _alone = alone();
        // More outer items than pool threads, each issuing its own parallel I/O: the
        // inner calls must run inline rather than wait for threads that wait on them.
        let outer: Vec<usize> = (0..IO_POOL_THREADS * 2).collect();
        let sums = each_parallel(&outer, |&o| {
            let inner: Vec<usize> = (0..4).collect();
            std::thread::sleep(std::time::Duration::from_millis(5));
            each_parallel(&inner, |&i| o + i).into_iter().sum::<usize>()
        });
        assert_eq!(sums, outer.iter().map(|o| 4 * o + 6).collect::<Vec<_>>());
    }
}
