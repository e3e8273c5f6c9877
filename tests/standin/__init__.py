"""Stand-in libcuda builds for CPU tests.

Two models live beside this file: libcuda.c (custream's own bookkeeping: retains, pushes,
live streams) and capture.c (host functions and graph capture: a worker thread, capture
state). Either is built with every other entry point custream resolves (src/driver/libcuda.rs)
generated as a function returning CUDA_SUCCESS, so a stand-in keeps loading as the table
grows.

custream opens libcuda once per process, and the test process has none: a test marked
``@pytest.mark.standin(model)`` runs in a pytest process of its own with the stand-in as its
driver (tests/conftest.py). ``script`` runs source in a fresh interpreter instead, for the
few checks whose point is the interpreter itself (its exit, a fork's exit).
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


PRELUDE = f"""
import ctypes, faulthandler, os, sys
def _watch():
    faulthandler.dump_traceback_later(int(os.environ["STANDIN_SCRIPT_TIMEOUT"]), exit=True)
# A forked child has no watchdog thread (cancelling one there would hang): the parent's is
# stopped across the fork and started again.
os.register_at_fork(before=faulthandler.cancel_dump_traceback_later, after_in_parent=_watch)
_watch()
sys.path.insert(0, {str(HERE.parent)!r})
import custream
standin = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
"""


def script(lib, code, timeout=60, check_exit=True):
    """Run `code` (after PRELUDE: custream imported, `standin` the stand-in through ctypes,
    tests/ on the path) in a fresh interpreter with the stand-in `lib` as its driver. A hang
    dumps every thread's stack and fails; so does a Rust panic or a fatal Python error in its
    stderr, and (with `check_exit`) a non-zero exit. Returns the CompletedProcess."""
    env = dict(os.environ, CUSTREAM_LIBCUDA=str(lib), STANDIN_SCRIPT_TIMEOUT=str(timeout))
    source = PRELUDE + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=env,
                         timeout=timeout + 30)
    assert "panicked" not in out.stderr and "Fatal Python error" not in out.stderr, out.stderr
    assert "Timeout (" not in out.stderr, out.stderr
    if check_exit:
        assert out.returncode == 0, out.stdout + out.stderr
    return out
