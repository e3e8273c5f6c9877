/*
 * custream/nanobind.hpp: nanobind type casters for custream::stream_ref and custream::stream.
 *
 *     #include <custream/nanobind.hpp>      // include dir: custream.get_include()
 *
 *     m.def("fill", [](custream::stream_ref s) { launch(..., cuda::stream_ref(s)); });
 *     m.def("make", [] { return custream::to_python(cuda::stream{cuda::device_ref{0}}, 0); });
 *
 * A stream_ref or stream argument accepts a custream.Stream or any object speaking the CUDA
 * Stream Protocol (CuPy, PyTorch, cuda.core, numba-cuda, rmm); anything else, or a closed
 * Stream, gets nanobind's TypeError naming the argument's type. Python keeps the argument
 * alive for the call, and so the stream the view names. A returned custream::stream gives
 * Python its custream.Stream; an empty one gives None, or raises the Python error a failed
 * custream call left set. A returned stream_ref gives a Stream borrowing the handle.
 */
#ifndef CUSTREAM_NANOBIND_HPP
#define CUSTREAM_NANOBIND_HPP

#include <nanobind/nanobind.h>

#include "../custream.hpp"

namespace nanobind::detail {

#if NB_VERSION_MAJOR >= 2
#define CUSTREAM_NB_NAME io_name(::custream::python_arg_type, ::custream::python_type)
#else
#define CUSTREAM_NB_NAME const_name(::custream::python_type)
#endif

template <>
struct type_caster<::custream::stream_ref> {
    NB_TYPE_CASTER(::custream::stream_ref, CUSTREAM_NB_NAME)

    bool from_python(handle src, uint8_t, cleanup_list *) noexcept {
        std::optional<::custream::stream_ref> ref = ::custream::stream_ref::from_python(src.ptr());
        if (!ref) {
            PyErr_Clear();  // nanobind reports the mismatch itself
            return false;
        }
        value = *ref;
        return true;
    }

    static handle from_cpp(::custream::stream_ref ref, rv_policy, cleanup_list *) noexcept {
        return ::custream::from_handle(ref).release();
    }
};

template <>
struct type_caster<::custream::stream> {
    NB_TYPE_CASTER(::custream::stream, CUSTREAM_NB_NAME)

    bool from_python(handle src, uint8_t, cleanup_list *) noexcept {
        value = ::custream::stream::from_python(src.ptr());
        if (!value) {
            PyErr_Clear();
            return false;
        }
        return true;
    }

    /* Null with the error set makes nanobind raise that error as is. */
    static handle from_cpp(::custream::stream &&s, rv_policy, cleanup_list *) noexcept {
        if (!s) return PyErr_Occurred() ? handle() : none().release();
        return s.release();
    }

    static handle from_cpp(const ::custream::stream &s, rv_policy, cleanup_list *) noexcept {
        if (!s) return PyErr_Occurred() ? handle() : none().release();
        return handle(s.get()).inc_ref();
    }
};

#undef CUSTREAM_NB_NAME

}  // namespace nanobind::detail

#endif /* CUSTREAM_NANOBIND_HPP */
