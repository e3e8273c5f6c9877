"""Cython in C++ mode (cy_ext.pyx over custream/cpp.pxd): a Stream's handle becomes a
custream::stream_ref with no Python call, inside nogil, and goes to a C++ function taking
CCCL's cuda::stream_ref, by a cast or by declaring the function with custream's type; a C++
owner shared through a shared_ptr comes back as a custream.Stream."""

import gc

import pytest

from custream import Stream
from _producers import Producer


def test_a_stream_reaches_a_cuda_stream_ref_function(cy_ext):
    s = Stream.from_handle(0x1000)
    assert cy_ext.handle_by_cast(s) == 0x1000
    assert cy_ext.handle_by_declaration(s) == 0x1000
    assert cy_ext.handle_of_any(Producer(0x2000)) == 0x2000
    assert cy_ext.handle_of_any(s) == 0x1000


def test_views_compare_and_know_the_default_streams(cy_ext):
    a, b = Stream.from_handle(0x1000), Stream.from_handle(0x1000)
    assert cy_ext.same(a, b) and not cy_ext.same(a, Stream.from_handle(0x1001))
    assert [cy_ext.is_default(Stream.from_handle(t)) for t in (0, 1, 2, 3)] == [True, True, True, False]


def test_typed_arguments_refuse_other_objects(cy_ext):
    with pytest.raises(TypeError):
        cy_ext.handle_by_cast(None)
    with pytest.raises(TypeError):
        cy_ext.handle_by_cast(Producer(0x2000))
    with pytest.raises(TypeError, match="got str"):
        cy_ext.handle_of_any("nope")


def test_a_shared_owner_from_cython(cy_ext):
    before = cy_ext.deaths()
    s = cy_ext.share(0x3000, 0)
    assert type(s) is Stream and (s.handle, s.device) == (0x3000, 0)
    assert cy_ext.deaths() == before
    del s
    gc.collect()
    assert cy_ext.deaths() == before + 1
    with pytest.raises(ValueError, match="device -2"):
        cy_ext.share(0x3000, -2)
    assert cy_ext.deaths() == before + 2  # refused: the owner let go at once, never twice
