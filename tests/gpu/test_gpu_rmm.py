"""rmm <-> custream on a real device, both directions: ``rmm.pylibrmm.stream.Stream(ours)``,
a ``DeviceBuffer`` copy on our stream ordered after a kernel, ``custream.as_stream`` of an
rmm stream, and a Cython module (rmm_interop.pyx) that cimports both rmm and custream and
passes our handle into rmm's C++ ``cuda_stream_view``.

rmm is not installed on the GPU machine by default: scripts/gpu-check.sh installs the
carried rmm-cu13, librmm-cu13 and rapids-logger wheels from .whl/ (which
scripts/gpu-wheels.sh fills) when they are there.
"""

from contextlib import closing
import gc
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import weakref

import pytest

import custream
from custream import Stream
from custream.testing import assert_stream_protocol
from custream_gpu_helpers import check_owner_lifetime, first_work, peer, try_import

pytestmark = pytest.mark.gpu

rmm = peer("rmm")
rmm_stream = peer("rmm.pylibrmm.stream")
RmmStream = rmm_stream.Stream

HERE = os.path.dirname(os.path.abspath(__file__))


def test_rmm_stream_over_ours_keeps_it_alive():
    ours = Stream()
    ref = weakref.ref(ours)
    rs = RmmStream(ours)
    assert rs.__cuda_stream__() == (0, ours.handle)
    del ours
    gc.collect()
    assert ref() is not None, "rmm dropped the custream.Stream it wraps"
    rs.synchronize()
    del rs
    gc.collect()
    assert ref() is None


def test_device_buffer_copy_on_our_stream_is_ordered_after_a_kernel():
    """A kernel spins on our stream and then writes 1; a DeviceBuffer copying that word on
    the same stream (through rmm's Stream over ours) must see the 1. On any other stream
    (our streams are non-blocking) it would copy the 0 that was there."""
    work = first_work()
    with closing(Stream()) as ours:
        rs = RmmStream(ours)
        work.spin_then_mark(ours)
        copy = rmm.DeviceBuffer(ptr=work.mark_ptr, size=8, stream=rs)
        host = copy.copy_to_host(stream=rs)
        assert int.from_bytes(bytes(host), "little") == 1
        fresh = rmm.DeviceBuffer(size=1 << 20, stream=rs)
        assert fresh.size == 1 << 20
        ours.synchronize()


def test_as_stream_of_an_rmm_stream():
    work = first_work()
    rs = RmmStream()
    ours = custream.as_stream(rs)
    assert ours.handle == rs.__cuda_stream__()[1] and ours.owner is rs and not ours.owned
    assert ours.device == 0
    with closing(Stream()) as other:
        work.spin_then_mark(rs)
        assert ours.query() is False
        other.wait(rs)
        work.copy_mark(other)
        other.synchronize()
        assert work.result() == (1, 1)
    ours.close()


def test_as_stream_keeps_the_rmm_stream_alive_until_close():
    check_owner_lifetime(RmmStream, custream.as_stream)


def test_rmm_streams_pass_the_conformance_kit():
    report = assert_stream_protocol(RmmStream(), live=True)
    assert {e.name: e.passed for e in report.entries}["live stream"] is True
    assert_stream_protocol(rmm_stream.DEFAULT_STREAM, live=True)


# ---- the Cython module -------------------------------------------------------------------


def _first_dir_with(header, candidates):
    for d in candidates:
        if d and os.path.isfile(os.path.join(d, header)):
            return d
    return None


def _cuda_include_candidates():
    out = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            out.append(os.path.join(os.environ[var], "include"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    out += ["/usr/local/cuda/include", "/usr/include"]
    for entry in sys.path:  # the nvidia-cuda-runtime wheel (a dependency of torch and others)
        out += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "include")))
        out += sorted(glob.glob(os.path.join(entry, "nvidia", "cuda_runtime", "include")))
    return out


def _build_config():
    """Include and library folders for rmm_interop.pyx, or pytest.skip naming what is
    missing."""
    librmm = try_import("librmm")
    if librmm is None:
        pytest.skip("the librmm wheel (rmm's C++ headers and librmm.so) is not installed")
    root = os.path.dirname(librmm.__file__)
    rmm_include = os.path.join(root, "include")
    if not os.path.isfile(os.path.join(rmm_include, "rmm", "cuda_stream_view.hpp")):
        pytest.skip(f"librmm has no rmm/cuda_stream_view.hpp under {rmm_include}")
    cccl = _first_dir_with(os.path.join("cuda", "stream"), [os.path.join(rmm_include, "rapids"), rmm_include])
    # cuda_runtime_api.h includes crt/host_defines.h, which CUDA 13's wheels ship apart
    # (nvidia-cuda-runtime and nvidia-cuda-crt); a toolkit has both in one folder.
    candidates = _cuda_include_candidates()
    cuda_include = []
    for header in ("cuda_runtime_api.h", os.path.join("crt", "host_defines.h")):
        found = _first_dir_with(header, candidates)
        if found is None:
            pytest.skip(
                f"no {header} (CUDA runtime headers) in $CUDA_HOME/include, next to nvcc, "
                "/usr/local/cuda/include, /usr/include or an nvidia/*/include wheel folder"
            )
        if found not in cuda_include:
            cuda_include.append(found)
    include = [custream.get_include(), rmm_include, *cuda_include]
    if cccl:
        include.append(cccl)
    logger = try_import("rapids_logger")
    if logger is not None:
        include.append(os.path.join(os.path.dirname(logger.__file__), "include"))
    libdirs = [d for d in (os.path.join(root, "lib64"), os.path.join(root, "lib")) if os.path.isfile(os.path.join(d, "librmm.so"))]
    if not libdirs:
        pytest.skip(f"no librmm.so under {root}/lib64 or {root}/lib")
    return {"include": include, "libdirs": libdirs}


BUILD = r"""
import json, sys
from Cython.Build import cythonize
from setuptools import Extension, setup

src, build, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ext = Extension(
    "rmm_interop", [src], language="c++",
    include_dirs=cfg["include"], library_dirs=cfg["libdirs"], runtime_library_dirs=cfg["libdirs"],
    libraries=["rmm"], extra_compile_args=["-std=c++20", "-Wno-deprecated-declarations"],
)
setup(
    name="rmm_interop",
    ext_modules=cythonize([ext], build_dir=build, quiet=True),
    script_args=["build_ext", "--build-lib", build, "--build-temp", build + "/tmp"],
)
"""


@pytest.fixture(scope="module")
def interop(tmp_path_factory):
    """rmm_interop.pyx compiled against the installed custream, rmm and librmm."""
    for tool in ("Cython", "setuptools"):
        if try_import(tool) is None:
            pytest.skip(f"{tool} is not installed: cannot build the Cython module")
    cfg = _build_config()
    build = tmp_path_factory.mktemp("rmm_interop")
    src = build / "rmm_interop.pyx"
    shutil.copy(os.path.join(HERE, "rmm_interop.pyx"), src)
    result = subprocess.run(
        [sys.executable, "-c", BUILD, str(src), str(build), json.dumps(cfg)],
        capture_output=True, text=True, timeout=300, cwd=build,
    )
    assert result.returncode == 0, f"building rmm_interop.pyx failed:\n{result.stdout}\n{result.stderr}"
    built = glob.glob(str(build / "rmm_interop*.so"))
    assert built, f"no rmm_interop*.so in {build}: {os.listdir(build)}"
    spec = importlib.util.spec_from_file_location("rmm_interop", built[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cython_passes_our_handle_into_rmm_cuda_stream_view(interop):
    with closing(Stream()) as ours:
        assert interop.view_value(ours) == ours.handle
    for token in (0, 1, 2):
        assert interop.view_value(Stream.from_handle(token)) == token


def test_cython_rmm_view_synchronizes_our_stream(interop):
    work = first_work()
    with closing(Stream()) as ours:
        work.spin_then_mark(ours)
        assert ours.query() is False
        interop.view_synchronize(ours)  # rmm's C++ waits on our handle
        assert ours.query() is True
        assert work.result()[0] == 1


def test_cython_builds_an_rmm_stream_that_owns_ours(interop):
    ours = Stream()
    ref = weakref.ref(ours)
    rs = interop.to_rmm_stream(ours)
    assert isinstance(rs, RmmStream) and rs.__cuda_stream__() == (0, ours.handle)
    del ours
    gc.collect()
    assert ref() is not None
    buf = rmm.DeviceBuffer(size=4096, stream=rs)
    rs.synchronize()
    del buf, rs
    gc.collect()
    assert ref() is None


def test_cython_rejects_none_and_foreign_objects(interop):
    with pytest.raises(TypeError):
        interop.view_value(None)
    with pytest.raises(TypeError):
        interop.view_value(RmmStream())
