//! The boundary where CPython (or a C consumer) calls into Rust through a raw function
//! pointer: no panic crosses it, a `PyErr` becomes the raised exception, and vectorcall
//! arguments are matched to parameter names with CPython's own wording for mistakes.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

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

impl ErrorReturn for ffi::Py_hash_t {
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

/// A Python-visible signature: positional-or-keyword names, then keyword-only names.
pub struct Signature {
    pub name: &'static str,
    pub positional: &'static [&'static str],
    pub keyword_only: &'static [&'static str],
    pub required: usize,
}

pub type Args<'py, const N: usize> = [Option<Bound<'py, PyAny>>; N];

impl Signature {
    fn slot_of(&self, key: &str) -> Option<usize> {
        self.positional
            .iter()
            .chain(self.keyword_only.iter())
            .position(|n| *n == key)
    }

    fn place<'py, const N: usize>(
        &self,
        out: &mut Args<'py, N>,
        key: &Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let key = key.cast::<PyString>()?;
        let key = key.to_str()?;
        match self.slot_of(key) {
            Some(i) if out[i].is_some() => Err(PyTypeError::new_err(format!(
                "{}() got multiple values for argument '{key}'",
                self.name
            ))),
            Some(i) => {
                out[i] = Some(value);
                Ok(())
            }
            None => Err(PyTypeError::new_err(format!(
                "{}() got an unexpected keyword argument '{key}'",
                self.name
            ))),
        }
    }

    fn positional_count_error(&self, given: usize) -> PyErr {
        let n = self.positional.len();
        let takes = match n {
            0 => "takes no positional arguments".to_owned(),
            1 => "takes 1 positional argument".to_owned(),
            n => format!("takes {n} positional arguments"),
        };
        let were = if given == 1 { "was" } else { "were" };
        PyTypeError::new_err(format!("{}() {takes} but {given} {were} given", self.name))
    }

    fn finish<'py, const N: usize>(&self, out: Args<'py, N>) -> PyResult<Args<'py, N>> {
        debug_assert_eq!(N, self.positional.len() + self.keyword_only.len());
        if let Some(missing) = (0..self.required).find(|&i| out[i].is_none()) {
            return Err(PyTypeError::new_err(format!(
                "{}() missing required argument '{}'",
                self.name, self.positional[missing]
            )));
        }
        Ok(out)
    }

    /// Arguments of a METH_FASTCALL | METH_KEYWORDS call.
    ///
    /// # Safety
    /// The pointers are those CPython passed to the method.
    pub unsafe fn parse_fastcall<'py, const N: usize>(
        &self,
        py: Python<'py>,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<Args<'py, N>> {
        let nargs = nargs as usize;
        if nargs > self.positional.len() {
            return Err(self.positional_count_error(nargs));
        }
        let mut out: Args<'py, N> = std::array::from_fn(|_| None);
        for (i, slot) in out.iter_mut().enumerate().take(nargs) {
            *slot = Some(Bound::from_borrowed_ptr(py, *args.add(i)));
        }
        if !kwnames.is_null() {
            let names = Bound::from_borrowed_ptr(py, kwnames).cast_into::<PyTuple>()?;
            for (j, key) in names.iter().enumerate() {
                let value = Bound::from_borrowed_ptr(py, *args.add(nargs + j));
                self.place(&mut out, &key, value)?;
            }
        }
        self.finish(out)
    }

    /// Arguments of a tp_new-style call (a tuple and a dict, either possibly null).
    ///
    /// # Safety
    /// The pointers are those CPython passed to the slot.
    pub unsafe fn parse_tuple_dict<'py, const N: usize>(
        &self,
        py: Python<'py>,
        args: *mut ffi::PyObject,
        kwargs: *mut ffi::PyObject,
    ) -> PyResult<Args<'py, N>> {
        let mut out: Args<'py, N> = std::array::from_fn(|_| None);
        if !args.is_null() {
            let args = Bound::from_borrowed_ptr(py, args).cast_into::<PyTuple>()?;
            if args.len() > self.positional.len() {
                return Err(self.positional_count_error(args.len()));
            }
            for (i, value) in args.iter().enumerate() {
                out[i] = Some(value);
            }
        }
        if !kwargs.is_null() {
            let kwargs = Bound::from_borrowed_ptr(py, kwargs).cast_into::<PyDict>()?;
            for (key, value) in kwargs.iter() {
                self.place(&mut out, &key, value)?;
            }
        }
        self.finish(out)
    }
}

/// An int for an error message: its repr, or its size when the repr would be long or is
/// refused (CPython limits int-to-decimal conversions to 4300 digits by default).
pub fn int_repr(v: &Bound<'_, PyAny>) -> String {
    match v.repr() {
        Ok(r) if r.len().map_or(false, |n| n <= 40) => r.to_string(),
        _ => {
            let bits = v.call_method0("bit_length").and_then(|b| b.extract::<u64>()).unwrap_or(0);
            let sign = if v.lt(0).unwrap_or(false) { "a negative" } else { "an" };
            format!("{sign} int of {bits} bits")
        }
    }
}

/// Any object for an error message: a short repr that cannot fail. A producer's value may
/// have a repr that raises, or is huge, and the message must still be the one raised.
pub fn short_repr(v: &Bound<'_, PyAny>) -> String {
    if v.is_instance_of::<pyo3::types::PyInt>() {
        return int_repr(v);
    }
    match v.repr().and_then(|r| r.to_str().map(str::to_owned)) {
        Ok(r) if r.chars().count() <= 80 => r,
        Ok(r) => format!("{}...", r.chars().take(60).collect::<String>()),
        Err(_) => format!(
            "a {} object",
            v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "<unknown type>".into())
        ),
    }
}

/// An int that is not a bool: True and False are ints to Python but never a handle, a
/// device or a priority.
pub fn is_int_not_bool(v: &Bound<'_, PyAny>) -> bool {
    v.is_exact_instance_of::<pyo3::types::PyInt>()
        || (v.is_instance_of::<pyo3::types::PyInt>() && !v.is_instance_of::<pyo3::types::PyBool>())
}

/// A device ordinal argument: None, or an int (not a bool) in [0, 2**31).
pub fn device_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<Option<i32>> {
    let Some(v) = value.filter(|v| !v.is_none()) else { return Ok(None) };
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{fname}() device must be an int device ordinal or None, got {}",
            v.get_type().name()?
        )));
    }
    match v.extract::<i64>() {
        Ok(d) if (0..=i32::MAX as i64).contains(&d) => Ok(Some(d as i32)),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{fname}() device must be a non-negative device ordinal below 2**31, got {}",
            int_repr(v)
        ))),
    }
}

/// A flag argument that must be a real bool, so that a typo such as a string is not
/// silently taken as True.
pub fn bool_arg(value: Option<&Bound<'_, PyAny>>, fname: &str, pname: &str, default: bool) -> PyResult<bool> {
    match value {
        None => Ok(default),
        Some(v) => v.cast::<pyo3::types::PyBool>().map(|b| b.is_true()).map_err(|_| {
            PyTypeError::new_err(format!(
                "{fname}() {pname} must be True or False, got {}",
                v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        }),
    }
}

/// An int argument (not a bool) that fits an i32.
pub fn i32_arg(value: Option<&Bound<'_, PyAny>>, fname: &str, pname: &str, default: i32) -> PyResult<i32> {
    let Some(v) = value else { return Ok(default) };
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{fname}() {pname} must be an int, got {}",
            v.get_type().name()?
        )));
    }
    v.extract::<i32>().map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{fname}() {pname} {} is out of range: it must fit a 32-bit signed int",
            int_repr(v)
        ))
    })
}
