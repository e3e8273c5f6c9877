"""Concurrency on the CPU: many threads wrapping, reading, closing and dropping the same and
different streams. Each owner is released exactly once (its reference count comes back to
exactly where it was, and an owner held by nothing else dies exactly once); the only
exceptions are the documented ones.

Where no driver is present, synchronize() and query() still enter the stream's in-flight
count and synchronize() releases the GIL before failing with CudaUnavailableError, so
close() really does race calls in flight. With a driver those calls would reach it with
made-up handles, so they are left to tests/gpu/test_gpu_custream_reliability.py there.
"""

import random
import sys
import weakref

import pytest

import custream
from custream import Stream, as_stream

from _capi_ctypes import STATE_CLOSED, STATE_RELEASED, state_word
from _threads import THREADS, run_threads

HAS_DRIVER = custream.is_available()
CLOSED = r" on a closed custream\.Stream$"


@pytest.fixture(autouse=True)
def fast_switching():
    # Switch threads as often as CPython allows, so operations interleave.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)

class Owner:
    pass


def documented(e):
    """The exceptions a call on a shared stream may raise: closed, or (here) no driver."""
    if isinstance(e, ValueError):
        return str(e).endswith(" on a closed custream.Stream")
    return isinstance(e, custream.CudaUnavailableError) and not HAS_DRIVER


def hammer(stream, handle, owner_ref, rng):
    """One random operation on a shared stream; checks what it returns. `owner_ref` is a
    weak reference, so that the test does not keep the owner alive itself."""
    op = rng.randrange(9)
    try:
        if op == 0:
            assert stream.handle == handle
        elif op == 1:
            assert stream.__cuda_stream__() == (0, handle)
        elif op == 2:
            o = stream.owner
            assert o is None or o is owner_ref()
        elif op == 3:
            assert as_stream(stream) is stream and stream == Stream.from_handle(handle)
        elif op == 4:
            repr(stream), hash(stream), stream.closed, stream.is_default, stream.owned
        elif op == 5:
            stream.close()
            # The owner may outlive close() here: a call in flight on another thread releases
            # it when it returns.
            assert stream.closed
        elif op == 6 and not HAS_DRIVER:
            stream.synchronize()
        elif op == 7 and not HAS_DRIVER:
            stream.query()
        elif op == 8:
            Stream.from_handle(handle, owner=stream).close()
    except (ValueError, custream.CudaUnavailableError) as e:
        assert documented(e), repr(e)


def test_shared_borrowed_streams_close_while_read():
    rounds, per_round = 150, 8
    died = []
    for r in range(rounds):
        kept = [Owner() for _ in range(per_round // 2)]  # we hold these: refcount must return
        refs = [sys.getrefcount(o) for o in kept]
        lone = [Owner() for _ in range(per_round // 2)]  # only the stream holds these
        owner_refs = [weakref.ref(o) for o in kept] + [weakref.ref(o, lambda _: died.append(1)) for o in lone]
        streams = [Stream.from_handle(0x10000 + r * 64 + i, owner=o) for i, o in enumerate(kept + lone)]
        handles = [s.handle for s in streams]
        del lone

        def work(k):
            rng = random.Random(r * THREADS + k)
            for _ in range(200):
                i = rng.randrange(per_round)
                hammer(streams[i], handles[i], owner_refs[i], rng)

        run_threads(work)
        for s in streams:
            s.close()
            assert s.owner is None
            assert state_word(s) == STATE_CLOSED | STATE_RELEASED, "closed, released, no call in flight"
        assert [sys.getrefcount(o) for o in kept] == refs, "an owner was released twice or never"
        assert all(w() is None for w in owner_refs[per_round // 2:]), "a lone owner outlived close()"
        streams = None
    assert len(died) == rounds * (per_round // 2), "each lone owner died exactly once"


def test_threads_wrap_and_close_their_own_streams():
    owner, producer = Owner(), type("P", (), {"__cuda_stream__": lambda self: (0, 0xABC)})()
    refs = sys.getrefcount(owner), sys.getrefcount(producer)
    live = custream.live_stream_count()

    def work(k):
        for i in range(2000):
            s = Stream.from_handle(0x20000 + k * 4096 + i, owner=owner)
            t = as_stream(producer)
            assert s.handle == 0x20000 + k * 4096 + i and t.handle == 0xABC
            if i % 3:
                s.close()
            with t:
                pass
            del s, t

    run_threads(work)
    assert (sys.getrefcount(owner), sys.getrefcount(producer)) == refs
    assert custream.live_stream_count() == live


def test_close_races_the_last_reference_drop():
    # Each stream is reachable from two lists; threads take from both at random and either
    # close what they got or just drop it, so close() runs against deallocation's release.
    n = 4000
    died = []
    owners = [Owner() for _ in range(n)]
    watch = [weakref.ref(o, lambda _: died.append(1)) for o in owners]
    a = [Stream.from_handle(0x40000 + i, owner=o) for i, o in enumerate(owners)]
    b = list(a)
    random.Random(1).shuffle(b)
    del owners
    live = custream.live_stream_count()

    def work(k):
        rng = random.Random(k)
        while True:
            source = a if rng.random() < 0.5 else b
            try:
                s = source.pop()
            except IndexError:
                if not a and not b:
                    return
                continue
            if rng.random() < 0.5:
                s.close()
            elif not HAS_DRIVER and rng.random() < 0.5:
                try:
                    s.synchronize()
                except (ValueError, custream.CudaUnavailableError) as e:
                    assert documented(e), repr(e)
            del s

    run_threads(work)
    assert custream.live_stream_count() == live - n
    assert len(died) == n and all(w() is None for w in watch)


def test_synchronize_in_flight_defers_release_to_the_caller():
    if HAS_DRIVER:
        pytest.skip("with a driver this would synchronize a made-up handle")
    # synchronize() drops the GIL inside the stream's in-flight window; close() from other
    # threads during that window must leave the owner to the call, released once at its end.
    for r in range(300):
        owner = Owner()
        refs = sys.getrefcount(owner)
        s = Stream.from_handle(0x50000 + r, owner=owner)

        def work(k):
            if k % 2:
                s.close()
            else:
                for _ in range(5):
                    try:
                        s.synchronize()
                    except (ValueError, custream.CudaUnavailableError) as e:
                        assert documented(e), repr(e)

        run_threads(work, 8)
        assert s.closed and s.owner is None
        assert state_word(s) == STATE_CLOSED | STATE_RELEASED
        assert sys.getrefcount(owner) == refs
