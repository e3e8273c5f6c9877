/*
 * custream.h: the C face of custream.Stream.
 *
 * One struct (the memory of every custream.Stream object), one function table that the
 * extension exports in a capsule, and one import function, after CPython's datetime.h and
 * NumPy's import_array(). Needs Python.h and nothing from CUDA: the handle type below is
 * the same type as CUDA's CUstream and cudaStream_t, so a consumer that includes cuda.h or
 * cuda_runtime.h passes it straight through.
 *
 * In C or C++:
 *
 *     #include "custream.h"               // include dir: custream.get_include()
 *     PyMODINIT_FUNC PyInit_mine(void) {
 *         if (custream_import() < 0) return NULL;
 *         ...
 *     }
 *     CustreamStream *s = (CustreamStream *)Custream_AsStream(obj);   // new reference
 *     cudaMemsetAsync(p, 0, n, s->handle);
 *
 * Every Custream_* wrapper imports the table on first use if custream_import() was not
 * called, so Cython modules need no import call at all.
 *
 * Two ways to read a Stream's fields, each one load with no call:
 *   - the struct, `s->handle`, where this header's CustreamStream is exact: any build whose
 *     Python.h defines the object header (the GIL build, abi3, and a free-threaded build,
 *     whose header is 32 bytes: the struct follows the Python.h it is compiled with, as the
 *     extension's own free-threaded build does);
 *   - the accessors custream_handle(obj), custream_flags(obj), custream_device(obj),
 *     custream_priority(obj) and custream_is_closed(obj), which add the field's offset from the
 *     table to the object's address (one load of the table, one add, one load). They work in
 *     every build, and they are the only way where the object header is opaque (abi3t,
 *     PEP 803: Python.h defines _Py_OPAQUE_PYOBJECT; define CUSTREAM_OPAQUE_STREAM to build so
 *     elsewhere). They need the table: call custream_import() first (in module init).
 *
 * Evolution is append-only: new table entries and new struct fields go at the end.
 * custream_import() accepts a table and a struct at least as large as this header's (a newer
 * custream) and refuses a smaller one (an older custream than the header), naming both; a
 * field appended after this header's is read through the table's offsets, never assumed.
 * CUSTREAM_ABI_VERSION changes only when something already published changes layout or
 * meaning, and custream_import() refuses a mismatch.
 *
 * This header is the single source of the layout: the Rust definition (src/object/layout.rs) is
 * generated from it by bindgen, and a test fails when the two drift.
 */
#ifndef CUSTREAM_H
#define CUSTREAM_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUSTREAM_ABI_VERSION 1
/* The custream release this header comes with; custream_import() names it in its errors. */
#define CUSTREAM_HEADER_VERSION "0.1.0"
#define CUSTREAM_CAPSULE_NAME "custream._custream._C_API"

/* CUstream / cudaStream_t, without the CUDA headers. */
typedef struct CUstream_st *custream_handle_t;

/* CUgreenCtx (CUDA 12.4 and newer), without the CUDA headers. */
typedef struct CUgreenCtx_st *custream_green_ctx_t;

/* The default-stream tokens: never destroyed, resolved against the current context at each use. */
#define CUSTREAM_NULL_STREAM ((custream_handle_t)0x0)
#define CUSTREAM_LEGACY_DEFAULT_STREAM ((custream_handle_t)0x1)
#define CUSTREAM_PER_THREAD_DEFAULT_STREAM ((custream_handle_t)0x2)

/* CustreamStream.flags: fixed when the object is made. */
#define CUSTREAM_FLAG_OWNED 0x1u        /* custream created the stream and destroys it on close */
#define CUSTREAM_FLAG_DEFAULT 0x2u      /* handle is 0, 1 or 2 */
#define CUSTREAM_FLAG_NON_BLOCKING 0x4u /* created with CU_STREAM_NON_BLOCKING (owned streams) */
#define CUSTREAM_FLAG_SHARED 0x8u       /* custream.DEFAULT_STREAM and its two siblings: never closed */
#define CUSTREAM_FLAG_POOLED 0x10u      /* made by a custream.StreamPool, which alone closes it */
#define CUSTREAM_FLAG_GREEN 0x20u       /* owned, made in a custream.GreenContext: its owner, kept
                                           open until the stream is closed */

/* CustreamStream.state: written atomically by custream; read it with Custream_IsClosed(). */
#define CUSTREAM_STATE_CLOSED 0x80000000u   /* close() was called: handle accessors raise */
#define CUSTREAM_STATE_RELEASED 0x40000000u /* the stream was destroyed or its owner released */
#define CUSTREAM_STATE_USERS 0x3fffffffu    /* driver calls on the handle in flight */

#define CUSTREAM_DEVICE_UNKNOWN (-1)

#if defined(_Py_OPAQUE_PYOBJECT) && !defined(CUSTREAM_OPAQUE_STREAM)
#define CUSTREAM_OPAQUE_STREAM 1 /* abi3t: PyObject's size is unknown here, so is ours */
#endif

/* Called exactly once, attached to the interpreter (the GIL held, where there is one), on the
 * thread that closes or deallocates a stream wrapped with a deleter, when it is closed or
 * deallocated. Never called during interpreter finalization nor in a child process after
 * fork(): there the handle is left to the process's exit. */
typedef void (*custream_deleter_t)(void *ctx, custream_handle_t handle);

/* A host function for Custream_LaunchHostFunc: called once with its `user` pointer on a thread
 * of the CUDA driver's, without the GIL (CUDA's CUhostFn / cudaHostFn_t). */
typedef void (*custream_host_fn_t)(void *user);

/* A release function for Custream_ReleaseAfter: called exactly once with its `ctx` on
 * custream's own host thread (never a driver thread), with or without the GIL (after the
 * interpreter finalized); it must make no CUDA call and no Python call. */
typedef void (*custream_release_fn_t)(void *ctx);

#ifdef CUSTREAM_OPAQUE_STREAM
typedef struct CustreamStream CustreamStream; /* opaque: read it through the accessors */
#else
typedef struct CustreamStream {
    PyObject_HEAD
    /* The four fields before `owner` are also in the table as offsets (CustreamCAPI). */
    custream_handle_t handle;   /* the CUDA stream; fixed for the object's life */
    PyObject *protocol;         /* the (0, handle) tuple __cuda_stream__() returns; fixed */
    uint32_t flags;             /* CUSTREAM_FLAG_* */
    uint32_t state;             /* CUSTREAM_STATE_*; atomic */
    int32_t device;             /* device ordinal, or CUSTREAM_DEVICE_UNKNOWN: a borrowed
                                   stream's is learnt on first use and written once, atomically,
                                   from -1 to the device (never again); always -1 for the
                                   default streams. A plain read sees -1 or the device. */
    int32_t priority;           /* as created (owned streams); 0 otherwise */
    uint32_t fork_generation;   /* the process's fork count when made: a child never
                                   destroys what its parent made */
    uint32_t reserved;          /* custream's own, not for consumers (src/host/queue_depth.rs: a count
                                   of its launches on the stream since it last looked at how
                                   deep the stream's queue is; accessed atomically) */
    PyObject *owner;            /* kept alive until close; NULL after it (a borrowed stream's
                                   owner, or the GreenContext of a CUSTREAM_FLAG_GREEN one) */
    custream_deleter_t deleter; /* with deleter_ctx: a C owner's release; NULL if none */
    void *deleter_ctx;
    void *context;              /* the stream's CUcontext: retained for an owned stream's life;
                                   learnt on first use for a borrowed one; NULL until then */
    PyObject *weakreflist;
    /* cuCtxGetId(context) when learnt. A context destroyed or reset (cudaDeviceReset,
       cuDevicePrimaryCtxReset) answers with another id or an error, and a driver call on a
       stream of the old one can crash the process: custream compares the id before each
       call on the handle and raises instead. */
    uint64_t context_id;
    /* Appended. custream's own cache, not for consumers (read the id with Custream_StreamId()):
       the driver's id of the stream (cuStreamGetId) as a Python int, stored once, atomically,
       from NULL, the first time the id is asked for, and released with the object. NULL until
       then, and always for the default streams, whose id is the current context's. */
    PyObject *stream_id;
} CustreamStream;
#endif /* CUSTREAM_OPAQUE_STREAM */

typedef struct CustreamCAPI {
    uint32_t abi_version;   /* CUSTREAM_ABI_VERSION the extension was built with */
    uint32_t api_size;      /* sizeof(CustreamCAPI) in the extension; grows append-only */
    uint32_t stream_size;   /* sizeof(CustreamStream) in the extension */
    uint32_t reserved;
    PyTypeObject *StreamType;
    /* Each returns NULL (or -1) with a Python exception set on failure. */
    PyObject *(*as_stream)(PyObject *obj);
    PyObject *(*from_handle)(custream_handle_t handle, int device, PyObject *owner);
    PyObject *(*from_handle_with_deleter)(custream_handle_t handle, int device,
                                          custream_deleter_t deleter, void *ctx);
    int (*check)(PyObject *obj); /* 1 if obj is a custream.Stream, else 0; never fails (the
                                    Custream_Check wrapper returns -1 only if the table
                                    cannot be imported) */
    int (*synchronize)(PyObject *stream);  /* releases the GIL while it waits */
    int (*handle_checked)(PyObject *stream, custream_handle_t *out); /* raises if closed */
    /* Appended to the first table (api_size tells an older table without them). */
    PyObject *(*current_stream)(void); /* new reference: custream.current_stream() */
    PyObject *(*default_stream)(custream_handle_t token); /* new reference: the module's
                                                             Stream for token 0, 1 or 2 */
    PyObject *(*pool_get)(PyObject *pool); /* new reference: custream.StreamPool.get() */
    /* Host functions and graph capture (appended). */
    int (*launch_host_func)(PyObject *stream, custream_host_fn_t fn, void *user);
    int (*is_capturing)(PyObject *stream); /* 1, 0, or -1 with an exception set */
    /* Green contexts (appended). Each returns 0, or -1 with an exception set. */
    int (*green_context)(PyObject *stream, custream_green_ctx_t *out); /* NULL when in none */
    int (*sm_count)(PyObject *stream, unsigned int *out); /* the SMs its work may use */
    /* The layout (appended): where the fields a consumer reads directly lie, in bytes from
       the object's start, for the accessors below (and builds that cannot see the struct). */
    uint32_t handle_offset;   /* custream_handle_t */
    uint32_t flags_offset;    /* uint32_t, CUSTREAM_FLAG_* */
    uint32_t state_offset;    /* uint32_t, CUSTREAM_STATE_*; atomic */
    uint32_t device_offset;   /* int32_t; atomic */
    uint32_t priority_offset; /* int32_t */
    uint32_t reserved2;
    /* Waits that end (appended). 0, or -1 with an exception set: TimeoutError when the work
       is not done within `timeout` seconds (INFINITY: no limit). */
    int (*synchronize_timeout)(PyObject *stream, double timeout);
    /* Stream ids and devices (appended). Each returns 0, or -1 with an exception set. */
    int (*stream_id)(PyObject *stream, unsigned long long *out); /* the driver's id */
    int (*stream_device)(PyObject *stream, int *out); /* the device, asked of the driver if unknown */
    /* Stream memory operations (appended). Each returns 0, or -1 with an exception set. */
    int (*write_value)(PyObject *stream, uint64_t address, uint64_t value, int width, int flush);
    int (*wait_value)(PyObject *stream, uint64_t address, uint64_t value, int width, int op,
                      int flush);
    /* IPC events from any library (appended). A new reference to a custream.Event, or NULL
       with an exception set. */
    PyObject *(*event_from_ipc_handle)(const void *handle, size_t size, int device);
    /* Lifetimes in stream order (appended). 0, or -1 with an exception set. */
    int (*release_after)(PyObject *stream, custream_release_fn_t fn, void *ctx);
} CustreamCAPI;

/* Acquire loads and release stores: the table pointer below is published by whichever
 * thread imports first, and a Stream's state and device are written atomically by custream.
 * Elsewhere than GCC and Clang (MSVC on x86 and x64), volatile accesses are both. */
#if defined(__GNUC__) || defined(__clang__)
#define CUSTREAM_LOAD_ACQUIRE_(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define CUSTREAM_STORE_RELEASE_(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#define CUSTREAM_LOAD_ACQUIRE_(p) (*(p))
#define CUSTREAM_STORE_RELEASE_(p, v) (*(p) = (v))
#define CUSTREAM_VOLATILE_ volatile
#endif
#ifndef CUSTREAM_VOLATILE_
#define CUSTREAM_VOLATILE_
#endif

/* One table per translation unit: each extension module imports its own. Written once per
 * process's first successful import (two threads importing at once store the same pointer),
 * read with an acquire load: the table it points to is immutable and lives for the process. */
static const CustreamCAPI *CUSTREAM_VOLATILE_ custream_capi = NULL;

static inline const CustreamCAPI *custream_table_(void) {
    return CUSTREAM_LOAD_ACQUIRE_(&custream_capi);
}

/* Fetch the table. 0 on success; -1 with ImportError set on failure. The installed custream
 * may be newer than this header (a larger table and struct: accepted) but not older (a
 * smaller one: refused, naming both releases). */
static int custream_import(void) {
    const CustreamCAPI *api;
    size_t stream_size;
    if (custream_table_() != NULL) return 0;
    api = (const CustreamCAPI *)PyCapsule_Import(CUSTREAM_CAPSULE_NAME, 0);
    if (api == NULL) return -1;
#ifdef CUSTREAM_OPAQUE_STREAM
    stream_size = 0; /* unknown here: the accessors read through the table's offsets */
#else
    stream_size = sizeof(CustreamStream);
#endif
    if (api->abi_version != CUSTREAM_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "custream C API version mismatch: this module was compiled against "
                     "custream.h ABI %d but the installed custream provides ABI %d; "
                     "rebuild this module against the installed custream",
                     (int)CUSTREAM_ABI_VERSION, (int)api->abi_version);
        return -1;
    }
    if (api->api_size < sizeof(CustreamCAPI) || api->stream_size < stream_size) {
        PyObject *mod = PyImport_ImportModule("custream._custream");
        PyObject *ver = mod ? PyObject_GetAttrString(mod, "__version__") : NULL;
        PyErr_Clear();
        if (ver == NULL) ver = PyUnicode_FromString("(version unknown)");
        PyErr_Clear();
        PyErr_Format(PyExc_ImportError,
                     "custream C API layout mismatch: this module was compiled against the "
                     "custream.h of custream %s (a table of %d bytes and a Stream of %d bytes), "
                     "the installed custream %S has %d and %d (older than the header); install "
                     "custream %s or newer, or rebuild this module against the installed one",
                     CUSTREAM_HEADER_VERSION, (int)sizeof(CustreamCAPI), (int)stream_size,
                     ver ? ver : Py_None,
                     (int)api->api_size, (int)api->stream_size, CUSTREAM_HEADER_VERSION);
        Py_XDECREF(ver);
        Py_XDECREF(mod);
        return -1;
    }
    CUSTREAM_STORE_RELEASE_(&custream_capi, api);
    return 0;
}

/* The accessors: a field through the table's offset, for every build (the only way where
 * CUSTREAM_OPAQUE_STREAM is set). `obj` is a custream.Stream (Custream_Check) and
 * custream_import() has succeeded. None takes a lock or fails. */
#define CUSTREAM_FIELD_(obj, type, field) \
    ((const CUSTREAM_VOLATILE_ type *)((const char *)(obj) + custream_table_()->field##_offset))
/* The raw handle, with no check (see Custream_HandleChecked). */
static inline custream_handle_t custream_handle(const PyObject *obj) {
    return *CUSTREAM_FIELD_(obj, custream_handle_t, handle);
}
/* CUSTREAM_FLAG_*, fixed when the object is made. */
static inline uint32_t custream_flags(const PyObject *obj) {
    return *CUSTREAM_FIELD_(obj, uint32_t, flags);
}
/* The priority as created (owned streams), else 0. */
static inline int32_t custream_priority(const PyObject *obj) {
    return *CUSTREAM_FIELD_(obj, int32_t, priority);
}
/* The device ordinal, or CUSTREAM_DEVICE_UNKNOWN while custream has not learnt it (the
 * Python attribute `device` asks the driver). */
static inline int32_t custream_device(const PyObject *obj) {
    return CUSTREAM_LOAD_ACQUIRE_(CUSTREAM_FIELD_(obj, int32_t, device));
}
/* Whether close() was called. */
static inline int custream_is_closed(const PyObject *obj) {
    return (CUSTREAM_LOAD_ACQUIRE_(CUSTREAM_FIELD_(obj, uint32_t, state)) & CUSTREAM_STATE_CLOSED) != 0;
}

#ifdef CUSTREAM_OPAQUE_STREAM
static inline int Custream_IsClosed(const CustreamStream *s) {
    return custream_is_closed((const PyObject *)s);
}
static inline custream_handle_t Custream_Handle(const CustreamStream *s) {
    return custream_handle((const PyObject *)s);
}
#else
/* Whether close() was called. Needs no table, takes no lock, never fails. */
static inline int Custream_IsClosed(const CustreamStream *s) {
    return (CUSTREAM_LOAD_ACQUIRE_((const CUSTREAM_VOLATILE_ uint32_t *)&s->state) &
            CUSTREAM_STATE_CLOSED) != 0;
}

/* The raw handle: one load, no check. Use Custream_HandleChecked where the stream may be closed. */
static inline custream_handle_t Custream_Handle(const CustreamStream *s) { return s->handle; }
#endif

#define CUSTREAM_API_OR(fail)                                                   \
    const CustreamCAPI *api_ = custream_table_();                               \
    if (api_ == NULL) {                                                         \
        if (custream_import() < 0) return fail;                                 \
        api_ = custream_table_();                                               \
    }

static inline PyObject *Custream_AsStream(PyObject *obj) {
    CUSTREAM_API_OR(NULL);
    return api_->as_stream(obj);
}
static inline PyObject *Custream_FromHandle(custream_handle_t handle, int device, PyObject *owner) {
    CUSTREAM_API_OR(NULL);
    return api_->from_handle(handle, device, owner);
}
static inline PyObject *Custream_FromHandleWithDeleter(custream_handle_t handle, int device,
                                                       custream_deleter_t deleter, void *ctx) {
    CUSTREAM_API_OR(NULL);
    return api_->from_handle_with_deleter(handle, device, deleter, ctx);
}
static inline int Custream_Check(PyObject *obj) {
    CUSTREAM_API_OR(-1);
    return api_->check(obj);
}
static inline int Custream_Synchronize(PyObject *stream) {
    CUSTREAM_API_OR(-1);
    return api_->synchronize(stream);
}
static inline int Custream_HandleChecked(PyObject *stream, custream_handle_t *out) {
    CUSTREAM_API_OR(-1);
    return api_->handle_checked(stream, out);
}
/* The stream `stream=None` means in every library that adopts custream: the innermost
 * `with s:` block's stream in this thread or asyncio task, else the default stream. */
static inline PyObject *Custream_CurrentStream(void) {
    CUSTREAM_API_OR(NULL);
    return api_->current_stream();
}
/* custream.DEFAULT_STREAM, LEGACY_DEFAULT_STREAM or PER_THREAD_DEFAULT_STREAM, by token
 * (CUSTREAM_NULL_STREAM, CUSTREAM_LEGACY_DEFAULT_STREAM, CUSTREAM_PER_THREAD_DEFAULT_STREAM). */
static inline PyObject *Custream_DefaultStream(custream_handle_t token) {
    CUSTREAM_API_OR(NULL);
    return api_->default_stream(token);
}
/* The next stream of a custream.StreamPool, round-robin; a C call, no Python call. */
static inline PyObject *Custream_PoolGet(PyObject *pool) {
    CUSTREAM_API_OR(NULL);
    return api_->pool_get(pool);
}
/* Queue fn(user) on the stream (cuLaunchHostFunc): it runs once the work queued before it is
 * done, on a thread of the driver's, without the GIL; the GIL is released around the driver
 * call, and no Python is involved. fn must make no CUDA call, as CUDA requires. During a
 * capture it becomes a host node that runs at every launch of the graph: `user` must then
 * stay valid as long as the graph. 0 on success; -1 with an exception set (a closed stream,
 * a NULL fn, no driver, the driver's error). */
static inline int Custream_LaunchHostFunc(PyObject *stream, custream_host_fn_t fn, void *user) {
    CUSTREAM_API_OR(-1);
    return api_->launch_host_func(stream, fn, user);
}
/* 1 while the stream is capturing a CUDA graph (active or invalidated, whoever began it), 0
 * if not; -1 with an exception set. One driver call (cuStreamIsCapturing), no Python call. */
static inline int Custream_IsCapturing(PyObject *stream) {
    CUSTREAM_API_OR(-1);
    return api_->is_capturing(stream);
}

/* The green context the stream's work runs in (CUgreenCtx), or NULL when it runs on the whole
 * device: a custream.GreenContext's stream, or anybody's stream made in a green context (the
 * driver is asked: cuStreamGetGreenCtx). The handle stays valid while the stream is open. 0 on
 * success; -1 with an exception set (a closed stream, no driver, the driver's error). */
static inline int Custream_GreenContext(PyObject *stream, custream_green_ctx_t *out) {
    CUSTREAM_API_OR(-1);
    return api_->green_context(stream, out);
}
/* How many SMs the stream's work may use: its green context's for a stream in one, else the
 * whole device's (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT); e.g. to size a persistent
 * kernel's grid. 0 on success; -1 with an exception set. */
static inline int Custream_SmCount(PyObject *stream, unsigned int *out) {
    CUSTREAM_API_OR(-1);
    return api_->sm_count(stream, out);
}

/* Waits that end. */
/* Wait for the work queued on the stream so far, for at most `timeout` seconds (INFINITY: no
 * limit), with the GIL released; the stream and its work are untouched when it gives up.
 * 0 when the work is done; -1 with an exception set: TimeoutError once `timeout` passed, the
 * exception of a signal's Python handler (Ctrl-C's KeyboardInterrupt: on the main thread the
 * wait comes back to Python every 50 ms to run them), ValueError for a negative or NaN
 * `timeout`, the driver's error. */
static inline int Custream_SynchronizeTimeout(PyObject *stream, double timeout) {
    CUSTREAM_API_OR(-1);
    return api_->synchronize_timeout(stream, timeout);
}

/* Stream ids and devices. */
/* The driver's id of the stream (cuStreamGetId; CCCL's stream_ref::id()): unique in the process
 * while the stream lives, the same for every custream.Stream over one handle. Asked of the
 * driver once per object and kept; a default-stream token answers for the current context's
 * default stream, asked every time. 0 on success; -1 with an exception set (a closed stream,
 * no driver, the driver's error). */
static inline int Custream_StreamId(PyObject *stream, unsigned long long *out) {
    CUSTREAM_API_OR(-1);
    return api_->stream_id(stream, out);
}
/* The stream's device ordinal (s.device): the one it was made or wrapped with, else asked of
 * the driver once (cuStreamGetDevice where the driver has it, else the stream's context),
 * never by changing the calling thread's current context; custream_device() reads only what
 * is known. 0 on success; -1 with an exception set. */
static inline int Custream_StreamDevice(PyObject *stream, int *out) {
    CUSTREAM_API_OR(-1);
    return api_->stream_device(stream, out);
}

/* Stream memory operations: the conditions of Custream_WaitValue (CUstreamWaitValue_flags'
 * values). GEQ is (int32_t)(*addr - value) >= 0 (int64_t for 64 bits), a greater-or-equal
 * that survives a counter's wrap; AND is (*addr & value) != 0; NOR is ~(*addr | value) != 0. */
#define CUSTREAM_WAIT_GEQ 0
#define CUSTREAM_WAIT_EQ 1
#define CUSTREAM_WAIT_AND 2
#define CUSTREAM_WAIT_NOR 3
/* Queue on the stream a write of `value` to the `width`-bit word (32 or 64) at the GPU address
 * `address` (cuStreamWriteValue32/64_v2), once the work before it is done: device memory, or
 * host memory mapped for the GPU, aligned to the width. Checked as s.write_value() checks
 * (width, range, alignment, what the driver knows of the address) before anything is queued.
 * A non-zero `flush` flushes the remote writes that reached the device first
 * (CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, in one batch with the write), where the device can.
 * A node of the graph during a capture. 0 on success; -1 with an exception set. */
static inline int Custream_WriteValue(PyObject *stream, uint64_t address, uint64_t value, int width, int flush) {
    CUSTREAM_API_OR(-1);
    return api_->write_value(stream, address, value, width, flush);
}
/* Queue on the stream a wait until the word at `address` meets `op` (CUSTREAM_WAIT_*) against
 * `value` (cuStreamWaitValue32/64_v2); a non-zero `flush` adds CU_STREAM_WAIT_VALUE_FLUSH. The
 * work queued after it waits; the caller does not. 0 on success; -1 with an exception set. */
static inline int Custream_WaitValue(PyObject *stream, uint64_t address, uint64_t value, int width,
                                     int op, int flush) {
    CUSTREAM_API_OR(-1);
    return api_->wait_value(stream, address, value, width, op, flush);
}

/* IPC events from any library. */
/* Open another process's IPC event from the driver's raw handle: the `size` bytes at `handle`,
 * which must be the 64 of a CUipcEventHandle or cudaIpcEventHandle_t (PyTorch's
 * Event.ipc_handle(), CuPy's runtime.ipcGetEventHandle(), cuda.core's descriptor, any
 * cuIpcGetEventHandle), on device ordinal `device` of this process (a raw handle does not
 * name its device). A new reference to a custream.Event (Event.from_ipc_handle(raw,
 * device=device)): a stream waits on it (its `handle` attribute is the CUevent), and it
 * closes this process's use only. A raw handle carries no exporter to watch: a dead
 * exporter's event is the driver's to report. NULL with an exception set: ValueError for a
 * NULL `handle`, a `size` other than 64, a negative `device` or one this process does not
 * have, checked before the driver opens anything; CudaUnavailableError without a driver; the
 * driver's error. Needs the GIL; lets it go only around the driver's call. */
static inline PyObject *Custream_EventFromIpcHandle(const void *handle, size_t size, int device) {
    CUSTREAM_API_OR(NULL);
    return api_->event_from_ipc_handle(handle, size, device);
}

/* Lifetimes in stream order. */
/* Call fn(ctx) once the work queued on the stream so far is done (s.keep_alive()'s C face),
 * on custream's own host thread, never the driver's: free a native buffer the queued work
 * reads, without synchronizing. Returns at once; the GIL is released around the driver call.
 * During a capture, fn(ctx) is called instead once the graph the capture ends in and its
 * executables are destroyed (at once if no graph comes of the capture; never, if the capture
 * was begun by another library). After a fault of the stream's context it is called too (the
 * GPU no longer runs). fn(ctx) is called exactly once in every case: on an error (-1 with an
 * exception set: a closed stream, a NULL fn, no driver, the driver's error) as soon as
 * custream's thread gets to it, with nothing queued. 0 on success. */
static inline int Custream_ReleaseAfter(PyObject *stream, custream_release_fn_t fn, void *ctx) {
    CUSTREAM_API_OR(-1);
    return api_->release_after(stream, fn, ctx);
}

#undef CUSTREAM_API_OR

#ifdef __cplusplus
}
#endif

#endif /* CUSTREAM_H */
