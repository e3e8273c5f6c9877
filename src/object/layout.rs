//! The C layout of pxd/custream.h: bindgen's output, kept once, as the pyo3-custream crate's
//! `ffi` module (tests/layout.rs compares it byte for byte with a fresh bindgen run).

pub use pyo3_custream::ffi::*;

/// Bytes that a build with the `abi-growth-test` feature appends to the Stream object and to
/// the C-API table, standing for a later custream whose object and table grew: the test of
/// the growth rule (tests/test_abi_growth.py) runs consumers built against today's header on
/// it. 0 in every build that ships.
pub const GROWTH: usize = if cfg!(feature = "abi-growth-test") { 64 } else { 0 };

/// The Stream type's `tp_basicsize`, and the table's `stream_size`.
pub const STREAM_SIZE: usize = size_of::<CustreamStream>() + GROWTH;
