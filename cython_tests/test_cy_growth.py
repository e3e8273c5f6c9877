"""The growth rule, run for real: the consumers this session compiled against today's
custream.h and .pxd (C, C++, the limited API, the opaque struct, Cython, and pyo3-custream's
test extension where it is installed) on a custream built with the `abi-growth-test` feature,
whose Stream object and C-API table are 64 bytes larger than the header says, as a later
release's would be. They import, and every field and entry they know is where they expect it.

The grown custream is a debug build of this repository (cargo), laid beside a copy of the
installed package's Python files, in a subprocess of its own.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import custream

ROOT = Path(__file__).resolve().parent.parent
GROWTH = 64
# A free-threaded CPython's headers refuse the limited API (abi3) until abi3t.
LIMITED_API = not sysconfig.get_config_var("Py_GIL_DISABLED")


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Path:
    """A folder holding a `custream` package whose extension is the grown build."""
    if not LIMITED_API:
        pytest.skip("the grown build is an abi3 extension, which a free-threaded interpreter does not load")
    cargo = shutil.which("cargo")
    if cargo is None:
        if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
            pytest.fail("cargo is needed to build the grown custream (CUSTREAM_REQUIRE_BUILD_TOOLS is set)")
        pytest.skip("cargo not found: the grown custream is built from this repository")
    host = re.search(r"^host: (\S+)", subprocess.run(["rustc", "-vV"], capture_output=True, text=True).stdout, re.M)
    if host and not host.group(1).startswith(platform.machine()):
        # An emulated run (scripts/sid/test-aarch64.sh): the native cargo builds for its own host.
        pytest.skip(f"cargo builds for {host.group(1)}, not for this {platform.machine()} interpreter")
    env = dict(os.environ)
    # Its own target folder, and no interpreter asked (abi3): every Python's run reuses it.
    # An extension module (as maturin builds it): libpython is not linked.
    env.update(CARGO_TARGET_DIR=str(ROOT / "target" / "abi-growth"), PYO3_NO_PYTHON="1",
               PYO3_BUILD_EXTENSION_MODULE="1")
    proc = subprocess.run(
        [cargo, "build", "--quiet", "--lib", "-p", "custream", "--features", "abi-growth-test",
         "--message-format=json"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    libs = [
        f
        for line in proc.stdout.splitlines()
        if line.startswith("{")
        for msg in [json.loads(line)]
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "custream"
        for f in msg["filenames"]
        if f.endswith(".so")
    ]
    assert len(libs) == 1, proc.stdout[-2000:]
    folder = tmp_path_factory.mktemp("grown")
    installed = Path(custream.__file__).parent
    shutil.copytree(installed, folder / "custream", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(libs[0], folder / "custream" / "_custream.abi3.so")
    return folder


def run_on_grown(grown: Path, built: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(grown), str(built)]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_consumers_built_against_todays_header_run_on_a_grown_custream(grown, built):
    base = custream.Stream.__basicsize__
    api_size = __import__("c_consumer").abi()["api_size"]
    out = run_on_grown(grown, built, f"""
        import importlib, custream
        assert custream.__file__.startswith({str(grown)!r}), custream.__file__
        assert custream.Stream.__basicsize__ == {base} + {GROWTH}, custream.Stream.__basicsize__

        owner = object()
        s = custream.Stream.from_handle(0x7F0012345000, device=3, owner=owner)
        want = {{"handle": 0x7F0012345000, "flags": 0, "device": 3, "priority": 0, "closed": False}}
        for name in ("c_consumer", "c_consumer_cpp", *["c_consumer_abi3"] * {LIMITED_API}, "c_consumer_opaque"):
            c = importlib.import_module(name)  # custream_import() accepts the larger table
            abi = c.abi()
            assert (abi["api_size"], abi["stream_size"]) == ({api_size} + {GROWTH}, {base} + {GROWTH}), abi
            assert c.offset_fields(s) == want, (name, c.offset_fields(s))
            if name != "c_consumer_opaque":
                assert c.fields(s) == want, (name, c.fields(s))
            assert c.handle_checked(s) == s.handle and c.check(s) == 1
            w = c.from_handle(0x5000, 1, owner)
            assert type(w) is custream.Stream and w.handle == 0x5000 and w.owner is owner and w.device == 1
            assert c.default_stream(2) is custream.PER_THREAD_DEFAULT_STREAM
        cy = importlib.import_module("consumer")  # check_size ignore: a larger Stream imports
        assert cy.fields(s) == {{k: want[k] for k in ("handle", "flags", "device", "priority")}}
        assert cy.offset_fields(s) == want
        assert importlib.import_module("drift_ok").handle(s) == s.handle

        c = importlib.import_module("c_consumer")
        d = c.from_handle_with_deleter(0x8000, -1, 3)
        d.close()
        assert c.deleter_record(3) == (1, 0x8000), c.deleter_record(3)
        s.close()
        assert c.fields(s)["closed"] and c.offset_fields(s)["closed"] and cy.offset_fields(s)["closed"]
        try:
            import custream_rust_ext as rx
        except ImportError:
            print("ok without the Rust test extension")
        else:
            t = custream.Stream.from_handle(0x9000)
            assert rx.handle_of(t) == 0x9000
            print("ok with the Rust test extension")
    """)
    assert out.startswith("ok"), out
