//! The module's functions: `as_stream`, `check_foreign_captures`, and what the driver and
//! the process report.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::cpython::args::{bool_arg, device_arg};
use crate::cpython::gil;
use crate::cpython::raw_call::hand_built_method;
use crate::cpython::stream_object::{self, StreamObject};
use crate::driver::capture_guard;
use crate::driver::gate;
use crate::driver::libcuda::LoadError;
use crate::driver::{self, DriverError};
use crate::host;
use crate::object::deferred_release;
use crate::object::make;
use crate::object::protocol;
use crate::waits;

/// `as_stream(obj, /)`, a METH_O builtin built by hand (`hand_built_method!`): a Stream
/// argument is returned before any argument parsing or pyo3 trampoline, the common case for a
/// library that accepts any stream.
fn as_stream_o(_: Python<'_>, obj: Option<Borrowed<'_, '_, PyAny>>) -> PyResult<Py<PyAny>> {
    match obj {
        Some(obj) if stream_object::is_stream(&obj) => Ok(obj.to_owned().unbind()),
        Some(obj) => Ok(protocol::as_stream(&obj)?.unbind()),
        None => Err(PyTypeError::new_err("as_stream() missing required argument 'obj'")),
    }
}

/// The `as_stream` builtin, bound to module `m`.
pub fn as_stream<'py>(m: &Bound<'py, PyModule>) -> PyResult<Bound<'py, PyAny>> {
    hand_built_method!(
        function_o,
        m,
        c"as_stream",
        as_stream_o,
        c"as_stream(obj, /)\n--\n\nReturn ``obj`` as a custream.Stream: a Stream as is, otherwise a borrowed Stream over\nthe handle ``obj.__cuda_stream__()`` returns, keeping ``obj`` alive as its owner."
    )
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
        None => Ok(capture_guard::foreign_checks()),
        Some(v) => Ok(capture_guard::set_foreign_checks(bool_arg(
            Some(&v),
            "check_foreign_captures",
            "enabled",
            false,
        )?)),
    }
}

/// ``(least, greatest)`` stream priorities of a device (default: the current context's,
/// else 0). Greatest is the numerically lowest: ``Stream(priority=greatest)`` runs first.
#[pyfunction]
#[pyo3(signature = (device = None))]
pub fn priority_range(device: Option<Bound<'_, PyAny>>) -> PyResult<(i32, i32)> {
    let device = device_arg(device.as_ref(), "priority_range")?;
    let device = make::existing_device(device, driver::current_context()?)?;
    Ok(driver::priority_range(device)?)
}

/// True if the CUDA driver loads and initializes (there is at least one device). Never raises.
#[pyfunction]
pub fn is_available() -> bool {
    driver::device_count().is_ok_and(|n| n > 0)
}

/// The CUDA driver's version as an int, e.g. 13000 for CUDA 13.0.
#[pyfunction]
pub fn driver_version() -> PyResult<i32> {
    Ok(driver::driver_version()?)
}

/// The number of CUDA devices; 0 where there is no driver library (as PyTorch and JAX answer)
/// or the driver finds no device (``CUDA_ERROR_NO_DEVICE``, e.g. ``CUDA_VISIBLE_DEVICES=""``).
/// A driver that is there but unusable (too old, failing to initialize) raises.
#[pyfunction]
pub fn device_count() -> PyResult<i32> {
    match driver::device_count() {
        Err(DriverError::Unavailable(LoadError::NotFound { .. })) => Ok(0),
        Err(DriverError::Cuda { code, .. }) if code == driver::code::NO_DEVICE => Ok(0),
        found => Ok(found?),
    }
}

/// Name, total memory in bytes and compute capability of a device, for reports.
#[pyfunction]
pub fn device_info(device: i32) -> PyResult<(String, usize, (i32, i32))> {
    Ok((
        driver::device_name(device)?,
        driver::device_total_memory(device)?,
        driver::compute_capability(device)?,
    ))
}

/// The library names custream looks for when it loads the CUDA driver, in order
/// (``CUSTREAM_LIBCUDA`` alone when that is set).
#[pyfunction]
pub fn driver_library_candidates() -> Vec<String> {
    driver::library_candidates()
}

/// The number of custream.Stream objects alive in this process (for leak tests), not
/// counting the module's three default streams.
#[pyfunction]
pub fn live_stream_count(py: Python<'_>) -> PyResult<usize> {
    // Counted in the collector's list of live objects, where every Stream is from its
    // allocation to its deallocation: making and freeing a stream counts nothing (a counter
    // safe without the GIL cost a wrap two locked instructions), on any interpreter.
    let mut live = 0;
    for obj in py.import("gc")?.call_method0("get_objects")?.try_iter()? {
        live += usize::from(StreamObject::cast(&obj?).is_some_and(|s| !s.is_shared()));
    }
    Ok(live)
}

/// Registered with atexit: from here on no Stream, Event or Graph calls into the driver,
/// and no host function enters Python; those already inside it are waited for.
#[pyfunction]
pub fn _finalize(py: Python<'_>) {
    gil::detach(py, deferred_release::run_deferred);
    driver::release_kept_primary_contexts();
    gate::set_finalizing();
    host::thread::wait_for_running(py);
    gil::drain(py);
}

/// Waits armed (a synchronize, an await, a future) whose driver notification has not come
/// yet; for tests: a finished or cancelled wait leaves none once the GPU passed its event.
#[pyfunction]
pub fn _pending_waits() -> usize {
    waits::pending_count()
}

/// The streams custream made for its own waits (notifiers and their bells), kept for the
/// process; for tests that count the driver's streams.
#[pyfunction]
pub fn _notifier_streams() -> usize {
    waits::notifier_streams()
}
