//! What `Event.from_ipc_handle()` opens, checked before the driver is asked: custream's own
//! `IpcEventHandle` (which names its exporter and its device), or any library's raw handle,
//! the driver's 64 bytes (`CUipcEventHandle`, `cudaIpcEventHandle_t`: PyTorch's
//! `Event.ipc_handle()`, CuPy's `runtime.ipcGetEventHandle()`, cuda.core's
//! `IPCEventDescriptor`), with the device it belongs to, which a raw handle does not name.
//! The C API's `Custream_EventFromIpcHandle` takes the raw handle and an ordinal through the
//! same checks.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

use crate::cpython::args::{int_repr, is_int_not_bool, short_repr};
use crate::driver::{self, IPC_HANDLE_BYTES};
use crate::event::ipc::IpcEventHandle;

/// What an importer opens.
pub enum Source<'py> {
    /// custream's handle: the exporter (watched) and its device (by UUID) come with it.
    Custream(Bound<'py, IpcEventHandle>),
    /// Another library's handle, on the device the caller named; nobody to watch.
    Raw {
        handle: [u8; IPC_HANDLE_BYTES],
        device: Device,
    },
}

/// The device a raw handle belongs to, as the caller named it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// An ordinal in this process's numbering.
    Ordinal(i32),
    /// The device's UUID (`cuDeviceGetUuid`), the same in every process.
    Uuid([u8; 16]),
}

/// What `handle` may be, for the error that refuses anything else.
const HANDLE_KINDS: &str = "a custream.IpcEventHandle (Event.ipc_handle()), the raw 64-byte CUDA IPC event \
     handle as bytes, bytearray or memoryview (PyTorch's Event.ipc_handle(), CuPy's \
     runtime.ipcGetEventHandle()), or a cuda.core IPCEventDescriptor";

/// What `device` may be, for the error that refuses anything else.
const DEVICE_KINDS: &str = "an int device ordinal (this process's numbering) or the device's UUID: a \
     uuid.UUID, 16 bytes, a string ('GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx', with or without \
     'GPU-'), or an object whose .bytes are the 16 (PyTorch's get_device_properties(d).uuid)";

/// `handle` and `device` of `Event.from_ipc_handle(handle, *, device=None)`.
pub fn source<'py>(handle: &Bound<'py, PyAny>, device: Option<&Bound<'py, PyAny>>) -> PyResult<Source<'py>> {
    const F: &str = "from_ipc_handle()";
    let device = device.filter(|d| !d.is_none());
    if let Ok(h) = handle.cast::<IpcEventHandle>() {
        if device.is_some() {
            return Err(PyValueError::new_err(format!(
                "{F} device must be None with a custream.IpcEventHandle: the handle names its device \
                 (found again by its UUID); device= is for a raw 64-byte CUDA handle"
            )));
        }
        return Ok(Source::Custream(h.clone()));
    }
    let raw = match bytes_like(handle)? {
        Some(bytes) => raw_handle(&bytes, F)?,
        None => match cuda_core_descriptor(handle)? {
            Some(raw) => raw,
            None => {
                return Err(PyTypeError::new_err(format!(
                    "{F} handle must be {HANDLE_KINDS}, got {}",
                    type_name(handle)
                )))
            }
        },
    };
    let Some(device) = device else {
        return Err(PyTypeError::new_err(format!(
            "{F} device is required with a raw CUDA IPC event handle, which does not say which device \
             its event is on: pass device= as {DEVICE_KINDS}"
        )));
    };
    Ok(Source::Raw {
        handle: raw,
        device: device_arg(device)?,
    })
}

/// The 64 bytes of a raw handle, or the error naming `fname`'s handle and its length.
pub fn raw_handle(bytes: &[u8], fname: &str) -> PyResult<[u8; IPC_HANDLE_BYTES]> {
    bytes.try_into().map_err(|_| {
        let hint = if bytes.starts_with(b"CSIPCEV1") {
            ": these are bytes(custream.IpcEventHandle), which IpcEventHandle.from_bytes() reads"
        } else {
            ""
        };
        length_error(bytes.len(), fname, hint)
    })
}

/// The error for a raw handle of `len` bytes (not 64).
pub fn length_error(len: usize, fname: &str, hint: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{fname} handle must be the {IPC_HANDLE_BYTES} bytes of a CUDA IPC event handle \
         (CUipcEventHandle, cudaIpcEventHandle_t), got {len} bytes{hint}"
    ))
}

/// A C caller's device: an ordinal, never negative.
pub fn ordinal_arg(device: i32, fname: &str) -> PyResult<Device> {
    if device < 0 {
        return Err(PyValueError::new_err(format!(
            "{fname} device must be a device ordinal (0 or more), got {device}"
        )));
    }
    Ok(Device::Ordinal(device))
}

impl Device {
    /// This process's ordinal of the device, which must exist here: asks the driver (the
    /// device count, or each device's UUID) and nothing else.
    pub fn ordinal(self, fname: &str) -> PyResult<i32> {
        match self {
            Device::Ordinal(d) => {
                let count = driver::device_count()?;
                if d < count {
                    return Ok(d);
                }
                Err(PyValueError::new_err(format!(
                    "{fname} device {d} does not exist: this process sees {count} device(s) \
                     (ordinals 0 to {}; CUDA_VISIBLE_DEVICES renumbers them)",
                    count - 1
                )))
            }
            Device::Uuid(uuid) => driver::device_with_uuid(&uuid)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{fname} device {} is not a device this process sees (CUDA_VISIBLE_DEVICES)",
                    uuid_text(&uuid)
                ))
            }),
        }
    }
}

/// A UUID as CUDA's tools write it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The `device` of a raw handle.
fn device_arg(v: &Bound<'_, PyAny>) -> PyResult<Device> {
    const F: &str = "from_ipc_handle()";
    if is_int_not_bool(v) {
        return match v.extract::<i64>() {
            Ok(d) if (0..=i32::MAX as i64).contains(&d) => Ok(Device::Ordinal(d as i32)),
            _ => Err(PyValueError::new_err(format!(
                "{F} device must be a non-negative device ordinal below 2**31, got {}",
                int_repr(v)
            ))),
        };
    }
    if let Ok(text) = v.cast::<PyString>() {
        return uuid_from_text(v.py(), &text.to_cow()?)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{F} device {} is not a device UUID ('GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx', with or \
                 without 'GPU-')",
                    short_repr(v)
                ))
            })?
            .map(Device::Uuid);
    }
    let bytes = match bytes_like(v)? {
        Some(bytes) => Some(bytes),
        // uuid.UUID's .bytes are bytes; PyTorch's _CUuuid's are a list of 16 ints.
        None if !v.is_instance_of::<pyo3::types::PyBool>() => match v.getattr("bytes") {
            Ok(attr) => Some(match bytes_like(&attr)? {
                Some(bytes) => bytes,
                None => attr.extract::<Vec<u8>>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{F} device's .bytes must be the device's 16-byte UUID, got {}",
                        type_name(&attr)
                    ))
                })?,
            }),
            Err(_) => None,
        },
        None => None,
    };
    match bytes {
        Some(bytes) => bytes.as_slice().try_into().map(Device::Uuid).map_err(|_| {
            PyValueError::new_err(format!(
                "{F} device as a UUID must be 16 bytes, got {} bytes",
                bytes.len()
            ))
        }),
        None => Err(PyTypeError::new_err(format!(
            "{F} device must be {DEVICE_KINDS}, got {}",
            type_name(v)
        ))),
    }
}

/// A UUID's text, with CUDA's `GPU-` (or `MIG-`) in front or not, read by Python's `uuid`:
/// None when it is not one.
fn uuid_from_text(py: Python<'_>, text: &str) -> Option<PyResult<[u8; 16]>> {
    let bare = text
        .strip_prefix("GPU-")
        .or_else(|| text.strip_prefix("MIG-"))
        .unwrap_or(text);
    let parsed = match py.import("uuid").and_then(|m| m.getattr("UUID")) {
        Ok(class) => class.call1((bare,)),
        Err(e) => return Some(Err(e)),
    };
    match parsed {
        Ok(u) => Some(u.getattr("bytes").and_then(|b| b.extract::<Vec<u8>>()).and_then(|b| {
            b.as_slice()
                .try_into()
                .map_err(|_| PyValueError::new_err("uuid.UUID.bytes"))
        })),
        Err(e) if e.is_instance_of::<PyValueError>(py) => None,
        Err(e) => Some(Err(e)),
    }
}

/// The contents of a bytes, bytearray or memoryview; None for anything else.
fn bytes_like(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Some(b.as_bytes().to_vec()));
    }
    if let Ok(b) = v.cast::<PyByteArray>() {
        return Ok(Some(b.to_vec()));
    }
    if v.cast::<PyMemoryView>().is_ok() {
        let copy = v.call_method0("tobytes")?;
        return Ok(Some(copy.cast::<PyBytes>()?.as_bytes().to_vec()));
    }
    Ok(None)
}

/// The driver's 64 bytes of a cuda.core `IPCEventDescriptor` (`Event.get_ipc_descriptor()`,
/// `Event.ipc_descriptor`), or None for anything else. cuda.core keeps them in a private
/// field; its pickling is what gives them out: `__reduce__()` is `(IPCEventDescriptor._init,
/// (the 64 bytes, blocking sync))` in every cuda.core release that has the class.
fn cuda_core_descriptor(v: &Bound<'_, PyAny>) -> PyResult<Option<[u8; IPC_HANDLE_BYTES]>> {
    let ty = v.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    if ty.name().map(|n| n.to_string()).unwrap_or_default() != "IPCEventDescriptor" || !module.starts_with("cuda.core")
    {
        return Ok(None);
    }
    let raw = v
        .call_method0("__reduce__")
        .and_then(|r| r.get_item(1))
        .and_then(|args| args.get_item(0))
        .ok()
        .and_then(|b| b.cast_into::<PyBytes>().ok())
        .and_then(|b| <[u8; IPC_HANDLE_BYTES]>::try_from(b.as_bytes()).ok());
    match raw {
        Some(raw) => Ok(Some(raw)),
        None => Err(PyTypeError::new_err(format!(
            "from_ipc_handle() handle: this {module}.IPCEventDescriptor does not pickle to the driver's \
             64 bytes as the cuda.core releases custream knows do; pass the raw 64-byte handle instead ({})",
            short_repr(v)
        ))),
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "<unknown type>".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_written_as_cudas_tools_write_them() {
        let uuid: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(uuid_text(&uuid), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }
}
