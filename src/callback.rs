//! Host callbacks: `Stream.launch_host_func(fn, *args)` runs `fn(*args)` on a thread of the
//! driver's once the work queued before it on the stream is done (`cuLaunchHostFunc`), and
//! the C face queues a C function with no Python involved.
//!
//! A Python call is a boxed `Payload` handed to the driver as the `void *` of a trampoline.
//! The rules the trampolines keep:
//! - The function and its arguments stay alive until the call ran, and are released after
//!   it, on that thread, with the GIL; an exception goes to `sys.unraisablehook` with the
//!   stream named, never further.
//! - A call that can no longer run in Python (the interpreter finalizes, or this is a forked
//!   child) is dropped, and its objects are leaked, never touched: once finalization began a
//!   thread that takes the GIL is ended or hung by CPython, and the driver's would be.
//! - At exit, `_finalize` (atexit) waits, with the GIL released, for the calls already inside
//!   Python; every later one sees the finalizing flag and is dropped (a sequentially
//!   consistent flag and count: one side always sees the other).
//! - While one runs, the thread is marked as inside a host function: every custream call
//!   there refuses (`driver::init`), and a release it would make is deferred.
//! - In a capture the call becomes a host node that runs at every launch of the graph: its
//!   payload is then owned by a CUDA user object, destroyed with the graph's last executable
//!   and its last launch (src/graph.rs hands it to the graph).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::boundary::no_unwind;
use crate::driver::{self, CaptureStatus, StreamHandle};
use crate::gil;
use crate::graph;
use crate::libcuda::{self, HostFunctionScope};
use crate::lifecycle;
use crate::stream::StreamRef;

/// A Python call queued on a stream.
struct Payload {
    function: Py<PyAny>,
    args: Py<PyTuple>,
    /// The stream's handle and device, to name it when the call raises.
    stream: u64,
    device: Option<i32>,
    generation: u32,
}

impl Payload {
    /// Call it; an exception goes to `sys.unraisablehook`, naming the call and the stream.
    fn run(&self, py: Python<'_>) {
        if let Err(err) = self.function.bind(py).call1(self.args.bind(py)) {
            let about = HostFunction {
                function: self.function.clone_ref(py),
                args: self.args.clone_ref(py),
                stream: self.stream,
                device: self.device,
            };
            match Bound::new(py, about) {
                Ok(about) => err.write_unraisable(py, Some(about.as_any())),
                Err(_) => err.write_unraisable(py, None),
            }
        }
    }
}

/// The object `sys.unraisablehook` gets for an exception raised by a host function: its
/// repr names the function and the stream; ``function``, ``args`` and ``stream`` (the
/// handle, an int) are attributes.
#[pyclass(module = "custream", frozen)]
pub struct HostFunction {
    #[pyo3(get)]
    function: Py<PyAny>,
    #[pyo3(get)]
    args: Py<PyTuple>,
    #[pyo3(get)]
    stream: u64,
    device: Option<i32>,
}

#[pymethods]
impl HostFunction {
    fn __repr__(&self, py: Python<'_>) -> String {
        let function = self
            .function
            .bind(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "<function>".into());
        let device = self.device.map(|d| format!(" device={d}")).unwrap_or_default();
        format!(
            "<custream host function {function} launched on custream.Stream handle={:#x}{device}>",
            self.stream
        )
    }
}

/// Host functions inside Python now (or about to enter it).
static ENTERING: AtomicU32 = AtomicU32::new(0);

/// Run `f(py, value)` attached to the interpreter and marked as inside a host function, or
/// leak `value` when Python may no longer be touched. Never unwinds: it runs on a thread of
/// the driver's.
fn in_python<T>(generation: u32, value: T, f: impl FnOnce(Python<'_>, T)) {
    let mut value = Some(value);
    if lifecycle::may_release(generation) {
        ENTERING.fetch_add(1, Ordering::SeqCst);
        if !libcuda::is_finalizing() {
            no_unwind(|| {
                let _ = Python::try_attach(|py| {
                    let _inside = HostFunctionScope::enter();
                    if let Some(v) = value.take() {
                        f(py, v);
                    }
                });
            });
        }
        ENTERING.fetch_sub(1, Ordering::SeqCst);
    }
    // Not run: its Python objects cannot be released without the interpreter.
    std::mem::forget(value);
}

/// The trampoline of a call queued outside a capture: runs once, and owns its payload.
unsafe extern "C" fn run_once(user: *mut c_void) {
    // SAFETY: `launch` handed the driver this box, and the driver calls this once.
    let payload = unsafe { Box::from_raw(user.cast::<Payload>()) };
    let generation = payload.generation;
    in_python(generation, payload, |py, p| {
        p.run(py);
        drop(p);
    });
}

/// The trampoline of a host node (a call queued during a capture): runs at each launch.
unsafe extern "C" fn run_in_graph(user: *mut c_void) {
    // SAFETY: the payload is owned by a user object that the graph holds, which the driver
    // destroys only after the graph's last launch ran.
    let payload = unsafe { &*user.cast::<Payload>() };
    in_python(payload.generation, (), |py, ()| payload.run(py));
}

/// The destructor of a host node's user object.
unsafe extern "C" fn release_graph_payload(user: *mut c_void) {
    // SAFETY: the user object owned this box; the driver calls its destructor once.
    let payload = unsafe { Box::from_raw(user.cast::<Payload>()) };
    let generation = payload.generation;
    in_python(generation, payload, |_, p| drop(p));
}

/// A pointer handed to the driver from a thread without the GIL.
struct SendPtr(*mut c_void);
// SAFETY: the pointee is only touched by the trampolines, which take the GIL first.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so a closure captures the whole `SendPtr`, not its field).
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// `s.launch_host_func(fn, *args)`.
pub fn launch(py: Python<'_>, stream: StreamRef, function: Bound<'_, PyAny>, args: Bound<'_, PyTuple>) -> PyResult<()> {
    if !function.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "launch_host_func() fn must be callable, got {}",
            function.get_type().name()?
        )));
    }
    let payload = Box::new(Payload {
        function: function.unbind(),
        args: args.unbind(),
        stream: stream.handle_value(),
        device: stream.known_device(),
        generation: libcuda::fork_generation(),
    });
    stream.use_handle(py, "launch_host_func()", |h| {
        // A capture replays the call at every launch of its graph: the payload must outlive
        // them all, so it cannot be the one the call owns.
        match driver::stream_capture_status(h)? {
            CaptureStatus::Active => launch_in_capture(py, h, payload),
            CaptureStatus::None | CaptureStatus::Invalidated => {
                let user = SendPtr(Box::into_raw(payload).cast());
                let raw = user.0;
                // Without the GIL: a full queue makes the driver wait for earlier host
                // functions, which need it.
                // SAFETY: run_once takes the box once, on the driver's thread.
                let launched = gil::detach(py, move || unsafe { driver::launch_host_func(h, run_once, user.get()) });
                if launched.is_err() {
                    // SAFETY: the driver did not take it; the box is still ours.
                    drop(unsafe { Box::from_raw(raw.cast::<Payload>()) });
                }
                launched
            }
        }
    })
}

fn launch_in_capture(py: Python<'_>, h: StreamHandle, payload: Box<Payload>) -> driver::Result<()> {
    let raw: *mut c_void = Box::into_raw(payload).cast();
    // SAFETY: release_graph_payload takes the box once, when the last reference is gone.
    let owner = match unsafe { driver::user_object_create(raw, release_graph_payload) } {
        Ok(owner) => owner,
        Err(e) => {
            // SAFETY: no user object took it; the box is still ours.
            drop(unsafe { Box::from_raw(raw.cast::<Payload>()) });
            return Err(e);
        }
    };
    let user = SendPtr(raw);
    // SAFETY: the payload lives until the user object's destructor, after every launch.
    let launched = gil::detach(py, move || unsafe {
        driver::launch_host_func(h, run_in_graph, user.get())
    });
    match launched {
        Ok(()) => {
            graph::keep_until_captured(h, owner);
            Ok(())
        }
        Err(e) => {
            // Our reference was the only one: the payload is released (we hold the GIL).
            let _ = driver::user_object_release(owner);
            Err(e)
        }
    }
}

/// The C face: queue `f(user)` on the stream, the driver call made without the GIL.
pub fn launch_c(
    py: Python<'_>,
    stream: StreamRef,
    f: unsafe extern "C" fn(*mut c_void),
    user: *mut c_void,
) -> PyResult<()> {
    let user = SendPtr(user);
    stream.use_handle(py, "launch_host_func()", |h| {
        // SAFETY: the C caller's contract (custream.h): `f(user)` is safe on any thread.
        gil::detach(py, move || unsafe { driver::launch_host_func(h, f, user.get()) })
    })
}

/// At exit (from `_finalize`, after the finalizing flag is set): wait, without the GIL,
/// for the host functions already inside Python to leave it.
pub fn wait_for_running(py: Python<'_>) {
    // Host functions run only where cuInit succeeded: a child forked while one ran in its
    // parent inherits the count, not the thread.
    if ENTERING.load(Ordering::SeqCst) == 0 || !libcuda::initialized_here() {
        return;
    }
    gil::wait_in_finalize(py, || ENTERING.load(Ordering::SeqCst) == 0);
}
