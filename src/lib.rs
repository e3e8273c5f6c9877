//! custream: one CUDA stream object for Python, Cython and C.
//!
//! `src/` by feature (docs/design.md, "Code layout"), each folder's `mod.rs` saying what it
//! holds, offers and uses; from the module's faces down to the driver:
//! - `capi` (the C API's table), `module_functions` (the module's functions)
//! - `stream/` (the Stream type's slots, what its methods do, the current stream)
//! - `event/` (Event, IPC events, `Stream.record`/`wait`), `graph` (Graph, what a capture
//!   ends in), `memops` (`write_value`, `wait_value`), `pool/` (StreamPool and its leases)
//! - `green/` (GreenContext and the streams made in one), `waits/` (waits for the GPU that
//!   Ctrl-C ends, `await`, notifiers)
//! - `host/` (host functions, custream's host thread, queue-depth back-pressure)
//! - `object/` (a Stream object's memory and making, the protocol; the lifecycle of every
//!   object that holds a driver object)
//! - `cpython/` (the boundary, the GIL, calling conventions, arguments, errors, interrupts)
//! - `driver/` (owning handles, their views, every driver call, libcuda, the process gate)
//!
//! tests/test_design_doc.py checks that a folder uses only the layers below its own, so there
//! is no circle.
//!
//! The Python-facing names are all registered here, in `_custream`; `custream/__init__.py`
//! re-exports them.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod capi;
mod cpython;
mod driver;
mod event;
mod graph;
mod green;
mod host;
mod memops;
mod module_functions;
mod object;
mod pool;
mod stream;
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
    let stream_type = stream::slots::create(py)?;
    object::protocol::init(py, &stream_type)?;
    m.add("Stream", stream_type)?;
    m.add_class::<event::Event>()?;
    m.add_class::<event::IpcEventHandle>()?;
    cpython::stream_type::equality_only(&py.get_type::<event::IpcEventHandle>())?;
    m.add("AccessPolicyWindow", stream::settings::window_type(py)?)?;
    m.add_class::<pool::StreamPool>()?;
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
    m.add("current_stream", stream::current::current_stream_function(py)?)?;
    m.add("ABI_VERSION", cpython::stream_object::CUSTREAM_ABI_VERSION)?;
    {
        use cpython::stream_object as c;
        // custream.h's CUSTREAM_FLAG_* bits, which `Stream.flags` holds.
        for (name, bit) in [
            ("FLAG_OWNED", c::CUSTREAM_FLAG_OWNED),
            ("FLAG_DEFAULT", c::CUSTREAM_FLAG_DEFAULT),
            ("FLAG_NON_BLOCKING", c::CUSTREAM_FLAG_NON_BLOCKING),
            ("FLAG_SHARED", c::CUSTREAM_FLAG_SHARED),
            ("FLAG_POOLED", c::CUSTREAM_FLAG_POOLED),
            ("FLAG_GREEN", c::CUSTREAM_FLAG_GREEN),
        ] {
            m.add(name, bit)?;
        }
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("as_stream", module_functions::as_stream(m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::is_available, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::driver_version, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::device_info, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::priority_range, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::driver_library_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::live_stream_count, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<host::functions::HostFunction>()?;
    m.add_class::<waits::wake::PyBell>()?;
    m.add_function(wrap_pyfunction!(module_functions::_pending_waits, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::_notifier_streams, m)?)?;
    m.add_function(wrap_pyfunction!(module_functions::check_foreign_captures, m)?)?;
    let finalize = wrap_pyfunction!(module_functions::_finalize, m)?;
    py.import("atexit")?.call_method1("register", (&finalize,))?;
    m.add_function(finalize)?;
    m.add("_C_API", capi::capsule(py)?)?;
    Ok(())
}
