"""``python -m custream``: what custream sees on this machine.

Prints the CUDA driver and devices, then a live CUDA Stream Protocol round trip: on a
machine with a GPU, with every peer library that is installed (custream -> peer and
peer -> custream on a real stream); without one, with a wrapped handle, which needs no
driver, and which peer libraries are installed. Exit status 0 when every check passed. ``--json`` prints the same as one JSON
object, for bug reports and scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import platform
import sys
import weakref
from typing import Any

import custream

# The peer libraries: (name, distributions that ship it, first one found wins; module).
PEERS: list[tuple[str, tuple[str, ...], str]] = [
    ("cuda.core", ("cuda-core",), "cuda.core"),
    ("CuPy", ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "cupy"),
    ("PyTorch", ("torch",), "torch"),
    ("numba-cuda", ("numba-cuda",), "numba.cuda"),
    ("rmm", ("rmm-cu13", "rmm-cu12", "rmm"), "rmm"),
]

# What the run found, for --json: the report functions fill it as they print.
_REPORT: dict[str, Any] = {"driver": {}, "devices": [], "checks": []}


def _version(dists: tuple[str, ...]) -> tuple[str, str] | None:
    """(distribution, version) of the first of ``dists`` that is installed."""
    for dist in dists:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def _check(label: str, ok: bool, detail: str = "") -> bool:
    _REPORT["checks"].append({"check": label, "ok": bool(ok), "detail": detail})
    mark = "ok  " if ok else "FAIL"
    print(f"  [{mark}] {label}{': ' + detail if detail else ''}")
    return ok


def _fix(e: Exception) -> str:
    """What the exception says to do: the clause after its first "; " (custream's messages
    read "what went wrong (looked for ...); what to do"), else the whole message."""
    text = str(e)
    return text.split("; ", 1)[1] if "; " in text else text


def report_driver() -> bool:
    print("CUDA driver")
    driver = _REPORT["driver"] = {"version": None, "usable": False, "problem": None}
    try:
        version = custream.driver_version()
    except custream.CudaUnavailableError as e:
        names = custream.driver_library_candidates()
        driver.update(problem=str(e), looked_for=names)
        print("  none: no CUDA driver library on this machine")
        print(f"  looked for: {', '.join(names)}")
        print(f"  to fix: {_fix(e)}")
        print("  custream still imports, wraps handles and speaks the protocol; creating,")
        print("  synchronizing or querying streams needs an NVIDIA driver and a GPU.")
        return False
    print(f"  driver version {version // 1000}.{version % 1000 // 10} ({version})")
    driver["version"] = version
    try:
        count = custream.device_count()
    except custream.CudaUnavailableError as e:  # a driver older than custream supports
        print(f"  not usable: {e}")
        print("  custream still imports, wraps handles and speaks the protocol.")
        driver["problem"] = f"not usable: {e}"
        return False
    except custream.CudaError as e:
        print(f"  the driver loads but cannot be initialized: {e}")
        driver["problem"] = f"cannot be initialized: {e}"
        return False
    driver["usable"] = True
    print(f"  {count} device{'s' if count != 1 else ''}")
    for i in range(count):
        name, memory, (major, minor) = custream.device_info(i)
        print(f"    {i}: {name}, {memory / 2**30:.0f} GiB, compute capability {major}.{minor}")
        _REPORT["devices"].append({"index": i, "name": name, "memory_bytes": memory, "compute_capability": [major, minor]})
    return count > 0


class _Producer:
    """A stand-in for any library's stream: speaks only the protocol."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def round_trip_without_gpu() -> bool:
    print("Protocol round trip (no GPU: a wrapped handle, no driver call)")
    producer = _Producer(0x7F00DEADBEEF)
    alive = weakref.ref(producer)
    s = custream.as_stream(producer)
    ok = _check("as_stream(producer) keeps the handle", s.handle == producer.handle, hex(s.handle))
    ok &= _check("__cuda_stream__() gives it back", s.__cuda_stream__() == (0, producer.handle), repr(s.__cuda_stream__()))
    del producer
    ok &= _check("the producer is kept alive as owner", alive() is not None and s.owner is alive())
    s.close()
    ok &= _check("close() lets the owner go", alive() is None)
    try:
        s.synchronize()
    except ValueError as e:
        ok &= _check("a closed stream refuses use", True, str(e))
    else:
        ok &= _check("a closed stream refuses use", False, "synchronize() after close() did not raise")
    legacy = custream.LEGACY_DEFAULT_STREAM
    ok &= _check("default stream object", legacy.is_default and legacy.handle == 1, repr(legacy))
    return ok


def report_peers_without_gpu() -> None:
    """Which peer libraries are installed: the round trip with them needs a live stream."""
    print("Peer libraries (their round trip with custream needs a GPU, so none is tried here)")
    for label, dists, module in PEERS:
        found = _version(dists) if importlib.util.find_spec(module.split(".")[0]) is not None else None
        print(f"  [ -- ] {label}: " + (f"{found[0]} {found[1]} installed" if found else "not installed"))


def _peers(ours: custream.Stream):
    """(library, distributions, module, function doing peer->custream and custream->peer)."""

    def cuda_core():
        from cuda.core import Device

        dev = Device(ours.device)
        dev.set_current()
        theirs = dev.create_stream()
        back = dev.create_stream(ours)
        return theirs, int(back.handle) == ours.handle

    def cupy():
        import cupy

        cupy.cuda.Device(ours.device).use()
        theirs = cupy.cuda.Stream(non_blocking=True)
        if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy 14: the protocol
            back = cupy.cuda.Stream.from_external(ours)
        else:
            back = cupy.cuda.ExternalStream(ours.handle, ours.device)
        return theirs, back.ptr == ours.handle

    def torch():
        import torch

        theirs = torch.cuda.Stream(device=ours.device)
        back = torch.cuda.ExternalStream(ours.handle, device=ours.device)
        return theirs, back.cuda_stream == ours.handle

    def numba():
        from numba import cuda

        cuda.select_device(ours.device)
        theirs = cuda.stream()
        back = cuda.external_stream(ours.handle)
        handle = back.handle  # a ctypes pointer, or a cuda.bindings CUstream
        return theirs, (handle.value if hasattr(handle, "value") else int(handle)) == ours.handle

    def rmm():
        from rmm.pylibrmm.stream import Stream

        theirs = Stream()
        back = Stream(ours)
        return theirs, back.__cuda_stream__()[1] == ours.handle

    trips = {"cuda.core": cuda_core, "CuPy": cupy, "PyTorch": torch, "numba-cuda": numba, "rmm": rmm}
    return [(label, dists, module, trips[label]) for label, dists, module in PEERS]


def round_trip_with_gpu() -> bool:
    print("Protocol round trip with the peer libraries (a live stream each way)")
    ours = custream.Stream()
    ok = _check("custream.Stream()", True, repr(ours))
    ours.synchronize()
    try:
        with custream.GreenContext(8) as gc, contextlib.closing(gc.create_stream()) as green:
            green.synchronize()
            ok &= _check("a stream in a green context", green.green_context is gc and green.sm_count == gc.sm_count,
                         f"{green.sm_count} of the device's {ours.sm_count} SMs")
    except custream.CudaError as e:  # a driver before 12.4: everything else works
        print(f"  [ -- ] green contexts: {e}")
    for label, dists, module, trip in _peers(ours):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            print(f"  [ -- ] {label}: not installed")
            continue
        found = _version(dists)
        version = found[1] if found else "?"
        try:
            theirs, back_ok = trip()
            wrapped = custream.as_stream(theirs)
            wrapped.synchronize()
            peer_ok = wrapped.handle == theirs.__cuda_stream__()[1] and wrapped.owner is theirs
            ok &= _check(f"{label} {version}", peer_ok and back_ok,
                         f"{label}->custream {'ok' if peer_ok else 'WRONG'}, custream->{label} {'ok' if back_ok else 'WRONG'}")
        except Exception as e:  # reported, and the run goes on with the next peer
            ok &= _check(f"{label} {version}", False, f"{type(e).__name__}: {e}")
    ours.close()
    return ok


def report() -> bool:
    """The human report, on stdout; True when every check passed."""
    print(f"custream {custream.__version__} (C ABI {custream.ABI_VERSION}) at {custream.get_include()}")
    print(f"Python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print()
    has_gpu = report_driver()
    print()
    _REPORT["round_trip"] = "live streams with the peers" if has_gpu else "a wrapped handle, no driver call"
    ok = round_trip_with_gpu() if has_gpu else round_trip_without_gpu()
    if not has_gpu:
        print()
        report_peers_without_gpu()
    print()
    print("All checks passed." if ok else "Some checks FAILED (see above).")
    return ok


def json_report() -> tuple[dict[str, Any], bool]:
    """What ``report()`` finds, as one JSON-ready dict (its printing is discarded)."""
    error = None
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            ok = report()
        except Exception as e:  # the report still comes out, saying where it stopped
            ok, error = False, f"{type(e).__name__}: {e}"
    peers = []
    for label, dists, module in PEERS:
        found = _version(dists)
        peers.append({"name": label, "module": module, "distribution": found[0] if found else None,
                      "version": found[1] if found else None})
    libc, libc_version = platform.libc_ver()
    data = {
        "custream": {"version": custream.__version__, "abi_version": custream.ABI_VERSION,
                     "include_dir": custream.get_include()},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                     "libc": f"{libc} {libc_version}".strip() or None},
        "driver": _REPORT["driver"],
        "devices": _REPORT["devices"],
        "peers": peers,
        "round_trip": _REPORT.get("round_trip"),
        "checks": _REPORT["checks"],
        "error": error,
        "ok": ok,
    }
    return data, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m custream",
        description="Report what custream sees on this machine: custream and Python, the CUDA driver "
        "and devices, the peer libraries installed, and a CUDA Stream Protocol round trip (with "
        "every installed peer on a GPU; on a wrapped handle without one).",
        epilog="Exit status: 0 when every check passed, 1 when one failed. Paste the --json "
        "output into bug reports.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    parser.add_argument("--version", action="version", version=f"custream {custream.__version__}")
    args = parser.parse_args(argv)
    if args.json:
        data, ok = json_report()
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        ok = report()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
