"""tests/gpu: the gpu tests, one file per peer library and custream's own. Their shared
helpers live in custream_gpu_helpers.py next to this file, and some tests use tests/'s
helpers (_threads.py, _capi_ctypes.py); both folders go on sys.path here so the test modules
import them under any pytest import mode, and when tests/gpu is run on its own."""

import ctypes
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
for folder in (HERE, os.path.dirname(HERE)):
    if folder not in sys.path:
        sys.path.insert(0, folder)


@pytest.fixture(autouse=True)
def native_stacks_before_the_watchdog(request):
    """In a test marked ``isolated``, in its pytest process of its own (tests/conftest.py): 5 s
    before the watchdog writes every Python stack and ends the process, every thread's native
    stack (native_stacks.c: the driver's threads too, which faulthandler does not show), to the
    same stderr. Without a C compiler, the Python stacks alone."""
    marker = request.node.get_closest_marker("isolated")
    out = request.getfixturevalue("watchdog_stderr") if marker is not None else None
    if out is None:
        return
    from custream_gpu_helpers import native_stacks

    lib = native_stacks()
    if lib is not None:
        ctypes.CDLL(lib).native_stacks_arm_fd(max(1, marker.kwargs.get("timeout", 60) - 5), out.fileno())


@pytest.fixture
def cupy_on_device_0():
    """CuPy works on device 0 (a module's tests take it with ``usefixtures``)."""
    import cupy

    cupy.cuda.Device(0).use()
