//! The driver calls of stream memory operations on the user's memory (src/memops.rs): a
//! write of a 32- or 64-bit value, and a wait until one meets a condition, in stream order;
//! what the driver knows of an address (`cuPointerGetAttributes`); and the device attributes
//! that say which of them a device supports.

use std::sync::atomic::AtomicU8;

use super::*;

/// The width of a stream memory operation's word.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Width {
    W32,
    W64,
}

impl Width {
    pub fn bytes(self) -> u64 {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
}

/// The condition of a wait (`CUstreamWaitValue_flags`, whose values these are).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WaitOp {
    /// `(int)(*addr - value) >= 0`: a cyclic greater-or-equal, for counters that wrap.
    Geq = 0,
    /// `*addr == value`.
    Eq = 1,
    /// `(*addr & value) != 0`.
    And = 2,
    /// `~(*addr | value) != 0` (a device attribute says whether it is supported).
    Nor = 3,
}

/// `CU_STREAM_WAIT_VALUE_FLUSH`: the wait is followed by a flush of the remote writes that
/// reached the device before it was satisfied.
const WAIT_FLUSH: c_uint = cu::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_FLUSH as c_uint;

/// Queue on `h` a write of `value` to the word at the GPU address `address` (a write-value
/// node, in a capture). The _v2 API has one flag, the default. With `flush`, a flush of the
/// remote writes that reached the device (`CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES`) goes first,
/// in one batch: what RDMA peers wrote before is visible to whoever sees the value.
pub fn stream_write_value(h: StreamHandle, address: u64, value: u64, width: Width, flush: bool) -> Result<()> {
    let api = init()?;
    let flags = cu::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as c_uint;
    if flush {
        let mut ops = [flush_op(), write_op(address, value, width)];
        // SAFETY: two initialized operations that outlive the call (the driver copies them);
        // `h` is live (the handle rule); the address is checked as below.
        return check(unsafe { (api.cuStreamBatchMemOp_v2)(h.0, ops.len() as c_uint, ops.as_mut_ptr(), 0) });
    }
    // SAFETY: `h` is live (the handle rule). The GPU writes `address` when the stream gets
    // there; no host memory is touched by the call, and the caller has checked that the
    // driver knows the address (a wrong one faults the GPU's context, not this process).
    check(unsafe {
        match width {
            Width::W32 => (api.cuStreamWriteValue32_v2)(h.0, address, value as u32, flags),
            Width::W64 => (api.cuStreamWriteValue64_v2)(h.0, address, value, flags),
        }
    })
}

fn flush_op() -> cu::CUstreamBatchMemOpParams {
    let mut op = cu::CUstreamBatchMemOpParams { pad: [0; 6] };
    op.flushRemoteWrites = cu::CUstreamBatchMemOpParams_union_CUstreamMemOpFlushRemoteWritesParams_st {
        operation: cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES,
        flags: 0,
    };
    op
}

fn write_op(address: u64, value: u64, width: Width) -> cu::CUstreamBatchMemOpParams {
    use cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st__bindgen_ty_1 as V;
    let (operation, value) = match width {
        Width::W32 => (
            cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32,
            V { value: value as u32 },
        ),
        Width::W64 => (
            cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64,
            V { value64: value },
        ),
    };
    let mut op = cu::CUstreamBatchMemOpParams { pad: [0; 6] };
    op.writeValue = cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st {
        operation,
        address,
        __bindgen_anon_1: value,
        flags: cu::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as c_uint,
        alias: 0,
    };
    op
}

/// Queue on `h` a wait until the word at `address` meets `op` against `value` (a wait-value
/// node, in a capture), followed by a flush of remote writes when `flush`.
pub fn stream_wait_value(
    h: StreamHandle,
    address: u64,
    value: u64,
    width: Width,
    op: WaitOp,
    flush: bool,
) -> Result<()> {
    let api = init()?;
    let flags = op as c_uint | if flush { WAIT_FLUSH } else { 0 };
    // SAFETY: as for `stream_write_value`: the GPU reads `address` when the wait runs.
    check(unsafe {
        match width {
            Width::W32 => (api.cuStreamWaitValue32_v2)(h.0, address, value as u32, flags),
            Width::W64 => (api.cuStreamWaitValue64_v2)(h.0, address, value, flags),
        }
    })
}

/// What the driver knows of an address (`cuPointerGetAttributes`, which answers for any
/// address: one CUDA does not know has memory type 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PointerInfo {
    /// `CUmemorytype`: 1 host, 2 device, 3 array, 4 unified; 0 when CUDA does not know it.
    pub memory_type: u32,
    /// Allocated with cuMemAllocManaged, which stream memory operations refuse.
    pub managed: bool,
    /// For host memory: the address the GPU reaches it at, 0 if it is not mapped.
    pub device_pointer: u64,
    /// The device the memory lives on (-1 when unknown).
    pub device: i32,
}

pub mod memory_type {
    use super::cu::CUmemorytype as M;
    pub const HOST: u32 = M::CU_MEMORYTYPE_HOST as u32;
    pub const DEVICE: u32 = M::CU_MEMORYTYPE_DEVICE as u32;
    pub const ARRAY: u32 = M::CU_MEMORYTYPE_ARRAY as u32;
    pub const UNIFIED: u32 = M::CU_MEMORYTYPE_UNIFIED as u32;
}

/// What the driver knows of `address`, asked in one call. Needs no current context.
pub fn pointer_info(address: u64) -> Result<PointerInfo> {
    use cu::CUpointer_attribute::{
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL as ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER as DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_IS_MANAGED as MANAGED, CU_POINTER_ATTRIBUTE_MEMORY_TYPE as TYPE,
    };
    let api = init()?;
    let mut attributes = [TYPE, MANAGED, DEVICE_POINTER, ORDINAL];
    // Each answer in a zeroed word of its own, at least as large as the attribute's type (an
    // unsigned int, a bool, a pointer, an int): a bool's one byte reads as non-zero either
    // way round, and the default the driver leaves for an unknown address is zero (the
    // ordinal's is -2 on some drivers; it is only read for known memory).
    let mut memory_type: c_uint = 0;
    let mut managed: u64 = 0;
    let mut device_pointer: cu::CUdeviceptr = 0;
    let mut device: c_int = -1;
    let mut data: [*mut c_void; 4] = [
        (&mut memory_type as *mut c_uint).cast(),
        (&mut managed as *mut u64).cast(),
        (&mut device_pointer as *mut cu::CUdeviceptr).cast(),
        (&mut device as *mut c_int).cast(),
    ];
    // SAFETY: four attributes and four places, each large enough for its attribute's value
    // and alive for the call; the driver reads no memory at `address`.
    check(unsafe { (api.cuPointerGetAttributes)(4, attributes.as_mut_ptr(), data.as_mut_ptr(), address) })?;
    Ok(PointerInfo {
        memory_type,
        managed: managed != 0,
        device_pointer,
        device,
    })
}

/// Device attributes that say what stream memory operations a device supports.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemOpSupport {
    /// `cuStreamWriteValue64` / `cuStreamWaitValue64` (`..._64_BIT_STREAM_MEM_OPS`, the _v2 one).
    SixtyFourBit = 0,
    /// The wait's `NOR` condition (`..._STREAM_WAIT_VALUE_NOR`, the _v2 one).
    Nor = 1,
    /// The wait's flush of remote writes (`CAN_FLUSH_REMOTE_WRITES`).
    Flush = 2,
}

impl MemOpSupport {
    fn attribute(self) -> cu::CUdevice_attribute {
        use cu::CUdevice_attribute as A;
        match self {
            MemOpSupport::SixtyFourBit => A::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
            MemOpSupport::Nor => A::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR,
            MemOpSupport::Flush => A::CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES,
        }
    }

    /// The attribute's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            MemOpSupport::SixtyFourBit => "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS",
            MemOpSupport::Nor => "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR",
            MemOpSupport::Flush => "CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES",
        }
    }
}

/// The answers so far, by device and attribute: 0 unknown, 1 no, 2 yes. A device's answer
/// does not change while the process runs, so after the first call this is one load.
static SUPPORT: [[AtomicU8; 3]; 64] = [const { [const { AtomicU8::new(0) }; 3] }; 64];

/// Whether device `ordinal` supports `what`.
pub fn supports(ordinal: i32, what: MemOpSupport) -> Result<bool> {
    let cell = usize::try_from(ordinal)
        .ok()
        .and_then(|i| SUPPORT.get(i))
        .map(|row| &row[what as usize]);
    if let Some(known) = cell.map(|c| c.load(Ordering::Relaxed)).filter(|&k| k != 0) {
        return Ok(known == 2);
    }
    let (api, dev) = device_get(ordinal)?;
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { (api.cuDeviceGetAttribute)(&mut v, what.attribute(), dev) })?;
    if let Some(c) = cell {
        c.store(if v != 0 { 2 } else { 1 }, Ordering::Relaxed);
    }
    Ok(v != 0)
}

/// `CUDA_ERROR_NOT_SUPPORTED` with custream's message, naming the attribute that said so.
pub fn not_supported(message: String) -> DriverError {
    refused(code::NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", message)
}
