"""Pools on a GPU (issue 39): tiers of real priorities, leases whose work runs on in stream
order, streams made inside a capture, 16 threads leasing and getting under a watchdog; and
Stream.id and Stream.device of a stream another library made, against the driver itself
(ctypes), with the current context left as it was. No peer library: the "work" is a Python
host function, which keeps a stream busy for as long as it runs.

The 16-thread check runs in a pytest process of its own (marked ``isolated``,
tests/conftest.py) under its watchdog: a hang dumps every thread's stack and fails it.

Runs with `python3 -m pytest -m gpu tests/gpu/test_gpu_pool.py` on the GPU machine.
"""

import ctypes
import random
import threading
import time

import pytest

import custream
from _threads import blocked_at, wait_until

pytestmark = pytest.mark.gpu

WATCHDOG_S = 60


def libcuda():
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    return cu


def current_context(cu):
    ctx = ctypes.c_void_p()
    assert cu.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    return ctx.value


def driver_stream_id(cu, handle):
    out = ctypes.c_ulonglong()
    assert cu.cuStreamGetId(ctypes.c_void_p(handle), ctypes.byref(out)) == 0
    return out.value


def foreign_stream(cu, device=0):
    """A stream made through the driver in `device`'s primary context, as another library
    would; the calling thread's current context is put back. Returns (handle, destroy)."""
    dev, ctx, h = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxPushCurrent_v2(ctx) == 0
    assert cu.cuStreamCreate(ctypes.byref(h), 1) == 0
    popped = ctypes.c_void_p()
    assert cu.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0

    def destroy():
        assert cu.cuStreamDestroy_v2(h) == 0
        assert cu.cuDevicePrimaryCtxRelease_v2(dev) == 0

    return h.value, destroy


# ---- ids and devices ----------------------------------------------------------------------------


def test_id_is_the_drivers_and_the_same_for_every_wrapper():
    cu = libcuda()
    a, b = custream.Stream(), custream.Stream()
    assert a.id == driver_stream_id(cu, a.handle) and b.id == driver_stream_id(cu, b.handle)
    assert a.id != b.id
    w = custream.Stream.from_handle(a.handle)
    assert w.id == a.id
    assert isinstance(custream.DEFAULT_STREAM.id, int)
    a.close()
    b.close()
    w.close()


@pytest.mark.parametrize("with_context", [False, True])
def test_device_of_a_foreign_stream_leaves_the_current_context(with_context):
    cu = libcuda()
    h, destroy = foreign_stream(cu, 0)
    if with_context:  # a context current on this thread, as the runtime leaves one
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cu.cuCtxPushCurrent_v2(ctx) == 0
    before = current_context(cu)
    s = custream.Stream.from_handle(h)
    assert s.device == 0 and s.id == driver_stream_id(cu, h)
    assert current_context(cu) == before
    s.close()
    if with_context:
        popped = ctypes.c_void_p()
        assert cu.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0
        assert cu.cuDevicePrimaryCtxRelease_v2(dev) == 0
    destroy()


def test_device_of_a_capturing_stream_does_not_break_the_capture():
    s = custream.Stream()
    known = s.id
    s.begin_capture("thread_local")
    try:
        w = custream.Stream.from_handle(s.handle)
        assert w.device == 0 and s.id == known  # learnt before: kept
        # The driver refuses cuStreamGetId on a capturing stream: refused first, the capture kept.
        with pytest.raises(custream.CudaError, match="capturing"):
            w.id
        w.close()
    finally:
        g = s.end_capture()  # raises if the capture was invalidated
    g.close()
    s.close()


# ---- pools --------------------------------------------------------------------------------------


def test_tiers_of_the_devices_priorities():
    least, greatest = custream.priority_range(0)
    pool = custream.StreamPool(2, priorities=(least, greatest))
    assert pool.get().priority == least and pool.get(priority=greatest).priority == greatest
    with pool.lease(priority=greatest) as s:
        assert s.priority == greatest
    pool.close()
    bad = custream.StreamPool(2, priorities=(least, greatest - 1))
    with pytest.raises(custream.CudaError, match=rf"\[{greatest}, {least}\]"):
        bad.get()
    bad.close()


def test_a_lease_given_back_lets_its_work_run_on_before_the_next_holders():
    pool = custream.StreamPool(1)
    order, go = [], threading.Event()
    with pool.lease() as s:
        s.launch_host_func(lambda: (go.wait(30), order.append("first")))
    # Given back at once, its work held until the next holder queued its own.
    with pool.lease(timeout=1) as t:
        assert t is s
        t.launch_host_func(order.append, "second")
        go.set()
        t.synchronize()
    assert order == ["first", "second"]
    pool.close()


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_streams_made_inside_a_capture_leave_it_valid(mode):
    s = custream.Stream()
    greatest = custream.priority_range(0)[1]
    pool = custream.StreamPool(2, priorities=(0, greatest))
    s.begin_capture(mode)
    try:
        made = pool.get(priority=greatest)  # the first stream: made now, priorities checked now
        with pool.lease() as other:
            assert other is not made
    finally:
        g = s.end_capture()  # raises if a stream made meanwhile invalidated the capture
    g.launch(s)
    s.synchronize()
    g.close()
    pool.close()
    s.close()


def test_a_waiting_lease_is_woken_by_close():
    pool = custream.StreamPool(1)
    held = pool.lease()
    errors = []

    def wait():
        try:
            pool.lease(timeout=30)
        except ValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: blocked_at(t, "pool.lease(timeout=30)"), "the second lease waits for the only stream")
    pool.close()
    t.join(10)
    assert errors == ["lease() on a closed custream.StreamPool"]
    s = held.stream
    assert not s.closed
    s.synchronize()
    held.close()
    assert s.closed


@pytest.mark.isolated(timeout=WATCHDOG_S)
def test_sixteen_threads_lease_and_get_under_a_watchdog():
    least, greatest = custream.priority_range(0)
    pool = custream.StreamPool(3, priorities=(least, greatest))
    lock = threading.Lock()
    held, used, errors = set(), [], []
    start = threading.Barrier(16)

    def worker(k):
        rng = random.Random(k)
        try:
            start.wait()
            for i in range(200):
                p = rng.choice((None, least, greatest))
                if rng.random() < 0.3:
                    pool.get(priority=p).query()
                    continue
                with pool.lease(priority=p, timeout=30) as s:
                    with lock:
                        if s.handle in held:
                            errors.append(("leased twice", hex(s.handle)))
                        held.add(s.handle)
                        used.append(s.handle)
                    s.record().synchronize()
                    if i % 20 == 0:
                        s.launch_host_func(time.sleep, 0.001)
                    with lock:
                        held.discard(s.handle)
        except BaseException as e:  # noqa: BLE001 - reported below with its thread
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert not held and len(set(used)) <= 6
    for p in (least, greatest):
        ls = [pool.lease(priority=p, timeout=0) for _ in range(3)]
        assert len({lease.stream.handle for lease in ls}) == 3
        for lease in ls:
            lease.close()
    streams = list(pool)
    pool.close()
    assert all(s.closed for s in streams)
    print("ok", len(used))
