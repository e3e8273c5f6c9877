"""IPC events on a device: two processes ordering real work both ways, and the lifetime rule
against the real driver (the exporter exits before the import, closes the event while the
importer holds it, or exits while the importer waits on work that will never finish).

Each case that may go wrong in the driver runs in a process of its own, under a time limit:
a hang or a crash fails the test instead of the run. What the driver itself answers where
custream does not step in is printed (pytest -s, or the log), for the issue's record.
"""

import ctypes
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import pytest

import custream
from custream_gpu_helpers import try_import

torch = try_import("torch")
if torch is not None:
    from _ipc_gpu_workers import finish, spawn

pytestmark = pytest.mark.gpu


@pytest.fixture
def need_torch():
    if torch is None:
        pytest.skip("torch is not installed")
    return torch


def test_an_ipc_event_orders_work_both_ways(need_torch):
    import _ipc_gpu_workers as w

    t = torch.zeros(4, dtype=torch.int64, device="cuda:0")  # [ours, their copy, theirs, our copy]
    torch.cuda.synchronize()
    p, inbox, outbox = spawn("event_peer", t)
    try:
        # 1. Ours, to the child: a write that a sleep delays, then the event.
        s = custream.Stream()
        e = custream.Event(ipc=True)
        with torch.cuda.stream(w.torch_stream(s)):
            torch.cuda._sleep(w.SLEEP)
            t[0].fill_(7)
        e.record(s)
        inbox.put(e)  # pickled to its handle
        what, copied, text = outbox.get(timeout=60)
        assert (what, copied) == ("copied", 7), "the child's copy ran before our write"
        assert "ipc imported" in text
        # 2. Theirs, to us: the same the other way.
        theirs = outbox.get(timeout=60)
        assert theirs.ipc and "ipc imported" in repr(theirs)
        s.wait(theirs)
        with torch.cuda.stream(w.torch_stream(s)):
            t[3].copy_(t[2])
        s.synchronize()
        assert int(t[3].item()) == 9, "our copy ran before the child's write"
        assert theirs.query() is True
        theirs.synchronize()
        theirs.close()
        inbox.put("done")
        finish(p)
        e.close()
        s.close()
    finally:
        if p.is_alive():
            p.kill()


# custream sees the exporter through /proc (its pid namespace, its start time); a sandbox
# without /proc/self/ns/pid (gVisor) leaves it to the driver.
SEES_EXPORTER = os.path.exists("/proc/self/ns/pid")


def test_the_exporter_exiting_first_is_a_clear_error(need_torch):
    p, inbox, outbox = spawn("exporter", "exit")
    handle = outbox.get(timeout=60)
    finish(p)
    if SEES_EXPORTER:
        with pytest.raises(custream.CudaError, match=r"has exited") as err:
            custream.Event.from_ipc_handle(handle)
        assert err.value.name == "CUDA_ERROR_INVALID_HANDLE"
    else:
        try:
            print("no /proc/self/ns/pid; the driver's answer:", custream.Event.from_ipc_handle(handle))
        except custream.CudaError as e:
            print("no /proc/self/ns/pid; the driver's answer:", e.name)
    # What the driver itself does with it, without custream's check (for the record).
    print("driver: cuIpcOpenEventHandle after the exporter exited:", raw_open(handle))


def raw_open(handle):
    """cuIpcOpenEventHandle of `handle`, straight through the driver, in a process of its own
    (a crash or hang there is the finding): its status, or what became of the process."""
    code = textwrap.dedent(f"""
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        assert lib.cuInit(0) == 0
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        lib.cuDeviceGet(ctypes.byref(dev), 0)
        lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        lib.cuCtxSetCurrent(ctx)
        class H(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_char * 64)]
        ev = ctypes.c_void_p()
        rc = lib.cuIpcOpenEventHandle(ctypes.byref(ev), H(bytes.fromhex({handle.handle.hex()!r})))
        q = lib.cuEventQuery(ev) if rc == 0 else None
        print(rc, q)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "HUNG (30 s)"
    return out.stdout.strip() if out.returncode == 0 else f"exit {out.returncode}: {out.stderr[-300:]}"


def test_the_exporter_closing_the_event_under_the_importer_neither_hangs_nor_crashes(need_torch):
    """custream cannot see a close in another process (only an exit); the importer runs in a
    process of its own so that whatever the driver does is seen, not suffered."""
    p, inbox, outbox = spawn("exporter", "close")
    try:
        handle = outbox.get(timeout=60)
        code = textwrap.dedent(f"""
            import sys, custream, json
            h = custream.IpcEventHandle.from_bytes(bytes.fromhex({bytes(handle).hex()!r}))
            ev = custream.Event.from_ipc_handle(h)
            print("opened", flush=True)
            sys.stdin.readline()   # the exporter closes its event now
            s = custream.Stream()
            out = {{}}
            for name, call in [("query", ev.query), ("wait", lambda: s.wait(ev)),
                               ("synchronize", ev.synchronize), ("stream", s.synchronize), ("close", ev.close)]:
                try:
                    out[name] = repr(call())
                except custream.CudaError as e:
                    out[name] = e.name
            print(json.dumps(out), flush=True)
        """)
        importer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
        assert importer.stdout.readline().strip() == "opened"
        inbox.put("close")
        assert outbox.get(timeout=60) == "closed"
        importer.stdin.write("go\n")
        importer.stdin.flush()
        try:
            out, _ = importer.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            importer.kill()
            pytest.fail("the importer hung after the exporter closed the event")
        assert importer.returncode == 0, f"the importer died: {importer.returncode}"
        print("driver: the importer after the exporter's close:", out.strip())
        inbox.put("bye")
        finish(p)
    finally:
        if p.is_alive():
            p.kill()


def test_the_exporter_exiting_while_the_importer_waits_is_a_clear_error(need_torch):
    p, inbox, outbox = spawn("exporter", "busy")
    handle = outbox.get(timeout=60)
    ev = custream.Event.from_ipc_handle(handle)
    assert ev.query() is False, "the exporter's long sleep is still running"
    s = custream.Stream()
    inbox.put("exit")
    finish(p)
    # custream raises when the driver still says "not ready" (CUDA_ERROR_INVALID_HANDLE,
    # "has exited"); a driver that reports the event done or failed answers for itself. Never a
    # hang: each call returns within a few slices.
    seen = {}
    for name, call in [("synchronize", ev.synchronize), ("query", ev.query), ("wait", lambda: s.wait(ev))]:
        start = time.monotonic()
        try:
            seen[name] = repr(call())
        except custream.CudaError as e:
            seen[name] = e.name + (" (custream: has exited)" if "has exited" in str(e) else "")
        assert time.monotonic() - start < 5, name
    print("the import after the exporter exited mid-work:", seen)
    ev.close()  # this process's handle only
    # What the driver itself answers for it now (for the record): cuEventQuery, straight.
    print("driver: cuEventQuery of the import after the exporter exited mid-work:", raw_query(ev))
    s.synchronize()
    s.close()


def raw_query(ev):
    """What cuEventQuery answers for a new import of `ev`'s handle, bypassing custream."""
    lib = ctypes.CDLL("libcuda.so.1")

    class H(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * 64)]

    out = ctypes.c_void_p()
    rc = lib.cuIpcOpenEventHandle(ctypes.byref(out), H(ev.ipc_handle().handle))
    if rc:
        return f"open: {rc}"
    q = lib.cuEventQuery(out)
    lib.cuEventDestroy_v2(out)
    return f"open ok, query {q}"


# A pytest process of its own (isolated): this test is the exporter, and whatever the driver
# does with the import there (a crash, a hang) fails it alone.
@pytest.mark.isolated(timeout=60)
def test_opening_in_the_exporting_process(need_torch):
    """Unpickling an IPC event in the process that made it (what pickle.loads(pickle.dumps(e))
    does): the driver's answer, a CudaError or an event that works, never a crash."""
    e = custream.Event(ipc=True)
    s = custream.Stream()
    e.record(s)
    try:
        again = pickle.loads(pickle.dumps(e))
        again.synchronize()
        answer = f"ok {again.query()}"
    except custream.CudaError as err:
        answer = f"CudaError {err.name}"
    print("driver: an IPC event opened in its own exporter:", answer)
    assert answer.split()[0] in ("ok", "CudaError")


def test_fork_is_refused_and_the_handle_is_plain_data():
    e = custream.Event(ipc=True)
    h = e.ipc_handle()
    assert h.pid == os.getpid() and h.device == 0 and len(h.handle) == 64
    assert json.loads(json.dumps(bytes(h).hex())) == bytes(h).hex()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = 0
        for call in (e.query, lambda: custream.Event.from_ipc_handle(h)):
            try:
                call()
            except custream.CudaError as err:
                ok += "spawn" in str(err)
            except BaseException:
                pass
        os.write(w, bytes([ok]))
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"\x02"
    e.close()
