"""One round of one library (a name from ops.LIBS; or `cython`, `capture`, `scale`, whose rows
are measured once a run) in a fresh interpreter, so that no library's state touches another's;
prints one JSON object. With --raw, the ratio-to-raw operations are timed in turn with
raw_driver.c's loop for the same driver calls, in this one process and thread (timing.paired)."""

import argparse, ctypes, importlib, importlib.util, json, os, re, subprocess, sys, tempfile
from importlib import metadata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import ops, timing  # noqa: E402

def time_op(lib: ops.Lib, key: str, ns: dict, cfg: dict, gpu: bool, raw) -> dict:
    """`lib`'s first statement for operation `key` that runs (and gives the right value), timed."""
    if isinstance(spec := lib.ops[key], ops.NA) or (ops.OPS[key].gpu and not gpu):
        return {"na": spec.reason if isinstance(spec, ops.NA) else "needs a GPU (run with --gpu)"}
    expect = {"handle_int": ns["H"], "cuda_stream": (0, ns["H"])}.get(key)
    for stmt in (spec,) if isinstance(spec, str) else spec:
        try:
            if (value := eval(compile(stmt, "<bench>", "eval"), ns)) == expect or expect is None:
                break
            why = f"{stmt} gave {value!r}, expected {expect!r}"
        except Exception as e:  # a spelling this version lacks: try the next
            why = f"{stmt}: {type(e).__name__}: {e}"
    else:
        return {"na": f"no spelling worked ({why})"}
    try:
        timed = (timing.paired(timing.timer(stmt, ns), raw.loop(key), **cfg) if raw and key in ops.RATIO_KEYS
                 else timing.measure(stmt, ns, **cfg))
    except Exception as e:
        return {"na": f"{stmt} failed while timed: {type(e).__name__}: {e}"}
    return {**timed, "stmt": stmt, **({"note": lib.notes[key]} if key in lib.notes else {}),
            **({"not_best": True} if key in lib.not_best else {})}

def raw_driver(path: str):
    """raw_driver.c loaded and initialized (the primary context left current); `.loop(key, *args)`:
    run(n) of its C loop for operation `key`."""
    raw, p = ctypes.CDLL(path), ctypes.c_void_p
    raw.raw_time.restype, raw.raw_time.argtypes = ctypes.c_double, [ctypes.c_char_p, ctypes.c_long, p, p, ctypes.c_long]
    if step := raw.raw_init():
        raise RuntimeError(f"raw_init failed at step {step} (1: no libcuda, 2: a symbol missing, 3: a driver call)")

    def loop(key: str, s=None, g=None, batch=1):
        if raw.raw_time(key.encode(), 1, s, g, batch) < 0:
            raise RuntimeError(f"raw_driver.c's {key} loop failed")
        return lambda n: raw.raw_time(key.encode(), n, s, g, batch)

    raw.loop = loop
    return raw

def import_ms(stmt: str) -> dict:
    """What `python -X importtime -c STMT` reports, in a fresh process, for the top-level imports
    STMT adds to a bare interpreter's (this worker's own import has filled the page cache)."""

    def top_level(code: str) -> dict:  # the cumulative µs per top-level import, run in an empty folder
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=d, capture_output=True, text=True)
        found: dict = {}
        for m in re.finditer(r"^import time:\s+\d+\s*\|\s*(\d+)\s*\| (\S+)", p.stderr, re.M):
            found[m[2]] = found.get(m[2], 0) + int(m[1])
        return found
    startup = top_level("pass")
    return {"ms": sum(us for mod, us in top_level(stmt).items() if mod not in startup) / 1000, "stmt": stmt}

class Missing:
    """Stands for a test extension that is not there: every spelling then says why."""

    def __init__(self, why: str):
        self.why = why

    def __getattr__(self, name):
        raise RuntimeError(self.why)

def extension(name: str):
    """A test extension the rows call: `nb`, cpp_tests/casters.cpp built with nanobind against
    the installed custream (cached); `rx`, tests/rust_ext (scripts/build-rust-ext.sh builds it)."""
    try:
        if name == "rx":
            return importlib.import_module("custream_rust_ext")
        sys.path[1:1] = [os.path.join(ROOT, "cpp_tests"), os.path.join(ROOT, "cython_tests")]
        from _cpp_tools import module, nanobind
        from _cy_build import build
        if isinstance(lib := nanobind(), str):  # why not
            raise RuntimeError(lib)
        sys.path.insert(0, str(build([module("nb_bench", "casters.cpp", lib=lib)])))
        return importlib.import_module("nb_bench")
    except Exception as e:
        return Missing(f"no {'custream_rust_ext' if name == 'rx' else 'nanobind build'}: {type(e).__name__}: {e}"[:300])

def version(dists) -> str:
    found = [d for d in dists if any(True for _ in metadata.distributions(name=d))]
    return metadata.version(found[0]) if found else "unknown"

def floor_ext(path: str):
    """floor_ext.c built as an extension of this interpreter (run.py builds it)."""
    spec = importlib.util.spec_from_file_location("floor_ext", path)
    spec.loader.exec_module(mod := importlib.util.module_from_spec(spec))
    return mod

def measure(args, lib: ops.Lib, cfg: dict) -> dict:
    ns: dict = {"__name__": "__bench__"}
    exec(ops.PRODUCER, ns)
    try:
        exec(lib.import_stmt, ns)
    except Exception as e:
        return {"error": f"not importable: {type(e).__name__}: {e}"}
    imported = import_ms(lib.import_stmt) if lib.import_stmt else {"na": "not applicable"}
    raw = raw_driver(args.raw) if args.raw else None  # before the setup, as in a peer's program
    if lib is ops.LEAST:
        ns.update({k: v for k, v in vars(floor_ext(args.floor_ext)).items() if not k.startswith("_")})
    exec((lib.setup if args.gpu else lib.cpu_setup) + "p = Producer(H)\n", ns)
    ns.update({x: extension(x) for x, key in (("nb", "cpp_stream_ref"), ("rx", "rust_stream_ref")) if key in lib.ops})
    out: dict = {"version": version(lib.dists), "empty_loop": timing.measure("pass", ns, **cfg)}
    timed = {key: time_op(lib, key, ns, cfg, args.gpu, raw) for key in lib.ops}
    if lib is ops.CUSTREAM and args.gpu:  # the machine as custream sees it; a create + destroy alone
        cu = ns["custream"]
        out["machine"] = {"gpu": cu.device_info(0)[0], "driver_version": cu.driver_version(),
                          "device_count": cu.device_count()}
        p = subprocess.run([sys.executable, "-c", ops.ALONE], capture_output=True, text=True, timeout=120)
        timed["create_alone"] = ({"ns": float(p.stdout), "stmt": "custream.Stream().close()"} if p.returncode == 0
                                 else {"na": p.stderr[-200:]})
    return {**out, "ops": {**timed, "import": imported}}

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="measure what needs a device too")
    ap.add_argument("--raw", metavar="RAW_LIB", help="raw_driver.c built as a shared library")
    ap.add_argument("--floor-ext", help="floor_ext.c built as an extension of this interpreter")
    args = ap.parse_args()
    cfg = dict(repeats=5, target_ms=2.0, budget_s=0.5) if args.quick else dict(repeats=15, target_ms=20.0, budget_s=4.0)
    result: dict = {"lib": args.lib}
    try:
        if args.lib == "cython":
            import cython_read
            result.update(version=version(["Cython"]), ops={"cython_handle_read": cython_read.run(args.gpu, cfg)})
        elif args.lib in ("capture", "scale"):  # capture.py's and scale.py's rows
            result["rows"] = importlib.import_module(args.lib).run(
                cfg, args.gpu, args.raw and raw_driver(args.raw), args.floor_ext and floor_ext(args.floor_ext))
        else:
            result.update(measure(args, ops.LIBS[args.lib], cfg))
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))
    return 0

if __name__ == "__main__":
    sys.exit(main())
