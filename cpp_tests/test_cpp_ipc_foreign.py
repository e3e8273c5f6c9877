"""custream.hpp's event_from_ipc_handle (plain.cpp): another library's IPC event from the
runtime's own handle struct (cudaIpcEventHandle_t) or from a pointer and a size. Bad input gets
the exception and message of every other face, before the driver is asked."""

import pytest

import custream

RAW = bytes(range(64))


def test_a_handle_of_another_size_is_refused_by_name(plain):
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) handle must be the 64 bytes of a CUDA "
                                         r"IPC event handle \(CUipcEventHandle, cudaIpcEventHandle_t\), got 63 bytes$"):
        plain.open_ipc_event(RAW[:63], 0)


def test_a_negative_device_is_refused_by_name(plain):
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal \(0 or "
                                         r"more\), got -1$"):
        plain.open_ipc_event(RAW, -1)


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_the_handle_struct_reaches_the_driver(plain):
    with pytest.raises(custream.CudaUnavailableError):
        plain.open_ipc_event(RAW, 0)


def test_with_cccls_headers_the_runtimes_handle_struct_goes_in(plain_cccl):
    """plain.cpp built with <cuda/stream>: cudaIpcEventHandle_t itself is the handle."""
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal"):
        plain_cccl.open_ipc_event(RAW, -1)
    with pytest.raises(ValueError, match=r"got 65 bytes$"):
        plain_cccl.open_ipc_event(RAW + b"\0", 0)
    if not custream.is_available():
        with pytest.raises(custream.CudaUnavailableError):
            plain_cccl.open_ipc_event(RAW, 0)
