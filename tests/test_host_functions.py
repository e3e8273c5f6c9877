"""Host functions (``Stream.launch_host_func``) without a GPU.

In this process (no driver here): argument checks, refusals, and the no-driver path.

Against the stand-in libcuda tests/standin/capture.c (``@pytest.mark.standin``: each test in
a pytest process of its own, tests/conftest.py): custream's side of the contract, which needs
a driver to run at all. The stand-in runs no GPU work; it queues host functions on a thread
of its own behind "kernels" that sleep. Host functions inside a capture are
tests/test_graph.py's; tests/gpu/test_gpu_capture.py checks the same against the real driver.
"""

import os
import sys
import sysconfig
import threading

import pytest

import custream
import standin
from _host_function_checks import check_call_lifetime
from _threads import wait_until
from custream import Stream

HAS_DRIVER = custream.is_available()
CAPTURE = pytest.mark.standin("capture.c")


# ---- in this process ---------------------------------------------------------------------


def test_launch_host_func_checks_its_arguments():
    s = Stream.from_handle(0x1234)
    with pytest.raises(TypeError, match="missing required argument 'fn'"):
        s.launch_host_func()
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        s.launch_host_func(3, 4)
    s.close()
    with pytest.raises(ValueError, match=r"launch_host_func\(\) on a closed custream.Stream"):
        s.launch_host_func(print)


@pytest.mark.skipif(HAS_DRIVER, reason="the no-driver path")
def test_without_a_driver_nothing_is_queued_and_nothing_is_kept():
    s = Stream.from_handle(0x1234)

    def fn(*args):
        pass

    arg = object()
    before = sys.getrefcount(fn), sys.getrefcount(arg)
    for _ in range(3):
        with pytest.raises(custream.CudaUnavailableError):
            s.launch_host_func(fn, arg)
    assert (sys.getrefcount(fn), sys.getrefcount(arg)) == before
    for call in (s.begin_capture, s.end_capture, lambda: s.is_capturing):
        with pytest.raises(custream.CudaUnavailableError):
            call()


# ---- against the stand-in driver ---------------------------------------------------------


@CAPTURE
def test_callbacks_run_in_order_behind_queued_work(kernel):
    s = Stream()
    ran = []
    kernel(s, 150)
    s.launch_host_func(lambda: ran.append(("first", threading.get_ident())))
    s.launch_host_func(ran.append, ("second", threading.get_ident()))
    with pytest.raises(TypeError, match="keyword arguments"):
        s.launch_host_func(print, "x", end="")
    assert ran == [] and s.query() is False, "launch_host_func must return at once"
    s.synchronize()
    assert [r[0] for r in ran] == ["first", "second"], ran
    assert ran[0][1] != threading.get_ident(), "ran on the caller's thread"


def hold_the_gil_in_the_driver(other, seconds):
    """Call into the driver with the GIL held for `seconds` (time is the point: the stand-in's
    host-function thread comes due meanwhile)."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        other.query()
        other.is_capturing


# The lock order that hung threaded programs (issue 23): the stand-in's host-function thread
# holds a lock of the driver's while it runs a host function, and query and is_capturing take
# that lock with the GIL held. A trampoline that waited there for the GIL deadlocked against
# this thread; custream's now hands the call to a thread of its own and returns. A hang dumps
# every thread's stack and fails (the marker's timeout), instead of hanging the run.
@pytest.mark.standin("capture.c", timeout=30)
def test_a_python_host_function_never_makes_the_driver_thread_wait_for_the_gil(kernel):
    s, other = Stream(), Stream()
    ran, replayed = [], []
    for i in range(100):
        kernel(s, 1)
        s.launch_host_func(ran.append, i)
        hold_the_gil_in_the_driver(other, 0.005)
    s.begin_capture()
    s.launch_host_func(replayed.append, "node")
    g = s.end_capture()
    for _ in range(20):
        g.launch(s)
        hold_the_gil_in_the_driver(other, 0.005)
    s.synchronize()
    assert ran == list(range(100)), ran[:5]
    assert replayed == ["node"] * 20, replayed
    g.close()


# The circle the H200 closed under issue 23's stress loop: CuPy loads a module (GIL released),
# which holds a lock of the driver's while it waits for the context's work; that work waits
# for a Python host function, which waits for the GIL; and a thread that records an event with
# the GIL held waits for the driver's lock. While a Python host function is outstanding,
# custream's record, wait and query let the GIL go.
@pytest.mark.standin("capture.c", timeout=30)
def test_a_record_never_holds_the_gil_while_the_gpu_waits_for_python(driver, kernel):
    driver.fake_module_load.argtypes = []
    s, other = Stream(), Stream()
    ran = []
    for i in range(20):
        kernel(s, 20)
        s.launch_host_func(ran.append, i)
        loader = threading.Thread(target=driver.fake_module_load)  # ctypes lets the GIL go
        loader.start()
        wait_until(lambda: driver.fake_module_loads() == i + 1, "the module load took the driver's lock")
        e = other.record()
        other.wait(e)
        other.query()
        e.close()
        loader.join()
    s.synchronize()
    assert ran == list(range(20)), ran


@CAPTURE
def test_fn_and_args_live_until_the_call_ran_and_no_longer(kernel):
    with Stream() as s:
        check_call_lifetime(s, lambda s: kernel(s, 100))


@CAPTURE
def test_an_exception_goes_to_the_unraisable_hook_naming_the_stream(monkeypatch):
    s = Stream()
    caught = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: caught.append((u.exc_type, str(u.exc_value), repr(u.object), u.object))
    )

    def boom(x):
        raise KeyError(x)

    s.launch_host_func(boom, "k")
    s.launch_host_func(lambda: 1 / 0)
    s.synchronize()
    assert [c[0] for c in caught] == [KeyError, ZeroDivisionError], caught
    r = caught[0][2]
    assert f"custream host function {boom!r}" in r and f"handle={s.handle:#x}" in r, r
    assert caught[0][3].stream == s.handle and caught[0][3].args == ("k",)
    s.launch_host_func(caught.append, "still works")
    s.synchronize()
    assert caught[-1] == "still works"


@pytest.mark.standin("capture.c", timeout=30)
def test_a_custream_call_inside_a_host_function_is_refused_not_deadlocked():
    s = Stream()
    errors = []

    def inside():
        for call in (s.synchronize, s.query, Stream, lambda: s.is_capturing, custream.Event):
            try:
                call()
            except custream.CudaError as e:
                errors.append((e.name, "inside a host function" in e.message))
            else:
                errors.append((call, "not refused"))

    s.launch_host_func(inside)
    s.synchronize()
    assert errors == [("CUDA_ERROR_NOT_PERMITTED", True)] * 5, errors
    # Other threads are not affected while a host function runs, and this one no longer is.
    assert s.query() is True


@CAPTURE
def test_an_object_released_by_a_host_function_is_destroyed_later_off_the_driver_thread(driver, kernel):
    s = Stream()
    start = driver.fake_destroyed()
    victim = Stream()
    kernel(s, 100)  # the call runs after `del victim`: its release is the last one
    s.launch_host_func(lambda v: None, victim)
    del victim
    count = custream.live_stream_count()
    s.synchronize()
    assert custream.live_stream_count() == count - 1
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        # Free-threaded: the host function's thread does not own `victim`, so CPython may
        # hand its last reference to the main thread (biased reference counting), which
        # deallocates it outside any host function and releases it at once.
        assert driver.fake_destroyed() in (start, start + 1)
    else:
        assert driver.fake_destroyed() == start  # deferred: no CUDA call inside a host function
    Stream().close()  # the next release makes it
    assert driver.fake_destroyed() == start + 2
    assert driver.fake_destroyed_in_host_fn() == 0


@CAPTURE
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_with_callbacks_pending_and_one_running(kernel):
    import warnings

    s = Stream()
    ran = []
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(30)  # running while the process forks
        ran.append("slow")

    kernel(s, 50)
    s.launch_host_func(slow)
    s.launch_host_func(ran.append, "after")
    assert started.wait(10), "the host function never started"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:
        # The child: no driver thread came along. Nothing runs, nothing crashes.
        code = 3
        try:
            s.synchronize()
        except custream.CudaError as e:
            code = 7 if e.name == "CUDA_ERROR_NOT_INITIALIZED" and ran == [] else 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    release.set()
    s.synchronize()
    assert ran == ["slow", "after"], ran


# ---- a fresh interpreter's exit --------------------------------------------------------------


@pytest.fixture(scope="module")
def capture_lib(tmp_path_factory):
    return standin.build("capture.c", tmp_path_factory.mktemp("capture-libcuda"))


PRELUDE = """
import threading, time
from custream import Stream
standin.fake_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int]
"""


@pytest.mark.parametrize("kernel_ms", [0, 5, 30, 200])
def test_exit_with_callbacks_queued_behind_work(capture_lib, kernel_ms, tmp_path):
    # The stand-in runs what is still queued when the process exits, after the interpreter
    # finalized (a driver may): those calls must be dropped, never touching Python.
    mark = tmp_path / "ran"
    out = standin.script(capture_lib, PRELUDE + f"""
s = Stream()
standin.fake_kernel(s.handle, {kernel_ms})
for i in range(20):
    s.launch_host_func(lambda i=i: open({str(mark)!r}, "a").write(f"{{i}} "))
print("exiting")
""")
    assert out.stderr == "" and out.stdout.strip() == "exiting"
    ran = mark.read_text().split() if mark.exists() else []
    assert ran == [str(i) for i in range(len(ran))], "calls ran out of order"


def test_exit_waits_for_a_callback_inside_python(capture_lib, tmp_path):
    # The main thread exits once the host function is inside Python (an event: custream's
    # host-function thread may be slow to start); the function goes on only once the exit has
    # begun (an atexit hook registered after custream's runs before it), and exit must wait
    # for it to finish.
    mark = tmp_path / "done"
    out = standin.script(capture_lib, PRELUDE + f"""
import atexit
s = Stream()
started, exiting = threading.Event(), threading.Event()
def slow():
    started.set()
    went_on = exiting.wait(10)
    open({str(mark)!r}, "w").write("done" if went_on else "the exit never began")
s.launch_host_func(slow)
assert started.wait(10), "the host function never started"
atexit.register(exiting.set)
""")
    assert out.stderr == ""
    assert mark.read_text() == "done"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_exits_without_waiting_for_the_parents_callback(capture_lib):
    # The child's interpreter exit is the point: a fresh interpreter, where the forked child
    # may run its own exit (a test's pytest process could not).
    out = standin.script(capture_lib, PRELUDE + """
import os, warnings
warnings.simplefilter("ignore", DeprecationWarning)
s = Stream()
ran = []
started, release = threading.Event(), threading.Event()
def slow():
    started.set()
    release.wait(30)
    ran.append("slow")
s.launch_host_func(slow)
assert started.wait(10)
pid = os.fork()
if pid == 0:
    try:
        s.synchronize()
    except custream.CudaError as e:
        assert e.name == "CUDA_ERROR_NOT_INITIALIZED", e
    sys.exit(7)  # with a callback of the parent's running: the exit does not wait for it
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 7
release.set()
s.synchronize()
assert ran == ["slow"], ran
print("ok")
""", timeout=30)
    assert out.stdout.strip() == "ok"
