//! CPython's calling conventions, for the entry points that touch no Stream's memory: the
//! argument lists of METH_FASTCALL and tp_new calls as safe views borrowed for the call
//! (`Fastcall`, `TupleDict`), the shims of module functions and of the C API's object
//! arguments, and the method descriptors of pyclass methods built by hand. The Stream
//! object's memory and the shims that reach it are src/object/memory.rs's; the rules there
//! (every shim runs attached, the pointers are CPython's or the C caller's, live for the
//! call) make the `unsafe` blocks here sound too.

use std::ptr::null_mut;

use std::ffi::CStr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule, PyString, PyTuple};

/// A builtin function of module `m` from a definition that lives for the process.
pub fn builtin<'py>(m: &Bound<'py, PyModule>, def: ffi::PyMethodDef) -> PyResult<Bound<'py, PyAny>> {
    let def = Box::leak(Box::new(def));
    let name = m.name()?;
    // SAFETY: the definition is leaked, so it lives for the process as CPython requires; the
    // module name is a str.
    unsafe { Bound::from_owned_ptr_or_err(m.py(), ffi::PyCMethod_New(def, null_mut(), name.as_ptr(), null_mut())) }
}

/// The method descriptor of `f` (a `hand_built_method!` shim, METH_FASTCALL |
/// METH_KEYWORDS) for the pyclass `T`, as CPython's own methods are: a call binds no method
/// object, and CPython checks that `self` is a `T` before the shim runs. The value of a
/// `#[classattr]` of `T`'s `#[pymethods]` block, so the method is in the type from its
/// creation (pyo3 hands a classattr the type while it fills the type's dict). For a method
/// whose call must cost less than pyo3's argument extraction and bookkeeping
/// (docs/design.md, "The unsafe boundary"). The definition is leaked: it lives for the
/// process, as CPython requires.
pub fn method_descriptor<T: pyo3::PyClass>(
    py: Python<'_>,
    name: &'static CStr,
    f: ffi::PyCFunctionFastWithKeywords,
    doc: &'static CStr,
) -> PyResult<Py<PyAny>> {
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: f,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    }));
    let tp = py.get_type::<T>();
    // SAFETY: `tp` is a live type object and the definition lives for the process, as
    // PyDescr_NewMethod requires; the result is a new reference or NULL with an exception set.
    unsafe { Ok(Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(tp.as_type_ptr(), def))?.unbind()) }
}

/// A method of the pyclass `$t` built by hand (METH_FASTCALL | METH_KEYWORDS), as the value
/// of a `#[classattr]` in `$t`'s `#[pymethods]` block: `$f` is a safe
/// `fn(&Bound<$t>, Option<Fastcall>) -> PyResult<Py<PyAny>>` (None: called without
/// arguments), `$doc` its text signature and docstring. The one way a class of custream gets
/// a method that pyo3 does not build.
///
/// `hand_built_method!(function_o, m, name, f, doc)`: a METH_O function of module `m`, `$f` a
/// safe `fn(Python, Option<Borrowed>) -> PyResult<Py<PyAny>>`.
macro_rules! hand_built_method {
    (function_o, $m:expr, $name:expr, $f:expr, $doc:expr) => {{
        unsafe extern "C" fn shim(
            _m: *mut pyo3::ffi::PyObject,
            arg: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a METH_O function attached, with a live argument.
            unsafe {
                $crate::cpython::raw_call::function_o(arg, |py, arg| {
                    $crate::cpython::boundary::boundary(|_| $f(py, arg).map(pyo3::Py::into_ptr))
                })
            }
        }
        $crate::cpython::raw_call::builtin(
            $m,
            pyo3::ffi::PyMethodDef {
                ml_name: $name.as_ptr(),
                ml_meth: pyo3::ffi::PyMethodDefPointer { PyCFunction: shim },
                ml_flags: pyo3::ffi::METH_O,
                ml_doc: $doc.as_ptr(),
            },
        )
    }};
    ($py:expr, $t:ty, $name:expr, $f:expr, $doc:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            args: *const *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
            kwnames: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a method descriptor's METH_FASTCALL function attached,
            // with a live `self` of the type and these (`method_descriptor`).
            unsafe {
                $crate::cpython::raw_call::pyclass_method_fastcall::<$t>(obj, args, nargs, kwnames, |obj, args| {
                    $crate::cpython::boundary::boundary(|_| $f(obj, args).map(pyo3::Py::into_ptr))
                })
            }
        }
        $crate::cpython::raw_call::method_descriptor::<$t>($py, $name, shim, $doc)
    }};
}
pub(crate) use hand_built_method;

/// # Safety
/// What CPython passes to a METH_FASTCALL | METH_KEYWORDS method of `method_descriptor` for
/// `T`: `obj` is the live `self` (a `T`, checked by the descriptor), the rest as for
/// `Fastcall::new`; the thread is attached. `f` gets None for a call without arguments.
#[inline(always)]
pub unsafe fn pyclass_method_fastcall<T: pyo3::PyClass>(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(&Bound<'a, T>, Option<Fastcall<'a, 'a>>) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract: the thread is attached, `obj` is alive and the rest what
    // CPython passes to a METH_FASTCALL method, all for the call; and `obj` is a `T`: the
    // method descriptor is the only way to this function, and it refuses (TypeError) a `self`
    // that is not an instance of its type before calling it (CPython's `descr_check`).
    let (obj, args) = unsafe {
        let py = Python::assume_attached();
        // None for a call without arguments, the common one: nothing to look at.
        let args = (nargs != 0 || !kwnames.is_null()).then(|| Fastcall::new(py, args, nargs, kwnames));
        (Borrowed::from_ptr(py, obj).cast_unchecked::<T>(), args)
    };
    f(&obj, args)
}

/// Positional and keyword arguments of a METH_FASTCALL call, borrowed for the call.
pub struct Fastcall<'a, 'py> {
    args: &'a [Borrowed<'a, 'py, PyAny>],
    nargs: usize,
    kwnames: Option<Borrowed<'a, 'py, PyTuple>>,
}

impl<'a, 'py> Fastcall<'a, 'py> {
    /// # Safety
    /// What CPython passes to a METH_FASTCALL (| METH_KEYWORDS) function: `nargs` live
    /// positional arguments, then one live value per name of `kwnames` (NULL or a tuple).
    pub(crate) unsafe fn new(
        py: Python<'py>,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> Self {
        let nargs = usize::try_from(nargs).unwrap_or(0);
        // SAFETY: the caller's contract: `kwnames` is NULL or a live tuple of names.
        let kwnames = unsafe { Borrowed::from_ptr_or_opt(py, kwnames).map(|k| k.cast_unchecked::<PyTuple>()) };
        let total = nargs + kwnames.map_or(0, |k| k.len());
        let args = if total == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's contract: `total` live (so non-null) arguments start at
            // `args`, borrowed for the call ('a); a `Borrowed` is `#[repr(transparent)]` over
            // its object pointer (its other fields are zero-sized; `BORROWED_IS_A_POINTER`).
            unsafe { std::slice::from_raw_parts(args.cast::<Borrowed<'a, 'py, PyAny>>(), total) }
        };
        let () = BORROWED_IS_A_POINTER;
        Fastcall { args, nargs, kwnames }
    }

    /// Whether the call passed no argument at all.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Whether the call passed any keyword argument.
    #[inline]
    pub fn has_keywords(&self) -> bool {
        self.args.len() > self.nargs
    }

    /// Whether the call passed exactly `n` arguments, all positional.
    #[inline]
    pub fn is_positional(&self, n: usize) -> bool {
        self.nargs == n && self.args.len() == n
    }

    /// The positional arguments.
    pub fn positional(&self) -> impl ExactSizeIterator<Item = Borrowed<'a, 'py, PyAny>> + '_ {
        self.args[..self.nargs].iter().copied()
    }

    /// The value of the call's only argument when it is the keyword `name` passed by the
    /// very object `name` (an interned str), else None: what `f(name=v)` gives, for a fast
    /// path before `Signature::parse_fastcall`. CPython interns the keyword names a call's
    /// code spells, so a pointer compare finds them; a name built at run time (`**kwargs`)
    /// is not found here, and the caller's full parse takes it.
    #[inline]
    pub fn only_keyword(&self, name: &Bound<'py, PyString>) -> Option<Borrowed<'a, 'py, PyAny>> {
        let names = self.kwnames?;
        if self.nargs != 0 || self.args.len() != 1 {
            return None;
        }
        // `names` is a tuple with one item (one argument, not positional).
        let given = names.get_borrowed_item(0).ok()?;
        given.is(name).then_some(self.args[0])
    }

    /// The keyword arguments, as (name, value).
    pub fn keywords(&self) -> Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let Some(names) = self.kwnames else {
            return Vec::new();
        };
        let values = &self.args[self.nargs..];
        names
            .iter()
            .zip(values)
            .map(|(name, &value)| (name, Borrowed::to_owned(value)))
            .collect()
    }
}

/// What `Fastcall::new` relies on to see CPython's argument pointers as `Borrowed`s.
const BORROWED_IS_A_POINTER: () = assert!(
    size_of::<Borrowed<'static, 'static, PyAny>>() == size_of::<*mut ffi::PyObject>()
        && align_of::<Borrowed<'static, 'static, PyAny>>() == align_of::<*mut ffi::PyObject>()
);

/// The argument tuple and keyword dict of a tp_new call, borrowed for the call.
pub struct TupleDict<'a, 'py> {
    pub args: Option<Borrowed<'a, 'py, PyTuple>>,
    pub kwargs: Option<Borrowed<'a, 'py, PyDict>>,
}

/// # Safety
/// What CPython passes to a static METH_FASTCALL method; the thread is attached.
#[inline(always)]
pub unsafe fn function_fastcall(
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(Python<'a>, Fastcall<'a, 'a>) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract: the thread is attached, and these are what CPython passes to a
    // METH_FASTCALL function, live for the call.
    let (py, args) = unsafe {
        let py = Python::assume_attached();
        (py, Fastcall::new(py, args, nargs, kwnames))
    };
    f(py, args)
}

/// # Safety
/// `arg` is the live argument of a METH_O function (or a C API object argument: NULL or
/// alive); the thread is attached.
#[inline(always)]
pub unsafe fn function_o<R>(
    arg: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(Python<'a>, Option<Borrowed<'a, 'a, PyAny>>) -> R,
) -> R {
    // SAFETY: the caller's contract: the thread is attached and `arg` is NULL or alive for the
    // call.
    let (py, arg) = unsafe {
        let py = Python::assume_attached();
        (py, Borrowed::from_ptr_or_opt(py, arg))
    };
    f(py, arg)
}

/// # Safety
/// What CPython passes to tp_new; the thread is attached.
#[inline(always)]
pub unsafe fn new(
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(Python<'a>, TupleDict<'a, 'a>) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the caller's contract: the thread is attached, and tp_new gets an argument tuple and
    // a keyword dict (or NULL), live for the call.
    let (py, args) = unsafe {
        let py = Python::assume_attached();
        let args = TupleDict {
            args: Borrowed::from_ptr_or_opt(py, args).map(|a| a.cast_unchecked()),
            kwargs: Borrowed::from_ptr_or_opt(py, kwargs).map(|k| k.cast_unchecked()),
        };
        (py, args)
    };
    f(py, args)
}
