//! What an armed wait is told when its event is reached (src/waits/notifiers.rs gives it, on the
//! driver's thread): a thread's condition variable, an event loop's bell (an eventfd the loop
//! watches, `python/custream/_waits.py`), or a `concurrent.futures.Future` completed on
//! custream's own thread (src/host/thread.rs), which takes the GIL there. Giving one enters
//! no Python and makes no CUDA call.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

use crate::host;
use crate::host::thread::After;

/// A thread's wait: set by its notifier.
#[derive(Default)]
pub struct Done {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    pub fn set(&self) {
        *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_all();
    }

    /// Wait up to `slice`; whether it was set.
    pub fn wait(&self, slice: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        let (done, _) = self
            .cv
            .wait_timeout_while(done, slice, |d| !*d)
            .unwrap_or_else(PoisonError::into_inner);
        *done
    }
}

/// An event loop's bell: an eventfd the loop watches, and the tokens of the awaits that rang.
struct Bell {
    /// The eventfd, read and written through std's `File` (8 bytes a time).
    fd: File,
    rung: Mutex<Vec<u64>>,
}

impl Bell {
    fn ring(&self, token: u64) {
        let first = {
            let mut rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
            rung.push(token);
            rung.len() == 1
        };
        // Only the first token since the loop last took them writes: the rest of a burst (a
        // wave of kernels ending together) rides on that one wake-up instead of one loop turn
        // each. After the push: a loop that drains the fd and then takes the tokens sees this
        // token now or is woken again by this write; a later token pushed before the take is
        // taken with it, and one pushed after finds the list empty and writes.
        if first {
            let one = 1u64.to_ne_bytes();
            let _ = (&self.fd).write(&one);
        }
    }
}

/// The bit a token is rung with when its wait was abandoned (`Wake::abandon`): nothing will
/// ring for that await, so the loop asks the driver about its event instead. The loop's tokens
/// count up from 1 and never reach it.
const ORPHANED: u64 = 1 << 63;

/// An event loop's bell, for `python/custream/_waits.py`: ``fileno()`` for
/// ``loop.add_reader``, ``take()`` for the tokens of the awaits that rang since (a token
/// with ``ORPHANED`` set: that await's wait was abandoned).
#[pyclass(module = "custream", frozen, name = "_Bell")]
pub struct PyBell(Arc<Bell>);

#[pymethods]
impl PyBell {
    #[new]
    fn new() -> PyResult<PyBell> {
        // SAFETY: eventfd takes no pointers; a negative answer is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(PyBell(Arc::new(Bell {
            // SAFETY: a new descriptor that nothing else owns.
            fd: unsafe { File::from_raw_fd(fd) },
            rung: Mutex::new(Vec::new()),
        })))
    }

    #[classattr]
    const ORPHANED: u64 = ORPHANED;

    fn fileno(&self) -> i32 {
        self.0.fd.as_raw_fd()
    }

    /// The tokens rung since the last call (the eventfd drained first).
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut count = [0u8; 8];
        // Non-blocking: nothing to read (not rung) is an error, ignored.
        let _ = (&self.0.fd).read(&mut count);
        let rung = std::mem::take(&mut *self.0.rung.lock().unwrap_or_else(PoisonError::into_inner));
        PyList::new(py, rung)
    }
}

/// Who is told when the event is reached.
pub struct Wake(Kind);

enum Kind {
    Thread(Arc<Done>),
    Loop(Arc<Bell>, u64),
    /// A `concurrent.futures.Future`: completed on custream's thread, never the driver's.
    Future(Py<PyAny>),
}

impl Wake {
    /// Ring an event loop's bell with `token`.
    pub fn bell(bell: &PyBell, token: u64) -> Wake {
        Wake(Kind::Loop(bell.0.clone(), token))
    }

    /// Wake a thread waiting on `done`.
    pub fn thread(done: &Arc<Done>) -> Wake {
        Wake(Kind::Thread(done.clone()))
    }

    /// Complete `future` (a `concurrent.futures.Future`) on custream's thread.
    pub fn future(future: Py<PyAny>) -> Wake {
        Wake(Kind::Future(future))
    }

    /// Tell the waiter, on any thread (the driver's included): no Python, no CUDA call.
    pub fn give(self) {
        match self.0 {
            Kind::Thread(done) => done.set(),
            Kind::Loop(bell, token) => bell.ring(token),
            Kind::Future(future) => host::thread::post(Box::new(move |py| {
                match py {
                    Some(py) => complete(py, future),
                    // The interpreter is going: nothing may touch the object any more.
                    None => std::mem::forget(future),
                }
                After::Nothing
            })),
        }
    }

    /// Drop a signal that will never be given: attached (`py`), or without Python, where a
    /// future's reference is forgotten (the interpreter is going). An event loop's bell is
    /// rung with the token marked `ORPHANED`, and a future is marked orphaned in
    /// `custream._waits`: the loop, or the futures' watch, then asks the driver about that
    /// wait's event once a second, as nothing else will tell it.
    pub fn abandon(self, py: Option<Python<'_>>) {
        match (self.0, py) {
            (Kind::Future(future), None) => std::mem::forget(future),
            (Kind::Future(future), Some(py)) => orphan_future(py, future),
            (Kind::Loop(bell, token), _) => bell.ring(token | ORPHANED),
            (Kind::Thread(done), _) => drop(done),
        }
    }
}

/// Tell `custream._waits` that nothing will complete `future` but its watch's question.
fn orphan_future(py: Python<'_>, future: Py<PyAny>) {
    static ORPHANED_FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let marked = ORPHANED_FUTURE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("custream._waits")?.getattr("orphaned_future")?.unbind())
        })
        .and_then(|mark| mark.bind(py).call1((future,)));
    if let Err(e) = marked {
        // On custream's host thread, with no caller to raise to: shown as unraisable.
        e.write_unraisable(py, None);
    }
}

/// Complete a future unless it was cancelled meanwhile.
fn complete(py: Python<'_>, future: Py<PyAny>) {
    let future = future.bind(py);
    if !future.call_method0("done").and_then(|d| d.is_truthy()).unwrap_or(true) {
        // A cancel from another thread between the two calls makes this raise: ignored.
        let _ = future.call_method1("set_result", (py.None(),));
    }
}
