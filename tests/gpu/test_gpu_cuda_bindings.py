"""cuda.bindings <-> custream on a real device: ``custream.as_stream(driver.CUstream(...))``
(cuda-bindings >= 13 gives CUstream ``__cuda_stream__``; older ones get the documented
TypeError and the from_handle fallback), with the driver itself confirming which stream
ran the work."""

from contextlib import closing
import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol
from custream_gpu_helpers import check_owner_lifetime, first_work, peer

pytestmark = pytest.mark.gpu

driver = peer("cuda.bindings.driver")
HAS_PROTOCOL = hasattr(driver.CUstream, "__cuda_stream__")


def ok(result):
    err, *rest = result
    assert err == driver.CUresult.CUDA_SUCCESS, f"{err!r}"
    return rest[0] if len(rest) == 1 else tuple(rest)


@pytest.fixture
def primary():
    """Device 0's primary context, retained for the test."""
    ok(driver.cuInit(0))
    dev = ok(driver.cuDeviceGet(0))
    ctx = ok(driver.cuDevicePrimaryCtxRetain(dev))
    yield ctx
    ok(driver.cuDevicePrimaryCtxRelease(dev))


@pytest.fixture
def make_cu_stream(primary):
    """Create CUstreams in the primary context (pushed and popped around the call, so the
    thread's current context is unchanged); destroyed at the end of the test."""
    made = []

    def make():
        ok(driver.cuCtxPushCurrent(primary))
        try:
            h = ok(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        finally:
            ok(driver.cuCtxPopCurrent())
        made.append(int(h))  # the address only: the object's lifetime is the test's to see
        return h

    yield make
    for address in made:
        ok(driver.cuStreamDestroy(driver.CUstream(address)))


def wrap(cu_stream):
    if HAS_PROTOCOL:
        return custream.as_stream(cu_stream)
    return Stream.from_handle(int(cu_stream), owner=cu_stream)


def test_as_stream_of_a_cu_stream(make_cu_stream):
    h = make_cu_stream()
    if not HAS_PROTOCOL:
        with pytest.raises(TypeError, match="CUstream"):
            custream.as_stream(h)
    ours = wrap(h)
    assert ours.handle == int(h) and ours.owner is h and not ours.owned
    assert ours.device == 0 and ours.non_blocking is True
    ours.close()


def test_the_driver_sees_our_work_on_its_stream(make_cu_stream):
    work = first_work()
    h = make_cu_stream()
    ours = wrap(h)
    work.spin_then_mark(ours)
    (err,) = driver.cuStreamQuery(h)
    assert err == driver.CUresult.CUDA_ERROR_NOT_READY
    ours.synchronize()
    (err,) = driver.cuStreamQuery(h)
    assert err == driver.CUresult.CUDA_SUCCESS
    assert work.result()[0] == 1
    ours.close()


def test_a_driver_wait_on_our_event_orders_its_stream(make_cu_stream):
    work = first_work()
    h = make_cu_stream()
    with closing(Stream()) as ours:
        work.spin_then_mark(ours)
        ev = ours.record()
        ok(driver.cuStreamWaitEvent(h, driver.CUevent(ev.handle), 0))
        work.copy_mark(wrap(h))
        ok(driver.cuStreamSynchronize(h))
        assert work.result() == (1, 1)


def test_wrapping_keeps_the_cu_stream_object_alive_until_close(make_cu_stream):
    check_owner_lifetime(make_cu_stream, wrap)


def test_default_stream_tokens(primary):
    if not HAS_PROTOCOL:
        pytest.skip("this cuda-bindings' CUstream has no __cuda_stream__")
    for token in (0, 1, 2):
        s = custream.as_stream(driver.CUstream(token))
        assert s.is_default and s.handle == token


def test_cu_streams_pass_the_conformance_kit(make_cu_stream):
    if not HAS_PROTOCOL:
        pytest.skip("this cuda-bindings' CUstream has no __cuda_stream__")
    report = assert_stream_protocol(make_cu_stream(), live=True)
    by_name = {e.name: e for e in report.entries}
    assert by_name["live stream"].passed is True
    assert by_name["device agrees"].passed is None  # a CUstream reports no device
