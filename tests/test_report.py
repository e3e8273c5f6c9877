"""``python -m custream``: --help, and --json, the machine-readable report for bug reports.

The human report's wording is checked where its cases are made (test_no_driver.py,
test_old_driver.py); here, the options, the JSON's shape, and what both reports say to do
about a missing driver, on any machine.
"""

import importlib.metadata
import json
import os
import platform
import subprocess
import sys

import pytest

import custream
import standin
from standin import standin_lib  # noqa: F401  (a fixture)


def run(*args, code=None, env=None):
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "custream", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def test_help_names_the_options():
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert "usage: python -m custream" in out.stdout
    assert "--json" in out.stdout and "Exit status" in out.stdout


def test_version_option():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"custream {custream.__version__}"


def test_unknown_option_is_refused():
    out = run("--jsn")
    assert out.returncode == 2 and "unrecognized arguments: --jsn" in out.stderr


def test_json_report_has_every_part():
    out = run("--json")
    assert out.stderr == ""
    data = json.loads(out.stdout)  # nothing but the JSON on stdout
    assert set(data) == {"custream", "python", "platform", "driver", "devices", "peers", "round_trip", "checks", "error",
                         "ok"}
    assert data["error"] is None
    assert data["custream"] == {"version": importlib.metadata.version("custream"), "abi_version": custream.ABI_VERSION,
                                "include_dir": custream.get_include()}
    assert data["python"]["version"] == platform.python_version()
    assert data["python"]["executable"] == sys.executable
    assert data["platform"]["machine"] == platform.machine()
    assert {p["name"] for p in data["peers"]} == {"cuda.core", "CuPy", "PyTorch", "numba-cuda", "rmm"}
    for peer in data["peers"]:
        assert set(peer) == {"name", "module", "distribution", "version"}
        assert (peer["distribution"] is None) == (peer["version"] is None)
    assert data["checks"] and all(set(c) == {"check", "ok", "detail"} for c in data["checks"])
    assert data["ok"] == all(c["ok"] for c in data["checks"])
    assert out.returncode == (0 if data["ok"] else 1)
    if custream.is_available():
        assert data["driver"]["usable"] and data["driver"]["version"] == custream.driver_version()
        assert len(data["devices"]) == custream.device_count()
        assert data["round_trip"] == "live streams with the peers"
    else:
        assert data["driver"]["usable"] is False and data["driver"]["problem"]
        assert data["devices"] == []
        assert data["round_trip"] == "a wrapped handle, no driver call"


def test_json_report_without_a_driver_passes_the_wrapped_round_trip():
    if custream.is_available():
        pytest.skip("a CUDA driver is present: the live round trip is the GPU suite's")
    data = json.loads(run("--json").stdout)
    assert data["ok"] is True
    assert data["driver"]["version"] is None
    assert "libcuda.so.1" in data["driver"]["looked_for"]
    assert [c["check"] for c in data["checks"]][:2] == ["as_stream(producer) keeps the handle",
                                                        "__cuda_stream__() gives it back"]


def json_with_round_trip(body):
    """The --json report (exit status 1 expected) with the round trip replaced by ``body``."""
    code = (
        "import sys, custream.__main__ as m\n"
        "def trip():\n"
        f"    {body}\n"
        "m.round_trip_with_gpu = m.round_trip_without_gpu = trip\n"
        "sys.exit(m.main(['--json']))\n"
    )
    out = run(code=code)
    assert out.returncode == 1, out.stderr
    return json.loads(out.stdout)


def test_a_failed_check_fails_the_json_report():
    data = json_with_round_trip("return m._check('made to fail', False, 'on purpose')")
    assert data["ok"] is False and data["error"] is None
    assert {"check": "made to fail", "ok": False, "detail": "on purpose"} in data["checks"]


def test_an_exception_still_gives_a_json_report():
    data = json_with_round_trip("raise RuntimeError('made to fail')")
    assert data["ok"] is False and data["error"] == "RuntimeError: made to fail"


def test_both_reports_say_how_to_fix_a_missing_driver(tmp_path):
    # CUSTREAM_LIBCUDA naming a file that is not there: no driver, on any machine.
    missing = tmp_path / "no-such-libcuda.so.1"
    env = {**os.environ, "CUSTREAM_LIBCUDA": str(missing)}
    fix = "install the NVIDIA driver, put the directory holding it on the library path, or name it in CUSTREAM_LIBCUDA"
    text = run(env=env)
    assert text.returncode == 0 and text.stderr == "", text.stdout + text.stderr
    lines = text.stdout.splitlines()
    driver = lines[lines.index("CUDA driver") + 1:][:3]
    assert driver == ["  none: no CUDA driver library on this machine", f"  looked for: {missing}", f"  to fix: {fix}"]
    data = json.loads(run("--json", env=env).stdout)
    assert data["driver"]["problem"].endswith("; " + fix), data["driver"]


def test_the_gpu_report_makes_a_stream_in_a_green_context(standin_lib):
    # The stand-in driver (one device of 132 SMs, green contexts in groups of 8) as the GPU.
    out = standin.run(standin_lib, """
        import json, subprocess
        p = subprocess.run([sys.executable, "-m", "custream", "--json"], capture_output=True, text=True)
        checks = {c["check"]: c for c in json.loads(p.stdout)["checks"]}
        print(checks["a stream in a green context"])
    """)
    assert "'ok': True" in out and "8 of the device's 132 SMs" in out, out


def test_the_report_without_a_gpu_lists_the_peer_libraries(tmp_path):
    # The peers --help promises: without a GPU none is tried, and the report says which are
    # installed. A fake peer (a distribution and a module named as CuPy's) shows as installed.
    env = {**os.environ, "CUSTREAM_LIBCUDA": str(tmp_path / "no-such-libcuda.so.1")}
    fake = tmp_path / "site"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text("")
    (fake / "cupy-9.9.dist-info").mkdir()
    (fake / "cupy-9.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: cupy\nVersion: 9.9\n")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fake), env.get("PYTHONPATH")]))
    text = run(env=env)
    assert text.returncode == 0 and text.stderr == "", text.stdout + text.stderr
    lines = text.stdout.splitlines()
    start = lines.index("Peer libraries (their round trip with custream needs a GPU, so none is tried here)")
    peers = lines[start + 1:start + 6]
    assert peers[1] == "  [ -- ] CuPy: cupy 9.9 installed", peers
    for line, name in zip(peers, ("cuda.core", "CuPy", "PyTorch", "numba-cuda", "rmm")):
        assert line.startswith(f"  [ -- ] {name}: "), peers
