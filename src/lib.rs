//! custream: one CUDA stream object for Python, Cython and C.
//!
//! The Python-facing names are all registered here, in `_custream`; `custream/__init__.py`
//! re-exports them.

pub mod capi;
pub mod driver;
pub mod errors;
pub mod event;
pub mod ffi;
pub mod layout;
pub mod lifecycle;
pub mod protocol;
pub mod stream;
pub mod stream_type;

use pyo3::prelude::*;

use errors::IntoPyResult;

/// `as_stream` as a METH_O builtin: a Stream argument is returned before any argument
/// parsing or pyo3 trampoline, the common case for a library that accepts any stream.
unsafe extern "C" fn as_stream_o(_m: *mut pyo3::ffi::PyObject, obj: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject {
    if stream::is_stream(obj) {
        return pyo3::ffi::Py_NewRef(obj);
    }
    ffi::boundary(|py| Ok(protocol::as_stream(&Bound::from_borrowed_ptr(py, obj))?.into_ptr()))
}

fn as_stream_function<'py>(m: &Bound<'py, PyModule>) -> PyResult<Bound<'py, PyAny>> {
    let def = Box::leak(Box::new(pyo3::ffi::PyMethodDef {
        ml_name: c"as_stream".as_ptr(),
        ml_meth: pyo3::ffi::PyMethodDefPointer { PyCFunction: as_stream_o },
        ml_flags: pyo3::ffi::METH_O,
        ml_doc: c"as_stream(obj, /)\n--\n\nReturn ``obj`` as a custream.Stream: a Stream as is, otherwise a borrowed Stream over\nthe handle ``obj.__cuda_stream__()`` returns, keeping ``obj`` alive as its owner.".as_ptr(),
    }));
    let name = m.name()?;
    // SAFETY: the definition lives for the process; the module name is a str.
    unsafe { Bound::from_owned_ptr_or_err(m.py(), pyo3::ffi::PyCMethod_New(def, std::ptr::null_mut(), name.as_ptr(), std::ptr::null_mut())) }
}

/// True if the CUDA driver loads and initializes (there is at least one device). Never raises.
#[pyfunction]
fn is_available() -> bool {
    driver::init().is_ok() && driver::device_count().map(|n| n > 0).unwrap_or(false)
}

/// The CUDA driver's version as an int, e.g. 13000 for CUDA 13.0.
#[pyfunction]
fn driver_version(py: Python<'_>) -> PyResult<i32> {
    driver::driver_version().py(py)
}

/// The number of CUDA devices.
#[pyfunction]
fn device_count(py: Python<'_>) -> PyResult<i32> {
    driver::device_count().py(py)
}

/// Name, total memory in bytes and compute capability of a device, for reports.
#[pyfunction]
fn device_info(py: Python<'_>, device: i32) -> PyResult<(String, usize, (i32, i32))> {
    Ok((
        driver::device_name(device).py(py)?,
        driver::device_total_memory(device).py(py)?,
        driver::compute_capability(device).py(py)?,
    ))
}

/// The library names custream looks for when it loads the CUDA driver.
#[pyfunction]
fn driver_library_candidates() -> Vec<String> {
    driver::library_candidates()
}

/// The number of custream.Stream objects alive in this process (for leak tests).
#[pyfunction]
fn live_stream_count() -> isize {
    stream::LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Registered with atexit: from here on no Stream or Event calls into the driver.
#[pyfunction]
fn _finalize() {
    driver::set_finalizing();
}

#[pymodule]
fn _custream(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    driver::install_fork_handler();
    m.add("Stream", stream_type::create(py)?)?;
    m.add_class::<event::Event>()?;
    m.add("CudaError", py.get_type::<errors::CudaError>())?;
    m.add("CudaUnavailableError", py.get_type::<errors::CudaUnavailableError>())?;
    m.add("LEGACY_DEFAULT_STREAM", 1u8)?;
    m.add("PER_THREAD_DEFAULT_STREAM", 2u8)?;
    m.add("ABI_VERSION", layout::CUSTREAM_ABI_VERSION)?;
    m.add("as_stream", as_stream_function(m)?)?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(driver_version, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(device_info, m)?)?;
    m.add_function(wrap_pyfunction!(driver_library_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(live_stream_count, m)?)?;
    let finalize = wrap_pyfunction!(_finalize, m)?;
    py.import("atexit")?.call_method1("register", (&finalize,))?;
    m.add_function(finalize)?;
    m.add("_C_API", capi::capsule(py)?)?;
    Ok(())
}
