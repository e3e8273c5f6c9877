"""The Stream object on any machine: wrapping, attributes, lifetime, identity, refusals.

Everything here runs without a driver: from_handle makes no driver call.
"""

import gc
import inspect
import pickle
import sys
import threading
import weakref

import pytest

import custream
from custream import Stream


class Owner:
    pass


def test_from_handle_keeps_the_handle_and_makes_no_driver_call():
    s = Stream.from_handle(0xDEAD0000BEEF)
    assert s.handle == 0xDEAD0000BEEF
    assert s.__cuda_stream__() == (0, 0xDEAD0000BEEF)
    assert type(s.__cuda_stream__()[0]) is int and type(s.handle) is int
    assert not s.owned and not s.is_default and not s.closed
    assert s.owner is None


def test_handles_span_the_full_64_bit_range():
    top = Stream.from_handle(2**64 - 1)
    assert top.handle == 2**64 - 1 and top.__cuda_stream__() == (0, 2**64 - 1)


def test_given_device_is_reported_without_the_driver():
    assert Stream.from_handle(0x1000, device=3).device == 3


def test_owner_is_kept_alive_until_close():
    owner = Owner()
    alive = weakref.ref(owner)
    before = sys.getrefcount(owner)
    s = Stream.from_handle(0x1000, owner=owner)
    assert s.owner is owner
    assert sys.getrefcount(owner) == before + 1
    del owner
    gc.collect()
    assert alive() is not None
    s.close()
    assert alive() is None
    assert s.owner is None


def test_owner_is_released_on_deallocation():
    owner = Owner()
    alive = weakref.ref(owner)
    s = Stream.from_handle(0x1000, owner=owner)
    del owner, s
    assert alive() is None


def test_owner_none_means_no_owner():
    assert Stream.from_handle(0x1000, owner=None).owner is None


def test_reference_cycle_through_the_owner_is_collected():
    before = custream.live_stream_count()
    owner = Owner()
    owner.stream = Stream.from_handle(0x1000, owner=owner)
    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is None
    assert custream.live_stream_count() == before


def test_weak_references_and_the_live_count():
    before = custream.live_stream_count()
    s = Stream.from_handle(0x1000)
    assert custream.live_stream_count() == before + 1
    r = weakref.ref(s)
    called = []
    weakref.finalize(s, called.append, True)
    assert r() is s
    del s
    assert r() is None and called == [True]
    assert custream.live_stream_count() == before


@pytest.mark.parametrize("token,name", [(0, "null"), (1, "LEGACY_DEFAULT_STREAM"), (2, "PER_THREAD_DEFAULT_STREAM")])
def test_default_stream_tokens(token, name):
    s = Stream.from_handle(token)
    assert s.is_default and not s.owned
    assert s.handle == token and s.__cuda_stream__() == (0, token)
    assert not s.non_blocking and s.priority == 0
    assert name in repr(s) and "device=current" in repr(s)


def test_default_streams_are_objects_over_the_tokens():
    assert [s.handle for s in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM)] == [0, 1, 2]
    assert custream.LEGACY_DEFAULT_STREAM == Stream.from_handle(1)


def test_from_handle_given_a_stream_says_to_use_it_as_it_is():
    with pytest.raises(TypeError, match=r"from_handle\(\) handle must be an int, got custream.Stream: a Stream needs no wrapping"):
        Stream.from_handle(custream.LEGACY_DEFAULT_STREAM)


def test_device_cannot_be_pinned_on_a_default_token():
    with pytest.raises(ValueError, match=r"device cannot be given for the default-stream token 0x1"):
        Stream.from_handle(1, device=0)


def test_close_is_idempotent_and_every_handle_accessor_then_raises():
    s = Stream.from_handle(0x1000, owner=Owner())
    s.close()
    s.close()
    assert s.closed
    for op, call in [
        ("handle", lambda: s.handle),
        (r"__cuda_stream__\(\)", s.__cuda_stream__),
        (r"synchronize\(\)", s.synchronize),
        (r"query\(\)", s.query),
        (r"record\(\)", s.record),
        (r"__enter__\(\)", s.__enter__),
        ("device", lambda: s.device),
    ]:
        with pytest.raises(ValueError, match=rf"{op} on a closed custream.Stream"):
            call()
    with pytest.raises(ValueError, match="closed"):
        s.wait(Stream.from_handle(0x2000))
    with pytest.raises(ValueError, match="closed"):
        custream.as_stream(s).handle
    assert "closed" in repr(s)


def test_with_makes_the_stream_current_and_closes_nothing():
    owner = Owner()
    alive = weakref.ref(owner)
    with Stream.from_handle(0x1000, owner=owner) as s:
        del owner
        assert s.handle == 0x1000 and alive() is not None and custream.current_stream() is s
    assert not s.closed and alive() is not None
    s.close()
    assert alive() is None


def test_with_lets_an_error_propagate_and_closes_nothing():
    with pytest.raises(KeyError):
        with Stream.from_handle(0x1000) as s:
            raise KeyError("x")
    assert not s.closed and custream.current_stream() is custream.DEFAULT_STREAM


def test_equality_and_hash_follow_the_handle():
    a, b, c = Stream.from_handle(0x1000), Stream.from_handle(0x1000, owner=Owner()), Stream.from_handle(0x2000)
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2
    assert (a == 0x1000) is False  # a Stream is not its int
    assert a != object()


def test_repr_shows_handle_device_and_ownership():
    assert repr(Stream.from_handle(0xABC0, device=1)) == "<custream.Stream handle=0xabc0 device=1 borrowed>"
    assert repr(Stream.from_handle(0xABC0, owner=Owner())) == "<custream.Stream handle=0xabc0 borrowed from test_stream.Owner>"


def test_pickling_and_copying_are_refused():
    import copy

    s = Stream.from_handle(0x1000)
    for dump in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot pickle custream.Stream"):
            dump(s)


def test_type_is_final_and_immutable():
    with pytest.raises(TypeError):

        class Sub(Stream):  # noqa: F841
            pass

    with pytest.raises(TypeError):
        Stream.synchronize = None
    assert Stream.__module__ == "custream" and Stream.__name__ == "Stream"


def test_read_only_attributes():
    s = Stream.from_handle(0x1000)
    for name in ("handle", "device", "owned", "owner", "is_default", "non_blocking", "priority", "closed"):
        with pytest.raises(AttributeError):
            setattr(s, name, 1)


def test_signatures_are_introspectable():
    # What help() and an editor show: a signature that binds the documented arguments by
    # name, and a docstring (the exact texts are the stubs', checked by stubtest in
    # tests/test_stubs.py).
    bind = [
        (Stream, dict(device=None, non_blocking=True, priority=0, green_context=None, sync_policy=None)),
        (Stream.from_handle, dict(handle=1, owner=None, device=None)),
        (custream.Event, dict(device=None, timing=False, ipc=False)),
        (custream.GreenContext, dict(sm_count=8, device=None)),
        (custream.GreenContext.split, dict(sm_count=8, device=None)),
        (custream.GreenContext.from_handle, dict(handle=1, owner=None)),
        (custream.StreamPool, dict(size=2, device=None, non_blocking=True, priority=0, priorities=None,
                                   green_context=None, sync_policy=None)),
    ]
    for f, kwargs in bind:
        inspect.signature(f).bind(**kwargs)
    for f in (Stream.write_value, Stream.wait_value):
        inspect.signature(f).bind(Stream.from_handle(1), address=1, value=1, width=32, flush=False)
    for name, member in vars(Stream).items():
        if not name.startswith("_") and callable(member):
            assert member.__doc__, f"Stream.{name} has no docstring"


def test_close_from_many_threads_releases_the_owner_once():
    released = []
    for _ in range(50):
        owner = Owner()
        weakref.finalize(owner, released.append, 1)
        s = Stream.from_handle(0x1000, owner=owner)
        del owner
        barrier = threading.Barrier(8)

        def closer():
            barrier.wait()
            s.close()

        threads = [threading.Thread(target=closer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert s.closed
    assert released == [1] * 50


def test_get_include_holds_the_header_and_pxd():
    import os

    inc = custream.get_include()
    assert os.path.isfile(os.path.join(inc, "custream.h"))
    assert os.path.isfile(os.path.join(inc, "__init__.pxd"))
    with open(os.path.join(inc, "custream.h")) as f:
        assert f"#define CUSTREAM_ABI_VERSION {custream.ABI_VERSION}" in f.read()


def test_the_capsule_is_exported_under_the_header_name():
    import custream._custream as ext

    assert "custream._custream._C_API" in repr(ext._C_API)
