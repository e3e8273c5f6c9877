"""The default streams as objects and the current stream (``with s:``, current_stream()).

All of this needs no GPU: the default streams and wrapped handles are Stream objects
without a driver call, and the current stream is custream's own bookkeeping.
"""

import asyncio
import contextlib
import os
import sys
import threading

import pytest

import custream
from custream import Stream

DEFAULTS = [
    ("DEFAULT_STREAM", 0),
    ("LEGACY_DEFAULT_STREAM", 1),
    ("PER_THREAD_DEFAULT_STREAM", 2),
]


@pytest.mark.parametrize("name,token", DEFAULTS)
def test_default_streams_are_stream_objects_over_their_tokens(name, token):
    s = getattr(custream, name)
    assert type(s) is Stream
    assert s.handle == token and s.__cuda_stream__() == (0, token)
    assert s.is_default and not s.owned and s.owner is None
    assert custream.as_stream(s) is s
    assert s == Stream.from_handle(token) and hash(s) == hash(Stream.from_handle(token))
    assert "device=current" in repr(s) and "shared" in repr(s)


@pytest.mark.parametrize("name,token", DEFAULTS)
def test_closing_a_module_default_stream_is_refused_by_name(name, token):
    s = getattr(custream, name)
    with pytest.raises(ValueError, match=rf"custream\.{name} is shared by every library in this process and is never closed"):
        s.close()
    assert not s.closed and s.handle == token
    with pytest.raises(ValueError, match="never closed"), contextlib.closing(s):
        pass


def test_a_default_token_wrapped_by_the_user_is_the_users_to_close():
    s = Stream.from_handle(1)
    s.close()
    assert s.closed and not custream.LEGACY_DEFAULT_STREAM.closed


def test_the_current_stream_is_the_default_stream_when_none_is_set():
    assert custream.current_stream() is custream.DEFAULT_STREAM


def test_with_makes_a_stream_current_nests_and_closes_nothing():
    a, b = Stream.from_handle(0x1000), Stream.from_handle(0x2000)
    with a as entered:
        assert entered is a and custream.current_stream() is a
        with b:
            assert custream.current_stream() is b
            with a:
                assert custream.current_stream() is a
            assert custream.current_stream() is b
        assert custream.current_stream() is a
    assert custream.current_stream() is custream.DEFAULT_STREAM
    assert not a.closed and not b.closed
    a.close(), b.close()


def test_a_block_left_holds_no_reference_to_its_stream():
    s = Stream.from_handle(0x1000)
    before = sys.getrefcount(s)
    for _ in range(3):
        with s:
            pass
    assert sys.getrefcount(s) == before


def test_the_previous_stream_comes_back_when_the_block_raises():
    a = Stream.from_handle(0x1000)
    with pytest.raises(KeyError), a:
        raise KeyError("x")
    assert custream.current_stream() is custream.DEFAULT_STREAM
    assert not a.closed


def test_a_default_stream_can_be_entered():
    with custream.PER_THREAD_DEFAULT_STREAM as s:
        assert custream.current_stream() is s is custream.PER_THREAD_DEFAULT_STREAM
    assert custream.current_stream() is custream.DEFAULT_STREAM


def test_a_closed_stream_cannot_be_entered():
    s = Stream.from_handle(0x1000)
    s.close()
    with pytest.raises(ValueError, match=r"__enter__\(\) on a closed custream.Stream"):
        with s:
            pass
    assert custream.current_stream() is custream.DEFAULT_STREAM


def test_closing_inside_the_block_still_restores_the_previous_stream():
    s = Stream.from_handle(0x1000)
    with s:
        s.close()
        assert custream.current_stream() is s
    assert custream.current_stream() is custream.DEFAULT_STREAM


def test_closing_is_explicit_with_contextlib_closing():
    s = Stream.from_handle(0x1000)
    with contextlib.closing(s):
        pass
    assert s.closed


def test_leaving_blocks_out_of_order_is_refused():
    a, b = Stream.from_handle(0x1000), Stream.from_handle(0x2000)
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="must nest"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert custream.current_stream() is custream.DEFAULT_STREAM
    with pytest.raises(RuntimeError, match="not the innermost one open"):
        a.__exit__(None, None, None)


def test_each_thread_has_its_own_current_stream():
    a = Stream.from_handle(0x1000)
    barrier = threading.Barrier(2)
    seen = {}

    def other_thread():
        barrier.wait()  # `a` is current in the main thread now
        seen["other"] = custream.current_stream()
        with Stream.from_handle(0x3000) as mine:
            barrier.wait()
            seen["other-inside"] = custream.current_stream() is mine
            barrier.wait()

    t = threading.Thread(target=other_thread)
    t.start()
    with a:
        barrier.wait()
        barrier.wait()  # the other thread is inside its own block
        seen["main"] = custream.current_stream()
        barrier.wait()
    t.join()
    assert seen["other"] is custream.DEFAULT_STREAM
    assert seen["other-inside"] is True
    assert seen["main"] is a


def test_each_asyncio_task_has_its_own_current_stream():
    async def task(handle, started, proceed):
        with Stream.from_handle(handle) as s:
            started.set()
            await proceed.wait()
            return custream.current_stream() is s

    async def main():
        started = [asyncio.Event(), asyncio.Event()]
        proceed = asyncio.Event()
        tasks = [asyncio.create_task(task(h, e, proceed)) for h, e in zip((0x1000, 0x2000), started)]
        for e in started:
            await e.wait()  # both blocks are open at once, interleaved on one thread
        outside = custream.current_stream()
        proceed.set()
        return outside, await asyncio.gather(*tasks)

    outside, inside = asyncio.run(main())
    assert outside is custream.DEFAULT_STREAM
    assert inside == [True, True]


def test_tasks_that_interleave_blocks_of_one_stream_each_leave_their_own():
    # Both tasks enter `s` on one thread; the first to enter leaves first, while the other's
    # block is still open: each leaves with its own context's token.
    s, t = Stream.from_handle(0x1000), Stream.from_handle(0x2000)

    async def task(entered, leave):
        with t:
            with s:
                entered.set()
                await leave.wait()
                inside = custream.current_stream() is s
            return inside, custream.current_stream() is t

    async def main():
        entered, leave = [asyncio.Event(), asyncio.Event()], [asyncio.Event(), asyncio.Event()]
        first = asyncio.create_task(task(entered[0], leave[0]))
        await entered[0].wait()
        second = asyncio.create_task(task(entered[1], leave[1]))
        await entered[1].wait()
        leave[0].set()
        one = await first
        assert custream.current_stream() is custream.DEFAULT_STREAM
        leave[1].set()
        return one, await second

    assert asyncio.run(main()) == ((True, True), (True, True))
    assert custream.current_stream() is custream.DEFAULT_STREAM


def test_a_task_inherits_the_current_stream_of_its_creator():
    s = Stream.from_handle(0x1000)

    async def child():
        return custream.current_stream()

    async def main():
        with s:
            return await asyncio.create_task(child())

    assert asyncio.run(main()) is s


def _in_env(value, expected):
    # A pytest process of its own with the variable set: custream reads it at import.
    return pytest.param(value, expected, id=value or "empty",
                        marks=pytest.mark.isolated(env={"CUSTREAM_PER_THREAD_DEFAULT_STREAM": value}))


@pytest.mark.parametrize("value,expected", [_in_env("1", "PER_THREAD_DEFAULT_STREAM"), _in_env("0", "DEFAULT_STREAM"),
                                            _in_env("", "DEFAULT_STREAM")])
def test_the_environment_chooses_the_per_thread_default(value, expected):
    assert os.environ["CUSTREAM_PER_THREAD_DEFAULT_STREAM"] == value
    assert custream.current_stream() is getattr(custream, expected), custream.current_stream()
