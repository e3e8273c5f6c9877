//! The Stream object itself: its memory is `CustreamStream` from pxd/custream.h (through
//! src/layout.rs), so Cython and C read the same fields Rust writes. This file makes,
//! uses and releases such objects; src/stream_type.rs gives them their Python face.

use std::os::raw::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicPtr, AtomicU32, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

use crate::driver::{self, CUcontext, CUstream, DriverError};
use crate::errors::{closed_error, IntoPyResult};
use crate::layout::{
    custream_deleter_t, CustreamStream, CUSTREAM_DEVICE_UNKNOWN, CUSTREAM_STATE_CLOSED, CUSTREAM_STATE_RELEASED, CUSTREAM_FLAG_DEFAULT, CUSTREAM_FLAG_NON_BLOCKING,
    CUSTREAM_FLAG_OWNED,
};
use crate::lifecycle::{Lifecycle, Release};

/// The Stream type object, made once when the module is initialized.
pub static STREAM_TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(null_mut());

/// The owned streams alive in this process: handle -> (context, context id). A borrowed
/// stream over one of them learns its context here, without asking the driver about a
/// handle that a context reset may already have destroyed.
static OWNED: std::sync::Mutex<std::collections::BTreeMap<u64, (usize, u64)>> = std::sync::Mutex::new(std::collections::BTreeMap::new());

fn owned_streams() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<u64, (usize, u64)>> {
    OWNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Objects are made and freed with the GIL held, which orders the updates: a load and a
/// store, not a locked read-modify-write, on this per-object path.
pub fn count_live(delta: isize) {
    LIVE.store(LIVE.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
}

/// Live Stream objects in this process (allocated and not yet deallocated).
pub static LIVE: AtomicIsize = AtomicIsize::new(0);

pub fn stream_type() -> *mut ffi::PyTypeObject {
    STREAM_TYPE.load(Ordering::Acquire)
}

/// Whether `obj` is a custream.Stream (the type is final, so this is an identity test).
///
/// # Safety
/// `obj` must be a live object.
pub unsafe fn is_stream(obj: *mut ffi::PyObject) -> bool {
    let tp = stream_type();
    !tp.is_null() && ffi::Py_TYPE(obj) == tp
}

pub fn is_default_token(handle: u64) -> bool {
    handle <= 2
}

/// Everything a new Stream object holds.
pub struct Parts<'py> {
    pub handle: u64,
    pub flags: u32,
    pub device: i32,
    pub priority: i32,
    pub owner: Option<Bound<'py, PyAny>>,
    pub deleter: custream_deleter_t,
    pub deleter_ctx: *mut c_void,
    pub context: CUcontext,
    /// cuCtxGetId of `context` (0 with no context).
    pub context_id: u64,
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
            device: if default { CUSTREAM_DEVICE_UNKNOWN } else { device.unwrap_or(CUSTREAM_DEVICE_UNKNOWN) },
            priority: 0,
            owner,
            deleter: None,
            deleter_ctx: null_mut(),
            context: null_mut(),
            context_id: 0,
            protocol: None,
        })
    }
}

/// A Stream object as a raw pointer to its struct, valid while the object is alive.
#[derive(Clone, Copy)]
pub struct StreamRef(pub *mut CustreamStream);

impl StreamRef {
    /// # Safety
    /// `obj` must be a live custream.Stream.
    pub unsafe fn of(obj: *mut ffi::PyObject) -> Self {
        StreamRef(obj.cast())
    }

    fn lifecycle(self) -> Lifecycle<'static> {
        // SAFETY: the object outlives every use the methods make of it.
        unsafe { Lifecycle::from_ptr(&raw mut (*self.0).state) }
    }

    pub fn handle(self) -> u64 {
        unsafe { (*self.0).handle as u64 }
    }

    pub fn flags(self) -> u32 {
        unsafe { (*self.0).flags }
    }

    pub fn is_owned(self) -> bool {
        self.flags() & CUSTREAM_FLAG_OWNED != 0
    }

    pub fn is_default(self) -> bool {
        self.flags() & CUSTREAM_FLAG_DEFAULT != 0
    }

    pub fn is_non_blocking_flag(self) -> bool {
        self.flags() & CUSTREAM_FLAG_NON_BLOCKING != 0
    }

    pub fn priority_field(self) -> i32 {
        unsafe { (*self.0).priority }
    }

    pub fn is_closed(self) -> bool {
        self.lifecycle().is_closed()
    }

    fn device_cell(self) -> &'static AtomicI32 {
        unsafe { AtomicI32::from_ptr(&raw mut (*self.0).device) }
    }

    /// The device if known without a driver call.
    pub fn known_device(self) -> Option<i32> {
        match self.device_cell().load(Ordering::Acquire) {
            CUSTREAM_DEVICE_UNKNOWN => None,
            d => Some(d),
        }
    }

    fn owner_cell(self) -> &'static AtomicPtr<ffi::PyObject> {
        unsafe { AtomicPtr::from_ptr(&raw mut (*self.0).owner) }
    }

    pub fn owner<'py>(self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let p = self.owner_cell().load(Ordering::Acquire);
        // SAFETY: the owner is only cleared under the GIL, which the caller holds.
        (!p.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, p) })
    }

    /// The cached (0, handle) tuple, a new reference.
    pub fn protocol<'py>(self, py: Python<'py>) -> Bound<'py, PyTuple> {
        unsafe { Bound::from_borrowed_ptr(py, (*self.0).protocol).cast_into_unchecked() }
    }

    fn check_process(self) -> Result<(), DriverError> {
        if unsafe { (*self.0).fork_generation } != driver::fork_generation() {
            Err(DriverError::Forked)
        } else {
            Ok(())
        }
    }

    /// Fails with the closed-stream error naming `what`.
    pub fn ensure_open(self, what: &str) -> PyResult<()> {
        if self.is_closed() {
            Err(closed_error(what))
        } else {
            Ok(())
        }
    }

    /// Run a driver call on the handle, holding the stream open for its duration: a close()
    /// meanwhile takes effect when the call returns. `what` names the operation in errors.
    pub fn use_handle<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(CUstream) -> Result<R, DriverError>,
    ) -> PyResult<R> {
        self.check_process().py(py)?;
        self.lifecycle().enter().map_err(|_| closed_error(what))?;
        let result = self.call_on_handle(f);
        if self.lifecycle().leave() == Release::Now {
            // The close() that raced this call left the release to us; its errors have no
            // caller to go to.
            let _ = self.release(py);
        }
        result.py(py)
    }

    /// `use_handle` for a call that holds the GIL from start to end (no `detach` in `f`):
    /// no close can begin meanwhile, since close() marks the stream closed under the GIL
    /// before it releases anything, so a load of the state word does what the two
    /// read-modify-writes of `use_handle` do. For the cheapest calls (query), where those
    /// cost a tenth of the driver's own time.
    pub fn use_handle_attached<R>(
        self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(CUstream) -> Result<R, DriverError>,
    ) -> PyResult<R> {
        self.check_process().py(py)?;
        self.ensure_open(what)?;
        self.call_on_handle(f).py(py)
    }

    /// The driver call of `use_handle` and `use_handle_attached`, once the stream is known open.
    fn call_on_handle<R>(self, f: impl FnOnce(CUstream) -> Result<R, DriverError>) -> Result<R, DriverError> {
        let h = self.handle() as usize as CUstream;
        self.check_context(h).and_then(|_| f(h)).map_err(|e| self.explain(e))
    }

    /// Learn a borrowed stream's context on first use (the stream is alive then: its owner
    /// is), and on every use make sure the context was not reset since: a driver call on a
    /// stream of a reset context can crash the process instead of failing. Called with the
    /// GIL held, which orders the first-use writes.
    fn check_context(self, h: CUstream) -> Result<(), DriverError> {
        if self.is_default() {
            return Ok(()); // the current context's default stream: nothing to outlive
        }
        let s = self.0;
        let ctx = unsafe { (*s).context };
        if ctx.is_null() {
            let known = owned_streams().get(&self.handle()).copied();
            let (ctx, id) = match known {
                Some((ctx, id)) => (ctx as CUcontext, id),
                None => {
                    let ctx = driver::stream_context(h)?;
                    (ctx, driver::context_id(ctx)?)
                }
            };
            unsafe {
                (*s).context_id = id;
                (*s).context = ctx.cast();
            }
            return driver::ensure_same_context(ctx, id);
        }
        driver::ensure_same_context(ctx.cast(), unsafe { (*s).context_id })
    }

    /// The driver's "invalid device context" says little when a default-stream token is used
    /// on a thread with no current context; say what the token means and what to do.
    fn explain(self, err: DriverError) -> DriverError {
        match err {
            DriverError::Cuda { code: 201, name, .. }
                if self.is_default() && matches!(driver::current_context(), Ok(c) if c.is_null()) =>
            {
                DriverError::Cuda {
                    code: 201,
                    name,
                    message: format!(
                        "the default-stream token {:#x} means the default stream of the calling \
                         thread's current CUDA context, and this thread has none; make a context \
                         current first (e.g. cuda.core Device(0).set_current(), \
                         cupy.cuda.Device(0).use() or torch.cuda.set_device(0))",
                        self.handle()
                    ),
                }
            }
            other => other,
        }
    }

    /// Wait for the stream's work. An idle stream answers without releasing the GIL, which
    /// costs more than the driver's query; a busy one pays that one query extra.
    pub fn synchronize(self, py: Python<'_>) -> PyResult<()> {
        self.use_handle(py, "synchronize()", |h| {
            if driver::stream_query(h)? {
                return Ok(());
            }
            let h = h as usize;
            py.detach(move || driver::stream_synchronize(h as CUstream))
        })
    }

    /// The device, resolving it through the driver for borrowed streams. Default-stream
    /// tokens are resolved against the current context every time; others are cached.
    pub fn device(self, py: Python<'_>) -> PyResult<i32> {
        if let Some(d) = self.known_device() {
            return Ok(d);
        }
        let d = self.use_handle(py, "device", driver::stream_device)?;
        if !self.is_default() {
            let _ = self.device_cell().compare_exchange(CUSTREAM_DEVICE_UNKNOWN, d, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(d)
    }

    /// The context the stream's work runs in (checked, or learnt, as every use does).
    pub fn context(self, py: Python<'_>) -> PyResult<CUcontext> {
        if self.is_default() {
            return self.use_handle(py, "context", driver::stream_context);
        }
        self.use_handle(py, "context", |_| Ok(()))?;
        Ok(unsafe { (*self.0).context }.cast())
    }

    /// close(): idempotent; the first call releases (now, or when calls in flight end).
    pub fn close(self, py: Python<'_>) -> PyResult<()> {
        match self.lifecycle().close() {
            Release::Now => self.release(py).py(py),
            Release::NotYours => Ok(()),
        }
    }

    /// Destroy what we own, call the C deleter, drop the owner. Runs once per object, with
    /// the GIL held. In a forked child or during finalization the driver and the deleter are
    /// left alone: the handle belongs to a dead parent or to the process's exit.
    fn release(self, py: Python<'_>) -> Result<(), DriverError> {
        let s = self.0;
        let (handle, device) = (self.handle() as usize as CUstream, unsafe { (*s).device });
        let context = std::mem::replace(unsafe { &mut (*s).context }, null_mut());
        let deleter = unsafe { (*s).deleter.take() };
        let deleter_ctx = std::mem::replace(unsafe { &mut (*s).deleter_ctx }, null_mut());
        // No swap needed: release runs once (lifecycle.rs); readers only load.
        let owner = self.owner_cell().load(Ordering::Acquire);
        self.owner_cell().store(null_mut(), Ordering::Release);
        // A borrowed stream without a deleter (the common wrap) calls nothing: skip the checks.
        let may_call = || self.check_process().is_ok() && !driver::is_finalizing();

        let mut result = Ok(());
        if self.is_owned() {
            owned_streams().remove(&self.handle());
        }
        if self.is_owned() && !context.is_null() && may_call() {
            let (context, id, handle) = (context as usize, unsafe { (*s).context_id }, handle as usize);
            // Without the GIL, as in `create`; nothing below touches a Python object.
            result = py.detach(move || {
                // After a reset the stream is gone with its context, and so is our retain on
                // it: destroying or releasing would hit the new context.
                driver::ensure_same_context(context as CUcontext, id)?;
                let destroyed = driver::destroy_stream(handle as CUstream);
                destroyed.and(driver::release_primary_context(device))
            });
        }
        if let Some(deleter) = deleter.filter(|_| may_call()) {
            // SAFETY: the deleter's contract (custream.h): called once, GIL held.
            unsafe { deleter(deleter_ctx, handle.cast()) };
        }
        if !owner.is_null() {
            // SAFETY: we held this reference since the object was made.
            unsafe { release_owner(py, owner) };
        }
        result
    }

    /// Release everything once, without raising: for tp_clear.
    pub fn close_quietly(self, py: Python<'_>) {
        if self.lifecycle().close() == Release::Now {
            let _ = self.release(py);
        }
    }

    /// The release at deallocation. Nothing else can reach the object now (no reference,
    /// so no call in flight), so the state word needs no read-modify-write: those cost
    /// more than the rest of a borrowed stream's teardown.
    pub fn release_at_dealloc(self, py: Python<'_>) {
        let state = unsafe { AtomicU32::from_ptr(&raw mut (*self.0).state) };
        if state.load(Ordering::Acquire) & CUSTREAM_STATE_RELEASED == 0 {
            state.store(CUSTREAM_STATE_CLOSED | CUSTREAM_STATE_RELEASED, Ordering::Release);
            let _ = self.release(py);
        }
    }
}

/// How many owner releases may nest on one thread before further ones are queued.
const OWNER_NESTING_LIMIT: u32 = 50;

thread_local! {
    static OWNER_NESTING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static OWNERS_QUEUED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Give back a stream's reference to its owner. Dropping an owner can deallocate it, and an
/// owner may be another Stream with an owner of its own: a chain of 100k streams would
/// recurse 100k deep and overflow the C stack. CPython's trashcan, which bounds this for its
/// own types, is not in the limited API, so the same is done here: past a nesting depth
/// the release is queued, and the outermost release on the thread drains the queue.
///
/// # Safety
/// `owner` is a strong reference the caller gives up; the GIL is held.
unsafe fn release_owner(py: Python<'_>, owner: *mut ffi::PyObject) {
    let depth = OWNER_NESTING.with(|d| d.get());
    if depth >= OWNER_NESTING_LIMIT {
        OWNERS_QUEUED.with(|q| q.borrow_mut().push(owner as usize));
        return;
    }
    OWNER_NESTING.with(|d| d.set(depth + 1));
    drop(Bound::from_owned_ptr(py, owner));
    if depth == 0 {
        // No borrow is held across the drop: it may queue more.
        while let Some(next) = OWNERS_QUEUED.with(|q| q.borrow_mut().pop()) {
            drop(Bound::from_owned_ptr(py, next as *mut ffi::PyObject));
        }
    }
    OWNER_NESTING.with(|d| d.set(depth));
}

/// Make a Stream object from its parts. On failure nothing the parts hold is released:
/// that stays with the caller.
pub fn make<'py>(py: Python<'py>, parts: Parts<'py>) -> PyResult<Bound<'py, PyAny>> {
    let protocol = match parts.protocol {
        Some(t) => t,
        None => PyTuple::new(py, [PyInt::new(py, 0u8).into_any(), PyInt::new(py, parts.handle).into_any()])?,
    };
    let tp = stream_type();
    if tp.is_null() {
        return Err(PyValueError::new_err("custream is not initialized"));
    }
    // SAFETY: tp is our type; PyType_GenericAlloc zeroes the struct and tracks it for the GC.
    let obj = unsafe { ffi::PyType_GenericAlloc(tp, 0) };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    let s = obj.cast::<CustreamStream>();
    unsafe {
        (*s).handle = parts.handle as usize as _;
        (*s).protocol = protocol.into_ptr();
        (*s).flags = parts.flags;
        (*s).state = 0;
        (*s).device = parts.device;
        (*s).priority = parts.priority;
        (*s).fork_generation = driver::fork_generation();
        (*s).owner = parts.owner.map_or(null_mut(), Bound::into_ptr);
        (*s).deleter = parts.deleter;
        (*s).deleter_ctx = parts.deleter_ctx;
        (*s).context = parts.context.cast();
        (*s).weakreflist = null_mut();
        (*s).context_id = parts.context_id;
    }
    count_live(1);
    Ok(unsafe { Bound::from_owned_ptr(py, obj) })
}

/// A new owned stream in `device`'s primary context (default: the current context's
/// device, else 0). The thread's current context is the same before and after.
pub fn create<'py>(py: Python<'py>, device: Option<i32>, non_blocking: bool, priority: i32) -> PyResult<Bound<'py, PyAny>> {
    let current = driver::current_context().py(py)?;
    let device = match device {
        Some(d) => d,
        None => driver::current_device_of(current).py(py)?.unwrap_or(0),
    };
    let count = driver::device_count().py(py)?;
    if device >= count {
        return Err(PyValueError::new_err(format!(
            "device {device} does not exist: this machine has {count} CUDA device{}",
            if count == 1 { "" } else { "s" }
        )));
    }
    // Without the GIL: a first retain creates the context (~100 ms), and a driver call
    // that waits on a driver lock must not hold the GIL, which that lock's holder may need
    // (a host callback, another library's nogil call): under compute-sanitizer that wait
    // hung a threaded workload. Pointers cross as usize, which is Send.
    let current = current as usize;
    let created = py.detach(move || -> Result<(usize, u64, usize), DriverError> {
        let context = driver::retain_primary_context(device)?;
        let made = driver::context_id(context)
            .and_then(|id| Ok((id, driver::create_stream(context, current as CUcontext, non_blocking, priority)?)));
        if made.is_err() {
            let _ = driver::release_primary_context(device);
        }
        made.map(|(id, handle)| (context as usize, id, handle as usize))
    });
    let (context, context_id, handle) = created.py(py)?;
    let (context, handle) = (context as CUcontext, handle as CUstream);
    let parts = Parts {
        handle: handle as usize as u64,
        flags: CUSTREAM_FLAG_OWNED | if non_blocking { CUSTREAM_FLAG_NON_BLOCKING } else { 0 },
        device,
        priority,
        owner: None,
        deleter: None,
        deleter_ctx: null_mut(),
        context,
        context_id,
        protocol: None,
    };
    let made = make(py, parts);
    if made.is_ok() {
        owned_streams().insert(handle as usize as u64, (context as usize, context_id));
    }
    made.inspect_err(|_| {
        let _ = driver::destroy_stream(handle);
        let _ = driver::release_primary_context(device);
    })
}
