"""The consumer side of the CUDA Stream Protocol (docs/design.md, "The protocol"), on the CPU."""

import gc
import sys
import warnings
import weakref

import pytest

import custream
from custream import Stream, as_stream
from producers import IndexOnly, IntSub, Mutating, Pair, Producer, PropertyRaising, Raising


def test_a_stream_is_returned_as_is():
    s = Stream.from_handle(0x1000)
    assert as_stream(s) is s


def test_producer_result_becomes_a_borrowed_stream_owning_the_producer():
    p = Producer((0, 0x5000))
    s = as_stream(p)
    assert type(s) is Stream and s.handle == 0x5000 and s.owner is p and not s.owned
    assert p.calls == 1
    alive = weakref.ref(p)
    del p
    gc.collect()
    assert alive() is not None
    s.close()
    assert alive() is None


def test_producer_refcount_is_restored_after_release():
    p = Producer((0, 0x5000))
    before = sys.getrefcount(p)
    for _ in range(1000):
        as_stream(p)
    assert sys.getrefcount(p) == before


def test_round_trip_between_two_streams():
    a = Stream.from_handle(0x7000)
    b = as_stream(a.__cuda_stream__ and Producer(a.__cuda_stream__()))
    assert b == a and b.__cuda_stream__() == a.__cuda_stream__()


@pytest.mark.parametrize("token", [0, 1, 2])
def test_default_tokens_from_a_producer_are_default_streams(token):
    s = as_stream(Producer((0, token)))
    assert s.is_default and s.handle == token


def test_tuple_subclass_results_are_accepted():
    s = as_stream(Producer(Pair(0, 0x10)))
    assert s.handle == 0x10 and type(s.__cuda_stream__()) is tuple


def test_int_subclass_handles_are_accepted_and_normalised():
    s = as_stream(Producer((0, IntSub(0x20))))
    assert s.handle == 0x20 and type(s.handle) is int


@pytest.mark.parametrize(
    "version,exc,message",
    [
        (1, ValueError, r"returned version 1: custream understands protocol version 0 only"),
        (-1, ValueError, r"returned version -1"),
        (True, TypeError, r"returned version True of type bool: the version must be the int 0"),
        (False, TypeError, r"returned version False of type bool"),
        (0.0, TypeError, r"returned version 0.0 of type float"),
        ("0", TypeError, r"returned version '0' of type str"),
        (None, TypeError, r"returned version None of type NoneType"),
    ],
)
def test_version_must_be_exactly_the_int_zero(version, exc, message):
    with pytest.raises(exc, match=r"Producer\.__cuda_stream__\(\) " + message):
        as_stream(Producer((version, 0x10)))


@pytest.mark.parametrize(
    "handle,exc,message",
    [
        (-1, ValueError, r"-1 is out of range: a stream handle is in \[0, 2\*\*64\)"),
        (2**64, ValueError, r"18446744073709551616 is out of range"),
        (1.0, TypeError, r"must be an int, got float"),
        ("0x10", TypeError, r"must be an int, got str"),
        (True, TypeError, r"must be an int, got bool"),
        (None, TypeError, r"must be an int, got NoneType"),
    ],
)
def test_handle_must_be_an_int_in_range(handle, exc, message):
    with pytest.raises(exc, match=r"the handle returned by .*Producer\.__cuda_stream__\(\) " + message):
        as_stream(Producer((0, handle)))


def test_index_only_handles_are_refused():
    with pytest.raises(TypeError, match="must be an int, got .*Index"):
        as_stream(Producer((0, IndexOnly(16))))


@pytest.mark.parametrize(
    "result,exc,message",
    [
        ([0, 16], TypeError, r"must return a tuple \(version, handle\), got list"),
        (16, TypeError, r"got int"),
        (None, TypeError, r"got NoneType"),
        ((0,), ValueError, r"must return a 2-tuple \(version, handle\), got a tuple of length 1"),
        ((0, 16, 0), ValueError, r"got a tuple of length 3"),
        ((), ValueError, r"got a tuple of length 0"),
    ],
)
def test_result_must_be_a_two_tuple(result, exc, message):
    with pytest.raises(exc, match=message):
        as_stream(Producer(result))


def test_objects_without_the_protocol_are_refused_with_their_type():
    with pytest.raises(TypeError, match=r"expected a custream.Stream or an object with a __cuda_stream__\(\) method, got object"):
        as_stream(object())
    with pytest.raises(TypeError, match=r"got int; to wrap a raw handle use custream.Stream.from_handle"):
        as_stream(0x1000)
    with pytest.raises(TypeError, match=r"got NoneType"):
        as_stream(None)


def test_an_exception_inside_the_producer_propagates_unchanged():
    boom = KeyError("inside the producer")
    with pytest.raises(KeyError) as info:
        as_stream(Raising(boom))
    assert info.value is boom


def test_an_exception_from_a_property_getter_propagates():
    with pytest.raises(RuntimeError, match="getter failed"):
        as_stream(PropertyRaising(RuntimeError("getter failed")))


def test_an_attribute_instead_of_a_method_works_with_a_deprecation_warning():
    class Old:
        __cuda_stream__ = (0, 0x30)

    with pytest.warns(DeprecationWarning, match=r"Old.__cuda_stream__ is an attribute; the CUDA Stream Protocol makes it a method"):
        s = as_stream(Old())
    assert s.handle == 0x30


def test_the_deprecation_warning_can_be_made_an_error():
    class Old:
        __cuda_stream__ = (0, 0x30)

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning):
            as_stream(Old())


def test_the_protocol_is_called_once_per_wrap():
    p = Producer((0, 0x40))
    as_stream(p)
    as_stream(p)
    assert p.calls == 2


def test_a_mutating_producer_is_read_once_per_wrap():
    m = Mutating((0, 0x100), (0, 0x200))
    assert as_stream(m).handle == 0x100
    assert as_stream(m).handle == 0x200
