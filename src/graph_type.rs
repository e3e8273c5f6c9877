//! The Python face of host functions, capture and custream.Graph: the Stream methods
//! `launch_host_func`, `begin_capture`, `end_capture` and the `is_capturing` getter (entries
//! of the Stream type's tables in src/stream_type.rs), Graph's methods, and
//! `check_foreign_captures`. Arguments are parsed here; the work is in src/callback.rs and
//! src/graph.rs.

use std::ffi::c_void;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyTuple, PyType};

use crate::args::{bool_arg, Signature};
use crate::boundary::boundary;
use crate::callback;
use crate::errors::refuse_pickle;
use crate::graph::{self, Graph};
use crate::protocol;
use crate::stream::StreamRef;

// Every function below is a method or getter of the Stream type: CPython calls it with the
// GIL held and `obj` a live Stream, which is the SAFETY of each `StreamRef::of(obj)`.

pub unsafe extern "C" fn launch_host_func(
    obj: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    // SAFETY: see above.
    let s = unsafe { StreamRef::of(obj) };
    boundary(|py| {
        if nargs < 1 {
            return Err(PyTypeError::new_err(
                "launch_host_func() missing required argument 'fn'",
            ));
        }
        // SAFETY: METH_FASTCALL passes `nargs` live positional arguments.
        let all = unsafe { std::slice::from_raw_parts(args, nargs as usize) };
        // SAFETY: live arguments, borrowed for the call.
        let function = unsafe { Bound::from_borrowed_ptr(py, all[0]) };
        // SAFETY: as above.
        let rest = all[1..].iter().map(|&a| unsafe { Bound::from_borrowed_ptr(py, a) });
        let rest = PyTuple::new(py, rest)?;
        callback::launch(py, s, function, rest)?;
        Ok(py.None().into_ptr())
    })
}

static BEGIN_SIG: Signature = Signature {
    name: "begin_capture",
    positional: &["mode"],
    keyword_only: &[],
    required: 0,
};

pub unsafe extern "C" fn begin_capture(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: see above.
    let s = unsafe { StreamRef::of(obj) };
    boundary(|py| {
        // SAFETY: the vectorcall arguments CPython passed.
        let [mode] = unsafe { BEGIN_SIG.parse_fastcall::<1>(py, args, nargs, kwnames) }?;
        graph::begin(py, s, graph::parse_mode(mode.as_ref())?)?;
        Ok(py.None().into_ptr())
    })
}

pub unsafe extern "C" fn end_capture(obj: *mut ffi::PyObject, _: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: see above.
    let s = unsafe { StreamRef::of(obj) };
    boundary(|py| Ok(Bound::new(py, graph::end(py, s)?)?.into_ptr()))
}

pub unsafe extern "C" fn get_is_capturing(obj: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: see above.
    let s = unsafe { StreamRef::of(obj) };
    boundary(|py| Ok(PyBool::new(py, graph::is_capturing(py, s)?).to_owned().into_ptr()))
}

/// Whether custream asks the driver, before each ``query()`` and ``synchronize()``, if the
/// stream is capturing a CUDA graph that another library began on the same handle, and then
/// refuses instead of letting the driver invalidate that capture. Off by default: it costs
/// one driver call on those fast paths. Captures begun through custream are always guarded.
///
/// ``check_foreign_captures()`` returns the setting; ``check_foreign_captures(True)`` (or
/// False) sets it and returns the previous one.
#[pyfunction]
#[pyo3(signature = (enabled = None))]
pub fn check_foreign_captures(enabled: Option<Bound<'_, PyAny>>) -> PyResult<bool> {
    match enabled {
        None => Ok(graph::foreign_checks()),
        Some(v) => Ok(graph::set_foreign_checks(bool_arg(
            Some(&v),
            "check_foreign_captures",
            "enabled",
            false,
        )?)),
    }
}

fn stream_arg<'py>(stream: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, StreamRef)> {
    let stream = protocol::as_stream(stream)?;
    // SAFETY: as_stream returns a live custream.Stream, which the caller keeps alive.
    let s = unsafe { StreamRef::of(stream.as_ptr()) };
    Ok((stream, s))
}

#[pymethods]
impl Graph {
    /// Launch the graph on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object):
    /// it runs after the work queued there before, and later work waits for it.
    #[pyo3(name = "launch")]
    fn py_launch(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let (_keep, s) = stream_arg(stream)?;
        self.launch(py, s)
    }

    /// Upload the graph's work to the device on ``stream`` ahead of its first launch.
    #[pyo3(name = "upload")]
    fn py_upload(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let (_keep, s) = stream_arg(stream)?;
        self.upload(py, s)
    }

    /// The CUgraphExec handle as an int.
    #[getter(handle)]
    fn py_handle(&self) -> PyResult<u64> {
        self.handle()
    }

    /// The device of the context the graph was captured and instantiated in.
    #[getter(device)]
    fn py_device(&self) -> i32 {
        self.device()
    }

    /// The number of nodes the capture recorded.
    #[getter(node_count)]
    fn py_node_count(&self) -> usize {
        self.node_count()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Destroy the executable graph (launches in flight finish first); idempotent.
    #[pyo3(name = "close")]
    fn py_close(&self, py: Python<'_>) -> PyResult<()> {
        self.close(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { " closed" } else { "" };
        format!(
            "<custream.Graph handle={:#x} device={} nodes={}{state}>",
            self.handle_value(),
            self.device(),
            self.node_count()
        )
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        Err(refuse_pickle(slf.as_any(), "a CUDA graph belongs to one process"))
    }
}
