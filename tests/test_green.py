"""custream.GreenContext and the streams made in one (issue 27), on the CPU against the
stand-in driver (tests/standin/libcuda.c models green contexts: 132 SMs a device, groups of 8,
what the driver requires of each call, and counts what it leaves undefined). What the
partitions do on a GPU is tests/gpu/test_gpu_green.py's.

The tests marked STANDIN run in a pytest process of their own (tests/conftest.py), and each
ends (the ``green`` fixture) by asserting that custream made no call on a destroyed green
context (`standin_green_misuse`) and destroyed none while a stream of its own was alive in
it (`standin_detached_streams`)."""

import ctypes
import gc as collector
import os
import sys
import weakref

import pytest

import custream
import standin
from _threads import run_threads

HAS_DRIVER = custream.is_available()
STANDIN = pytest.mark.standin("libcuda.c")


@pytest.fixture
def green(driver):
    """The stand-in, its green-context helpers typed; after the test, the driver was never
    misused."""
    driver.standin_foreign_green.restype = ctypes.c_void_p
    driver.standin_runtime_stream_in.restype = ctypes.c_void_p
    driver.standin_runtime_stream_in.argtypes = [ctypes.c_void_p]
    driver.standin_green_first_sm.argtypes = [ctypes.c_void_p]
    yield driver
    assert driver.standin_green_misuse() == 0, "a call on a destroyed green context"
    assert driver.standin_detached_streams() == 0, "a green context destroyed under its streams"


def green_entry_points():
    """The green-context entry points custream resolves (none known without the sources: the
    stand-in build then skips)."""
    try:
        names = standin.entry_points()
    except pytest.skip.Exception:
        return []
    return [n for n in names if "Green" in n or "DevResource" in n or "DevSmResource" in n]


# ---- arguments, before any driver call ---------------------------------------------------------

G = custream.GreenContext


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: G(), TypeError, "missing 1 required positional argument: 'sm_count'"),
        (lambda: G("16"), TypeError, r"GreenContext\(\) sm_count must be an int, got str"),
        (lambda: G(True), TypeError, r"GreenContext\(\) sm_count must be an int, got bool"),
        (lambda: G(16.0), TypeError, r"GreenContext\(\) sm_count must be an int, got float"),
        (lambda: G(0), ValueError, r"GreenContext\(\) sm_count must be at least 1, got 0"),
        (lambda: G(-8), ValueError, "must be at least 1, got -8"),
        (lambda: G(16, device="0"), TypeError, r"GreenContext\(\) device must be an int device ordinal"),
        (lambda: G(16, device=-1), ValueError, "device must be a non-negative device ordinal"),
        (lambda: G(16, 0), TypeError, "positional"),
        (lambda: G.split(0), ValueError, r"GreenContext\.split\(\) sm_count must be at least 1, got 0"),
        (lambda: G.split(None), TypeError, r"split\(\) sm_count must be an int, got NoneType"),
        (lambda: G.from_handle("0x10"), TypeError, r"from_handle\(\) handle must be an int \(a CUgreenCtx\)"),
        (lambda: G.from_handle(1.5), TypeError, "got float"),
        (lambda: G.from_handle(-1), ValueError, "out of range"),
        (lambda: G.from_handle(0), ValueError, r"handle must be a CUgreenCtx, got 0 \(NULL\)"),
        (lambda: custream.Stream(green_context=3), TypeError,
         r"Stream\(\) green_context must be a custream\.GreenContext or None, got int"),
        (lambda: custream.StreamPool(2, green_context="gc"), TypeError,
         r"StreamPool\(\) green_context must be a custream\.GreenContext or None, got str"),
    ],
)
def test_bad_arguments_are_refused_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.skipif(HAS_DRIVER, reason="a CUDA driver is present")
def test_without_a_driver_a_green_context_cannot_be_made():
    for call in (lambda: G(16), lambda: G.split(16), lambda: G.from_handle(0x1000)):
        with pytest.raises(custream.CudaUnavailableError, match="no CUDA driver"):
            call()
    s = custream.Stream.from_handle(0x1000)
    for what in ("green_context", "sm_count"):
        with pytest.raises(custream.CudaUnavailableError):
            getattr(s, what)


@STANDIN
def test_a_green_context_is_not_subclassed_or_pickled(green):
    import pickle

    with pytest.raises(TypeError):
        type("Mine", (G,), {})
    gc = custream.GreenContext(16)
    with pytest.raises(TypeError, match="cannot pickle GreenContext: a CUDA green context belongs to one process"):
        pickle.dumps(gc)
    gc.close()


# ---- bookkeeping: what the driver granted --------------------------------------------------------

SPLITS = [
    pytest.param({}, id="no-group", marks=STANDIN),
    pytest.param({"STANDIN_SPLIT_REFUSES": "1"}, id="refused", marks=pytest.mark.standin(
        "libcuda.c", env={"STANDIN_SPLIT_REFUSES": "1"})),
]


@pytest.mark.parametrize("env", SPLITS)
def test_the_count_is_rounded_as_the_driver_requires_and_reported_as_granted(green, env):
    assert os.environ.get("STANDIN_SPLIT_REFUSES") == env.get("STANDIN_SPLIT_REFUSES")
    granted = {}
    for asked in (1, 8, 9, 16, 100, 128, 129, 132):
        gc = custream.GreenContext(asked)
        assert gc.device == 0 and gc.owned and gc.owner is None and not gc.closed
        granted[asked] = gc.sm_count
        gc.close()
    # Groups of 8 (the stand-in's granularity, Hopper's); past the last whole group, the device.
    assert granted == {1: 8, 8: 8, 9: 16, 16: 16, 100: 104, 128: 128, 129: 132, 132: 132}
    with pytest.raises(ValueError, match=r"GreenContext\(\) sm_count 133 is more than device 0 has: 132 SMs"):
        custream.GreenContext(133)
    assert green.standin_live_greens() == 0


@pytest.mark.parametrize("env", SPLITS)
def test_split_gives_two_disjoint_partitions(green, env):
    assert os.environ.get("STANDIN_SPLIT_REFUSES") == env.get("STANDIN_SPLIT_REFUSES")
    small, rest = custream.GreenContext.split(16)
    assert (small.sm_count, rest.sm_count) == (16, 116)
    first = [green.standin_green_first_sm(g.handle) for g in (small, rest)]
    assert first == [0, 16], first  # rest starts where the slice ends
    assert small.handle != rest.handle and small.owned and rest.owned
    a, b = custream.GreenContext.split(1)
    assert (a.sm_count, b.sm_count) == (8, 124)
    for bad in (129, 130, 132):
        with pytest.raises(ValueError, match="leaves none of device 0's 132 SMs for the rest") as e:
            custream.GreenContext.split(bad)
        if bad == 130:
            assert "GreenContext.split() sm_count 130, rounded up as the driver requires" in str(e.value)
    assert green.standin_live_greens() == 4
    # Each green context: the driver's retain and custream's; and the process's one.
    assert green.standin_primary_retains() == 9
    for g in (small, rest, a, b):
        g.close()
    assert green.standin_live_greens() == 0 and green.standin_primary_retains() == 1
    assert repr(small).startswith("<custream.GreenContext handle=0x") and repr(small).endswith("sm_count=16 closed>")


# ---- streams in a green context --------------------------------------------------------------------


@STANDIN
def test_streams_made_in_a_green_context(green):
    small, rest = custream.GreenContext.split(16)
    made = [small.create_stream(), custream.Stream(green_context=small, priority=-3),
            custream.Stream(green_context=small, device=0, non_blocking=True)]
    for s in made:
        assert type(s) is custream.Stream and s.owned and s.non_blocking and s.device == 0
        assert s.green_context is small and s.owner is small and s.sm_count == 16
        assert "owned in a green context" in repr(s)
    assert made[1].priority == -3
    assert green.standin_green_streams() == 3
    plain = custream.Stream()
    assert plain.green_context is None and plain.sm_count == 132
    assert custream.DEFAULT_STREAM.green_context is None and custream.DEFAULT_STREAM.sm_count == 132
    # Another wrap of a green stream finds the same GreenContext object (the driver is asked).
    wrap = custream.Stream.from_handle(made[0].handle)
    assert wrap.green_context is small and wrap.sm_count == 16
    for bad in (1, -6):
        with pytest.raises(custream.CudaError, match=r"outside this device's range \[-5, 0\]"):
            small.create_stream(priority=bad)
    for s in made + [plain, wrap]:
        s.close()
    for what in ("green_context", "sm_count"):
        for s in (made[0], wrap, plain):
            with pytest.raises(ValueError, match=f"{what} on a closed custream.Stream"):
                getattr(s, what)
    # Left: the notifiers the plain stream's context got with it (custream's, for its waits).
    assert green.standin_live_streams() == custream._custream._notifier_streams() == 32
    assert green.standin_green_streams() == 0
    small.close(), rest.close()


@STANDIN
def test_a_pool_in_a_green_context(green):
    small, rest = custream.GreenContext.split(16)
    pool = custream.StreamPool(4, green_context=rest, priority=-1)
    assert len(pool) == 4 and pool.device == 0
    assert all(s.green_context is rest and s.sm_count == 116 and s.priority == -1 for s in pool)
    assert "owned by a StreamPool in a green context" in repr(pool[0])
    with pytest.raises(ValueError, match="belongs to a custream.StreamPool"):
        pool[0].close()
    rest.close()  # the pool's streams keep it open
    assert green.standin_live_greens() == 2 and pool.get().query()
    pool.close()
    assert green.standin_live_greens() == 1
    with pytest.raises(ValueError, match=r"StreamPool\(\) on a closed custream.GreenContext"):
        custream.StreamPool(2, green_context=rest)
    with pytest.raises(ValueError, match=r"StreamPool\(\) non_blocking=False cannot be had in a green context"):
        custream.StreamPool(2, green_context=small, non_blocking=False)
    small.close()


@pytest.mark.standin("libcuda.c", env={"STANDIN_DEVICES": "2"})
def test_green_context_of_another_device_is_refused_with_a_stream_of_this_one(green):
    g1 = custream.GreenContext(16, device=1)
    assert g1.device == 1 and g1.sm_count == 16
    s = custream.Stream(green_context=g1)
    assert s.device == 1 and s.green_context is g1
    with pytest.raises(ValueError, match="Stream.. device 0 is not the green context's: its SMs are device 1's"):
        custream.Stream(green_context=g1, device=0)
    with pytest.raises(ValueError, match="StreamPool.. device 0 is not the green context's"):
        custream.StreamPool(2, device=0, green_context=g1)
    assert green.standin_green_streams() == 1
    a, b = custream.GreenContext.split(8, device=1)
    assert a.device == b.device == 1 and a.sm_count == 8 and b.sm_count == 124
    s.close(), g1.close(), a.close(), b.close()


# ---- lifecycle -----------------------------------------------------------------------------------


@STANDIN
def test_close_is_idempotent_and_waits_for_the_last_stream(green):
    g = custream.GreenContext(16)
    a, b = g.create_stream(), custream.Stream(green_context=g)
    g.close()
    g.close()
    assert g.closed and g.sm_count == 16 and g.device == 0
    assert green.standin_live_greens() == 1, "destroyed under its streams"
    a.synchronize(), b.query()  # the streams still work
    with pytest.raises(ValueError, match="handle on a closed custream.GreenContext"):
        g.handle
    with pytest.raises(ValueError, match=r"create_stream\(\) on a closed custream.GreenContext"):
        g.create_stream()
    with pytest.raises(ValueError, match=r"Stream\(\) on a closed custream.GreenContext"):
        custream.Stream(green_context=g)
    a.close()
    assert green.standin_live_greens() == 1
    b.close()
    assert green.standin_live_greens() == 0, "not destroyed after its last stream"
    # `with` closes; a stream keeps the object alive after the last name for it goes.
    with custream.GreenContext(8) as h:
        s = h.create_stream()
    ref = weakref.ref(h)
    del h
    collector.collect()
    assert ref() is s.green_context and ref().closed
    assert green.standin_live_greens() == 1
    del s
    collector.collect()
    assert ref() is None and green.standin_live_greens() == 0
    # Dropped unclosed, with no stream: destroyed by the deallocation.
    custream.GreenContext(8)
    collector.collect()
    assert green.standin_live_greens() == 0
    assert green.standin_primary_retains() == 1
    assert repr(g).endswith("sm_count=16 closed>")


@STANDIN
def test_a_stream_outliving_its_green_context_through_a_cycle(green):
    class Holder:
        pass

    h = Holder()
    h.gc = custream.GreenContext(16)
    h.stream = h.gc.create_stream()
    h.me = h  # a cycle the collector breaks, in any order
    del h
    collector.collect()
    assert green.standin_live_greens() == 0 and green.standin_live_streams() == 0


# ---- other libraries' green contexts and streams ----------------------------------------------------


@STANDIN
def test_a_foreign_green_context_is_adopted_and_never_destroyed(green):
    h = green.standin_foreign_green(24)

    class Owner:
        pass

    owner = Owner()
    before = sys.getrefcount(owner)
    gc = custream.GreenContext.from_handle(h, owner=owner)
    assert gc.handle == h and not gc.owned and gc.owner is owner
    assert gc.sm_count == 24 and gc.device == 0 and "borrowed" in repr(gc)
    s = gc.create_stream()
    assert s.sm_count == 24 and s.green_context is gc
    # A stream the other library made there, as the runtime makes them.
    theirs = custream.Stream.from_handle(green.standin_runtime_stream_in(h))
    assert theirs.green_context is gc and theirs.sm_count == 24
    gc.close()
    s.close(), theirs.close()
    assert gc.owner is None and sys.getrefcount(owner) == before
    assert green.standin_live_greens() == 1, "custream destroyed another library's green context"
    # Not known to custream: adopted on first ask, with the stream as owner.
    other = custream.Stream.from_handle(green.standin_runtime_stream_in(h))
    found = other.green_context
    assert found.handle == h and found.owner is other and found.sm_count == 24
    assert other.green_context is found
    assert custream.Stream.from_handle(0x1234).green_context is None
    assert custream.Stream.from_handle(0x1234).sm_count == 132
    del found, other
    collector.collect()
    # An owner that holds its green context, with a stream made there: a cycle the
    # collector breaks, the stream released before the owner goes.
    theirs_alive = green.standin_green_streams()  # the other library's two, never ours to destroy
    cyclic = Owner()
    cyclic.gc = custream.GreenContext.from_handle(h, owner=cyclic)
    cyclic.stream = cyclic.gc.create_stream()
    gone = weakref.ref(cyclic)
    del cyclic
    collector.collect()
    assert gone() is None and green.standin_green_streams() == theirs_alive == 2


@STANDIN
def test_a_cuda_core_style_context_is_adopted_through_its_converted_context(green):
    h = green.standin_foreign_green(40)
    ctx = ctypes.c_void_p()
    assert green.cuCtxFromGreenCtx(ctypes.byref(ctx), ctypes.c_void_p(h)) == 0

    # What cuda.bindings and cuda.core give: typed handles and a Context with .handle.
    class CUcontext:
        __module__ = "cuda.bindings.driver"

        def __init__(self, v):
            self.v = v

        def __int__(self):
            return self.v

    class CUgreenCtx(CUcontext):
        __module__ = "cuda.bindings.driver"

    class Context:
        __module__ = "cuda.core._context"
        is_green = True

        def __init__(self, handle):
            self.handle = handle

    for handle in (CUcontext(ctx.value), CUgreenCtx(h)):
        gc = custream.GreenContext.from_handle(handle)
        assert gc.handle == h and gc.sm_count == 40 and gc.owner is None
        gc.close()
    theirs = Context(CUcontext(ctx.value))
    gc = custream.GreenContext.from_handle(theirs)
    assert gc.handle == h and gc.owner is theirs  # a cuda.core Context is its own owner
    gc.close()
    primary = ctypes.c_void_p()
    green.cuDevicePrimaryCtxRetain(ctypes.byref(primary), 0)
    with pytest.raises(ValueError, match="is not a green context's"):
        custream.GreenContext.from_handle(CUcontext(primary.value))  # a primary context
    green.cuDevicePrimaryCtxRelease_v2(0)


# ---- threads, fork, exit -------------------------------------------------------------------------


@STANDIN
def test_threads_make_and_close_streams_while_another_closes_the_green_context(green):
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            gc = custream.GreenContext(16)
            made = []

            def work(k):
                if k == 0:
                    gc.close()
                    return
                for _ in range(20):
                    try:
                        s = gc.create_stream() if k % 2 else custream.Stream(green_context=gc)
                    except ValueError as e:
                        assert "on a closed custream.GreenContext" in str(e), e
                        return
                    assert s.sm_count == 16 and s.green_context is gc
                    made.append(s)
                    if k % 3 == 0:
                        s.close()

            run_threads(work)
            assert gc.closed
            for s in made:
                s.close()
            assert green.standin_live_greens() == 0 and green.standin_live_streams() == 0
    finally:
        sys.setswitchinterval(old)

    # Green contexts made and closed from many threads at once.
    def churn(k):
        for _ in range(20):
            with custream.GreenContext(8 * (k % 4 + 1)) as g:
                g.create_stream().close()

    run_threads(churn)
    assert green.standin_live_greens() == 0 and green.standin_primary_retains() == 1


@STANDIN
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_neither_uses_nor_destroys_the_parents_green_context(green):
    import warnings

    gc = custream.GreenContext(16)
    s = gc.create_stream()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert gc.sm_count == 16 and gc.handle  # what the object holds needs no driver
            for call in (gc.create_stream, lambda: custream.GreenContext(8)):
                try:
                    call()
                except custream.CudaError as e:
                    assert e.name == "CUDA_ERROR_NOT_INITIALIZED", e
                else:
                    raise AssertionError("used CUDA in a forked child")
            s.close(), gc.close()
            del s, gc
            assert green.standin_live_greens() == 1 and green.standin_live_streams() == 1
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not gc.closed and s.sm_count == 16
    s.close(), gc.close()
    assert green.standin_live_greens() == 0


def test_interpreter_exit_with_live_green_contexts_and_streams(standin_lib):
    # The interpreter's exit is the point: a fresh one.
    import subprocess

    code = """
import atexit, os, sys
def late():
    # Runs after custream's own hook: the driver is off limits, and custream says so.
    try:
        GC.create_stream()
    except Exception as e:
        print("late:", getattr(e, "name", type(e).__name__))
atexit.register(late)
import custream
GC = custream.GreenContext(16)
SMALL, REST = custream.GreenContext.split(8)
STREAMS = [GC.create_stream(), custream.Stream(green_context=SMALL)]
POOL = custream.StreamPool(3, green_context=REST)
class Cycle:
    def __init__(self):
        self.me, self.gc = self, custream.GreenContext(8)
        self.stream = self.gc.create_stream()
CYCLES = [Cycle() for _ in range(10)]
print("live")
"""
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(standin_lib))
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.split("\n")[:2] == ["live", "late: CUDA_ERROR_DEINITIALIZED"]


# ---- drivers without green contexts ----------------------------------------------------------------


@pytest.mark.standin("libcuda.c", env={"STANDIN_DRIVER_VERSION": "12030"})
def test_a_driver_before_12_4_is_refused_by_version_and_the_rest_works(green):
    s = custream.Stream()
    assert s.green_context is None and s.sm_count == 132
    for call in (lambda: custream.GreenContext(16), lambda: custream.GreenContext.split(16),
                 lambda: custream.GreenContext.from_handle(0x1000)):
        with pytest.raises(custream.CudaError) as e:
            call()
        assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"
        assert e.value.message.startswith("green contexts need a CUDA 12.4 or newer driver; "
                                          "this one supports CUDA 12.3: update the NVIDIA driver"), e.value.message
    s.close()


@pytest.mark.standin("libcuda.c", "-DSTANDIN_NO_GREEN", omit=green_entry_points())
def test_a_driver_without_the_entry_points_is_refused_naming_one():
    assert len(green_entry_points()) == 9, green_entry_points()
    s = custream.Stream()
    assert s.green_context is None and s.sm_count == 132  # no green context without them
    s.close()
    with pytest.raises(custream.CudaError) as e:
        custream.GreenContext(16)
    assert "green contexts need a CUDA 12.4 or newer driver; this one supports CUDA 13.0 (it has no cu" in e.value.message


# ---- the C API -----------------------------------------------------------------------------------


@STANDIN
def test_the_c_api_answers_green_context_and_sm_count(green):
    from _capi_ctypes import CAPI, capi

    table = capi()
    # Appended: the ABI version is the first one's, and a module built against the header
    # before them (a table of 112 bytes) still passes custream_import()'s size check.
    assert table.abi_version == custream.ABI_VERSION == 1
    assert table.api_size == ctypes.sizeof(CAPI) and table.api_size >= 112
    small, rest = custream.GreenContext.split(16)
    s, plain = small.create_stream(), custream.Stream()
    g, n = ctypes.c_void_p(), ctypes.c_uint()
    assert table.green_context(s, ctypes.byref(g)) == 0 and g.value == small.handle
    assert table.sm_count(s, ctypes.byref(n)) == 0 and n.value == 16
    assert table.green_context(plain, ctypes.byref(g)) == 0 and g.value is None
    assert table.sm_count(plain, ctypes.byref(n)) == 0 and n.value == 132
    assert table.sm_count(s, None) == 0  # NULL out: nothing written
    for bad in (3, None):
        with pytest.raises(TypeError, match=r"Custream_SmCount\(\) expected a custream.Stream"):
            table.sm_count(bad, ctypes.byref(n))
    s.close()
    with pytest.raises(ValueError) as e:
        table.green_context(s, ctypes.byref(g))
    assert str(e.value) == "green_context on a closed custream.Stream"
    plain.close(), small.close(), rest.close()
