"""The Cython face: consumer.pyx cimports custream (the installed .pxd) and these tests drive it.

Every handle here is a made-up number: wrapping, reading, closing and deleters never call
the driver, so all of this runs without a GPU.
"""

import gc
import queue
import sys
import threading
import time
import weakref

import pytest

import custream

HAS_GPU = custream.is_available()


class Producer:
    """A foreign stream object speaking the CUDA Stream Protocol."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_handle_read_in_nogil_loop_equals_python_handle(cy):
    for handle in (0, 1, 2, 0x7F00DEADB000, 2**64 - 1):
        s = custream.Stream.from_handle(handle)
        assert cy.handle_loop(s, 100_000) == (s.handle, 100_000)


def test_struct_fields_read_from_cython(cy):
    s = custream.Stream.from_handle(0x1234, device=3)
    assert cy.fields(s) == {"handle": 0x1234, "flags": 0, "device": 3, "priority": 0}
    legacy = custream.Stream.from_handle(1)
    flags = cy.flag_values()
    assert cy.fields(legacy) == {"handle": 1, "flags": flags["DEFAULT"], "device": flags["DEVICE_UNKNOWN"], "priority": 0}
    shared = flags["DEFAULT"] | flags["SHARED"]
    assert cy.fields(custream.LEGACY_DEFAULT_STREAM) == {"handle": 1, "flags": shared, "device": flags["DEVICE_UNKNOWN"], "priority": 0}


def test_header_constants_agree_with_python(cy):
    assert cy.abi_version() == custream.ABI_VERSION
    assert cy.default_tokens() == (0, custream.LEGACY_DEFAULT_STREAM.handle, custream.PER_THREAD_DEFAULT_STREAM.handle)
    assert cy.flag_values() == {"OWNED": 1, "DEFAULT": 2, "NON_BLOCKING": 4, "SHARED": 8, "POOLED": 16, "GREEN": 32,
                                "DEVICE_UNKNOWN": -1}


def test_as_stream_wraps_a_protocol_object(cy):
    producer = Producer(0xABC000)
    s = cy.wrap(producer)
    assert type(s) is custream.Stream
    assert s.handle == 0xABC000 and s.owner is producer and not s.owned
    assert s.__cuda_stream__() == (0, 0xABC000)
    assert cy.handle_loop(s, 10) == (0xABC000, 10)


def test_as_stream_returns_a_stream_as_is(cy):
    s = custream.Stream.from_handle(0x55)
    assert cy.wrap(s) is s


def test_as_stream_keeps_the_producer_alive_until_close(cy):
    producer = Producer(0x77)
    alive = weakref.ref(producer)
    s = cy.wrap(producer)
    del producer
    gc.collect()
    assert alive() is not None and s.owner is alive()
    s.close()
    gc.collect()
    assert alive() is None


def test_as_stream_errors_come_through_cython(cy):
    with pytest.raises(TypeError, match="as_stream.*got int"):
        cy.wrap(42)

    class Bad:
        def __cuda_stream__(self):
            return (1, 0x10)

    with pytest.raises(ValueError, match="Bad.__cuda_stream__.*version 1"):
        cy.wrap(Bad())
    boom = RuntimeError("producer failed")

    class Raising:
        def __cuda_stream__(self):
            raise boom

    with pytest.raises(RuntimeError) as info:
        cy.wrap(Raising())
    assert info.value is boom


def test_from_handle_holds_the_owner_until_close(cy):
    class Owner:
        pass

    owner = Owner()
    alive = weakref.ref(owner)
    before = sys.getrefcount(owner)
    s = cy.wrap_handle(0xBEEF00, 2, owner)
    assert sys.getrefcount(owner) == before + 1
    assert s.owner is owner and s.handle == 0xBEEF00 and cy.fields(s)["device"] == 2
    del owner
    gc.collect()
    assert alive() is not None
    s.close()
    assert s.owner is None
    gc.collect()
    assert alive() is None


def test_from_handle_releases_the_owner_on_deallocation(cy):
    owner = Producer(0)
    before = sys.getrefcount(owner)
    s = cy.wrap_handle(0xBEEF10, -1, owner)
    assert sys.getrefcount(owner) == before + 1
    del s
    assert sys.getrefcount(owner) == before


def test_from_handle_default_arguments(cy):
    s = cy.wrap_handle_default_args(0x4000)
    assert s.owner is None and s.handle == 0x4000 and cy.fields(s)["device"] == -1
    assert cy.wrap_handle(0x4000, -1, None).owner is None


def test_from_handle_refuses_a_bad_device(cy):
    with pytest.raises(ValueError, match="device -7 is not an ordinal"):
        cy.wrap_handle(0x4000, -7, None)


def test_closed_stream_access_raises(cy):
    s = custream.Stream.from_handle(0x9000)
    assert cy.checked_handle(s) == 0x9000 and not cy.closed_nogil(s)
    s.close()
    assert cy.closed_nogil(s)
    with pytest.raises(ValueError, match="handle on a closed custream.Stream"):
        cy.checked_handle(s)
    with pytest.raises(ValueError, match="synchronize\\(\\) on a closed custream.Stream"):
        cy.sync(s)
    with pytest.raises(ValueError, match="closed"):
        s.handle
    # The raw field stays readable (documented): it is fixed for the object's life.
    assert cy.handle_loop(s, 1) == (0x9000, 1)


def test_null_stream_handle_checked_is_not_an_error(cy):
    # handle_checked is `except? NULL`: a NULL handle with no exception is the null stream.
    assert cy.checked_handle(custream.Stream.from_handle(0)) == 0


def test_the_type_check(cy):
    s = custream.Stream.from_handle(0x10)
    producer = Producer(0x10)
    assert cy.checks(s) == (True, True, 1)
    assert cy.checks(producer) == (False, False, 0)
    assert cy.typed(s) is s
    with pytest.raises(TypeError, match="expected custream.Stream, got int"):
        cy.typed(3)
    with pytest.raises(TypeError, match="expected custream.Stream, got Producer"):
        cy.typed(producer)
    with pytest.raises(TypeError, match="expected custream.Stream, got NoneType"):
        cy.typed(None)
    # Why the docs say `Stream s not None`: without it Cython lets None through.
    assert cy.typed_or_none(None) is True
    with pytest.raises(TypeError, match="Custream_Synchronize\\(\\) expected a custream.Stream, got str"):
        cy.sync_any("not a stream")


@pytest.mark.skipif(HAS_GPU, reason="checks the no-driver error; this machine has a driver")
def test_synchronize_without_a_driver_raises_cuda_unavailable(cy):
    with pytest.raises(custream.CudaUnavailableError):
        cy.sync(custream.Stream.from_handle(0))


@pytest.mark.skipif(HAS_GPU, reason="checks the no-driver error; this machine has a driver")
def test_sm_count_without_a_driver_raises_cuda_unavailable(cy):
    with pytest.raises(custream.CudaUnavailableError):
        cy.slice_of(custream.Stream.from_handle(0x1000))
    closed = custream.Stream.from_handle(0x1000)
    closed.close()
    with pytest.raises(ValueError, match="^green_context on a closed custream.Stream$"):
        cy.slice_of(closed)


def test_synchronize_timeout_reaches_custreams_checks(cy):
    """The .pxd's synchronize_timeout: custream's own argument check and closed-stream error."""
    s = custream.Stream.from_handle(0x1000)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match=r"^Custream_SynchronizeTimeout\(\) timeout must be a non-negative"):
            cy.sync_timeout(s, bad)
    s.close()
    with pytest.raises(ValueError, match="^synchronize\\(\\) on a closed custream.Stream$"):
        cy.sync_timeout(s, 1.0)


def test_stream_memory_operations_check_their_arguments_first(cy):
    s = custream.Stream.from_handle(0x1000)
    for call, exc, match in [
        (lambda: cy.release(s, 0x7F00_0000_0000, 1, 16), ValueError, r"Custream_WriteValue\(\) width must be 32 or 64, got 16"),
        (lambda: cy.release(s, 0x7F00_0000_0000, 2**32), ValueError, "out of range for width=32"),
        (lambda: cy.acquire(s, 0x7F00_0000_0004, 1, 64), ValueError, "not aligned to 8 bytes"),
        (lambda: cy.acquire(s, 0x7F00_0000_0000, 1, 32, 7), ValueError, r"op must be CUSTREAM_WAIT_GEQ, _EQ, _AND or _NOR \(0 to 3\), got 7"),
    ]:
        with pytest.raises(exc, match=match):
            call()
    if not custream.is_available():
        with pytest.raises(custream.CudaUnavailableError):
            cy.release(s, 0x7F00_0000_0000, 1)
    s.close()
    with pytest.raises(ValueError, match=r"^wait_value\(\) on a closed custream.Stream$"):
        cy.acquire(s, 0x7F00_0000_0000, 1)


def _wait_for(condition, timeout=10):
    """Wait for custream's thread to make `condition` true (it runs the releases)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "custream's thread did not get to it"
        time.sleep(0.001)


def test_release_after_runs_the_release_once_even_on_an_error(cy):
    """The .pxd's release_after: a call that fails (no driver, a closed stream) raises, and the
    C release function still runs, once, on custream's thread."""
    s = custream.Stream.from_handle(0x1000)
    before = cy.released_count()
    if not HAS_GPU:
        with pytest.raises(custream.CudaUnavailableError):
            cy.queue_release(s)
        _wait_for(lambda: cy.released_count() == before + 1)
        before += 1
    s.close()
    with pytest.raises(ValueError, match=r"^Custream_ReleaseAfter\(\) on a closed custream.Stream$"):
        cy.queue_release(s)
    _wait_for(lambda: cy.released_count() == before + 1)


def test_deleter_called_once_on_close(cy):
    s = cy.wrap_with_deleter(0x5000, 1)
    assert cy.deleter_record(1) == (0, 0)
    assert s.owner is None and not s.owned and "deleter" in repr(s)
    s.close()
    assert cy.deleter_record(1) == (1, 0x5000)
    s.close()
    del s
    gc.collect()
    assert cy.deleter_record(1) == (1, 0x5000)


def test_deleter_called_once_on_deallocation(cy):
    s = cy.wrap_with_deleter(0x6000, 2, 0)
    assert cy.fields(s)["device"] == 0
    del s
    assert cy.deleter_record(2) == (1, 0x6000)


@pytest.mark.parametrize("pause_us", [0, 50], ids=["no-pause", "deleter-drops-gil"])
def test_deleter_called_once_when_close_races_deallocation(cy, pause_us):
    """Two threads close each stream while the main thread closes some and drops its
    reference, so the last reference goes away in any of the three; a third thread (where
    there is no driver) synchronizes, which holds the stream open across a GIL release.
    With a pause, the deleter itself releases the GIL mid-release."""
    n = 400 if pause_us else 3000
    base_handle = 0x100000
    live = custream.live_stream_count()
    workers = 2 if HAS_GPU else 3
    queues = [queue.SimpleQueue() for _ in range(workers)]
    errors = []

    def closer(q):
        try:
            while (s := q.get()) is not None:
                s.close()
                del s
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def synchronizer(q):
        try:
            while (s := q.get()) is not None:
                try:
                    s.synchronize()
                except (custream.CudaUnavailableError, ValueError):
                    pass
                del s
        except BaseException as e:
            errors.append(e)

    targets = [closer, closer, synchronizer][:workers]
    threads = [threading.Thread(target=t, args=(q,)) for t, q in zip(targets, queues)]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    cy.set_deleter_pause(pause_us)
    try:
        for t in threads:
            t.start()
        for i in range(n):
            s = cy.wrap_with_deleter(base_handle + i, i)
            for q in queues:
                q.put(s)
            if i % 3 == 0:
                s.close()
            del s
        for q in queues:
            q.put(None)
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
        cy.set_deleter_pause(0)
    assert not errors
    wrong = [(i, rec) for i in range(n) if (rec := cy.deleter_record(i)) != (1, base_handle + i)]
    assert not wrong, f"deleter not called exactly once with its handle: {wrong[:5]}"
    assert custream.live_stream_count() == live


def test_no_stream_leaks_through_the_cython_paths(cy):
    live = custream.live_stream_count()
    for i in range(200):
        cy.wrap(Producer(i + 16))
        cy.wrap_handle(i + 16, -1, Producer(0))
        cy.wrap_with_deleter(i + 16, 3).close()
    gc.collect()
    assert custream.live_stream_count() == live


@pytest.mark.skipif(HAS_GPU, reason="checks the no-driver error; this machine has a driver")
def test_id_of_and_device_of_without_a_driver(cy):
    with pytest.raises(custream.CudaUnavailableError):
        cy.id_and_device(custream.Stream.from_handle(0x1000, device=3))  # the device is known; the id is not
    with pytest.raises(custream.CudaUnavailableError):
        cy.id_and_device(custream.Stream.from_handle(0x1000))
    closed = custream.Stream.from_handle(0x1000)
    closed.close()
    with pytest.raises(ValueError, match="^device on a closed custream.Stream$"):
        cy.id_and_device(closed)
