"""Build the test consumers once per session, against the *installed* custream.

`gpu`-marked tests are skipped without a device by the repository's conftest.py; their
module is built only when one of them runs.
"""

from __future__ import annotations

import importlib
import sys
import sysconfig

import pytest

import custream

from _cy_build import BUILD_ROOT, Module, build, cuda_toolkit, variant_header

# A free-threaded CPython's headers refuse the limited API (abi3) until abi3t.
LIMITED_API = not sysconfig.get_config_var("Py_GIL_DISABLED")

def _cpu_modules() -> list[Module]:
    headers = BUILD_ROOT / "headers"
    bigger, smaller, abi99 = (str(variant_header(headers, e)) for e in ("bigger", "smaller", "abi99"))
    strict = ("-Wextra", "-Werror")
    return [
        Module("consumer", "consumer.pyx"),
        Module("drift_ok", "drift.pyx"),
        Module("drift_bigger", "drift.pyx", include_dirs=(bigger,)),
        Module("drift_smaller", "drift.pyx", include_dirs=(smaller,)),
        Module("c_consumer", "c_consumer.c", cflags=("-std=c99", *strict)),
        Module("c_consumer_cpp", "c_consumer.c", macros=("MODNAME=c_consumer_cpp",), cflags=strict, cplus=True),
        *[Module("c_consumer_abi3", "c_consumer.c",
                 macros=("MODNAME=c_consumer_abi3", "Py_LIMITED_API=0x030A0000"), cflags=strict)] * LIMITED_API,
        Module("c_consumer_opaque", "c_consumer.c",
               macros=("MODNAME=c_consumer_opaque", "CUSTREAM_OPAQUE_STREAM"), cflags=("-std=c99", *strict)),
        Module("c_consumer_abi99", "c_consumer.c", include_dirs=(abi99,), macros=("MODNAME=c_consumer_abi99",)),
        Module("c_consumer_bigger", "c_consumer.c", include_dirs=(bigger,), macros=("MODNAME=c_consumer_bigger",)),
    ]


def _on_path(folder) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture(scope="session")
def built():
    """The folder holding every CPU test module, put on sys.path."""
    folder = build(_cpu_modules())
    _on_path(folder)
    return folder


@pytest.fixture(scope="session")
def cy(built):
    """consumer.pyx: the Cython consumer."""
    return importlib.import_module("consumer")


@pytest.fixture(scope="session", params=["c_consumer", "c_consumer_cpp", *["c_consumer_abi3"] * LIMITED_API])
def cext(request, built):
    """c_consumer.c, compiled as C, as C++ and against the limited API."""
    return importlib.import_module(request.param)


@pytest.fixture(scope="session")
def gpu_cy():
    """gpu_consumer.pyx: a Cython consumer that calls the CUDA driver on s.handle."""
    toolkit = cuda_toolkit()
    if isinstance(toolkit, str):
        pytest.skip(toolkit)
    include, ldflags = toolkit
    folder = build([Module("gpu_consumer", "gpu_consumer.pyx", include_dirs=(include,), ldflags=tuple(ldflags))])
    _on_path(folder)
    return importlib.import_module("gpu_consumer")
