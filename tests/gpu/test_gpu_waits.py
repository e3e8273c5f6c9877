"""Waits that end, with real kernels (issue 38): timeouts, Ctrl-C during a wait, ``await``
and futures, ``close()`` after a sticky fault, and a 16-thread stress of all of them beside
CuPy and PyTorch. Each runs in a pytest process of its own (marked ``isolated``,
tests/conftest.py) under its watchdog (native and Python stacks, then a failure, instead of a
hang): the signals it sends and a sticky fault reach that process alone, and a first wait
there is the process's first.

A Ctrl-C is sent once the main thread waits inside the call (``_threads.blocked_at`` on the
line marked ``# interrupted``), not after a guessed time."""

import asyncio
import functools
import os
import signal
import threading
import time

import pytest

import custream
import custream._waits
from _threads import blocked_at, wait_until
from custream import Event, Stream
from custream._custream import _pending_waits
from custream_gpu_helpers import peer, sleep_kernel, sleep_on

pytestmark = pytest.mark.gpu

cupy = peer("cupy")

ISOLATED = pytest.mark.isolated(timeout=150)
MAIN = threading.main_thread()
# The comment that marks the line of a wait a Ctrl-C is sent into (interrupt_when_waiting):
# named here, so that no other line holds the text.
INTERRUPTED = "# interrupted"


@pytest.fixture(autouse=True)
def on_device_0():
    """CuPy works on device 0 in every test here."""
    cupy.cuda.Device(0).use()


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler, even where the parent left SIGINT ignored (a job started
    with `&` by a non-interactive shell: Python then installs none)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def settle(timeout=10):
    end = time.monotonic() + timeout
    while _pending_waits():
        assert time.monotonic() < end, _pending_waits()
        time.sleep(0.005)  # a poll's interval
    assert custream._waits.pending_futures() == 0


def interrupt_when_waiting():
    """Send SIGINT to this process once the main thread waits inside the call on the line
    marked ``# interrupted``: (the sender thread, a list that gets the time it was sent)."""
    sent = []

    def send():
        wait_until(lambda: blocked_at(MAIN, INTERRUPTED), "the main thread waits in the call marked to interrupt")
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender, sent


def signal_after(seconds, sig=signal.SIGINT):
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), sig)

    threading.Timer(seconds, send).start()
    return sent


@ISOLATED
def test_a_timed_wait_gives_up_in_time_and_the_work_runs_on():
    s = Stream(device=0)
    sleep_on(s, 0.02)
    s.synchronize(timeout=5)  # warm: the notifier stream exists
    for name, wait, what in [
        ("stream", lambda: s.synchronize(timeout=0.1), "Stream.synchronize()"),
        ("event", lambda: s.record().synchronize(timeout=0.1), "Event.synchronize()"),
    ]:
        sleep_on(s, 0.6)
        t = time.monotonic()
        try:
            wait()
        except TimeoutError as e:
            late = time.monotonic() - t - 0.1
            assert what in str(e), e
        else:
            raise AssertionError(name)
        assert -0.001 <= late < 0.05, (name, late)  # within 50 ms past the timeout
        assert s.query() is False
        s.synchronize(timeout=5)
        print(name, "late by", round(late * 1000, 1), "ms")
    settle()
    s.close()


@ISOLATED
def test_a_first_timed_wait_keeps_its_deadline_beside_dozens_of_busy_streams(ctrl_c):
    """The driver may block making a stream while the GPU is busy (an H100 did, with a few
    dozen streams in the process). A process's first thread waits, with no notifier made yet,
    behind 40 busy streams: the notifier is made on custream's maker thread, so the timeout
    comes on time and Ctrl-C ends the next wait, whether or not the driver blocks there."""
    streams = [Stream(device=0) for _ in range(40)]
    for x in streams:
        sleep_on(x, 1.5)
    s = streams[0]
    t = time.monotonic()
    try:
        s.synchronize(timeout=0.1)
    except TimeoutError:
        late = time.monotonic() - t - 0.1
    else:
        raise AssertionError("synchronize(timeout=0.1) of a 1.5 s kernel returned")
    assert -0.001 <= late < 0.05, late
    sender, sent = interrupt_when_waiting()
    with pytest.raises(KeyboardInterrupt):
        streams[1].synchronize()  # interrupted
    after = time.monotonic() - sent[0]
    sender.join()
    assert after < 0.1, after
    assert not s.query()
    for x in streams:
        x.synchronize(timeout=10)
    settle()
    print("late by", round(late * 1000, 1), "ms; Ctrl-C ended the wait", round(after * 1000, 1), "ms after SIGINT")


@ISOLATED
def test_ctrl_c_ends_every_wait_within_100_ms(ctrl_c):
    s = Stream(device=0)
    sleep_on(s, 0.01)
    s.synchronize()
    # Each wait a callable of C (a method, a partial of one): the line that calls it is the
    # one that waits (interrupt_when_waiting).
    for name, make_wait in [
        ("Stream.synchronize()", lambda: s.synchronize),
        ("Stream.synchronize(timeout=60)", lambda: functools.partial(s.synchronize, timeout=60)),
        ("Event.synchronize()", lambda: s.record().synchronize),
    ]:
        sleep_on(s, 2.0)
        wait = make_wait()
        sender, sent = interrupt_when_waiting()
        with pytest.raises(KeyboardInterrupt):
            wait()  # interrupted
        after = time.monotonic() - sent[0]
        sender.join()
        assert after < 0.1, (name, after)
        assert s.query() is False, "the kernel must still run"
        s.synchronize(timeout=10)  # still usable; the kernel ran to its end
        print(name, "ended", round(after * 1000, 1), "ms after SIGINT")
    settle()
    s.close()


@ISOLATED
def test_ctrl_c_ends_a_launch_into_a_full_queue_within_100_ms(ctrl_c):
    """Records on the main thread behind a 4 s kernel fill the stream's queue; the driver's
    wait for room is no signal's to end, so custream's launcher makes it (src/host/queue_depth.rs) and
    Ctrl-C ends the record within a slice. Prints the queue's depth as the driver has it
    (CuPy's launches behind a kernel, timed until one waits), which CHECKPOINT must stay far
    below, and what a record costs once the stream is deep."""
    CHECKPOINT = 128  # src/host/queue_depth.rs
    kernel = sleep_kernel()
    s, e = Stream(device=0), Event(device=0)
    sleep_on(s, 0.01)
    s.synchronize()

    other = Stream(device=0)
    sleep_on(other, 2.0)
    depth = None
    with cupy.cuda.ExternalStream(other.handle):
        for i in range(100000):
            t = time.perf_counter()
            kernel((1,), (1,), (cupy.uint64(0),))
            if time.perf_counter() - t > 0.01:
                depth = i
                break
    print("queue depth: CuPy's launch", depth, "waited for room")
    assert depth is not None and depth > 4 * CHECKPOINT, depth
    other.synchronize(timeout=10)
    other.close()

    # A graph of one empty kernel: its launches take the queue's entries as kernels do (event
    # records take far fewer: 76,601 of them behind a kernel never filled it, H100, 2026-12-06).
    g = Stream(device=0)
    g.begin_capture()
    with cupy.cuda.ExternalStream(g.handle):
        kernel((1,), (1,), (cupy.uint64(0),))
    graph = g.end_capture()

    for what, launch in [("Graph.launch", lambda: graph.launch(s)), ("record", lambda: s.record(e))]:
        sleep_on(s, 4.0)
        # Time is the point: a second of launches (those that fill the queue by then wait for
        # room; records may never), then Ctrl-C ends whichever call runs.
        sent = signal_after(1.0)
        n, slowest, t0 = 0, 0.0, time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            while True:
                t = time.perf_counter()
                launch()
                slowest = max(slowest, time.perf_counter() - t)
                n += 1
        late = time.monotonic() - sent[0]
        took = time.perf_counter() - t0
        print(f"{what}: {n} before Ctrl-C ({took / n * 1e6:.1f} us each), slowest that returned {slowest * 1e3:.1f} ms; "
              f"KeyboardInterrupt {late * 1e3:.1f} ms after SIGINT")
        assert late < 0.1, (what, late)
        assert s.query() is False, "the kernel must still run"
        if what == "Graph.launch":
            # The queue filled: the launches stopped near its depth, and the one Ctrl-C ended was
            # waiting for room (about 76,000 returned in a second where there was room).
            assert n < 4 * depth, (n, depth)
        s.synchronize(timeout=10)
    graph.close()
    g.close()
    s.synchronize(timeout=10)
    s.record(e)
    e.synchronize(timeout=10)
    s.close()
    e.close()
    settle()


@ISOLATED
def test_awaits_run_the_loop_and_cost_no_thread():
    streams = [Stream(device=0) for _ in range(4)]

    async def _await(e):
        await e

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)  # time under test: the loop turns
                ticks += 1

        tick = asyncio.create_task(ticker())
        sleep_on(streams[0], 0.001)  # CuPy compiles and loads the kernel here, before the clock starts
        await asyncio.sleep(0)  # the ticker ran its first step
        t0, ticks0 = time.monotonic(), ticks
        for s in streams:
            sleep_on(s, 0.3)
        threads = len(os.listdir("/proc/self/task"))
        t1 = time.monotonic()
        events = [streams[i % 4].record() for i in range(400)]
        t2 = time.monotonic()
        waits = [asyncio.ensure_future(_await(e)) for e in events]
        await asyncio.sleep(0)  # every await ran its first step (the ready queue is in order): armed
        t3 = time.monotonic()
        grown = len(os.listdir("/proc/self/task")) - threads
        print("threads before", threads, "grown by", grown, "with 400 awaits pending")
        assert grown < 100, grown  # no thread per await (the driver may start a few of its own)
        await asyncio.gather(*waits)
        t4 = time.monotonic()
        print(f"kernels queued in {(t1 - t0) * 1e3:.1f} ms, 400 records {(t2 - t1) * 1e3:.1f} ms, the 400 awaits "
              f"armed in {(t3 - t2) * 1e3:.1f} ms, the rest in {(t4 - t3) * 1e3:.1f} ms; "
              f"ticks {ticks - ticks0}")
        assert all(s.query() for s in streams)
        assert ticks - ticks0 >= 30, ticks - ticks0  # the loop ran while 400 awaits were pending
        # Awaited latest first: no record-order sharing, so 16 notifiers and then parked behind
        # them, one host function pending each: the driver's bound (an H100 blocked at 56 pending
        # on 56 streams, at 224 on four) never met.
        for s in streams:
            sleep_on(s, 0.3)
        events = [streams[i % 4].record() for i in range(400)]
        ticks1 = ticks
        await asyncio.gather(*[asyncio.ensure_future(_await(e)) for e in reversed(events)])
        assert all(s.query() for s in streams)
        assert ticks - ticks1 >= 30, ticks - ticks1
        sleep_on(streams[0], 0.3)
        cancelled = asyncio.ensure_future(_await(streams[0].record()))
        await asyncio.sleep(0)  # armed
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        await asyncio.wrap_future(streams[0].record().future())
        tick.cancel()
        print("awaited 400, ticks", ticks)

    asyncio.run(main())
    settle()


@ISOLATED
def test_after_a_sticky_fault_close_is_quiet_and_each_call_says_what_happened():
    # The fault poisons the context for the rest of the process: this test's own.
    bad = cupy.RawKernel(r'extern "C" __global__ void bad() { *(volatile int *)16 = 1; }', "bad")
    s, e, s2 = Stream(device=0), Event(device=0), Stream(device=0)
    with cupy.cuda.ExternalStream(s.handle):
        bad((1,), (1,), ())
    try:
        try:
            s.synchronize()
        finally:
            s2.close()  # must not mask the fault
    except custream.CudaError as err:
        assert err.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err
        assert s2.closed
    else:
        raise AssertionError("no fault")

    def outcome(call):
        try:
            call()
            return "ok"
        except custream.CudaError as err:
            return err.name
        except Exception as err:  # noqa: BLE001 - its type is the outcome
            return type(err).__name__

    table = {
        "s.synchronize()": outcome(s.synchronize),
        "s.synchronize(timeout=1)": outcome(lambda: s.synchronize(timeout=1)),
        "s.query()": outcome(s.query),
        "s.record()": outcome(s.record),
        "e.record(s)": outcome(lambda: e.record(s)),
        "e.synchronize()": outcome(e.synchronize),
        "e.query()": outcome(e.query),
        "Stream()": outcome(lambda: Stream(device=0)),
        "Event()": outcome(lambda: Event(device=0)),
        "s.close()": outcome(s.close),
        "e.close()": outcome(e.close),
    }
    for k, v in table.items():
        print(f"{k}: {v}")
    assert table["s.synchronize()"] == "CUDA_ERROR_ILLEGAL_ADDRESS", table
    assert table["s.close()"] == table["e.close()"] == "ok", table
    assert s.closed and e.closed


@ISOLATED
def test_sixteen_threads_of_timed_waits_awaits_and_signals_beside_cupy_and_torch():
    torch = peer("torch")
    torch.cuda.init()
    SECONDS = 20
    stop = time.monotonic() + SECONDS
    errors, lock = [], threading.Lock()
    counts = {"timed": 0, "timeouts": 0, "awaits": 0, "cancelled": 0, "futures": 0, "load": 0}
    base = custream.live_stream_count()

    def add(**kw):
        with lock:
            for k, v in kw.items():
                counts[k] += v

    def guarded(fn):
        def body(*a):
            try:
                fn(*a)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(f"{fn.__name__}{a}: {type(exc).__name__}: {exc}")
        return body

    @guarded
    def waiter(k):
        while time.monotonic() < stop:
            with Stream(device=0) as s:
                sleep_on(s, 0.002)
                if k % 2:
                    s.synchronize(timeout=5)
                else:
                    s.record().synchronize(timeout=5)
                sleep_on(s, 0.05)
                try:
                    s.synchronize(timeout=0.005)
                    # Back in time only if the work is really done.
                    assert s.query(), "synchronize(timeout=) returned with the work pending"
                except TimeoutError:
                    add(timeouts=1)
                s.record().future().result(timeout=5)
                add(timed=1, futures=1)

    @guarded
    def loop_thread(k):
        async def _await(e):
            await e

        async def main():
            streams = [Stream(device=0) for _ in range(4)]
            while time.monotonic() < stop:
                for s in streams:
                    sleep_on(s, 0.003)
                waits = [asyncio.ensure_future(_await(streams[i % 4].record())) for i in range(40)]
                waits[0].cancel()
                done = await asyncio.gather(*waits, return_exceptions=True)
                add(awaits=sum(d is None for d in done), cancelled=sum(isinstance(d, asyncio.CancelledError) for d in done))
            for s in streams:
                s.synchronize()
                s.close()

        asyncio.run(main())

    @guarded
    def load(k):
        x = cupy.zeros(1 << 14, dtype=cupy.float32)
        t = torch.zeros(1 << 14, device="cuda")
        while time.monotonic() < stop:
            x += 1
            t.mul_(1.0001)
            with Stream(device=0) as s:
                s.wait(s.record())
            add(load=1)
        cupy.cuda.Device(0).synchronize()
        torch.cuda.synchronize()

    class Signalled(Exception):
        pass

    armed = [False]

    def handler(*_):
        if armed[0]:
            raise Signalled()

    signal.signal(signal.SIGUSR1, handler)

    def pester():
        while time.monotonic() < stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.03)  # the signals' rate

    threads = ([threading.Thread(target=waiter, args=(k,)) for k in range(8)]
               + [threading.Thread(target=loop_thread, args=(k,)) for k in range(2)]
               + [threading.Thread(target=load, args=(k,)) for k in range(5)]
               + [threading.Thread(target=pester)])
    for t in threads:
        t.start()
    interrupted = main_waits = 0
    s = Stream(device=0)
    while time.monotonic() < stop:
        sleep_on(s, 0.2)
        try:
            armed[0] = True
            s.synchronize()
        except Signalled:
            interrupted += 1
        finally:
            armed[0] = False
        s.synchronize(timeout=10)
        main_waits += 1
    for t in threads:
        t.join()
    s.close()
    del s  # a closed Stream is still a live object while referenced
    assert not errors, errors[:5]
    settle()
    assert interrupted > 0, "no signal ended a wait of the main thread"
    assert counts["timeouts"] > 0, counts
    # A launch a signal's handler left (src/host/queue_depth.rs) gives its stream back on custream's thread
    # once it is made: soon, not at once.
    end = time.monotonic() + 5
    while custream.live_stream_count() != base and time.monotonic() < end:
        time.sleep(0.01)  # a poll's interval
    assert custream.live_stream_count() == base, custream.live_stream_count()
    print(counts, "main waits", main_waits, "interrupted", interrupted)
