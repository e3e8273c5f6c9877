# cython: language_level=3
"""The Cython face of custream: ``from custream cimport Stream, as_stream``.

Everything here is declared from custream.h (the single source of the layout); the C
compiler needs ``custream.get_include()`` on its include path, Cython finds this file on
``sys.path``. No import call is needed for the fields and functions: ``Stream`` is checked
against the running type when the cimporting module is imported, and the C-API table is
fetched on first use.

Growth: the running custream may be newer than this file, with a larger ``Stream`` (fields
are only ever appended): ``check_size ignore`` accepts that, as NumPy's ``dtype`` does, while
Cython still refuses a running type *smaller* than declared (an older custream) at import.
The fields declared on ``Stream`` below are the ones every custream of this ABI has.

Builds that cannot see the struct (abi3t, PEP 803, where ``PyObject`` is opaque): read the
fields with ``stream_handle(obj)``, ``stream_flags``, ``stream_device``, ``stream_priority``
and ``stream_is_closed``, which add the offsets the C-API table carries (one load of the
table, one add, one load); they need ``custream_import()`` called once first, at module level.

Names:

* ``Stream``: custream.Stream as a C struct. ``s.handle`` (and ``flags``, ``device``,
  ``priority``) read the struct field: one load, usable inside ``nogil``. Type arguments as
  ``Stream s not None``: Cython lets None through a typed argument otherwise.
* ``as_stream``, ``from_handle``, ``from_handle_with_deleter``, ``synchronize``,
  ``synchronize_timeout``,
  ``handle_checked``, ``is_closed``, ``is_stream``, ``launch_host_func``, ``is_capturing``,
  ``sm_count``, ``green_context``, ``id_of``, ``device_of``, ``write_value``, ``wait_value``,
  ``event_from_ipc_handle``, ``release_after``: the C API with Cython signatures.
* ``stream_handle`` and its siblings: the fields through the table's offsets (above).
* ``Custream_*`` and ``custream_import``: the C functions exactly as custream.h has them.

Free-threaded Python: every name here is safe from any thread; custream's module declares
itself free-threading compatible. Declare your module so too (``# cython:
freethreading_compatible=True``) once your own code is.
"""

from cpython.object cimport PyObject
from libc.stdint cimport int32_t, uint32_t, uint64_t


cdef extern from "custream.h":
    enum: CUSTREAM_ABI_VERSION

    # The same C type as CUDA's CUstream and cudaStream_t. A Cython module that declares
    # CUstream itself (or cimports cuda.bindings.cydriver) casts: <CUstream>s.handle.
    cdef struct CUstream_st:
        pass
    ctypedef CUstream_st *custream_handle_t

    # The same C type as CUDA's CUgreenCtx (CUDA 12.4 and newer).
    cdef struct CUgreenCtx_st:
        pass
    ctypedef CUgreenCtx_st *custream_green_ctx_t

    const custream_handle_t CUSTREAM_NULL_STREAM
    const custream_handle_t CUSTREAM_LEGACY_DEFAULT_STREAM
    const custream_handle_t CUSTREAM_PER_THREAD_DEFAULT_STREAM

    enum:
        CUSTREAM_FLAG_OWNED
        CUSTREAM_FLAG_DEFAULT
        CUSTREAM_FLAG_NON_BLOCKING
        CUSTREAM_FLAG_SHARED
        CUSTREAM_FLAG_POOLED
        CUSTREAM_FLAG_GREEN
        CUSTREAM_DEVICE_UNKNOWN

    # Called exactly once, with the GIL held, when a stream wrapped with it is closed or
    # deallocated; never during interpreter finalization nor in a forked child.
    ctypedef void (*custream_deleter_t)(void *ctx, custream_handle_t handle) noexcept

    # Runs on a thread of the CUDA driver's, without the GIL: declare yours `noexcept nogil`.
    ctypedef void (*custream_host_fn_t)(void *user) noexcept nogil
    # Called once on custream's host thread; it must not call into Python (custream.h).
    ctypedef void (*custream_release_fn_t)(void *ctx) noexcept nogil

    ctypedef class custream.Stream [object CustreamStream, check_size ignore]:
        # Fixed when the object is made: read them anywhere, with or without the GIL.
        # The handle stays readable after close(); use handle_checked() or is_closed()
        # where the stream may have been closed.
        cdef const custream_handle_t handle
        cdef const uint32_t flags          # CUSTREAM_FLAG_*
        cdef const int32_t priority        # as created (owned streams); 0 otherwise
        # CUSTREAM_DEVICE_UNKNOWN (-1) until custream resolves it (always, for the default
        # streams, which follow the current context); the Python attribute resolves it.
        # custream writes it once, atomically, from -1 to the device: a read sees either, and
        # stream_device() (an atomic load) is the one to use where another thread may be
        # resolving it.
        cdef const int32_t device

    # The C API; each fetches the table from the capsule on first use.
    int custream_import() except -1
    bint Custream_IsClosed(Stream s) nogil
    # Through the table's offsets (custream.h's accessors); custream_import() first.
    custream_handle_t custream_handle(PyObject *obj) nogil
    uint32_t custream_flags(PyObject *obj) nogil
    int32_t custream_device(PyObject *obj) nogil
    int32_t custream_priority(PyObject *obj) nogil
    bint custream_is_closed(PyObject *obj) nogil
    custream_handle_t Custream_Handle(Stream s) nogil
    object Custream_AsStream(object obj)
    object Custream_FromHandle(custream_handle_t handle, int device, object owner)
    object Custream_FromHandleWithDeleter(custream_handle_t handle, int device,
                                          custream_deleter_t deleter, void *ctx)
    int Custream_Check(object obj) except -1
    int Custream_Synchronize(object stream) except -1
    int Custream_HandleChecked(object stream, custream_handle_t *out) except -1
    object Custream_CurrentStream()
    object Custream_DefaultStream(custream_handle_t token)
    object Custream_PoolGet(object pool)
    int Custream_LaunchHostFunc(object stream, custream_host_fn_t fn, void *user) except -1
    int Custream_IsCapturing(object stream) except -1
    int Custream_GreenContext(object stream, custream_green_ctx_t *out) except -1
    int Custream_SmCount(object stream, unsigned int *out) except -1
    int Custream_SynchronizeTimeout(object stream, double timeout) except -1
    int Custream_StreamId(object stream, unsigned long long *out) except -1
    int Custream_StreamDevice(object stream, int *out) except -1
    int CUSTREAM_WAIT_GEQ
    int CUSTREAM_WAIT_EQ
    int CUSTREAM_WAIT_AND
    int CUSTREAM_WAIT_NOR
    int Custream_WriteValue(object stream, uint64_t address, uint64_t value, int width,
                            int flush) except -1
    object Custream_EventFromIpcHandle(const void *handle, size_t size, int device)
    int Custream_WaitValue(object stream, uint64_t address, uint64_t value, int width, int op,
                           int flush) except -1
    int Custream_ReleaseAfter(object stream, custream_release_fn_t fn, void *ctx) except -1


cdef inline Stream as_stream(object obj):
    """``obj`` as a Stream: a Stream as is, else a borrowed Stream over the handle
    ``obj.__cuda_stream__()`` returns, keeping ``obj`` alive (custream.as_stream)."""
    if type(obj) is Stream:
        return <Stream>obj
    return <Stream>Custream_AsStream(obj)


cdef inline Stream from_handle(custream_handle_t handle, int device=CUSTREAM_DEVICE_UNKNOWN,
                               object owner=None):
    """Wrap a stream somebody else made; ``owner`` is kept alive until close or
    deallocation (custream.Stream.from_handle)."""
    return <Stream>Custream_FromHandle(handle, device, owner)


cdef inline Stream from_handle_with_deleter(custream_handle_t handle, int device,
                                            custream_deleter_t deleter, void *ctx):
    """Wrap a stream a C or C++ owner hands over: ``deleter(ctx, handle)`` is called
    exactly once, on close or deallocation. If this raises, the handle stays yours."""
    return <Stream>Custream_FromHandleWithDeleter(handle, device, deleter, ctx)


cdef inline bint is_stream(object obj) noexcept:
    """Whether ``obj`` is a custream.Stream (``isinstance(obj, Stream)`` says the same)."""
    return type(obj) is Stream


cdef inline bint is_closed(Stream s) noexcept nogil:
    """Whether close() was called; an atomic load, no lock, no GIL."""
    return Custream_IsClosed(s)


cdef inline custream_handle_t handle_checked(Stream s) except? NULL:
    """The handle, or ValueError if the stream is closed (0 is the null default stream:
    Cython checks for an exception when NULL comes back)."""
    cdef custream_handle_t h = NULL
    Custream_HandleChecked(s, &h)
    return h


cdef inline int synchronize(Stream s) except -1:
    """Wait for the stream's work, with the GIL released while waiting."""
    return Custream_Synchronize(s)


cdef inline int synchronize_timeout(Stream s, double timeout) except -1:
    """Wait at most ``timeout`` seconds (``INFINITY``: no limit) for the stream's work, with
    the GIL released; ``TimeoutError`` when it gives up (the stream untouched)."""
    return Custream_SynchronizeTimeout(s, timeout)


cdef inline Stream current_stream():
    """The stream ``stream=None`` means: the innermost ``with s:`` block's stream in this
    thread or asyncio task, else the default stream (custream.current_stream)."""
    return <Stream>Custream_CurrentStream()


cdef inline Stream default_stream(custream_handle_t token=CUSTREAM_NULL_STREAM):
    """custream.DEFAULT_STREAM, LEGACY_DEFAULT_STREAM or PER_THREAD_DEFAULT_STREAM, by
    token (CUSTREAM_NULL_STREAM, CUSTREAM_LEGACY_DEFAULT_STREAM,
    CUSTREAM_PER_THREAD_DEFAULT_STREAM)."""
    return <Stream>Custream_DefaultStream(token)


cdef inline Stream pool_get(object pool):
    """The next stream of a custream.StreamPool, round-robin (StreamPool.get), without a
    Python call."""
    return <Stream>Custream_PoolGet(pool)


cdef inline int launch_host_func(Stream s, custream_host_fn_t fn, void *user) except -1:
    """Queue ``fn(user)`` on the stream (cuLaunchHostFunc): it runs on a driver thread,
    without the GIL, once the work queued before it is done; no Python is involved, and the
    GIL is released around the driver call. ``fn`` must make no CUDA call. In a capture it
    becomes a host node run at every launch of the graph: keep ``user`` valid that long."""
    return Custream_LaunchHostFunc(s, fn, user)


cdef inline bint is_capturing(Stream s) except -1:
    """Whether the stream is capturing a CUDA graph (whoever began it): one driver call, no
    Python call."""
    return Custream_IsCapturing(s)


cdef inline unsigned int sm_count(Stream s) except 0:
    """How many SMs the stream's work may use: its green context's, else the whole device's
    (never 0), e.g. to size a persistent kernel's grid. One call, no Python call."""
    cdef unsigned int n = 0
    Custream_SmCount(s, &n)
    return n


cdef inline custream_green_ctx_t green_context(Stream s) except? NULL:
    """The green context the stream runs in (a CUgreenCtx), or NULL when it runs on the whole
    device; valid while the stream is open. The Python object is ``s.green_context``."""
    cdef custream_green_ctx_t g = NULL
    Custream_GreenContext(s, &g)
    return g


cdef inline unsigned long long id_of(Stream s) except? 0:
    """The driver's id of the stream (``s.id``, cuStreamGetId): unique in the process while
    the stream lives, the same for every Stream over one handle; asked of the driver once per
    object. No Python call."""
    cdef unsigned long long id = 0
    Custream_StreamId(s, &id)
    return id


cdef inline int device_of(Stream s) except -1:
    """The stream's device ordinal (``s.device``): known, or asked of the driver once (never by
    changing the current context). ``stream_device(s)`` reads only what is known (-1 until
    then). No Python call."""
    cdef int d = -1
    Custream_StreamDevice(s, &d)
    return d


cdef inline int write_value(Stream s, uint64_t address, uint64_t value, int width=32,
                            bint flush=False) except -1:
    """Queue a write of the ``width``-bit (32 or 64) ``value`` to the GPU address ``address``
    once the work queued before it is done (``s.write_value``): checked as the method checks,
    before anything is queued. One call, no Python call."""
    return Custream_WriteValue(s, address, value, width, flush)


cdef inline int wait_value(Stream s, uint64_t address, uint64_t value, int width=32,
                           int op=CUSTREAM_WAIT_GEQ, bint flush=False) except -1:
    """Make the work queued after this wait until the word at ``address`` meets ``op``
    (``CUSTREAM_WAIT_GEQ``, ``_EQ``, ``_AND``, ``_NOR``) against ``value`` (``s.wait_value``);
    the caller does not wait. One call, no Python call."""
    return Custream_WaitValue(s, address, value, width, op, flush)


cdef inline object event_from_ipc_handle(bytes handle, int device):
    """Another process's IPC event, opened from the driver's raw handle: the 64 bytes of a
    ``CUipcEventHandle`` (PyTorch's ``Event.ipc_handle()``, CuPy's
    ``runtime.ipcGetEventHandle()``), on ``device``, an ordinal of this process
    (``custream.Event.from_ipc_handle(handle, device=device)``). A custream.Event; ValueError
    for another length or a device this process does not have, before the driver opens
    anything. With a ``CUipcEventHandle`` in C, call ``Custream_EventFromIpcHandle(&h,
    sizeof(h), device)``."""
    if handle is None:
        raise TypeError("event_from_ipc_handle() handle must be bytes, got None")
    return Custream_EventFromIpcHandle(<const char *>handle, len(handle), device)


cdef inline int release_after(Stream s, custream_release_fn_t fn, void *ctx) except -1:
    """Call ``fn(ctx)`` once the work queued on the stream so far is done, on custream's own
    thread (``s.keep_alive``'s C face): free a native buffer the queued work reads, without
    synchronizing. ``fn`` is called exactly once, an error or not (custream.h says when); it
    must make no CUDA call. One call, no Python call."""
    return Custream_ReleaseAfter(s, fn, ctx)


cdef inline custream_handle_t stream_handle(Stream s) noexcept nogil:
    """``s.handle`` through the C-API table's offset: for builds that cannot see the struct.
    ``custream_import()`` must have succeeded."""
    return custream_handle(<PyObject *>s)


cdef inline uint32_t stream_flags(Stream s) noexcept nogil:
    """``s.flags`` through the table's offset (CUSTREAM_FLAG_*)."""
    return custream_flags(<PyObject *>s)


cdef inline int32_t stream_device(Stream s) noexcept nogil:
    """``s.device`` through the table's offset, as an atomic load: -1 while unknown."""
    return custream_device(<PyObject *>s)


cdef inline int32_t stream_priority(Stream s) noexcept nogil:
    """``s.priority`` through the table's offset."""
    return custream_priority(<PyObject *>s)


cdef inline bint stream_is_closed(Stream s) noexcept nogil:
    """Whether close() was called, through the table's offset; an atomic load."""
    return custream_is_closed(<PyObject *>s)
