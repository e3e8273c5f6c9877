//! The Python face of custream.GreenContext, its one `#[pymethods]` block: arguments parsed,
//! work delegated to src/green/context.rs (the green context and the streams made in it).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyTraverseError;

use crate::cpython::args::{device_arg, i32_arg, int_repr, is_int_not_bool};
use crate::driver;
use crate::green::context::{self, closed_error, type_name, GreenContext};
use crate::object::closable::{self, Closable};
use crate::object::make;

/// An SM count: an int (not a bool) of at least 1.
fn sm_count_arg(value: &Bound<'_, PyAny>, fname: &str) -> PyResult<u32> {
    if !is_int_not_bool(value) {
        return Err(PyTypeError::new_err(format!(
            "{fname} sm_count must be an int, got {}",
            type_name(value)
        )));
    }
    if !value.gt(0)? {
        return Err(PyValueError::new_err(format!(
            "{fname} sm_count must be at least 1, got {}",
            int_repr(value)
        )));
    }
    // Past u32 it is past any device's count, which the caller refuses by name.
    Ok(value.extract::<u32>().unwrap_or(u32::MAX))
}

/// The device of `GreenContext()` and `split()`: given, else the current context's, else 0.
fn device_of(device: Option<Bound<'_, PyAny>>, fname: &str) -> PyResult<i32> {
    let device = device_arg(device.as_ref(), fname)?;
    make::existing_device(device, driver::current_context()?)
}

/// A driver handle given as an int: its address, in [0, 2**64).
fn address(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{what} {} is out of range: a handle is an address, in [0, 2**64)",
            int_repr(value)
        ))
    })
}

/// `from_handle`'s handle: an int (a CUgreenCtx), a cuda.bindings `CUgreenCtx` or `CUcontext`
/// (the context converted from a green one: cuda.core's `Context.handle`), or a cuda.core
/// `Context` itself, which then is the owner unless one is given. Returns (raw, is a context,
/// the owner).
fn green_handle_arg<'py>(
    handle: &Bound<'py, PyAny>,
    owner: Option<Bound<'py, PyAny>>,
) -> PyResult<(u64, bool, Option<Bound<'py, PyAny>>)> {
    if is_int_not_bool(handle) {
        return Ok((address(handle, "from_handle() handle")?, false, owner));
    }
    let tp = handle.get_type();
    let name = tp.name()?.to_string();
    let module = tp.module().map(|m| m.to_string()).unwrap_or_default();
    let from_bindings = module.starts_with("cuda.bindings") || module.starts_with("cuda.cuda");
    if from_bindings && (name == "CUgreenCtx" || name == "CUcontext") {
        let raw = address(&handle.call_method0("__int__")?, &format!("from_handle() int({name})"))?;
        return Ok((raw, name == "CUcontext", owner));
    }
    if module.starts_with("cuda.core") && name == "Context" {
        let context = handle.getattr("handle")?;
        let raw = address(&context.call_method0("__int__")?, "from_handle() int(Context.handle)")?;
        return Ok((raw, true, owner.or_else(|| Some(handle.clone()))));
    }
    Err(PyTypeError::new_err(format!(
        "from_handle() handle must be an int (a CUgreenCtx), a cuda.bindings CUgreenCtx or \
         CUcontext, or a cuda.core Context, got {}",
        type_name(handle)
    )))
}

#[pymethods]
impl GreenContext {
    #[new]
    #[pyo3(signature = (sm_count, *, device = None))]
    fn py_new(py: Python<'_>, sm_count: &Bound<'_, PyAny>, device: Option<Bound<'_, PyAny>>) -> PyResult<GreenContext> {
        let sm_count = sm_count_arg(sm_count, "GreenContext()")?;
        let device = device_of(device, "GreenContext")?;
        GreenContext::create(py, device, sm_count)
    }

    /// Two disjoint green contexts of ``device`` (default: the current context's device,
    /// else 0): at least ``sm_count`` SMs, rounded up as the driver requires, and the rest.
    /// E.g. ``small, rest = GreenContext.split(16)`` on a 132-SM H200 gives 16 and 116.
    #[staticmethod]
    #[pyo3(name = "split", signature = (sm_count, *, device = None))]
    fn py_split<'py>(
        py: Python<'py>,
        sm_count: &Bound<'py, PyAny>,
        device: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, GreenContext>, Bound<'py, GreenContext>)> {
        let sm_count = sm_count_arg(sm_count, "GreenContext.split()")?;
        let device = device_of(device, "split")?;
        let (slice, rest) = GreenContext::split_device(py, device, sm_count)?;
        let (slice, rest) = (Bound::new(py, slice)?, Bound::new(py, rest)?);
        context::register(&slice)?;
        context::register(&rest)?;
        Ok((slice, rest))
    }

    /// Adopt another library's green context: ``handle`` is a ``CUgreenCtx`` (an int or a
    /// cuda.bindings ``CUgreenCtx``), or the context converted from one (a cuda.bindings
    /// ``CUcontext``, such as cuda.core's ``Context.handle``), or a cuda.core ``Context``.
    /// ``owner`` is kept alive until ``close()`` (a cuda.core ``Context`` is its own owner
    /// unless one is given); custream never destroys an adopted green context.
    #[staticmethod]
    #[pyo3(signature = (handle, *, owner = None))]
    fn from_handle<'py>(
        py: Python<'py>,
        handle: &Bound<'py, PyAny>,
        owner: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, GreenContext>> {
        let (raw, is_context, owner) = green_handle_arg(handle, owner.filter(|o| !o.is_none()))?;
        let gc = GreenContext::adopt(py, raw, is_context, owner.map(Bound::unbind))?;
        let gc = Bound::new(py, gc)?;
        context::register(&gc)?;
        Ok(gc)
    }

    /// The ``CUgreenCtx`` handle as an int; raises once closed.
    #[getter]
    fn handle(slf: &Bound<'_, Self>) -> PyResult<u64> {
        if slf.get().is_closed() {
            return Err(closed_error("handle"));
        }
        // Whoever makes a stream in it with this handle finds this object as its green context.
        context::register(slf)?;
        Ok(slf.get().view().as_u64())
    }

    /// A new custream.Stream in this green context (non-blocking, as CUDA requires): its work
    /// runs on this green context's SMs only. The stream keeps the green context open.
    #[pyo3(signature = (*, priority = None), text_signature = "($self, *, priority=0)")]
    fn create_stream<'py>(slf: &Bound<'py, Self>, priority: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let priority = i32_arg(priority.as_ref(), "create_stream", "priority", 0)?;
        context::create_stream(slf.py(), slf, priority, false, "create_stream()")
    }

    /// The device the green context's SMs belong to.
    #[getter(device)]
    fn py_device(&self) -> i32 {
        self.device()
    }

    /// The SMs the driver granted: at least the count asked for, rounded up as it requires.
    #[getter(sm_count)]
    fn py_sm_count(&self) -> u32 {
        self.sm_count()
    }

    /// True if custream made the green context and destroys it.
    #[getter]
    fn owned(&self) -> bool {
        self.is_owned()
    }

    /// The object kept alive for an adopted green context, or None.
    #[getter(owner)]
    fn py_owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.owner(py)
    }

    fn __repr__(&self) -> String {
        let how = if self.is_closed() {
            " closed"
        } else if self.is_owned() {
            " owned"
        } else {
            " borrowed"
        };
        format!(
            "<custream.GreenContext handle={:#x} device={} sm_count={}{how}>",
            self.view().as_u64(),
            self.device(),
            self.sm_count()
        )
    }

    /// True once close() has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Refuse new streams from now on and destroy the green context once its last stream is
    /// closed (now, if it has none); idempotent.
    #[pyo3(name = "close")]
    fn py_close(&self, py: Python<'_>) -> PyResult<()> {
        Closable::close(self, py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        closable::exit(self, py)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        closable::reduce(slf)
    }

    /// The owner is a reference a cycle can go through (an owner that holds its green context).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.traverse(visit)
    }

    /// Only cyclic garbage is cleared: closed, as deallocation would.
    fn __clear__(&self) {
        self.clear();
    }
}
