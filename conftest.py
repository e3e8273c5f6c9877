"""Test setup shared by tests/ and cython_tests/: `gpu`-marked tests run only where a CUDA
driver and device exist.

The tests import the *installed* custream (the wheel), never the source tree: the package
lives under python/, which is not on sys.path.
"""

import pytest

import custream

HAS_GPU = custream.is_available()


def pytest_report_header(config):
    where = custream.__file__
    if HAS_GPU:
        return f"custream from {where}; CUDA driver {custream.driver_version()}, {custream.device_count()} device(s)"
    return f"custream from {where}; no usable CUDA driver: gpu tests are skipped"


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu-check.sh runs these on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
