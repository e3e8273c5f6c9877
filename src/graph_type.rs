//! The Python face of custream.Graph, and `check_foreign_captures`: arguments parsed, work
//! delegated to src/graph.rs and src/capture.rs. (A Stream's capture methods are in
//! src/stream_type.rs.)

use pyo3::prelude::*;

use crate::args::bool_arg;
use crate::capture;
use crate::closable::closable_methods;
use crate::graph::Graph;
use crate::lifecycle::Closable;
use crate::object::StreamObject;
use crate::protocol;

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
        None => Ok(capture::foreign_checks()),
        Some(v) => Ok(capture::set_foreign_checks(bool_arg(
            Some(&v),
            "check_foreign_captures",
            "enabled",
            false,
        )?)),
    }
}

#[pymethods]
impl Graph {
    /// Launch the graph on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object):
    /// it runs after the work queued there before, and later work waits for it.
    #[pyo3(name = "launch")]
    fn py_launch(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        self.launch(py, StreamObject::of(&stream, "launch()")?)
    }

    /// Upload the graph's work to the device on ``stream`` ahead of its first launch.
    #[pyo3(name = "upload")]
    fn py_upload(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        self.upload(py, StreamObject::of(&stream, "upload()")?)
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
}

closable_methods!(
    Graph,
    "Destroy the executable graph (launches in flight finish first); idempotent.",
    with
);
