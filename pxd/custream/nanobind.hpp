/*
 * custream/nanobind.hpp: nanobind type casters for custream::stream_ref and custream::stream.
 *
 *     #include <custream/nanobind.hpp>      // include dir: custream.get_include()
 *
 *     m.def("fill", [](custream::stream_ref s) { launch(..., cuda::stream_ref(s)); });
 *     m.def("make", [] { return custream::to_python(cuda::stream{cuda::device_ref{0}}, 0); });
 *
 * A stream_ref or stream argument accepts a custream.Stream or any object speaking the CUDA
 * Stream Protocol (CuPy, PyTorch, cuda.core, numba-cuda, rmm); anything else gets nanobind's
 * TypeError naming the argument's type, and a closed Stream for a stream_ref the ValueError
 * every face raises for it (`handle on a closed custream.Stream`). Python keeps the argument
 * alive for the call, and so the stream the view names. A returned
 * custream::stream gives Python its custream.Stream; an empty one gives None, or raises as is
 * the Python error a failed custream call left set. A returned stream_ref gives a Stream
 * borrowing the handle.
 */
#ifndef CUSTREAM_NANOBIND_HPP
#define CUSTREAM_NANOBIND_HPP

#include <nanobind/nanobind.h>

#include <optional>

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

    bool from_python(handle src, uint32_t, cleanup_list *) noexcept { return ::custream::detail::load(src.ptr(), value); }

    static handle from_cpp(T &&s, rv_policy, cleanup_list *) noexcept { return ::custream::detail::result(std::move(s)); }
    static handle from_cpp(const T &s, rv_policy, cleanup_list *) noexcept { return ::custream::detail::result(s); }
};

#undef CUSTREAM_NB_NAME

/* A closed custream.Stream is a stream of the right type, closed: the ValueError every face
 * raises for it, not nanobind's TypeError. from_python may not throw (a caster nested in
 * std::optional and the like is called from a noexcept function), so it accepts the Stream and
 * says so in can_cast(), as nanobind's own char caster does: a function's argument is then
 * converted, and the conversion raises the ValueError (nanobind's dispatcher catches it); a
 * nested caster or nb::cast checks can_cast() first and fails as for any other type. */
struct stream_ref_caster : custream_caster<::custream::stream_ref> {
    using Value = ::custream::stream_ref;

    bool from_python(handle src, uint32_t flags, cleanup_list *cleanup) noexcept {
        closed_ = nullptr;
        if (custream_caster::from_python(src, flags, cleanup)) return true;
        if (!PyErr_Occurred()) return false;  // not a stream
        PyErr_Clear();                         // a closed Stream: raised if it is converted
        closed_ = src.ptr();
        return true;
    }

    template <typename T_>
    bool can_cast() const noexcept {
        return closed_ == nullptr;
    }

    explicit operator Value *() { return &checked(); }
    explicit operator Value &() { return checked(); }
    explicit operator Value &&() { return std::move(checked()); }

  private:
    Value &checked() {
        if (closed_ != nullptr) {
            custream_handle_t unused = nullptr;
            ::Custream_HandleChecked(closed_, &unused);  // custream's own ValueError
            throw python_error();
        }
        return value;
    }

    PyObject *closed_ = nullptr;  // borrowed: the argument, alive for the call
};

template <>
struct type_caster<::custream::stream_ref> : stream_ref_caster {};
template <>
struct type_caster<::custream::stream> : custream_caster<::custream::stream> {};

/* std::optional<custream::stream_ref> (`stream=None`): None, or a stream_ref as above, a closed
 * Stream included. nanobind's own optional caster checks can_cast() and would turn the closed
 * Stream into its TypeError; this one, more specialized, converts it and so raises the
 * ValueError. (With or without <nanobind/stl/optional.h>.) */
struct optional_stream_ref_caster_base {
    NB_TYPE_CASTER(std::optional<::custream::stream_ref>, optional_name(stream_ref_caster::Name))
};

struct optional_stream_ref_caster : optional_stream_ref_caster_base {
    using Value = std::optional<::custream::stream_ref>;

    bool from_python(handle src, uint32_t flags, cleanup_list *cleanup) noexcept {
        none_ = src.is_none();
        return none_ || ref_.from_python(src, flags, cleanup);
    }

    template <typename T_>
    bool can_cast() const noexcept {
        return none_ || ref_.template can_cast<::custream::stream_ref>();
    }

    static handle from_cpp(const Value &v, rv_policy policy, cleanup_list *cleanup) noexcept {
        if (!v) return none().release();
        return stream_ref_caster::from_cpp(*v, policy, cleanup);
    }

    explicit operator Value *() { return &converted(); }
    explicit operator Value &() { return converted(); }
    explicit operator Value &&() { return std::move(converted()); }

  private:
    Value &converted() {
        if (none_) {
            value.reset();
        } else {
            value.emplace(static_cast<::custream::stream_ref &>(ref_));  // raises for a closed Stream
        }
        return value;
    }

    stream_ref_caster ref_;
    bool none_ = false;
};

template <>
struct type_caster<std::optional<::custream::stream_ref>> : optional_stream_ref_caster {};

}  // namespace nanobind::detail

#endif /* CUSTREAM_NANOBIND_HPP */
