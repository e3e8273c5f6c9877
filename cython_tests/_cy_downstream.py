"""Build a small project the way a downstream one would (setuptools, CMake, meson) and check
the result in a fresh interpreter, so module names never clash with this process's.

CMake, meson and ninja are looked up next to this Python first (pip installs them there),
then on PATH. Where one is missing its test is skipped, unless CUSTREAM_REQUIRE_BUILD_TOOLS
is set (CI sets it): then a missing tool is a failure, not a silent skip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent)
ENV = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}


def missing(what: str) -> None:
    """Skip the test, or fail it under CUSTREAM_REQUIRE_BUILD_TOOLS."""
    message = f"{what} (pip install cmake meson ninja)"
    if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
        pytest.fail(message + "; CUSTREAM_REQUIRE_BUILD_TOOLS is set")
    pytest.skip(message)


def tool(name: str) -> str:
    """The path of a build tool; a missing one skips (or fails) the test."""
    found = shutil.which(name, path=ENV["PATH"])
    if not found:
        missing(f"{name} is not installed")
    return found


def run(argv: list[str], cwd: Path) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def check_in(folder: Path, code: str) -> None:
    """Run `code` in a fresh Python whose first import path is `folder`."""
    program = f"import sys; sys.path.insert(0, {str(folder)!r})\n" + textwrap.dedent(code)
    run([sys.executable, "-c", program], cwd=folder)


def setuptools_build(project: Path, args: tuple[str, ...] = ("-q", "build_ext", "--inplace")) -> None:
    """Run ``python setup.py *args`` in `project`, with this Python."""
    pytest.importorskip("setuptools")
    run([sys.executable, "setup.py", *args], cwd=project)


def cmake_build(project: Path) -> Path:
    """Configure and build `project`; returns the build folder (modules land there)."""
    cmake = tool("cmake")
    build = project / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja", path=ENV["PATH"]) else []
    run([cmake, "-S", str(project), "-B", str(build), *generator, f"-DPython_EXECUTABLE={sys.executable}"], cwd=project)
    run([cmake, "--build", str(build)], cwd=project)
    return build


def meson_build(project: Path) -> Path:
    """Set up and build `project` with a meson running on this Python, so that
    find_installation() finds the custream installed here; returns the build folder."""
    if importlib.util.find_spec("mesonbuild") is None:
        missing(f"meson is not installed in {sys.executable}")
    tool("ninja")
    build = project / "build"
    meson = [sys.executable, "-m", "mesonbuild.mesonmain"]
    run([*meson, "setup", str(build)], cwd=project)
    run([*meson, "compile", "-C", str(build)], cwd=project)
    return build
