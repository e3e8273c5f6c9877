/*
 * custream/pybind11.hpp: pybind11 type casters for custream::stream_ref and custream::stream.
 *
 *     #include <custream/pybind11.hpp>      // include dir: custream.get_include()
 *
 *     m.def("fill", [](custream::stream_ref s) { launch(..., cuda::stream_ref(s)); });
 *     m.def("make", [] { return custream::to_python(cuda::stream{cuda::device_ref{0}}, 0); });
 *
 * A stream_ref or stream argument accepts a custream.Stream or any object speaking the CUDA
 * Stream Protocol (CuPy, PyTorch, cuda.core, numba-cuda, rmm); anything else, or a closed
 * Stream, gets pybind11's TypeError naming the argument. Python keeps the argument alive for
 * the call, and so the stream the view names. A returned custream::stream gives Python its
 * custream.Stream; an empty one gives None, or raises (as error_already_set) the Python error
 * a failed custream call left set. A returned stream_ref gives a Stream borrowing the handle.
 */
#ifndef CUSTREAM_PYBIND11_HPP
#define CUSTREAM_PYBIND11_HPP

#include <pybind11/pybind11.h>

#include "../custream.hpp"

namespace pybind11::detail {

#if PYBIND11_VERSION_MAJOR >= 3
#define CUSTREAM_PYBIND11_NAME io_name(::custream::python_arg_type, ::custream::python_type)
#else
#define CUSTREAM_PYBIND11_NAME _(::custream::python_type)
#endif

template <>
struct type_caster<::custream::stream_ref> {
    PYBIND11_TYPE_CASTER(::custream::stream_ref, CUSTREAM_PYBIND11_NAME);

    bool load(handle src, bool) {
        std::optional<::custream::stream_ref> ref = ::custream::stream_ref::from_python(src.ptr());
        if (!ref) {
            PyErr_Clear();  // pybind11 reports the mismatch itself
            return false;
        }
        value = *ref;
        return true;
    }

    static handle cast(::custream::stream_ref ref, return_value_policy, handle) {
        ::custream::stream s = ::custream::from_handle(ref);
        if (!s) throw error_already_set();
        return s.release();
    }
};

template <>
struct type_caster<::custream::stream> {
    PYBIND11_TYPE_CASTER(::custream::stream, CUSTREAM_PYBIND11_NAME);

    bool load(handle src, bool) {
        value = ::custream::stream::from_python(src.ptr());
        if (!value) {
            PyErr_Clear();
            return false;
        }
        return true;
    }

    /* pybind11 would wrap a null result in its own "Unable to convert" TypeError: throwing
     * keeps custream's error as it is. */
    static handle cast(::custream::stream &&s, return_value_policy, handle) {
        if (!s) {
            if (PyErr_Occurred()) throw error_already_set();
            return none().release();
        }
        return s.release();
    }

    static handle cast(const ::custream::stream &s, return_value_policy, handle) {
        if (!s) {
            if (PyErr_Occurred()) throw error_already_set();
            return none().release();
        }
        return handle(s.get()).inc_ref();
    }
};

#undef CUSTREAM_PYBIND11_NAME

}  // namespace pybind11::detail

#endif /* CUSTREAM_PYBIND11_HPP */
