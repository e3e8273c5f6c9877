# distutils: language = c++
# cython: language_level=3
"""Cython in C++ mode over custream/cpp.pxd: a Stream's handle becomes a custream::stream_ref
with no Python call and goes to a C++ function taking cuda::stream_ref (cy_support.hpp)."""

from libc.stdint cimport uintptr_t
from libcpp.memory cimport shared_ptr

from custream cimport Stream, as_stream, custream_handle_t
from custream.cpp cimport ref_of, stream_ref, to_python


cdef extern from "cy_support.hpp" nogil:
    cdef cppclass cuda_stream_ref "cuda::stream_ref":
        custream_handle_t get()
    uintptr_t consume(cuda_stream_ref s)
    # The same C++ function, declared with custream's type: the C++ compiler converts.
    uintptr_t consume_ours "consume"(stream_ref s)
    int owner_deaths "owner_deaths.load"()
    shared_ptr[int] counted_owner() except +


def handle_by_cast(Stream s not None):
    cdef uintptr_t out
    with nogil:
        out = consume(<cuda_stream_ref>ref_of(s))
    return out


def handle_by_declaration(Stream s not None):
    cdef uintptr_t out
    with nogil:
        out = consume_ours(ref_of(s))
    return out


def handle_of_any(obj):
    """Any protocol object, through custream's as_stream."""
    return consume(<cuda_stream_ref>ref_of(as_stream(obj)))


def is_default(Stream s not None):
    return ref_of(s).is_default()


def same(Stream a not None, Stream b not None):
    return ref_of(a) == ref_of(b)


def share(uintptr_t handle, int device):
    """A C++ owner shared with Python: counted_owner() dies when both sides let go."""
    return to_python[int](counted_owner(), stream_ref(<custream_handle_t>handle), device).release()


def deaths():
    return owner_deaths()
