//! custream's host-function thread: where Python host functions run, so that no thread of
//! the driver's ever waits for the GIL.
//!
//! The driver runs host functions on a thread of its own while it holds locks that other driver
//! calls take; a trampoline that waited there for the GIL deadlocked against any thread that
//! held the GIL inside such a call (CuPy and PyTorch launch with it held; cuda.core withdrew
//! its host callbacks for this). This thread runs the calls instead, attached to the
//! interpreter, and the stream waits on a flag (src/host/semaphores.rs) that the call raises
//! when it is done. A call queued on a stream is watched for: the GPU raises its "ready" flag
//! once the work before it is done, and this thread polls for that (no host function of the
//! driver's is involved, whose thread would hold back the rest of the stream: a round trip
//! costs a third of one). A host node of a graph posts its call here from the driver's thread,
//! which returns at once.
//!
//! Polling: the thread spins for `SPIN` after its last call, for a flag or for the next post;
//! then it naps, from `FIRST_NAP` doubling to `LAST_NAP`, while a watched call is not ready
//! (a new post wakes it at once), and sleeps while none is watched. A call ready while it
//! naps waits up to `LAST_NAP`.
//!
//! Exit: `_finalize` sets the finalizing flag, then waits (GIL released) for the jobs already
//! inside Python; every later job runs without Python (`None`): it raises its flag, so no
//! stream waits forever, and leaks its Python objects, which can no longer be released; a
//! watched call is then run so at once, ready or not. The count and the flag are
//! sequentially consistent: one side always sees the other.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::Python;

use crate::cpython::gil::{self, Resident};
use crate::driver::gate;
use crate::host::semaphores::{self, Flag};

/// A job: given the interpreter when Python may still be entered, `None` once it may not.
pub type Job = Box<dyn for<'py> FnOnce(Option<Python<'py>>) -> After + Send>;

/// What a job leaves for after the thread let the GIL go: raising the flag a stream waits
/// on. The thread that synchronizes that stream wants the GIL as soon as the stream moves
/// on; raised while this thread still holds it, the flag can send that thread to sleep on
/// the GIL for the rest of this thread's burst.
pub enum After {
    Nothing,
    /// Raise a one-shot call's flag, then give it back to its pool.
    Raise(Flag),
    /// Raise a host node's flag, which its graph keeps for the next launch.
    RaiseKept(semaphores::Raiser),
}

impl After {
    fn finish(self) {
        match self {
            After::Nothing => {}
            After::Raise(flag) => {
                flag.raise();
                semaphores::give_back_raised(flag);
            }
            After::RaiseKept(raiser) => raiser.raise(),
        }
    }
}

/// What a job leaves for, armed while the job runs: dropped without `disarm` (the job
/// panicked, a bug of ours) it is carried out at once, so the stream that waits on the flag
/// moves on instead of waiting forever: a failure fails open.
pub struct Armed(Option<After>);

impl Armed {
    pub fn new(after: After) -> Armed {
        Armed(Some(after))
    }

    /// The job ended: its `After`, for the thread to carry out once it let the GIL go.
    pub fn disarm(mut self) -> After {
        self.0.take().unwrap_or(After::Nothing)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(after) = self.0.take() {
            after.finish();
        }
    }
}

enum Post {
    /// Run as soon as the thread gets to it.
    Now(Job),
    /// Run once the GPU raised the flag.
    WhenRaised(Flag, Job),
}

/// The thread's queue, made with the thread on first use.
static QUEUE: Mutex<Option<Sender<Post>>> = Mutex::new(None);

/// Jobs inside Python now, or about to enter it.
static ENTERING: AtomicU32 = AtomicU32::new(0);

/// Queue `job` for custream's thread. Called on the driver's threads too: never waits for the
/// GIL (the lock is held only to push, or to start the thread once).
pub fn post(job: Job) {
    send(Post::Now(job));
}

/// Run `job` on custream's thread once `ready` is raised (by a stream's write, queued after
/// the call returns); `ready` is then free again.
pub fn post_when_raised(ready: Flag, job: Job) {
    send(Post::WhenRaised(ready, job));
}

fn send(post: Post) {
    let mut queue = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
    let post = match queue.as_ref() {
        None => post,
        Some(q) => match q.send(post) {
            Ok(()) => return,
            // The thread is gone (it never is, but a job must still run): start another.
            Err(failed) => failed.0,
        },
    };
    let (tx, rx) = channel();
    let started = std::thread::Builder::new()
        .name("custream-host".into())
        .spawn(move || Worker::default().work(rx));
    if started.is_err() {
        // No thread to be had: the job runs here without Python, so its flag is raised.
        drop(queue);
        match post {
            Post::Now(job) | Post::WhenRaised(_, job) => job(None).finish(),
        }
        return;
    }
    let _ = tx.send(post);
    *queue = Some(tx);
}

/// How long the thread spins after a call before it naps: a loop of launch and synchronize
/// posts the next call within tens of microseconds, and a thread woken from sleep costs
/// about as much again.
const SPIN: Duration = Duration::from_micros(100);
const FIRST_NAP: Duration = Duration::from_micros(10);
const LAST_NAP: Duration = Duration::from_micros(250);

#[derive(Default)]
struct Worker {
    /// Calls whose stream has not yet reached them, in the order they were posted.
    watched: Vec<(Flag, Job)>,
    /// Calls to run now, in order.
    due: Vec<Job>,
}

impl Worker {
    fn work(mut self, posts: Receiver<Post>) {
        let mut resident = Resident::new();
        let mut idle_since = Instant::now();
        let mut nap = FIRST_NAP;
        loop {
            if self.watched.is_empty() && self.due.is_empty() {
                // Nothing to poll for: spin for the next post as for a flag (the post of a
                // launch and synchronize loop would otherwise wake a sleeping thread each
                // time: that wake was half of a round trip), then sleep until one comes.
                let next = if idle_since.elapsed() < SPIN {
                    match posts.try_recv() {
                        Err(TryRecvError::Empty) => {
                            std::hint::spin_loop();
                            continue;
                        }
                        next => next.map_err(drop),
                    }
                } else {
                    posts.recv().map_err(drop)
                };
                match next {
                    Ok(post) => self.take(post),
                    Err(()) => return,
                }
            }
            loop {
                match posts.try_recv() {
                    Ok(post) => self.take(post),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            self.collect_ready();
            if self.due.is_empty() {
                if idle_since.elapsed() < SPIN {
                    std::hint::spin_loop();
                    continue;
                }
                match posts.recv_timeout(nap) {
                    Ok(post) => self.take(post),
                    Err(RecvTimeoutError::Timeout) => nap = (nap * 2).min(LAST_NAP),
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                continue;
            }
            run(&mut resident, std::mem::take(&mut self.due));
            idle_since = Instant::now();
            nap = FIRST_NAP;
        }
    }

    fn take(&mut self, post: Post) {
        match post {
            Post::Now(job) => self.due.push(job),
            Post::WhenRaised(ready, job) => self.watched.push((ready, job)),
        }
    }

    /// Move the watched calls whose flag is up (every one, once the interpreter finalizes:
    /// they are skipped, and their streams must not wait) to `due`, in order.
    fn collect_ready(&mut self) {
        let all = gate::is_finalizing();
        if !all && !self.watched.iter().any(|(ready, _)| ready.is_raised()) {
            return;
        }
        let mut waiting = Vec::with_capacity(self.watched.len());
        for (ready, job) in self.watched.drain(..) {
            if all || ready.is_raised() {
                semaphores::give_back(ready);
                self.due.push(job);
            } else {
                waiting.push((ready, job));
            }
        }
        self.watched = waiting;
    }
}

/// Run a burst of jobs in one attachment, or without Python once the interpreter finalizes.
/// Each job's flag is raised once the next job is done with Python, the last one's after
/// the GIL is let go (`After`).
fn run(resident: &mut Resident, burst: Vec<Job>) {
    ENTERING.fetch_add(1, Ordering::SeqCst);
    if gate::is_finalizing() {
        ENTERING.fetch_sub(1, Ordering::SeqCst);
        for job in burst {
            attempt(job, None).finish();
        }
        return;
    }
    let last = resident.enter(|py| {
        let mut last = After::Nothing;
        for job in burst {
            std::mem::replace(&mut last, attempt(job, Some(py))).finish();
        }
        last
    });
    ENTERING.fetch_sub(1, Ordering::SeqCst);
    if let Ok(last) = last {
        last.finish();
    }
}

/// A job run, a panic caught (a bug of ours, never a user's: the job's `Armed` raised its
/// flag while it unwound).
fn attempt(job: Job, py: Option<Python<'_>>) -> After {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(py))).unwrap_or(After::Nothing)
}

/// At exit (from `_finalize`, after the finalizing flag is set): wait, without the GIL,
/// for the jobs already inside Python to leave it.
pub fn wait_for_running(py: Python<'_>) {
    // Jobs run only where cuInit succeeded: a child forked while one ran in its parent
    // inherits the count, not the thread.
    if !gate::initialized_here() {
        return;
    }
    gil::wait_in_finalize(py, || ENTERING.load(Ordering::SeqCst) == 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word() -> &'static AtomicU32 {
        Box::leak(Box::new(AtomicU32::new(0)))
    }

    #[test]
    fn a_job_that_panics_still_raises_its_flag() {
        let w = word();
        let job: Job = Box::new(move |_| {
            let armed = Armed::new(After::RaiseKept(semaphores::Raiser::of(w)));
            if w.load(Ordering::Acquire) == 0 {
                panic!("a bug in a job");
            }
            armed.disarm()
        });
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let after = attempt(job, None);
        std::panic::set_hook(hook);
        assert!(matches!(after, After::Nothing));
        assert_eq!(
            w.load(Ordering::Acquire),
            1,
            "the stream waiting on the flag would hang"
        );
    }

    #[test]
    fn a_job_that_ends_leaves_its_flag_to_the_thread() {
        let w = word();
        let job: Job = Box::new(move |_| Armed::new(After::RaiseKept(semaphores::Raiser::of(w))).disarm());
        let after = attempt(job, None);
        assert_eq!(
            w.load(Ordering::Acquire),
            0,
            "raised after the GIL is let go, not before"
        );
        after.finish();
        assert_eq!(w.load(Ordering::Acquire), 1);
    }
}
