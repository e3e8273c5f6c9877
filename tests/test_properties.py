"""Property tests: whatever a producer returns, as_stream() either returns a Stream over
exactly that handle or raises the one documented exception an independent oracle predicts;
likewise from_handle() over arbitrary ints. Never a crash, never another exception.
"""

import sys
import warnings

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import custream  # noqa: E402
from custream import Stream, as_stream  # noqa: E402
from producers import AttrProducer, IndexOnly, IntSub, Pair, Producer, TupleSub, from_handle_oracle, protocol_oracle  # noqa: E402

SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Ints of every size: near the edges of the handle range, and far beyond CPython's
# int-to-decimal limit.
edges = st.sampled_from([0, 1, 2, 3, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**64)])
ints = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=2**64 - 1),
    edges,
    st.builds(lambda k, neg: -(1 << k) if neg else 1 << k, st.integers(0, 20000), st.booleans()),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.builds(IndexOnly, ints),
    st.builds(IntSub, ints),
    st.builds(complex, st.floats(allow_nan=False), st.floats(allow_nan=False)),
)
nested = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=4).map(tuple),
        st.lists(children, max_size=3).map(TupleSub),
        st.dictionaries(st.text(max_size=2), children, max_size=2),
        st.frozensets(st.integers(), max_size=2),
    ),
    max_leaves=8,
)
# Results shaped like the protocol's, so the accepting path is taken often.
pairs = st.one_of(
    st.tuples(st.one_of(st.just(0), scalars), st.one_of(ints, scalars)),
    st.builds(Pair, st.one_of(st.just(0), ints), ints),
    st.builds(lambda v, h: TupleSub((v, h)), st.one_of(st.just(0), ints), ints),
    st.tuples(st.just(0), st.builds(IntSub, st.integers(0, 2**64 - 1))),
)
results = st.one_of(nested, pairs)


def check(producer, value):
    expected = protocol_oracle(value)
    refs = sys.getrefcount(producer)
    live = custream.live_stream_count()
    try:
        s = as_stream(producer)
    except (TypeError, ValueError) as e:
        hypothesis.event(type(e).__name__)
        assert type(e) is expected, f"{value!r}: raised {type(e).__name__}: {e}; expected {expected}"
        assert type(producer).__name__ in str(e), f"message does not name the producer's type: {e}"
    else:
        hypothesis.event("accepted")
        assert isinstance(expected, int), f"{value!r} was accepted; expected {expected.__name__}"
        assert type(s) is Stream
        assert s.handle == expected and type(s.handle) is int
        assert s.__cuda_stream__() == (0, expected)
        assert s.owner is producer and not s.owned
        assert s.is_default == (expected <= 2)
        del s
    assert sys.getrefcount(producer) == refs, "the producer's reference count was not restored"
    assert custream.live_stream_count() == live


@SETTINGS
@given(results)
def test_as_stream_over_any_producer_result(value):
    check(Producer(value), value)


@settings(max_examples=300, deadline=None)
@given(results)
def test_as_stream_over_any_attribute_value(value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check(AttrProducer(value), value)


@SETTINGS
@given(st.one_of(ints, scalars), st.one_of(st.none(), ints, scalars))
def test_from_handle_over_arbitrary_arguments(handle, device):
    expected = from_handle_oracle(handle, device)
    owner = object()
    refs = sys.getrefcount(owner)
    try:
        s = Stream.from_handle(handle, owner=owner, device=device)
    except (TypeError, ValueError) as e:
        assert type(e) is expected, f"from_handle({handle!r}, device={device!r}): {type(e).__name__}: {e}"
        assert "from_handle()" in str(e)
    else:
        assert expected is None, f"from_handle({handle!r}, device={device!r}) was accepted"
        assert s.handle == handle and s.owner is owner
        if device is not None:
            assert s.device == device
        s.close()
        assert s.owner is None and sys.getrefcount(owner) == refs
        del s
    assert sys.getrefcount(owner) == refs


@SETTINGS
@given(ints)
def test_from_handle_round_trips_through_the_protocol(handle):
    if not 0 <= handle < 2**64:
        with pytest.raises(ValueError, match=r"is out of range: a stream handle is in \[0, 2\*\*64\)"):
            Stream.from_handle(handle)
        return
    s = Stream.from_handle(handle)
    again = as_stream(Producer(s.__cuda_stream__()))
    assert again == s and hash(again) == hash(s) and again.handle == handle
    assert as_stream(s) is s


# Every handle from_handle accepts, with the values next to each multiple of CPython's hash
# modulus (sys.hash_info.modulus, 2**61 - 1 on 64-bit), where a hash wraps around.
MODULUS = sys.hash_info.modulus
handles = st.one_of(
    st.integers(min_value=0, max_value=2**64 - 1),
    st.builds(lambda k, d: min(max(k * MODULUS + d, 0), 2**64 - 1), st.integers(0, (2**64 - 1) // MODULUS + 1),
              st.integers(-2, 2)),
    st.sampled_from([0, 1, 2, 2**61 - 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]),
)


@SETTINGS
@given(handles)
def test_a_stream_hashes_as_its_handle(handle):
    s = Stream.from_handle(handle)
    assert hash(s) == hash(s.handle) == hash(handle)
    assert hash(Stream.from_handle(handle)) == hash(s)
    s.close()
    assert hash(s) == hash(handle)  # a closed stream still hashes
