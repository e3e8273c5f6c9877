//! What a custream.Event is: a CUDA event for ordering work across streams and for timing,
//! living under the same lifecycle as a Stream (src/lifecycle.rs). An ordinary pyclass:
//! nothing outside Python needs its layout. Its Python methods are in src/event_type.rs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;

use crate::driver::{self, Context, EventHandle};
use crate::gil;
use crate::graph::{self, CaptureMark};
use crate::lifecycle::{DriverObject, Home, Made};
use crate::stream::StreamRef;

/// A CUDA event, created in a device's primary context.
///
/// ``Event(*, device=None, timing=False)``: ``device`` defaults to the current context's
/// device, else 0. Events are made without timing unless ``timing=True``, which
/// ``elapsed_time`` needs. ``close()`` destroys the event; so does deallocation.
#[pyclass(module = "custream", frozen)]
pub struct Event {
    event: Made<EventHandle>,
    timing: bool,
    /// Set while the event's last record was made in a capture (src/graph.rs).
    captured: AtomicBool,
    capture: Mutex<Option<CaptureMark>>,
}

impl Event {
    /// An event in `device`'s primary context, or in `context` (that of the work it will be
    /// recorded on) when given.
    fn create(py: Python<'_>, context: Option<driver::Context>, device: i32, timing: bool) -> PyResult<Event> {
        let (home, handle) = Home::make(py, device, context, move |ctx| driver::event_create(ctx, timing))?;
        Ok(Event {
            event: Made::new(home, handle),
            timing,
            captured: AtomicBool::new(false),
            capture: Mutex::new(None),
        })
    }

    /// `Event(device=..., timing=...)`: the device defaults to the current context's, else 0.
    pub fn new(py: Python<'_>, device: Option<i32>, timing: bool) -> PyResult<Event> {
        let device = match device {
            Some(d) => d,
            None => driver::current_device()?.unwrap_or(0),
        };
        Event::create(py, None, device, timing)
    }

    /// An event in the context of `stream`'s work, for `Stream.record()` and `wait()`.
    pub fn for_stream(py: Python<'_>, stream: StreamRef) -> PyResult<Event> {
        let context = stream.context(py)?;
        let device = stream.device(py)?;
        Event::create(py, Some(context), device, false)
    }

    /// Run `f` on the event's handle, holding the event open meanwhile.
    pub fn use_event<R>(&self, py: Python<'_>, what: &str, f: impl FnOnce(EventHandle) -> PyResult<R>) -> PyResult<R> {
        let (_in_use, ev) = self.event.enter(py, what)?;
        f(ev)
    }

    /// Record the event on `stream`.
    pub fn record_on(&self, py: Python<'_>, stream: StreamRef, what: &str) -> PyResult<()> {
        self.use_event(py, what, |ev| {
            stream.use_handle(py, what, |h| gil::brief(py, move || driver::event_record(ev, h)))
        })?;
        let mark = graph::mark(py, stream)?;
        if mark.is_some() || self.captured.load(Ordering::Acquire) {
            self.captured.store(mark.is_some(), Ordering::Release);
            *self.capture.lock().unwrap_or_else(PoisonError::into_inner) = mark;
        }
        Ok(())
    }

    /// Refuse `what` while the event stands for a node of a capture still open.
    fn refuse_if_captured(&self, py: Python<'_>, what: &str) -> PyResult<()> {
        if self.captured.load(Ordering::Acquire) {
            let mut capture = self.capture.lock().unwrap_or_else(PoisonError::into_inner);
            let open = match capture.as_ref() {
                Some(mark) => mark.refuse_if_open(py, what)?,
                None => false,
            };
            if !open {
                // The capture ended: the mark (and the stream it holds) is no longer needed.
                self.captured.store(false, Ordering::Release);
                *capture = None;
            }
        }
        Ok(())
    }

    /// `waiter` now waits on this event: if it was recorded in a capture, `waiter` joined it.
    pub fn waited_on_by(&self, waiter: u64) {
        if self.captured.load(Ordering::Acquire) {
            if let Some(mark) = self.capture.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                mark.joined_by(waiter);
            }
        }
    }

    /// Wait until the work recorded before the event is done (the GIL is released).
    pub fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.refuse_if_captured(py, "synchronize()")?;
        self.use_event(py, "synchronize()", |ev| {
            Ok(gil::detach(py, move || driver::event_synchronize(ev))?)
        })
    }

    pub fn query(&self, py: Python<'_>) -> PyResult<bool> {
        self.refuse_if_captured(py, "query()")?;
        self.use_event(py, "query()", |ev| Ok(gil::brief(py, move || driver::event_query(ev))?))
    }

    /// Milliseconds from this event to `end`.
    pub fn elapsed_time(&self, py: Python<'_>, end: &Event) -> PyResult<f32> {
        self.use_event(py, "elapsed_time()", |start| {
            end.use_event(py, "elapsed_time()", |stop| {
                Ok(gil::brief(py, move || driver::event_elapsed_ms(start, stop))?)
            })
        })
    }

    pub fn handle(&self) -> PyResult<u64> {
        self.event.handle()
    }

    /// The handle's value even when closed, for repr.
    pub fn handle_value(&self) -> u64 {
        self.event.handle_value()
    }

    pub fn device(&self) -> i32 {
        self.event.home().device
    }

    pub fn timing(&self) -> bool {
        self.timing
    }

    pub fn is_closed(&self) -> bool {
        self.event.is_closed()
    }

    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.event.close(py)
    }
}

impl DriverObject for EventHandle {
    const KIND: &'static str = "custream.Event";

    fn destroy(self, context: Context) -> driver::Result<()> {
        driver::event_destroy(context, self)
    }

    fn as_u64(self) -> u64 {
        EventHandle::as_u64(self)
    }
}
