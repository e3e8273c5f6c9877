"""device_count() against stand-in drivers that are present but find no device, or fail to
initialize: the first answers 0 (as CUDA_VISIBLE_DEVICES="" makes a real driver answer, and
as PyTorch and JAX report it), the second raises the driver's error. Without any driver
library it is 0 too (tests/test_no_driver.py); a driver too old for custream raises
(tests/test_old_driver.py).

Each stand-in exports only what custream calls before cuInit fails: cuInit answers the
status in STANDIN_INIT_STATUS.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from standin import compile_library

FAILING_INIT = r"""
#include <stdlib.h>
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return atoi(getenv("STANDIN_INIT_STATUS")); }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return compile_library(FAILING_INIT, tmp_path_factory.mktemp("init-fails") / "libcuda.so.1")


def run_with(driver, status, code):
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(driver), STANDIN_INIT_STATUS=str(status))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_a_driver_that_finds_no_device_counts_zero(driver):
    out = run_with(driver, 100, """
        import custream
        assert custream.driver_version() == 13000  # the driver is there
        assert custream.device_count() == 0
        assert custream.is_available() is False
        try:
            custream.Stream()
        except custream.CudaError as e:
            assert e.name == "CUDA_ERROR_NO_DEVICE" and e.code == 100, e
        else:
            raise AssertionError("a stream without a device")
        print("zero")
    """)
    assert out.strip() == "zero"


@pytest.mark.parametrize("status", [999, 3])  # CUDA_ERROR_UNKNOWN, CUDA_ERROR_NOT_INITIALIZED
def test_a_driver_that_fails_to_initialize_still_raises(driver, status):
    out = run_with(driver, status, f"""
        import custream
        try:
            custream.device_count()
        except custream.CudaError as e:
            assert e.code == {status}, e
            print("raised", e.name)
        else:
            raise AssertionError("device_count() hid the driver's error")
        assert custream.is_available() is False
    """)
    assert out.strip() == "raised CUDA_ERROR_UNKNOWN"
