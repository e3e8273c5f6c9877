"""Waits that end (issue 38): ``synchronize(timeout=)``, Ctrl-C during a wait, ``await``,
``Event.future()``, the C API's ``Custream_SynchronizeTimeout``, and ``close()`` after a
sticky fault.

Against the stand-in drivers (the tests marked ``standin``, each in a pytest process of its
own, tests/conftest.py): tests/standin/capture.c runs "kernels" (its worker sleeps) and host
functions on a thread of its own, and its ``cuStreamSynchronize`` and ``cuEventSynchronize``
wait on a condition variable that no signal cuts short, as a busy GPU's wait would not be;
tests/standin/libcuda.c plays a sticky fault (``standin_sticky``). tests/gpu/test_gpu_waits.py
checks the same with real kernels.

A Ctrl-C (or another signal) is sent once the main thread waits inside the call
(``_threads.signal_when_blocked``), not after a guessed time."""

import asyncio
import concurrent.futures
import ctypes
import functools
import math
import os
import signal
import sys
import threading
import time

import pytest

import custream
import custream._waits
from _threads import blocked_at, signal_when_blocked, wait_until
from custream import Event, Stream

CAPTURE = pytest.mark.standin("capture.c")
STICKY = pytest.mark.standin("libcuda.c")
MAIN = threading.main_thread()
# The comments that mark the line of a call a signal is sent into (signal_when_blocked): named
# here, so that no other line (the one that starts the sender) holds the text.
INTERRUPTED, FAULTED = "# interrupted", "# faulted"


def pending_waits():
    from custream._custream import _pending_waits

    return _pending_waits()


def settle():
    """The host functions behind finished waits have all run (the stand-in's worker is in
    order): nothing stays behind a wait."""
    wait_until(lambda: pending_waits() == 0, "every wait's host function ran")
    assert custream._waits.pending_futures() == 0


async def until(condition, what, timeout=10.0):
    """``wait_until`` for a coroutine: the loop runs on while it waits."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.001)  # a poll's interval


async def _await(e):
    await e


def ticker(every):
    """A task counting the running loop's turns, one every `every` s (time is the point: the
    count shows the loop ran while awaits waited): the count (in a one-item list) and the task."""
    count = [0]

    async def tick():
        while True:
            await asyncio.sleep(every)  # time under test: the loop turns
            count[0] += 1

    return count, asyncio.create_task(tick())


@pytest.fixture
def fake(driver):
    """capture.c, with what these tests read typed; Python's own Ctrl-C handler, even where
    the parent left SIGINT ignored (a job started with `&` by a non-interactive shell)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    driver.fake_room_waiters.restype = ctypes.c_int
    driver.fake_mem_alloc.restype = ctypes.c_void_p
    driver.fake_mem_alloc.argtypes = [ctypes.c_size_t]
    driver.fake_host_func_waiters.restype = ctypes.c_int
    driver.fake_host_func_peak.restype = ctypes.c_int
    yield driver
    driver.fake_queue_limit(0)  # a launch left waiting for room by a failed test ends too
    driver.fake_host_funcs(0)
    driver.fake_busy_stream_create(0)


class Stop(Exception):
    pass


def raise_stop(*_):
    raise Stop()


@pytest.mark.parametrize(
    "value,error,message",
    [
        (-1, ValueError, "timeout must be a non-negative number of seconds or None, got -1"),
        (-0.5, ValueError, "got -0.5"),
        (math.nan, ValueError, "got nan"),
        ("1", TypeError, "timeout must be a number of seconds \\(int or float\\) or None, got str"),
        (True, TypeError, "got bool"),
        ([], TypeError, "got list"),
    ],
)
def test_a_bad_timeout_is_refused_before_any_driver_call(value, error, message):
    s = custream.Stream.from_handle(0x1234)  # borrowed: no driver needed to hold it
    with pytest.raises(error, match=f"Stream.synchronize\\(\\) .*{message}"):
        s.synchronize(timeout=value)
    with pytest.raises(error, match=message):
        s.synchronize(value)
    with pytest.raises(TypeError, match="synchronize\\(\\) got an unexpected keyword argument 'timout'"):
        s.synchronize(timout=1)
    with pytest.raises(TypeError, match="synchronize\\(\\) takes 1 positional argument but 2 were given"):
        s.synchronize(1, 2)


@CAPTURE
def test_timeouts_give_up_in_time_and_leave_the_work_running(kernel):
    s = Stream()
    kernel(s, 800)
    t = time.monotonic()
    with pytest.raises(TimeoutError, match=r"Stream.synchronize\(\) timed out after 0.1 s"):
        s.synchronize(timeout=0.1)
    took = time.monotonic() - t
    assert 0.1 <= took < 0.6, took
    assert s.query() is False, "the work was touched"
    e = s.record()
    with pytest.raises(TimeoutError, match=r"Event.synchronize\(\) timed out after 0 s"):
        e.synchronize(timeout=0)  # a poll
    e.synchronize(timeout=5)
    assert s.query() is True
    s.synchronize(timeout=0)  # idle: no wait at all
    Event().synchronize(timeout=0)
    s.synchronize(timeout=math.inf)
    kernel(s, 50)
    s.synchronize(timeout=10**9)  # far: as good as none
    s.close()
    settle()


@CAPTURE
def test_ctrl_c_ends_a_wait_the_driver_would_not_end(fake, kernel):
    """The stand-in's synchronize is a condition wait that no signal ends: the old path sat
    out the whole kernel. The handler's exception comes within a slice (50 ms) instead."""
    signal.signal(signal.SIGUSR1, raise_stop)
    s = Stream()
    sigint = (signal.SIGINT, KeyboardInterrupt)
    for name, make_wait, (sig, exc) in [
        ("Stream.synchronize", lambda: s.synchronize, sigint),
        ("Stream.synchronize", lambda: s.synchronize, (signal.SIGUSR1, Stop)),
        ("Stream.synchronize(timeout)", lambda: functools.partial(s.synchronize, timeout=30), sigint),
        ("Event.synchronize", lambda: s.record().synchronize, sigint),
    ]:
        kernel(s, 1200)
        wait = make_wait()
        sender = signal_when_blocked(MAIN, INTERRUPTED, sig)
        t = time.monotonic()
        with pytest.raises(exc):
            wait()  # interrupted
        took = time.monotonic() - t
        sender.join()
        # Well before the kernel's end: the wait ended at the signal.
        assert took < 0.9, (name, took)
        assert s.query() is False, f"{name}: the work must still run"
        # Still usable: a wait that is let run ends with the work.
        s.synchronize(timeout=10)
    s.close()
    settle()


def launchers():
    """custream's launcher threads (by name, from /proc)."""
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass  # a thread that ended since the listing
    return names.count("custream-launch")


@CAPTURE
def test_ctrl_c_ends_a_launch_that_waits_for_room_in_a_full_queue(fake, kernel):
    """A launch into a full queue waits inside the driver (the stand-in's wait, as the
    driver's, is one no signal ends). custream's probes find the stream deep, and the main
    thread's launches go through a launcher thread while it waits in slices: the handler's
    exception ends each within a slice; the launch goes on, holding what it uses open, and
    ends when the queue has room. A shallow stream's launches never leave the thread."""
    checkpoint = 128  # src/host/queue_depth.rs
    signal.signal(signal.SIGUSR1, raise_stop)
    s, e = Stream(), Event()

    # Shallow: its probes are done at every checkpoint.
    for _ in range(4 * checkpoint):
        s.record(e)
    s.synchronize()
    assert launchers() == 0, launchers()

    # Deep: a long kernel holds the queue, so the probe of the first checkpoint is still
    # pending at the second, and from then on the main thread's launches hop.
    kernel(s, 6000)
    for _ in range(2 * checkpoint + 1):
        s.record(e)
    assert launchers() == 1, launchers()
    word = fake.fake_mem_alloc(8)
    fake.fake_queue_limit(1)
    destroyed = fake.fake_destroyed()
    sigint = (signal.SIGINT, KeyboardInterrupt)
    abandoned = 0
    # Each a callable of C (a partial of a method): the line that calls it is the one that
    # waits (signal_when_blocked).
    for name, launch, (sig, exc) in [
        ("record", functools.partial(s.record, e), sigint),
        ("wait", functools.partial(s.wait, e), (signal.SIGUSR1, Stop)),
        ("launch_host_func", functools.partial(s.launch_host_func, int), sigint),
        ("write_value", functools.partial(s.write_value, word, 7), sigint),
        ("synchronize", s.synchronize, sigint),
    ]:
        # The signal comes once the launch waits in the driver for room (the stand-in counts
        # it), the main thread waiting for it.
        sender = signal_when_blocked(MAIN, INTERRUPTED, sig, also=lambda: fake.fake_room_waiters() == abandoned + 1,
                                     what=f", its {name} waiting for room")
        t = time.monotonic()
        with pytest.raises(exc):
            launch()  # interrupted
        took = time.monotonic() - t
        sender.join()
        abandoned += 1
        # Well before the kernel's end (the GPU test holds the 100 ms; here emulated aarch64
        # runs too).
        assert took < 0.9, (name, took)
        assert fake.fake_room_waiters() == abandoned, f"{name}: the abandoned launch waits for room"
    # Each launch still holds the stream and event open: close() takes effect after them.
    s.close()
    e.close()
    assert s.closed and e.closed
    assert fake.fake_destroyed() == destroyed, "released under a launch"
    fake.fake_queue_limit(0)

    def written():
        return ctypes.c_uint32.from_address(word).value == 7

    # Each abandoned launch made, the stream released after them, the write run by the "GPU"
    # once the kernel ended.
    wait_until(lambda: fake.fake_destroyed() != destroyed and not fake.fake_room_waiters() and written(),
               "the abandoned launches ran and the stream was released after them", timeout=20)
    settle()

    # Off the main thread no handler runs: a launch into a full queue waits in the driver
    # with the GIL let go, where it is.
    s2, e2 = Stream(), Event()
    kernel(s2, 5000)
    for _ in range(2 * checkpoint + 1):
        s2.record(e2)
    hops = launchers()
    fake.fake_queue_limit(1)
    t = threading.Thread(target=s2.record, args=(e2,))
    t.start()
    wait_until(lambda: fake.fake_room_waiters() == 1, "the thread's launch waits for room")
    # This thread runs meanwhile (time is the point: it ticks through 0.3 s).
    ticks, end = 0, time.monotonic() + 0.3
    while time.monotonic() < end:
        ticks += 1
        time.sleep(0.005)  # time under test: this thread ticks meanwhile
    assert ticks > 20, ticks
    assert fake.fake_room_waiters() == 1 and t.is_alive()
    fake.fake_queue_limit(0)
    t.join(10)
    assert not t.is_alive()
    assert launchers() == hops, "a thread's launch took a launcher"
    s2.synchronize()
    s2.close()
    settle()


@CAPTURE
def test_off_the_main_thread_plain_and_timed_waits_work(kernel):
    s = Stream()
    errors = []

    def worker(i):
        try:
            for _ in range(20):
                kernel(s, 1)
                if i % 2:
                    s.synchronize()
                else:
                    s.synchronize(timeout=5)
                e = s.record()
                kernel(s, 1)
                e.synchronize(timeout=5) if i % 3 else e.synchronize()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    settle()


@CAPTURE
def test_hundreds_of_awaits_never_block_the_loop_in_the_driver(fake, kernel):
    """The driver blocks a host function launched while too many are pending (an H100: at 56
    pending on 56 streams, and at 224 on four; 400 awaits behind 0.3 s kernels froze the event
    loop for the kernels' length). The stand-in blocks so past 20 pending: custream keeps one
    host function pending per notifier and at most 16 notifiers busy per context; a wait on a
    later record of a stream parks behind the notifier of an earlier one (four notifiers for
    four streams), any other wait gets a notifier of its own up to 16 and parks behind those
    after. The loop runs on, every await ends, and the notifiers are given back."""
    fake.fake_host_funcs(20)
    streams = [Stream() for _ in range(4)]

    async def main():
        ticks, tick = ticker(0.005)
        for s in streams:
            kernel(s, 100)  # the stand-in runs its queue in order: 0.4 s in all
        events = [streams[i % 4].record() for i in range(400)]
        waits = [asyncio.ensure_future(_await(e)) for e in events]
        await until(lambda: custream._waits.pending_futures() == 400, "400 awaits armed")
        armed = time.monotonic()
        assert fake.fake_host_func_waiters() == 0
        assert pending_waits() == 400, pending_waits()
        # One host function pending a notifier; a notifier a stream at most (awaits armed
        # before custream's maker thread made spares park on the first notifier).
        assert 1 <= fake.fake_host_func_peak() <= 4, fake.fake_host_func_peak()
        ticks0 = ticks[0]
        await asyncio.gather(*waits)
        assert all(s.query() for s in streams)
        assert ticks[0] - ticks0 >= 20, (ticks[0] - ticks0, time.monotonic() - armed)
        # Events custream did not record in stream order (awaited latest first, and
        # foreign records): notifiers of their own up to 16, then shared. Making a stream
        # now waits while work is queued (an H100 blocked so, a few dozen streams in): the
        # context's 16 notifiers and their bells were made with its first stream, so none
        # is made now, and the loop runs on.
        kernel(streams[0], 300)
        events = [streams[i % 4].record() for i in range(100)]
        foreign = [Event() for _ in range(50)]
        for e in foreign:
            fake.cuEventRecord(ctypes.c_void_p(e.handle), ctypes.c_void_p(streams[1].handle))
        fake.fake_host_funcs(20)
        made, ticks1 = fake.fake_streams_made(), ticks[0]
        fake.fake_busy_stream_create(made)
        futures = [e.future() for e in reversed(events)] + [e.future() for e in foreign]
        futures.append(asyncio.to_thread(events[-1].synchronize, timeout=5))  # a thread's wait
        await asyncio.gather(*(asyncio.wrap_future(f) if not asyncio.iscoroutine(f) else f for f in futures))
        assert ticks[0] - ticks1 >= 20, ticks[0] - ticks1
        assert fake.fake_streams_made() == made  # not one stream made while work was queued
        assert fake.fake_host_func_waiters() == 0
        assert 1 <= fake.fake_host_func_peak() <= 17, fake.fake_host_func_peak()
        tick.cancel()

    asyncio.run(main())
    settle()
    fake.fake_host_funcs(0)
    fake.fake_busy_stream_create(0)


def foreign_stream(fake):
    """A stream another library made (custream wraps it): its context gets no notifiers with
    it, as a stream custream makes gives its own."""
    fake.cuStreamCreateWithPriority.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
    h = ctypes.c_void_p()
    assert fake.cuStreamCreateWithPriority(ctypes.byref(h), 1, 0) == 0
    return Stream.from_handle(h.value, device=0)


@CAPTURE
def test_awaits_on_custreams_streams_make_no_stream_while_the_gpu_is_busy(fake, kernel):
    """Making a stream while the GPU is busy can cost a core for as long (the driver spins in
    cuStreamCreate: an H200 spent the whole wait making notifiers for 64 awaits). custream
    makes a context's 16 notifiers, each with its bell, as it makes the context's first
    stream (Stream() or a pool's), before that stream is busy; the awaits of 64 streams
    behind queued work then park behind those and make none, in every order."""
    made_before = fake.fake_streams_made()
    streams = [Stream() for _ in range(64)]
    # 64 streams, and 16 notifiers with 16 bells made once, with the first.
    assert fake.fake_streams_made() - made_before == 64 + 32, fake.fake_streams_made() - made_before
    assert custream._custream._notifier_streams() == 32
    pool = custream.StreamPool(2)
    pool.get()
    made = fake.fake_streams_made()
    assert made - made_before == 64 + 32 + 1  # the pool's first stream: the context has its notifiers
    fake.fake_busy_stream_create(made)  # making a stream from now on waits for the queue

    async def main():
        ticks, tick = ticker(0.005)
        for s in streams:
            kernel(s, 5)  # the stand-in runs one queue: 0.32 s in all
        for latest_first in (False, True):
            events = [s.record() for s in streams]
            ticks0 = ticks[0]
            await asyncio.gather(*(_await(e) for e in (events[::-1] if latest_first else events)))
            assert ticks[0] - ticks0 >= 5, ticks[0] - ticks0  # the loop ran meanwhile
            for s in streams:
                kernel(s, 2)
        tick.cancel()

    asyncio.run(main())
    settle()
    assert fake.fake_streams_made() == made, "a stream was made while work was queued"
    fake.fake_busy_stream_create(0)


@CAPTURE
def test_a_threads_wait_keeps_its_deadline_while_the_driver_blocks_making_a_stream(fake, kernel):
    """The driver may block making a stream while the GPU is busy (an H100 did, a few dozen
    streams in, until the work ended), in a wait no signal cuts short. A thread's wait that
    finds no idle notifier (on a stream of another library's: custream made none ahead) has
    custream's maker thread make one and waits for it in slices, asking the driver about the
    stream meanwhile: a timeout comes on time, Ctrl-C ends the wait, and a wait without
    either ends with the work."""
    s = foreign_stream(fake)
    fake.fake_busy_stream_create(fake.fake_streams_made())  # any stream from now, while work is queued
    kernel(s, 700)
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="synchronize"):
        s.synchronize(timeout=0.1)
    assert time.monotonic() - t < 0.15, time.monotonic() - t
    sender = signal_when_blocked(MAIN, INTERRUPTED, signal.SIGINT)
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        s.synchronize()  # interrupted
    assert time.monotonic() - t < 0.2, time.monotonic() - t
    sender.join()
    assert not s.query()  # the work runs on
    s.synchronize()
    assert s.query()
    fake.fake_busy_stream_create(0)
    s.synchronize(timeout=5)  # notifiers made by then: the usual path
    settle()


@CAPTURE
def test_parked_waits_ring_from_custreams_thread_or_end_by_the_drivers_answer(fake, kernel):
    """Waits parked behind a busy notifier get their host function from custream's thread, on
    the notifier's bell stream, once the notifier rings: they end when their work does. If
    the driver refuses those launches, nothing will ring for them: the event loop's check
    (once a second) and a future's watch see the events reached and end them. No wait stays
    pending either way."""
    s, s2 = Stream(), Stream()

    async def main(fail):
        kernel(s, 100)
        first = s.record()
        waits = [asyncio.ensure_future(_await(first))]
        await asyncio.sleep(0)  # armed: its notifier waits, then rings
        kernel(s2, 200)  # the stand-in runs one queue: the marks below come 0.2 s after the ring
        later, later_f = s.record(), s.record()
        waits.append(asyncio.ensure_future(_await(later)))
        await asyncio.sleep(0)  # armed before the future: both park behind the first's ring
        future = later_f.future()
        await until(lambda: pending_waits() == 3, "the two later waits parked")
        fake.fake_host_func_fail(fail)  # the next launches: the parked waits' rings
        t0 = time.monotonic()
        await waits[0]
        await asyncio.wait_for(asyncio.gather(waits[1], asyncio.wrap_future(future)), 5)
        took = time.monotonic() - t0
        assert later.query() and future.result() is None
        left = fake.fake_host_func_fail(0)
        assert left == 0, left  # the launches were tried (and failed, if asked to)
        return took

    took = asyncio.run(main(0))
    assert 0.15 < took < 0.6, took  # rung when the work ended
    took = asyncio.run(main(2))
    assert 0.6 < took < 2.5, took  # by the check a second after, not before the work
    settle()


@CAPTURE
def test_await_lets_the_loop_run_and_cancelling_leaves_nothing(kernel):
    s = Stream()

    async def main():
        ticks, tick = ticker(0.01)
        kernel(s, 300)
        t = time.monotonic()
        await s.record()
        assert s.query() is True
        took = time.monotonic() - t
        assert took >= 0.25 and ticks[0] >= 10, (took, ticks[0])
        await s.record()  # idle: at once
        done = Event()
        done.record(s)
        await done

        kernel(s, 200)
        e = s.record()
        waiter = asyncio.create_task(_await(e))
        await until(lambda: custream._waits.pending_futures() == 1, "the await armed")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert custream._waits.pending_futures() == 0, "a cancelled await keeps its future"
        await asyncio.wait_for(_await(s.record()), timeout=5)
        kernel(s, 300)
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await asyncio.wait_for(_await(s.record()), timeout=0.05)
        tick.cancel()

    asyncio.run(main())
    s.synchronize()
    settle()


@CAPTURE
def test_hundreds_of_awaits_take_no_thread_each_and_two_loops_await_at_once(kernel):
    def threads():
        return len(os.listdir("/proc/self/task"))

    streams = [Stream() for _ in range(4)]

    async def many(n):
        for s in streams:
            kernel(s, 150)
        events = [streams[i % 4].record() for i in range(n)]
        before = threads()
        waits = [asyncio.ensure_future(_await(e)) for e in events]
        # Armed (every await of this loop: two loops may run this at once).
        await until(lambda: all(w.done() for w in waits) or pending_waits() >= n, f"{n} awaits armed")
        during = threads()
        assert not any(w.done() for w in waits)
        await asyncio.gather(*waits)
        return before, during

    asyncio.run(many(4))  # warm
    before, during = asyncio.run(many(400))
    assert during <= before, (before, during)
    results, errors = [], []

    def loop_thread():
        try:
            results.append(asyncio.run(many(100)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=loop_thread) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors and len(results) == 2, errors
    settle()


@CAPTURE
def test_a_burst_of_awaits_ending_together_wakes_the_loop_once(kernel):
    """Awaits whose events are reached together (one kernel ends) ring the loop's bell once: only
    the first token since the loop last took them writes its eventfd, so the loop takes them all
    in one turn instead of a turn (and a write) for each. Here the loop is held while every host
    function runs, so the eventfd's counter says how many wrote."""
    s = Stream()

    async def main(n):
        kernel(s, 100)
        waits = [asyncio.ensure_future(_await(s.record())) for _ in range(n)]
        await until(lambda: pending_waits() >= n, f"{n} awaits armed")
        ring = custream._waits._ring_of(asyncio.get_running_loop())
        wait_until(lambda: pending_waits() == 0, "every host function ran")  # the loop held meanwhile
        writes = int.from_bytes(os.read(ring.bell.fileno(), 8), sys.byteorder)
        ring()  # what the loop would run for that one write
        await asyncio.gather(*waits)
        return writes

    assert asyncio.run(main(200)) == 1
    settle()


@CAPTURE
def test_future_completes_from_custreams_thread_and_may_be_cancelled(kernel):
    s = Stream()
    kernel(s, 150)
    f = s.record().future()
    assert isinstance(f, concurrent.futures.Future) and not f.done()
    ran, called = [], threading.Event()
    f.add_done_callback(lambda fut: (ran.append(threading.current_thread().name), called.set()))
    assert f.result(timeout=5) is None
    # Callbacks run after the result is set, on the completing thread: wait for it.
    assert called.wait(5) and ran[0] != threading.current_thread().name, ran
    assert s.record().future().done()  # idle: done at once
    kernel(s, 150)
    g = s.record().future()
    assert g.cancel() and g.cancelled()

    async def other_loop():
        kernel(s, 50)
        await asyncio.wrap_future(s.record().future())

    asyncio.run(other_loop())
    s.synchronize()
    settle()


@CAPTURE
def test_the_c_api_waits_with_a_timeout(fake, kernel):
    from _capi_ctypes import capi

    api = capi()
    s = Stream()
    kernel(s, 400)
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match=r"Custream_SynchronizeTimeout\(\) timeout must be"):
            api.synchronize_timeout(s, bad)
    with pytest.raises(TypeError, match=r"Custream_SynchronizeTimeout\(\) expected a custream.Stream"):
        api.synchronize_timeout("x", 1.0)
    with pytest.raises(TimeoutError):
        api.synchronize_timeout(s, 0.05)
    assert api.synchronize_timeout(s, math.inf) == 0 and s.query()
    kernel(s, 1200)
    sender = signal_when_blocked(MAIN, INTERRUPTED, signal.SIGINT)
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        api.synchronize(s)  # interrupted
    assert time.monotonic() - t < 0.9
    sender.join()
    s.synchronize()
    settle()


@STICKY
def test_a_fault_ends_pending_waits_with_the_drivers_error(driver):
    """A faulted driver runs no host function: the waits see the fault through their queries
    (a thread between slices, an event loop every second)."""
    s = Stream()
    driver.standin_hold(1)
    e = s.record()
    # The fault comes while the event's wait waits; the stream's wait then finds it.
    faulter = threading.Thread(target=lambda: (
        wait_until(lambda: blocked_at(MAIN, FAULTED), "the wait waits"), driver.standin_sticky(700)))
    faulter.start()
    for wait in (e.synchronize, functools.partial(s.synchronize, timeout=5)):
        with pytest.raises(custream.CudaError) as err:
            wait()  # faulted
        assert err.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err.value
    faulter.join()
    driver.standin_sticky(0)

    async def main():
        pending = asyncio.ensure_future(_await(e))
        await until(lambda: custream._waits.pending_futures() == 1, "the await armed")
        driver.standin_sticky(700)
        with pytest.raises(custream.CudaError) as err:
            await asyncio.wait_for(pending, 5)
        assert err.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err.value

    asyncio.run(main())
    assert custream._waits.pending_futures() == 0
    # A future made before the fault: failed by custream's watch within about a second.
    driver.standin_sticky(0)
    future = e.future()
    t = time.monotonic()
    driver.standin_sticky(700)
    with pytest.raises(custream.CudaError) as err:
        future.result(timeout=5)
    assert err.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err.value
    assert time.monotonic() - t < 2.5
    # The watch ends once nothing is pending.
    wait_until(lambda: not any(t.name == "custream-future-watch" for t in threading.enumerate()),
               "the watch ended", timeout=5)


@STICKY
def test_the_loops_check_asks_one_event_per_context_and_a_fault_ends_them_all(driver):
    """Pending awaits cost the loop's check (once a second) one driver query per context, not
    one each: a sticky fault fails every call in its context, so that one answer ends all the
    context's awaits with the driver's error."""
    driver.standin_event_queries.restype = ctypes.c_int
    s = Stream()
    driver.standin_hold(1)
    events = [s.record() for _ in range(300)]

    async def main():
        loop = asyncio.get_running_loop()
        waits = [asyncio.ensure_future(_await(e)) for e in events]
        await asyncio.sleep(0)  # every task ran its first step: all armed
        assert custream._waits.pending_futures() == 300
        ring = custream._waits._ring_of(loop)
        before = driver.standin_event_queries()
        ring.check(loop)  # what the loop runs once a second
        assert driver.standin_event_queries() - before == 1
        assert not any(w.done() for w in waits)
        driver.standin_sticky(700)
        ring.check(loop)
        return await asyncio.gather(*waits, return_exceptions=True)

    try:
        errors = asyncio.run(main())
    finally:
        driver.standin_sticky(0)
        driver.standin_hold(0)
    assert {type(e).__name__ for e in errors} == {"CudaError"}
    assert {e.name for e in errors} == {"CUDA_ERROR_ILLEGAL_ADDRESS"}
    assert custream._waits.pending_futures() == 0


@STICKY
def test_the_futures_watch_asks_one_event_per_context_and_each_orphans(driver, monkeypatch):
    """Pending ``Event.future()``s cost their watch (once a second) one driver query per
    context, and one for each future whose wait custream abandoned (nothing else will complete
    it); a sticky fault, answered once, fails every future of the context."""
    driver.standin_event_queries.restype = ctypes.c_int
    # The check is run here, by hand: the watch's own (its thread made with the first future)
    # waits an hour, so no query of its own falls between the counts.
    monkeypatch.setattr(custream._waits, "CHECK_S", 3600.0)
    assert custream._waits._watcher is None
    s = Stream()
    driver.standin_hold(1)
    try:
        futures = [s.record().future() for _ in range(300)]
        assert not any(f.done() for f in futures)
        before = driver.standin_event_queries()
        custream._waits.check_futures()  # what the watch runs once a second
        assert driver.standin_event_queries() - before == 1
        custream._waits.orphaned_future(futures[7])
        before = driver.standin_event_queries()
        custream._waits.check_futures()
        assert driver.standin_event_queries() - before == 2
        assert not any(f.done() for f in futures)  # held: nothing reached
        driver.standin_sticky(700)
        custream._waits.check_futures()
    finally:
        driver.standin_sticky(0)
        driver.standin_hold(0)
    errors = {f.exception(timeout=5).name for f in futures}
    assert errors == {"CUDA_ERROR_ILLEGAL_ADDRESS"}
    assert not custream._waits._watched and not custream._waits._orphans


@STICKY
def test_close_after_a_sticky_fault_does_not_raise(driver):
    s, e = Stream(), Event()
    alive = driver.standin_live_streams()
    driver.standin_sticky(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: every call now answers it
    for call in (s.synchronize, s.query, lambda: s.synchronize(timeout=1), e.synchronize, s.record):
        with pytest.raises(custream.CudaError) as err:
            call()
        assert err.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err.value
    s.close()
    e.close()  # gone with the context: no error
    assert s.closed and e.closed
    assert driver.standin_live_streams() < alive
