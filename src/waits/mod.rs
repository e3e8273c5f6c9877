//! Waiting for the GPU without sitting in the driver's wait: `synchronize(timeout=)` that
//! Ctrl-C ends, `await` on an event or a stream, and `Event.future()`.
//!
//! - `for_gpu`: the waits themselves (`spin`, `synchronize_event`, `StreamWait`, `future`).
//! - `notifiers`: the notifier streams whose C host function tells an armed wait that its
//!   event is reached (`arm`, `Recorded`), taken from and put back into a pool per context.
//! - `wake`: what a wait is told (`Wake`): a thread's condition variable, an event loop's bell
//!   (`PyBell`, python/custream/_waits.py), or a future completed on custream's host thread.
//! - `notifier_maker`: the thread that makes notifier streams, which the driver may block
//!   while the GPU is busy.
//!
//! Uses `host/` (its thread completes futures), `cpython/` and `driver/`.

pub mod for_gpu;
pub mod notifier_maker;
pub mod notifiers;
pub mod wake;

pub use for_gpu::{future, poll, spin_all_along, synchronize_event, StreamWait};
pub use notifiers::{arm, notifier_streams, pending_count, Recorded};
