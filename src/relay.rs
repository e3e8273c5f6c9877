//! custream's host-function thread: where Python host functions run, so that no thread of
//! the driver's ever waits for the GIL.
//!
//! The driver runs host functions on a thread of its own while it holds locks that other
//! driver calls take; a trampoline that waited there for the GIL deadlocked against any
//! thread that held the GIL inside such a call (CuPy and PyTorch launch with it held; cuda.core
//! withdrew its host callbacks for this). The driver's threads now only post a job here and
//! return; this thread runs the jobs in order, attached to the interpreter, and the stream
//! waits on a flag (src/flags.rs) that the job raises when it is done.
//!
//! Exit: `_finalize` sets the finalizing flag, then waits (GIL released) for the jobs already
//! inside Python; every later job runs without Python (`None`): it raises its flag, so no
//! stream waits forever, and leaks its Python objects, which can no longer be released. The
//! count and the flag are sequentially consistent: one side always sees the other.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::Python;

use crate::gil::{self, Resident};
use crate::libcuda;

/// A job: given the interpreter when Python may still be entered, `None` once it may not.
pub type Job = Box<dyn for<'py> FnOnce(Option<Python<'py>>) + Send>;

/// The thread's queue, made with the thread on first use.
static QUEUE: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// Jobs inside Python now, or about to enter it.
static ENTERING: AtomicU32 = AtomicU32::new(0);

/// Queue `job` for custream's thread. Called on the driver's threads: never waits for the
/// GIL (the lock is held only to push, or to start the thread once).
pub fn post(job: Job) {
    let mut queue = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
    let job = match queue.as_ref() {
        None => job,
        Some(q) => match q.send(job) {
            Ok(()) => return,
            // The thread is gone (it never is, but a job must still run): start another.
            Err(failed) => failed.0,
        },
    };
    let (tx, rx) = channel();
    let started = std::thread::Builder::new()
        .name("custream-host".into())
        .spawn(move || work(rx));
    if started.is_err() {
        // No thread to be had: the job runs here without Python, so its flag is raised.
        drop(queue);
        job(None);
        return;
    }
    let _ = tx.send(job);
    *queue = Some(tx);
}

fn work(jobs: Receiver<Job>) {
    let mut resident = Resident::new();
    while let Some(first) = next_job(&jobs) {
        // Whatever else is queued runs in the same attachment.
        let mut burst = vec![first];
        burst.extend(jobs.try_iter());
        ENTERING.fetch_add(1, Ordering::SeqCst);
        if libcuda::is_finalizing() {
            ENTERING.fetch_sub(1, Ordering::SeqCst);
            for job in burst {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(None)));
            }
            continue;
        }
        let _ = resident.enter(|py| {
            for job in burst {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Some(py))));
            }
        });
        ENTERING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the thread polls for the next job before it sleeps: a stream that queues host
/// functions back to back (a loop of launch and synchronize) posts the next one within tens
/// of microseconds, and a thread woken from sleep costs about as much again.
const POLL: Duration = Duration::from_micros(100);

/// The next job, polled for `POLL`, then waited for; `None` once no sender is left.
fn next_job(jobs: &Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if start.elapsed() < POLL => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => return jobs.recv().ok(),
        }
    }
}

/// At exit (from `_finalize`, after the finalizing flag is set): wait, without the GIL,
/// for the jobs already inside Python to leave it.
pub fn wait_for_running(py: Python<'_>) {
    // Jobs run only where cuInit succeeded: a child forked while one ran in its parent
    // inherits the count, not the thread.
    if !libcuda::initialized_here() {
        return;
    }
    gil::wait_in_finalize(py, || ENTERING.load(Ordering::SeqCst) == 0);
}
