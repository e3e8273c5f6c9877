//! cudarc (feature `cudarc`): a cudarc `CudaStream` handed to Python, and a `StreamRef` as
//! the `CUstream` that cudarc's `driver::result` layer takes.

use std::sync::Arc;

use cudarc::driver::{sys::CUstream, CudaStream};
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
