//! The boundary where CPython (or a C consumer) calls into Rust through a raw function
//! pointer: no panic crosses it, and a `PyErr` becomes the raised exception. And what the safe
//! API lacks for a lease recycled: `ObjectCell` (a strong reference in an atomic cell) and
//! `sole_reference`.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

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

// ---- objects held without the safe API --------------------------------------------------
// What pyo3's safe API has no word for, for the one speed trick that pays its way (a lease
// recycled: docs/design.md, "The unsafe boundary"): a strong reference held in an atomic
// cell, and whether a reference is the only one.

/// A strong reference to a Python object, or none, held through an atomic pointer: a field
/// taken and put back without a lock; two takers never get the same reference. Every change
/// is made attached (`py`): where there is a GIL, no other thread changes the cell between a
/// load and the store after it, so a change is those two (a locked swap cost a tenth of what
/// `with pool.lease():` adds to CPython's own `with`); on a free-threaded build, a swap.
pub struct ObjectCell(AtomicPtr<ffi::PyObject>);

impl ObjectCell {
    pub fn new(obj: Option<Py<PyAny>>) -> ObjectCell {
        ObjectCell(AtomicPtr::new(obj.map_or(null_mut(), Py::into_ptr)))
    }

    /// Whether the cell holds no reference.
    pub fn is_empty(&self) -> bool {
        self.0.load(Ordering::Acquire).is_null()
    }

    /// Take the reference out, leaving none.
    #[inline]
    pub fn take<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.replace(py, None)
    }

    /// Put `obj` in (or none), returning what was there.
    #[inline]
    pub fn replace<'py>(&self, py: Python<'py>, obj: Option<Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
        let new = obj.map_or(null_mut(), Bound::into_ptr);
        let old = if cfg!(Py_GIL_DISABLED) {
            self.0.swap(new, Ordering::AcqRel)
        } else {
            // The GIL (held: `py`) keeps every other change out until the store.
            let old = self.0.load(Ordering::Acquire);
            self.0.store(new, Ordering::Release);
            old
        };
        // SAFETY: the cell holds a strong reference or null (`new`, `replace`); the swap, or
        // the load and store under the GIL, made it ours alone.
        unsafe { Bound::from_owned_ptr_or_opt(py, old) }
    }
}

impl Drop for ObjectCell {
    /// The reference held is dropped attached (leaked where the interpreter is gone).
    fn drop(&mut self) {
        if !self.0.get_mut().is_null() {
            let _ = Python::try_attach(|py| drop(self.take(py)));
        }
    }
}

/// Whether `obj` is the only reference to its object, so that no one else can see what is
/// done to it: where there is a GIL, which the caller holds (`py`), so that no other thread
/// changes the count meanwhile. Never on a free-threaded build, where another thread may be
/// taking a reference as the count is read.
#[inline]
pub fn sole_reference(obj: &Bound<'_, PyAny>) -> bool {
    if cfg!(Py_GIL_DISABLED) {
        return false;
    }
    // SAFETY: `obj` is alive (a reference to it is held), and the count is read under the GIL.
    unsafe { ffi::Py_REFCNT(obj.as_ptr()) == 1 }
}
