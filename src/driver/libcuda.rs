//! Finding and opening the CUDA driver library and its table of entry points. Whether a call
//! may reach them now (fork, exit, host functions) is src/driver/gate.rs's.
//!
//! We open libcuda ourselves rather than through cudarc's loader (cudarc still gives the
//! types): cudarc tries `libcuda.so` before `libcuda.so.1`, so a CUDA toolkit's
//! `stubs/libcuda.so` on the library path hid the real driver, and it panics on a missing
//! symbol. Here the real driver's soname comes first, a stub is skipped when anything else
//! loads, `CUSTREAM_LIBCUDA=/path` picks one explicitly, and a missing entry point is an
//! error, never a panic. Nothing here touches Python.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    self as cu, CUcontext, CUdevResourceDesc, CUdevice, CUevent, CUgraph, CUgraphExec, CUgraphNode, CUgreenCtx,
    CUhostFn, CUstream, CUuserObject,
};
use libloading::Library;

/// Why the driver could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No library could be opened; holds the names looked for and any stub that was found.
    NotFound {
        looked_for: Vec<String>,
        stub: Option<String>,
    },
    /// The library lacks an entry point custream calls; holds its name and the driver version.
    MissingSymbol { symbol: &'static str, version: i32 },
}

/// The environment variable that names the driver library to use.
pub const LIBCUDA_ENV: &str = "CUSTREAM_LIBCUDA";

/// The names looked for, in order: `CUSTREAM_LIBCUDA` alone when it is set, else the
/// platform's names with the real driver's soname first.
pub fn candidates() -> Vec<String> {
    if let Some(path) = std::env::var_os(LIBCUDA_ENV).filter(|p| !p.is_empty()) {
        return vec![path.to_string_lossy().into_owned()];
    }
    let names: &[&str] = if cfg!(windows) {
        &["nvcuda.dll"]
    } else {
        &["libcuda.so.1", "libcuda.so"]
    };
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// A `CUresult` as the driver returns it. Not cudarc's enum: a code that a newer driver
/// adds would be an invalid value of it.
pub type Status = c_uint;

/// Declares the entry points as one table of function pointers, resolved when the library
/// is opened, so a call is one indirect jump and a missing symbol is found up front.
macro_rules! entry_points {
    ($table:ident { $($name:ident($($arg:ty),*);)* }) => {
        #[allow(non_snake_case)]
        pub struct $table {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> Status,)*
        }

        impl $table {
            /// # Safety
            /// `lib` must be a CUDA driver library: each symbol is taken to have the
            /// signature the CUDA headers give it.
            unsafe fn resolve(lib: &Library) -> Result<Self, &'static str> {
                Ok($table {
                    $($name: {
                        // SAFETY: the caller vouches for the library; the type is the
                        // documented signature of this entry point.
                        let symbol = unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) };
                        *symbol.map_err(|_| stringify!($name))?
                    },)*
                })
            }
        }
    };
}

// What every driver exports, needed before its version is known.
entry_points!(Boot {
    cuDriverGetVersion(*mut c_int);
    cuInit(c_uint);
    cuGetErrorName(Status, *mut *const c_char);
    cuGetErrorString(Status, *mut *const c_char);
});

// Everything else custream calls. cuCtxGetId (CUDA 12.0) is the newest.
entry_points!(Api {
    cuDeviceGetCount(*mut c_int);
    cuDeviceGet(*mut CUdevice, c_int);
    cuDeviceGetName(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2(*mut usize, CUdevice);
    cuDeviceGetAttribute(*mut c_int, cu::CUdevice_attribute, CUdevice);
    cuCtxGetCurrent(*mut CUcontext);
    cuCtxGetDevice(*mut CUdevice);
    cuCtxGetId(CUcontext, *mut c_ulonglong);
    cuCtxPushCurrent_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuCtxGetStreamPriorityRange(*mut c_int, *mut c_int);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuStreamCreateWithPriority(*mut CUstream, c_uint, c_int);
    cuStreamDestroy_v2(CUstream);
    cuStreamSynchronize(CUstream);
    cuStreamQuery(CUstream);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuStreamGetCtx(CUstream, *mut CUcontext);
    cuStreamGetFlags(CUstream, *mut c_uint);
    cuStreamGetPriority(CUstream, *mut c_int);
    // The stream's id (`Stream.id`), CUDA 12.0.
    cuStreamGetId(CUstream, *mut c_ulonglong);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventDestroy_v2(CUevent);
    cuEventRecord(CUevent, CUstream);
    cuEventSynchronize(CUevent);
    cuEventQuery(CUevent);
    cuEventElapsedTime(*mut f32, CUevent, CUevent);
    // Host functions and graph capture (src/host/functions.rs, src/graph.rs); all CUDA 11.4 or
    // older.
    cuLaunchHostFunc(CUstream, CUhostFn, *mut c_void);
    cuStreamBeginCapture_v2(CUstream, cu::CUstreamCaptureMode);
    cuStreamEndCapture(CUstream, *mut CUgraph);
    cuStreamIsCapturing(CUstream, *mut c_uint);
    cuThreadExchangeStreamCaptureMode(*mut c_uint);
    cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, c_ulonglong);
    cuGraphGetNodes(CUgraph, *mut CUgraphNode, *mut usize);
    cuGraphDestroy(CUgraph);
    cuGraphExecDestroy(CUgraphExec);
    cuGraphLaunch(CUgraphExec, CUstream);
    cuGraphUpload(CUgraphExec, CUstream);
    cuUserObjectCreate(*mut CUuserObject, *mut c_void, CUhostFn, c_uint, c_uint);
    cuUserObjectRelease(CUuserObject, c_uint);
    cuGraphRetainUserObject(CUgraph, CUuserObject, c_uint, c_uint);
    // The flags a stream waits on while custream's thread runs a Python host function
    // (src/host/semaphores.rs); the _v2 stream memory operations are CUDA 11.7.
    cuMemHostRegister_v2(*mut c_void, usize, c_uint);
    cuMemHostGetDevicePointer_v2(*mut cu::CUdeviceptr, *mut c_void, c_uint);
    cuStreamWaitValue32_v2(CUstream, cu::CUdeviceptr, u32, c_uint);
    cuStreamWriteValue32_v2(CUstream, cu::CUdeviceptr, u32, c_uint);
    cuStreamBatchMemOp_v2(CUstream, c_uint, *mut cu::CUstreamBatchMemOpParams, c_uint);
    // Stream memory operations on the user's memory (src/memops.rs), and IPC events
    // (src/event/ipc.rs); all CUDA 11.7 or older.
    cuStreamWaitValue64_v2(CUstream, cu::CUdeviceptr, u64, c_uint);
    cuStreamWriteValue64_v2(CUstream, cu::CUdeviceptr, u64, c_uint);
    cuPointerGetAttributes(c_uint, *mut cu::CUpointer_attribute, *mut *mut c_void, cu::CUdeviceptr);
    cuIpcGetEventHandle(*mut cu::CUipcEventHandle, CUevent);
    cuIpcOpenEventHandle(*mut CUevent, cu::CUipcEventHandle);
    cuDeviceGetUuid_v2(*mut cu::CUuuid, CUdevice);
});

// Green contexts (src/driver/green.rs), CUDA 12.4 and newer: a table of their own, so that a
// 12.0 to 12.3 driver still loads and only a green context is refused (by version).
entry_points!(Green {
    cuDeviceGetDevResource(CUdevice, *mut DevResource, c_uint);
    cuDevSmResourceSplitByCount(*mut DevResource, *mut c_uint, *const DevResource, *mut DevResource, c_uint, c_uint);
    cuDevResourceGenerateDesc(*mut CUdevResourceDesc, *mut DevResource, c_uint);
    cuGreenCtxCreate(*mut CUgreenCtx, CUdevResourceDesc, CUdevice, c_uint);
    cuGreenCtxDestroy(CUgreenCtx);
    cuGreenCtxGetDevResource(CUgreenCtx, *mut DevResource, c_uint);
    cuGreenCtxStreamCreate(*mut CUstream, CUgreenCtx, c_uint, c_int);
    cuCtxFromGreenCtx(*mut CUcontext, CUgreenCtx);
    cuStreamGetGreenCtx(CUstream, *mut CUgreenCtx);
});

// A stream's settings (src/driver/attributes.rs): every supported driver has them (CUDA 11.0),
// in a table of their own all the same, so that a library without them still loads and only a
// setting is refused, naming the entry point.
entry_points!(StreamAttributes {
    cuStreamSetAttribute(CUstream, c_uint, *const StreamAttrValue);
    cuStreamGetAttribute(CUstream, c_uint, *mut StreamAttrValue);
    cuStreamCopyAttributes(CUstream, CUstream);
});

// The stream callback the driver still calls after a fault, with the error
// (`Stream.keep_alive`, src/host/keep_alive.rs): deprecated beside cuLaunchHostFunc (whose
// functions a faulted context never runs) but in every driver; a table of its own, so that a
// library without it falls back to cuLaunchHostFunc.
entry_points!(Callbacks {
    cuStreamAddCallback(CUstream, StreamCallback, *mut c_void, c_uint);
});

/// `CUstreamCallback`, with the status as the plain integer the driver passes (a code newer
/// than cudarc's enum would be an invalid value of it).
pub type StreamCallback = Option<unsafe extern "C" fn(CUstream, Status, *mut c_void)>;

/// `CUstreamAttrValue` (`CUlaunchAttributeValue`): a union of 64 bytes in every CUDA 12 and 13
/// header, of which an attribute reads its own member; here the bytes, read and written by
/// src/driver/attributes.rs at the members' offsets.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct StreamAttrValue {
    pub bytes: [u8; 64],
}

const _: () = assert!(std::mem::size_of::<StreamAttrValue>() == 64);

// The device of a stream in one call, CUDA 12.8 and newer: a table of its own, so that an older
// driver still loads and `Stream.device` asks the stream's context instead.
entry_points!(StreamDevice {
    cuStreamGetDevice(CUstream, *mut CUdevice);
});

/// `CUdevResource`, as the driver reads and writes it: 144 bytes in every version. CUDA 12.4
/// ends it with a union of 48 bytes (`CUdevSmResource sm`, whose first field is `smCount`);
/// CUDA 13.1 takes 8 of them for a `nextResource` pointer, hence the alignment. Only the type
/// and the SM count are read; the rest is the driver's, copied as it is.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct DevResource {
    pub kind: c_uint,
    internal: [u8; 92],
    /// The union's `sm.smCount`, for a resource of type `RESOURCE_SM`.
    pub sm_count: c_uint,
    rest: [u8; 44],
}

const _: () = assert!(std::mem::size_of::<DevResource>() == 144);
const _: () = assert!(std::mem::offset_of!(DevResource, sm_count) == 96);

impl DevResource {
    /// `CU_DEV_RESOURCE_TYPE_SM`.
    pub const RESOURCE_SM: c_uint = 1;

    /// All zero, as the driver expects an output it fills (13.1's `nextResource` NULL).
    pub fn zeroed() -> Self {
        DevResource {
            kind: 0,
            internal: [0; 92],
            sm_count: 0,
            rest: [0; 44],
        }
    }
}

/// An opened driver library: kept open for the process, so its entry points stay valid.
struct Opened {
    _lib: Library,
    boot: Boot,
    /// The rest of the table, or the first entry point the library lacks.
    api: Result<Api, &'static str>,
    /// The green-context entry points, or the first one the library lacks.
    green: Result<Green, &'static str>,
    /// cuStreamGetDevice, where the library has it.
    stream_device: Option<StreamDevice>,
    /// The stream attribute calls, or the first one the library lacks.
    attributes: Result<StreamAttributes, &'static str>,
    /// cuStreamAddCallback, where the library has it.
    callbacks: Option<Callbacks>,
}

static OPENED: OnceLock<Result<Opened, LoadError>> = OnceLock::new();

/// Open the first candidate that is a driver. A library whose cuDriverGetVersion answers
/// CUDA_ERROR_STUB_LIBRARY (a toolkit's link stub) is passed over for any later one.
fn open() -> Result<&'static Opened, LoadError> {
    OPENED
        .get_or_init(|| {
            let looked_for = candidates();
            let mut stub = None;
            for name in &looked_for {
                // SAFETY: opening the CUDA driver runs only its initializers, which have no
                // preconditions; the library is kept open for the process.
                let Ok(lib) = (unsafe { Library::new(name) }) else {
                    continue;
                };
                // SAFETY: a library by this name is taken to be a CUDA driver (or its stub).
                let Ok(boot) = (unsafe { Boot::resolve(&lib) }) else {
                    continue;
                };
                let mut version: c_int = 0;
                // SAFETY: a valid out-pointer; cuDriverGetVersion needs no cuInit.
                if unsafe { (boot.cuDriverGetVersion)(&mut version) } == cu::CUresult::CUDA_ERROR_STUB_LIBRARY as Status
                {
                    stub.get_or_insert_with(|| name.clone());
                    continue;
                }
                // SAFETY: as for `Boot::resolve`: the library is a CUDA driver, whose tables
                // of entry points these are.
                let (api, green, stream_device, attributes, callbacks) = unsafe {
                    (
                        Api::resolve(&lib),
                        Green::resolve(&lib),
                        StreamDevice::resolve(&lib).ok(),
                        StreamAttributes::resolve(&lib),
                        Callbacks::resolve(&lib).ok(),
                    )
                };
                return Ok(Opened {
                    _lib: lib,
                    boot,
                    api,
                    green,
                    stream_device,
                    attributes,
                    callbacks,
                });
            }
            Err(LoadError::NotFound { looked_for, stub })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The entry points every driver has, for the version and the error texts.
pub fn boot() -> Result<&'static Boot, LoadError> {
    open().map(|o| &o.boot)
}

/// The full table, or the first entry point the library lacks with the driver's version.
pub fn api() -> Result<&'static Api, LoadError> {
    let opened = open()?;
    opened.api.as_ref().map_err(|&symbol| missing(opened, symbol))
}

fn missing(opened: &Opened, symbol: &'static str) -> LoadError {
    let mut version: c_int = 0;
    // SAFETY: a valid out-pointer; cuDriverGetVersion needs no cuInit.
    unsafe { (opened.boot.cuDriverGetVersion)(&mut version) };
    LoadError::MissingSymbol { symbol, version }
}

/// The green-context entry points, or the first one the library lacks with its version.
pub fn green() -> Result<&'static Green, LoadError> {
    let opened = open()?;
    opened.green.as_ref().map_err(|&symbol| missing(opened, symbol))
}

/// The stream attribute calls, or the first one the library lacks with its version.
pub fn attributes() -> Result<&'static StreamAttributes, LoadError> {
    let opened = open()?;
    opened.attributes.as_ref().map_err(|&symbol| missing(opened, symbol))
}

/// cuStreamAddCallback, where the opened library has it.
pub fn callbacks() -> Option<&'static Callbacks> {
    open().ok()?.callbacks.as_ref()
}

/// cuStreamGetDevice, where the opened library has it (CUDA 12.8 and newer).
pub fn stream_device() -> Option<&'static StreamDevice> {
    open().ok()?.stream_device.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_driver_soname_is_looked_for_first() {
        if std::env::var_os(LIBCUDA_ENV).is_some() {
            return;
        }
        let names = candidates();
        if cfg!(windows) {
            assert_eq!(names, ["nvcuda.dll"]);
        } else {
            assert_eq!(names, ["libcuda.so.1", "libcuda.so"]);
        }
    }
}
