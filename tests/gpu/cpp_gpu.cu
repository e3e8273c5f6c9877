/*
 * A nanobind extension compiled with nvcc (test_gpu_cpp.py builds it): kernels launched on the
 * cuda::stream_ref that a custream::stream_ref argument converts to, whatever Python stream
 * came in (custream, CuPy, PyTorch), and cuda::streams made here and handed to Python.
 *
 * Ordering is proven as in custream_gpu_helpers.py: spin_then_mark spins ~100 ms on the stream
 * and then writes 1 to out[0]; copy_mark copies out[0] to out[1] on a stream. is_done() false
 * right after the spin means the kernel went to that very stream.
 */
#include <cuda/stream>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <custream/nanobind.hpp>
#include <nanobind/stl/pair.h>

namespace nb = nanobind;

namespace {

__global__ void spin_then_mark(long long *out, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    reinterpret_cast<volatile long long *>(out)[0] = 1;
    __threadfence_system();
}

__global__ void copy_mark(long long *out) {
    volatile long long *o = out;
    o[1] = o[0];
    __threadfence_system();
}

long long *out = nullptr;
std::atomic<int> destroyed{0};

void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/* A cuda::stream that counts its destruction, so a test can see Python destroy it once. */
struct counted_stream : cuda::stream {
    explicit counted_stream(cuda::stream &&s) noexcept : cuda::stream(std::move(s)) {}
    counted_stream(counted_stream &&) noexcept = default;
    counted_stream &operator=(counted_stream &&) noexcept = default;
    ~counted_stream() {
        if (*this != cuda::invalid_stream) destroyed += 1;
    }
};

}  // namespace

NB_MODULE(cpp_gpu, m) {
    if (custream_import() < 0) throw nb::python_error();

    m.def("reset", [] {
        if (out == nullptr) check(cudaMalloc(&out, 2 * sizeof(long long)), "cudaMalloc");
        check(cudaMemset(out, 0, 2 * sizeof(long long)), "cudaMemset");
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    });
    m.def("spin_then_mark", [](custream::stream_ref s, long long cycles) {
        cuda::stream_ref stream = s;  // the view, as CCCL's
        spin_then_mark<<<1, 1, 0, stream.get()>>>(out, cycles);
        check(cudaGetLastError(), "spin_then_mark launch");
    });
    m.def("copy_mark", [](custream::stream_ref s) {
        copy_mark<<<1, 1, 0, cuda::stream_ref(s).get()>>>(out);
        check(cudaGetLastError(), "copy_mark launch");
    });
    m.def("is_done", [](custream::stream_ref s) { return cuda::stream_ref(s).is_done(); });
    m.def("sync", [](custream::stream_ref s) {
        nb::gil_scoped_release unlocked;
        cuda::stream_ref(s).sync();
    });
    m.def("result", [] {
        long long host[2] = {0, 0};
        check(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
        return std::make_pair(host[0], host[1]);
    });
    // A cuda::stream made here, owned by Python from now on.
    m.def("make", [](int device) {
        return custream::to_python(counted_stream(cuda::stream{cuda::device_ref{device}}), device);
    });
    m.def("make_plain", [](int device) {
        return custream::to_python(cuda::stream{cuda::device_ref{device}}, device);
    });
    m.def("destroyed", [] { return destroyed.load(); });
}
