"""One library's figures, measured in a fresh interpreter so that no library's state (its
contexts, pools, caches, imported modules) touches another's. Prints one JSON object.

    python benches/worker.py LIB --mode cpu|gpu [--quick] [--ops KEY,KEY,...]
    python benches/worker.py paired --mode gpu --raw-lib libraw_driver.so --ops KEY,... [--bound-ops KEY,...]
                             [--floor-ext floor_ext.so] [--peer NAME]

LIB is `custream`, `floors`, `cython`, or a peer's name from ops.PEERS; `paired` times custream
(or, with --peer, that peer) and raw_driver.c's loops (built as a library) in turn in this one
process. run.py calls this; it is not meant to be run by hand except to debug one library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import timeit
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ops  # noqa: E402
import timing  # noqa: E402


def settings(quick: bool) -> dict:
    return {"repeats": 5, "target_ms": 2.0, "budget_s": 0.5} if quick else {"repeats": 15, "target_ms": 20.0, "budget_s": 4.0}


def first_working(candidates: list[str], ns: dict, expect=None) -> tuple[str | None, str]:
    """The first statement that runs (and, for `expect`, gives the expected value)."""
    why = ""
    for stmt in candidates:
        try:
            value = eval(compile(stmt, "<bench>", "eval"), ns)
        except Exception as e:  # a spelling this version lacks: try the next
            why = f"{stmt}: {type(e).__name__}: {e}"
            continue
        if expect is not None and value != expect:
            why = f"{stmt} gave {value!r}, expected {expect!r}"
            continue
        return stmt, ""
    return None, why


def run_ops(lib: ops.Lib, ns: dict, mode: str, cfg: dict, only: set | None = None) -> dict:
    out: dict = {}
    for key, spec in lib.ops.items():
        if only is not None and key not in only:
            continue
        op = ops.OPS[key]
        if op.gpu and mode != "gpu":
            out[key] = {"na": "needs a GPU (run with --gpu)"}
            continue
        if isinstance(spec, ops.NA):
            out[key] = {"na": spec.reason}
            continue
        expect = {"handle_int": ns.get("H"), "cuda_stream": (0, ns.get("H"))}.get(key)
        stmt, why = first_working(spec, ns, expect)
        if stmt is None:
            out[key] = {"na": f"no spelling worked ({why})"}
            continue
        try:
            out[key] = timing.measure(stmt, ns, **cfg)
        except Exception as e:
            out[key] = {"na": f"{stmt} failed while timed: {type(e).__name__}: {e}"}
            continue
        if key in lib.notes:
            out[key]["note"] = lib.notes[key]
        if key in lib.not_best:
            out[key]["not_best"] = True
    return out


def version_of(lib: ops.Lib, ns: dict) -> str:
    try:
        return str(eval(lib.version_expr, ns))
    except Exception:
        pass
    from importlib import metadata

    for dist in lib.dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def cold_create(ns: dict, quick: bool) -> dict:
    """custream.Stream().close() while no other object holds the primary context: the case
    of a program whose only stream is the one it makes and closes."""
    import custream

    custream.Stream().close()  # cuInit and the driver's first-use costs, untimed
    samples = []
    deadline = time.perf_counter() + (2 if quick else 5)
    while len(samples) < (2 if quick else 7) and (len(samples) < 2 or time.perf_counter() < deadline):
        t0 = time.perf_counter_ns()
        custream.Stream().close()
        samples.append(time.perf_counter_ns() - t0)
    samples.sort()
    return {"ns": samples[len(samples) // 2], "min_ns": samples[0], "max_ns": samples[-1], "repeats": len(samples),
            "stmt": "custream.Stream().close()  # with no other stream alive"}


def load_floor_ext(path: str):
    """floor_ext.c, built by run.py for this interpreter."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("floor_ext", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def raw_runner(raw_lib: str, ns: dict):
    """Load raw_driver.c (built as a library) and return runner(spec): `raw:LOOP` times that
    C loop, anything else is a statement timed in `ns`; each runner(n) returns elapsed ns."""
    import ctypes

    raw = ctypes.CDLL(raw_lib)
    raw.raw_time.restype = ctypes.c_double
    raw.raw_time.argtypes = [ctypes.c_char_p, ctypes.c_long]
    if raw.raw_init() != 0:
        raise RuntimeError("raw_init failed: the driver or its primary context could not be set up")
    ns["nop_gil_released"], ns["nop_gil_held"] = raw.raw_nop, ctypes.PyDLL(raw_lib).raw_nop
    for nop in (ns["nop_gil_released"], ns["nop_gil_held"]):
        nop.restype, nop.argtypes = None, []

    def runner(spec: str):
        if spec.startswith("raw:"):
            name = spec[4:].encode()
            if raw.raw_time(name, 1) < 0:
                raise RuntimeError(f"raw_driver.c has no loop named {spec[4:]!r}")
            return lambda n: raw.raw_time(name, n)
        return timeit.Timer(spec, globals=ns, timer=time.perf_counter_ns).timeit

    return runner


def paired(ns: dict, keys: list[str], bound_keys: list[str], raw_lib: str, cfg: dict,
           floor_ext: str | None = None) -> dict:
    """custream's driver-bound operations against raw_driver.c's loops for the same calls,
    in this process and thread, one repeat of each in turn (timing.paired); the same for
    floor_ext.c's functions (ops.FLOOR_BINDING), the least a binding can add; then the
    pairs of ops.BREAKDOWN; then, for the operations whose target is absolute, custream in
    turn with its floor from ops.FLOORS."""
    runner = raw_runner(raw_lib, ns)
    out: dict = {"ops": {}, "floor": {}, "breakdown": [], "bound": {}}
    for key in keys:
        stmt = ops.CUSTREAM.ops[key][0]
        out["ops"][key] = dict(timing.paired(runner(stmt), runner("raw:" + key), **cfg), stmt=stmt)
    if floor_ext:
        mod = load_floor_ext(floor_ext)
        ns.update({name: getattr(mod, name) for name in ("fcreate", "fdestroy", "fquery", "fsync")})
        for key in keys:
            stmt = ops.FLOOR_BINDING.get(key)
            if stmt:
                out["floor"][key] = dict(timing.paired(runner(stmt), runner("raw:" + key), **cfg), stmt=stmt)
    for part in ops.BREAKDOWN:
        if part.op in keys:
            out["breakdown"].append(timing.paired(runner(part.a), runner(part.b), **{**cfg, "repeats": 9}))
    # The absolute targets: custream in turn with its floor (the C-level one where there is
    # one), so that a round on a slower CPU shows as such instead of as a slower custream.
    exec(ops.FLOOR_SETUP, ns)
    for key in bound_keys:
        stmt = ops.CUSTREAM.ops[key][0]
        floors = ops.FLOORS.get(key)
        if not floors:
            out["bound"][key] = timing.measure(stmt, ns, **cfg)
            continue
        label, floor = floors[-1]
        r = timing.paired(runner(stmt), runner(floor), **cfg)
        out["bound"][key] = {"ns": r["ns"], "floor_ns": r["raw_ns"], "floor_ratio": r["ratio"], "floor": label,
                             "repeats": r["repeats"], "number": r["number"], "stmt": stmt}
    return out


def paired_peer(lib: ops.Lib, ns: dict, keys: list[str], raw_lib: str, cfg: dict) -> dict:
    """A peer's ratio-to-raw operations, each timed in turn with raw_driver.c's loop as
    custream's are: the one comparison with custream's ratio that a process's luck does not
    move. The peer's setup runs after raw_init, which leaves the primary context current,
    as every peer's own setup does too."""
    runner = raw_runner(raw_lib, ns)
    exec(lib.import_stmt, ns)
    exec(lib.setup, ns)
    out: dict = {"peer": lib.name, "ops": {}}
    for key in keys:
        spec = lib.ops.get(key)
        if spec is None or isinstance(spec, ops.NA) or key in lib.not_best:
            continue
        stmt, why = first_working(spec, ns)
        if stmt is None:
            out["ops"][key] = {"na": f"no spelling worked ({why})"}
            continue
        out["ops"][key] = dict(timing.paired(runner(stmt), runner("raw:" + key), **cfg), stmt=stmt)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ops", help="comma-separated operation keys: measure only these (no cold create)")
    ap.add_argument("--raw-lib", help="paired: raw_driver.c built with -DRAW_DRIVER_LIB")
    ap.add_argument("--bound-ops", default="", help="paired: operations with an absolute target, timed in turn with their floor")
    ap.add_argument("--floor-ext", help="paired: floor_ext.c built as an extension of this interpreter")
    ap.add_argument("--peer", help="paired: time this peer (a name from ops.PEERS) against raw, not custream")
    args = ap.parse_args()
    only = set(args.ops.split(",")) if args.ops else None
    keys = [k for k in (args.ops or "").split(",") if k]
    cfg = settings(args.quick)
    result: dict = {"lib": args.lib, "mode": args.mode}
    ns: dict = {"__name__": "__bench__"}
    exec(ops.PRODUCER, ns)

    if args.lib == "cython":
        import cython_read

        result["ops"] = {"cython_handle_read": cython_read.run(args.mode, args.quick)}
        print(json.dumps(result))
        return 0

    if args.lib == "floors":
        exec("H = 0x7F3A2C001230\ns = object()\np = Producer(H)\n", ns)
        exec(ops.FLOOR_SETUP, ns)
        result["empty_loop"] = timing.empty_loop(ns, **cfg)
        result["ops"] = {key: [dict(timing.measure(stmt, ns, **cfg), label=label) for label, stmt in floors]
                         for key, floors in ops.FLOORS.items()}
        print(json.dumps(result))
        return 0

    if args.lib == "paired" and args.peer:
        peer = next((p for p in ops.PEERS if p.name == args.peer), None)
        try:
            if peer is None:
                raise ValueError(f"unknown peer {args.peer!r}")
            result.update(paired_peer(peer, ns, keys, args.raw_lib, cfg))
        except Exception as e:
            result["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(result))
        return 0

    if args.lib == "paired":
        try:
            exec(ops.CUSTREAM.setup, ns)
            result.update(paired(ns, keys, [k for k in args.bound_ops.split(",") if k], args.raw_lib, cfg, args.floor_ext))
        except Exception as e:
            result["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(result))
        return 0

    lib = ops.CUSTREAM if args.lib == "custream" else next((p for p in ops.PEERS if p.name == args.lib), None)
    if lib is None:
        print(json.dumps({"lib": args.lib, "error": "unknown library"}))
        return 2
    try:
        exec(lib.import_stmt, ns)
    except Exception as e:
        result["error"] = f"not importable: {type(e).__name__}: {e}"
        print(json.dumps(result))
        return 0
    result["version"] = version_of(lib, ns)
    try:
        if args.lib == "custream" and args.mode == "gpu" and only is None:
            result["cold_create_destroy"] = cold_create(ns, args.quick)
        exec(lib.setup if args.mode == "gpu" or args.lib != "custream" else ops.CUSTREAM_CPU_SETUP, ns)
    except Exception as e:
        result["error"] = f"setup failed: {type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc(limit=4)
        print(json.dumps(result))
        return 0
    result["empty_loop"] = timing.empty_loop(ns, **cfg)
    result["ops"] = run_ops(lib, ns, args.mode, cfg, only)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
