//! The Stream type's tables, built from slots with PyType_FromSpec: `tp_basicsize` is
//! `sizeof(CustreamStream)`, so Cython's size check and the C API see exactly the layout
//! pxd/custream.h declares (pyo3's #[pyclass] layout is not a C ABI). src/stream/slots.rs
//! declares the type with `stream_type!`: each slot, method and getter a safe Rust function;
//! the `unsafe extern "C"` shims CPython calls, the method and getter definitions and the
//! spec are made here.
//!
//! What a face function returns becomes CPython's return value through `Outcome`: a
//! `PyResult<Py<PyAny>>` runs inside `boundary` (no panic crosses, an error is raised); a
//! `Py<PyAny>` is handed over as it is, for the getters that only read fields (no code there
//! can panic, and they stay a few loads).

use std::ffi::{c_int, c_void, CStr};
use std::mem::offset_of;
use std::ptr::null_mut;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::cpython::boundary::boundary;
use crate::cpython::stream_object::{self, CustreamStream, STREAM_SIZE};

/// What a face function of the Stream type returns, made into CPython's return value.
pub trait Outcome {
    fn finish(body: impl FnOnce() -> Self) -> *mut ffi::PyObject;
}

impl Outcome for Py<PyAny> {
    #[inline(always)]
    fn finish(body: impl FnOnce() -> Self) -> *mut ffi::PyObject {
        body().into_ptr()
    }
}

impl Outcome for PyResult<Py<PyAny>> {
    #[inline(always)]
    fn finish(body: impl FnOnce() -> Self) -> *mut ffi::PyObject {
        boundary(|_| body().map(Py::into_ptr))
    }
}

/// `Outcome::finish`, its type inferred from the body.
#[inline(always)]
pub fn finish<O: Outcome>(body: impl FnOnce() -> O) -> *mut ffi::PyObject {
    O::finish(body)
}

pub fn method_def(
    name: &'static CStr,
    meth: ffi::PyMethodDefPointer,
    flags: c_int,
    doc: &'static CStr,
) -> ffi::PyMethodDef {
    ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: meth,
        ml_flags: flags,
        ml_doc: doc.as_ptr(),
    }
}

pub type Getter = unsafe extern "C" fn(*mut ffi::PyObject, *mut c_void) -> *mut ffi::PyObject;
pub type Setter = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, *mut c_void) -> c_int;

pub fn getter_def(name: &'static CStr, get: Getter, doc: &'static CStr) -> ffi::PyGetSetDef {
    ffi::PyGetSetDef {
        name: name.as_ptr(),
        get: Some(get),
        set: None,
        doc: doc.as_ptr(),
        closure: null_mut(),
    }
}

/// A read-write attribute: `get`, and `set` (called with NULL to delete).
pub fn getset_def(name: &'static CStr, get: Getter, set: Setter, doc: &'static CStr) -> ffi::PyGetSetDef {
    ffi::PyGetSetDef {
        set: Some(set),
        ..getter_def(name, get, doc)
    }
}

/// The slots of the type, as `stream_type!` makes them.
pub struct Slots {
    pub doc: &'static CStr,
    pub new: ffi::newfunc,
    pub dealloc: ffi::destructor,
    pub traverse: ffi::traverseproc,
    pub clear: ffi::inquiry,
    pub repr: ffi::reprfunc,
    pub hash: ffi::hashfunc,
    pub richcompare: ffi::richcmpfunc,
}

fn leak<T>(v: Vec<T>) -> *mut T {
    Box::leak(v.into_boxed_slice()).as_mut_ptr()
}

/// Build the Stream type (once per process) and remember it.
pub fn create<'py>(
    py: Python<'py>,
    slots: Slots,
    mut methods: Vec<ffi::PyMethodDef>,
    mut getters: Vec<ffi::PyGetSetDef>,
) -> PyResult<Bound<'py, PyType>> {
    if let Some(existing) = stream_object::stream_type(py) {
        return Ok(existing);
    }
    methods.push(ffi::PyMethodDef::zeroed());
    getters.push(ffi::PyGetSetDef {
        name: std::ptr::null(),
        get: None,
        set: None,
        doc: std::ptr::null(),
        closure: null_mut(),
    });
    let members = leak(vec![
        ffi::PyMemberDef {
            name: c"__weaklistoffset__".as_ptr(),
            type_code: ffi::Py_T_PYSSIZET,
            offset: offset_of!(CustreamStream, weakreflist) as ffi::Py_ssize_t,
            flags: ffi::Py_READONLY,
            doc: std::ptr::null(),
        },
        ffi::PyMemberDef {
            name: std::ptr::null(),
            type_code: 0,
            offset: 0,
            flags: 0,
            doc: std::ptr::null(),
        },
    ]);
    let slot = |slot: c_int, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
    let table = leak(vec![
        slot(ffi::Py_tp_doc, slots.doc.as_ptr() as *mut c_void),
        slot(ffi::Py_tp_new, slots.new as *mut c_void),
        slot(ffi::Py_tp_dealloc, slots.dealloc as *mut c_void),
        slot(ffi::Py_tp_traverse, slots.traverse as *mut c_void),
        slot(ffi::Py_tp_clear, slots.clear as *mut c_void),
        slot(ffi::Py_tp_repr, slots.repr as *mut c_void),
        slot(ffi::Py_tp_hash, slots.hash as *mut c_void),
        slot(ffi::Py_tp_richcompare, slots.richcompare as *mut c_void),
        slot(ffi::Py_tp_methods, leak(methods).cast()),
        slot(ffi::Py_tp_getset, leak(getters).cast()),
        slot(ffi::Py_tp_members, members.cast()),
        slot(0, null_mut()),
    ]);
    let spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"custream.Stream".as_ptr(),
        basicsize: STREAM_SIZE as c_int,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_HAVE_GC | ffi::Py_TPFLAGS_IMMUTABLETYPE) as _,
        slots: table,
    }));
    // SAFETY: the spec and the tables it points to are leaked: they live for the process, as
    // CPython requires of a spec's slots, methods and getters. The result is a new reference
    // to a type object, or null with an exception set.
    let tp: Bound<'py, PyType> =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))?.cast_into_unchecked() };
    equality_only(&tp)?;
    // The type lives for the process: this reference is never given back.
    stream_object::set_stream_type(tp.clone());
    Ok(tp)
}

/// Take `<`, `<=`, `>` and `>=` out of the dict of `tp`, a type with `==` and `!=` only.
///
/// CPython gives a type with a comparison slot all six comparison wrappers, and help() lists
/// them, although the four orderings only ever raise TypeError. They are deleted from the
/// type's own dict (the mapping its read-only `__dict__` proxy holds: the limited API has no
/// PyType_GetDict, and an immutable type refuses `delattr`), and the type's attribute cache is
/// reset. The comparison slot itself is untouched: `==` stays a direct call, `a < b` still
/// reaches it and raises TypeError, and `Stream.__lt__` is object's, which help() leaves out.
/// Should a CPython lead elsewhere (no dict holding the type's `__eq__` behind the proxy), the
/// type is left as it is: help() then lists the orderings, and the import still works
/// (tests/test_stream_type.py says so on every CPython CI runs).
pub fn equality_only(tp: &Bound<'_, PyType>) -> PyResult<()> {
    let py = tp.py();
    let proxy = tp.getattr("__dict__")?;
    let referents = py.import("gc")?.call_method1("get_referents", (&proxy,))?;
    let Ok(dict) = referents.get_item(0).and_then(|d| Ok(d.cast_into::<PyDict>()?)) else {
        return Ok(());
    };
    if !dict.contains("__eq__")? {
        return Ok(());
    }
    for name in ["__lt__", "__le__", "__gt__", "__ge__"] {
        if dict.contains(name)? {
            dict.del_item(name)?;
        }
    }
    // SAFETY: `tp` is a live type object, held for the call; PyType_Modified only invalidates
    // the attribute caches that hold its dict's old entries.
    unsafe { ffi::PyType_Modified(tp.as_type_ptr()) };
    Ok(())
}

/// One `unsafe extern "C"` shim of the Stream type: CPython's pointers made into the views of
/// src/cpython/stream_object.rs (rule 4 there: attached, CPython's live pointers) for a safe
/// face function `$f`.
#[doc(hidden)]
macro_rules! stream_shim {
    // METH_NOARGS (and METH_VARARGS whose arguments are not looked at): `$f(s, py)`.
    (noargs, $f:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            _: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a Stream method attached, on a live Stream.
            unsafe {
                $crate::cpython::stream_object::slot(obj, |s, py| $crate::cpython::stream_type::finish(|| $f(s, py)))
            }
        }
        shim as pyo3::ffi::PyCFunction
    }};
    // METH_O: `$f(s, py, arg)`.
    (o, $f:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            arg: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a Stream method attached, on a live Stream, with a live
            // argument.
            unsafe {
                $crate::cpython::stream_object::method(obj, arg, |s, py, arg| {
                    $crate::cpython::stream_type::finish(|| $f(s, py, arg))
                })
            }
        }
        shim as pyo3::ffi::PyCFunction
    }};
    // METH_FASTCALL | METH_KEYWORDS: `$f(s, py, args)`.
    (fastcall, $f:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            args: *const *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
            kwnames: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a METH_FASTCALL Stream method attached and these.
            unsafe {
                $crate::cpython::stream_object::method_fastcall(obj, args, nargs, kwnames, |s, py, args| {
                    $crate::cpython::stream_type::finish(|| $f(s, py, args))
                })
            }
        }
        shim as pyo3::ffi::PyCFunctionFastWithKeywords
    }};
    // METH_FASTCALL, positional arguments only: `$f(s, py, args)`.
    (positional, $f:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            args: *mut *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a METH_FASTCALL Stream method attached and these.
            unsafe {
                $crate::cpython::stream_object::method_fastcall(
                    obj,
                    args,
                    nargs,
                    std::ptr::null_mut(),
                    |s, py, args| $crate::cpython::stream_type::finish(|| $f(s, py, args)),
                )
            }
        }
        shim as pyo3::ffi::PyCFunctionFast
    }};
    // A static METH_FASTCALL | METH_KEYWORDS method: `$f(py, args)`.
    (static_fastcall, $f:expr) => {{
        unsafe extern "C" fn shim(
            _cls: *mut pyo3::ffi::PyObject,
            args: *const *mut pyo3::ffi::PyObject,
            nargs: pyo3::ffi::Py_ssize_t,
            kwnames: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a static METH_FASTCALL method attached and these.
            unsafe {
                $crate::cpython::raw_call::function_fastcall(args, nargs, kwnames, |py, args| {
                    $crate::cpython::stream_type::finish(|| $f(py, args))
                })
            }
        }
        shim as pyo3::ffi::PyCFunctionFastWithKeywords
    }};
    // A static METH_VARARGS | METH_KEYWORDS method: `$f(py, args)`.
    (static_varargs, $f:expr) => {{
        unsafe extern "C" fn shim(
            _cls: *mut pyo3::ffi::PyObject,
            args: *mut pyo3::ffi::PyObject,
            kwargs: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a METH_VARARGS | METH_KEYWORDS function attached, with an
            // argument tuple and a keyword dict or NULL.
            unsafe {
                $crate::cpython::raw_call::new(args, kwargs, |py, args| {
                    $crate::cpython::stream_type::finish(|| $f(py, args))
                })
            }
        }
        shim as pyo3::ffi::PyCFunctionWithKeywords
    }};
    (getter, $f:expr) => {{
        unsafe extern "C" fn shim(obj: *mut pyo3::ffi::PyObject, _: *mut std::ffi::c_void) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls a Stream getter attached, on a live Stream.
            unsafe {
                $crate::cpython::stream_object::slot(obj, |s, py| $crate::cpython::stream_type::finish(|| $f(s, py)))
            }
        }
        shim as $crate::cpython::stream_type::Getter
    }};
    // A setter: `$f(s, py, value) -> PyResult<()>`, `value` None when the attribute is
    // deleted.
    (setter, $f:expr) => {{
        unsafe extern "C" fn shim(
            obj: *mut pyo3::ffi::PyObject,
            value: *mut pyo3::ffi::PyObject,
            _: *mut std::ffi::c_void,
        ) -> std::ffi::c_int {
            // SAFETY: CPython calls a Stream setter attached, on a live Stream, with a live
            // value (NULL to delete).
            unsafe {
                $crate::cpython::stream_object::method(obj, value, |s, py, value| {
                    $crate::cpython::boundary::boundary(|_| $f(s, py, value).map(|()| 0))
                })
            }
        }
        shim as $crate::cpython::stream_type::Setter
    }};
}
pub(crate) use stream_shim;

/// The method definition of `stream_type!`'s `(kind, name, f, doc)`.
#[doc(hidden)]
macro_rules! stream_method {
    (noargs, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunction: $crate::cpython::stream_type::stream_shim!(noargs, $f),
            },
            pyo3::ffi::METH_NOARGS,
            $doc,
        )
    };
    (varargs, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunction: $crate::cpython::stream_type::stream_shim!(noargs, $f),
            },
            pyo3::ffi::METH_VARARGS,
            $doc,
        )
    };
    (o, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunction: $crate::cpython::stream_type::stream_shim!(o, $f),
            },
            pyo3::ffi::METH_O,
            $doc,
        )
    };
    (fastcall, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: $crate::cpython::stream_type::stream_shim!(fastcall, $f),
            },
            pyo3::ffi::METH_FASTCALL | pyo3::ffi::METH_KEYWORDS,
            $doc,
        )
    };
    (positional, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunctionFast: $crate::cpython::stream_type::stream_shim!(positional, $f),
            },
            pyo3::ffi::METH_FASTCALL,
            $doc,
        )
    };
    (static_fastcall, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: $crate::cpython::stream_type::stream_shim!(static_fastcall, $f),
            },
            pyo3::ffi::METH_STATIC | pyo3::ffi::METH_FASTCALL | pyo3::ffi::METH_KEYWORDS,
            $doc,
        )
    };
    // In place of the generic `__new__` wrapper CPython adds for tp_new (METH_COEXIST), so
    // that `help()` shows the real signature.
    (static_new, $name:expr, $f:expr, $doc:expr) => {
        $crate::cpython::stream_type::method_def(
            $name,
            pyo3::ffi::PyMethodDefPointer {
                PyCFunctionWithKeywords: $crate::cpython::stream_type::stream_shim!(static_varargs, $f),
            },
            pyo3::ffi::METH_STATIC | pyo3::ffi::METH_VARARGS | pyo3::ffi::METH_KEYWORDS | pyo3::ffi::METH_COEXIST,
            $doc,
        )
    };
}
pub(crate) use stream_method;

/// The Stream type, declared by src/stream/slots.rs: its docstring, its slots (safe functions:
/// `new(py, TupleDict)`, `dealloc(s, py)`, `clear(s, py)`, `repr(s, py)`, `hash(s, py) ->
/// isize`, `richcompare(s, py, other, CompareOp)`), its methods as `(kind, name, f, doc)`
/// (kind: `noargs`, `varargs`, `o`, `fastcall`, `positional`, `static_fastcall`,
/// `static_new`), its getters as `(name, f, doc)` and its read-write attributes as
/// `(name, get, set, doc)` (`set(s, py, value) -> PyResult<()>`). Made once per process
/// (`stream_type::create`).
macro_rules! stream_type {
    (
        $py:expr,
        doc: $doc:expr,
        new: $new:expr,
        dealloc: $dealloc:expr,
        clear: $clear:expr,
        repr: $repr:expr,
        hash: $hash:expr,
        richcompare: $richcompare:expr,
        methods: [$(($kind:ident, $name:expr, $f:expr, $mdoc:expr)),* $(,)?],
        getters: [$(($gname:expr, $g:expr, $gdoc:expr)),* $(,)?],
        getsets: [$(($sname:expr, $sg:expr, $ss:expr, $sdoc:expr)),* $(,)?] $(,)?
    ) => {{
        unsafe extern "C" fn tp_new(
            _tp: *mut pyo3::ffi::PyTypeObject,
            args: *mut pyo3::ffi::PyObject,
            kwargs: *mut pyo3::ffi::PyObject,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls tp_new attached, with an argument tuple and a keyword dict
            // or NULL.
            unsafe { $crate::cpython::raw_call::new(args, kwargs, |py, args| $crate::cpython::stream_type::finish(|| $new(py, args))) }
        }
        unsafe extern "C" fn tp_dealloc(obj: *mut pyo3::ffi::PyObject) {
            // SAFETY: CPython deallocates a Stream whose last reference is gone, attached.
            unsafe { $crate::cpython::stream_object::dealloc(obj, $dealloc) }
        }
        unsafe extern "C" fn tp_traverse(
            obj: *mut pyo3::ffi::PyObject,
            visit: pyo3::ffi::visitproc,
            arg: *mut std::ffi::c_void,
        ) -> std::ffi::c_int {
            // SAFETY: CPython's GC traverses a live Stream.
            unsafe { $crate::cpython::stream_object::traverse(obj, visit, arg) }
        }
        unsafe extern "C" fn tp_clear(obj: *mut pyo3::ffi::PyObject) -> std::ffi::c_int {
            // SAFETY: CPython's GC calls tp_clear attached, on a live Stream.
            unsafe { $crate::cpython::stream_object::slot(obj, |s, py| $crate::cpython::boundary::no_unwind(|| $clear(s, py))) };
            0
        }
        unsafe extern "C" fn tp_repr(obj: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls tp_repr attached, on a live Stream.
            unsafe { $crate::cpython::stream_object::slot(obj, |s, py| $crate::cpython::stream_type::finish(|| $repr(s, py))) }
        }
        unsafe extern "C" fn tp_hash(obj: *mut pyo3::ffi::PyObject) -> pyo3::ffi::Py_hash_t {
            // SAFETY: CPython calls tp_hash attached, on a live Stream.
            unsafe { $crate::cpython::stream_object::slot(obj, $hash) }
        }
        unsafe extern "C" fn tp_richcompare(
            a: *mut pyo3::ffi::PyObject,
            b: *mut pyo3::ffi::PyObject,
            op: std::ffi::c_int,
        ) -> *mut pyo3::ffi::PyObject {
            // SAFETY: CPython calls tp_richcompare attached, `a` a live Stream and `b` a live
            // object.
            unsafe {
                $crate::cpython::stream_object::method(a, b, |a, py, b| match pyo3::basic::CompareOp::from_raw(op) {
                    Some(op) => $crate::cpython::stream_type::finish(|| $richcompare(a, py, b, op)),
                    None => py.NotImplemented().into_ptr(),
                })
            }
        }
        $crate::cpython::stream_type::create(
            $py,
            $crate::cpython::stream_type::Slots {
                doc: $doc,
                new: tp_new,
                dealloc: tp_dealloc,
                traverse: tp_traverse,
                clear: tp_clear,
                repr: tp_repr,
                hash: tp_hash,
                richcompare: tp_richcompare,
            },
            vec![$($crate::cpython::stream_type::stream_method!($kind, $name, $f, $mdoc)),*],
            vec![
                $($crate::cpython::stream_type::getset_def(
                    $sname,
                    $crate::cpython::stream_type::stream_shim!(getter, $sg),
                    $crate::cpython::stream_type::stream_shim!(setter, $ss),
                    $sdoc,
                ),)*
                $($crate::cpython::stream_type::getter_def($gname, $crate::cpython::stream_type::stream_shim!(getter, $g), $gdoc)),*
            ],
        )
    }};
}
pub(crate) use stream_type;
