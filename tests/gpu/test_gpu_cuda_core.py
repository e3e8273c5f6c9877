"""cuda.core <-> custream on a real device, both directions: ``Device.create_stream(ours)``,
``custream.as_stream(cuda_core_stream)``, and cuda.core kernel launches (NVRTC-compiled)
straight onto our stream, with ordering proven by a long kernel and a copy that must see
its result."""

from contextlib import closing
import gc
import weakref

import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol
from custream_gpu_helpers import check_owner_lifetime, make_work, peer

pytestmark = pytest.mark.gpu

core = peer("cuda.core")


@pytest.fixture
def dev():
    d = core.Device(0)
    d.set_current()
    return d


@pytest.fixture
def work(dev):
    """NVRTC-compiled spin/copy kernels and a pinned buffer (custream_gpu_helpers)."""
    return make_work("cuda.core")


def test_create_stream_wraps_ours_and_runs_kernels_on_it(dev, work):
    with closing(Stream()) as ours:
        cs = dev.create_stream(ours)
        assert int(cs.handle) == ours.handle
        work.spin_then_mark(cs)  # a cuda.core launch on cuda.core's view of our stream
        assert ours.query() is False
        ours.synchronize()
        assert work.result()[0] == 1


def test_create_stream_keeps_our_stream_alive(dev):
    ours = Stream()
    ref = weakref.ref(ours)
    cs = dev.create_stream(ours)
    del ours
    gc.collect()
    assert ref() is not None, "cuda.core dropped the custream.Stream it wraps"
    cs.sync()
    cs.close()
    del cs
    gc.collect()
    assert ref() is None


def test_cuda_core_launch_takes_our_stream_directly(dev, work):
    with closing(Stream()) as ours:
        work.spin_then_mark(ours)  # launch(ours, ...): the protocol, no wrapper of ours
        assert ours.query() is False
        ours.synchronize()
        assert work.result()[0] == 1


def test_as_stream_of_a_cuda_core_stream(dev, work):
    cs = dev.create_stream()
    ours = custream.as_stream(cs)
    assert ours.handle == int(cs.handle) and ours.owner is cs and not ours.owned
    assert ours.device == dev.device_id
    with closing(Stream()) as other:
        work.spin_then_mark(cs)
        assert ours.query() is False
        other.wait(ours.record())
        work.copy_mark(other)
        other.synchronize()
        assert work.result() == (1, 1)
    ours.close()


def test_our_stream_waits_on_a_cuda_core_stream_directly(dev, work):
    cs = dev.create_stream()
    with closing(Stream()) as other:
        work.spin_then_mark(cs)
        other.wait(cs)
        work.copy_mark(other)
        other.synchronize()
        assert work.result() == (1, 1)


def test_cuda_core_waits_on_our_stream(dev, work):
    with closing(Stream()) as ours:
        work.spin_then_mark(ours)
        cs = dev.create_stream()
        cs.wait(ours)  # cuda.core's wait takes any __cuda_stream__ object
        work.copy_mark(cs)
        cs.sync()
        assert work.result() == (1, 1)


def test_as_stream_keeps_the_cuda_core_stream_alive_until_close(dev):
    check_owner_lifetime(dev.create_stream, custream.as_stream)


def test_default_streams_are_tokens(dev):
    for cs, token in ((core.LEGACY_DEFAULT_STREAM, 1), (core.PER_THREAD_DEFAULT_STREAM, 2)):
        s = custream.as_stream(cs)
        assert s.is_default and s.handle == token
        s.synchronize()


def test_cuda_core_streams_pass_the_conformance_kit(dev):
    report = assert_stream_protocol(dev.create_stream(), live=True)
    by_name = {e.name: e for e in report.entries}
    assert by_name["live stream"].passed is True
    assert by_name["device agrees"].passed is True, by_name["device agrees"].detail
    assert_stream_protocol(dev.default_stream, live=True)
    with closing(Stream()) as ours:
        assert_stream_protocol(dev.create_stream(ours), live=True)
