//! The Python face of custream.Event: arguments parsed, work delegated to src/event.rs.

use pyo3::prelude::*;

use crate::args::{bool_arg, device_arg};
use crate::closable::closable_methods;
use crate::event::Event;
use crate::lifecycle::Closable;
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

    /// Milliseconds from this event to ``end``; both need ``timing=True`` and must have
    /// completed.
    #[pyo3(name = "elapsed_time")]
    fn py_elapsed_time(&self, py: Python<'_>, end: &Bound<'_, Event>) -> PyResult<f32> {
        self.elapsed_time(py, end.get())
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
}

closable_methods!(Event, "Destroy the event; idempotent.", with);
