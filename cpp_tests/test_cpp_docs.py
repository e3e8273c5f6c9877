"""docs/cpp.md's examples compile as written and do what they say. Blocks are taken by their
info string: ```cpp borrow, ```cpp move and ```cpp share compile (syntax-only, C++17 and
C++20, warning-free); ```cpp nanobind and ```cpp pybind11 are built into modules that run the
```python block, once by this test's own builder and once by the page's ```cmake nanobind and
```cmake pybind11 recipes; the ```cython block is built, in C++ mode, once by this test's own
builder against a mylib.hpp of the test's (which records what it was given), and once as the
page says, with its ```cpp mylib.hpp and ```cpp mylib.cpp, its ```python setup.py and the
commands of its ```bash block, in a folder of its own."""

import contextlib
import importlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

import custream
from _producers import Producer, check_cuda_stream_made
from _cpp_tools import CCCL_WHEELS, STANDARDS, assert_all_clean, cccl, module, nanobind, need, pybind11
from _cy_build import BUILD_ROOT, build
from _cy_downstream import run, tool

DOC = Path(__file__).resolve().parent.parent / "docs" / "cpp.md"


def blocks() -> dict[str, str]:
    found = {}
    for info, code in re.findall(r"^```([^\n`]*)\n(.*?)^```$", DOC.read_text(), re.S | re.M):
        assert info not in found, f"two ```{info} blocks in docs/cpp.md"
        found[info] = code
    return found


BLOCKS = blocks()

# The test's own library for the Cython example (the page's mylib.cpp calls the CUDA runtime,
# which needs a GPU to get further than an error): it records what it was given.
MYLIB = """#pragma once
#include <cuda/stream>
#include <cstddef>
#include <cstdint>
inline std::uintptr_t last_stream = 0;
inline std::size_t last_n = 0;
inline cudaError_t fill(cuda::stream_ref stream, float *, std::size_t n) {
    last_stream = reinterpret_cast<std::uintptr_t>(stream.get());
    last_n = n;
    return cudaSuccess;
}
"""
CYTHON_HARNESS = """

cdef extern from "mylib.hpp":
    size_t last_stream
    size_t last_n


def last():
    return last_stream, last_n
"""


def test_every_block_is_tested():
    assert set(BLOCKS) == {"cpp borrow", "cpp move", "cpp share", "cpp nanobind", "cpp pybind11", "cmake nanobind",
                           "cmake pybind11", "python", "cpp mylib.hpp", "cpp mylib.cpp", "cython", "python setup.py",
                           "bash"}


def test_the_ownership_examples_compile():
    # One translation unit for the three: they share no name, and it halves the compile time.
    cc = need(cccl(), CCCL_WHEELS)
    code = "".join(BLOCKS[f"cpp {case}"] for case in ("borrow", "move", "share"))
    assert_all_clean([(None, (f"-std={std}", *cc.cflags), code) for std in STANDARDS])


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


@pytest.fixture(scope="module")
def examples():
    """The nanobind, pybind11 and Cython examples, built in one pass."""
    cc, nb, pb = need(cccl(), CCCL_WHEELS), need(nanobind(), "nanobind"), need(pybind11(), "pybind11")
    folder = BUILD_ROOT / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder, "mylib.hpp", MYLIB)
    mods = [
        module("streams_nb", str(_write(folder, "streams_nb.cpp", BLOCKS["cpp nanobind"])), lib=nb + cc),
        module("streams_pb", str(_write(folder, "streams_pb.cpp", BLOCKS["cpp pybind11"])), lib=pb + cc),
        module("fill_cy", str(_write(folder, "fill_cy.pyx", BLOCKS["cython"] + CYTHON_HARNESS)), strict=False,
               lib=cc, include_dirs=(str(folder),)),
    ]
    out = str(build(mods))
    if out not in sys.path:
        sys.path.insert(0, out)
    return {m.name: importlib.import_module(m.name) for m in mods}


def check_printed(code: str, printed: str) -> None:
    """Each ``print(...)  # text`` of the example printed that text."""
    for line in code.splitlines():
        m = re.match(r"\s*print\(.*\)\s+# (.+)$", line)
        if m:
            assert m.group(1) in printed, f"{m.group(1)!r} not in {printed!r}"


@pytest.mark.parametrize("name", ["streams_nb", "streams_pb"])
def test_the_binding_examples_run(examples, name):
    ext = examples[name]
    code = BLOCKS["python"].replace("streams_nb", name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/cpp.md", "exec"), {"__name__": "__doc_example__"})
    check_printed(code, out.getvalue())
    assert ext.enqueue(Producer(0x3000)) == 0x3000
    check_cuda_stream_made(ext.new_stream)


@pytest.mark.parametrize(("binding", "name"), [("nanobind", "streams_nb"), ("pybind11", "streams_pb")])
def test_the_cmake_recipes_build_the_binding_examples(binding, name, tmp_path):
    """The page's CMakeLists.txt builds its module as a user would, with the page's own
    commands (cmake and ninja from the environment, whose python comes first on PATH, as the
    page asks; nothing from this test's builder), and the module imports in a fresh
    interpreter, libcudart found, and runs the ```python block on wrapped handles: no GPU
    needed."""
    need(cccl(), CCCL_WHEELS)
    need({"nanobind": nanobind, "pybind11": pybind11}[binding](), binding)
    tool("cmake"), tool("ninja")
    (tmp_path / f"{name}.cpp").write_text(BLOCKS[f"cpp {binding}"])
    (tmp_path / "CMakeLists.txt").write_text(BLOCKS[f"cmake {binding}"])
    commands = re.findall(r"`(cmake -S [^`]+)`", DOC.read_text())
    assert commands and set(commands) == {"cmake -S . -B build -G Ninja && cmake --build build"}, commands
    for command in commands[0].split(" && "):
        run(command.split(), cwd=tmp_path)
    folder = tmp_path / "build"
    code = BLOCKS["python"].replace("streams_nb", name)
    program = f"import sys; sys.path.insert(0, {str(folder)!r})\n{code}\nprint({name}.__file__)\n"
    printed = run([sys.executable, "-c", program], cwd=tmp_path)
    check_printed(code, printed)
    assert printed.rstrip().splitlines()[-1].startswith(str(folder)), printed  # the module CMake built


def test_the_cython_example_runs(examples):
    cy = examples["fill_cy"]
    cy.fill_on(custream.Stream.from_handle(0x4000), 0, 16)
    assert cy.last() == (0x4000, 16)
    cy.fill_on_any(Producer(0x5000), 0, 8)
    assert cy.last() == (0x5000, 8)
    with pytest.raises(TypeError):
        cy.fill_on(None, 0, 1)


def test_the_cython_setup_py_builds_the_cython_example(tmp_path):
    """The page's Cython C++-mode recipe as a user follows it, in a folder of its own: its
    mylib.hpp and mylib.cpp, the ```cython block as fill_cy.pyx and its setup.py, then the
    commands of its ```bash block (the wheels the first installs are this environment's). The
    module builds, links the CUDA runtime from the wheel, and its last line prints what the
    page says on a machine with a driver; without one, the page's two sentences hold: Stream()
    is CudaUnavailableError, and a wrapped handle reaches the runtime, which says so."""
    from importlib.metadata import PackageNotFoundError, version

    need(cccl(), CCCL_WHEELS)
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    (tmp_path / "mylib.hpp").write_text(BLOCKS["cpp mylib.hpp"])
    (tmp_path / "mylib.cpp").write_text(BLOCKS["cpp mylib.cpp"])
    (tmp_path / "fill_cy.pyx").write_text(BLOCKS["cython"])
    (tmp_path / "setup.py").write_text(BLOCKS["python setup.py"])
    install, build_command, call = BLOCKS["bash"].strip().splitlines()
    assert install.startswith("pip install ")
    for dist in install.split()[2:]:
        try:
            version(dist)
        except PackageNotFoundError:
            need(f"{dist} is not installed", dist)
    assert build_command == "python setup.py build_ext --inplace", build_command
    run([sys.executable, *build_command.split()[1:]], cwd=tmp_path)
    assert list(tmp_path.glob("fill_cy.*.so")), "the module setup.py built, next to fill_cy.pyx"

    command, _, printed = call.partition("  # ")
    assert command.startswith('python -c "') and command.endswith('"'), command
    code = command[len('python -c "'):-1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    if custream.is_available():
        assert proc.returncode == 0 and proc.stdout.strip() == printed.strip(), proc.stdout + proc.stderr
        return
    assert proc.returncode != 0 and "custream.CudaUnavailableError" in proc.stderr, proc.stdout + proc.stderr
    text = " ".join(DOC.read_text().split())
    m = re.search(r"`(fill_cy\.fill_on\(custream\.Stream\.from_handle\(0\), 0, 0\))` raises `RuntimeError: ([^`]+)`", text)
    assert m, "the page says what a wrapped handle gives without a GPU"
    proc = subprocess.run([sys.executable, "-c", f"import custream, fill_cy; {m.group(1)}"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and proc.stderr.rstrip().splitlines()[-1] == f"RuntimeError: {m.group(2)}", proc.stderr
