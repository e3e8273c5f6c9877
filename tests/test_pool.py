"""custream.StreamPool: arguments, hand-out, indexing, refusals, closing, and its C and
Python faces, on the CPU against the stand-in driver (tests/standin; the tests marked
STANDIN run in a pytest process of their own, tests/conftest.py); tests/gpu/ uses real pools
with CuPy and torch."""

import collections
import contextlib
import gc
import pickle
import random
import signal
import threading
import time

import pytest

import custream
from _threads import blocked_at, wait_until

# In a pytest process of its own against tests/standin/libcuda.c (tests/conftest.py).
STANDIN = pytest.mark.standin("libcuda.c")


def streams_made(driver):
    """The streams the stand-in made for the pool: all, less custream's own for its waits (a
    context's notifiers, made with its first stream)."""
    return driver.standin_streams_made() - custream._custream._notifier_streams()


def live_streams(driver):
    """The pool's streams alive: the stand-in's, less custream's own for its waits (kept for
    the process)."""
    return driver.standin_live_streams() - custream._custream._notifier_streams()


# The comment that marks the line of the lease a Ctrl-C is sent into (blocked_at): named here,
# so that no other line holds the text.
INTERRUPTED = "# interrupted"


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
        (lambda: custream.StreamPool(2, priorities=()), ValueError,
         r"StreamPool\(\) priorities must hold at least one priority, got an empty sequence"),
        (lambda: custream.StreamPool(2, priorities=[0, -1, 0]), ValueError,
         r"StreamPool\(\) priorities must be distinct, got 0 twice in \[0, -1, 0\]"),
        (lambda: custream.StreamPool(2, priorities=(0, "1")), TypeError,
         r"StreamPool\(\) priorities must be ints, got str \('1'\)"),
        (lambda: custream.StreamPool(2, priorities=(0, True)), TypeError, "must be ints, got bool"),
        (lambda: custream.StreamPool(2, priorities=(2**40,)), ValueError, "out of range: it must fit a 32-bit"),
        (lambda: custream.StreamPool(2, priorities="01"), TypeError,
         r"StreamPool\(\) priorities must be a tuple or list of ints, got str"),
        (lambda: custream.StreamPool(2, priorities=-1), TypeError, "must be a tuple or list of ints, got int"),
        (lambda: custream.StreamPool(2, priority=0, priorities=(0,)), TypeError,
         r"StreamPool\(\) takes priority \(one tier\) or priorities \(several\), not both"),
        (lambda: custream.StreamPool(40000, priorities=(0, -1)), ValueError,
         "size 40000 times 2 priorities is more than 65536 streams"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_driver_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.skipif(custream.is_available(), reason="a CUDA driver is present")
def test_without_a_driver_a_pool_cannot_be_made():
    with pytest.raises(custream.CudaUnavailableError, match="no CUDA driver"):
        custream.StreamPool(2)


@STANDIN
def test_streams_are_handed_out_round_robin_and_indexed(driver):
    pool = custream.StreamPool(3, priority=-2)
    assert len(pool) == 3 and pool.device == 0 and not pool.closed and pool.priorities == (-2,)
    assert live_streams(driver) == 0  # made on first use
    first = [pool.get() for _ in range(3)]
    assert live_streams(driver) == 3
    assert [pool.get() for _ in range(6)] == first * 2
    assert [pool[i] for i in range(3)] == first and pool[-1] is pool[2]
    assert len({s.handle for s in first}) == 3
    for s in first:
        assert type(s) is custream.Stream and s.owned and s.priority == -2 and s.non_blocking
        assert custream.as_stream(s) is s and "owned by a StreamPool" in repr(s)
    with pytest.raises(IndexError, match="index 3 out of range for a pool of 3"):
        pool[3]
    assert list(pool) == first
    assert repr(pool) == "<custream.StreamPool size=3 device=0 priorities=(-2,)>"


@STANDIN
def test_a_pool_stream_cannot_be_closed_but_the_pool_closes_all_once(driver):
    pool = custream.StreamPool(2)
    s = pool.get()
    owned = r"belongs to a custream.StreamPool, which owns it: close the pool \(pool.close\(\)\) instead"
    for close in (s.close, lambda: contextlib.closing(s).__exit__(None, None, None)):
        with pytest.raises(ValueError, match=owned):
            close()
    assert not s.closed and live_streams(driver) == 1  # made on first use
    with s:  # a plain Stream to every consumer: `with` makes it current
        assert custream.current_stream() is s
    pool.close()
    pool.close()
    assert pool.closed and s.closed
    assert live_streams(driver) == 0
    s.close()  # closed already: idempotent, not refused
    with pytest.raises(ValueError, match=r"get\(\) on a closed custream.StreamPool"):
        pool.get()
    with pytest.raises(ValueError, match=r"pool\[i\] on a closed custream.StreamPool"):
        pool[0]
    assert repr(pool) == "<custream.StreamPool size=2 device=0 closed>"


@STANDIN
def test_a_dropped_pool_closes_its_streams(driver):
    pool = custream.StreamPool(4)
    kept = pool.get()
    del pool
    gc.collect()
    assert kept.closed and live_streams(driver) == 0


@STANDIN
def test_pool_get_is_thread_safe_and_fair():
    pool = custream.StreamPool(4)
    counts = collections.Counter()
    lock = threading.Lock()

    def worker():
        mine = collections.Counter(pool.get().handle for _ in range(1000))
        with lock:
            counts.update(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts.values()) == [2000] * 4, counts
    pool.close()


@STANDIN
def test_an_out_of_range_priority_names_the_range(driver):
    assert custream.priority_range() == (0, -5) and custream.priority_range(0) == (0, -5)
    for bad in (1, -6):
        pool = custream.StreamPool(2, priority=bad)  # checked on first use: nothing made yet
        with pytest.raises(custream.CudaError, match=rf"priority {bad} is outside this device's range \[-5, 0\]"):
            pool.get()
    # Every tier is checked before the first stream of any: tier 0's too.
    pool = custream.StreamPool(2, priorities=(0, -2, -7))
    for call in (pool.get, lambda: pool.lease(), lambda: pool[0]):
        with pytest.raises(custream.CudaError, match=r"priority -7 is outside this device's range \[-5, 0\]"):
            call()
    assert live_streams(driver) == 0 and streams_made(driver) == 0
    with pytest.raises(ValueError, match="device 3 does not exist: this machine has 1 CUDA device"):
        custream.priority_range(3)


@STANDIN
def test_the_c_api_hands_out_the_same_round_robin():
    from _capi_ctypes import capi

    table = capi()
    pool = custream.StreamPool(3)
    from_c = [table.pool_get(pool) for _ in range(3)]
    assert from_c == [pool[0], pool[1], pool[2]] and pool.get() is pool[0]
    assert table.current_stream() is custream.DEFAULT_STREAM
    assert table.default_stream(2) is custream.PER_THREAD_DEFAULT_STREAM
    pool.close()
    with pytest.raises(ValueError, match=r"get\(\) on a closed custream.StreamPool"):
        table.pool_get(pool)


# ---- made on first use, tiers ----------------------------------------------------------------


@STANDIN
def test_a_pool_made_and_never_used_makes_no_stream_and_touches_no_context(driver):
    pools = [custream.StreamPool(8), custream.StreamPool(4, priorities=(0, -1, -3)),
             custream.StreamPool(2, priority=-9)]  # out of range: found out on first use only
    assert streams_made(driver) == 0
    assert driver.standin_primary_retains() == 0 and driver.standin_pushes() == 0
    for p in pools:
        p.close()
    assert streams_made(driver) == 0 and driver.standin_primary_retains() == 0
    pool = custream.StreamPool(8)
    pool.get()
    assert streams_made(driver) == 1  # one stream: the one asked for
    pool.close()
    assert live_streams(driver) == 0


@STANDIN
def test_priority_found_however_it_is_spelled():
    # `get(priority=p)` has a fast path (the interned name, the int's own object) beside the
    # full parse: every other spelling of the same call reaches the same tier.
    class Int(int):
        pass

    pool = custream.StreamPool(1, priorities=(0, -1))
    s = pool.get(priority=-1)
    name = "".join(["prio", "rity"])  # built at run time: not the interned name
    p = int("-1" + "0" * 30) // 10**30  # an int object made at run time
    for get in (pool.get, lambda **kw: pool.lease(**kw).stream, lambda **kw: pool.lease(timeout=1, **kw).stream):
        assert get(priority=-1) is s and get(**{name: -1}) is s and get(priority=p) is s
        assert get(priority=Int(-1)) is s and get(priority=0) is not s and get(priority=None) is not s
    for bad in (-2, 2**63, -2**63 - 1, 2**80):
        with pytest.raises(ValueError, match=r"is not one of this pool's priorities \(0, -1\)"):
            pool.get(priority=bad)
    pool.close()


@STANDIN
def test_tiers_hold_size_streams_of_each_priority(driver):
    pool = custream.StreamPool(2, priorities=(-1, 0, -4))
    assert pool.priorities == (-1, 0, -4) and len(pool) == 6
    for p in (-1, 0, -4):
        got = [pool.get(priority=p) for _ in range(4)]
        assert got[:2] == got[2:] and got[0] is not got[1]
        assert {s.priority for s in got} == {p}
    # Without a priority: the first tier given.
    assert pool.get().priority == -1
    assert [s.priority for s in pool] == [-1, -1, 0, 0, -4, -4]  # tier after tier
    assert streams_made(driver) == 6
    not_one = r"get\(\) priority {} is not one of this pool's priorities \(-1, 0, -4\)"
    for bad in (-2, 1, 2**80):
        with pytest.raises(ValueError, match=not_one.format(bad)):
            pool.get(priority=bad)
    for bad in ("0", 0.0, True):
        with pytest.raises(TypeError, match=r"get\(\) priority must be an int or None, got"):
            pool.get(priority=bad)
    with pytest.raises(ValueError, match=r"lease\(\) priority -3 is not one of this pool's priorities \(-1, 0, -4\)"):
        pool.lease(priority=-3)
    with pytest.raises(TypeError, match=r"get\(\) takes no positional arguments but 1 was given"):
        pool.get(-1)
    with pytest.raises(TypeError, match=r"get\(\) got an unexpected keyword argument 'tier'"):
        pool.get(tier=0)
    with pytest.raises(TypeError, match="descriptor 'get' for 'custream.StreamPool' objects doesn't apply to a 'int' object"):
        custream.StreamPool.get(3)
    assert repr(pool) == "<custream.StreamPool size=2 device=0 priorities=(-1, 0, -4)>"
    pool.close()


@STANDIN
def test_streams_are_made_once_when_threads_ask_at_once(driver):
    pool = custream.StreamPool(3)
    barrier = threading.Barrier(16)
    seen = []

    def worker():
        barrier.wait()
        seen.extend(pool.get().handle for _ in range(30))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 3 and streams_made(driver) == 3
    pool.close()
    assert live_streams(driver) == 0


# ---- leases ------------------------------------------------------------------------------------


@STANDIN
@pytest.mark.parametrize(
    "args,exc,match",
    [
        ({"timeout": -1}, ValueError, r"lease\(\) timeout must be a non-negative number of seconds or None, got -1"),
        ({"timeout": float("nan")}, ValueError, "got nan"),
        ({"timeout": "1"}, TypeError, r"lease\(\) timeout must be a number of seconds \(int or float\) or None, got str"),
        ({"timeout": True}, TypeError, "got bool"),
        ({"priority": 1.0}, TypeError, r"lease\(\) priority must be an int or None, got float"),
        ({"priority": 5}, ValueError, r"lease\(\) priority 5 is not one of this pool's priorities \(0,\)"),
    ],
    ids=["negative", "nan", "str", "bool", "float-priority", "other-priority"],
)
def test_lease_refuses_bad_arguments_by_name(driver, args, exc, match):
    pool = custream.StreamPool(2)
    with pytest.raises(exc, match=match):
        pool.lease(**args)
    assert streams_made(driver) == 0


@STANDIN
def test_a_lease_holds_its_stream_alone_until_its_block_ends(driver):
    pool = custream.StreamPool(2)
    lease = pool.lease()
    with lease as a:
        assert lease.stream is a and lease.priority == 0 and not lease.closed
        assert type(a) is custream.Stream and a in list(pool)
        with pool.lease() as b:
            assert b is not a
            assert repr(pool) == "<custream.StreamPool size=2 device=0 leased=2>"
            with pytest.raises(TimeoutError) as e:
                pool.lease(timeout=0)  # a poll
            assert str(e.value) == (
                "StreamPool.lease() timed out after 0 s: every stream of priority 0 (2 of them) is leased")
        with pool.lease(timeout=0.05) as c:
            assert c is b  # given back: leased again, not made again
    assert lease.closed and streams_made(driver) == 2
    given_back = "on a custream.Lease that was given back (its with block ended, or it was closed)"
    for use in (lambda: lease.stream, lease.__enter__, lambda: [None for _ in [lease.__enter__()]]):
        with pytest.raises(ValueError) as e:
            use()
        assert given_back in str(e.value)
    with pytest.raises(ValueError, match="stream on a custream.Lease that was given back"):
        lease.stream
    lease.close()  # idempotent
    assert not a.closed  # the stream stays the pool's
    assert "given back" in repr(lease)
    with pytest.raises(TypeError, match="cannot pickle Lease: a lease holds a CUDA stream of this process's pool"):
        pickle.dumps(pool.lease())
    # A lease dropped without its block gives its stream back.
    held = pool.lease()
    del held
    with pool.lease(timeout=0), pool.lease(timeout=0):
        pass
    pool.close()


@STANDIN
def test_leases_come_first_from_streams_already_made(driver):
    pool = custream.StreamPool(4)
    for _ in range(5):
        with pool.lease():
            pass
    assert streams_made(driver) == 1
    with pool.lease(), pool.lease():
        assert streams_made(driver) == 2
    pool.get()
    pool.get()
    pool.get()  # round-robin makes slots 0, 1, 2
    with pool.lease(), pool.lease(), pool.lease():
        assert streams_made(driver) == 3
    pool.close()


@STANDIN
def test_a_waiting_lease_gets_the_stream_given_back():
    pool = custream.StreamPool(1)
    order = []
    with pool.lease() as s:

        def waiter():
            with pool.lease(timeout=30) as t:
                order.append(("got", t is s))

        th = threading.Thread(target=waiter)
        th.start()
        wait_until(lambda: blocked_at(th, "pool.lease(timeout=30)"), "the second lease waits for the only stream")
        order.append("giving back")
    th.join(30)
    assert order == ["giving back", ("got", True)], order
    pool.close()


@STANDIN
def test_ctrl_c_ends_a_waiting_lease():
    import _thread

    # Python's Ctrl-C handler even where the parent left SIGINT ignored (a background job):
    # interrupt_main() does nothing for an ignored signal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pool = custream.StreamPool(1)
    held = pool.lease()
    main = threading.main_thread()
    # Ctrl-C once this thread waits in lease() (not before it: it would end something else).
    interrupter = threading.Thread(target=lambda: (
        wait_until(lambda: blocked_at(main, INTERRUPTED), "lease() waits"), _thread.interrupt_main()))
    interrupter.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pool.lease()  # interrupted
    took = time.monotonic() - start
    interrupter.join()
    assert took < 5, took
    held.close()
    with pool.lease(timeout=0):  # nothing was claimed by the interrupted wait
        pass
    pool.close()


@STANDIN
def test_closing_refuses_leases_at_once_and_closes_streams_after_the_last(driver):
    pool = custream.StreamPool(1, priorities=(0, -1))
    other = pool.get(priority=-1)
    lease = pool.lease()
    s = lease.stream
    errors = []

    def waiter():
        try:
            pool.lease(timeout=30)
        except ValueError as e:
            errors.append(str(e))

    th = threading.Thread(target=waiter)
    th.start()
    wait_until(lambda: blocked_at(th, "pool.lease(timeout=30)"), "a lease waits for the only stream of priority 0")
    pool.close()
    th.join(30)
    assert errors == ["lease() on a closed custream.StreamPool"], errors  # woken with an error
    assert pool.closed and not s.closed and not other.closed  # a lease is still held
    s.synchronize()  # the leased stream works until the lease ends
    with pytest.raises(ValueError, match=r"lease\(\) on a closed custream.StreamPool"):
        pool.lease()
    with pytest.raises(ValueError, match=r"get\(\) on a closed custream.StreamPool"):
        pool.get()
    with pytest.raises(ValueError, match=r"pool\[i\] on a closed custream.StreamPool"):
        pool[0]
    assert repr(pool) == "<custream.StreamPool size=1 device=0 priorities=(0, -1) leased=1 closed>"
    pool.close()  # idempotent
    assert not s.closed
    lease.close()
    assert s.closed and other.closed and live_streams(driver) == 0
    assert repr(pool) == "<custream.StreamPool size=1 device=0 priorities=(0, -1) closed>"


@STANDIN
def test_sixteen_threads_lease_and_get_at_once(driver):
    pool = custream.StreamPool(3, priorities=(0, -2))
    lock = threading.Lock()
    held = set()
    leases = []
    failures = []
    barrier = threading.Barrier(16)

    def worker(n):
        rng = random.Random(n)
        barrier.wait()
        for i in range(150):
            p = rng.choice((None, 0, -2))
            if rng.random() < 0.3:
                pool.get(priority=p).query()
                continue
            with pool.lease(priority=p, timeout=30) as s:
                with lock:
                    if s.handle in held:
                        failures.append(("leased twice", s.handle))
                    held.add(s.handle)
                    leases.append(s.handle)
                s.query()
                with lock:
                    held.discard(s.handle)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not failures, failures[:3]
    assert held == set() and len(set(leases)) <= 6
    # No lost stream: every one can be leased again, each once.
    for p in (0, -2):
        ls = [pool.lease(priority=p, timeout=0) for _ in range(3)]
        assert len({x.stream.handle for x in ls}) == 3
        for x in ls:
            x.close()
    assert streams_made(driver) == 6
    pool.close()
    assert live_streams(driver) == 0


@STANDIN
def test_lease_enter_and_exit_take_what_with_passes():
    pool = custream.StreamPool(1)
    lease = pool.lease()
    for call, match in [
        (lambda: lease.__enter__(1), r"__enter__\(\) takes no arguments \(1 given\)"),
        (lambda: lease.__exit__(), r"__exit__\(\) missing required argument 'exc_type'"),
        (lambda: lease.__exit__(None, None), r"__exit__\(\) missing required argument 'traceback'"),
        (lambda: lease.__exit__(None, None, None, None), r"__exit__\(\) takes 3 positional arguments but 4 were given"),
        (lambda: lease.__exit__(None, None, tb=None), r"__exit__\(\) got an unexpected keyword argument 'tb'"),
    ]:
        with pytest.raises(TypeError, match=match):
            call()
    assert not lease.closed  # refused calls give nothing back
    assert lease.__enter__() is lease.stream
    assert lease.__exit__(exc_type=None, exc=None, traceback=None) is False and lease.closed
    with pool.lease(timeout=0):
        with pytest.raises(TimeoutError):
            with pool.lease(timeout=0):
                pass
    with pytest.raises(KeyError):
        with pool.lease():
            raise KeyError("inside")  # the block's exception propagates, the stream is given back
    with pool.lease(timeout=0):
        pass
    pool.close()


@STANDIN
def test_a_give_back_racing_a_waiters_sleep_wakes_it():
    # The give-back clears its bit and then looks for waiters; the waiter counts itself and
    # then looks at the bits before it sleeps: a give-back landing between a waiter's look and
    # its sleep would leave it asleep for a whole slice (50 ms) if either side skipped its
    # half. Give back at random moments around the waiter's arrival, many times (time is the
    # point: a spin of a random length, and a lost wake-up shows as a wait of a slice).
    pool = custream.StreamPool(1)
    rng = random.Random(7)
    slow = []
    for _ in range(300):
        held = pool.lease(timeout=0)
        got = []

        def waiter():
            with pool.lease(timeout=30):
                got.append(time.perf_counter())

        th = threading.Thread(target=waiter)
        th.start()
        spin = time.perf_counter() + rng.random() * 0.0005
        while time.perf_counter() < spin:
            pass
        given = time.perf_counter()
        held.close()
        th.join(30)
        assert got, "the waiter never got the stream"
        slow.append(got[0] - given)
    late = [s for s in slow if s > 0.045]
    pool.close()
    # A lost wake-up costs a slice; a loaded machine may delay a few rounds as much.
    assert len(late) < 15, late


@STANDIN
def test_closing_while_threads_lease_closes_each_stream_once_after_the_last_lease(driver):
    for _ in range(5):
        pool = custream.StreamPool(3, priorities=(0, -1))
        inside = []  # errors raised inside a block: a leased stream closed under its lease
        refused = []
        taken = []

        def worker(n):
            p = (0, -1)[n % 2]
            while True:
                try:
                    lease = pool.lease(priority=p, timeout=30)
                except ValueError as e:
                    refused.append(str(e))
                    return
                with lease as s:
                    taken.append(n)
                    try:
                        s.query()
                        s.synchronize()
                    except Exception as e:
                        inside.append(repr(e))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        # Close while every thread leases, some waiting.
        wait_until(lambda: set(taken) == set(range(8)), "every thread took a lease")
        pool.close()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert not inside, inside[:3]
        assert refused == ["lease() on a closed custream.StreamPool"] * 8, refused
        assert live_streams(driver) == 0, "a stream left open"
        assert "leased" not in repr(pool)


@STANDIN
def test_a_lease_given_back_is_reused_only_when_no_one_holds_it(driver):
    # The pool keeps the lease last given back by its block (or close()) and hands it out again
    # when nothing else references it; one still held by the caller stays given back.
    pool = custream.StreamPool(1)
    with pool.lease() as s:
        pass
    for _ in range(3):
        with pool.lease() as again:
            assert again is s
    kept = pool.lease()
    kept.close()
    fresh = pool.lease()
    assert fresh is not kept and not fresh.closed and kept.closed
    with pytest.raises(ValueError):
        kept.stream  # a lease given back is not used
    with fresh:
        assert fresh.stream is s
    del kept, fresh
    lease = pool.lease()  # held, then dropped without close(): given back, the pool kept alive
    del lease
    with pool.lease(timeout=0):
        pass
    # A kept lease does not keep its pool alive: a pool dropped closes its streams.
    assert live_streams(driver) == 1
    del pool
    gc.collect()
    assert live_streams(driver) == 0
