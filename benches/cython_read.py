"""The Cython handle read: a `nogil` loop reading `s.handle` (`from custream cimport Stream`),
built by cython_tests/_cy_build.py, a compiler barrier in each iteration so the handle is
reloaded; the floor is the same loop reading nothing. The generated C must read
`__pyx_v_s->handle`: a field load, no call. (rmm's `.pxd` needs the CUDA toolkit: not built.)
"""

import os, subprocess, sys, tempfile

import ops
from timing import measure

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cython_tests"))
N = 1 << 20  # iterations per call: the call's own cost is lost in them
LOOP = '''
def {name}({args}Py_ssize_t n):
    cdef Py_ssize_t i
    cdef uintptr_t acc = 0
    with nogil:
        for i in range(n):
            barrier()
            acc += <uintptr_t>{read}
    return acc
'''
PYX = '''# cython: language_level=3
from libc.stdint cimport uintptr_t
from custream cimport Stream
cdef extern from *:
    """static inline void barrier(void) { __asm__ __volatile__("" ::: "memory"); }"""
    void barrier() nogil
''' + LOOP.format(name="floor", args="", read="i") + LOOP.format(name="field", args="Stream s, ", read="s.handle")

def per_iteration(stmt: str, ns: dict, cfg: dict, label: str) -> dict:
    r = measure(stmt, {**ns, "N": N}, **cfg)
    return {**r, "ns": r["ns"] / N, "min_ns": r["min_ns"] / N, "max_ns": r["max_ns"] / N, "number": r["number"] * N,
            "label": label}

def run(gpu: bool, cfg: dict) -> dict:
    """Build and time the loops; a failed build becomes an `na` entry."""
    import custream
    from _cy_build import Module, build
    os.makedirs(folder := os.path.join(tempfile.gettempdir(), "custream-bench-cy"), exist_ok=True)
    with open(pyx := os.path.join(folder, "bench_custream_read.pyx"), "w") as f:
        f.write(PYX)
    try:  # the generated C, to check; then the module, compiled as a downstream build would
        subprocess.run([sys.executable, "-m", "cython", "-3", pyx, "-o", pyx + ".c"], check=True, capture_output=True,
                       text=True)
        sys.path.insert(0, str(build([Module("bench_custream_read", pyx, cflags=("-O2", "-w"))])))
        import bench_custream_read as mod
    except (subprocess.CalledProcessError, RuntimeError, ImportError) as e:
        return {"custream": {"na": f"build failed: {getattr(e, 'stderr', None) or e}"[-600:]}}
    with open(pyx + ".c") as f:
        reads_field = "__pyx_v_s->handle" in f.read()
    ns = {"mod": mod, "s": custream.Stream() if gpu else custream.Stream.from_handle(ops.FAKE_H)}
    return {"generated_c_reads_field": reads_field, "rmm": {"na": "not built by the bench (see cython_read.py)"},
            "floor": per_iteration("mod.floor(N)", ns, cfg, "same loop, no load"),
            "custream": per_iteration("mod.field(s, N)", ns, cfg, "s.handle (cdef field)")}
