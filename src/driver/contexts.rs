//! Contexts: the calling thread's current one and its device, a context's id and the check
//! that it was not reset, making one current for a call, and the primary contexts custream
//! retains (and keeps until exit); a device's priority range.

use super::*;

/// The calling thread's current context, if any.
pub fn current_context() -> Result<Option<Context>> {
    let api = init()?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: a valid out-pointer; on success the driver handed the context out (or null).
    unsafe {
        check((api.cuCtxGetCurrent)(&mut ctx))?;
        Ok(Context::from_raw(ctx.cast()))
    }
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
pub(super) fn in_context<R>(ctx: Context, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let _scope = ContextScope::enter(ctx)?;
    f()
}

/// `in_context`, without the push and pop when `ctx` is `current`, the calling thread's
/// current context (the usual case in a thread where CuPy, PyTorch or the runtime has been
/// used): the caller has asked for it already.
pub(super) fn in_context_if_needed<R>(
    ctx: Context,
    current: Option<Context>,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
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
    // SAFETY: a valid out-pointer; on success the driver handed the context out, so it is
    // not null.
    unsafe {
        check((api.cuDevicePrimaryCtxRetain)(&mut ctx, dev))?;
        Context::from_raw(ctx.cast())
    }
    .ok_or_else(|| failed(code::INVALID_CONTEXT))
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
pub(super) fn stream_priority_range(api: &Api) -> Result<(i32, i32)> {
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
