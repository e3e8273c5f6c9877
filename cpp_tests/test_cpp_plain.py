"""custream.hpp with no binding library (plain.cpp), compiled as C++17 and as C++20: views
from any producer, the owning custream::stream, and ownership handed from C++ to Python with
its release run exactly once, including under threads, at exit and across fork()."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import pytest

import custream
from custream import Stream
from _producers import AttributeProducer, BadVersion, Producer, Raising, assert_returns_itself, check_cuda_stream_made

WITH_HANDLE, NO_ARGS, THROWS_STD, THROWS_OTHER, THROWS_IN_DTOR = range(5)


def test_a_view_of_a_stream_reads_its_handle(plain):
    assert plain.ref_handle(Stream.from_handle(0x1000)) == (0x1000, False)
    for token in (0, 1, 2):
        assert plain.ref_handle(Stream.from_handle(token)) == (token, True)


def test_a_view_of_any_producer(plain):
    before = custream.live_stream_count()
    assert plain.ref_handle(Producer(0x2000)) == (0x2000, False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plain.ref_handle(AttributeProducer(0x2100)) == (0x2100, False)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert custream.live_stream_count() == before, "the temporary wrapper was not let go"


def test_a_view_refuses_what_is_not_a_stream(plain):
    for bad in ("nope", None, 5, object()):
        with pytest.raises(TypeError, match=f"got {type(bad).__name__}"):
            plain.ref_handle(bad)
    with pytest.raises(KeyError, match="from the producer"):  # the producer's own error, as is
        plain.ref_handle(Raising())
    with pytest.raises((TypeError, ValueError), match="BadVersion"):
        plain.ref_handle(BadVersion())
    s = Stream.from_handle(0x3000)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        plain.ref_handle(s)


def test_stream_from_python_is_as_stream(plain):
    assert_returns_itself(plain.from_python, Stream.from_handle(0x1000))
    p = Producer(0x2000)
    wrapped = plain.from_python(p)
    assert type(wrapped) is Stream and wrapped.handle == 0x2000 and wrapped.owner is p
    with pytest.raises(TypeError, match="got str"):
        plain.from_python("nope")


def test_adopt_takes_only_streams(plain):
    assert_returns_itself(plain.adopt, Stream.from_handle(0x1000))
    p = Producer(1)
    refs = sys.getrefcount(p)
    with pytest.raises(TypeError, match="adopt\\(\\) expected a custream.Stream, got Producer"):
        plain.adopt(p)
    assert sys.getrefcount(p) == refs, "a refused reference was leaked"


def test_stream_state_close_and_empty(plain):
    s = Stream.from_handle(0x4000)
    assert plain.stream_state(s) == (0x4000, False)
    assert plain.close(s) is True
    assert plain.stream_state(s) == (0x4000, True)  # the handle stays readable, flagged closed
    assert plain.empty_stream_calls() == (True, True)


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_synchronize_reports_the_python_error(plain):
    with pytest.raises(custream.CudaUnavailableError):
        plain.synchronize(Stream.from_handle(0))


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_sm_count_and_green_context_report_the_python_error(plain):
    with pytest.raises(custream.CudaUnavailableError):
        plain.slice(Stream.from_handle(0x1000))
    closed = Stream.from_handle(0x1000)
    closed.close()
    with pytest.raises(ValueError, match="sm_count on a closed custream.Stream"):
        plain.slice(closed)


def test_synchronize_with_seconds_reports_the_python_error(plain):
    s = Stream.from_handle(0x1000)
    with pytest.raises(ValueError, match=r"^Custream_SynchronizeTimeout\(\) timeout must be a non-negative"):
        plain.sync_timeout(s, -1.0)
    s.close()
    with pytest.raises(ValueError, match=r"^synchronize\(\) on a closed custream.Stream$"):
        plain.sync_timeout(s, 1.0)


def test_stream_memory_operations_report_the_python_error(plain):
    s = Stream.from_handle(0x1000)
    with pytest.raises(ValueError, match=r"Custream_WriteValue\(\) width must be 32 or 64, got 16"):
        plain.semaphore(s, 0x7F00_0000_0000, 1, 16, 0)
    with pytest.raises(ValueError, match="not aligned to 4 bytes"):
        plain.semaphore(s, 0x7F00_0000_0002, 1, 32, 0)
    if not custream.is_available():
        with pytest.raises(custream.CudaUnavailableError):
            plain.semaphore(s, 0x7F00_0000_0000, 1, 64, 1)
    s.close()
    with pytest.raises(ValueError, match=r"write_value\(\) on a closed custream.Stream"):
        plain.semaphore(s, 0x7F00_0000_0000, 1, 32, 1)


def test_release_after_runs_the_callable_once_even_on_an_error(plain):
    """stream::release_after(f): a call that fails raises, and `f` still runs, once, on
    custream's thread (it owns a heap buffer, freed with it)."""
    s = Stream.from_handle(0x1000)
    before = plain.released()
    if not custream.is_available():
        with pytest.raises(custream.CudaUnavailableError):
            plain.release_after(s)
        _wait_for(lambda: plain.released() == before + 1)
        before += 1
    s.close()
    with pytest.raises(ValueError, match=r"^Custream_ReleaseAfter\(\) on a closed custream.Stream$"):
        plain.release_after(s)
    _wait_for(lambda: plain.released() == before + 1)


def _wait_for(condition, timeout=10):
    """Wait for custream's thread to make `condition` true (it runs the releases)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "custream's thread did not get to it"
        time.sleep(0.001)


def test_from_handle_borrows_and_keeps_the_owner(plain):
    owner = Producer(0)
    s = plain.wrap(0x5000, 3, owner)
    assert (s.handle, s.device, s.owner, s.owned) == (0x5000, 3, owner, False)
    assert plain.wrap(0x5000, -1, None).owner is None
    with pytest.raises(ValueError, match="device -2"):
        plain.wrap(0x5000, -2, None)


@pytest.mark.parametrize("mode", [WITH_HANDLE, NO_ARGS])
def test_a_deleter_runs_once_on_close(plain, mode):
    s = plain.give(0x6000, 0, 10 + mode, mode)
    assert (s.handle, s.device, s.owned) == (0x6000, 0, False)
    assert plain.record(10 + mode)[:2] == (0, 0)
    s.close()
    s.close()
    calls, destroyed, handle = plain.record(10 + mode)
    assert (calls, destroyed) == (1, 1)
    assert handle == (0x6000 if mode == WITH_HANDLE else 0)
    del s
    gc.collect()
    assert plain.record(10 + mode)[:2] == (1, 1)


def test_a_deleter_runs_once_on_deallocation(plain):
    s = plain.give(0x6100, -1, 20, WITH_HANDLE)
    del s
    assert plain.record(20) == (1, 1, 0x6100)
    s = plain.give_lambda(0x6200, 21)  # a lambda owning a unique_ptr
    del s
    assert plain.record(21) == (1, 0, 0x6200)


def test_a_failed_hand_over_destroys_the_deleter_uncalled(plain):
    with pytest.raises(ValueError, match="device -2 is not an ordinal"):
        plain.give(0x6300, -2, 22, WITH_HANDLE)
    assert plain.record(22) == (0, 1, 0)


@pytest.mark.parametrize(("mode", "message"), [
    (THROWS_STD, "deleter failed on purpose"),
    (THROWS_OTHER, "unknown C++ exception"),
    (THROWS_IN_DTOR, "deleter destructor failed on purpose"),
])
def test_a_throwing_deleter_goes_to_the_unraisable_hook(plain, mode, message, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    s = plain.give(0x6400, 0, 30 + mode, mode)
    s.close()
    assert plain.record(30 + mode)[:2] == (1, 1), "called once and destroyed once, exception or not"
    assert len(seen) == 1
    assert isinstance(seen[0].exc_value, RuntimeError) and message in str(seen[0].exc_value)
    assert "custream" in str(seen[0].object)
    s.close()  # the exception did not leave close() half done
    del s
    assert len(seen) == 1


def test_a_shared_owner_lives_while_either_side_holds_it(plain):
    s = plain.share(0x7000, 0, 40)
    assert plain.use_count(40) == 2
    del s
    assert plain.use_count(40) == 1 and plain.record(40)[1] == 0  # C++ still holds it
    plain.cpp_drop(40)
    assert plain.record(40)[1] == 1
    s = plain.share(0x7100, 0, 41)
    plain.cpp_drop(41)
    assert plain.record(41)[1] == 0  # Python still holds it
    s.close()
    assert plain.record(41)[1] == 1
    del s
    assert plain.record(41)[1] == 1


def test_an_owner_is_moved_in_and_destroyed_once(plain):
    s = plain.give_owner(0x8000, 1, 50)
    assert (s.handle, s.device) == (0x8000, 1)
    assert plain.record(50)[1] == 0
    del s
    assert plain.record(50)[1] == 1


def test_a_failed_hand_over_leaves_the_owner_with_the_caller(plain):
    with pytest.raises(ValueError, match="device -2"):
        plain.give_owner(0x8100, -2, 51)
    assert plain.record(51)[1] == 1  # destroyed once: by the caller, which still owned it


def test_close_racing_deallocation_across_threads(plain):
    """C++ threads drop their references without the GIL while Python threads close the same
    streams: every release still runs exactly once."""
    for round_ in range(10):
        slots = range(100 + 8 * round_ % 100, 108 + 8 * round_ % 100)
        streams = [plain.give(0x9000 + i, 0, slot, WITH_HANDLE) for i, slot in enumerate(slots)]
        go = threading.Event()

        def closer(mine):
            go.wait()
            for s in mine:
                s.close()

        closers = [threading.Thread(target=closer, args=(streams[k::2],)) for k in range(2)]
        for t in closers:
            t.start()
        plain.race(streams, go.set, 4)
        for t in closers:
            t.join()
        del streams
        gc.collect()
        for i, slot in enumerate(slots):
            assert plain.record(slot) == (1, 1, 0x9000 + i), f"round {round_}, slot {slot}"


def test_a_stream_dropped_on_a_thread_without_the_gil_is_released(plain):
    s = plain.give(0x9800, 0, 60, WITH_HANDLE)
    ref = weakref.ref(s)
    plain.race([s], lambda: None, 3)
    assert ref() is s and plain.record(60)[0] == 0
    del s
    assert ref() is None and plain.record(60)[:2] == (1, 1)


def test_cpp_exceptions_become_python_errors(plain):
    with pytest.raises(MemoryError):
        plain.translate(0)
    with pytest.raises(RuntimeError, match="a runtime_error"):
        plain.translate(1)
    with pytest.raises(RuntimeError, match="unknown C\\+\\+ exception"):
        plain.translate(2)
    with pytest.raises(LookupError, match="my_error was thrown"):  # check<Error> on an empty result
        plain.translate(3)
    with pytest.raises(RuntimeError, match="with no exception"):
        plain.translate(4)
    assert plain.translate(5) is True


def _run(code, folder):
    program = f"import sys; sys.path.insert(0, {str(folder)!r})\n" + textwrap.dedent(code)
    env = {**os.environ, "CUSTREAM_TEST_EXIT_REPORT": "1"}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=env)


def test_no_release_after_finalization_and_none_from_a_static(plain):
    """A stream alive at exit: custream does not call its deleter during finalization, and a
    custream::stream in a C++ static, destroyed after Python is gone, does not touch it."""
    folder = sys.modules[plain.__name__].__file__.rsplit("/", 1)[0]
    proc = _run(f"""
        import custream, {plain.__name__} as plain
        kept = plain.give(0xA000, 0, 70, 0)      # alive until the interpreter finalizes
        plain.keep_forever(custream.Stream.from_handle(0xA100))
        plain.keep_forever(plain.give(0xA200, 0, 71, 0))  # replaces the first: released now
        print("alive", plain.record(70)[0], plain.record(71)[0], flush=True)
    """, folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["alive", "0", "0"]
    # Printed by a C++ static after finalization: neither deleter ran, before or during it.
    assert "at exit: 0 0" in proc.stderr, proc.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_no_release_in_a_forked_child(plain):
    folder = sys.modules[plain.__name__].__file__.rsplit("/", 1)[0]
    proc = _run(f"""
        import os, {plain.__name__} as plain
        s = plain.give(0xB000, 0, 80, 0)
        pid = os.fork()
        if pid == 0:
            s.close()
            os._exit(10 + plain.record(80)[0])   # the child's count: 0 expected
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), plain.record(80)[0])
        s.close()
        print(plain.record(80)[:2])
    """, folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["10 0", "(1, 1)"]


# ---- CCCL ------------------------------------------------------------------------------------


def test_views_convert_both_ways_with_cuda_stream_ref(plain_cccl):
    for s in (Stream.from_handle(0x1000), Stream.from_handle(0), Producer(0x2000)):
        handle = s.handle
        assert plain_cccl.cccl_roundtrip(s) == (handle, handle, handle, True)


def test_a_cuda_stream_moved_to_python(plain_cccl):
    check_cuda_stream_made(plain_cccl.cccl_make)


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_id_and_device_report_the_python_error(plain):
    with pytest.raises(custream.CudaUnavailableError):
        plain.id_and_device(Stream.from_handle(0x1000, device=2))
    closed = Stream.from_handle(0x1000)
    closed.close()
    with pytest.raises(ValueError, match="device on a closed custream.Stream"):
        plain.id_and_device(closed)
