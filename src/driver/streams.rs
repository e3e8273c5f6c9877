//! The calls on streams and events: made, synchronized, queried, what a stream is (its
//! context, device, id, flags, priority), recorded and waited on.

use super::*;

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
    // SAFETY: a valid out-pointer; the handle is live (the handle rule). On success the
    // driver handed the context out, so it is not null.
    unsafe {
        check((api.cuStreamGetCtx)(h.0, &mut ctx))?;
        Context::from_raw(ctx.cast())
    }
    .ok_or_else(|| failed(code::INVALID_CONTEXT))
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
