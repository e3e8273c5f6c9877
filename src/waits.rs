//! Waiting for the GPU without sitting in the driver's wait: timed and interruptible
//! `synchronize()`, `await event` and `Event.future()`.
//!
//! A wait is *armed*: a notifier stream (custream's own, from a pool per context) waits on the
//! event, then runs `ring`, a C host function, on the driver's thread. `ring` never touches
//! Python: it wakes a waiting thread (a condition variable), writes an event loop's eventfd
//! (asyncio reads it, `python/custream/_waits.py`), or posts the completion of a
//! `concurrent.futures.Future` to custream's own thread (src/host_thread.rs), which takes the
//! GIL there. So the driver's thread never waits for the GIL, and a pending wait takes no
//! thread of its own and no CPU.
//!
//! How many notifiers: a stream runs its waits in order and events complete in any order, so
//! each armed event wait gets a notifier of its own, up to `SPREAD` per context. Past that,
//! an event wait joins the queue of a notifier already busy (it is seen once the waits queued
//! there before it are done too). The driver dictates the bound: with host functions pending
//! on about 56 streams of a context, `cuLaunchHostFunc` onto one more blocks until one of them
//! has run (an H100, driver 580; tests/gpu/test_gpu_waits.py arms 400 awaits), which would
//! block the event loop that armed it; and making streams while the GPU is busy can block too.
//! A notifier is given back by the `ring` of the last wait queued on it.
//!
//! A thread waits in slices (src/deadline.rs): between them it asks the driver about the
//! event, so a context that died (a sticky fault: host functions no longer run) ends the
//! wait with the driver's error rather than never, and a wait on a shared notifier ends
//! within a slice of its event.

use std::collections::HashMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

use crate::capture;
use crate::deadline::{self, Deadline};
use crate::driver::{
    self, CaptureMode, CaptureModeScope, Context, DriverError, EventHandle, OwnedEvent, OwnedStream, StreamHandle,
};
use crate::gil;
use crate::host_thread::{self, After};

/// Waits armed and not yet rung (for tests: nothing stays behind a finished wait).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Armed waits whose host function has not run yet.
pub fn pending_count() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// A notifier: a stream that waits on the awaited event and then rings, and an event to
/// record on a stream being synchronized. Made in one context, kept for the process.
struct Notifier {
    stream: OwnedStream,
    event: OwnedEvent,
    context_id: u64,
}

/// Idle notifiers, by context id (an id is never reused, so a reset context's notifiers are
/// never handed out again).
static IDLE: Mutex<Option<HashMap<u64, Vec<Notifier>>>> = Mutex::new(None);

fn lease(py: Python<'_>, ctx: Context) -> PyResult<Notifier> {
    let id = driver::context_id(ctx)?;
    let idle = IDLE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .get_mut(&id)
        .and_then(Vec::pop);
    if let Some(n) = idle {
        return Ok(n);
    }
    // Without the GIL: making a stream takes the driver's locks. Relaxed: a capture open on
    // this thread (custream's or another library's) would take the creation as unsafe.
    let made = gil::detach(py, move || {
        let _relaxed = CaptureModeScope::enter(CaptureMode::Relaxed)?;
        let current = driver::current_context()?;
        let stream = driver::create_stream(ctx, current, true, 0)?;
        match driver::event_create(ctx, false) {
            Ok(event) => Ok((stream, event)),
            Err(e) => {
                let _ = stream.destroy();
                Err(e)
            }
        }
    })?;
    Ok(Notifier {
        stream: made.0,
        event: made.1,
        context_id: id,
    })
}

fn give_back(n: Notifier) {
    IDLE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .entry(n.context_id)
        .or_default()
        .push(n);
}

/// A thread's wait: set by `ring`.
#[derive(Default)]
struct Done {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_all();
    }

    /// Wait up to `slice`; whether it was set.
    fn wait(&self, slice: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        let (done, _) = self
            .cv
            .wait_timeout_while(done, slice, |d| !*d)
            .unwrap_or_else(PoisonError::into_inner);
        *done
    }
}

/// An event loop's bell: an eventfd the loop watches, and the tokens of the awaits that rang.
struct Bell {
    fd: OwnedFd,
    rung: Mutex<Vec<u64>>,
}

impl Bell {
    fn ring(&self, token: u64) {
        self.rung.lock().unwrap_or_else(PoisonError::into_inner).push(token);
        // After the push: a loop that drains the fd and then takes the tokens sees this
        // token now or is woken again by this write.
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our own open eventfd.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

/// An event loop's bell, for `python/custream/_waits.py`: ``fileno()`` for
/// ``loop.add_reader``, ``take()`` for the tokens of the awaits that rang since.
#[pyclass(module = "custream", frozen, name = "_Bell")]
pub struct PyBell(Arc<Bell>);

#[pymethods]
impl PyBell {
    #[new]
    fn new() -> PyResult<PyBell> {
        // SAFETY: eventfd takes no pointers; a negative answer is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(PyBell(Arc::new(Bell {
            // SAFETY: a new descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            rung: Mutex::new(Vec::new()),
        })))
    }

    fn fileno(&self) -> i32 {
        self.0.fd.as_raw_fd()
    }

    /// The tokens rung since the last call (the eventfd drained first).
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        let rung = std::mem::take(&mut *self.0.rung.lock().unwrap_or_else(PoisonError::into_inner));
        PyList::new(py, rung)
    }
}

/// Who is told when the event is reached.
pub struct Signal(Kind);

enum Kind {
    Thread(Arc<Done>),
    Loop(Arc<Bell>, u64),
    /// A `concurrent.futures.Future`: completed on custream's thread, never the driver's.
    Future(Py<PyAny>),
}

impl Signal {
    /// Ring an event loop's bell with `token`.
    pub fn bell(bell: &PyBell, token: u64) -> Signal {
        Signal(Kind::Loop(bell.0.clone(), token))
    }

    fn thread(done: &Arc<Done>) -> Signal {
        Signal(Kind::Thread(done.clone()))
    }
}

/// Armed event waits' notifiers, by stream handle: how many waits each has queued and not yet
/// rung. Every context's, at most `SPREAD` of each.
static BUSY: Mutex<Option<HashMap<u64, Busy>>> = Mutex::new(None);

/// Event waits armed at once that each get a notifier stream of their own, per context; the
/// rest share those. Well under the ~56 streams with a host function pending at which the
/// driver blocks the next one: thread waits' notifiers (`StreamWait`) and other libraries'
/// host functions count there too.
const SPREAD: usize = 16;

struct Busy {
    notifier: Notifier,
    queued: usize,
    /// Where the event of the last wait queued on it was recorded, if custream knows.
    last: Option<Recorded>,
}

/// Where custream recorded an awaited event: the stream's handle and the record's place in
/// custream's order of records. A stream completes its events in the order they were
/// recorded, so a wait on a later event of the same stream can queue on the notifier of an
/// earlier one at no cost: the notifier reaches it no later than the stream does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Recorded {
    pub stream: u64,
    pub seq: u64,
}

fn busy() -> std::sync::MutexGuard<'static, Option<HashMap<u64, Busy>>> {
    BUSY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A busy notifier of the context for one more wait, on an event recorded at `after` if
/// known: the notifier whose last wait is on an earlier record of the same stream; else, once
/// the context has `SPREAD` busy ones, the one with the fewest queued. Its stream handle.
fn join_busy(context_id: u64, after: Option<Recorded>) -> Option<StreamHandle> {
    let mut guard = busy();
    let map = guard.get_or_insert_with(HashMap::new);
    let seq = |b: &Busy| b.last.map(|l| l.seq);
    let mut count = 0;
    let mut least: Option<&mut Busy> = None;
    let mut behind: Option<&mut Busy> = None;
    for b in map.values_mut().filter(|b| b.notifier.context_id == context_id) {
        count += 1;
        let earlier = match (b.last, after) {
            (Some(last), Some(after)) => last.stream == after.stream && last.seq < after.seq,
            _ => false,
        };
        if earlier && behind.as_deref().is_none_or(|x| seq(x) < seq(b)) {
            behind = Some(b);
        } else if least.as_deref().is_none_or(|l| b.queued < l.queued) {
            least = Some(b);
        }
    }
    let chosen = match (behind, least) {
        (Some(b), _) => b,
        (None, Some(l)) if count >= SPREAD => l,
        _ => return None,
    };
    chosen.queued += 1;
    chosen.last = after;
    Some(chosen.notifier.stream.handle())
}

/// A wait queued on the busy notifier `h` is over (rung, or never queued): the last gives the
/// notifier back.
fn leave_busy(h: StreamHandle) {
    let idle = {
        let mut guard = busy();
        let map = guard.get_or_insert_with(HashMap::new);
        match map.get_mut(&h.as_u64()) {
            Some(b) if b.queued > 1 => {
                b.queued -= 1;
                None
            }
            Some(_) => map.remove(&h.as_u64()),
            None => None,
        }
    };
    if let Some(b) = idle {
        give_back(b.notifier);
    }
}

/// Whose notifier a pending wait is queued on.
enum Owner {
    /// A thread's stream wait: its own, which records its event on the stream.
    Alone(Notifier),
    /// An event wait: a busy notifier's, by stream handle.
    Busy(StreamHandle),
}

impl Owner {
    /// The notifier stream the wait is queued on.
    fn stream(&self) -> StreamHandle {
        match self {
            Owner::Alone(n) => n.stream.handle(),
            Owner::Busy(h) => *h,
        }
    }

    /// The wait is over (rung, or never queued): give the notifier back, or leave it.
    fn release(self) {
        match self {
            Owner::Alone(n) => give_back(n),
            Owner::Busy(h) => leave_busy(h),
        }
    }
}

/// What `ring` owns: the signal and the notifier to give back.
struct Pending {
    signal: Signal,
    owner: Owner,
}

/// The host function behind every armed wait, on the driver's thread: no Python, no CUDA.
unsafe extern "C" fn ring(user: *mut c_void) {
    // SAFETY: `user` is the `Pending` that `queue` leaked for this one call.
    let pending = unsafe { Box::from_raw(user.cast::<Pending>()) };
    let Pending { signal, owner } = *pending;
    match signal.0 {
        Kind::Thread(done) => done.set(),
        Kind::Loop(bell, token) => bell.ring(token),
        Kind::Future(future) => host_thread::post(Box::new(move |py| {
            match py {
                Some(py) => complete(py, future),
                // The interpreter is going: nothing may touch the object any more.
                None => std::mem::forget(future),
            }
            After::Nothing
        })),
    }
    // After the signal: a thread that looks at the notifier's event between its slices sees
    // it done, not recorded again for another wait.
    owner.release();
    PENDING.fetch_sub(1, Ordering::Release);
}

/// Complete a future unless it was cancelled meanwhile.
fn complete(py: Python<'_>, future: Py<PyAny>) {
    let future = future.bind(py);
    if !future.call_method0("done").and_then(|d| d.is_truthy()).unwrap_or(true) {
        // A cancel from another thread between the two calls makes this raise: ignored.
        let _ = future.call_method1("set_result", (py.None(),));
    }
}

/// Queue `signal` behind `ev`, a live event of `ctx` (the caller holds it open for the call)
/// recorded at `after` if custream knows, on a notifier of its own or a busy one's
/// (`join_busy`).
pub fn arm(py: Python<'_>, ev: EventHandle, ctx: Context, after: Option<Recorded>, signal: Signal) -> PyResult<()> {
    let id = driver::context_id(ctx)?;
    let h = match join_busy(id, after) {
        Some(h) => h,
        None => {
            let n = lease(py, ctx)?;
            let h = n.stream.handle();
            let busy_one = Busy {
                notifier: n,
                queued: 1,
                last: after,
            };
            busy().get_or_insert_with(HashMap::new).insert(h.as_u64(), busy_one);
            h
        }
    };
    // The signal that comes back with an error is dropped here, attached.
    gil::brief(py, move || queue(Owner::Busy(h), Behind::Event(ev), signal)).map_err(|(e, _signal)| e.into())
}

/// What a notifier waits behind.
enum Behind {
    /// A live event.
    Event(EventHandle),
    /// The work queued so far on a live stream of the notifier's context (recorded on the
    /// notifier's own event).
    Stream(StreamHandle, EventHandle),
}

/// Queue on `owner`'s notifier stream its wait and its `ring` of `signal`. On failure `ring`
/// will never run: the notifier goes back and the signal comes back with the error, to be
/// dropped where Python may be entered (a future's reference).
fn queue(owner: Owner, behind: Behind, signal: Signal) -> Result<(), (DriverError, Signal)> {
    let ns = owner.stream();
    let user = Box::into_raw(Box::new(Pending { signal, owner }));
    PENDING.fetch_add(1, Ordering::AcqRel);
    let queued = (|| {
        let awaited = match behind {
            Behind::Event(ev) => ev,
            Behind::Stream(h, own) => driver::event_record(own, h).map(|()| own)?,
        };
        driver::stream_wait_event(ns, awaited)?;
        // SAFETY: `ring` takes no Python and makes no CUDA call; it owns `user` once called.
        unsafe { driver::launch_host_func(ns, ring, user.cast()) }
    })();
    queued.map_err(|e| {
        PENDING.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: the launch failed, so `ring` will never run: the box is still ours.
        let Pending { signal, owner } = *unsafe { Box::from_raw(user) };
        owner.release();
        (e, signal)
    })
}

/// How long a thread's wait polls the driver before it arms a notifier. A poll sees the work's
/// end within a microsecond or two; the notifier's host function runs a hundred or more after
/// it (an H200: a main-thread `synchronize()` of a 5 ms kernel took 180 us with a 2 ms poll,
/// the driver's own wait 66). The driver's own wait spins all along (CUDA's default
/// scheduling), so this costs no more CPU than the wait it replaces, for the waits most
/// kernels make; and it stays well inside the 50 ms in which a signal's handler must run.
const SPIN: Duration = Duration::from_millis(20);

/// Poll `done` with the GIL let go, for `SPIN` or until `deadline` if sooner: whether it came
/// true. Relaxed while a capture of custream's is open, as `asked` is.
pub fn spin(
    py: Python<'_>,
    deadline: Deadline,
    done: impl Fn() -> driver::Result<bool> + Send,
) -> driver::Result<bool> {
    let until = deadline.within(SPIN);
    gil::detach(py, move || loop {
        let _relaxed = capture::relaxed_while_ours_open()?;
        if done()? {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        std::hint::spin_loop();
    })
}

/// Between slices: whether the event was reached, asked of the driver (relaxed while a
/// capture of custream's is open, which an event query would otherwise invalidate).
fn asked(ev: EventHandle) -> driver::Result<bool> {
    let _relaxed = capture::relaxed_while_ours_open()?;
    driver::event_query(ev)
}

/// `Event.synchronize(timeout=)`, and a plain one on the main thread (where a signal's
/// handler must run): for `ev`, a live event of `ctx` that the caller holds open throughout.
pub fn synchronize_event(
    py: Python<'_>,
    ev: EventHandle,
    ctx: Context,
    after: Option<Recorded>,
    deadline: Deadline,
    what: &str,
) -> PyResult<()> {
    if gil::brief(py, move || driver::event_query(ev))? || spin(py, deadline, move || driver::event_query(ev))? {
        return Ok(());
    }
    let done = Arc::new(Done::default());
    arm(py, ev, ctx, after, Signal::thread(&done))?;
    deadline::wait(py, deadline, what, move |slice| Ok(done.wait(slice) || asked(ev)?))
}

/// A stream's synchronize through a notifier: `new` leases one in the stream's context,
/// `queue_on` is the launch that records its event on the stream, and
/// `wait` waits for it, in slices.
pub struct StreamWait {
    notifier: Option<Notifier>,
    own: EventHandle,
    done: Arc<Done>,
}

impl StreamWait {
    pub fn new(py: Python<'_>, ctx: Context) -> PyResult<StreamWait> {
        let notifier = lease(py, ctx)?;
        Ok(StreamWait {
            own: notifier.event.handle(),
            notifier: Some(notifier),
            done: Arc::new(Done::default()),
        })
    }

    /// The launch that queues the notifier behind the work queued so far on `h`, a live
    /// stream of the context (made through src/launch.rs: its record can wait for room in
    /// `h`'s queue). It owns what it queues: run after its caller left, its `ring` still
    /// gives the notifier back.
    pub fn queue_on(&mut self, h: StreamHandle) -> impl FnOnce() -> driver::Result<()> + Send + 'static {
        let notifier = self.notifier.take();
        let signal = Signal::thread(&self.done);
        move || match notifier {
            Some(n) => {
                let own = n.event.handle();
                queue(Owner::Alone(n), Behind::Stream(h, own), signal).map_err(|(e, _)| e)
            }
            None => Ok(()),
        }
    }

    pub fn wait(mut self, py: Python<'_>, deadline: Deadline, what: &str) -> PyResult<()> {
        if let Some(n) = self.notifier.take() {
            give_back(n); // never queued (the caller's use failed first)
            return Ok(());
        }
        let (own, done) = (self.own, Arc::clone(&self.done));
        deadline::wait(py, deadline, what, move |slice| Ok(done.wait(slice) || asked(own)?))
    }
}

impl Drop for StreamWait {
    /// A wait whose stream refused the launch: its notifier was never queued.
    fn drop(&mut self) {
        if let Some(n) = self.notifier.take() {
            give_back(n);
        }
    }
}

/// A `concurrent.futures.Future` that completes with None once the work recorded before `ev`
/// (a live event of `ctx`, held open for the call) is done.
pub fn future<'py>(
    py: Python<'py>,
    ev: EventHandle,
    ctx: Context,
    after: Option<Recorded>,
) -> PyResult<Bound<'py, PyAny>> {
    static FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cls = FUTURE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("concurrent.futures")?.getattr("Future")?.unbind())
    })?;
    let future = cls.bind(py).call0()?;
    if gil::brief(py, move || driver::event_query(ev))? {
        future.call_method1("set_result", (py.None(),))?;
    } else {
        arm(py, ev, ctx, after, Signal(Kind::Future(future.clone().unbind())))?;
    }
    Ok(future)
}
