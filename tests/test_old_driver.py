"""A CUDA driver older than custream needs (12.0: cuCtxGetId) is refused by name.

No such driver exists on the machines this project runs on, so a stand-in libcuda.so.1 that
reports CUDA 11.8 and exports only the entry points custream calls before its version check
is built here with the C compiler. It tests the refusal only; nothing here pretends to run
GPU work. Without the check, cudarc would panic on the first missing symbol, which custream
turns into an "internal error" instead of a message naming the driver (a panic in the test's
process fails it: tests/conftest.py).
"""

import runpy
import sys

import pytest

import custream

OLD_LIBCUDA = r"""
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 11080; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "unknown"; return 0; }
"""

# Each test runs in a pytest process of its own whose custream opens this library
# (CUSTREAM_LIBCUDA, tests/conftest.py's ``standin`` marker with ``source``).
OLD = pytest.mark.standin(source=OLD_LIBCUDA)


@OLD
def test_an_old_driver_is_refused_by_name_and_wrapping_still_works():
    assert custream.driver_version() == 11080
    assert custream.is_available() is False
    for call in (custream.Stream, custream.Event, custream.device_count,
                 lambda: custream.Stream.from_handle(0x1000).synchronize(),
                 lambda: custream.GreenContext(16), lambda: custream.Stream.from_handle(0x1000).sm_count):
        with pytest.raises(custream.CudaUnavailableError) as e:
            call()
        assert "too old: it supports CUDA 11.8, custream needs 12.0 or newer" in str(e.value), e.value
    s = custream.as_stream(custream.Stream.from_handle(0x1000))
    assert s.__cuda_stream__() == (0, 0x1000)


@OLD
def test_the_report_names_the_old_driver(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["python -m custream"])
    with pytest.raises(SystemExit):  # python -m custream: the report, then its exit status
        runpy.run_module("custream", run_name="__main__")
    out = capsys.readouterr().out
    assert "11.8" in out, out
    assert "too old" in out, out
