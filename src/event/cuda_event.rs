//! custream.Event: a CUDA event for ordering work across streams and for timing, living
//! under the same lifecycle as a Stream (src/object/lifecycle.rs). An ordinary pyclass: nothing
//! outside Python needs its layout. Its Python methods are the one `#[pymethods]` block here.
//! A Stream's `record()` and `wait()`, what events are for, are src/event/stream_methods.rs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::cpython::args::{bool_arg, device_arg};
use crate::cpython::gil;
use crate::cpython::interrupt::{self, timeout_arg};
use crate::cpython::stream_object::StreamObject;
use crate::driver::capture_guard;
use crate::driver::{self, capture_code, Context, EventHandle, OwnedEvent};
use crate::event::ipc::{self, IpcEventHandle, IpcSide};
use crate::event::ipc_source::{self, Device, Source};
use crate::host::queue_depth::{self, Gil, Keep};
use crate::object::closable::{self, Closable};
use crate::object::home_context::Home;
use crate::object::lifecycle::{self, DriverObject, Made};
use crate::object::protocol;
use crate::waits::wake::{PyBell, Wake};
use crate::waits::{self, Recorded};

/// A CUDA event, created in a device's primary context.
///
/// ``Event(*, device=None, timing=False, ipc=False)``: ``device`` defaults to the current
/// context's device, else 0. Events are made without timing unless ``timing=True``, which
/// ``elapsed_time`` needs. ``ipc=True`` makes an event other processes can open
/// (``ipc_handle()``, ``Event.from_ipc_handle()``; timing must stay off), which pickles to
/// its handle. ``close()`` destroys the event; so does deallocation.
#[pyclass(module = "custream", frozen)]
pub struct Event {
    event: Made<OwnedEvent>,
    timing: bool,
    /// Set while the event's last record was made in a capture (src/driver/capture_guard.rs).
    captured: AtomicBool,
    capture: Mutex<Option<CaptureMark>>,
    /// An IPC event's handle, exported or imported (src/event/ipc.rs).
    ipc: Option<IpcSide>,
    /// Where custream last recorded it: the stream's handle, and the record's place in
    /// custream's order of records (0: never, or in a capture). Two atomics, not a lock, on
    /// the path of every record: a pair torn by two threads recording the event at once can
    /// only queue a wait on it behind a notifier it did not need to share (src/waits/for_gpu.rs):
    /// seen later, never sooner.
    recorded_on: AtomicU64,
    record_seq: AtomicU64,
}

/// The order of custream's records, for `Recorded`.
static RECORDS: AtomicU64 = AtomicU64::new(0);

impl Event {
    /// An event in `device`'s primary context, or in `context` (that of the work it will be
    /// recorded on) when given.
    fn create(py: Python<'_>, context: Option<driver::Context>, device: i32, timing: bool) -> PyResult<Event> {
        let (home, handle) = Home::make(py, device, context, move |ctx| driver::event_create(ctx, timing))?;
        Ok(Event::adopt(home, handle, timing, None))
    }

    /// An Event over `handle`, made in `home`.
    fn adopt(home: Home, handle: OwnedEvent, timing: bool, ipc: Option<IpcSide>) -> Event {
        Event {
            event: Made::new(home, handle),
            timing,
            captured: AtomicBool::new(false),
            capture: Mutex::new(None),
            ipc,
            recorded_on: AtomicU64::new(0),
            record_seq: AtomicU64::new(0),
        }
    }

    /// Where custream last recorded the event, if it did.
    pub fn recorded(&self) -> Option<Recorded> {
        let seq = self.record_seq.load(Ordering::Acquire);
        (seq != 0).then(|| Recorded {
            stream: self.recorded_on.load(Ordering::Relaxed),
            seq,
        })
    }

    /// The IPC side of an event opened from another process's handle.
    pub fn imported(&self) -> Option<&IpcSide> {
        self.ipc.as_ref().filter(|side| side.imported())
    }

    /// `Event(device=..., timing=...)`: the device defaults to the current context's, else 0.
    pub fn new(py: Python<'_>, device: Option<i32>, timing: bool) -> PyResult<Event> {
        let device = match device {
            Some(d) => d,
            None => driver::current_device()?.unwrap_or(0),
        };
        Event::create(py, None, device, timing)
    }

    /// Another library's IPC event, opened from the driver's 64 bytes on `device`
    /// (`Event.from_ipc_handle(raw, device=...)`, `Custream_EventFromIpcHandle`): the device
    /// is checked to exist here (`fname` names the caller in the error) before the driver is
    /// asked to open it.
    pub fn open_raw_ipc(
        py: Python<'_>,
        raw: [u8; driver::IPC_HANDLE_BYTES],
        device: Device,
        fname: &str,
    ) -> PyResult<Event> {
        let device = device.ordinal(fname)?;
        let (home, ev, side) = ipc::import_raw(py, raw, device)?;
        Ok(Event::adopt(home, ev, false, Some(side)))
    }

    /// An event in the context of `stream`'s work, for `Stream.record()` and `wait()`.
    pub fn for_stream(py: Python<'_>, stream: StreamObject<'_>) -> PyResult<Event> {
        let context = stream.context(py)?;
        let device = stream.device(py)?;
        Event::create(py, Some(context), device, false)
    }

    /// Run `f` on the event's handle, holding the event open meanwhile.
    pub fn use_event<R>(&self, py: Python<'_>, what: &str, f: impl FnOnce(EventHandle) -> PyResult<R>) -> PyResult<R> {
        let (_in_use, ev) = self.event.enter(py, what)?;
        f(ev)
    }

    /// Record the event (`this`'s) on `stream`.
    pub fn record_on(this: &Bound<'_, Event>, stream: StreamObject<'_>, what: &str) -> PyResult<()> {
        let (py, event) = (this.py(), this.get());
        event.use_event(py, what, |ev| {
            stream.use_handle_py(py, what, |h| {
                queue_depth::run(
                    py,
                    stream,
                    h,
                    Gil::Brief,
                    |kept| Event::keep(kept, this),
                    move || driver::event_record(ev, h),
                )
            })
        })?;
        event.note_record(py, stream)?;
        // A record in a capture is a node of a graph, in no stream's order (0: unknown).
        let seq = match event.captured.load(Ordering::Acquire) {
            true => 0,
            false => RECORDS.fetch_add(1, Ordering::Relaxed) + 1,
        };
        event.recorded_on.store(stream.handle_value(), Ordering::Relaxed);
        event.record_seq.store(seq, Ordering::Release);
        Ok(())
    }

    /// Hold the event open for a launch that may outlive its caller (src/host/queue_depth.rs).
    pub(super) fn keep(kept: &mut Keep, this: &Bound<'_, Event>) -> bool {
        fn end(py: Python<'_>, obj: &Bound<'_, PyAny>) {
            if let Ok(e) = obj.cast::<Event>() {
                lifecycle::end_kept_use(&e.get().event, py);
            }
        }
        kept.hold(this.py(), this.as_any(), &this.get().event, end)
    }

    /// After a record on `stream`: where the event stands if the stream captures.
    fn note_record(&self, py: Python<'_>, stream: StreamObject<'_>) -> PyResult<()> {
        let mark = mark(py, stream)?;
        if mark.is_some() || self.captured.load(Ordering::Acquire) {
            self.captured.store(mark.is_some(), Ordering::Release);
            *self.capture.lock().unwrap_or_else(PoisonError::into_inner) = mark;
        }
        Ok(())
    }

    /// Run `f` on the event's handle and context, for a wait: refused while the event stands
    /// for a node of an open capture, and held open meanwhile.
    fn use_for_wait<R>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(EventHandle, Context) -> PyResult<R>,
    ) -> PyResult<R> {
        self.refuse_if_captured(py, what)?;
        let (_in_use, ev) = self.event.enter(py, what)?;
        f(ev, self.event.home().context)
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

    /// Milliseconds from this event to `end`.
    pub fn elapsed_time(&self, py: Python<'_>, end: &Event) -> PyResult<f32> {
        self.use_event(py, "elapsed_time()", |start| {
            end.use_event(py, "elapsed_time()", |stop| {
                Ok(gil::brief(py, move || driver::event_elapsed_ms(start, stop))?)
            })
        })
    }

    /// The handle's value even when closed, for repr.
    pub fn handle_value(&self) -> u64 {
        self.event.handle_value()
    }
}

#[pymethods]
impl Event {
    #[new]
    #[pyo3(signature = (*, device = None, timing = None, ipc = None), text_signature = "(*, device=None, timing=False, ipc=False)")]
    fn py_new(
        py: Python<'_>,
        device: Option<Bound<'_, PyAny>>,
        timing: Option<Bound<'_, PyAny>>,
        ipc: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Event> {
        let timing = bool_arg(timing.as_ref(), "Event", "timing", false)?;
        let device = device_arg(device.as_ref(), "Event")?;
        if bool_arg(ipc.as_ref(), "Event", "ipc", false)? {
            if timing {
                return Err(ipc::timing_refused());
            }
            let device = match device {
                Some(d) => d,
                None => driver::current_device()?.unwrap_or(0),
            };
            let (home, handle, side) = ipc::export(py, device)?;
            return Ok(Event::adopt(home, handle, false, Some(side)));
        }
        Event::new(py, device, timing)
    }

    /// The handle another process opens this IPC event with (``Event.from_ipc_handle``): a
    /// small picklable custream.IpcEventHandle. Raises ValueError for an event made without
    /// ``ipc=True``.
    fn ipc_handle(&self) -> PyResult<IpcEventHandle> {
        match &self.ipc {
            Some(side) => Ok(side.handle()),
            None => Err(PyValueError::new_err(
                "Event.ipc_handle() needs an event made with Event(ipc=True)",
            )),
        }
    }

    /// Open the IPC event another process exported, on the same GPU.
    ///
    /// ``handle``: a custream ``e.ipc_handle()``, which names its exporter and its device; or
    /// any library's raw 64-byte CUDA handle (``bytes``, ``bytearray`` or ``memoryview``:
    /// PyTorch's ``Event(interprocess=True).ipc_handle()``, CuPy's
    /// ``runtime.ipcGetEventHandle(e)``) or cuda.core's ``IPCEventDescriptor``, with
    /// ``device``, required then: the event's device as an ordinal of this process or its
    /// UUID (``uuid.UUID``, 16 bytes, ``'GPU-...'``). Bad input raises TypeError or
    /// ValueError naming the argument before the driver is asked.
    ///
    /// Its ``wait()`` (from a stream), ``record()``, ``synchronize()`` and ``query()`` work;
    /// ``close()`` ends this process's use and leaves the exporter's event as it is. The
    /// exporter must keep the event open while importers use it: custream's handle lets a use
    /// after it exited raise CudaError (see the Python guide's lifetime rule); a raw handle
    /// carries no exporter to watch, so there a dead exporter's event is the driver's to
    /// report, and ``synchronize()`` still waits in slices that ``timeout=`` and Ctrl-C end.
    #[staticmethod]
    #[pyo3(signature = (handle, *, device = None))]
    fn from_ipc_handle(py: Python<'_>, handle: &Bound<'_, PyAny>, device: Option<Bound<'_, PyAny>>) -> PyResult<Event> {
        match ipc_source::source(handle, device.as_ref())? {
            Source::Custream(handle) => {
                let (home, ev, side) = ipc::import(py, handle.get())?;
                Ok(Event::adopt(home, ev, false, Some(side)))
            }
            Source::Raw { handle, device } => Event::open_raw_ipc(py, handle, device, "from_ipc_handle()"),
        }
    }

    /// True for an IPC event, made with ``ipc=True`` or opened from a handle.
    #[getter]
    fn ipc(&self) -> bool {
        self.ipc.is_some()
    }

    /// Record the event on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object).
    fn record(slf: &Bound<'_, Self>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = protocol::as_stream(stream)?;
        Event::record_on(slf, StreamObject::of(&stream, "record()")?, "record()")
    }

    /// Milliseconds from this event to ``end``; both need ``timing=True`` and must have
    /// completed.
    #[pyo3(name = "elapsed_time")]
    fn py_elapsed_time(&self, py: Python<'_>, end: &Bound<'_, Event>) -> PyResult<f32> {
        self.elapsed_time(py, end.get())
    }

    /// Wait until the work recorded before the event is done, with the GIL released.
    ///
    /// ``timeout``: seconds (int or float), or None to wait as long as it takes; when the
    /// work is not done by then, ``TimeoutError`` (the event and its work are untouched).
    /// On the main thread the wait ends within 50 ms of a signal whose handler raises
    /// (Ctrl-C's ``KeyboardInterrupt``), with that exception.
    #[pyo3(signature = (timeout = None))]
    pub fn synchronize(&self, py: Python<'_>, timeout: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let deadline = timeout_arg(timeout.as_ref(), "Event.synchronize")?;
        const WHAT: &str = "synchronize()";
        if let Some(side) = self.imported() {
            // Another process's event: its own wait, which also watches the exporter.
            self.refuse_if_captured(py, WHAT)?;
            return self.use_event(py, WHAT, |ev| side.synchronize(py, ev, deadline, "Event.synchronize()"));
        }
        if deadline.is_never() && !interrupt::on_main_thread() {
            return self.use_for_wait(py, WHAT, |ev, _| {
                Ok(gil::detach(py, move || driver::event_synchronize(ev))?)
            });
        }
        self.use_for_wait(py, WHAT, |ev, ctx| {
            waits::synchronize_event(py, ev, ctx, self.recorded(), deadline, "Event.synchronize()")
        })
    }

    /// ``await event``: in a coroutine, until the work recorded before the event is done
    /// (``await stream.record()`` waits for the work queued on the stream so far). The event
    /// loop runs meanwhile; the wait takes no thread of its own and no CPU (the driver
    /// signals an eventfd the loop watches); cancelling the awaiting task cancels the wait.
    fn __await__<'py>(slf: &Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().use_for_wait(py, "await", |ev, ctx| {
            if gil::brief(py, move || driver::event_query(ev))? {
                return Ok(PyTuple::empty(py).try_iter()?.into_any());
            }
            static PREPARE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let prepare = PREPARE.get_or_try_init(py, || {
                Ok::<_, PyErr>(py.import("custream._waits")?.getattr("prepare")?.unbind())
            })?;
            let (bell, future, token): (Bound<'py, PyBell>, Bound<'py, PyAny>, u64) = prepare
                .bind(py)
                .call1((slf, slf.get().event.home().context_id))?
                .extract()?;
            if let Err(e) = waits::arm(py, ev, ctx, slf.get().recorded(), Wake::bell(bell.get(), token)) {
                future.call_method0("cancel")?;
                return Err(e);
            }
            future.call_method0("__await__")
        })
    }

    /// A ``concurrent.futures.Future`` that completes (with None) once the work recorded
    /// before the event is done: for threads, other event loops
    /// (``asyncio.wrap_future``) and callbacks (``add_done_callback``, run on custream's
    /// own thread). Cancelling it only stops the waiting. A fault that kills the context
    /// fails it with the driver's error (``CudaError``) within about a second.
    fn future<'py>(slf: &Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let future = slf.get().use_for_wait(py, "future()", |ev, ctx| {
            waits::future(py, ev, ctx, slf.get().recorded())
        })?;
        if !future.call_method0("done")?.is_truthy()? {
            // After a sticky fault the driver runs no host function: custream._waits asks about
            // the event once a second while the future is pending.
            static WATCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let watch = WATCH.get_or_try_init(py, || {
                Ok::<_, PyErr>(py.import("custream._waits")?.getattr("watch_future")?.unbind())
            })?;
            watch
                .bind(py)
                .call1((&future, slf, slf.get().event.home().context_id))?;
        }
        Ok(future)
    }

    /// True if the work recorded before the event is done.
    pub fn query(&self, py: Python<'_>) -> PyResult<bool> {
        self.refuse_if_captured(py, "query()")?;
        if let Some(side) = self.imported() {
            return self.use_event(py, "query()", |ev| {
                Ok(gil::brief(py, || side.query(ev, "Event.query()"))?)
            });
        }
        self.use_event(py, "query()", |ev| Ok(gil::brief(py, move || driver::event_query(ev))?))
    }

    /// The CUevent handle as an int.
    #[getter]
    pub fn handle(&self) -> PyResult<u64> {
        self.event.handle()
    }

    #[getter]
    pub fn device(&self) -> i32 {
        self.event.home().device
    }

    #[getter]
    pub fn timing(&self) -> bool {
        self.timing
    }

    fn __repr__(&self) -> String {
        let state = if self.is_closed() { " closed" } else { "" };
        let timing = match (self.timing(), &self.ipc) {
            (true, _) => " timing",
            (false, Some(side)) if side.imported() && side.foreign() => " ipc imported, no exporter to watch",
            (false, Some(side)) if side.imported() => " ipc imported",
            (false, Some(_)) => " ipc",
            (false, None) => "",
        };
        format!(
            "<custream.Event handle={:#x} device={}{timing}{state}>",
            self.handle_value(),
            self.device()
        )
    }

    /// True once close() has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Destroy the event; idempotent.
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

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        match &slf.get().ipc {
            Some(side) => Ok(ipc::reduce(&slf.get_type(), side.handle())?
                .into_pyobject(slf.py())?
                .into_any()),
            None => Ok(closable::reduce(slf)?.into_bound(slf.py()).into_any()),
        }
    }
}

impl Closable for Event {
    const PICKLE: &'static str = "a CUDA event belongs to one process";

    fn is_closed(&self) -> bool {
        self.event.is_closed()
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.event.close(py)
    }
}

impl DriverObject for OwnedEvent {
    const KIND: &'static str = "custream.Event";
    type View = EventHandle;

    fn view(&self) -> EventHandle {
        self.handle()
    }

    fn destroy(self, context: Context) -> driver::Result<()> {
        OwnedEvent::destroy(self, context)
    }

    fn view_u64(view: EventHandle) -> u64 {
        view.as_u64()
    }
}

/// An event was recorded on `stream`: if the stream captures, where (for refusals of the
/// event's synchronize and query, and for joins through `wait()`). No driver call unless a
/// capture is open through custream or foreign checks are on.
fn mark(py: Python<'_>, stream: StreamObject<'_>) -> PyResult<Option<CaptureMark>> {
    if !capture_guard::checks_needed() {
        return Ok(None);
    }
    if let Some(id) = capture_guard::own_capture_of(stream.handle_value()) {
        return Ok(Some(CaptureMark {
            capture: Some(id),
            stream: stream.object(py).unbind(),
        }));
    }
    Ok(stream.is_capturing(py)?.then(|| CaptureMark {
        capture: None,
        stream: stream.object(py).unbind(),
    }))
}

/// Where an event was recorded during a capture.
struct CaptureMark {
    /// The custream capture, or None for one begun outside custream.
    capture: Option<u64>,
    /// The custream.Stream it was recorded on.
    stream: Py<PyAny>,
}

impl CaptureMark {
    /// Whether the capture is still open.
    fn open(&self, py: Python<'_>) -> PyResult<bool> {
        if let Some(id) = self.capture {
            return Ok(capture_guard::is_open(id));
        }
        let stream = self.stream.bind(py);
        let s = StreamObject::of(stream, "Event")?;
        if s.is_closed() {
            return Ok(false);
        }
        s.is_capturing(py)
    }

    /// Refuse `what` on an event recorded in a capture that is still open; false (nothing
    /// refused) once it ended.
    fn refuse_if_open(&self, py: Python<'_>, what: &str) -> PyResult<bool> {
        if !self.open(py)? {
            return Ok(false);
        }
        let capture = self
            .capture
            .map(|id| format!("custream capture #{id}"))
            .unwrap_or_else(|| "a capture begun outside custream".to_owned());
        let handle = StreamObject::of(self.stream.bind(py), "Event")?.handle_value();
        Err(driver::refusal(
            capture_code::CAPTURED_EVENT,
            format!(
                "Event.{what} refused: the event was recorded on stream {handle:#x} while it was \
                 capturing a CUDA graph ({capture}), so it stands for a node of the graph, not for \
                 work that runs; CUDA would invalidate the capture. The capture is still valid: \
                 wait() on the event from a stream to join the capture, or end the capture first"
            ),
        )
        .into())
    }

    /// `waiter` waited on an event recorded in this capture: it joined it.
    fn joined_by(&self, waiter: u64) {
        if let Some(id) = self.capture {
            capture_guard::joined(id, waiter);
        }
    }
}
