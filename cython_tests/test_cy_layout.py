"""One layout: what a C compiler makes of custream.h is what the running object is.

c_consumer reports sizeof/offsetof as compiled; these tests compare them with the type
(`__basicsize__`, `__weakrefoffset__`) and read the running object's memory at those
offsets. A consumer compiled against a header that drifted fails at import with Cython's
own check_size error.
"""

import ctypes
import importlib
import re
import weakref

import pytest

import custream

CLOSED = 0x80000000


def read(obj, offset, ctype):
    return ctype.from_address(id(obj) + offset).value


def test_sizeof_is_the_type_size(cext):
    layout = cext.layout()
    assert layout["sizeof"] == custream.Stream.__basicsize__
    assert custream.Stream.__itemsize__ == 0
    assert layout["offsetof"]["weakreflist"] == custream.Stream.__weakrefoffset__
    offsets = sorted(layout["offsetof"].values())
    assert offsets[0] == object.__basicsize__  # after PyObject_HEAD (16 bytes; 32 free-threaded)
    assert offsets[-1] + ctypes.sizeof(ctypes.c_void_p) == layout["sizeof"]  # stream_id (appended) ends it


def test_fields_at_the_compiled_offsets_hold_the_objects_values(cext, cy):
    off = cext.layout()["offsetof"]

    class Owner:
        pass

    owner = Owner()
    s = custream.Stream.from_handle(0x7F0012345000, owner=owner, device=5)
    assert read(s, off["handle"], ctypes.c_void_p) == s.handle == cext.handle_checked(s)
    assert read(s, off["device"], ctypes.c_int32) == 5 == s.device
    assert read(s, off["priority"], ctypes.c_int32) == 0
    assert read(s, off["flags"], ctypes.c_uint32) == 0
    assert read(s, off["owner"], ctypes.c_void_p) == id(owner)
    protocol = ctypes.cast(read(s, off["protocol"], ctypes.c_void_p), ctypes.py_object).value
    assert protocol is s.__cuda_stream__() and protocol == (0, s.handle)
    assert read(s, off["deleter"], ctypes.c_void_p) is None
    assert read(s, off["context"], ctypes.c_void_p) is None
    # The same fields through the header's accessors (C) and the .pxd (Cython).
    fields = cext.fields(s)
    assert fields == {"handle": s.handle, "flags": 0, "device": 5, "priority": 0, "closed": False}
    # The accessors (the table's offsets), with the struct seen and with it opaque.
    assert cext.offset_fields(s) == fields
    assert importlib.import_module("c_consumer_opaque").offset_fields(s) == fields
    assert cy.fields(s) == {k: fields[k] for k in ("handle", "flags", "device", "priority")}
    assert cy.offset_fields(s) == fields

    assert read(s, off["weakreflist"], ctypes.c_void_p) is None
    ref = weakref.ref(s)
    assert read(s, off["weakreflist"], ctypes.c_void_p) is not None and ref() is s

    assert read(s, off["state"], ctypes.c_uint32) & CLOSED == 0
    s.close()
    assert read(s, off["state"], ctypes.c_uint32) & CLOSED
    assert read(s, off["owner"], ctypes.c_void_p) is None
    assert cext.fields(s)["closed"] is True
    assert cext.offset_fields(s)["closed"] is True
    assert importlib.import_module("c_consumer_opaque").offset_fields(s)["closed"] is True


def test_the_tables_offsets_are_the_compiled_offsets(cext):
    off = cext.layout()["offsetof"]
    assert cext.abi()["offsets"] == {k: off[k] for k in ("handle", "flags", "state", "device", "priority")}


def test_default_and_deleter_fields(cext):
    off = cext.layout()["offsetof"]
    s = custream.Stream.from_handle(2)
    assert read(s, off["flags"], ctypes.c_uint32) == 0x2  # CUSTREAM_FLAG_DEFAULT
    shared = custream.PER_THREAD_DEFAULT_STREAM
    assert read(shared, off["flags"], ctypes.c_uint32) == 0x2 | 0x8  # DEFAULT | SHARED
    assert read(s, off["device"], ctypes.c_int32) == -1  # CUSTREAM_DEVICE_UNKNOWN
    d = cext.from_handle_with_deleter(0x8000, -1, 11)
    assert read(d, off["deleter"], ctypes.c_void_p) is not None
    assert read(d, off["deleter_ctx"], ctypes.c_void_p) == 11
    d.close()
    assert read(d, off["deleter"], ctypes.c_void_p) is None


def test_a_consumer_built_against_the_installed_header_imports(built):
    drift_ok = importlib.import_module("drift_ok")
    assert drift_ok.handle(custream.Stream.from_handle(0x42)) == 0x42


def test_a_newer_header_than_the_running_custream_fails_at_import(built):
    """drift.pyx built against custream.h with one pointer field more than the running
    object (a header newer than the installed custream): Cython refuses it at import."""
    size = custream.Stream.__basicsize__
    with pytest.raises(ValueError) as info:
        importlib.import_module("drift_bigger")
    # Cython prints "got N" or "got N-N" (basicsize and basicsize + itemsize) by case.
    assert re.fullmatch(
        "custream.Stream size changed, may indicate binary incompatibility. "
        f"Expected {size + 8} from C header, got {size}(-{size})? from PyObject",
        str(info.value),
    ), str(info.value)


def test_an_older_header_than_the_running_custream_imports_and_reads_the_fields(built):
    """drift.pyx built against custream.h with its last field missing: a consumer compiled
    against an older header, whose struct was smaller, on today's custream. `check_size
    ignore` (the .pxd) accepts it, and the fields it knows lie where it expects them."""
    drift_smaller = importlib.import_module("drift_smaller")
    assert drift_smaller.handle(custream.Stream.from_handle(0x4243)) == 0x4243
