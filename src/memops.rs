//! Stream memory operations on the user's memory: `s.write_value(address, value, *,
//! width=32)` writes a 32- or 64-bit value once the work queued before it is done, and
//! `s.wait_value(address, value, *, width=32, op="geq", flush=False)` holds the work queued
//! after it until the word meets a condition (`cuStreamWriteValue*_v2`,
//! `cuStreamWaitValue*_v2`): the building block of a semaphore in memory another process or
//! device shares. Both become graph nodes in a capture, as the driver makes them.
//!
//! Arguments are checked before any driver call: the width (32 or 64), the value's range, the
//! condition's name, and the address (an int, an object with `__cuda_array_interface__`, or a
//! DLPack producer, whose device pointer is read from its capsule without importing any
//! library: alignment, size, read-only arrays, managed memory, devices other than CUDA's). Then
//! the driver is asked what it knows of the address (`cuPointerGetAttributes`: memory it does
//! not know, or host memory not mapped for the GPU, is refused before anything is queued;
//! mapped host memory is given to the GPU at its device address), and whether the device
//! supports what was asked (64-bit words, `NOR`, `flush`; a `CudaError` with
//! `CUDA_ERROR_NOT_SUPPORTED` naming the attribute where not).

use std::ffi::c_void;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyString, PyTuple};

use crate::cpython::args::{bool_arg, int_repr, is_int_not_bool, short_repr, Signature};
use crate::cpython::gil;
use crate::cpython::raw_call::Fastcall;
use crate::cpython::stream_object::StreamObject;
use crate::driver::{self, memory_type, MemOpSupport, WaitOp, Width};
use crate::host::queue_depth::{self, Gil};
use crate::object::lifecycle::{self, Managed};

static WRITE_SIG: Signature = Signature {
    name: "write_value",
    positional: &["address", "value"],
    keyword_only: &["width", "flush"],
    required: 2,
};

static WAIT_SIG: Signature = Signature {
    name: "wait_value",
    positional: &["address", "value"],
    keyword_only: &["width", "op", "flush"],
    required: 2,
};

/// Whether the operation writes the word (a read-only array is refused) or reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Write,
    Read,
}

/// `s.write_value(address, value, *, width=32, flush=False)`.
pub fn write_value(py: Python<'_>, s: StreamObject<'_>, args: &Fastcall<'_, '_>) -> PyResult<()> {
    const F: &str = "write_value";
    let [address, value, width, flush] = WRITE_SIG.parse_fastcall::<4>(args)?;
    let width = width_arg(width.as_ref(), F)?;
    let value = value_arg(value.as_ref(), width, F)?;
    let flush = bool_arg(flush.as_ref(), F, "flush", false)?;
    let address = address_arg(address.as_ref(), width, Access::Write, F)?;
    write(py, s, address, value, width, flush)
}

/// `s.wait_value(address, value, *, width=32, op="geq", flush=False)`.
pub fn wait_value(py: Python<'_>, s: StreamObject<'_>, args: &Fastcall<'_, '_>) -> PyResult<()> {
    const F: &str = "wait_value";
    let [address, value, width, op, flush] = WAIT_SIG.parse_fastcall::<5>(args)?;
    let width = width_arg(width.as_ref(), F)?;
    let value = value_arg(value.as_ref(), width, F)?;
    let op = op_arg(op.as_ref(), F)?;
    let flush = bool_arg(flush.as_ref(), F, "flush", false)?;
    let address = address_arg(address.as_ref(), width, Access::Read, F)?;
    wait(py, s, address, value, width, op, flush)
}

/// The write, once its arguments are known good.
pub fn write(py: Python<'_>, s: StreamObject<'_>, address: u64, value: u64, width: Width, flush: bool) -> PyResult<()> {
    const WHAT: &str = "write_value()";
    if s.is_closed() {
        return Err(lifecycle::closed_error(<StreamObject<'_> as Managed>::KIND, WHAT));
    }
    let address = gpu_address(py, s, address, width, "write_value")?;
    if width == Width::W64 {
        require(py, s, MemOpSupport::SixtyFourBit, "write_value() width=64")?;
    }
    if flush {
        require(py, s, MemOpSupport::Flush, "write_value() flush=True")?;
    }
    s.use_handle_py(py, WHAT, |h| {
        queue_depth::run(
            py,
            s,
            h,
            Gil::Brief,
            |_| true,
            move || driver::stream_write_value(h, address, value, width, flush),
        )
    })
}

/// The wait, once its arguments are known good.
pub fn wait(
    py: Python<'_>,
    s: StreamObject<'_>,
    address: u64,
    value: u64,
    width: Width,
    op: WaitOp,
    flush: bool,
) -> PyResult<()> {
    const WHAT: &str = "wait_value()";
    if s.is_closed() {
        return Err(lifecycle::closed_error(<StreamObject<'_> as Managed>::KIND, WHAT));
    }
    let address = gpu_address(py, s, address, width, "wait_value")?;
    if width == Width::W64 {
        require(py, s, MemOpSupport::SixtyFourBit, "wait_value() width=64")?;
    }
    if op == WaitOp::Nor {
        require(py, s, MemOpSupport::Nor, "wait_value() op='nor'")?;
    }
    if flush {
        require(py, s, MemOpSupport::Flush, "wait_value() flush=True")?;
    }
    s.use_handle_py(py, WHAT, |h| {
        queue_depth::run(
            py,
            s,
            h,
            Gil::Brief,
            |_| true,
            move || driver::stream_wait_value(h, address, value, width, op, flush),
        )
    })
}

/// The C API's write: the same checks, for arguments that come as C integers.
pub fn write_c(py: Python<'_>, s: StreamObject<'_>, address: u64, value: u64, width: i32, flush: bool) -> PyResult<()> {
    let width = width_c(width, "Custream_WriteValue")?;
    check_c(address, value, width, "Custream_WriteValue")?;
    write(py, s, address, value, width, flush)
}

/// The C API's wait; `op` is `CUstreamWaitValue_flags`'s value of the condition (0 to 3).
pub fn wait_c(
    py: Python<'_>,
    s: StreamObject<'_>,
    address: u64,
    value: u64,
    width: i32,
    op: i32,
    flush: bool,
) -> PyResult<()> {
    const F: &str = "Custream_WaitValue";
    let width = width_c(width, F)?;
    check_c(address, value, width, F)?;
    let op = match op {
        0 => WaitOp::Geq,
        1 => WaitOp::Eq,
        2 => WaitOp::And,
        3 => WaitOp::Nor,
        other => {
            return Err(PyValueError::new_err(format!(
                "{F}() op must be CUSTREAM_WAIT_GEQ, _EQ, _AND or _NOR (0 to 3), got {other}"
            )))
        }
    };
    wait(py, s, address, value, width, op, flush)
}

fn width_c(width: i32, fname: &str) -> PyResult<Width> {
    match width {
        32 => Ok(Width::W32),
        64 => Ok(Width::W64),
        other => Err(PyValueError::new_err(format!(
            "{fname}() width must be 32 or 64, got {other}"
        ))),
    }
}

fn check_c(address: u64, value: u64, width: Width, fname: &str) -> PyResult<()> {
    if width == Width::W32 && value > u64::from(u32::MAX) {
        return Err(PyValueError::new_err(format!(
            "{fname}() value {value} is out of range for width=32: it must be in [0, 2**32)"
        )));
    }
    check_alignment(address, width, fname)
}

// ---- arguments ---------------------------------------------------------------------------

#[inline]
fn width_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<Width> {
    let Some(v) = value else { return Ok(Width::W32) };
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{fname}() width must be 32 or 64, got {}",
            v.get_type().name()?
        )));
    }
    match v.extract::<i64>() {
        Ok(32) => Ok(Width::W32),
        Ok(64) => Ok(Width::W64),
        _ => Err(PyValueError::new_err(format!(
            "{fname}() width must be 32 or 64, got {}",
            int_repr(v)
        ))),
    }
}

#[inline]
fn value_arg(value: Option<&Bound<'_, PyAny>>, width: Width, fname: &str) -> PyResult<u64> {
    let Some(v) = value else {
        return Err(PyTypeError::new_err(format!(
            "{fname}() missing required argument 'value'"
        )));
    };
    if is_int_not_bool(v) {
        let fits = match width {
            Width::W32 => v.extract::<u32>().map(u64::from).ok(),
            Width::W64 => v.extract::<u64>().ok(),
        };
        if let Some(fits) = fits {
            return Ok(fits);
        }
    }
    Err(value_error(v, width, fname))
}

#[cold]
fn value_error(v: &Bound<'_, PyAny>, width: Width, fname: &str) -> PyErr {
    if !is_int_not_bool(v) {
        let kind = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return PyTypeError::new_err(format!("{fname}() value must be an int, got {kind}"));
    }
    let bits = if width == Width::W32 { 32 } else { 64 };
    PyValueError::new_err(format!(
        "{fname}() value {} is out of range for width={bits}: it must be in [0, 2**{bits})",
        int_repr(v)
    ))
}

fn op_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<WaitOp> {
    let Some(v) = value else { return Ok(WaitOp::Geq) };
    let text = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{fname}() op must be a str ('geq', 'eq', 'and' or 'nor'), got {}",
            v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    match text.to_str()? {
        "geq" => Ok(WaitOp::Geq),
        "eq" => Ok(WaitOp::Eq),
        "and" => Ok(WaitOp::And),
        "nor" => Ok(WaitOp::Nor),
        _ => Err(PyValueError::new_err(format!(
            "{fname}() op must be 'geq', 'eq', 'and' or 'nor', got {}",
            short_repr(v)
        ))),
    }
}

/// The address of `address` (an int, or an array's first byte), checked for the width.
fn address_arg(value: Option<&Bound<'_, PyAny>>, width: Width, access: Access, fname: &str) -> PyResult<u64> {
    let v = value.ok_or_else(|| PyTypeError::new_err(format!("{fname}() missing required argument 'address'")))?;
    let address = if is_int_not_bool(v) {
        match v.extract::<u64>() {
            Ok(a) if a != 0 => a,
            _ => return Err(address_int_error(v, fname)),
        }
    } else if let Some(iface) = attribute(v, intern!(v.py(), "__cuda_array_interface__"))? {
        from_array_interface(v, &iface, Some(width), access, fname)?
    } else if v.hasattr(intern!(v.py(), "__dlpack__"))? {
        from_dlpack(v, Some(width), fname)?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{fname}() address must be an int GPU address or an array with \
             __cuda_array_interface__ or __dlpack__ (CuPy, PyTorch, Numba), got {}",
            v.get_type().name()?
        )));
    };
    check_alignment(address, width, fname)?;
    Ok(address)
}

/// An address as `write_value` takes one (an int GPU address, or the first byte of an array
/// with `__cuda_array_interface__` or `__dlpack__`), for a use that needs no alignment and
/// only reads: an L2 access-policy window's base (src/stream/settings.rs).
pub fn address_of(v: &Bound<'_, PyAny>, fname: &str) -> PyResult<u64> {
    if is_int_not_bool(v) {
        return match v.extract::<u64>() {
            Ok(a) if a != 0 => Ok(a),
            _ => Err(address_int_error(v, fname)),
        };
    }
    if let Some(iface) = attribute(v, intern!(v.py(), "__cuda_array_interface__"))? {
        return from_array_interface(v, &iface, None, Access::Read, fname);
    }
    if v.hasattr(intern!(v.py(), "__dlpack__"))? {
        return from_dlpack(v, None, fname);
    }
    Err(PyTypeError::new_err(format!(
        "{fname}() address must be an int GPU address or an array with \
         __cuda_array_interface__ or __dlpack__ (CuPy, PyTorch, Numba), got {}",
        v.get_type().name()?
    )))
}

#[cold]
fn address_int_error(v: &Bound<'_, PyAny>, fname: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{fname}() address must be a GPU address in [1, 2**64), got {}",
        int_repr(v)
    ))
}

/// Whether `address` is a GPU address (not 0) aligned for a `width` operation.
#[inline]
fn aligned(address: u64, width: Width) -> bool {
    address != 0 && address.is_multiple_of(width.bytes())
}

#[inline]
fn check_alignment(address: u64, width: Width, fname: &str) -> PyResult<()> {
    if !aligned(address, width) {
        return Err(alignment_error(address, width, fname));
    }
    Ok(())
}

#[cold]
fn alignment_error(address: u64, width: Width, fname: &str) -> PyErr {
    if address == 0 {
        return PyValueError::new_err(format!("{fname}() address must be a GPU address in [1, 2**64), got 0"));
    }
    PyValueError::new_err(format!(
        "{fname}() address {address:#x} is not aligned to {} bytes, as a {}-bit stream memory \
         operation needs",
        width.bytes(),
        width.bytes() * 8
    ))
}

/// `obj.name`, or None when it has no such attribute (any other error propagates).
fn attribute<'py>(obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    match obj.getattr(name) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(obj.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The first byte of a `__cuda_array_interface__` array (version 3: `data` is
/// `(pointer, read_only)`, `strides` None for a C-contiguous array).
fn from_array_interface(
    obj: &Bound<'_, PyAny>,
    iface: &Bound<'_, PyAny>,
    width: Option<Width>,
    access: Access,
    fname: &str,
) -> PyResult<u64> {
    let kind = || obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    let bad = |what: &str| {
        PyTypeError::new_err(format!(
            "{fname}() address: the {} object's __cuda_array_interface__ {what}",
            kind()
        ))
    };
    let iface = iface.cast::<PyDict>().map_err(|_| bad("is not a dict"))?;
    let data = iface
        .get_item("data")?
        .ok_or_else(|| bad("has no 'data'"))?
        .cast_into::<PyTuple>()
        .map_err(|_| bad("'data' is not a (pointer, read_only) tuple"))?;
    if data.len() != 2 {
        return Err(bad("'data' is not a (pointer, read_only) tuple"));
    }
    let pointer: u64 = data.get_item(0)?.extract().map_err(|_| bad("pointer is not an int"))?;
    if access == Access::Write && data.get_item(1)?.is_truthy()? {
        return Err(PyValueError::new_err(format!(
            "{fname}() address is a read-only {} array: the stream would write to it",
            kind()
        )));
    }
    let shape: Vec<u64> = iface
        .get_item("shape")?
        .ok_or_else(|| bad("has no 'shape'"))?
        .extract()
        .map_err(|_| bad("'shape' is not a tuple of ints"))?;
    let typestr: String = iface
        .get_item("typestr")?
        .ok_or_else(|| bad("has no 'typestr'"))?
        .extract()
        .map_err(|_| bad("'typestr' is not a str"))?;
    let itemsize: u64 = typestr
        .get(2..)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad("has a bad 'typestr'"))?;
    let contiguous = iface.get_item("strides")?.is_none_or(|s| s.is_none());
    check_extent(pointer, &shape, itemsize, contiguous, width, fname)?;
    Ok(pointer)
}

/// Refuse an empty array, or one that does not hold the word (of `width`, if any) at its
/// first byte.
fn check_extent(
    pointer: u64,
    shape: &[u64],
    itemsize: u64,
    contiguous: bool,
    width: Option<Width>,
    fname: &str,
) -> PyResult<()> {
    let count = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .unwrap_or(u64::MAX);
    let nbytes = count.saturating_mul(itemsize);
    if pointer == 0 || count == 0 {
        return Err(PyValueError::new_err(format!(
            "{fname}() address is an empty array: it holds no memory to use"
        )));
    }
    let Some(width) = width else { return Ok(()) };
    let first_run = if contiguous { nbytes } else { itemsize };
    if first_run < width.bytes() {
        return Err(PyValueError::new_err(format!(
            "{fname}() address is an array of {nbytes} bytes{}: a {}-bit value needs {} bytes at its start",
            if contiguous { "" } else { " (not contiguous)" },
            width.bytes() * 8,
            width.bytes()
        )));
    }
    Ok(())
}

/// `DLDevice.device_type` values.
const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_CUDA_HOST: i32 = 3;
const DL_CUDA_MANAGED: i32 = 13;

/// DLPack's `DLTensor`, the first member of the `DLManagedTensor` a "dltensor" capsule holds
/// (dlpack.h, ABI-stable since DLPack 0.2).
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype_code: u8,
    dtype_bits: u8,
    dtype_lanes: u16,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// The first byte of a DLPack producer's tensor, read from the capsule `__dlpack__` returns
/// (not consumed: its destructor gives the tensor back), after `__dlpack_device__` said it is
/// CUDA memory or CPU memory (which the driver's check then accepts only page-locked and
/// mapped for the GPU, as a pinned tensor is).
fn from_dlpack(obj: &Bound<'_, PyAny>, width: Option<Width>, fname: &str) -> PyResult<u64> {
    let py = obj.py();
    let kind = || obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    let (device_type, _id): (i32, i32) =
        obj.call_method0(intern!(py, "__dlpack_device__"))?
            .extract()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "{fname}() address: the {} object's __dlpack_device__() is not a (type, id) pair",
                    kind()
                ))
            })?;
    match device_type {
        // CPU memory may be page-locked and mapped (a pinned tensor): the driver tells.
        DL_CUDA | DL_CUDA_HOST | DL_CPU => {}
        DL_CUDA_MANAGED => return Err(managed_error(fname)),
        other => {
            return Err(PyValueError::new_err(format!(
                "{fname}() address is not CUDA memory: the {} array's DLPack device type is {other}",
                kind()
            )))
        }
    }
    // On CUDA, stream=-1: no synchronization is asked of the producer (the DLPack protocol's
    // value); elsewhere the protocol wants no stream at all (torch refuses one for the CPU).
    let capsule = if device_type == DL_CUDA {
        let kwargs = PyDict::new(py);
        kwargs.set_item("stream", -1)?;
        match obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs)) {
            Ok(c) => c,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0(intern!(py, "__dlpack__"))?,
            Err(e) => return Err(e),
        }
    } else {
        obj.call_method0(intern!(py, "__dlpack__"))?
    };
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{fname}() address: the {} object's __dlpack__() did not return a capsule",
            kind()
        ))
    })?;
    let tensor = capsule.pointer_checked(Some(c"dltensor"))?.cast::<DlTensor>();
    // SAFETY: a capsule named "dltensor" holds a `DLManagedTensor *` whose first member is a
    // `DLTensor` (the DLPack protocol), alive while the capsule is (it is, till this returns);
    // `shape` and `strides` point to `ndim` values each (strides may be NULL: compact).
    let (address, shape, itemsize, contiguous) = unsafe {
        let t = tensor.as_ref();
        let ndim = usize::try_from(t.ndim).unwrap_or(0);
        let dims: Vec<i64> = if ndim == 0 || t.shape.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(t.shape, ndim).to_vec()
        };
        let contiguous = t.strides.is_null() || {
            let strides = std::slice::from_raw_parts(t.strides, ndim);
            let mut expected = 1i64;
            dims.iter().zip(strides).rev().all(|(&d, &s)| {
                let ok = d <= 1 || s == expected;
                expected = expected.saturating_mul(d);
                ok
            })
        };
        let itemsize = (u64::from(t.dtype_bits) * u64::from(t.dtype_lanes)).div_ceil(8);
        (
            (t.data as u64).wrapping_add(t.byte_offset),
            dims.into_iter()
                .map(|d| u64::try_from(d).unwrap_or(0))
                .collect::<Vec<_>>(),
            itemsize,
            contiguous,
        )
    };
    check_extent(address, &shape, itemsize, contiguous, width, fname)?;
    Ok(address)
}

fn managed_error(fname: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{fname}() address is managed memory (cuMemAllocManaged), which CUDA's stream memory \
         operations do not accept; use device memory, or host memory registered and mapped for the GPU"
    ))
}

// ---- what the driver says ------------------------------------------------------------------

/// The address the GPU reaches `address` at, after asking the driver what it is: memory it
/// does not know, managed memory, and host memory not mapped for the GPU are refused.
fn gpu_address(py: Python<'_>, s: StreamObject<'_>, address: u64, width: Width, fname: &str) -> PyResult<u64> {
    // The driver answers in the calling thread's context; a thread with none (the driver says
    // so) asks in the primary context of the stream's device (0 while it is not known), as the
    // runtime would. The usual case is one call.
    let info = match driver::pointer_info(address) {
        Err(driver::DriverError::Cuda { code, .. }) if code == driver::code::INVALID_CONTEXT => {
            let device = s.known_device().unwrap_or(0);
            gil::brief(py, move || {
                driver::in_primary_context(device, || driver::pointer_info(address))
            })?
        }
        other => other?,
    };
    if info.managed {
        return Err(managed_error(fname));
    }
    let gpu = match info.memory_type {
        memory_type::DEVICE | memory_type::UNIFIED => address,
        memory_type::HOST if info.device_pointer != 0 => info.device_pointer,
        memory_type::HOST => {
            return Err(PyValueError::new_err(format!(
                "{fname}() address {address:#x} is not GPU-accessible: it is page-locked host \
                 memory not mapped for the GPU; register it with CU_MEMHOSTREGISTER_DEVICEMAP \
                 (or allocate it with CU_MEMHOSTALLOC_DEVICEMAP)"
            )))
        }
        memory_type::ARRAY => {
            return Err(PyValueError::new_err(format!(
                "{fname}() address {address:#x} is a CUDA array, which has no linear address"
            )))
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "{fname}() address {address:#x} is not GPU-accessible: CUDA does not know it; use \
                 device memory, or host memory registered and mapped for the GPU (cuMemHostRegister \
                 with CU_MEMHOSTREGISTER_DEVICEMAP)"
            )))
        }
    };
    check_alignment(gpu, width, fname)?;
    Ok(gpu)
}

/// Refuse `what` on a device that does not support it, naming the attribute.
fn require(py: Python<'_>, s: StreamObject<'_>, support: MemOpSupport, what: &str) -> PyResult<()> {
    let device = s.device(py)?;
    if driver::supports(device, support)? {
        return Ok(());
    }
    Err(driver::not_supported(format!(
        "{what} is not supported on device {device} ({} is 0)",
        support.name()
    ))
    .into())
}
