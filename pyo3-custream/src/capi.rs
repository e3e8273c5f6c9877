//! custream's C-API table, imported from the capsule `custream._custream._C_API` at first use
//! and checked as `custream_import()` in custream.h checks it: the ABI version must match, and
//! the table and the Stream struct may be bigger than ours (they grow append-only) but not
//! smaller. Nothing here links to the extension.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

use crate::ffi::{custream_handle_t, CustreamCAPI, CustreamStream, CUSTREAM_ABI_VERSION, CUSTREAM_CAPSULE_NAME};
use crate::ffi::{CUSTREAM_DEVICE_UNKNOWN, CUSTREAM_STATE_CLOSED};

/// The checked table. It lives for the process: custream keeps it in a static and an
/// extension module is never unloaded.
#[derive(Clone, Copy)]
pub(crate) struct Api(&'static CustreamCAPI);

// SAFETY: the table is written once by custream before it publishes the capsule and only read
// afterwards; its pointers are to functions and to the Stream type object, which live for the
// process. Every entry is called attached to the interpreter (each caller has a `Python`
// token), from any number of threads at once: custream's entries need no GIL.
unsafe impl Send for Api {}
// SAFETY: as above: shared reads of immutable data.
unsafe impl Sync for Api {}

static API: PyOnceLock<Api> = PyOnceLock::new();

/// The table, imported and checked on first use. A failure is not cached: the next call tries
/// again (once custream is installed, say).
pub(crate) fn api(py: Python<'_>) -> PyResult<Api> {
    API.get_or_try_init(py, || import(py)).copied()
}

fn capsule_name() -> &'static CStr {
    // The generated constant is NUL-terminated, with no NUL inside; checked by a unit test.
    CStr::from_bytes_with_nul(CUSTREAM_CAPSULE_NAME).unwrap_or(c"custream._custream._C_API")
}

fn import(py: Python<'_>) -> PyResult<Api> {
    let version = env!("CARGO_PKG_VERSION");
    let ptr = PyCapsule::import_pointer(py, capsule_name()).map_err(|e| {
        let why = if e.is_instance_of::<PyImportError>(py) {
            "custream is not installed (it is not on PyPI yet: pip install /path/to/custream, a clone of \
             its repository or a wheel built from one; pip install custream once it is published)"
                .to_string()
        } else {
            "the installed custream has no C API capsule custream._custream._C_API (too old?)".to_string()
        };
        let err = PyImportError::new_err(format!(
            "pyo3-custream {version} needs custream {version} or a later 0.x release with the same ABI: {why}: {e}"
        ));
        err.set_cause(py, Some(e));
        err
    })?;
    let table = ptr.cast::<CustreamCAPI>();
    // SAFETY: the capsule of this name holds custream's table (custream.h), at least its
    // three leading u32 fields, which every ABI version has; it is static and never written
    // again. The rest is read only once the sizes below say it is there.
    let (abi, api_size, stream_size) = unsafe {
        let t = table.as_ptr();
        ((*t).abi_version, (*t).api_size, (*t).stream_size)
    };
    if abi != CUSTREAM_ABI_VERSION {
        return Err(PyImportError::new_err(format!(
            "custream C API version mismatch: pyo3-custream {version} was built against custream.h ABI \
             {CUSTREAM_ABI_VERSION} but the installed custream provides ABI {abi}; install the custream \
             release this crate's version names, or a pyo3-custream release for the installed custream"
        )));
    }
    // A newer custream's table and struct are larger (append-only): accepted. A smaller one is
    // an older custream than this crate's header, without what we would read.
    let ours = (size_of::<CustreamCAPI>(), size_of::<CustreamStream>());
    if (api_size as usize) < ours.0 || (stream_size as usize) < ours.1 {
        let installed = py
            .import("custream._custream")
            .and_then(|m| m.getattr("__version__"))
            .map_or_else(|_| "(version unknown)".to_string(), |v| v.to_string());
        return Err(PyImportError::new_err(format!(
            "custream C API layout mismatch: pyo3-custream {version} was built against custream {version}'s \
             table of {} bytes and Stream of {} bytes, the installed custream {installed} has {api_size} and \
             {stream_size} (older than this crate); install custream {version} or newer",
            ours.0, ours.1
        )));
    }
    // SAFETY: the version matches and the table and struct are at least ours: the table
    // begins with a whole CustreamCAPI, static.
    let table: &'static CustreamCAPI = unsafe { table.as_ref() };
    if table.StreamType.is_null() || table.as_stream.is_none() || table.from_handle_with_deleter.is_none() {
        return Err(PyImportError::new_err(
            "custream's C API table is incomplete (a NULL entry): not a custream build this crate understands",
        ));
    }
    Ok(Api(table))
}

/// The result of a C-API call that returns a new reference or NULL with an exception set.
fn owned<'py>(py: Python<'py>, ptr: *mut pyo3::ffi::PyObject) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: every table entry that returns an object returns a new reference or NULL with
    // a Python exception set (custream.h).
    unsafe { Bound::from_owned_ptr_or_err(py, ptr) }
}

/// A C-API call's result: 0, or -1 with a Python exception set.
fn check_rc(py: Python<'_>, rc: c_int) -> PyResult<()> {
    if rc < 0 {
        Err(PyErr::fetch(py))
    } else {
        Ok(())
    }
}

/// A missing entry: only an incomplete table (checked at import for the ones every caller
/// needs) can have one.
fn missing(name: &str) -> PyErr {
    PyImportError::new_err(format!("custream's C API table has no {name} entry"))
}

impl Api {
    /// Whether `obj` is a custream.Stream: one pointer comparison (the type is final).
    pub(crate) fn is_stream(self, obj: &Bound<'_, PyAny>) -> bool {
        obj.get_type().as_ptr() == self.0.StreamType.cast()
    }

    /// `custream.as_stream(obj)`: obj itself (a new reference) if it is a Stream, else a
    /// Stream borrowing the handle its `__cuda_stream__()` gives, keeping obj alive.
    pub(crate) fn as_stream<'py>(self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let f = self.0.as_stream.ok_or_else(|| missing("as_stream"))?;
        // SAFETY: attached (obj's token) and obj is alive.
        owned(obj.py(), unsafe { f(obj.as_ptr()) })
    }

    pub(crate) fn wrap_handle<'py>(
        self,
        py: Python<'py>,
        handle: custream_handle_t,
        device: c_int,
        owner: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = self.0.from_handle.ok_or_else(|| missing("from_handle"))?;
        let owner = owner.map_or(std::ptr::null_mut(), Bound::as_ptr);
        // SAFETY: attached; owner is NULL or alive; the handle is only stored.
        owned(py, unsafe { f(handle, device, owner) })
    }

    /// `from_handle_with_deleter`: on success custream owns `ctx` and calls
    /// `deleter(ctx, handle)` exactly once (never after finalization nor in a forked child);
    /// on failure it never calls it and `ctx` is still the caller's.
    ///
    /// # Safety
    /// `deleter` may be called with `ctx` once, attached, on any thread.
    pub(crate) unsafe fn wrap_handle_with_deleter<'py>(
        self,
        py: Python<'py>,
        handle: custream_handle_t,
        device: c_int,
        deleter: unsafe extern "C" fn(*mut std::ffi::c_void, custream_handle_t),
        ctx: *mut std::ffi::c_void,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = self
            .0
            .from_handle_with_deleter
            .ok_or_else(|| missing("from_handle_with_deleter"))?;
        // SAFETY: attached; the deleter's contract is the caller's.
        owned(py, unsafe { f(handle, device, Some(deleter), ctx) })
    }

    /// `Stream.synchronize()`; custream lets the GIL go while it waits.
    pub(crate) fn synchronize(self, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let f = self.0.synchronize.ok_or_else(|| missing("synchronize"))?;
        // SAFETY: attached and stream is alive.
        let rc = unsafe { f(stream.as_ptr()) };
        if rc < 0 {
            Err(PyErr::fetch(stream.py()))
        } else {
            Ok(())
        }
    }

    /// `Stream.synchronize(timeout=seconds)`: `f64::INFINITY` waits without a limit.
    pub(crate) fn synchronize_timeout(self, stream: &Bound<'_, PyAny>, seconds: f64) -> PyResult<()> {
        let f = self
            .0
            .synchronize_timeout
            .ok_or_else(|| missing("synchronize_timeout"))?;
        // SAFETY: attached and stream is alive.
        let rc = unsafe { f(stream.as_ptr(), seconds) };
        if rc < 0 {
            Err(PyErr::fetch(stream.py()))
        } else {
            Ok(())
        }
    }

    /// The error custream raises for the handle of a closed Stream (its own wording), or the
    /// handle if `stream` is open after all.
    pub(crate) fn handle_checked(self, stream: &Bound<'_, PyAny>) -> PyResult<custream_handle_t> {
        let f = self.0.handle_checked.ok_or_else(|| missing("handle_checked"))?;
        let mut out: custream_handle_t = std::ptr::null_mut();
        // SAFETY: attached, stream is alive, out is a place for one handle.
        let rc = unsafe { f(stream.as_ptr(), &mut out) };
        if rc < 0 {
            Err(PyErr::fetch(stream.py()))
        } else {
            Ok(out)
        }
    }

    /// `Stream.id`: the driver's id of the stream (custream asks the driver once per object).
    pub(crate) fn stream_id(self, stream: &Bound<'_, PyAny>) -> PyResult<u64> {
        let f = self.0.stream_id.ok_or_else(|| missing("stream_id"))?;
        let mut out: std::ffi::c_ulonglong = 0;
        // SAFETY: attached, stream is alive, out is a place for one id.
        let rc = unsafe { f(stream.as_ptr(), &mut out) };
        if rc < 0 {
            Err(PyErr::fetch(stream.py()))
        } else {
            Ok(out)
        }
    }

    /// `Stream.device`: known, or asked of the driver once.
    pub(crate) fn stream_device(self, stream: &Bound<'_, PyAny>) -> PyResult<i32> {
        let f = self.0.stream_device.ok_or_else(|| missing("stream_device"))?;
        let mut out: c_int = -1;
        // SAFETY: attached, stream is alive, out is a place for one int.
        let rc = unsafe { f(stream.as_ptr(), &mut out) };
        if rc < 0 {
            Err(PyErr::fetch(stream.py()))
        } else {
            Ok(out)
        }
    }

    /// `Stream.write_value(address, value, width=)`: custream checks every argument.
    pub(crate) fn write_value(
        self,
        stream: &Bound<'_, PyAny>,
        address: u64,
        value: u64,
        width: c_int,
        flush: bool,
    ) -> PyResult<()> {
        let f = self.0.write_value.ok_or_else(|| missing("write_value"))?;
        // SAFETY: attached and stream is alive; the rest are plain integers.
        check_rc(stream.py(), unsafe {
            f(stream.as_ptr(), address, value, width, c_int::from(flush))
        })
    }

    /// `Custream_ReleaseAfter`: `f(ctx)` once the work queued so far is done, on custream's
    /// thread; called exactly once, an error or not.
    ///
    /// # Safety
    /// `f(ctx)` may be called once, on any thread, without the GIL.
    pub(crate) unsafe fn release_after(
        self,
        stream: &Bound<'_, PyAny>,
        f: unsafe extern "C" fn(*mut std::ffi::c_void),
        ctx: *mut std::ffi::c_void,
    ) -> PyResult<()> {
        let call = self.0.release_after.ok_or_else(|| missing("release_after"))?;
        // SAFETY: attached and stream is alive; `f` and `ctx` are the caller's contract.
        check_rc(stream.py(), unsafe { call(stream.as_ptr(), Some(f), ctx) })
    }

    /// `Stream.wait_value(...)`, `op` one of `CUSTREAM_WAIT_*`.
    pub(crate) fn wait_value(
        self,
        stream: &Bound<'_, PyAny>,
        address: u64,
        value: u64,
        width: c_int,
        op: c_int,
        flush: bool,
    ) -> PyResult<()> {
        let f = self.0.wait_value.ok_or_else(|| missing("wait_value"))?;
        // SAFETY: attached and stream is alive; the rest are plain integers.
        check_rc(stream.py(), unsafe {
            f(stream.as_ptr(), address, value, width, op, c_int::from(flush))
        })
    }

    /// `custream.Event.from_ipc_handle(raw, device=device)`: custream checks the length and
    /// the device before the driver opens anything.
    pub(crate) fn event_from_ipc_handle<'py>(
        self,
        py: Python<'py>,
        handle: &[u8],
        device: c_int,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = self
            .0
            .event_from_ipc_handle
            .ok_or_else(|| missing("event_from_ipc_handle"))?;
        // SAFETY: attached; `handle` points to `handle.len()` readable bytes for the call,
        // which custream copies before it returns.
        owned(py, unsafe { f(handle.as_ptr().cast(), handle.len(), device) })
    }

    pub(crate) fn current_stream(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let f = self.0.current_stream.ok_or_else(|| missing("current_stream"))?;
        // SAFETY: attached.
        owned(py, unsafe { f() })
    }
}

/// The fields of a live custream.Stream that need no call: each read is one load.
pub(crate) struct Fields(*const CustreamStream);

impl Fields {
    /// # Safety
    /// `obj` is a custream.Stream ([`Api::is_stream`]) of the layout checked at import, and
    /// stays alive while the result is used.
    pub(crate) unsafe fn of(obj: *mut pyo3::ffi::PyObject) -> Self {
        Fields(obj.cast_const().cast())
    }

    /// The handle: fixed for the object's life (custream.h), so a plain load.
    pub(crate) fn handle(&self) -> custream_handle_t {
        // SAFETY: a live Stream (the constructor's contract); `handle` is never written after
        // the object is made.
        unsafe { (*self.0).handle }
    }

    fn state(&self) -> &AtomicU32 {
        // SAFETY: a live Stream; custream only accesses `state` atomically (custream.h), and
        // AtomicU32 has u32's size and alignment. The reference does not outlive `self`,
        // whose constructor's caller keeps the object alive.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of!((*self.0).state).cast_mut()) }
    }

    /// Whether close() was called: an acquire load, as Custream_IsClosed().
    pub(crate) fn is_closed(&self) -> bool {
        self.state().load(Ordering::Acquire) & CUSTREAM_STATE_CLOSED != 0
    }

    /// The device ordinal, if known: written once, atomically, by custream.
    pub(crate) fn device(&self) -> Option<i32> {
        // SAFETY: a live Stream; `device` is written at most once, atomically (custream.h);
        // AtomicI32 has i32's size and alignment.
        let cell = unsafe { std::sync::atomic::AtomicI32::from_ptr(std::ptr::addr_of!((*self.0).device).cast_mut()) };
        match cell.load(Ordering::Acquire) {
            CUSTREAM_DEVICE_UNKNOWN => None,
            d => Some(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capsule_name_is_the_headers() {
        assert_eq!(capsule_name(), c"custream._custream._C_API");
        assert_eq!(
            CStr::from_bytes_with_nul(CUSTREAM_CAPSULE_NAME).unwrap(),
            capsule_name()
        );
    }
}
