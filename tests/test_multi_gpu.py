"""Multi-GPU behaviour (issue 7). Needs two devices; with fewer each test skips with the reason.

Ordering is proven with real work: a spin kernel on one device, an event, and a read on
the other device that must see the kernel's result.
"""

import threading

import pytest

import custream

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def two_devices():
    if not custream.is_available() or custream.device_count() < 2:
        n = custream.device_count() if custream.is_available() else 0
        pytest.skip(f"needs 2 CUDA devices, this machine has {n}")


@pytest.fixture
def driver():
    return pytest.importorskip("cuda.bindings.driver")


def current_context(driver):
    err, ctx = driver.cuCtxGetCurrent()
    assert err == driver.CUresult.CUDA_SUCCESS
    return int(ctx) if ctx is not None else 0


def primary_context(driver, ordinal):
    err, dev = driver.cuDeviceGet(ordinal)
    err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
    assert err == driver.CUresult.CUDA_SUCCESS
    driver.cuDevicePrimaryCtxRelease(dev)
    return int(ctx)


def test_stream_on_device_1_lives_in_its_primary_context(two_devices, driver):
    before = current_context(driver)
    s = custream.Stream(device=1)
    assert s.device == 1 and s.owned
    assert current_context(driver) == before
    err, ctx = driver.cuStreamGetCtx(driver.CUstream(s.handle))
    assert err == driver.CUresult.CUDA_SUCCESS
    assert int(ctx) == primary_context(driver, 1)
    s.close()
    assert current_context(driver) == before


def test_device_0_stream_waits_on_an_event_recorded_on_device_1(two_devices):
    cupy = pytest.importorskip("cupy")
    spin = cupy.RawKernel(
        r"""
        extern "C" __global__ void spin_then_write(long long cycles, int *out) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
            *out = 42;
        }""",
        "spin_then_write",
    )
    s1 = custream.Stream(device=1)
    s0 = custream.Stream(device=0)
    with cupy.cuda.Device(1):
        flag = cupy.zeros(1, dtype=cupy.int32)
        with cupy.cuda.ExternalStream(s1.handle, 1):
            spin((1,), (1,), (cupy.int64(200_000_000), flag))
    done = s1.record()
    s0.wait(done)
    with cupy.cuda.Device(0):
        seen = cupy.zeros(1, dtype=cupy.int32)
        cupy.cuda.runtime.memcpyPeerAsync(seen.data.ptr, 0, flag.data.ptr, 1, 4, s0.handle)
    s0.synchronize()
    assert int(seen.get()[0]) == 42


def test_as_stream_of_a_peer_stream_on_device_1_reports_device_1(two_devices):
    torch = pytest.importorskip("torch")
    theirs = torch.cuda.Stream(device=1)
    s = custream.as_stream(theirs)
    assert s.device == 1 and s.owner is theirs


def test_default_tokens_resolve_against_the_current_device_each_time(two_devices):
    cupy = pytest.importorskip("cupy")
    legacy = custream.Stream.from_handle(custream.LEGACY_DEFAULT_STREAM)
    with cupy.cuda.Device(0):
        cupy.zeros(1)
        assert legacy.device == 0
    with cupy.cuda.Device(1):
        cupy.zeros(1)
        assert legacy.device == 1
        legacy.synchronize()
    with cupy.cuda.Device(0):
        assert legacy.device == 0


def test_closing_a_device_1_stream_from_a_device_0_thread_leaves_that_thread_alone(two_devices, driver):
    cupy = pytest.importorskip("cupy")
    s = custream.Stream(device=1)
    seen = {}

    def worker():
        with cupy.cuda.Device(0):
            cupy.zeros(1)
            seen["before"] = current_context(driver)
            s.close()
            seen["after"] = current_context(driver)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert s.closed
    assert seen["before"] == seen["after"] == primary_context(driver, 0)
