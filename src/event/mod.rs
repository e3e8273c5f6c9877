//! Events: `custream.Event` (ordering work across streams, timing, `await`), IPC events, and
//! a Stream's `record()` and `wait()`.
//!
//! - `cuda_event`: the Event class, its one `#[pymethods]` block, under the lifecycle of
//!   `object/`; where an event recorded in a capture was recorded.
//! - `ipc`: `Event(ipc=True)`, `IpcEventHandle`, and the exporter's lifetime rule.
//! - `ipc_source`: what `Event.from_ipc_handle()` opens (custream's handle, or any library's
//!   raw 64-byte handle with its device), checked before the driver is asked.
//! - `stream_methods`: `Stream.record()` and `Stream.wait()` (`record`, `wait_event`,
//!   `wait_stream`), called from the Stream's slots in `stream/`.
//!
//! Uses `waits/` (`await`, `synchronize(timeout=)`, `future()`), `host/` (queue depth),
//! `object/`, `cpython/` and `driver/`.

pub mod cuda_event;
pub mod ipc;
pub mod ipc_source;
pub mod stream_methods;

pub use cuda_event::Event;
pub use ipc::IpcEventHandle;
