"""Host functions and graph capture without a GPU.

In this process (no driver here): argument checks, refusals, and the no-driver path.

In subprocesses against a stand-in libcuda (tests/standin/capture.c, built here with the C
compiler): custream's side of the contract, which needs a driver to run at all. The stand-in
runs no GPU work; it queues host functions on a thread of its own behind "kernels" that
sleep, keeps capture state, and invalidates a capture on the calls CUDA forbids during one,
so these tests see whether custream ever makes such a call. tests/gpu/test_gpu_capture.py
checks the same against the real driver.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import custream
import standin
from custream import Stream

TESTS = Path(__file__).resolve().parent
HAS_DRIVER = custream.is_available()


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


def test_begin_capture_checks_the_mode():
    s = Stream.from_handle(0x1234)
    with pytest.raises(ValueError, match="mode must be 'thread_local', 'global' or 'relaxed', got 'local'"):
        s.begin_capture("local")
    with pytest.raises(TypeError, match="mode must be a str, got int"):
        s.begin_capture(mode=1)
    with pytest.raises(TypeError, match="begin_capture.. got an unexpected keyword argument 'how'"):
        s.begin_capture(how="global")
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        s.begin_capture("global", "relaxed")
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.begin_capture()
    with pytest.raises(ValueError, match="closed"):
        s.end_capture()
    with pytest.raises(ValueError, match="closed"):
        s.is_capturing


def test_graph_cannot_be_made_directly():
    # Refusing to pickle one needs a Graph, which needs a capture: that is
    # test_events_pools_and_graphs_refuse_pickling_by_name, against the stand-in driver.
    with pytest.raises(TypeError):
        custream.Graph()
    assert custream.Graph.__module__ == "custream"
    assert "launch" in custream.Graph.__dict__ and "upload" in custream.Graph.__dict__


def test_foreign_capture_checks_are_off_by_default_and_switch():
    assert custream.check_foreign_captures() is False
    try:
        assert custream.check_foreign_captures(True) is False
        assert custream.check_foreign_captures() is True
        assert custream.check_foreign_captures(False) is True
    finally:
        custream.check_foreign_captures(False)
    with pytest.raises(TypeError, match="enabled must be True or False"):
        custream.check_foreign_captures(1)


def test_the_capture_names_are_exported():
    for name in ("Graph", "check_foreign_captures"):
        assert name in custream.__all__ and hasattr(custream, name)
    for name in ("launch_host_func", "begin_capture", "end_capture", "is_capturing"):
        assert hasattr(Stream, name), name


# ---- against the stand-in driver ---------------------------------------------------------


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return standin.build("capture.c", tmp_path_factory.mktemp("fake-libcuda"))


PRELUDE = textwrap.dedent(
    """
    import ctypes, gc, os, sys, sysconfig, threading, time, weakref
    import custream
    from custream import Stream
    fake = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
    fake.fake_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int]
    fake.fake_foreign_begin.argtypes = [ctypes.c_void_p, ctypes.c_int]
    from custream_capture_checks import check_call_lifetime, refused
    def kernel(s, ms):
        fake.fake_kernel(s.handle, ms)
    def wait_for(cond, what, timeout=10):
        end = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < end, what
            time.sleep(0.005)
    """
)


def run(fake, body, timeout=60, check_exit=True):
    path = os.pathsep.join(filter(None, [str(TESTS / "gpu"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(fake), PYTHONPATH=path)
    script = PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert "panicked" not in out.stderr and "Fatal Python error" not in out.stderr, out.stderr
    if check_exit:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_callbacks_run_in_order_behind_queued_work(fake):
    out = run(fake, """
        s = Stream()
        ran = []
        kernel(s, 150)
        s.launch_host_func(lambda: ran.append(("first", threading.get_ident())))
        s.launch_host_func(ran.append, ("second", threading.get_ident()))
        assert "keyword arguments" in str(refused(lambda: s.launch_host_func(print, "x", end=""), TypeError))
        assert ran == [] and s.query() is False, "launch_host_func must return at once"
        s.synchronize()
        assert [r[0] for r in ran] == ["first", "second"], ran
        assert ran[0][1] != threading.get_ident(), "ran on the caller's thread"
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


# The lock order that hung threaded programs (issue 23): the stand-in's host-function thread
# holds a lock of the driver's while it runs a host function, and query and is_capturing take
# that lock with the GIL held. A trampoline that waited there for the GIL deadlocked against
# this thread; custream's now hands the call to a thread of its own and returns. A hang dumps
# every thread's stack and fails (faulthandler), instead of hanging the run.
def test_a_python_host_function_never_makes_the_driver_thread_wait_for_the_gil(fake):
    out = run(fake, """
        import faulthandler
        faulthandler.dump_traceback_later(30, exit=True)
        s, other = Stream(), Stream()
        ran, replayed = [], []

        def hold_the_gil_in_the_driver(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                other.query()
                other.is_capturing

        for i in range(100):
            kernel(s, 1)
            s.launch_host_func(ran.append, i)
            hold_the_gil_in_the_driver(0.005)
        s.begin_capture()
        s.launch_host_func(replayed.append, "node")
        g = s.end_capture()
        for _ in range(20):
            g.launch(s)
            hold_the_gil_in_the_driver(0.005)
        s.synchronize()
        assert ran == list(range(100)), ran[:5]
        assert replayed == ["node"] * 20, replayed
        g.close()
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


# The circle the H200 closed under issue 23's stress loop: CuPy loads a module (GIL released),
# which holds a lock of the driver's while it waits for the context's work; that work waits
# for a Python host function, which waits for the GIL; and a thread that records an event with
# the GIL held waits for the driver's lock. While a Python host function is outstanding,
# custream's record, wait and query let the GIL go.
def test_a_record_never_holds_the_gil_while_the_gpu_waits_for_python(fake):
    out = run(fake, """
        import faulthandler
        faulthandler.dump_traceback_later(30, exit=True)
        fake.fake_module_load.argtypes = []
        s, other = Stream(), Stream()
        ran = []
        for i in range(20):
            kernel(s, 20)
            s.launch_host_func(ran.append, i)
            loader = threading.Thread(target=fake.fake_module_load)  # ctypes lets the GIL go
            loader.start()
            time.sleep(0.002)
            e = other.record()
            other.wait(e)
            other.query()
            e.close()
            loader.join()
        s.synchronize()
        assert ran == list(range(20)), ran
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_the_first_host_function_of_a_process_can_be_queued_in_a_capture(fake, mode):
    # Its flag's page is registered with the driver then, a call CUDA takes as unsafe in a
    # global or thread_local capture: custream makes it relaxed, so the capture stays valid.
    out = run(fake, f"""
        s = Stream()
        seen = []
        s.begin_capture({mode!r})
        s.launch_host_func(seen.append, "node")
        g = s.end_capture()
        assert fake.fake_invalidations() == 0 and g.node_count == 3
        g.launch(s)
        g.launch(s)
        s.synchronize()
        assert seen == ["node", "node"], seen
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


def test_fn_and_args_live_until_the_call_ran_and_no_longer(fake):
    run(fake, """
        with Stream() as s:
            check_call_lifetime(s, lambda s: kernel(s, 100))
    """)


def test_an_exception_goes_to_the_unraisable_hook_naming_the_stream(fake):
    run(fake, """
        s = Stream()
        caught = []
        sys.unraisablehook = lambda u: caught.append((u.exc_type, str(u.exc_value), repr(u.object), u.object))
        def boom(x):
            raise KeyError(x)
        s.launch_host_func(boom, "k")
        s.launch_host_func(lambda: 1 / 0)
        s.synchronize()
        assert [c[0] for c in caught] == [KeyError, ZeroDivisionError], caught
        r = caught[0][2]
        assert "custream host function <function boom" in r and f"handle={s.handle:#x}" in r, r
        assert caught[0][3].stream == s.handle and caught[0][3].args == ("k",)
        s.launch_host_func(caught.append, "still works")
        s.synchronize()
        assert caught[-1] == "still works"
    """)


def test_a_custream_call_inside_a_host_function_is_refused_not_deadlocked(fake):
    run(fake, """
        s = Stream()
        errors = []
        def inside():
            for call in (s.synchronize, s.query, Stream, lambda: s.is_capturing, custream.Event):
                e = refused(call, custream.CudaError)
                errors.append((e.name, "inside a host function" in e.message))
        s.launch_host_func(inside)
        s.synchronize()
        assert errors == [("CUDA_ERROR_NOT_PERMITTED", True)] * 5, errors
        # Other threads are not affected while a host function runs, and this one no longer is.
        assert s.query() is True
    """, timeout=30)


def test_an_object_released_by_a_host_function_is_destroyed_later_off_the_driver_thread(fake):
    run(fake, """
        s = Stream()
        start = fake.fake_destroyed()
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
            assert fake.fake_destroyed() in (start, start + 1)
        else:
            assert fake.fake_destroyed() == start  # deferred: no CUDA call inside a host function
        Stream().close()  # the next release makes it
        assert fake.fake_destroyed() == start + 2
        assert fake.fake_destroyed_in_host_fn() == 0
    """)


@pytest.mark.parametrize("kernel_ms", [0, 5, 30, 200])
def test_exit_with_callbacks_queued_behind_work(fake, kernel_ms, tmp_path):
    # The stand-in runs what is still queued when the process exits, after the interpreter
    # finalized (a driver may): those calls must be dropped, never touching Python.
    mark = tmp_path / "ran"
    out = run(fake, f"""
        s = Stream()
        kernel(s, {kernel_ms})
        for i in range(20):
            s.launch_host_func(lambda i=i: open({str(mark)!r}, "a").write(f"{{i}} "))
        print("exiting")
    """)
    assert out.stderr == "" and out.stdout.strip() == "exiting"
    ran = mark.read_text().split() if mark.exists() else []
    assert ran == [str(i) for i in range(len(ran))], "calls ran out of order"


def test_exit_waits_for_a_callback_inside_python(fake, tmp_path):
    # The main thread exits once the host function is inside Python (an event, not a sleep:
    # custream's host-function thread may be slow to start); exit must wait for it to finish.
    mark = tmp_path / "done"
    out = run(fake, f"""
        s = Stream()
        started = threading.Event()
        def slow():
            started.set()
            time.sleep(0.3)
            open({str(mark)!r}, "w").write("done")
        s.launch_host_func(slow)
        assert started.wait(10), "the host function never started"
    """)
    assert out.stderr == ""
    assert mark.read_text() == "done"


def test_events_pools_and_graphs_refuse_pickling_by_name(fake):
    run(fake, """
        import copy, pickle
        s = Stream()
        s.begin_capture()
        g = s.end_capture()
        objects = {
            "Event": (custream.Event(), "a CUDA event belongs to one process"),
            "StreamPool": (custream.StreamPool(2), "CUDA streams belong to one process"),
            "Graph": (g, "a CUDA graph belongs to one process"),
        }
        for name, (obj, why) in objects.items():
            for dump in (pickle.dumps, copy.copy):
                try:
                    dump(obj)
                except TypeError as e:
                    assert str(e) == f"cannot pickle {name}: {why}", str(e)
                else:
                    raise AssertionError(f"{dump.__name__} of {name} did not raise")
    """)


@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_closing_a_stream_mid_capture_ends_the_capture_and_releases_it(fake, mode):
    run(fake, f"""
        s, side, other = Stream(), Stream(), Stream()
        class Fn:
            def __call__(self): pass
        fn = Fn()
        alive = weakref.ref(fn)
        s.begin_capture({mode!r})
        side.wait(s.record())  # joined into it
        side.close()  # a joined stream leaves the capture: s's stays as it was
        assert "custream capture #" in refused(s.query, custream.CudaError).message
        s.launch_host_func(fn)
        del fn
        s.close()
        assert fake.fake_invalidations() == 0
        wait_for(lambda: (gc.collect(), alive() is None)[1], "a closed stream's capture kept its host function")
        before = fake.fake_exchanges()
        assert other.query() is True
        other.synchronize()
        assert fake.fake_exchanges() == before, "no custream capture is open any more: no mode exchange"
    """)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_with_callbacks_pending_and_one_running(fake):
    out = run(fake, """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        s = Stream()
        ran = []
        started = threading.Event()
        def slow():
            started.set()
            time.sleep(0.3)
            ran.append("slow")
        kernel(s, 50)
        s.launch_host_func(slow)
        s.launch_host_func(ran.append, "after")
        assert started.wait(5)
        pid = os.fork()
        if pid == 0:
            # The child: no driver thread came along. Nothing runs, nothing crashes, and its
            # interpreter exits without waiting for the parent's callback.
            assert refused(s.synchronize, custream.CudaError).name == "CUDA_ERROR_NOT_INITIALIZED"
            assert ran == []
            sys.exit(7)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 7
        s.synchronize()
        assert ran == ["slow", "after"], ran
        print("ok")
    """, timeout=30)
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_capture_refuses_what_would_invalidate_it(fake, mode):
    run(fake, f"""
        s = Stream()
        assert s.is_capturing is False
        s.begin_capture({mode!r})
        assert s.is_capturing is True
        for call in (s.query, s.synchronize):
            e = refused(call, custream.CudaError)
            assert e.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", e.name
            assert "custream capture #" in e.message and "'{mode}' mode" in e.message, e.message
            assert "the capture is still valid" in e.message
        # Another stream is usable meanwhile, in every mode.
        other = Stream()
        assert other.query() is True
        other.synchronize()
        kernel(s, 1)
        g = s.end_capture()
        assert fake.fake_invalidations() == 0
        assert s.is_capturing is False and s.query() is True
        assert type(g) is custream.Graph and g.node_count == 1 and g.device == 0
        assert "custream.Graph" in repr(g) and "nodes=1" in repr(g)
        g.launch(s)
        g.upload(other)
        g.close()
        g.close()
        assert g.closed and "closed" in repr(g)
        assert "closed custream.Graph" in str(refused(lambda: g.launch(s), ValueError))
    """)


def test_calls_on_other_streams_during_a_global_capture_run_relaxed(fake):
    run(fake, """
        s, other = Stream(), Stream()
        before = fake.fake_exchanges()
        assert other.query() is True
        assert fake.fake_exchanges() == before, "no capture open: no mode exchange"
        s.begin_capture("global")
        assert other.query() is True
        other.synchronize()
        assert fake.fake_exchanges() == before + 4  # set and restore, twice
        s.end_capture()
        assert fake.fake_invalidations() == 0
    """)


def test_a_capture_begun_by_another_library(fake):
    run(fake, """
        s = Stream()
        assert fake.fake_foreign_begin(s.handle, 1) == 0
        assert s.is_capturing is True
        # Checked only when asked: by default query() costs what it did, and the driver
        # invalidates the foreign capture, as it would for any library's call.
        assert custream.check_foreign_captures(True) is False
        e = refused(s.query, custream.CudaError)
        assert e.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" and "begun outside custream" in e.message, e
        assert fake.fake_invalidations() == 0
        g = s.end_capture()  # custream may end it: the graph is the same
        assert g.node_count == 0
        custream.check_foreign_captures(False)
        fake.fake_foreign_begin(s.handle, 1)
        refused(s.query, custream.CudaError)  # the driver's own refusal
        assert fake.fake_invalidations() == 1
        assert refused(s.end_capture, custream.CudaError).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
        assert s.is_capturing is False
    """)


def test_events_in_a_capture_fork_and_join_and_refuse_queries(fake):
    run(fake, """
        s, side = Stream(), Stream()
        s.begin_capture()
        ev = s.record()
        for call in (ev.synchronize, ev.query):
            e = refused(call, custream.CudaError)
            assert e.name == "CUDA_ERROR_CAPTURED_EVENT", e.name
            assert "custream capture #" in e.message and "still valid" in e.message
        side.wait(ev)  # forks `side` into the capture
        assert side.is_capturing is True
        assert "joined through wait() into the capture" in refused(side.synchronize, custream.CudaError).message
        ran = []
        side.launch_host_func(ran.append, "side")
        s.wait(side.record())  # joins it back
        s.launch_host_func(ran.append, "main")
        g = s.end_capture()
        assert fake.fake_invalidations() == 0 and g.node_count == 6  # a Python host function is 3 nodes
        assert side.is_capturing is False
        ev.synchronize()  # the capture is over: custream no longer refuses (the driver answers)
        g.launch(s)
        s.synchronize()
        assert ran == ["side", "main"], ran
    """)


def test_host_functions_in_a_capture_run_at_each_launch_and_live_with_the_graph(fake):
    run(fake, """
        s = Stream()
        class Counter:
            n = 0
            def __call__(self, step):
                self.n += step
        counter = Counter()
        alive = weakref.ref(counter)
        s.begin_capture("relaxed")
        s.launch_host_func(counter, 1)
        g = s.end_capture()
        del counter
        gc.collect()
        for _ in range(3):
            g.launch(s)
        s.synchronize()
        assert alive() is not None and alive().n == 3
        g.close()  # the payload goes with the graph's last executable and its launches
        wait_for(lambda: (gc.collect(), alive() is None)[1], "the graph's host function outlived it")
    """)


def test_an_invalidated_capture_releases_its_host_functions(fake):
    run(fake, """
        s = Stream()
        class Fn:
            def __call__(self): pass
        fn = Fn()
        alive = weakref.ref(fn)
        s.begin_capture("global")
        s.launch_host_func(fn)
        del fn
        lib = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
        lib.cuStreamQuery(ctypes.c_void_p(s.handle))  # another library's forbidden call
        assert refused(s.end_capture, custream.CudaError).name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
        wait_for(lambda: (gc.collect(), alive() is None)[1], "an invalidated capture kept its host function")
        assert s.is_capturing is False and s.query() is True
    """)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_graph_in_a_forked_child(fake):
    run(fake, """
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        s = Stream()
        s.begin_capture()
        g = s.end_capture()
        pid = os.fork()
        if pid == 0:
            if refused(lambda: g.launch(s), custream.CudaError).name != "CUDA_ERROR_NOT_INITIALIZED":
                os._exit(3)
            g.close()
            del g
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        g.launch(s)
        g.close()
    """)


def test_launch_accepts_any_protocol_stream(fake):
    run(fake, """
        s = Stream()
        s.begin_capture()
        g = s.end_capture()
        class Producer:
            def __cuda_stream__(self):
                return (0, s.handle)
        g.launch(Producer())
        assert "__cuda_stream__" in str(refused(lambda: g.launch(42), TypeError))
        with g:
            pass
        assert g.closed
    """)


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_a_pool_makes_its_streams_in_a_capture_without_breaking_it(fake, mode):
    # Made on first use, so maybe inside a capture on this thread: custream makes them with the
    # thread's capture mode relaxed (the stand-in, made strict, takes a stream made otherwise as
    # unsafe, as the driver may).
    out = run(fake, f"""
        fake.fake_strict_stream_create(1)
        s = Stream()
        pool = custream.StreamPool(2, priorities=(0, -1))
        s.begin_capture({mode!r})
        a = pool.get(priority=-1)
        with pool.lease() as b:
            assert a is not b
        assert fake.fake_invalidations() == 0
        g = s.end_capture()
        assert fake.fake_invalidations() == 0
        try:
            Stream()  # the model at work: a stream made unrelaxed during a capture breaks it
        except custream.CudaError:
            pass
        s.begin_capture({mode!r})
        try:
            Stream()
        except custream.CudaError as e:
            print(e.name)
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")
    assert "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" in out.stdout
