//! What a Stream does: used (every driver call on its handle holds it open and checks its
//! context), closed and released once. How one is made is src/object/make.rs. Its memory is
//! `CustreamStream` from pxd/custream.h, reached only through src/object/memory.rs's
//! `StreamObject`; src/stream/slots.rs gives it its Python face.

use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

use crate::cpython::gil;
use crate::cpython::interrupt::{self, Deadline};
use crate::cpython::stream_object::StreamObject;
use crate::cpython::stream_object::{
    CUSTREAM_DEVICE_UNKNOWN, CUSTREAM_FLAG_DEFAULT, CUSTREAM_FLAG_GREEN, CUSTREAM_FLAG_NON_BLOCKING,
    CUSTREAM_FLAG_OWNED, CUSTREAM_FLAG_POOLED, CUSTREAM_FLAG_SHARED,
};
use crate::driver::capture_guard;
use crate::driver::{
    self, capture_code, CaptureMode, CaptureStatus, Context, DriverError, OwnedStream, StreamHandle, SyncPolicy,
};
use crate::green::{self, GreenContext};
use crate::host::queue_depth::{self, Gil};
use crate::object::home_context::Home;
use crate::object::lifecycle::{self, Managed};
use crate::object::make::{owned_streams, DEFAULT_NAMES};
use crate::stream::owner_release;
use crate::waits::{self, StreamWait};

/// The proof `StreamObject::owner` takes from `Managed::release`: the one release, with no
/// use left in flight, may read what it is about to drop.
struct Released;

// SAFETY: made only inside `Managed::release` below, the one release of the object.
unsafe impl crate::cpython::stream_object::KeepsOpen for Released {}

/// What a Stream does, on the view of its object.
impl StreamObject<'_> {
    fn handle(self) -> StreamHandle {
        // SAFETY: we made the stream and destroy it only at release, after every use
        // (owned); its owner keeps it alive and we hold the owner, or the C owner's deleter
        // has not run (borrowed: the protocol's contract); or it is a default-stream token.
        unsafe { StreamHandle::from_raw(self.handle_value()) }
    }

    pub fn is_owned(self) -> bool {
        self.flags() & CUSTREAM_FLAG_OWNED != 0
    }

    pub fn is_default(self) -> bool {
        self.flags() & CUSTREAM_FLAG_DEFAULT != 0
    }

    pub fn is_closed(self) -> bool {
        lifecycle::is_closed(&self)
    }

    /// One of the module's default streams, which nobody closes.
    pub fn is_shared(self) -> bool {
        self.flags() & CUSTREAM_FLAG_SHARED != 0
    }

    /// Made by a StreamPool, which alone closes it.
    pub fn is_pooled(self) -> bool {
        self.flags() & CUSTREAM_FLAG_POOLED != 0
    }

    /// Made in a custream.GreenContext, its owner.
    pub fn is_green(self) -> bool {
        self.flags() & CUSTREAM_FLAG_GREEN != 0
    }

    /// The object the stream keeps alive (a borrowed stream's owner, a green stream's
    /// GreenContext) while it is open: read within a use, which its release waits for.
    pub fn owner_while_open<'py>(self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let held = lifecycle::hold(&self, py)?;
        self.owner(py, &held)
    }

    /// The GreenContext of a stream made in one, while the stream is open.
    fn own_green_context<'py>(self, py: Python<'py>, what: &str) -> PyResult<Bound<'py, GreenContext>> {
        match self.owner_while_open(py) {
            Some(owner) => Ok(owner.cast_into::<GreenContext>()?),
            None => Err(closed_error(what)),
        }
    }

    /// `s.green_context`: the GreenContext the stream's work runs in, or None. A stream made
    /// in one answers with it; any other asks the driver (cuStreamGetGreenCtx), and one in a
    /// green context custream does not know gets a GreenContext that keeps this stream (and
    /// so whatever keeps the green context alive for it) as its owner.
    pub fn green_context<'py>(self, py: Python<'py>) -> PyResult<Option<Bound<'py, GreenContext>>> {
        if self.is_green() {
            return self.own_green_context(py, "green_context").map(Some);
        }
        let found = self.use_handle(py, "green_context", |h| {
            gil::brief(py, move || driver::stream_green_context(h))
        })?;
        let Some(view) = found else { return Ok(None) };
        if let Some(known) = green::known(py, view.as_u64()) {
            return Ok(Some(known));
        }
        // Held open meanwhile: the stream's owner keeps its green context alive.
        let _in_use = lifecycle::enter(&self, py, "green_context")?;
        let gc = GreenContext::borrowed(py, view, Some(self.object(py).unbind()))?;
        Ok(Some(green::register(&Bound::new(py, gc)?)?))
    }

    /// `s.sm_count`: the SMs the stream's work may use, its green context's or the device's.
    pub fn sm_count(self, py: Python<'_>) -> PyResult<u32> {
        if self.is_green() {
            return Ok(self.own_green_context(py, "sm_count")?.get().sm_count());
        }
        if self.is_owned() {
            // Made in the primary context: the whole device.
            lifecycle::ensure_usable(&self, "sm_count")?;
            return Ok(driver::device_sm_count(self.device(py)?)?);
        }
        let partition = self.use_handle(py, "sm_count", |h| {
            gil::brief(py, move || match driver::stream_green_context(h)? {
                Some(g) => driver::green_sm_count(g).map(Some),
                None => Ok(None),
            })
        })?;
        match partition {
            Some(n) => Ok(n),
            None => Ok(driver::device_sm_count(self.device(py)?)?),
        }
    }

    /// The device if known without a driver call.
    pub fn known_device(self) -> Option<i32> {
        match self.device_cell().load(Ordering::Acquire) {
            CUSTREAM_DEVICE_UNKNOWN => None,
            d => Some(d),
        }
    }

    /// Run a driver call on the handle, holding the stream open for its duration: a close()
    /// meanwhile takes effect when the call returns. `what` names the operation in errors.
    pub fn use_handle<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(StreamHandle) -> driver::Result<R>,
    ) -> PyResult<R> {
        let _in_use = lifecycle::enter(&self, py, what)?;
        Ok(self.call_on_handle(f)?)
    }

    /// `use_handle` for a call that raises Python's errors too (a launch: src/host/queue_depth.rs).
    pub fn use_handle_py<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(StreamHandle) -> PyResult<R>,
    ) -> PyResult<R> {
        let _in_use = lifecycle::enter(&self, py, what)?;
        self.call_on_handle(f)
    }

    /// `use_handle` for a caller that has just checked that `home`'s context is the one it
    /// was (a Graph launched on the stream): a stream known to live in it needs no second
    /// check, which would cost another driver call per launch.
    pub fn use_handle_in<R, E: From<DriverError>>(
        self,
        py: Python<'_>,
        what: &str,
        home: &Home,
        f: impl FnOnce(StreamHandle) -> Result<R, E>,
    ) -> PyResult<R>
    where
        PyErr: From<E>,
    {
        let _in_use = lifecycle::enter(&self, py, what)?;
        if !self.is_default() && self.known_context() == (Some(home.context), home.context_id) {
            return Ok(f(self.handle())?);
        }
        Ok(self.call_on_handle(f)?)
    }

    /// `use_handle` for a call that stays attached from start to end (no `detach` in `f`).
    /// Where the interpreter has a GIL, that attachment is exclusive: no close can begin
    /// meanwhile (close() marks the stream closed, attached, before it releases anything), so
    /// a load of the state word does what the two read-modify-writes of `use_handle` do, for
    /// the cheapest calls (query), where those cost a tenth of the driver's own time. A
    /// free-threaded interpreter runs other attached threads beside this one: there the
    /// state word's marks hold the stream, as in `use_handle`.
    pub fn use_handle_attached<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(StreamHandle) -> driver::Result<R>,
    ) -> PyResult<R> {
        #[cfg(Py_GIL_DISABLED)]
        return self.use_handle(py, what, f);
        #[cfg(not(Py_GIL_DISABLED))]
        {
            let _ = py;
            lifecycle::ensure_usable(&self, what)?;
            Ok(self.call_on_handle(f)?)
        }
    }

    /// The driver call of `use_handle` and `use_handle_attached`, once the stream is known open.
    /// A default-stream token on a thread with no current context follows the CUDA
    /// runtime's rule (device 0's primary context), which stays current only for the call.
    fn call_on_handle<R, E: From<DriverError>>(self, f: impl FnOnce(StreamHandle) -> Result<R, E>) -> Result<R, E> {
        let h = self.handle();
        if self.is_default() {
            return match driver::current_context()? {
                Some(_) => f(h),
                // The primary context is current for `f` alone; its own error comes back through.
                None => driver::in_primary_context(0, || Ok(f(h)))?,
            };
        }
        self.check_context(h)?;
        f(h)
    }

    /// Learn a borrowed stream's context on first use (the stream is alive then: its owner
    /// is), and on every use make sure the context was not reset since: a driver call on a
    /// stream of a reset context can crash the process instead of failing. Threads learning
    /// it at once store the same answer (src/object/memory.rs, `known_context`).
    fn check_context(self, h: StreamHandle) -> driver::Result<()> {
        let (known, id) = self.known_context();
        if let Some(ctx) = known {
            return driver::ensure_same_context(ctx, id);
        }
        let registered = owned_streams().get(&self.handle_value()).copied();
        let (ctx, id) = match registered {
            Some(found) => found,
            None => {
                let ctx = driver::stream_context(h)?;
                (ctx, driver::context_id(ctx)?)
            }
        };
        self.set_context(Some(ctx), id);
        driver::ensure_same_context(ctx, id)
    }

    /// Wait for the stream's work. An idle stream answers without releasing the GIL, which
    /// costs more than the driver's query; a busy one pays that one query extra.
    pub fn synchronize(self, py: Python<'_>) -> PyResult<()> {
        if capture_guard::checks_needed() {
            return self.checked(py, "synchronize()", |h| wait_on(py, h));
        }
        self.use_handle(py, "synchronize()", |h| wait_on(py, h))
    }

    /// `synchronize(timeout=)`. Off the main thread and without a timeout, the driver's own
    /// wait (`synchronize`); otherwise a notifier's event recorded on the stream is waited
    /// for in slices (src/waits/for_gpu.rs), so that a signal's handler runs and a deadline holds.
    pub fn synchronize_until(self, py: Python<'_>, deadline: Deadline) -> PyResult<()> {
        const WHAT: &str = "synchronize()";
        if deadline.is_never() && !interrupt::on_main_thread() {
            return self.synchronize(py);
        }
        if self.query_as(py, WHAT)? {
            return Ok(());
        }
        // The stream's policy (src/stream/settings.rs): "blocking" arms a notifier at once,
        // "spin" polls to the end, "yield" and "auto" poll their first 20 ms.
        let policy = self.wait_policy(py);
        if policy == SyncPolicy::Spin {
            return self.use_handle_py(py, WHAT, |h| {
                waits::spin_all_along(py, deadline, "Stream.synchronize()", move || driver::stream_query(h))
            });
        }
        if policy != SyncPolicy::Blocking
            && self.use_handle(py, WHAT, |h| {
                waits::poll(py, deadline, policy == SyncPolicy::Yield, move || {
                    driver::stream_query(h)
                })
            })?
        {
            return Ok(());
        }
        let ctx = self.context(py)?;
        let waited = self.use_handle_py(py, WHAT, |h| {
            StreamWait::new(py, ctx, h, deadline, "Stream.synchronize()")
        })?;
        let Some(mut wait) = waited else {
            return Ok(());
        };
        let queue = &mut wait;
        self.use_handle_py(py, WHAT, move |h| {
            queue_depth::run(py, self, h, Gil::Brief, |_| true, queue.queue_on(h))
        })?;
        wait.wait(py, deadline, "Stream.synchronize()")
    }

    /// True when all work on the stream is done.
    pub fn query(self, py: Python<'_>) -> PyResult<bool> {
        self.query_as(py, "query()")
    }

    /// `query()`, for `what` (which names it in errors).
    #[inline]
    fn query_as(self, py: Python<'_>, what: &str) -> PyResult<bool> {
        if gil::python_awaited() {
            // Held open by use_handle's marks, since a close may begin while the GIL is let
            // go (gil::brief says why it is).
            let query = move |h| gil::detach(py, move || driver::stream_query(h));
            if capture_guard::checks_needed() {
                return self.checked(py, what, query);
            }
            return self.use_handle(py, what, query);
        }
        if capture_guard::checks_needed() {
            return self.checked_attached(py, what, driver::stream_query);
        }
        self.use_handle_attached(py, what, driver::stream_query)
    }

    /// Run `f`, a `what` (synchronize, query) on the handle, unless it would break a capture:
    /// refused with an error naming the capture, or run with the thread's capture mode relaxed
    /// while a custream capture is open elsewhere (src/driver/capture_guard.rs). Out of line:
    /// the callers' fast paths stay as they were, behind `capture_guard::checks_needed`.
    #[cold]
    #[inline(never)]
    fn checked<R>(self, py: Python<'_>, what: &str, f: impl FnOnce(StreamHandle) -> driver::Result<R>) -> PyResult<R> {
        self.use_handle(py, what, |h| {
            let _relaxed = capture_guard::before_sync(h, what)?;
            f(h)
        })
    }

    /// `checked` for a call that holds the GIL throughout (query).
    #[cold]
    #[inline(never)]
    fn checked_attached<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(StreamHandle) -> driver::Result<R>,
    ) -> PyResult<R> {
        self.use_handle_attached(py, what, |h| {
            let _relaxed = capture_guard::before_sync(h, what)?;
            f(h)
        })
    }

    /// `s.begin_capture(mode)`.
    pub fn begin_capture(self, py: Python<'_>, mode: CaptureMode) -> PyResult<()> {
        self.use_handle(py, "begin_capture()", |h| {
            let id = capture_guard::opening(h, mode);
            // Without the GIL, as every call here that can wait on the driver's locks: their
            // holder may be a host function of another library's that waits for the GIL.
            let began = gil::detach(py, move || driver::stream_begin_capture(h, mode));
            if began.is_err() {
                capture_guard::forget(id);
            }
            began
        })
    }

    /// `s.is_capturing`: true while the handle is in a capture (active or invalidated),
    /// whoever began it.
    pub fn is_capturing(self, py: Python<'_>) -> PyResult<bool> {
        let status = self.use_handle(py, "is_capturing", |h| {
            gil::brief(py, move || driver::stream_capture_status(h))
        })?;
        Ok(status != CaptureStatus::None)
    }

    /// The device, resolving it through the driver for borrowed streams (src/driver/mod.rs's
    /// `stream_device`: never by changing the current context beyond the call). Default-stream
    /// tokens are resolved against the current context every time; others once, kept in the
    /// `device` field (threads learning it at once store the same answer).
    pub fn device(self, py: Python<'_>) -> PyResult<i32> {
        if let Some(d) = self.known_device() {
            return Ok(d);
        }
        if self.is_default() {
            return self.use_handle(py, "device", |h| driver::context_device(driver::stream_context(h)?));
        }
        let d = self.use_handle(py, "device", |h| {
            // Learnt by the use's context check.
            let ctx = self.known_context().0;
            gil::brief(py, move || driver::stream_device(h, ctx))
        })?;
        let _ = self
            .device_cell()
            .compare_exchange(CUSTREAM_DEVICE_UNKNOWN, d, Ordering::AcqRel, Ordering::Acquire);
        Ok(d)
    }

    /// `s.id`: the driver's id of the stream (cuStreamGetId), an int unique in the process
    /// while the stream lives, the same for every Stream over one handle. Asked once and kept
    /// in the object; a default-stream token answers for the current context's default stream,
    /// asked every time.
    #[inline]
    pub fn id<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.is_closed() {
            return Err(closed_error("id"));
        }
        match self.known_id(py) {
            Some(id) => Ok(id),
            None => self.learn_id(py),
        }
    }

    #[cold]
    #[inline(never)]
    fn learn_id<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // The driver answers cuStreamGetId on a capturing stream with an error that also
        // invalidates the capture: refused here first, the capture kept.
        if !self.is_default() && self.is_capturing(py)? {
            return Err(driver::refusal(
                capture_code::NOT_PERMITTED,
                "id of a stream that is capturing a CUDA graph: the driver refuses it then, and \
                 its refusal would invalidate the capture; ask for s.id before begin_capture() \
                 (it is kept) or after end_capture()"
                    .to_owned(),
            )
            .into());
        }
        let id = self.use_handle(py, "id", |h| gil::brief(py, move || driver::stream_id(h)))?;
        let id = PyInt::new(py, id).into_any();
        if self.is_default() {
            return Ok(id);
        }
        Ok(self.keep_id(id))
    }

    /// `s.id` as a number, for the C API.
    pub fn id_value(self, py: Python<'_>) -> PyResult<u64> {
        self.id(py)?.extract()
    }

    /// The context the stream's work runs in (checked, or learnt, as every use does).
    pub fn context(self, py: Python<'_>) -> PyResult<Context> {
        if self.is_default() {
            return self.use_handle(py, "context", driver::stream_context);
        }
        self.use_handle(py, "context", |_| Ok(()))?;
        // The use above learnt it.
        self.known_context().0.ok_or_else(|| closed_error("context"))
    }

    /// Whether the stream does not synchronize with the legacy default stream.
    pub fn non_blocking(self, py: Python<'_>) -> PyResult<bool> {
        if self.is_owned() {
            Ok(self.flags() & CUSTREAM_FLAG_NON_BLOCKING != 0)
        } else if self.is_default() {
            Ok(false)
        } else {
            self.use_handle(py, "non_blocking", driver::stream_is_non_blocking)
        }
    }

    pub fn priority(self, py: Python<'_>) -> PyResult<i32> {
        if self.is_owned() || self.is_default() {
            Ok(self.priority_field())
        } else {
            self.use_handle(py, "priority", driver::stream_priority)
        }
    }

    /// close(), refused for the module's default streams and a pool's streams, which
    /// belong to everybody and to the pool.
    pub fn close(self, py: Python<'_>) -> PyResult<()> {
        if !self.is_closed() && self.is_shared() {
            let name = DEFAULT_NAMES
                .get(self.handle_value() as usize)
                .copied()
                .unwrap_or("a default stream");
            return Err(PyValueError::new_err(format!(
                "custream.{name} is shared by every library in this process and is never closed"
            )));
        }
        if !self.is_closed() && self.is_pooled() {
            return Err(PyValueError::new_err(
                "this stream belongs to a custream.StreamPool, which owns it: close the pool \
                 (pool.close()) instead",
            ));
        }
        lifecycle::close(&self, py)
    }

    /// close() for the pool that made the stream.
    pub fn close_pooled(self, py: Python<'_>) -> PyResult<()> {
        lifecycle::close(&self, py)
    }

    /// Release everything once, without raising: for tp_clear.
    pub fn close_quietly(self, py: Python<'_>) {
        lifecycle::close_quietly(&self, py);
    }
}

impl Managed for StreamObject<'_> {
    const KIND: &'static str = "custream.Stream";

    fn state(&self) -> &AtomicU32 {
        StreamObject::state(*self)
    }

    fn fork_generation(&self) -> u32 {
        StreamObject::fork_generation(*self)
    }

    /// Destroy what we own, call the C deleter, drop the owner. A borrowed stream without a
    /// deleter (the common wrap) calls nothing.
    fn release(&self, py: Python<'_>) -> driver::Result<()> {
        let s = *self;
        let (context, context_id) = s.known_context();
        if context.is_some() {
            s.set_context(None, context_id);
        }
        let deleter = s.take_deleter(py);
        // A green stream's owner is the GreenContext it holds open: ended after the destroy.
        // This is the one release, which every use has left (src/object/lifecycle.rs).
        let green = s.is_green().then(|| s.owner(py, &Released)).flatten();
        let owner = s.take_owner(py);
        let may_call = || lifecycle::may_release(s.fork_generation());
        if may_call() {
            queue_depth::forget(py, s.handle_value());
        }

        let mut result = Ok(());
        if s.is_owned() {
            owned_streams().remove(&s.handle_value());
            if let Some(context) = context.filter(|_| may_call()) {
                let home = Home {
                    context,
                    context_id,
                    device: s.device_cell().load(Ordering::Acquire),
                    // A green context's streams retain nothing: it does.
                    retains_primary: !s.is_green(),
                };
                // SAFETY: an owned stream's handle came from `OwnedStream::into_raw` in
                // `create`, and this is the one release of the object (the state word's,
                // src/object/state_word.rs), so the handle is taken back exactly once.
                let owned = unsafe { OwnedStream::from_raw(s.handle_value()) };
                result = home.release(py, move |_| {
                    capture_guard::stream_destroyed(owned.handle());
                    owned.destroy()
                });
            }
        }
        if let Some(gc) = green.as_ref().and_then(|g| g.cast::<GreenContext>().ok()) {
            gc.get().stream_closed(py);
        }
        if let Some(deleter) = deleter.filter(|_| may_call()) {
            deleter.call(py);
        }
        if let Some(owner) = owner {
            owner_release::release(py, owner);
        }
        result
    }
}

/// The error of a use of a closed Stream, naming the use.
pub fn closed_error(what: &str) -> PyErr {
    lifecycle::closed_error(<StreamObject<'_> as Managed>::KIND, what)
}

/// `synchronize()` on the handle (see there). Inlined in both of its callers, so that the
/// fast path stays one function.
#[inline(always)]
fn wait_on(py: Python<'_>, h: StreamHandle) -> driver::Result<()> {
    if driver::stream_query(h)? {
        return Ok(());
    }
    gil::detach(py, move || driver::stream_synchronize(h))
}

/// tp_dealloc's work before the object is freed (src/object/memory.rs frees it).
pub fn release_at_dealloc(s: StreamObject<'_>, py: Python<'_>) {
    lifecycle::release_at_dealloc(&s, py);
}
