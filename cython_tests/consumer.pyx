# cython: language_level=3
"""A Cython consumer of custream, cimporting it as a downstream library would."""

from libc.stdint cimport int32_t, uint32_t, uint64_t, uintptr_t

cimport custream
from custream cimport (
    Stream,
    as_stream,
    current_stream,
    custream_handle_t,
    default_stream,
    device_of,
    event_from_ipc_handle,
    from_handle,
    from_handle_with_deleter,
    green_context,
    handle_checked,
    id_of,
    is_closed,
    is_stream,
    pool_get,
    release_after,
    sm_count,
    stream_device,
    stream_flags,
    stream_handle,
    stream_is_closed,
    stream_priority,
    synchronize,
    synchronize_timeout,
    wait_value,
    write_value,
    CUSTREAM_WAIT_EQ,
)


cdef extern from "<unistd.h>" nogil:
    int usleep(unsigned int usec)


def handle_loop(Stream s not None, Py_ssize_t n):
    """Read s.handle n times without the GIL; returns (the handle, how many reads agreed
    with the first one and with Custream_Handle)."""
    cdef Py_ssize_t i, agree = 0
    cdef custream_handle_t first
    with nogil:
        first = s.handle
        for i in range(n):
            if s.handle == first and custream.Custream_Handle(s) == first:
                agree += 1
    return <uintptr_t>first, agree


def fields(Stream s not None):
    return {"handle": <uintptr_t>s.handle, "flags": s.flags, "device": s.device,
            "priority": s.priority}


def offset_fields(Stream s not None):
    """The same fields through the table's offsets (the .pxd's stream_* accessors), read
    without the GIL; the table is imported first, as the accessors require."""
    custream.custream_import()
    cdef uintptr_t handle
    cdef uint32_t flags
    cdef int32_t device, priority
    cdef bint closed
    with nogil:
        handle = <uintptr_t>stream_handle(s)
        flags, device, priority = stream_flags(s), stream_device(s), stream_priority(s)
        closed = stream_is_closed(s)
    return {"handle": handle, "flags": flags, "device": device, "priority": priority, "closed": closed}


def closed_nogil(Stream s not None):
    cdef bint closed
    with nogil:
        closed = is_closed(s)
    return closed


def wrap(obj):
    cdef Stream s = as_stream(obj)
    return s


def wrap_handle(uintptr_t handle, int device, owner):
    return from_handle(<custream_handle_t>handle, device, owner)


def wrap_handle_default_args(uintptr_t handle):
    return from_handle(<custream_handle_t>handle)


def checked_handle(Stream s not None):
    return <uintptr_t>handle_checked(s)


def sync(Stream s not None):
    synchronize(s)


def sync_timeout(Stream s not None, double seconds):
    synchronize_timeout(s, seconds)


def sync_any(obj):
    """The C API's own argument check, past Cython's typing."""
    return custream.Custream_Synchronize(obj)


def typed(Stream s not None):
    return s


def typed_or_none(Stream s):
    return s is None


def checks(obj):
    return is_stream(obj), isinstance(obj, Stream), custream.Custream_Check(obj)


def abi_version():
    custream.custream_import()
    return custream.CUSTREAM_ABI_VERSION


def default_tokens():
    return (<uintptr_t>custream.CUSTREAM_NULL_STREAM,
            <uintptr_t>custream.CUSTREAM_LEGACY_DEFAULT_STREAM,
            <uintptr_t>custream.CUSTREAM_PER_THREAD_DEFAULT_STREAM)


def flag_values():
    return {"OWNED": custream.CUSTREAM_FLAG_OWNED, "DEFAULT": custream.CUSTREAM_FLAG_DEFAULT,
            "NON_BLOCKING": custream.CUSTREAM_FLAG_NON_BLOCKING,
            "SHARED": custream.CUSTREAM_FLAG_SHARED, "POOLED": custream.CUSTREAM_FLAG_POOLED,
            "GREEN": custream.CUSTREAM_FLAG_GREEN, "DEVICE_UNKNOWN": custream.CUSTREAM_DEVICE_UNKNOWN}


def current():
    """What `stream=None` means, as an adopting Cython library computes it."""
    cdef Stream s = current_stream()
    return s


def defaults():
    return (default_stream(), default_stream(custream.CUSTREAM_LEGACY_DEFAULT_STREAM),
            default_stream(custream.CUSTREAM_PER_THREAD_DEFAULT_STREAM))


def default_of(uintptr_t token):
    return default_stream(<custream_handle_t>token)


def pool_next(pool):
    cdef Stream s = pool_get(pool)
    return s


def id_and_device(Stream s not None):
    """(id_of(s), device_of(s)), the device asked first: the C API's stream_id and stream_device."""
    cdef int d = device_of(s)
    return (id_of(s), d)


def slice_of(Stream s not None):
    """(green_context(s), sm_count(s)), as a Cython library sizing a grid asks."""
    return (<uintptr_t>green_context(s), sm_count(s))


def release(Stream s not None, uint64_t address, uint64_t value, int width=32):
    """write_value(s, ...): a semaphore's release, as a Cython library queues it."""
    write_value(s, address, value, width)


cdef extern from *:
    """
    static int consumer_releases;
    static void consumer_count_release(void *ctx) { (void)ctx; __atomic_add_fetch(&consumer_releases, 1, __ATOMIC_SEQ_CST); }
    static int consumer_released(void) { return __atomic_load_n(&consumer_releases, __ATOMIC_SEQ_CST); }
    """
    void consumer_count_release(void *ctx) noexcept nogil
    int consumer_released() noexcept nogil


def queue_release(Stream s not None):
    """release_after(s, fn, NULL), fn a C function counting its calls (released_count())."""
    release_after(s, consumer_count_release, NULL)


def released_count():
    """How many times the release queued by queue_release() ran."""
    return consumer_released()


def acquire(Stream s not None, uint64_t address, uint64_t value, int width=32, int op=CUSTREAM_WAIT_EQ):
    """wait_value(s, ...), the condition as custream.h numbers it (EQ by default here)."""
    wait_value(s, address, value, width, op)


def open_ipc_event(bytes raw, int device):
    """event_from_ipc_handle(raw, device): another library's IPC event, from its raw handle."""
    return event_from_ipc_handle(raw, device)


# ---- a C owner's deleter: counts calls per slot (ctx is the slot number) ---------------

cdef enum:
    SLOTS = 1 << 14

cdef int calls[SLOTS]
cdef uintptr_t handles[SLOTS]
cdef unsigned int pause_us = 0


cdef void counting_deleter(void *ctx, custream_handle_t handle) noexcept:
    cdef uintptr_t slot = <uintptr_t>ctx
    calls[slot] += 1
    handles[slot] = <uintptr_t>handle
    if pause_us:
        # Let other threads run (close, drop references) while this release is in progress.
        with nogil:
            usleep(pause_us)


def wrap_with_deleter(uintptr_t handle, Py_ssize_t slot, int device=-1):
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot {slot} out of range")
    calls[slot] = 0
    handles[slot] = 0
    return from_handle_with_deleter(<custream_handle_t>handle, device, counting_deleter,
                                    <void *>slot)


def deleter_record(Py_ssize_t slot):
    """(calls, the handle the last call got) for a slot."""
    return calls[slot], handles[slot]


def set_deleter_pause(unsigned int usec):
    global pause_us
    pause_us = usec


SLOT_COUNT = SLOTS
