"""Lifetimes in stream order: ``Stream.keep_alive(*objs)`` and its C face
``Custream_ReleaseAfter``, without a GPU.

Against the stand-in driver: libcuda.c holds stream callbacks while ``standin_hold(1)`` holds the
"GPU", calls them when it is let go (``standin_hold(0)``, on the calling thread, as a driver
thread would) or, with the fault's status, after a sticky fault (as CUDA calls a
cuStreamAddCallback's callback and never a cuLaunchHostFunc's). capture.c runs them on its
worker in stream order behind a stream memory wait the test opens, and captures into graphs.
What each test reads: the references are held until the callback, dropped after it on
custream's thread (not the caller's nor the driver's), exactly once; a fault and a failed launch
release them too; many pending cost no thread each; a capture ties them to its graph; the exit
leaves them and does not hang. tests/gpu/test_gpu_settings.py checks the same on a real GPU.
"""

import ctypes
import gc
import os
import subprocess
import sys
import threading
import weakref

import pytest

import custream
from _capi_ctypes import capi
from _threads import wait_until
from custream import Stream

LIBCUDA = pytest.mark.standin("libcuda.c")
CAPTURE = pytest.mark.standin("capture.c")


# With the GIL off, CPython frees an object on the thread that made it (at that thread's next
# check), whoever drops the last reference: biased reference counting. Which thread dropped
# what custream kept is seen only with the GIL.
FREED_WHERE_DROPPED = getattr(sys, "_is_gil_enabled", lambda: True)()


class Buffer:
    """Stands for what queued work reads (a pinned buffer, an array's storage)."""


class Released:
    """Tells when and on which thread the objects it watches were dropped."""

    def __init__(self):
        self.threads = []
        self.expected = 0

    def buffer(self):
        """A new Buffer, watched."""
        obj = Buffer()
        self.expected += 1
        weakref.finalize(obj, self._dropped)
        return obj

    def _dropped(self):
        self.threads.append(threading.get_ident())

    def wait(self, timeout=10):
        # Polled from Python: a free-threaded CPython's owner thread frees what it owns at its
        # next check, which a blocking wait would not make.
        wait_until(lambda: len(self.threads) == self.expected, f"{self.expected} released", timeout)
        return self.threads


def test_keep_alive_refuses_on_a_closed_stream():
    s = Stream.from_handle(0x1234)
    s.close()
    with pytest.raises(ValueError, match=r"keep_alive\(\).*closed"):
        s.keep_alive(Buffer())
    with pytest.raises(ValueError, match=r"keep_alive\(\).*closed"):
        s.keep_alive()


@LIBCUDA
def test_references_are_held_until_the_work_is_done_then_dropped_on_custreams_thread(driver):
    s = Stream()
    released = Released()
    driver.standin_hold(1)  # the GPU has not reached the callback yet
    a, b = released.buffer(), released.buffer()
    s.keep_alive(a, b, 7)
    del a, b
    gc.collect()
    assert driver.standin_callbacks_pending() == 1, "one callback for the call, whatever it holds"
    assert released.threads == [], "held while the work queued before it is pending"
    driver_thread = threading.get_ident()  # standin_hold(0) calls the callback on this thread
    driver.standin_hold(0)
    threads = released.wait()
    assert len(threads) == 2
    if FREED_WHERE_DROPPED:
        assert driver_thread not in threads, "dropped on custream's thread, not the driver's"
    assert driver.standin_callbacks_pending() == 0


@LIBCUDA
def test_nothing_to_keep_queues_nothing(driver):
    s = Stream()
    before = driver.standin_callbacks()
    s.keep_alive()
    assert driver.standin_callbacks() == before


@LIBCUDA
def test_a_fault_releases_what_was_kept(driver):
    s = Stream()
    released = Released()
    driver.standin_hold(1)
    s.keep_alive(released.buffer())
    driver.standin_sticky(700)  # the driver calls the pending callback with the fault's status
    released.wait()
    later = Released()
    with pytest.raises(custream.CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        s.keep_alive(later.buffer())
    later.wait()  # nothing was queued: released at once, on custream's thread


@pytest.mark.standin("libcuda.c", "-DSTANDIN_NO_CALLBACKS", omit=("cuStreamAddCallback",))
def test_without_stream_callbacks_a_host_function_releases(driver):
    s = Stream()
    released = Released()
    before = driver.standin_host_funcs()
    s.keep_alive(released.buffer())
    released.wait()
    assert driver.standin_host_funcs() == before + 1


def _threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
@LIBCUDA
def test_many_pending_cost_no_thread_each(driver):
    pool = custream.StreamPool(4)
    released = Released()
    pool.get().keep_alive(released.buffer())  # custream's host thread started
    released.wait()
    threads = _threads()
    driver.standin_hold(1)
    for i in range(1000):
        pool.get().keep_alive(released.buffer())
    assert driver.standin_callbacks_pending() == 1000
    assert _threads() == threads
    driver.standin_hold(0)
    released.wait()
    assert _threads() == threads
    pool.close()


@LIBCUDA
def test_the_c_face_calls_the_release_once_off_the_callers_thread(driver):
    table = capi()
    release = ctypes.cast(driver.standin_release, ctypes.c_void_p).value
    driver.standin_release_thread.restype = driver.standin_this_thread.restype = ctypes.c_ulong
    s = Stream()
    driver.standin_hold(1)
    assert table.release_after(s, release, None) == 0
    assert driver.standin_releases() == 0
    driver.standin_hold(0)
    wait_until(lambda: driver.standin_releases() == 1, "custream's thread ran the release")
    assert driver.standin_release_thread() != driver.standin_this_thread()
    # An error: the exception is set and the release still runs, once.
    closed = Stream()
    closed.close()
    with pytest.raises(ValueError, match=r"Custream_ReleaseAfter\(\).*closed"):
        table.release_after(closed, release, None)
    wait_until(lambda: driver.standin_releases() == 2, "custream's thread ran the release")
    with pytest.raises(TypeError, match=r"Custream_ReleaseAfter\(\).*custream.Stream"):
        table.release_after(object(), release, None)
    wait_until(lambda: driver.standin_releases() == 3, "custream's thread ran the release")
    with pytest.raises(ValueError, match=r"Custream_ReleaseAfter\(\) fn is NULL"):
        table.release_after(s, None, None)
    assert driver.standin_releases() == 3


def test_the_rust_crate_runs_the_closure_once_on_custreams_thread_even_on_an_error():
    """pyo3-custream's Stream::release_after (tests/rust_ext's release_after): on a closed stream
    the call raises and the closure still runs, once, on custream's host thread."""
    from _rust_ext import load_ext

    rx = load_ext()
    before = len(rx.release_runs())
    s = Stream.from_handle(0x1000)
    s.close()
    with pytest.raises(ValueError, match=r"^Custream_ReleaseAfter\(\) on a closed custream.Stream$"):
        rx.release_after(s, b"x" * 4096)
    wait_until(lambda: len(rx.release_runs()) == before + 1, "custream's thread ran the release")
    assert rx.release_runs()[-1] == "custream-host"


@LIBCUDA
def test_the_rust_crate_releases_in_stream_order(driver):
    from _rust_ext import load_ext

    rx = load_ext()
    s = Stream()
    driver.standin_hold(1)
    rx.release_after(s, b"x" * 4096)
    assert rx.release_runs() == [], "held while the work before it is pending"
    driver.standin_hold(0)
    wait_until(lambda: rx.release_runs() == ["custream-host"], "custream's thread ran the release")


# ---- stream order and capture (capture.c) ------------------------------------------------------


@CAPTURE
def test_released_in_stream_order_behind_the_work(driver):
    driver.fake_mem_alloc.restype = ctypes.c_void_p
    gate = driver.fake_mem_alloc(8)
    s = Stream()
    s.wait_value(gate, 1)  # the stream's work waits until the test writes the word
    released = Released()
    s.keep_alive(released.buffer())
    assert driver.fake_callbacks() == 1
    assert not s.query() and released.threads == [], "the work before it is pending"
    ctypes.c_uint32.from_address(gate).value = 1
    released.wait()
    s.synchronize()


@CAPTURE
def test_in_a_capture_the_graph_holds_them(driver):
    s = Stream()
    released = Released()
    callbacks = driver.fake_callbacks()
    s.begin_capture()
    s.keep_alive(released.buffer())
    graph = s.end_capture()
    assert driver.fake_callbacks() == callbacks, "nothing queued in the capture (it would invalidate it)"
    graph.launch(s)
    s.synchronize()
    graph.launch(s)
    s.synchronize()
    assert released.threads == [], "held while the graph lives"
    graph.close()
    threads = released.wait()
    if FREED_WHERE_DROPPED:
        assert threading.get_ident() not in threads


@CAPTURE
def test_a_capture_that_forms_no_graph_releases_them(driver):
    s = Stream()
    released = Released()
    s.begin_capture()
    s.keep_alive(released.buffer())
    s.close()  # the capture can never end: custream discards it
    released.wait()


@LIBCUDA
def test_the_exit_leaves_what_is_still_held_and_does_not_hang(driver):
    # A fresh interpreter is the point: it exits with a release still pending on the "GPU".
    code = (
        "import ctypes, os, custream\n"
        "standin = ctypes.CDLL(os.environ['CUSTREAM_LIBCUDA'])\n"
        "s = custream.Stream()\n"
        "standin.standin_hold(1)\n"
        "class Loud:\n"
        "    def __del__(self): print('released')\n"
        "s.keep_alive(Loud(), bytearray(1 << 20))\n"
        "print('exiting')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["exiting"], "left to the process: never released during finalization"
    assert "panicked" not in out.stderr and "Fatal Python error" not in out.stderr, out.stderr
