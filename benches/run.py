#!/usr/bin/env python3
"""custream beside the raw driver and the peers, per operation of the target table in
docs/design.md; docs/benchmarks.md says what is measured and how, and how to run it."""

import argparse, json, os, platform, subprocess, sys, sysconfig, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ops, report, scale  # noqa: E402

STANDIN = "the stand-in (tests/standin/capture.c): custream's own cost, no GPU work"

def worker(lib: str, args: list[str], timeout: float, env: dict | None = None) -> dict:
    print(f"{lib} ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), lib, *args], capture_output=True,
                           text=True, timeout=timeout, env=env and {**os.environ, **env})
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--gpu", action="store_true", help="measure everything (needs a CUDA device)")
    mode.add_argument("--cpu", action="store_true", help="only what needs no driver (the default without a device)")
    ap.add_argument("--json", metavar="PATH", help="write every figure, the machine and the versions here")
    ap.add_argument("--plot", metavar="PATH", help="write a PNG chart here (needs matplotlib)")
    ap.add_argument("--quick", action="store_true", help="few, short repeats: a smoke run, not figures to quote")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="wall-clock budget (default 200 s): later libraries are skipped past it")
    ap.add_argument("--rounds", type=int,
                    help="rounds of fresh workers, as the budget allows (default 8, 2 with --quick)")
    ap.add_argument("--from-json", metavar="PATH",
                    help="measure nothing: print the table (and --plot) of an earlier --json")
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
    """Rounds of fresh workers, one a library a round, custream first, until the rounds are done
    or the budget is spent (docs/benchmarks.md says why); then capture.py's and scale.py's rows,
    one worker each, once."""
    t_start = time.perf_counter()
    probe = subprocess.run([sys.executable, "-c", "import custream, sys; sys.exit(not custream.is_available())"])
    gpu = args.gpu or (not args.cpu and probe.returncode == 0)
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    extra = ["--gpu"] * gpu + ["--quick"] * args.quick
    cy = worker("cython", extra, 120)
    cython = cy["ops"]["cython_handle_read"] if "ops" in cy else {"custream": {"na": cy.get("error", "not measured")}}
    # The least binding (floor_ext.c) has a handle floor without a device; with one, the C loops too.
    ext = build("floor_ext.c", "floor_ext" + sysconfig.get_config_var("EXT_SUFFIX"),
                "-I" + sysconfig.get_paths()["include"])
    raw = build("raw_driver.c", "libraw_driver.so") if gpu else None
    extra += ["--raw", raw] * bool(raw) + ["--floor-ext", ext] * bool(ext)
    libs = [n for n, lib in ops.LIBS.items()
            if (gpu or lib.cpu_setup) and (lib is not ops.LEAST or ext and (raw or not gpu))]
    rounds: dict = {n: [] for n in libs}
    for r in range(args.rounds or (2 if args.quick else 8)):
        for name in [n for n in libs if not (rounds[n] and "not importable" in rounds[n][0].get("error", ""))]:
            if left() > 30:
                rounds[name].append(worker(name, extra, min(120, left() - 10)))
            elif r == 0:
                rounds[name].append({"error": f"skipped: the {args.budget_s:.0f} s budget was spent"})
    rounds.update({n: [{"error": "peers are measured with --gpu"}] for n in report.LIBRARIES[1:] if n not in rounds})
    results = report.assemble("gpu" if gpu else "cpu", rounds, cython)
    if raw:
        cap = worker("capture", extra, max(30, min(240, left())))
        results["capture"] = cap.get("rows") or {"error": cap.get("error", "no rows")}
    lib = None if gpu else scale.standin()  # without a device, the stand-in driver: its path, or why not
    if isinstance(lib, dict):
        results["scale"] = lib
    else:
        env = {"CUSTREAM_LIBCUDA": lib} if lib else {"CUDA_DEVICE_MAX_CONNECTIONS": "16"}  # scale.py says why
        sc = worker("scale", extra, max(90, min(240, left())), env)
        results["scale"] = {"driver": "the GPU's driver" if gpu else STANDIN,
                            **({"rows": sc["rows"]} if "rows" in sc else {"error": sc.get("error", "no rows")})}
    first = {n: next((w for w in ws if "version" in w), {}) for n, ws in rounds.items()}
    with open("/proc/cpuinfo" if os.path.exists("/proc/cpuinfo") else os.devnull) as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    versions = {**{n: first[n].get("version") for n in report.LIBRARIES[1:]}, "Cython": cy.get("version")}
    results["machine"] = {**first["custream"].get("machine", {}), "cpu": cpu, "python": platform.python_version(),
                          "platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "versions": versions}
    results["settings"] = {"quick": args.quick, "rounds": max(map(len, rounds.values())),
                           "seconds": round(time.perf_counter() - t_start, 1),
                           "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    return results

if __name__ == "__main__":
    sys.exit(main())
