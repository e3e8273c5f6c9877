//! A Stream's `record()` and `wait()`: what events are for. The slots are `stream/`'s
//! (src/stream/slots.rs); these functions do the work, with the Event class of
//! src/event/cuda_event.rs.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::cpython::gil;
use crate::cpython::stream_object::StreamObject;
use crate::driver;
use crate::event::cuda_event::Event;
use crate::host::queue_depth::{self, Gil};
use crate::object::closable::Closable;
use crate::object::lifecycle;

/// Make later work on `stream` wait for `event`.
pub fn wait_event(stream: StreamObject<'_>, this: &Bound<'_, Event>) -> PyResult<()> {
    let (py, event) = (this.py(), this.get());
    event.use_event(py, "wait()", |ev| {
        if let Some(side) = event.imported() {
            gil::brief(py, || side.before_wait(ev, "wait()"))?;
        }
        stream.use_handle_py(py, "wait()", |h| {
            queue_depth::run(
                py,
                stream,
                h,
                Gil::Brief,
                |kept| Event::keep(kept, this),
                move || driver::stream_wait_event(h, ev),
            )
        })
    })?;
    event.waited_on_by(stream.handle_value());
    Ok(())
}

/// Make later work on `stream` wait for the work queued so far on `upstream`.
pub fn wait_stream(py: Python<'_>, stream: StreamObject<'_>, upstream: StreamObject<'_>) -> PyResult<()> {
    lifecycle::ensure_usable(&stream, "wait()")?;
    if upstream.is_closed() {
        return Err(PyValueError::new_err("wait() was given a closed custream.Stream"));
    }
    if upstream.handle_value() == stream.handle_value() && !stream.is_default() {
        return Ok(()); // a stream's work is already in its own order
    }
    let event = Bound::new(py, Event::for_stream(py, upstream)?)?;
    let waited = Event::record_on(&event, upstream, "wait()").and_then(|()| wait_event(stream, &event));
    let closed = event.get().close(py);
    waited.and(closed)
}

/// Record `event` on `stream`, or a new event in the stream's context if None.
pub fn record<'py>(
    py: Python<'py>,
    stream: StreamObject<'_>,
    event: Option<Bound<'py, Event>>,
) -> PyResult<Bound<'py, Event>> {
    let event = match event {
        Some(e) => e,
        None => {
            lifecycle::ensure_usable(&stream, "record()")?;
            Bound::new(py, Event::for_stream(py, stream)?)?
        }
    };
    Event::record_on(&event, stream, "record()")?;
    Ok(event)
}
