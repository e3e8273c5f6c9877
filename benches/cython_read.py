"""The Cython handle read: a `nogil` loop that reads a stream's handle, compiled at bench
time against the installed custream (and rmm, where it is installed).

Each loop iteration runs a compiler barrier (an empty `asm volatile` with a "memory"
clobber) so the compiler must reload the handle every time instead of hoisting one load out
of the loop; the floor is the same loop reading nothing. The figure is ns per iteration.
The generated C is checked too: the custream loop must read `__pyx_v_s->handle`, a field
load with no call.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

BARRIER = '''
cdef extern from *:
    """
    #include <stdint.h>
    static inline void bench_barrier(void) { __asm__ __volatile__("" ::: "memory"); }
    static inline uintptr_t bench_word(void *o, Py_ssize_t k) {
        return ((uintptr_t *)((char *)o + sizeof(PyObject)))[k];
    }
    """
    void bench_barrier() nogil
    uintptr_t bench_word(void *o, Py_ssize_t k) nogil
'''

# Used when the installed custream/__init__.pxd does not declare Stream yet: the same
# declaration, from custream.h.
OWN_DECL = '''
cdef extern from "custream.h":
    cdef struct CUstream_st
    ctypedef CUstream_st *custream_handle_t
    ctypedef class custream.Stream [object CustreamStream, check_size error]:
        cdef custream_handle_t handle
'''

def loop(name: str, params: str, read: str, *, nogil: bool = True, before: str = "", guard: str = "") -> str:
    """One timed loop in Cython: n iterations, each a compiler barrier then `read` added to a
    sum (returned, so the read cannot be dropped); returns (elapsed ns, sum). `guard` runs
    before the read and may `break`; `before` declares what the loop needs."""
    head = "with nogil:\n        for i in range(n):\n            bench_barrier()\n" if nogil else "for i in range(n):\n"
    pad = " " * (12 if nogil else 8)
    body = "".join(pad + ln + "\n" for ln in guard.splitlines() + [f"acc += {read}"])
    return (f"\n\ndef {name}({params}Py_ssize_t n):\n    cdef Py_ssize_t i\n    cdef uintptr_t acc = 0\n{before}"
            f"    t0 = perf_counter_ns()\n    {head}{body}    return perf_counter_ns() - t0, acc\n")


CUSTREAM_PYX = '''# cython: language_level=3
from libc.stdint cimport uintptr_t
from time import perf_counter_ns
{decl}
{barrier}
cdef extern from "custream.h":
    """
    static inline int bench_closed(void *o) {{ return Custream_IsClosed((const CustreamStream *)o); }}
    """
    bint bench_closed(void *o) nogil


def word_at(o, Py_ssize_t k):
    return bench_word(<void *>o, k)
''' + "".join([
    loop("floor", "", "<uintptr_t>i"),
    loop("custream_field", "Stream s, ", "<uintptr_t>s.handle"),
    loop("custream_checked", "Stream s, ", "<uintptr_t>s.handle", guard="if bench_closed(<void *>s):\n    break"),
    loop("python_attribute", "s, ", "<uintptr_t>s.handle", nogil=False),
    loop("object_word", "o, Py_ssize_t k, ", "bench_word(p, k)", before="    cdef void *p = <void *>o\n"),
])  # the loops hold no braces: nothing to escape for format()

RMM_HEAD = '''# distutils: language = c++
# cython: language_level=3
from libc.stdint cimport uintptr_t
from time import perf_counter_ns
from rmm.pylibrmm.stream cimport Stream
{barrier}
'''

# Two modules, so that the field read still builds where the view() call does not.
RMM_VIEW_PYX = RMM_HEAD + loop("rmm_view_value", "Stream s, ", "<uintptr_t>s.view().GETTER()").replace("GETTER", "{getter}")
RMM_FIELD_PYX = RMM_HEAD + loop("rmm_field", "Stream s, ", "<uintptr_t>s._cuda_stream")


def _run(cmd: list[str], cwd: str, timeout: float = 180) -> None:
    p = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        lines = (p.stdout + p.stderr).strip().splitlines()
        # The first error explains the rest; the last lines say where it stopped.
        first = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), 0)
        keep = lines[first:first + 4] + (["..."] + lines[-6:] if len(lines) > first + 10 else lines[first + 4:])
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed: " + " | ".join(keep))


def build(name: str, source: str, workdir: str, *, cplus: bool = False, include: list[str] = (),
          cython_include: list[str] = (), link: list[str] = ()) -> tuple[object, str]:
    """Cythonize and compile `source` as module `name`; returns (module, generated C)."""
    pyx = os.path.join(workdir, name + ".pyx")
    csrc = os.path.join(workdir, name + (".cpp" if cplus else ".c"))
    with open(pyx, "w") as f:
        f.write(source)
    cy = [sys.executable, "-m", "cython", "-3"] + (["--cplus"] if cplus else [])
    for d in cython_include:
        cy += ["-I", d]
    _run(cy + [pyx, "-o", csrc], workdir)
    so = os.path.join(workdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = [os.environ.get("CXX", "g++") if cplus else os.environ.get("CC", "gcc"), "-O2", "-shared", "-fPIC", "-w"]
    cc += ["-std=c++20"] if cplus else []  # librmm 26 uses concepts
    cc += ["-I" + sysconfig.get_paths()["include"]] + ["-I" + d for d in include]
    _run(cc + [csrc, "-o", so] + list(link), workdir)
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(csrc) as f:
        return mod, f.read()


def time_loop(fn, *args, repeats: int = 15, target_ms: float = 20.0) -> dict:
    n = 1 << 16
    while True:
        elapsed, _ = fn(*args, n)
        if elapsed >= target_ms * 1e6 / 4 or n >= 1 << 34:
            break
        n <<= 2
    n = max(1, int(n * target_ms * 1e6 / max(elapsed, 1)))
    samples = [fn(*args, n)[0] / n for _ in range(repeats)]
    return {"ns": statistics.median(samples), "min_ns": min(samples), "max_ns": max(samples),
            "repeats": repeats, "number": n}


def custream_declaration() -> tuple[str, str]:
    """`from custream cimport Stream` once the shipped .pxd declares it, else our own."""
    import custream

    pxd = os.path.join(os.path.dirname(custream.__file__), "__init__.pxd")
    text = ""
    if os.path.exists(pxd):
        with open(pxd) as f:
            text = f.read()
    if re.search(r"ctypedef\s+class\s+custream\.Stream", text):
        return "from custream cimport Stream", "custream/__init__.pxd (shipped)"
    return OWN_DECL, "declared in the bench from custream.h (the shipped __init__.pxd does not declare Stream)"


def include_candidates() -> list[str]:
    """Header folders an rmm cimport may need: librmm's own (with the CCCL it was built
    against, which must come before the toolkit's older one), rapids_logger's, CUDA's."""
    sites = [p for p in sys.path if os.path.isdir(p)]
    found = []
    for pattern in ("librmm/include", "librmm/include/rapids", "librmm/include/rapids/libcudacxx", "rapids_logger/include"):
        found += [d for site in sites for d in glob.glob(os.path.join(site, pattern))]
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    found += [os.path.join(r, "include") for r in roots if r]
    for pattern in ("nvidia/*/include", "nvidia/cu*/include"):
        found += [d for site in sites for d in glob.glob(os.path.join(site, pattern))]
    found += [os.path.join(r, "include", "cccl") for r in roots if r]
    seen, out = set(), []
    for d in found:
        if os.path.isdir(d) and d not in seen:
            seen.add(d)
            out.append(d)
    return out


def rmm_link_flags() -> list[str]:
    flags = []
    for site in sys.path:
        for lib in glob.glob(os.path.join(site, "librmm", "lib*", "librmm.so")):
            d = os.path.dirname(lib)
            flags += ["-L" + d, "-Wl,-rpath," + d, "-lrmm"]
            return flags
    return flags


def run(mode: str, quick: bool) -> dict:
    """Build and time the loops. Never raises: failures become `na` entries."""
    import custream

    cfg = {"repeats": 5, "target_ms": 2.0} if quick else {"repeats": 15, "target_ms": 20.0}
    workdir = tempfile.mkdtemp(prefix="custream-bench-cy-")
    out: dict = {"workdir": workdir}
    decl, where = custream_declaration()
    out["declaration"] = where
    site_root = os.path.dirname(os.path.dirname(custream.__file__))
    try:
        t0 = time.perf_counter()
        mod, csrc = build("bench_custream_read", CUSTREAM_PYX.format(decl=decl, barrier=BARRIER), workdir,
                          include=[custream.get_include()], cython_include=[site_root])
        out["build_s"] = round(time.perf_counter() - t0, 2)
    except Exception as e:
        out["custream"] = {"na": f"build failed: {e}"}
        return out
    out["generated_c_reads_field"] = "__pyx_v_s->handle" in csrc
    if mode == "gpu":
        s = custream.Stream()
    else:
        s = custream.Stream.from_handle(0x7F3A2C001230)
    out["floor"] = dict(time_loop(mod.floor, **cfg), label="same loop, no load")
    out["custream"] = dict(time_loop(mod.custream_field, s, **cfg), label="s.handle (cdef field)")
    out["custream_checked"] = dict(time_loop(mod.custream_checked, s, **cfg), label="Custream_IsClosed(s) then s.handle")
    out["python_attribute"] = dict(time_loop(mod.python_attribute, s, **cfg), label="s.handle as a Python attribute (no cimport)")
    out["rmm"] = rmm_loops(mod, mode, workdir, cfg)
    if not quick:
        shutil.rmtree(workdir, ignore_errors=True)
        out.pop("workdir")
    return out


def rmm_loops(mod, mode: str, workdir: str, cfg: dict) -> dict:
    """rmm's Stream.view().get() (or .value()) through rmm's own .pxd; failing that, its handle field
    read at the offset where the handle is found in the object."""
    try:
        import rmm  # noqa: F401
        from rmm.pylibrmm.stream import Stream as RmmStream
    except Exception as e:
        return {"na": f"rmm not importable: {type(e).__name__}: {e}"}
    if mode != "gpu":
        return {"na": "rmm streams need a GPU"}
    streams = [RmmStream(), RmmStream()]
    out: dict = {}
    common = dict(workdir=workdir, cplus=True, include=include_candidates(),
                  cython_include=[p for p in sys.path if os.path.isdir(p)], link=rmm_link_flags())
    failures = []
    # rmm 26.x's view() is a cuda::stream_ref (.get()); older ones, a cuda_stream_view (.value()).
    for n, getter in enumerate(("get", "value")):
        try:
            vmod, _ = build(f"bench_rmm_view{n}", RMM_VIEW_PYX.format(barrier=BARRIER, getter=getter), **common)
        except Exception as e:
            failures.append(f"view().{getter}(): {str(e)[-600:]}")
            continue
        out["view_value"] = dict(time_loop(vmod.rmm_view_value, streams[0], **cfg), label=f"s.view().{getter}() (rmm's .pxd)")
        break
    try:
        fmod, _ = build("bench_rmm_field", RMM_FIELD_PYX.format(barrier=BARRIER), **common)
        out["field"] = dict(time_loop(fmod.rmm_field, streams[0], **cfg), label="s._cuda_stream (rmm's .pxd)")
    except Exception as e:
        failures.append(f"_cuda_stream: {str(e)[-600:]}")
    if failures:
        out["cimport_failed"] = " || ".join(failures)[-1500:]
    if "view_value" in out or "field" in out:
        return out
    # Fallback: find the word after the object header that holds the handle, in two streams.
    handles = [st.__cuda_stream__()[1] for st in streams]
    # Only words inside the object: tp_basicsize bounds what may be read.
    words = max(0, (type(streams[0]).__basicsize__ - object.__basicsize__) // 8)
    ks = [k for k in range(min(words, 8)) if all(mod.word_at(st, k) == h for st, h in zip(streams, handles))]
    if not ks:
        out["na"] = "rmm's .pxd did not build and no field holds the handle"
        return out
    out["field"] = dict(time_loop(mod.object_word, streams[0], ks[0], **cfg),
                        label=f"rmm Stream._cuda_stream read at word {ks[0]} after the header (layout found at run time)")
    return out
