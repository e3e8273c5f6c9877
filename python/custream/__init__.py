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
    AccessPolicyWindow,
    DEFAULT_STREAM,
    FLAG_DEFAULT,
    FLAG_GREEN,
    FLAG_NON_BLOCKING,
    FLAG_OWNED,
    FLAG_POOLED,
    FLAG_SHARED,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaError,
    CudaUnavailableError,
    Event,
    GreenContext,
    Lease,
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
from custream._custream import IpcEventHandle

# The version has one source, Cargo.toml: the extension is built with it. No module
# __getattr__ here: a module that defines one loses CPython's fast path for every
# `custream.name` lookup (LOAD_ATTR_MODULE), which doubled `custream.current_stream()`.
from custream._custream import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    # A typing-only name (no object at run time): any object with __cuda_stream__, as the
    # signatures of C++ functions taking custream::stream_ref name their argument.
    from custream._custream import CudaStreamProducer as CudaStreamProducer

__all__ = [
    "ABI_VERSION",
    "AccessPolicyWindow",
    "DEFAULT_STREAM",
    "FLAG_DEFAULT",
    "FLAG_GREEN",
    "FLAG_NON_BLOCKING",
    "FLAG_OWNED",
    "FLAG_POOLED",
    "FLAG_SHARED",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "CudaError",
    "CudaUnavailableError",
    "Event",
    "GreenContext",
    "Lease",
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
    "IpcEventHandle",
]


def get_include() -> str:
    """The folder holding ``custream.h`` and the ``.pxd`` files: add it to a C or Cython
    build's include path (``setup_helpers`` does this for setuptools, CMake and meson)."""
    import os

    return os.path.dirname(os.path.abspath(__file__))
