//! A stream's settings, which the driver keeps on the stream itself (`cuStreamSetAttribute`,
//! `cuStreamGetAttribute`, `cuStreamCopyAttributes`), so that every library launching on the
//! handle is bound by them: the synchronization policy (how a host thread waits for the
//! stream), the L2 access-policy window (an address range whose lines persist in L2 for
//! every kernel launched on the stream) and the memory-synchronization domain. The values are
//! checked by the caller (src/stream/settings.rs); a driver error names the attribute.

use libcuda::{StreamAttrValue, StreamAttributes};

use super::*;

/// `CUstreamAttrID` (`CUlaunchAttributeID`) values, CUDA 12's.
const ACCESS_POLICY_WINDOW: c_uint = 1;
const SYNCHRONIZATION_POLICY: c_uint = 3;
const MEM_SYNC_DOMAIN: c_uint = 10;

fn attribute_name(id: c_uint) -> &'static str {
    match id {
        ACCESS_POLICY_WINDOW => "CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW",
        SYNCHRONIZATION_POLICY => "CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY",
        _ => "CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN",
    }
}

/// `CUsynchronizationPolicy`: how a host thread waits for the stream's work.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SyncPolicy {
    Auto = 1,
    Spin = 2,
    Yield = 3,
    Blocking = 4,
}

impl SyncPolicy {
    /// Every policy, in the order of `NAMES`.
    pub const ALL: [SyncPolicy; 4] = [
        SyncPolicy::Auto,
        SyncPolicy::Spin,
        SyncPolicy::Yield,
        SyncPolicy::Blocking,
    ];
    /// The names custream gives them (`s.sync_policy`).
    pub const NAMES: [&'static str; 4] = ["auto", "spin", "yield", "blocking"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize - 1]
    }

    /// The driver's value; 0 (a stream never set, on some drivers) is the default, auto.
    fn from_raw(v: u32) -> Option<SyncPolicy> {
        match v {
            0 | 1 => Some(SyncPolicy::Auto),
            2..=4 => Some(Self::ALL[v as usize - 1]),
            _ => None,
        }
    }
}

/// `CUaccessProperty`: what an L2 line of the window does on a hit or a miss.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessProperty {
    Normal = 0,
    Streaming = 1,
    Persisting = 2,
}

impl AccessProperty {
    pub const ALL: [AccessProperty; 3] = [
        AccessProperty::Normal,
        AccessProperty::Streaming,
        AccessProperty::Persisting,
    ];
    pub const NAMES: [&'static str; 3] = ["normal", "streaming", "persisting"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn from_raw(v: u32) -> Option<AccessProperty> {
        Self::ALL.get(v as usize).copied()
    }
}

/// `CUaccessPolicyWindow`: `bytes` from `base`, of which a `hit_ratio` share gets the `hit`
/// property and the rest `miss`. `bytes == 0` is no window.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AccessPolicyWindow {
    pub base: u64,
    pub bytes: u64,
    pub hit_ratio: f32,
    pub hit: AccessProperty,
    pub miss: AccessProperty,
}

/// `CUlaunchMemSyncDomain`: the domain a memory fence of the stream's kernels orders against.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemSyncDomain {
    Default = 0,
    Remote = 1,
}

impl MemSyncDomain {
    pub const ALL: [MemSyncDomain; 2] = [MemSyncDomain::Default, MemSyncDomain::Remote];
    pub const NAMES: [&'static str; 2] = ["default", "remote"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

// The members' offsets in the union: `accessPolicyWindow` is { void *base_ptr; size_t
// num_bytes; float hitRatio; CUaccessProperty hitProp, missProp; }; `syncPolicy` and
// `memSyncDomain` are an enum at the start.
fn put_u32(v: &mut StreamAttrValue, at: usize, x: u32) {
    v.bytes[at..at + 4].copy_from_slice(&x.to_ne_bytes());
}

fn get_u32(v: &StreamAttrValue, at: usize) -> u32 {
    u32::from_ne_bytes(v.bytes[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn put_u64(v: &mut StreamAttrValue, at: usize, x: u64) {
    v.bytes[at..at + 8].copy_from_slice(&x.to_ne_bytes());
}

fn get_u64(v: &StreamAttrValue, at: usize) -> u64 {
    u64::from_ne_bytes(v.bytes[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// The table, or a CudaError naming the entry point the library lacks and what needed it.
fn table(what: &str) -> Result<&'static StreamAttributes> {
    init()?;
    libcuda::attributes().map_err(|e| match e {
        LoadError::MissingSymbol { symbol, version } => refused(
            code::NOT_SUPPORTED,
            "CUDA_ERROR_NOT_SUPPORTED",
            format!(
                "the CUDA driver (CUDA {}) has no {symbol}, which {what} needs",
                version_text(version)
            ),
        ),
        other => DriverError::Unavailable(other),
    })
}

/// The driver's error for `call` of attribute `id`, with both named in its message.
fn naming(err: DriverError, call: &str, id: c_uint) -> DriverError {
    match err {
        DriverError::Cuda { code, name, message } => DriverError::Cuda {
            code,
            name,
            message: format!("{call}({}): {message}", attribute_name(id)),
        },
        other => other,
    }
}

fn set(h: StreamHandle, id: c_uint, value: &StreamAttrValue, what: &str) -> Result<()> {
    let t = table(what)?;
    // SAFETY: `value` is a live 64-byte union the driver reads the attribute's member of;
    // `h` is live (the handle rule).
    check(unsafe { (t.cuStreamSetAttribute)(h.0, id, value) }).map_err(|e| naming(e, "cuStreamSetAttribute", id))
}

fn get(h: StreamHandle, id: c_uint, what: &str) -> Result<StreamAttrValue> {
    let t = table(what)?;
    let mut value = StreamAttrValue { bytes: [0; 64] };
    // SAFETY: a valid out-pointer to 64 bytes, the union's size; `h` is live (the handle rule).
    check(unsafe { (t.cuStreamGetAttribute)(h.0, id, &mut value) })
        .map_err(|e| naming(e, "cuStreamGetAttribute", id))?;
    Ok(value)
}

/// An answer of the driver's that is none of the values CUDA defines.
fn unknown(id: c_uint, raw: u32) -> DriverError {
    refused(
        code::NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED",
        format!(
            "cuStreamGetAttribute({}) answered {raw}, a value custream does not know",
            attribute_name(id)
        ),
    )
}

pub fn stream_sync_policy(h: StreamHandle) -> Result<SyncPolicy> {
    let v = get(h, SYNCHRONIZATION_POLICY, "Stream.sync_policy")?;
    let raw = get_u32(&v, 0);
    SyncPolicy::from_raw(raw).ok_or_else(|| unknown(SYNCHRONIZATION_POLICY, raw))
}

pub fn stream_set_sync_policy(h: StreamHandle, policy: SyncPolicy) -> Result<()> {
    let mut v = StreamAttrValue { bytes: [0; 64] };
    put_u32(&mut v, 0, policy as u32);
    set(h, SYNCHRONIZATION_POLICY, &v, "Stream.sync_policy")
}

/// The window, or None when none is set (0 bytes).
pub fn stream_access_policy_window(h: StreamHandle) -> Result<Option<AccessPolicyWindow>> {
    let v = get(h, ACCESS_POLICY_WINDOW, "Stream.access_policy_window")?;
    let bytes = get_u64(&v, 8);
    if bytes == 0 {
        return Ok(None);
    }
    let prop = |at| {
        let raw = get_u32(&v, at);
        AccessProperty::from_raw(raw).ok_or_else(|| unknown(ACCESS_POLICY_WINDOW, raw))
    };
    Ok(Some(AccessPolicyWindow {
        base: get_u64(&v, 0),
        bytes,
        hit_ratio: f32::from_bits(get_u32(&v, 16)),
        hit: prop(20)?,
        miss: prop(24)?,
    }))
}

/// Set the window, or clear it (None: a window of 0 bytes, as CUDA resets it).
pub fn stream_set_access_policy_window(h: StreamHandle, window: Option<AccessPolicyWindow>) -> Result<()> {
    let mut v = StreamAttrValue { bytes: [0; 64] };
    if let Some(w) = window {
        put_u64(&mut v, 0, w.base);
        put_u64(&mut v, 8, w.bytes);
        put_u32(&mut v, 16, w.hit_ratio.to_bits());
        put_u32(&mut v, 20, w.hit as u32);
        put_u32(&mut v, 24, w.miss as u32);
    }
    set(h, ACCESS_POLICY_WINDOW, &v, "Stream.set_access_policy_window()")
}

pub fn stream_mem_sync_domain(h: StreamHandle) -> Result<MemSyncDomain> {
    let v = get(h, MEM_SYNC_DOMAIN, "Stream.mem_sync_domain")?;
    match get_u32(&v, 0) {
        0 => Ok(MemSyncDomain::Default),
        1 => Ok(MemSyncDomain::Remote),
        raw => Err(unknown(MEM_SYNC_DOMAIN, raw)),
    }
}

pub fn stream_set_mem_sync_domain(h: StreamHandle, domain: MemSyncDomain) -> Result<()> {
    let mut v = StreamAttrValue { bytes: [0; 64] };
    put_u32(&mut v, 0, domain as u32);
    set(h, MEM_SYNC_DOMAIN, &v, "Stream.mem_sync_domain")
}

/// cuStreamCopyAttributes: `dst` gets every setting of `src`.
pub fn stream_copy_attributes(dst: StreamHandle, src: StreamHandle) -> Result<()> {
    let t = table("Stream.copy_settings_from()")?;
    // SAFETY: both handles are live (the handle rule).
    check(unsafe { (t.cuStreamCopyAttributes)(dst.0, src.0) }).map_err(|e| match e {
        DriverError::Cuda { code, name, message } => DriverError::Cuda {
            code,
            name,
            message: format!("cuStreamCopyAttributes: {message}"),
        },
        other => other,
    })
}

/// `CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE` of device `ordinal`: the most bytes a
/// window may span, 0 on a device without one (before compute capability 8.0).
pub fn max_access_policy_window(ordinal: i32) -> Result<u64> {
    let (api, dev) = device_get(ordinal)?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe {
        (api.cuDeviceGetAttribute)(
            &mut n,
            cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE,
            dev,
        )
    })?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_agree() {
        for (p, n) in SyncPolicy::ALL.iter().zip(SyncPolicy::NAMES) {
            assert_eq!(p.name(), n);
            assert_eq!(SyncPolicy::from_raw(*p as u32), Some(*p));
        }
        assert_eq!(SyncPolicy::from_raw(0), Some(SyncPolicy::Auto));
        assert_eq!(SyncPolicy::from_raw(5), None);
        for (p, n) in AccessProperty::ALL.iter().zip(AccessProperty::NAMES) {
            assert_eq!(p.name(), n);
            assert_eq!(AccessProperty::from_raw(*p as u32), Some(*p));
        }
        assert_eq!(MemSyncDomain::Remote.name(), "remote");
    }

    #[test]
    fn the_window_lies_where_cuda_puts_it() {
        // cudarc's CUaccessPolicyWindow_st, as bindgen read it from the CUDA headers.
        use std::mem::offset_of;
        type W = cu::CUaccessPolicyWindow_st;
        assert_eq!(offset_of!(W, base_ptr), 0);
        assert_eq!(offset_of!(W, num_bytes), 8);
        assert_eq!(offset_of!(W, hitRatio), 16);
        assert_eq!(offset_of!(W, hitProp), 20);
        assert_eq!(offset_of!(W, missProp), 24);
        assert_eq!(std::mem::size_of::<cu::CUstreamAttrValue>(), 64);
    }
}
