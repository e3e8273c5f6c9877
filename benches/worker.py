"""One worker: a round of one library of ops.LIBS, or rows measured once a run (cython, capture, waits)."""

import argparse, ctypes, importlib, json, os, pathlib, re, subprocess, sys, tempfile
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
sys.path += [os.path.join(ROOT, "cpp_tests"), os.path.join(ROOT, "cython_tests")]  # the tests' builders, last

import ops, timing  # noqa: E402

N = 1 << 20  # the Cython loops' iterations a call
PYX = '''# cython: language_level=3
from libc.stdint cimport uintptr_t
from custream cimport Stream
cdef extern from *:
    """static inline void barrier(void) { __asm__ __volatile__("" ::: "memory"); }"""
    void barrier() nogil
''' + "".join(f'''
def {name}({args}Py_ssize_t n):
    cdef Py_ssize_t i
    cdef uintptr_t acc = 0
    with nogil:
        for i in range(n):
            barrier()
            acc += <uintptr_t>{read}
    return acc
''' for name, args, read in (("floor", "", "i"), ("field", "Stream s, ", "s.handle")))

def time_op(lib: ops.Lib, key: str, ns: dict, cfg: dict, gpu: bool, raw) -> dict:
    """`lib`'s first statement for operation `key` that runs (and gives the right value), timed."""
    if isinstance(spec := lib.ops[key], ops.NA) or (ops.OPS[key].gpu and not gpu):
        return {"na": spec.reason if isinstance(spec, ops.NA) else ops.NEEDS_GPU}
    expect = {"handle_int": ns["H"], "cuda_stream": (0, ns["H"])}.get(key)
    for stmt in (spec,) if isinstance(spec, str) else spec:
        try:
            try:  # a statement (`with`, an assignment) is run once, its value None
                value = eval(stmt, ns)
            except SyntaxError:
                value = exec(stmt, ns)
            if value == expect or expect is None:
                break
            why = f"{stmt} gave {value!r}, expected {expect!r}"
        except Exception as e:  # a spelling this version lacks: try the next
            why = f"{stmt}: {type(e).__name__}: {e}"
    else:
        return {"na": f"no spelling worked ({why})"}
    mate = key in ops.PAIRED and lib is ops.CUSTREAM and lib.ops[ops.OPS[key].times[2]]  # the row its target names
    least = "fs" in ns and ops.IN_TURN.get(key)  # the least binding's statement, in custream's worker
    c_loop = raw and ops.OPS[key].raw is not None and not least
    try:  # in turn with those, or with raw_driver.c's loop (gc: custream's green context, for its row's)
        runs = [timing.timer(x, ns) for x in (stmt, mate, least) if x]
        if c_loop:
            runs.append(raw.loop(key, None, getattr(ns.get("gc"), "handle", None)))
        fig, ratio = timing.medians_and_ratios(runs, **cfg)
    except Exception as e:
        return {"na": f"{stmt} failed while timed: {type(e).__name__}: {e}"}
    timed = {"ns": fig[0]}
    if mate:
        timed["paired"] = {"stmt": mate, "ratio": ratio(0, 1), **({"floor_ratio": ratio(2, 1)} if least else {})}
    if least:
        timed["least"] = {"stmt": least, "ns": fig[-1], "ratio": ratio(0, len(runs) - 1)}
    elif c_loop:
        timed.update(raw_ns=fig[-1], ratio=ratio(0, len(runs) - 1))
    return {**timed, "stmt": stmt, **({"note": lib.notes[key]} if key in lib.notes else {}),
            **({"not_best": True} if key in lib.not_best else {})}

def raw_driver(path: str):
    """raw_driver.c, initialized (the primary context left current); `.loop(key, *args)`: run(n) of a C loop."""
    raw, p, d = ctypes.CDLL(path), ctypes.c_void_p, ctypes.c_double
    for f, res, args in ((raw.raw_time, d, [ctypes.c_char_p, ctypes.c_long, p, p, ctypes.c_long]),
                         (raw.raw_hostfn, d, [p]),  # waits.py's: the host function's time, and the kernel's end
                         (raw.raw_watch_start, ctypes.c_int, [p, d]), (raw.raw_watch_join, d, [])):
        f.restype, f.argtypes = res, args
    if step := raw.raw_init():
        raise RuntimeError(f"raw_init failed at step {step} (1: no libcuda, 2: a symbol missing, 3: a driver call)")

    def loop(key: str, s=None, g=None, batch=1):
        if raw.raw_time(key.encode(), 1, s, g, batch) < 0:
            raise RuntimeError(f"raw_driver.c's {key} loop failed")
        return lambda n: raw.raw_time(key.encode(), n, s, g, batch)
    raw.loop = loop
    return raw

def import_ms(stmt: str) -> dict:
    """The top-level imports STMT adds to a bare interpreter (`python -X importtime`, in an empty folder)."""
    code = f"import sys; sys.stderr.write('--\\n'); {stmt}"  # what follows the mark is STMT's
    with tempfile.TemporaryDirectory() as d:
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=d, capture_output=True, text=True)
    us = re.findall(r"^import time:\s+\d+\s*\|\s*(\d+)\s*\| \S", err.stderr.partition("--\n")[2], re.M)
    return {"ms": sum(map(int, us)) / 1000, "stmt": stmt}

class Missing(str):  # a test extension that is not there (the string says why): every spelling fails
    def __getattr__(self, name):
        raise RuntimeError(self)

def built(module):  # a cython_tests/_cy_build Module, built against the installed custream (cached), imported
    from _cy_build import build
    sys.path.insert(0, str(build([module])))
    return importlib.import_module(module.name)

def extension(name: str):
    """`nb`: cpp_tests/casters.cpp built with nanobind; `rx`: tests/rust_ext (scripts/build/build-rust-ext.sh)."""
    try:
        if name == "rx":
            return importlib.import_module("custream_rust_ext")
        from _cpp_tools import module, nanobind
        if isinstance(lib := nanobind(), str):  # why not
            raise RuntimeError(lib)
        return built(module("nb_bench", "casters.cpp", lib=lib))
    except Exception as e:
        return Missing(f"no {'custream_rust_ext' if name == 'rx' else 'nanobind build'}: {type(e).__name__}: {e}"[:300])

def version(dists) -> str:
    return next((d.version for name in dists for d in metadata.distributions(name=name)), "unknown")

def cython(cfg: dict, gpu: bool, *_) -> dict:
    """A `nogil` loop reading `s.handle` beside one reading nothing; the generated C must read the field, no call."""
    import custream
    from _cy_build import Module
    (pyx := pathlib.Path(tempfile.gettempdir(), "bench_custream_read.pyx")).write_text(PYX)  # a fixed path: cached
    try:  # the C that Cython generates, checked below, built
        subprocess.run([sys.executable, "-m", "cython", "-3", pyx, "-o", f"{pyx}.c"], check=True, capture_output=True,
                       text=True)
        mod = built(Module("bench_custream_read", f"{pyx}.c", cflags=("-O2", "-w")))
    except (subprocess.CalledProcessError, RuntimeError, ImportError) as e:
        return {"custream": {"na": f"build failed: {getattr(e, 'stderr', None) or e}"[-600:]}}
    ns = {"mod": mod, "N": N, "s": custream.Stream() if gpu else custream.Stream.from_handle(ops.FAKE_H)}
    per = lambda stmt, label: {"ns": timing.median_ns(stmt, ns, **cfg) / N, "stmt": stmt, "label": label}  # noqa
    return {"version": version(["Cython"]), "rmm": {"na": "not built by the bench (its .pxd needs the CUDA toolkit)"},
            "generated_c_reads_field": "__pyx_v_s->handle" in pathlib.Path(f"{pyx}.c").read_text(),
            "floor": per("mod.floor(N)", "same loop, no load"), "custream": per("mod.field(s, N)", "s.handle")}

def measure(args, lib: ops.Lib, cfg: dict) -> dict:
    ns: dict = {"__name__": "__bench__"}
    try:
        exec(ops.PRODUCER + lib.import_stmt, ns)
    except Exception as e:
        return {"error": f"not importable: {type(e).__name__}: {e}"}
    raw = raw_driver(args.raw) if args.raw else None  # first: the primary context current, as peers' setups leave it
    if args.floor_ext and lib in (ops.LEAST, ops.CUSTREAM):  # the least binding's functions; fstream for IN_TURN
        exec("from floor_ext import *", ns)
    # p: what wrap_protocol wraps; fs: the least getset on this library's handle (ops.IN_TURN)
    exec((lib.setup if args.gpu else lib.cpu_setup) + "p = Producer(H)\n" + "fs = fstream(H)\n" * ("fstream" in ns), ns)
    ns.update({x: extension(x) for x, key in (("nb", "cpp_stream_ref"), ("rx", "rust_stream_ref")) if key in lib.ops})
    out: dict = {"version": version(lib.dists), "empty_loop": {"ns": timing.median_ns("pass", ns, **cfg)}}
    timed = {key: time_op(lib, key, ns, cfg, args.gpu, raw) for key in lib.ops}
    if lib is ops.CUSTREAM and args.gpu:  # the machine as custream sees it; a create + destroy alone
        out["machine"] = {"gpu": ns["custream"].device_info(0)[0], "driver_version": ns["custream"].driver_version()}
        p = subprocess.run([sys.executable, "-c", ops.ALONE], capture_output=True, text=True, timeout=120)
        timed["create_alone"] = ({"ns": float(p.stdout), "stmt": "custream.Stream().close()"} if p.returncode == 0
                                 else {"na": p.stderr[-200:]})
    return {**out, "ops": {**timed, "import": import_ms(lib.import_stmt) if lib.import_stmt else ops.NOT_APPLICABLE}}

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="measure what needs a device too")
    ap.add_argument("--raw", metavar="RAW_LIB", help="raw_driver.c built as a shared library")
    ap.add_argument("--floor-ext", help="floor_ext.c built as an extension of this interpreter, named floor_ext")
    args = ap.parse_args()
    sys.path[1:1] = [os.path.dirname(args.floor_ext)] if args.floor_ext else []
    cfg = dict(repeats=5, target_ms=2.0, budget_s=0.5) if args.quick else dict(repeats=15, target_ms=20.0, budget_s=4.0)
    result: dict = {"lib": args.lib}
    try:
        if args.lib in ("cython", "capture", "waits"):  # rows measured once a run
            once = cython if args.lib == "cython" else importlib.import_module(args.lib).run
            result["rows"] = once(cfg, args.gpu, args.raw and raw_driver(args.raw),
                                  args.floor_ext and importlib.import_module("floor_ext"))
        else:
            result.update(measure(args, ops.LIBS[args.lib], cfg))
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))
    return 0

if __name__ == "__main__":
    sys.exit(main())
