"""Which libcuda custream opens: the real driver's soname first, a toolkit stub never over a
driver, ``CUSTREAM_LIBCUDA`` to choose one.

Stand-in libraries are built here with the C compiler, each answering cuDriverGetVersion
with its own number, so the version custream reports says which one it opened. A stub
answers CUDA_ERROR_STUB_LIBRARY (34), as the CUDA toolkit's ``stubs/libcuda.so`` does.
These test the choice of library only; nothing here pretends to run GPU work. custream
chooses once, at import: each test runs in a pytest process of its own (``isolated``,
tests/conftest.py) given the library path and ``CUSTREAM_LIBCUDA`` it is about.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from standin import compile_library

import custream

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


_ROOT = []


def _folder(name):
    """A folder of this run's own (in this process: the test's process is given its path)."""
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="custream-libcuda-")))
        atexit.register(shutil.rmtree, _ROOT[0], ignore_errors=True)
    folder = _ROOT[0] / name
    folder.mkdir(exist_ok=True)
    return folder


def lib(folder, name, source, version=0):
    """`source` built as `folder`/`name` (answering cuDriverGetVersion with `version`)."""
    path = _folder(folder) / name
    if not path.exists():
        compile_library(source, path, f"-DVERSION={version}")
    return path


def finds(*libs, **env):
    """The ``isolated`` marker of a test whose process finds `libs` (their folders, in order, on
    the library path) and no ``CUSTREAM_LIBCUDA`` unless `env` gives one; built in this
    process just before that one starts."""
    def environment():
        found = [lib(*spec) for spec in libs]
        return {"CUSTREAM_LIBCUDA": None, **{k: str(v()) if callable(v) else v for k, v in env.items()},
                "LD_LIBRARY_PATH": os.pathsep.join(str(p.parent) for p in found)}
    return pytest.mark.isolated(env=environment)


def refusal():
    """custream opened no driver: what it says."""
    assert custream.is_available() is False
    with pytest.raises(custream.CudaUnavailableError) as e:
        custream.driver_version()
    return str(e.value)


@finds(("stubs", "libcuda.so", STUB), ("driver", "libcuda.so.1", DRIVER, 11080))
def test_the_real_soname_is_opened_before_a_stub_named_libcuda_so():
    assert custream.driver_version() == 11080


@finds(("stub-so1", "libcuda.so.1", STUB), ("driver-so", "libcuda.so", DRIVER, 11090))
def test_a_stub_is_passed_over_for_a_driver_found_later():
    assert custream.driver_version() == 11090


def _only_stub():
    stub = lib("only-stub", "libcuda.so.1", STUB)
    if not (stub.parent / "libcuda.so").exists():
        shutil.copy(stub, stub.parent / "libcuda.so")
    return {"CUSTREAM_LIBCUDA": None, "LD_LIBRARY_PATH": str(stub.parent)}


@pytest.mark.isolated(env=_only_stub)
def test_only_a_stub_is_refused_by_name():
    said = refusal()
    assert "CUDA toolkit's link stub, not a driver" in said, said
    assert "looked for libcuda.so.1, libcuda.so" in said, said


@finds(("on-path", "libcuda.so.1", DRIVER, 11080), CUSTREAM_LIBCUDA=lambda: lib("chosen", "libcuda-chosen.so", DRIVER, 11070))
def test_custream_libcuda_chooses_the_library():
    assert custream.driver_version() == 11070
    assert custream.driver_library_candidates() == [os.environ["CUSTREAM_LIBCUDA"]]


@finds(CUSTREAM_LIBCUDA=lambda: _folder("missing") / "no-such-libcuda.so")
def test_custream_libcuda_naming_nothing_loadable_is_refused_with_that_path():
    said = refusal()
    assert f"looked for {os.environ['CUSTREAM_LIBCUDA']})" in said, said


@finds()
def test_the_candidates_are_the_platforms_names_real_soname_first():
    assert custream.driver_library_candidates() == ["libcuda.so.1", "libcuda.so"]
