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
 * Stream for a stream_ref, gets nanobind's TypeError naming the argument's type. Python keeps
 * the argument alive for the call, and so the stream the view names. A returned
 * custream::stream gives Python its custream.Stream; an empty one gives None, or raises as is
 * the Python error a failed custream call left set. A returned stream_ref gives a Stream
 * borrowing the handle.
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

/* nanobind raises the error a null result leaves set, as it is. */
template <class T>
struct custream_caster {
    NB_TYPE_CASTER(T, CUSTREAM_NB_NAME)

    bool from_python(handle src, uint8_t, cleanup_list *) noexcept { return ::custream::detail::load(src.ptr(), value); }

    static handle from_cpp(T &&s, rv_policy, cleanup_list *) noexcept { return ::custream::detail::result(std::move(s)); }
    static handle from_cpp(const T &s, rv_policy, cleanup_list *) noexcept { return ::custream::detail::result(s); }
};

#undef CUSTREAM_NB_NAME

template <>
struct type_caster<::custream::stream_ref> : custream_caster<::custream::stream_ref> {};
template <>
struct type_caster<::custream::stream> : custream_caster<::custream::stream> {};

}  // namespace nanobind::detail

#endif /* CUSTREAM_NANOBIND_HPP */
