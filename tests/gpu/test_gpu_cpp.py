"""The C++ face on a device (issue 17):

- cpp_gpu.cu, a nanobind extension compiled with nvcc, launches real kernels on the
  cuda::stream_ref its custream::stream_ref argument converts to, for a custream, a CuPy and a
  PyTorch stream; a cuda::stream made there is handed to Python, used by CuPy, and destroyed
  exactly once;
- rmm_cpp.pyx, Cython in C++ mode, turns custream's stream_ref into rmm's cuda_stream_view and
  allocates and copies a DeviceBuffer on it.

The toolkit's CCCL (CUDA 13.0) predates cuda::stream: the nvidia-cuda-cccl wheel carried in
.whl/ (scripts/gpu-wheels.sh) goes first on nvcc's include path. rmm comes from the carried
rmm-cu13, librmm-cu13 and rapids-logger wheels.
"""

import gc
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import custream
from custream import Stream
from custream_gpu_helpers import SPIN_CYCLES, CupyWork, first_work, try_import

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "cpp_tests"))
from _cpp_tools import cccl_include, nanobind  # noqa: E402
from _cy_build import Module, build, cuda_toolkit  # noqa: E402


def _toolkit():
    found = cuda_toolkit()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    """cpp_gpu.cu built by nvcc, with the nvidia-cuda-cccl wheel's CCCL first."""
    include, _ = _toolkit()
    nvcc = shutil.which("nvcc") or str(Path(include).parent / "bin" / "nvcc")
    if not os.access(nvcc, os.X_OK):
        pytest.skip(f"no nvcc on PATH nor at {nvcc}")
    cccl, nb = cccl_include(), nanobind()
    for found in (cccl, nb):
        if isinstance(found, str):
            pytest.skip(f"{found}: carry it in .whl/ (scripts/gpu-wheels.sh) or pip install it")
    out = tmp_path_factory.mktemp("cpp_gpu") / ("cpp_gpu" + sysconfig.get_config_var("EXT_SUFFIX"))
    arch = os.environ.get("CUSTREAM_NVCC_ARCH", "native")
    argv = [nvcc, "-std=c++17", "-O2", "-shared", f"-arch={arch}", "-diag-suppress", "186",
            "-Xcompiler", "-fPIC,-fvisibility=hidden,-fno-strict-aliasing",
            f"-I{cccl}", f"-I{sysconfig.get_paths()['include']}", f"-I{custream.get_include()}",
            *(f"-I{d}" for d in nb.include), "-o", str(out), str(HERE / "cpp_gpu.cu"), *nb.sources]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stdout}\n{proc.stderr}"
    sys.path.insert(0, str(out.parent))
    module = importlib.import_module("cpp_gpu")
    module.reset()
    return module


def _peer_stream(name):
    if name == "custream":
        return Stream()
    if name == "cupy":
        cupy = try_import("cupy")
        if cupy is None:
            pytest.skip("cupy unavailable")
        cupy.cuda.Device(0).use()
        return cupy.cuda.Stream(non_blocking=True)
    torch = try_import("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("torch with CUDA unavailable")
    return torch.cuda.Stream(device=0)


@pytest.mark.parametrize("peer", ["custream", "cupy", "torch"])
def test_kernels_run_on_the_cuda_stream_ref_of_a_peer_stream(ext, peer):
    stream = _peer_stream(peer)
    ext.reset()
    ext.spin_then_mark(stream, SPIN_CYCLES)
    assert ext.is_done(stream) is False, "the kernel did not go to this stream"
    ext.copy_mark(stream)  # same stream: ordered after the spin
    ext.sync(stream)
    assert ext.is_done(stream) is True
    assert ext.result() == (1, 1)


def test_a_cuda_stream_made_in_cpp_is_used_by_cupy_and_destroyed_once(ext):
    if try_import("cupy") is None:
        pytest.skip("cupy unavailable")
    work = CupyWork()
    before = ext.destroyed()
    s = ext.make(0)
    assert type(s) is Stream and s.device == 0 and not s.owned and ext.destroyed() == before
    work.spin_then_mark(s)
    assert s.query() is False
    work.copy_mark(s)
    s.synchronize()
    assert work.result() == (1, 1)
    s.close()
    assert ext.destroyed() == before + 1
    s.close()
    del s
    gc.collect()
    assert ext.destroyed() == before + 1
    t = ext.make(0)  # released by deallocation this time
    ext.spin_then_mark(t, 1000)
    t.synchronize()
    del t
    gc.collect()
    assert ext.destroyed() == before + 2
    plain = ext.make_plain(0)
    plain.synchronize()
    plain.close()


# ---- rmm, from Cython in C++ mode -------------------------------------------------------------


@pytest.fixture(scope="module")
def rmm_cpp():
    for name in ("rmm", "librmm", "Cython"):
        if try_import(name) is None:
            pytest.skip(f"{name} unavailable: carry rmm-cu13, librmm-cu13 and rapids-logger in .whl/")
    include, _ = _toolkit()
    root = Path(try_import("librmm").__file__).parent
    libdir = next((d for d in (root / "lib64", root / "lib") if (d / "librmm.so").is_file()), None)
    if libdir is None:
        pytest.skip(f"no librmm.so under {root}")
    # librmm's own CCCL (include/rapids) first: the one rmm was built with.
    dirs = [root / "include", root / "include" / "rapids", Path(include)]
    logger = try_import("rapids_logger")
    if logger is not None:
        dirs.append(Path(logger.__file__).parent / "include")
    module = Module("rmm_cpp", str(HERE / "rmm_cpp.pyx"), include_dirs=tuple(map(str, dirs)), cplus=True,
                    cflags=("-std=c++20", "-Wno-deprecated-declarations"),
                    ldflags=(f"-L{libdir}", "-lrmm", f"-Wl,-rpath,{libdir}"))
    folder = str(build([module]))
    sys.path.insert(0, folder)
    return importlib.import_module("rmm_cpp")


def test_rmm_cuda_stream_view_from_our_stream_ref(rmm_cpp):
    ours = Stream()
    assert rmm_cpp.view_value(ours) == ours.handle
    for token in (0, 1, 2):
        assert rmm_cpp.view_value(Stream.from_handle(token)) == token
    ours.close()


def test_rmm_device_buffer_on_our_stream_ref(rmm_cpp):
    """A kernel spins on our stream and then writes 1; an rmm device_buffer copying that word
    on our stream_ref must see the 1 (our streams are non-blocking: nothing else orders them)."""
    work = first_work()
    ours = Stream()
    work.spin_then_mark(ours)
    copy = rmm_cpp.copy_on(ours, work.mark_ptr, 8)
    ours.synchronize()
    assert int.from_bytes(bytes(copy.copy_to_host()), "little") == 1
    fresh = rmm_cpp.allocate_on(ours, 1 << 20)
    assert fresh.size == 1 << 20
    ours.synchronize()
    del copy, fresh
    gc.collect()
    ours.close()
