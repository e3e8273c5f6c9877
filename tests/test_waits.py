"""Waits that end (issue 38): ``synchronize(timeout=)``, Ctrl-C during a wait, ``await``,
``Event.future()``, the C API's ``Custream_SynchronizeTimeout``, and ``close()`` after a
sticky fault.

Against the stand-in drivers: tests/standin/capture.c runs "kernels" (its worker sleeps)
and host functions on a thread of its own, and its ``cuStreamSynchronize`` and
``cuEventSynchronize`` wait on a condition variable that no signal cuts short, as a busy
GPU's wait would not be; tests/standin/libcuda.c plays a sticky fault (``standin_sticky``).
tests/gpu/test_gpu_waits.py checks the same with real kernels."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import custream
import standin

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return standin.build("capture.c", tmp_path_factory.mktemp("waits-capture"))


@pytest.fixture(scope="module")
def sticky(tmp_path_factory):
    return standin.build("libcuda.c", tmp_path_factory.mktemp("waits-sticky"))


PRELUDE = textwrap.dedent(
    """
    import asyncio, ctypes, math, os, signal, sys, threading, time
    import custream, custream._waits
    from custream import Event, Stream
    from custream._custream import _pending_waits
    fake = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
    def kernel(s, ms):
        fake.fake_kernel(ctypes.c_void_p(s.handle), ms)
    def settle(timeout=10):
        # The host functions behind finished waits have all run (the stand-in's worker is
        # in order): nothing stays behind a wait.
        end = time.monotonic() + timeout
        while _pending_waits():
            assert time.monotonic() < end, _pending_waits()
            time.sleep(0.005)
        assert custream._waits.pending_futures() == 0
    # Python's own Ctrl-C handler, even where the parent left SIGINT ignored (a job started
    # with `&` by a non-interactive shell: Python then installs none).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    def signal_after(seconds, sig=signal.SIGINT):
        threading.Timer(seconds, os.kill, (os.getpid(), sig)).start()
    async def _await(e):
        await e
    def ticker(every):
        # A task counting the running loop's turns, one every `every` s: the count (in a
        # one-item list) and the task.
        count = [0]
        async def tick():
            while True:
                await asyncio.sleep(every)
                count[0] += 1
        return count, asyncio.create_task(tick())
    """
)


def run(lib, body, timeout=60):
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(lib))
    script = PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert "panicked" not in out.stderr and "Fatal Python error" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


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


def test_timeouts_give_up_in_time_and_leave_the_work_running(fake):
    out = run(fake, """
        s = Stream()
        kernel(s, 800)
        t = time.monotonic()
        try:
            s.synchronize(timeout=0.1)
        except TimeoutError as e:
            took = time.monotonic() - t
            assert "Stream.synchronize() timed out after 0.1 s" in str(e), e
            assert 0.1 <= took < 0.6, took
        else:
            raise AssertionError("no TimeoutError")
        assert s.query() is False, "the work was touched"
        e = s.record()
        try:
            e.synchronize(timeout=0)  # a poll
        except TimeoutError as err:
            assert "Event.synchronize() timed out after 0 s" in str(err)
        else:
            raise AssertionError("no TimeoutError")
        e.synchronize(timeout=5)
        assert s.query() is True
        s.synchronize(timeout=0)  # idle: no wait at all
        Event().synchronize(timeout=0)
        s.synchronize(timeout=math.inf)
        kernel(s, 50)
        s.synchronize(timeout=10**9)  # far: as good as none
        s.close()
        settle()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_ctrl_c_ends_a_wait_the_driver_would_not_end(fake):
    """The stand-in's synchronize is a condition wait that no signal ends: the old path sat
    out the whole kernel. The handler's exception comes within a slice (50 ms) instead."""
    out = run(fake, """
        class Stop(Exception):
            pass
        def raise_stop(*_):
            raise Stop()
        signal.signal(signal.SIGUSR1, raise_stop)
        s = Stream()
        sigint = (signal.SIGINT, KeyboardInterrupt)
        for name, wait, (sig, exc) in [
            ("Stream.synchronize", lambda: s.synchronize(), sigint),
            ("Stream.synchronize", lambda: s.synchronize(), (signal.SIGUSR1, Stop)),
            ("Stream.synchronize(timeout)", lambda: s.synchronize(timeout=30), sigint),
            ("Event.synchronize", lambda: s.record().synchronize(), sigint),
        ]:
            kernel(s, 1200)
            signal_after(0.1, sig)
            t = time.monotonic()
            try:
                wait()
            except exc:
                took = time.monotonic() - t
            else:
                raise AssertionError(f"{name}: no {exc.__name__}")
            # Well before the kernel's end: the wait ended at the signal.
            assert took < 0.9, (name, took)
            assert s.query() is False, f"{name}: the work must still run"
            print(name, exc.__name__, round(took, 2))
            # Still usable: a wait that is let run ends with the work.
            s.synchronize(timeout=10)
        s.close()
        settle()
        print("ok")
    """)
    assert out.strip().endswith("ok"), out


def test_ctrl_c_ends_a_launch_that_waits_for_room_in_a_full_queue(fake):
    """A launch into a full queue waits inside the driver (the stand-in's wait, as the
    driver's, is one no signal ends). custream's probes find the stream deep, and the main
    thread's launches go through a launcher thread while it waits in slices: the handler's
    exception ends each within a slice; the launch goes on, holding what it uses open, and
    ends when the queue has room. A shallow stream's launches never leave the thread."""
    out = run(fake, """
        CHECKPOINT = 128  # src/host/queue_depth.rs
        fake.fake_room_waiters.restype = ctypes.c_int
        fake.fake_mem_alloc.restype = ctypes.c_void_p
        fake.fake_mem_alloc.argtypes = [ctypes.c_size_t]
        def launchers():
            names = []
            for t in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{t}/comm") as f:
                        names.append(f.read().strip())
                except FileNotFoundError:
                    pass  # a thread that ended since the listing (signal_after's timer)
            return names.count("custream-launch")
        class Stop(Exception):
            pass
        def raise_stop(*_):
            raise Stop()
        signal.signal(signal.SIGUSR1, raise_stop)
        s, e = Stream(), Event()

        # Shallow: its probes are done at every checkpoint.
        for _ in range(4 * CHECKPOINT):
            s.record(e)
        s.synchronize()
        assert launchers() == 0, launchers()

        # Deep: a long kernel holds the queue, so the probe of the first checkpoint is still
        # pending at the second, and from then on the main thread's launches hop.
        kernel(s, 6000)
        for _ in range(2 * CHECKPOINT + 1):
            s.record(e)
        assert launchers() == 1, launchers()
        word = fake.fake_mem_alloc(8)
        fake.fake_queue_limit(1)
        destroyed = fake.fake_destroyed()
        sigint = (signal.SIGINT, KeyboardInterrupt)
        abandoned = 0
        for name, launch, (sig, exc) in [
            ("record", lambda: s.record(e), sigint),
            ("wait", lambda: s.wait(e), (signal.SIGUSR1, Stop)),
            ("launch_host_func", lambda: s.launch_host_func(lambda: None), sigint),
            ("write_value", lambda: s.write_value(word, 7), sigint),
            ("synchronize", lambda: s.synchronize(), sigint),
        ]:
            signal_after(0.1, sig)
            t = time.monotonic()
            try:
                launch()
            except exc:
                took = time.monotonic() - t
            else:
                raise AssertionError(f"{name}: no {exc.__name__}")
            abandoned += 1
            # Well before the kernel's end (the GPU test holds the 100 ms; here emulated
            # aarch64 runs too).
            assert took < 0.9, (name, took)
            end = time.monotonic() + 5  # the launcher may still be on its way into the driver
            while fake.fake_room_waiters() != abandoned and time.monotonic() < end:
                time.sleep(0.005)
            assert fake.fake_room_waiters() == abandoned, (name, fake.fake_room_waiters())
            print(name, exc.__name__, round(took, 3))
        # Each launch still holds the stream and event open: close() takes effect after them.
        s.close()
        e.close()
        assert s.closed and e.closed
        assert fake.fake_destroyed() == destroyed, "released under a launch"
        fake.fake_queue_limit(0)
        end = time.monotonic() + 20
        written = lambda: ctypes.c_uint32.from_address(word).value == 7
        # Each abandoned launch made, the stream released after them, the write run by the
        # "GPU" once the kernel ended.
        while fake.fake_destroyed() == destroyed or fake.fake_room_waiters() or not written():
            assert time.monotonic() < end, (fake.fake_destroyed(), fake.fake_room_waiters(), written())
            time.sleep(0.01)
        settle()

        # Off the main thread no handler runs: a launch into a full queue waits in the driver
        # with the GIL let go, where it is.
        s2, e2 = Stream(), Event()
        kernel(s2, 5000)
        for _ in range(2 * CHECKPOINT + 1):
            s2.record(e2)
        hops = launchers()
        fake.fake_queue_limit(1)
        t = threading.Thread(target=s2.record, args=(e2,))
        t.start()
        ticks, end = 0, time.monotonic() + 0.3
        while time.monotonic() < end:
            ticks += 1
            time.sleep(0.005)
        assert ticks > 20, ticks
        end = time.monotonic() + 5
        while fake.fake_room_waiters() != 1 and time.monotonic() < end:
            time.sleep(0.005)
        assert fake.fake_room_waiters() == 1 and t.is_alive()
        fake.fake_queue_limit(0)
        t.join(10)
        assert not t.is_alive()
        assert launchers() == hops, "a thread's launch took a launcher"
        s2.synchronize()
        s2.close()
        settle()
        print("ok")
    """)
    assert out.strip().endswith("ok"), out


def test_off_the_main_thread_plain_and_timed_waits_work(fake):
    out = run(fake, """
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
                    e = s.record(); kernel(s, 1)
                    e.synchronize(timeout=5) if i % 3 else e.synchronize()
            except BaseException as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        [t.start() for t in threads]; [t.join(60) for t in threads]
        assert not errors, errors
        settle()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_hundreds_of_awaits_never_block_the_loop_in_the_driver(fake):
    """The driver blocks a host function launched while too many are pending (an H100: at 56
    pending on 56 streams, and at 224 on four; 400 awaits behind 0.3 s kernels froze the event
    loop for the kernels' length). The stand-in blocks so past 20 pending: custream keeps one
    host function pending per notifier and at most 16 notifiers busy per context; a wait on a
    later record of a stream parks behind the notifier of an earlier one (four notifiers for
    four streams), any other wait gets a notifier of its own up to 16 and parks behind those
    after. The loop runs on, every await ends, and the notifiers are given back."""
    out = run(fake, """
        fake.fake_host_func_waiters.restype = ctypes.c_int
        fake.fake_host_func_peak.restype = ctypes.c_int
        fake.fake_host_funcs(20)
        streams = [Stream() for _ in range(4)]
        async def main():
            ticks, tick = ticker(0.005)
            for s in streams:
                kernel(s, 100)  # the stand-in runs its queue in order: 0.4 s in all
            events = [streams[i % 4].record() for i in range(400)]
            waits = [asyncio.ensure_future(_await(e)) for e in events]
            await asyncio.sleep(0.05)
            armed = time.monotonic()
            assert fake.fake_host_func_waiters() == 0
            assert _pending_waits() == 400, _pending_waits()
            # One host function pending a notifier; a notifier a stream at most (awaits armed
            # before custream's maker thread made spares park on the first notifier).
            assert 1 <= fake.fake_host_func_peak() <= 4, fake.fake_host_func_peak()
            ticks0 = ticks[0]
            await asyncio.gather(*waits)
            assert all(s.query() for s in streams)
            assert ticks[0] - ticks0 >= 20, (ticks[0] - ticks0, time.monotonic() - armed)
            # Events custream did not record in stream order (awaited latest first, and
            # foreign records): notifiers of their own up to 16, then shared. Making a stream
            # now waits while work is queued (an H100 blocked so, a few dozen streams in):
            # custream's maker thread makes the notifiers, and the loop runs on.
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
            assert fake.fake_streams_made() > made  # spares, by the maker thread
            assert fake.fake_host_func_waiters() == 0
            assert 1 <= fake.fake_host_func_peak() <= 17, fake.fake_host_func_peak()
            tick.cancel()
        asyncio.run(main())
        settle()
        fake.fake_host_funcs(0)
        fake.fake_busy_stream_create(0)
        print("ok")
    """)
    assert out.strip().endswith("ok"), out


def test_a_threads_wait_keeps_its_deadline_while_the_driver_blocks_making_a_stream(fake):
    """The driver may block making a stream while the GPU is busy (an H100 did, a few dozen
    streams in, until the work ended), in a wait no signal cuts short. A thread's wait that
    finds no idle notifier has custream's maker thread make one and waits for it in slices,
    asking the driver about the stream meanwhile: a timeout comes on time, Ctrl-C ends the
    wait, and a wait without either ends with the work."""
    out = run(fake, """
        s = Stream()
        fake.fake_busy_stream_create(fake.fake_streams_made())  # any stream from now, while work is queued
        kernel(s, 700)
        t = time.monotonic()
        try:
            s.synchronize(timeout=0.1)
            raise AssertionError("synchronize(timeout=0.1) of a 0.7 s kernel returned")
        except TimeoutError as e:
            assert "synchronize" in str(e), e
        assert time.monotonic() - t < 0.15, time.monotonic() - t
        signal_after(0.1)
        t = time.monotonic()
        try:
            s.synchronize()
            raise AssertionError("no KeyboardInterrupt")
        except KeyboardInterrupt:
            pass
        assert time.monotonic() - t < 0.2, time.monotonic() - t
        assert not s.query()  # the work runs on
        s.synchronize()
        assert s.query()
        fake.fake_busy_stream_create(0)
        s.synchronize(timeout=5)  # notifiers made by then: the usual path
        settle()
        print("ok")
    """)
    assert out.strip() == "ok", out


def test_parked_waits_ring_from_custreams_thread_or_end_by_the_drivers_answer(fake):
    """Waits parked behind a busy notifier get their host function from custream's thread, on
    the notifier's bell stream, once the notifier rings: they end when their work does. If
    the driver refuses those launches, nothing will ring for them: the event loop's check
    (once a second) and a future's watch see the events reached and end them. No wait stays
    pending either way."""
    out = run(fake, """
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
            await asyncio.sleep(0.02)
            assert _pending_waits() == 3, _pending_waits()  # the two later ones parked
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
        print("ok")
    """)
    assert out.strip().endswith("ok"), out


def test_await_lets_the_loop_run_and_cancelling_leaves_nothing(fake):
    out = run(fake, """
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
            done = Event(); done.record(s)
            await done

            kernel(s, 200)
            e = s.record()
            waiter = asyncio.create_task(_await(e))
            await asyncio.sleep(0.02)
            waiter.cancel()
            try:
                await waiter
            except asyncio.CancelledError:
                pass
            assert custream._waits.pending_futures() == 0, "a cancelled await keeps its future"
            await asyncio.wait_for(_await(s.record()), timeout=5)
            try:
                kernel(s, 300)
                await asyncio.wait_for(_await(s.record()), timeout=0.05)
            except (asyncio.TimeoutError, TimeoutError):
                pass
            else:
                raise AssertionError("wait_for did not time out")
            tick.cancel()
        asyncio.run(main())
        s.synchronize()
        settle()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_hundreds_of_awaits_take_no_thread_each_and_two_loops_await_at_once(fake):
    out = run(fake, """
        def threads():
            return len(os.listdir("/proc/self/task"))
        streams = [Stream() for _ in range(4)]
        async def many(n):
            for s in streams:
                kernel(s, 150)
            events = [streams[i % 4].record() for i in range(n)]
            before = threads()
            waits = [asyncio.ensure_future(_await(e)) for e in events]
            await asyncio.sleep(0.05)
            during = threads()
            assert not any(w.done() for w in waits)
            await asyncio.gather(*waits)
            return before, during
        warm = asyncio.run(many(4))
        before, during = asyncio.run(many(400))
        assert during <= before, (before, during)
        results, errors = [], []
        def loop_thread():
            try:
                results.append(asyncio.run(many(100)))
            except BaseException as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=loop_thread) for _ in range(2)]
        [t.start() for t in ts]; [t.join(60) for t in ts]
        assert not errors and len(results) == 2, errors
        settle()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_future_completes_from_custreams_thread_and_may_be_cancelled(fake):
    out = run(fake, """
        import concurrent.futures
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
        print("ok")
    """)
    assert out.strip() == "ok"


def test_the_c_api_waits_with_a_timeout(fake):
    tests = str(TESTS)
    out = run(fake, f"""
        sys.path.insert(0, {tests!r})
        from _capi_ctypes import capi
        api = capi()
        s = Stream()
        kernel(s, 400)
        for bad, err in [(-1.0, ValueError), (math.nan, ValueError)]:
            try:
                api.synchronize_timeout(s, bad)
            except err as e:
                assert "Custream_SynchronizeTimeout() timeout must be" in str(e), e
            else:
                raise AssertionError(bad)
        try:
            api.synchronize_timeout("x", 1.0)
        except TypeError as e:
            assert "Custream_SynchronizeTimeout() expected a custream.Stream" in str(e), e
        try:
            api.synchronize_timeout(s, 0.05)
        except TimeoutError:
            pass
        else:
            raise AssertionError("no TimeoutError")
        assert api.synchronize_timeout(s, math.inf) == 0 and s.query()
        kernel(s, 1200)
        signal_after(0.1)
        t = time.monotonic()
        try:
            api.synchronize(s)
        except KeyboardInterrupt:
            assert time.monotonic() - t < 0.9
        else:
            raise AssertionError("Custream_Synchronize was not interrupted")
        s.synchronize()
        settle()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_fault_ends_pending_waits_with_the_drivers_error(sticky):
    """A faulted driver runs no host function: the waits see the fault through their queries
    (a thread between slices, an event loop every second)."""
    out = run(sticky, """
        s = Stream()
        fake.standin_hold(1)
        e = s.record()
        threading.Timer(0.2, fake.standin_sticky, (700,)).start()
        for wait in (lambda: e.synchronize(), lambda: s.synchronize(timeout=5)):
            try:
                wait()
            except custream.CudaError as err:
                assert err.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err
            else:
                raise AssertionError("no fault")
        fake.standin_sticky(0)
        async def main():
            pending = asyncio.ensure_future(_await(e))
            await asyncio.sleep(0.1)
            fake.standin_sticky(700)
            try:
                await asyncio.wait_for(pending, 5)
            except custream.CudaError as err:
                assert err.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err
            else:
                raise AssertionError("no fault")
        asyncio.run(main())
        assert custream._waits.pending_futures() == 0
        # A future made before the fault: failed by custream's watch within about a second.
        fake.standin_sticky(0)
        future = e.future()
        t = time.monotonic()
        fake.standin_sticky(700)
        try:
            future.result(timeout=5)
        except custream.CudaError as err:
            assert err.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err
        else:
            raise AssertionError("no fault")
        assert time.monotonic() - t < 2.5
        # The watch ends once nothing is pending.
        end = time.monotonic() + 5
        while any(t.name == "custream-future-watch" for t in threading.enumerate()):
            assert time.monotonic() < end, "the watch stayed"
            time.sleep(0.05)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_close_after_a_sticky_fault_does_not_raise(sticky):
    out = run(sticky, """
        s, e = Stream(), Event()
        alive = fake.standin_live_streams()
        fake.standin_sticky(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: every call now answers it
        for call in (s.synchronize, s.query, lambda: s.synchronize(timeout=1), e.synchronize, s.record):
            try:
                call()
            except custream.CudaError as err:
                assert err.name == "CUDA_ERROR_ILLEGAL_ADDRESS", err
            else:
                raise AssertionError(call)
        s.close(); e.close()  # gone with the context: no error
        assert s.closed and e.closed
        assert fake.standin_live_streams() < alive
        print("ok")
    """)
    assert out.strip() == "ok"
