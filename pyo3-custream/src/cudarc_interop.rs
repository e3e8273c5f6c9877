//! cudarc (feature `cudarc`): a cudarc `CudaStream` handed to Python, a `StreamRef` as the
//! `CUstream` that cudarc's `driver::result` layer takes, and cudarc's failures as custream's
//! exceptions.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{sys::CUstream, CudaStream, DriverError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::handover::share;
use crate::stream::Stream;
use crate::stream_ref::StreamRef;

/// Python shares a cudarc stream: the returned `custream.Stream` holds a clone of the `Arc`
/// until it is closed or deallocated (see [`share`]); the device is the stream's context's
/// ordinal. When Python's clone is the last, closing the Stream runs cudarc's `Drop`, which
/// makes the stream's context current on that thread and destroys the stream.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use cudarc::driver::{CudaContext, CudaStream};
/// use pyo3::prelude::*;
/// use pyo3_custream::{from_cudarc, Stream};
///
/// #[pyfunction]
/// fn rust_stream(py: Python<'_>) -> PyResult<Stream> {
///     let err = |e: cudarc::driver::DriverError| pyo3::exceptions::PyRuntimeError::new_err(e.to_string());
///     let ctx = CudaContext::new(0).map_err(err)?;
///     let stream: Arc<CudaStream> = ctx.new_stream().map_err(err)?;
///     // ... queue Rust work on `stream` ...
///     from_cudarc(py, stream) // Python orders its own work after it, on the same stream
/// }
/// ```
pub fn from_cudarc(py: Python<'_>, stream: Arc<CudaStream>) -> PyResult<Stream> {
    let handle = StreamRef::from(stream.cu_stream());
    let device = i32::try_from(stream.context().ordinal())
        .map_err(|_| PyValueError::new_err("the cudarc stream's device ordinal does not fit an i32"))?;
    share(py, stream, handle, Some(device))
}

impl From<CUstream> for StreamRef {
    fn from(handle: CUstream) -> Self {
        StreamRef::from_raw(handle.cast())
    }
}

impl From<StreamRef> for CUstream {
    fn from(stream: StreamRef) -> Self {
        stream.as_cu_stream()
    }
}

impl StreamRef {
    /// The handle as cudarc's `CUstream`, for the `cudarc::driver::result` functions, which
    /// take one (`launch_kernel`, `memcpy_htod_async`, `memset_d8_async`, ...). Those run on
    /// the calling thread's current context: bind the stream's context first
    /// (`CudaContext::bind_to_thread`; PyTorch's and CuPy's streams live in the device's
    /// primary context, which `CudaContext::new(ordinal)` retains).
    pub fn as_cu_stream(self) -> CUstream {
        self.as_raw().cast()
    }
}

/// Run cudarc code from a `#[pyfunction]`, with its failures as custream's exceptions: a
/// [`DriverError`] is `custream.CudaError` (with `code`, `name` and `message`, as custream's
/// own), and a machine where cudarc finds no usable driver is `custream.CudaUnavailableError`,
/// raised before `f` runs, with no panic. cudarc loads `libcuda` on its first call and
/// panics when it finds none or the one it loads lacks an entry point (a driver older than
/// CUDA 12.0): that panic, raised while `f` runs, becomes `CudaUnavailableError` too, so none
/// reaches Python as a `PanicException`. A panic of `f`'s own (not cudarc's loader) unwinds
/// as it would without this function. Catching needs the default `panic = "unwind"`, which
/// pyo3 needs as well.
///
/// cudarc looks for the driver by its own list of names (`libcuda.so`, ..., `libcuda.so.1`) on
/// the library path; custream's `CUSTREAM_LIBCUDA` does not apply to it.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use cudarc::driver::{CudaContext, CudaStream};
/// use pyo3::prelude::*;
/// use pyo3_custream::{from_cudarc, with_cudarc, Stream};
///
/// #[pyfunction]
/// fn rust_stream(py: Python<'_>, device: usize) -> PyResult<Stream> {
///     // CudaUnavailableError without a driver, CudaError if the driver refuses
///     let stream: Arc<CudaStream> = with_cudarc(py, || CudaContext::new(device)?.new_stream())?;
///     from_cudarc(py, stream)
/// }
/// ```
pub fn with_cudarc<T>(py: Python<'_>, f: impl FnOnce() -> Result<T, DriverError>) -> PyResult<T> {
    crate::capi::api(py)?; // custream's ImportError first, as every entry of the crate
    if !driver_present() {
        let names = cudarc::get_lib_name_candidates("cuda").join(", ");
        return Err(unavailable(
            py,
            format!(
                "no CUDA driver: cudarc could not load libcuda (looked for {names}); install the NVIDIA \
                 driver, or put the directory holding it on the library path"
            ),
        ));
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(cuda_error(py, e)),
        Err(payload) => match loader_panic(payload.as_ref()) {
            Some(text) => Err(unavailable(
                py,
                format!(
                    "the CUDA driver cudarc loaded cannot be used ({text}): a driver for CUDA 12.0 or newer is needed"
                ),
            )),
            None => resume_unwind(payload),
        },
    }
}

/// Whether cudarc can load a driver: asked of cudarc once it has, then remembered. Asking
/// first keeps cudarc's own panic (and its message on stderr) for the rare driver that loads
/// but lacks an entry point.
fn driver_present() -> bool {
    static FOUND: AtomicBool = AtomicBool::new(false);
    if FOUND.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: it opens each candidate library by name and closes it again, as cudarc's own
    // loader does before it keeps one; loading libcuda runs no code of ours.
    let found = unsafe { cudarc::driver::sys::is_culib_present() };
    FOUND.store(found, Ordering::Relaxed);
    found
}

/// The text of a panic raised by cudarc's loader (no library, a missing entry point), or None
/// for any other panic.
fn loader_panic(payload: &(dyn Any + Send)) -> Option<String> {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())?;
    let ours = text.starts_with("Missing symbol ") || text.starts_with("Unable to dynamically load");
    ours.then_some(text)
}

fn custream_exception<'py>(py: Python<'py>, name: &str, text: String) -> PyResult<Bound<'py, PyAny>> {
    py.import("custream")?.getattr(name)?.call1((text,))
}

fn unavailable(py: Python<'_>, text: String) -> PyErr {
    match custream_exception(py, "CudaUnavailableError", text) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// custream.CudaError for a cudarc `DriverError`, worded as custream's own:
/// `NAME (code): the driver's description`.
fn cuda_error(py: Python<'_>, e: DriverError) -> PyErr {
    let name = format!("{:?}", e.0);
    let code = e.0 as i32;
    // The driver describes its codes; a driver without cuGetErrorString makes cudarc panic.
    let message = catch_unwind(|| e.error_string().ok().map(|s| s.to_string_lossy().into_owned()))
        .ok()
        .flatten()
        .unwrap_or_else(|| "no description from the driver".to_string());
    let made = || -> PyResult<PyErr> {
        let exc = custream_exception(py, "CudaError", format!("{name} ({code}): {message}"))?;
        exc.setattr("code", code)?;
        exc.setattr("name", name.as_str())?;
        exc.setattr("message", message.as_str())?;
        Ok(PyErr::from_value(exc))
    };
    made().unwrap_or_else(|e| e)
}
