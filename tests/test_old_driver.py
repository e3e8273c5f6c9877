"""A CUDA driver older than custream needs (12.0: cuCtxGetId) is refused by name.

No such driver exists on the machines this project runs on, so a stand-in libcuda.so.1 that
reports CUDA 11.8 and exports only the entry points custream calls before its version check
is built here with the C compiler. It tests the refusal only; nothing here pretends to run
GPU work. Without the check, cudarc would panic on the first missing symbol, which custream
turns into an "internal error" instead of a message naming the driver.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from standin import compile_library

OLD_LIBCUDA = r"""
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 11080; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "unknown"; return 0; }
"""

CHECKS = textwrap.dedent(
    """
    import custream
    assert custream.driver_version() == 11080
    assert custream.is_available() is False
    for call in (custream.Stream, custream.Event, custream.device_count,
                 lambda: custream.Stream.from_handle(0x1000).synchronize(),
                 lambda: custream.GreenContext(16), lambda: custream.Stream.from_handle(0x1000).sm_count):
        try:
            call()
        except custream.CudaUnavailableError as e:
            assert "too old: it supports CUDA 11.8, custream needs 12.0 or newer" in str(e), e
        else:
            raise AssertionError("no error")
    s = custream.as_stream(custream.Stream.from_handle(0x1000))
    assert s.__cuda_stream__() == (0, 0x1000)
    print("refused")
    """
)


@pytest.fixture(scope="module")
def old_driver_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("old-libcuda")
    lib = compile_library(OLD_LIBCUDA, d / "libcuda.so.1")
    # Both names custream looks for (libcuda.so.1, then libcuda.so) find this one.
    os.symlink(lib, d / "libcuda.so")
    return str(d)


def run_with(driver_dir, code):
    env = dict(os.environ, LD_LIBRARY_PATH=driver_dir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_an_old_driver_is_refused_by_name_and_wrapping_still_works(old_driver_dir):
    out = run_with(old_driver_dir, CHECKS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "refused"
    assert "panicked" not in out.stderr


def test_the_report_names_the_old_driver(old_driver_dir):
    out = run_with(old_driver_dir, "import runpy; runpy.run_module('custream', run_name='__main__')")
    assert "11.8" in out.stdout, out.stdout + out.stderr
    assert "too old" in out.stdout, out.stdout + out.stderr
    assert "panicked" not in out.stderr and "Traceback" not in out.stderr, out.stderr
