"""custream's own behaviour on a real device: creation, synchronize, query, wait/record
ordering proven with a real kernel, the current context left as it was, close semantics,
default-stream tokens, Event timing, custream.testing's live checks, and two devices (those
tests skip on a machine with one). Load, threads, fork, exit and a context reset are in
test_gpu_custream_reliability.py.

Kernels are launched through whichever peer is installed (CuPy, torch or cuda.core, see
custream_gpu_helpers); the current context is read with cuda.bindings.
"""

from contextlib import closing
import gc
import threading
import weakref

import pytest

import custream
from custream import CudaError, Event, Stream
from custream.testing import assert_stream_protocol, check_stream_protocol
from custream_gpu_helpers import WORKS, first_work, make_work, run_in_thread

pytestmark = pytest.mark.gpu


@pytest.fixture
def work():
    return first_work()


@pytest.fixture(params=list(WORKS))
def each_work(request):
    return make_work(request.param)


@pytest.fixture
def driver():
    drv = pytest.importorskip("cuda.bindings.driver")
    (err,) = drv.cuInit(0)
    assert err == drv.CUresult.CUDA_SUCCESS
    return drv


def ok(driver, result):
    """Unpack a cuda.bindings result tuple, asserting success."""
    err, *rest = result
    assert err == driver.CUresult.CUDA_SUCCESS, f"{err!r}"
    return rest[0] if len(rest) == 1 else tuple(rest)


def current_context(driver):
    return int(ok(driver, driver.cuCtxGetCurrent()))


class Producer:
    """A protocol producer over a live handle, with any attributes given (device, device_id)."""

    def __init__(self, handle, **attrs):
        self.handle = handle
        self.__dict__.update(attrs)

    def __cuda_stream__(self):
        return (0, self.handle)


def make_primary_current(driver, ordinal=0):
    """Retain device ``ordinal``'s primary context and make it current in this thread;
    returns a function that undoes both."""
    dev = ok(driver, driver.cuDeviceGet(ordinal))
    ctx = ok(driver, driver.cuDevicePrimaryCtxRetain(dev))
    ok(driver, driver.cuCtxSetCurrent(ctx))

    def undo():
        ok(driver, driver.cuCtxSetCurrent(driver.CUcontext(0)))
        ok(driver, driver.cuDevicePrimaryCtxRelease(dev))

    return undo


# ---- creation --------------------------------------------------------------------------


def test_owned_stream_defaults():
    with closing(Stream()) as s:
        assert s.owned and not s.is_default and not s.closed
        assert s.handle not in (0, 1, 2)
        assert s.__cuda_stream__() == (0, s.handle)
        assert 0 <= s.device < custream.device_count()
        assert s.non_blocking is True
        assert s.priority == 0
        assert s.owner is None
        assert hex(s.handle) in repr(s) and "owned" in repr(s)
    assert s.closed


def test_stream_on_each_device():
    for ordinal in range(custream.device_count()):
        with closing(Stream(device=ordinal)) as s:
            assert s.device == ordinal
            # A wrapper finds the device through the driver (cuStreamGetCtx).
            assert Stream.from_handle(s.handle).device == ordinal


def test_stream_on_a_missing_device_is_a_clear_error():
    n = custream.device_count()
    with pytest.raises(ValueError, match=f"device {n} does not exist"):
        Stream(device=n)


def test_default_device_is_the_current_contexts(driver):
    def body(ordinal):
        undo = make_primary_current(driver, ordinal)
        try:
            with closing(Stream()) as s, Event() as e:
                return s.device, e.device
        finally:
            undo()

    for ordinal in range(custream.device_count()):
        assert run_in_thread(body, ordinal) == (ordinal, ordinal)
    # No current context: device 0.
    assert run_in_thread(lambda: Stream().device) == 0


def test_priority_range_and_out_of_range_error(driver):
    def body():
        undo = make_primary_current(driver)
        try:
            least, greatest = ok(driver, driver.cuCtxGetStreamPriorityRange())
        finally:
            undo()
        return least, greatest

    least, greatest = run_in_thread(body)
    for p in {least, greatest}:
        with closing(Stream(priority=p)) as s:
            assert s.priority == p
            # Read back through the driver for a borrowed wrapper.
            assert Stream.from_handle(s.handle).priority == p
    for p in (least + 1, greatest - 1):
        with pytest.raises(CudaError) as info:
            Stream(priority=p)
        assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
        assert "priority" in str(info.value) and str(p) in str(info.value)


@pytest.mark.parametrize("non_blocking", [True, False])
def test_non_blocking_flag_read_back_for_borrowed_streams(driver, non_blocking):
    with closing(Stream(non_blocking=non_blocking)) as s:
        assert s.non_blocking is non_blocking
        borrowed = Stream.from_handle(s.handle)
        assert borrowed.non_blocking is non_blocking
        flags = ok(driver, driver.cuStreamGetFlags(driver.CUstream(s.handle)))
        assert bool(int(flags) & int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)) is non_blocking


# ---- the current context is never changed ------------------------------------------------


def test_no_call_changes_the_current_context_when_none_is_current(driver):
    """In a fresh thread no context is current; every call must leave it that way, and
    the calls that take a stream work without one."""

    def body():
        assert current_context(driver) == 0
        s = Stream()
        assert current_context(driver) == 0
        other = Stream(non_blocking=False)
        ev = s.record()
        other.wait(ev)
        other.wait(s)
        s.synchronize()
        assert s.query() is True
        assert s.device == 0 and Stream.from_handle(s.handle).device == 0
        assert Stream.from_handle(s.handle).non_blocking is True
        timed = Event(timing=True)
        timed.record(s)
        timed.synchronize()
        s.close()
        other.close()
        ev.close()
        timed.close()
        return current_context(driver)

    assert run_in_thread(body) == 0


def test_no_call_changes_the_current_context_when_one_is_current(driver):
    def body():
        undo = make_primary_current(driver)
        try:
            before = current_context(driver)
            assert before != 0
            with closing(Stream()) as s:
                assert current_context(driver) == before
                s.record().synchronize()
                Stream.from_handle(s.handle).device
                s.synchronize()
            assert current_context(driver) == before
            with Event(device=0):
                pass
            return before, current_context(driver)
        finally:
            undo()

    before, after = run_in_thread(body)
    assert before == after


def create_context(driver, ordinal=0):
    """A new (non-primary) context on ``ordinal``, current in this thread. cuda.bindings 13
    takes (params, flags, device); 12.x took (flags, device)."""
    dev = ok(driver, driver.cuDeviceGet(ordinal))
    try:
        return ok(driver, driver.cuCtxCreate(None, 0, dev))
    except TypeError:
        return ok(driver, driver.cuCtxCreate(0, dev))


def test_close_and_create_with_a_foreign_context_current(driver):
    """Another library's own context is current in the closing thread: close() destroys
    our stream (cuStreamDestroy needs no current context) and neither call changes it."""
    s = Stream()
    s.synchronize()

    def body():
        ctx = create_context(driver)
        try:
            ok(driver, driver.cuCtxSetCurrent(ctx))
            before = current_context(driver)
            s.close()
            t = Stream(device=0)
            assert t.device == 0 and t.query() is True
            t.close()
            return before, int(ctx), current_context(driver)
        finally:
            ok(driver, driver.cuCtxSetCurrent(driver.CUcontext(0)))
            ok(driver, driver.cuCtxDestroy(ctx))

    before, ctx, after = run_in_thread(body)
    assert before == ctx == after
    assert s.closed


# ---- synchronize, query, wait, record: ordering proven with a kernel -----------------------


def test_query_is_false_while_a_kernel_runs_and_synchronize_waits(each_work):
    with closing(Stream()) as s:
        assert s.query() is True
        each_work.spin_then_mark(s)
        assert s.query() is False
        s.synchronize()
        assert s.query() is True
        assert each_work.result()[0] == 1


def test_wait_on_a_recorded_event_orders_another_stream(each_work):
    with closing(Stream()) as a, closing(Stream()) as b:
        each_work.spin_then_mark(a)
        ev = a.record()
        assert isinstance(ev, Event) and ev.timing is False
        assert ev.query() is False
        b.wait(ev)
        each_work.copy_mark(b)
        b.synchronize()
        assert each_work.result() == (1, 1)
        assert ev.query() is True


def test_wait_on_a_stream_orders_another_stream(work):
    with closing(Stream()) as a, closing(Stream()) as b:
        work.spin_then_mark(a)
        b.wait(a)
        work.copy_mark(b)
        b.synchronize()
        assert work.result() == (1, 1)


def test_record_into_an_existing_event(work):
    with closing(Stream()) as s, Event() as ev:
        work.spin_then_mark(s)
        assert s.record(ev) is ev
        assert ev.query() is False
        ev.synchronize()
        assert ev.query() is True
        assert work.result()[0] == 1


def test_event_record_on_a_protocol_object(work):
    """Event.record and Stream.wait take any __cuda_stream__ object."""
    with closing(Stream()) as a, closing(Stream()) as b, Event() as ev:
        work.spin_then_mark(a)
        ev.record(Producer(a.handle))
        b.wait(ev)
        work.copy_mark(Producer(b.handle))
        b.synchronize()
        assert work.result() == (1, 1)


# ---- default-stream tokens -----------------------------------------------------------------


def test_default_stream_tokens_follow_the_current_context(driver):
    tokens = (0, 1, 2)

    def with_context():
        undo = make_primary_current(driver)
        try:
            out = []
            for t in tokens:
                d = Stream.from_handle(t)
                assert d.is_default and not d.owned
                d.synchronize()
                out.append((d.query(), d.device, d.non_blocking, d.priority))
            return out
        finally:
            undo()

    assert run_in_thread(with_context) == [(True, 0, False, 0)] * 3

    # Made while a context was current, used where none is: the device is resolved again
    # (never cached), by the CUDA runtime's rule for a thread with no current context
    # (device 0's primary context, current for the call only).
    def make_in_context():
        undo = make_primary_current(driver)
        try:
            s = Stream.from_handle(1)
            assert s.device == 0
            return s
        finally:
            undo()

    legacy = run_in_thread(make_in_context)
    assert run_in_thread(lambda: (legacy.device, legacy.query(), current_context(driver))) == (0, True, 0)


def test_closing_a_default_token_never_destroys_it(driver):
    def body():
        undo = make_primary_current(driver)
        try:
            for t in (0, 1, 2):
                Stream.from_handle(t).close()
                Stream.from_handle(t).synchronize()  # still the working default stream
        finally:
            undo()

    run_in_thread(body)


# ---- close -----------------------------------------------------------------------------------


def test_close_semantics_of_an_owned_stream():
    s, other = Stream(), Stream()
    handle = s.handle
    s.close()
    assert s.closed and s.owned
    for op in (lambda: s.handle, s.__cuda_stream__, s.synchronize, s.query, s.record, lambda: s.wait(other)):
        with pytest.raises(ValueError, match="closed custream.Stream"):
            op()
    other.close()
    s.close()  # idempotent
    assert hex(handle) in repr(s) and "closed" in repr(s)
    with closing(Stream()) as t:
        pass
    assert t.closed
    with pytest.raises(ValueError, match="closed"):
        t.__enter__()


def test_closing_a_wrapper_never_destroys_a_borrowed_stream(driver):
    def body():
        undo = make_primary_current(driver)
        try:
            h = ok(driver, driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
            wrapper = Stream.from_handle(int(h), owner=h)
            assert wrapper.query() is True
            wrapper.close()
            del wrapper
            gc.collect()
            # Still alive: querying and destroying it ourselves both succeed.
            (err,) = driver.cuStreamQuery(h)
            assert err == driver.CUresult.CUDA_SUCCESS
            (err,) = driver.cuStreamDestroy(h)
            assert err == driver.CUresult.CUDA_SUCCESS
        finally:
            undo()

    run_in_thread(body)


# A pytest process of its own (isolated) where custream is the device's only user: nothing
# there before the test makes the context or uses the device (the conftests ask only for the
# device count; this module imports no peer; the driver fixture calls cuInit alone), which
# the first state read checks.
@pytest.mark.isolated(timeout=120)
def test_close_and_deallocation_release_everything_they_hold(driver):
    """In a process where custream is the only user of the device, the primary context
    stays active from the first Stream until exit (custream keeps one retain for the
    process, as the CUDA runtime does), and close() and deallocation give back everything
    a Stream or Event holds: once the exit hook gives back the process's retain, the
    context goes."""

    def active():
        err, dev = driver.cuDeviceGet(0)
        err, flags, on = driver.cuDevicePrimaryCtxGetState(dev)
        return bool(on)

    driver.cuInit(0)
    states = [active()]
    s = custream.Stream()
    states.append(active())
    s.close()
    states.append(active())
    t = custream.Stream()
    e = custream.Event()
    states.append(active())
    del t, e
    gc.collect()
    states.append(active())
    custream._custream._finalize()  # what atexit runs: gives back the process's own retain
    states.append(active())
    print(states)
    assert states == [False, True, True, True, True, False], states


def test_weak_references_and_live_count_of_owned_streams():
    gc.collect()
    base = custream.live_stream_count()
    s = Stream()
    ref = weakref.ref(s)
    assert custream.live_stream_count() == base + 1
    del s
    gc.collect()
    assert ref() is None
    assert custream.live_stream_count() == base


# ---- Event ---------------------------------------------------------------------------------


def test_event_timing_around_a_kernel(work):
    with closing(Stream()) as s:
        start, end = Event(timing=True), Event(timing=True)
        assert start.timing and start.device == 0
        start.record(s)
        work.spin_then_mark(s)
        end.record(s)
        end.synchronize()
        assert end.query() is True
        assert start.elapsed_time(end) > 0.0


def test_elapsed_time_needs_timing_events(work):
    with closing(Stream()) as s, Event() as a, Event() as b:
        a.record(s)
        b.record(s)
        b.synchronize()
        with pytest.raises(CudaError) as info:
            a.elapsed_time(b)
        assert info.value.name.startswith("CUDA_ERROR_")


def test_event_close():
    ev = Event()
    h = ev.handle
    ev.close()
    ev.close()
    assert ev.closed and hex(h) in repr(ev)
    for op in (lambda: ev.handle, ev.synchronize, ev.query):
        with pytest.raises(ValueError, match="closed custream.Event"):
            op()


# ---- custream.testing's live checks (each peer's own file runs the kit on that peer's streams)


def by_name(report):
    return {e.name: e for e in report.entries}


def test_our_streams_pass_live():
    with closing(Stream()) as s:
        report = assert_stream_protocol(s, live=True)
        assert by_name(report)["live stream"].passed is True
        assert by_name(report)["device agrees"].passed is True  # our .device is an int
        assert not s.closed  # the kit never closes the object it checks
        assert_stream_protocol(Stream.from_handle(s.handle), live=True)


@pytest.mark.parametrize("attrs", [{"device": 1}, {"device_id": 1}])
def test_a_producer_reporting_another_device_fails(attrs):
    wrong = {k: v + custream.device_count() for k, v in attrs.items()}  # never device 0's
    with closing(Stream(device=0)) as s:
        report = check_stream_protocol(Producer(s.handle, **wrong), live=True)
        assert not report.ok
        assert [e.name for e in report.failures] == ["device agrees"]
        with pytest.raises(AssertionError, match="device agrees"):
            assert_stream_protocol(Producer(s.handle, **wrong))


def test_a_producer_reporting_its_device_passes():
    with closing(Stream(device=0)) as s:
        report = assert_stream_protocol(Producer(s.handle, device_id=0), live=True)
        assert by_name(report)["device agrees"].passed is True


def test_a_closed_stream_fails_the_call():
    s = Stream()
    s.close()
    report = check_stream_protocol(s, live=True)
    assert [e.name for e in report.failures] == ["call succeeds"]
    assert "closed" in by_name(report)["call succeeds"].detail


def test_default_tokens_are_live_with_or_without_a_current_context(driver):
    def without_context():
        return check_stream_protocol(Producer(1), live=True)

    report = run_in_thread(without_context)
    assert report.ok and by_name(report)["live stream"].passed is True, str(report)

    def with_context():
        undo = make_primary_current(driver)
        try:
            return check_stream_protocol(Producer(1), live=True)
        finally:
            undo()

    report = run_in_thread(with_context)
    assert report.ok and by_name(report)["live stream"].passed is True, str(report)


# ---- two devices: ordering proven with a spin kernel on one device, an event, and a read on
# the other that must see the kernel's result. With fewer devices each test skips.


@pytest.fixture(scope="module")
def two_devices():
    if not custream.is_available() or custream.device_count() < 2:
        n = custream.device_count() if custream.is_available() else 0
        pytest.skip(f"needs 2 CUDA devices, this machine has {n}")


def primary_context(driver, ordinal):
    dev = ok(driver, driver.cuDeviceGet(ordinal))
    ctx = ok(driver, driver.cuDevicePrimaryCtxRetain(dev))
    driver.cuDevicePrimaryCtxRelease(dev)
    return int(ctx)


def test_stream_on_device_1_lives_in_its_primary_context(two_devices, driver):
    before = current_context(driver)
    s = custream.Stream(device=1)
    assert s.device == 1 and s.owned
    assert current_context(driver) == before
    ctx = ok(driver, driver.cuStreamGetCtx(driver.CUstream(s.handle)))
    assert int(ctx) == primary_context(driver, 1)
    s.close()
    assert current_context(driver) == before


def test_device_0_stream_waits_on_an_event_recorded_on_device_1(two_devices):
    cupy = pytest.importorskip("cupy")
    spin = cupy.RawKernel(
        r"""
        extern "C" __global__ void spin_then_write(long long cycles, int *out) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
            *out = 42;
        }""",
        "spin_then_write",
    )
    s1 = custream.Stream(device=1)
    s0 = custream.Stream(device=0)
    with cupy.cuda.Device(1):
        flag = cupy.zeros(1, dtype=cupy.int32)
        with cupy.cuda.ExternalStream(s1.handle, 1):
            spin((1,), (1,), (cupy.int64(200_000_000), flag))
    done = s1.record()
    s0.wait(done)
    with cupy.cuda.Device(0):
        seen = cupy.zeros(1, dtype=cupy.int32)
        cupy.cuda.runtime.memcpyPeerAsync(seen.data.ptr, 0, flag.data.ptr, 1, 4, s0.handle)
    s0.synchronize()
    assert int(seen.get()[0]) == 42


def test_as_stream_of_a_peer_stream_on_device_1_reports_device_1(two_devices):
    torch = pytest.importorskip("torch")
    theirs = torch.cuda.Stream(device=1)
    s = custream.as_stream(theirs)
    assert s.device == 1 and s.owner is theirs


def test_default_tokens_resolve_against_the_current_device_each_time(two_devices):
    cupy = pytest.importorskip("cupy")
    legacy = custream.LEGACY_DEFAULT_STREAM
    with cupy.cuda.Device(0):
        cupy.zeros(1)
        assert legacy.device == 0
    with cupy.cuda.Device(1):
        cupy.zeros(1)
        assert legacy.device == 1
        legacy.synchronize()
    with cupy.cuda.Device(0):
        assert legacy.device == 0


def test_closing_a_device_1_stream_from_a_device_0_thread_leaves_that_thread_alone(two_devices, driver):
    cupy = pytest.importorskip("cupy")
    s = custream.Stream(device=1)
    seen = {}

    def worker():
        with cupy.cuda.Device(0):
            cupy.zeros(1)
            seen["before"] = current_context(driver)
            s.close()
            seen["after"] = current_context(driver)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert s.closed
    assert seen["before"] == seen["after"] == primary_context(driver, 0)
