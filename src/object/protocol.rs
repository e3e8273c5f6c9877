//! The CUDA Stream Protocol, consumer side: `as_stream(obj)` and the rules a producer's
//! `__cuda_stream__()` result must follow (docs/design.md, "The protocol"). No driver call here.

use pyo3::exceptions::{PyDeprecationWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyString, PyTuple};

use crate::cpython::args::{int_repr, is_int_not_bool, short_repr};
use crate::cpython::stream_object;
use crate::object::make::{self, Parts};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "<unknown type>".into())
}

/// A stream handle given as a Python int: an `int` (not `bool`) in [0, 2**64).
/// `what` says where the value came from; it is only called to build an error message, so
/// the success path formats nothing.
pub fn handle_from_int(value: &Bound<'_, PyAny>, what: impl Fn() -> String) -> PyResult<u64> {
    if !is_int_not_bool(value) {
        return Err(PyTypeError::new_err(format!(
            "{} must be an int, got {}",
            what(),
            type_name(value)
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{} {} is out of range: a stream handle is in [0, 2**64)",
            what(),
            int_repr(value)
        ))
    })
}

/// Check a producer's result and return the handle, and whether the result can be kept
/// as the stream's own (0, handle) tuple (an exact tuple holding an exact int: immutable).
/// `producer` is named in errors only.
fn parse_result(result: &Bound<'_, PyAny>, producer: &Bound<'_, PyAny>) -> PyResult<(u64, bool)> {
    let owner_type = || type_name(producer);
    let tuple = result.cast::<PyTuple>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{}.__cuda_stream__() must return a tuple (version, handle), got {}",
            owner_type(),
            type_name(result)
        ))
    })?;
    if tuple.len() != 2 {
        return Err(PyValueError::new_err(format!(
            "{}.__cuda_stream__() must return a 2-tuple (version, handle), got a tuple of length {}",
            owner_type(),
            tuple.len()
        )));
    }
    // Borrowed items: the tuple holds them for as long as this runs.
    let version = tuple.get_borrowed_item(0)?;
    if !version.is_exact_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{}.__cuda_stream__() returned version {} of type {}: the version must be the int 0",
            owner_type(),
            short_repr(&version),
            type_name(&version)
        )));
    }
    // An int beyond an i64 is not 0 either.
    if version.extract::<i64>().ok() != Some(0) {
        return Err(PyValueError::new_err(format!(
            "{}.__cuda_stream__() returned version {}: custream understands protocol version 0 only",
            owner_type(),
            int_repr(&version)
        )));
    }
    let handle = tuple.get_borrowed_item(1)?;
    let h = handle_from_int(&handle, || {
        format!("the handle returned by {}.__cuda_stream__()", owner_type())
    })?;
    Ok((
        h,
        result.is_exact_instance_of::<PyTuple>() && handle.is_exact_instance_of::<PyInt>(),
    ))
}

/// The result when calling `obj.__cuda_stream__()` raised `raised`: the producer's own
/// exception, unchanged; our TypeError when there is no such attribute; or, for a
/// non-callable attribute (deprecated, as in cuda.core), its value.
fn non_method_result<'py>(obj: &Bound<'py, PyAny>, raised: PyErr) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let attr = match obj.getattr(cuda_stream_name(py)) {
        Ok(attr) => attr,
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {
            let hint = if obj.is_instance_of::<PyInt>() {
                "; to wrap a raw handle use custream.Stream.from_handle(handle, owner=...)"
            } else {
                ""
            };
            return Err(PyTypeError::new_err(format!(
                "as_stream() expected a custream.Stream or an object with a __cuda_stream__() method, got {}{hint}",
                type_name(obj)
            )));
        }
        Err(e) => return Err(e),
    };
    if attr.is_callable() {
        return Err(raised);
    }
    PyErr::warn(
        py,
        &py.get_type::<PyDeprecationWarning>(),
        &std::ffi::CString::new(format!(
            "{}.__cuda_stream__ is an attribute; the CUDA Stream Protocol makes it a method",
            type_name(obj)
        ))
        .unwrap_or_default(),
        1,
    )?;
    Ok(attr)
}

static CUDA_STREAM: PyOnceLock<Py<PyString>> = PyOnceLock::new();

fn cuda_stream_name(py: Python<'_>) -> &Bound<'_, PyString> {
    CUDA_STREAM
        .get_or_init(py, || PyString::intern(py, "__cuda_stream__").unbind())
        .bind(py)
}

/// Fill every lazily made Python value that a custream call may need, at import. Filling one
/// later lets the GIL go while it waits, and a daemon thread that lets it go while the
/// interpreter finalizes is ended by CPython (3.10 to 3.13) with `pthread_exit`, unwinding
/// through Rust frames: that crashed at exit.
pub fn init(py: Python<'_>, stream_type: &Bound<'_, pyo3::types::PyType>) -> PyResult<()> {
    cuda_stream_name(py);
    // The `intern!` names pyo3 itself keeps for the type names errors and reprs quote.
    stream_type.fully_qualified_name()?;
    stream_type.name()?;
    Ok(())
}

/// `custream.as_stream(obj)`: a Stream as is, else a borrowed Stream over the handle that
/// `obj.__cuda_stream__()` gives, keeping `obj` alive as its owner.
pub fn as_stream<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if stream_object::is_stream(obj) {
        return Ok(obj.clone());
    }
    let py = obj.py();
    // The common case first: call the method without making a bound-method object
    // (CPython's method-call path). Only on failure is the attribute looked at, to tell a
    // missing or non-callable attribute from a producer that raised.
    let result = match obj.call_method0(cuda_stream_name(py)) {
        Ok(result) => result,
        Err(raised) => non_method_result(obj, raised)?,
    };
    let (handle, keep_result) = parse_result(&result, obj)?;
    let mut parts = Parts::borrowed(handle, None, Some(obj.clone()))?;
    if keep_result {
        // parse_result found an exact tuple: the checked cast is one type compare.
        parts.protocol = result.cast_into::<PyTuple>().ok();
    }
    make::make(py, parts)
}
