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
//!
//! Entering a block is one `ContextVar.set` and leaving it one `reset`, each a copy of the
//! context's map: a second variable for the open blocks (the first design) doubled both, and
//! `with s:` cost 1.7x CuPy's. The tokens wait on a stack per thread instead, which is all a
//! block needs: it is left on the thread that entered it. asyncio tasks interleave blocks
//! on one thread, so leaving takes the innermost entry of the stream whose token belongs to
//! the running context (`reset` refuses the others).

use std::cell::RefCell;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::IntoPyDict;

use crate::object::make;

/// The environment variable that makes the per-thread default stream the default.
pub const PER_THREAD_ENV: &str = "CUSTREAM_PER_THREAD_DEFAULT_STREAM";

/// The two context variables' methods, bound once.
struct Vars {
    /// The current stream's `get` (default: the default stream): `custream.current_stream`.
    get: Py<PyAny>,
    set: Py<PyAny>,
    reset: Py<PyAny>,
}

static VARS: PyOnceLock<Vars> = PyOnceLock::new();

thread_local! {
    /// The `with` blocks open on this thread, innermost last: (stream, its `set` token).
    static OPEN: RefCell<Vec<(Py<PyAny>, Py<PyAny>)>> = const { RefCell::new(Vec::new()) };
}

fn per_thread_by_default() -> bool {
    std::env::var(PER_THREAD_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

fn vars(py: Python<'_>) -> PyResult<&Vars> {
    VARS.get_or_try_init(py, || {
        let default = make::default_stream(py, if per_thread_by_default() { 2 } else { 0 })?;
        let context_var = py.import("contextvars")?.getattr("ContextVar")?;
        let current = context_var.call(
            ("custream.current_stream",),
            Some(&[("default", default)].into_py_dict(py)?),
        )?;
        let method = |var: &Bound<'_, PyAny>, name: &str| var.getattr(name).map(Bound::unbind);
        Ok(Vars {
            get: method(&current, "get")?,
            set: method(&current, "set")?,
            reset: method(&current, "reset")?,
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
    let token = vars(py)?.set.bind(py).call1((s,))?;
    OPEN.with_borrow_mut(|open| open.push((s.clone().unbind(), token.unbind())));
    Ok(())
}

/// `with s:`, leaving: the stream current before the block is current again.
pub fn exit(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<()> {
    let vars = vars(py)?;
    let current = vars.get.bind(py).call0()?;
    if current.is(s) {
        // Innermost first, with no borrow of OPEN held across a call into Python: what `reset`
        // replaces may be a last reference, and its release may enter or leave a block.
        let mut at = OPEN.with_borrow(Vec::len);
        while let Some(i) = at.checked_sub(1) {
            at = i;
            let token = OPEN.with_borrow(|open| open.get(i).filter(|(o, _)| o.is(s)).map(|(_, t)| t.bind(py).clone()));
            let Some(token) = token else { continue };
            match vars.reset.bind(py).call1((&token,)) {
                Ok(_) => {
                    let entry = OPEN.with_borrow_mut(|open| {
                        let ours = open.get(i).is_some_and(|(_, t)| t.is(&token));
                        ours.then(|| open.remove(i))
                    });
                    // Released now, bound (a `Py` dropped in a slot of ours waits for pyo3's
                    // next attach), and after the borrow: a last reference may run Python.
                    drop(entry.map(|(stream, token)| (stream.into_bound(py), token.into_bound(py))));
                    return Ok(());
                }
                // A token of another context: an interleaved task's block of the same stream.
                Err(e) if e.is_instance_of::<PyValueError>(py) => continue,
                Err(e) => return Err(e),
            }
        }
    }
    Err(PyRuntimeError::new_err(format!(
        "leaving a `with` block of {} that is not the innermost one open in this thread or \
         task (the current stream is {}): `with` blocks of streams must nest",
        s.repr()?,
        current.repr()?
    )))
}
