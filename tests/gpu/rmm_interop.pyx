# distutils: language = c++
# cython: language_level=3
"""A Cython module that cimports both rmm and custream: our Stream's handle, read as a
struct field with no Python call, goes straight into rmm's C++ ``cuda_stream_view`` and
into an rmm Python ``Stream`` built at the C level. Built by test_gpu_rmm.py against the
installed wheels."""

from libc.stdint cimport uintptr_t

from cuda.bindings.cyruntime cimport cudaStream_t
from rmm.librmm.cuda_stream_view cimport cuda_stream_view
from rmm.pylibrmm.stream cimport Stream as RmmStream

from custream cimport Stream


def view_value(Stream s not None):
    """The handle as rmm's C++ cuda_stream_view sees it; taken without the GIL."""
    cdef cudaStream_t value
    with nogil:
        value = cuda_stream_view(<cudaStream_t>s.handle).value()
    return <uintptr_t>value


def view_synchronize(Stream s not None):
    """rmm's C++ cuda_stream_view::synchronize() on our stream, without the GIL."""
    cdef cuda_stream_view view = cuda_stream_view(<cudaStream_t>s.handle)
    with nogil:
        view.synchronize()


def to_rmm_stream(Stream s not None):
    """An rmm.pylibrmm.stream.Stream over our handle, made in C, holding ``s`` as owner."""
    return RmmStream._from_cudaStream_t(<cudaStream_t>s.handle, s)
