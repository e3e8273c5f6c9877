"""The default streams, the current stream and the pool through the Cython and C faces:
the same objects Python sees, through the installed .pxd and custream.h."""

import threading

import pytest

import custream
from custream import Stream


def test_cython_default_streams_are_the_modules(cy):
    assert cy.defaults() == (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM)
    assert all(a is b for a, b in zip(cy.defaults(), (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM)))
    with pytest.raises(ValueError, match=r"0x3 is not a default-stream token \(0, 1 or 2\)"):
        cy.default_of(3)


def test_c_default_streams_are_the_modules(cext):
    assert cext.default_stream(0) is custream.DEFAULT_STREAM
    assert cext.default_stream(1) is custream.LEGACY_DEFAULT_STREAM
    assert cext.default_stream(2) is custream.PER_THREAD_DEFAULT_STREAM
    with pytest.raises(ValueError, match="not a default-stream token"):
        cext.default_stream(0x1000)


def test_cython_and_c_see_the_current_stream_of_the_calling_thread(cy, cext):
    s = Stream.from_handle(0x1000)
    assert cy.current() is cext.current_stream() is custream.DEFAULT_STREAM
    with s:
        assert cy.current() is s and cext.current_stream() is s
        seen = []
        t = threading.Thread(target=lambda: seen.append((cy.current(), cext.current_stream())))
        t.start()
        t.join()
        assert seen == [(custream.DEFAULT_STREAM, custream.DEFAULT_STREAM)]
    assert cy.current() is custream.DEFAULT_STREAM


def test_pool_get_refuses_what_is_not_a_pool(cy, cext):
    with pytest.raises(TypeError, match="Custream_PoolGet\\(\\) expected a custream.StreamPool, got list"):
        cy.pool_next([])
    with pytest.raises(TypeError, match="expected a custream.StreamPool, got Stream"):
        cext.pool_get(custream.DEFAULT_STREAM)


def test_flag_values_agree_with_the_header(cy):
    flags = cy.flag_values()
    assert (flags["SHARED"], flags["POOLED"]) == (0x8, 0x10)
    assert custream.DEFAULT_STREAM.is_default
