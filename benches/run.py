#!/usr/bin/env python3
"""custream beside the raw driver and the peers, per row of docs/design.md's targets (docs/benchmarks.md: how)."""

import argparse, json, os, pathlib, platform, subprocess, sys, sysconfig, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ops, report  # noqa: E402

def worker(lib: str, args: list[str], timeout: float) -> dict:
    print(f"{lib} ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), lib, *args], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {timeout:.0f} s"}
    if p.returncode == 0 and (lines := [ln for ln in p.stdout.splitlines() if ln.startswith("{")]):
        return json.loads(lines[-1])
    tail = " | ".join((p.stdout + p.stderr).strip().splitlines()[-6:])
    return {"error": f"worker exited with status {p.returncode}: {tail}"}

def build(source: str, name: str, *flags: str) -> str | None:
    """A C file of benches/ compiled as a shared object: its path, or None (the compiler's error printed)."""
    out, cc = os.path.join(tempfile.mkdtemp(prefix="custream-bench-"), name), os.environ.get("CC", "gcc")
    p = subprocess.run([cc, "-O2", "-shared", "-fPIC", *flags, "-o", out, os.path.join(HERE, source), "-ldl"],
                       capture_output=True, text=True)
    if p.returncode:
        print(f"{cc} failed on {source}: {p.stderr.strip()[-400:]}", file=sys.stderr)
    return None if p.returncode else out

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--gpu", action="store_true", help="measure everything (needs a CUDA device)")
    mode.add_argument("--cpu", action="store_true", help="only what needs no driver (the default without a device)")
    ap.add_argument("--json", metavar="PATH", help="write every figure, the machine and the versions here")
    ap.add_argument("--quick", action="store_true", help="few, short repeats: a smoke run, not figures to quote")
    ap.add_argument("--budget-s", type=float, default=200.0, help="wall-clock budget: later workers skipped past it")
    ap.add_argument("--from-json", metavar="PATH", help="measure nothing: print an earlier --json's table")
    args = ap.parse_args(argv)
    results = json.loads(pathlib.Path(args.from_json).read_text()) if args.from_json else measure(args)
    print(report.render(results))
    if args.json and not args.from_json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"wrote {args.json}")
    return 0

def measure(args) -> dict:
    """Rounds of fresh workers, a library each, until 8 (--quick: 2) or the budget; then the once-a-run rows."""
    t_start = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    probe = "import custream, sys; sys.exit(not custream.is_available())"
    gpu = args.gpu or (not args.cpu and subprocess.run([sys.executable, "-c", probe]).returncode == 0)
    extra = ["--gpu"] * gpu + ["--quick"] * args.quick
    cy = worker("cython", extra, 120)
    ext = build("floor_ext.c", "floor_ext" + sysconfig.get_config_var("EXT_SUFFIX"),
                "-I" + sysconfig.get_paths()["include"])
    raw = build("raw_driver.c", "libraw_driver.so") if gpu else None
    extra += ["--raw", raw] * bool(raw) + ["--floor-ext", ext] * bool(ext)
    libs = [n for n, lib in ops.LIBS.items() if (gpu or lib.cpu_setup) and (lib is not ops.LEAST or ext and raw)]
    rounds: dict = {n: [] for n in libs}
    for r in range(2 if args.quick else 8):
        for name in [n for n in libs if not (rounds[n] and "not importable" in rounds[n][0].get("error", ""))]:
            if left() > 30:
                rounds[name].append(worker(name, extra, min(120, left() - 10)))
            elif r == 0:
                rounds[name].append({"error": f"skipped: the {args.budget_s:.0f} s budget was spent"})
    cython = cy.get("rows") or {"custream": {"na": cy.get("error", "not measured")}}
    results = report.assemble("gpu" if gpu else "cpu", rounds, cython)
    for name, least, most in [("capture", 30, 240), ("waits", 30, 120)] * bool(raw):
        w = worker(name, extra, max(least, min(most, left())))
        results[name] = w.get("rows") or {"error": w.get("error", "no rows")}
    first = {n: next((w for w in ws if "version" in w), {}) for n, ws in rounds.items()}
    with open("/proc/cpuinfo" if os.path.exists("/proc/cpuinfo") else os.devnull) as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    versions = {**{n: first.get(n, {}).get("version") for n in report.LIBRARIES[1:]}, "Cython": cython.get("version")}
    results["machine"] = {**first["custream"].get("machine", {}), "cpu": cpu, "python": platform.python_version(),
                          "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "versions": versions}
    results["settings"] = {"quick": args.quick, "rounds": max(map(len, rounds.values())),
                           "seconds": round(time.perf_counter() - t_start, 1),
                           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    return results

if __name__ == "__main__":
    sys.exit(main())
