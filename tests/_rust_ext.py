"""The test extension of the Rust crate pyo3-custream (tests/rust_ext, the module
custream_rust_ext), for tests/test_rust_crate.py and tests/gpu/test_gpu_rust.py."""

import os

import pytest

BUILD = "scripts/build-rust-ext.sh OUTDIR builds its wheel (pip install OUTDIR/custream_rust_ext-*.whl)"


def load_ext():
    """The extension, or a skip saying how to build it; a failure where CI sets
    CUSTREAM_REQUIRE_BUILD_TOOLS (CI builds and installs it)."""
    try:
        import custream_rust_ext
    except ImportError as e:
        message = f"the Rust test extension custream_rust_ext is not installed ({e}); {BUILD}"
        if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
            pytest.fail(message + "; CUSTREAM_REQUIRE_BUILD_TOOLS is set")
        pytest.skip(message)
    return custream_rust_ext
