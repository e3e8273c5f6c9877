"""custream.Event without a GPU: made, recorded, waited on and closed against the stand-in
driver, and IPC events.

In this process: the IPC arguments, the handle as data (bytes, pickling, equality), and the
lifetime rule's first half, which needs no driver: the handle of an exporter that has exited
is refused before the driver is asked. (Bad Event() arguments are in test_bad_input.py's
table, waits on events in test_waits.py, events in a capture in test_graph.py.)

Against the stand-in driver (tests/standin/libcuda.c, which models CUDA's IPC event calls
and device UUIDs): exporting, importing (the device found again by UUID), pickling an IPC
event to its handle across spawn and forkserver processes, fork refused, closing an import
leaving the exporter's event alone, and an exporter that exits while the importer waits (the
tests marked STANDIN, each in a pytest process of its own). tests/gpu/test_gpu_ipc.py checks the same against the real driver.
"""

import os
import pickle
import struct
import subprocess
import sys

import pytest

import custream
from custream import Event, IpcEventHandle
from _platform import emulated

# In a pytest process of its own against tests/standin/libcuda.c (tests/conftest.py).
STANDIN = pytest.mark.standin("libcuda.c")


# Child processes of multiprocessing (spawn and forkserver start sys.executable with
# inherited pipes; fork keeps the emulator's threads) do not run under qemu-user here.
processes = pytest.mark.skipif(
    emulated(), reason="multiprocessing's child processes do not run under qemu-user emulation"
)

HAS_DRIVER = custream.is_available()


def packed(pid, *, device=0, start_time=1, namespace=None, uuid=b"\0" * 16):
    """bytes(handle) as the exporter would make it."""
    if namespace is None:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    return b"CSIPCEV1" + bytes(range(64)) + struct.pack("<Ii", pid, device) + uuid + struct.pack("<QQ", namespace, start_time)


def dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_ipc_and_timing_cannot_be_combined_and_arguments_are_checked():
    with pytest.raises(ValueError, match=r"Event\(\) ipc=True and timing=True cannot be combined.*CU_EVENT_DISABLE_TIMING"):
        Event(ipc=True, timing=True)
    with pytest.raises(TypeError, match=r"Event\(\) ipc must be True or False, got str"):
        Event(ipc="yes")
    # A raw handle (any library's) needs its device (tests/test_ipc_foreign.py has the rest).
    with pytest.raises(TypeError, match=r"from_ipc_handle\(\) device is required with a raw CUDA IPC event handle"):
        Event.from_ipc_handle(b"\0" * 64)
    with pytest.raises(TypeError, match=r"from_ipc_handle\(\) handle must be a custream.IpcEventHandle .*got str"):
        Event.from_ipc_handle("h")
    with pytest.raises(TypeError, match=r"from_bytes\(\) data must be bytes, got str"):
        IpcEventHandle.from_bytes("x")
    with pytest.raises(ValueError, match=r"is not a custream.IpcEventHandle .*112 bytes.*got 3 bytes"):
        IpcEventHandle.from_bytes(b"abc")
    with pytest.raises(ValueError, match="got 112 bytes"):
        IpcEventHandle.from_bytes(b"X" + packed(1)[1:])


def test_the_handle_is_small_picklable_data():
    h = IpcEventHandle.from_bytes(packed(4242, device=3))
    assert (h.pid, h.device, h.handle) == (4242, 3, bytes(range(64)))
    assert bytes(h) == packed(4242, device=3) and len(bytes(h)) == 112
    again = pickle.loads(pickle.dumps(h))
    assert again == h and hash(again) == hash(h) and again is not h
    assert h != IpcEventHandle.from_bytes(packed(4243, device=3)) and h != bytes(h)
    assert repr(h) == "<custream.IpcEventHandle pid=4242 device=3>"


def test_the_handle_of_an_exporter_that_exited_is_refused_before_the_driver():
    h = IpcEventHandle.from_bytes(packed(dead_pid()))
    with pytest.raises(custream.CudaError, match="the process that exported this IPC event .* has exited") as e:
        Event.from_ipc_handle(h)
    assert e.value.name == "CUDA_ERROR_INVALID_HANDLE"


# ---- against the stand-in driver -------------------------------------------------------------


@STANDIN
def test_an_event_is_made_recorded_and_closed_once(driver):
    s = custream.Stream()
    before = driver.standin_live_events()
    e = Event()
    assert driver.standin_live_events() == before + 1
    assert e.device == 0 and not e.timing and not e.ipc and not e.closed and e.handle
    assert e.record(s) is None
    assert e.query() is True
    e.synchronize()
    s.wait(e)
    e.close()
    e.close()  # idempotent
    assert e.closed and driver.standin_live_events() == before
    for call in (lambda: e.record(s), e.query, e.synchronize, lambda: s.wait(e), lambda: e.handle):
        with pytest.raises(ValueError, match="closed custream.Event"):
            call()
    # Stream.record() makes one; `with` closes it.
    with s.record() as made:
        assert type(made) is Event and driver.standin_live_events() == before + 1
    assert made.closed and driver.standin_live_events() == before


@STANDIN
def test_a_dropped_event_is_destroyed(driver):
    import gc

    before = driver.standin_live_events()
    events = [Event(timing=i % 2 == 0) for i in range(10)]
    assert driver.standin_live_events() == before + 10
    assert [e.timing for e in events[:2]] == [True, False]
    del events
    gc.collect()
    assert driver.standin_live_events() == before


@STANDIN
def test_export_import_and_close(driver):
    e = custream.Event(ipc=True)
    h = e.ipc_handle()
    assert e.ipc and not e.timing and repr(e).endswith("device=0 ipc>"), repr(e)
    assert h.pid == os.getpid() and h.device == 0 and len(h.handle) == 64 and h == e.ipc_handle()
    # The event pickles to its handle: unpickling opens it (here in the exporter itself, which
    # the stand-in allows; the GPU test says what the driver does).
    imported = pickle.loads(pickle.dumps(e))
    assert imported.ipc and "ipc imported" in repr(imported) and imported.ipc_handle() == h
    assert driver.standin_imported_events() == 1 and driver.standin_live_events() == 2
    s = custream.Stream()
    live = driver.standin_live_events()  # and the notifiers' the stream's context got with it
    s.wait(imported)
    imported.record(s)
    assert imported.query() is True
    imported.synchronize()
    imported.close()
    assert driver.standin_imported_events() == 0
    assert driver.standin_live_events() == live - 1, "the import's close left the exporter's event"
    e.record(s)
    e.synchronize()
    # A plain event still refuses pickling, with the message it always had, and has no handle.
    plain = custream.Event()
    assert not plain.ipc
    with pytest.raises(TypeError) as err:
        pickle.dumps(plain)
    assert str(err.value) == "cannot pickle Event: a CUDA event belongs to one process"
    with pytest.raises(ValueError, match=r"needs an event made with Event\(ipc=True\)"):
        plain.ipc_handle()
    e.close()


@STANDIN
def test_the_events_imported_from_one_exporter_share_one_watch_on_it():
    """An importer watches an exporter through a pidfd (its exit is then one poll away); the
    events it opens from one exporter share it, so that many imports hold one descriptor."""
    e = custream.Event(ipc=True)
    h = e.ipc_handle()

    def fds():
        return len(os.listdir("/proc/self/fd"))

    before = fds()
    imports = [custream.Event.from_ipc_handle(h) for _ in range(50)]
    assert fds() == before + 1, (before, fds())
    for i in imports:
        i.close()
    del imports, i
    assert fds() == before, "the watch went with the last import"
    again = custream.Event.from_ipc_handle(h)
    assert fds() == before + 1
    again.close()
    e.close()


@pytest.mark.standin("libcuda.c", env={"STANDIN_DEVICES": "2"})
def test_the_importer_finds_the_device_by_uuid():
    e = custream.Event(ipc=True, device=1)
    raw = bytearray(bytes(e.ipc_handle()))
    # Device 1 here is device 1 in the handle: imported there.
    assert custream.Event.from_ipc_handle(e.ipc_handle()).device == 1
    # A device this process does not see (another CUDA_VISIBLE_DEVICES) is named, not guessed.
    raw[8 + 64 + 8 + 15] = 7
    with pytest.raises(custream.CudaError, match="is not visible in this process") as err:
        custream.Event.from_ipc_handle(custream.IpcEventHandle.from_bytes(bytes(raw)))
    assert err.value.name == "CUDA_ERROR_INVALID_DEVICE"


@STANDIN
@processes
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_ipc_event_crosses_spawn_and_forkserver_processes(method):
    import multiprocessing as mp

    import _ipc_workers

    ctx = mp.get_context(method)
    e = custream.Event(ipc=True)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_ipc_workers.importer, args=(child,))
    p.start()
    parent.send(e)          # pickled to its handle
    text, ipc, done, pid = parent.recv()
    p.join(30)
    assert p.exitcode == 0 and ipc and done and pid == os.getpid(), (text, p.exitcode)
    assert "ipc imported" in text, text


@STANDIN
@processes
def test_fork_is_refused_as_for_other_objects():
    e = custream.Event(ipc=True)
    h = e.ipc_handle()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        msgs = []
        for call in (e.query, lambda: custream.Event.from_ipc_handle(h)):
            try:
                call()
            except custream.CudaError as err:
                msgs.append("spawn" in str(err))
        os.write(w, repr(msgs).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 100) == b"[True, True]" and status == 0


@STANDIN
@processes
def test_the_exporter_exiting_is_a_clear_error_never_a_hang(driver, monkeypatch):
    import multiprocessing as mp
    import time

    import _ipc_workers

    ctx = mp.get_context("spawn")
    # 1. The exporter exits before the importer opens the handle.
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_ipc_workers.exporter, args=(child, False))
    p.start()
    h = parent.recv()
    p.join(30)
    with pytest.raises(custream.CudaError, match=f"\\(pid {h.pid}\\) has exited") as err:
        custream.Event.from_ipc_handle(h)
    assert err.value.name == "CUDA_ERROR_INVALID_HANDLE"
    # 2. It exits while the importer waits on work it recorded that never completes.
    monkeypatch.setenv("STANDIN_IMPORTED_PENDING", "1")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_ipc_workers.exporter, args=(child, True))
    p.start()
    ev = custream.Event.from_ipc_handle(parent.recv())
    assert ev.query() is False, "pending while the exporter runs"
    parent.send("exit")
    p.join(30)
    s = custream.Stream()
    for name, call in [("query", ev.query), ("synchronize", ev.synchronize), ("wait", lambda: s.wait(ev))]:
        start = time.monotonic()
        with pytest.raises(custream.CudaError, match="has exited") as err:
            call()
        assert err.value.name == "CUDA_ERROR_INVALID_HANDLE", name
        assert time.monotonic() - start < 1, name
    ev.close()
    assert driver.standin_imported_events() == 0
