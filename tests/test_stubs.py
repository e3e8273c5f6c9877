"""The type stubs agree with the running extension (mypy's stubtest) and ship in the wheel."""

import os
import subprocess
import sys

import pytest

import custream

HERE = os.path.dirname(__file__)


def test_stub_and_marker_files_are_installed():
    pkg = custream.get_include()
    assert os.path.isfile(os.path.join(pkg, "_custream.pyi"))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))


def test_stubtest_finds_no_difference(tmp_path):
    pytest.importorskip("mypy")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nignore_missing_imports = True\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "custream", "--mypy-config-file", str(config),
         "--allowlist", os.path.join(HERE, "stubtest-allowlist.txt")],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
