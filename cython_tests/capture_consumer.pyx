# cython: language_level=3
"""A Cython consumer of custream's host-function and capture faces, cimporting them as a
downstream library would: a C host function queued with no Python involved (it runs on a
driver thread without the GIL), and ``is_capturing`` with no Python call."""

from custream cimport (
    Custream_IsCapturing,
    Custream_LaunchHostFunc,
    Stream,
    custream_host_fn_t,
    is_capturing,
    launch_host_func,
)


cdef extern from *:
    """
    static long capture_consumer_calls = 0;
    static long capture_consumer_calls_with_gil = 0;
    /* A host function: counts its calls, and those made holding the GIL (there should be
       none). PyGILState_Check may be called without the GIL. */
    static void capture_consumer_count(void *user) {
        __atomic_add_fetch((long *)user, 1, __ATOMIC_SEQ_CST);
        if (PyGILState_Check())
            __atomic_add_fetch(&capture_consumer_calls_with_gil, 1, __ATOMIC_SEQ_CST);
    }
    static long capture_consumer_load(long *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    """
    long capture_consumer_calls
    long capture_consumer_calls_with_gil
    void capture_consumer_count(void *user) noexcept nogil
    long capture_consumer_load(long *p) noexcept nogil


def queue(Stream s not None, int n=1):
    """Queue the counting host function n times on s."""
    for _ in range(n):
        launch_host_func(s, capture_consumer_count, &capture_consumer_calls)


def calls():
    """(calls so far, of which made holding the GIL)."""
    return capture_consumer_load(&capture_consumer_calls), capture_consumer_load(&capture_consumer_calls_with_gil)


def queue_null(object s):
    """The table entry with a NULL function, on any object."""
    return Custream_LaunchHostFunc(s, <custream_host_fn_t>NULL, NULL)


def capturing(Stream s not None):
    return is_capturing(s)


def capturing_any(object s):
    """The table entry on any object (its type is checked there)."""
    return Custream_IsCapturing(s)
