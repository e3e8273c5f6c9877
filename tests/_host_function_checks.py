"""Checks of host functions shared by the CPU tests against a stand-in driver
(tests/test_host_functions.py) and the GPU tests (tests/gpu/test_gpu_capture.py, whose
conftest puts tests/ on the path). Each takes the stream and a function that queues work on
it, and needs no GPU library itself."""

import gc
import sys
import threading
import weakref


def check_call_lifetime(s, queue_work):
    """``fn`` and ``args`` of ``s.launch_host_func`` stay alive until the call ran, queued
    behind ``queue_work(s)``, and are released right after it."""

    class Arg:
        pass

    seen = []

    def fn(arg):
        seen.append(type(arg).__name__)

    arg = Arg()
    alive = weakref.ref(arg)
    before = sys.getrefcount(fn)
    gate = threading.Event()
    queue_work(s)
    # A host function that holds the stream until the gate opens (it lets the GIL go while
    # it waits): `fn` cannot have run before the checks below, however fast the work was.
    s.launch_host_func(gate.wait, 60)
    s.launch_host_func(fn, arg)
    assert sys.getrefcount(fn) == before + 1
    del arg
    gc.collect()
    assert alive() is not None, "the argument died before the call ran"
    assert seen == []
    gate.set()
    s.synchronize()
    assert seen == ["Arg"], seen
    assert alive() is None, "the argument outlived the call"
    assert sys.getrefcount(fn) == before


def watched_function():
    """A host function that does nothing, and a weak reference to it: a test drops its own
    reference once the function is queued, and ``released`` then says whether custream let it
    go."""

    class Fn:
        def __call__(self):
            pass

    fn = Fn()
    return fn, weakref.ref(fn)


def released(alive):
    """Whether the object behind the weak reference ``alive`` is gone, after a collection."""
    gc.collect()
    return alive() is None
