/*
 * custream.hpp: the C++ face of custream.Stream. Header-only, C++17, over custream.h.
 *
 *     #include "custream.hpp"            // include dir: custream.get_include()
 *
 * - custream::stream_ref: a non-owning, trivially copyable view of a stream handle, the shape
 *   of CCCL's cuda::stream_ref. It converts both ways with cuda::stream_ref (and so goes into
 *   anything that takes one, such as rmm::cuda_stream_view or rmm::device_buffer).
 * - custream::stream: an owning, move-only handle on one Python custream.Stream reference.
 * - custream::to_python(...): a C++ owner hands its stream to Python, and its release runs
 *   exactly once, on close() or deallocation, never after finalization nor in a forked child.
 *   Three shapes: a cuda::stream moved in, a std::shared_ptr shared with Python, any callable.
 *
 * No CUDA header is needed, nor included: CCCL's types are recognised by their shape (a
 * `value_type` that is cudaStream_t and a `get()`), so including <cuda/stream> before or
 * after this header, or not at all, changes nothing here.
 *
 * Errors: nothing here throws. A failing call leaves a Python exception set and returns
 * false, an empty optional or an empty custream::stream; custream/nanobind.hpp and
 * custream/pybind11.hpp turn that into the binding's own exception. Every call that touches a
 * Python object needs the GIL, except destroying a custream::stream, which takes it.
 */
#ifndef CUSTREAM_HPP
#define CUSTREAM_HPP

#if !defined(__cplusplus) || (__cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#error "custream.hpp needs C++17 or later; C code includes custream.h"
#endif

#include "custream.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

namespace custream {

inline constexpr int device_unknown = CUSTREAM_DEVICE_UNKNOWN;

/* The Python types of a stream argument and of a returned stream, for binding signatures:
 * what custream.as_stream accepts (CudaStreamProducer, a typing-only name of custream's: any
 * object with __cuda_stream__) and what comes back. */
inline constexpr char python_arg_type[] = "custream.Stream | custream.CudaStreamProducer";
inline constexpr char python_type[] = "custream.Stream";

class stream_ref;

namespace detail {

/* A stream-ref-shaped type: `value_type` is the handle type and `get()` returns it.
 * cuda::stream_ref and cuda::stream (CCCL) are; custream::stream is not (its get() is the
 * Python object). */
template <class T, class = void>
struct has_handle_get : std::false_type {};
template <class T>
struct has_handle_get<T, std::void_t<typename T::value_type, decltype(std::declval<const T &>().get())>>
    : std::bool_constant<std::is_same_v<typename T::value_type, custream_handle_t> &&
                         std::is_same_v<decltype(std::declval<const T &>().get()), custream_handle_t>> {};

template <class T>
inline constexpr bool is_foreign_handle_v = std::conjunction_v<std::negation<std::is_same<T, stream_ref>>, has_handle_get<T>>;

template <class T, class = void>
struct has_handle_release : std::false_type {};
template <class T>
struct has_handle_release<T, std::void_t<decltype(std::declval<T &>().release())>>
    : std::is_same<decltype(std::declval<T &>().release()), custream_handle_t> {};

/* What a stream_ref converts to: another view (trivially copyable, built from a handle). An
 * owner such as cuda::stream has no public constructor from a handle, so it never qualifies. */
template <class T>
inline constexpr bool is_ref_target_v = std::conjunction_v<std::bool_constant<is_foreign_handle_v<T>>,
                                                           std::is_trivially_copyable<T>,
                                                           std::is_constructible<T, custream_handle_t>>;

/* What to_python(S&&) takes: a move-only owner of a stream (cuda::stream) with get() and
 * release(), moved as a whole so that its own destructor destroys the stream. */
template <class T>
inline constexpr bool is_owner_v =
    std::conjunction_v<std::negation<std::is_reference<T>>, has_handle_get<T>, has_handle_release<T>,
                       std::negation<std::is_copy_constructible<T>>, std::is_nothrow_move_constructible<T>,
                       std::is_nothrow_move_assignable<T>>;

/* Every entry below fetches the table first; the inline checks read the type from it. */
inline bool imported() noexcept { return custream_table_() != nullptr || custream_import() == 0; }

inline bool is_stream(PyObject *obj) noexcept {
    return obj != nullptr && Py_TYPE(obj) == custream_table_()->StreamType;
}

inline bool interpreter_alive() noexcept {
    if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API >= 0x030D0000)
    return !Py_IsFinalizing();
#elif !defined(Py_LIMITED_API)
    return !_Py_IsFinalizing();
#else
    return true;  // the limited API before 3.13 cannot ask; Py_IsInitialized is what is left
#endif
}

/* Drop one reference from any thread. A reference outliving the interpreter is leaked on
 * purpose: taking the GIL during or after finalization can hang or crash the process. */
inline void decref_anywhere(PyObject *obj) noexcept {
    if (obj == nullptr || !interpreter_alive()) return;
#ifndef Py_LIMITED_API
    if (PyGILState_Check()) {  // the common case (a binding's argument): skip the GIL dance
        Py_DECREF(obj);
        return;
    }
#endif
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(obj);
    PyGILState_Release(gil);
}

}  // namespace detail

/* The exception `e` (by default, the one being handled) as a Python error: MemoryError for
 * std::bad_alloc, RuntimeError with what() for any other. For plain C++ bindings, in a catch
 * block around code that may throw (CCCL's cuda::stream constructor throws cuda_error). */
inline void set_error_from_exception(std::exception_ptr e = std::current_exception()) noexcept {
    if (!e) {
        PyErr_SetString(PyExc_RuntimeError, "custream: set_error_from_exception() called with no exception");
        return;
    }
    try {
        std::rethrow_exception(e);
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
    } catch (const std::exception &ex) {
        PyErr_SetString(PyExc_RuntimeError, ex.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "custream: unknown C++ exception");
    }
}

namespace detail {

/* A release that threw: nothing can propagate out of a C deleter, so the error goes to
 * sys.unraisablehook, as CPython does with exceptions in __del__. close() or the
 * deallocation that called us may carry an exception of its own: it is kept. */
inline void report_unraisable(const char *where) noexcept {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    set_error_from_exception();
    PyObject *context = PyUnicode_FromString(where);
    PyErr_WriteUnraisable(context);
    Py_XDECREF(context);
    PyErr_Restore(type, value, traceback);
}

}  // namespace detail

/* A non-owning view of a CUDA stream handle, like cuda::stream_ref: trivially copyable, no
 * lifetime of its own. Default-constructed, it is the null (legacy default) stream. */
class stream_ref {
  public:
    using value_type = custream_handle_t;

    constexpr stream_ref() noexcept = default;
    constexpr stream_ref(value_type handle) noexcept : handle_(handle) {}
    /* As in CCCL: a literal 0 or nullptr is more likely a bug than the default stream. */
    stream_ref(int) = delete;
    stream_ref(std::nullptr_t) = delete;

    /* From cuda::stream_ref, cuda::stream or any type of that shape. */
    template <class R, std::enable_if_t<detail::is_foreign_handle_v<R>, int> = 0>
    constexpr stream_ref(const R &other) noexcept : handle_(other.get()) {}

    /* To cuda::stream_ref, so a function taking one takes a custream::stream_ref. */
    template <class R, std::enable_if_t<detail::is_ref_target_v<R>, int> = 0>
    constexpr operator R() const noexcept {
        return R(handle_);
    }

    constexpr value_type get() const noexcept { return handle_; }

    /* The null, legacy and per-thread default streams: never destroyed, and they mean the
     * current context's stream wherever they are used. */
    bool is_default() const noexcept {
        // The tokens 0, 1 and 2 (CUSTREAM_NULL_STREAM, ..._LEGACY_..., ..._PER_THREAD_...).
        return reinterpret_cast<std::uintptr_t>(handle_) <= 2;
    }

    friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept { return a.handle_ == b.handle_; }
    friend constexpr bool operator!=(stream_ref a, stream_ref b) noexcept { return a.handle_ != b.handle_; }
    /* Mixed with cuda::stream_ref or cuda::stream: exact, so neither side's conversion makes
     * the comparison ambiguous. */
    template <class R, std::enable_if_t<detail::is_foreign_handle_v<R>, int> = 0>
    friend constexpr bool operator==(stream_ref a, const R &b) noexcept { return a.handle_ == b.get(); }
    template <class R, std::enable_if_t<detail::is_foreign_handle_v<R>, int> = 0>
    friend constexpr bool operator==(const R &a, stream_ref b) noexcept { return a.get() == b.handle_; }
    template <class R, std::enable_if_t<detail::is_foreign_handle_v<R>, int> = 0>
    friend constexpr bool operator!=(stream_ref a, const R &b) noexcept { return a.handle_ != b.get(); }
    template <class R, std::enable_if_t<detail::is_foreign_handle_v<R>, int> = 0>
    friend constexpr bool operator!=(const R &a, stream_ref b) noexcept { return a.get() != b.handle_; }

    /* The handle of a Python object: a custream.Stream (one type check and one load), or any
     * object speaking the CUDA Stream Protocol (through custream.as_stream). Empty, with a
     * Python error set, for anything else or for a closed Stream. The view is valid while
     * `obj` lives: keep it alive. Needs the GIL. */
    static std::optional<stream_ref> from_python(PyObject *obj) noexcept {
        if (!detail::imported()) return std::nullopt;
        custream_handle_t handle = nullptr;
        if (detail::is_stream(obj)) {
            const CustreamStream *s = reinterpret_cast<const CustreamStream *>(obj);
            if (!Custream_IsClosed(s)) return stream_ref(Custream_Handle(s));
            Custream_HandleChecked(obj, &handle);  // raises the closed-stream ValueError
            return std::nullopt;
        }
        PyObject *wrapped = Custream_AsStream(obj);
        if (wrapped == nullptr) return std::nullopt;
        // The wrapper only borrows obj's stream: dropping it leaves the handle to obj.
        int rc = Custream_HandleChecked(wrapped, &handle);
        Py_DECREF(wrapped);
        if (rc < 0) return std::nullopt;
        return stream_ref(handle);
    }

  private:
    value_type handle_ = nullptr;
};

static_assert(std::is_trivially_copyable_v<stream_ref>, "stream_ref must stay a plain value, as cuda::stream_ref");
static_assert(sizeof(stream_ref) == sizeof(custream_handle_t), "stream_ref is the handle and nothing else");

/* One reference to a Python custream.Stream, owned by C++: move-only, like cuda::stream. It
 * may be destroyed on any thread, with or without the GIL (it takes it to let go). */
namespace detail {

/* The release function of stream::release_after(F): call the heap-held callable, then delete
 * it, swallowing what either throws (custream's thread may call no Python to report it). */
template <class D>
void call_then_free(void *ctx) noexcept {
    D *d = static_cast<D *>(ctx);
    try {
        (*d)();
    } catch (...) {
    }
    try {
        delete d;
    } catch (...) {
    }
}

}  // namespace detail

class stream {
  public:
    constexpr stream() noexcept = default;
    stream(stream &&other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
    stream &operator=(stream &&other) noexcept {
        if (this != &other) {
            detail::decref_anywhere(obj_);
            obj_ = std::exchange(other.obj_, nullptr);
        }
        return *this;
    }
    stream(const stream &) = delete;
    stream &operator=(const stream &) = delete;
    ~stream() { detail::decref_anywhere(obj_); }

    /* custream.as_stream(obj): obj itself if it is a Stream, else a Stream borrowing its
     * stream and keeping it alive. Empty, with a Python error set, on failure. Needs the GIL. */
    static stream from_python(PyObject *obj) noexcept { return adopt(Custream_AsStream(obj)); }

    /* Take over a new reference to a custream.Stream, such as the Custream_* calls return.
     * NULL gives an empty stream (the caller's error stays set); another type, a TypeError. */
    static stream adopt(PyObject *new_reference) noexcept {
        stream s;
        if (new_reference == nullptr || !detail::imported()) return s;
        if (!detail::is_stream(new_reference)) {
            // tp_name is out of the limited API's reach; __name__ is not.
            PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(new_reference));
            PyObject *name = PyObject_GetAttrString(type, "__name__");
            PyErr_Format(PyExc_TypeError, "custream::stream::adopt() expected a custream.Stream, got %S",
                         name ? name : type);
            Py_XDECREF(name);
            Py_DECREF(new_reference);
            return s;
        }
        s.obj_ = new_reference;
        return s;
    }

    explicit operator bool() const noexcept { return obj_ != nullptr; }
    /* The Python object, borrowed; nullptr when empty. */
    PyObject *get() const noexcept { return obj_; }
    /* Give the reference to the caller (to return it to Python); the stream is left empty. */
    PyObject *release() noexcept { return std::exchange(obj_, nullptr); }

    /* The handle: one load, no check, no GIL. After close() it may name a destroyed stream;
     * is_closed() says so, and stream_ref::from_python(get()) refuses it. */
    stream_ref ref() const noexcept {
        return obj_ ? stream_ref(Custream_Handle(reinterpret_cast<const CustreamStream *>(obj_))) : stream_ref();
    }
    operator stream_ref() const noexcept { return ref(); }
    template <class R, std::enable_if_t<detail::is_ref_target_v<R>, int> = 0>
    operator R() const noexcept {
        return R(ref().get());
    }

    /* An atomic load: no lock, no GIL. An empty stream counts as closed. */
    bool is_closed() const noexcept {
        return obj_ == nullptr || Custream_IsClosed(reinterpret_cast<const CustreamStream *>(obj_));
    }

    /* Wait for the stream's work (custream releases the GIL while waiting). Needs the GIL. */
    bool synchronize() const noexcept { return Custream_Synchronize(obj_) == 0; }

    /* Wait at most `seconds` (INFINITY: no limit) for the stream's work, the GIL released; false
     * with TimeoutError set when it gives up (the stream untouched), or with the exception of a
     * signal's handler (Ctrl-C) on the main thread. Needs the GIL. */
    bool synchronize(double seconds) const noexcept { return Custream_SynchronizeTimeout(obj_, seconds) == 0; }

    /* How many SMs the stream's work may use: its green context's, else the whole device's
     * (Custream_SmCount), e.g. to size a persistent kernel's grid. Empty, with a Python error
     * set, on failure (a closed or empty stream, no driver). Needs the GIL. */
    std::optional<unsigned> sm_count() const noexcept {
        unsigned n = 0;
        if (Custream_SmCount(obj_, &n) < 0) return std::nullopt;
        return n;
    }

    /* The driver's id of the stream (Custream_StreamId; cuda::stream_ref::id() of CCCL):
     * unique in the process while the stream lives. Empty, with a Python error set, on
     * failure (a closed or empty stream, no driver). Needs the GIL. */
    std::optional<unsigned long long> id() const noexcept {
        unsigned long long v = 0;
        if (Custream_StreamId(obj_, &v) < 0) return std::nullopt;
        return v;
    }

    /* The stream's device ordinal (Custream_StreamDevice): known, or asked of the driver once,
     * never by changing the current context. Empty, with a Python error set, on failure.
     * Needs the GIL. */
    std::optional<int> device() const noexcept {
        int d = -1;
        if (Custream_StreamDevice(obj_, &d) < 0) return std::nullopt;
        return d;
    }

    /* The green context the stream runs in (the same type as CUDA's CUgreenCtx), nullptr when
     * it runs on the whole device (Custream_GreenContext). It stays valid while the stream is
     * open. Empty, with a Python error set, on failure. Needs the GIL. */
    std::optional<custream_green_ctx_t> green_context() const noexcept {
        custream_green_ctx_t g = nullptr;
        if (Custream_GreenContext(obj_, &g) < 0) return std::nullopt;
        return g;
    }

    /* The conditions of wait_value (custream.h's CUSTREAM_WAIT_*). */
    enum class wait_op : int {
        geq = CUSTREAM_WAIT_GEQ, /* (int)(*addr - value) >= 0: survives the counter's wrap */
        eq = CUSTREAM_WAIT_EQ,
        and_ = CUSTREAM_WAIT_AND, /* (*addr & value) != 0 */
        nor = CUSTREAM_WAIT_NOR,  /* ~(*addr | value) != 0, where the device supports it */
    };

    /* Queue a write of the `width`-bit (32 or 64) `value` to the GPU address `address` once the
     * work queued before it is done (Custream_WriteValue; checked as s.write_value() checks).
     * `flush` flushes the remote writes that reached the device first, where it can. False,
     * with a Python error set, on failure. Needs the GIL. */
    bool write_value(std::uint64_t address, std::uint64_t value, int width = 32, bool flush = false) const noexcept {
        return Custream_WriteValue(obj_, address, value, width, flush ? 1 : 0) == 0;
    }

    /* The work queued after this waits until the word at `address` meets `op` against `value`
     * (Custream_WaitValue); the caller does not wait. False, with a Python error set, on
     * failure. Needs the GIL. */
    bool wait_value(std::uint64_t address, std::uint64_t value, int width = 32, wait_op op = wait_op::geq,
                    bool flush = false) const noexcept {
        return Custream_WaitValue(obj_, address, value, width, static_cast<int>(op), flush ? 1 : 0) == 0;
    }

    /* Call fn(ctx) once the work queued on the stream so far is done, on custream's own thread,
     * never the driver's (Custream_ReleaseAfter: s.keep_alive()'s C face); fn is called exactly
     * once in every case. False, with a Python error set, on failure. Needs the GIL. */
    bool release_after(custream_release_fn_t fn, void *ctx) const noexcept {
        return Custream_ReleaseAfter(obj_, fn, ctx) == 0;
    }

    /* The same for any callable `f()`, moved to the heap: called once the work queued so far is
     * done (a native buffer the work reads freed in stream order: `[buf = std::move(buf)] {}`),
     * then destroyed, on custream's thread; both must make no CUDA and no Python call, and an
     * exception either throws is swallowed there (no Python may be called to report it). It is
     * called exactly once, on failure too (false, with a Python error set); only when its copy
     * cannot be allocated is it never called (MemoryError). Needs the GIL. */
    template <class F, std::enable_if_t<std::is_invocable_v<std::decay_t<F> &>, int> = 0>
    bool release_after(F &&f) const noexcept {
        using D = std::decay_t<F>;
        D *d = nullptr;
        try {
            d = new (std::nothrow) D(std::forward<F>(f));
        } catch (...) {
            d = nullptr;
        }
        if (d == nullptr) {
            PyErr_NoMemory();
            return false;
        }
        return Custream_ReleaseAfter(obj_, &detail::call_then_free<D>, d) == 0;
    }

    /* Stream.close(): idempotent; runs a C++ owner's release if this is the first close.
     * Needs the GIL. */
    bool close() const noexcept {
        if (obj_ == nullptr) return true;
        PyObject *r = PyObject_CallMethod(obj_, "close", nullptr);
        Py_XDECREF(r);
        return r != nullptr;
    }

  private:
    PyObject *obj_ = nullptr;
};

/* A custream.Stream borrowing `handle`, which the caller keeps alive; `owner`, if given, is a
 * Python object kept alive until close or deallocation (Stream.from_handle). Needs the GIL. */
inline stream from_handle(stream_ref handle, int device = device_unknown, PyObject *owner = nullptr) noexcept {
    return stream::adopt(Custream_FromHandle(handle.get(), device, owner));
}

/* Another process's IPC event, opened from the driver's raw handle: the `size` bytes at
 * `handle`, which must be the 64 of a CUipcEventHandle or cudaIpcEventHandle_t (PyTorch's,
 * CuPy's, cuda.core's, any cuIpcGetEventHandle), on `device`, an ordinal of this process
 * (Custream_EventFromIpcHandle; custream.Event.from_ipc_handle(raw, device=device)). A new
 * reference to the custream.Event, or nullptr with a Python error set (ValueError for another
 * size or a device this process does not have, before the driver opens anything). Needs the
 * GIL. */
inline PyObject *event_from_ipc_handle(const void *handle, std::size_t size, int device) noexcept {
    return Custream_EventFromIpcHandle(handle, size, device);
}

/* The same from the handle struct itself (CUipcEventHandle, cudaIpcEventHandle_t: any
 * trivially copyable type of 64 bytes; no CUDA header is needed here). */
template <class Handle, class = std::enable_if_t<std::is_trivially_copyable_v<Handle> && sizeof(Handle) == 64>>
inline PyObject *event_from_ipc_handle(const Handle &handle, int device) noexcept {
    return Custream_EventFromIpcHandle(&handle, sizeof handle, device);
}

namespace detail {

/* The C deleter for a heap-held callable: call it, then destroy it (for an owner, the
 * destruction is the release). custream calls this once, with the GIL held. */
template <class D>
void call_then_delete(void *ctx, custream_handle_t handle) noexcept {
    D *d = static_cast<D *>(ctx);
    try {
        if constexpr (std::is_invocable_v<D &, custream_handle_t>) {
            (*d)(handle);
        } else {
            (*d)();
        }
    } catch (...) {
        report_unraisable("custream: a C++ stream deleter");
    }
    try {
        delete d;
    } catch (...) {
        report_unraisable("custream: destroying a C++ stream deleter");
    }
}

/* Hand the heap-held `d` to a new custream.Stream. On failure `d` is still the caller's. */
template <class D>
stream wrap_with(stream_ref handle, int device, D *d) noexcept {
    return stream::adopt(Custream_FromHandleWithDeleter(handle.get(), device, &call_then_delete<D>, d));
}

template <class S>
struct owner_box {
    S owner;
    void operator()() const noexcept {}  // the release is ~S(), run when the box is deleted
};

}  // namespace detail

/* Python takes `handle`; `deleter(handle)` (or `deleter()`) runs exactly once, on close or
 * deallocation, with the GIL held, and is then destroyed. If the call fails (a Python error
 * is set, the result is empty) the deleter is destroyed without being called and the handle
 * is still the caller's. An exception from the deleter goes to sys.unraisablehook. */
template <class Deleter>
stream to_python(stream_ref handle, int device, Deleter deleter) noexcept {
    static_assert(std::is_invocable_v<Deleter &, custream_handle_t> || std::is_invocable_v<Deleter &>,
                  "custream::to_python: the deleter must be callable with a custream_handle_t or with nothing");
    Deleter *held = nullptr;
    try {
        held = new Deleter(std::move(deleter));
    } catch (...) {
        set_error_from_exception();
        return stream();
    }
    stream s = detail::wrap_with(handle, device, held);
    if (!s) {
        try {
            delete held;
        } catch (...) {
            detail::report_unraisable("custream: destroying a C++ stream deleter");
        }
    }
    return s;
}

/* Python shares ownership with C++: it holds a copy of `owner` until close or deallocation,
 * so the stream lives while either side does (e.g. a shared_ptr<rmm::cuda_stream>). */
template <class T>
stream to_python(std::shared_ptr<T> owner, stream_ref handle, int device = device_unknown) noexcept {
    return to_python(handle, device, [held = std::move(owner)]() noexcept {});
}

/* Python owns a cuda::stream (or any move-only owner of that shape): close or deallocation
 * destroys it with its own destructor. On failure nothing was moved: the stream is still
 * `owner`'s. */
template <class S, std::enable_if_t<detail::is_owner_v<S>, int> = 0>
stream to_python(S &&owner, int device = device_unknown) noexcept {
    using box = detail::owner_box<S>;
    box *held = nullptr;
    try {
        held = new box{std::move(owner)};
    } catch (...) {  // only std::bad_alloc: the move itself is noexcept
        set_error_from_exception();
        return stream();
    }
    stream s = detail::wrap_with(stream_ref(held->owner.get()), device, held);
    if (!s) {
        owner = std::move(held->owner);
        delete held;
    }
    return s;
}

namespace detail {

/* The casters' halves (custream/nanobind.hpp, custream/pybind11.hpp). An argument that is not
 * a stream loads as false with no Python error left: the binding raises its own TypeError. A
 * closed custream.Stream loads as false with its ValueError set (`handle on a closed
 * custream.Stream`, what every face raises for it), which the caster raises as it is. */
inline bool load(PyObject *src, stream_ref &out) noexcept {
    std::optional<stream_ref> ref = stream_ref::from_python(src);
    if (!ref) {
        if (!(PyErr_ExceptionMatches(PyExc_ValueError) && is_stream(src))) PyErr_Clear();
        return false;
    }
    out = *ref;
    return true;
}

inline bool load(PyObject *src, stream &out) noexcept {
    out = stream::from_python(src);
    if (!out) PyErr_Clear();
    return static_cast<bool>(out);
}

/* A returned stream as a new reference: the Stream, None for an empty one, or NULL with the
 * error that a failed custream call left set. */
inline PyObject *result(stream &&s) noexcept {
    if (s) return s.release();
    if (PyErr_Occurred()) return nullptr;
    Py_INCREF(Py_None);
    return Py_None;
}

inline PyObject *result(const stream &s) noexcept {
    if (!s) return result(stream());
    Py_INCREF(s.get());
    return s.get();
}

/* A returned view: a Stream borrowing the handle (the C++ side keeps the stream alive). */
inline PyObject *result(stream_ref ref) noexcept { return from_handle(ref).release(); }

}  // namespace detail

/* For bindings that report errors by exception: `custream::check<nb::python_error>(s.synchronize())`
 * throws Error (constructed with no argument, so it fetches the Python error) when the result
 * is false or empty, and passes it through otherwise. */
template <class Error, class Result>
Result check(Result &&result) {
    if (!result) throw Error();
    return std::forward<Result>(result);
}

}  // namespace custream

#endif /* CUSTREAM_HPP */
