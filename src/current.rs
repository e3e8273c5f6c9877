//! The current stream: what `stream=None` means in every library that adopts custream.
//!
//! `with s:` makes `s` current for the block and restores the previous one after it, as in
//! CuPy and PyTorch, and closes nothing. The stream lives in a `contextvars.ContextVar`, so
//! each thread and each asyncio task sees its own, and blocks nest; unset, it is the
//! default stream (the per-thread one when `CUSTREAM_PER_THREAD_DEFAULT_STREAM` is set,
//! as cuda.core's `CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM` does).
//!
//! `custream.current_stream` is the variable's own bound `get`: reading the current stream
//! costs exactly a `ContextVar.get()`, which a wrapper function would double.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyTuple};

use crate::stream;

/// The environment variable that makes the per-thread default stream the default.
pub const PER_THREAD_ENV: &str = "CUSTREAM_PER_THREAD_DEFAULT_STREAM";

/// The two context variables' methods, bound once.
struct Vars {
    /// The current stream's `get` (default: the default stream): `custream.current_stream`.
    get: Py<PyAny>,
    set: Py<PyAny>,
    reset: Py<PyAny>,
    /// The `with` blocks open in this context, innermost first, as nested
    /// (stream, token, below) tuples: a ContextVar, so a copied context has its own.
    open_get: Py<PyAny>,
    open_set: Py<PyAny>,
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
        let current = context_var.call(
            ("custream.current_stream",),
            Some(&[("default", default)].into_py_dict(py)?),
        )?;
        let open = context_var.call(
            ("custream.open_with_blocks",),
            Some(&[("default", py.None())].into_py_dict(py)?),
        )?;
        let method = |var: &Bound<'_, PyAny>, name: &str| var.getattr(name).map(Bound::unbind);
        Ok(Vars {
            get: method(&current, "get")?,
            set: method(&current, "set")?,
            reset: method(&current, "reset")?,
            open_get: method(&open, "get")?,
            open_set: method(&open, "set")?,
        })
    })
}

/// `custream.current_stream`: the innermost `with` block's stream, else the default.
pub fn current_stream_function(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    Ok(vars(py)?.get.bind(py).clone())
}

/// `custream.current_stream()`.
pub fn current(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    vars(py)?.get.bind(py).call0()
}

/// `with s:`, entering: `s` is current until the matching exit.
pub fn enter(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<()> {
    let vars = vars(py)?;
    let token = vars.set.bind(py).call1((s,))?;
    let below = vars.open_get.bind(py).call0()?;
    let top = PyTuple::new(py, [s.clone(), token, below])?;
    vars.open_set.bind(py).call1((top,))?;
    Ok(())
}

/// `with s:`, leaving: the stream current before the block is current again.
pub fn exit(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<()> {
    let vars = vars(py)?;
    let top = vars.open_get.bind(py).call0()?;
    let innermost = top
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 3 && t.get_borrowed_item(0).is_ok_and(|x| x.is(s)));
    let Some(top) = innermost else {
        return Err(PyRuntimeError::new_err(format!(
            "leaving a `with` block of {} that is not the innermost one open in this thread or \
             task (the current stream is {}): `with` blocks of streams must nest",
            s.repr()?,
            current(py)?.repr()?
        )));
    };
    vars.reset.bind(py).call1((top.get_item(1)?,))?;
    vars.open_set.bind(py).call1((top.get_item(2)?,))?;
    Ok(())
}
