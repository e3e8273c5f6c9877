"""The producers the protocol tests hand to custream, good and broken, each defined once, and
the oracle that says what custream must make of each.

Shared by test_protocol.py, test_properties.py, test_bad_input.py, test_testing_kit.py and
fuzz/fuzz_protocol.py (which puts this folder on sys.path). custream's messages name a
producer's type (``Producer.__cuda_stream__() returned version 1``; the handle's messages
with its module, ``producers.Producer``), so these names are part of what the tests match.
"""

import collections


class Producer:
    """``__cuda_stream__()`` returns a fixed result (any object at all), counting its calls."""

    def __init__(self, result):
        self.result = result
        self.calls = 0

    def __cuda_stream__(self):
        self.calls += 1
        return self.result


class AttrProducer:
    """The deprecated form: ``__cuda_stream__`` is an attribute holding the result."""

    def __init__(self, result):
        self.__cuda_stream__ = result


class Raising:
    """``__cuda_stream__()`` raises the exception it was given."""

    def __init__(self, exc):
        self.exc = exc

    def __cuda_stream__(self):
        raise self.exc


class PropertyRaising:
    """Reading ``__cuda_stream__`` (a property) raises the exception it was given."""

    def __init__(self, exc):
        self.exc = exc

    @property
    def __cuda_stream__(self):
        raise self.exc


class Mutating:
    """Returns the next of its results on each call: each as_stream() call judges its own."""

    def __init__(self, *results):
        self.results = list(results)

    def __cuda_stream__(self):
        return self.results.pop(0)


class ReturnsSelf:
    def __cuda_stream__(self):
        return self


class IndexOnly:
    """Converts to an int only through ``__index__``: not an int, so not a handle."""

    def __init__(self, v=5):
        self.v = v

    def __index__(self):
        return self.v


class IntSub(int):
    pass


class TupleSub(tuple):
    pass


class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


Pair = collections.namedtuple("Pair", "version handle")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def protocol_oracle(result):
    """The handle as_stream() must give for a producer returning `result`, or the exception."""
    if not isinstance(result, tuple):
        return TypeError
    if len(result) != 2:
        return ValueError
    version, handle = result
    if type(version) is not int:
        return TypeError
    if version != 0:
        return ValueError
    if not is_int(handle):
        return TypeError
    if not 0 <= handle < 2**64:
        return ValueError
    return int(handle)


def from_handle_oracle(handle, device):
    """None where from_handle(handle, device=device) must succeed, else the exception; it
    checks the handle, then the device, then their combination."""
    if not is_int(handle):
        return TypeError
    if not 0 <= handle < 2**64:
        return ValueError
    if device is None:
        return None
    if not is_int(device):
        return TypeError
    if not 0 <= device < 2**31 or handle <= 2:
        return ValueError
    return None
