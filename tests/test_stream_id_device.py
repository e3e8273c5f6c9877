"""Stream.id (cuStreamGetId) and Stream.device of wrapped streams, on the CPU against the
stand-in driver (tests/standin/libcuda.c models both entry points); tests/gpu/ checks them
against the real driver."""

import ctypes
import threading

import pytest

import custream
from _capi_ctypes import capi

# In a pytest process of its own against tests/standin/libcuda.c (tests/conftest.py).
STANDIN = pytest.mark.standin("libcuda.c")


def test_a_closed_stream_refuses_its_id_before_any_driver_call():
    s = custream.Stream.from_handle(0x1234, device=2)
    s.close()
    with pytest.raises(ValueError, match="^id on a closed custream.Stream$"):
        s.id
    assert s.device == 2  # given when wrapping: still answers


@pytest.mark.skipif(custream.is_available(), reason="a CUDA driver is present")
def test_without_a_driver_the_id_is_cuda_unavailable():
    with pytest.raises(custream.CudaUnavailableError):
        custream.Stream.from_handle(0x1234).id


@STANDIN
def test_the_id_is_the_drivers_asked_once_and_the_same_for_every_wrapper(driver):
    a, b = custream.Stream(), custream.Stream()
    assert isinstance(a.id, int) and a.id != b.id
    calls = driver.standin_id_calls()
    assert a.id == a.id and driver.standin_id_calls() == calls  # kept in the object
    w = custream.Stream.from_handle(a.handle)
    assert w.id == a.id and custream.as_stream(w).id == a.id
    out = ctypes.c_ulonglong()
    assert capi().stream_id(b, ctypes.byref(out)) == 0 and out.value == b.id
    # A default stream's id is its current context's, asked every time.
    before = driver.standin_id_calls()
    ids = {custream.DEFAULT_STREAM.id, custream.DEFAULT_STREAM.id}
    assert len(ids) == 1 and driver.standin_id_calls() == before + 2
    assert custream.PER_THREAD_DEFAULT_STREAM.id != custream.DEFAULT_STREAM.id
    a.close()
    with pytest.raises(ValueError, match="^id on a closed custream.Stream$"):
        a.id


@STANDIN
def test_threads_learning_an_id_at_once_agree():
    s = custream.Stream()
    for _ in range(20):
        w = custream.Stream.from_handle(s.handle)
        barrier = threading.Barrier(8)
        seen = []

        def read():
            barrier.wait()
            seen.append((w.id, w.device))

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(seen) == {(s.id, 0)}, seen


@STANDIN
def test_a_wrapped_streams_device_comes_from_cuStreamGetDevice(driver):
    s = custream.Stream()
    w = custream.Stream.from_handle(s.handle)
    assert "device" not in repr(w)
    pushes, calls = driver.standin_pushes(), driver.standin_device_calls()
    assert w.device == 0 and w.device == 0
    assert driver.standin_device_calls() == calls + 1  # once, kept
    assert driver.standin_pushes() == pushes  # no context made current, even for the call
    assert "device=0" in repr(w)
    out = ctypes.c_int(-5)
    v = custream.Stream.from_handle(s.handle)
    assert capi().stream_device(v, ctypes.byref(out)) == 0 and out.value == 0


# A stand-in driver without cuStreamGetDevice (CUDA 12.0 to 12.7), with two devices.
@pytest.mark.standin("libcuda.c", "-DSTANDIN_NO_STREAM_GET_DEVICE", omit=("cuStreamGetDevice",),
                     env={"STANDIN_DEVICES": "2"})
def test_without_cuStreamGetDevice_the_streams_context_answers(driver):
    s = custream.Stream(device=1)
    w = custream.Stream.from_handle(s.handle)
    current = ctypes.c_void_p()
    driver.cuCtxGetCurrent(ctypes.byref(current))
    pushes = driver.standin_pushes()
    assert w.device == 1
    assert driver.standin_pushes() == pushes + 1  # the context, current for the call only
    after = ctypes.c_void_p()
    driver.cuCtxGetCurrent(ctypes.byref(after))
    assert after.value == current.value  # the thread's current context as it was
    assert w.device == 1 and driver.standin_pushes() == pushes + 1
