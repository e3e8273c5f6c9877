//! `Stream`: one owned reference to a Python `custream.Stream`, and `current_stream`.

use std::convert::Infallible;
use std::ffi::c_int;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::Borrowed;

use crate::capi::{api, Fields};
use crate::ffi::{self, CUSTREAM_DEVICE_UNKNOWN};
use crate::stream_ref::{as_stream, type_name, StreamRef};

/// One reference to a Python `custream.Stream`, owned by Rust: what custream.hpp's
/// `custream::stream` is in C++.
///
/// As a `#[pyfunction]` argument it is `custream.as_stream(obj)`: a Stream as it is, or for
/// any object with `__cuda_stream__` a Stream that borrows its handle and keeps the object
/// alive. Returned to Python it is that Stream itself. Holding one keeps the stream alive:
/// keep it in a struct, move it to another thread, drop it anywhere. Dropping it on a thread
/// that is not attached to Python (no GIL) is sound: pyo3 defers the reference's release to
/// the next time a thread attaches, and leaks it if the interpreter is gone.
///
/// ```no_run
/// use pyo3::prelude::*;
/// use pyo3_custream::Stream;
///
/// struct Worker {
///     stream: Stream, // keeps the Python stream open and alive
/// }
///
/// #[pyfunction]
/// fn start(stream: Stream) -> PyResult<()> {
///     let worker = Worker { stream };
///     std::thread::spawn(move || {
///         let handle = worker.stream.handle(); // one load, no GIL
///         let _ = handle; // ... queue work on it ...
///         drop(worker); // no GIL here: sound
///     });
///     Ok(())
/// }
/// ```
pub struct Stream(Py<PyAny>);

/// The release function `Stream::release_after` hands custream: the boxed closure, run once,
/// a panic caught (it must not unwind into custream's thread).
unsafe extern "C" fn call_release(ctx: *mut std::ffi::c_void) {
    // SAFETY: `ctx` is the box `release_after` leaked, and custream calls this once.
    let release = unsafe { Box::from_raw(ctx.cast::<Box<dyn FnOnce() + Send>>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(release));
}

impl Stream {
    /// Take over `obj` if it is a custream.Stream; a TypeError otherwise (use
    /// `obj.extract::<Stream>()` to wrap a protocol object as well).
    pub fn from_bound(obj: Bound<'_, PyAny>) -> PyResult<Self> {
        if api(obj.py())?.is_stream(&obj) {
            Ok(Stream(obj.unbind()))
        } else {
            Err(PyTypeError::new_err(format!(
                "expected a custream.Stream, got {}",
                type_name(&obj)
            )))
        }
    }

    /// A new custream.Stream that borrows `handle`, as Python's
    /// `custream.Stream.from_handle(handle, owner=owner, device=device)`: `owner`, if given, is
    /// kept alive until the Stream is closed or deallocated; the handle is never destroyed by
    /// custream. The caller keeps the handle valid for as long (through `owner`, say).
    /// `device` is the stream's device ordinal, if known; a default-stream token takes none.
    pub fn from_handle(
        py: Python<'_>,
        handle: StreamRef,
        device: Option<i32>,
        owner: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let device = device_arg(device)?;
        let owner = owner.map(|o| o.into_bound(py));
        let obj = api(py)?.wrap_handle(py, handle.as_handle(), device, owner.as_ref())?;
        Ok(Stream(obj.unbind()))
    }

    fn fields(&self) -> Fields {
        // SAFETY: self.0 is a custream.Stream (every constructor checks or is given one by
        // custream), alive while self holds its reference, and the Fields do not outlive
        // the borrow of self they are made under.
        unsafe { Fields::of(self.0.as_ptr()) }
    }

    /// The handle: one load, no check, no GIL needed. After `close()` it may name a destroyed
    /// stream: [`is_closed`](Self::is_closed) says so, and [`StreamRef`]'s extraction refuses a
    /// closed Stream.
    pub fn handle(&self) -> StreamRef {
        self.fields().handle().into()
    }

    /// The device ordinal, once custream knows it (given when wrapping, or learnt at first
    /// use); `None` before, and always for the default-stream tokens. One atomic load, no GIL.
    pub fn device(&self) -> Option<i32> {
        self.fields().device()
    }

    /// The device ordinal, asked of the driver if custream does not know it yet (once per
    /// Stream; cuStreamGetDevice where the driver has it, else the stream's context), never by
    /// changing the calling thread's current context: Python's `Stream.device`. A closed
    /// Stream is a ValueError.
    pub fn resolve_device(&self, py: Python<'_>) -> PyResult<i32> {
        api(py)?.stream_device(self.0.bind(py))
    }

    /// The driver's id of the stream (cuStreamGetId; CCCL's `stream_ref::id()`): unique in the
    /// process while the stream lives, the same for every Stream over one handle; asked of the
    /// driver once per Stream. Python's `Stream.id`. A closed Stream is a ValueError.
    pub fn id(&self, py: Python<'_>) -> PyResult<u64> {
        api(py)?.stream_id(self.0.bind(py))
    }

    /// Whether `close()` was called: one atomic load, no GIL.
    pub fn is_closed(&self) -> bool {
        self.fields().is_closed()
    }

    /// Wait for the stream's work; custream lets the GIL go while it waits. A closed stream is
    /// a ValueError; custream's `CudaError` or `CudaUnavailableError` otherwise.
    pub fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        api(py)?.synchronize(self.0.bind(py))
    }

    /// Wait at most `timeout` for the stream's work (`None`: no limit), with the GIL let go;
    /// Python's `TimeoutError` when it gives up (the stream and its work untouched). On the
    /// main thread a signal's handler (Ctrl-C) ends the wait with its exception.
    ///
    /// ```
    /// # use pyo3::prelude::*;
    /// # fn demo(py: Python<'_>, s: &pyo3_custream::Stream) -> PyResult<()> {
    /// match s.synchronize_timeout(py, Some(std::time::Duration::from_millis(250))) {
    ///     Err(e) if e.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py) => { /* still busy */ }
    ///     other => other?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn synchronize_timeout(&self, py: Python<'_>, timeout: Option<std::time::Duration>) -> PyResult<()> {
        let seconds = timeout.map_or(f64::INFINITY, |t| t.as_secs_f64());
        api(py)?.synchronize_timeout(self.0.bind(py), seconds)
    }

    /// `Stream.write_value(address, value, width=width, flush=flush)`: queue a write of the
    /// `width`-bit (32 or 64) `value` to the GPU address `address` once the work queued before
    /// it is done (`cuStreamWriteValue32/64_v2`; with `flush`, the remote writes that reached
    /// the device are flushed first, where it can). custream checks the width, the value's
    /// range, the alignment and what the driver knows of the address before anything is queued
    /// (a ValueError names what is wrong).
    ///
    /// ```no_run
    /// use pyo3::prelude::*;
    /// use pyo3_custream::{Stream, WaitOp};
    ///
    /// /// Release a counter another process's stream waits on, after this stream's work.
    /// #[pyfunction]
    /// fn release(py: Python<'_>, stream: Stream, counter: u64, n: u64) -> PyResult<()> {
    ///     stream.write_value(py, counter, n, 64, false)
    /// }
    ///
    /// /// Hold this stream's later work until the counter reaches `n`.
    /// #[pyfunction]
    /// fn acquire(py: Python<'_>, stream: Stream, counter: u64, n: u64) -> PyResult<()> {
    ///     stream.wait_value(py, counter, n, 64, WaitOp::Geq, false)
    /// }
    /// ```
    pub fn write_value(&self, py: Python<'_>, address: u64, value: u64, width: u32, flush: bool) -> PyResult<()> {
        api(py)?.write_value(self.0.bind(py), address, value, width_arg(width), flush)
    }

    /// `Stream.keep_alive()` for Rust: `release()` runs once the work queued on the stream so
    /// far is done, on custream's own thread (never the driver's), with no synchronization:
    /// free what the queued work reads (a buffer moved into the closure) in stream order. In a
    /// capture it runs once the graph and its executables are destroyed. It runs exactly once,
    /// on an error too (custream's thread gets it at once); it must make no CUDA call and not
    /// wait for the GIL (it may run after the interpreter finalized). A panic in it is caught
    /// there and goes no further.
    ///
    /// ```no_run
    /// use pyo3::prelude::*;
    /// use pyo3_custream::Stream;
    ///
    /// /// Queue work that reads `staging`, and free it once the stream is past that work.
    /// #[pyfunction]
    /// fn upload(py: Python<'_>, stream: Stream, staging: Vec<u8>) -> PyResult<()> {
    ///     // ... queue a copy from `staging` on `stream` ...
    ///     stream.release_after(py, Box::new(move || drop(staging)))
    /// }
    /// ```
    pub fn release_after(&self, py: Python<'_>, release: Box<dyn FnOnce() + Send>) -> PyResult<()> {
        let ctx = Box::into_raw(Box::new(release)).cast::<std::ffi::c_void>();
        // SAFETY: `call_release` takes the box once; custream calls it exactly once, on any
        // thread, and the closure is Send.
        unsafe { api(py)?.release_after(self.0.bind(py), call_release, ctx) }
    }

    /// `Stream.wait_value(address, value, width=, op=, flush=)`: the work queued after this
    /// waits until the word at `address` meets `op` against `value`
    /// (`cuStreamWaitValue32/64_v2`); the caller does not wait. Checked as
    /// [`write_value`](Self::write_value) is.
    pub fn wait_value(
        &self,
        py: Python<'_>,
        address: u64,
        value: u64,
        width: u32,
        op: WaitOp,
        flush: bool,
    ) -> PyResult<()> {
        api(py)?.wait_value(self.0.bind(py), address, value, width_arg(width), op as c_int, flush)
    }

    /// `Stream.close()`: idempotent and thread-safe; the first close releases what the Stream
    /// holds (its owner, or a release given to [`to_python`](crate::to_python)).
    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.0.bind(py).call_method0(PyString::intern(py, "close"))?;
        Ok(())
    }

    /// Another reference to the same Python Stream.
    pub fn clone_ref(&self, py: Python<'_>) -> Self {
        Stream(self.0.clone_ref(py))
    }

    /// The Python object.
    pub fn as_py(&self) -> &Py<PyAny> {
        &self.0
    }

    /// The Python object, bound to `py`.
    pub fn bind<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.0.bind(py)
    }

    /// The reference, given to the caller.
    pub fn into_py_any(self) -> Py<PyAny> {
        self.0
    }
}

/// A width as the C API takes it: one custream refuses stays one (never a wrapped value).
fn width_arg(width: u32) -> c_int {
    c_int::try_from(width).unwrap_or(c_int::MAX)
}

/// The condition of [`Stream::wait_value`] (custream.h's `CUSTREAM_WAIT_*`, CUDA's
/// `CUstreamWaitValue_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WaitOp {
    /// `(int)(*addr - value) >= 0`: a greater-or-equal that survives the counter wrapping.
    Geq = ffi::CUSTREAM_WAIT_GEQ as isize,
    /// `*addr == value`.
    Eq = ffi::CUSTREAM_WAIT_EQ as isize,
    /// `(*addr & value) != 0`.
    And = ffi::CUSTREAM_WAIT_AND as isize,
    /// `~(*addr | value) != 0`, where the device supports it.
    Nor = ffi::CUSTREAM_WAIT_NOR as isize,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("handle", &self.handle())
            .field("device", &self.device())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A device argument as the C API takes it.
pub(crate) fn device_arg(device: Option<i32>) -> PyResult<i32> {
    match device {
        None => Ok(CUSTREAM_DEVICE_UNKNOWN),
        Some(d) if d >= 0 => Ok(d),
        Some(d) => Err(PyValueError::new_err(format!(
            "device must be a device ordinal (0 or more) or None, got {d}"
        ))),
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Stream {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Stream(as_stream(&obj)?.unbind()))
    }
}

impl<'py> IntoPyObject<'py> for Stream {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0.into_bound(py))
    }
}

impl<'a, 'py> IntoPyObject<'py> for &'a Stream {
    type Target = PyAny;
    type Output = Borrowed<'a, 'py, PyAny>;
    type Error = Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0.bind_borrowed(py))
    }
}

/// The stream `stream=None` means: the innermost `with s:` block's stream in this thread or
/// asyncio task, else the default stream (`custream.current_stream()`).
///
/// ```no_run
/// use pyo3::prelude::*;
/// use pyo3_custream::{current_stream, StreamRef};
///
/// #[pyfunction]
/// #[pyo3(signature = (stream=None))]
/// fn launch(py: Python<'_>, stream: Option<StreamRef>) -> PyResult<usize> {
///     let stream = match stream {
///         Some(s) => s,
///         None => current_stream(py)?.handle(), // the Stream is custream's: it stays open
///     };
///     Ok(stream.as_usize())
/// }
/// ```
pub fn current_stream(py: Python<'_>) -> PyResult<Stream> {
    Ok(Stream(api(py)?.current_stream(py)?.unbind()))
}
