//! The C-API table exported as the capsule `custream._custream._C_API` (pxd/custream.h
//! declares it). Every entry runs inside `ffi::boundary`, so no panic crosses into C.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::ffi::boundary;
use crate::layout::{custream_deleter_t, custream_handle_t, CustreamCAPI, CustreamStream, CUSTREAM_ABI_VERSION, CUSTREAM_CAPSULE_NAME};
use crate::protocol;
use crate::stream::{self, Parts, StreamRef};

struct Table(CustreamCAPI);
// SAFETY: the table is written once, before it is published, and only read afterwards.
unsafe impl Sync for Table {}
unsafe impl Send for Table {}

static TABLE: OnceLock<Table> = OnceLock::new();

fn device_of(device: c_int) -> PyResult<Option<i32>> {
    match device {
        d if d >= 0 => Ok(Some(d)),
        -1 => Ok(None),
        d => Err(PyValueError::new_err(format!("custream C API: device {d} is not an ordinal (use -1 for unknown)"))),
    }
}

unsafe fn stream_arg(py: Python<'_>, obj: *mut ffi::PyObject, fname: &str) -> PyResult<StreamRef> {
    if obj.is_null() || !stream::is_stream(obj) {
        let got = if obj.is_null() {
            "NULL".to_owned()
        } else {
            Bound::from_borrowed_ptr(py, obj).get_type().name()?.to_string()
        };
        return Err(PyTypeError::new_err(format!("{fname}() expected a custream.Stream, got {got}")));
    }
    Ok(StreamRef::of(obj))
}

unsafe extern "C" fn as_stream(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    boundary(|py| {
        if obj.is_null() {
            return Err(PyTypeError::new_err("Custream_AsStream() expected an object, got NULL"));
        }
        Ok(protocol::as_stream(&Bound::from_borrowed_ptr(py, obj))?.into_ptr())
    })
}

unsafe extern "C" fn from_handle(handle: custream_handle_t, device: c_int, owner: *mut ffi::PyObject) -> *mut ffi::PyObject {
    boundary(|py| {
        let owner = (!owner.is_null()).then(|| Bound::from_borrowed_ptr(py, owner)).filter(|o| !o.is_none());
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
    (!obj.is_null() && stream::is_stream(obj)) as c_int
}

unsafe extern "C" fn synchronize(obj: *mut ffi::PyObject) -> c_int {
    boundary(|py| {
        let s = stream_arg(py, obj, "Custream_Synchronize")?;
        s.synchronize(py)?;
        Ok(0)
    })
}

unsafe extern "C" fn handle_checked(obj: *mut ffi::PyObject, out: *mut custream_handle_t) -> c_int {
    boundary(|py| {
        let s = stream_arg(py, obj, "Custream_HandleChecked")?;
        s.ensure_open("handle")?;
        if !out.is_null() {
            *out = s.handle() as usize as custream_handle_t;
        }
        Ok(0)
    })
}

/// The capsule holding the table; the table lives for the process.
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
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
        })
    });
    let ptr = &table.0 as *const CustreamCAPI as *mut c_void;
    // SAFETY: the name is a 'static C string, as PyCapsule_New requires.
    let cap = unsafe { ffi::PyCapsule_New(ptr, CUSTREAM_CAPSULE_NAME.as_ptr().cast(), None) };
    if cap.is_null() {
        return Err(PyErr::fetch(py));
    }
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}
