#!/usr/bin/env python3
"""custream against the peers and the raw driver, per operation of DESIGN.md's target table.

    python3 benches/run.py                 # CPU part: no driver needed
    python3 benches/run.py --gpu --json results.json --plot results.png

Every library runs in its own fresh interpreter (benches/worker.py); the raw driver figures
come from benches/raw_driver.c, compiled here with gcc (no CUDA header, no -lcuda needed).
Prints the table, and with --json / --plot writes every figure and a log-scale chart.
Without --gpu only custream and the Python-level floors run (and import times of whatever
is installed); --gpu is the default where custream finds a device.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import imports  # noqa: E402
import ops  # noqa: E402
import report  # noqa: E402

LIBS = ["raw"] + [p.name for p in ops.PEERS] + ["custream"]


class Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    raise Interrupted()


def worker(lib: str, mode: str, quick: bool, timeout: float, only: list[str] | None = None,
           extra: list[str] | None = None) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), lib, "--mode", mode] + (["--quick"] if quick else [])
    cmd += (["--ops", ",".join(only)] if only else []) + (extra or [])
    try:
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"lib": lib, "error": f"worker timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = " | ".join((p.stdout + p.stderr).strip().splitlines()[-6:])
        return {"lib": lib, "error": f"worker exited with status {p.returncode}: {tail}"}
    return json.loads(lines[-1])


def fastest_cpus() -> dict:
    """Keep this process, and so every worker it starts, on the CPUs where a Python call runs
    within 10 % of the fastest now. On the GPU machine where a process lands moves
    Python-side figures by up to 2x (some CPUs share their core with other work), more than
    any gap between the libraries; a probe picks the CPUs, since a fixed choice was once the
    slowest, and several stay allowed so the driver's own threads need not share the
    caller's. Returns the choice and each CPU's probe (median ns per call)."""
    if not hasattr(os, "sched_setaffinity"):
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    probe = timeit.Timer("f()", "def f(): pass")
    per: dict = {}
    for cpu in cpus:
        os.sched_setaffinity(0, {cpu})
        per[cpu] = round(sorted(probe.timeit(20_000) / 20_000 * 1e9 for _ in range(5))[2], 2)
    fast = sorted(c for c in cpus if per[c] <= 1.1 * min(per.values()))
    os.sched_setaffinity(0, set(fast))
    return {"cpus": fast, "probe_ns": {str(c): ns for c, ns in per.items()}}


_BUILT: dict = {}


def build_raw(kind: str) -> str | dict:
    """raw_driver.c compiled (once per kind) as the program ("exe") or as the library the
    paired worker loads ("lib"), or floor_ext.c as an extension of this interpreter ("ext").
    The path, or {"error": ...}."""
    if kind not in _BUILT:
        source, name, flags = {
            "exe": ("raw_driver.c", "raw_driver", []),
            "lib": ("raw_driver.c", "libraw_driver.so", ["-shared", "-fPIC", "-DRAW_DRIVER_LIB"]),
            "ext": ("floor_ext.c", "floor_ext" + sysconfig.get_config_var("EXT_SUFFIX"),
                    ["-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"]]),
        }[kind]
        out = os.path.join(tempfile.mkdtemp(prefix="custream-bench-raw-"), name)
        cc = os.environ.get("CC", "gcc")
        p = subprocess.run([cc, "-O2", *flags, "-o", out, os.path.join(HERE, source), "-ldl"],
                           check=False, capture_output=True, text=True)
        _BUILT[kind] = out if p.returncode == 0 else {"error": f"{cc} failed: {p.stderr.strip()[-400:]}"}
    return _BUILT[kind]


def raw_driver(quick: bool) -> dict:
    """Run raw_driver.c, every loop. Returns its JSON, or {"error": ...}."""
    exe = build_raw("exe")
    if isinstance(exe, dict):
        return exe
    try:
        p = subprocess.run([exe, "5" if quick else "15", "2" if quick else "20"], check=False, capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "raw_driver timed out"}
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": f"raw_driver exited with status {p.returncode}: {(p.stdout + p.stderr).strip()[-400:]}"}


def paired_rounds(rounds: int, quick: bool, left, peers: list[str] = ()) -> dict:
    """The operations whose target is a ratio to the raw driver, measured in rounds of fresh
    workers that time custream and raw_driver.c's loop for the same calls in one process and
    thread, a repeat of each in turn. The driver's own cost (a create + destroy above all)
    drifts over a run, and differs between processes and the CPUs they land on, by more than
    the margin the target allows; the ratio within a pair is not moved by that, and the
    rounds' median is not moved by one process's luck. Each round also times `peers` (names
    from ops.PAIRED_PEERS) the same way, each in its own fresh worker, so that custream's
    ratio is set beside theirs measured alike."""
    keys = [op.key for op in ops.OPERATIONS if op.target.raw is not None]
    # custream's absolute targets too: one worker's figure moves with the machine's state
    # when it ran (by half on this project's GPU machine); the median of fresh workers does not.
    bound_keys = [op.key for op in ops.OPERATIONS if op.target.bound is not None and op.unit == "ns"
                  and op.key in ops.CUSTREAM.ops]
    out: dict = {"rounds": [], "keys": keys, "bound_keys": bound_keys, "peers": list(peers)}
    lib = build_raw("lib")
    if isinstance(lib, dict):
        return {**out, "stopped": lib["error"]}
    ext = build_raw("ext")
    floor_args = [] if isinstance(ext, dict) else ["--floor-ext", ext]
    if isinstance(ext, dict):
        out["floor_error"] = ext["error"]
    for r in range(rounds):
        if left() < 40:
            out["stopped"] = f"after {r} rounds: the time budget was spent"
            break
        print(f"paired round {r + 1}/{rounds} ...", file=sys.stderr, flush=True)
        res = worker("paired", "gpu", quick, min(60, left() - 25), keys,
                     ["--raw-lib", lib, "--bound-ops", ",".join(bound_keys), *floor_args])
        out["rounds"].append({k: res[k] for k in ("ops", "floor", "breakdown", "bound", "error") if k in res})
        for name in peers:
            if left() < 30:
                break
            got = worker("paired", "gpu", quick, min(60, left() - 25), keys, ["--raw-lib", lib, "--peer", name])
            out["rounds"][-1].setdefault("peers", {})[name] = got.get("ops") or {"error": got.get("error", "no figures")}
    return out


def gpu_available() -> bool:
    p = subprocess.run([sys.executable, "-c", "import custream, sys; sys.exit(0 if custream.is_available() else 1)"],
                       check=False, capture_output=True)
    return p.returncode == 0


def machine_info(raw: dict, versions: dict) -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    info = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "gpu": raw.get("gpu"),
        "driver_version": raw.get("driver_version"),
        "device_count": raw.get("device_count"),
        "versions": versions,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        import Cython

        info["versions"]["Cython"] = Cython.__version__
    except ImportError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--gpu", action="store_true", help="measure everything (needs a CUDA device)")
    mode.add_argument("--cpu", action="store_true", help="only what needs no driver (the default without a device)")
    ap.add_argument("--json", metavar="PATH", help="write every figure, the machine and the versions here")
    ap.add_argument("--plot", metavar="PATH", help="write a PNG chart here (needs matplotlib)")
    ap.add_argument("--quick", action="store_true", help="few, short repeats: a smoke run, not figures to quote")
    ap.add_argument("--only", metavar="LIB", action="append", help="measure only these libraries (repeatable)")
    ap.add_argument("--no-import", action="store_true", help="skip the import-time row")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="wall-clock budget for the whole run (default 200 s); later libraries are skipped past it")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of fresh workers timing custream and the raw C loops in turn, for the "
                         "ratio-to-raw operations and custream's absolute targets (default 8, 2 with --quick; 0 to skip)")
    ap.add_argument("--no-pin", action="store_true",
                    help="leave the workers on every CPU (default: only on those where a probe runs within 10 %% of the fastest)")
    ap.add_argument("--from-json", metavar="PATH", help="measure nothing: print the table (and --plot) of an earlier --json")
    args = ap.parse_args(argv)

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        print(report.table(results))
        if args.plot:
            report.plot(results, args.plot)
            print(f"wrote {args.plot}")
        return 0

    if args.rounds is None:
        args.rounds = 2 if args.quick else 8
    run_mode = "gpu" if args.gpu or (not args.cpu and gpu_available()) else "cpu"
    pinning = {} if args.no_pin else fastest_cpus()
    t_start = time.perf_counter()
    chosen = set(args.only) if args.only else None

    def wanted(lib: str) -> bool:
        return chosen is None or lib in chosen

    def left() -> float:
        return args.budget_s - (time.perf_counter() - t_start)

    def run_worker(lib: str) -> dict:
        # Each worker gets what is left, less a reserve for the import row and the report.
        limit = min(60 if args.quick else 120, left() - 25)
        if limit < 10:
            return {"lib": lib, "error": f"skipped: the {args.budget_s:.0f} s budget was spent"}
        print(f"{lib} ...", file=sys.stderr, flush=True)
        return worker(lib, run_mode, args.quick, limit)

    # custream first, so that a run cut short by its budget still has it. A SIGTERM (a
    # `timeout` around this script) stops measuring and reports what was measured.
    libs: dict = {}
    floors: dict = {}
    cython: dict = {}
    import_rows: dict = {}
    paired: dict = {}
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if run_mode == "gpu" and wanted("raw"):
            print("raw driver ...", file=sys.stderr, flush=True)
            libs["raw"] = raw_driver(args.quick)
        else:
            libs["raw"] = {"error": "needs a GPU (run with --gpu)"} if run_mode != "gpu" else {"error": "not selected"}
        libs["custream"] = run_worker("custream")
        floors = run_worker("floors")
        cython = run_worker("cython")
        for peer in ops.PEERS:
            if not wanted(peer.name):
                libs[peer.name] = {"error": "not selected"}
            elif run_mode == "gpu":
                libs[peer.name] = run_worker(peer.name)
            else:
                libs[peer.name] = {"error": "peers are measured with --gpu"}
        if run_mode == "gpu" and args.rounds > 0 and wanted("raw") and wanted("custream"):
            peers = [n for n in ops.PAIRED_PEERS if wanted(n) and "error" not in libs.get(n, {})]
            paired = paired_rounds(args.rounds, args.quick, left, peers)
        if not args.no_import:
            print("import times ...", file=sys.stderr, flush=True)
            stmts = {lib.name: lib.import_stmt for lib in [ops.CUSTREAM, *ops.PEERS] if wanted(lib.name)}
            per_lib = max(2.0, min(3 if args.quick else 12, (left() - 10) / max(1, len(stmts))))
            import_rows = imports.measure(stmts, runs=3 if args.quick else 15, budget_s=per_lib)
    except Interrupted:
        print("interrupted: reporting what was measured", file=sys.stderr, flush=True)
        for name in LIBS:
            libs.setdefault(name, {"lib": name, "error": "not measured: the run was interrupted"})
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    versions = {name: libs[name].get("version") for name in LIBS if name != "raw"}
    results = report.assemble(run_mode, libs, floors, cython, import_rows, LIBS, paired)
    results["machine"] = machine_info(libs["raw"], versions)
    results["machine"]["pinned"] = pinning
    results["settings"] = {"quick": args.quick, "mode": run_mode, "seconds": round(time.perf_counter() - t_start, 1),
                           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}

    print(report.table(results))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=False)
        print(f"wrote {args.json}")
    if args.plot:
        try:
            report.plot(results, args.plot)
            print(f"wrote {args.plot}")
        except ImportError as e:
            print(f"no plot: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
