"""setup_helpers/: what a downstream build uses, each exercised by building a real module
against the installed custream: custream_build.py (setuptools), FindCustream.cmake (CMake)
and custream.meson (meson)."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

import custream
from _cy_downstream import check_in, cmake_build, meson_build, setuptools_build

HERE = Path(__file__).resolve().parent
HELPERS = HERE.parent / "setup_helpers"
sys.path.insert(0, str(HELPERS))
import custream_build  # noqa: E402

# A module built by each tool: the C consumer through the capsule, and its checks.
C_SOURCE = HERE / "c_consumer.c"
C_CHECK = """
    import custream, c_consumer
    assert c_consumer.abi()["compiled"] == custream.ABI_VERSION
    s = custream.Stream.from_handle(0x1230)
    assert c_consumer.handle_checked(s) == 0x1230
"""


def test_get_include_finds_the_installed_header_and_pxd():
    folder = Path(custream_build.get_include())
    assert folder == Path(custream.get_include())
    assert (folder / "custream.h").is_file() and (folder / "__init__.pxd").is_file()
    assert custream_build.cython_include_path() == [str(folder.parent)]


def test_get_include_says_what_to_do_without_custream(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="custream is not installed in the Python running this build"):
        custream_build.get_include()


def test_extension_keeps_the_callers_arguments():
    ext = custream_build.extension("pkg.mod", ["a.c"], include_dirs=["mine"], define_macros=[("X", "1")])
    assert ext.name == "pkg.mod" and ext.sources == ["a.c"]
    assert ext.include_dirs == ["mine", custream.get_include()]
    assert ext.define_macros == [("X", "1")]


def test_setuptools_builds_cython_and_c_with_the_helper(tmp_path):
    pytest.importorskip("Cython")
    shutil.copy(HERE / "drift.pyx", tmp_path / "cy_mod.pyx")
    shutil.copy(C_SOURCE, tmp_path / "c_consumer.c")
    (tmp_path / "setup.py").write_text(
        f"import sys; sys.path.insert(0, {str(HELPERS)!r})\n"
        "from setuptools import setup\n"
        "from custream_build import cythonize, extension\n"
        "setup(name='demo', ext_modules=cythonize([\n"
        "    extension('cy_mod', ['cy_mod.pyx']),\n"
        "    extension('c_consumer', ['c_consumer.c']),\n"
        "], quiet=True))\n"
    )
    setuptools_build(tmp_path)
    check_in(tmp_path, C_CHECK + "\n    import cy_mod\n    assert cy_mod.handle(s) == 0x1230\n")


def test_find_custream_cmake_builds_a_c_module(tmp_path):
    shutil.copy(C_SOURCE, tmp_path / "c_consumer.c")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(demo LANGUAGES C)\n"
        f'list(APPEND CMAKE_MODULE_PATH "{HELPERS.as_posix()}")\n'
        "find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)\n"
        "find_package(Custream REQUIRED)\n"
        f'if(NOT Custream_ABI_VERSION EQUAL {custream.ABI_VERSION} OR NOT Custream_VERSION STREQUAL "{custream.__version__}")\n'
        '  message(FATAL_ERROR "FindCustream: ABI ${Custream_ABI_VERSION}, version ${Custream_VERSION}")\n'
        "endif()\n"
        "Python_add_library(c_consumer MODULE WITH_SOABI c_consumer.c)\n"
        "target_link_libraries(c_consumer PRIVATE Custream::Custream)\n"
    )
    check_in(cmake_build(tmp_path), C_CHECK)


def test_meson_snippet_builds_a_c_module(tmp_path):
    shutil.copy(C_SOURCE, tmp_path / "c_consumer.c")
    (tmp_path / "meson.build").write_text(
        "project('demo', 'c')\n"
        "py = import('python').find_installation(pure: false)\n"
        + (HELPERS / "custream.meson").read_text()
        + "py.extension_module('c_consumer', 'c_consumer.c', dependencies: custream_dep)\n"
    )
    check_in(meson_build(tmp_path), C_CHECK)
