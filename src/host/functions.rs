//! Host callbacks: `Stream.launch_host_func(fn, *args)` runs `fn(*args)` once the work
//! queued before it on the stream is done, and the C face queues a C function with no Python
//! involved (`cuLaunchHostFunc`, run directly on the driver's thread).
//!
//! A Python call never runs on the driver's thread, which must not wait for the GIL
//! (src/host/thread.rs says why): custream's thread runs it. On a stream, three memory operations
//! in one driver call: a write that raises the call's "ready" flag once the work before it is
//! done (custream's thread watches for it), a wait until the call's "done" flag is raised
//! (src/host/semaphores.rs), and that flag's lowering. In a capture, a host node (a trampoline that
//! posts the call to custream's thread and returns) and the wait and the lowering, as nodes:
//! a flag a graph raised at each launch could not be watched for without polling for the
//! graph's whole life. The rules the calls keep:
//! - The function and its arguments stay alive until the call ran, and are released after
//!   it, on custream's thread, with the GIL; then the flag is raised. An exception goes to
//!   `sys.unraisablehook` with the stream named, never further.
//! - A call that can no longer run in Python (the interpreter finalizes, or this is a forked
//!   child) is skipped and its objects leaked, never touched; its flag is raised all the same,
//!   so the stream goes on.
//! - While one runs, the thread is marked as inside a host function: every custream call
//!   there refuses (`driver::init`; the stream it would wait on waits for the call), and a
//!   release it would make is deferred.
//! - In a capture the host node, the wait and the lowering run at every launch of the graph:
//!   the call and its flag are then owned by a CUDA user object, destroyed with the graph's last
//!   executable and its last launch (src/graph.rs hands it to the graph).

use std::ffi::c_void;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::cpython::gil;
use crate::cpython::stream_object::StreamObject;
use crate::driver::capture_guard;
use crate::driver::gate::{self, HostFunctionScope};
use crate::driver::{self, CaptureStatus, StreamHandle};
use crate::host::queue_depth::{self, Gil};
use crate::host::semaphores::{self, Flag};
use crate::host::thread::{self, After};
use crate::object::lifecycle;

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
    pub function: Py<PyAny>,
    #[pyo3(get)]
    pub args: Py<PyTuple>,
    #[pyo3(get)]
    pub stream: u64,
    pub device: Option<i32>,
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

/// What a queued call owns: the Python call and the flag its stream waits on, counted as a
/// call the GPU may wait for until it is dropped (after its last run).
struct Call {
    payload: Payload,
    flag: Flag,
    _awaited: gil::Awaited,
}

impl Call {
    /// Run the call (or, without Python, skip it and leak its objects); its flag is raised
    /// after. On custream's thread.
    fn run_once(self, py: Option<Python<'_>>) -> thread::After {
        let Call { payload, flag, .. } = self;
        let armed = thread::Armed::new(thread::After::Raise(flag));
        match py.filter(|_| lifecycle::may_release(payload.generation)) {
            Some(py) => {
                let _inside = HostFunctionScope::enter();
                payload.run(py);
                drop(payload);
            }
            None => std::mem::forget(payload),
        }
        armed.disarm()
    }
}

/// The trampoline of a host node (a call queued during a capture): runs at each launch.
unsafe extern "C" fn run_in_graph(user: *mut c_void) {
    let node = CallPtr(user);
    // SAFETY: the call is owned by a user object that the graph holds, which the driver
    // destroys only after the graph's last launch ran, and a launch runs only once the flag
    // this raises is up: the call outlives every use below.
    let call = unsafe { &*node.get().cast::<Call>() };
    if gate::is_finalizing() {
        call.flag.raise();
        return;
    }
    thread::post(Box::new(move |py| {
        // SAFETY: as above; `node` is the same pointer.
        let call = unsafe { &*node.get().cast::<Call>() };
        let armed = thread::Armed::new(thread::After::RaiseKept(call.flag.raiser()));
        if let Some(py) = py.filter(|_| lifecycle::may_release(call.payload.generation)) {
            let _inside = HostFunctionScope::enter();
            call.payload.run(py);
        }
        armed.disarm()
    }));
}

/// A host node's call, owned by its user object.
impl driver::UserObjectData for Call {
    /// The user object's last reference is gone: after the graph's last launch, so the flag
    /// was lowered for good.
    fn release(self: Box<Self>) {
        thread::post(Box::new(move |py| {
            let Call { payload, flag, .. } = *self;
            match py.filter(|_| lifecycle::may_release(payload.generation)) {
                Some(_) => drop(payload),
                None => std::mem::forget(payload),
            }
            semaphores::give_back(flag);
            thread::After::Nothing
        }));
    }
}

/// A `Call`'s address, handed to the driver and to custream's thread.
#[derive(Clone, Copy)]
struct CallPtr(*mut c_void);
// SAFETY: the pointee is a `Call`, only read (its flag is atomic) by the trampolines and by
// custream's thread, which touches its Python objects only attached to the interpreter.
unsafe impl Send for CallPtr {}

impl CallPtr {
    /// The pointer (a method, so a closure captures the whole `CallPtr`, not its field).
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// A C caller's `user` pointer for `Custream_LaunchHostFunc`, opaque to us.
#[derive(Clone, Copy)]
struct CUser(*mut c_void);
// SAFETY: we never dereference it; custream.h's contract for the C entry makes the caller
// promise that `fn(user)` may run on any thread (a driver thread runs it), so the pointer may
// go to another thread, which is all this lets it do.
unsafe impl Send for CUser {}

impl CUser {
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// `s.launch_host_func(fn, *args)`.
pub fn launch(
    py: Python<'_>,
    stream: StreamObject<'_>,
    function: Bound<'_, PyAny>,
    args: Bound<'_, PyTuple>,
) -> PyResult<()> {
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
        generation: gate::fork_generation(),
    });
    stream.use_handle_py(py, "launch_host_func()", |h| {
        // Asked before the call is made, so that no error leaves it behind.
        let (capturing, context, context_id) = gil::brief(py, move || -> driver::Result<_> {
            let capturing = driver::stream_capture_status(h)? == CaptureStatus::Active;
            let context = driver::stream_context(h)?;
            Ok((capturing, context, driver::context_id(context)?))
        })?;
        let done = semaphores::take(py, context, context_id)?;
        let call = Box::new(Call {
            payload: *payload,
            flag: done,
            _awaited: gil::Awaited::new(),
        });
        // A capture replays the call at every launch of its graph: the call must outlive
        // them all, so a user object that the graph holds owns it.
        if capturing {
            return Ok(launch_in_capture(py, h, call)?);
        }
        let ready = match semaphores::take(py, context, context_id) {
            Ok(ready) => ready,
            Err(e) => {
                semaphores::give_back(call.flag);
                return Err(e.into());
            }
        };
        let (ready_word, done_word) = (ready.device_address(), call.flag.device_address());
        // Without the GIL: the driver call can wait for room in the stream's queue. The call is
        // handed to custream's thread here too, so that a thread parked at exit
        // (src/cpython/gil.rs) never leaves the stream waiting for a call nobody watches. The
        // launch may outlive this caller (src/host/queue_depth.rs): a failed one leaves its
        // call to custream's thread.
        queue_depth::run(
            py,
            stream,
            h,
            Gil::Detached,
            |_| true,
            move || {
                match driver::stream_hand_off(h, ready_word, done_word) {
                    Ok(()) => {
                        thread::post_when_raised(ready, Box::new(move |py| call.run_once(py)));
                        Ok(())
                    }
                    Err(e) => {
                        thread::post(Box::new(move |py| {
                            let Call { payload, flag, .. } = *call;
                            match py {
                                Some(_) => drop(payload),
                                // Python is gone: its objects can no longer be released.
                                None => std::mem::forget(payload),
                            }
                            semaphores::give_back(flag);
                            semaphores::give_back(ready);
                            After::Nothing
                        }));
                        Err(e)
                    }
                }
            },
        )
    })
}

/// Queue the wait for the call's flag, then its lowering.
fn hold_until_raised(h: StreamHandle, word: u64) -> driver::Result<()> {
    driver::stream_wait_value32(h, word, 1)?;
    driver::stream_write_value32(h, word, 0)
}

fn launch_in_capture(py: Python<'_>, h: StreamHandle, call: Box<Call>) -> driver::Result<()> {
    let word = call.flag.device_address();
    let (owner, call) = match driver::user_object_owning(call) {
        Ok(made) => made,
        Err((e, call)) => {
            // No user object took it.
            let Call { payload, flag, .. } = *call;
            drop(payload);
            semaphores::give_back(flag);
            return Err(e);
        }
    };
    let user = CallPtr(call.as_ptr().cast());
    // SAFETY: the call lives until the user object's destructor, after every launch.
    let launched = gil::detach(py, move || unsafe {
        driver::launch_host_func(h, run_in_graph, user.get())
    });
    if let Err(e) = launched {
        // Our reference was the only one: the call is released on custream's thread.
        let _ = driver::user_object_release(owner);
        return Err(e);
    }
    // The host node is in the graph: its call must live as long as the graph does.
    capture_guard::keep_until_captured(h, owner);
    gil::detach(py, move || hold_until_raised(h, word))
}

/// The C face: queue `f(user)` on the stream, the driver call made without the GIL.
pub fn launch_c(
    py: Python<'_>,
    stream: StreamObject<'_>,
    f: unsafe extern "C" fn(*mut c_void),
    user: *mut c_void,
) -> PyResult<()> {
    let user = CUser(user);
    stream.use_handle_py(py, "launch_host_func()", |h| {
        queue_depth::run(
            py,
            stream,
            h,
            Gil::Detached,
            |_| true,
            move || {
                // SAFETY: the C caller's contract (custream.h): `f(user)` is safe on any thread.
                unsafe { driver::launch_host_func(h, f, user.get()) }
            },
        )
    })
}
