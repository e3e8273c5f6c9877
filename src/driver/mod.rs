//! Every CUDA driver call custream makes, over small typed handles.
//!
//! A driver object crosses this boundary only as a typed handle: an owning one (`OwnedStream`,
//! `OwnedEvent`, `OwnedGraph`, `OwnedGraphExec`, `OwnedGreenCtx`: not `Copy`, destroyed by
//! consuming it) or a `Copy` view for calls (`StreamHandle`, `EventHandle`, `GraphHandle`,
//! `GraphExecHandle`, `GreenCtxHandle`), and a `Context`. Nothing here touches Python. Every call starts at `init()`, which refuses
//! after `fork()` and during finalization (src/process.rs).
//!
//! **The handle rule**, which the `unsafe` blocks below rely on: a view names a driver object
//! that is alive while the view is used. A view is copied out of an owning handle, which its
//! holder destroys only after the last use (src/lifecycle.rs holds every use open, and
//! `destroy` consumes the owner), or made by an `unsafe fn from_raw` whose caller vouches for
//! it (a borrowed stream's owner keeps it alive; 0, 1 and 2 are the default-stream tokens).
//! A `Context` is one the driver handed out; it may since have been reset, which the driver
//! reports on calls that take it, and `ensure_same_context` checks before every use of a
//! stream or event, since the driver may crash rather than fail on their handles then. The
//! driver does not validate a handle: a dead one is undefined behaviour, which is why the
//! rule is kept by types and not by hope. Two functions take raw memory and stay `unsafe fn`
//! (`user_object_create`, `host_register_mapped`): their callers vouch for the pointers.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    self as cu, CUcontext, CUdevice, CUevent, CUgraph, CUgraphExec, CUhostFn, CUstream, CUuserObject,
};

use crate::libcuda::{self, Api, LoadError, Status};
use crate::process::{self, Gate};

// The handle types and their macros (`handle!`, `owned!`), in scope for the rest of this
// module and for capture.rs.
#[macro_use]
mod handles;
pub use handles::*;

/// Driver status codes custream acts on, by name.
pub mod code {
    use super::{cu::CUresult as R, Status};
    pub const SUCCESS: Status = R::CUDA_SUCCESS as Status;
    pub const INVALID_VALUE: Status = R::CUDA_ERROR_INVALID_VALUE as Status;
    pub const NOT_INITIALIZED: Status = R::CUDA_ERROR_NOT_INITIALIZED as Status;
    pub const DEINITIALIZED: Status = R::CUDA_ERROR_DEINITIALIZED as Status;
    pub const NO_DEVICE: Status = R::CUDA_ERROR_NO_DEVICE as Status;
    pub const INVALID_DEVICE: Status = R::CUDA_ERROR_INVALID_DEVICE as Status;
    pub const INVALID_CONTEXT: Status = R::CUDA_ERROR_INVALID_CONTEXT as Status;
    pub const INVALID_HANDLE: Status = R::CUDA_ERROR_INVALID_HANDLE as Status;
    pub const NOT_READY: Status = R::CUDA_ERROR_NOT_READY as Status;
    pub const CONTEXT_IS_DESTROYED: Status = R::CUDA_ERROR_CONTEXT_IS_DESTROYED as Status;
    pub const NOT_SUPPORTED: Status = R::CUDA_ERROR_NOT_SUPPORTED as Status;
    pub const INVALID_RESOURCE_CONFIGURATION: Status = R::CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION as Status;
}

/// Why a driver call was not made, or how it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// libcuda could not be loaded, or lacks an entry point.
    Unavailable(LoadError),
    /// The driver is older than MIN_DRIVER_VERSION; holds its version.
    TooOld(i32),
    /// The driver returned this error.
    Cuda {
        code: Status,
        name: String,
        message: String,
    },
    /// This process was forked after the parent had initialized CUDA (or the object was made
    /// before the fork); CUDA cannot be used here.
    Forked,
    /// The interpreter is shutting down; the driver may already be torn down.
    Finalizing,
    /// Called from inside a host function, where CUDA forbids CUDA calls (src/callback.rs).
    InHostFunction,
}

pub type Result<T> = std::result::Result<T, DriverError>;

impl DriverError {
    /// Whether the error says the object's context is gone: destroyed or reset, the driver
    /// deinitialized, or a sticky fault (an illegal address, a failed launch, an assert in a
    /// kernel), after which every call in the context answers the same and the context must
    /// be destroyed. What lived in it went with it: releasing it has nothing left to do.
    pub fn context_is_dead(&self) -> bool {
        use cu::CUresult as R;
        const DEAD: [R; 14] = [
            R::CUDA_ERROR_DEINITIALIZED,
            R::CUDA_ERROR_INVALID_CONTEXT,
            R::CUDA_ERROR_CONTEXT_IS_DESTROYED,
            R::CUDA_ERROR_ECC_UNCORRECTABLE,
            R::CUDA_ERROR_ILLEGAL_ADDRESS,
            R::CUDA_ERROR_LAUNCH_TIMEOUT,
            R::CUDA_ERROR_HARDWARE_STACK_ERROR,
            R::CUDA_ERROR_ILLEGAL_INSTRUCTION,
            R::CUDA_ERROR_MISALIGNED_ADDRESS,
            R::CUDA_ERROR_INVALID_ADDRESS_SPACE,
            R::CUDA_ERROR_INVALID_PC,
            R::CUDA_ERROR_LAUNCH_FAILED,
            R::CUDA_ERROR_ASSERT,
            R::CUDA_ERROR_UNKNOWN,
        ];
        matches!(self, DriverError::Cuda { code, .. } if DEAD.iter().any(|d| *d as Status == *code))
    }
}

/// The oldest driver with every entry point custream calls (cuCtxGetId is the newest).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// Turn a driver status into a Result, with the driver's own name and message. Inlined:
/// on the hot paths (query, create, destroy) success is one compare, and the error's
/// strings are built out of line.
#[inline]
fn check(status: Status) -> Result<()> {
    if status == code::SUCCESS {
        Ok(())
    } else {
        Err(failed(status))
    }
}

#[cold]
#[inline(never)]
fn failed(status: Status) -> DriverError {
    let text = |f: unsafe extern "C" fn(Status, *mut *const c_char) -> Status| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: a valid out-pointer; the driver owns the string it points it at.
        let ok = unsafe { f(status, &mut p) } == code::SUCCESS && !p.is_null();
        // SAFETY: the driver returned a NUL-terminated string that lives for the process.
        ok.then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let (name, message) = match libcuda::boot() {
        Ok(boot) => (text(boot.cuGetErrorName), text(boot.cuGetErrorString)),
        Err(_) => (None, None),
    };
    DriverError::Cuda {
        code: status,
        name: name.unwrap_or_else(|| format!("CUDA_ERROR_UNKNOWN_CODE_{status}")),
        message: message.unwrap_or_else(|| "unrecognized error code".to_owned()),
    }
}

/// An error the driver itself would give, with our own message.
fn refused(status: Status, name: &str, message: String) -> DriverError {
    DriverError::Cuda {
        code: status,
        name: name.to_owned(),
        message,
    }
}

static READY: OnceLock<&'static Api> = OnceLock::new();

/// Load the library and call cuInit once per process (again in a child that forked before
/// the parent initialized). Every call below starts here, so its fast path is inlined:
/// four loads.
#[inline]
fn init() -> Result<&'static Api> {
    match READY.get() {
        Some(api) if process::initialized() => Ok(api),
        _ => init_slow(),
    }
}

#[cold]
#[inline(never)]
fn init_slow() -> Result<&'static Api> {
    if process::in_host_function() {
        return Err(DriverError::InHostFunction);
    }
    match process::gate() {
        Gate::Open => {}
        Gate::Forked => return Err(DriverError::Forked),
        Gate::Finalizing => return Err(DriverError::Finalizing),
    }
    // Here while a host function runs on another thread: nothing to do on this one.
    if let Some(api) = READY.get().filter(|_| process::initialized_here()) {
        return Ok(api);
    }
    let boot = libcuda::boot().map_err(DriverError::Unavailable)?;
    // SAFETY: the entry point of an open driver; cuInit is thread-safe and idempotent.
    check(unsafe { (boot.cuInit)(0) })?;
    // Refuse an older driver by its version, rather than by whichever entry point it lacks.
    let version = driver_version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(DriverError::TooOld(version));
    }
    let api = libcuda::api().map_err(DriverError::Unavailable)?;
    READY.get_or_init(|| api);
    process::mark_initialized();
    Ok(api)
}

/// The library names custream looks for, in order.
pub fn library_candidates() -> Vec<String> {
    libcuda::candidates()
}

/// cuDriverGetVersion, which needs no cuInit: e.g. 13000 for CUDA 13.0.
pub fn driver_version() -> Result<i32> {
    if process::is_finalizing() {
        return Err(DriverError::Finalizing);
    }
    let boot = libcuda::boot().map_err(DriverError::Unavailable)?;
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { (boot.cuDriverGetVersion)(&mut v) })?;
    Ok(v)
}

/// 12040 -> "12.4".
pub fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// The device handles by ordinal. cuInit fixes the set (CUDA_VISIBLE_DEVICES is read
/// there), so they are asked for once: creating a stream is then one driver call shorter.
#[inline]
fn devices() -> Result<(&'static Api, &'static [CUdevice])> {
    let api = init()?;
    match DEVICES.get() {
        Some(found) => Ok((api, found)),
        None => devices_slow(api).map(|found| (api, found)),
    }
}

static DEVICES: OnceLock<Vec<CUdevice>> = OnceLock::new();

#[cold]
#[inline(never)]
fn devices_slow(api: &'static Api) -> Result<&'static [CUdevice]> {
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuDeviceGetCount)(&mut n) })?;
    let found = (0..n)
        .map(|ordinal| {
            let mut d: CUdevice = 0;
            // SAFETY: a valid out-pointer; the ordinal is below the count.
            check(unsafe { (api.cuDeviceGet)(&mut d, ordinal) }).map(|()| d)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(DEVICES.get_or_init(|| found))
}

pub fn device_count() -> Result<i32> {
    let (_, found) = devices()?;
    Ok(i32::try_from(found.len()).unwrap_or(i32::MAX))
}

fn device_get(ordinal: i32) -> Result<(&'static Api, CUdevice)> {
    let (api, found) = devices()?;
    match usize::try_from(ordinal).ok().and_then(|i| found.get(i)) {
        Some(&d) => Ok((api, d)),
        // What cuDeviceGet itself answers for an ordinal out of range.
        None => Err(failed(code::INVALID_DEVICE)),
    }
}

pub fn device_name(ordinal: i32) -> Result<String> {
    let (api, dev) = device_get(ordinal)?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer and its length match.
    check(unsafe { (api.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev) })?;
    // SAFETY: the driver wrote a NUL-terminated name into the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

pub fn device_total_memory(ordinal: i32) -> Result<usize> {
    let (api, dev) = device_get(ordinal)?;
    let mut bytes = 0usize;
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuDeviceTotalMem_v2)(&mut bytes, dev) })?;
    Ok(bytes)
}

pub fn compute_capability(ordinal: i32) -> Result<(i32, i32)> {
    use cu::CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
    };
    let (api, dev) = device_get(ordinal)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers.
    check(unsafe { (api.cuDeviceGetAttribute)(&mut major, MAJOR, dev) })?;
    // SAFETY: as above.
    check(unsafe { (api.cuDeviceGetAttribute)(&mut minor, MINOR, dev) })?;
    Ok((major, minor))
}

/// The calling thread's current context, if any.
pub fn current_context() -> Result<Option<Context>> {
    let api = init()?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuCtxGetCurrent)(&mut ctx) })?;
    // SAFETY: the driver handed it out.
    Ok(unsafe { Context::from_raw(ctx.cast()) })
}

/// The device of `current`, the calling thread's current context (None: no context).
pub fn current_device_of(current: Option<Context>) -> Result<Option<i32>> {
    if current.is_none() {
        return Ok(None);
    }
    let api = init()?;
    let mut d: CUdevice = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuCtxGetDevice)(&mut d) })?;
    Ok(Some(d))
}

/// The device of the current context, or None when no context is current.
pub fn current_device() -> Result<Option<i32>> {
    current_device_of(current_context()?)
}

/// cuCtxGetId: the id of the context now behind `ctx`.
pub fn context_id(ctx: Context) -> Result<u64> {
    let api = init()?;
    let mut id: c_ulonglong = 0;
    // SAFETY: a valid out-pointer; `ctx` is a context the driver handed out (the handle
    // rule), and cuCtxGetId answers for one since reset without touching it.
    check(unsafe { (api.cuCtxGetId)(ctx.0, &mut id) })?;
    Ok(id)
}

/// Fails unless `ctx` is still the context whose id was `id`. A primary context reset by
/// another library (cudaDeviceReset, cuDevicePrimaryCtxReset) keeps its address but gets a
/// new id, or none while inactive; the streams and events of the old one are gone, and the
/// driver may crash rather than fail on them.
///
/// Every use of a stream or event makes this check first, so the success path is inlined.
#[inline]
pub fn ensure_same_context(ctx: Context, id: u64) -> Result<()> {
    let api = init()?;
    let mut now: c_ulonglong = 0;
    // SAFETY: a valid out-pointer; cuCtxGetId answers for a reset context without touching it.
    let status = unsafe { (api.cuCtxGetId)(ctx.0, &mut now) };
    if status == code::SUCCESS && now == id {
        return Ok(());
    }
    Err(context_changed(status))
}

#[cold]
#[inline(never)]
fn context_changed(status: Status) -> DriverError {
    match status {
        code::SUCCESS | code::CONTEXT_IS_DESTROYED => refused(
            code::CONTEXT_IS_DESTROYED,
            "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            "the CUDA context this stream or event belongs to was destroyed or reset \
             (e.g. by cudaDeviceReset or cuDevicePrimaryCtxReset in another library) \
             after it was made; its handle no longer exists"
                .into(),
        ),
        other => failed(other),
    }
}

/// Makes a context current for its lifetime and restores the previous one on drop, so a
/// call never changes the thread's current context as a side effect. The context stack is
/// the thread's: the scope is `!Send`, so it pops on the thread that pushed.
struct ContextScope(&'static Api, PhantomData<*const ()>);

impl ContextScope {
    fn enter(ctx: Context) -> Result<ContextScope> {
        let api = init()?;
        // SAFETY: `ctx` is a context the driver handed out (the handle rule); a reset one is
        // refused with an error, never dereferenced by us.
        check(unsafe { (api.cuCtxPushCurrent_v2)(ctx.0) })?;
        Ok(ContextScope(api, PhantomData))
    }
}

impl Drop for ContextScope {
    fn drop(&mut self) {
        let mut popped: CUcontext = null_mut();
        // SAFETY: pops what `enter` pushed on this thread; a valid out-pointer.
        unsafe { (self.0.cuCtxPopCurrent_v2)(&mut popped) };
    }
}

/// Run `f` with `ctx` current.
fn in_context<R>(ctx: Context, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let _scope = ContextScope::enter(ctx)?;
    f()
}

/// `in_context`, without the push and pop when `ctx` is `current`, the calling thread's
/// current context (the usual case in a thread where CuPy, PyTorch or the runtime has been
/// used): the caller has asked for it already.
fn in_context_if_needed<R>(ctx: Context, current: Option<Context>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    if current == Some(ctx) {
        f()
    } else {
        in_context(ctx, f)
    }
}

/// The device's primary context (the one the runtime API, CuPy, PyTorch and rmm use),
/// retained; pair with `release_primary_context`.
pub fn retain_primary_context(ordinal: i32) -> Result<Context> {
    let (api, dev) = device_get(ordinal)?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuDevicePrimaryCtxRetain)(&mut ctx, dev) })?;
    // SAFETY: the driver handed it out, and succeeded, so it is not null.
    unsafe { Context::from_raw(ctx.cast()) }.ok_or_else(|| failed(code::INVALID_CONTEXT))
}

pub fn release_primary_context(ordinal: i32) -> Result<()> {
    let (api, dev) = device_get(ordinal)?;
    // SAFETY: releases a retain the caller holds.
    check(unsafe { (api.cuDevicePrimaryCtxRelease_v2)(dev) })
}

/// Devices whose primary context custream keeps retained until the process exits: once
/// custream has used a device, closing its last stream must not tear the context down
/// (~100 ms to make again), as the CUDA runtime never does either.
static KEPT: OnceLock<Box<[AtomicBool]>> = OnceLock::new();

fn kept() -> Result<&'static [AtomicBool]> {
    if let Some(k) = KEPT.get() {
        return Ok(k);
    }
    let n = usize::try_from(device_count()?).unwrap_or(0);
    Ok(KEPT.get_or_init(|| (0..n).map(|_| AtomicBool::new(false)).collect()))
}

/// Retain `ordinal`'s primary context for the rest of the process, once; after the first
/// call this is an atomic load.
pub fn keep_primary_context(ordinal: i32) -> Result<()> {
    let slot = usize::try_from(ordinal).ok().and_then(|i| kept().ok()?.get(i));
    let Some(slot) = slot else {
        return Err(failed(code::INVALID_DEVICE));
    };
    if slot.load(Ordering::Acquire) || slot.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    retain_primary_context(ordinal)
        .map(drop)
        .inspect_err(|_| slot.store(false, Ordering::Release))
}

/// Give back the retains of `keep_primary_context`: at interpreter exit, in the process
/// that took them (never in a forked child: `init` refuses there).
pub fn release_kept_primary_contexts() {
    let Some(kept) = KEPT.get() else { return };
    for (ordinal, slot) in kept.iter().enumerate() {
        if slot.swap(false, Ordering::AcqRel) {
            let _ = i32::try_from(ordinal).map(release_primary_context);
        }
    }
}

/// Run `f` with `ordinal`'s primary context current, and the previous one current again
/// after: the CUDA runtime's rule for a thread with no current context, without the side
/// effect of leaving a context current.
pub fn in_primary_context<R>(ordinal: i32, f: impl FnOnce() -> Result<R>) -> Result<R> {
    keep_primary_context(ordinal)?;
    // Retained for the call too: a reset by another library revives the context here.
    let ctx = retain_primary_context(ordinal)?;
    let result = in_context(ctx, f);
    let _ = release_primary_context(ordinal);
    result
}

/// The priority range of `ordinal`'s device: (least, greatest); greatest is the numerically
/// lowest, e.g. (0, -5).
pub fn priority_range(ordinal: i32) -> Result<(i32, i32)> {
    let api = init()?;
    in_primary_context(ordinal, || stream_priority_range(api))
}

/// The priority range of the current context's device: (least, greatest); greatest is the
/// numerically lowest, e.g. (0, -5).
fn stream_priority_range(api: &Api) -> Result<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: valid out-pointers.
    check(unsafe { (api.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest) })?;
    Ok((least, greatest))
}

/// Refuses a priority outside (least, greatest) by name: the driver would clamp it silently.
pub fn check_priority(priority: i32, (least, greatest): (i32, i32)) -> Result<()> {
    if priority > least || priority < greatest {
        return Err(refused(
            code::INVALID_VALUE,
            "CUDA_ERROR_INVALID_VALUE",
            format!(
                "priority {priority} is outside this device's range [{greatest}, {least}] \
                 (lower numbers are higher priority)"
            ),
        ));
    }
    Ok(())
}

/// An owned stream: created in `ctx`, which the caller has retained; `current` is the
/// calling thread's current context.
pub fn create_stream(ctx: Context, current: Option<Context>, non_blocking: bool, priority: i32) -> Result<OwnedStream> {
    let api = init()?;
    in_context_if_needed(ctx, current, || {
        // 0 is every device's lowest priority, always valid: spare the range query.
        let (least, greatest) = if priority == 0 {
            (0, 0)
        } else {
            stream_priority_range(api)?
        };
        check_priority(priority, (least, greatest))?;
        let flags = if non_blocking {
            cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint
        } else {
            0
        };
        let mut h: CUstream = null_mut();
        // SAFETY: a valid out-pointer; `ctx` is current.
        check(unsafe { (api.cuStreamCreateWithPriority)(&mut h, flags, priority) })?;
        Ok(OwnedStream(StreamHandle(h)))
    })
}

pub fn stream_synchronize(h: StreamHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: the handle is live (the handle rule).
    check(unsafe { (api.cuStreamSynchronize)(h.0) })
}

/// True when all work on the stream is done, false while some is pending.
#[inline]
pub fn stream_query(h: StreamHandle) -> Result<bool> {
    let api = init()?;
    // SAFETY: the handle is live (the handle rule).
    match unsafe { (api.cuStreamQuery)(h.0) } {
        code::SUCCESS => Ok(true),
        code::NOT_READY => Ok(false),
        other => Err(failed(other)),
    }
}

pub fn stream_wait_event(h: StreamHandle, ev: EventHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: both handles are live (the handle rule).
    check(unsafe { (api.cuStreamWaitEvent)(h.0, ev.0, 0) })
}

/// The context a stream belongs to (the current one for the default-stream tokens).
pub fn stream_context(h: StreamHandle) -> Result<Context> {
    let api = init()?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamGetCtx)(h.0, &mut ctx) })?;
    // SAFETY: the driver handed it out, and succeeded, so it is not null.
    unsafe { Context::from_raw(ctx.cast()) }.ok_or_else(|| failed(code::INVALID_CONTEXT))
}

/// The device of a stream, never by changing the calling thread's current context beyond the
/// call: cuStreamGetDevice (CUDA 12.8) where the driver has it and the stream is not in a
/// capture (some drivers refuse it there, and the refusal invalidates the capture: CCCL's
/// `get_device_from_stream` notes so), else the device of its context (`ctx`, when the caller
/// knows it, else cuStreamGetCtx).
pub fn stream_device(h: StreamHandle, ctx: Option<Context>) -> Result<i32> {
    if stream_capture_status(h)? == CaptureStatus::None {
        if let Some(d) = stream_device_direct(h)? {
            return Ok(d);
        }
    }
    context_device(match ctx {
        Some(c) => c,
        None => stream_context(h)?,
    })
}

/// cuStreamGetDevice, or None where the driver lacks it.
fn stream_device_direct(h: StreamHandle) -> Result<Option<i32>> {
    init()?;
    let Some(table) = libcuda::stream_device() else {
        return Ok(None);
    };
    let mut d: CUdevice = 0;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (table.cuStreamGetDevice)(h.0, &mut d) })?;
    Ok(Some(d))
}

/// cuStreamGetId: the driver's id of the stream, unique in the process (CUDA 12.0). A
/// default-stream token answers for the current context's stream.
pub fn stream_id(h: StreamHandle) -> Result<u64> {
    let api = init()?;
    let mut id: c_ulonglong = 0;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamGetId)(h.0, &mut id) })?;
    Ok(id)
}

/// Whether the stream was created with CU_STREAM_NON_BLOCKING.
pub fn stream_is_non_blocking(h: StreamHandle) -> Result<bool> {
    let api = init()?;
    let mut f: c_uint = 0;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamGetFlags)(h.0, &mut f) })?;
    Ok(f & cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint != 0)
}

pub fn stream_priority(h: StreamHandle) -> Result<i32> {
    let api = init()?;
    let mut p: c_int = 0;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamGetPriority)(h.0, &mut p) })?;
    Ok(p)
}

pub fn event_create(ctx: Context, timing: bool) -> Result<OwnedEvent> {
    let api = init()?;
    let flags = if timing {
        0
    } else {
        cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint
    };
    in_context(ctx, || {
        let mut ev: CUevent = null_mut();
        // SAFETY: a valid out-pointer; `ctx` is current.
        check(unsafe { (api.cuEventCreate)(&mut ev, flags) })?;
        Ok(OwnedEvent(EventHandle(ev)))
    })
}

pub fn event_record(ev: EventHandle, h: StreamHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: both handles are live (the handle rule).
    check(unsafe { (api.cuEventRecord)(ev.0, h.0) })
}

pub fn event_synchronize(ev: EventHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: the handle is live (the handle rule).
    check(unsafe { (api.cuEventSynchronize)(ev.0) })
}

pub fn event_query(ev: EventHandle) -> Result<bool> {
    let api = init()?;
    // SAFETY: the handle is live (the handle rule).
    match unsafe { (api.cuEventQuery)(ev.0) } {
        code::SUCCESS => Ok(true),
        code::NOT_READY => Ok(false),
        other => Err(failed(other)),
    }
}

/// Milliseconds from `start` to `end`.
pub fn event_elapsed_ms(start: EventHandle, end: EventHandle) -> Result<f32> {
    let api = init()?;
    let mut ms = 0f32;
    // SAFETY: a valid out-pointer; both handles are live (the handle rule).
    check(unsafe { (api.cuEventElapsedTime)(&mut ms, start.0, end.0) })?;
    Ok(ms)
}

// After `handle!`, which they use.
mod capture;
pub use capture::*;
mod green;
pub use green::*;
mod ipc;
pub use ipc::*;
mod memops;
pub use memops::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the copy of the test binary that the test below runs.
    const CHILD: &str = "CUSTREAM_TEST_NO_LIBRARY_CHILD";

    /// The driver library is opened once per process, so "no library" is made in a child: this
    /// test binary again, running only this test, with CUSTREAM_LIBCUDA naming a file that is
    /// not there. It runs the same on every machine, a driver or not.
    #[test]
    fn without_a_library_every_call_reports_unavailable() {
        let missing = "/nonexistent/custream-test/libcuda.so.1";
        if std::env::var_os(CHILD).is_some() {
            for r in [init().map(|_| 0), device_count(), driver_version()] {
                match r {
                    Err(DriverError::Unavailable(LoadError::NotFound { looked_for, stub: None })) => {
                        assert_eq!(looked_for, [missing]);
                    }
                    other => panic!("expected Unavailable, got {other:?}"),
                }
            }
            return;
        }
        let name = "driver::tests::without_a_library_every_call_reports_unavailable";
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([name, "--exact", "--test-threads=1"])
            .env(CHILD, "1")
            .env(libcuda::LIBCUDA_ENV, missing)
            .output()
            .expect("the test binary runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        // The filter matched this test: a child that ran nothing would pass too.
        assert!(text.contains("test result: ok. 1 passed"), "{text}");
    }
}
