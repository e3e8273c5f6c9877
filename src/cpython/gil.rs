//! Letting the GIL go around a driver call, and never coming back into a finalizing
//! interpreter.
//!
//! CPython 3.10 to 3.13 end a thread that takes the GIL once finalization began with
//! `pthread_exit`: a forced unwind through every frame below `PyEval_RestoreThread`, ours
//! included. That unwind runs Rust drops (Python references released without the GIL) in a
//! process that is tearing the interpreter down, and in a library whose unwinder is not the
//! one glibc's `pthread_exit` uses it crashes outright (issue 22: the release wheel's
//! bundled unwinder read libgcc's frames). CPython 3.14 parks such threads instead; we do
//! the same on every version: a thread coming back from a driver call after `_finalize`
//! began never re-attaches, and `_finalize` waits until no thread is between "returned from
//! the driver" and "attached again" (those attach while it lets the GIL go, before the
//! interpreter finalizes).
//!
//! Every custream call that lets the GIL go goes through [`detach`] (clippy's
//! `disallowed-methods` keeps pyo3's `Python::detach` out of the rest of the crate).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::Python;

use crate::driver::gate;

thread_local! {
    /// Whether this thread is custream's own, with a `Resident` thread state.
    static RESIDENT: Cell<bool> = const { Cell::new(false) };
}

/// Threads that came back from `f` before finalization began and are re-attaching now.
static REATTACHING: AtomicUsize = AtomicUsize::new(0);

/// Run `f` with the GIL released, for a call that can block in the driver. Once `_finalize`
/// has begun, `f` runs with the GIL held (every driver call is refused by then, so nothing
/// blocks), and a thread whose `f` returns after it began is parked for good.
pub fn detach<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    if gate::is_finalizing() {
        return f();
    }
    #[allow(clippy::disallowed_methods)] // the one place that lets the GIL go
    let out = py.detach(move || {
        let out = f();
        // Sequentially consistent with `set_finalizing` and `drain`: either this thread
        // sees the flag and parks, or `drain` sees it counted and lets it attach first.
        REATTACHING.fetch_add(1, Ordering::SeqCst);
        // custream's own thread is waited for by `_finalize` while it is inside Python
        // (src/host/thread.rs), with the GIL released: it re-attaches before finalization, and
        // parking it would hang the exit.
        if gate::is_finalizing() && !RESIDENT.with(Cell::get) {
            REATTACHING.fetch_sub(1, Ordering::SeqCst);
            park_forever();
        }
        out
    });
    REATTACHING.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Python calls the GPU may be waiting for: host functions queued on streams and not yet run,
/// and graphs that hold host nodes. While there are any, [`brief`] lets the GIL go.
static AWAITED: AtomicUsize = AtomicUsize::new(0);

/// One Python call the GPU may be waiting for, counted while it lives.
pub struct Awaited(());

impl Awaited {
    pub fn new() -> Awaited {
        // Release: a thread that sees the launch this counts (its stream's work, an event
        // recorded after it) sees the count too, with or without a GIL between them.
        AWAITED.fetch_add(1, Ordering::Release);
        Awaited(())
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        AWAITED.fetch_sub(1, Ordering::Release);
    }
}

/// Whether a Python call the GPU may be waiting for exists (ordered after the launch that
/// counted it: `Awaited::new`).
pub fn python_awaited() -> bool {
    AWAITED.load(Ordering::Acquire) != 0
}

/// Run a brief driver call (a record, a wait, a query: it takes the driver's locks but never
/// waits for the GPU) with the GIL held, which is cheaper, unless the GPU may be waiting for
/// a Python call. Then it lets the GIL go: the holder of the driver's lock can be waiting for
/// the GPU (CuPy's `cuModuleLoadData` synchronizes the context), the GPU for the Python call,
/// and the call for the GIL (issue 23: a `cuEventRecord` made with the GIL held closed that
/// circle on an H200).
pub fn brief<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    if python_awaited() {
        detach(py, f)
    } else {
        f()
    }
}

/// Called by `_finalize` after `gate::set_finalizing`: let the threads already on their
/// way back in attach (they do so before the interpreter finalizes), with the GIL released.
pub fn drain(py: Python<'_>) {
    wait_in_finalize(py, || REATTACHING.load(Ordering::SeqCst) == 0);
}

/// For `_finalize` only: wait with the GIL released until `done()`. The finalizing thread
/// is never parked, so it may let the GIL go after the flag is set.
pub fn wait_in_finalize(py: Python<'_>, done: impl Send + Fn() -> bool) {
    if done() {
        return;
    }
    #[allow(clippy::disallowed_methods)]
    py.detach(move || {
        while !done() {
            std::thread::sleep(Duration::from_micros(100));
        }
    });
}

/// Install the fork handler once, when the extension module is initialized: in a forked
/// child only the forking thread exists, and it holds the GIL.
pub fn install_fork_handler() {
    extern "C" fn after_fork_in_child() {
        REATTACHING.store(0, Ordering::SeqCst);
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, safe in a forked child.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// What CPython 3.14 does to a thread that would attach to a finalizing interpreter: it
/// never returns, and the process exits around it.
fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// The Python thread state of a thread of custream's own (src/host/thread.rs), made on its first
/// entry into Python and kept for the thread's life: entering again is a GIL take, not a
/// thread state made and destroyed as `Python::attach` does on a thread Python does not know.
pub struct Resident {
    tstate: Option<std::ptr::NonNull<pyo3::ffi::PyThreadState>>,
}

// SAFETY: only ever used by the one thread that made it (src/host/thread.rs's worker owns it).
unsafe impl Send for Resident {}

impl Resident {
    pub const fn new() -> Resident {
        Resident { tstate: None }
    }

    /// Run `f` attached to the interpreter. The caller must have made sure that finalization
    /// cannot begin before this returns (host_thread's count of threads entering Python, which
    /// `_finalize` waits on): a thread that takes the GIL then is ended by CPython.
    ///
    /// A panic in `f` is caught and returned after the GIL is let go again.
    pub fn enter<R>(&mut self, f: impl FnOnce(Python<'_>) -> R) -> std::thread::Result<R> {
        match self.tstate {
            // SAFETY: our own thread state, detached by the SaveThread below.
            Some(t) => unsafe { pyo3::ffi::PyEval_RestoreThread(t.as_ptr()) },
            None => {
                RESIDENT.with(|r| r.set(true));
                // SAFETY: the interpreter is initialized (custream is imported) and not
                // finalizing (the caller's guarantee); never released, so the thread state
                // stays ours.
                let _ = unsafe { pyo3::ffi::PyGILState_Ensure() };
            }
        }
        // pyo3's own bookkeeping of the attachment, nested in ours (it finds the GIL held).
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Python::attach(f)));
        // SAFETY: this thread holds the GIL through its own thread state.
        self.tstate = std::ptr::NonNull::new(unsafe { pyo3::ffi::PyEval_SaveThread() });
        out
    }
}
