"""A conformance kit for the CUDA Stream Protocol, for authors of stream classes.

Put one line in your own test suite::

    from custream.testing import assert_stream_protocol

    def test_my_stream_speaks_the_protocol():
        assert_stream_protocol(mylib.Stream())

``check_stream_protocol(obj)`` returns a :class:`ProtocolReport` instead of raising: each
entry says what was checked, whether it passed and why. The checks follow the protocol as
custream and cuda.core consume it:

- ``obj.__cuda_stream__`` exists and is a method (an attribute holding a tuple is accepted
  by consumers only with a DeprecationWarning);
- calling it returns a tuple of length 2;
- the version is exactly the int ``0`` (not ``False``, not ``0.0``);
- the handle is an int (not a bool) in ``[0, 2**64)``;
- two calls return the same result;
- ``custream.as_stream(obj)`` accepts it and sees the same handle;
- where a CUDA driver is present (``custream.is_available()``): the handle is a live stream
  (``cuStreamQuery`` answers "done" or "not ready", and its context resolves through
  ``cuStreamGetCtx``), and the stream's device agrees with the device the object reports
  about itself (``.device`` as an int, ``.device.device_id`` as in cuda.core,
  ``.device.index`` as in torch, or ``.device_id`` as in CuPy), if it reports one.

The live checks hand the handle to the driver exactly as a consumer would; a value that is
not a stream handle at all can crash the process there, so pass ``live=False`` to check only
the Python side of a producer whose handles are fakes.
"""

from __future__ import annotations

import warnings
from typing import Any, List, NamedTuple, Optional

import custream

__all__ = ["CheckResult", "ProtocolReport", "assert_stream_protocol", "check_stream_protocol"]

_HANDLE_LIMIT = 2**64


class CheckResult(NamedTuple):
    """One check of a report: ``(name, passed, detail)``.

    ``passed`` is True or False, or None when the check could not be made (no driver, an
    earlier check failed, or the object reports no device); ``detail`` says what was seen.
    """

    name: str
    passed: Optional[bool]
    detail: str


class ProtocolReport:
    """What :func:`check_stream_protocol` found about one object.

    ``entries`` is the list of :class:`CheckResult`, in the order checked; ``ok`` is True
    when none failed; ``str(report)`` is a table fit for an assertion message.
    """

    def __init__(self, type_name: str, entries: List[CheckResult]) -> None:
        """``type_name`` names the checked object's type; ``entries`` are its checks."""
        self.type_name = type_name
        self.entries = entries

    @property
    def ok(self) -> bool:
        """True when no check failed (checks that could not be made do not fail)."""
        return all(e.passed is not False for e in self.entries)

    @property
    def failures(self) -> List[CheckResult]:
        """The entries whose check failed."""
        return [e for e in self.entries if e.passed is False]

    def __str__(self) -> str:
        counts = {
            "passed": sum(e.passed is True for e in self.entries),
            "failed": sum(e.passed is False for e in self.entries),
            "not checked": sum(e.passed is None for e in self.entries),
        }
        summary = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        lines = [f"CUDA Stream Protocol check of {self.type_name}: {'OK' if self.ok else 'FAILED'} ({summary})"]
        width = max((len(e.name) for e in self.entries), default=0)
        for e in self.entries:
            mark = {True: "PASS", False: "FAIL", None: "SKIP"}[e.passed]
            lines.append(f"  {mark}  {e.name.ljust(width)}  {e.detail}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<ProtocolReport {self.type_name} ok={self.ok} entries={len(self.entries)}>"


def _type_name(obj: Any) -> str:
    """``module.QualName`` of ``obj``'s type (just the name for builtins)."""
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _describe(value: Any) -> str:
    """A short repr of ``value`` with its type, for a report's detail column."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({_type_name(value)})"


class _Checker:
    """Runs the checks in order, each recorded as one entry; later checks that depend on a
    failed one are recorded as not checked."""

    def __init__(self) -> None:
        """An empty list of entries."""
        self.entries: List[CheckResult] = []

    def add(self, name: str, passed: Optional[bool], detail: str) -> Optional[bool]:
        """Record one check; returns ``passed`` so a caller can branch on it."""
        self.entries.append(CheckResult(name, passed, detail))
        return passed

    def skip_rest(self, names: List[str], why: str) -> None:
        """Record ``names`` as not checked, saying ``why``."""
        for name in names:
            self.add(name, None, f"not checked: {why}")


_STATIC = [
    "returns a tuple",
    "tuple of length 2",
    "version is the int 0",
    "handle is an int",
    "handle in [0, 2**64)",
    "repeatable",
    "accepted by custream.as_stream",
]
_LIVE = ["live stream", "device agrees"]


def _own_device(obj: Any) -> tuple:
    """(device ordinal or None, where it came from) as the object itself reports it."""
    try:
        device = getattr(obj, "device", None)
    except Exception as e:  # noqa: BLE001 - a failing property is "not reported"
        return None, f".device raised {type(e).__name__}: {e}"
    if isinstance(device, int) and not isinstance(device, bool):
        return device, ".device"
    for attr in ("device_id", "index"):  # cuda.core Device, torch.device
        try:
            value = getattr(device, attr, None) if device is not None else None
        except Exception:  # noqa: BLE001
            value = None
        if isinstance(value, int) and not isinstance(value, bool):
            return value, f".device.{attr}"
    try:
        device_id = getattr(obj, "device_id", None)
    except Exception as e:  # noqa: BLE001
        return None, f".device_id raised {type(e).__name__}: {e}"
    if isinstance(device_id, int) and not isinstance(device_id, bool) and device_id >= 0:
        return device_id, ".device_id"
    return None, "the object reports no device (.device, .device.device_id, .device.index, .device_id)"


def check_stream_protocol(obj: Any, *, live: Optional[bool] = None) -> ProtocolReport:
    """Check ``obj`` against the CUDA Stream Protocol and return a :class:`ProtocolReport`.

    ``live``: None (the default) checks the handle with the driver when
    ``custream.is_available()``; True insists on it (a missing driver is a failure); False
    skips the driver checks. Never raises for a bad producer: everything it finds goes in
    the report.
    """
    c = _Checker()
    name = _type_name(obj)

    try:
        attr = getattr(obj, "__cuda_stream__")
    except AttributeError:
        c.add("has __cuda_stream__", False, f"{name} has no __cuda_stream__ attribute")
        c.skip_rest(["is a method", "call succeeds"] + _STATIC + _LIVE, "no __cuda_stream__")
        return ProtocolReport(name, c.entries)
    except Exception as e:  # noqa: BLE001
        c.add("has __cuda_stream__", False, f"reading __cuda_stream__ raised {type(e).__name__}: {e}")
        c.skip_rest(["is a method", "call succeeds"] + _STATIC + _LIVE, "no __cuda_stream__")
        return ProtocolReport(name, c.entries)
    c.add("has __cuda_stream__", True, "present")

    if callable(attr):
        c.add("is a method", True, "callable")
        try:
            result = attr()
        except Exception as e:  # noqa: BLE001
            c.add("call succeeds", False, f"__cuda_stream__() raised {type(e).__name__}: {e}")
            c.skip_rest(_STATIC + _LIVE, "the call failed")
            return ProtocolReport(name, c.entries)
        c.add("call succeeds", True, f"returned {_describe(result)}")
    else:
        c.add("is a method", False, "an attribute, not a method: consumers accept it only with a DeprecationWarning")
        result = attr
        c.add("call succeeds", None, "not checked: not callable; checking the attribute's value")

    is_tuple = isinstance(result, tuple)
    if not c.add("returns a tuple", is_tuple, _type_name(result) if is_tuple else f"got {_describe(result)}"):
        c.skip_rest(_STATIC[1:] + _LIVE, "not a tuple")
        return ProtocolReport(name, c.entries)
    if not c.add("tuple of length 2", len(result) == 2, f"length {len(result)}"):
        c.skip_rest(_STATIC[2:] + _LIVE, "not a 2-tuple")
        return ProtocolReport(name, c.entries)
    version, handle = result

    version_ok = type(version) is int and version == 0
    c.add(
        "version is the int 0",
        version_ok,
        "0" if version_ok else f"got {_describe(version)}: the version must be exactly the int 0",
    )
    is_int = isinstance(handle, int) and not isinstance(handle, bool)
    c.add("handle is an int", is_int, _type_name(handle) if is_int else f"got {_describe(handle)}")
    in_range = is_int and 0 <= handle < _HANDLE_LIMIT
    if is_int:
        c.add("handle in [0, 2**64)", in_range, f"{handle:#x}" if in_range else f"{handle} is out of range")
    else:
        c.add("handle in [0, 2**64)", None, "not checked: not an int")

    if callable(attr):
        try:
            again = attr()
        except Exception as e:  # noqa: BLE001
            c.add("repeatable", False, f"the second call raised {type(e).__name__}: {e}")
        else:
            same = type(again) is type(result) and again == result
            c.add("repeatable", same, "two calls agree" if same else f"first {result!r}, then {again!r}")
    else:
        c.add("repeatable", None, "not checked: not callable")

    wrapped = None
    if version_ok and in_range:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                wrapped = custream.as_stream(obj)
        except Exception as e:  # noqa: BLE001
            c.add("accepted by custream.as_stream", False, f"{type(e).__name__}: {e}")
        else:
            same = wrapped.handle == handle
            c.add("accepted by custream.as_stream", same, "same handle" if same else f"handle {wrapped.handle:#x}")
    else:
        c.add("accepted by custream.as_stream", None, "not checked: the result is not (0, handle)")

    try:
        _check_live(c, obj, handle if wrapped is not None else None, live)
    finally:
        if wrapped is not None and wrapped is not obj:
            wrapped.close()  # a borrowed wrapper: lets the owner go, destroys nothing
    return ProtocolReport(name, c.entries)


def _check_live(c: _Checker, obj: Any, handle: Optional[int], live: Optional[bool]) -> None:
    """The driver checks: the handle is a live stream, and its device is the object's."""
    if live is False:
        c.skip_rest(_LIVE, "live=False")
        return
    if handle is None:
        c.skip_rest(_LIVE, "no valid handle")
        return
    if not custream.is_available():
        if live:
            c.add("live stream", False, "live=True but no CUDA driver or device is available")
            c.skip_rest(_LIVE[1:], "no CUDA driver")
        else:
            c.skip_rest(_LIVE, "no CUDA driver on this machine")
        return

    probe = custream.Stream.from_handle(handle)
    try:
        try:
            done = probe.query()
            device = probe.device
        except custream.CudaError as e:
            default = handle in (0, 1, 2)
            if default and e.name == "CUDA_ERROR_INVALID_CONTEXT":
                c.add("live stream", None, "not checked: a default-stream token, and no context is current")
            else:
                c.add("live stream", False, f"the driver rejects the handle: {e.name}: {e.message}")
            c.skip_rest(_LIVE[1:], "not a live stream")
            return
        state = "idle" if done else "busy"
        c.add("live stream", True, f"cuStreamQuery: {state}; cuStreamGetCtx: device {device}")

        own, source = _own_device(obj)
        if own is None:
            c.add("device agrees", None, f"not checked: {source}")
        else:
            c.add(
                "device agrees",
                own == device,
                f"{source} is {own}, the stream's context is on device {device}",
            )
    finally:
        probe.close()


def assert_stream_protocol(obj: Any, *, live: Optional[bool] = None) -> ProtocolReport:
    """Like :func:`check_stream_protocol`, but raise AssertionError with the report as its
    message when a check fails; return the report otherwise."""
    report = check_stream_protocol(obj, live=live)
    if not report.ok:
        raise AssertionError(str(report))
    return report
