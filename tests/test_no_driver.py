"""Without a CUDA driver: import works, wrapping works, device_count() is 0 and
is_available() False, and what needs the driver raises CudaUnavailableError.

These run on machines without libcuda (this project's CI); where a driver exists they skip.
"""

import subprocess
import sys

import pytest

import custream

pytestmark = pytest.mark.skipif(custream.driver_library_candidates() and custream.is_available(), reason="a CUDA driver is present")

no_library = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True).returncode == 0,
    reason="libcuda is present on this machine",
)


@no_library
@pytest.mark.parametrize(
    "call",
    [
        lambda: custream.Stream(),
        lambda: custream.Stream(device=0, non_blocking=False, priority=0),
        lambda: custream.Event(),
        lambda: custream.driver_version(),
        lambda: custream.device_info(0),
        lambda: custream.Stream.from_handle(0x1000).synchronize(),
        lambda: custream.Stream.from_handle(0x1000).query(),
        lambda: custream.Stream.from_handle(0x1000).device,
        lambda: custream.Stream.from_handle(0x1000).non_blocking,
        lambda: custream.Stream.from_handle(0x1000).priority,
        lambda: custream.Stream.from_handle(0x1000).record(),
        lambda: custream.Stream.from_handle(0x1000).wait(custream.Stream.from_handle(0x2000)),
        lambda: custream.Stream.from_handle(1).synchronize(),
    ],
)
def test_driver_needs_raise_cuda_unavailable_naming_the_library(call):
    with pytest.raises(custream.CudaUnavailableError, match=r"no CUDA driver: could not load libcuda \(looked for libcuda.so.1, libcuda.so\)"):
        call()


@no_library
def test_is_available_is_false_and_never_raises():
    assert custream.is_available() is False


@no_library
def test_device_count_is_zero_without_a_driver():
    """As torch.cuda.device_count() and jax answer: a probe for GPUs gets 0, not an error
    (tests/test_device_count.py has the drivers that are present but find none, or fail)."""
    assert custream.device_count() == 0
    assert custream.device_count() == 0  # and again: nothing was cached as an error
    with pytest.raises(custream.CudaUnavailableError):
        custream.device_info(0)  # a device's own questions still need the driver


def test_unavailable_error_is_a_runtime_error_distinct_from_cuda_error():
    assert issubclass(custream.CudaUnavailableError, RuntimeError)
    assert not issubclass(custream.CudaUnavailableError, custream.CudaError)
    assert issubclass(custream.CudaError, RuntimeError)


# In a pytest process of its own (tests/conftest.py), which has imported custream (this
# module's import) and called nothing.
@pytest.mark.isolated
def test_import_does_not_load_the_driver():
    with open("/proc/self/maps") as f:
        assert "libcuda" not in f.read()


@no_library
def test_wrapping_and_the_protocol_work_without_a_driver():
    class Producer:
        def __cuda_stream__(self):
            return (0, 0xBEEF)

    s = custream.as_stream(Producer())
    assert s.__cuda_stream__() == (0, 0xBEEF)
    assert custream.as_stream(s) is s
    s.close()


@no_library
def test_the_report_says_plainly_there_is_no_gpu():
    out = subprocess.run([sys.executable, "-m", "custream"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "none: no CUDA driver library on this machine" in out.stdout
    assert "[ok  ] as_stream(producer) keeps the handle" in out.stdout
    assert "All checks passed." in out.stdout
    assert out.stderr == ""
