//! The C-API table exported as the capsule `custream._custream._C_API` (pxd/custream.h
//! declares it). Every entry runs inside `boundary`, so no panic crosses into C. Each
//! entry's contract (custream.h) is that of a C API call: the GIL is held and every
//! `PyObject *` is NULL or alive; src/object/memory.rs turns those pointers into safe views.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::mem::offset_of;
use std::ptr::NonNull;
use std::sync::OnceLock;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyFloat};

use crate::cpython::boundary::boundary;
use crate::cpython::interrupt::{timeout_arg, Deadline};
use crate::cpython::raw_call;
use crate::cpython::stream_object::{self, StreamObject};
use crate::cpython::stream_object::{
    custream_deleter_t, custream_green_ctx_t, custream_handle_t, custream_host_fn_t, custream_release_fn_t,
    CustreamCAPI, CustreamStream, CUSTREAM_ABI_VERSION, CUSTREAM_CAPSULE_NAME, GROWTH, STREAM_SIZE,
};
use crate::driver::IPC_HANDLE_BYTES;
use crate::event::ipc_source;
use crate::event::Event;
use crate::host;
use crate::memops;
use crate::object::make::{self, Parts};
use crate::object::protocol;
use crate::pool::StreamPool;
use crate::stream;
use crate::stream::current;

/// The table, and what a grown build appends to it (src/object/layout.rs's GROWTH).
#[repr(C)]
struct Table(CustreamCAPI, [u8; GROWTH]);
// SAFETY: the table is written once, before it is published, and only read afterwards;
// its pointers are to functions and to the type object, which live for the process.
unsafe impl Sync for Table {}
// SAFETY: as above.
unsafe impl Send for Table {}

static TABLE: OnceLock<Table> = OnceLock::new();

fn device_of(device: c_int) -> PyResult<Option<i32>> {
    match device {
        d if d >= 0 => Ok(Some(d)),
        -1 => Ok(None),
        d => Err(PyValueError::new_err(format!(
            "custream C API: device {d} is not an ordinal (use -1 for unknown)"
        ))),
    }
}

/// The Stream a C caller passed, by name of the entry for errors.
fn stream_arg<'a>(obj: Option<&'a Bound<'_, PyAny>>, fname: &str) -> PyResult<StreamObject<'a>> {
    let obj = obj.ok_or_else(|| PyTypeError::new_err(format!("{fname}() expected a custream.Stream, got NULL")))?;
    StreamObject::of(obj, &format!("{fname}()"))
}

/// `f`, its type spelled out for the closure that `c_entry!` makes, so that it is one for
/// every lifetime `raw_call::function_o` gives it.
fn entry<O, R, F>(f: F) -> F
where
    F: for<'a> FnOnce(Python<'a>, Option<Borrowed<'a, 'a, PyAny>>, O) -> R,
{
    f
}

/// An entry of the table that takes a `PyObject *`: the `unsafe extern "C" fn` C calls, with
/// the C signature given, running `|py, obj| body` through one call of `raw_call::function_o`
/// on the argument named after `on`; with `on obj, out |py, obj, out|`, the out-pointer
/// argument `out` is given to the body as an `Option<&mut T>` (the third argument of
/// `entry`'s closure: `(out,)`, or `()` without one). The body is safe code: only the
/// call and the out-pointer are under the one `unsafe` block, whose contract is the C API's.
macro_rules! c_entry {
    (
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty =
            on $obj:ident $(, $out:ident)? |$py:tt, $o:tt $(, $op:tt)?| $body:expr
    ) => {
        unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let body = entry(move |$py, $o, ($($op,)?)| $body);
            // SAFETY: the C API's contract (custream.h): the GIL is held, every `PyObject *`
            // is NULL or alive, and an out-pointer is NULL or a place for one value that
            // nothing else touches, all for the call.
            unsafe { raw_call::function_o($obj, |py, o| body(py, o, ($($out.as_mut(),)?))) }
        }
    };
}

c_entry!(fn as_stream(obj: *mut ffi::PyObject) -> *mut ffi::PyObject = on obj |_, obj| {
    boundary(|_| as_stream_of(obj.as_deref()))
});

fn as_stream_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<*mut ffi::PyObject> {
    let obj = obj.ok_or_else(|| PyTypeError::new_err("Custream_AsStream() expected an object, got NULL"))?;
    Ok(protocol::as_stream(obj)?.into_ptr())
}

c_entry!(
    fn from_handle(handle: custream_handle_t, device: c_int, owner: *mut ffi::PyObject) -> *mut ffi::PyObject =
        on owner |py, owner| boundary(|_| from_handle_of(py, handle, device, owner.as_deref()))
);

fn from_handle_of(
    py: Python<'_>,
    handle: custream_handle_t,
    device: c_int,
    owner: Option<&Bound<'_, PyAny>>,
) -> PyResult<*mut ffi::PyObject> {
    let owner = owner.filter(|o| !o.is_none()).cloned();
    Ok(make::make(py, Parts::borrowed(handle as usize as u64, device_of(device)?, owner)?)?.into_ptr())
}

unsafe extern "C" fn from_handle_with_deleter(
    handle: custream_handle_t,
    device: c_int,
    deleter: custream_deleter_t,
    ctx: *mut c_void,
) -> *mut ffi::PyObject {
    boundary(|py| {
        let mut parts = Parts::borrowed(handle as usize as u64, device_of(device)?, None)?;
        parts.deleter = deleter;
        parts.deleter_ctx = ctx;
        // On failure the deleter is not called: the handle stays the caller's.
        Ok(make::make(py, parts)?.into_ptr())
    })
}

c_entry!(fn check(obj: *mut ffi::PyObject) -> c_int = on obj |_, obj| {
    c_int::from(obj.is_some_and(|o| stream_object::is_stream(&o)))
});

c_entry!(fn synchronize(obj: *mut ffi::PyObject) -> c_int = on obj |py, obj| {
    boundary(|_| {
        stream_arg(obj.as_deref(), "Custream_Synchronize")?.synchronize_until(py, Deadline::NEVER)?;
        Ok(0)
    })
});

c_entry!(fn synchronize_timeout(obj: *mut ffi::PyObject, timeout: f64) -> c_int = on obj |py, obj| {
    synchronize_timeout_of(py, obj.as_deref(), timeout)
});

fn synchronize_timeout_of(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, timeout: f64) -> c_int {
    boundary(|_| {
        let s = stream_arg(obj, "Custream_SynchronizeTimeout")?;
        let deadline = timeout_arg(
            Some(&PyFloat::new(py, timeout).into_any()),
            "Custream_SynchronizeTimeout",
        )?;
        s.synchronize_until(py, deadline)?;
        Ok(0)
    })
}

c_entry!(
    fn handle_checked(obj: *mut ffi::PyObject, out: *mut custream_handle_t) -> c_int =
        on obj, out |_, obj, out| handle_checked_of(obj.as_deref(), out)
);

fn handle_checked_of(obj: Option<&Bound<'_, PyAny>>, out: Option<&mut custream_handle_t>) -> c_int {
    boundary(|_| {
        let s = stream_arg(obj, "Custream_HandleChecked")?;
        if s.is_closed() {
            return Err(stream::closed_error("handle"));
        }
        if let Some(out) = out {
            *out = s.handle_value() as usize as custream_handle_t;
        }
        Ok(0)
    })
}

unsafe extern "C" fn current_stream() -> *mut ffi::PyObject {
    boundary(|py| Ok(current::current(py)?.into_ptr()))
}

unsafe extern "C" fn default_stream(token: custream_handle_t) -> *mut ffi::PyObject {
    boundary(|py| Ok(make::default_stream(py, token as usize as u64)?.into_ptr()))
}

c_entry!(fn pool_get(pool: *mut ffi::PyObject) -> *mut ffi::PyObject = on pool |py, pool| {
    boundary(|_| pool_get_of(py, pool.as_deref()))
});

fn pool_get_of(py: Python<'_>, pool: Option<&Bound<'_, PyAny>>) -> PyResult<*mut ffi::PyObject> {
    let pool =
        pool.ok_or_else(|| PyTypeError::new_err("Custream_PoolGet() expected a custream.StreamPool, got NULL"))?;
    let pool = pool.cast::<StreamPool>().map_err(|_| {
        PyTypeError::new_err(format!(
            "Custream_PoolGet() expected a custream.StreamPool, got {}",
            pool.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    Ok(pool.get().get(py, 0)?.into_ptr())
}

c_entry!(
    fn launch_host_func(obj: *mut ffi::PyObject, f: custream_host_fn_t, user: *mut c_void) -> c_int =
        on obj |py, obj| boundary(|_| {
            let s = stream_arg(obj.as_deref(), "Custream_LaunchHostFunc")?;
            let f = f.ok_or_else(|| PyValueError::new_err("Custream_LaunchHostFunc() fn is NULL"))?;
            host::functions::launch_c(py, s, f, user)?;
            Ok(0)
        })
);

c_entry!(fn is_capturing(obj: *mut ffi::PyObject) -> c_int = on obj |py, obj| {
    boundary(|_| Ok(c_int::from(stream_arg(obj.as_deref(), "Custream_IsCapturing")?.is_capturing(py)?)))
});

c_entry!(
    fn green_context(obj: *mut ffi::PyObject, out: *mut custream_green_ctx_t) -> c_int =
        on obj, out |py, obj, out| green_context_of(py, obj.as_deref(), out)
);

fn green_context_of(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, out: Option<&mut custream_green_ctx_t>) -> c_int {
    boundary(|_| {
        let gc = stream_arg(obj, "Custream_GreenContext")?.green_context(py)?;
        if let Some(out) = out {
            *out = gc.map_or(0, |gc| gc.get().view().as_u64()) as usize as custream_green_ctx_t;
        }
        Ok(0)
    })
}

c_entry!(
    fn sm_count(obj: *mut ffi::PyObject, out: *mut c_uint) -> c_int =
        on obj, out |py, obj, out| sm_count_of(py, obj.as_deref(), out)
);

fn sm_count_of(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, out: Option<&mut c_uint>) -> c_int {
    boundary(|_| {
        let n = stream_arg(obj, "Custream_SmCount")?.sm_count(py)?;
        if let Some(out) = out {
            *out = n;
        }
        Ok(0)
    })
}

c_entry!(
    fn stream_id(obj: *mut ffi::PyObject, out: *mut std::ffi::c_ulonglong) -> c_int =
        on obj, out |py, obj, out| stream_id_of(py, obj.as_deref(), out)
);

fn stream_id_of(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, out: Option<&mut std::ffi::c_ulonglong>) -> c_int {
    boundary(|_| {
        let id = stream_arg(obj, "Custream_StreamId")?.id_value(py)?;
        if let Some(out) = out {
            *out = id;
        }
        Ok(0)
    })
}

c_entry!(
    fn stream_device(obj: *mut ffi::PyObject, out: *mut c_int) -> c_int =
        on obj, out |py, obj, out| stream_device_of(py, obj.as_deref(), out)
);

fn stream_device_of(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, out: Option<&mut c_int>) -> c_int {
    boundary(|_| {
        let d = stream_arg(obj, "Custream_StreamDevice")?.device(py)?;
        if let Some(out) = out {
            *out = d;
        }
        Ok(0)
    })
}

c_entry!(
    fn write_value(obj: *mut ffi::PyObject, address: u64, value: u64, width: c_int, flush: c_int) -> c_int =
        on obj |py, obj| boundary(|_| {
            let s = stream_arg(obj.as_deref(), "Custream_WriteValue")?;
            memops::write_c(py, s, address, value, width, flush != 0)?;
            Ok(0)
        })
);

c_entry!(
    fn wait_value(obj: *mut ffi::PyObject, address: u64, value: u64, width: c_int, op: c_int, flush: c_int) -> c_int =
        on obj |py, obj| boundary(|_| {
            let s = stream_arg(obj.as_deref(), "Custream_WaitValue")?;
            memops::wait_c(py, s, address, value, width, op, flush != 0)?;
            Ok(0)
        })
);

unsafe extern "C" fn event_from_ipc_handle(handle: *const c_void, size: usize, device: c_int) -> *mut ffi::PyObject {
    const F: &str = "Custream_EventFromIpcHandle()";
    boundary(|py| {
        if handle.is_null() {
            return Err(PyValueError::new_err(format!(
                "{F} handle must point to the 64 bytes of a CUDA IPC event handle, got NULL"
            )));
        }
        if size != IPC_HANDLE_BYTES {
            return Err(ipc_source::length_error(size, F, ""));
        }
        // SAFETY: the C API's contract (custream.h): a non-NULL `handle` points to `size`
        // readable bytes, alive for the call, and `size` is 64 here; they are copied at once.
        let raw: [u8; IPC_HANDLE_BYTES] = unsafe { std::ptr::read_unaligned(handle.cast()) };
        let device = ipc_source::ordinal_arg(device, F)?;
        Ok(Bound::new(py, Event::open_raw_ipc(py, raw, device, F)?)?.into_ptr())
    })
}

c_entry!(
    fn release_after(obj: *mut ffi::PyObject, f: custream_release_fn_t, ctx: *mut c_void) -> c_int =
        on obj |py, obj| boundary(|_| {
            let f = f.ok_or_else(|| PyValueError::new_err("Custream_ReleaseAfter() fn is NULL"))?;
            // From here `f(ctx)` is called once whatever happens (custream.h).
            let s = match stream_arg(obj.as_deref(), "Custream_ReleaseAfter") {
                Ok(s) => s,
                Err(e) => {
                    host::keep_alive::release_c_now(f, ctx);
                    return Err(e);
                }
            };
            host::keep_alive::release_after_c(py, s, f, ctx)?;
            Ok(0)
        })
);

/// The capsule holding the table; the table lives for the process.
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let table = TABLE.get_or_init(|| {
        let offset = |o: usize| o as u32;
        Table(
            CustreamCAPI {
                abi_version: CUSTREAM_ABI_VERSION,
                api_size: size_of::<Table>() as u32,
                stream_size: STREAM_SIZE as u32,
                reserved: 0,
                StreamType: stream_object::stream_type_ptr(),
                as_stream: Some(as_stream),
                from_handle: Some(from_handle),
                from_handle_with_deleter: Some(from_handle_with_deleter),
                check: Some(check),
                synchronize: Some(synchronize),
                handle_checked: Some(handle_checked),
                current_stream: Some(current_stream),
                default_stream: Some(default_stream),
                pool_get: Some(pool_get),
                launch_host_func: Some(launch_host_func),
                is_capturing: Some(is_capturing),
                green_context: Some(green_context),
                sm_count: Some(sm_count),
                handle_offset: offset(offset_of!(CustreamStream, handle)),
                flags_offset: offset(offset_of!(CustreamStream, flags)),
                state_offset: offset(offset_of!(CustreamStream, state)),
                device_offset: offset(offset_of!(CustreamStream, device)),
                priority_offset: offset(offset_of!(CustreamStream, priority)),
                reserved2: 0,
                synchronize_timeout: Some(synchronize_timeout),
                stream_id: Some(stream_id),
                stream_device: Some(stream_device),
                write_value: Some(write_value),
                wait_value: Some(wait_value),
                event_from_ipc_handle: Some(event_from_ipc_handle),
                release_after: Some(release_after),
            },
            [0; GROWTH],
        )
    });
    let name = CStr::from_bytes_with_nul(CUSTREAM_CAPSULE_NAME).map_err(|e| PyValueError::new_err(e.to_string()))?;
    // SAFETY: the table lives for the process, as the capsule's readers need.
    unsafe { PyCapsule::new_with_pointer(py, NonNull::from(&table.0).cast(), name) }
}
