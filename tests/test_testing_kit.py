"""custream.testing, the protocol conformance kit, against deliberately broken producers
and good ones. CPU only: every fake handle is checked with live=False, so the kit never
hands a made-up value to a driver (tests/gpu/ checks real streams, live).
"""

import itertools

import pytest

import custream
from custream.testing import CheckResult, ProtocolReport, assert_stream_protocol, check_stream_protocol
from producers import AttrProducer, Producer, PropertyRaising, Raising

H = 0x7F00DEAD0000


class Good:
    def __cuda_stream__(self):
        return (0, H)


class GoodWithDevice(Good):
    device_id = 0


class NoAttribute:
    pass


def returning(version, handle):
    class Producer:
        def __cuda_stream__(self):
            return (version, handle)

    Producer.__name__ = Producer.__qualname__ = f"Returns_{version!r}_{handle!r}"
    return Producer()


class NotRepeatable:
    def __init__(self):
        self.counter = itertools.count(1)

    def __cuda_stream__(self):
        return (0, next(self.counter))


class SecondCallRaises:
    def __init__(self):
        self.calls = 0

    def __cuda_stream__(self):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("stream was released after the first call")
        return (0, H)


BROKEN = {
    "no attribute": (NoAttribute(), "has __cuda_stream__"),
    "attribute, not a method": (AttrProducer((0, H)), "is a method"),
    "raises": (Raising(RuntimeError("producer is broken")), "call succeeds"),
    "reading the attribute raises": (PropertyRaising(KeyError("no stream yet")), "has __cuda_stream__"),
    "returns a list": (Producer([0, H]), "returns a tuple"),
    "returns None": (Producer(None), "returns a tuple"),
    "returns a 3-tuple": (Producer((0, H, 0)), "tuple of length 2"),
    "version False": (returning(False, H), "version is the int 0"),
    "version 0.0": (returning(0.0, H), "version is the int 0"),
    "version 1": (returning(1, H), "version is the int 0"),
    "handle a str": (returning(0, hex(H)), "handle is an int"),
    "handle a float": (returning(0, float(H)), "handle is an int"),
    "handle a bool": (returning(0, True), "handle is an int"),
    "handle negative": (returning(0, -1), "handle in [0, 2**64)"),
    "handle 2**64": (returning(0, 2**64), "handle in [0, 2**64)"),
    "not repeatable": (NotRepeatable(), "repeatable"),
    "second call raises": (SecondCallRaises(), "repeatable"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_producer_fails_the_named_check(case):
    obj, failing = BROKEN[case]
    report = check_stream_protocol(obj, live=False)
    assert isinstance(report, ProtocolReport)
    assert report.ok is False
    assert failing in [e.name for e in report.failures], str(report)
    text = str(report)
    assert "FAILED" in text and f"FAIL  {failing}" in text
    with pytest.raises(AssertionError) as info:
        assert_stream_protocol(obj, live=False)
    assert failing in str(info.value)


# The consumer accepts an attribute (with a DeprecationWarning) and cannot see a producer
# misbehave on a later call; every other broken producer it rejects.
REJECTED = [case for case, (_, failing) in BROKEN.items() if failing not in ("is a method", "repeatable")]


@pytest.mark.parametrize("case", REJECTED)
def test_custream_rejects_what_the_kit_fails(case):
    """The kit is exactly as strict as custream's own consumer on a single call."""
    obj, failing = BROKEN[case]
    with pytest.raises((TypeError, ValueError, RuntimeError, KeyError)):
        custream.as_stream(obj)


def test_good_producer_passes_every_check_it_can_make():
    report = assert_stream_protocol(Good(), live=False)
    assert report.ok is True and report.failures == []
    names = [e.name for e in report.entries]
    assert names == [
        "has __cuda_stream__",
        "is a method",
        "call succeeds",
        "returns a tuple",
        "tuple of length 2",
        "version is the int 0",
        "handle is an int",
        "handle in [0, 2**64)",
        "repeatable",
        "accepted by custream.as_stream",
        "live stream",
        "device agrees",
    ]
    passed = {e.name: e.passed for e in report.entries}
    assert all(passed[n] is True for n in names[:10])
    assert passed["live stream"] is None and passed["device agrees"] is None
    assert "OK (10 passed, 2 not checked)" in str(report)
    assert hex(H) in str(report)


def test_entries_are_name_passed_detail_triples():
    for entry in check_stream_protocol(Good(), live=False).entries:
        assert isinstance(entry, CheckResult)
        name, passed, detail = entry
        assert isinstance(name, str) and passed in (True, False, None) and isinstance(detail, str)


def test_the_kit_releases_its_wrapper_of_the_producer():
    import sys

    obj = Good()
    before = sys.getrefcount(obj)
    check_stream_protocol(obj, live=False)
    assert sys.getrefcount(obj) == before


def test_a_custream_stream_passes_and_is_left_open():
    s = custream.Stream.from_handle(H, owner=Good())
    assert_stream_protocol(s, live=False)
    assert not s.closed and s.owner is not None


def test_default_stream_tokens_pass():
    for token in (0, 1, 2):
        assert_stream_protocol(returning(0, token), live=False)


def test_an_int_subclass_handle_passes_like_the_consumer_accepts_it():
    class Handle(int):
        pass

    assert check_stream_protocol(returning(0, Handle(H)), live=False).ok


def test_a_tuple_in_an_attribute_is_reported_but_its_value_still_checked():
    report = check_stream_protocol(AttrProducer((0, H)), live=False)
    by_name = {e.name: e for e in report.entries}
    assert by_name["is a method"].passed is False
    assert "DeprecationWarning" in by_name["is a method"].detail
    assert by_name["version is the int 0"].passed is True
    assert by_name["accepted by custream.as_stream"].passed is True


def test_checks_after_a_failure_are_not_checked_rather_than_failed():
    report = check_stream_protocol(NoAttribute(), live=False)
    assert [e.passed for e in report.entries][0] is False
    assert all(e.passed is None for e in report.entries[1:])
    assert len(report.failures) == 1


def test_live_checks_need_a_driver():
    if custream.is_available():
        pytest.skip("a driver is present: tests/gpu/ covers the live checks")
    report = check_stream_protocol(Good())
    live = {e.name: e for e in report.entries}["live stream"]
    assert live.passed is None and "no CUDA driver" in live.detail
    assert report.ok
    insisted = check_stream_protocol(Good(), live=True)
    assert not insisted.ok
    assert "live=True" in insisted.failures[0].detail


def test_report_repr_and_summary():
    report = check_stream_protocol(returning(1, H), live=False)
    assert "ok=False" in repr(report)
    first = str(report).splitlines()[0]
    assert first.startswith("CUDA Stream Protocol check of ") and "Returns_1_" in first and "FAILED" in first
