"""The C and Cython faces of IPC events from any library, built against the installed wheel:
c_consumer.c calls ``Custream_EventFromIpcHandle`` and consumer.pyx the .pxd's
``event_from_ipc_handle``; bad input gets the exception and message of every other face,
before the driver is asked (tests/test_ipc_foreign.py has the Python face and the stand-in)."""

import pytest

import custream

RAW = bytes(range(64))
HAS_DRIVER = custream.is_available()


def test_the_c_entry_refuses_bad_input_by_name(cext):
    for args, match in [
        ((None, 64, 0), r"^Custream_EventFromIpcHandle\(\) handle must point to the 64 bytes of a CUDA IPC event "
                        r"handle, got NULL$"),
        ((RAW, 63, 0), r"^Custream_EventFromIpcHandle\(\) handle must be the 64 bytes of a CUDA IPC event handle "
                       r"\(CUipcEventHandle, cudaIpcEventHandle_t\), got 63 bytes$"),
        ((RAW + RAW, 128, 0), r"got 128 bytes$"),
        ((RAW, 64, -1), r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal \(0 or more\), got -1$"),
    ]:
        with pytest.raises(ValueError, match=match):
            cext.event_from_ipc_handle(*args)


@pytest.mark.skipif(HAS_DRIVER, reason="checks the no-driver error; this machine has a driver")
def test_the_c_entry_reaches_the_driver_with_good_input(cext):
    with pytest.raises(custream.CudaUnavailableError):
        cext.event_from_ipc_handle(RAW, 64, 0)


def test_the_cython_helper_refuses_bad_input_by_name(cy):
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) handle must be the 64 bytes .* got 65 bytes$"):
        cy.open_ipc_event(RAW + b"\0", 0)
    with pytest.raises(ValueError, match=r"^Custream_EventFromIpcHandle\(\) device must be a device ordinal \(0 or "
                                         r"more\), got -2$"):
        cy.open_ipc_event(RAW, -2)
    with pytest.raises(TypeError, match=r"^event_from_ipc_handle\(\) handle must be bytes, got None$"):
        cy.open_ipc_event(None, 0)
    if not HAS_DRIVER:
        with pytest.raises(custream.CudaUnavailableError):
            cy.open_ipc_event(RAW, 0)
