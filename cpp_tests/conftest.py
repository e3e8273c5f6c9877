"""Build the C++ test modules once per session, against the installed custream and the
nanobind, pybind11 and CCCL wheels, in one parallel pass; a module whose library is missing
is not built, and its tests skip (or fail under CUSTREAM_REQUIRE_BUILD_TOOLS) saying why."""

from __future__ import annotations

import importlib
import sys

import pytest

from _cpp_tools import CCCL_WHEELS, HERE, Lib, cccl, module, nanobind, need, pybind11
from _cy_build import build

# name -> (source, C++ standard, strict flags, [(library finder result, its pip name)])
def _plan():
    nb, pb, cc = nanobind(), pybind11(), cccl()
    return {
        "plain17": ("plain.cpp", "c++17", True, []),
        "plain20": ("plain.cpp", "c++20", True, []),
        "plain_cccl": ("plain.cpp", "c++17", True, [(cc, CCCL_WHEELS)]),
        "nb_ext": ("casters.cpp", "c++17", True, [(nb, "nanobind"), (cc, CCCL_WHEELS)]),
        "pb_ext": ("casters.cpp", "c++17", True, [(pb, "pybind11"), (cc, CCCL_WHEELS)]),
        # Cython's own output is not ours to keep warning-free.
        "cy_ext": ("cy_ext.pyx", "c++17", False, [(cc, CCCL_WHEELS)]),
    }


@pytest.fixture(scope="session")
def cpp_built():
    """name -> the imported module, or (reason, pip name) when a library is missing."""
    out, modules = {}, []
    for name, (source, std, strict, libs) in _plan().items():
        missing = [(lib, pkg) for lib, pkg in libs if isinstance(lib, str)]
        if missing:
            out[name] = missing[0]
            continue
        lib = sum((lib for lib, _ in libs), Lib())
        include_dirs = (str(HERE),) if source.endswith(".pyx") else ()
        modules.append(module(name, source, std, strict, lib, include_dirs))
    folder = str(build(modules))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for m in modules:
        out[m.name] = importlib.import_module(m.name)
    return out


def _modules(name: str, params: list[str], doc: str):
    """A session fixture `name` giving each built module of `params` in turn."""

    @pytest.fixture(scope="session", params=params, name=name)
    def fixture(request, cpp_built):
        got = cpp_built[request.param]
        return need(*got) if isinstance(got, tuple) else got

    fixture.__doc__ = doc
    return fixture


plain = _modules("plain", ["plain17", "plain20"], "plain.cpp: custream.hpp with no binding library, as C++17 and C++20.")
plain_cccl = _modules("plain_cccl", ["plain_cccl"], "plain.cpp with CCCL's <cuda/stream> first and libcudart linked.")
ext = _modules("ext", ["nb_ext", "pb_ext"], "casters.cpp through nanobind's and through pybind11's casters.")
cy_ext = _modules("cy_ext", ["cy_ext"], "cy_ext.pyx: Cython in C++ mode over custream/cpp.pxd.")
