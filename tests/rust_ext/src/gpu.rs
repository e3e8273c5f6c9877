//! What needs a GPU (tests/gpu/test_gpu_rust.py): two kernels written in PTX, loaded with
//! cuModuleLoadData at first use (no toolkit at build or run time: the driver compiles PTX),
//! launched through cudarc's `driver::result` layer on any stream Python gives as a
//! `StreamRef`; and a cudarc `CudaStream` handed to Python with `from_cudarc`. Every cudarc
//! call goes through `with_cudarc`, so that without a driver each function raises custream's
//! CudaUnavailableError (tests/test_rust_crate.py) rather than cudarc's panic.

use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_custream::{from_cudarc, with_cudarc, Stream, StreamRef};

/// `scale(float *p, unsigned n, float a, float b)`: p[i] = p[i] * a + b.
/// `fill_slow(float *p, unsigned n, float v, long long spin)`: each thread spins `spin` clock
/// cycles, then p[i] = v, so that work queued after it on another stream would see old values.
const PTX: &str = r#"
.version 7.5
.target sm_75
.address_size 64

.visible .entry scale(
    .param .u64 p_ptr,
    .param .u32 p_n,
    .param .f32 p_a,
    .param .f32 p_b
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [p_ptr];
    ld.param.u32 %r1, [p_n];
    ld.param.f32 %f1, [p_a];
    ld.param.f32 %f2, [p_b];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra SCALE_DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd2, %rd2, %rd3;
    ld.global.f32 %f3, [%rd2];
    fma.rn.f32 %f3, %f3, %f1, %f2;
    st.global.f32 [%rd2], %f3;
SCALE_DONE:
    ret;
}

.visible .entry fill_slow(
    .param .u64 p_ptr,
    .param .u32 p_n,
    .param .f32 p_v,
    .param .u64 p_spin
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [p_ptr];
    ld.param.u32 %r1, [p_n];
    ld.param.f32 %f1, [p_v];
    ld.param.u64 %rd5, [p_spin];
    mov.u64 %rd6, %clock64;
FILL_SPIN:
    mov.u64 %rd7, %clock64;
    sub.s64 %rd7, %rd7, %rd6;
    setp.lt.s64 %p2, %rd7, %rd5;
    @%p2 bra FILL_SPIN;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra FILL_DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd2, %rd2, %rd3;
    st.global.f32 [%rd2], %f1;
FILL_DONE:
    ret;
}
"#;

/// The module loaded in one device's primary context, and its two functions.
struct Kernels {
    device: usize,
    ctx: Arc<CudaContext>,
    scale: sys::CUfunction,
    fill_slow: sys::CUfunction,
}

// SAFETY: CUfunction handles are process-wide driver objects, usable from any thread whose
// current context is the module's (every launch below binds it first); the module is never
// unloaded, so they stay valid.
unsafe impl Send for Kernels {}

static KERNELS: Mutex<Vec<Kernels>> = Mutex::new(Vec::new());
/// The cudarc stream last given to Python, watched.
static GIVEN: Mutex<Option<Weak<CudaStream>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The device's kernels, loaded at first use; its primary context bound to this thread.
fn kernels(py: Python<'_>, device: usize) -> PyResult<(sys::CUfunction, sys::CUfunction)> {
    let mut all = lock(&KERNELS);
    if let Some(k) = all.iter().find(|k| k.device == device) {
        with_cudarc(py, || k.ctx.bind_to_thread())?;
        return Ok((k.scale, k.fill_slow));
    }
    let image = CString::new(PTX).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let (ctx, scale, fill_slow) = with_cudarc(py, || {
        let ctx = CudaContext::new(device)?;
        ctx.bind_to_thread()?;
        // SAFETY: a NUL-terminated PTX text, as cuModuleLoadData takes; the context is current.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }?;
        // SAFETY: `module` was just loaded and is never unloaded.
        let function = |name: &std::ffi::CStr| unsafe { result::module::get_function(module, name.into()) };
        Ok((ctx, function(c"scale")?, function(c"fill_slow")?))
    })?;
    all.push(Kernels {
        device,
        ctx,
        scale,
        fill_slow,
    });
    Ok((scale, fill_slow))
}

fn grid(n: u32) -> (u32, u32, u32) {
    (n.div_ceil(256).max(1), 1, 1)
}

/// Launch `f` with `params` on `stream`.
///
/// # Safety
/// `params` are pointers to the kernel's arguments, of its parameters' types, and the device
/// pointer among them holds at least `n` floats.
unsafe fn launch(
    f: sys::CUfunction,
    n: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), DriverError> {
    // SAFETY: the caller's contract; the function's context is current (kernels()).
    unsafe { result::launch_kernel(f, grid(n), (256, 1, 1), 0, stream, params) }
}

/// p[i] = p[i] * a + b on any Python stream, ordered after what is queued on it: the stream
/// comes in as a StreamRef and goes to cudarc's result layer as a CUstream.
#[pyfunction]
fn scale(py: Python<'_>, stream: StreamRef, device: usize, ptr: u64, n: u32, a: f32, b: f32) -> PyResult<()> {
    let (f, _) = kernels(py, device)?;
    let (mut ptr, mut n_arg, mut a, mut b) = (ptr, n, a, b);
    let mut params = [
        (&raw mut ptr).cast::<c_void>(),
        (&raw mut n_arg).cast(),
        (&raw mut a).cast(),
        (&raw mut b).cast(),
    ];
    // SAFETY: scale(u64 pointer, u32, f32, f32); the caller passes a buffer of n floats.
    with_cudarc(py, || unsafe { launch(f, n, stream.as_cu_stream(), &mut params) })
}

/// p[i] = v after `spin` clock cycles, on any Python stream.
#[pyfunction]
fn fill_slow(py: Python<'_>, stream: StreamRef, device: usize, ptr: u64, n: u32, v: f32, spin: u64) -> PyResult<()> {
    let (_, f) = kernels(py, device)?;
    with_cudarc(py, || fill_slow_on(f, stream.as_cu_stream(), ptr, n, v, spin))
}

fn fill_slow_on(
    f: sys::CUfunction,
    stream: sys::CUstream,
    ptr: u64,
    n: u32,
    v: f32,
    spin: u64,
) -> Result<(), DriverError> {
    let (mut ptr, mut n_arg, mut v, mut spin) = (ptr, n, v, spin);
    let mut params = [
        (&raw mut ptr).cast::<c_void>(),
        (&raw mut n_arg).cast(),
        (&raw mut v).cast(),
        (&raw mut spin).cast(),
    ];
    // SAFETY: fill_slow(u64 pointer, u32, f32, u64); the caller passes a buffer of n floats.
    unsafe { launch(f, n, stream, &mut params) }
}

/// A new cudarc stream on `device`, with fill_slow(ptr, n, v, spin) queued on it, given to
/// Python with from_cudarc; Rust keeps only a Weak (shared_cudarc_count).
#[pyfunction]
fn cudarc_stream(py: Python<'_>, device: usize, ptr: u64, n: u32, v: f32, spin: u64) -> PyResult<Stream> {
    let (_, f) = kernels(py, device)?;
    let stream = with_cudarc(py, || {
        let stream = CudaContext::new(device)?.new_stream()?;
        fill_slow_on(f, stream.cu_stream(), ptr, n, v, spin)?;
        Ok(stream)
    })?;
    *lock(&GIVEN) = Some(Arc::downgrade(&stream));
    from_cudarc(py, stream)
}

/// How many Arcs of the last cudarc stream given to Python are alive.
#[pyfunction]
fn cudarc_strong_count() -> usize {
    lock(&GIVEN).as_ref().map_or(0, Weak::strong_count)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scale, m)?)?;
    m.add_function(wrap_pyfunction!(fill_slow, m)?)?;
    m.add_function(wrap_pyfunction!(cudarc_stream, m)?)?;
    m.add_function(wrap_pyfunction!(cudarc_strong_count, m)?)?;
    Ok(())
}
