"""The custream C-API table reached through ctypes, so pure-Python tests can wrap a handle
with a C deleter (the path a C/C++ owner such as rmm::cuda_stream takes). Used by the
reliability tests; the Cython/C tests in cython_tests/ exercise the real C consumers.
"""

import ctypes

import custream

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class CAPI(ctypes.Structure):
    # PYFUNCTYPE: called with the GIL held, a NULL result raises the exception it set.
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("api_size", ctypes.c_uint32),
        ("stream_size", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("StreamType", ctypes.c_void_p),
        ("as_stream", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)),
        ("from_handle", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_int, ctypes.py_object)),
        ("from_handle_with_deleter",
         ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_int, DELETER, ctypes.c_void_p)),
        ("check", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)),
        ("synchronize", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)),
        ("handle_checked", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))),
        ("current_stream", ctypes.PYFUNCTYPE(ctypes.py_object)),
        ("default_stream", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p)),
        ("pool_get", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)),
        ("launch_host_func", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p)),
        ("is_capturing", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)),
        ("green_context", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))),
        ("sm_count", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_uint))),
        ("handle_offset", ctypes.c_uint32),
        ("flags_offset", ctypes.c_uint32),
        ("state_offset", ctypes.c_uint32),
        ("device_offset", ctypes.c_uint32),
        ("priority_offset", ctypes.c_uint32),
        ("reserved2", ctypes.c_uint32),
        ("synchronize_timeout", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_double)),
        ("stream_id", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_ulonglong))),
        ("stream_device", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_int))),
        # Stream memory operations (appended).
        ("write_value", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int)),
        ("wait_value", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_int)),
        # IPC events from any library (appended).
        ("event_from_ipc_handle", ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)),
        # Lifetimes in stream order (appended).
        ("release_after", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p)),
    ]


def capi():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(custream._custream._C_API, b"custream._custream._C_API")
    table = CAPI.from_address(ptr)
    assert table.abi_version == custream.ABI_VERSION
    return table


class DeleterCounter:
    """A C deleter that counts its calls (per handle too, if `per_handle`); keep this object
    alive while any stream made with it may still call it."""

    def __init__(self, per_handle=True):
        self.calls = {} if per_handle else None
        self.count = 0
        self.last = None
        self.c_deleter = DELETER(self._deleted)
        self.table = capi()

    def _deleted(self, ctx, handle):
        self.count += 1
        self.last = handle or 0
        if self.calls is not None:
            self.calls[self.last] = self.calls.get(self.last, 0) + 1

    def wrap(self, handle, device=-1):
        return self.table.from_handle_with_deleter(handle, device, self.c_deleter, None)



STATE_CLOSED = 0x80000000
STATE_RELEASED = 0x40000000
STATE_USERS = 0x3FFFFFFF


def state_word(stream):
    """The stream's atomic state word (closed, released, calls in flight), read in place at
    the offset the C-API table gives (the object header is 16 bytes, or 32 free-threaded)."""
    assert type(stream) is custream.Stream
    return ctypes.c_uint32.from_address(id(stream) + capi().state_offset).value
