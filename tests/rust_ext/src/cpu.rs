//! What runs without a GPU: conversions, round trips, hand-overs with counted releases,
//! drops on Rust threads, the import check, and the benchmark's two functions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3_custream::{current_stream, share, to_python, Stream, StreamRef, WaitOp};

/// The handles released, in order, by the releases `give` made.
static RELEASED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// How many of `give`'s closures were dropped (after running, or unrun on error).
static DROPPED: AtomicUsize = AtomicUsize::new(0);
/// Streams Rust holds for `drop_held_on_thread`.
static HELD: Mutex<Vec<Stream>> = Mutex::new(Vec::new());
/// The owner last given to `share`, watched.
static SHARED: Mutex<Option<Weak<Owner>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts its drop: captured by a release, it tells whether the closure was dropped.
struct DropCounter;

impl Drop for DropCounter {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

/// What `share` gives Python a clone of.
struct Owner;

/// The benchmark's floor: an int in, the same int out.
#[pyfunction]
fn handle_of_usize(handle: usize) -> usize {
    handle
}

/// The benchmark's row: a stream in (any kind), its handle out.
#[pyfunction]
fn handle_of(stream: StreamRef) -> usize {
    stream.as_usize()
}

#[pyfunction]
fn is_default(stream: StreamRef) -> bool {
    stream.is_default()
}

/// StreamRef::from_raw then as_raw: the same address.
#[pyfunction]
fn raw_round_trip(handle: usize) -> usize {
    StreamRef::from_raw(handle as *mut std::ffi::c_void).as_raw() as usize
}

/// A Stream argument given back: the same custream.Stream (or the wrapper of a protocol object).
#[pyfunction]
fn take(stream: Stream) -> Stream {
    stream
}

/// Stream::from_bound: a custream.Stream only.
#[pyfunction]
fn from_bound(obj: Bound<'_, PyAny>) -> PyResult<Stream> {
    Stream::from_bound(obj)
}

/// (handle, device, closed) through the loads of Stream.
#[pyfunction]
fn info(stream: Stream) -> (usize, Option<i32>, bool) {
    (stream.handle().as_usize(), stream.device(), stream.is_closed())
}

/// (id, device) through the C API's stream_id and stream_device (driver calls once).
#[pyfunction]
fn id_and_device(py: Python<'_>, stream: Stream) -> PyResult<(u64, i32)> {
    Ok((stream.id(py)?, stream.resolve_device(py)?))
}

#[pyfunction]
fn synchronize(py: Python<'_>, stream: Stream) -> PyResult<()> {
    stream.synchronize(py)
}

/// `Stream::synchronize_timeout` with `seconds` (None: no limit).
#[pyfunction]
#[pyo3(signature = (stream, seconds=None))]
fn synchronize_timeout(py: Python<'_>, stream: Stream, seconds: Option<f64>) -> PyResult<()> {
    stream.synchronize_timeout(py, seconds.map(std::time::Duration::from_secs_f64))
}

/// The closures `release_after` queued that have run: the name of the thread each ran on.
static RELEASE_RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Stream::release_after with a closure that records its thread's name, then drops `payload`.
#[pyfunction]
fn release_after(py: Python<'_>, stream: Stream, payload: Vec<u8>) -> PyResult<()> {
    stream.release_after(
        py,
        Box::new(move || {
            drop(payload);
            // The OS's name of the thread (custream's std named it, not this extension's).
            let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap_or_default();
            let name = name.trim().to_owned();
            lock(&RELEASE_RUNS).push(name);
        }),
    )
}

/// The names of the threads `release_after`'s closures ran on, in order.
#[pyfunction]
fn release_runs() -> Vec<String> {
    lock(&RELEASE_RUNS).clone()
}

/// Stream::write_value.
#[pyfunction]
#[pyo3(signature = (stream, address, value, width, flush=false))]
fn write_value(py: Python<'_>, stream: Stream, address: u64, value: u64, width: u32, flush: bool) -> PyResult<()> {
    stream.write_value(py, address, value, width, flush)
}

/// event_from_ipc_handle: another library's IPC event from its raw handle.
#[pyfunction]
fn event_from_ipc_handle<'py>(py: Python<'py>, handle: Vec<u8>, device: i32) -> PyResult<Bound<'py, PyAny>> {
    pyo3_custream::event_from_ipc_handle(py, &handle, device)
}

/// Stream::wait_value, the condition by name.
#[pyfunction]
fn wait_value(py: Python<'_>, stream: Stream, address: u64, value: u64, width: u32, op: &str) -> PyResult<()> {
    let op = match op {
        "geq" => WaitOp::Geq,
        "eq" => WaitOp::Eq,
        "and" => WaitOp::And,
        _ => WaitOp::Nor,
    };
    stream.wait_value(py, address, value, width, op, false)
}

#[pyfunction]
fn close(py: Python<'_>, stream: Stream) -> PyResult<bool> {
    stream.close(py)?;
    Ok(stream.is_closed())
}

#[pyfunction]
#[pyo3(signature = (handle, device=None, owner=None))]
fn from_handle(py: Python<'_>, handle: usize, device: Option<i32>, owner: Option<Py<PyAny>>) -> PyResult<Stream> {
    Stream::from_handle(py, StreamRef::from_raw(handle as *mut _), device, owner)
}

#[pyfunction]
fn current(py: Python<'_>) -> PyResult<Stream> {
    current_stream(py)
}

/// to_python with a release that records its handle (and says so on stderr if `announce`,
/// for the exit test, which cannot ask afterwards), then panics if asked; a DropCounter in
/// the closure tells when it is dropped.
#[pyfunction]
#[pyo3(signature = (handle, device=None, panic=false, announce=false))]
fn give(py: Python<'_>, handle: usize, device: Option<i32>, panic: bool, announce: bool) -> PyResult<Stream> {
    let counter = DropCounter;
    to_python(py, StreamRef::from_raw(handle as *mut _), device, move |h| {
        let _counter = counter;
        lock(&RELEASED).push(h.as_usize());
        if announce {
            eprintln!("custream_rust_ext: released {:#x}", h.as_usize());
        }
        if panic {
            panic!("release of {:#x} panicked on purpose", h.as_usize());
        }
    })
}

/// (handles released, closures dropped) since the last reset.
#[pyfunction]
fn released() -> (Vec<usize>, usize) {
    (lock(&RELEASED).clone(), DROPPED.load(Ordering::SeqCst))
}

#[pyfunction]
fn reset() {
    lock(&RELEASED).clear();
    DROPPED.store(0, Ordering::SeqCst);
}

/// share() of a fresh Arc, watched through a Weak.
#[pyfunction]
#[pyo3(signature = (handle, device=None))]
fn share_owner(py: Python<'_>, handle: usize, device: Option<i32>) -> PyResult<Stream> {
    let owner = Arc::new(Owner);
    *lock(&SHARED) = Some(Arc::downgrade(&owner));
    share(py, owner, StreamRef::from_raw(handle as *mut _), device)
}

/// How many Arcs of the last shared owner are alive (Python's clone, if it holds one).
#[pyfunction]
fn shared_strong_count() -> usize {
    lock(&SHARED).as_ref().map_or(0, Weak::strong_count)
}

/// Keep a Stream in Rust (a static), as a library's worker would.
#[pyfunction]
fn hold(stream: Stream) -> usize {
    let mut held = lock(&HELD);
    held.push(stream);
    held.len()
}

/// Drop every held Stream on a new std::thread, which never attaches to Python. Returns how
/// many it dropped.
#[pyfunction]
fn drop_held_on_thread() -> PyResult<usize> {
    let held = std::mem::take(&mut *lock(&HELD));
    let worker = std::thread::spawn(move || {
        let n = held.len();
        // The handles are readable with no GIL, before the references go.
        let _handles: Vec<StreamRef> = held.iter().map(Stream::handle).collect();
        drop(held);
        n
    });
    // The thread needs no GIL, so waiting for it with the GIL held cannot deadlock.
    worker
        .join()
        .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the dropping thread panicked"))
}

/// pyo3_custream::import: the C API, checked, now.
#[pyfunction]
fn import_custream(py: Python<'_>) -> PyResult<u32> {
    pyo3_custream::import(py)?;
    Ok(pyo3_custream::ABI_VERSION)
}

/// The handle as cudarc's CUstream, back as an int (feature `cudarc`, no driver call).
#[pyfunction]
fn cu_stream_of(stream: StreamRef) -> usize {
    let cu: cudarc::driver::sys::CUstream = stream.as_cu_stream();
    StreamRef::from(cu).as_usize()
}

/// Stream's reference views (clone_ref, as_py, bind, into_py_any) and StreamRef::as_handle:
/// true when each names the same Python object and the same handle.
#[pyfunction]
fn views(py: Python<'_>, stream: Stream) -> bool {
    let clone = stream.clone_ref(py);
    let same =
        clone.as_py().as_ptr() == stream.bind(py).as_ptr() && clone.handle().as_handle() == stream.handle().as_handle();
    let any = clone.into_py_any();
    same && any.as_ptr() == stream.as_py().as_ptr()
}

/// with_cudarc on a closure that panics on its own (not in cudarc's loader): the ordinal of a
/// cudarc context, or, with `panic`, a panic of the closure's, which passes through.
#[pyfunction]
fn cudarc_ordinal(py: Python<'_>, device: usize, panic: bool) -> PyResult<usize> {
    pyo3_custream::with_cudarc(py, || {
        assert!(!panic, "the closure's own panic");
        Ok(cudarc::driver::CudaContext::new(device)?.ordinal())
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(handle_of_usize, m)?)?;
    m.add_function(wrap_pyfunction!(handle_of, m)?)?;
    m.add_function(wrap_pyfunction!(is_default, m)?)?;
    m.add_function(wrap_pyfunction!(raw_round_trip, m)?)?;
    m.add_function(wrap_pyfunction!(take, m)?)?;
    m.add_function(wrap_pyfunction!(id_and_device, m)?)?;
    m.add_function(wrap_pyfunction!(from_bound, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize_timeout, m)?)?;
    m.add_function(wrap_pyfunction!(close, m)?)?;
    m.add_function(wrap_pyfunction!(write_value, m)?)?;
    m.add_function(wrap_pyfunction!(release_after, m)?)?;
    m.add_function(wrap_pyfunction!(release_runs, m)?)?;
    m.add_function(wrap_pyfunction!(wait_value, m)?)?;
    m.add_function(wrap_pyfunction!(event_from_ipc_handle, m)?)?;
    m.add_function(wrap_pyfunction!(from_handle, m)?)?;
    m.add_function(wrap_pyfunction!(current, m)?)?;
    m.add_function(wrap_pyfunction!(give, m)?)?;
    m.add_function(wrap_pyfunction!(released, m)?)?;
    m.add_function(wrap_pyfunction!(reset, m)?)?;
    m.add_function(wrap_pyfunction!(share_owner, m)?)?;
    m.add_function(wrap_pyfunction!(shared_strong_count, m)?)?;
    m.add_function(wrap_pyfunction!(hold, m)?)?;
    m.add_function(wrap_pyfunction!(drop_held_on_thread, m)?)?;
    m.add_function(wrap_pyfunction!(import_custream, m)?)?;
    m.add_function(wrap_pyfunction!(cu_stream_of, m)?)?;
    m.add_function(wrap_pyfunction!(cudarc_ordinal, m)?)?;
    m.add_function(wrap_pyfunction!(views, m)?)?;
    Ok(())
}
