"""The documentation's Cython, C, C++, CMake and meson examples (README.md and docs/*.md)
compile as written against the installed custream, and do what their comments say.

docs/code_blocks.py finds the blocks and says how each tag is tested. Every example module is
named ``mymod``: a ```cython block is built with its page's ```python setup.py (or a plain
one), a ```c block defining ``PyInit_mymod`` is built as that module, other ```c and
```cpp blocks are compiled, and a page's ```cmake and ```meson blocks build its mymod.c.
Each module is then called in a fresh interpreter.
"""

import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import custream
from _cy_build import compiler
from _cy_downstream import check_in, cmake_build, meson_build, setuptools_build

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
import code_blocks  # noqa: E402 (docs/code_blocks.py: the blocks and what tests them)

CYTHON = code_blocks.blocks("cython")
C = code_blocks.blocks("c")
CPP = code_blocks.blocks("cpp")
BUILDS = [b for tag in ("cmake", "meson") for b in code_blocks.blocks(tag)]
EXT = sysconfig.get_config_var("EXT_SUFFIX")

# A plain setup.py for a page that shows none.
SETUP_PY = """
from Cython.Build import cythonize
from setuptools import Extension, setup
import custream
setup(name="mymod", ext_modules=cythonize(
    [Extension("mymod", ["mymod.pyx"], include_dirs=[custream.get_include()])], language_level=3))
"""

# What every example with a handle_of must do.
HANDLE_OF = """
    import custream, mymod

    class Theirs:
        def __cuda_stream__(self):
            return (0, 0x7F3A2C001230)

    assert mymod.handle_of(Theirs()) == 0x7F3A2C001230
    s = custream.Stream.from_handle(0x1000)
    assert mymod.handle_of(s) == 0x1000
    s.close()
    try:
        mymod.handle_of(s)
    except ValueError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("no ValueError for a closed stream")
"""

# What the other functions of the examples must do, by name.
CHECKS = {
    "handle_of": HANDLE_OF,
    "launch": """
    import custream, mymod
    t = custream.Stream.from_handle(0x2000)
    assert mymod.launch(t) == 0x2000
    t.close()
    assert mymod.launch(t) is None
    try:
        mymod.launch(None)
    except TypeError:
        pass
    else:
        raise AssertionError("launch(None) was accepted")
""",
    "handle_nogil": """
    import custream, mymod
    t = custream.Stream.from_handle(0x2000)
    assert mymod.handle_nogil(t) == 0x2000
    try:
        mymod.handle_nogil(None)
    except TypeError:
        pass
    else:
        raise AssertionError("handle_nogil(None) was accepted")
""",
    "queue": """
    import custream, mymod
    t = custream.Stream.from_handle(0x2000)
    t.close()
    try:
        mymod.queue(t)
    except ValueError as e:
        assert "closed" in str(e), e
    else:
        raise AssertionError("a closed stream was accepted")
""",
}


def check_functions(folder: Path, code: str) -> None:
    """Run the check of every function the example defines; it must define one at least."""
    names = [n for n in CHECKS if f"def {n}(" in code or f" *{n}(PyObject" in code]
    assert names, "the example defines none of the functions the test knows how to call"
    for name in names:
        check_in(folder, CHECKS[name])


def module_c(page: str) -> str:
    """The page's C module (the ```c block defining PyInit_mymod)."""
    found = [b.code for b in code_blocks.blocks("c", page=page) if "PyInit_mymod" in b.code]
    assert len(found) == 1, f"{page} needs exactly one ```c block defining PyInit_mymod, has {len(found)}"
    return found[0]


def compile_c(source: Path, out: Path, cplus: bool, shared: bool) -> None:
    include = [sysconfig.get_paths()["include"], custream.get_include()]
    argv = [*compiler(cplus), "-fPIC", "-Wall", "-Wextra", "-Werror", *(f"-I{d}" for d in include)]
    argv += ["-shared"] if shared else ["-c"]
    proc = subprocess.run([*argv, "-o", str(out), str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_pages_have_their_examples():
    assert {b.page for b in CYTHON} >= {"README.md", "docs/cython.md"}
    assert {b.page for b in C if "PyInit_mymod" in b.code} >= {"README.md", "docs/c.md"}
    assert {b.tag for b in BUILDS} == {"cmake", "meson"}
    for block in code_blocks.blocks("python setup.py"):
        assert len(code_blocks.blocks("cython", page=block.page)) == 1, f"{block.id}: which ```cython block?"


def page_commands(page: str) -> list[tuple[list[str], str]]:
    """The ``python ...`` lines of the page's ```bash blocks: (argv for this Python, the text
    after ``  # ``, which for ``python -c`` is what it prints)."""
    found = []
    for block in code_blocks.blocks("bash", page=page):
        for line in block.code.splitlines():
            command, _, comment = line.partition("  # ")
            argv = shlex.split(command)
            if argv[:1] == ["python"]:
                found.append(([sys.executable, *argv[1:]], comment.strip()))
    return found


@pytest.mark.parametrize("block", CYTHON, ids=lambda b: b.id)
def test_cython_example_builds_and_runs(block, tmp_path):
    """A page with a setup.py is built, then called, by the ``python`` lines of its ```bash."""
    pytest.importorskip("Cython")
    setups = code_blocks.blocks("python setup.py", page=block.page)
    (tmp_path / "mymod.pyx").write_text(block.code)
    (tmp_path / "setup.py").write_text(setups[0].code if setups else SETUP_PY)
    if not setups:
        setuptools_build(tmp_path)
    else:
        commands = page_commands(block.page)
        builds = [argv for argv, _ in commands if argv[1:2] == ["setup.py"]]
        assert len(builds) == 1, f"{block.page}: needs one `python setup.py ...` line in a ```bash block"
        setuptools_build(tmp_path, tuple(builds[0][2:]))
        for argv, prints in commands:
            if argv[1:2] == ["-c"]:
                out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
                assert out.returncode == 0 and out.stdout.strip() == prints, out.stdout + out.stderr
    check_functions(tmp_path, block.code)


# Every C block compiles as C and as C++ (custream.h is both); C++ blocks as C++.
COMPILES = [(b, False) for b in C] + [(b, True) for b in C] + [(b, True) for b in CPP]


@pytest.mark.parametrize(("block", "cplus"), COMPILES, ids=lambda p: p.id if hasattr(p, "id") else ("c++" if p else "c"))
def test_example_compiles(block, cplus, tmp_path):
    """A fragment is compiled; a module (PyInit_mymod) is also built and called."""
    source = tmp_path / ("mymod.cpp" if cplus else "mymod.c")
    source.write_text(block.code)
    if "PyInit_mymod" not in block.code:
        compile_c(source, tmp_path / "mymod.o", cplus, shared=False)
        return
    compile_c(source, tmp_path / ("mymod" + EXT), cplus, shared=True)
    check_functions(tmp_path, block.code)


def test_the_deleter_example_calls_its_deleter_once(tmp_path):
    """docs/c.md's hand-over example, with the owner it leaves out (counting) and a module."""
    (block,) = [b for b in C if "Custream_FromHandleWithDeleter" in b.code]
    harness = block.code + """
struct OwnedStream { custream_handle_t handle; };
static int destroyed = 0;
custream_handle_t owned_stream_handle(OwnedStream *owned) { return owned->handle; }
void owned_stream_destroy(OwnedStream *owned) { ++destroyed; free(owned); }

static PyObject *make(PyObject *self, PyObject *arg) {
    OwnedStream *owned = (OwnedStream *)malloc(sizeof *owned);
    (void)self;
    owned->handle = (custream_handle_t)PyLong_AsVoidPtr(arg);
    return owned_stream_to_python(owned, 0);
}
static PyObject *count(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(destroyed);
}
static PyMethodDef methods[] = {{"make", make, METH_O, NULL}, {"destroyed", count, METH_NOARGS, NULL},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "owned", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_owned(void) { return custream_import() < 0 ? NULL : PyModule_Create(&module); }
"""
    (tmp_path / "owned.c").write_text(harness)  # Python.h, through custream.h, has stdlib.h
    compile_c(tmp_path / "owned.c", tmp_path / ("owned" + EXT), False, shared=True)
    check_in(tmp_path, """
    import owned
    s = owned.make(0x3000)
    assert s.handle == 0x3000 and s.device == 0 and owned.destroyed() == 0
    s.close()
    assert owned.destroyed() == 1
    s.close()
    del s
    assert owned.destroyed() == 1
    t = owned.make(0x3100)
    del t
    assert owned.destroyed() == 2
""")


@pytest.mark.parametrize("block", BUILDS, ids=lambda b: b.id)
def test_build_example_builds(block, tmp_path):
    (tmp_path / "mymod.c").write_text(module_c(block.page))
    if block.tag == "cmake":
        (tmp_path / "CMakeLists.txt").write_text(block.code)
        folder = cmake_build(tmp_path)
    else:
        (tmp_path / "meson.build").write_text(block.code)
        folder = meson_build(tmp_path)
    check_functions(folder, module_c(block.page))


def build_commands(page: str, tool_name: str) -> list[tuple[str, str]]:
    """The ```bash block of `page` that runs `tool_name`: (command, the text after ``  # ``)
    for each line but the ``pip install`` that brings the tools."""
    found = [b for b in code_blocks.blocks("bash", page=page) if f"\n{tool_name} " in "\n" + b.code]
    assert len(found) == 1, f"{page} needs one ```bash block running {tool_name}, has {len(found)}"
    lines = [line.partition("  # ") for line in found[0].code.splitlines() if line.strip()]
    assert lines[0][0].startswith("pip install ") and tool_name in lines[0][0], "the first line installs the tools"
    return [(command, comment.strip()) for command, _, comment in lines[1:]]


@pytest.mark.parametrize("tag", ["cmake", "meson"])
def test_the_build_commands_of_the_c_guide_build_and_run(tag, tmp_path):
    """docs/c.md's commands, as written, in a folder holding its mymod.c and the build file;
    the tools come from this environment (as `pip install` puts them), else the test skips
    (fails under CUSTREAM_REQUIRE_BUILD_TOOLS)."""
    from _cy_downstream import ENV, missing, tool

    (block,) = code_blocks.blocks(tag, page="docs/c.md")
    (tmp_path / "mymod.c").write_text(module_c("docs/c.md"))
    (tmp_path / ("CMakeLists.txt" if tag == "cmake" else "meson.build")).write_text(block.code)
    for name in (tag, "ninja"):
        tool(name)
    if not (Path(sys.executable).parent / "python").exists():
        missing(f"no `python` next to {sys.executable} for the page's commands")
    commands = build_commands("docs/c.md", tag)
    assert any("python -c" in c for c, _ in commands), "the commands call the module they built"
    for command, prints in commands:
        out = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=ENV, capture_output=True, text=True)
        assert out.returncode == 0, f"{command}\n{out.stdout}{out.stderr}"
        if "python -c" in command:
            assert out.stdout.strip() == prints, out.stdout
