//! How a Stream object is made: owned (in a device's primary context; in a green context,
//! src/green/context.rs makes it and hands it to `own`),
//! borrowed (a handle and its owner), and the three default streams; and the registry of the
//! owned streams alive, which a borrowed stream over one of them learns its context from.
//! What a Stream then does is src/stream/methods.rs.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyTuple};

use crate::cpython::args::choice_arg;
use crate::cpython::stream_object::{self, Fields};
use crate::cpython::stream_object::{
    custream_deleter_t, CUSTREAM_DEVICE_UNKNOWN, CUSTREAM_FLAG_DEFAULT, CUSTREAM_FLAG_NON_BLOCKING,
    CUSTREAM_FLAG_OWNED, CUSTREAM_FLAG_POOLED, CUSTREAM_FLAG_SHARED,
};
use crate::driver::gate;
use crate::driver::{self, Context, OwnedStream, SyncPolicy};
use crate::object::home_context::Home;

/// The owned streams alive in this process: handle -> (context, context id). A borrowed
/// stream over one of them learns its context here, without asking the driver about a
/// handle that a context reset may already have destroyed.
static OWNED: Mutex<BTreeMap<u64, (Context, u64)>> = Mutex::new(BTreeMap::new());

pub fn owned_streams() -> MutexGuard<'static, BTreeMap<u64, (Context, u64)>> {
    OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn is_default_token(handle: u64) -> bool {
    handle <= 2
}

/// `sync_policy=` of `Stream()` and `StreamPool()`: None (the driver's default) or one of
/// the names of `Stream.sync_policy`.
pub fn sync_policy_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<Option<SyncPolicy>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => Ok(Some(
            SyncPolicy::ALL[choice_arg(v, &format!("{fname}() sync_policy"), &SyncPolicy::NAMES)?],
        )),
    }
}

/// A stream just made (by `create`, or in a green context) given its `sync_policy=` before
/// anybody else sees it. On failure the caller drops it, which destroys it.
pub fn with_sync_policy(made: &Bound<'_, PyAny>, policy: Option<SyncPolicy>) -> PyResult<()> {
    let Some(policy) = policy else { return Ok(()) };
    let s = stream_object::StreamObject::of(made, "Stream()")?;
    // SAFETY: the stream was made by the caller a moment ago and is held by `made`, which
    // nobody else has seen: nothing can have closed it.
    let h = unsafe { driver::StreamHandle::from_raw(s.handle_value()) };
    Ok(driver::stream_set_sync_policy(h, policy)?)
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
    let (context, context_id) = parts.home.map_or((None, 0), |(c, id)| (Some(c), id));
    let flags = parts.flags;
    let obj = stream_object::alloc(
        py,
        Fields {
            handle: parts.handle,
            protocol,
            flags,
            device: parts.device,
            priority: parts.priority,
            fork_generation: gate::fork_generation(),
            owner: parts.owner,
            deleter: parts.deleter,
            deleter_ctx: parts.deleter_ctx,
            context,
            context_id,
        },
    )?;
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
    let flags = CUSTREAM_FLAG_OWNED
        | if non_blocking { CUSTREAM_FLAG_NON_BLOCKING } else { 0 }
        | if pooled { CUSTREAM_FLAG_POOLED } else { 0 };
    own(py, home, handle, flags, priority, None)
}

/// The object of an owned stream just made in `home`, which owns it from here on (`release`
/// takes it back, once); without an object the stream is destroyed again.
pub fn own<'py>(
    py: Python<'py>,
    home: Home,
    handle: OwnedStream,
    flags: u32,
    priority: i32,
    owner: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let parts = Parts {
        handle: handle.handle().as_u64(),
        flags,
        device: home.device,
        priority,
        owner,
        deleter: None,
        deleter_ctx: null_mut(),
        home: Some((home.context, home.context_id)),
        protocol: None,
    };
    match make(py, parts) {
        Ok(obj) => {
            owned_streams().insert(handle.into_raw(), (home.context, home.context_id));
            Ok(obj)
        }
        Err(e) => {
            let _ = home.release(py, move |_| handle.destroy());
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
pub const DEFAULT_NAMES: [&str; 3] = ["DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"];

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
