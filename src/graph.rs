//! `custream.Graph`: the executable graph a capture ends in (what a capture is to custream is
//! src/driver/capture_guard.rs's), launched or uploaded on any stream. Its Python methods are
//! the one `#[pymethods]` block here. (A Stream's capture methods are in src/stream/slots.rs.)

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use crate::cpython::gil;
use crate::cpython::stream_object::StreamObject;
use crate::driver::capture_guard;
use crate::driver::{self, CaptureStatus, Context, GraphExecHandle, OwnedGraphExec, StreamHandle};
use crate::host::queue_depth::{self, Gil, Keep};
use crate::object::closable::{self, Closable};
use crate::object::home_context::Home;
use crate::object::lifecycle::{self, DriverObject, Made};
use crate::object::protocol;

/// An executable CUDA graph: what ``Stream.end_capture()`` returns.
///
/// ``g.launch(stream)`` runs it on any stream (a custream.Stream or any ``__cuda_stream__``
/// object), ``g.upload(stream)`` prepares it there ahead of a launch, ``close()`` destroys it
/// (idempotent; launches in flight finish first). It lives in the context of the stream it
/// was captured on, and is destroyed there exactly once: never after interpreter
/// finalization began, never in a forked child.
#[pyclass(module = "custream", frozen)]
pub struct Graph {
    exec: Made<OwnedGraphExec>,
    nodes: usize,
}

impl Graph {
    /// `s.end_capture()`: end the capture and instantiate its graph.
    pub fn end_capture(py: Python<'_>, s: StreamObject<'_>) -> PyResult<Graph> {
        let context = s.context(py)?;
        let device = s.device(py)?;
        let ended = s.use_handle(py, "end_capture()", |h| {
            gil::detach(py, move || {
                let ended = driver::stream_end_capture(h);
                match &ended {
                    Ok(g) => capture_guard::ended(h.as_u64(), Some(g.handle())),
                    // Invalidated or unjoined captures end too; a wrong-thread end does not.
                    Err(_) if driver::stream_capture_status(h) == Ok(CaptureStatus::None) => {
                        capture_guard::ended(h.as_u64(), None)
                    }
                    Err(_) => {}
                }
                ended
            })
        })?;
        let g = ended.handle();
        let nodes = driver::graph_node_count(g);
        let made = Home::make(py, device, Some(context), move |ctx| driver::graph_instantiate(ctx, g));
        // The executable graph keeps what it needs.
        let _ = gil::detach(py, move || ended.destroy());
        let (home, exec) = made?;
        Ok(Graph {
            exec: Made::new(home, exec),
            nodes: nodes.unwrap_or(0),
        })
    }

    /// Run `f`, a launch of the executable graph on `stream`, both held open meanwhile.
    fn on_stream(
        this: &Bound<'_, Graph>,
        stream: StreamObject<'_>,
        what: &str,
        f: fn(GraphExecHandle, StreamHandle) -> driver::Result<()>,
    ) -> PyResult<()> {
        let (py, graph) = (this.py(), this.get());
        let (_in_use, exec) = graph.exec.enter(py, what)?;
        // Without the GIL, as CuPy's kernel launches are: a full launch queue waits for the
        // host functions queued before, and those of Python (ours, CuPy's, numba's) take the
        // GIL to run (docs/benchmarks.md has what holding it would save).
        stream.use_handle_in(py, what, graph.exec.home(), |h| {
            queue_depth::run(
                py,
                stream,
                h,
                Gil::Detached,
                |kept| Graph::keep(kept, this),
                move || f(exec, h),
            )
        })
    }

    /// Hold the graph open for a launch that may outlive its caller (src/host/queue_depth.rs).
    fn keep(kept: &mut Keep, this: &Bound<'_, Graph>) -> bool {
        fn end(py: Python<'_>, obj: &Bound<'_, PyAny>) {
            if let Ok(g) = obj.cast::<Graph>() {
                lifecycle::end_kept_use(&g.get().exec, py);
            }
        }
        kept.hold(this.py(), this.as_any(), &this.get().exec, end)
    }

    pub fn launch(this: &Bound<'_, Graph>, stream: StreamObject<'_>) -> PyResult<()> {
        Graph::on_stream(this, stream, "launch()", driver::graph_launch)
    }

    pub fn upload(this: &Bound<'_, Graph>, stream: StreamObject<'_>) -> PyResult<()> {
        Graph::on_stream(this, stream, "upload()", driver::graph_upload)
    }

    /// The handle's value even when closed, for repr.
    pub fn handle_value(&self) -> u64 {
        self.exec.handle_value()
    }
}

#[pymethods]
impl Graph {
    /// Launch the graph on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object):
    /// it runs after the work queued there before, and later work waits for it.
    #[pyo3(name = "launch")]
    fn py_launch(slf: &Bound<'_, Self>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        Graph::launch(slf, StreamObject::of(&stream, "launch()")?)
    }

    /// Upload the graph's work to the device on ``stream`` ahead of its first launch.
    #[pyo3(name = "upload")]
    fn py_upload(slf: &Bound<'_, Self>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        Graph::upload(slf, StreamObject::of(&stream, "upload()")?)
    }

    /// The CUgraphExec handle as an int.
    #[getter]
    pub fn handle(&self) -> PyResult<u64> {
        self.exec.handle()
    }

    /// The device of the context the graph was captured and instantiated in.
    #[getter]
    pub fn device(&self) -> i32 {
        self.exec.home().device
    }

    /// The number of nodes the capture recorded.
    #[getter]
    pub fn node_count(&self) -> usize {
        self.nodes
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

    /// True once close() has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Destroy the executable graph (launches in flight finish first); idempotent.
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
}

impl Closable for Graph {
    const PICKLE: &'static str = "a CUDA graph belongs to one process";

    fn is_closed(&self) -> bool {
        self.exec.is_closed()
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.exec.close(py)
    }
}

impl DriverObject for OwnedGraphExec {
    const KIND: &'static str = "custream.Graph";
    type View = GraphExecHandle;

    fn view(&self) -> GraphExecHandle {
        self.handle()
    }

    fn destroy(self, context: Context) -> driver::Result<()> {
        OwnedGraphExec::destroy(self, context)
    }

    fn view_u64(view: GraphExecHandle) -> u64 {
        view.as_u64()
    }
}
