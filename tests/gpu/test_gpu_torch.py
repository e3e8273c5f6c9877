"""PyTorch <-> custream on a real device, both directions: torch.cuda._sleep spins on one
stream and a tensor copy on another must see its result, with the owner kept alive across
the border."""

from contextlib import closing
import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol, check_stream_protocol
from custream_gpu_helpers import SPIN_CYCLES, check_owner_lifetime, peer

pytestmark = pytest.mark.gpu

torch = peer("torch")
if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device", allow_module_level=True)

HAS_PROTOCOL = hasattr(torch.cuda.Stream, "__cuda_stream__")


@pytest.fixture
def out():
    t = torch.zeros(3, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize(0)
    return t


def spin_then_mark(out, torch_stream):
    with torch.cuda.stream(torch_stream):
        torch.cuda._sleep(SPIN_CYCLES)
        out[0].fill_(1)


def copy_mark(out, torch_stream):
    with torch.cuda.stream(torch_stream):
        out[1].copy_(out[0])


def result(out):
    host = out.cpu().tolist()
    return host[0], host[1]


def wrap(torch_stream):
    """custream over a torch stream: through the protocol where torch has it, else the
    documented fallback (from_handle with the torch stream as owner)."""
    if HAS_PROTOCOL:
        return custream.as_stream(torch_stream)
    return Stream.from_handle(torch_stream.cuda_stream, owner=torch_stream)


def test_external_stream_runs_torch_work_on_our_stream(out):
    with closing(Stream()) as ours:
        ts = torch.cuda.ExternalStream(ours.handle, device=0)
        assert ts.cuda_stream == ours.handle
        spin_then_mark(out, ts)
        assert ours.query() is False
        ours.synchronize()
        assert ts.query() is True
        assert result(out)[0] == 1


def test_get_stream_from_external(out):
    if not hasattr(torch.cuda, "get_stream_from_external"):
        pytest.skip(f"torch {torch.__version__} has no torch.cuda.get_stream_from_external")
    with closing(Stream()) as ours, closing(Stream()) as other:
        ts = torch.cuda.get_stream_from_external(ours.handle, device=0)
        assert ts.cuda_stream == ours.handle
        spin_then_mark(out, ts)
        other.wait(ours)
        copy_mark(out, torch.cuda.get_stream_from_external(other.handle, device=0))
        other.synchronize()
        assert result(out) == (1, 1)


def test_as_stream_of_a_torch_stream(out):
    ts = torch.cuda.Stream(device=0)
    if not HAS_PROTOCOL:
        with pytest.raises(TypeError, match="torch.cuda"):
            custream.as_stream(ts)
    ours = wrap(ts)
    assert ours.handle == ts.cuda_stream and ours.owner is ts and not ours.owned
    assert ours.device == 0
    with closing(Stream()) as other:
        spin_then_mark(out, ts)
        assert ours.query() is False
        other.wait(ours.record())
        copy_mark(out, torch.cuda.ExternalStream(other.handle, device=0))
        other.synchronize()
        assert result(out) == (1, 1)
    ours.close()


@pytest.mark.skipif(not HAS_PROTOCOL, reason="this torch has no torch.cuda.Stream.__cuda_stream__")
def test_our_stream_waits_on_a_torch_stream_directly(out):
    ts = torch.cuda.Stream(device=0)
    with closing(Stream()) as other:
        spin_then_mark(out, ts)
        other.wait(ts)
        copy_mark(out, torch.cuda.ExternalStream(other.handle, device=0))
        other.synchronize()
        assert result(out) == (1, 1)


def test_torch_waits_on_our_stream(out):
    with closing(Stream()) as ours:
        spin_then_mark(out, torch.cuda.ExternalStream(ours.handle, device=0))
        ts = torch.cuda.Stream(device=0)
        ts.wait_stream(torch.cuda.ExternalStream(ours.handle, device=0))
        copy_mark(out, ts)
        ts.synchronize()
        assert result(out) == (1, 1)


def test_wrapping_keeps_the_torch_stream_alive_until_close():
    check_owner_lifetime(lambda: torch.cuda.Stream(device=0), wrap)


def test_current_torch_stream_through_custream():
    ts = torch.cuda.current_stream(0)
    s = wrap(ts)
    assert s.handle == ts.cuda_stream
    s.synchronize()
    s.close()


def test_torch_streams_and_the_conformance_kit():
    ts = torch.cuda.Stream(device=0)
    report = check_stream_protocol(ts, live=True)
    if not HAS_PROTOCOL:
        assert report.failures[0].name == "has __cuda_stream__"
        pytest.skip(f"torch {torch.__version__} has no __cuda_stream__ (the kit reports it)")
    assert report.ok, str(report)
    by_name = {e.name: e for e in report.entries}
    assert by_name["live stream"].passed is True
    assert by_name["device agrees"].passed is True, by_name["device agrees"].detail
    assert_stream_protocol(torch.cuda.current_stream(0), live=True)
