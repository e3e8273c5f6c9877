"""custream.testing's live checks on a real device: real streams pass, a producer that
reports the wrong device fails, a closed stream fails, and default-stream tokens are judged
against the current context. (Each peer's own file runs the kit on that peer's streams.)"""

import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol, check_stream_protocol
from custream_gpu_helpers import run_in_thread

pytestmark = pytest.mark.gpu


class Producer:
    def __init__(self, handle, **attrs):
        self.handle = handle
        self.__dict__.update(attrs)

    def __cuda_stream__(self):
        return (0, self.handle)


def by_name(report):
    return {e.name: e for e in report.entries}


def test_our_streams_pass_live():
    with Stream() as s:
        report = assert_stream_protocol(s, live=True)
        assert by_name(report)["live stream"].passed is True
        assert by_name(report)["device agrees"].passed is True  # our .device is an int
        assert not s.closed  # the kit never closes the object it checks
        assert_stream_protocol(Stream.from_handle(s.handle), live=True)


@pytest.mark.parametrize("attrs", [{"device": 1}, {"device_id": 1}])
def test_a_producer_reporting_another_device_fails(attrs):
    wrong = {k: v + custream.device_count() for k, v in attrs.items()}  # never device 0's
    with Stream(device=0) as s:
        report = check_stream_protocol(Producer(s.handle, **wrong), live=True)
        assert not report.ok
        assert [e.name for e in report.failures] == ["device agrees"]
        with pytest.raises(AssertionError, match="device agrees"):
            assert_stream_protocol(Producer(s.handle, **wrong))


def test_a_producer_reporting_its_device_passes():
    with Stream(device=0) as s:
        report = assert_stream_protocol(Producer(s.handle, device_id=0), live=True)
        assert by_name(report)["device agrees"].passed is True


def test_a_closed_stream_fails_the_call():
    s = Stream()
    s.close()
    report = check_stream_protocol(s, live=True)
    assert [e.name for e in report.failures] == ["call succeeds"]
    assert "closed" in by_name(report)["call succeeds"].detail


def test_default_tokens_need_a_current_context():
    driver = pytest.importorskip("cuda.bindings.driver")

    def without_context():
        return check_stream_protocol(Producer(custream.LEGACY_DEFAULT_STREAM), live=True)

    report = run_in_thread(without_context)
    assert report.ok, str(report)
    assert by_name(report)["live stream"].passed is None

    def with_context():
        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(0)
        err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
        driver.cuCtxSetCurrent(ctx)
        try:
            return check_stream_protocol(Producer(custream.LEGACY_DEFAULT_STREAM), live=True)
        finally:
            driver.cuCtxSetCurrent(driver.CUcontext(0))
            driver.cuDevicePrimaryCtxRelease(dev)

    report = run_in_thread(with_context)
    assert report.ok and by_name(report)["live stream"].passed is True, str(report)
