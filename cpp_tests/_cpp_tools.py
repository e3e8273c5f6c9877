"""Where the C++ tests find what they compile against: nanobind, pybind11 and CCCL (with the
CUDA runtime headers and library) from their PyPI wheels, found through importlib, so the
same lookup works in a virtual environment, in CI and on the GPU machine.

Each finder returns its result or a sentence saying what is missing; ``need`` turns that into
a skip, or a failure where CI sets CUSTREAM_REQUIRE_BUILD_TOOLS.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The one builder of test extensions lives with the Cython tests.
if str(HERE.parent / "cython_tests") not in sys.path:
    sys.path.insert(0, str(HERE.parent / "cython_tests"))

from _cy_build import Module, compiler  # noqa: E402

STRICT = ("-Wall", "-Wextra", "-Werror")
# Beyond what the builds use: what a strict downstream project may turn on.
EXTRA = ("-Wpedantic", "-Wshadow", "-Wconversion", "-Wsign-conversion", "-Wold-style-cast", "-Wnon-virtual-dtor")
STANDARDS = ("c++17", "c++20")
CCCL_WHEELS = "nvidia-cuda-cccl nvidia-cuda-runtime nvidia-cuda-crt"


def need(found, package: str):
    """``found`` if it is not a reason string; else skip (or fail under CI) saying why."""
    if not isinstance(found, str):
        return found
    import pytest

    message = f"{found} (pip install {package})"
    if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
        pytest.fail(message + "; CUSTREAM_REQUIRE_BUILD_TOOLS is set")
    pytest.skip(message)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _isystem(dirs) -> tuple[str, ...]:
    # -isystem: warnings inside a library's headers are the library's, not ours.
    return tuple(arg for d in dirs for arg in ("-isystem", str(d)))


@dataclasses.dataclass(frozen=True)
class Lib:
    """What a module needs to compile and link against one library."""

    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    macros: tuple[str, ...] = ()
    include: tuple[str, ...] = ()

    def __add__(self, other: "Lib") -> "Lib":
        return Lib(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(Lib)))


def nanobind() -> Lib | str:
    try:
        nb = importlib.import_module("nanobind")
    except ImportError:
        return "nanobind is not installed"
    root = Path(nb.__file__).parent
    # nanobind is not header-only: its library (one file) is compiled into each module.
    combined = Path(nb.source_dir()) / "nb_combined.cpp"
    include = [Path(nb.include_dir()), root / "ext" / "robin_map" / "include"]
    # -fno-strict-aliasing: as nanobind's own CMake builds its library.
    return Lib(cflags=_isystem(include) + ("-fvisibility=hidden", "-fno-strict-aliasing"), sources=(str(combined),),
               macros=(f"CUSTREAM_TEST_NANOBIND={_version('nanobind')}", "USE_NANOBIND"),
               include=tuple(map(str, include)))


def pybind11() -> Lib | str:
    try:
        pb = importlib.import_module("pybind11")
    except ImportError:
        return "pybind11 is not installed"
    return Lib(cflags=_isystem([pb.get_include()]) + ("-fvisibility=hidden",),
               macros=(f"CUSTREAM_TEST_PYBIND11={_version('pybind11')}",))


def _nvidia_roots() -> list[Path]:
    # Every nvidia/ folder on sys.path, in order (PYTHONPATH first): NVIDIA's wheels share that
    # namespace, and one with an __init__.py would hide the others from importlib.
    return [Path(entry or ".") / "nvidia" for entry in sys.path if (Path(entry or ".") / "nvidia").is_dir()]


def _first(pattern: str) -> Path | None:
    for root in _nvidia_roots():
        for hit in sorted(root.glob(pattern)):
            return hit
    return None


def cccl_include() -> Path | str:
    """The folder holding CCCL's cuda/stream from the nvidia-cuda-cccl wheel."""
    stream = _first("*/include/cccl/cuda/stream")
    return stream.parent.parent if stream else "nvidia-cuda-cccl's cuda/stream is not installed"


def cccl() -> Lib | str:
    """CCCL's <cuda/stream> and the CUDA runtime it includes, from NVIDIA's wheels (which the
    host g++ compiles without nvcc), and libcudart to link: cuda::stream's members call it."""
    stream = cccl_include()
    runtime = _first("*/include/cuda_runtime_api.h")
    crt = _first("*/include/crt/host_defines.h")
    cudart = _first("*/lib/libcudart.so.*")
    missing = [what for what, hit in (("nvidia-cuda-cccl's cuda/stream", not isinstance(stream, str)),
                                      ("nvidia-cuda-runtime's cuda_runtime_api.h", runtime),
                                      ("nvidia-cuda-crt's crt/host_defines.h", crt),
                                      ("nvidia-cuda-runtime's libcudart.so", cudart)) if not hit]
    if missing:
        return "not installed: " + ", ".join(missing)
    include = [stream, runtime.parent, crt.parent.parent]
    return Lib(cflags=_isystem(dict.fromkeys(include)),
               ldflags=(f"-L{cudart.parent}", f"-l:{cudart.name}", f"-Wl,-rpath,{cudart.parent}"),
               macros=("CUSTREAM_TEST_CCCL", f"CUSTREAM_TEST_CCCL_VERSION={_version('nvidia-cuda-cccl')}"),
               include=tuple(map(str, dict.fromkeys(include))))


def module(name: str, source: str, std: str = "c++17", strict: bool = True, lib: Lib = Lib(),
           include_dirs: tuple[str, ...] = ()) -> Module:
    """A C++ test module built from ``source`` (a file in cpp_tests/, or a path)."""
    cflags = (f"-std={std}", *(STRICT if strict else ()), *lib.cflags)
    return Module(name, str(HERE / source), sources=lib.sources, include_dirs=include_dirs,
                  macros=(f"MODNAME={name}", *lib.macros), cflags=cflags, ldflags=lib.ldflags, cplus=True)


def syntax_errors(source, flags, code: str | None = None) -> str:
    """Compiler output under STRICT and EXTRA ('' when clean) for `source` (a file) or `code`."""
    import custream

    argv = [*compiler(True), "-fsyntax-only", *STRICT, *EXTRA, "-isystem", sysconfig.get_paths()["include"],
            f"-I{custream.get_include()}", *flags]
    argv += ["-x", "c++", "-"] if code is not None else [str(source)]
    proc = subprocess.run(argv, input=code, capture_output=True, text=True)
    return "" if proc.returncode == 0 else f"{' '.join(argv)}\n{proc.stderr}"


def assert_all_clean(jobs) -> None:
    """Run syntax_errors(*job) for every job, in parallel; fail with every error."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [out for out in pool.map(lambda job: syntax_errors(*job), jobs) if out]
    assert not failures, "\n\n".join(failures)
