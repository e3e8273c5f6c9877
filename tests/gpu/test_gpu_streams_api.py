"""The stream API users of the peers expect, on a device: the default streams as objects
(from threads with and without a current context), `with s:` around real work, pools
used by CuPy and torch, and no cold-create cliff once the last stream is closed."""

import ctypes
import threading
import time

import pytest

import custream
from custream_gpu_helpers import make_work, run_in_thread, try_import

pytestmark = pytest.mark.gpu


def test_default_streams_work_from_a_thread_with_no_current_context():
    def use():
        for s in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM):
            s.synchronize()
            assert s.query() is True and s.device == 0
        ev = custream.LEGACY_DEFAULT_STREAM.record()
        ev.synchronize()
        ev.close()
        return _current_context()

    assert run_in_thread(use) is None, "the default-stream rule left a context current"


def _current_context():
    lib = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    return ctx.value


def test_default_stream_inside_cupy_device_block_in_a_fresh_thread():
    cupy = try_import("cupy")
    if cupy is None:
        pytest.skip("cupy unavailable")

    def use():
        with cupy.cuda.Device(0):  # makes no context current for device 0 in a new thread
            custream.DEFAULT_STREAM.synchronize()
            return custream.current_stream().query()

    assert run_in_thread(use) is True


def test_per_thread_default_streams_stay_per_thread():
    work = make_work("cupy")
    barrier = threading.Barrier(2)
    seen = {}

    def spinner():
        with custream.PER_THREAD_DEFAULT_STREAM as s:
            work.spin_then_mark(custream.current_stream())
            seen["busy-here"] = s.query()
            barrier.wait()
            barrier.wait()
            s.synchronize()

    def other():
        barrier.wait()  # the spin kernel runs on the first thread's per-thread stream
        seen["idle-there"] = custream.PER_THREAD_DEFAULT_STREAM.query()
        barrier.wait()

    threads = [threading.Thread(target=spinner), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"busy-here": False, "idle-there": True}


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_with_block_orders_real_work_on_the_current_stream(lib):
    work = make_work(lib)
    a, b = custream.Stream(), custream.Stream()
    with a:
        work.spin_then_mark(custream.current_stream())
        assert a.query() is False
        with b:
            custream.current_stream().wait(a)
            work.copy_mark(custream.current_stream())
        assert custream.current_stream() is a
    b.synchronize()
    assert work.result() == (1, 1)
    assert not a.closed and not b.closed
    a.close(), b.close()


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_pool_streams_carry_peer_work(lib):
    work = make_work(lib)
    pool = custream.StreamPool(4, device=0)
    first, second = pool.get(), pool.get()
    assert first is not second and first.device == 0 and pool.get() is pool[2]
    work.spin_then_mark(first)
    assert first.query() is False
    second.wait(first)
    work.copy_mark(second)
    second.synchronize()
    assert work.result() == (1, 1)
    with pytest.raises(ValueError, match="StreamPool"):
        first.close()
    pool.close()
    assert first.closed and second.closed


def test_priority_range_and_a_pool_at_the_greatest_priority():
    least, greatest = custream.priority_range(0)
    assert least >= greatest and custream.priority_range() == (least, greatest)
    pool = custream.StreamPool(2, priority=greatest)
    assert all(s.priority == greatest for s in pool)
    pool.close()
    with pytest.raises(custream.CudaError, match=rf"\[{greatest}, {least}\]"):
        custream.Stream(priority=least + 1)


# A pytest process of its own (isolated) where custream alone uses CUDA: nothing there before
# the test makes the context (the conftests ask only for the device count; this module imports
# no peer), which the test checks first.
@pytest.mark.isolated(timeout=120)
def test_closing_the_last_stream_keeps_the_primary_context():
    # A fresh process where custream alone uses CUDA: the first create makes the context,
    # and closing the last stream must not tear it down (the next create would pay ~100 ms).
    lib = ctypes.CDLL("libcuda.so.1")
    assert lib.cuInit(0) == 0

    def active():
        flags, state = ctypes.c_uint(), ctypes.c_int()
        assert lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(state)) == 0
        return state.value

    assert active() == 0, "something else in this process made the context"
    custream.Stream().close()
    after = active()
    print("active-after-last-close", after)
    assert after == 1, "closing the last stream tore the primary context down"
    t = time.perf_counter()
    for _ in range(20):
        custream.Stream().close()
    print("20 Stream()/close() after the first:", (time.perf_counter() - t) * 1e3, "ms")
