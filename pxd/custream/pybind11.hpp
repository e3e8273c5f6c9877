/*
 * custream/pybind11.hpp: pybind11 type casters for custream::stream_ref and custream::stream.
 *
 *     #include <custream/pybind11.hpp>      // include dir: custream.get_include()
 *
 *     m.def("fill", [](custream::stream_ref s) { launch(..., cuda::stream_ref(s)); });
 *     m.def("make", [] { return custream::to_python(cuda::stream{cuda::device_ref{0}}, 0); });
 *
 * A stream_ref or stream argument accepts a custream.Stream or any object speaking the CUDA
 * Stream Protocol (CuPy, PyTorch, cuda.core, numba-cuda, rmm); anything else gets pybind11's
 * TypeError naming the argument, and a closed Stream for a stream_ref the ValueError every face
 * raises for it (`handle on a closed custream.Stream`). Python keeps the argument alive for the
 * call, and so the stream the view names. A returned custream::stream
 * gives Python its custream.Stream; an empty one gives None, or raises (as error_already_set)
 * the Python error a failed custream call left set. A returned stream_ref gives a Stream
 * borrowing the handle.
 */
#ifndef CUSTREAM_PYBIND11_HPP
#define CUSTREAM_PYBIND11_HPP

#include <pybind11/pybind11.h>

#include "../custream.hpp"

namespace pybind11::detail {

#if PYBIND11_VERSION_MAJOR >= 3
#define CUSTREAM_PYBIND11_NAME io_name(::custream::python_arg_type, ::custream::python_type)
#else
#define CUSTREAM_PYBIND11_NAME const_name(::custream::python_type)
#endif

template <class T>
struct custream_caster {
    PYBIND11_TYPE_CASTER(T, CUSTREAM_PYBIND11_NAME);

    /* A closed Stream's ValueError is thrown: pybind11 raises it as it is (from a call, and
     * from py::cast), instead of trying the next overload and then raising its TypeError. */
    bool load(handle src, bool) {
        if (::custream::detail::load(src.ptr(), value)) return true;
        if (PyErr_Occurred()) throw error_already_set();
        return false;
    }

    /* pybind11 would wrap a null result in its own "Unable to convert" TypeError: throwing
     * keeps custream's error as it is. */
    static handle cast(T &&s, return_value_policy, handle) { return checked(::custream::detail::result(std::move(s))); }
    static handle cast(const T &s, return_value_policy, handle) { return checked(::custream::detail::result(s)); }

  private:
    static handle checked(PyObject *result) {
        if (result == nullptr) throw error_already_set();
        return result;
    }
};

#undef CUSTREAM_PYBIND11_NAME

template <>
struct type_caster<::custream::stream_ref> : custream_caster<::custream::stream_ref> {};
template <>
struct type_caster<::custream::stream> : custream_caster<::custream::stream> {};

}  // namespace pybind11::detail

#endif /* CUSTREAM_PYBIND11_HPP */

