//! The CUDA driver, reached through cudarc's dlopen bindings.
//!
//! Nothing here touches Python. libcuda is looked for on the first call that needs it, never
//! at import. cudarc panics when the library or a symbol is missing, so `init()` checks for
//! the library before the first call into it and every other function goes through `init()`.
//! After `fork()` or once the interpreter is finalizing, calls are refused instead of made.

use std::ffi::CStr;
use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

pub use cu::{CUcontext, CUdevice, CUevent, CUstream};

/// Why a driver call was not made, or how it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// libcuda could not be loaded; holds the names looked for.
    Unavailable(Vec<String>),
    /// The driver is older than MIN_DRIVER_VERSION; holds its version.
    TooOld(i32),
    /// The driver returned this error.
    Cuda { code: u32, name: String, message: String },
    /// This process was forked after the parent had initialized CUDA (or the object was made
    /// before the fork); CUDA cannot be used here.
    Forked,
    /// The interpreter is shutting down; the driver may already be torn down.
    Finalizing,
}

pub type Result<T> = std::result::Result<T, DriverError>;

/// Bumped in the child on every fork(): objects record it so a child never destroys, or
/// calls the deleter of, what its parent made.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);
/// The generation in which cuInit succeeded; u32::MAX until then.
static INIT_GENERATION: AtomicU32 = AtomicU32::new(u32::MAX);
static FINALIZING: AtomicBool = AtomicBool::new(false);
static LOADED: OnceLock<std::result::Result<(), Vec<String>>> = OnceLock::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Install the fork handler. Called once, when the extension module is initialized.
pub fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    });
}

pub fn fork_generation() -> u32 {
    FORK_GENERATION.load(Ordering::Acquire)
}

/// Called from an atexit hook: from here on no object calls into the driver.
pub fn set_finalizing() {
    FINALIZING.store(true, Ordering::Release);
}

pub fn is_finalizing() -> bool {
    FINALIZING.load(Ordering::Acquire)
}

/// The library names cudarc tries, in its order, without repeats.
pub fn library_candidates() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for lib in ["cuda", "nvcuda"] {
        for name in cudarc::get_lib_name_candidates(lib) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

fn load() -> Result<()> {
    LOADED
        .get_or_init(|| {
            // SAFETY: only dlopen; cudarc keeps its own handle for the calls that follow.
            if unsafe { cu::is_culib_present() } {
                Ok(())
            } else {
                Err(library_candidates())
            }
        })
        .clone()
        .map_err(DriverError::Unavailable)
}

/// Whether libcuda can be loaded (no cuInit).
pub fn library_present() -> bool {
    load().is_ok()
}

fn error_name(code: cu::CUresult) -> String {
    let mut p: *const std::os::raw::c_char = std::ptr::null();
    // SAFETY: the library is loaded whenever a CUresult exists; the driver owns the string.
    let r = unsafe { cu::cuGetErrorName(code, &mut p) };
    if r == cu::CUresult::CUDA_SUCCESS && !p.is_null() {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("CUDA_ERROR_UNKNOWN_CODE_{}", code as u32)
    }
}

fn error_message(code: cu::CUresult) -> String {
    let mut p: *const std::os::raw::c_char = std::ptr::null();
    let r = unsafe { cu::cuGetErrorString(code, &mut p) };
    if r == cu::CUresult::CUDA_SUCCESS && !p.is_null() {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        "unrecognized error code".to_owned()
    }
}

/// Turn a driver status into a Result, with the driver's own name and message. Inlined:
/// on the hot paths (query, create, destroy) success is one compare, and the error's
/// strings are built out of line.
#[inline]
pub fn check(code: cu::CUresult) -> Result<()> {
    if code == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(failed(code))
    }
}

#[cold]
#[inline(never)]
fn failed(code: cu::CUresult) -> DriverError {
    DriverError::Cuda { code: code as u32, name: error_name(code), message: error_message(code) }
}

/// Load the library and call cuInit once per process (again in a child that forked before
/// the parent initialized). Every function below that calls the driver starts here, so
/// the check that it was done is inlined: three loads.
#[inline]
pub fn init() -> Result<()> {
    if !is_finalizing() && INIT_GENERATION.load(Ordering::Acquire) == fork_generation() {
        return Ok(());
    }
    init_slow()
}

#[cold]
#[inline(never)]
fn init_slow() -> Result<()> {
    if is_finalizing() {
        return Err(DriverError::Finalizing);
    }
    let generation = fork_generation();
    match INIT_GENERATION.load(Ordering::Acquire) {
        g if g == generation => return Ok(()),
        u32::MAX => {}
        _ => return Err(DriverError::Forked),
    }
    load()?;
    // SAFETY: the library is present; cuInit is thread-safe and idempotent.
    check(unsafe { cu::cuInit(0) })?;
    // cudarc panics on a symbol the library lacks; refuse an older driver here, by name,
    // rather than fail later on whichever call first needs a missing entry point.
    let version = driver_version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(DriverError::TooOld(version));
    }
    INIT_GENERATION.store(generation, Ordering::Release);
    Ok(())
}

/// The oldest driver with every entry point custream calls (cuCtxGetId is the newest).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// 12040 -> "12.4".
pub fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// cuDriverGetVersion, which needs no cuInit: e.g. 13000 for CUDA 13.0.
pub fn driver_version() -> Result<i32> {
    if is_finalizing() {
        return Err(DriverError::Finalizing);
    }
    load()?;
    let mut v: c_int = 0;
    check(unsafe { cu::cuDriverGetVersion(&mut v) })?;
    Ok(v)
}

/// The device handles by ordinal. cuInit fixes the set (CUDA_VISIBLE_DEVICES is read
/// there), so they are asked for once: creating a stream is then one driver call shorter.
#[inline]
fn devices() -> Result<&'static [CUdevice]> {
    init()?;
    match DEVICES.get() {
        Some(found) => Ok(found),
        None => devices_slow(),
    }
}

static DEVICES: OnceLock<Vec<CUdevice>> = OnceLock::new();

#[cold]
#[inline(never)]
fn devices_slow() -> Result<&'static [CUdevice]> {
    let mut n: c_int = 0;
    check(unsafe { cu::cuDeviceGetCount(&mut n) })?;
    let found = (0..n)
        .map(|ordinal| {
            let mut d: CUdevice = 0;
            check(unsafe { cu::cuDeviceGet(&mut d, ordinal) }).map(|_| d)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(DEVICES.get_or_init(|| found))
}

pub fn device_count() -> Result<i32> {
    Ok(devices()?.len() as c_int)
}

pub fn device_get(ordinal: i32) -> Result<CUdevice> {
    let found = devices()?;
    match usize::try_from(ordinal).ok().and_then(|i| found.get(i)) {
        Some(&d) => Ok(d),
        // What cuDeviceGet itself answers for an ordinal out of range.
        None => check(cu::CUresult::CUDA_ERROR_INVALID_DEVICE).map(|_| 0),
    }
}

pub fn device_name(ordinal: i32) -> Result<String> {
    let dev = device_get(ordinal)?;
    let mut buf = [0 as std::os::raw::c_char; 256];
    check(unsafe { cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev) })?;
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

pub fn device_total_memory(ordinal: i32) -> Result<usize> {
    let dev = device_get(ordinal)?;
    let mut bytes = 0usize;
    check(unsafe { cu::cuDeviceTotalMem_v2(&mut bytes, dev) })?;
    Ok(bytes)
}

pub fn compute_capability(ordinal: i32) -> Result<(i32, i32)> {
    use cu::CUdevice_attribute::*;
    let dev = device_get(ordinal)?;
    let (mut major, mut minor) = (0, 0);
    check(unsafe { cu::cuDeviceGetAttribute(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) })?;
    check(unsafe { cu::cuDeviceGetAttribute(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) })?;
    Ok((major, minor))
}

/// The calling thread's current context, or null.
pub fn current_context() -> Result<CUcontext> {
    init()?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    check(unsafe { cu::cuCtxGetCurrent(&mut ctx) })?;
    Ok(ctx)
}

/// The device of the current context, or None when no context is current.
pub fn current_device() -> Result<Option<i32>> {
    current_device_of(current_context()?)
}

/// The device of `current`, the calling thread's current context (null: none).
pub fn current_device_of(current: CUcontext) -> Result<Option<i32>> {
    if current.is_null() {
        return Ok(None);
    }
    let mut d: CUdevice = 0;
    check(unsafe { cu::cuCtxGetDevice(&mut d) })?;
    Ok(Some(d))
}

/// cuCtxGetId: the id of the context now behind `ctx`.
pub fn context_id(ctx: CUcontext) -> Result<u64> {
    init()?;
    let mut id: std::os::raw::c_ulonglong = 0;
    check(unsafe { cu::cuCtxGetId(ctx, &mut id) })?;
    Ok(id)
}

const CONTEXT_IS_DESTROYED: u32 = cu::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED as u32;

/// Fails unless `ctx` is still the context whose id was `id`. A primary context reset by
/// another library (cudaDeviceReset, cuDevicePrimaryCtxReset) keeps its address but gets a
/// new id, or none while inactive; the streams and events of the old one are gone, and the
/// driver may crash rather than fail on them.
///
/// Every use of a stream or event makes this check first, so the success path is inlined.
#[inline]
pub fn ensure_same_context(ctx: CUcontext, id: u64) -> Result<()> {
    init()?;
    let mut now: std::os::raw::c_ulonglong = 0;
    let code = unsafe { cu::cuCtxGetId(ctx, &mut now) };
    if code == cu::CUresult::CUDA_SUCCESS && now == id {
        return Ok(());
    }
    Err(context_changed(code))
}

#[cold]
#[inline(never)]
fn context_changed(code: cu::CUresult) -> DriverError {
    match code {
        cu::CUresult::CUDA_SUCCESS | cu::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED => DriverError::Cuda {
            code: CONTEXT_IS_DESTROYED,
            name: "CUDA_ERROR_CONTEXT_IS_DESTROYED".into(),
            message: "the CUDA context this stream or event belongs to was destroyed or reset \
                      (e.g. by cudaDeviceReset or cuDevicePrimaryCtxReset in another library) \
                      after it was made; its handle no longer exists"
                .into(),
        },
        code => failed(code),
    }
}

/// Makes `ctx` current for its lifetime and restores the previous context on drop, so a
/// call never changes the thread's current context as a side effect.
pub struct ContextScope(());

impl ContextScope {
    pub fn enter(ctx: CUcontext) -> Result<ContextScope> {
        check(unsafe { cu::cuCtxPushCurrent_v2(ctx) })?;
        Ok(ContextScope(()))
    }
}

impl Drop for ContextScope {
    fn drop(&mut self) {
        let mut popped: CUcontext = std::ptr::null_mut();
        unsafe { cu::cuCtxPopCurrent_v2(&mut popped) };
    }
}

/// Run `f` with `ctx` current.
pub fn in_context<R>(ctx: CUcontext, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let _scope = ContextScope::enter(ctx)?;
    f()
}

/// `in_context`, without the push and pop when `ctx` is `current`, the calling thread's
/// current context (the usual case in a thread where CuPy, PyTorch or the runtime has been
/// used): the caller has asked for it already.
pub fn in_context_if_needed<R>(ctx: CUcontext, current: CUcontext, f: impl FnOnce() -> Result<R>) -> Result<R> {
    if current == ctx {
        f()
    } else {
        in_context(ctx, f)
    }
}

/// The device's primary context (the one the runtime API, CuPy, PyTorch and rmm use),
/// retained; pair with `release_primary_context`.
pub fn retain_primary_context(ordinal: i32) -> Result<CUcontext> {
    let dev = device_get(ordinal)?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    check(unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, dev) })?;
    Ok(ctx)
}

pub fn release_primary_context(ordinal: i32) -> Result<()> {
    let dev = device_get(ordinal)?;
    check(unsafe { cu::cuDevicePrimaryCtxRelease_v2(dev) })
}

/// The priority range of the current context's device: (least, greatest); greatest is the
/// numerically lowest, e.g. (0, -5).
pub fn stream_priority_range() -> Result<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    check(unsafe { cu::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) })?;
    Ok((least, greatest))
}

/// An owned stream: created in `ctx`, which the caller has retained; `current` is the
/// calling thread's current context.
pub fn create_stream(ctx: CUcontext, current: CUcontext, non_blocking: bool, priority: i32) -> Result<CUstream> {
    init()?;
    in_context_if_needed(ctx, current, || {
        // 0 is every device's lowest priority, always valid: spare the range query.
        let (least, greatest) = if priority == 0 { (0, 0) } else { stream_priority_range()? };
        if priority > least || priority < greatest {
            return Err(DriverError::Cuda {
                code: cu::CUresult::CUDA_ERROR_INVALID_VALUE as u32,
                name: "CUDA_ERROR_INVALID_VALUE".into(),
                message: format!(
                    "priority {priority} is outside this device's range [{greatest}, {least}] \
                     (lower numbers are higher priority)"
                ),
            });
        }
        let flags = if non_blocking { cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint } else { 0 };
        let mut h: CUstream = std::ptr::null_mut();
        check(unsafe { cu::cuStreamCreateWithPriority(&mut h, flags, priority) })?;
        Ok(h)
    })
}

/// Needs no current context: the driver finds the stream's own (as for synchronize), so
/// a stream is destroyed from any thread, whatever is current there.
pub fn destroy_stream(h: CUstream) -> Result<()> {
    init()?;
    check(unsafe { cu::cuStreamDestroy_v2(h) })
}

pub fn stream_synchronize(h: CUstream) -> Result<()> {
    init()?;
    check(unsafe { cu::cuStreamSynchronize(h) })
}

/// True when all work on the stream is done, false while some is pending.
#[inline]
pub fn stream_query(h: CUstream) -> Result<bool> {
    init()?;
    match unsafe { cu::cuStreamQuery(h) } {
        cu::CUresult::CUDA_SUCCESS => Ok(true),
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => check(code).map(|_| false),
    }
}

pub fn stream_wait_event(h: CUstream, ev: CUevent) -> Result<()> {
    init()?;
    check(unsafe { cu::cuStreamWaitEvent(h, ev, 0) })
}

/// The context a stream belongs to (the current one for the default-stream tokens).
pub fn stream_context(h: CUstream) -> Result<CUcontext> {
    init()?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    check(unsafe { cu::cuStreamGetCtx(h, &mut ctx) })?;
    Ok(ctx)
}

/// The device of a stream's context, found without changing the current context.
pub fn stream_device(h: CUstream) -> Result<i32> {
    let ctx = stream_context(h)?;
    in_context(ctx, || {
        let mut d: CUdevice = 0;
        check(unsafe { cu::cuCtxGetDevice(&mut d) })?;
        Ok(d)
    })
}

pub fn stream_flags(h: CUstream) -> Result<u32> {
    init()?;
    let mut f: c_uint = 0;
    check(unsafe { cu::cuStreamGetFlags(h, &mut f) })?;
    Ok(f)
}

pub fn stream_priority(h: CUstream) -> Result<i32> {
    init()?;
    let mut p: c_int = 0;
    check(unsafe { cu::cuStreamGetPriority(h, &mut p) })?;
    Ok(p)
}

pub const STREAM_NON_BLOCKING: u32 = cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;

pub fn event_create(ctx: CUcontext, timing: bool) -> Result<CUevent> {
    init()?;
    let flags = if timing { 0 } else { cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint };
    in_context(ctx, || {
        let mut ev: CUevent = std::ptr::null_mut();
        check(unsafe { cu::cuEventCreate(&mut ev, flags) })?;
        Ok(ev)
    })
}

pub fn event_destroy(ctx: CUcontext, ev: CUevent) -> Result<()> {
    init()?;
    in_context(ctx, || check(unsafe { cu::cuEventDestroy_v2(ev) }))
}

pub fn event_record(ev: CUevent, h: CUstream) -> Result<()> {
    init()?;
    check(unsafe { cu::cuEventRecord(ev, h) })
}

pub fn event_synchronize(ev: CUevent) -> Result<()> {
    init()?;
    check(unsafe { cu::cuEventSynchronize(ev) })
}

pub fn event_query(ev: CUevent) -> Result<bool> {
    init()?;
    match unsafe { cu::cuEventQuery(ev) } {
        cu::CUresult::CUDA_SUCCESS => Ok(true),
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => check(code).map(|_| false),
    }
}

/// Milliseconds from `start` to `end`.
pub fn event_elapsed_ms(start: CUevent, end: CUevent) -> Result<f32> {
    init()?;
    // cudarc's 13.0 table binds only cuEventElapsedTime_v2 (drivers from 12.8); the first
    // version is in every driver, so look it up ourselves.
    type ElapsedTime = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> cu::CUresult;
    static ELAPSED: OnceLock<Option<ElapsedTime>> = OnceLock::new();
    let f = ELAPSED.get_or_init(|| unsafe {
        cu::culib().get::<ElapsedTime>(b"cuEventElapsedTime\0").ok().map(|sym| *sym)
    });
    let Some(f) = f else {
        return Err(DriverError::Cuda {
            code: cu::CUresult::CUDA_ERROR_NOT_FOUND as u32,
            name: "CUDA_ERROR_NOT_FOUND".into(),
            message: "this driver exports no cuEventElapsedTime".into(),
        });
    };
    let mut ms = 0f32;
    check(unsafe { f(&mut ms, start, end) })?;
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_name_libcuda_once_each() {
        let names = library_candidates();
        assert!(names.iter().any(|n| n == "libcuda.so.1"), "{names:?}");
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
    }

    #[test]
    fn without_a_library_every_call_reports_unavailable() {
        if library_present() {
            return; // a machine with a driver: covered by the gpu tests
        }
        for r in [init().map(|_| 0), device_count(), driver_version()] {
            match r {
                Err(DriverError::Unavailable(names)) => assert!(names.contains(&"libcuda.so".to_string())),
                other => panic!("expected Unavailable, got {other:?}"),
            }
        }
    }
}
