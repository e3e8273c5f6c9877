//! `custream.StreamPool` and its leases.
//!
//! - `stream_pool`: the pool: tiers of owned streams, one per priority, made on first use,
//!   handed out round-robin (`get()`) or leased (`lease()`).
//! - `lease`: which of the pool's streams a lease holds (claimed and given back without a
//!   lock), the waits for a free one, the streams being made, and `custream.Lease`. The two
//!   files call each other directly.
//!
//! Offers `StreamPool` (the C API's `pool_get`). Uses `green/` (a pool in a green context),
//! `waits/` (a new stream's context gets its notifiers), `object/`, `cpython/` and `driver/`.

pub mod lease;
pub mod stream_pool;

pub use lease::Lease;
pub use stream_pool::StreamPool;
