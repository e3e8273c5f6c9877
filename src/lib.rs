//! custream: one CUDA stream object for Python, Cython and C.
//!
//! The modules, from the Python face down to the driver (docs/design.md, "Code layout"):
//! - face: `stream_type` (the Stream type's slots), `green_type` (GreenContext's methods),
//!   `functions` (the module's functions), `capi` (the C API's table)
//! - core: `stream`, `event`, `pool`, `lease` (a pool's leases), `graph`, `green`, `current`,
//!   `callback`, `protocol`, `host_thread` (where Python host functions run), `host_semaphores`
//!   (the mapped words a host function's stream waits on), `owner_release` (giving back a
//!   borrowed stream's owner), `waits` (timed and interruptible waits, `await`, futures),
//!   `notifiers` (the streams whose host functions tell a wait its event is reached),
//!   `signals` (what a wait is told: a thread, an event loop's bell, a future), `maker` (the
//!   thread that makes notifier streams, which the driver may block while the GPU is busy)
//! - capture: `capture` (what a capture is to custream, by handle)
//! - base: `raw_stream` (a Stream's memory, raw), `raw_call` (CPython's calling
//!   conventions), `lifecycle`, `state_word`, `home` (where a driver object lives; the primary-context policy),
//!   `deferred_release` (releases a host function asked for), `closable` (what closable
//!   classes share), `errors`, `args`, `deadline` (timeouts, and waits that
//!   signals end), `boundary`, `gil`
//! - ground: `driver` (owning handles, their views, every driver call), `process` (fork, exit,
//!   host-function state), `libcuda` (the library), `layout`
//!
//! tests/test_design_doc.py checks that no module uses a floor above its own and that there
//! is no circle.
//!
//! The Python-facing names are all registered here, in `_custream`; `custream/__init__.py`
//! re-exports them.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod capi;
mod cpython;
mod current;
mod driver;
mod event;
mod functions;
mod graph;
mod green;
mod host;
mod memops;
mod object;
mod owner_release;
mod pool;
mod stream;
mod stream_type;
mod waits;

use pyo3::prelude::*;

/// The owning driver handles and their views, public only so that their doctests (a second
/// destroy does not compile) can name them; not an API.
#[doc(hidden)]
pub mod handles {
    pub use crate::driver::{Context, DriverError, EventHandle, OwnedEvent, OwnedGreenCtx, OwnedStream, StreamHandle};
}

// Safe without the GIL (a free-threaded interpreter keeps it off on import): nothing here uses
// the GIL as a lock (src/object/memory.rs's rules; the state word, model-checked in
// src/object/state_word.rs), and the suite runs on a free-threaded 3.13 with PYTHON_GIL=0
// (docs/building.md).
#[pymodule(gil_used = false)]
fn _custream(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    driver::gate::install_fork_handler();
    cpython::gil::install_fork_handler();
    cpython::interrupt::learn_main_thread(py)?;
    let stream_type = stream_type::create(py)?;
    object::protocol::init(py, &stream_type)?;
    m.add("Stream", stream_type)?;
    m.add_class::<event::Event>()?;
    m.add_class::<event::IpcEventHandle>()?;
    m.add_class::<pool::StreamPool>()?;
    pool::stream_pool::install(&py.get_type::<pool::StreamPool>())?;
    m.add_class::<pool::Lease>()?;
    m.add_class::<green::GreenContext>()?;
    m.add("CudaError", py.get_type::<cpython::errors::CudaError>())?;
    m.add(
        "CudaUnavailableError",
        py.get_type::<cpython::errors::CudaUnavailableError>(),
    )?;
    m.add("DEFAULT_STREAM", object::make::default_stream(py, 0)?)?;
    m.add("LEGACY_DEFAULT_STREAM", object::make::default_stream(py, 1)?)?;
    m.add("PER_THREAD_DEFAULT_STREAM", object::make::default_stream(py, 2)?)?;
    m.add("current_stream", current::current_stream_function(py)?)?;
    m.add("ABI_VERSION", object::layout::CUSTREAM_ABI_VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("as_stream", functions::as_stream(m)?)?;
    m.add_function(wrap_pyfunction!(functions::is_available, m)?)?;
    m.add_function(wrap_pyfunction!(functions::driver_version, m)?)?;
    m.add_function(wrap_pyfunction!(functions::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(functions::device_info, m)?)?;
    m.add_function(wrap_pyfunction!(functions::priority_range, m)?)?;
    m.add_function(wrap_pyfunction!(functions::driver_library_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(functions::live_stream_count, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<host::functions::HostFunction>()?;
    m.add_class::<waits::wake::PyBell>()?;
    m.add_function(wrap_pyfunction!(functions::_pending_waits, m)?)?;
    m.add_function(wrap_pyfunction!(functions::check_foreign_captures, m)?)?;
    let finalize = wrap_pyfunction!(functions::_finalize, m)?;
    py.import("atexit")?.call_method1("register", (&finalize,))?;
    m.add_function(finalize)?;
    m.add("_C_API", capi::capsule(py)?)?;
    Ok(())
}
