"""Leaks on the CPU: 100k wrap/close cycles of every kind leave owner reference counts,
traced Python memory, the C heap, RSS and the live-Stream count where they were.

A leak of one Python object per cycle would add megabytes of traced memory; a leak of one
pointer per cycle in Rust would add ~800 KB of heap. The bounds below sit well under both
and well over allocator noise.
"""

import ctypes
import gc
import os
import sys
import sysconfig
import tracemalloc

import pytest

import custream
from custream import Stream, as_stream

from _capi_ctypes import DeleterCounter
from _platform import emulated

CYCLES = 100_000
WARMUP = 5_000
TRACED_BOUND = 64 * 1024
HEAP_BOUND = 256 * 1024
RSS_BOUND = 2 * 1024 * 1024
# A free-threaded CPython allocates objects from mimalloc, which keeps freed pages for reuse:
# the process's size is no measure there, the traced and heap growth still are.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
# Under qemu-user (the emulated aarch64 suite) the process is the emulator, whose cache of
# translated code grows in steps of megabytes as new paths of the guest run: no measure either.
EMULATED = emulated()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_bytes():
    """Bytes malloc has handed out and not had back (glibc), or None elsewhere."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


class Producer:
    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class ListProducer(Producer):
    """Returns a non-cached form: a tuple subclass, so custream builds its own tuple."""

    __slots__ = ()

    def __cuda_stream__(self):
        return Pair((0, self.handle))


class Pair(tuple):
    __slots__ = ()


class Bad:
    __slots__ = ()

    def __cuda_stream__(self):
        return (0, -1)


def measure(cycle, n=CYCLES):
    """Run `cycle(i)` n times after a warm-up; return growth of live streams, traced memory,
    heap and RSS."""
    for i in range(WARMUP):
        cycle(i)
    gc.collect()
    live, rss, heap = custream.live_stream_count(), rss_bytes(), heap_bytes()
    tracemalloc.start()
    traced = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        cycle(i)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - traced
    tracemalloc.stop()
    heap_after = heap_bytes()
    return {
        "live": custream.live_stream_count() - live,
        "traced": traced,
        "heap": None if heap is None else heap_after - heap,
        "rss": rss_bytes() - rss,
    }


def assert_flat(growth):
    assert growth["live"] == 0, growth
    assert growth["traced"] < TRACED_BOUND, growth
    if growth["heap"] is not None:
        assert growth["heap"] < HEAP_BOUND, growth
    if not FREE_THREADED and not EMULATED:
        assert growth["rss"] < RSS_BOUND, growth


def test_from_handle_with_owner_close_and_dealloc():
    owner, other = object(), Producer(1)
    refs = sys.getrefcount(owner), sys.getrefcount(other)

    def cycle(i):
        s = Stream.from_handle(0x1000 + i, owner=owner)
        s.handle, s.__cuda_stream__(), s.owner
        s.close()
        with Stream.from_handle(0x10, owner=other, device=0) as t:
            t.handle
        Stream.from_handle(i % 3, owner=owner)  # default tokens, dropped unclosed

    assert_flat(measure(cycle))
    assert (sys.getrefcount(owner), sys.getrefcount(other)) == refs


def test_as_stream_with_producers():
    cached, built = Producer(0x2000), ListProducer(0x3000)
    refs = sys.getrefcount(cached), sys.getrefcount(built)

    def cycle(i):
        s = as_stream(cached)
        assert as_stream(s) is s
        s.close()
        as_stream(built).__cuda_stream__()

    assert_flat(measure(cycle))
    assert (sys.getrefcount(cached), sys.getrefcount(built)) == refs


def test_error_paths():
    bad, owner = Bad(), object()
    refs = sys.getrefcount(bad), sys.getrefcount(owner)

    def cycle(i):
        try:
            as_stream(bad)
        except ValueError:
            pass
        try:
            Stream.from_handle(-1, owner=owner)
        except ValueError:
            pass
        try:
            Stream.from_handle(5, owner=owner, device="0")
        except TypeError:
            pass
        s = Stream.from_handle(5, owner=owner)
        s.close()
        try:
            s.synchronize()
        except ValueError:
            pass

    assert_flat(measure(cycle))
    assert (sys.getrefcount(bad), sys.getrefcount(owner)) == refs


def test_owner_reference_cycles_are_collected():
    freed = [0]

    class Owner:
        def __del__(self):
            freed[0] += 1

    def cycle(i):
        o = Owner()
        o.stream = Stream.from_handle(0x4000 + i, owner=o)  # owner -> stream -> owner

    growth = measure(cycle)
    assert_flat(growth)
    assert freed[0] == WARMUP + CYCLES


def test_c_deleter_called_once_per_stream():
    deleters = DeleterCounter(per_handle=False)

    def cycle(i):
        before, handle = deleters.count, 0x5000 + i
        s = deleters.wrap(handle)
        s.handle
        if i % 2:
            s.close()
            s.close()
        del s
        assert deleters.count == before + 1 and deleters.last == handle

    assert_flat(measure(cycle))
    assert deleters.count == WARMUP + CYCLES


@pytest.mark.parametrize("cycles", [CYCLES])
def test_weakrefs_do_not_leak(cycles):
    import weakref

    def cycle(i):
        s = Stream.from_handle(0x6000 + i)
        r = weakref.ref(s)
        del s
        assert r() is None

    assert_flat(measure(cycle, cycles))


class Link:
    """A producer holding a stream: as_stream makes each the next stream's owner."""

    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return (0, 0x77)


# Releasing the head of a chain of owners must not recurse once per link: 300k nested
# deallocations overflow the C stack. In a pytest process of its own (tests/conftest.py), so
# that a crash fails only this test.
@pytest.mark.isolated(timeout=300)
def test_deep_owner_chains_release_without_recursing():
    n = 300_000
    live = custream.live_stream_count()
    s = None
    for i in range(n):  # each stream owns the one before
        s = Stream.from_handle(16 + i, owner=s)
    del s
    s = None
    for i in range(n):  # through a list
        s = Stream.from_handle(16 + i, owner=[s])
    s.close()
    del s
    s = None
    for i in range(n):  # through producers
        s = as_stream(Link(s))
    del s
    assert custream.live_stream_count() == live
