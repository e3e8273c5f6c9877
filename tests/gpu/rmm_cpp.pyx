# distutils: language = c++
# cython: language_level=3
"""Cython in C++ mode with rmm and custream/cpp.pxd: custream's stream_ref (a field load, no
Python call) becomes rmm's cuda_stream_view and the cuda::stream_ref an rmm device_buffer is
allocated and copied on. Built by test_gpu_cpp.py against the installed wheels."""

from libc.stdint cimport uintptr_t
from libcpp.memory cimport unique_ptr
from libcpp.utility cimport move

from cuda.bindings.cyruntime cimport cudaStream_t
from rmm.librmm.cuda_stream_ref cimport stream_ref as cuda_stream_ref
from rmm.librmm.cuda_stream_view cimport cuda_stream_view
from rmm.librmm.device_buffer cimport device_buffer
from rmm.librmm.memory_resource cimport any_resource, device_accessible
from rmm.pylibrmm.device_buffer cimport DeviceBuffer
from rmm.pylibrmm.memory_resource cimport DeviceMemoryResource, get_current_device_resource
from rmm.pylibrmm.stream cimport Stream as RmmStream

from custream cimport Stream
from custream.cpp cimport ref_of


def view_value(Stream s not None):
    """The handle as rmm's C++ cuda_stream_view sees it, converted by the C++ compiler."""
    cdef cuda_stream_view view
    with nogil:
        view = <cuda_stream_view>ref_of(s)
    return <uintptr_t>view.value()


def copy_on(Stream s not None, uintptr_t src, size_t size):
    """An rmm DeviceBuffer holding a copy of `size` bytes at `src`, made on s's stream."""
    cdef DeviceMemoryResource mr = get_current_device_resource()
    cdef cuda_stream_ref ref = <cuda_stream_ref>ref_of(s)
    cdef unique_ptr[device_buffer] buf
    buf.reset(new device_buffer(<const void *>src, size, ref, any_resource[device_accessible](mr.get_mr())))
    return DeviceBuffer.c_from_unique_ptr(move(buf), RmmStream._from_cudaStream_t(<cudaStream_t>s.handle, s), mr)


def allocate_on(Stream s not None, size_t size):
    """An rmm DeviceBuffer of `size` bytes allocated on s's stream."""
    cdef DeviceMemoryResource mr = get_current_device_resource()
    cdef unique_ptr[device_buffer] buf
    buf.reset(new device_buffer(size, <cuda_stream_ref>ref_of(s), any_resource[device_accessible](mr.get_mr())))
    return DeviceBuffer.c_from_unique_ptr(move(buf), RmmStream._from_cudaStream_t(<cudaStream_t>s.handle, s), mr)
