//! The host side of a stream: host functions, the thread custream runs them on, and the
//! back-pressure every launch onto a stream goes through.
//!
//! - `functions`: `Stream.launch_host_func(fn, *args)` and the C face's `launch_host_func`
//!   (`HostFunction`, the payload a capture keeps).
//! - `keep_alive`: `Stream.keep_alive(*objs)` and the C face's `release_after`: references
//!   (or a C release function) let go on custream's thread once the work queued so far is
//!   done, or with the graph a capture ends in.
//! - `thread`: custream's host thread, where Python host functions and other Python work the
//!   driver's threads must not do run (`post`, `post_when_raised`, `After`).
//! - `semaphores`: the words of mapped host memory that hold a stream while its Python host
//!   function runs (`Flag`, taken and given back per context).
//! - `queue_depth`: launches (records, waits, host functions, graphs, memory operations) into
//!   a deep queue are handed to a launcher thread on the main thread, so Ctrl-C still ends
//!   the caller's wait (`run`, `Gil`, `Keep`).
//!
//! Uses `object/`, `cpython/` and `driver/`.

pub mod functions;
pub mod keep_alive;
pub mod queue_depth;
pub mod semaphores;
pub mod thread;
