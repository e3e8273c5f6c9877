//! What a custream.GreenContext is: a slice of one device's SMs (a CUDA green context, driver
//! 12.4 and newer) that streams are made in, so the work of those streams runs on those SMs
//! only. Made by custream (the driver's SM split, then cuGreenCtxCreate) or adopted from
//! another library with an owner kept alive, under the lifecycle of the other objects
//! (src/object/lifecycle.rs). Its Python methods are the one `#[pymethods]` block of
//! src/green/methods.rs. The streams made in one are made here (`create_stream`, through
//! `object::make::own`); what a green stream then does is src/stream/methods.rs's. The
//! `green_context=` argument of Stream() and StreamPool() is here.
//!
//! A stream made in a green context holds it open for the stream's life (a use kept open,
//! `InUse::keep`), and holds the Python object as the stream's owner. So `close()` with such
//! streams still open ends the green context for new streams at once, and the driver's green
//! context is destroyed when the last of them is closed: the driver leaves a destroyed green
//! context's streams detached, failing every call but their destroy, which cuda.core's shared
//! handles avoid the same way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use pyo3::PyTraverseError;

use crate::cpython::gil;
use crate::cpython::stream_object::{
    CUSTREAM_FLAG_GREEN, CUSTREAM_FLAG_NON_BLOCKING, CUSTREAM_FLAG_OWNED, CUSTREAM_FLAG_POOLED,
};
use crate::driver::gate;
use crate::driver::{self, Context, GreenCtxHandle, GreenMade, OwnedGreenCtx, OwnedStream};
use crate::object::closable::Closable;
use crate::object::home_context::Home;
use crate::object::lifecycle::{self, InUse, Managed};
use crate::object::make::own;

/// A slice of a device's SMs (a CUDA green context, driver 12.4 and newer) to make streams
/// in: their work runs on those SMs only.
///
/// ``GreenContext(sm_count, *, device=None)`` asks the driver for at least ``sm_count`` SMs of
/// ``device`` (default: the current context's device, else 0); the driver rounds the count up
/// to its granularity (8 SMs on Hopper), and ``sm_count`` reports what it granted.
/// ``GreenContext.split(sm_count, *, device=None)`` returns two disjoint ones: that slice and
/// the rest of the device. ``GreenContext.from_handle(handle, *, owner=None)`` adopts another
/// library's. Streams: ``gc.create_stream(priority=0)``, ``Stream(green_context=gc)``,
/// ``StreamPool(n, green_context=gc)``. ``close()`` (idempotent; ``with`` closes too) refuses
/// new streams at once; the driver's green context goes when its last stream is closed.
#[pyclass(module = "custream", frozen, weakref)]
pub struct GreenContext {
    view: GreenCtxHandle,
    /// custream's own green context and where it was made, taken by the one release.
    owned: Mutex<Option<(OwnedGreenCtx, Home)>>,
    /// An adopted one's owner, dropped by the release.
    owner: Mutex<Option<Py<PyAny>>>,
    /// The context converted from it (what its streams report as theirs) and that one's id.
    context: Context,
    context_id: u64,
    device: i32,
    sm_count: u32,
    state: AtomicU32,
    /// Set by the one release: the driver may give the handle's address to another one then.
    released: AtomicBool,
    fork_generation: u32,
    /// The driver does not lock a green context against concurrent calls: custream's own
    /// calls on it take this.
    calls: Mutex<()>,
}

/// The error of a use of a closed GreenContext, naming the use.
pub fn closed_error(what: &str) -> PyErr {
    lifecycle::closed_error(<GreenContext as Managed>::KIND, what)
}

impl GreenContext {
    fn made(made: GreenMade, home: Home) -> GreenContext {
        GreenContext {
            view: made.owned.handle(),
            owned: Mutex::new(Some((made.owned, home))),
            owner: Mutex::new(None),
            context: made.context,
            context_id: made.context_id,
            device: home.device,
            sm_count: made.sm_count,
            state: AtomicU32::new(0),
            released: AtomicBool::new(false),
            fork_generation: gate::fork_generation(),
            calls: Mutex::new(()),
        }
    }

    /// Refuses an SM count the device cannot give (a count of 0 is the caller's to refuse).
    fn device_sms(device: i32, sm_count: u32, what: &str) -> PyResult<u32> {
        let total = driver::device_sm_count(device)?;
        if sm_count > total {
            return Err(PyValueError::new_err(format!(
                "{what} sm_count {sm_count} is more than device {device} has: {total} SMs"
            )));
        }
        Ok(total)
    }

    /// `GreenContext(sm_count, device=)`: at least `sm_count` SMs of `device`, as the driver
    /// rounds them; the whole device where the rounding would go past it.
    pub fn create(py: Python<'_>, device: i32, sm_count: u32) -> PyResult<GreenContext> {
        Self::device_sms(device, sm_count, "GreenContext()")?;
        let (home, made) = Home::make(py, device, None, move |_| {
            let all = driver::device_sm_resource(device)?;
            let slice = if sm_count >= all.sm_count {
                all
            } else {
                driver::sm_split(&all, sm_count)?.map_or(all, |(group, _)| group)
            };
            driver::green_create(device, &slice)
        })?;
        Ok(GreenContext::made(made, home))
    }

    /// `GreenContext.split(sm_count, device=)`: a slice of at least `sm_count` SMs and the
    /// rest of the device, disjoint (one split of the driver's).
    pub fn split_device(py: Python<'_>, device: i32, sm_count: u32) -> PyResult<(GreenContext, GreenContext)> {
        let what = "GreenContext.split()";
        let total = Self::device_sms(device, sm_count, what)?;
        let (home, made) = Home::make(py, device, None, move |_| {
            let all = driver::device_sm_resource(device)?;
            let Some((group, rest)) = driver::sm_split(&all, sm_count)?.filter(|(_, rest)| rest.sm_count > 0) else {
                return Ok(None);
            };
            let first = driver::green_create(device, &group)?;
            match driver::green_create(device, &rest) {
                Ok(second) => Ok(Some((first, second))),
                Err(e) => {
                    let _ = first.owned.destroy();
                    Err(e)
                }
            }
        })?;
        let Some((first, second)) = made else {
            let _ = home.release(py, |_| Ok(()));
            return Err(PyValueError::new_err(format!(
                "{what} sm_count {sm_count}, rounded up as the driver requires, leaves none of \
                 device {device}'s {total} SMs for the rest"
            )));
        };
        // Each green context holds its own retain of the primary context, as each stream does.
        match Home::make(py, device, None, |_| Ok(())) {
            Ok((second_home, ())) => Ok((GreenContext::made(first, home), GreenContext::made(second, second_home))),
            Err(e) => {
                let _ = home.release(py, move |_| {
                    let _ = second.owned.destroy();
                    first.owned.destroy()
                });
                Err(e)
            }
        }
    }

    /// `GreenContext.from_handle`: another library's green context, given as its
    /// `CUgreenCtx` or as the context converted from it (cuda.core's `Context.handle`), kept
    /// alive by `owner`. Asks the driver what it needs once, here.
    pub fn adopt(py: Python<'_>, raw: u64, is_context: bool, owner: Option<Py<PyAny>>) -> PyResult<GreenContext> {
        let found = gil::detach(py, move || -> driver::Result<Option<GreenCtxHandle>> {
            if is_context {
                // SAFETY: the caller vouches that `raw` is a context the driver handed out and
                // that `owner` keeps alive (the contract of from_handle); 0 gives None.
                match unsafe { Context::from_raw(raw as usize as *mut std::ffi::c_void) } {
                    Some(ctx) => driver::context_green_context(ctx),
                    None => Ok(None),
                }
            } else {
                // SAFETY: as above, for a green context.
                Ok(unsafe { GreenCtxHandle::from_raw(raw) })
            }
        })?;
        let view = found.ok_or_else(|| {
            PyValueError::new_err(if is_context {
                format!("GreenContext.from_handle() context {raw:#x} is not a green context's")
            } else {
                "GreenContext.from_handle() handle must be a CUgreenCtx, got 0 (NULL)".to_owned()
            })
        })?;
        Self::borrowed(py, view, owner)
    }

    /// A GreenContext over `view`, which `owner` keeps alive (or the driver object a stream is
    /// in, while that stream is held).
    pub fn borrowed(py: Python<'_>, view: GreenCtxHandle, owner: Option<Py<PyAny>>) -> PyResult<GreenContext> {
        let (sm_count, (context, context_id), device) = gil::detach(py, move || -> driver::Result<_> {
            let (context, id) = driver::green_context(view)?;
            Ok((
                driver::green_sm_count(view)?,
                (context, id),
                driver::context_device(context)?,
            ))
        })?;
        Ok(GreenContext {
            view,
            owned: Mutex::new(None),
            owner: Mutex::new(owner),
            context,
            context_id,
            device,
            sm_count,
            state: AtomicU32::new(0),
            released: AtomicBool::new(false),
            fork_generation: gate::fork_generation(),
            calls: Mutex::new(()),
        })
    }

    fn calls(&self) -> MutexGuard<'_, ()> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new stream in this green context, held open for the stream's life once the caller
    /// keeps the returned use (`InUse::keep`) and ends it with `stream_closed`.
    pub fn make_stream<'a>(
        &'a self,
        py: Python<'a>,
        what: &str,
        priority: i32,
    ) -> PyResult<(InUse<'a, Self>, OwnedStream)> {
        let in_use = lifecycle::enter(self, py, what)?;
        driver::ensure_same_context(self.context, self.context_id)?;
        let (view, device) = (self.view, self.device);
        let made = gil::detach(py, move || {
            let _calls = self.calls();
            driver::green_stream_create(view, device, priority)
        })?;
        Ok((in_use, made))
    }

    /// A stream made by `make_stream` was closed (released, or given up in a forked child).
    pub fn stream_closed(&self, py: Python<'_>) {
        lifecycle::end_kept_use(self, py);
    }

    /// Where the streams made in it live: the converted context, its id, the device.
    pub fn home(&self) -> Home {
        Home {
            context: self.context,
            context_id: self.context_id,
            device: self.device,
            // The green context holds what it needs; its streams retain nothing.
            retains_primary: false,
        }
    }

    pub fn view(&self) -> GreenCtxHandle {
        self.view
    }

    pub fn is_closed(&self) -> bool {
        lifecycle::is_closed(self)
    }

    pub fn is_owned(&self) -> bool {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }
}

/// What the Python methods read (src/green/methods.rs), and the cycle collector's two.
impl GreenContext {
    /// The device the green context's SMs belong to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The SMs the driver granted: at least the count asked for, rounded up as it requires.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The object kept alive for an adopted green context, or None.
    pub fn owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|o| o.clone_ref(py))
    }

    /// `__traverse__`: the owner is a reference a cycle can go through (an owner that holds
    /// its green context).
    pub fn traverse(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Nobody holds the lock across a call that could wait: a traverse never waits on it.
        if let Ok(owner) = self.owner.try_lock() {
            if let Some(owner) = owner.as_ref() {
                visit.call(owner)?;
            }
        }
        Ok(())
    }

    /// `__clear__`: only cyclic garbage is cleared: closed, as deallocation would; the owner
    /// goes with the release, once the streams made in it (garbage too) are released.
    pub fn clear(&self) {
        Python::attach(|py| lifecycle::close_quietly(self, py));
    }
}

impl Managed for GreenContext {
    const KIND: &'static str = "custream.GreenContext";

    fn state(&self) -> &AtomicU32 {
        &self.state
    }

    fn fork_generation(&self) -> u32 {
        self.fork_generation
    }

    /// Destroy custream's own green context (its streams were released first: each held it
    /// open), or let go of an adopted one's owner.
    fn release(&self, py: Python<'_>) -> driver::Result<()> {
        self.released.store(true, Ordering::Release);
        forget(py, self);
        let owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(owner);
        let owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner).take();
        match owned {
            Some((owned, home)) if lifecycle::may_release(self.fork_generation) => {
                let _calls = self.calls();
                home.release(py, move |_| owned.destroy())
            }
            // Made in a parent process, or released during finalization: left to the exit
            // (an owning handle has no Drop).
            Some(_) | None => Ok(()),
        }
    }
}

impl Closable for GreenContext {
    const PICKLE: &'static str = "a CUDA green context belongs to one process";

    fn is_closed(&self) -> bool {
        lifecycle::is_closed(self)
    }

    /// New streams are refused from now on; the driver's green context is destroyed now, or
    /// when the last stream made in it is closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        lifecycle::close(self, py)
    }
}

impl Drop for GreenContext {
    fn drop(&mut self) {
        // Dropped by its tp_dealloc, with the GIL held; no stream holds it (each holds a
        // reference). While the interpreter finalizes pyo3 will not attach, and nothing may
        // be released then anyway.
        let _ = Python::try_attach(|py| lifecycle::release_at_dealloc(&*self, py));
    }
}

/// The `green_context=` argument of Stream() and StreamPool(): None, or a GreenContext whose
/// device and CUDA's rule for its streams (non-blocking) agree with the other arguments.
/// Checked before any driver call.
pub fn green_context_arg<'py>(
    value: Option<&Bound<'py, PyAny>>,
    fname: &str,
    device: Option<i32>,
    non_blocking: bool,
) -> PyResult<Option<Bound<'py, GreenContext>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let gc = value.cast::<GreenContext>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{fname}() green_context must be a custream.GreenContext or None, got {}",
            type_name(value)
        ))
    })?;
    let at = gc.get().device();
    if let Some(d) = device.filter(|&d| d != at) {
        return Err(PyValueError::new_err(format!(
            "{fname}() device {d} is not the green context's: its SMs are device {at}'s \
             (leave device out, or make the green context on device {d})"
        )));
    }
    if !non_blocking {
        return Err(PyValueError::new_err(format!(
            "{fname}() non_blocking=False cannot be had in a green context: CUDA makes every \
             stream of a green context non-blocking"
        )));
    }
    Ok(Some(gc.clone()))
}

pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// The GreenContext objects alive, by handle, so that a stream in one (anybody's wrap of it)
/// answers `green_context` with the same object. Weak: the map keeps nothing alive.
static KNOWN: Mutex<Option<HashMap<u64, Py<PyWeakrefReference>>>> = Mutex::new(None);

fn known_map() -> MutexGuard<'static, Option<HashMap<u64, Py<PyWeakrefReference>>>> {
    KNOWN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Remember `gc` as the object for its handle, unless another live one is already: that one
/// is returned then, so that two threads asking at once end with the same object.
pub fn register<'py>(gc: &Bound<'py, GreenContext>) -> PyResult<Bound<'py, GreenContext>> {
    let py = gc.py();
    if let Some(known) = known(py, gc.get().view.as_u64()) {
        return Ok(known);
    }
    let weak = PyWeakrefReference::new(gc)?.unbind();
    let mut map = known_map();
    let map = map.get_or_insert_with(HashMap::new);
    map.retain(|_, w| w.bind(py).upgrade().is_some());
    map.insert(gc.get().view.as_u64(), weak);
    Ok(gc.clone())
}

/// The live, unreleased GreenContext over `handle`, if one is known.
pub fn known(py: Python<'_>, handle: u64) -> Option<Bound<'_, GreenContext>> {
    let map = known_map();
    let found = map.as_ref()?.get(&handle)?.bind(py).upgrade()?;
    let gc = found.cast_into::<GreenContext>().ok()?;
    (!gc.get().released.load(Ordering::Acquire)).then_some(gc)
}

/// Drop `gc`'s entry at its release (a later green context may get its address).
fn forget(py: Python<'_>, gc: &GreenContext) {
    let mut map = known_map();
    let Some(map) = map.as_mut() else { return };
    let key = gc.view.as_u64();
    let ours = map.get(&key).map(|w| w.bind(py).upgrade()).is_some_and(|o| match o {
        Some(o) => o.cast::<GreenContext>().is_ok_and(|g| std::ptr::eq(g.get(), gc)),
        None => true,
    });
    if ours {
        map.remove(&key);
    }
}

/// A new owned stream in green context `gc`, its owner, which it holds open until released
/// (below). Non-blocking, as CUDA requires of a green context's streams.
/// `pooled`: made for a StreamPool, which alone may close it.
pub fn create_stream<'py>(
    py: Python<'py>,
    gc: &Bound<'py, GreenContext>,
    priority: i32,
    pooled: bool,
    what: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let g = gc.get();
    let (in_use, handle) = g.make_stream(py, what, priority)?;
    register(gc)?;
    let flags = CUSTREAM_FLAG_OWNED
        | CUSTREAM_FLAG_NON_BLOCKING
        | CUSTREAM_FLAG_GREEN
        | if pooled { CUSTREAM_FLAG_POOLED } else { 0 };
    let obj = own(py, g.home(), handle, flags, priority, Some(gc.clone().into_any()))?;
    // The object holds its use of `gc` from here on: `release` ends it, once.
    in_use.keep();
    Ok(obj)
}
