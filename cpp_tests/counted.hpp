/* What plain.cpp and casters.cpp count, per slot (each test takes its own slot, so no test's
 * counts depend on another's garbage): deleter calls and deaths of the one live instance. */
#pragma once

#include <atomic>
#include <stdexcept>
#include <utility>

constexpr int SLOTS = 256;
inline std::atomic<int> calls[SLOTS];      // a deleter ran
inline std::atomic<int> destroyed[SLOTS];  // a live deleter, owner or shared object died

/* Counts its death once: moves hand the liveness on. With Throws, the death also throws
 * (allowed by noexcept(false); custream.hpp must catch it). */
template <bool Throws = false>
struct counted_t {
    int slot;
    bool live = true;
    explicit counted_t(int s) : slot(s) {}
    counted_t(counted_t &&o) noexcept : slot(o.slot), live(std::exchange(o.live, false)) {}
    counted_t &operator=(counted_t &&) = delete;
    ~counted_t() noexcept(!Throws) {
        if (!live) return;
        destroyed[slot] += 1;
        if constexpr (Throws) throw std::runtime_error("deleter destructor failed on purpose");
    }
};
using counted = counted_t<false>;
