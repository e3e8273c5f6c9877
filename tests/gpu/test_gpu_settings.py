"""A stream's settings and lifetimes in stream order on a device (issue 51): the policy set
through custream governs CuPy's wait on the same handle and custream's own (process CPU time
measured), the access-policy window is what cuda.bindings reads back and holds for a CuPy
kernel, ``keep_alive`` keeps a pinned buffer alive through a copy the caller no longer holds,
a captured one lives as long as its graph, and 16 threads calling it on shared streams leak
nothing. Each runs in a pytest process of its own (marked ``isolated``, tests/conftest.py)
under its watchdog, so that the process CPU time it measures is its own work's; each prints
its figures (pytest -rP shows them), which the closing note reports."""

import gc
import os
import threading
import time
import weakref

import pytest

import custream
from custream import Stream
from custream_gpu_helpers import peer, sleep_on

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cupy_on_device_0")]

cupy = peer("cupy")
numpy = peer("numpy")

ISOLATED = pytest.mark.isolated(timeout=150)


def cpu_of(wait):
    """(process CPU seconds, wall seconds) that wait() took: every thread of the process counts."""
    c, w = time.process_time(), time.monotonic()
    wait()
    return time.process_time() - c, time.monotonic() - w


def stream_attr(name):
    """A stream attribute's id in cuda.bindings: 13.x names them only as the launch attributes
    they alias (CU_LAUNCH_ATTRIBUTE_*), as cuda.h's #defines do; 12.x as CU_STREAM_ATTRIBUTE_*."""
    import cuda.bindings.driver as drv

    ids = drv.CUstreamAttrID
    found = getattr(ids, "CU_STREAM_ATTRIBUTE_" + name, None)
    return found if found is not None else getattr(ids, "CU_LAUNCH_ATTRIBUTE_" + name)


class Marker:
    """Any object (bytearray and CuPy's pinned pointers take no weak reference)."""


class Released:
    """How many of the objects it watches were dropped, the first when, and on which threads."""

    def __init__(self):
        self.count, self.expected, self.first_at, self.threads = 0, 0, None, set()
        self.cond = threading.Condition()

    def watch(self, obj):
        with self.cond:
            self.expected += 1
        weakref.finalize(obj, self._dropped)
        return obj

    def _dropped(self):
        with self.cond:
            self.count += 1
            self.threads.add(threading.get_ident())
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.cond.notify_all()

    def wait(self, timeout=30):
        with self.cond:
            done = self.cond.wait_for(lambda: self.count == self.expected, timeout)
            assert done, f"{self.count} of {self.expected} released"


@ISOLATED
def test_blocking_keeps_cpu_near_zero_while_cupy_and_custream_wait_and_spin_burns_it():
    """The policy set through custream is the driver's: CuPy's synchronize() on the same handle
    (cudaStreamSynchronize) follows it, and so do custream's waits, on the main thread (its own
    path) and on another (the driver's wait). CPU per second waited, each way."""
    import cuda.bindings.driver as drv

    ext = {}
    for policy in ("blocking", "spin", "auto"):
        s = Stream(sync_policy=policy)
        ext[policy] = cupy.cuda.Stream.from_external(s)
        sleep_on(s, 0.05)
        s.synchronize()  # warm: the kernel loaded, custream's notifier made
        err, value = drv.cuStreamGetAttribute(drv.CUstream(s.handle), stream_attr("SYNCHRONIZATION_POLICY"))
        assert err == drv.CUresult.CUDA_SUCCESS, err
        print(policy, "read back by cuda.bindings:", value.syncPolicy)
        figures = {}

        def on_another_thread(s=s):
            th = threading.Thread(target=s.synchronize)
            th.start()
            th.join()

        for who, wait in (("CuPy", ext[policy].synchronize), ("custream, main thread", s.synchronize),
                          ("custream, another thread (the driver's wait)", on_another_thread)):
            sleep_on(s, 1.0)
            cpu, wall = cpu_of(wait)
            assert 0.9 <= wall < 2.0, (policy, who, wall)
            figures[who] = cpu / wall
            print(f"{policy}: {who}: {cpu * 1e3 / wall:.1f} ms CPU per second waited")
        if policy == "blocking":
            assert value.syncPolicy == drv.CUsynchronizationPolicy.CU_SYNC_POLICY_BLOCKING_SYNC
            for who, per in figures.items():
                assert per < 0.05, (who, per)  # the bench row's target is 5 ms per second
        if policy == "spin":
            assert value.syncPolicy == drv.CUsynchronizationPolicy.CU_SYNC_POLICY_SPIN
            for who, per in figures.items():
                assert per > 0.8, (who, per)  # a thread spun all along
        s.close()


@ISOLATED
def test_the_access_policy_window_is_the_drivers_and_applies_to_cupys_kernels():
    """Set through custream on a CuPy array, read back with cuda.bindings on the same handle.
    Then the measurement: a kernel launched by CuPy on the stream reads a hot buffer again and
    again between reads of a cold one four times L2's size; with persisting L2 set aside and the
    window on the hot buffer it should run faster than with no window. Where the device has no
    persisting L2 (or no window), the read-back alone is checked, and the run says so."""
    import cuda.bindings.driver as drv
    import cuda.bindings.runtime as rt

    def attribute(name):
        err, v = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), 0)
        assert err == drv.CUresult.CUDA_SUCCESS, (name, err)
        return v

    most = attribute("CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE")
    persisting = attribute("CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE")
    l2 = attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
    print("window", most, "persisting L2", persisting, "L2", l2)
    s = Stream()
    if most == 0:
        try:
            s.set_access_policy_window(1 << 40, 256)
        except custream.CudaError as e:
            print("no window on this device: refused as", e.name)
            assert e.name == "CUDA_ERROR_NOT_SUPPORTED"
        else:
            raise AssertionError("a device without a window took one")
        return
    hot_bytes = min(most, persisting or most) * 3 // 4
    hot = cupy.ones(hot_bytes // 4, dtype=cupy.float32)
    cold = cupy.ones(4 * l2 // 4, dtype=cupy.float32)
    s.set_access_policy_window(hot, hot.nbytes, hit_ratio=0.6, hit="persisting", miss="streaming")
    err, value = drv.cuStreamGetAttribute(drv.CUstream(s.handle), stream_attr("ACCESS_POLICY_WINDOW"))
    assert err == drv.CUresult.CUDA_SUCCESS, err
    w = value.accessPolicyWindow
    assert int(w.base_ptr) == hot.data.ptr and w.num_bytes == hot.nbytes, (w.base_ptr, w.num_bytes)
    assert abs(w.hitRatio - 0.6) < 1e-6, w.hitRatio
    assert w.hitProp == drv.CUaccessProperty.CU_ACCESS_PROPERTY_PERSISTING
    assert w.missProp == drv.CUaccessProperty.CU_ACCESS_PROPERTY_STREAMING
    assert s.access_policy_window == custream.AccessPolicyWindow(hot.data.ptr, hot.nbytes, 0.6, "persisting", "streaming")
    # Another Stream over the handle and cuda.bindings agree; the domain too.
    s.mem_sync_domain = "remote"
    err, value = drv.cuStreamGetAttribute(drv.CUstream(s.handle), stream_attr("MEM_SYNC_DOMAIN"))
    assert value.memSyncDomain == drv.CUlaunchMemSyncDomain.CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE, value.memSyncDomain
    s.mem_sync_domain = "default"
    reads = cupy.RawKernel(r'''
extern "C" __global__ void reads(const float *hot, unsigned long long n_hot, const float *cold,
                                 unsigned long long n_cold, int rounds, float *out) {
    float acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (int r = 0; r < rounds; r++) {
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_hot; i += stride) acc += hot[i];
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_cold; i += stride) acc += cold[i];
    }
    if (acc == -1.0f) out[0] = acc;
}''', "reads")
    out_buf = cupy.zeros(1, dtype=cupy.float32)
    ext = cupy.cuda.Stream.from_external(s)

    def timed():
        with ext:
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            reads((264,), (512,), (hot, cupy.uint64(hot.size), cold, cupy.uint64(cold.size), cupy.int32(20), out_buf))
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end)

    if persisting == 0:
        timed()
        print("no persisting L2 on this device: the read-back alone is checked; a CuPy kernel ran with the window")
        return
    assert rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, persisting)[0] == rt.cudaError_t.cudaSuccess
    s.set_access_policy_window(hot, hot.nbytes, hit_ratio=1.0)
    timed()
    with_window = sorted(timed() for _ in range(7))[3]
    s.clear_access_policy_window()
    assert s.access_policy_window is None
    err, value = drv.cuStreamGetAttribute(drv.CUstream(s.handle), stream_attr("ACCESS_POLICY_WINDOW"))
    assert value.accessPolicyWindow.num_bytes == 0
    timed()
    without = sorted(timed() for _ in range(7))[3]
    print(f"persisting-hit measurement: {with_window:.2f} ms with the window, {without:.2f} ms without "
          f"({without / with_window:.2f}x)")
    assert with_window <= without * 1.02, (with_window, without)


@ISOLATED
def test_default_streams_answer_reads_and_refuse_writes_and_what_the_driver_says():
    """custream refuses a write on a default stream before the driver; what the driver itself
    answers cuda.bindings on the legacy and per-thread streams is printed for the report."""
    import cuda.bindings.driver as drv

    for name in ("DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"):
        s = getattr(custream, name)
        try:
            print(name, "reads", s.sync_policy, s.mem_sync_domain, s.access_policy_window)
        except custream.CudaError as e:
            print(name, "read refused by the driver:", e.name)
        try:
            s.sync_policy = "spin"
        except ValueError as e:
            assert "a default stream is shared by every library" in str(e), e
        else:
            raise AssertionError(name)
        value = drv.CUstreamAttrValue()
        value.syncPolicy = drv.CUsynchronizationPolicy.CU_SYNC_POLICY_AUTO
        err, = drv.cuStreamSetAttribute(drv.CUstream(s.handle), stream_attr("SYNCHRONIZATION_POLICY"), value)
        print(name, "cuStreamSetAttribute through cuda.bindings:", err)


@ISOLATED
def test_keep_alive_keeps_a_pinned_buffer_through_a_copy_the_caller_dropped():
    """A 1 s kernel, then a copy from pinned host memory on the same stream; the caller drops
    its last reference at once. The buffer's memory is not given back (nor reused by the next
    pinned allocation, which would overwrite it) until the copy is done: the copy reads the
    pattern it was given. Run under compute-sanitizer too (scripts/sanitizer-check.sh)."""
    n = 32 << 20
    s = Stream()
    released = Released()
    sleep_on(s, 0.05)
    s.synchronize()
    dst = cupy.zeros(n, dtype=cupy.uint8)
    pinned = cupy.cuda.alloc_pinned_memory(n)
    host = numpy.frombuffer(pinned, dtype=numpy.uint8, count=n)  # holds `pinned` (its buffer)
    host[:] = 7
    marker = released.watch(Marker())  # kept with it: tells when custream let go
    sleep_on(s, 1.0)
    start = time.monotonic()
    dst.set(host, stream=cupy.cuda.Stream.from_external(s))  # behind the 1 s kernel
    s.keep_alive(host, marker)
    del host, pinned, marker
    gc.collect()
    # Whoever allocates pinned memory next would get the block back were it freed: it writes 9s.
    other = numpy.frombuffer(cupy.cuda.alloc_pinned_memory(n), dtype=numpy.uint8, count=n)
    other[:] = 9
    assert released.count == 0, "released before the copy ran"
    s.synchronize()
    released.wait()
    assert released.first_at - start >= 0.9, released.first_at - start  # not before the kernel and the copy
    assert threading.get_ident() not in released.threads
    assert int((dst == 7).sum()) == n, "the copy read memory that was reused"
    print(f"released {released.first_at - start:.3f} s after the copy was queued (kernel: 1 s)")


@ISOLATED
def test_a_captured_keep_alive_lives_until_the_graph_is_closed():
    s = Stream()
    released = Released()
    x = cupy.zeros(1 << 20, dtype=cupy.float32)
    with cupy.cuda.Stream.from_external(s):
        x += 1  # compiled and loaded before the capture
        x[...] = 0
    sleep_on(s, 0.01)
    s.synchronize()
    s.begin_capture()
    with cupy.cuda.Stream.from_external(s):
        x += 1
    s.keep_alive(released.watch(Marker()), bytearray(1 << 20))
    graph = s.end_capture()
    gc.collect()
    for _ in range(3):
        graph.launch(s)
    s.synchronize()
    assert float(x[0]) == 3.0
    assert released.count == 0, "held while the graph lives"
    graph.close()
    released.wait()
    assert threading.get_ident() not in released.threads


@ISOLATED
def test_sixteen_threads_keep_alive_on_shared_streams_for_twenty_seconds_leak_nothing():
    """16 threads, 20 s: each picks one of four shared streams (a pool's), launches a short
    CuPy kernel on it now and then, and keeps objects alive behind it. At the end every object
    is released, none is left in gc, no Stream is left alive and no thread was added."""
    pool = custream.StreamPool(4, sync_policy="blocking")
    streams = [pool[i] for i in range(4)]
    for t in streams:
        sleep_on(t, 0.001)
        t.synchronize()
    baseline_streams = custream.live_stream_count()
    tasks = len(os.listdir("/proc/self/task"))
    made = [0] * 16
    released = Released()
    stop = time.monotonic() + 20
    errors = []

    def worker(k):
        try:
            i = 0
            while time.monotonic() < stop:
                t = streams[(k + i) % 4]
                if i % 16 == 0:
                    sleep_on(t, 0.0002)
                objs = [released.watch(Marker()), bytearray(256)]
                t.keep_alive(*objs)
                made[k] += 1
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for th in threads:
        th.start()
    peak = 0
    while any(th.is_alive() for th in threads):
        peak = max(peak, len(os.listdir("/proc/self/task")))
        time.sleep(0.5)  # a sample's interval
    for th in threads:
        th.join()
    assert not errors, errors
    for t in streams:
        t.synchronize()
    released.wait(60)
    gc.collect()
    assert sum(made) == released.expected
    assert not [o for o in gc.get_objects() if type(o) is Marker], "a Marker is still alive"
    assert custream.live_stream_count() == baseline_streams
    # The 16 workers and a few of custream's (launchers, the notifier maker): nothing per pending release.
    assert peak <= tasks + 16 + 8, (peak, tasks)
    pool.close()
    print(f"{sum(made)} keep_alive calls in 20 s, all released; threads peaked at {peak} (from {tasks})")
