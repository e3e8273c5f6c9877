"""Stand-in libcuda builds for CPU tests, and running code against one in a subprocess.

Two models live beside this file: libcuda.c (custream's own bookkeeping: retains, pushes,
live streams) and capture.c (host functions and graph capture: a worker thread, capture
state). Either is built with every other entry point custream resolves (src/driver/libcuda.rs)
generated as a function returning CUDA_SUCCESS, so a stand-in keeps loading as the table
grows.

custream opens libcuda once per process, and this test process has none, so each check runs
in a fresh interpreter with ``CUSTREAM_LIBCUDA`` naming the stand-in; ``standin`` in that
interpreter is the library itself (ctypes), for its counters, and ``tests/`` is on its path.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def entry_points():
    """Every entry point custream resolves, read from src/driver/libcuda.rs (skip without it)."""
    src = HERE.parent.parent / "src" / "driver" / "libcuda.rs"
    if not src.is_file():
        pytest.skip("needs the crate's sources (src/driver/libcuda.rs) next to the tests")
    tables = re.findall(r"entry_points!\(\w+ \{(.*?)\}\);", src.read_text(), re.S)
    return [name for table in tables for name in re.findall(r"^\s*(cu\w+)\(", table, re.M)]


def compile_library(source: str, lib, *flags: str):
    """C `source` compiled as the shared library `lib` (a path); skip without a C compiler."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("needs a C compiler to build a stand-in libcuda")
    src = lib.with_name(lib.name + ".c")
    src.write_text(source)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", *flags, "-o", str(lib), str(src), "-lpthread"], check=True)
    return lib


def build(model, folder, *flags, omit=(), also=()):
    """`model` (a file beside this one) built as folder/libcuda.so.1 with the C compiler's
    `flags`, completed with stubs for the entry points it does not define, except `omit`
    (a driver that lacks them), and for `also` (those another caller of it resolves)."""
    source = (HERE / model).read_text()
    defined = set(re.findall(r"^CUresult (cu\w+)\(", source, re.M))
    wanted = dict.fromkeys([*entry_points(), *also])
    stubs = "".join(f"CUresult {n}() {{ return 0; }}\n" for n in wanted if n not in defined | set(omit))
    return compile_library(source + "\n/* entry points not modelled */\n" + stubs, folder / "libcuda.so.1", *flags)


@pytest.fixture(scope="session")
def standin_lib(tmp_path_factory):
    return build("libcuda.c", tmp_path_factory.mktemp("standin"))


PRELUDE = f"""
import ctypes, os, sys
sys.path.insert(0, {str(HERE.parent)!r})
import custream
standin = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
"""


def run(lib, code):
    """Run `code` (after PRELUDE) with the stand-in as the driver; fail with its output."""
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(lib))
    source = PRELUDE + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "panicked" not in out.stderr, out.stderr
    return out.stdout
