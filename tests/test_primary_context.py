"""custream's retains of a device's primary context and the default streams' rule for a
thread with no current context, on the CPU against the stand-in driver (tests/standin), which
counts retains, pushes and live streams; each test in a pytest process of its own
(tests/conftest.py). tests/gpu/ checks the same on a device."""

import ctypes

import pytest

import custream

STANDIN = pytest.mark.standin("libcuda.c")


@STANDIN
def test_closing_the_last_stream_keeps_the_primary_context(driver):
    assert driver.standin_primary_retains() == 0
    s = custream.Stream()
    assert driver.standin_primary_retains() == 2  # the stream's, and the process's
    s.close()
    assert driver.standin_primary_retains() == 1, "closing the last stream released the context"
    for _ in range(100):
        custream.Stream().close()
    # Left alive: the notifiers the context got with its first stream (custream's, for its waits).
    assert driver.standin_primary_retains() == 1
    assert driver.standin_live_streams() == custream._custream._notifier_streams()
    custream._custream._finalize()  # what atexit runs
    assert driver.standin_primary_retains() == 0


@STANDIN
def test_a_reset_by_another_library_leaves_new_streams_working(driver):
    old = custream.Stream()
    driver.standin_reset_primary()
    new = custream.Stream()
    new.synchronize()
    with pytest.raises(custream.CudaError) as e:
        old.synchronize()
    assert e.value.name == "CUDA_ERROR_CONTEXT_IS_DESTROYED"
    old.close(), new.close()


@STANDIN
def test_default_streams_without_a_current_context_use_device_0_for_the_call_only(driver):
    def current():
        c = ctypes.c_void_p()
        driver.cuCtxGetCurrent(ctypes.byref(c))
        return c.value

    def use_all():
        for s in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM):
            before = driver.standin_pushes()
            s.synchronize()
            assert s.query() is True and s.device == 0
            assert driver.standin_pushes() > before  # device 0's primary context, pushed...
            assert current() is None  # ...and popped: nothing is left current
        ev = custream.DEFAULT_STREAM.record()
        custream.LEGACY_DEFAULT_STREAM.wait(ev)
        custream.PER_THREAD_DEFAULT_STREAM.wait(custream.DEFAULT_STREAM)
        ev.close()

    from _threads import run_threads

    run_threads(lambda k: use_all(), n=1)  # on a thread of its own (its failure is reported)
    use_all()
    assert driver.standin_live_events() == 0
