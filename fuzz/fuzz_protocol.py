"""atheris fuzz target over custream's protocol consumer and from_handle() arguments.

Each input is decoded into a producer result (nested tuples, lists, dicts, ints of any size,
floats, strings, bools, None, __index__-only objects, int and tuple subclasses) or into
from_handle() arguments (including wrong names and counts). custream must then either
return a Stream whose handle is exactly the one an independent oracle predicts, or raise
exactly the exception type the oracle predicts. Anything else (another exception, a wrong
result, a refcount or live-count drift, a crash) stops the fuzzer with the input saved.

Run through fuzz/run.sh; not part of the test suite or CI.
"""

import os
import sys
import warnings

import atheris  # noqa: E402

import custream  # noqa: E402
from custream import Stream, as_stream  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from producers import (AttrProducer, IndexOnly, IntSub, Producer, Raising, TupleSub,  # noqa: E402
                       from_handle_oracle, is_int, protocol_oracle)

warnings.simplefilter("ignore", DeprecationWarning)
MAX_DEPTH = 4


class Boom(Exception):
    pass


def any_int(fdp):
    kind = fdp.ConsumeIntInRange(0, 5)
    if kind == 0:
        return fdp.ConsumeIntInRange(0, 3)
    if kind == 1:
        return fdp.ConsumeInt(8)
    if kind == 2:
        return fdp.ConsumeUInt(8)
    if kind == 3:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(9, 40))
    if kind == 4:
        bits = fdp.ConsumeIntInRange(0, 20000)  # past CPython's int-to-str digit limit
        return (1 << bits) - fdp.ConsumeIntInRange(0, 2)
    return -fdp.ConsumeUInt(9)


def value(fdp, depth=0):
    kind = fdp.ConsumeIntInRange(0, 15 if depth < MAX_DEPTH else 9)
    if kind <= 2:
        return any_int(fdp)
    if kind == 3:
        return fdp.ConsumeBool()
    if kind == 4:
        return None
    if kind == 5:
        return fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else fdp.ConsumeFloat()
    if kind == 6:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 4))
    if kind == 7:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4))
    if kind == 8:
        return IndexOnly(any_int(fdp))
    if kind == 9:
        return IntSub(any_int(fdp))
    n = fdp.ConsumeIntInRange(0, 4)
    items = [value(fdp, depth + 1) for _ in range(n)]
    if kind <= 11:
        return tuple(items)
    if kind == 12:
        return TupleSub(items)
    if kind == 13:
        return items
    if kind == 14:
        return (0, any_int(fdp))  # the valid shape, often
    return {i: v for i, v in enumerate(items)}


def show(v):
    """repr for messages, safe for ints past CPython's int-to-str limit."""
    sys.set_int_max_str_digits(0)
    return repr(v)[:300]


def check_protocol(fdp):
    result = value(fdp)
    make = fdp.ConsumeIntInRange(0, 2)
    producer = Producer(result) if make == 0 else AttrProducer(result) if make == 1 else Raising(Boom())
    expected = protocol_oracle(result) if make < 2 else Boom
    try:
        s = as_stream(producer)
    except (TypeError, ValueError, Boom) as e:
        if type(e) is not expected:
            raise AssertionError(f"as_stream over {show(result)}: {type(e).__name__}: {e}; expected {expected}")
        return
    if not (is_int(expected) and s.handle == expected and s.owner is producer and s.__cuda_stream__() == (0, expected)):
        raise AssertionError(f"as_stream over {show(result)} gave {s!r}; expected {expected}")
    if fdp.ConsumeBool():
        s.close()


def check_from_handle(fdp):
    handle = value(fdp, MAX_DEPTH) if fdp.ConsumeBool() else any_int(fdp)
    kwargs = {}
    if fdp.ConsumeBool():
        kwargs["device"] = any_int(fdp) if fdp.ConsumeBool() else value(fdp, MAX_DEPTH)
    if fdp.ConsumeBool():
        kwargs["owner"] = value(fdp, MAX_DEPTH)
    extra = fdp.ConsumeIntInRange(0, 7)
    args = (handle,)
    expected_sig = None
    if extra == 1:
        args = ()
        expected_sig = TypeError
    elif extra == 2:
        args = (handle, None)
        expected_sig = TypeError
    elif extra == 3:
        kwargs["handle"] = handle
        expected_sig = TypeError
    elif extra == 4:
        kwargs["x_" + fdp.ConsumeUnicodeNoSurrogates(3)] = 1  # no such parameter
        expected_sig = TypeError
    expected = expected_sig or from_handle_oracle(handle, kwargs.get("device"))
    try:
        s = Stream.from_handle(*args, **kwargs)
    except (TypeError, ValueError) as e:
        if expected is None or type(e) is not expected:
            raise AssertionError(f"from_handle(*{show(args)}, **{show(kwargs)}): {type(e).__name__}: {e}; expected {expected}")
        return
    if expected is not None or s.handle != handle:
        raise AssertionError(f"from_handle(*{show(args)}, **{show(kwargs)}) gave {s!r}; expected {expected}")


def TestOneInput(data):
    fdp = atheris.FuzzedDataProvider(data)
    live = custream.live_stream_count()
    if fdp.ConsumeBool():
        check_protocol(fdp)
    else:
        check_from_handle(fdp)
    if custream.live_stream_count() != live:
        raise AssertionError("a Stream outlived its input")


for f in (value, any_int, protocol_oracle, from_handle_oracle, check_protocol, check_from_handle):
    globals()[f.__name__] = atheris.instrument_func(f)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
