"""The C++ headers compile warning-free as C++17 and C++20 under -Wall -Wextra -Werror and
a stricter set besides, alone, with the limited API, with CCCL included before or after them,
and with every template of the test modules instantiated (syntax-only: no code generated).
Built for real, as C++17 (and plain.cpp as C++20), by the other tests here."""

import subprocess
import sysconfig

import pytest

import custream
from _cpp_tools import CCCL_WHEELS, HERE, STANDARDS, assert_all_clean, cccl, nanobind, need, pybind11
from _cy_build import compiler

# The limited API (abi3) is not offered by a free-threaded CPython's headers before abi3t.
LIMITED_API = not sysconfig.get_config_var("Py_GIL_DISABLED")

AFTER_CCCL = """
#include "custream.hpp"
#include <cuda/stream>
static_assert(std::is_convertible_v<custream::stream_ref, cuda::stream_ref>);
static_assert(std::is_convertible_v<cuda::stream_ref, custream::stream_ref>);
custream::stream give(cuda::stream&& s) { return custream::to_python(std::move(s), 0); }
bool same(custream::stream_ref a, cuda::stream_ref b) { return a == b && b == a; }
"""


def test_the_headers_alone():
    jobs = []
    for std in STANDARDS:
        for header in ("custream.hpp", "custream/nanobind.hpp", "custream/pybind11.hpp"):
            libs = ()
            if "nanobind" in header:
                libs = need(nanobind(), "nanobind").cflags
            elif "pybind11" in header:
                libs = need(pybind11(), "pybind11").cflags
            jobs.append((None, (f"-std={std}", *libs), f'#include "{header}"\n'))
        if LIMITED_API:
            jobs.append((None, (f"-std={std}", "-DPy_LIMITED_API=0x030A0000"), '#include "custream.hpp"\n'))
    assert_all_clean(jobs)


def test_every_template_instantiated():
    cc = need(cccl(), CCCL_WHEELS)
    nb, pb = need(nanobind(), "nanobind"), need(pybind11(), "pybind11")
    # C++17 is compiled for real by the other tests (under STRICT); here C++20 and EXTRA.
    base = ("-std=c++20", *cc.cflags, "-DCUSTREAM_TEST_CCCL")
    assert_all_clean([
        (HERE / "plain.cpp", base),
        *[(HERE / "plain.cpp", ("-std=c++17", *cc.cflags, "-DCUSTREAM_TEST_CCCL", "-DPy_LIMITED_API=0x030A0000"))]
        * LIMITED_API,
        (HERE / "casters.cpp", (*base, *nb.cflags, "-DUSE_NANOBIND")),
        (HERE / "casters.cpp", (*base, *pb.cflags)),
        *((None, (f"-std={std}", *cc.cflags), AFTER_CCCL) for std in STANDARDS),
    ])


@pytest.mark.parametrize("flags", [("-x", "c"), ("-x", "c++", "-std=c++14")], ids=["C", "C++14"])
def test_older_languages_get_a_clear_error(flags):
    argv = [*compiler(True), "-fsyntax-only", *flags, "-isystem", sysconfig.get_paths()["include"],
            f"-I{custream.get_include()}", "-"]
    proc = subprocess.run(argv, input='#include "custream.hpp"\n', capture_output=True, text=True)
    assert proc.returncode != 0
    assert "custream.hpp needs C++17 or later; C code includes custream.h" in proc.stderr
