"""device_count() against stand-in drivers that are present but find no device, or fail to
initialize: the first answers 0 (as CUDA_VISIBLE_DEVICES="" makes a real driver answer, and
as PyTorch and JAX report it), the second raises the driver's error. Without any driver
library it is 0 too (tests/test_no_driver.py); a driver too old for custream raises
(tests/test_old_driver.py).

Each stand-in exports only what custream calls before cuInit fails: cuInit answers the
status in STANDIN_INIT_STATUS. custream opens the driver at import: each test runs in a pytest
process of its own with this one as its driver (the standin marker's ``source``).
"""

import pytest

import custream

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


def failing_init(status):
    """In a pytest process of its own (tests/conftest.py) against FAILING_INIT, whose cuInit
    answers `status`."""
    return pytest.mark.standin(source=FAILING_INIT, env={"STANDIN_INIT_STATUS": str(status)})


@failing_init(100)
def test_a_driver_that_finds_no_device_counts_zero():
    assert custream.driver_version() == 13000  # the driver is there
    assert custream.device_count() == 0
    assert custream.is_available() is False
    with pytest.raises(custream.CudaError) as e:
        custream.Stream()
    assert e.value.name == "CUDA_ERROR_NO_DEVICE" and e.value.code == 100, e.value


# CUDA_ERROR_UNKNOWN, CUDA_ERROR_NOT_INITIALIZED
@pytest.mark.parametrize("status", [pytest.param(s, marks=failing_init(s)) for s in (999, 3)])
def test_a_driver_that_fails_to_initialize_still_raises(status):
    with pytest.raises(custream.CudaError) as e:
        custream.device_count()  # not hidden as 0
    assert e.value.code == status and e.value.name == "CUDA_ERROR_UNKNOWN", e.value
    assert custream.is_available() is False
