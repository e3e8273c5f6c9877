"""Shared pieces of the gpu tests: guarded peer imports, the spin kernel, and "work"
objects that launch it through one peer library onto any stream; the sleep kernel (a kernel
of a known duration, launched with CuPy on any stream).

Ordering is always proven the same way: ``spin_then_mark`` runs a kernel that spins for
about 100 ms on one stream and then writes 1 to ``out[0]``; ``copy_mark`` copies
``out[0]`` into ``out[1]`` on a stream. Seeing ``out[1] == 1`` after the copy means the
copy really waited for the spin (the streams here are non-blocking, so nothing else orders
them), and ``query()`` being False right after the launch means the handle really is the
stream the kernel went to.

The module name is unique on purpose: tests/ has no __init__.py, so pytest imports test
folders by basename and a second ``helpers.py`` elsewhere would collide.
"""

import atexit
import ctypes
import functools
import gc
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref

import pytest

import custream

# About 100 ms at the H200's ~2 GHz: long enough that query() right after the launch sees
# the kernel running, short enough that the whole suite stays fast.
SPIN_CYCLES = 200_000_000

KERNELS = r"""
extern "C" __global__ void spin_then_mark(long long *out, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    ((volatile long long *)out)[0] = 1;
    __threadfence_system();
}

extern "C" __global__ void copy_mark(long long *out) {
    volatile long long *o = out;
    o[1] = o[0];
    __threadfence_system();
}
"""


def _numpy_shims():
    """numba-cuda 0.30.4 compiles kernels through numpy.row_stack, which NumPy 2.4 removed;
    give it the alias it expects so the peer can launch kernels. Test-side only: custream
    does not use NumPy."""
    np = try_import("numpy")
    if np is not None and not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def _not_installed(name, e):
    """Whether ``e`` says that ``name`` itself (or a package above it) is not installed, as
    opposed to an installed ``name`` failing to import, or missing one of its dependencies."""
    return e.name is not None and (name == e.name or name.startswith(e.name + "."))


def peer(name):
    """Import a peer library, or skip the calling module when it is not installed.

    An installed peer that fails to import (a CUDA version mismatch, a missing shared library
    or dependency) is an error, not a skip: the run would otherwise pass without testing it.
    """
    if name.startswith("numba"):
        _numpy_shims()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if not _not_installed(name, e):
            raise
        pytest.skip(f"{name} is not installed", allow_module_level=True)


def try_import(name):
    """The module, or None when it is not installed; an installed one that fails to import
    raises, as in ``peer``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if not _not_installed(name, e):
            raise
        return None


def handle_of(obj):
    """A peer stream's raw handle as an int, through the protocol when it has it."""
    if hasattr(obj, "__cuda_stream__"):
        return obj.__cuda_stream__()[1]
    for attr in ("ptr", "cuda_stream", "handle"):
        if hasattr(obj, attr):
            return int(getattr(obj, attr))
    return int(obj)


def run_in_thread(fn, *args):
    """Run ``fn`` in a fresh thread (which starts with no current CUDA context) and
    return its result, re-raising its exception here."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def check_owner_lifetime(make_owner, wrap):
    """Make a peer stream with ``make_owner()``, wrap it with ``wrap(owner)`` (returning a
    custream.Stream), drop every reference but the wrapper's, and check:

    - the owner is still alive and the wrapper's handle still works (``query()``);
    - ``close()`` lets the owner go.

    A weak reference proves it where the owner type supports one; otherwise the reference
    count held by the wrapper is compared before and after close.
    """
    owner = make_owner()
    handle = handle_of(owner)
    ours = wrap(owner)
    assert ours.handle == handle
    assert ours.owner is owner
    try:
        ref = weakref.ref(owner)
    except TypeError:
        ref = None
    if ref is None:
        before = sys.getrefcount(owner)
        ours.query()
        ours.close()
        assert sys.getrefcount(owner) == before - 1, "close() did not release the owner"
        return
    del owner
    gc.collect()
    assert ref() is not None, "the owner died while custream still wraps its stream"
    assert ours.query() in (True, False)  # the handle is still a live stream
    ours.close()
    gc.collect()
    assert ref() is None, "close() did not release the owner"


# ---- work: one kernel launched through one peer onto any stream --------------------------


def cupy_stream(stream):
    """``stream`` (a custream.Stream or any protocol object) as a CuPy stream, to launch on
    with ``with``: through the protocol where CuPy takes it (>= 14, keeping the stream alive),
    else CuPy's ExternalStream of its handle."""
    import cupy

    s = custream.as_stream(stream)
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:  # CuPy >= 14: the protocol, keeping s alive
        return from_external(s)
    return cupy.cuda.ExternalStream(s.handle, 0)


class CupyWork:
    """Launches the spin kernel with CuPy (a RawModule) on any protocol stream."""

    name = "cupy"

    def __init__(self):
        import cupy

        self.cp = cupy
        cupy.cuda.Device(0).use()
        self.out = cupy.zeros(3, dtype=cupy.int64)
        module = cupy.RawModule(code=KERNELS)
        self._spin = module.get_function("spin_then_mark")
        self._copy = module.get_function("copy_mark")
        self.mark_ptr = self.out.data.ptr
        cupy.cuda.Device(0).synchronize()

    def _stream(self, stream):
        return cupy_stream(stream)

    def spin_then_mark(self, stream, cycles=SPIN_CYCLES):
        with self._stream(stream):
            self._spin((1,), (1,), (self.out, self.cp.int64(cycles)))

    def copy_mark(self, stream):
        with self._stream(stream):
            self._copy((1,), (1,), (self.out,))

    def result(self):
        """(mark, copy), read after the caller synchronized the streams it used."""
        host = self.out.get()
        return int(host[0]), int(host[1])


class TorchWork:
    """The same with PyTorch: ``torch.cuda._sleep`` spins, tensor ops mark and copy."""

    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        torch.cuda.init()
        self.out = torch.zeros(3, dtype=torch.int64, device="cuda:0")
        self.mark_ptr = self.out.data_ptr()
        torch.cuda.synchronize(0)

    def _stream(self, stream):
        s = custream.as_stream(stream)
        return self.torch.cuda.ExternalStream(s.handle, device=0)

    def spin_then_mark(self, stream, cycles=SPIN_CYCLES):
        with self.torch.cuda.stream(self._stream(stream)):
            self.torch.cuda._sleep(cycles)
            self.out[0].fill_(1)

    def copy_mark(self, stream):
        with self.torch.cuda.stream(self._stream(stream)):
            self.out[1].copy_(self.out[0])

    def result(self):
        host = self.out.cpu().tolist()
        return int(host[0]), int(host[1])


class CudaCoreWork:
    """The same with cuda.core: the kernels compiled by NVRTC (Program), launched with
    ``cuda.core.launch`` straight onto a protocol object, writing to pinned host memory."""

    name = "cuda.core"

    def __init__(self):
        from cuda.core import Device, LaunchConfig, LegacyPinnedMemoryResource, Program, ProgramOptions

        dev = Device(0)
        dev.set_current()
        options = ProgramOptions(arch=f"sm_{dev.arch}")
        try:
            code = Program(KERNELS, code_type="c++", options=options).compile("cubin")
        except Exception as e:  # noqa: BLE001 - no NVRTC is an environment gap, not a bug
            pytest.skip(f"cuda.core cannot compile kernels here (NVRTC): {type(e).__name__}: {e}")
        self._spin = code.get_kernel("spin_then_mark")
        self._copy = code.get_kernel("copy_mark")
        self._config = LaunchConfig(grid=1, block=1)
        self._buffer = LegacyPinnedMemoryResource().allocate(24)
        self.mark_ptr = int(self._buffer.handle)
        ctypes.memset(self.mark_ptr, 0, 24)

    def spin_then_mark(self, stream, cycles=SPIN_CYCLES):
        from cuda.core import launch

        # Whatever stream object comes (a custream.Stream, a cuda.core Stream, any protocol
        # object) goes to launch() as is: cuda.core takes it through the protocol itself.
        launch(stream, self._config, self._spin, self.mark_ptr, ctypes.c_int64(cycles))

    def copy_mark(self, stream):
        from cuda.core import launch

        launch(stream, self._config, self._copy, self.mark_ptr)

    def result(self):
        values = (ctypes.c_int64 * 3).from_address(self.mark_ptr)
        return int(values[0]), int(values[1])


WORKS = {"cupy": CupyWork, "torch": TorchWork, "cuda.core": CudaCoreWork}
PEER_MODULES = {"cupy": "cupy", "torch": "torch", "cuda.core": "cuda.core"}


def make_work(name):
    """A work object for ``name``, or skip with the reason it is unavailable."""
    module = PEER_MODULES[name]
    if try_import(module) is None:
        pytest.skip(f"{module} unavailable")
    try:
        return WORKS[name]()
    except pytest.skip.Exception:
        raise
    except Exception as e:  # noqa: BLE001 - setup failure of a peer: say which
        pytest.fail(f"setting up {name} work failed: {type(e).__name__}: {e}")


def first_work():
    """Work through the first peer that imports (CuPy, then torch, then cuda.core)."""
    reasons = []
    for name in WORKS:
        if try_import(PEER_MODULES[name]) is not None:
            return make_work(name)
        reasons.append(f"{name} unavailable")
    pytest.skip("no peer can launch a kernel: " + ", ".join(reasons))


# ---- the sleep kernel: a kernel of a known duration ---------------------------------------

# Spins on the GPU's nanosecond clock (%globaltimer) until `ns` have passed: the same duration
# whatever the clock rate. The one definition, for every test here.
SLEEP_KERNEL = r"""
extern "C" __global__ void sleep_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


@functools.cache
def sleep_kernel():
    """The sleep kernel as a CuPy RawKernel, made once per process (CuPy compiles and loads it
    at its first launch): ``sleep_kernel()((1,), (1,), (cupy.uint64(ns),))`` inside a stream's
    ``with``."""
    import cupy

    return cupy.RawKernel(SLEEP_KERNEL, "sleep_ns")


def sleep_on(stream, seconds):
    """Launch, with CuPy, a kernel that runs ``seconds`` on the GPU on ``stream`` (a
    custream.Stream or any protocol object); the first launch compiles it."""
    import cupy

    with cupy_stream(stream):
        sleep_kernel()((1,), (1,), (cupy.uint64(int(seconds * 1e9)),))


# ---- the watchdog's native stacks ---------------------------------------------------------


@functools.cache
def native_stacks():
    """tests/gpu/native_stacks.c built as a shared library, or None without a C compiler."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    folder = tempfile.mkdtemp(prefix="custream-stacks-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    lib = os.path.join(folder, "native_stacks.so")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_stacks.c")
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", lib, src, "-lpthread"], check=True)
    return lib
