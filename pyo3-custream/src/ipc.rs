//! IPC events from any library: another process's event, opened from the driver's raw handle.

use pyo3::prelude::*;

use crate::capi::api;

/// Open another process's IPC event from the driver's raw handle: the 64 bytes of a
/// `CUipcEventHandle` or `cudaIpcEventHandle_t` (PyTorch's `Event.ipc_handle()`, CuPy's
/// `runtime.ipcGetEventHandle()`, `cuIpcGetEventHandle`, cudarc's), on `device`, an ordinal of
/// this process (a raw handle does not name its device).
///
/// Returns the `custream.Event` (`Event.from_ipc_handle(raw, device=device)`): a stream waits
/// on it (`stream.wait(event)` from Python; its `handle` attribute is the `CUevent`), and
/// dropping or closing it ends this process's use only. A raw handle carries no exporter to
/// watch: a dead exporter's event is the driver's to report. `ValueError` for a handle that
/// is not 64 bytes, a negative device or one this process does not have, before the driver
/// opens anything; `CudaUnavailableError` without a driver; the driver's error.
///
/// ```no_run
/// use pyo3::prelude::*;
///
/// #[pyfunction]
/// fn wait_for_producer<'py>(py: Python<'py>, stream: &Bound<'py, PyAny>, handle: &[u8]) -> PyResult<()> {
///     let ready = pyo3_custream::event_from_ipc_handle(py, handle, 0)?;
///     stream.call_method1("wait", (&ready,))?; // the stream's later work runs after the producer's
///     Ok(())
/// }
/// ```
pub fn event_from_ipc_handle<'py>(py: Python<'py>, handle: &[u8], device: i32) -> PyResult<Bound<'py, PyAny>> {
    api(py)?.event_from_ipc_handle(py, handle, device)
}
