"""custream's reliability on a GPU: 100k create/destroy and event cycles with device memory
and RSS flat, threads sharing real streams, close() during an in-flight synchronize(), an
owned stream across fork(), owned streams at interpreter exit, a primary-context reset by
"another library", and the argument errors only a device can reach. (The object's ordinary
behaviour on a device is in test_gpu_custream.py.)

Runs with `python3 -m pytest -m gpu tests/gpu/test_gpu_custream_reliability.py` on the GPU
machine; the driver is reached directly through ctypes for measurements, and CuPy or
PyTorch (whichever is present) only to queue a long-running kernel.
"""

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

import custream
from custream import Event, Stream, as_stream

from _capi_ctypes import STATE_CLOSED, STATE_RELEASED, STATE_USERS, state_word
from _threads import THREADS, run_threads, wait_until
from custream_gpu_helpers import try_import

pytestmark = pytest.mark.gpu

CYCLES = 100_000
DEVICE_BOUND = 64 * 1024 * 1024
RSS_BOUND = 64 * 1024 * 1024


def libcuda():
    return ctypes.CDLL("libcuda.so.1")


def device_used_bytes(device=0):
    """total - free on `device`, measured in its primary context (which this retains and
    releases around the call; the caller keeps a stream alive so the context persists)."""
    cuda = libcuda()
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    try:
        assert cuda.cuCtxPushCurrent_v2(ctx) == 0
        try:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        cuda.cuDevicePrimaryCtxRelease_v2(dev)
    return total.value - free.value


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(cycle, n=CYCLES, warmup=2000):
    for i in range(warmup):
        cycle(i)
    live, dev, rss = custream.live_stream_count(), device_used_bytes(), rss_bytes()
    for i in range(n):
        cycle(i)
    return custream.live_stream_count() - live, device_used_bytes() - dev, rss_bytes() - rss


@pytest.fixture
def keeper():
    """A live stream, so the primary context stays initialized across measurements."""
    s = Stream(device=0)
    yield s
    s.close()


SPIN = r"""extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}"""


def spin_on(stream, seconds=0.5):
    """Queue a kernel that keeps `stream` busy for about `seconds` (at ~2 GHz; longer on a
    slower clock, which only makes it safer)."""
    cycles = int(2e9 * seconds)
    cupy = try_import("cupy")
    if cupy is not None:
        from cupy.cuda.compiler import CompileException

        try:
            kernel = cupy.RawModule(code=SPIN).get_function("spin")  # compiles and loads it
        except (CompileException, RuntimeError):
            # CuPy cannot build it here: NVRTC is missing ("CuPy failed to load libnvrtc", a
            # RuntimeError, as are NVRTCError and the driver's refusal of the module) or it
            # cannot compile for this GPU (CompileException). Try PyTorch.
            kernel = None
        if kernel is not None:
            with cupy.cuda.ExternalStream(stream.handle):
                kernel((1,), (1,), (cupy.int64(cycles),))
            return
    torch = pytest.importorskip("torch", reason="needs CuPy or PyTorch to queue a kernel")
    with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle)):
        torch.cuda._sleep(cycles)

# --- leaks ---------------------------------------------------------------------------------


def test_create_destroy_100k_streams(keeper):
    def cycle(i):
        s = Stream(device=0, non_blocking=bool(i % 2))
        if i % 3 == 0:
            s.synchronize()
        if i % 2:
            s.close()
        else:
            del s  # destroyed by deallocation

    live, dev, rss = measure(cycle)
    assert live == 0
    assert dev < DEVICE_BOUND, f"device memory grew by {dev} bytes over {CYCLES} streams"
    assert rss < RSS_BOUND, f"RSS grew by {rss} bytes over {CYCLES} streams"


def test_event_cycles_100k(keeper):
    def cycle(i):
        ev = keeper.record()  # a new event, recorded
        if i % 2:
            Event(device=0, timing=True).record(keeper)
        else:
            e = Event(device=0)
            keeper.record(e)
            keeper.wait(e)
            e.close()
        if i % 100 == 0:
            ev.synchronize()
        ev.close()

    live, dev, rss = measure(cycle)
    keeper.synchronize()
    assert live == 0
    assert dev < DEVICE_BOUND, f"device memory grew by {dev} bytes over {CYCLES} event cycles"
    assert rss < RSS_BOUND, f"RSS grew by {rss} bytes over {CYCLES} event cycles"


def test_wrap_borrowed_real_streams_100k(keeper):
    def cycle(i):
        b = Stream.from_handle(keeper.handle, owner=keeper)
        assert b.device == 0 and b.non_blocking == keeper.non_blocking
        b.query()
        b.close()
        as_stream(keeper)

    live, dev, rss = measure(cycle)
    assert (live, dev < DEVICE_BOUND, rss < RSS_BOUND) == (0, True, True), (live, dev, rss)


# --- threads -------------------------------------------------------------------------------


def test_threads_create_wrap_sync_close(keeper):
    live = custream.live_stream_count()

    def work(k):
        for i in range(300):
            s = Stream(device=0)
            b = Stream.from_handle(s.handle, owner=s)
            p = as_stream(b)
            p.synchronize()
            assert s.query()
            ev = s.record()
            keeper.wait(ev)
            b.wait(keeper)
            ev.synchronize()
            ev.close()
            b.close()
            if i % 2:
                s.close()

    run_threads(work)
    keeper.synchronize()
    assert custream.live_stream_count() == live


def test_threads_share_streams_while_one_closes_them():
    shared = [Stream(device=0) for _ in range(4)]
    closer_done = threading.Event()
    turns = [0] * THREADS

    def work(k):
        if k == 0:
            wait_until(lambda: min(turns[1:]) >= 5, "every other thread used the streams")
            for s in shared:
                s.close()
            closer_done.set()
            return
        i = 0
        while not closer_done.is_set() or i < 50:
            s = shared[i % len(shared)]
            try:
                s.synchronize()
                s.query()
                s.record().synchronize()
                shared[(i + 1) % len(shared)].wait(s)
            except ValueError as e:
                # The only documented failure: closed (this stream or the one waited on).
                assert "closed custream.Stream" in str(e), e
            i += 1
            turns[k] = i

    run_threads(work)
    for s in shared:
        assert state_word(s) == STATE_CLOSED | STATE_RELEASED


def test_close_during_synchronize_defers_destroy():
    deferred = 0
    for _ in range(5):
        s = Stream(device=0)
        spin_on(s, 0.3)
        errors = []

        def sync():
            try:
                s.synchronize()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=sync)
        t.start()
        # Close only once synchronize() is in flight (the state word counts it), so that
        # close() must leave the destroy to it.
        while state_word(s) & STATE_USERS == 0 and t.is_alive():
            time.sleep(0.0002)
        in_flight = t.is_alive() and state_word(s) & STATE_USERS != 0
        s.close()
        assert s.closed
        deferred += in_flight
        t.join()
        assert errors == [] or (not in_flight and "closed" in str(errors[0])), errors
        assert state_word(s) == STATE_CLOSED | STATE_RELEASED, "released once the call returned"
    assert deferred > 0, "synchronize() was never caught in flight: is the kernel running?"


# --- fork, exit, context reset -------------------------------------------------------------


def test_owned_stream_across_fork():
    s = Stream(device=0)
    s.synchronize()
    handle = s.handle
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 10
        try:
            assert s.handle == handle and s.__cuda_stream__() == (0, handle)
            code = 11
            try:
                s.synchronize()
            except custream.CudaError as e:
                code = 12 if e.name == "CUDA_ERROR_NOT_INITIALIZED" else 13
            if code == 12:
                del s  # deallocation in the child: must not destroy the parent's stream
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # No destroy happened in the child: the parent's stream still works.
    s.synchronize()
    assert s.query()
    s.record().synchronize()
    s.close()


GPU_EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading
    import custream
    from custream import Event, Stream

    class Holder:
        def __init__(self, stream):
            self.stream, self.me = stream, self
        def __del__(self):
            self.stream.handle
            self.stream.close()

    class CycleOwner:
        def __init__(self):
            self.stream = Stream(device=0)
            self.borrowed = Stream.from_handle(self.stream.handle, owner=self)

    OWNED = [Stream(device=0) for _ in range(50)]
    EVENTS = [s.record() for s in OWNED]
    BORROWED = [Stream.from_handle(s.handle, owner=s) for s in OWNED]
    CYCLES = [CycleOwner() for _ in range(50)]
    HOLDERS = [Holder(Stream(device=0)) for _ in range(50)]
    DEFAULT = custream.LEGACY_DEFAULT_STREAM

    def busy():
        s = Stream(device=0)
        while True:
            try:
                s.synchronize()
                s.query()
                s.record()
            except custream.CudaError as e:
                assert e.name == "CUDA_ERROR_DEINITIALIZED", e.name
    threading.Thread(target=busy, daemon=True).start()
    for s in OWNED[:10]:
        s.synchronize()
    {extra}
    print("exiting with", custream.live_stream_count(), "streams")
    """
)


@pytest.mark.parametrize("extra", ["", "import gc; gc.disable()", "sys.exit(0)"])
def test_interpreter_exit_with_owned_streams(extra):
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", GPU_EXIT_SCRIPT.format(extra=extra)],
                          capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr


RESET_SCRIPT = textwrap.dedent(
    """
    import ctypes
    import custream
    from custream import Stream

    cuda = ctypes.CDLL("libcuda.so.1")
    s = Stream(device=0)
    s.synchronize()
    ev = s.record()
    borrowed = Stream.from_handle(s.handle, owner=s)
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    # What cudaDeviceReset() (or another library's teardown) does to the primary context.
    print("reset", cuda.cuDevicePrimaryCtxReset_v2(dev))

    def attempt(name, call):
        try:
            call()
            print(name, "ok")
        except custream.CudaError as e:
            print(name, "CudaError", e.name)

    attempt("synchronize", s.synchronize)
    attempt("query", s.query)
    attempt("borrowed.synchronize", borrowed.synchronize)
    attempt("record", s.record)
    attempt("event.synchronize", ev.synchronize)
    attempt("event.close", ev.close)
    attempt("borrowed.close", borrowed.close)
    attempt("close", s.close)
    fresh = Stream(device=0)
    fresh.synchronize()
    fresh.record().synchronize()
    fresh.close()
    print("fresh ok")
    """
)


def test_primary_context_reset_by_another_library():
    # In a child process: the reset destroys every resource in the primary context.
    proc = subprocess.run([sys.executable, "-c", RESET_SCRIPT], capture_output=True, text=True, timeout=300)
    report = f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert proc.stderr == "", report
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["reset"] == "0", report
    for use in ("synchronize", "query", "borrowed.synchronize"):
        assert lines[use].startswith("CudaError CUDA_ERROR_"), report
    assert lines["fresh"] == "ok", report


# --- arguments only a device can judge -----------------------------------------------------


def test_device_beyond_the_last():
    n = custream.device_count()
    with pytest.raises(ValueError, match=rf"device {n} does not exist: this machine has {n} CUDA device"):
        Stream(device=n)
    with pytest.raises((ValueError, custream.CudaError), match="device"):
        Event(device=n)


def test_priority_outside_the_device_range():
    with pytest.raises(custream.CudaError, match=r"priority 1000 is outside this device's range") as info:
        Stream(device=0, priority=1000)
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_closed_event_names_the_operation(keeper):
    e = Event(device=0, timing=True)
    other = Event(device=0, timing=True)
    e.close()
    for what, call in [
        ("handle", lambda: e.handle),
        (r"record\(\)", lambda: e.record(keeper)),
        (r"synchronize\(\)", e.synchronize),
        (r"query\(\)", e.query),
        (r"elapsed_time\(\)", lambda: e.elapsed_time(other)),
        (r"elapsed_time\(\)", lambda: other.elapsed_time(e)),
        (r"wait\(\)", lambda: keeper.wait(e)),
        (r"record\(\)", lambda: keeper.record(e)),
    ]:
        with pytest.raises(ValueError, match=rf"^{what} on a closed custream\.Event$"):
            call()
    other.close()


def test_closed_stream_with_a_real_event():
    s, e = Stream(device=0), Event(device=0)
    s.close()
    with pytest.raises(ValueError, match=r"^record\(\) on a closed custream\.Stream$"):
        s.record(e)
    with pytest.raises(ValueError, match=r"^wait\(\) on a closed custream\.Stream$"):
        s.wait(e)
    with pytest.raises(ValueError, match=r"^record\(\) on a closed custream\.Stream$"):
        e.record(s)
    e.close()


def test_event_bad_arguments(keeper):
    e = Event(device=0)
    with pytest.raises(TypeError, match=r"as_stream\(\) expected a custream\.Stream .* got int"):
        e.record(5)
    with pytest.raises(TypeError):
        e.elapsed_time(5)
    end = keeper.record()
    e.record(keeper)
    end.synchronize()
    with pytest.raises(custream.CudaError) as info:  # neither event was made with timing=True
        e.elapsed_time(end)
    assert info.value.name.startswith("CUDA_ERROR_")
    e.close()
    end.close()
