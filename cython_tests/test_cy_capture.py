"""The C and Cython faces of host functions and capture (capture_consumer.pyx, compiled
against the installed wheel): a C host function with no Python involved and no GIL, and
``is_capturing`` with no Python call."""

import importlib
import sys

import pytest

import custream
from custream import Stream

from _cy_build import Module, build

HAS_DRIVER = custream.is_available()


@pytest.fixture(scope="module")
def cap():
    folder = build([Module("capture_consumer", "capture_consumer.pyx")])
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module("capture_consumer")


def test_arguments_are_checked_before_the_driver(cap):
    s = Stream.from_handle(0x1234)
    with pytest.raises(ValueError, match=r"Custream_LaunchHostFunc\(\) fn is NULL"):
        cap.queue_null(s)
    with pytest.raises(TypeError, match=r"Custream_LaunchHostFunc\(\) expected a custream.Stream, got str"):
        cap.queue_null("nope")
    with pytest.raises(TypeError, match=r"Custream_IsCapturing\(\) expected a custream.Stream, got NoneType"):
        cap.capturing_any(None)
    s.close()
    for call in (cap.queue, cap.capturing):
        with pytest.raises(ValueError, match="closed custream.Stream"):
            call(s)


@pytest.mark.skipif(HAS_DRIVER, reason="the no-driver path")
def test_without_a_driver_the_c_faces_raise(cap):
    s = Stream.from_handle(0x1234)
    for call in (cap.queue, cap.capturing):
        with pytest.raises(custream.CudaUnavailableError):
            call(s)
    assert cap.calls() == (0, 0)


@pytest.mark.gpu
def test_a_c_host_function_runs_without_the_gil(cap):
    before, _ = cap.calls()
    with Stream() as s:
        cap.queue(s, 5)
        s.synchronize()
        assert cap.calls() == (before + 5, 0)


@pytest.mark.gpu
def test_is_capturing_from_cython(cap):
    with Stream() as s:
        assert cap.capturing(s) is False
        s.begin_capture()
        assert cap.capturing(s) is True and cap.capturing_any(s) == 1
        cap.queue(s, 2)  # two host nodes
        g = s.end_capture()
        assert cap.capturing(s) is False and g.node_count == 2
        before, _ = cap.calls()
        g.launch(s)
        s.synchronize()
        assert cap.calls() == (before + 2, 0)
