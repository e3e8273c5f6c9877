#!/usr/bin/env python3
"""custream beside the raw driver and the peers, per operation of the target table in
docs/design.md; benches/README.md says what is measured and how.

    python3 benches/run.py                                   # the CPU part: no driver needed
    python3 benches/run.py --gpu --json bench.json --plot bench.png
    python3 benches/run.py --from-json benches/results/h200.json   # re-print (and --plot) a run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ops  # noqa: E402
import report  # noqa: E402


def worker(lib: str, args: list[str], quick: bool, timeout: float) -> dict:
    print(f"{lib}{' (paired)' if '--paired' in args else ''} ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), lib, *args] + ["--quick"] * quick,
                           check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": f"worker exited with status {p.returncode}: " + " | ".join((p.stdout + p.stderr).strip().splitlines()[-6:])}
    return json.loads(lines[-1])


def build(source: str, name: str, *flags: str) -> str | dict:
    """A C file of benches/ compiled as a shared object: its path, or {"error": ...}."""
    out, cc = os.path.join(tempfile.mkdtemp(prefix="custream-bench-"), name), os.environ.get("CC", "gcc")
    p = subprocess.run([cc, "-O2", "-shared", "-fPIC", *flags, "-o", out, os.path.join(HERE, source), "-ldl"],
                       check=False, capture_output=True, text=True)
    return out if p.returncode == 0 else {"error": f"{cc} failed: {p.stderr.strip()[-400:]}"}


IMPORT_LINE = re.compile(r"^import time:\s+\d+\s*\|\s*(\d+)\s*\| (\S+)")  # cumulative µs of a top-level import


def import_times(stmts: dict[str, str], runs: int, budget_s: float) -> dict:
    """Per library, the cumulative time `python -X importtime -c STMT` reports for the top-level
    imports STMT adds to a bare interpreter's: the median over fresh processes, in ms."""
    cwd = tempfile.mkdtemp(prefix="custream-bench-import-")  # no stray package on sys.path

    def top_level(stmt: str) -> dict[str, int]:
        p = subprocess.run([sys.executable, "-X", "importtime", "-c", stmt], cwd=cwd, check=False, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError((p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1])
        found: dict[str, int] = {}
        for m in filter(None, map(IMPORT_LINE.match, p.stderr.splitlines())):
            found[m[2]] = found.get(m[2], 0) + int(m[1])
        return found

    startup, out = top_level("pass"), {}
    for name, stmt in stmts.items():
        samples: list[float] = []
        deadline = time.perf_counter() + budget_s
        try:
            top_level(stmt)  # untimed: fills the page cache and writes any missing .pyc
            while len(samples) < runs and (len(samples) < 3 or time.perf_counter() < deadline):
                samples.append(sum(us for mod, us in top_level(stmt).items() if mod not in startup) / 1000)
        except RuntimeError as e:
            out[name] = {"na": f"`{stmt}` failed: {e}"}
            continue
        out[name] = {"ms": statistics.median(samples), "min_ms": min(samples), "runs": len(samples), "stmt": stmt}
    return out


def paired_rounds(rounds: int, quick: bool, left, peers: list[str]) -> dict:
    """Rounds of fresh workers, each timing custream's (then each peer's, in workers of their
    own) statements in turn with raw_driver.c's loop for the same driver calls, in one
    process and thread. The driver's cost drifts over a run and differs between processes by
    more than a target's margin; the two figures of a pair move together, and the median over
    rounds is not moved by one process's luck."""
    raw = build("raw_driver.c", "libraw_driver.so")
    ext = build("floor_ext.c", "floor_ext" + sysconfig.get_config_var("EXT_SUFFIX"), "-I" + sysconfig.get_paths()["include"])
    out: dict = {"rounds": [], "peers": peers, **({"floor_error": ext["error"]} if isinstance(ext, dict) else {})}
    if isinstance(raw, dict):
        return {**out, "stopped": raw["error"]}
    for r in range(rounds):
        if left() < 40:
            out["stopped"] = f"after {r} rounds: the time budget was spent"
            break
        mine = worker("custream", ["--paired", raw, *(["--floor-ext", ext] if isinstance(ext, str) else [])], quick, min(60, left() - 25))
        out["rounds"].append({k: mine[k] for k in ("ops", "floor", "bound", "error") if k in mine})
        for name in [n for n in peers if left() >= 30]:
            got = worker(name, ["--paired", raw], quick, min(60, left() - 25))
            out["rounds"][-1].setdefault("peers", {})[name] = got.get("ops") or {"error": got.get("error", "no figures")}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--gpu", action="store_true", help="measure everything (needs a CUDA device)")
    mode.add_argument("--cpu", action="store_true", help="only what needs no driver (the default without a device)")
    ap.add_argument("--json", metavar="PATH", help="write every figure, the machine and the versions here")
    ap.add_argument("--plot", metavar="PATH", help="write a PNG chart here (needs matplotlib)")
    ap.add_argument("--quick", action="store_true", help="few, short repeats: a smoke run, not figures to quote")
    ap.add_argument("--only", metavar="LIB", action="append", help="measure only these libraries (repeatable; raw: the rounds)")
    ap.add_argument("--no-import", action="store_true", help="skip the import-time row")
    ap.add_argument("--budget-s", type=float, default=200.0, help="wall-clock budget (default 200 s): later libraries are skipped past it")
    ap.add_argument("--rounds", type=int, help="paired rounds against the raw C loops (default 8, 2 with --quick; 0: none)")
    ap.add_argument("--from-json", metavar="PATH", help="measure nothing: print the table (and --plot) of an earlier --json")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        results = measure(args)
    print(report.table(results))
    if args.json and not args.from_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        try:
            report.plot(results, args.plot)
            print(f"wrote {args.plot}")
        except ImportError as e:
            print(f"no plot: {e}", file=sys.stderr)
    return 0


def measure(args) -> dict:
    t_start = time.perf_counter()
    probe = subprocess.run([sys.executable, "-c", "import custream, sys; sys.exit(not custream.is_available())"], check=False)
    run_mode = "gpu" if args.gpu or (not args.cpu and probe.returncode == 0) else "cpu"
    rounds = args.rounds if args.rounds is not None else 2 if args.quick else 8
    wanted = set(args.only or ["raw", *ops.LIBS])

    def left() -> float:
        return args.budget_s - (time.perf_counter() - t_start)

    def single_pass(lib: str) -> dict:  # each worker gets what is left, less a reserve for the import row
        limit = min(60 if args.quick else 120, left() - 25)
        return worker(lib, ["--mode", run_mode], args.quick, limit) if limit >= 10 else {"error": "skipped: the budget was spent"}

    # custream first, so that a run cut short by its budget still has it.
    libs = {"custream": single_pass("custream")}
    cy = single_pass("cython")
    cython = cy["ops"]["cython_handle_read"] if "ops" in cy else {"custream": {"na": cy.get("error", "not measured")}}
    for peer in ops.PEERS:
        libs[peer.name] = ({"error": "not selected"} if peer.name not in wanted else single_pass(peer.name)
                           if run_mode == "gpu" else {"error": "peers are measured with --gpu"})
    paired = {}
    if run_mode == "gpu" and rounds > 0 and {"raw", "custream"} <= wanted:
        paired = paired_rounds(rounds, args.quick, left, [n for n in ops.PAIRED_PEERS if n in wanted and "error" not in libs[n]])
    stmts = {} if args.no_import else {name: lib.import_stmt for name, lib in ops.LIBS.items() if name in wanted}
    imports = import_times(stmts, 3 if args.quick else 15, max(2.0, min(3 if args.quick else 12, (left() - 10) / max(1, len(stmts)))))

    results = report.assemble(run_mode, libs, cython, imports, paired)
    versions = {n: libs.get(n, {}).get("version") for n in report.LIBRARIES[1:]}
    results["machine"] = {**libs["custream"].get("machine", {}), "python": platform.python_version(), "platform": platform.platform(),
                          "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                          "versions": {**versions, "Cython": cy.get("version")}}
    results["settings"] = {"quick": args.quick, "mode": run_mode, "seconds": round(time.perf_counter() - t_start, 1),
                           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    return results


if __name__ == "__main__":
    sys.exit(main())
