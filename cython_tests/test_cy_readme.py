"""The README's Cython and C/C++ examples compile as written, against the installed custream,
and do what their comments say. The blocks are taken from the "## Cython" and
"## C and C++" sections by their info string: ```cython (mymod.pyx), ```python setup.py,
```c (mymod.c), ```cpp, ```cmake (CMakeLists.txt) and ```meson (meson.build)."""

import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

import custream
from _cy_build import compiler
from _cy_downstream import check_in, cmake_build, meson_build, setuptools_build

README = Path(__file__).resolve().parent.parent / "README.md"

# What every build of the examples must do; mymod.handle_of exists in both examples.
CHECK = """
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


def section(title: str) -> dict[str, str]:
    text = README.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README.md has no '## {title}' section"
    found: dict[str, str] = {}
    for info, code in re.findall(r"^```([^\n`]*)\n(.*?)^```$", m.group(1), re.S | re.M):
        assert info not in found, f"two ```{info} blocks in '## {title}'"
        found[info] = code
    return found


CYTHON = section("Cython")
C = section("C and C++")


def test_the_sections_have_their_examples():
    assert set(CYTHON) == {"cython", "python setup.py"}
    assert set(C) == {"c", "cpp", "cmake", "meson"}


def test_cython_example_builds_with_its_setup_py(tmp_path):
    pytest.importorskip("Cython")
    (tmp_path / "mymod.pyx").write_text(CYTHON["cython"])
    (tmp_path / "setup.py").write_text(CYTHON["python setup.py"])
    setuptools_build(tmp_path)
    check_in(tmp_path, CHECK + """
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
""")


def _compile(source: Path, out: Path, cplus: bool, shared: bool) -> None:
    include = [sysconfig.get_paths()["include"], custream.get_include()]
    argv = [*compiler(cplus), "-fPIC", "-Wall", "-Wextra", "-Werror", *(f"-I{d}" for d in include)]
    argv += ["-shared"] if shared else ["-c"]
    proc = subprocess.run([*argv, "-o", str(out), str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_c_example_compiles_and_runs(tmp_path):
    (tmp_path / "mymod.c").write_text(C["c"])
    _compile(tmp_path / "mymod.c", tmp_path / ("mymod" + sysconfig.get_config_var("EXT_SUFFIX")), False, True)
    check_in(tmp_path, CHECK)


def test_cpp_example_compiles_and_its_deleter_runs_once(tmp_path):
    # The README's C++ code, plus the destructor it leaves out (counting) and a module.
    harness = C["cpp"] + """
static int destroyed = 0;
OwnedStream::~OwnedStream() { ++destroyed; }
static PyObject *make(PyObject *, PyObject *arg) {
    void *h = PyLong_AsVoidPtr(arg);
    if (h == NULL && PyErr_Occurred()) return NULL;
    return to_python(new OwnedStream{static_cast<custream_handle_t>(h)}, 0);
}
static PyObject *count(PyObject *, PyObject *) { return PyLong_FromLong(destroyed); }
static PyMethodDef methods[] = {{"make", make, METH_O, NULL}, {"destroyed", count, METH_NOARGS, NULL},
                                {NULL, NULL, 0, NULL}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "owned", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_owned(void) { return custream_import() < 0 ? NULL : PyModule_Create(&module); }
"""
    (tmp_path / "owned.cpp").write_text(harness)
    _compile(tmp_path / "owned.cpp", tmp_path / ("owned" + sysconfig.get_config_var("EXT_SUFFIX")), True, True)
    check_in(tmp_path, """
    import owned
    s = owned.make(0x3000)
    assert s.handle == 0x3000 and s.device == 0 and owned.destroyed() == 0
    s.close()
    assert owned.destroyed() == 1
    del s
    t = owned.make(0x3100)
    del t
    assert owned.destroyed() == 2
""")


def test_cmake_example_builds(tmp_path):
    (tmp_path / "mymod.c").write_text(C["c"])
    (tmp_path / "CMakeLists.txt").write_text(C["cmake"])
    check_in(cmake_build(tmp_path), CHECK)


def test_meson_example_builds(tmp_path):
    (tmp_path / "mymod.c").write_text(C["c"])
    (tmp_path / "meson.build").write_text(C["meson"])
    check_in(meson_build(tmp_path), CHECK)
