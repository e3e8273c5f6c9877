//! Graph capture and `custream.Graph`: what a capture is to custream, how custream keeps
//! its own calls from breaking one, and the executable graph a capture ends in.
//!
//! CUDA invalidates a whole capture when a call it forbids meets it: `synchronize()` or
//! `query()` on a capturing stream, a query of an event recorded in the capture, and (in
//! "global" mode, or from the capturing thread) some calls on other streams. custream refuses
//! those of its own calls first, with a `CudaError` naming the capture, so the capture stays
//! valid. What it costs:
//! - No capture open, and foreign checks off (the default): one load of `GUARD` before a
//!   query or synchronize, which is zero; nothing else.
//! - A capture begun through custream is open: the call asks the driver whether the stream
//!   captures (`cuStreamIsCapturing`), and calls on other streams run with the thread's
//!   capture mode relaxed, so the driver lets them through instead of invalidating.
//! - `check_foreign_captures(True)`: every query and synchronize asks the driver first (one
//!   driver call), so a capture another library began on the same handle is refused too.
//!
//! Captures begun through custream are kept in `OPEN`, with the streams joined into them
//! through custream's `wait()` and the user objects of the host functions queued in them,
//! which the graph takes over when the capture ends.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::args::short_repr;
use crate::driver::{
    self, capture_code, CaptureMode, CaptureModeScope, CaptureStatus, Context, DriverError, GraphExecHandle,
    GraphHandle, StreamHandle, UserObject,
};
use crate::gil;
use crate::lifecycle::{DriverObject, Home, Made};
use crate::stream::StreamRef;

/// Zero unless a query or synchronize must look for a capture first: the FOREIGN bit
/// (`check_foreign_captures(True)`), and below it the number of captures custream began that
/// are still open.
static GUARD: AtomicU32 = AtomicU32::new(0);
const FOREIGN: u32 = 1 << 31;

/// A capture begun through custream and not yet ended.
struct Capture {
    id: u64,
    mode: CaptureMode,
    /// The stream it was begun on, then the streams joined into it through `wait()`.
    streams: Vec<u64>,
    /// The payloads of host functions queued in it, for its graph to own.
    user_objects: Vec<UserObject>,
}

static OPEN: Mutex<Vec<Capture>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn open() -> MutexGuard<'static, Vec<Capture>> {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn mode_name(mode: CaptureMode) -> &'static str {
    match mode {
        CaptureMode::Global => "global",
        CaptureMode::ThreadLocal => "thread_local",
        CaptureMode::Relaxed => "relaxed",
    }
}

/// `mode=` of `begin_capture`.
pub fn parse_mode(mode: Option<&Bound<'_, PyAny>>) -> PyResult<CaptureMode> {
    let Some(mode) = mode else {
        return Ok(CaptureMode::ThreadLocal);
    };
    let text: String = mode.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "begin_capture() mode must be a str, got {}",
            mode.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    match text.as_str() {
        "global" => Ok(CaptureMode::Global),
        "thread_local" => Ok(CaptureMode::ThreadLocal),
        "relaxed" => Ok(CaptureMode::Relaxed),
        _ => Err(PyValueError::new_err(format!(
            "begin_capture() mode must be 'thread_local', 'global' or 'relaxed', got {}",
            short_repr(mode)
        ))),
    }
}

/// Set whether every query and synchronize first asks the driver if the stream captures
/// (a capture begun outside custream); returns the previous setting.
pub fn set_foreign_checks(on: bool) -> bool {
    let before = if on {
        GUARD.fetch_or(FOREIGN, Ordering::AcqRel)
    } else {
        GUARD.fetch_and(!FOREIGN, Ordering::AcqRel)
    };
    before & FOREIGN != 0
}

pub fn foreign_checks() -> bool {
    GUARD.load(Ordering::Acquire) & FOREIGN != 0
}

/// Whether a query or synchronize must look for a capture first (through `checked`): one
/// load, false unless a capture begun through custream is open or foreign checks are on.
#[inline]
pub fn checks_needed() -> bool {
    GUARD.load(Ordering::Acquire) != 0
}

/// Run `f`, a `what` (synchronize) on the handle of `s`, unless it would break a capture:
/// refused with an error naming the capture, or run with the thread's capture mode relaxed
/// while a custream capture is open elsewhere. Out of line: the callers' fast paths stay as
/// they were, behind `checks_needed`.
#[cold]
#[inline(never)]
pub fn checked<R>(
    s: StreamRef,
    py: Python<'_>,
    what: &str,
    f: impl FnOnce(StreamHandle) -> driver::Result<R>,
) -> PyResult<R> {
    s.use_handle(py, what, |h| {
        let _relaxed = before_sync(h, what)?;
        f(h)
    })
}

/// `checked` for a call that holds the GIL throughout (query).
#[cold]
#[inline(never)]
pub fn checked_attached<R>(s: StreamRef, what: &str, f: impl FnOnce(StreamHandle) -> driver::Result<R>) -> PyResult<R> {
    s.use_handle_attached(what, |h| {
        let _relaxed = before_sync(h, what)?;
        f(h)
    })
}

/// What `checked` decides for a handle: an error, nothing to do, or a relaxed mode to keep.
fn before_sync(h: StreamHandle, what: &str) -> driver::Result<Option<CaptureModeScope>> {
    let ours_open = GUARD.load(Ordering::Acquire) & !FOREIGN != 0;
    if ours_open {
        if let Some(message) = describe_own(h.as_u64()) {
            return Err(refuse(what, h, &message));
        }
    }
    match driver::stream_capture_status(h) {
        Ok(CaptureStatus::None) => {}
        Ok(CaptureStatus::Active) => {
            return Err(refuse(
                what,
                h,
                "begun outside custream (another library's capture on this handle)",
            ));
        }
        Ok(CaptureStatus::Invalidated) => {
            return Err(refuse(what, h, "begun outside custream, and already invalidated"));
        }
        Err(DriverError::Cuda {
            code: capture_code::IMPLICIT,
            ..
        }) => {
            return Err(driver::refusal(
                capture_code::IMPLICIT,
                format!(
                    "{what} refused: this is the legacy default stream, which waits for every \
                     blocking stream of its context, and one of them is capturing a CUDA graph; \
                     CUDA would invalidate that capture. Use a non-blocking stream, or end the capture first"
                ),
            ));
        }
        Err(e) => return Err(e),
    }
    // In "global" mode, or on the thread of a "thread_local" capture, the driver takes some
    // calls on other streams as unsafe and invalidates the capture; relaxed, it lets them by.
    ours_open
        .then(|| CaptureModeScope::enter(CaptureMode::Relaxed))
        .transpose()
}

fn refuse(what: &str, h: StreamHandle, capture: &str) -> DriverError {
    driver::refusal(
        capture_code::UNSUPPORTED,
        format!(
            "{what} refused on stream {:#x}: it is capturing a CUDA graph ({capture}). CUDA forbids \
             {what} during a capture and would invalidate it; the capture is still valid. End the \
             capture first (end_capture()), then launch the graph and synchronize",
            h.as_u64()
        ),
    )
}

/// The capture begun through custream that `handle` takes part in, in words.
fn describe_own(handle: u64) -> Option<String> {
    let open = open();
    let c = open.iter().find(|c| c.streams.contains(&handle))?;
    let how = if c.streams[0] == handle {
        "begun by custream on it".to_owned()
    } else {
        format!("joined through wait() into the capture on stream {:#x}", c.streams[0])
    };
    Some(format!(
        "custream capture #{} in '{}' mode, {how}",
        c.id,
        mode_name(c.mode)
    ))
}

/// `s.begin_capture(mode)`.
pub fn begin(py: Python<'_>, s: StreamRef, mode: CaptureMode) -> PyResult<()> {
    s.use_handle(py, "begin_capture()", |h| {
        // Known before the driver hears of it, so no call of ours can slip in between.
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        open().push(Capture {
            id,
            mode,
            streams: vec![h.as_u64()],
            user_objects: Vec::new(),
        });
        GUARD.fetch_add(1, Ordering::AcqRel);
        // Without the GIL, as every call here that can wait on the driver's locks: their
        // holder may be a host function of another library's that waits for the GIL.
        let began = gil::detach(py, move || driver::stream_begin_capture(h, mode));
        if began.is_err() {
            forget_capture(|c| c.id == id);
        }
        began
    })
}

/// Remove the captures `which` picks from `OPEN`, and release what their host functions
/// queued (their graphs never formed).
fn forget_capture(which: impl Fn(&Capture) -> bool) {
    let gone: Vec<Capture> = {
        let mut open = open();
        let (gone, kept) = std::mem::take(&mut *open).into_iter().partition(|c| which(c));
        *open = kept;
        gone
    };
    for c in gone {
        GUARD.fetch_sub(1, Ordering::AcqRel);
        for obj in c.user_objects {
            let _ = driver::user_object_release(obj);
        }
    }
}

/// An owned stream is about to be destroyed. A custream capture begun on it can never be
/// ended after that, and would keep every later query and synchronize on the slow path (and
/// refuse them on a stream that gets the same handle): end it here, discard its graph and
/// release its host functions. A stream joined into a capture just leaves the list.
pub fn stream_destroyed(h: StreamHandle) {
    if GUARD.load(Ordering::Acquire) & !FOREIGN == 0 {
        return;
    }
    let handle = h.as_u64();
    let began_here = {
        let mut open = open();
        for c in open.iter_mut().filter(|c| c.streams[0] != handle) {
            c.streams.retain(|&s| s != handle);
        }
        open.iter().any(|c| c.streams[0] == handle)
    };
    if began_here {
        // From another thread than the one that began it (a thread_local or global capture
        // closed by the garbage collector) the driver may refuse; the destroy then ends it
        // (tests/gpu closes from both threads in every mode). Either way no graph of it is
        // ever made to run the host functions.
        if let Ok(graph) = driver::stream_end_capture(h) {
            let _ = driver::graph_destroy(graph);
        }
        forget_capture(|c| c.streams[0] == handle);
    }
}

/// The capture `handle` takes part in was ended: hand the payloads of its host functions
/// to `graph` (or release them, if it formed none).
fn capture_ended(handle: u64, graph: Option<GraphHandle>) {
    let found = {
        let mut open = open();
        open.iter().position(|c| c.streams[0] == handle).map(|i| open.remove(i))
    };
    let Some(c) = found else { return };
    GUARD.fetch_sub(1, Ordering::AcqRel);
    for obj in c.user_objects {
        let kept = graph.map(|g| driver::graph_take_user_object(g, obj));
        if !matches!(kept, Some(Ok(()))) {
            let _ = driver::user_object_release(obj);
        }
    }
}

/// A host function was queued in the capture on `h`: its graph will own `payload`. A capture
/// custream does not know (begun or joined by another library) never hands over its graph,
/// so the payload is kept for the life of the process instead: leaked, never freed early.
pub fn keep_until_captured(h: StreamHandle, payload: UserObject) {
    let mut open = open();
    if let Some(c) = open.iter_mut().find(|c| c.streams.contains(&h.as_u64())) {
        c.user_objects.push(payload);
    }
}

/// An event was recorded on `stream`: if the stream captures, where (for refusals of the
/// event's synchronize and query, and for joins through `wait()`). No driver call unless a
/// capture is open through custream or foreign checks are on.
pub fn mark(py: Python<'_>, stream: StreamRef) -> PyResult<Option<CaptureMark>> {
    if GUARD.load(Ordering::Acquire) == 0 {
        return Ok(None);
    }
    let handle = stream.handle_value();
    if let Some(c) = open().iter().find(|c| c.streams.contains(&handle)) {
        return Ok(Some(CaptureMark {
            capture: Some(c.id),
            stream: stream.object(py).unbind(),
        }));
    }
    let status = stream.use_handle(py, "record()", |h| {
        gil::brief(py, move || driver::stream_capture_status(h))
    })?;
    Ok((status != CaptureStatus::None).then(|| CaptureMark {
        capture: None,
        stream: stream.object(py).unbind(),
    }))
}

/// Where an event was recorded during a capture.
pub struct CaptureMark {
    /// The custream capture, or None for one begun outside custream.
    capture: Option<u64>,
    /// The custream.Stream it was recorded on.
    stream: Py<PyAny>,
}

impl CaptureMark {
    /// Whether the capture is still open.
    fn open(&self, py: Python<'_>) -> PyResult<bool> {
        if let Some(id) = self.capture {
            return Ok(open().iter().any(|c| c.id == id));
        }
        // SAFETY: a custream.Stream (`mark` took it from a StreamRef), which we hold.
        let s = unsafe { StreamRef::of(self.stream.as_ptr()) };
        if s.is_closed() {
            return Ok(false);
        }
        let status = s.use_handle(py, "is_capturing", |h| {
            gil::brief(py, move || driver::stream_capture_status(h))
        })?;
        Ok(status != CaptureStatus::None)
    }

    /// Refuse `what` on an event recorded in a capture that is still open; false (nothing
    /// refused) once it ended.
    pub fn refuse_if_open(&self, py: Python<'_>, what: &str) -> PyResult<bool> {
        if !self.open(py)? {
            return Ok(false);
        }
        let capture = self
            .capture
            .map(|id| format!("custream capture #{id}"))
            .unwrap_or_else(|| "a capture begun outside custream".to_owned());
        // SAFETY: as in `open`.
        let handle = unsafe { StreamRef::of(self.stream.as_ptr()) }.handle_value();
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
    pub fn joined_by(&self, waiter: u64) {
        let Some(id) = self.capture else { return };
        if let Some(c) = open().iter_mut().find(|c| c.id == id) {
            if !c.streams.contains(&waiter) {
                c.streams.push(waiter);
            }
        }
    }
}

/// `s.is_capturing`: true while the handle is in a capture (active or invalidated), whoever
/// began it.
pub fn is_capturing(py: Python<'_>, s: StreamRef) -> PyResult<bool> {
    let status = s.use_handle(py, "is_capturing", |h| {
        gil::brief(py, move || driver::stream_capture_status(h))
    })?;
    Ok(status != CaptureStatus::None)
}

/// `s.end_capture()`: end the capture and instantiate its graph.
pub fn end(py: Python<'_>, s: StreamRef) -> PyResult<Graph> {
    let context = s.context(py)?;
    let device = s.device(py)?;
    let ended = s.use_handle(py, "end_capture()", |h| {
        gil::detach(py, move || {
            let ended = driver::stream_end_capture(h);
            match &ended {
                Ok(g) => capture_ended(h.as_u64(), Some(*g)),
                // Invalidated or unjoined captures end too; a wrong-thread end does not.
                Err(_) if driver::stream_capture_status(h) == Ok(CaptureStatus::None) => {
                    capture_ended(h.as_u64(), None)
                }
                Err(_) => {}
            }
            ended
        })
    })?;
    let nodes = driver::graph_node_count(ended);
    let made = Home::make(py, device, Some(context), move |ctx| {
        driver::graph_instantiate(ctx, ended)
    });
    // The executable graph keeps what it needs.
    let _ = gil::detach(py, move || driver::graph_destroy(ended));
    let (home, exec) = made?;
    Ok(Graph {
        exec: Made::new(home, exec),
        nodes: nodes.unwrap_or(0),
    })
}

/// An executable CUDA graph: what `Stream.end_capture()` returns.
///
/// ``g.launch(stream)`` runs it on any stream (a custream.Stream or any ``__cuda_stream__``
/// object), ``g.upload(stream)`` prepares it there ahead of a launch, ``close()`` destroys it
/// (idempotent; launches in flight finish first). It lives in the context of the stream it
/// was captured on, and is destroyed there exactly once: never after interpreter
/// finalization began, never in a forked child.
#[pyclass(module = "custream", frozen)]
pub struct Graph {
    exec: Made<GraphExecHandle>,
    nodes: usize,
}

impl Graph {
    /// Run `f` on the executable graph and `stream`'s handle, both held open meanwhile.
    fn on_stream(
        &self,
        py: Python<'_>,
        stream: StreamRef,
        what: &str,
        f: impl FnOnce(GraphExecHandle, StreamHandle) -> driver::Result<()> + Send,
    ) -> PyResult<()> {
        let (_in_use, exec) = self.exec.enter(py, what)?;
        // Without the GIL, as CuPy's kernel launches are: a full launch queue waits for the
        // host functions queued before, and those of Python (ours, CuPy's, numba's) take the
        // GIL to run (docs/benchmarks.md has what holding it would save).
        stream.use_handle_in(py, what, self.exec.home(), |h| gil::detach(py, move || f(exec, h)))
    }

    pub fn launch(&self, py: Python<'_>, stream: StreamRef) -> PyResult<()> {
        self.on_stream(py, stream, "launch()", driver::graph_launch)
    }

    pub fn upload(&self, py: Python<'_>, stream: StreamRef) -> PyResult<()> {
        self.on_stream(py, stream, "upload()", driver::graph_upload)
    }

    pub fn handle(&self) -> PyResult<u64> {
        self.exec.handle()
    }

    /// The handle's value even when closed, for repr.
    pub fn handle_value(&self) -> u64 {
        self.exec.handle_value()
    }

    pub fn device(&self) -> i32 {
        self.exec.home().device
    }

    pub fn node_count(&self) -> usize {
        self.nodes
    }

    pub fn is_closed(&self) -> bool {
        self.exec.is_closed()
    }

    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.exec.close(py)
    }
}

impl DriverObject for GraphExecHandle {
    const KIND: &'static str = "custream.Graph";

    fn destroy(self, context: Context) -> driver::Result<()> {
        driver::graph_exec_destroy(context, self)
    }

    fn as_u64(self) -> u64 {
        GraphExecHandle::as_u64(self)
    }
}
