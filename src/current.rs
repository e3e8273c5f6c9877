//! The current stream: what `stream=None` means in every library that adopts custream.
//!
//! `with s:` makes `s` current for the block and restores the previous one after it, as in
//! CuPy and PyTorch, and closes nothing. The stream lives in a `contextvars.ContextVar`, so
//! each thread and each asyncio task sees its own, and blocks nest; unset, it is the
//! default stream (the per-thread one when `CUSTREAM_PER_THREAD_DEFAULT_STREAM` is set,
//! as cuda.core's `CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM` does).

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyTuple};

use crate::stream;

/// The environment variable that makes the per-thread default stream the default.
pub const PER_THREAD_ENV: &str = "CUSTREAM_PER_THREAD_DEFAULT_STREAM";

struct Vars {
    /// The current stream (default: the default stream).
    current: Py<PyAny>,
    /// `current.get`, bound once: `current_stream()` is this one call.
    get: Py<PyAny>,
    /// The tokens of the `with` blocks open in this context, innermost first, as nested
    /// (token, rest) pairs: a ContextVar, so a copied context (an asyncio task) has its own.
    open: Py<PyAny>,
}

static VARS: PyOnceLock<Vars> = PyOnceLock::new();

fn per_thread_by_default() -> bool {
    std::env::var(PER_THREAD_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

fn vars(py: Python<'_>) -> PyResult<&Vars> {
    VARS.get_or_try_init(py, || {
        let default = stream::default_stream(py, if per_thread_by_default() { 2 } else { 0 })?;
        let context_var = py.import("contextvars")?.getattr("ContextVar")?;
        let kwargs = [("default", default)].into_py_dict(py)?;
        let current = context_var.call(("custream.current_stream",), Some(&kwargs))?;
        let get = current.getattr("get")?;
        let open = context_var.call(
            ("custream.open_with_blocks",),
            Some(&[("default", py.None())].into_py_dict(py)?),
        )?;
        Ok(Vars {
            current: current.unbind(),
            get: get.unbind(),
            open: open.unbind(),
        })
    })
}

/// Make the context variables, at module initialization (after the default streams).
pub fn init(py: Python<'_>) -> PyResult<()> {
    vars(py).map(drop)
}

/// `custream.current_stream()`: the innermost `with` block's stream, else the default.
pub fn current(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    vars(py)?.get.bind(py).call0()
}

/// `current_stream` as a METH_NOARGS builtin: one call of the bound `ContextVar.get`, with
/// no argument parsing or trampoline before it; it raises only what that call raises.
pub unsafe extern "C" fn current_stream_o(_m: *mut ffi::PyObject, _: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a builtin with the GIL held.
    let py = unsafe { Python::assume_attached() };
    match VARS.get(py) {
        // SAFETY: a live bound method; a new reference or NULL with an exception set.
        Some(vars) => unsafe { ffi::PyObject_CallNoArgs(vars.get.as_ptr()) },
        None => crate::boundary::boundary(|py| Ok(current(py)?.into_ptr())),
    }
}

/// `with s:`, entering: `s` is current until the matching exit.
pub fn enter(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<()> {
    let vars = vars(py)?;
    let token = vars.current.bind(py).call_method1(intern!(py, "set"), (s,))?;
    let open = vars.open.bind(py);
    let below = open.call_method0(intern!(py, "get"))?;
    open.call_method1(intern!(py, "set"), (PyTuple::new(py, [token, below])?,))?;
    Ok(())
}

/// `with s:`, leaving: the stream current before the block is current again.
pub fn exit(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<()> {
    let vars = vars(py)?;
    let current = vars.current.bind(py);
    let open = vars.open.bind(py);
    let top = open.call_method0(intern!(py, "get"))?;
    let now = current.call_method0(intern!(py, "get"))?;
    if top.is_none() || !now.is(s) {
        return Err(PyRuntimeError::new_err(format!(
            "leaving a `with` block of {} that is not the innermost one open in this thread or \
             task (the current stream is {}): `with` blocks of streams must nest",
            s.repr()?,
            now.repr()?
        )));
    }
    let (token, below) = top.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
    current.call_method1(intern!(py, "reset"), (token,))?;
    open.call_method1(intern!(py, "set"), (below,))?;
    Ok(())
}
