//! What a Stream is and does. Its memory is `CustreamStream` from pxd/custream.h (through
//! src/layout.rs), so Cython and C read the same fields Rust writes; `StreamRef` is the one
//! way Rust reads and writes them. This file makes, uses, releases and frees such objects;
//! src/stream_type.rs gives them their Python face.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyTuple};

use crate::boundary::no_unwind;
use crate::driver::{self, Context, StreamHandle};
use crate::event::Event;
use crate::gil;
use crate::graph;
use crate::layout::{
    custream_deleter_t, CustreamStream, CUSTREAM_DEVICE_UNKNOWN, CUSTREAM_FLAG_DEFAULT, CUSTREAM_FLAG_NON_BLOCKING,
    CUSTREAM_FLAG_OWNED, CUSTREAM_FLAG_POOLED, CUSTREAM_FLAG_SHARED,
};
use crate::lifecycle::{self, Home, Managed};
use crate::owner;
use crate::process;

/// The Stream type object, made once when the module is initialized.
pub static STREAM_TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(null_mut());

/// Live Stream objects in this process (allocated and not yet deallocated).
pub static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Objects are made and freed with the GIL held, which orders the updates: a load and a
/// store, not a locked read-modify-write, on this per-object path.
fn count_live(delta: isize) {
    LIVE.store(LIVE.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
}

/// The owned streams alive in this process: handle -> (context, context id). A borrowed
/// stream over one of them learns its context here, without asking the driver about a
/// handle that a context reset may already have destroyed.
static OWNED: Mutex<BTreeMap<u64, (Context, u64)>> = Mutex::new(BTreeMap::new());

fn owned_streams() -> MutexGuard<'static, BTreeMap<u64, (Context, u64)>> {
    OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn stream_type() -> *mut ffi::PyTypeObject {
    STREAM_TYPE.load(Ordering::Acquire)
}

/// Whether `obj` is a custream.Stream (the type is final, so this is an identity test).
///
/// # Safety
/// `obj` must be a live object.
pub unsafe fn is_stream(obj: *mut ffi::PyObject) -> bool {
    let tp = stream_type();
    // SAFETY: the caller vouches that obj is alive.
    !tp.is_null() && unsafe { ffi::Py_TYPE(obj) } == tp
}

fn is_default_token(handle: u64) -> bool {
    handle <= 2
}

/// Everything a new Stream object holds.
pub struct Parts<'py> {
    pub handle: u64,
    pub flags: u32,
    pub device: i32,
    pub priority: i32,
    pub owner: Option<Bound<'py, PyAny>>,
    /// A C owner's release, with its context pointer (custream.h's contract).
    pub deleter: custream_deleter_t,
    pub deleter_ctx: *mut c_void,
    pub home: Option<(Context, u64)>,
    /// The (0, handle) tuple, when the caller already has one (e.g. from a producer).
    pub protocol: Option<Bound<'py, PyTuple>>,
}

impl<'py> Parts<'py> {
    /// A borrowed stream over `handle` (no driver call). A device cannot be pinned on a
    /// default-stream token, which always means the current context's default stream.
    pub fn borrowed(handle: u64, device: Option<i32>, owner: Option<Bound<'py, PyAny>>) -> PyResult<Self> {
        let default = is_default_token(handle);
        if device.is_some() && default {
            return Err(PyValueError::new_err(format!(
                "from_handle() device cannot be given for the default-stream token {handle:#x}: \
                 it always means the default stream of the current context"
            )));
        }
        Ok(Parts {
            handle,
            flags: if default { CUSTREAM_FLAG_DEFAULT } else { 0 },
            device: if default {
                CUSTREAM_DEVICE_UNKNOWN
            } else {
                device.unwrap_or(CUSTREAM_DEVICE_UNKNOWN)
            },
            priority: 0,
            owner,
            deleter: None,
            deleter_ctx: null_mut(),
            home: None,
            protocol: None,
        })
    }
}

/// Make a Stream object from its parts. On failure nothing the parts hold is released:
/// that stays with the caller.
pub fn make<'py>(py: Python<'py>, parts: Parts<'py>) -> PyResult<Bound<'py, PyAny>> {
    let protocol = match parts.protocol {
        Some(t) => t,
        None => PyTuple::new(
            py,
            [PyInt::new(py, 0u8).into_any(), PyInt::new(py, parts.handle).into_any()],
        )?,
    };
    let tp = stream_type();
    if tp.is_null() {
        return Err(PyValueError::new_err("custream is not initialized"));
    }
    // SAFETY: tp is our type; PyType_GenericAlloc zeroes the struct and tracks it for the GC.
    let obj = unsafe { ffi::PyType_GenericAlloc(tp, 0) };
    // SAFETY: a new reference, or null with an exception set.
    let obj = unsafe { Bound::from_owned_ptr_or_err(py, obj) }?;
    let (context, context_id) = parts.home.map_or((null_mut(), 0), |(c, id)| (c.as_raw(), id));
    let s = obj.as_ptr().cast::<CustreamStream>();
    // SAFETY: a fresh, zeroed object of our type that nobody else has seen yet.
    unsafe {
        (*s).handle = parts.handle as usize as _;
        (*s).protocol = protocol.into_ptr();
        (*s).flags = parts.flags;
        (*s).device = parts.device;
        (*s).priority = parts.priority;
        (*s).fork_generation = process::fork_generation();
        (*s).owner = parts.owner.map_or(null_mut(), Bound::into_ptr);
        (*s).deleter = parts.deleter;
        (*s).deleter_ctx = parts.deleter_ctx;
        (*s).context = context;
        (*s).context_id = context_id;
    }
    // The module's three default streams live as long as the module: not counted, so a
    // leak test can expect 0.
    if parts.flags & CUSTREAM_FLAG_SHARED == 0 {
        count_live(1);
    }
    Ok(obj)
}

/// A new owned stream in `device`'s primary context (default: the current context's
/// device, else 0). The thread's current context is the same before and after.
/// `pooled`: made for a StreamPool, which alone may close it.
pub fn create(
    py: Python<'_>,
    device: Option<i32>,
    non_blocking: bool,
    priority: i32,
    pooled: bool,
) -> PyResult<Bound<'_, PyAny>> {
    let current = driver::current_context()?;
    let device = existing_device(device, current)?;
    let (home, handle) = Home::make(py, device, None, move |ctx| {
        driver::create_stream(ctx, current, non_blocking, priority)
    })?;
    let parts = Parts {
        handle: handle.as_u64(),
        flags: CUSTREAM_FLAG_OWNED
            | if non_blocking { CUSTREAM_FLAG_NON_BLOCKING } else { 0 }
            | if pooled { CUSTREAM_FLAG_POOLED } else { 0 },
        device,
        priority,
        owner: None,
        deleter: None,
        deleter_ctx: null_mut(),
        home: Some((home.context, home.context_id)),
        protocol: None,
    };
    match make(py, parts) {
        Ok(obj) => {
            owned_streams().insert(handle.as_u64(), (home.context, home.context_id));
            Ok(obj)
        }
        Err(e) => {
            let _ = home.release(py, move |_| driver::destroy_stream(handle));
            Err(e)
        }
    }
}

/// `device`, or else the device of `current` (the calling thread's current context), or else
/// 0; refused by name when the machine has no such device.
pub fn existing_device(device: Option<i32>, current: Option<Context>) -> PyResult<i32> {
    let device = match device {
        Some(d) => d,
        None => driver::current_device_of(current)?.unwrap_or(0),
    };
    let count = driver::device_count()?;
    if device >= count {
        return Err(PyValueError::new_err(format!(
            "device {device} does not exist: this machine has {count} CUDA device{}",
            if count == 1 { "" } else { "s" }
        )));
    }
    Ok(device)
}

/// The module's names for the default-stream tokens 0, 1 and 2.
const DEFAULT_NAMES: [&str; 3] = ["DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"];

static DEFAULTS: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();

/// `custream.DEFAULT_STREAM` (token 0), `LEGACY_DEFAULT_STREAM` (1) or
/// `PER_THREAD_DEFAULT_STREAM` (2): one Stream each for the process, shared by every
/// library, resolved against the calling thread's context at each use, never closed.
pub fn default_stream(py: Python<'_>, token: u64) -> PyResult<Bound<'_, PyAny>> {
    let all = DEFAULTS.get_or_try_init(py, || -> PyResult<[Py<PyAny>; 3]> {
        let make_one = |token: u64| {
            let mut parts = Parts::borrowed(token, None, None)?;
            parts.flags |= CUSTREAM_FLAG_SHARED;
            make(py, parts).map(Bound::unbind)
        };
        Ok([make_one(0)?, make_one(1)?, make_one(2)?])
    })?;
    let index = usize::try_from(token)
        .ok()
        .filter(|&i| i < all.len())
        .ok_or_else(|| PyValueError::new_err(format!("{token:#x} is not a default-stream token (0, 1 or 2)")))?;
    Ok(all[index].bind(py).clone())
}

/// A Stream object, valid while the object is alive: the one view of its fields.
#[derive(Clone, Copy)]
pub struct StreamRef(NonNull<CustreamStream>);

impl StreamRef {
    /// # Safety
    /// `obj` must be a live custream.Stream, alive for as long as the result is used.
    pub unsafe fn of(obj: *mut ffi::PyObject) -> Self {
        // SAFETY: a live object is not null.
        StreamRef(unsafe { NonNull::new_unchecked(obj.cast()) })
    }

    fn raw(self) -> *mut CustreamStream {
        self.0.as_ptr()
    }

    /// The handle as an int (0, 1 and 2 are the default-stream tokens).
    pub fn handle_value(self) -> u64 {
        // SAFETY: a live object; the field is fixed when the object is made.
        unsafe { (*self.raw()).handle as usize as u64 }
    }

    fn handle(self) -> StreamHandle {
        // SAFETY: we made the stream (owned), its owner vouches for it and we hold the owner
        // (borrowed: the protocol's contract), or it is a default-stream token.
        unsafe { StreamHandle::from_raw(self.handle_value()) }
    }

    fn flags(self) -> u32 {
        // SAFETY: a live object; the field is fixed when the object is made.
        unsafe { (*self.raw()).flags }
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

    pub fn has_deleter(self) -> bool {
        // SAFETY: a live object; read under the GIL, which `release` holds when it clears it.
        unsafe { (*self.raw()).deleter.is_some() }
    }

    fn device_cell(self) -> &'static AtomicI32 {
        // SAFETY: a live object whose `device` field is only accessed atomically.
        unsafe { AtomicI32::from_ptr(&raw mut (*self.raw()).device) }
    }

    /// The device if known without a driver call.
    pub fn known_device(self) -> Option<i32> {
        match self.device_cell().load(Ordering::Acquire) {
            CUSTREAM_DEVICE_UNKNOWN => None,
            d => Some(d),
        }
    }

    fn owner_cell(self) -> &'static AtomicPtr<ffi::PyObject> {
        // SAFETY: a live object whose `owner` field is only accessed atomically.
        unsafe { AtomicPtr::from_ptr(&raw mut (*self.raw()).owner) }
    }

    pub fn owner<'py>(self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let p = self.owner_cell().load(Ordering::Acquire);
        // SAFETY: the owner is only cleared under the GIL, which the caller holds.
        (!p.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, p) })
    }

    /// The (0, handle) tuple `__cuda_stream__()` returns; its item 1 is `handle`'s int.
    pub fn protocol<'a, 'py>(self, py: Python<'py>) -> Borrowed<'a, 'py, PyTuple> {
        // SAFETY: a live object holds its tuple until it is freed.
        unsafe { Borrowed::from_ptr(py, (*self.raw()).protocol).cast_unchecked() }
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

    /// `use_handle` for a caller that has just checked that `home`'s context is the one it
    /// was (a Graph launched on the stream): a stream known to live in it needs no second
    /// check, which would cost another driver call per launch.
    pub fn use_handle_in<R>(
        self,
        py: Python<'_>,
        what: &str,
        home: &Home,
        f: impl FnOnce(StreamHandle) -> driver::Result<R>,
    ) -> PyResult<R> {
        let _in_use = lifecycle::enter(&self, py, what)?;
        // SAFETY: a live object; `context` and `context_id` change only under the GIL.
        let known = unsafe { (Context::from_raw((*self.raw()).context), (*self.raw()).context_id) };
        if !self.is_default() && known == (Some(home.context), home.context_id) {
            return Ok(f(self.handle())?);
        }
        Ok(self.call_on_handle(f)?)
    }

    /// `use_handle` for a call that holds the GIL from start to end (no `detach` in `f`):
    /// no close can begin meanwhile, since close() marks the stream closed under the GIL
    /// before it releases anything, so a load of the state word does what the two
    /// read-modify-writes of `use_handle` do. For the cheapest calls (query), where those
    /// cost a tenth of the driver's own time.
    pub fn use_handle_attached<R>(self, what: &str, f: impl FnOnce(StreamHandle) -> driver::Result<R>) -> PyResult<R> {
        lifecycle::ensure_usable(&self, what)?;
        Ok(self.call_on_handle(f)?)
    }

    /// The driver call of `use_handle` and `use_handle_attached`, once the stream is known open.
    /// A default-stream token on a thread with no current context follows the CUDA
    /// runtime's rule (device 0's primary context), which stays current only for the call.
    fn call_on_handle<R>(self, f: impl FnOnce(StreamHandle) -> driver::Result<R>) -> driver::Result<R> {
        let h = self.handle();
        if self.is_default() {
            return match driver::current_context()? {
                Some(_) => f(h),
                None => driver::in_primary_context(0, || f(h)),
            };
        }
        self.check_context(h).and_then(|()| f(h))
    }

    /// Learn a borrowed stream's context on first use (the stream is alive then: its owner
    /// is), and on every use make sure the context was not reset since: a driver call on a
    /// stream of a reset context can crash the process instead of failing. Called with the
    /// GIL held, which orders the first-use writes.
    fn check_context(self, h: StreamHandle) -> driver::Result<()> {
        let s = self.raw();
        // SAFETY: a live object; `context` and `context_id` change only under the GIL.
        let (known, id) = unsafe { (Context::from_raw((*s).context), (*s).context_id) };
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
        // SAFETY: as above; the GIL is held.
        unsafe {
            (*s).context_id = id;
            (*s).context = ctx.as_raw();
        }
        driver::ensure_same_context(ctx, id)
    }

    /// Wait for the stream's work. An idle stream answers without releasing the GIL, which
    /// costs more than the driver's query; a busy one pays that one query extra.
    pub fn synchronize(self, py: Python<'_>) -> PyResult<()> {
        if graph::checks_needed() {
            return graph::checked(self, py, "synchronize()", |h| wait_on(py, h));
        }
        self.use_handle(py, "synchronize()", |h| wait_on(py, h))
    }

    /// True when all work on the stream is done.
    pub fn query(self, py: Python<'_>) -> PyResult<bool> {
        if gil::python_awaited() {
            // Held open by use_handle's marks, since a close may begin while the GIL is let
            // go (gil::brief says why it is).
            let query = move |h| gil::detach(py, move || driver::stream_query(h));
            if graph::checks_needed() {
                return graph::checked(self, py, "query()", query);
            }
            return self.use_handle(py, "query()", query);
        }
        if graph::checks_needed() {
            return graph::checked_attached(self, "query()", driver::stream_query);
        }
        self.use_handle_attached("query()", driver::stream_query)
    }

    /// The device, resolving it through the driver for borrowed streams. Default-stream
    /// tokens are resolved against the current context every time; others are cached.
    pub fn device(self, py: Python<'_>) -> PyResult<i32> {
        if let Some(d) = self.known_device() {
            return Ok(d);
        }
        let d = self.use_handle(py, "device", driver::stream_device)?;
        if !self.is_default() {
            let _ =
                self.device_cell()
                    .compare_exchange(CUSTREAM_DEVICE_UNKNOWN, d, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(d)
    }

    /// The context the stream's work runs in (checked, or learnt, as every use does).
    pub fn context(self, py: Python<'_>) -> PyResult<Context> {
        if self.is_default() {
            return self.use_handle(py, "context", driver::stream_context);
        }
        self.use_handle(py, "context", |_| Ok(()))?;
        // SAFETY: a live object; the use above learnt the context, under the GIL.
        let ctx = unsafe { Context::from_raw((*self.raw()).context) };
        ctx.ok_or_else(|| closed_error("context"))
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
            // SAFETY: a live object; the field is fixed when the object is made.
            Ok(unsafe { (*self.raw()).priority })
        } else {
            self.use_handle(py, "priority", driver::stream_priority)
        }
    }

    /// Make later work on this stream wait for `event`.
    pub fn wait_event(self, py: Python<'_>, event: &Event) -> PyResult<()> {
        event.use_event(py, "wait()", |ev| {
            self.use_handle(py, "wait()", |h| {
                gil::brief(py, move || driver::stream_wait_event(h, ev))
            })
        })?;
        event.waited_on_by(self.handle_value());
        Ok(())
    }

    /// Make later work on this stream wait for the work queued so far on `upstream`.
    pub fn wait_stream(self, py: Python<'_>, upstream: StreamRef) -> PyResult<()> {
        lifecycle::ensure_usable(&self, "wait()")?;
        if upstream.is_closed() {
            return Err(PyValueError::new_err("wait() was given a closed custream.Stream"));
        }
        if upstream.handle_value() == self.handle_value() && !self.is_default() {
            return Ok(()); // a stream's work is already in its own order
        }
        let event = Event::for_stream(py, upstream)?;
        let waited = event
            .record_on(py, upstream, "wait()")
            .and_then(|()| self.wait_event(py, &event));
        let closed = event.close(py);
        waited.and(closed)
    }

    /// Record `event` on this stream, or a new event in the stream's context if None.
    pub fn record<'py>(self, py: Python<'py>, event: Option<Bound<'py, Event>>) -> PyResult<Bound<'py, Event>> {
        let event = match event {
            Some(e) => e,
            None => {
                lifecycle::ensure_usable(&self, "record()")?;
                Bound::new(py, Event::for_stream(py, self)?)?
            }
        };
        event.get().record_on(py, self, "record()")?;
        Ok(event)
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

    /// A new reference to the Stream object.
    pub fn object(self, py: Python<'_>) -> Bound<'_, PyAny> {
        // SAFETY: a live object.
        unsafe { Bound::from_borrowed_ptr(py, self.raw().cast()) }
    }

    /// Release everything once, without raising: for tp_clear.
    pub fn close_quietly(self, py: Python<'_>) {
        lifecycle::close_quietly(&self, py);
    }
}

impl Managed for StreamRef {
    const KIND: &'static str = "custream.Stream";

    fn state(&self) -> &AtomicU32 {
        // SAFETY: a live object whose `state` field is only accessed atomically (custream.h).
        unsafe { AtomicU32::from_ptr(&raw mut (*self.raw()).state) }
    }

    fn fork_generation(&self) -> u32 {
        // SAFETY: a live object; the field is fixed when the object is made.
        unsafe { (*self.raw()).fork_generation }
    }

    /// Destroy what we own, call the C deleter, drop the owner. A borrowed stream without a
    /// deleter (the common wrap) calls nothing.
    fn release(&self, py: Python<'_>) -> driver::Result<()> {
        let s = self.raw();
        // SAFETY: release runs once per object (lifecycle.rs), with the GIL held; these
        // fields are not read again after it.
        let (context, context_id, deleter, deleter_ctx) = unsafe {
            (
                std::mem::replace(&mut (*s).context, null_mut()),
                (*s).context_id,
                (*s).deleter.take(),
                std::mem::replace(&mut (*s).deleter_ctx, null_mut()),
            )
        };
        // No swap needed: release runs once; readers only load.
        let owner = self.owner_cell().load(Ordering::Acquire);
        self.owner_cell().store(null_mut(), Ordering::Release);
        let may_call = || lifecycle::may_release(self.fork_generation());

        let mut result = Ok(());
        if self.is_owned() {
            owned_streams().remove(&self.handle_value());
            // SAFETY: the context the stream was created in, retained since.
            let context = unsafe { Context::from_raw(context) };
            if let Some(context) = context.filter(|_| may_call()) {
                let home = Home {
                    context,
                    context_id,
                    device: self.device_cell().load(Ordering::Acquire),
                    retains_primary: true,
                };
                let h = self.handle();
                result = home.release(py, move |_| {
                    graph::stream_destroyed(h);
                    driver::destroy_stream(h)
                });
            }
        }
        if let Some(deleter) = deleter.filter(|_| may_call()) {
            // SAFETY: the deleter's contract (custream.h): called once, with the GIL held.
            unsafe { deleter(deleter_ctx, (*s).handle) };
        }
        if !owner.is_null() {
            // SAFETY: we held this reference since the object was made.
            unsafe { owner::release(py, owner) };
        }
        result
    }
}

/// The error of a use of a closed Stream, naming the use.
pub fn closed_error(what: &str) -> PyErr {
    lifecycle::closed_error(StreamRef::KIND, what)
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

/// tp_dealloc: release what the stream holds, then free it.
///
/// # Safety
/// `obj` is a Stream whose last reference is gone; the GIL is held.
pub unsafe fn dealloc(obj: *mut ffi::PyObject) {
    let shared;
    // SAFETY: the caller's contract; every step below is CPython's own teardown order.
    unsafe {
        ffi::PyObject_GC_UnTrack(obj.cast());
        let s = StreamRef::of(obj);
        shared = s.is_shared();
        if !(*s.raw()).weakreflist.is_null() {
            ffi::PyObject_ClearWeakRefs(obj);
        }
        let py = Python::assume_attached();
        no_unwind(|| lifecycle::release_at_dealloc(&s, py));
        let protocol = std::mem::replace(&mut (*s.raw()).protocol, null_mut());
        if !protocol.is_null() {
            ffi::Py_DECREF(protocol);
        }
        let tp = ffi::Py_TYPE(obj);
        ffi::PyObject_GC_Del(obj.cast());
        ffi::Py_DECREF(tp.cast());
    }
    if !shared {
        count_live(-1);
    }
}

/// tp_traverse: the references a Stream holds.
///
/// # Safety
/// `obj` is a live Stream; `visit` and `arg` are what CPython passed.
pub unsafe fn traverse(obj: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
    let s = obj.cast::<CustreamStream>();
    // SAFETY: the caller's contract.
    for p in unsafe { [(*s).owner, (*s).protocol, ffi::Py_TYPE(obj).cast()] } {
        if !p.is_null() {
            // SAFETY: a live reference, visited as CPython's GC asks.
            let r = unsafe { visit(p, arg) };
            if r != 0 {
                return r;
            }
        }
    }
    0
}
