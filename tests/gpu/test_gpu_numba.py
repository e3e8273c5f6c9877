"""numba-cuda <-> custream on a real device, both directions: a numba kernel launched on
``cuda.external_stream(ours.handle)``, and numba streams wrapped with ``as_stream``, with
ordering proven by a long kernel and a copy that must see its result."""

from contextlib import closing
import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol
from custream_gpu_helpers import check_owner_lifetime, peer

pytestmark = pytest.mark.gpu

np = peer("numpy")
peer("numba")
cuda = peer("numba.cuda")
if not cuda.is_available():
    pytest.skip("numba-cuda sees no CUDA device", allow_module_level=True)

# numba-cuda has no clock64 intrinsic: the kernel runs a dependent 64-bit LCG chain, which
# no compiler can shorten, for long enough (tens to hundreds of ms) to be seen running.
SPIN_ITERATIONS = 20_000_000


@cuda.jit
def spin_then_mark(out, iterations):
    x = out[2] + 1
    for _ in range(iterations):
        x = x * 6364136223846793005 + 1442695040888963407
    out[2] = x
    out[0] = 1


@cuda.jit
def copy_mark(out):
    out[1] = out[0]


@pytest.fixture
def out():
    arr = cuda.to_device(np.zeros(3, dtype=np.int64))
    cuda.synchronize()
    return arr


def result(out):
    host = out.copy_to_host()
    return int(host[0]), int(host[1])


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile both kernels once, before any test times a launch against a query."""
    arr = cuda.to_device(np.zeros(3, dtype=np.int64))
    spin_then_mark[1, 1](arr, 1)
    copy_mark[1, 1](arr)
    cuda.synchronize()


def test_numba_kernel_on_an_external_stream_over_ours(out):
    with closing(Stream()) as ours:
        ns = cuda.external_stream(ours.handle)
        assert int(ns) == ours.handle
        spin_then_mark[1, 1, ns](out, SPIN_ITERATIONS)
        assert ours.query() is False
        ours.synchronize()
        assert result(out)[0] == 1


def test_as_stream_of_a_numba_stream(out):
    ns = cuda.stream()
    ours = custream.as_stream(ns)
    assert ours.handle == int(ns) and ours.owner is ns and not ours.owned
    assert ours.device == 0
    with closing(Stream()) as other:
        spin_then_mark[1, 1, ns](out, SPIN_ITERATIONS)
        assert ours.query() is False
        other.wait(ours.record())
        copy_mark[1, 1, cuda.external_stream(other.handle)](out)
        other.synchronize()
        assert result(out) == (1, 1)
    ours.close()


def test_our_stream_waits_on_a_numba_stream_directly(out):
    ns = cuda.stream()
    with closing(Stream()) as other:
        spin_then_mark[1, 1, ns](out, SPIN_ITERATIONS)
        other.wait(ns)
        copy_mark[1, 1, cuda.external_stream(other.handle)](out)
        other.synchronize()
        assert result(out) == (1, 1)


def test_numba_copies_on_our_stream(out):
    """A numba async copy on an external stream over ours is ordered after the kernel."""
    with closing(Stream()) as ours:
        ns = cuda.external_stream(ours.handle)
        spin_then_mark[1, 1, ns](out, SPIN_ITERATIONS)
        host = cuda.pinned_array(3, dtype=np.int64)
        host[:] = 0
        out.copy_to_host(host, stream=ns)
        ours.synchronize()
        assert int(host[0]) == 1


def test_as_stream_keeps_the_numba_stream_alive_until_close():
    check_owner_lifetime(cuda.stream, custream.as_stream)


def test_default_streams_are_tokens():
    for ns, token in ((cuda.default_stream(), 0), (cuda.legacy_default_stream(), 1), (cuda.per_thread_default_stream(), 2)):
        s = custream.as_stream(ns)
        assert s.is_default and s.handle == token
        s.synchronize()


def test_numba_streams_pass_the_conformance_kit():
    report = assert_stream_protocol(cuda.stream(), live=True)
    assert {e.name: e.passed for e in report.entries}["live stream"] is True
    for ns in (cuda.default_stream(), cuda.legacy_default_stream()):
        assert_stream_protocol(ns, live=True)
