"""One library's figures, in a fresh interpreter so that no library's state (contexts, pools,
caches, imported modules) touches another's. Prints one JSON object. run.py starts these:

    worker.py LIB --mode cpu|gpu [--quick]     every operation of LIB (custream, a peer, cython)
    worker.py LIB --paired libraw_driver.so [--floor-ext floor_ext.so] [--quick]

--paired times LIB's ratio-to-raw statements in turn with raw_driver.c's loop for the same
driver calls (timing.paired), in this one process and thread; for custream also floor_ext.c's
functions against the same loops, and its absolute-target statements in turn with ops.FLOORS.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import sys
from importlib import metadata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ops  # noqa: E402
import timing  # noqa: E402


def first_working(candidates: list[str], ns: dict, expect=None) -> tuple[str | None, str]:
    """The first statement that runs (and, for `expect`, gives the expected value)."""
    why = ""
    for stmt in candidates:
        try:
            value = eval(compile(stmt, "<bench>", "eval"), ns)
        except Exception as e:  # a spelling this version lacks: try the next
            why = f"{stmt}: {type(e).__name__}: {e}"
            continue
        if expect is None or value == expect:
            return stmt, ""
        why = f"{stmt} gave {value!r}, expected {expect!r}"
    return None, why


def time_ops(lib: ops.Lib, keys, ns: dict, cfg: dict, mode: str, against=None) -> dict:
    """Per operation key, `lib`'s first working statement timed alone (timing.measure) or, with
    `against` (key -> runner), in turn with that runner (timing.paired)."""
    out: dict = {}
    for key in keys:
        spec = lib.ops[key]
        if isinstance(spec, ops.NA) or (ops.OPS[key].gpu and mode != "gpu"):
            out[key] = {"na": spec.reason if isinstance(spec, ops.NA) else "needs a GPU (run with --gpu)"}
            continue
        stmt, why = first_working(spec, ns, {"handle_int": ns["H"], "cuda_stream": (0, ns["H"])}.get(key))
        try:
            if stmt is None:
                raise ValueError(f"no spelling worked ({why})")
            out[key] = dict(timing.paired(timing.timer(stmt, ns), against(key), **cfg) if against
                            else timing.measure(stmt, ns, **cfg), stmt=stmt)
        except Exception as e:
            out[key] = {"na": f"{stmt} failed while timed: {type(e).__name__}: {e}" if stmt else str(e)}
            continue
        if key in lib.notes:
            out[key]["note"] = lib.notes[key]
        if key in lib.not_best:
            out[key]["not_best"] = True
    return out


def raw_runner(raw_lib: str):
    """raw_driver.c loaded and initialized (the primary context left current): key -> runner."""
    raw = ctypes.CDLL(raw_lib)
    raw.raw_time.restype, raw.raw_time.argtypes = ctypes.c_double, [ctypes.c_char_p, ctypes.c_long]
    step = raw.raw_init()
    if step != 0:
        raise RuntimeError(f"raw_init failed at step {step} (1: no libcuda, 2: a symbol missing, 3: a driver call)")

    def loop(key: str):
        if raw.raw_time(key.encode(), 1) < 0:
            raise RuntimeError(f"raw_driver.c's {key} loop failed")
        return lambda n: raw.raw_time(key.encode(), n)

    return loop


def paired(lib: ops.Lib, ns: dict, raw_loop, floor_ext: str | None, cfg: dict) -> dict:
    keys = [k for k in ops.RATIO_KEYS if k in lib.ops and k not in lib.not_best and not isinstance(lib.ops[k], ops.NA)]
    out = {"ops": time_ops(lib, keys, ns, cfg, "gpu", raw_loop)}
    if lib is not ops.CUSTREAM:
        return out
    if floor_ext:  # the least binding, against the same loops
        spec = importlib.util.spec_from_file_location("floor_ext", floor_ext)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        ns.update(fcreate=mod.fcreate, fdestroy=mod.fdestroy, fquery=mod.fquery, fsync=mod.fsync)
        binding = ops.Lib("floor_ext.c", "", (), "", {k: [stmt] for k, stmt in ops.FLOOR_BINDING.items()})
        out["floor"] = time_ops(binding, ops.FLOOR_BINDING, ns, cfg, "gpu", raw_loop)
    exec(ops.FLOOR_SETUP, ns)
    bound = time_ops(lib, ops.BOUND_KEYS, ns, cfg, "gpu", lambda key: timing.timer(ops.FLOORS[key][1], ns))
    out["bound"] = {k: {"ns": r["ns"], "floor_ns": r["raw_ns"], "floor_ratio": r["ratio"], "floor": ops.FLOORS[k][0],
                        "repeats": r["repeats"], "number": r["number"], "stmt": r["stmt"]} for k, r in bound.items() if "ns" in r}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--paired", metavar="RAW_LIB", help="raw_driver.c built as a shared library")
    ap.add_argument("--floor-ext", help="floor_ext.c built as an extension of this interpreter")
    args = ap.parse_args()
    cfg = {"repeats": 5, "target_ms": 2.0, "budget_s": 0.5} if args.quick else {"repeats": 15, "target_ms": 20.0, "budget_s": 4.0}
    mode = "gpu" if args.paired else args.mode
    result: dict = {"lib": args.lib, "mode": mode}
    lib = ops.LIBS.get(args.lib)
    ns: dict = {"__name__": "__bench__"}
    try:
        if args.lib == "cython":
            import cython_read

            result.update(version=cython_read.cython_version(), ops={"cython_handle_read": cython_read.run(mode, cfg)})
        elif lib is None:
            result["error"] = "unknown library"
        else:
            exec(ops.PRODUCER, ns)
            try:
                exec(lib.import_stmt, ns)
            except Exception as e:
                result["error"] = f"not importable: {type(e).__name__}: {e}"
                raise
            result["version"] = next((v for v in map(_dist_version, lib.dists) if v), "unknown")
            raw_loop = raw_runner(args.paired) if args.paired else None  # before the setup, as in a peer's program
            exec(lib.setup if mode == "gpu" or lib is not ops.CUSTREAM else ops.CUSTREAM_CPU_SETUP, ns)
            if lib is ops.CUSTREAM:
                result["machine"] = machine(ns["custream"], mode)
            if raw_loop:
                result.update(paired(lib, ns, raw_loop, args.floor_ext, cfg))
            else:
                result.update(empty_loop=timing.measure("pass", ns, **cfg), ops=time_ops(lib, lib.ops, ns, cfg, mode))
    except Exception as e:
        result.setdefault("error", f"{type(e).__name__}: {e}")
    print(json.dumps(result))
    return 0


def machine(custream, mode: str) -> dict:
    """The GPU and driver as custream sees them, and the CPU."""
    with open("/proc/cpuinfo") if os.path.exists("/proc/cpuinfo") else open(os.devnull) as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    gpu = mode == "gpu" and custream.is_available()
    return {"gpu": custream.device_info(0)[0] if gpu else None, "driver_version": custream.driver_version() if gpu else None,
            "device_count": custream.device_count() if gpu else 0, "cpu": cpu}


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
