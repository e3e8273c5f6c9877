"""Runs code against the stand-in libcuda (libcuda.c beside this file) in a subprocess.

custream opens libcuda once per process, and this test process has none, so each check runs
in a fresh interpreter with ``CUSTREAM_LIBCUDA`` naming the stand-in; ``standin`` in that
interpreter is the library itself (ctypes), for its counters, and ``tests/`` is on its path.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def standin_lib(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("needs a C compiler to build the stand-in libcuda")
    lib = tmp_path_factory.mktemp("standin") / "libcuda-standin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(HERE / "libcuda.c")], check=True)
    return lib


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
