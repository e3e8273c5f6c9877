"""custream.StreamPool: arguments, hand-out, indexing, refusals, closing, and its C and
Python faces, on the CPU against the stand-in driver (tests/standin); tests/gpu/ uses real
pools with CuPy and torch."""

import pytest

import custream
from standin import run, standin_lib  # noqa: F401  (a fixture)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: custream.StreamPool(), TypeError, "missing 1 required positional argument: 'size'"),
        (lambda: custream.StreamPool("4"), TypeError, r"StreamPool\(\) size must be an int, got str"),
        (lambda: custream.StreamPool(True), TypeError, r"StreamPool\(\) size must be an int, got bool"),
        (lambda: custream.StreamPool(0), ValueError, r"StreamPool\(\) size must be between 1 and 65536, got 0"),
        (lambda: custream.StreamPool(-3), ValueError, "got -3"),
        (lambda: custream.StreamPool(2**70), ValueError, "between 1 and 65536"),
        (lambda: custream.StreamPool(2, device="0"), TypeError, r"StreamPool\(\) device must be an int device ordinal"),
        (lambda: custream.StreamPool(2, non_blocking=1), TypeError, r"StreamPool\(\) non_blocking must be True or False"),
        (lambda: custream.StreamPool(2, priority=1.5), TypeError, r"StreamPool\(\) priority must be an int"),
        (lambda: custream.StreamPool(2, 0), TypeError, "positional"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_driver_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.skipif(custream.is_available(), reason="a CUDA driver is present")
def test_without_a_driver_a_pool_cannot_be_made():
    with pytest.raises(custream.CudaUnavailableError, match="no CUDA driver"):
        custream.StreamPool(2)


def test_streams_are_handed_out_round_robin_and_indexed(standin_lib):
    run(standin_lib, """
        pool = custream.StreamPool(3, priority=-2)
        assert len(pool) == 3 and pool.device == 0 and not pool.closed
        assert standin.standin_live_streams() == 3
        first = [pool.get() for _ in range(3)]
        assert [pool.get() for _ in range(6)] == first * 2
        assert [pool[i] for i in range(3)] == first and pool[-1] is pool[2]
        assert len({s.handle for s in first}) == 3
        for s in first:
            assert type(s) is custream.Stream and s.owned and s.priority == -2 and s.non_blocking
            assert custream.as_stream(s) is s and "owned by a StreamPool" in repr(s)
        try:
            pool[3]
        except IndexError as e:
            assert "index 3 out of range for a pool of 3" in str(e)
        else:
            raise AssertionError("no IndexError")
        assert list(pool) == first
        print(repr(pool))
    """)


def test_a_pool_stream_cannot_be_closed_but_the_pool_closes_all_once(standin_lib):
    out = run(standin_lib, """
        import contextlib
        pool = custream.StreamPool(2)
        s = pool.get()
        for close in (s.close, lambda: contextlib.closing(s).__exit__(None, None, None)):
            try:
                close()
            except ValueError as e:
                print(e)
            else:
                raise AssertionError("closed")
        assert not s.closed and standin.standin_live_streams() == 2
        with s:  # a plain Stream to every consumer: `with` makes it current
            assert custream.current_stream() is s
        pool.close()
        pool.close()
        assert pool.closed and s.closed
        assert standin.standin_live_streams() == 0
        s.close()  # closed already: idempotent, not refused
        for call in (pool.get, lambda: pool[0]):
            try:
                call()
            except ValueError as e:
                print(e)
        print(repr(pool))
    """)
    assert out.count("belongs to a custream.StreamPool, which owns it: close the pool (pool.close()) instead") == 2
    assert "get() on a closed custream.StreamPool" in out and "pool[i] on a closed custream.StreamPool" in out
    assert "<custream.StreamPool size=2 device=0 closed>" in out


def test_a_dropped_pool_closes_its_streams(standin_lib):
    run(standin_lib, """
        import gc
        pool = custream.StreamPool(4)
        kept = pool.get()
        del pool
        gc.collect()
        assert kept.closed and standin.standin_live_streams() == 0
    """)


def test_pool_get_is_thread_safe_and_fair(standin_lib):
    run(standin_lib, """
        import collections, threading
        pool = custream.StreamPool(4)
        counts = collections.Counter()
        lock = threading.Lock()
        def worker():
            mine = collections.Counter(pool.get().handle for _ in range(1000))
            with lock:
                counts.update(mine)
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert sorted(counts.values()) == [2000] * 4, counts
        pool.close()
    """)


def test_an_out_of_range_priority_names_the_range(standin_lib):
    out = run(standin_lib, """
        assert custream.priority_range() == (0, -5) and custream.priority_range(0) == (0, -5)
        for bad in (1, -6):
            try:
                custream.StreamPool(2, priority=bad)
            except custream.CudaError as e:
                print(e)
        assert standin.standin_live_streams() == 0
        try:
            custream.priority_range(3)
        except ValueError as e:
            print(e)
    """)
    assert "priority 1 is outside this device's range [-5, 0]" in out
    assert "priority -6 is outside this device's range [-5, 0]" in out
    assert "device 3 does not exist: this machine has 1 CUDA device" in out


def test_the_c_api_hands_out_the_same_round_robin(standin_lib):
    run(standin_lib, """
        from _capi_ctypes import capi
        table = capi()
        pool = custream.StreamPool(3)
        from_c = [table.pool_get(pool) for _ in range(3)]
        assert from_c == [pool[0], pool[1], pool[2]] and pool.get() is pool[0]
        assert table.current_stream() is custream.DEFAULT_STREAM
        assert table.default_stream(2) is custream.PER_THREAD_DEFAULT_STREAM
        pool.close()
        try:
            table.pool_get(pool)
        except ValueError as e:
            assert "get() on a closed custream.StreamPool" in str(e)
        else:
            raise AssertionError("no error")
    """)
