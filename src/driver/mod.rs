//! Every CUDA driver call custream makes, over small typed handles.
//!
//! A driver object crosses this boundary only as a typed handle: an owning one (`OwnedStream`,
//! `OwnedEvent`, `OwnedGraph`, `OwnedGraphExec`, `OwnedGreenCtx`: not `Copy`, destroyed by
//! consuming it) or a `Copy` view for calls (`StreamHandle`, `EventHandle`, `GraphHandle`,
//! `GraphExecHandle`, `GreenCtxHandle`), and a `Context`. Nothing here touches Python. Every
//! call starts at `init()`, which refuses after `fork()` and during finalization
//! (src/driver/gate.rs).
//!
//! Beside the calls (`contexts`, `streams`, `attributes` (a stream's settings), `capture`,
//! `green`, `ipc`, `memops`) and the
//! handles (`handles`): `libcuda` finds and opens the driver library and its entry points;
//! `gate` is the process's state in front of every call (fork, exit, host functions);
//! `capture_guard` is what a capture is to custream, by handle (the captures begun through
//! custream and their streams, and the decision to refuse a call a capture forbids or run it
//! relaxed), asked by streams, events, waits and host functions; `callbacks` is the Rust code
//! the driver calls on its threads, behind a safe API (a closure after a stream's work, a box
//! a user object owns).
//!
//! Uses nothing else of custream's.
//!
//! **The handle rule**, which the `unsafe` blocks below rely on: a view names a driver object
//! that is alive while the view is used. A view is copied out of an owning handle, which its
//! holder destroys only after the last use (src/object/lifecycle.rs holds every use open, and
//! `destroy` consumes the owner), or made by an `unsafe fn from_raw` whose caller vouches for
//! it (a borrowed stream's owner keeps it alive; 0, 1 and 2 are the default-stream tokens).
//! A `Context` is one the driver handed out; it may since have been reset, which the driver
//! reports on calls that take it, and `ensure_same_context` checks before every use of a
//! stream or event, since the driver may crash rather than fail on their handles then. The
//! driver does not validate a handle: a dead one is undefined behaviour, which is why the
//! rule is kept by types and not by hope. Two functions take raw pointers and stay `unsafe fn`
//! (`launch_host_func`, a C function and its data; `host_register_mapped`, memory): their
//! callers vouch for them.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    self as cu, CUcontext, CUdevice, CUevent, CUgraph, CUgraphExec, CUhostFn, CUstream, CUuserObject,
};

use gate::Gate;
use libcuda::{Api, LoadError, Status};

// The handle types and their macros (`handle!`, `owned!`), in scope for the rest of this
// module and for capture.rs.
#[macro_use]
mod handles;
pub mod capture_guard;
pub mod gate;
pub mod libcuda;
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
    /// Called from inside a host function, where CUDA forbids CUDA calls (src/host/functions.rs).
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
        // SAFETY: a valid out-pointer; the driver owns the string it points it at: on success,
        // a NUL-terminated string that lives for the process.
        unsafe { (f(status, &mut p) == code::SUCCESS && !p.is_null()).then(|| CStr::from_ptr(p)) }
            .map(|text| text.to_string_lossy().into_owned())
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
        Some(api) if gate::initialized() => Ok(api),
        _ => init_slow(),
    }
}

#[cold]
#[inline(never)]
fn init_slow() -> Result<&'static Api> {
    if gate::in_host_function() {
        return Err(DriverError::InHostFunction);
    }
    match gate::gate() {
        Gate::Open => {}
        Gate::Forked => return Err(DriverError::Forked),
        Gate::Finalizing => return Err(DriverError::Finalizing),
    }
    // Here while a host function runs on another thread: nothing to do on this one.
    if let Some(api) = READY.get().filter(|_| gate::initialized_here()) {
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
    gate::mark_initialized();
    Ok(api)
}

/// The library names custream looks for, in order.
pub fn library_candidates() -> Vec<String> {
    libcuda::candidates()
}

/// cuDriverGetVersion, which needs no cuInit: e.g. 13000 for CUDA 13.0.
pub fn driver_version() -> Result<i32> {
    if gate::is_finalizing() {
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
    // SAFETY: the buffer and its length match; on success the driver wrote a NUL-terminated
    // name into it.
    let name = unsafe {
        check((api.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev))?;
        CStr::from_ptr(buf.as_ptr())
    };
    Ok(name.to_string_lossy().into_owned())
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
    unsafe {
        check((api.cuDeviceGetAttribute)(&mut major, MAJOR, dev))?;
        check((api.cuDeviceGetAttribute)(&mut minor, MINOR, dev))?;
    }
    Ok((major, minor))
}

// After `handle!`, which they use.
mod contexts;
pub use contexts::*;
use contexts::{in_context, in_context_if_needed, stream_priority_range};
mod streams;
pub use streams::*;
mod capture;
pub use capture::*;
mod green;
pub use green::*;
mod ipc;
pub use ipc::*;
mod memops;
pub use memops::*;
mod attributes;
pub use attributes::*;
mod callbacks;
pub use callbacks::*;

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
