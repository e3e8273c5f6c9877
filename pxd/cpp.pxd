# cython: language_level=3
"""The C++ names of custream for Cython modules compiled as C++ (``# distutils: language = c++``):
``from custream.cpp cimport stream_ref, ref_of``.

* ``stream_ref``: ``custream::stream_ref`` from custream.hpp, a non-owning view of a stream
  handle; in C++ it converts to and from CCCL's ``cuda::stream_ref``.
* ``ref_of(Stream s)``: the view of a Stream's handle: one field load, no Python call, usable
  inside ``nogil``. For any protocol object: ``ref_of(as_stream(obj))``.
* ``stream`` and ``to_python``: a C++ owner handing its stream to Python (see custream.hpp):
  ``return to_python(owner, handle, device).release()`` returns the new custream.Stream, or
  raises the Python error the call left set.

Cython does not apply C++ conversions itself. To hand a view to a C++ function that takes
``cuda::stream_ref``, cast it to the type that function is declared with in Cython
(``<cuda_stream_ref>ref_of(s)``, e.g. rmm's ``rmm.librmm.cuda_stream_ref.stream_ref``), or
declare the function with ``stream_ref`` from here: either way the C++ compiler converts.
"""

from libcpp.memory cimport shared_ptr

from custream cimport Stream, custream_handle_t


cdef extern from "custream.hpp" namespace "custream" nogil:
    cdef cppclass stream_ref:
        stream_ref() noexcept
        stream_ref(custream_handle_t handle) noexcept
        custream_handle_t get() noexcept
        bint is_default() noexcept
        bint operator==(stream_ref other) noexcept
        bint operator!=(stream_ref other) noexcept


cdef extern from "custream.hpp" namespace "custream":
    cdef cppclass stream:
        stream() noexcept
        # The reference, handed to the caller: the Stream, or NULL (Cython raises the error).
        object release()
        stream_ref ref() noexcept nogil
        bint is_closed() noexcept nogil

    stream to_python[T](shared_ptr[T] owner, stream_ref handle, int device) noexcept


cdef inline stream_ref ref_of(Stream s) noexcept nogil:
    """The view of ``s``'s handle: a field load. The handle stays readable after ``close()``;
    check ``is_closed(s)`` (from custream) where that can happen."""
    return stream_ref(s.handle)
