"""Host functions and graph capture on a real device.

Ordering is proven with the spin kernel: ``spin_then_mark`` spins ~100 ms and then writes 1
to ``mark[0]``, here in pinned host memory, so a host function reads it with no CUDA call (a
host function must make none). Capture is checked with real CuPy and PyTorch kernels queued
on a custream stream, and every replayed graph is compared with the same work run eagerly.
Exit and fork run in subprocesses; closing a stream mid-capture, in a pytest process of its
own (marked ``isolated``, tests/conftest.py). The same behaviour is checked without a GPU
against a stand-in driver in tests/test_host_functions.py and tests/test_graph.py.
"""

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import custream
from custream import Stream
from _host_function_checks import check_call_lifetime, released, watched_function
from _threads import wait_until
from custream_gpu_helpers import KERNELS, SPIN_CYCLES, handle_of, peer, run_in_thread, try_import

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def cp():
    cupy = peer("cupy")
    cupy.cuda.Device(0).use()
    return cupy


def on(cp, stream):
    """A CuPy stream over a custream stream (or any protocol object), keeping it alive."""
    stream = custream.as_stream(stream)
    if hasattr(cp.cuda.Stream, "from_external"):  # CuPy >= 14
        return cp.cuda.Stream.from_external(stream)
    return cp.cuda.ExternalStream(stream.handle, 0)


class Spin:
    """The spin kernel (CuPy), marking pinned host memory when it ends."""

    def __init__(self, cp):
        self.cp = cp
        module = cp.RawModule(code=KERNELS)
        self._spin = module.get_function("spin_then_mark")
        self._pinned = cp.cuda.alloc_pinned_memory(24)
        self.ptr = self._pinned.ptr
        self.reset()

    def reset(self):
        ctypes.memset(self.ptr, 0, 24)

    def mark(self):
        """Read on the host; no CUDA call, so a host function may call it."""
        return ctypes.c_int64.from_address(self.ptr).value

    def launch(self, stream, cycles=SPIN_CYCLES):
        with on(self.cp, stream):
            self._spin((1,), (1,), (self.cp.uint64(self.ptr), self.cp.int64(cycles)))


@pytest.fixture
def spin(cp):
    return Spin(cp)


# ---- host functions -----------------------------------------------------------------------


def test_callbacks_run_after_the_kernel_and_in_order(spin):
    with Stream() as s:
        ran = []
        spin.launch(s)
        t0 = time.perf_counter()
        s.launch_host_func(lambda: ran.append(("first", spin.mark(), threading.get_ident())))
        s.launch_host_func(lambda tag: ran.append((tag, spin.mark(), threading.get_ident())), "second")
        queued_in = time.perf_counter() - t0
        assert s.query() is False and ran == [], "the kernel should still run"
        assert queued_in < 0.05, f"launch_host_func took {queued_in:.3f} s: it must return at once"
        s.synchronize()
        assert [(r[0], r[1]) for r in ran] == [("first", 1), ("second", 1)], ran
        assert ran[0][2] != threading.get_ident()


def test_fn_and_args_live_until_the_call_and_are_released_after(spin):
    with Stream() as s:
        check_call_lifetime(s, spin.launch)


def test_an_exception_reaches_the_unraisable_hook_with_the_stream_named(spin, monkeypatch):
    caught = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)

    def boom():
        raise RuntimeError("in a host function")

    with Stream() as s:
        spin.launch(s)
        s.launch_host_func(boom)
        s.launch_host_func(caught.append, "after")
        s.synchronize()
        assert len(caught) == 2 and caught[1] == "after", caught
        u = caught[0]
        assert u.exc_type is RuntimeError and str(u.exc_value) == "in a host function"
        assert f"handle={s.handle:#x}" in repr(u.object) and u.object.stream == s.handle
        assert s.query() is True  # the stream, the driver's thread and the process live on


def test_a_custream_call_inside_a_host_function_raises_instead_of_deadlocking(spin):
    errors = []

    def inside(s):
        for call in (s.synchronize, s.query, Stream, s.record):
            try:
                call()
            except custream.CudaError as e:
                errors.append(e.name)
            else:
                errors.append(f"{call} worked")

    with Stream() as s:
        spin.launch(s)
        s.launch_host_func(inside, s)
        s.synchronize()
    assert errors == ["CUDA_ERROR_NOT_PERMITTED"] * 4, errors


PEER_STREAMS = {
    "cupy": lambda: peer("cupy").cuda.Stream(non_blocking=True),
    "torch": lambda: peer("torch").cuda.Stream(),
    "cuda.core": lambda: _core_stream(),
}


def _core_stream():
    core = peer("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    return dev.create_stream()


@pytest.mark.parametrize("library", sorted(PEER_STREAMS))
def test_host_functions_on_other_libraries_streams(library, spin):
    theirs = PEER_STREAMS[library]()
    if hasattr(theirs, "__cuda_stream__"):
        ours = custream.as_stream(theirs)
    else:
        ours = Stream.from_handle(handle_of(theirs), owner=theirs)
    ran = []
    spin.launch(ours)
    ours.launch_host_func(lambda: ran.append(spin.mark()))
    ours.synchronize()
    assert ran == [1]
    ours.close()


# A kernel that only spins: no memory of its own, so nothing at exit waits on it to free.
SPIN_ONLY = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""

# Child processes queue a long kernel with PyTorch (torch.cuda._sleep) or CuPy, loaded and
# warmed up before any capture: module loading and allocation are no place for one.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import custream
    try:
        import torch
        torch.cuda.init()
        torch.cuda._sleep(1)
        def long_kernel(s, cycles):
            with torch.cuda.stream(torch.cuda.ExternalStream(s.handle, device=0)):
                torch.cuda._sleep(cycles)
    except ImportError:
        import cupy as cp
        cp.cuda.Device(0).use()
        _spin = cp.RawModule(code={spin!r}).get_function("spin")
        _spin((1,), (1,), (cp.int64(1),))
        cp.cuda.Device(0).synchronize()
        _on = getattr(cp.cuda.Stream, "from_external", None) or (lambda s: cp.cuda.ExternalStream(s.handle, 0))
        def long_kernel(s, cycles):
            with _on(s):
                _spin((1,), (1,), (cp.int64(cycles),))
    """
).format(spin=SPIN_ONLY)


def run_child(body, timeout=120):
    out = subprocess.run(
        [sys.executable, "-c", CHILD + textwrap.dedent(body)], capture_output=True, text=True, timeout=timeout
    )
    for bad in ("panicked", "Fatal Python error", "Segmentation fault", "Traceback"):
        assert bad not in out.stderr, out.stderr
    return out


@pytest.mark.parametrize("cycles", [0, 50_000_000, 2_000_000_000])
def test_exit_with_callbacks_queued_behind_a_long_kernel(cycles, tmp_path):
    mark = tmp_path / "ran"
    out = run_child(f"""
        s = custream.Stream()
        long_kernel(s, {cycles})
        for i in range(50):
            s.launch_host_func(lambda i=i: open({str(mark)!r}, "a").write(f"{{i}} "))
        print("exiting")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "exiting", out.stdout + out.stderr
    ran = mark.read_text().split() if mark.exists() else []
    assert ran == [str(i) for i in range(len(ran))]


def test_exit_waits_for_a_callback_already_in_python(tmp_path):
    mark = tmp_path / "done"
    out = run_child(f"""
        import atexit, threading
        s = custream.Stream()
        started, exiting = threading.Event(), threading.Event()
        def slow():
            started.set()
            went_on = exiting.wait(10)  # goes on once the exit began (the hook below runs before custream's)
            open({str(mark)!r}, "w").write("done" if went_on else "the exit never began")
        s.launch_host_func(slow)
        assert started.wait(10), "the host function never started"
        atexit.register(exiting.set)
    """)
    assert out.returncode == 0, out.stderr
    assert mark.read_text() == "done"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_with_callbacks_pending():
    out = run_child("""
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        s = custream.Stream()
        ran = []
        long_kernel(s, 500_000_000)
        for i in range(5):
            s.launch_host_func(ran.append, i)
        pid = os.fork()
        if pid == 0:
            try:
                s.synchronize()
            except custream.CudaError as e:
                assert e.name == "CUDA_ERROR_NOT_INITIALIZED", e.name
            time.sleep(0.5)  # time under test: none of the parent's host functions runs here meanwhile
            assert ran == [], ran
            s.close()
            sys.exit(5)  # a normal interpreter exit in the child
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 5
        s.synchronize()
        assert ran == [0, 1, 2, 3, 4], ran
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


@pytest.fixture
def long_kernel():
    """CHILD's ``long_kernel(s, cycles)`` in this process: a kernel that only spins, queued
    with PyTorch (torch.cuda._sleep) where it is installed, else CuPy (SPIN_ONLY), loaded and
    warmed up here, before any capture."""
    torch = try_import("torch")
    if torch is not None:
        torch.cuda.init()
        torch.cuda._sleep(1)

        def launch(s, cycles):
            with torch.cuda.stream(torch.cuda.ExternalStream(s.handle, device=0)):
                torch.cuda._sleep(cycles)

        return launch
    cp = peer("cupy")
    cp.cuda.Device(0).use()
    spin_only = cp.RawModule(code=SPIN_ONLY).get_function("spin")
    spin_only((1,), (1,), (cp.int64(1),))
    cp.cuda.Device(0).synchronize()

    def launch(s, cycles):
        with on(cp, s):
            spin_only((1,), (1,), (cp.int64(cycles),))

    return launch


# A pytest process of its own (isolated): a capture the close left open, or a crash, ends
# with that process, not in the next test's calls.
@pytest.mark.isolated(timeout=120)
@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
@pytest.mark.parametrize("closer", ["this thread", "another thread"])
def test_closing_a_stream_mid_capture_ends_the_capture(mode, closer, long_kernel, monkeypatch):
    unraisable = []  # a host function's or a deallocation's error, which would print a traceback
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    s = custream.Stream()
    fn, alive = watched_function()
    s.begin_capture(mode)
    long_kernel(s, 1000)
    s.launch_host_func(fn)
    del fn
    if closer == "another thread":
        run_in_thread(s.close)  # its exception, if any, raised here
    else:
        s.close()
    wait_until(lambda: released(alive), "the closed stream's capture let its host function go")
    # Nothing of it is left: a new stream runs work, synchronizes, and captures.
    other = custream.Stream()
    long_kernel(other, 1000)
    other.synchronize()
    assert other.query() is True
    other.begin_capture(mode)
    ran = []
    other.launch_host_func(ran.append, 1)
    g = other.end_capture()
    g.launch(other)
    other.synchronize()
    assert ran == [1], ran
    assert not unraisable, [(u.exc_type, u.exc_value, u.object) for u in unraisable]


# ---- capture ------------------------------------------------------------------------------

N = 1 << 16


@pytest.fixture
def arrays(cp):
    x = cp.arange(N, dtype=cp.float32)
    y = cp.empty_like(x)
    z = cp.empty_like(x)
    # Compile and load the kernels now: module loading is no place for a capture.
    cp.multiply(x, 2, out=y)
    cp.add(y, 1, out=z)
    cp.cuda.Device(0).synchronize()
    return x, y, z


def cupy_work(cp, stream, x, y, z):
    with on(cp, stream):
        cp.multiply(x, 2, out=y)
        cp.add(y, 1, out=z)


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_capture_of_cupy_work_replays_like_eager(cp, arrays, mode):
    x, y, z = arrays
    with Stream() as s:
        s.begin_capture(mode)
        assert s.is_capturing is True
        cupy_work(cp, s, x, y, z)
        g = s.end_capture()
        assert s.is_capturing is False and g.node_count >= 2
        for scale in (1.0, 3.0, -2.0):
            with on(cp, s):
                x *= scale
            g.launch(s)
            s.synchronize()
            replayed = z.get()
            cupy_work(cp, s, x, y, z)
            s.synchronize()
            assert (replayed == z.get()).all()
        g.close()


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_forbidden_calls_during_capture_raise_and_leave_it_valid(cp, arrays, mode):
    x, y, z = arrays
    with Stream() as s, Stream() as other:
        s.begin_capture(mode)
        cupy_work(cp, s, x, y, z)
        ev = s.record()
        for call, name in ((s.synchronize, "STREAM_CAPTURE_UNSUPPORTED"), (s.query, "STREAM_CAPTURE_UNSUPPORTED"),
                           (ev.synchronize, "CAPTURED_EVENT"), (ev.query, "CAPTURED_EVENT")):
            with pytest.raises(custream.CudaError, match="capture is still valid") as info:
                call()
            assert info.value.name == "CUDA_ERROR_" + name
            assert "custream capture #" in info.value.message
        # Work on another stream meanwhile, synchronized, in every mode.
        cupy_work(cp, other, x, y, z)
        other.synchronize()
        assert other.query() is True
        assert s.is_capturing is True
        g = s.end_capture()  # CUDA did not invalidate it
        g.launch(s)
        s.synchronize()
        assert (z.get() == x.get() * 2 + 1).all()


def test_capture_of_torch_work(cp):
    torch = peer("torch")
    x = torch.arange(N, dtype=torch.float32, device="cuda:0")
    y, z = torch.empty_like(x), torch.empty_like(x)
    torch.mul(x, 2, out=y)
    torch.add(y, 1, out=z)
    torch.cuda.synchronize(0)
    with Stream() as s:
        ts = torch.cuda.ExternalStream(s.handle, device=0)
        s.begin_capture()
        with torch.cuda.stream(ts):
            torch.mul(x, 2, out=y)
            torch.add(y, 1, out=z)
        g = s.end_capture()
        x.mul_(-3)
        torch.cuda.synchronize(0)
        g.launch(s)
        s.synchronize()
        assert torch.equal(z, x * 2 + 1)


def test_wait_on_a_captured_event_forks_and_joins_a_second_stream(cp, arrays):
    x, y, z = arrays
    with Stream() as s, Stream() as side:
        s.begin_capture()
        with on(cp, s):
            cp.multiply(x, 2, out=y)
        side.wait(s.record())  # fork
        assert side.is_capturing is True
        with pytest.raises(custream.CudaError, match="joined through wait"):
            side.synchronize()
        with on(cp, side):
            cp.add(y, 1, out=z)
        s.wait(side.record())  # join
        g = s.end_capture()
        assert side.is_capturing is False and g.node_count >= 2
        with on(cp, s):
            x += 5
        g.launch(s)
        s.synchronize()
        assert (z.get() == x.get() * 2 + 1).all()


def test_host_functions_in_a_capture_run_at_every_launch(spin):
    calls = []

    class Fn:
        def __call__(self, tag):
            calls.append((tag, spin.mark()))

    fn = Fn()
    alive = weakref.ref(fn)
    with Stream() as s:
        s.begin_capture()
        spin.launch(s, cycles=1_000_000)
        s.launch_host_func(fn, "node")
        g = s.end_capture()
        del fn
        assert g.node_count == 4  # the spin kernel, and the host function, its wait and its reset
        for _ in range(3):
            spin.reset()
            g.launch(s)
            s.synchronize()
        assert calls == [("node", 1)] * 3
        assert alive() is not None
        g.close()
        s.synchronize()
        wait_until(lambda: released(alive), "the closed graph let its host function go")


def test_is_capturing_sees_a_capture_another_library_began(cp, arrays):
    x, y, z = arrays
    with Stream() as s:
        cs = on(cp, s)
        cs.begin_capture()
        assert s.is_capturing is True
        previous = custream.check_foreign_captures(True)
        try:
            with pytest.raises(custream.CudaError, match="begun outside custream"):
                s.query()
        finally:
            custream.check_foreign_captures(previous)
        with cs:
            cp.multiply(x, 2, out=y)
        graph = cs.end_capture()  # still valid
        assert s.is_capturing is False
        graph.launch(cs)
        s.synchronize()


def test_is_capturing_inside_torch_graph_capture():
    torch = peer("torch")
    with Stream() as s:
        ts = torch.cuda.ExternalStream(s.handle, device=0)
        x = torch.ones(8, device="cuda:0")
        g = torch.cuda.CUDAGraph()
        seen = []
        with torch.cuda.graph(g, stream=ts):
            x.mul_(2)
            seen.append(s.is_capturing)
        g.replay()
        torch.cuda.synchronize(0)
        assert seen == [True]


def test_a_ten_node_graph_launches_on_any_stream(cp, arrays):
    x, y, z = arrays
    with Stream() as s:
        s.begin_capture()
        with on(cp, s):
            for _ in range(10):
                cp.add(x, 1, out=x)
        g = s.end_capture()
        assert g.node_count == 10
        start = x.get()
        theirs = cp.cuda.Stream(non_blocking=True)
        g.upload(theirs if hasattr(theirs, "__cuda_stream__") else Stream.from_handle(theirs.ptr, owner=theirs))
        g.launch(s)
        s.synchronize()
        assert (x.get() == start + 10).all()
        torch = try_import("torch")
        if torch is not None and torch.cuda.is_available():
            ts = torch.cuda.Stream()
            g.launch(ts if hasattr(ts, "__cuda_stream__") else Stream.from_handle(ts.cuda_stream, owner=ts))
            ts.synchronize()
            assert (x.get() == start + 20).all()
        g.close()


def test_graphs_at_exit_and_across_fork():
    out = run_child("""
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        s = custream.Stream()
        s.begin_capture()
        long_kernel(s, 1000)
        g = s.end_capture()
        g.launch(s)
        pid = os.fork()
        if pid == 0:
            try:
                g.launch(s)
            except custream.CudaError as e:
                assert e.name == "CUDA_ERROR_NOT_INITIALIZED"
            g.close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        g.launch(s)
        kept = g  # still open at exit: never destroyed after finalization
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
