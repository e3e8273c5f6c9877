"""CuPy <-> custream on a real device, both directions, with CuPy kernels whose ordering
proves which stream ran them, and the owner kept alive across the border."""

from contextlib import closing
import gc
import weakref

import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol
from custream_gpu_helpers import KERNELS, SPIN_CYCLES, check_owner_lifetime, peer

pytestmark = pytest.mark.gpu

cp = peer("cupy")


@pytest.fixture
def k():
    """The spin and copy kernels, and a zeroed int64[3] buffer: out[0] mark, out[1] copy."""
    cp.cuda.Device(0).use()
    module = cp.RawModule(code=KERNELS)

    class K:
        out = cp.zeros(3, dtype=cp.int64)
        spin = module.get_function("spin_then_mark")
        copy = module.get_function("copy_mark")

        def spin_on(self, cupy_stream):
            with cupy_stream:
                self.spin((1,), (1,), (self.out, cp.int64(SPIN_CYCLES)))

        def copy_on(self, cupy_stream):
            with cupy_stream:
                self.copy((1,), (1,), (self.out,))

        def result(self):
            host = self.out.get()
            return int(host[0]), int(host[1])

    cp.cuda.Device(0).synchronize()
    return K()


def from_external(ours):
    if not hasattr(cp.cuda.Stream, "from_external"):
        pytest.skip(f"CuPy {cp.__version__} has no Stream.from_external (CuPy >= 14)")
    return cp.cuda.Stream.from_external(ours)


def test_from_external_runs_cupy_kernels_on_our_stream(k):
    with closing(Stream()) as ours:
        cs = from_external(ours)
        assert cs.ptr == ours.handle
        k.spin_on(cs)
        assert ours.query() is False
        ours.synchronize()
        assert cs.done is True
        assert k.result()[0] == 1


def test_from_external_keeps_our_stream_alive():
    ours = Stream()
    ref = weakref.ref(ours)
    cs = from_external(ours)
    del ours
    gc.collect()
    assert ref() is not None, "CuPy dropped the custream.Stream it wraps"
    cs.synchronize()  # the handle is still a live stream
    del cs
    gc.collect()
    assert ref() is None


def test_external_stream_over_our_handle(k):
    with closing(Stream()) as ours:
        cs = cp.cuda.ExternalStream(ours.handle, 0)
        k.spin_on(cs)
        assert ours.query() is False
        ours.synchronize()
        assert k.result()[0] == 1


def test_as_stream_of_a_cupy_stream(k):
    cs = cp.cuda.Stream(non_blocking=True)
    ours = custream.as_stream(cs)
    assert ours.handle == cs.ptr and ours.owner is cs and not ours.owned
    assert ours.device == 0 and ours.non_blocking is True
    with closing(Stream()) as other:
        k.spin_on(cs)
        assert ours.query() is False
        ev = ours.record()
        other.wait(ev)
        k.copy_on(from_external(other))
        other.synchronize()
        assert k.result() == (1, 1)
    ours.close()


def test_our_stream_waits_on_a_cupy_stream_directly(k):
    cs = cp.cuda.Stream(non_blocking=True)
    with closing(Stream()) as other:
        k.spin_on(cs)
        other.wait(cs)  # any __cuda_stream__ object
        k.copy_on(cp.cuda.ExternalStream(other.handle, 0))
        other.synchronize()
        assert k.result() == (1, 1)


def test_cupy_event_recorded_on_our_stream_orders_a_cupy_stream(k):
    with closing(Stream()) as ours:
        k.spin_on(from_external(ours))
        event = cp.cuda.Event(disable_timing=True)
        event.record(from_external(ours))
        cs = cp.cuda.Stream(non_blocking=True)
        cs.wait_event(event)
        k.copy_on(cs)
        cs.synchronize()
        assert k.result() == (1, 1)


def test_as_stream_keeps_the_cupy_stream_alive_until_close():
    check_owner_lifetime(lambda: cp.cuda.Stream(non_blocking=True), custream.as_stream)


def test_null_stream_is_a_default_token():
    cp.cuda.Device(0).use()
    s = custream.as_stream(cp.cuda.Stream.null)
    assert s.is_default and s.handle == 0
    s.synchronize()


def test_cupy_streams_pass_the_conformance_kit():
    cp.cuda.Device(0).use()
    for stream in (cp.cuda.Stream(), cp.cuda.Stream(non_blocking=True)):
        report = assert_stream_protocol(stream, live=True)
        assert {e.name: e.passed for e in report.entries}["live stream"] is True
    assert_stream_protocol(cp.cuda.Stream.null, live=True)
    with closing(Stream()) as ours:
        assert_stream_protocol(from_external(ours), live=True)
