//! `StreamRef`: a view of a CUDA stream handle, the shape of CCCL's `cuda::stream_ref`, and
//! how a Python argument becomes one.

use std::ffi::c_void;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::Borrowed;

use crate::capi::{api, Fields};
use crate::ffi::custream_handle_t;

/// A non-owning view of a CUDA stream handle (`CUstream`, `cudaStream_t`): `Copy`, `Send`,
/// `Sync`, no lifetime of its own, the shape of CCCL's `cuda::stream_ref` and custream.hpp's
/// `custream::stream_ref`.
///
/// As a `#[pyfunction]` argument it takes a `custream.Stream` (one type check and one load,
/// no Python call) or any object with `__cuda_stream__` (a CuPy, PyTorch, cuda.core,
/// numba-cuda or rmm stream; custream's one parser of the protocol checks what it returns).
/// A closed Stream is a `ValueError`; anything else a `TypeError` naming what is accepted.
/// The view is valid while the Python argument lives: for the call, not after it (keep a
/// [`Stream`](crate::Stream) to hold on to a stream).
///
/// ```
/// use pyo3_custream::StreamRef;
///
/// let s = StreamRef::from_raw(0x7f3a_2c00_1230 as *mut std::ffi::c_void);
/// assert_eq!(s.as_raw() as usize, 0x7f3a_2c00_1230);
/// assert!(!s.is_default());
/// assert!(StreamRef::default().is_default() && StreamRef::PER_THREAD.is_default());
/// let copy = s; // Copy: both name the same stream
/// assert_eq!(copy, s);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct StreamRef(usize);

impl StreamRef {
    /// The null stream (handle 0): the legacy default stream of the current context.
    pub const NULL: StreamRef = StreamRef(0);
    /// `CU_STREAM_LEGACY` (handle 1).
    pub const LEGACY: StreamRef = StreamRef(1);
    /// `CU_STREAM_PER_THREAD` (handle 2).
    pub const PER_THREAD: StreamRef = StreamRef(2);

    /// A view of `handle` (a `CUstream` or `cudaStream_t`). Nothing is checked or kept.
    pub fn from_raw(handle: *mut c_void) -> Self {
        StreamRef(handle.expose_provenance())
    }

    /// The handle, to pass to the CUDA driver or runtime.
    pub fn as_raw(self) -> *mut c_void {
        std::ptr::with_exposed_provenance_mut(self.0)
    }

    /// The handle as custream.h's `custream_handle_t`.
    pub fn as_handle(self) -> custream_handle_t {
        std::ptr::with_exposed_provenance_mut(self.0)
    }

    /// The handle as an integer, as Python's `Stream.handle` gives it.
    pub fn as_usize(self) -> usize {
        self.0
    }

    /// Whether this is a default-stream token (0, 1 or 2): never destroyed, and meaning the
    /// current context's default stream wherever it is used.
    pub fn is_default(self) -> bool {
        self.0 <= 2
    }
}

impl From<custream_handle_t> for StreamRef {
    fn from(handle: custream_handle_t) -> Self {
        StreamRef::from_raw(handle.cast())
    }
}

impl std::fmt::Debug for StreamRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamRef({:#x})", self.0)
    }
}

/// What a stream argument accepts, for the TypeError.
pub(crate) const ACCEPTED: &str = "a custream.Stream or an object with a __cuda_stream__() method \
     (a CuPy, PyTorch, cuda.core, numba-cuda or rmm stream)";

/// The type's name of `obj`, for an error message.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// custream.as_stream(obj), with a TypeError that names what is accepted when obj is no
/// stream at all (a producer whose `__cuda_stream__` misbehaves keeps custream's own message,
/// which names the producer and what was wrong).
pub(crate) fn as_stream<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    api(py)?.as_stream(obj).map_err(|e| {
        let speaks_protocol = obj.hasattr(PyString::intern(py, "__cuda_stream__")).unwrap_or(true);
        if !e.is_instance_of::<PyTypeError>(py) || speaks_protocol {
            return e;
        }
        let err = PyTypeError::new_err(format!("expected {ACCEPTED}, got {}", type_name(obj)));
        err.set_cause(py, Some(e));
        err
    })
}

impl<'a, 'py> FromPyObject<'a, 'py> for StreamRef {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let api = api(obj.py())?;
        if api.is_stream(&obj) {
            // SAFETY: a custream.Stream (type check above) of the layout checked at import,
            // alive for this call (the borrowed argument).
            let fields = unsafe { Fields::of(obj.as_ptr()) };
            if !fields.is_closed() {
                return Ok(fields.handle().into());
            }
            // Closed: custream's own ValueError ("handle on a closed custream.Stream").
            return api.handle_checked(&obj).map(StreamRef::from);
        }
        // A protocol object: custream parses it into a wrapper that borrows obj's stream;
        // dropping the wrapper leaves the handle to obj.
        let wrapper = as_stream(&obj)?;
        api.handle_checked(&wrapper).map(StreamRef::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync + Copy>() {}

    #[test]
    fn a_view_is_a_plain_copyable_handle() {
        send_sync::<StreamRef>();
        assert_eq!(size_of::<StreamRef>(), size_of::<*mut c_void>());
        let h = 0xdead_beef_usize as *mut c_void;
        assert_eq!(StreamRef::from_raw(h).as_raw(), h);
        assert_eq!(StreamRef::from_raw(h).as_usize(), 0xdead_beef);
        assert_eq!(format!("{:?}", StreamRef::from_raw(h)), "StreamRef(0xdeadbeef)");
    }

    #[test]
    fn the_tokens_are_the_default_streams() {
        for (s, h) in [(StreamRef::NULL, 0), (StreamRef::LEGACY, 1), (StreamRef::PER_THREAD, 2)] {
            assert!(s.is_default());
            assert_eq!(s.as_usize(), h);
        }
        assert_eq!(StreamRef::default(), StreamRef::NULL);
        assert!(!StreamRef::from_raw(3 as *mut c_void).is_default());
    }
}
