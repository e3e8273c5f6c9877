//! The driver calls of IPC events (src/event/ipc.rs): an event another process can open, its
//! 64-byte handle, opening one, and the UUIDs that name a device the same in every process
//! (an ordinal depends on the process's `CUDA_VISIBLE_DEVICES`).

use super::*;

/// `CU_IPC_HANDLE_SIZE`.
pub const IPC_HANDLE_BYTES: usize = 64;

/// An interprocess event in `ctx`: `CU_EVENT_INTERPROCESS`, which CUDA allows only with
/// `CU_EVENT_DISABLE_TIMING`.
pub fn event_create_interprocess(ctx: Context) -> Result<OwnedEvent> {
    let api = init()?;
    let flags =
        cu::CUevent_flags::CU_EVENT_INTERPROCESS as c_uint | cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
    in_context(ctx, || {
        let mut ev: CUevent = null_mut();
        // SAFETY: a valid out-pointer; `ctx` is current.
        check(unsafe { (api.cuEventCreate)(&mut ev, flags) })?;
        Ok(OwnedEvent(EventHandle(ev)))
    })
}

/// The handle another process opens `ev`, an event of `ctx`, with (`cuIpcGetEventHandle`,
/// which answers CUDA_ERROR_INVALID_CONTEXT on a thread with no current context).
pub fn ipc_event_handle(ctx: Context, ev: EventHandle) -> Result<[u8; IPC_HANDLE_BYTES]> {
    let api = init()?;
    in_context(ctx, || {
        let mut handle = cu::CUipcEventHandle {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: a valid out-pointer; `ev` is live (the handle rule); `ctx` is current.
        check(unsafe { (api.cuIpcGetEventHandle)(&mut handle, ev.0) })?;
        Ok(handle.reserved.map(|b| b as u8))
    })
}

/// Open an event another process exported, in `ctx` (`cuIpcOpenEventHandle`). The event
/// behaves as one made with `CU_EVENT_DISABLE_TIMING`; destroying it (`OwnedEvent::destroy`)
/// closes this process's use of it and leaves the exporter's event as it is.
pub fn ipc_open_event(ctx: Context, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<OwnedEvent> {
    let api = init()?;
    let handle = cu::CUipcEventHandle {
        reserved: handle.map(|b| b as c_char),
    };
    in_context(ctx, || {
        let mut ev: CUevent = null_mut();
        // SAFETY: a valid out-pointer; the handle is passed by value (the driver validates it).
        check(unsafe { (api.cuIpcOpenEventHandle)(&mut ev, handle) })?;
        Ok(OwnedEvent(EventHandle(ev)))
    })
}

/// The UUID of device `ordinal` (`cuDeviceGetUuid_v2`), the same in every process.
pub fn device_uuid(ordinal: i32) -> Result<[u8; 16]> {
    let (api, dev) = device_get(ordinal)?;
    let mut uuid = cu::CUuuid { bytes: [0; 16] };
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuDeviceGetUuid_v2)(&mut uuid, dev) })?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// This process's ordinal of the device whose UUID is `uuid`, if it sees that device.
pub fn device_with_uuid(uuid: &[u8; 16]) -> Result<Option<i32>> {
    for ordinal in 0..device_count()? {
        if &device_uuid(ordinal)? == uuid {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

/// `CUDA_ERROR_INVALID_HANDLE` with custream's message: an IPC event whose exporter is gone
/// (named here, not by the driver: the check is made before any driver call).
pub fn invalid_handle(message: String) -> DriverError {
    refused(code::INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", message)
}

/// `CUDA_ERROR_INVALID_DEVICE` with custream's message: the exporter's device is not here.
pub fn invalid_device(message: String) -> DriverError {
    refused(code::INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", message)
}
