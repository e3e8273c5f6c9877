//! The driver calls of green contexts (src/green/context.rs): a device's SMs split into
//! partitions, a green context over one, streams made in it, and the questions a stream of
//! anybody's can be asked (which green context, how many SMs). CUDA 12.4 added them; an older
//! driver gets a refusal that names the version needed, while `stream_green_context` answers
//! "none" there, since no stream of such a driver can be in one.
//!
//! The driver does not lock a green context against concurrent calls on it ("no internal
//! synchronization", cuGreenCtxCreate's documentation): src/green/context.rs serializes custream's
//! own calls on one.

use super::*;

pub use crate::driver::libcuda::DevResource;
use crate::driver::libcuda::Green;
use cudarc::driver::sys::{CUdevResourceDesc, CUgreenCtx};

/// The oldest driver with the green-context entry points.
pub const GREEN_DRIVER_VERSION: i32 = 12040;

/// `CU_GREEN_CTX_DEFAULT_STREAM`: required by cuGreenCtxCreate.
const DEFAULT_STREAM: c_uint = 1;

handle!(
    /// A CUDA green context (never null).
    GreenCtxHandle(CUgreenCtx)
);
owned!(
    /// A green context custream created and must destroy once.
    ///
    /// ```compile_fail,E0382
    /// fn done(g: custream::handles::OwnedGreenCtx) -> Result<(), custream::handles::DriverError> {
    ///     g.destroy()?;
    ///     g.destroy()
    /// }
    /// ```
    OwnedGreenCtx(GreenCtxHandle)
);

impl GreenCtxHandle {
    /// # Safety
    /// `raw` is 0 or a green context the driver handed out, kept alive by its owner for as
    /// long as the handle is used.
    pub unsafe fn from_raw(raw: u64) -> Option<GreenCtxHandle> {
        (raw != 0).then_some(GreenCtxHandle(raw as usize as CUgreenCtx))
    }

    pub fn as_u64(self) -> u64 {
        self.0 as usize as u64
    }
}

impl OwnedGreenCtx {
    /// Destroy the green context. Streams made in it must be destroyed first: the driver
    /// leaves them detached, not destroyed.
    pub fn destroy(self) -> Result<()> {
        let g = green()?;
        // SAFETY: an owned green context is live until this, its one destroy (consumed).
        check(unsafe { (g.cuGreenCtxDestroy)(self.0 .0) })
    }
}

/// The green-context entry points, or a refusal naming the driver version they need.
fn green() -> Result<&'static Green> {
    init()?;
    let version = driver_version()?;
    if version < GREEN_DRIVER_VERSION {
        return Err(no_green(version, None));
    }
    libcuda::green().map_err(|e| match e {
        LoadError::MissingSymbol { symbol, version } => no_green(version, Some(symbol)),
        other => DriverError::Unavailable(other),
    })
}

#[cold]
fn no_green(version: i32, missing: Option<&str>) -> DriverError {
    let lacks = missing.map(|s| format!(" (it has no {s})")).unwrap_or_default();
    refused(
        code::NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED",
        format!(
            "green contexts need a CUDA {} or newer driver; this one supports CUDA {}{lacks}: \
             update the NVIDIA driver",
            version_text(GREEN_DRIVER_VERSION),
            version_text(version)
        ),
    )
}

/// The number of SMs of device `ordinal` (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).
pub fn device_sm_count(ordinal: i32) -> Result<u32> {
    let (api, dev) = device_get(ordinal)?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe {
        (api.cuDeviceGetAttribute)(
            &mut n,
            cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            dev,
        )
    })?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// All the SMs of device `ordinal`, as a resource to split.
pub fn device_sm_resource(ordinal: i32) -> Result<DevResource> {
    let (_, dev) = device_get(ordinal)?;
    let g = green()?;
    let mut res = DevResource::zeroed();
    // SAFETY: a valid out-pointer to a whole CUdevResource.
    check(unsafe { (g.cuDeviceGetDevResource)(dev, &mut res, DevResource::RESOURCE_SM) })?;
    Ok(res)
}

/// `input` split into one group of at least `sm_count` SMs (rounded up as the driver requires)
/// and the SMs left over, disjoint; None when no such group fits in `input` (the driver makes
/// fewer groups than asked for then, or refuses the configuration).
pub fn sm_split(input: &DevResource, sm_count: u32) -> Result<Option<(DevResource, DevResource)>> {
    let g = green()?;
    let (mut group, mut rest) = (DevResource::zeroed(), DevResource::zeroed());
    let mut made: c_uint = 1;
    // SAFETY: room for the one group asked for and for the remainder; `input` is a whole
    // resource the driver filled.
    let status = unsafe { (g.cuDevSmResourceSplitByCount)(&mut group, &mut made, input, &mut rest, 0, sm_count) };
    if status == code::INVALID_RESOURCE_CONFIGURATION {
        return Ok(None);
    }
    check(status)?;
    Ok((made == 1).then_some((group, rest)))
}

/// A green context custream made, with what it was granted.
pub struct GreenMade {
    pub owned: OwnedGreenCtx,
    /// The SMs the driver granted (what the green context's own resource says).
    pub sm_count: u32,
    /// The context converted from it (cuCtxFromGreenCtx) and that context's id.
    pub context: Context,
    pub context_id: u64,
}

/// A green context over `resource` (an output of `sm_split`, or a device's whole resource)
/// on device `ordinal`, with its default stream as cuGreenCtxCreate requires. On failure
/// nothing is left made.
pub fn green_create(ordinal: i32, resource: &DevResource) -> Result<GreenMade> {
    let (_, dev) = device_get(ordinal)?;
    let g = green()?;
    let mut resource = *resource;
    let mut desc: CUdevResourceDesc = null_mut();
    let mut h: CUgreenCtx = null_mut();
    // SAFETY: valid out-pointers; one whole resource the driver filled, then the descriptor
    // the driver just made of it.
    unsafe {
        check((g.cuDevResourceGenerateDesc)(&mut desc, &mut resource, 1))?;
        check((g.cuGreenCtxCreate)(&mut h, desc, dev, DEFAULT_STREAM))?;
    }
    let owned = OwnedGreenCtx(GreenCtxHandle(h));
    let described = green_sm_count(owned.handle()).and_then(|sm| Ok((sm, green_context(owned.handle())?)));
    match described {
        Ok((sm_count, (context, context_id))) => Ok(GreenMade {
            owned,
            sm_count,
            context,
            context_id,
        }),
        Err(e) => {
            let _ = owned.destroy();
            Err(e)
        }
    }
}

/// The SMs a green context was given.
pub fn green_sm_count(h: GreenCtxHandle) -> Result<u32> {
    let g = green()?;
    let mut res = DevResource::zeroed();
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (g.cuGreenCtxGetDevResource)(h.0, &mut res, DevResource::RESOURCE_SM) })?;
    Ok(res.sm_count)
}

/// The context converted from a green context (what its streams report as theirs), and its id.
pub fn green_context(h: GreenCtxHandle) -> Result<(Context, u64)> {
    let g = green()?;
    let mut ctx: CUcontext = null_mut();
    // SAFETY: a valid out-pointer; the handle is live (the handle rule). On success the
    // driver handed the context out, so it is not null.
    let ctx = unsafe {
        check((g.cuCtxFromGreenCtx)(&mut ctx, h.0))?;
        Context::from_raw(ctx.cast())
    }
    .ok_or_else(|| failed(code::INVALID_CONTEXT))?;
    Ok((ctx, context_id(ctx)?))
}

/// The device of a context, found without changing the current context.
pub fn context_device(ctx: Context) -> Result<i32> {
    let api = init()?;
    in_context(ctx, || {
        let mut d: CUdevice = 0;
        // SAFETY: a valid out-pointer.
        check(unsafe { (api.cuCtxGetDevice)(&mut d) })?;
        Ok(d)
    })
}

/// The green context `ctx` was converted from (cuCtxFromGreenCtx), or None for any other
/// context: the driver's answer for the null stream while `ctx` is current.
pub fn context_green_context(ctx: Context) -> Result<Option<GreenCtxHandle>> {
    let g = green()?;
    in_context(ctx, || {
        let mut h: CUgreenCtx = null_mut();
        // SAFETY: a valid out-pointer; the null stream means the current context's.
        check(unsafe { (g.cuStreamGetGreenCtx)(null_mut(), &mut h) })?;
        Ok((!h.is_null()).then_some(GreenCtxHandle(h)))
    })
}

/// A stream in green context `h` of device `ordinal`. CUDA requires it to be non-blocking.
/// A priority out of the device's range is refused by name (the driver would clamp it).
pub fn green_stream_create(h: GreenCtxHandle, ordinal: i32, priority: i32) -> Result<OwnedStream> {
    let g = green()?;
    if priority != 0 {
        check_priority(priority, priority_range(ordinal)?)?;
    }
    let mut s: CUstream = null_mut();
    let flags = cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule); the call needs no
    // current context.
    check(unsafe { (g.cuGreenCtxStreamCreate)(&mut s, h.0, flags, priority) })?;
    Ok(OwnedStream(StreamHandle(s)))
}

/// The green context a stream (anybody's) was made in, or None. A driver without green
/// contexts answers None: none of its streams can be in one.
pub fn stream_green_context(h: StreamHandle) -> Result<Option<GreenCtxHandle>> {
    let Ok(g) = green() else {
        // init()'s own refusals (no driver, a fork) still count.
        init()?;
        return Ok(None);
    };
    let mut out: CUgreenCtx = null_mut();
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (g.cuStreamGetGreenCtx)(h.0, &mut out) })?;
    Ok((!out.is_null()).then_some(GreenCtxHandle(out)))
}
