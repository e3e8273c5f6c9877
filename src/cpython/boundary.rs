//! The boundary where CPython (or a C consumer) calls into Rust through a raw function
//! pointer: no panic crosses it, and a `PyErr` becomes the raised exception.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// The value a C entry point returns when it has set an exception.
pub trait ErrorReturn: Copy {
    const ERROR: Self;
}

impl ErrorReturn for *mut ffi::PyObject {
    const ERROR: Self = std::ptr::null_mut();
}

impl ErrorReturn for c_int {
    const ERROR: Self = -1;
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Run the body of a C entry point. The caller holds the GIL (CPython guarantees it for
/// slots and methods; the C API documents it for its table).
pub fn boundary<R: ErrorReturn>(body: impl FnOnce(Python<'_>) -> PyResult<R>) -> R {
    // SAFETY: every caller of a C entry point is attached to the interpreter.
    let py = unsafe { Python::assume_attached() };
    match catch_unwind(AssertUnwindSafe(|| body(py))) {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => {
            raise(py, err);
            R::ERROR
        }
        Err(payload) => {
            let err = PyRuntimeError::new_err(format!(
                "custream internal error (please report it): {}",
                panic_message(payload)
            ));
            raise(py, err);
            R::ERROR
        }
    }
}

/// Set `err` as the raised exception. Under `assume_attached` pyo3 does not count the
/// thread as attached, so a `Py` dropped there (the exception's type and value as it is
/// raised, an error fetched and replaced earlier in the call) goes to pyo3's deferred-release
/// pool instead of being released, and that pool only drains when some pyo3 trampoline runs:
/// error-heavy loops over custream's slots grew memory. Raising attached releases them now
/// and drains what the call queued. `try_attach`: pyo3 refuses to attach while the
/// interpreter finalizes, and a panic here would abort; then it is raised as before.
fn raise(py: Python<'_>, err: PyErr) {
    let mut err = Some(err);
    let _ = Python::try_attach(|py| {
        if let Some(e) = err.take() {
            e.restore(py);
        }
    });
    if let Some(e) = err {
        e.restore(py);
    }
}

/// Run `f` where there is no caller to report to (deallocation, tp_clear): a panic is
/// stopped here instead of unwinding into CPython, and the object is left as it is.
pub fn no_unwind(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}
