//! The Python face of custream.Event: arguments parsed, work delegated to src/event.rs.

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use crate::args::{bool_arg, device_arg};
use crate::errors::refuse_pickle;
use crate::event::Event;
use crate::object::StreamObject;
use crate::protocol;

#[pymethods]
impl Event {
    #[new]
    #[pyo3(signature = (*, device = None, timing = None), text_signature = "(*, device=None, timing=False)")]
    fn py_new(py: Python<'_>, device: Option<Bound<'_, PyAny>>, timing: Option<Bound<'_, PyAny>>) -> PyResult<Event> {
        let timing = bool_arg(timing.as_ref(), "Event", "timing", false)?;
        let device = device_arg(device.as_ref(), "Event")?;
        Event::new(py, device, timing)
    }

    /// Record the event on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object).
    fn record(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        self.record_on(py, StreamObject::of(&stream, "record()")?, "record()")
    }

    /// Wait until the work recorded before the event is done (the GIL is released).
    #[pyo3(name = "synchronize")]
    fn py_synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.synchronize(py)
    }

    /// True if the work recorded before the event is done.
    #[pyo3(name = "query")]
    fn py_query(&self, py: Python<'_>) -> PyResult<bool> {
        self.query(py)
    }

    /// Milliseconds from this event to ``end``; both need ``timing=True`` and must have
    /// completed.
    #[pyo3(name = "elapsed_time")]
    fn py_elapsed_time(&self, py: Python<'_>, end: &Bound<'_, Event>) -> PyResult<f32> {
        self.elapsed_time(py, end.get())
    }

    /// The CUevent handle as an int.
    #[getter(handle)]
    fn py_handle(&self) -> PyResult<u64> {
        self.handle()
    }

    #[getter(device)]
    fn py_device(&self) -> i32 {
        self.device()
    }

    #[getter(timing)]
    fn py_timing(&self) -> bool {
        self.timing()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Destroy the event; idempotent.
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
        let timing = if self.timing() { " timing" } else { "" };
        format!(
            "<custream.Event handle={:#x} device={}{timing}{state}>",
            self.handle_value(),
            self.device()
        )
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        Err(refuse_pickle(slf.as_any(), "a CUDA event belongs to one process"))
    }
}
