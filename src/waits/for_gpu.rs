//! Waiting for the GPU without sitting in the driver's wait: timed and interruptible
//! `synchronize()`, `await event` and `Event.future()`.
//!
//! A wait is *armed* on a notifier stream (src/waits/notifiers.rs): a C host function behind the
//! event gives the wait's `Wake`: it wakes a waiting thread (a condition variable), writes
//! an event loop's eventfd (asyncio reads it, `python/custream/_waits.py`), or posts the
//! completion of a `concurrent.futures.Future` to custream's own thread
//! (src/host/thread.rs), which takes the GIL there. So the driver's thread never waits for
//! the GIL, and a pending wait takes no thread of its own and no CPU.
//!
//! A thread waits in slices (src/cpython/interrupt.rs): between them it asks the driver about the
//! event, so a context that died (a sticky fault: host functions no longer run) ends the
//! wait with the driver's error rather than never, and a wait on a shared notifier ends
//! within a slice of its event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::cpython::gil;
use crate::cpython::interrupt::{self, Deadline};
use crate::driver::capture_guard;
use crate::driver::{self, Context, EventHandle, StreamHandle};
use crate::waits::notifiers::{self, arm, Notifier, Recorded};
use crate::waits::wake::{Done, Wake};

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
    poll(py, deadline, false, done)
}

/// `spin`, giving the CPU away between polls when `yielding` (a stream whose policy is
/// "yield", src/stream/settings.rs).
pub fn poll(
    py: Python<'_>,
    deadline: Deadline,
    yielding: bool,
    done: impl Fn() -> driver::Result<bool> + Send,
) -> driver::Result<bool> {
    let until = deadline.within(SPIN);
    gil::detach(py, move || loop {
        let _relaxed = capture_guard::relaxed_while_ours_open()?;
        if done()? {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        if yielding {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    })
}

/// Poll `done` until it comes true, never sleeping (a stream whose policy is "spin"): in
/// slices of `interrupt::SLICE` with the GIL let go, signal handlers run between them and the
/// deadline kept (`what` names the wait in its TimeoutError).
pub fn spin_all_along(
    py: Python<'_>,
    deadline: Deadline,
    what: &str,
    done: impl Fn() -> driver::Result<bool> + Send,
) -> PyResult<()> {
    interrupt::wait(py, deadline, what, move |slice| {
        let until = Instant::now() + slice;
        loop {
            let _relaxed = capture_guard::relaxed_while_ours_open()?;
            if done()? {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    })
}

/// Between slices: whether the event was reached, asked of the driver (relaxed while a
/// capture of custream's is open, which an event query would otherwise invalidate).
fn asked(ev: EventHandle) -> driver::Result<bool> {
    let _relaxed = capture_guard::relaxed_while_ours_open()?;
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
    arm(py, ev, ctx, after, Wake::thread(&done))?;
    interrupt::wait(py, deadline, what, move |slice| Ok(done.wait(slice) || asked(ev)?))
}

/// A stream's synchronize through a notifier: `new` leases one in the stream's context,
/// `queue_on` is the launch that records its event on the stream, and
/// `wait` waits for it, in slices. Where no notifier is idle, `new` waits for the maker
/// thread's within the deadline (src/waits/notifiers.rs, `take_within`).
pub struct StreamWait {
    notifier: Option<Notifier>,
    own: EventHandle,
    done: Arc<Done>,
}

impl StreamWait {
    /// For `h`, a live stream of `ctx` the caller holds open: None when its work ended while
    /// no notifier was idle yet.
    pub fn new(
        py: Python<'_>,
        ctx: Context,
        h: StreamHandle,
        deadline: Deadline,
        what: &str,
    ) -> PyResult<Option<StreamWait>> {
        let ended = move || {
            let _relaxed = capture_guard::relaxed_while_ours_open()?;
            driver::stream_query(h)
        };
        let Some(notifier) = notifiers::take_within(py, ctx, deadline, what, ended)? else {
            return Ok(None);
        };
        Ok(Some(StreamWait {
            own: notifier.event(),
            notifier: Some(notifier),
            done: Arc::new(Done::default()),
        }))
    }

    /// The launch that queues the notifier behind the work queued so far on `h`, a live
    /// stream of the context (made through src/host/queue_depth.rs: its record can wait for room in
    /// `h`'s queue). It owns what it queues: run after its caller left, its `ring` still
    /// gives the notifier back.
    pub fn queue_on(&mut self, h: StreamHandle) -> impl FnOnce() -> driver::Result<()> + Send + 'static {
        let notifier = self.notifier.take();
        let signal = Wake::thread(&self.done);
        move || match notifier {
            Some(n) => notifiers::queue_behind_stream(n, h, signal).map_err(|(e, _)| e),
            None => Ok(()),
        }
    }

    pub fn wait(mut self, py: Python<'_>, deadline: Deadline, what: &str) -> PyResult<()> {
        if let Some(n) = self.notifier.take() {
            notifiers::put_back(n); // never queued (the caller's use failed first)
            return Ok(());
        }
        let (own, done) = (self.own, Arc::clone(&self.done));
        interrupt::wait(py, deadline, what, move |slice| Ok(done.wait(slice) || asked(own)?))
    }
}

impl Drop for StreamWait {
    /// A wait whose stream refused the launch: its notifier was never queued.
    fn drop(&mut self) {
        if let Some(n) = self.notifier.take() {
            notifiers::put_back(n);
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
        arm(py, ev, ctx, after, Wake::future(future.clone().unbind()))?;
    }
    Ok(future)
}
