/*
 * One module, two bindings: built with -DUSE_NANOBIND against custream/nanobind.hpp (module
 * nb_ext) and without it against custream/pybind11.hpp (module pb_ext). The m.def lines are
 * the same code for both; test_cpp_casters.py runs every test on each. CCCL's <cuda/stream>
 * comes first when CUSTREAM_TEST_CCCL is set, as in a real extension.
 */
#ifdef CUSTREAM_TEST_CCCL
#include <cuda/stream>
#endif

#include "counted.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#if defined(USE_NANOBIND)
#include <custream/nanobind.hpp>
#include <nanobind/stl/optional.h>
namespace bind = nanobind;
using bind_error = nanobind::python_error;
#define MODULE(name, m) NB_MODULE(name, m)
#else
#include <custream/pybind11.hpp>
#include <pybind11/stl.h>
namespace bind = pybind11;
using bind_error = pybind11::error_already_set;
#define MODULE(name, m) PYBIND11_MODULE(name, m)
#endif

#ifndef MODNAME
#define MODNAME nb_ext
#endif

namespace {

std::shared_ptr<int> cpp_side[SLOTS];

uintptr_t to_int(custream::stream_ref s) { return reinterpret_cast<uintptr_t>(s.get()); }
custream::stream_ref from_int(uintptr_t h) { return custream::stream_ref(reinterpret_cast<custream_handle_t>(h)); }

#ifdef CUSTREAM_TEST_CCCL
uintptr_t takes_cccl(cuda::stream_ref s) { return reinterpret_cast<uintptr_t>(s.get()); }
#endif

}  // namespace

MODULE(MODNAME, m) {
    if (custream_import() < 0) throw bind_error();

    m.def("handle_of", [](custream::stream_ref s) { return to_int(s); });
    m.def("handle_of_uintptr", [](uintptr_t h) { return h; });
    m.def("handle_of_owned", [](custream::stream s) { return to_int(s.ref()); });
    m.def("cast_ref", [](bind::handle h) { return to_int(bind::cast<custream::stream_ref>(h)); });
#if defined(USE_NANOBIND)
    m.def("try_ref", [](bind::handle h) {
        custream::stream_ref s;
        return bind::try_cast(h, s);
    });
#endif
    m.def("maybe_handle", [](std::optional<custream::stream_ref> s) -> std::optional<uintptr_t> {
        if (!s) return std::nullopt;
        return to_int(*s);
    });
    m.def("echo", [](custream::stream s) { return s; });
    m.def("echo_ref", [](custream::stream_ref s) { return s; });
    m.def("empty", [] { return custream::stream(); });
    m.def("call_during", [](custream::stream_ref s, bind::object callback) {
        callback();  // the caller drops its references and collects: the argument must live on
        return to_int(s);
    });
    m.def("call_during_owned", [](custream::stream s, bind::object callback) {
        callback();  // the Stream the caster made for a producer is held by `s` alone
        return to_int(s.ref());
    });
    // A caster that kept no reference to the Stream it made: the lifetime test must catch it.
    m.def("call_during_dropped", [](custream::stream s, bind::object callback) {
        Py_DECREF(s.release());
        callback();
        return uintptr_t{0};
    });
    m.def("synchronize", [](custream::stream s) { custream::check<bind_error>(s.synchronize()); });
    m.def("wrap", [](uintptr_t h, int device) { return custream::from_handle(from_int(h), device); });
    m.def("give", [](uintptr_t h, int device, int slot) {
        calls[slot] = 0;
        destroyed[slot] = 0;
        return custream::to_python(from_int(h), device, [slot, c = counted(slot)]() noexcept { calls[slot] += 1; });
    });
    m.def("share", [](uintptr_t h, int device, int slot) {
        destroyed[slot] = 0;
        int *raw = new int(slot);
        cpp_side[slot] = std::shared_ptr<int>(raw, [](int *p) {
            destroyed[*p] += 1;
            delete p;
        });
        return custream::to_python(cpp_side[slot], from_int(h), device);
    });
    m.def("cpp_drop", [](int slot) { cpp_side[slot].reset(); });
    m.def("record", [](int slot) { return bind::make_tuple(calls[slot].load(), destroyed[slot].load()); });
#ifdef CUSTREAM_TEST_CCCL
    m.def("takes_cccl", [](custream::stream_ref s) { return takes_cccl(s); });
    // Without a driver cuda::stream's constructor throws cuda_error: the binding raises it.
    m.def("make_cccl", [](int device) {
        return custream::to_python(cuda::stream{cuda::device_ref{device}}, device);
    });
#endif
}
