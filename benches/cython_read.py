"""The Cython handle read: a `nogil` loop reading `s.handle` (`from custream cimport Stream`),
and rmm's `s.view().get()` where rmm is installed, built against the installed packages by
cython_tests/_cy_build.py. Each iteration runs a compiler barrier (an empty `asm volatile`
with a "memory" clobber), so the handle is reloaded every time; the floor is the same loop
reading nothing. The generated C must read `__pyx_v_s->handle`: a field load, no call.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

from timing import measure

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cython_tests"))
N = 1 << 20  # iterations per call: the call's own cost is lost in them


def source(cimport: str, **loops: str) -> str:
    head = ("# cython: language_level=3\nfrom libc.stdint cimport uintptr_t\n" + cimport + "\ncdef extern from *:\n"
            '    """static inline void barrier(void) { __asm__ __volatile__("" ::: "memory"); }"""\n    void barrier() nogil\n')
    return head + "".join(f"\ndef {name}({'Stream s, ' if 's.' in read else ''}Py_ssize_t n):\n    cdef Py_ssize_t i\n"
                          f"    cdef uintptr_t acc = 0\n    with nogil:\n        for i in range(n):\n            barrier()\n"
                          f"            acc += <uintptr_t>{read}\n    return acc\n" for name, read in loops.items())


def build(name: str, text: str, **flags):
    """The module built from `text`, and the C Cython generates for it."""
    from _cy_build import Module, build

    os.makedirs(folder := os.path.join(tempfile.gettempdir(), "custream-bench-cy"), exist_ok=True)
    with open(pyx := os.path.join(folder, name + ".pyx"), "w") as f:
        f.write(text)
    cplus = ["--cplus"] if flags.get("cplus") else []
    cython = subprocess.run([sys.executable, "-m", "cython", "-3", *cplus, pyx, "-o", pyx + ".c"], capture_output=True, text=True)
    if cython.returncode:
        raise RuntimeError(f"cython failed: {' | '.join(cython.stderr.strip().splitlines()[-4:])}")
    sys.path.insert(0, str(build([Module(name, pyx, cflags=("-O2", "-w", *flags.pop("cflags", ())), **flags)])))
    with open(pyx + ".c") as f:
        return __import__(name), f.read()


def per_iteration(stmt: str, ns: dict, cfg: dict, label: str) -> dict:
    r = measure(stmt, {**ns, "N": N}, **cfg)
    return {**r, "ns": r["ns"] / N, "min_ns": r["min_ns"] / N, "max_ns": r["max_ns"] / N, "number": r["number"] * N, "label": label}


def run(gpu: bool, cfg: dict) -> dict:
    """Build and time the loops; failures become `na` entries."""
    import custream

    try:
        mod, csrc = build("bench_custream_read", source("from custream cimport Stream", floor="i", field="s.handle"))
    except Exception as e:
        return {"custream": {"na": f"build failed: {e}"}}
    ns = {"mod": mod, "s": custream.Stream() if gpu else custream.Stream.from_handle(0x7F3A2C001230)}
    return {"generated_c_reads_field": "__pyx_v_s->handle" in csrc, "rmm": rmm(gpu, cfg),
            "floor": per_iteration("mod.floor(N)", ns, cfg, "same loop, no load"),
            "custream": per_iteration("mod.field(s, N)", ns, cfg, "s.handle (cdef field)")}


def rmm(gpu: bool, cfg: dict) -> dict:
    try:
        from rmm.pylibrmm.stream import Stream
    except Exception as e:
        return {"na": f"rmm not importable: {type(e).__name__}: {e}"}
    if not gpu:
        return {"na": "rmm streams need a GPU"}
    # librmm's headers with the CCCL it was built against (before the toolkit's older one),
    # rapids_logger's, then CUDA's; and librmm to link.
    sites = [p for p in sys.path if os.path.isdir(p)]
    roots = [r for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if r]
    found = [d for pattern in ("librmm/include", "librmm/include/rapids", "librmm/include/rapids/libcudacxx",
                               "rapids_logger/include") for site in sites for d in glob.glob(os.path.join(site, pattern))]
    found += [os.path.join(r, "include") for r in roots]
    found += [d for site in sites for d in glob.glob(os.path.join(site, "nvidia/*/include"))]
    found += [os.path.join(r, "include", "cccl") for r in roots]
    libs = [os.path.dirname(x) for site in sites for x in glob.glob(os.path.join(site, "librmm", "lib*", "librmm.so"))][:1]
    try:
        mod, _ = build("bench_rmm_read", "# distutils: language = c++\n" + source(
            "from rmm.pylibrmm.stream cimport Stream", view="s.view().get()"),
            cplus=True, include_dirs=tuple(dict.fromkeys(d for d in found if os.path.isdir(d))), cflags=("-std=c++20",),
            ldflags=tuple(f for d in libs for f in ("-L" + d, "-Wl,-rpath," + d, "-lrmm")))
    except Exception as e:
        return {"na": f"rmm's .pxd did not build: {str(e)[-1500:]}"}
    return per_iteration("mod.view(s, N)", {"mod": mod, "s": Stream()}, cfg, "s.view().get() (rmm's .pxd)")
