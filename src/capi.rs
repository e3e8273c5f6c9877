//! The C-API table exported as the capsule `custream._custream._C_API` (pxd/custream.h
//! declares it). Every entry runs inside `boundary`, so no panic crosses into C. Each
//! entry's contract (custream.h) is that of a C API call: the GIL is held and every
//! `PyObject *` is NULL or alive; that is the SAFETY of the pointer reads below.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::OnceLock;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::boundary::boundary;
use crate::callback;
use crate::current;
use crate::graph;
use crate::layout::{
    custream_deleter_t, custream_handle_t, custream_host_fn_t, CustreamCAPI, CustreamStream, CUSTREAM_ABI_VERSION,
    CUSTREAM_CAPSULE_NAME,
};
use crate::pool::StreamPool;
use crate::protocol;
use crate::stream::{self, Parts, StreamRef};

struct Table(CustreamCAPI);
// SAFETY: the table is written once, before it is published, and only read afterwards;
// its pointers are to functions and to the type object, which live for the process.
unsafe impl Sync for Table {}
// SAFETY: as above.
unsafe impl Send for Table {}

static TABLE: OnceLock<Table> = OnceLock::new();

fn device_of(device: c_int) -> PyResult<Option<i32>> {
    match device {
        d if d >= 0 => Ok(Some(d)),
        -1 => Ok(None),
        d => Err(PyValueError::new_err(format!(
            "custream C API: device {d} is not an ordinal (use -1 for unknown)"
        ))),
    }
}

/// # Safety
/// `obj` is NULL or alive.
unsafe fn stream_arg(py: Python<'_>, obj: *mut ffi::PyObject, fname: &str) -> PyResult<StreamRef> {
    // SAFETY: the caller's contract.
    let Some(obj) = (unsafe { Bound::from_borrowed_ptr_or_opt(py, obj) }) else {
        return Err(PyTypeError::new_err(format!(
            "{fname}() expected a custream.Stream, got NULL"
        )));
    };
    // SAFETY: alive.
    if !unsafe { stream::is_stream(obj.as_ptr()) } {
        let got = obj.get_type().name()?.to_string();
        return Err(PyTypeError::new_err(format!(
            "{fname}() expected a custream.Stream, got {got}"
        )));
    }
    // SAFETY: a live Stream, which the caller holds for the call.
    Ok(unsafe { StreamRef::of(obj.as_ptr()) })
}

unsafe extern "C" fn as_stream(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    boundary(|py| {
        // SAFETY: see the module's note.
        let Some(obj) = (unsafe { Bound::from_borrowed_ptr_or_opt(py, obj) }) else {
            return Err(PyTypeError::new_err("Custream_AsStream() expected an object, got NULL"));
        };
        Ok(protocol::as_stream(&obj)?.into_ptr())
    })
}

unsafe extern "C" fn from_handle(
    handle: custream_handle_t,
    device: c_int,
    owner: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    boundary(|py| {
        // SAFETY: see the module's note.
        let owner = unsafe { Bound::from_borrowed_ptr_or_opt(py, owner) }.filter(|o| !o.is_none());
        Ok(stream::make(py, Parts::borrowed(handle as usize as u64, device_of(device)?, owner)?)?.into_ptr())
    })
}

unsafe extern "C" fn from_handle_with_deleter(
    handle: custream_handle_t,
    device: c_int,
    deleter: custream_deleter_t,
    ctx: *mut c_void,
) -> *mut ffi::PyObject {
    boundary(|py| {
        let mut parts = Parts::borrowed(handle as usize as u64, device_of(device)?, None)?;
        parts.deleter = deleter;
        parts.deleter_ctx = ctx;
        // On failure the deleter is not called: the handle stays the caller's.
        Ok(stream::make(py, parts)?.into_ptr())
    })
}

unsafe extern "C" fn check(obj: *mut ffi::PyObject) -> c_int {
    // SAFETY: see the module's note.
    c_int::from(!obj.is_null() && unsafe { stream::is_stream(obj) })
}

unsafe extern "C" fn synchronize(obj: *mut ffi::PyObject) -> c_int {
    boundary(|py| {
        // SAFETY: see the module's note.
        let s = unsafe { stream_arg(py, obj, "Custream_Synchronize") }?;
        s.synchronize(py)?;
        Ok(0)
    })
}

unsafe extern "C" fn handle_checked(obj: *mut ffi::PyObject, out: *mut custream_handle_t) -> c_int {
    boundary(|py| {
        // SAFETY: see the module's note.
        let s = unsafe { stream_arg(py, obj, "Custream_HandleChecked") }?;
        if s.is_closed() {
            return Err(stream::closed_error("handle"));
        }
        if !out.is_null() {
            // SAFETY: the caller passes NULL or a place for one handle.
            unsafe { *out = s.handle_value() as usize as custream_handle_t };
        }
        Ok(0)
    })
}

unsafe extern "C" fn current_stream() -> *mut ffi::PyObject {
    boundary(|py| Ok(current::current(py)?.into_ptr()))
}

unsafe extern "C" fn default_stream(token: custream_handle_t) -> *mut ffi::PyObject {
    boundary(|py| Ok(stream::default_stream(py, token as usize as u64)?.into_ptr()))
}

unsafe extern "C" fn pool_get(pool: *mut ffi::PyObject) -> *mut ffi::PyObject {
    boundary(|py| {
        // SAFETY: see the module's note.
        let Some(pool) = (unsafe { Bound::from_borrowed_ptr_or_opt(py, pool) }) else {
            return Err(PyTypeError::new_err(
                "Custream_PoolGet() expected a custream.StreamPool, got NULL",
            ));
        };
        let got = || pool.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        let pool = pool.cast::<StreamPool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "Custream_PoolGet() expected a custream.StreamPool, got {}",
                got()
            ))
        })?;
        Ok(pool.get().get(py)?.into_ptr())
    })
}

unsafe extern "C" fn launch_host_func(obj: *mut ffi::PyObject, f: custream_host_fn_t, user: *mut c_void) -> c_int {
    boundary(|py| {
        // SAFETY: see the module's note.
        let s = unsafe { stream_arg(py, obj, "Custream_LaunchHostFunc") }?;
        let f = f.ok_or_else(|| PyValueError::new_err("Custream_LaunchHostFunc() fn is NULL"))?;
        callback::launch_c(py, s, f, user)?;
        Ok(0)
    })
}

unsafe extern "C" fn is_capturing(obj: *mut ffi::PyObject) -> c_int {
    boundary(|py| {
        // SAFETY: see the module's note.
        let s = unsafe { stream_arg(py, obj, "Custream_IsCapturing") }?;
        Ok(c_int::from(graph::is_capturing(py, s)?))
    })
}

/// The capsule holding the table; the table lives for the process.
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let table = TABLE.get_or_init(|| {
        Table(CustreamCAPI {
            abi_version: CUSTREAM_ABI_VERSION,
            api_size: std::mem::size_of::<CustreamCAPI>() as u32,
            stream_size: std::mem::size_of::<CustreamStream>() as u32,
            reserved: 0,
            StreamType: stream::stream_type(),
            as_stream: Some(as_stream),
            from_handle: Some(from_handle),
            from_handle_with_deleter: Some(from_handle_with_deleter),
            check: Some(check),
            synchronize: Some(synchronize),
            handle_checked: Some(handle_checked),
            current_stream: Some(current_stream),
            default_stream: Some(default_stream),
            pool_get: Some(pool_get),
            launch_host_func: Some(launch_host_func),
            is_capturing: Some(is_capturing),
        })
    });
    let name = CStr::from_bytes_with_nul(CUSTREAM_CAPSULE_NAME).map_err(|e| PyValueError::new_err(e.to_string()))?;
    // SAFETY: the table lives for the process, as the capsule's readers need.
    unsafe { PyCapsule::new_with_pointer(py, NonNull::from(&table.0).cast(), name) }
}
