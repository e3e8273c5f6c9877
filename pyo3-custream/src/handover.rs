//! Rust hands a stream to Python: `to_python` (Python owns it, a release runs once) and
//! `share` (Python holds a clone of an `Arc`), over custream's `from_handle_with_deleter`.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::capi::api;
use crate::ffi::custream_handle_t;
use crate::stream::{device_arg, Stream};
use crate::stream_ref::StreamRef;

/// Python takes the stream `handle`: the returned `custream.Stream` owns it, and `release`
/// runs exactly once, with the handle, when that Stream is closed (`close()`, from Python or
/// [`Stream::close`]) or deallocated, on the thread that does it, attached to the interpreter
/// (the GIL held, where there is one).
///
/// - `release` never runs during interpreter finalization nor in a child process after
///   `fork()`: there the stream is left to the process's exit (custream's deleter rule), and
///   the closure is never dropped.
/// - A panic in `release` is caught and goes to `sys.unraisablehook` as a `PanicException`,
///   as an exception in `__del__` would; `close()` does not raise for it.
/// - On error (custream missing, a negative `device`, ...) nothing was taken: `release` is
///   dropped without being called, and the handle is still the caller's.
///
/// `device` is the stream's device ordinal if known; a default-stream token takes none.
///
/// ```no_run
/// use pyo3::prelude::*;
/// use pyo3_custream::{to_python, Stream, StreamRef};
///
/// # fn create_stream() -> *mut std::ffi::c_void { std::ptr::null_mut() }
/// # fn destroy_stream(_: *mut std::ffi::c_void) {}
/// #[pyfunction]
/// fn new_stream(py: Python<'_>) -> PyResult<Stream> {
///     let handle = StreamRef::from_raw(create_stream()); // e.g. cuStreamCreate
///     to_python(py, handle, Some(0), |h| destroy_stream(h.as_raw()))
/// }
/// ```
pub fn to_python<F>(py: Python<'_>, handle: StreamRef, device: Option<i32>, release: F) -> PyResult<Stream>
where
    F: FnOnce(StreamRef) + Send + 'static,
{
    let api = api(py)?;
    let device = device_arg(device)?;
    let ctx = Box::into_raw(Box::new(release)).cast::<c_void>();
    // SAFETY: release_once::<F> takes back the Box<F> that `ctx` is, and custream calls it at
    // most once, attached, on any thread: F is Send, and the attachment is what
    // release_once's report of a panic needs.
    let made = unsafe { api.wrap_handle_with_deleter(py, handle.as_handle(), device, release_once::<F>, ctx) };
    match made {
        Ok(obj) => Stream::from_bound(obj),
        Err(e) => {
            // SAFETY: custream did not take `ctx` (it calls the deleter only for a Stream it
            // made), so the Box is still ours, and nothing else has it.
            drop(unsafe { Box::from_raw(ctx.cast::<F>()) });
            Err(e)
        }
    }
}

/// Python shares ownership with Rust: the returned `custream.Stream` holds a clone of `owner`
/// until it is closed or deallocated, so the stream lives while either side holds it (the
/// last `Arc` to go releases it, as its `Drop` does). The same rules as [`to_python`]: never
/// dropped after finalization nor in a forked child; on error Python holds nothing.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use pyo3::prelude::*;
/// use pyo3_custream::{share, Stream, StreamRef};
///
/// struct MyStream {
///     handle: StreamRef, // destroyed by MyStream's Drop
/// }
///
/// #[pyfunction]
/// fn stream_of(py: Python<'_>) -> PyResult<Stream> {
///     # let mine = Arc::new(MyStream { handle: StreamRef::NULL });
///     // let mine: Arc<MyStream> = ...; still used on the Rust side
///     share(py, mine.clone(), mine.handle, Some(0))
/// }
/// ```
pub fn share<T>(py: Python<'_>, owner: Arc<T>, handle: StreamRef, device: Option<i32>) -> PyResult<Stream>
where
    T: Send + Sync + 'static,
{
    to_python(py, handle, device, move |_| drop(owner))
}

/// custream's deleter for a `to_python` release: runs it once and drops it; nothing unwinds
/// into custream (a panic goes to `sys.unraisablehook`).
///
/// # Safety
/// `ctx` is the `Box<F>` that `to_python` leaked, given here once, attached.
unsafe extern "C" fn release_once<F>(ctx: *mut c_void, handle: custream_handle_t)
where
    F: FnOnce(StreamRef) + Send + 'static,
{
    // SAFETY: the function's contract: ctx is our Box<F>, handed back once.
    let release = unsafe { Box::from_raw(ctx.cast::<F>()) };
    let ran = catch_unwind(AssertUnwindSafe(move || release(handle.into())));
    if let Err(payload) = ran {
        // Reporting makes Python calls; a panic in them (none is expected) is dropped rather
        // than let through into C.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: custream calls a deleter attached (custream.h).
            let py = unsafe { Python::assume_attached() };
            report_panic(py, payload.as_ref());
        }));
    }
}

/// A panic's message: the `&str` or `String` of `panic!`, else a placeholder.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a release panicked".to_owned())
}

/// A panic in a release as an unraisable `PanicException`, as CPython reports an exception in
/// `__del__`. The close() or deallocation that called the release may have an exception of its
/// own in flight: it is kept. pyo3's `PyErr::take` would resume a pending `PanicException` as
/// a Rust panic, so the pending exception is moved aside with the C API itself.
fn report_panic(py: Python<'_>, payload: &(dyn Any + Send)) {
    let pending = Pending::take();
    let err = PanicException::new_err(panic_message(payload));
    let context = PyString::new(py, "pyo3_custream: the release given to to_python()");
    err.write_unraisable(py, Some(context.as_any()));
    pending.restore();
}

/// The thread's pending exception, moved aside and put back, with the calls the build's
/// interpreter offers: 3.12 deprecated the three-part fetch and restore (and a free-threaded
/// or 3.12+ build refuses the deprecated ones in clippy), while the abi3-py310 build has only them.
struct Pending {
    #[cfg(Py_3_12)]
    exception: *mut pyo3::ffi::PyObject,
    #[cfg(not(Py_3_12))]
    parts: [*mut pyo3::ffi::PyObject; 3],
}

impl Pending {
    /// Take the pending exception (or none). The thread is attached (our caller holds a token).
    fn take() -> Self {
        #[cfg(Py_3_12)]
        {
            // SAFETY: attached; a new reference or NULL, which `restore` takes back.
            let exception = unsafe { pyo3::ffi::PyErr_GetRaisedException() };
            Pending { exception }
        }
        #[cfg(not(Py_3_12))]
        {
            let mut parts = [std::ptr::null_mut(); 3];
            let [t, v, tb] = &mut parts;
            // SAFETY: attached; the three places receive new references (or NULL) that
            // `restore` takes back.
            unsafe { pyo3::ffi::PyErr_Fetch(t, v, tb) };
            Pending { parts }
        }
    }

    /// Put it back, once.
    fn restore(self) {
        // SAFETY: attached; the references `take` got, given back once (self is consumed).
        #[cfg(Py_3_12)]
        unsafe {
            pyo3::ffi::PyErr_SetRaisedException(self.exception)
        };
        // SAFETY: as above.
        #[cfg(not(Py_3_12))]
        unsafe {
            pyo3::ffi::PyErr_Restore(self.parts[0], self.parts[1], self.parts[2])
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_is_read_from_either_payload() {
        assert_eq!(panic_message(&"static"), "static");
        assert_eq!(panic_message(&String::from("owned")), "owned");
        assert_eq!(panic_message(&42_u8), "a release panicked");
    }
}
