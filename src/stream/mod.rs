//! `custream.Stream`: its Python face and what its methods do. How one is made and the
//! protocol are `object/`'s, below every feature that takes a stream; its memory and the
//! tables of its type are `cpython/`'s (`stream_object`, `stream_type`), behind the boundary.
//!
//! - `slots`: the Stream type's slots, methods and getters, each a safe function, declared
//!   with `stream_type!` (`tp_basicsize` is `sizeof(CustreamStream)`, the C layout
//!   pxd/custream.h declares).
//! - `methods`: what a Stream does (every use holds it open and checks its context;
//!   `synchronize`, `query`, captures, `green_context`, `sm_count`, `close`; released once).
//! - `current`: the current stream (`with s:`, `custream.current_stream`).
//! - `owner_release`: giving a borrowed stream's owner back, bounded in stack depth.
//! - `settings`: the settings the driver keeps on the stream (`sync_policy`, the L2
//!   access-policy window, `mem_sync_domain`, `copy_settings_from`), and the policy
//!   custream's own waits follow.
//!
//! Every Stream method, and where its work is done (the table in `slots::create`):
//! - here: `synchronize`, `query`, `close`, `__enter__`/`__exit__` (`current`),
//!   `__reduce__`, `begin_capture`, `__cuda_stream__`, and the getters (`handle`, `device`,
//!   `id`, `owned`, `owner`, `is_default`, `non_blocking`, `priority`, `closed`,
//!   `is_capturing`, `green_context`, `sm_count`, `flags`);
//! - `object/make.rs`: `Stream()` and `Stream.from_handle()`; `green/context.rs`:
//!   `Stream(green_context=)`;
//! - `event/stream_methods.rs`: `record`, `wait`;
//! - `memops.rs`: `write_value`, `wait_value`;
//! - `settings.rs`: `sync_policy`, `set_access_policy_window`, `access_policy_window`,
//!   `clear_access_policy_window`, `mem_sync_domain`, `copy_settings_from`;
//! - `host/functions.rs`: `launch_host_func`; `host/keep_alive.rs`: `keep_alive`;
//! - `graph.rs`: `end_capture` (the Graph a capture ends in).
//!
//! Offers `closed_error` and `release_at_dealloc` (and the slots' type to `lib.rs`). Uses
//! `event/`, `memops`, `graph`, `host/`, `green/`, `waits/`, `object/`, `cpython/`, `driver/`.

pub mod current;
pub mod methods;
pub mod owner_release;
pub mod settings;
pub mod slots;

pub use methods::{closed_error, release_at_dealloc};
