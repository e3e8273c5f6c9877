"""Bad input, table-driven: every malformed producer result and argument raises a documented
exception whose message names what was wrong. No case here needs the driver to reach its
error: arguments are checked before any driver call, so these pass with or without a GPU.
"""

import gc
import pickle
import warnings

import pytest

import custream
from custream import Event, Stream, as_stream
from producers import AttrProducer, BadRepr, IndexOnly, Mutating, Producer, PropertyRaising, Raising, ReturnsSelf

def gen():
    yield 0
    yield 5


def produce(result):
    return lambda: as_stream(Producer(result))


def closed(device=None):
    s = Stream.from_handle(0x1234, owner=object(), device=device)
    s.close()
    return s


def borrowed():
    return Stream.from_handle(0x1234, owner=object())


PROD = r"(?:producers\.)?Producer\.__cuda_stream__\(\)"
VERSION_TYPE = PROD + r" returned version {} of type {}: the version must be the int 0"
VERSION_VALUE = PROD + r" returned version {}: custream understands protocol version 0 only"
NOT_TUPLE = PROD + r" must return a tuple \(version, handle\), got {}"
LENGTH = PROD + r" must return a 2-tuple \(version, handle\), got a tuple of length {}"
HANDLE_TYPE = r"the handle returned by " + PROD + r" must be an int, got {}"
HANDLE_RANGE = r"the handle returned by " + PROD + r" {} is out of range: a stream handle is in \[0, 2\*\*64\)"
AS_STREAM = r"as_stream\(\) expected a custream\.Stream or an object with a __cuda_stream__\(\) method, got {}"
FH_DEVICE_TYPE = r"from_handle\(\) device must be an int device ordinal or None, got {}"
FH_DEVICE_VALUE = r"from_handle\(\) device must be a non-negative device ordinal below 2\*\*31, got {}"
HUGE = 10**5000  # beyond CPython's int-to-decimal limit: messages must still say what it is

CASES = [
    # protocol version
    ("version 1", produce((1, 5)), ValueError, VERSION_VALUE.format("1")),
    ("version -1", produce((-1, 5)), ValueError, VERSION_VALUE.format("-1")),
    ("version 2**100", produce((2**100, 5)), ValueError, VERSION_VALUE.format(str(2**100))),
    ("version huge", produce((HUGE, 5)), ValueError, VERSION_VALUE.format("an int of 16610 bits")),
    ("version True", produce((True, 5)), TypeError, VERSION_TYPE.format("True", "bool")),
    ("version False", produce((False, 5)), TypeError, VERSION_TYPE.format("False", "bool")),
    ("version 0.0", produce((0.0, 5)), TypeError, VERSION_TYPE.format(r"0\.0", "float")),
    ("version '0'", produce(("0", 5)), TypeError, VERSION_TYPE.format("'0'", "str")),
    ("version None", produce((None, 5)), TypeError, VERSION_TYPE.format("None", "NoneType")),
    # the message must not fail while naming the version: found by fuzz/fuzz_protocol.py
    ("version (huge,)", produce(((HUGE,), 5)), TypeError, VERSION_TYPE.format("a tuple object", "tuple")),
    ("version with failing repr", produce((BadRepr(), 5)), TypeError, VERSION_TYPE.format("a BadRepr object", ".*BadRepr")),
    ("version long list", produce((list(range(100)), 5)), TypeError, VERSION_TYPE.format(r"\[0, 1, 2, .*\.\.\.", "list")),
    # not a tuple
    ("list", produce([0, 5]), TypeError, NOT_TUPLE.format("list")),
    ("dict", produce({0: 5}), TypeError, NOT_TUPLE.format("dict")),
    ("str", produce("(0, 5)"), TypeError, NOT_TUPLE.format("str")),
    ("bytes", produce(b"\x00\x05"), TypeError, NOT_TUPLE.format("bytes")),
    ("int", produce(5), TypeError, NOT_TUPLE.format("int")),
    ("None", produce(None), TypeError, NOT_TUPLE.format("NoneType")),
    ("generator", lambda: as_stream(Producer(gen())), TypeError, NOT_TUPLE.format("generator")),
    ("returns self", lambda: as_stream(ReturnsSelf()), TypeError,
     r"ReturnsSelf\.__cuda_stream__\(\) must return a tuple \(version, handle\), got .*ReturnsSelf"),
    ("returns a Stream", produce(Stream.from_handle(5)), TypeError, NOT_TUPLE.format(r"custream\.Stream")),
    # wrong length
    ("0-tuple", produce(()), ValueError, LENGTH.format(0)),
    ("1-tuple", produce((0,)), ValueError, LENGTH.format(1)),
    ("3-tuple", produce((0, 5, 6)), ValueError, LENGTH.format(3)),
    # handle value
    ("handle -1", produce((0, -1)), ValueError, HANDLE_RANGE.format("-1")),
    ("handle 2**64", produce((0, 2**64)), ValueError, HANDLE_RANGE.format(str(2**64))),
    ("handle -2**64", produce((0, -(2**64))), ValueError, HANDLE_RANGE.format(str(-(2**64)))),
    ("handle huge", produce((0, HUGE)), ValueError, HANDLE_RANGE.format("an int of 16610 bits")),
    ("handle -huge", produce((0, -HUGE)), ValueError, HANDLE_RANGE.format("a negative int of 16610 bits")),
    # handle type
    ("handle float", produce((0, 5.0)), TypeError, HANDLE_TYPE.format("float")),
    ("handle str", produce((0, "5")), TypeError, HANDLE_TYPE.format("str")),
    ("handle bool", produce((0, True)), TypeError, HANDLE_TYPE.format("bool")),
    ("handle None", produce((0, None)), TypeError, HANDLE_TYPE.format("NoneType")),
    ("handle __index__", produce((0, IndexOnly())), TypeError, HANDLE_TYPE.format(".*IndexOnly")),
    ("handle tuple", produce((0, (5,))), TypeError, HANDLE_TYPE.format("tuple")),
    # not a producer
    ("as_stream int", lambda: as_stream(5), TypeError,
     AS_STREAM.format("int") + r"; to wrap a raw handle use custream\.Stream\.from_handle"),
    ("as_stream None", lambda: as_stream(None), TypeError, AS_STREAM.format("NoneType")),
    ("as_stream object", lambda: as_stream(object()), TypeError, AS_STREAM.format("object")),
    ("as_stream tuple", lambda: as_stream((0, 5)), TypeError, AS_STREAM.format("tuple")),
    # A class's __cuda_stream__ is an unbound function: calling it fails like any Python call.
    ("as_stream class", lambda: as_stream(Producer), TypeError, PROD + r" missing 1 required positional argument: 'self'"),
    ("as_stream type", lambda: as_stream(int), TypeError, AS_STREAM.format("type")),
    ("as_stream no args", lambda: as_stream(), TypeError, r"as_stream\(\) takes exactly one argument \(0 given\)"),
    ("property raising AttributeError", lambda: as_stream(PropertyRaising(AttributeError("not today"))), TypeError,
     AS_STREAM.format(".*PropertyRaising")),
    # from_handle arguments
    ("from_handle no args", lambda: Stream.from_handle(), TypeError,
     r"from_handle\(\) missing required argument 'handle'"),
    ("from_handle 2 positional", lambda: Stream.from_handle(5, object()), TypeError,
     r"from_handle\(\) takes 1 positional argument but 2 were given"),
    ("from_handle unknown kw", lambda: Stream.from_handle(5, stream=1), TypeError,
     r"from_handle\(\) got an unexpected keyword argument 'stream'"),
    ("from_handle handle twice", lambda: Stream.from_handle(5, handle=6), TypeError,
     r"from_handle\(\) got multiple values for argument 'handle'"),
    ("from_handle handle -1", lambda: Stream.from_handle(-1), ValueError,
     r"from_handle\(\) handle -1 is out of range: a stream handle is in \[0, 2\*\*64\)"),
    ("from_handle handle 2**64", lambda: Stream.from_handle(2**64), ValueError,
     r"from_handle\(\) handle 18446744073709551616 is out of range"),
    ("from_handle handle float", lambda: Stream.from_handle(5.0), TypeError, r"from_handle\(\) handle must be an int, got float"),
    ("from_handle handle str", lambda: Stream.from_handle("0x5"), TypeError, r"from_handle\(\) handle must be an int, got str"),
    ("from_handle handle bool", lambda: Stream.from_handle(True), TypeError, r"from_handle\(\) handle must be an int, got bool"),
    ("from_handle handle None", lambda: Stream.from_handle(None), TypeError, r"from_handle\(\) handle must be an int, got NoneType"),
    ("from_handle handle __index__", lambda: Stream.from_handle(IndexOnly()), TypeError,
     r"from_handle\(\) handle must be an int, got .*IndexOnly"),
    ("from_handle handle Stream", lambda: Stream.from_handle(Stream.from_handle(5)), TypeError,
     r"from_handle\(\) handle must be an int, got custream\.Stream"),
    ("from_handle device -1", lambda: Stream.from_handle(5, device=-1), ValueError, FH_DEVICE_VALUE.format("-1")),
    ("from_handle device 2**40", lambda: Stream.from_handle(5, device=2**40), ValueError, FH_DEVICE_VALUE.format(str(2**40))),
    ("from_handle device huge", lambda: Stream.from_handle(5, device=HUGE), ValueError, FH_DEVICE_VALUE.format("an int of 16610 bits")),
    ("from_handle device True", lambda: Stream.from_handle(5, device=True), TypeError, FH_DEVICE_TYPE.format("bool")),
    ("from_handle device 'x'", lambda: Stream.from_handle(5, device="x"), TypeError, FH_DEVICE_TYPE.format("str")),
    ("from_handle device 0.0", lambda: Stream.from_handle(5, device=0.0), TypeError, FH_DEVICE_TYPE.format("float")),
    ("from_handle device on token", lambda: Stream.from_handle(1, device=0), ValueError,
     r"from_handle\(\) device cannot be given for the default-stream token 0x1"),
    # Stream() arguments: checked before the driver is touched
    ("Stream positional", lambda: Stream(0), TypeError, r"Stream\(\) takes no positional arguments but 1 was given"),
    ("Stream 2 positional", lambda: Stream(0, True), TypeError, r"Stream\(\) takes no positional arguments but 2 were given"),
    ("Stream unknown kw", lambda: Stream(flags=1), TypeError, r"Stream\(\) got an unexpected keyword argument 'flags'"),
    ("Stream device -1", lambda: Stream(device=-1), ValueError,
     r"Stream\(\) device must be a non-negative device ordinal below 2\*\*31, got -1"),
    ("Stream device 2**40", lambda: Stream(device=2**40), ValueError,
     r"Stream\(\) device must be a non-negative device ordinal below 2\*\*31, got 1099511627776"),
    ("Stream device '0'", lambda: Stream(device="0"), TypeError, r"Stream\(\) device must be an int device ordinal or None, got str"),
    ("Stream device True", lambda: Stream(device=True), TypeError, r"Stream\(\) device must be an int device ordinal or None, got bool"),
    ("Stream non_blocking 'yes'", lambda: Stream(non_blocking="yes"), TypeError, r"Stream\(\) non_blocking must be True or False, got str"),
    ("Stream non_blocking 1", lambda: Stream(non_blocking=1), TypeError, r"Stream\(\) non_blocking must be True or False, got int"),
    ("Stream non_blocking None", lambda: Stream(non_blocking=None), TypeError,
     r"Stream\(\) non_blocking must be True or False, got NoneType"),
    ("Stream priority 'x'", lambda: Stream(priority="x"), TypeError, r"Stream\(\) priority must be an int, got str"),
    ("Stream priority 1.0", lambda: Stream(priority=1.0), TypeError, r"Stream\(\) priority must be an int, got float"),
    ("Stream priority True", lambda: Stream(priority=True), TypeError, r"Stream\(\) priority must be an int, got bool"),
    ("Stream priority 2**40", lambda: Stream(priority=2**40), ValueError,
     r"Stream\(\) priority 1099511627776 is out of range: it must fit a 32-bit signed int"),
    ("Stream priority -2**31-1", lambda: Stream(priority=-(2**31) - 1), ValueError, r"Stream\(\) priority -2147483649 is out of range"),
    ("Stream priority huge", lambda: Stream(priority=HUGE), ValueError, r"Stream\(\) priority an int of 16610 bits is out of range"),
    ("Stream bad priority, good device", lambda: Stream(device=0, priority="high"), TypeError, r"Stream\(\) priority must be an int"),
    # Event() arguments
    ("Event positional", lambda: Event(0), TypeError, r"takes 0 positional arguments but 1 was given"),
    ("Event unknown kw", lambda: Event(blocking=True), TypeError, r"unexpected keyword argument 'blocking'"),
    ("Event device -1", lambda: Event(device=-1), ValueError, r"Event\(\) device must be a non-negative device ordinal below 2\*\*31, got -1"),
    ("Event device 2**40", lambda: Event(device=2**40), ValueError, r"Event\(\) device must be a non-negative device ordinal"),
    ("Event device 'x'", lambda: Event(device="x"), TypeError, r"Event\(\) device must be an int device ordinal or None, got str"),
    ("Event device True", lambda: Event(device=True), TypeError, r"Event\(\) device must be an int device ordinal or None, got bool"),
    ("Event timing 'yes'", lambda: Event(timing="yes"), TypeError, r"Event\(\) timing must be True or False, got str"),
    ("Event timing 1", lambda: Event(timing=1), TypeError, r"Event\(\) timing must be True or False, got int"),
    # methods with bad arguments on an open stream
    ("wait(int)", lambda: borrowed().wait(5), TypeError,
     r"wait\(\) expected a custream\.Event, a custream\.Stream or an object with __cuda_stream__\(\), got int"),
    ("wait(None)", lambda: borrowed().wait(None), TypeError, r"wait\(\) expected .*, got NoneType"),
    ("wait(bad producer)", lambda: borrowed().wait(Producer((1, 5))), ValueError, VERSION_VALUE.format("1")),
    ("wait(closed stream)", lambda: borrowed().wait(closed()), ValueError, r"wait\(\) was given a closed custream\.Stream"),
    ("wait() no args", lambda: borrowed().wait(), TypeError, r"wait\(\) takes exactly one argument"),
    ("record(int)", lambda: borrowed().record(5), TypeError, r"record\(\) event must be a custream\.Event or None, got int"),
    ("record unknown kw", lambda: borrowed().record(stream=None), TypeError, r"record\(\) got an unexpected keyword argument 'stream'"),
    ("record 2 positional", lambda: borrowed().record(None, None), TypeError,
     r"record\(\) takes 1 positional argument but 2 were given"),
    ("__cuda_stream__ with args", lambda: borrowed().__cuda_stream__(0), TypeError, r"__cuda_stream__\(\) takes no arguments"),
    ("pickle", lambda: pickle.dumps(borrowed()), TypeError, r"cannot pickle custream\.Stream"),
    ("set handle", lambda: setattr(borrowed(), "handle", 5), AttributeError, r"handle"),
    ("subclass", lambda: type("Sub", (Stream,), {}), TypeError, r"custream\.Stream.* is not an acceptable base type"),
    # every accessor and method of a closed stream names the operation
    ("closed handle", lambda: closed().handle, ValueError, r"^handle on a closed custream\.Stream$"),
    ("closed __cuda_stream__", lambda: closed().__cuda_stream__(), ValueError, r"^__cuda_stream__\(\) on a closed custream\.Stream$"),
    ("closed synchronize", lambda: closed().synchronize(), ValueError, r"^synchronize\(\) on a closed custream\.Stream$"),
    ("closed query", lambda: closed().query(), ValueError, r"^query\(\) on a closed custream\.Stream$"),
    ("closed wait(stream)", lambda: closed().wait(borrowed()), ValueError, r"^wait\(\) on a closed custream\.Stream$"),
    ("closed wait(itself)", lambda: (lambda s: s.wait(s))(closed()), ValueError, r"^wait\(\) on a closed custream\.Stream$"),
    ("closed record()", lambda: closed().record(), ValueError, r"^record\(\) on a closed custream\.Stream$"),
    ("closed record(None)", lambda: closed().record(None), ValueError, r"^record\(\) on a closed custream\.Stream$"),
    ("closed device", lambda: closed().device, ValueError, r"^device on a closed custream\.Stream$"),
    ("closed non_blocking", lambda: closed().non_blocking, ValueError, r"^non_blocking on a closed custream\.Stream$"),
    ("closed priority", lambda: closed().priority, ValueError, r"^priority on a closed custream\.Stream$"),
    ("closed __enter__", lambda: closed().__enter__(), ValueError, r"^__enter__\(\) on a closed custream\.Stream$"),
    ("closed default token handle", lambda: (lambda s: (s.close(), s.handle))(Stream.from_handle(0)), ValueError,
     r"^handle on a closed custream\.Stream$"),
    ("as_stream(closed).handle", lambda: as_stream(closed()).handle, ValueError, r"^handle on a closed custream\.Stream$"),
]


def test_case_count():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES), "case ids are unique"


@pytest.mark.parametrize("call, exc, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(call, exc, match):
    before = custream.live_stream_count()
    with pytest.raises(exc, match=match) as info:
        call()
    assert type(info.value) is exc, f"{type(info.value).__name__} is not exactly {exc.__name__}"
    del info
    gc.collect()
    assert custream.live_stream_count() == before, "a failed call left a Stream alive"


def test_closed_stream_still_answers_what_needs_no_handle():
    s = closed(device=3)
    assert s.closed and not s.owned and s.owner is None and not s.is_default
    assert s.device == 3, "a device given at wrap time is a plain field, readable after close"
    assert "closed" in repr(s)
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="not the innermost one open"):
        s.__exit__(None, None, None)  # leaving a block never entered
    assert s == s and hash(s) == hash(Stream.from_handle(0x1234))


def test_with_block_on_a_closed_stream_raises_on_entry():
    s = closed()
    with pytest.raises(ValueError, match=r"^__enter__\(\) on a closed custream\.Stream$"):
        with s:
            pass


def test_no_driver_error_comes_only_after_valid_arguments():
    if custream.is_available():
        pytest.skip("a driver is present: Stream() succeeds")
    with pytest.raises(custream.CudaUnavailableError, match="no CUDA driver"):
        Stream(device=0, non_blocking=False, priority=0)
    with pytest.raises(custream.CudaUnavailableError, match="no CUDA driver"):
        Event(device=0, timing=True)


@pytest.mark.parametrize("exc", [KeyError("boom"), RuntimeError("x"), SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_producer_exception_propagates_unchanged(exc):
    with pytest.raises(BaseException) as info:
        as_stream(Raising(exc))
    assert info.value is exc


def test_property_exception_propagates_unchanged():
    err = LookupError("from a property")
    with pytest.raises(LookupError) as info:
        as_stream(PropertyRaising(err))
    assert info.value is err


def test_producer_that_mutates_between_calls_is_judged_per_call():
    p = Mutating((0, 5), (0, -1), "x", (1, 5))
    s = as_stream(p)
    assert s.handle == 5 and s.owner is p
    with pytest.raises(ValueError, match=r"Mutating\.__cuda_stream__\(\) -1 is out of range"):
        as_stream(p)
    with pytest.raises(TypeError, match=r"Mutating\.__cuda_stream__\(\) must return a tuple"):
        as_stream(p)
    with pytest.raises(ValueError, match=r"Mutating\.__cuda_stream__\(\) returned version 1"):
        as_stream(p)
    assert s.handle == 5, "a stream keeps the handle it was made with"


def test_producer_that_replaces_its_own_method():
    class Fickle:
        def __cuda_stream__(self):
            self.__cuda_stream__ = "gone"
            return (0, 9)

    f = Fickle()
    assert as_stream(f).handle == 9
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match=r"Fickle\.__cuda_stream__\(\) must return a tuple"):
        as_stream(f)


def test_non_callable_attribute_warns_and_still_works_if_valid():
    class Attr:
        __cuda_stream__ = (0, 0x77)

    a = Attr()
    with pytest.warns(DeprecationWarning, match=r"Attr\.__cuda_stream__ is an attribute; the CUDA Stream Protocol makes it a method"):
        s = as_stream(a)
    assert s.handle == 0x77 and s.owner is a


def test_non_callable_attribute_with_a_bad_value_warns_then_raises():
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match=r"AttrProducer\.__cuda_stream__\(\) must return a tuple .* got list"):
        as_stream(AttrProducer([0, 5]))


def test_non_callable_attribute_under_warnings_as_errors_raises_the_warning():
    class Attr:
        __cuda_stream__ = (0, 5)

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning, match="is an attribute"):
            as_stream(Attr())


@pytest.mark.parametrize("owner", [None, 5, "owner", object(), [1], Producer((0, 1))], ids=repr)
def test_any_object_is_an_acceptable_owner(owner):
    s = Stream.from_handle(0x99, owner=owner)
    assert s.owner is owner and s.handle == 0x99


def test_stream_is_an_acceptable_owner_of_another_stream():
    inner = Stream.from_handle(0x98)
    outer = Stream.from_handle(0x98, owner=inner)
    assert outer.owner is inner
    outer.close()
    assert outer.owner is None and not inner.closed


# In a pytest process of its own (tests/conftest.py), so that a stack overflow would fail
# this test, not end the run.
@pytest.mark.isolated
def test_recursive_producer_raises_recursion_error_without_crashing():
    class Recursive:
        def __cuda_stream__(self):
            return as_stream(self).__cuda_stream__()

    class Recursive2:
        def __cuda_stream__(self):
            return as_stream(self)

    for cls in (Recursive, Recursive2):
        with pytest.raises(RecursionError):
            as_stream(cls())
    assert as_stream(type("Ok", (), {"__cuda_stream__": lambda self: (0, 3)})()).handle == 3
