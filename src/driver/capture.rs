//! The driver calls of host functions and graph capture (src/host/functions.rs, src/graph.rs),
//! over the same typed handles as the rest of the driver layer.

use super::*;

/// Driver status codes of capture, by name.
pub mod capture_code {
    use super::{cu::CUresult as R, Status};
    pub const NOT_PERMITTED: Status = R::CUDA_ERROR_NOT_PERMITTED as Status;
    pub const UNSUPPORTED: Status = R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED as Status;
    pub const IMPLICIT: Status = R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT as Status;
    pub const CAPTURED_EVENT: Status = R::CUDA_ERROR_CAPTURED_EVENT as Status;
}

/// An error of the driver's kind, with custream's message: for a call custream refuses
/// rather than let the driver fail it (and invalidate a capture as it does).
pub fn refusal(status: Status, message: String) -> DriverError {
    let name = match failed(status) {
        DriverError::Cuda { name, .. } => name,
        _ => format!("CUDA_ERROR_{status}"),
    };
    refused(status, &name, message)
}

handle!(
    /// A CUDA graph (the result of a capture).
    GraphHandle(CUgraph)
);
handle!(
    /// An instantiated, executable CUDA graph.
    GraphExecHandle(CUgraphExec)
);
handle!(
    /// A CUDA user object: a pointer and its destructor, owned by graphs.
    UserObject(CUuserObject)
);

owned!(
    /// A graph a capture ended in, destroyed once.
    OwnedGraph(GraphHandle)
);
owned!(
    /// An executable graph custream instantiated, destroyed once, in its context.
    OwnedGraphExec(GraphExecHandle)
);

impl OwnedGraph {
    pub fn destroy(self) -> Result<()> {
        let api = init()?;
        // SAFETY: an owned graph is live until this, its one destroy (it is consumed).
        check(unsafe { (api.cuGraphDestroy)((self.0).0) })
    }
}

/// An executable graph in flight is freed by the driver once its launches complete.
impl OwnedGraphExec {
    pub fn destroy(self, ctx: Context) -> Result<()> {
        let api = init()?;
        // SAFETY: an owned executable graph is live until this, its one destroy (consumed).
        in_context(ctx, || check(unsafe { (api.cuGraphExecDestroy)((self.0).0) }))
    }
}

impl GraphExecHandle {
    pub fn as_u64(self) -> u64 {
        self.0 as usize as u64
    }
}

/// A stream's capture mode (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    Global,
    ThreadLocal,
    Relaxed,
}

impl CaptureMode {
    fn raw(self) -> cu::CUstreamCaptureMode {
        use cu::CUstreamCaptureMode as M;
        match self {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// What `cuStreamIsCapturing` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureStatus {
    None,
    Active,
    /// Still capturing, but an illegal call invalidated it: only ending it is left.
    Invalidated,
}

/// Queue `f(user)` on the stream: the driver runs it on one of its threads once the work
/// queued before it is done (or adds a host node, when the stream is capturing).
///
/// # Safety
/// `f` must be safe to call once with `user` from a thread of the driver's, whenever that
/// happens (never, if the process exits first), and must make no CUDA call.
pub unsafe fn launch_host_func(h: StreamHandle, f: unsafe extern "C" fn(*mut c_void), user: *mut c_void) -> Result<()> {
    let api = init()?;
    // SAFETY: `h` is live (the handle rule); the caller vouches for `f` and `user`.
    check(unsafe { (api.cuLaunchHostFunc)(h.0, Some(f), user) })
}

pub fn stream_begin_capture(h: StreamHandle, mode: CaptureMode) -> Result<()> {
    let api = init()?;
    // SAFETY: the handle is live (the handle rule).
    check(unsafe { (api.cuStreamBeginCapture_v2)(h.0, mode.raw()) })
}

/// End the capture on `h`: the graph it captured, which the caller destroys.
pub fn stream_end_capture(h: StreamHandle) -> Result<OwnedGraph> {
    let api = init()?;
    let mut g: CUgraph = null_mut();
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamEndCapture)(h.0, &mut g) })?;
    Ok(OwnedGraph(GraphHandle(g)))
}

/// Whether the stream is capturing. The legacy default stream answers
/// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream of its context captures.
pub fn stream_capture_status(h: StreamHandle) -> Result<CaptureStatus> {
    let api = init()?;
    let mut status: c_uint = 0;
    // SAFETY: a valid out-pointer; the handle is live (the handle rule).
    check(unsafe { (api.cuStreamIsCapturing)(h.0, &mut status) })?;
    Ok(match status {
        0 => CaptureStatus::None,
        1 => CaptureStatus::Active,
        _ => CaptureStatus::Invalidated,
    })
}

/// The calling thread's capture interaction mode set to `mode` until this is dropped, which
/// puts back the one it had. The mode is the thread's: the scope is `!Send`, so it is dropped
/// on the thread that entered it.
pub struct CaptureModeScope {
    api: &'static Api,
    previous: c_uint,
    _thread: PhantomData<*const ()>,
}

impl CaptureModeScope {
    pub fn enter(mode: CaptureMode) -> Result<CaptureModeScope> {
        let api = init()?;
        let mut previous = mode.raw() as c_uint;
        // SAFETY: a valid in/out pointer.
        check(unsafe { (api.cuThreadExchangeStreamCaptureMode)(&mut previous) })?;
        Ok(CaptureModeScope {
            api,
            previous,
            _thread: PhantomData,
        })
    }
}

impl Drop for CaptureModeScope {
    fn drop(&mut self) {
        // SAFETY: as in `enter`; puts back what was there.
        unsafe { (self.api.cuThreadExchangeStreamCaptureMode)(&mut self.previous) };
    }
}

/// Instantiate `g` in `ctx`; `g` stays the caller's.
pub fn graph_instantiate(ctx: Context, g: GraphHandle) -> Result<OwnedGraphExec> {
    let api = init()?;
    in_context(ctx, || {
        let mut exec: CUgraphExec = null_mut();
        // SAFETY: a valid out-pointer; `g` is live (the handle rule: the caller's owned graph).
        check(unsafe { (api.cuGraphInstantiateWithFlags)(&mut exec, g.0, 0) })?;
        Ok(OwnedGraphExec(GraphExecHandle(exec)))
    })
}

pub fn graph_node_count(g: GraphHandle) -> Result<usize> {
    let api = init()?;
    let mut n = 0usize;
    // SAFETY: a null node array asks for the count only; a valid out-pointer.
    check(unsafe { (api.cuGraphGetNodes)(g.0, null_mut(), &mut n) })?;
    Ok(n)
}

pub fn graph_launch(exec: GraphExecHandle, h: StreamHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: both handles are live (the handle rule).
    check(unsafe { (api.cuGraphLaunch)(exec.0, h.0) })
}

pub fn graph_upload(exec: GraphExecHandle, h: StreamHandle) -> Result<()> {
    let api = init()?;
    // SAFETY: both handles are live (the handle rule).
    check(unsafe { (api.cuGraphUpload)(exec.0, h.0) })
}

/// Give up our reference to `obj`.
pub fn user_object_release(obj: UserObject) -> Result<()> {
    let api = init()?;
    // SAFETY: releases the one reference the caller holds.
    check(unsafe { (api.cuUserObjectRelease)(obj.0, 1) })
}

/// Hand our reference to `obj` over to `g` (and so to what is instantiated from it).
pub fn graph_take_user_object(g: GraphHandle, obj: UserObject) -> Result<()> {
    let api = init()?;
    let moved = cu::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as c_uint;
    // SAFETY: moves the one reference the caller holds; `g` is live (the handle rule).
    check(unsafe { (api.cuGraphRetainUserObject)(g.0, obj.0, 1, moved) })
}

/// Register `bytes` of host memory at `page` (page-aligned, the caller's for the life of the
/// process) as page-locked and mapped for the GPU, in `ctx` and every other context
/// (portable): the address the GPU reads it at. A reset of `ctx` drops the registration,
/// not the memory.
///
/// # Safety
/// `page` must point to `bytes` of memory that stays allocated for the life of the process.
pub unsafe fn host_register_mapped(ctx: Context, page: *mut c_void, bytes: usize) -> Result<u64> {
    let api = init()?;
    in_context(ctx, || {
        let flags = cu::CU_MEMHOSTREGISTER_PORTABLE | cu::CU_MEMHOSTREGISTER_DEVICEMAP;
        let mut device: cu::CUdeviceptr = 0;
        // SAFETY: the caller vouches that the memory is allocated and stays so; then a valid
        // out-pointer, and `page` registered just now.
        unsafe {
            check((api.cuMemHostRegister_v2)(page, bytes, flags))?;
            check((api.cuMemHostGetDevicePointer_v2)(&mut device, page, 0))?;
        }
        Ok(device)
    })
}

/// Queue on `h` a wait until the 32-bit word at the GPU address `word` equals `value` (a
/// wait-value node, in a capture). The caller keeps `word` mapped (src/host/semaphores.rs
/// never unmaps a page).
pub fn stream_wait_value32(h: StreamHandle, word: u64, value: u32) -> Result<()> {
    stream_wait_value(h, word, u64::from(value), Width::W32, WaitOp::Eq, false)
}

/// Queue on `h` a write of `value` to the 32-bit word at the GPU address `word` (a
/// write-value node, in a capture); as for the wait, `word` stays mapped.
pub fn stream_write_value32(h: StreamHandle, word: u64, value: u32) -> Result<()> {
    stream_write_value(h, word, u64::from(value), Width::W32, false)
}

/// Queue on `h`, in one call: a write of 1 to the 32-bit word at `ready` once the work before
/// it is done (the GPU's writes before it visible first), a wait until the word at `done`
/// reads 1, and a write of 0 to it. custream's thread watches `ready`, runs the host function
/// and raises `done` (src/host/thread.rs): no host function of the driver's is involved, whose
/// thread would hold back what follows it on the stream.
pub fn stream_hand_off(h: StreamHandle, ready: u64, done: u64) -> Result<()> {
    let api = init()?;
    let mut ops = [
        write_value_op(ready, 1),
        wait_value_op(done, 1),
        write_value_op(done, 0),
    ];
    // SAFETY: three initialized operations that outlive the call (the driver copies them); the
    // GPU touches both words later, and the caller keeps them mapped (src/host/semaphores.rs
    // never unmaps a page). A stale `h` is the caller's to rule out, as for every call on a
    // stream.
    check(unsafe { (api.cuStreamBatchMemOp_v2)(h.0, ops.len() as c_uint, ops.as_mut_ptr(), 0) })
}

fn write_value_op(address: u64, value: u32) -> cu::CUstreamBatchMemOpParams {
    let mut op = cu::CUstreamBatchMemOpParams { pad: [0; 6] };
    op.writeValue = cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st {
        operation: cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32,
        address,
        __bindgen_anon_1: cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWriteValueParams_st__bindgen_ty_1 { value },
        flags: cu::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as c_uint,
        alias: 0,
    };
    op
}

fn wait_value_op(address: u64, value: u32) -> cu::CUstreamBatchMemOpParams {
    let mut op = cu::CUstreamBatchMemOpParams { pad: [0; 6] };
    op.waitValue = cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWaitValueParams_st {
        operation: cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32,
        address,
        __bindgen_anon_1: cu::CUstreamBatchMemOpParams_union_CUstreamMemOpWaitValueParams_st__bindgen_ty_1 { value },
        flags: cu::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as c_uint,
        alias: 0,
    };
    op
}
