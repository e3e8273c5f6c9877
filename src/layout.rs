//! The C layout of pxd/custream.h: bindgen's output, kept once, as the pyo3-custream crate's
//! `ffi` module (tests/layout.rs compares it byte for byte with a fresh bindgen run).

pub use pyo3_custream::ffi::*;
