"""benches/run.py runs end to end on a machine without a GPU and reports every operation.

A smoke test only: it checks the shape of the JSON, never a timing (figures from a shared
CI machine mean nothing, and timing assertions do not belong in tests).
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCHES = ROOT / "benches"


def _bench_ops():
    spec = importlib.util.spec_from_file_location("bench_ops", BENCHES / "ops.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_ops"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_cpu_quick_run_reports_every_operation(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(BENCHES / "run.py"), "--cpu", "--quick", "--json", str(out)]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    results = json.loads(out.read_text())
    ops = _bench_ops()

    assert list(results["operations"]) == list(ops.OPS)
    libs = results["libraries"]
    assert libs[0] == "raw" and libs[-1] == "custream"
    for key, op in results["operations"].items():
        assert set(op["results"]) >= set(libs), key
        assert {"title", "unit", "target", "status", "floors"} <= set(op), key
    for key in ("cuda_stream", "handle_int", "wrap_protocol", "wrap_int", "cython_handle_read"):
        mine = results["operations"][key]["results"]["custream"]
        assert isinstance(mine.get("ns"), float), (key, mine)
    assert isinstance(results["operations"]["import"]["results"]["custream"].get("ms"), float)
    for key in ("create_destroy", "synchronize", "query"):
        assert results["operations"][key]["status"] == "needs GPU"
    if shutil.which(os.environ.get("CC", "gcc")):  # the least getset (floor_ext.c) needs no device
        # timed in turn with s.handle in custream's own worker: a ratio per round, and their median
        floor = results["operations"]["handle_int"]["floors"]
        assert floor[0]["lib"] == "least binding" and floor[0]["stmt"] == "fs.handle" and floor[0]["ns"] > 0, floor
        assert len(floor[0]["ratios"]) == results["settings"]["rounds"] and floor[0]["ratio_median"] > 0, floor
        assert "handle as Python int: least binding (floor_ext.c), in turn in custream's worker, fs.handle" in p.stdout
    assert results["machine"]["versions"]["custream"]
    assert results["machine"]["python"]
    for line in ("s.__cuda_stream__()", "wrap a raw int handle", "Cython handle read"):
        assert line in p.stdout


def _report():
    sys.path.insert(0, str(BENCHES))
    try:
        import report
    finally:
        sys.path.remove(str(BENCHES))
    return report


def test_the_once_a_run_rows_get_their_targets_verdict():
    """capture.py's and waits.py's rows, in the printed table and the page's: a ratio (or CPU
    ms) at its target passes, one above it misses, a row without a target gets no verdict, and
    a row that failed is reported with its error."""
    report = _report()
    results = json.loads((BENCHES / "results" / "h200.json").read_text())
    results["capture"] = {
        "write_value + wait_value": {"ns": 2300.0, "vs_ns": 2000.0, "ratio": 1.15, "vs": "C", "target": 1.15},
        "  least binding fwrite": {"ns": 2100.0, "vs_ns": 2000.0, "ratio": 1.05, "vs": "C", "target": None},
        "IPC rows": {"error": "RuntimeError: no torch IPC event to compare with"}}
    results["waits"] = {"await s.record(), 5 ms kernel": {"ns": 211705.0, "ratio": 7.32, "target": 1.5},
                        "CPU ms in 1 s with 1,000 awaits pending": {"ns": 3e6, "unit": "ms", "target_ms": 20}}
    for md in (False, True):
        text = report.render(results, md).replace("\\_", "_")  # the page's Markdown escapes _
        line = {name: [ln for ln in text.splitlines() if name in ln] for name in
                ("write_value + wait_value", "least binding fwrite", "await s.record(), 5 ms kernel",
                 "CPU ms in 1 s with 1,000 awaits pending")}
        assert all(len(found) == 1 for found in line.values()), (md, line)
        assert "pass" in line["write_value + wait_value"][0], md
        assert "MISS" in line["await s.record(), 5 ms kernel"][0], md
        assert "pass" in line["CPU ms in 1 s with 1,000 awaits pending"][0], md
        assert not {"pass", "MISS"} & set(line["least binding fwrite"][0].replace("|", " ").split()), md
        assert "no torch IPC event to compare with" in text, md


def test_the_page_shows_the_newest_gpu_run(tmp_path):
    """The page's table comes from the newest stored GPU run, whatever the files are called
    and whatever CPU run is newer."""
    report = _report()
    base = json.loads((BENCHES / "results" / "h200.json").read_text())
    for name, mode, date, gpu in (("a.json", "gpu", "2026-12-07 10:00:00 UTC", "newest"),
                                  ("b.json", "gpu", "2026-12-01 10:00:00 UTC", "older"),
                                  ("c.json", "cpu", "2026-12-08 10:00:00 UTC", None)):
        run = {**base, "mode": mode, "machine": {**base["machine"], "date": date, "gpu": gpu}}
        (tmp_path / name).write_text(json.dumps(run))
    assert report.newest(sorted(tmp_path.glob("*.json")))["machine"]["gpu"] == "newest"


def test_the_benchmarks_page_holds_the_table_of_the_stored_runs():
    """docs/benchmarks.md's table is what benches/report.py writes from benches/results/*.json,
    so the page and the stored figures cannot drift apart."""
    report = _report()
    text = report.PAGE.read_text()
    assert report.page(text) == text, "docs/benchmarks.md's table is stale: run python3 benches/report.py"


def test_paired_timing_takes_the_ratio_within_each_pair():
    """timing.medians_and_ratios: the two runners go in turn, first one then the other first,
    and the ratio is the median of the per-pair ratios. Runners here report made-up elapsed times
    (no clock), so the statistic is checked exactly: a drift that moves both alike between
    pairs leaves the ratio alone."""
    spec = importlib.util.spec_from_file_location("bench_timing", BENCHES / "timing.py")
    timing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(timing)
    calls = []
    drift = [1.0]

    def runner(name, per_call):
        def run(n):
            calls.append(name)
            drift[0] *= 1.05  # the machine slows down over the run, for both
            return per_call * n * drift[0] * 1e6  # ns: one repeat is long enough at once

        return run

    _, ratio = timing.medians_and_ratios([runner("mine", 3.0), runner("theirs", 2.0)], repeats=6, target_ms=1.0,
                                         budget_s=1.0)
    assert len(calls) == 2 * 2 + 12  # each runner sized (an untimed call, then one), then 6 pairs
    timed = calls[-12:]
    assert [timed[i:i + 2] for i in range(0, 12, 2)] == [["mine", "theirs"], ["theirs", "mine"]] * 3
    # Within a pair the later runner saw 5 % more drift: ratios 1.5/1.05 and 1.5*1.05, alternately.
    assert abs(ratio(0, 1) - 1.5 * (1.05 + 1 / 1.05) / 2) < 1e-9


def test_rounds_summary_keeps_the_floor_binding_beside_custream():
    """report.assemble: per ratio-to-raw operation, custream's ratio per round and the least
    binding's (floor_ext.c), each with its median over rounds."""
    sys.path.insert(0, str(BENCHES))
    try:
        import report
    finally:
        sys.path.remove(str(BENCHES))

    def pair(ns, raw):
        return {"ops": {"query": {"ns": ns, "raw_ns": raw, "ratio": ns / raw, "stmt": "fquery(H)"}}}

    rounds = {"custream": [pair(130.0, 100.0), pair(260.0, 200.0), pair(140.0, 100.0)],
              "least binding": [pair(110.0, 100.0), pair(240.0, 200.0)]}
    results = report.assemble("gpu", rounds, {})
    mine, q = results["operations"]["query"]["results"]["custream"], results["paired"]["query"]
    assert mine["ratios"] == [1.3, 1.3, 1.4] and mine["ratio"] == 1.3
    assert q["floor"]["stmt"] == "fquery(H)"
    assert q["floor"]["ratios"] == [1.1, 1.2] and abs(q["floor"]["ratio_median"] - 1.15) < 1e-12


def test_a_row_timed_in_turn_with_its_reference_row_takes_its_verdict_from_the_pairs():
    """ops.PAIRED: `pool.lease()`'s target is 3x `pool.get()`. Its two medians, taken at
    different moments, say 3.2x (a MISS), while timed in turn each round it was 2.9x and 2.8x:
    the verdict is the median ratio per pair, and the table prints each round's."""
    sys.path.insert(0, str(BENCHES))
    try:
        import report
    finally:
        sys.path.remove(str(BENCHES))

    def round_(lease, get, ratio):
        return {"ops": {"pool_get": {"ns": get, "stmt": "pool.get()"},
                        "pool_lease": {"ns": lease, "stmt": "with pool.lease(): pass",
                                       "paired": {"stmt": "pool.get()", "ratio": ratio, "floor_ratio": ratio - 0.5}}}}

    results = report.assemble("gpu", {"custream": [round_(160.0, 50.0, 2.9), round_(160.0, 50.0, 2.8)]}, {})
    row = results["operations"]["pool_lease"]
    assert row["compared_to"]["ns"] == 50.0 and row["compared_to"]["in_turn"]["ratios"] == [2.9, 2.8]
    assert abs(row["compared_to"]["in_turn"]["ratio"] - 2.85) < 1e-12 and row["status"] == "pass"
    results["machine"] = {}
    assert ("pool.lease() enter + exit: in turn with pool.get(), per round: 2.90 2.80  median 2.85x; "
            "<= 3x pool.get(); the least binding's, the same way: median 2.35x") in report.render(results)
    rounds = {"custream": [round_(160.0, 50.0, 3.1)]}
    assert report.assemble("gpu", rounds, {})["operations"]["pool_lease"]["status"] == "MISS"


def test_paired_peers_give_the_ratio_rows_their_best_peer():
    """Every library is timed against raw in rounds of its own fresh workers and summarized
    as custream is, a peer that fails is reported, and the '/best' of a ratio row compares
    the rounds' median ratios; each figure is the median of the rounds, not one process's."""
    sys.path.insert(0, str(BENCHES))
    try:
        import ops
        import report
    finally:
        sys.path.remove(str(BENCHES))

    def pair(ns, raw, stmt="s.query()"):
        return {"ops": {"query": {"ns": ns, "raw_ns": raw, "ratio": ns / raw, "stmt": stmt}}}

    rounds = {"custream": [pair(125.0, 100.0), pair(250.0, 200.0), pair(130.0, 100.0)],
              "CuPy": [pair(150.0, 100.0, "s.done"), pair(280.0, 200.0, "s.done"), pair(160.0, 100.0, "s.done")],
              "rmm": [{"error": "ImportError: no rmm"}]}
    results = report.assemble("gpu", rounds, {})
    cupy = results["operations"]["query"]["results"]["CuPy"]
    assert cupy["stmt"] == "s.done" and cupy["ratios"] == [1.5, 1.4, 1.6] and cupy["ratio"] == 1.5
    assert results["lib_errors"] == {"rmm": "ImportError: no rmm"}

    q = results["operations"]["query"]
    assert q["results"]["raw"]["ns"] == 100.0, "the raw column: the C loop's median over the rounds"
    assert q["ratio_raw"] == 1.25 and q["status"] == ("pass" if 1.25 <= ops.OPS["query"].raw else "MISS")
    assert q["best_peer"] == "CuPy" and q["results"]["CuPy"]["ratio"] == 1.5
    assert abs(q["ratio_best_peer"] - 1.25 / 1.5) < 1e-12
    assert q["results"]["custream"]["ns"] == 130.0, "the median of the rounds"
    head, *rows = report.op_rows(results)  # a column a library: its figure and its ratio to the C loop
    row = dict(zip(head, next(r for r in rows if r[0] == "query, idle stream")))
    assert (row["raw"], row["CuPy"], row["custream"], row["rmm"]) == ("100", "160 (1.50x)", "130 (1.25x)", "n/a"), row
    assert row["/best peer"] == "0.83x CuPy", row
    text = report.render(results)
    assert re.search(r"^query, idle stream +100 .* 160 \(1\.50x\) .* 130 \(1\.25x\) +0\.83x CuPy ", text, re.M), text
    assert "rmm: ImportError: no rmm" in text
