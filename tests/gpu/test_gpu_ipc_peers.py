"""IPC events across processes between custream and PyTorch, CuPy and cuda.core, both ways
(issue 52): a producer in one library, a consumer in another, the consumer's stream waiting on
the producer's IPC event and then reading what the producer wrote before recording it.

Each case runs in a pytest process of its own (marked ``isolated``, tests/conftest.py) under
its watchdog: that process is the producer and spawns the consumer
(tests/gpu/_ipc_peer_workers.py says what each does). What every case asserts:

- the consumer read the value the producer's kernel wrote after a half-second sleep on the
  GPU, on a stream that waited on the producer's event (without the wait it reads 0);
- the event was still pending when the consumer opened it (so the wait was real);
- where custream consumes: the event opened from the peer's own handle (PyTorch's and CuPy's
  64 bytes, cuda.core's IPCEventDescriptor itself) with the device named in the peer's own
  UUID form, and its repr says it has no exporter to watch.

A peer that is not installed skips its cases; so does a cuda.core that cannot compile a kernel
(no NVRTC) or make a descriptor from raw bytes.
"""

import pytest

from custream_gpu_helpers import try_import

pytestmark = pytest.mark.gpu

PEERS = {"torch": "torch", "cupy": "cupy", "cuda.core": "cuda.core"}
ISOLATED = pytest.mark.isolated(timeout=150)


def scenario(peer, direction):
    """Run one case, this process the producer; its result (the consumer's report)."""
    if try_import(PEERS[peer]) is None:
        pytest.skip(f"{PEERS[peer]} is not installed")
    import _ipc_peer_workers

    result = _ipc_peer_workers.run(peer, direction)
    if "skip" in result:
        pytest.skip(result["skip"])
    print(peer, direction, result)  # for the record (pytest -s)
    return result


def check(result, consumer_is_custream):
    import _ipc_peer_workers as w

    assert result["value"] == w.VALUE, result
    assert result["pending_when_opened"] is True, result
    if consumer_is_custream:
        assert "ipc imported, no exporter to watch" in result["repr"], result


@ISOLATED
@pytest.mark.parametrize("peer", list(PEERS))
def test_a_peers_ipc_event_orders_a_custream_consumer(peer):
    check(scenario(peer, "to custream"), consumer_is_custream=True)


@ISOLATED
@pytest.mark.parametrize("peer", list(PEERS))
def test_a_custream_ipc_event_orders_a_peer_consumer(peer):
    check(scenario(peer, "from custream"), consumer_is_custream=False)
