"""benches/cpp_call.py measures and reports, here on the tests' nanobind module (the script
builds its own; the build path is the one every test here uses). Timings are not asserted."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benches" / "cpp_call.py"


def test_the_call_benchmark_runs(cpp_built):
    from _cpp_tools import nanobind, need

    need(nanobind(), "nanobind")
    ext = cpp_built["nb_ext"]
    if isinstance(ext, tuple):
        need(*ext)
    spec = importlib.util.spec_from_file_location("cpp_call", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.measure(ext, number=200, rounds=2)
    assert set(result["ns_per_call"]) >= {bench.BASE, bench.OURS, "stream_ref(__cuda_stream__ object)"}
    assert result["ratio_to_uintptr"][bench.BASE] == 1.0
    assert all(v > 0 for v in result["ns_per_call"].values())
    text = bench.report(result)
    assert "custream Stream:" in text and "goal <= 1.3x" in text
