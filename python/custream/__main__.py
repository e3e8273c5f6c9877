"""``python -m custream``: what custream sees on this machine.

Prints the CUDA driver and devices, then a live CUDA Stream Protocol round trip: on a
machine with a GPU, with every peer library that is installed (custream -> peer and
peer -> custream on a real stream); without one, with a wrapped handle, which needs no
driver. Exit status 0 when every check passed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import platform
import sys
import weakref

import custream


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _check(label: str, ok: bool, detail: str = "") -> bool:
    mark = "ok  " if ok else "FAIL"
    print(f"  [{mark}] {label}{': ' + detail if detail else ''}")
    return ok


def report_driver() -> bool:
    print("CUDA driver")
    try:
        version = custream.driver_version()
    except custream.CudaUnavailableError:
        names = custream.driver_library_candidates()
        print("  none: no CUDA driver library on this machine")
        print(f"  looked for: {', '.join(names)}")
        print("  custream still imports, wraps handles and speaks the protocol; creating,")
        print("  synchronizing or querying streams needs an NVIDIA driver and a GPU.")
        return False
    print(f"  driver version {version // 1000}.{version % 1000 // 10} ({version})")
    try:
        count = custream.device_count()
    except custream.CudaUnavailableError as e:  # a driver older than custream supports
        print(f"  not usable: {e}")
        print("  custream still imports, wraps handles and speaks the protocol.")
        return False
    except custream.CudaError as e:
        print(f"  the driver loads but cannot be initialized: {e}")
        return False
    print(f"  {count} device{'s' if count != 1 else ''}")
    for i in range(count):
        name, memory, (major, minor) = custream.device_info(i)
        print(f"    {i}: {name}, {memory / 2**30:.0f} GiB, compute capability {major}.{minor}")
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


def _peers(ours: custream.Stream):
    """(library, distribution, function doing peer->custream and custream->peer)."""

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

    return [
        ("cuda.core", "cuda-core", "cuda.core", cuda_core),
        ("CuPy", "cupy-cuda13x", "cupy", cupy),
        ("PyTorch", "torch", "torch", torch),
        ("numba-cuda", "numba-cuda", "numba.cuda", numba),
        ("rmm", "rmm-cu13", "rmm", rmm),
    ]


def round_trip_with_gpu() -> bool:
    print("Protocol round trip with the peer libraries (a live stream each way)")
    ours = custream.Stream()
    ok = _check("custream.Stream()", True, repr(ours))
    ours.synchronize()
    for label, dist, module, trip in _peers(ours):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            print(f"  [ -- ] {label}: not installed")
            continue
        version = _version(dist) or "?"
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


def main() -> int:
    print(f"custream {custream.__version__} (C ABI {custream.ABI_VERSION}) at {custream.get_include()}")
    print(f"Python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print()
    has_gpu = report_driver()
    print()
    ok = round_trip_with_gpu() if has_gpu else round_trip_without_gpu()
    print()
    print("All checks passed." if ok else "Some checks FAILED (see above).")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
