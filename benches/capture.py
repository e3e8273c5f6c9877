"""Host functions and graph capture: custream beside CuPy and the raw driver, in one run.

    python3 benches/capture.py [--json out.json] [--quick]

Rows (median over paired repeats, benches/timing.py; the C loops are capture_raw.c):
- launch_host_func round trip (launch on an idle stream, then synchronize), custream and
  CuPy, each against a C cuLaunchHostFunc + cuStreamSynchronize loop;
- Graph.launch of a 10-node graph (10 CuPy kernels captured through custream) against a C
  cuGraphLaunch loop on the same graph and stream (target <= 1.15x), in batches of 100 with
  an untimed synchronize between, so the launch queue never fills;
- capture of 100 CuPy kernels through custream against CuPy's own begin/end_capture.
(query() and synchronize() are rows of benches/run.py.) Without a GPU or CuPy it says so.
"""

from __future__ import annotations

import argparse, ctypes, json, os, subprocess, sys, tempfile  # noqa: E401

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timing  # noqa: E402
import custream  # noqa: E402


def load_raw():
    out = os.path.join(tempfile.mkdtemp(prefix="custream-capture-bench-"), "libcapture_raw.so")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", out, os.path.join(HERE, "capture_raw.c"), "-ldl"],
                   check=True)
    lib = ctypes.CDLL(out)
    p, n = ctypes.c_void_p, ctypes.c_long
    for name, argtypes in (("cr_host_func_round_trip", [p, n]), ("cr_graph_launch", [p, p, n, n])):
        getattr(lib, name).restype, getattr(lib, name).argtypes = ctypes.c_int64, argtypes
    assert lib.cr_init() == 0, "capture_raw.c: libcuda.so.1 lacks an entry point"
    return lib


def c_loop(fn, *args):
    def run(n):
        elapsed = fn(*args, n)
        assert elapsed >= 0, f"{fn.__name__} failed: CUresult {-elapsed}"
        return elapsed
    return run


def py_loop(body, sync=None, batch=100):
    """run(n): n calls of body, timed; with `sync`, called untimed after every `batch`."""
    def run(n):
        total = done = 0
        while done < n:
            k = min(batch, n - done) if sync else n - done
            t = timing.time.perf_counter_ns()
            for _ in range(k):
                body()
            total += timing.time.perf_counter_ns() - t
            done += k
            if sync:
                sync()
        return total
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few, short repeats")
    args = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if not custream.is_available() or cp is None:
        print("benches/capture.py needs a GPU and CuPy: " + ("no CuPy" if custream.is_available() else "no GPU"))
        return 0
    kw = {"repeats": 3, "target_ms": 2.0} if args.quick else {"repeats": 15, "target_ms": 20.0}
    raw = load_raw()
    cp.cuda.Device(0).use()
    s, cs = custream.Stream(device=0), cp.cuda.Stream(non_blocking=True)
    from_external = getattr(cp.cuda.Stream, "from_external", None)  # CuPy >= 14
    ext = from_external(s) if from_external else cp.cuda.ExternalStream(s.handle, 0)
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)  # compile and load the kernel outside every capture
    cp.cuda.Device(0).synchronize()
    rows = {}

    def row(name, target, mine, theirs, label):
        r = timing.paired(mine, theirs, **kw)
        rows[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": label, "target": target}
        mark = "" if target is None else ("  pass" if r["ratio"] <= target else "  MISS")
        print(f"{name:<44} {r['ns']:>10.0f} {label:<28} {r['raw_ns']:>10.0f} {r['ratio']:>6.2f}x{mark}")

    def noop(*_):
        pass

    print(f"{'row':<44} {'ns':>10} {'against':<28} {'ns':>10}  ratio")
    c_round_trip = c_loop(raw.cr_host_func_round_trip, s.handle)
    row("launch_host_func round trip", None, py_loop(lambda: (s.launch_host_func(noop), s.synchronize())),
        c_round_trip, "C cuLaunchHostFunc+sync")
    if hasattr(cs, "launch_host_func"):
        row("  CuPy launch_host_func round trip", None,
            py_loop(lambda: (cs.launch_host_func(noop, None), cs.synchronize())), c_round_trip,
            "C cuLaunchHostFunc+sync")

    s.begin_capture("relaxed")
    with ext:
        for _ in range(10):
            cp.add(x, 1, out=x)
    g = s.end_capture()
    assert g.node_count == 10, g.node_count
    row("Graph.launch, 10 nodes", 1.15, py_loop(lambda: g.launch(s), s.synchronize),
        c_loop(raw.cr_graph_launch, g.handle, s.handle, 100), "C cuGraphLaunch")

    def ours_capture():
        s.begin_capture("relaxed")
        with ext:
            for _ in range(100):
                cp.add(x, 1, out=x)
        s.end_capture().close()

    def cupy_capture():
        cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)
        with cs:
            for _ in range(100):
                cp.add(x, 1, out=x)
        cs.end_capture()

    row("capture 100 CuPy kernels (custream)", None, py_loop(ours_capture), py_loop(cupy_capture),
        "CuPy begin/end_capture")

    g.close()
    meta = {"device": custream.device_info(0)[0], "driver": custream.driver_version(), "cupy": cp.__version__, "quick": args.quick}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
