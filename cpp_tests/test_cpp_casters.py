"""The nanobind and pybind11 casters (custream/nanobind.hpp, custream/pybind11.hpp): every test
runs on casters.cpp built with each binding (`ext`). A custream::stream_ref or custream::stream
argument takes a custream Stream or any producer and refuses the rest with the binding's own
TypeError; a returned custream::stream becomes a custream.Stream."""

import gc
import sys
import weakref

import pytest

import custream
from custream import Stream
from _producers import BadVersion, Producer, Raising, assert_returns_itself, check_cuda_stream_made


# What a consumer sees of each peer library's stream: a class with __cuda_stream__. (The real
# ones need a device; tests/gpu/test_gpu_cpp.py passes them.)
PEERS = {name: type(name, (Producer,), {}) for name in ("CupyStream", "TorchStream", "CudaCoreStream",
                                                        "NumbaStream", "RmmStream")}


def test_takes_a_stream_and_every_producer(ext):
    assert ext.handle_of(Stream.from_handle(0x1000)) == 0x1000
    for token in (0, 1, 2):
        assert ext.handle_of(Stream.from_handle(token)) == token
    for i, cls in enumerate(PEERS.values()):
        assert ext.handle_of(cls(0x2000 + i)) == 0x2000 + i
        assert ext.handle_of_owned(cls(0x2000 + i)) == 0x2000 + i


@pytest.mark.parametrize("bad", ["nope", None, 5, object(), Raising(), BadVersion()], ids=repr)
def test_refuses_what_is_not_a_stream_with_the_bindings_type_error(ext, bad):
    for f in (ext.handle_of, ext.handle_of_owned):
        with pytest.raises(TypeError, match="incompatible function arguments") as info:
            f(bad)
        message = str(info.value)
        assert "custream.Stream" in message  # the expected type, in the signature
        assert type(bad).__name__ in message or repr(bad) in message  # and what came instead


def test_refuses_a_closed_stream_with_the_error_every_face_raises(ext):
    s = Stream.from_handle(0x3000)
    s.close()
    for f in (ext.handle_of, ext.maybe_handle, ext.echo_ref):
        with pytest.raises(ValueError, match=r"^handle on a closed custream\.Stream$"):
            f(s)
    with pytest.raises(ValueError, match=r"^handle on a closed custream\.Stream$"):
        s.handle  # what Python says (and Cython's handle_checked, and the Rust crate)
    assert ext.handle_of_owned(s) == 0x3000  # an owning argument takes it (as_stream does)


def test_a_manual_cast_of_a_closed_stream_fails_as_the_binding_fails(ext):
    s = Stream.from_handle(0x3100)
    assert ext.cast_ref(s) == 0x3100
    s.close()
    if ext.__name__ == "nb_ext":
        # nb::cast may not throw from a caster: a failed cast, which nanobind reports as such;
        # nb::try_cast says false.
        with pytest.raises(Exception, match="cast") as info:
            ext.cast_ref(s)
        assert not isinstance(info.value, ValueError)
        assert ext.try_ref(s) is False and ext.try_ref(Stream.from_handle(0x3200)) is True
    else:
        with pytest.raises(ValueError, match=r"^handle on a closed custream\.Stream$"):
            ext.cast_ref(s)


def test_optional_takes_none(ext):
    assert ext.maybe_handle(None) is None
    assert ext.maybe_handle(Producer(0x4000)) == 0x4000


def test_the_signature_names_the_types(ext):
    doc = ext.handle_of.__doc__
    assert "custream.Stream | custream.CudaStreamProducer" in doc
    assert "_custream" not in doc  # no private name
    assert "-> custream.Stream" in ext.echo.__doc__


def test_a_returned_stream_is_the_python_object(ext):
    assert_returns_itself(ext.echo, Stream.from_handle(0x5000))
    p = Producer(0x5100)
    wrapped = ext.echo(p)
    assert type(wrapped) is Stream and wrapped.owner is p
    assert ext.empty() is None


def test_a_returned_view_is_a_borrowing_stream(ext):
    back = ext.echo_ref(Producer(0x5200))
    assert type(back) is Stream and back.handle == 0x5200 and back.owner is None and not back.owned


def test_no_reference_is_leaked(ext):
    s, p = Stream.from_handle(0x6000), Producer(0x6100)
    gc.collect()  # what earlier tests left to the collector (an exception's frames) goes first
    before = (sys.getrefcount(s), sys.getrefcount(p), custream.live_stream_count())
    for _ in range(1000):
        ext.handle_of(s)
        ext.handle_of(p)
        ext.handle_of_owned(s)
        ext.handle_of_owned(p)
        ext.echo(p)
    gc.collect()
    assert (sys.getrefcount(s), sys.getrefcount(p), custream.live_stream_count()) == before


def _inside_the_call(f):
    """Call f(producer, callback) with a producer only the call holds (the caller's frame keeps
    the argument alive, nothing else). The callback collects garbage and returns how many more
    custream.Streams are alive than before the call: the Stream a caster made for the producer,
    if it is still held. Returns (that count, f's result), after checking nothing outlives
    the call."""
    refs, seen = [], []

    def make():
        p = Producer(0x7000)
        refs.append(weakref.ref(p))
        return p

    def during():
        gc.collect()
        assert refs[0]() is not None  # the argument itself: Python's to keep, and it does
        seen.append(custream.live_stream_count() - before)

    gc.collect()
    before = custream.live_stream_count()
    result = f(make(), during)
    gc.collect()
    assert refs[0]() is None and custream.live_stream_count() == before  # nothing outlives the call
    return seen[0], result


def test_the_argument_lives_for_the_call(ext):
    """A custream::stream argument from a producer holds the Stream the caster made for it,
    which no one else references: it must stay alive until the call returns, with the
    producer as its owner and its handle readable. A custream::stream_ref needs no Stream: its
    view is the producer's own handle, and the caster's wrapper is gone before the call runs."""
    assert _inside_the_call(ext.call_during_owned) == (1, 0x7000)
    assert _inside_the_call(ext.call_during) == (0, 0x7000)


def test_the_lifetime_check_sees_a_caster_that_keeps_nothing(ext):
    """The check above can fail: in a binding that lets go of the Stream it made (as a caster
    that borrowed instead of owning would), the call sees none alive, where the test above
    requires one."""
    assert _inside_the_call(ext.call_during_dropped) == (0, 0)


def test_custream_errors_arrive_as_they_are(ext):
    s = Stream.from_handle(0x8000)
    s.close()
    with pytest.raises(ValueError, match="synchronize\\(\\) on a closed custream.Stream"):
        ext.synchronize(s)
    with pytest.raises(ValueError, match="device -2 is not an ordinal"):
        ext.wrap(0x8000, -2)
    assert ext.wrap(0x8000, 1).device == 1


def test_ownership_handed_over_once(ext):
    s = ext.give(0x9000, 0, 1)
    assert s.handle == 0x9000 and ext.record(1) == (0, 0)
    s.close()
    del s
    assert ext.record(1) == (1, 1)
    with pytest.raises(ValueError, match="device -2"):
        ext.give(0x9000, -2, 2)
    assert ext.record(2) == (0, 1)  # destroyed, never called


def test_shared_ownership(ext):
    s = ext.share(0x9100, 0, 3)
    ext.cpp_drop(3)
    assert ext.record(3)[1] == 0
    del s
    assert ext.record(3)[1] == 1


def test_views_convert_to_cuda_stream_ref(ext):
    assert ext.takes_cccl(Stream.from_handle(0x9200)) == 0x9200
    assert ext.takes_cccl(Producer(0x9300)) == 0x9300


def test_a_cuda_stream_moved_to_python(ext):
    check_cuda_stream_made(ext.make_cccl)
