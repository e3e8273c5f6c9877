/* What cy_ext.pyx calls: a C++ library function taking CCCL's cuda::stream_ref (as libcudf's
 * functions take a stream), and an owner whose death is counted. */
#pragma once

#include <cuda/stream>

#include <atomic>
#include <cstdint>
#include <memory>

inline std::uintptr_t consume(cuda::stream_ref s) noexcept { return reinterpret_cast<std::uintptr_t>(s.get()); }

inline std::atomic<int> owner_deaths{0};

inline std::shared_ptr<int> counted_owner() {
    return std::shared_ptr<int>(new int(0), [](int *p) {
        owner_deaths += 1;
        delete p;
    });
}
