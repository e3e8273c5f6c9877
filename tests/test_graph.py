"""Graph capture (``begin_capture``, ``end_capture``, ``is_capturing``) and ``custream.Graph``
without a GPU.

In this process (no driver here): argument checks and refusals.

Against the stand-in libcuda tests/standin/capture.c (``@pytest.mark.standin``: each test in
a pytest process of its own, tests/conftest.py): the stand-in keeps capture state and
invalidates a capture on the calls CUDA forbids during one, so these tests see whether
custream ever makes such a call. tests/gpu/test_gpu_capture.py checks the same against the
real driver.
"""

import copy
import ctypes
import gc
import os
import pickle
import weakref

import pytest

import custream
from _host_function_checks import released, watched_function
from _threads import wait_until
from custream import Stream

CAPTURE = pytest.mark.standin("capture.c")
MODES = ["thread_local", "global", "relaxed"]


# ---- in this process ---------------------------------------------------------------------


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


@pytest.fixture
def fake(driver):
    """capture.c, with what these tests call on it typed."""
    driver.fake_foreign_begin.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return driver


@CAPTURE
@pytest.mark.parametrize("mode", MODES)
def test_the_first_host_function_of_a_process_can_be_queued_in_a_capture(fake, mode):
    # Its flag's page is registered with the driver then, a call CUDA takes as unsafe in a
    # global or thread_local capture: custream makes it relaxed, so the capture stays valid.
    # (The first of its process: this test has a pytest process of its own.)
    s = Stream()
    seen = []
    s.begin_capture(mode)
    s.launch_host_func(seen.append, "node")
    g = s.end_capture()
    assert fake.fake_invalidations() == 0 and g.node_count == 3
    g.launch(s)
    g.launch(s)
    s.synchronize()
    assert seen == ["node", "node"], seen


@CAPTURE
def test_events_pools_and_graphs_refuse_pickling_by_name():
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
            with pytest.raises(TypeError) as e:
                dump(obj)
            assert str(e.value) == f"cannot pickle {name}: {why}"


@CAPTURE
@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_closing_a_stream_mid_capture_ends_the_capture_and_releases_it(fake, mode):
    s, side, other = Stream(), Stream(), Stream()
    fn, alive = watched_function()
    s.begin_capture(mode)
    side.wait(s.record())  # joined into it
    side.close()  # a joined stream leaves the capture: s's stays as it was
    with pytest.raises(custream.CudaError, match="custream capture #"):
        s.query()
    s.launch_host_func(fn)
    del fn
    s.close()
    assert fake.fake_invalidations() == 0
    wait_until(lambda: released(alive), "a closed stream's capture let its host function go")
    before = fake.fake_exchanges()
    assert other.query() is True
    other.synchronize()
    assert fake.fake_exchanges() == before, "no custream capture is open any more: no mode exchange"


@CAPTURE
@pytest.mark.parametrize("mode", MODES)
def test_capture_refuses_what_would_invalidate_it(fake, kernel, mode):
    s = Stream()
    assert s.is_capturing is False
    s.begin_capture(mode)
    assert s.is_capturing is True
    for call in (s.query, s.synchronize):
        with pytest.raises(custream.CudaError) as e:
            call()
        assert e.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", e.value.name
        assert "custream capture #" in e.value.message and f"'{mode}' mode" in e.value.message, e.value.message
        assert "the capture is still valid" in e.value.message
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
    with pytest.raises(ValueError, match="closed custream.Graph"):
        g.launch(s)


@CAPTURE
def test_calls_on_other_streams_during_a_global_capture_run_relaxed(fake):
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


@CAPTURE
def test_a_capture_begun_by_another_library(fake):
    s = Stream()
    assert fake.fake_foreign_begin(s.handle, 1) == 0
    assert s.is_capturing is True
    # Checked only when asked: by default query() costs what it did, and the driver
    # invalidates the foreign capture, as it would for any library's call.
    assert custream.check_foreign_captures(True) is False
    with pytest.raises(custream.CudaError) as e:
        s.query()
    assert e.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" and "begun outside custream" in e.value.message
    assert fake.fake_invalidations() == 0
    g = s.end_capture()  # custream may end it: the graph is the same
    assert g.node_count == 0
    custream.check_foreign_captures(False)
    fake.fake_foreign_begin(s.handle, 1)
    with pytest.raises(custream.CudaError):
        s.query()  # the driver's own refusal
    assert fake.fake_invalidations() == 1
    with pytest.raises(custream.CudaError) as e:
        s.end_capture()
    assert e.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert s.is_capturing is False


@CAPTURE
def test_events_in_a_capture_fork_and_join_and_refuse_queries(fake):
    s, side = Stream(), Stream()
    s.begin_capture()
    ev = s.record()
    for call in (ev.synchronize, ev.query):
        with pytest.raises(custream.CudaError) as e:
            call()
        assert e.value.name == "CUDA_ERROR_CAPTURED_EVENT", e.value.name
        assert "custream capture #" in e.value.message and "still valid" in e.value.message
    side.wait(ev)  # forks `side` into the capture
    assert side.is_capturing is True
    with pytest.raises(custream.CudaError, match="joined through wait.. into the capture"):
        side.synchronize()
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


@CAPTURE
def test_host_functions_in_a_capture_run_at_each_launch_and_live_with_the_graph():
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
    wait_until(lambda: released(alive), "the graph's host function went with it")


@CAPTURE
def test_an_invalidated_capture_releases_its_host_functions(fake):
    s = Stream()
    fn, alive = watched_function()
    s.begin_capture("global")
    s.launch_host_func(fn)
    del fn
    fake.cuStreamQuery(ctypes.c_void_p(s.handle))  # another library's forbidden call
    with pytest.raises(custream.CudaError) as e:
        s.end_capture()
    assert e.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    wait_until(lambda: released(alive), "an invalidated capture let its host function go")
    assert s.is_capturing is False and s.query() is True


@CAPTURE
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_graph_in_a_forked_child():
    import warnings

    s = Stream()
    s.begin_capture()
    g = s.end_capture()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:
        try:
            g.launch(s)
            os._exit(2)
        except custream.CudaError as e:
            if e.name != "CUDA_ERROR_NOT_INITIALIZED":
                os._exit(3)
        g.close()
        del g
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    g.launch(s)
    g.close()


@CAPTURE
def test_launch_accepts_any_protocol_stream():
    s = Stream()
    s.begin_capture()
    g = s.end_capture()

    class Producer:
        def __cuda_stream__(self):
            return (0, s.handle)

    g.launch(Producer())
    with pytest.raises(TypeError, match="__cuda_stream__"):
        g.launch(42)
    with g:
        pass
    assert g.closed


@CAPTURE
@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_a_pool_makes_its_streams_in_a_capture_without_breaking_it(fake, mode):
    # Made on first use, so maybe inside a capture on this thread: custream makes them with the
    # thread's capture mode relaxed (the stand-in, made strict, takes a stream made otherwise as
    # unsafe, as the driver may).
    fake.fake_strict_stream_create(1)
    s = Stream()
    pool = custream.StreamPool(2, priorities=(0, -1))
    s.begin_capture(mode)
    a = pool.get(priority=-1)
    with pool.lease() as b:
        assert a is not b
    assert fake.fake_invalidations() == 0
    s.end_capture()
    assert fake.fake_invalidations() == 0
    # The model at work: a stream made unrelaxed during a capture breaks it.
    s.begin_capture(mode)
    with pytest.raises(custream.CudaError) as e:
        Stream()
    assert e.value.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
