"""Import time, measured in fresh interpreters.

Two figures per statement, each the median over runs:
- `ms`: what `python -X importtime -c STMT` reports for the modules STMT imports (the
  cumulative time of every top-level import that a bare `python -c pass` does not make);
  immune to the noise of the interpreter's own start.
- `wall_ms`: the wall time of the same runs minus that of `python -X importtime -c pass`,
  runs of the two alternating so that drift in the machine's load hits both alike.
One untimed run first fills the OS page cache and writes any missing .pyc.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"^import time:\s+(\d+)\s*\|\s*(\d+)\s*\|( *)(\S+)")


def _run(stmt: str, cwd: str) -> tuple[float, dict[str, int]]:
    """Wall ms of `python -X importtime -c stmt`, and its top-level imports' cumulative µs."""
    cmd = [sys.executable, "-X", "importtime", "-c", stmt]
    t0 = time.perf_counter_ns()
    p = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True)
    wall = (time.perf_counter_ns() - t0) / 1e6
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise RuntimeError(last)
    top: dict[str, int] = {}
    for ln in p.stderr.splitlines():
        m = LINE.match(ln)
        if m and len(m.group(3)) == 1:  # one space: a top-level import
            top[m.group(4)] = top.get(m.group(4), 0) + int(m.group(2))
    return wall, top


def measure(stmts: dict[str, str], *, runs: int = 15, budget_s: float = 20.0) -> dict:
    """{name: figures or {"na": reason}} per `python -c` statement, and "baseline".
    Each statement gets at least 3 runs of each kind and at most `runs`, within `budget_s`."""
    cwd = tempfile.mkdtemp(prefix="custream-bench-import-")  # no stray package on sys.path
    out: dict = {}
    base: list[float] = []
    _, startup = _run("pass", cwd)
    for name, stmt in stmts.items():
        try:
            _run(stmt, cwd)
        except RuntimeError as e:
            out[name] = {"na": f"`{stmt}` failed: {e}"}
            continue
        walls: list[float] = []
        cumul: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(walls) < runs and (len(walls) < 3 or time.perf_counter() < deadline):
            base.append(_run("pass", cwd)[0])
            wall, top = _run(stmt, cwd)
            walls.append(wall)
            cumul.append(sum(us for mod, us in top.items() if mod not in startup) / 1000)
        out[name] = {"ms": statistics.median(cumul), "min_ms": min(cumul), "wall_raw_ms": statistics.median(walls),
                     "runs": len(walls), "stmt": stmt, "how": "python -X importtime, cumulative"}
    if not base:
        base = [_run("pass", cwd)[0] for _ in range(3)]
    baseline = statistics.median(base)
    for entry in out.values():
        if "wall_raw_ms" in entry:
            entry["wall_ms"] = entry["wall_raw_ms"] - baseline
    out["baseline"] = {"ms": baseline, "runs": len(base), "stmt": "pass"}
    os.rmdir(cwd)
    return out
