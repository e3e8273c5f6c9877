"""custream: one CUDA stream object for Python, Cython and C.

``custream.Stream`` speaks the CUDA Stream Protocol (``__cuda_stream__``) in both
directions: any producer (cuda.core, CuPy, PyTorch, numba-cuda, rmm) can be handed to
``custream.as_stream``, and every consumer accepts a ``custream.Stream``. Cython code
``cimport``s the same object (``from custream cimport Stream``) and C code includes
``custream.h``; ``get_include()`` gives the folder for both.

Importing custream never loads the CUDA driver; anything that needs it raises
``CudaUnavailableError`` on a machine without one.
"""

from custream._custream import (
    ABI_VERSION,
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaError,
    CudaUnavailableError,
    Event,
    Stream,
    StreamPool,
    as_stream,
    current_stream,
    device_count,
    device_info,
    driver_library_candidates,
    driver_version,
    is_available,
    live_stream_count,
    priority_range,
)
from custream._custream import Graph, check_foreign_captures

TYPE_CHECKING = False  # not typing's: importing typing alone takes about 10 ms
if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> str:
        # The version has one source, Cargo.toml (maturin writes it into the package's
        # metadata). It is read on first use, not at import: importlib.metadata alone
        # takes longer to import (about 50 ms) than custream's whole import budget (15 ms).
        if name == "__version__":
            from importlib.metadata import version

            globals()["__version__"] = found = version("custream")
            return found
        raise AttributeError(f"module 'custream' has no attribute {name!r}")

__all__ = [
    "ABI_VERSION",
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "CudaError",
    "CudaUnavailableError",
    "Event",
    "Stream",
    "StreamPool",
    "as_stream",
    "current_stream",
    "device_count",
    "device_info",
    "driver_library_candidates",
    "driver_version",
    "get_include",
    "is_available",
    "live_stream_count",
    "priority_range",
    "Graph",
    "check_foreign_captures",
]


def get_include() -> str:
    """The folder holding ``custream.h`` and the ``.pxd`` files: add it to a C or Cython
    build's include path (``setup_helpers`` does this for setuptools, CMake and meson)."""
    import os

    return os.path.dirname(os.path.abspath(__file__))
