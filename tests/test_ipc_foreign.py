"""IPC events from any library, without a GPU: ``Event.from_ipc_handle(raw, device=...)`` with
the driver's raw 64-byte handle (PyTorch's ``Event.ipc_handle()``, CuPy's
``runtime.ipcGetEventHandle()``, cuda.core's ``IPCEventDescriptor``) and the device it
belongs to, and the C API's ``Custream_EventFromIpcHandle`` (through its ctypes mirror and
the Rust crate's ``event_from_ipc_handle``).

In this process: every bad argument is refused by name (TypeError or ValueError) before the
driver is asked; good arguments then reach the driver (here: CudaUnavailableError).

Against the stand-in driver (tests/standin/libcuda.c; the tests marked STANDIN, each in a
pytest process of its own, tests/conftest.py): the raw handle opens on the device named by
ordinal or by UUID in every form, a device or UUID this process does not have is refused by
name, the handle pickles to a custream handle with no exporter in it, and an event whose
exporter has gone is the driver's to report: ``synchronize()`` still ends at ``timeout=`` and
at Ctrl-C. tests/gpu/test_gpu_ipc_peers.py opens PyTorch's, CuPy's and cuda.core's events on a
GPU, and theirs open ours.
"""

import ctypes
import os
import pickle
import signal
import threading
import time
import uuid

import pytest

import custream
from custream import Event, IpcEventHandle

import _capi_ctypes
from _platform import emulated

# In a pytest process of its own against tests/standin/libcuda.c (tests/conftest.py).
STANDIN = pytest.mark.standin("libcuda.c")

processes = pytest.mark.skipif(
    emulated(), reason="multiprocessing's child processes do not run under qemu-user emulation"
)

HAS_DRIVER = custream.is_available()
RAW = bytes(range(64))  # a raw handle's shape: custream reads its length, the driver the rest
# The stand-in's device 0 (cuDeviceGetUuid_v2 in tests/standin/libcuda.c): "standin", zeros, then
# the device's number in the last byte.
STANDIN_UUID = b"standin" + b"\0" * 8 + b"\0"


def standin_uuid(device):
    return STANDIN_UUID[:15] + bytes([device])


class TorchLikeUuid:
    """The shape of PyTorch's ``torch.cuda.get_device_properties(d).uuid`` (``torch._C._CUuuid``):
    ``.bytes`` is a list of 16 ints."""

    def __init__(self, raw):
        self.bytes = list(raw)


def cuda_core_descriptor(raw, reduced=None):
    """An object of cuda.core's ``IPCEventDescriptor``'s shape: its class's name and module, and
    its pickling, ``(IPCEventDescriptor._init, (the 64 bytes, blocking sync))``, which is how the
    descriptor gives out the driver's bytes (it keeps them in a private field)."""

    def init(reserved, blocking):
        return cls.__new__(cls)

    def reduce(self):
        return reduced if reduced is not None else (init, (raw, False))

    cls = type("IPCEventDescriptor", (), {"__module__": "cuda.core._event", "__reduce__": reduce})
    return cls()


# ---- in this process: refused by name, before the driver ----------------------------------


@pytest.mark.parametrize("raw", [RAW, bytearray(RAW), memoryview(RAW), cuda_core_descriptor(RAW)],
                         ids=["bytes", "bytearray", "memoryview", "cuda.core"])
def test_a_raw_handle_needs_the_device_it_belongs_to(raw):
    with pytest.raises(TypeError, match=r"^from_ipc_handle\(\) device is required with a raw CUDA IPC event "
                                        r"handle, which does not say which device its event is on: pass "
                                        r"device= as an int device ordinal"):
        Event.from_ipc_handle(raw)
    with pytest.raises(TypeError, match=r"device is required"):
        Event.from_ipc_handle(raw, device=None)


@pytest.mark.parametrize("bad, got", [
    (b"", "got 0 bytes"),
    (RAW[:63], "got 63 bytes"),
    (RAW + b"\0", "got 65 bytes"),
    (bytearray(16), "got 16 bytes"),
    (memoryview(RAW)[1:], "got 63 bytes"),
])
def test_a_handle_of_another_length_is_refused(bad, got):
    with pytest.raises(ValueError, match=rf"^from_ipc_handle\(\) handle must be the 64 bytes of a CUDA IPC event "
                                         rf"handle \(CUipcEventHandle, cudaIpcEventHandle_t\), {got}$"):
        Event.from_ipc_handle(bad, device=0)


def test_the_bytes_of_custreams_own_handle_are_pointed_to_from_bytes():
    packed = b"CSIPCEV1" + RAW + bytes(48)
    with pytest.raises(ValueError, match=r"got 120 bytes: these are bytes\(custream.IpcEventHandle\), which "
                                         r"IpcEventHandle.from_bytes\(\) reads$"):
        Event.from_ipc_handle(packed, device=0)
    # And the other way: from_bytes() of a raw handle says how a raw handle opens.
    with pytest.raises(ValueError, match=r"got 64 bytes: a raw CUDA IPC event handle \(PyTorch's, CuPy's\) opens "
                                         r"with Event.from_ipc_handle\(raw, device=...\)$"):
        IpcEventHandle.from_bytes(RAW)


@pytest.mark.parametrize("bad", ["0" * 64, 64, None, [0] * 64, RAW.hex(), object()],
                         ids=["str", "int", "None", "list", "hex", "object"])
def test_a_handle_of_another_type_is_refused(bad):
    with pytest.raises(TypeError, match=r"^from_ipc_handle\(\) handle must be a custream.IpcEventHandle "
                                        r"\(Event.ipc_handle\(\)\), the raw 64-byte CUDA IPC event handle as bytes, "
                                        rf"bytearray or memoryview .*got {type(bad).__name__}$"):
        Event.from_ipc_handle(bad, device=0)


def test_a_cuda_core_descriptor_that_does_not_pickle_to_64_bytes_is_refused():
    for reduced in [(None, (RAW[:32], False)), (None, ()), ("not a tuple",)]:
        with pytest.raises(TypeError, match=r"^from_ipc_handle\(\) handle: this cuda.core._event.IPCEventDescriptor "
                                            r"does not pickle to the driver's 64 bytes"):
            Event.from_ipc_handle(cuda_core_descriptor(RAW, reduced), device=0)


@pytest.mark.parametrize("bad, exc, match", [
    (-1, ValueError, r"device must be a non-negative device ordinal below 2\*\*31, got -1"),
    (2**31, ValueError, r"device must be a non-negative device ordinal below 2\*\*31, got 2147483648"),
    (True, TypeError, r"device must be an int device ordinal .* got bool"),
    (1.0, TypeError, r"device must be an int device ordinal .* got float"),
    (object(), TypeError, r"device must be an int device ordinal \(this process's numbering\) or the device's "
                          r"UUID: a uuid.UUID, 16 bytes, a string .* got object"),
    ("cuda:0", ValueError, r"device 'cuda:0' is not a device UUID \('GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx', "
                           r"with or without 'GPU-'\)"),
    ("GPU-1234", ValueError, r"device 'GPU-1234' is not a device UUID"),
    (b"\0" * 15, ValueError, r"device as a UUID must be 16 bytes, got 15 bytes"),
    (bytearray(17), ValueError, r"device as a UUID must be 16 bytes, got 17 bytes"),
    (TorchLikeUuid(range(8)), ValueError, r"device as a UUID must be 16 bytes, got 8 bytes"),
    (type("U", (), {"bytes": 3.5})(), TypeError, r"device's .bytes must be the device's 16-byte UUID, got float"),
], ids=["negative", "too big", "bool", "float", "object", "not a uuid", "short uuid", "15 bytes", "17 bytes",
        "8 ints", ".bytes float"])
def test_a_bad_device_is_refused_by_name(bad, exc, match):
    with pytest.raises(exc, match=rf"^from_ipc_handle\(\) {match}"):
        Event.from_ipc_handle(RAW, device=bad)


def test_custreams_own_handle_names_its_device():
    h = IpcEventHandle.from_bytes(b"CSIPCEV1" + RAW + bytes(8) + bytes(16) + bytes(16))
    with pytest.raises(ValueError, match=r"^from_ipc_handle\(\) device must be None with a custream.IpcEventHandle: "
                                         r"the handle names its device"):
        Event.from_ipc_handle(h, device=0)


@pytest.mark.skipif(HAS_DRIVER, reason="checks the no-driver error; this machine has a driver")
@pytest.mark.parametrize("device", [
    0, uuid.UUID(int=1), "GPU-00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000001",
    bytes(16), TorchLikeUuid(bytes(16)),
], ids=["ordinal", "uuid.UUID", "GPU- string", "bare string", "16 bytes", "torch-like"])
def test_good_arguments_reach_the_driver(device):
    for raw in (RAW, bytearray(RAW), memoryview(RAW), cuda_core_descriptor(RAW)):
        with pytest.raises(custream.CudaUnavailableError):
            Event.from_ipc_handle(raw, device=device)


def test_the_c_entry_refuses_by_name_before_the_driver():
    table = _capi_ctypes.capi()
    open_raw = table.event_from_ipc_handle
    for args, match in [
        ((None, 64, 0), r"^Custream_EventFromIpcHandle\(\) handle must point to the 64 bytes of a CUDA IPC event "
                        r"handle, got NULL$"),
        ((RAW, 63, 0), r"^Custream_EventFromIpcHandle\(\) handle must be the 64 bytes of a CUDA IPC event handle "
                       r"\(CUipcEventHandle, cudaIpcEventHandle_t\), got 63 bytes$"),
        ((RAW, 0, 0), r"got 0 bytes$"),
        ((RAW, 64, -1), r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal \(0 or more\), got -1$"),
    ]:
        with pytest.raises(ValueError, match=match):
            open_raw(*args)
    if not HAS_DRIVER:
        with pytest.raises(custream.CudaUnavailableError):
            open_raw(RAW, 64, 0)


def test_the_rust_crate_refuses_by_name_before_the_driver():
    from _rust_ext import load_ext

    rx = load_ext()
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) handle must be the 64 bytes .* got 63 bytes$"):
        rx.event_from_ipc_handle(RAW[:63], 0)
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal \(0 or "
                                         r"more\), got -3$"):
        rx.event_from_ipc_handle(RAW, -3)
    if not HAS_DRIVER:
        with pytest.raises(custream.CudaUnavailableError):
            rx.event_from_ipc_handle(RAW, 0)


# ---- against the stand-in driver -------------------------------------------------------------


def exported():
    """A custream IPC event of the stand-in and the driver's raw 64 bytes of it: what PyTorch's
    or CuPy's ipc_handle() gives of theirs."""
    e = Event(ipc=True)
    return e, e.ipc_handle().handle


@STANDIN
def test_a_raw_handle_opens_and_is_used_as_any_imported_event(driver):
    e, raw = exported()
    assert len(raw) == 64
    ev = Event.from_ipc_handle(raw, device=0)
    assert ev.ipc and not ev.timing and ev.device == 0
    assert repr(ev).endswith("device=0 ipc imported, no exporter to watch>"), repr(ev)
    assert driver.standin_imported_events() == 1
    h = ev.ipc_handle()
    assert h.pid is None and h.device == 0 and h.handle == raw
    assert repr(h) == "<custream.IpcEventHandle device=0 raw CUDA handle, no exporter to watch>"
    s = custream.Stream()
    s.wait(ev)
    ev.record(s)
    assert ev.query() is True
    ev.synchronize(timeout=5)
    ev.close()
    assert driver.standin_imported_events() == 0
    assert driver.standin_live_events() >= 1 and not e.closed, "the exporter's event is left as it is"
    e.close()


@STANDIN
def test_the_c_entry_opens_a_raw_handle():
    e, raw = exported()
    ev = _capi_ctypes.capi().event_from_ipc_handle(raw, 64, 0)
    assert type(ev) is Event and "no exporter to watch" in repr(ev) and ev.query() is True
    ev.close()
    e.close()


@STANDIN
def test_the_rust_crate_opens_a_raw_handle():
    from _rust_ext import load_ext

    rx = load_ext()
    e, raw = exported()
    ev = rx.event_from_ipc_handle(raw, 0)
    assert type(ev) is Event and "no exporter to watch" in repr(ev) and ev.query() is True
    ev.close()
    e.close()


@pytest.mark.standin("libcuda.c", env={"STANDIN_DEVICES": "2"})
@pytest.mark.parametrize("form", ["ordinal", "uuid.UUID", "16 bytes", "bytearray", "GPU- string", "bare string",
                                  "upper case", "torch-like"])
def test_the_device_is_named_by_ordinal_or_by_uuid_in_every_form(form):
    e = Event(ipc=True, device=1)
    raw = e.ipc_handle().handle
    u = uuid.UUID(bytes=standin_uuid(1))
    device = {
        "ordinal": 1,
        "uuid.UUID": u,
        "16 bytes": u.bytes,
        "bytearray": bytearray(u.bytes),
        "GPU- string": f"GPU-{u}",
        "bare string": str(u),
        "upper case": f"GPU-{str(u).upper()}",
        "torch-like": TorchLikeUuid(u.bytes),
    }[form]
    ev = Event.from_ipc_handle(raw, device=device)
    assert ev.device == 1 and ev.ipc_handle().device == 1
    ev.close()
    e.close()


@pytest.mark.standin("libcuda.c", env={"STANDIN_DEVICES": "2"})
def test_a_device_this_process_does_not_have_is_refused_by_name(driver):
    _, raw = exported()
    with pytest.raises(ValueError, match=r"^from_ipc_handle\(\) device 2 does not exist: this process sees 2 "
                                         r"device\(s\) \(ordinals 0 to 1; CUDA_VISIBLE_DEVICES renumbers them\)$"):
        Event.from_ipc_handle(raw, device=2)
    elsewhere = uuid.UUID(bytes=standin_uuid(7))
    for device in (elsewhere, str(elsewhere), elsewhere.bytes):
        with pytest.raises(ValueError, match=rf"^from_ipc_handle\(\) device GPU-{elsewhere} is not a device this "
                                             r"process sees \(CUDA_VISIBLE_DEVICES\)$"):
            Event.from_ipc_handle(raw, device=device)
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) device 5 does not exist"):
        _capi_ctypes.capi().event_from_ipc_handle(raw, 64, 5)
    assert driver.standin_imported_events() == 0, "refused before the driver opened anything"


@STANDIN
def test_a_handle_the_driver_does_not_know_is_the_drivers_error(driver):
    with pytest.raises(custream.CudaError) as err:
        Event.from_ipc_handle(RAW, device=0)
    assert err.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert driver.standin_imported_events() == 0


@STANDIN
def test_it_pickles_to_a_handle_that_opens_again_with_no_exporter_to_watch():
    e, raw = exported()
    ev = Event.from_ipc_handle(memoryview(raw), device="GPU-" + str(uuid.UUID(bytes=STANDIN_UUID)))
    again = pickle.loads(pickle.dumps(ev))
    assert again.ipc and "no exporter to watch" in repr(again) and again.ipc_handle() == ev.ipc_handle()
    h = IpcEventHandle.from_bytes(bytes(ev.ipc_handle()))
    assert h == ev.ipc_handle() and h.pid is None and pickle.loads(pickle.dumps(h)) == h
    for x in (again, ev, e):
        x.close()


@STANDIN
@processes
def test_a_gone_exporter_is_the_drivers_to_report_and_synchronize_still_ends(driver, monkeypatch):
    """custream's own handle would refuse the open (test_ipc.py); a raw handle names nobody to
    watch: it opens, and a wait on work that never completes ends at timeout= and at Ctrl-C."""
    import multiprocessing as mp

    import _ipc_workers

    monkeypatch.setenv("STANDIN_IMPORTED_PENDING", "1")  # the exporter's work never completes here
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_ipc_workers.exporter, args=(child, False))
    p.start()
    raw = parent.recv().handle
    p.join(30)
    assert p.exitcode == 0
    ev = Event.from_ipc_handle(raw, device=0)  # opened: nobody to see gone
    assert ev.query() is False
    s = custream.Stream()
    s.wait(ev)  # queued: the GPU's to wait on, as for any foreign event
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"Event.synchronize\(\)"):
        ev.synchronize(timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 1.0
    # Ctrl-C: the wait comes back to Python between its slices.
    interrupted = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start = time.monotonic()
        interrupted.start()
        with pytest.raises(KeyboardInterrupt):
            ev.synchronize()
        assert time.monotonic() - start < 1.0
    finally:
        interrupted.cancel()
        signal.signal(signal.SIGINT, previous)
    ev.close()
    s.close()
    assert driver.standin_imported_events() == 0
