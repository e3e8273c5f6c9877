"""Python host functions under threads, beside CuPy and PyTorch (issue 23).

A Python host function once ran on the driver's thread and waited there for the GIL, while
the driver held locks that other threads' driver calls take with the GIL held (CuPy's and
PyTorch's launches, custream's own calls): a 16-thread program hung. Host functions now run
on custream's thread, and the stream waits on a flag. Each check runs in a pytest process of
its own (marked ``isolated``, tests/conftest.py) under a watchdog (every thread's native stack
from native_stacks.c, then faulthandler's Python stacks and exit) and fails instead of hanging.
"""

import ctypes
import threading
import time

import pytest

import custream
from custream import Stream, StreamPool
from custream_gpu_helpers import peer

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cupy_on_device_0")]

cupy = peer("cupy")
torch = peer("torch")

ISOLATED = pytest.mark.isolated(timeout=150)


@ISOLATED
def test_sixteen_threads_with_cupy_torch_host_functions_and_graphs_for_60_s():
    """16 threads for 60 s, each looping over everything a library serving threads does with
    custream beside CuPy and torch: the loop of issue 23, which hung in 2 of 2 runs."""
    seconds = 60
    torch.cuda.init()
    pool = StreamPool(4, device=0)
    for i in range(4):
        pool[i]  # made on first use: made here, before the count
    base = custream.live_stream_count()  # the pool's four
    lock = threading.Lock()
    totals = {"iterations": 0, "launched": 0, "ran": 0, "graphs": 0}
    errors = []

    def worker(k):
        x = cupy.zeros(1 << 12, dtype=cupy.float32)
        t = torch.zeros(1 << 12, device="cuda")
        ts = torch.cuda.Stream()
        calls = []
        launched = graphs = iterations = 0
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                s = Stream(device=0)
                with s:
                    with cupy.cuda.ExternalStream(custream.current_stream().handle):
                        x += 1
                e = s.record()
                pool.get().wait(e)
                ts.wait_stream(torch.cuda.ExternalStream(s.handle))
                with torch.cuda.stream(ts):
                    t.add_(1)
                s.launch_host_func(calls.append, iterations)
                launched += 1
                if iterations % 50 == 0:
                    s.begin_capture()
                    s.launch_host_func(calls.append, -1)
                    g = s.end_capture()
                    g.launch(s)
                    g.launch(s)
                    launched += 2
                    graphs += 1
                    s.synchronize()
                    g.close()
                s.synchronize()
                e.close()
                s.close()
                iterations += 1
            ts.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}")
        with lock:
            totals["iterations"] += iterations
            totals["launched"] += launched
            totals["ran"] += len(calls)
            totals["graphs"] += graphs

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.cuda.synchronize()
    cupy.cuda.Device(0).synchronize()
    pool.close()
    assert not errors, errors
    assert totals["ran"] == totals["launched"] > 0, totals
    print("iterations {iterations} launched {launched} ran {ran} graphs {graphs}".format(**totals))
    left = custream.live_stream_count() - base
    print("streams left", left)
    assert left == 0, left


@ISOLATED
def test_a_replayed_host_node_while_other_threads_launch():
    """A graph with a Python host node replayed on one thread while 8 others launch CuPy and
    torch work with the GIL held and custream creates and closes streams and events."""
    torch.cuda.init()
    stop = threading.Event()
    busy = [0]

    def launcher(k):
        x = cupy.zeros(1 << 14, dtype=cupy.float32)
        t = torch.zeros(1 << 14, device="cuda")
        while not stop.is_set():
            x += 1
            t.mul_(1.0001)
            with Stream(device=0) as s:
                s.record().close()
                s.close()
            busy[0] += 1
        cupy.cuda.Device(0).synchronize()
        torch.cuda.synchronize()

    threads = [threading.Thread(target=launcher, args=(k,), daemon=True) for k in range(8)]
    for th in threads:
        th.start()
    s = Stream(device=0)
    seen = []
    try:
        s.begin_capture()  # the process's first host function: its flag's page is made in the capture
        s.launch_host_func(seen.append, "node")
        g = s.end_capture()
        for i in range(500):
            g.launch(s)
            if i % 10 == 0:
                s.synchronize()
        s.synchronize()
    finally:
        stop.set()
    for th in threads:
        th.join()
    assert seen == ["node"] * 500, len(seen)
    assert g.node_count == 3, g.node_count  # the host function, the wait on its flag, the reset
    g.close()
    s.close()
    print("replayed", len(seen), "launches beside", busy[0])


@ISOLATED
def test_work_after_a_host_function_waits_for_it_to_return():
    """Work queued after a host function waits for it to return: an event recorded after a
    host function that is held is not reached until it returned; CuPy work after it sees its
    result."""
    s = Stream(device=0)
    host = cupy.cuda.alloc_pinned_memory(8)
    word = ctypes.c_int64.from_address(host.ptr)
    word.value = 0
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(30)
        word.value = 42

    s.launch_host_func(slow)
    out = cupy.zeros(1, dtype=cupy.int64)
    with cupy.cuda.ExternalStream(s.handle):
        out.data.copy_from_host_async(host.ptr, 8)
    e = s.record()
    try:
        assert started.wait(30), "the host function never started"
        with pytest.raises(TimeoutError):  # a stream that went past the running function would reach e
            e.synchronize(timeout=0.1)
    finally:
        release.set()
    e.synchronize()
    assert int(out.get(stream=cupy.cuda.ExternalStream(s.handle))[0]) == 42, "the copy ran before the function returned"


@ISOLATED
def test_a_host_function_sees_the_work_before_it_and_they_run_in_order():
    """A host function on a stream starts when the GPU's write after the work before it lands:
    that work's results are there, behind a long kernel too (custream's thread naps while it
    waits), and a thousand in a row run in order."""
    s = custream.Stream(device=0)
    host = cupy.cuda.alloc_pinned_memory(8)
    word = ctypes.c_int64.from_address(host.ptr)
    word.value = 0
    slow_write = cupy.RawKernel(r'''
extern "C" __global__ void slow_write(long long *out, long long cycles, long long value) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    *out = value;
}''', "slow_write")
    seen = []
    with cupy.cuda.ExternalStream(s.handle):
        for value, cycles in ((7, 400_000_000), (8, 1000)):
            slow_write((1,), (1,), (host.ptr, cycles, value))
            s.launch_host_func(lambda: seen.append(word.value))
    ran = []
    for i in range(1000):
        s.launch_host_func(ran.append, i)
    s.synchronize()
    assert seen == [7, 8], seen
    assert ran == list(range(1000)), ran[:10]
