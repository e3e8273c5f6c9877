//! custream.Event: a CUDA event, for ordering work across streams and for timing. An
//! ordinary pyclass: nothing outside Python needs its layout.

use std::sync::atomic::AtomicU32;

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::driver::{self, CUcontext, CUevent, DriverError};
use crate::errors::IntoPyResult;
use crate::ffi::{bool_arg, device_arg};
use crate::lifecycle::{Lifecycle, Release};
use crate::protocol;
use crate::stream::StreamRef;

/// A CUDA event, created in a device's primary context.
///
/// ``Event(*, device=None, timing=False)``: ``device`` defaults to the current context's
/// device, else 0. Events are made without timing unless ``timing=True``, which
/// ``elapsed_time`` needs. ``close()`` destroys the event; so does deallocation.
#[pyclass(module = "custream", frozen)]
pub struct Event {
    event: usize,
    context: usize,
    /// cuCtxGetId of `context` when the event was made (see driver::ensure_same_context).
    context_id: u64,
    device: i32,
    /// Whether we hold a retain on `device`'s primary context (our `context`).
    retains_primary: bool,
    timing: bool,
    state: AtomicU32,
    fork_generation: u32,
}

impl Event {
    /// An event in `device`'s primary context, or in `stream_context` (the context of the
    /// work it will be recorded on) when given. It holds a retain on the primary context
    /// when it lives there (an owned stream's or a runtime library's), none for another
    /// library's own context. The driver calls run without the GIL: a first retain creates
    /// the context (~100 ms), and no driver call that may block should hold up every other
    /// Python thread, nor wait on a driver lock while holding the GIL that the lock's
    /// holder may need.
    fn create(py: Python<'_>, stream_context: Option<CUcontext>, device: i32, timing: bool) -> PyResult<Event> {
        let stream_context = stream_context.map(|c| c as usize);
        let made = py.detach(move || -> Result<(usize, u64, usize, bool), DriverError> {
            let primary = driver::retain_primary_context(device)? as usize;
            let (context, retains) = match stream_context {
                Some(c) if c != primary => {
                    let _ = driver::release_primary_context(device);
                    (c, false)
                }
                _ => (primary, true),
            };
            let created = driver::context_id(context as CUcontext)
                .and_then(|id| Ok((id, driver::event_create(context as CUcontext, timing)? as usize)));
            if created.is_err() && retains {
                let _ = driver::release_primary_context(device);
            }
            created.map(|(id, event)| (context, id, event, retains))
        });
        let (context, context_id, event, retains_primary) = made.py(py)?;
        Ok(Event {
            event,
            context,
            context_id,
            device,
            retains_primary,
            timing,
            state: AtomicU32::new(0),
            fork_generation: driver::fork_generation(),
        })
    }

    /// An event in the context of `stream`'s work, for `Stream.record()`.
    pub fn for_stream(py: Python<'_>, stream: StreamRef) -> PyResult<Event> {
        let context = stream.context(py)?;
        let device = stream.device(py)?;
        Event::create(py, Some(context), device, false)
    }

    fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle::new(&self.state)
    }

    /// Run a driver call on the event, holding it open meanwhile (see src/lifecycle.rs).
    pub fn use_event<R>(&self, py: Python<'_>, what: &str, f: impl FnOnce(CUevent) -> Result<R, DriverError>) -> PyResult<R> {
        if self.fork_generation != driver::fork_generation() {
            return Err(DriverError::Forked).py(py);
        }
        self.lifecycle()
            .enter()
            .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("{what} on a closed custream.Event")))?;
        let result = driver::ensure_same_context(self.context as CUcontext, self.context_id).and_then(|_| f(self.event as CUevent));
        if self.lifecycle().leave() == Release::Now {
            let _ = self.release(py);
        }
        result.py(py)
    }

    /// Destroy the event and give back its retain, without the GIL (see `create`).
    fn release(&self, py: Python<'_>) -> Result<(), DriverError> {
        if self.fork_generation != driver::fork_generation() || driver::is_finalizing() {
            return Ok(());
        }
        let (context, id, event, device, retains) = (self.context, self.context_id, self.event, self.device, self.retains_primary);
        py.detach(move || {
            // After a reset the event is gone with its context, and so is our retain on it.
            driver::ensure_same_context(context as CUcontext, id)?;
            let destroyed = driver::event_destroy(context as CUcontext, event as CUevent);
            if retains {
                destroyed.and(driver::release_primary_context(device))
            } else {
                destroyed
            }
        })
    }
}

#[pymethods]
impl Event {
    #[new]
    #[pyo3(signature = (*, device = None, timing = None), text_signature = "(*, device=None, timing=False)")]
    fn py_new(py: Python<'_>, device: Option<Bound<'_, PyAny>>, timing: Option<Bound<'_, PyAny>>) -> PyResult<Event> {
        let timing = bool_arg(timing.as_ref(), "Event", "timing", false)?;
        let device = match device_arg(device.as_ref(), "Event")? {
            Some(d) => d,
            None => driver::current_device().py(py)?.unwrap_or(0),
        };
        Event::create(py, None, device, timing)
    }

    /// Record the event on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object).
    fn record(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        // SAFETY: as_stream returns a live custream.Stream.
        let s = unsafe { StreamRef::of(stream.as_ptr()) };
        self.use_event(py, "record()", |ev| {
            Ok(s.use_handle(py, "record()", |h| driver::event_record(ev, h)))
        })?
    }

    /// Wait until the work recorded before the event is done (the GIL is released).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.use_event(py, "synchronize()", |ev| {
            let ev = ev as usize;
            py.detach(move || driver::event_synchronize(ev as CUevent))
        })
    }

    /// True if the work recorded before the event is done.
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        self.use_event(py, "query()", driver::event_query)
    }

    /// Milliseconds from this event to ``end``; both need ``timing=True`` and must have
    /// completed.
    fn elapsed_time(&self, py: Python<'_>, end: &Bound<'_, Event>) -> PyResult<f32> {
        let end = end.get();
        self.use_event(py, "elapsed_time()", |start| Ok(end.use_event(py, "elapsed_time()", |stop| driver::event_elapsed_ms(start, stop))))?
    }

    /// The CUevent handle as an int.
    #[getter]
    fn handle(&self) -> PyResult<usize> {
        if self.lifecycle().is_closed() {
            return Err(pyo3::exceptions::PyValueError::new_err("handle on a closed custream.Event"));
        }
        Ok(self.event)
    }

    #[getter]
    fn device(&self) -> i32 {
        self.device
    }

    #[getter]
    fn timing(&self) -> bool {
        self.timing
    }

    #[getter]
    fn closed(&self) -> bool {
        self.lifecycle().is_closed()
    }

    /// Destroy the event; idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self.lifecycle().close() {
            Release::Now => self.release(py).py(py),
            Release::NotYours => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.lifecycle().is_closed() { " closed" } else { "" };
        format!("<custream.Event handle={:#x} device={}{}{}>", self.event, self.device, if self.timing { " timing" } else { "" }, state)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "cannot pickle {}: a CUDA event belongs to one process",
            slf.get_type().name()?
        )))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.lifecycle().close() == Release::Now {
            // A pyclass is dropped by its tp_dealloc, with the GIL held.
            Python::attach(|py| {
                let _ = self.release(py);
            });
        }
    }
}
