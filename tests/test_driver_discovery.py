"""Which libcuda custream opens: the real driver's soname first, a toolkit stub never over a
driver, ``CUSTREAM_LIBCUDA`` to choose one.

Stand-in libraries are built here with the C compiler, each answering cuDriverGetVersion
with its own number, so the version custream reports says which one it opened. A stub
answers CUDA_ERROR_STUB_LIBRARY (34), as the CUDA toolkit's ``stubs/libcuda.so`` does.
These test the choice of library only; nothing here pretends to run GPU work.
"""

import os
import shutil
import subprocess
import sys

import pytest
from standin import compile_library

STUB = r"""
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return 34; }
CUresult cuDriverGetVersion(int *v) { (void)v; return 34; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_STUB_LIBRARY"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stub"; return 0; }
"""

# A driver as far as custream's version check: cuInit succeeds, then the version is too old
# to go further, so no other entry point is needed.
DRIVER = r"""
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = VERSION; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "unknown"; return 0; }
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("libcuda")

    def make(folder, name, source, version=0):
        (root / folder).mkdir(exist_ok=True)
        return compile_library(source, root / folder / name, f"-DVERSION={version}")

    return make

def run(code, path=(), **env):
    full = {k: v for k, v in os.environ.items() if k != "CUSTREAM_LIBCUDA"}
    full.update(LD_LIBRARY_PATH=os.pathsep.join(str(p) for p in path), **env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)
    assert "panicked" not in out.stderr, out.stderr
    return out


VERSION = "import custream; print(custream.driver_version())"
REFUSAL = """
import custream
assert custream.is_available() is False
try:
    custream.driver_version()
except custream.CudaUnavailableError as e:
    print(e)
"""


def test_the_real_soname_is_opened_before_a_stub_named_libcuda_so(build):
    stub = build("stubs", "libcuda.so", STUB)
    real = build("driver", "libcuda.so.1", DRIVER, 11080)
    out = run(VERSION, [stub.parent, real.parent])
    assert out.stdout.strip() == "11080", out.stdout + out.stderr


def test_a_stub_is_passed_over_for_a_driver_found_later(build):
    stub = build("stub-so1", "libcuda.so.1", STUB)
    real = build("driver-so", "libcuda.so", DRIVER, 11090)
    out = run(VERSION, [stub.parent, real.parent])
    assert out.stdout.strip() == "11090", out.stdout + out.stderr


def test_only_a_stub_is_refused_by_name(build):
    stub = build("only-stub", "libcuda.so.1", STUB)
    shutil.copy(stub, stub.parent / "libcuda.so")
    out = run(REFUSAL, [stub.parent])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CUDA toolkit's link stub, not a driver" in out.stdout, out.stdout
    assert "looked for libcuda.so.1, libcuda.so" in out.stdout, out.stdout


def test_custream_libcuda_chooses_the_library(build):
    on_path = build("on-path", "libcuda.so.1", DRIVER, 11080)
    chosen = build("chosen", "libcuda-chosen.so", DRIVER, 11070)
    out = run(VERSION + "; print(custream.driver_library_candidates())", [on_path.parent], CUSTREAM_LIBCUDA=str(chosen))
    assert out.stdout.split("\n")[:2] == ["11070", str([str(chosen)])], out.stdout + out.stderr


def test_custream_libcuda_naming_nothing_loadable_is_refused_with_that_path(tmp_path):
    missing = tmp_path / "no-such-libcuda.so"
    out = run(REFUSAL, CUSTREAM_LIBCUDA=str(missing))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"looked for {missing})" in out.stdout, out.stdout


def test_the_candidates_are_the_platforms_names_real_soname_first():
    out = run("import custream; print(custream.driver_library_candidates())")
    assert out.stdout.strip() == str(["libcuda.so.1", "libcuda.so"]), out.stdout + out.stderr
