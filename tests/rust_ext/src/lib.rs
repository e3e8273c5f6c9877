//! The test extension of pyo3-custream: every item of the crate behind a `#[pyfunction]`, for
//! tests/test_rust_crate.py (CPU), tests/gpu/test_gpu_rust.py (cudarc kernels on foreign
//! streams) and the benchmark's Rust rows (benches/ops.py).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use pyo3::prelude::*;

mod cpu;
mod gpu;

#[pymodule]
fn custream_rust_ext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // No pyo3_custream::import() here: the tests check that a missing custream is an
    // ImportError at the first call, not at this module's import.
    cpu::register(m)?;
    gpu::register(m)
}
