"""Faults on the CPU side of the driver boundary: a forked child, and interpreter exit with
live streams. Both must end cleanly: a clear error where the driver would be needed, no
crash, no destroy or deleter call in a child or during finalization, nothing on stderr.

The GPU forms (an owned stream across fork, owned streams at exit, a primary-context
reset) are in tests/gpu/test_gpu_custream_reliability.py.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import custream
from custream import Stream, as_stream

from _capi_ctypes import DeleterCounter

HAS_DRIVER = custream.is_available()
TESTS = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def in_child(body):
    """Run body() in a forked child; return (exit status, what it wrote). The child reports
    failures as text and always leaves through os._exit, never through pytest."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, 3.12+
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            out = body() or ""
            os.write(w, out.encode())
            code = 0
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(w, f"{type(e).__name__}: {e}".encode())
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


class Owner:
    def __init__(self):
        self.alive = True


class Producer:
    def __cuda_stream__(self):
        return (0, 0x4321)


def test_parent_streams_in_a_forked_child():
    owner = Owner()
    deleters = DeleterCounter()
    borrowed = Stream.from_handle(0x1234, owner=owner, device=0)
    produced = as_stream(Producer())
    with_deleter = deleters.wrap(0x5678)
    default = Stream.from_handle(2)

    def child():
        # Reading what the object holds needs no driver.
        assert borrowed.handle == 0x1234 and borrowed.__cuda_stream__() == (0, 0x1234)
        assert borrowed.device == 0 and borrowed.owner is owner
        assert produced.handle == 0x4321 and as_stream(produced) is produced
        assert with_deleter.handle == 0x5678 and default.handle == 2
        # Anything that would call the driver on a parent's stream is refused, clearly.
        for s in (borrowed, produced, with_deleter, default):
            for call in (s.synchronize, s.query):
                try:
                    call()
                except custream.CudaError as e:
                    assert e.name == "CUDA_ERROR_NOT_INITIALIZED", e.name
                    assert "forked" in e.message and "'spawn'" in e.message, e.message
                else:
                    raise AssertionError(f"{call.__name__}() worked on a parent's stream in a child")
        # Closing and dropping in the child: no deleter call (the handle is the parent's).
        with_deleter.close()
        produced.close()
        borrowed.close()
        assert borrowed.owner is None
        assert deleters.count == 0, "the deleter ran in a child"
        return "ok"

    code, out = in_child(child)
    assert (code, out) == (0, "ok")
    # The parent's objects are untouched by what the child did.
    assert not borrowed.closed and borrowed.owner is owner and not with_deleter.closed
    with_deleter.close()
    assert deleters.count == 1


def test_new_streams_in_a_forked_child():
    def child():
        s = Stream.from_handle(0x999, owner=Owner())
        try:
            s.synchronize()
        except custream.CudaUnavailableError:
            assert not HAS_DRIVER
        except custream.CudaError as e:
            # The parent initialized CUDA: the child cannot use it at all.
            assert HAS_DRIVER and e.name == "CUDA_ERROR_NOT_INITIALIZED", e
        else:
            raise AssertionError("synchronize() worked in a forked child")
        try:
            Stream()
        except custream.CudaUnavailableError:
            assert not HAS_DRIVER
        except custream.CudaError as e:
            assert HAS_DRIVER and e.name == "CUDA_ERROR_NOT_INITIALIZED", e
        else:
            raise AssertionError("Stream() worked in a forked child")
        s.close()
        del s
        return "ok"

    assert in_child(child) == (0, "ok")


def test_dealloc_of_everything_in_a_child_then_exit():
    streams = [Stream.from_handle(0x100 + i, owner=Owner()) for i in range(100)]
    deleters = DeleterCounter()
    streams += [deleters.wrap(0x200 + i) for i in range(100)]

    def child():
        live = custream.live_stream_count()
        del streams[:]
        assert custream.live_stream_count() == live - 200
        assert deleters.count == 0
        return "ok"

    assert in_child(child) == (0, "ok")
    assert len(streams) == 200 and deleters.count == 0
    del streams[:]
    assert deleters.count == 100


# --- interpreter exit ---------------------------------------------------------------------

EXIT_SCRIPT = textwrap.dedent(
    """
    import atexit, gc, sys, threading, weakref
    sys.path.insert(0, {tests!r})

    def late():
        # Registered before custream's own atexit hook, so it runs after it: the driver
        # is off limits now, and says so.
        for s in (GLOBAL, CHAIN):
            s.handle, s.__cuda_stream__()
        try:
            GLOBAL.synchronize()
        except custream.CudaError as e:
            print("late:", e.name)
        except custream.CudaUnavailableError:
            print("late: unavailable")

    atexit.register(late)

    import custream
    from custream import Stream, as_stream
    from _capi_ctypes import DeleterCounter

    class Owner:
        pass

    class Producer:
        def __cuda_stream__(self):
            return (0, 0x4242)

    class CycleOwner:
        def __init__(self):
            self.stream = Stream.from_handle(0x3333, owner=self)   # owner <-> stream

    class Holder:
        # Uses its stream from __del__, whenever finalization gets to it.
        def __init__(self, stream):
            self.stream = stream
            self.me = self  # keep it in a cycle too
        def __del__(self):
            self.stream.handle
            self.stream.close()
            self.stream.close()

    GLOBAL = Stream.from_handle(0x1111, owner=Owner())
    PRODUCED = as_stream(Producer())
    CHAIN = Stream.from_handle(0x2222, owner=Stream.from_handle(0x2222, owner=Owner()))
    DEFAULTS = [Stream.from_handle(h) for h in (0, 1, 2)]
    CYCLES = [CycleOwner() for _ in range(100)]
    HOLDER = Holder(Stream.from_handle(0x4444, owner=Owner()))
    HOLDERS = [Holder(Stream.from_handle(0x5555 + i)) for i in range(100)]
    DELETERS = DeleterCounter(per_handle=False)
    WITH_DELETER = [DELETERS.wrap(0x6000 + i) for i in range(100)]
    WEAK = [weakref.ref(s, lambda r: None) for s in WITH_DELETER + [GLOBAL, CHAIN]]
    closed = DELETERS.wrap(0x7000)
    closed.close()
    print("deleter calls before exit:", DELETERS.count)
    for o in CYCLES[:50]:
        del o.stream  # half the cycles broken, half left for the collector or exit
    del o

    stop = threading.Event()
    def reader():
        # A daemon thread still using shared streams while the interpreter exits.
        while True:
            for s in [GLOBAL, CHAIN, PRODUCED] + WITH_DELETER[:5]:
                s.handle, s.__cuda_stream__(), s.owner, repr(s)
            Stream.from_handle(0x8888, owner=GLOBAL).close()
    threading.Thread(target=reader, daemon=True).start()
    {extra}
    print("live:", custream.live_stream_count() > 0)
    """
)


def run_exit_script(extra=""):
    script = EXIT_SCRIPT.format(tests=TESTS, extra=extra)
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True, text=True, timeout=120)
    return proc


def test_interpreter_exit_with_live_streams():
    proc = run_exit_script()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == "deleter calls before exit: 1"
    assert lines[1] == "live: True"
    assert lines[2] == "late: CUDA_ERROR_DEINITIALIZED", "after custream's atexit hook, no driver call"


def test_interpreter_exit_after_gc_disabled():
    proc = run_exit_script("gc.disable()")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_interpreter_exit_through_sys_exit_in_a_thread_and_main():
    proc = run_exit_script("threading.Thread(target=sys.exit).start(); sys.exit(0)")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "late: CUDA_ERROR_DEINITIALIZED" in proc.stdout


def test_interpreter_exit_with_an_exception_pending():
    # An uncaught exception at exit: the traceback is the only thing on stderr.
    proc = run_exit_script("raise KeyError('on purpose')")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "KeyError: 'on purpose'"
    assert "custream" not in proc.stderr.replace("custream.Stream", "")


# A daemon thread inside a driver call (the stand-in's cuStreamSynchronize, 200 ms) while the
# interpreter exits. CPython 3.10-3.13 end a thread that re-attaches once finalization began
# with pthread_exit, a forced unwind through custream's frames: the release wheel crashed
# there (its unwinder was not libgcc's), and with libgcc's the unwind ran custream's drops in
# a dying interpreter and hung in one. custream parks such a thread instead, from its atexit
# hook on, as CPython 3.14 does.
IN_DRIVER_AT_EXIT = """
import atexit, ctypes, gc, os, sys, threading, time
sys.path.insert(0, {tests!r})
RETURNS = [0]

def after_custream_hook():
    before = RETURNS[0]
    time.sleep(0.5)  # time is the point: a thread let back into Python would return meanwhile
    print("returned from the driver after custream's hook:", RETURNS[0] - before)

{hook}
import custream
from custream import Stream
lib = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
lib.standin_slow_synchronize(200)

def busy():
    s = Stream(device=0)
    while True:
        try:
            s.synchronize()
        except custream.CudaError as e:
            assert e.name == "CUDA_ERROR_DEINITIALIZED", e.name
        RETURNS[0] += 1

class SlowToGo:  # a cycle, collected by the last collection, after finalization began
    def __init__(self):
        self.sleep, self.me = time.sleep, self
    def __del__(self):
        # Lets the GIL go, long enough (time is the point) for the thread to come back from
        # the driver: CPython ends a thread waiting for it then.
        self.sleep(0.5)  # time under test (above)

threading.Thread(target=busy, daemon=True).start()
end = time.monotonic() + 10
while not lib.standin_in_synchronize():  # the thread is inside cuStreamSynchronize, the GIL let go
    assert time.monotonic() < end, "the thread never reached cuStreamSynchronize"
    time.sleep(0.001)  # a poll's interval
gc.disable()
SlowToGo()
{extra}
"""


def exit_with_a_thread_in_the_driver(lib, extra, hook=""):
    code = IN_DRIVER_AT_EXIT.format(tests=TESTS, extra=extra, hook=hook)
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(lib))
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    return proc.stdout


@pytest.mark.parametrize("extra", ["", "sys.exit(0)", "raise SystemExit(0)"])
def test_exit_while_a_thread_is_inside_the_driver(extra, standin_lib):
    assert exit_with_a_thread_in_the_driver(standin_lib, extra) == ""


def test_a_thread_back_from_the_driver_after_the_atexit_hook_is_parked(standin_lib):
    # Registered before custream's import, this hook runs after custream's: from then on the
    # thread comes back from the driver into Python no more.
    out = exit_with_a_thread_in_the_driver(standin_lib, "", hook="atexit.register(after_custream_hook)")
    assert out == "returned from the driver after custream's hook: 0\n"
