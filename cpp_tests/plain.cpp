/*
 * A plain C++ extension (no binding library) over custream.hpp, driven by test_cpp_plain.py.
 * Built as C++17 and C++20 with -Wall -Wextra -Werror; with CUSTREAM_TEST_CCCL it also
 * includes CCCL's <cuda/stream> (first, to show the order does not matter) and links the
 * CUDA runtime from the nvidia-cuda-runtime wheel. MODNAME names the module.
 *
 * Counting is per slot (counted.hpp).
 */
#ifdef CUSTREAM_TEST_CCCL
#include <cuda/stream>
#endif

#include "custream.hpp"
#include "counted.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#ifndef MODNAME
#define MODNAME plain
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

namespace {

std::atomic<uintptr_t> last_handle[SLOTS];

bool slot_ok(int slot) {
    if (slot >= 0 && slot < SLOTS) return true;
    PyErr_Format(PyExc_ValueError, "slot %d out of range", slot);
    return false;
}

void reset(int slot) {
    calls[slot] = 0;
    destroyed[slot] = 0;
    last_handle[slot] = 0;
}

custream_handle_t as_handle(unsigned long long h) { return reinterpret_cast<custream_handle_t>(static_cast<uintptr_t>(h)); }
PyObject *handle_to_int(custream_handle_t h) { return PyLong_FromVoidPtr(static_cast<void *>(h)); }

enum mode { WITH_HANDLE = 0, NO_ARGS = 1, THROWS_STD = 2, THROWS_OTHER = 3, THROWS_IN_DTOR = 4 };

struct counting_deleter {
    counted c;
    void operator()(custream_handle_t h) const {
        calls[c.slot] += 1;
        last_handle[c.slot] = reinterpret_cast<uintptr_t>(h);
    }
};

struct noarg_deleter {
    counted c;
    void operator()() const { calls[c.slot] += 1; }
};

struct throwing_deleter {
    counted c;
    bool std_exception;
    void operator()(custream_handle_t) const {
        calls[c.slot] += 1;
        if (std_exception) throw std::runtime_error("deleter failed on purpose");
        throw 42;
    }
};

struct throwing_dtor_deleter {
    counted_t<true> c;
    void operator()() const { calls[c.slot] += 1; }
};

/* A move-only owner of the cuda::stream shape, for the to_python(S&&) path without a driver. */
struct fake_stream {
    using value_type = custream_handle_t;
    custream_handle_t h = nullptr;
    int slot = 0;
    explicit fake_stream(custream_handle_t handle, int s) : h(handle), slot(s) {}
    fake_stream(fake_stream &&o) noexcept : h(std::exchange(o.h, nullptr)), slot(o.slot) {}
    fake_stream &operator=(fake_stream &&o) noexcept {
        h = std::exchange(o.h, nullptr);
        slot = o.slot;
        return *this;
    }
    fake_stream(const fake_stream &) = delete;
    ~fake_stream() {
        if (h != nullptr) destroyed[slot] += 1;
    }
    custream_handle_t get() const noexcept { return h; }
    custream_handle_t release() noexcept { return std::exchange(h, nullptr); }
};

template <class S, class = void>
struct can_take : std::false_type {};
template <class S>
struct can_take<S, std::void_t<decltype(custream::to_python(std::declval<S>()))>> : std::true_type {};
static_assert(can_take<fake_stream &&>::value && can_take<fake_stream>::value);
static_assert(!can_take<fake_stream &>::value, "an owner is moved in, never taken from an lvalue");
static_assert(!std::is_copy_constructible_v<custream::stream>);
static_assert(std::is_nothrow_move_constructible_v<custream::stream>);
static_assert(std::is_convertible_v<const custream::stream &, custream::stream_ref>);
static_assert(!std::is_convertible_v<int, custream::stream_ref>, "0 is not a stream, as in CCCL");
static_assert(!std::is_convertible_v<custream::stream_ref, custream_handle_t>, "the handle comes out by get()");
static_assert(custream::stream_ref().get() == nullptr);

struct shared_thing {
    int slot;
    explicit shared_thing(int s) : slot(s) {}
    ~shared_thing() { destroyed[slot] += 1; }
};
std::shared_ptr<shared_thing> cpp_side[SLOTS];

/* ---- stream_ref and stream from Python -------------------------------------------------- */

PyObject *ref_handle(PyObject *, PyObject *obj) {
    std::optional<custream::stream_ref> r = custream::stream_ref::from_python(obj);
    if (!r) return nullptr;
    return Py_BuildValue("NO", handle_to_int(r->get()), r->is_default() ? Py_True : Py_False);
}

PyObject *from_python(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s) return nullptr;
    custream::stream moved = std::move(s);  // a move leaves the source empty
    if (s || s.get() != nullptr || !s.is_closed()) return PyErr_Format(PyExc_AssertionError, "moved-from stream not empty");
    custream::stream_ref r = moved;
    if (r != moved.ref()) return PyErr_Format(PyExc_AssertionError, "ref() and the conversion disagree");
    return moved.release();
}

PyObject *adopt(PyObject *, PyObject *obj) {
    Py_INCREF(obj);
    return custream::stream::adopt(obj).release();
}

PyObject *stream_state(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s) return nullptr;
    return Py_BuildValue("NO", handle_to_int(s.ref().get()), s.is_closed() ? Py_True : Py_False);
}

PyObject *synchronize(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s || !s.synchronize()) return nullptr;
    Py_RETURN_NONE;
}

PyObject *slice(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s) return nullptr;
    std::optional<unsigned> n = s.sm_count();
    if (!n) return nullptr;
    std::optional<custream_green_ctx_t> g = s.green_context();
    if (!g) return nullptr;
    return Py_BuildValue("(NI)", PyLong_FromVoidPtr(static_cast<void *>(*g)), *n);
}

PyObject *sync_timeout(PyObject *, PyObject *args) {
    PyObject *obj;
    double seconds;
    if (!PyArg_ParseTuple(args, "Od", &obj, &seconds)) return nullptr;
    custream::stream s = custream::stream::from_python(obj);
    if (!s || !s.synchronize(seconds)) return nullptr;
    Py_RETURN_NONE;
}

PyObject *id_and_device(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s) return nullptr;
    std::optional<int> d = s.device();
    if (!d) return nullptr;
    std::optional<unsigned long long> id = s.id();
    if (!id) return nullptr;
    return Py_BuildValue("(Ki)", *id, *d);
}

/* (stream, address, value, width, op): stream::write_value, then stream::wait_value with op
 * (0 to 3, or any other int to see custream refuse it). */
PyObject *semaphore(PyObject *, PyObject *args) {
    PyObject *obj;
    unsigned long long address, value;
    int width, op;
    if (!PyArg_ParseTuple(args, "OKKii", &obj, &address, &value, &width, &op)) return nullptr;
    custream::stream s = custream::stream::from_python(obj);
    if (!s || !s.write_value(address, value, width)) return nullptr;
    if (!s.wait_value(address, value, width, static_cast<custream::stream::wait_op>(op))) return nullptr;
    Py_RETURN_NONE;
}

#ifdef CUSTREAM_TEST_CCCL
using ipc_event_handle = cudaIpcEventHandle_t; /* the runtime's, which <cuda/stream> brings */
#else
struct ipc_event_handle { /* CUipcEventHandle's shape, as cuda.h declares it */
    char reserved[64];
};
#endif

/* (raw bytes, device): custream::event_from_ipc_handle from the handle struct when the bytes
 * are 64, else from the pointer and the size (custream refuses the size). */
PyObject *open_ipc_event(PyObject *, PyObject *args) {
    PyObject *bytes;
    char *raw;
    Py_ssize_t size;
    int device;
    if (!PyArg_ParseTuple(args, "O!i", &PyBytes_Type, &bytes, &device)) return nullptr;
    if (PyBytes_AsStringAndSize(bytes, &raw, &size) < 0) return nullptr;
    if (size == static_cast<Py_ssize_t>(sizeof(ipc_event_handle))) {
        ipc_event_handle h;
        std::memcpy(h.reserved, raw, sizeof h.reserved);
        return custream::event_from_ipc_handle(h, device);
    }
    return custream::event_from_ipc_handle(raw, static_cast<std::size_t>(size), device);
}

/* stream::release_after(f): a callable holding a heap buffer; it counts its runs (released()). */
std::atomic<int> release_runs{0};
PyObject *release_after(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s) return nullptr;
    std::vector<char> buffer(1 << 16);
    if (!s.release_after([buffer = std::move(buffer)]() noexcept { release_runs.fetch_add(1); })) return nullptr;
    Py_RETURN_NONE;
}
PyObject *released(PyObject *, PyObject *) { return PyLong_FromLong(release_runs.load()); }

PyObject *close(PyObject *, PyObject *obj) {
    custream::stream s = custream::stream::from_python(obj);
    if (!s || !s.close() || !s.close()) return nullptr;  // twice: close() is idempotent
    return PyBool_FromLong(s.is_closed());
}

PyObject *empty_stream_calls(PyObject *, PyObject *) {
    custream::stream s;
    bool closed_ok = s.close();  // nothing to close
    if (s.synchronize()) return PyErr_Format(PyExc_AssertionError, "synchronize() of an empty stream succeeded");
    PyErr_Clear();
    return Py_BuildValue("OO", closed_ok ? Py_True : Py_False, s.is_closed() ? Py_True : Py_False);
}

PyObject *wrap(PyObject *, PyObject *args) {
    unsigned long long h;
    int device;
    PyObject *owner;
    if (!PyArg_ParseTuple(args, "KiO", &h, &device, &owner)) return nullptr;
    return custream::from_handle(as_handle(h), device, owner == Py_None ? nullptr : owner).release();
}

/* ---- ownership from C++ to Python -------------------------------------------------------- */

PyObject *give(PyObject *, PyObject *args) {
    unsigned long long h;
    int device, slot, m;
    if (!PyArg_ParseTuple(args, "Kiii", &h, &device, &slot, &m) || !slot_ok(slot)) return nullptr;
    reset(slot);
    custream::stream_ref ref(as_handle(h));
    switch (m) {
        case WITH_HANDLE: return custream::to_python(ref, device, counting_deleter{counted(slot)}).release();
        case NO_ARGS: return custream::to_python(ref, device, noarg_deleter{counted(slot)}).release();
        case THROWS_STD: return custream::to_python(ref, device, throwing_deleter{counted(slot), true}).release();
        case THROWS_OTHER: return custream::to_python(ref, device, throwing_deleter{counted(slot), false}).release();
        case THROWS_IN_DTOR:
            return custream::to_python(ref, device, throwing_dtor_deleter{counted_t<true>(slot)}).release();
        default: return PyErr_Format(PyExc_ValueError, "mode %d", m);
    }
}

PyObject *give_lambda(PyObject *, PyObject *args) {
    unsigned long long h;
    int slot;
    if (!PyArg_ParseTuple(args, "Ki", &h, &slot) || !slot_ok(slot)) return nullptr;
    reset(slot);
    auto owned = std::make_unique<int>(slot);  // a move-only capture
    return custream::to_python(as_handle(h), custream::device_unknown,
                               [slot, owned = std::move(owned)](custream::stream_ref r) noexcept {
                                   calls[slot] += *owned == slot;
                                   last_handle[slot] = reinterpret_cast<uintptr_t>(r.get());
                               })
        .release();
}

PyObject *share(PyObject *, PyObject *args) {
    unsigned long long h;
    int device, slot;
    if (!PyArg_ParseTuple(args, "Kii", &h, &device, &slot) || !slot_ok(slot)) return nullptr;
    reset(slot);
    cpp_side[slot] = std::make_shared<shared_thing>(slot);
    return custream::to_python(cpp_side[slot], as_handle(h), device).release();
}

PyObject *cpp_drop(PyObject *, PyObject *arg) {
    long slot = PyLong_AsLong(arg);
    if ((slot == -1 && PyErr_Occurred()) || !slot_ok(int(slot))) return nullptr;
    cpp_side[slot].reset();
    Py_RETURN_NONE;
}

PyObject *use_count(PyObject *, PyObject *arg) {
    long slot = PyLong_AsLong(arg);
    if ((slot == -1 && PyErr_Occurred()) || !slot_ok(int(slot))) return nullptr;
    return PyLong_FromLong(cpp_side[slot].use_count());
}

PyObject *give_owner(PyObject *, PyObject *args) {
    unsigned long long h;
    int device, slot;
    if (!PyArg_ParseTuple(args, "Kii", &h, &device, &slot) || !slot_ok(slot)) return nullptr;
    reset(slot);
    fake_stream owner(as_handle(h), slot);
    custream::stream s = custream::to_python(std::move(owner), device);
    if (!s) {
        // On failure nothing was moved: the owner still holds its stream (and destroys it here).
        if (owner.get() != as_handle(h)) return PyErr_Format(PyExc_AssertionError, "failed to_python moved the owner");
        return nullptr;
    }
    if (owner.get() != nullptr) return PyErr_Format(PyExc_AssertionError, "to_python did not move the owner");
    return s.release();
}

PyObject *record(PyObject *, PyObject *arg) {
    long slot = PyLong_AsLong(arg);
    if ((slot == -1 && PyErr_Occurred()) || !slot_ok(int(slot))) return nullptr;
    return Py_BuildValue("iiN", calls[slot].load(), destroyed[slot].load(),
                         PyLong_FromUnsignedLongLong(last_handle[slot].load()));
}

/* The streams in `streams` (a list) are each taken by `per_stream` C++ threads as a
 * custream::stream; `go()` is called, the GIL released, and the threads let go of their
 * references all at once, while Python threads started by the caller close the streams. */
PyObject *race(PyObject *, PyObject *args) {
    PyObject *list, *go;
    int per_stream;
    if (!PyArg_ParseTuple(args, "O!Oi", &PyList_Type, &list, &go, &per_stream)) return nullptr;
    std::vector<custream::stream> held;
    for (Py_ssize_t i = 0; i < PyList_Size(list); ++i) {
        for (int k = 0; k < per_stream; ++k) {
            held.push_back(custream::stream::from_python(PyList_GetItem(list, i)));
            if (!held.back()) return nullptr;
        }
    }
    std::atomic<bool> start{false};
    std::vector<std::thread> threads;
    threads.reserve(held.size());
    for (custream::stream &s : held) {
        threads.emplace_back([&start, mine = std::move(s)]() mutable {
            while (!start.load(std::memory_order_acquire)) std::this_thread::yield();
            custream::stream drop = std::move(mine);  // destroyed here, without the GIL
        });
    }
    PyObject *r = PyObject_CallNoArgs(go);
    PyThreadState *saved = PyEval_SaveThread();
    start.store(true, std::memory_order_release);
    for (std::thread &t : threads) t.join();
    PyEval_RestoreThread(saved);
    if (r == nullptr) return nullptr;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

/* A stream kept in a C++ static: destroyed by the C++ runtime after Python has finalized. */
custream::stream kept_forever;

/* Runs after finalization too: what the deleters of slots 70 and 71 saw by then. */
struct exit_report {
    ~exit_report() {
        if (std::getenv("CUSTREAM_TEST_EXIT_REPORT"))
            std::fprintf(stderr, "at exit: %d %d\n", calls[70].load(), calls[71].load());
    }
} report_at_exit;
PyObject *keep_forever(PyObject *, PyObject *obj) {
    kept_forever = custream::stream::from_python(obj);
    if (!kept_forever) return nullptr;
    Py_RETURN_NONE;
}

/* ---- errors -------------------------------------------------------------------------------- */

struct my_error {
    my_error() { PyErr_SetString(PyExc_LookupError, "my_error was thrown"); }
};

PyObject *translate(PyObject *, PyObject *arg) {
    long what = PyLong_AsLong(arg);
    if (what == -1 && PyErr_Occurred()) return nullptr;
    try {
        switch (what) {
            case 0: throw std::bad_alloc();
            case 1: throw std::runtime_error("a runtime_error");
            case 2: throw 7;
            case 3: {
                custream::stream s;
                custream::check<my_error>(std::move(s));  // empty: throws my_error
                break;
            }
            case 4: custream::set_error_from_exception(std::exception_ptr()); return nullptr;
            default: break;
        }
    } catch (const my_error &) {
        return nullptr;
    } catch (...) {
        custream::set_error_from_exception();
        return nullptr;
    }
    bool ok = custream::check<my_error>(true);
    return PyBool_FromLong(ok);
}

#ifdef CUSTREAM_TEST_CCCL
/* ---- CCCL -------------------------------------------------------------------------------- */

static_assert(std::is_convertible_v<custream::stream_ref, cuda::stream_ref>);
static_assert(std::is_convertible_v<cuda::stream_ref, custream::stream_ref>);
static_assert(std::is_convertible_v<const cuda::stream &, custream::stream_ref>);
static_assert(std::is_convertible_v<const custream::stream &, cuda::stream_ref>);
static_assert(!std::is_convertible_v<custream::stream_ref, cuda::stream>, "a view never becomes an owner");
static_assert(can_take<cuda::stream>::value && !can_take<cuda::stream &>::value);

custream_handle_t takes_cccl(cuda::stream_ref s) { return s.get(); }
custream_handle_t takes_custream(custream::stream_ref s) { return s.get(); }

PyObject *cccl_roundtrip(PyObject *, PyObject *arg) {
    std::optional<custream::stream_ref> ours = custream::stream_ref::from_python(arg);
    if (!ours) return nullptr;
    cuda::stream_ref theirs = *ours;
    custream::stream_ref back = theirs;
    bool equal = *ours == theirs && theirs == *ours && back == *ours && !(*ours != theirs) && !(theirs != *ours);
    return Py_BuildValue("NNNO", handle_to_int(takes_cccl(*ours)), handle_to_int(theirs.get()),
                         handle_to_int(takes_custream(theirs)), equal ? Py_True : Py_False);
}

/* A cuda::stream made here and moved into Python. Without a driver CCCL throws cuda_error,
 * which must come out as a Python exception. */
PyObject *cccl_make(PyObject *, PyObject *arg) {
    long device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return nullptr;
    try {
        cuda::stream s{cuda::device_ref{static_cast<int>(device)}};
        return custream::to_python(std::move(s), static_cast<int>(device)).release();
    } catch (...) {
        custream::set_error_from_exception();
        return nullptr;
    }
}
#endif

PyMethodDef methods[] = {
    {"ref_handle", ref_handle, METH_O, "(handle, is_default) of stream_ref::from_python(obj)."},
    {"from_python", from_python, METH_O, "stream::from_python(obj), moved, then released."},
    {"adopt", adopt, METH_O, "stream::adopt(new reference to obj)."},
    {"stream_state", stream_state, METH_O, "(ref().get(), is_closed()) of stream::from_python(obj)."},
    {"synchronize", synchronize, METH_O, "stream::synchronize()."},
    {"slice", slice, METH_O, "(stream::green_context(), stream::sm_count())."},
    {"sync_timeout", sync_timeout, METH_VARARGS, "stream::synchronize(seconds)."},
    {"id_and_device", id_and_device, METH_O, "(stream::id(), stream::device()); the device first."},
    {"open_ipc_event", open_ipc_event, METH_VARARGS, "custream::event_from_ipc_handle(raw, device)."},
    {"semaphore", semaphore, METH_VARARGS, "stream::write_value(), then stream::wait_value()."},
    {"release_after", release_after, METH_O, "stream::release_after(f), f counting its runs."},
    {"released", released, METH_NOARGS, "How many times release_after's callables ran."},
    {"close", close, METH_O, "stream::close() twice; is_closed() after."},
    {"empty_stream_calls", empty_stream_calls, METH_NOARGS, "close() and is_closed() of an empty stream."},
    {"wrap", wrap, METH_VARARGS, "from_handle(handle, device, owner)."},
    {"give", give, METH_VARARGS, "to_python(handle, device, deleter of the given mode) in a slot."},
    {"give_lambda", give_lambda, METH_VARARGS, "to_python with a move-only lambda."},
    {"share", share, METH_VARARGS, "to_python(shared_ptr, handle, device); C++ keeps a copy."},
    {"cpp_drop", cpp_drop, METH_O, "C++ drops its copy of the shared_ptr."},
    {"use_count", use_count, METH_O, "use_count() of C++'s copy."},
    {"give_owner", give_owner, METH_VARARGS, "to_python(fake_stream&&, device)."},
    {"record", record, METH_O, "(calls, destroyed, last handle) of a slot."},
    {"race", race, METH_VARARGS, "C++ threads drop references while the caller's threads close."},
    {"keep_forever", keep_forever, METH_O, "Keep a reference in a C++ static."},
    {"translate", translate, METH_O, "A C++ exception as a Python error."},
#ifdef CUSTREAM_TEST_CCCL
    {"cccl_roundtrip", cccl_roundtrip, METH_O, "custream::stream_ref <-> cuda::stream_ref."},
    {"cccl_make", cccl_make, METH_O, "to_python(cuda::stream{device}, device)."},
#endif
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, STR(MODNAME), nullptr, -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) {
    if (custream_import() < 0) return nullptr;
    return PyModule_Create(&module);
}
