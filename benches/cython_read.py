"""The Cython handle read: a `nogil` loop reading a stream's handle, compiled at bench time
against the installed custream (`from custream cimport Stream`) and, where rmm is installed,
against rmm's .pxd (`s.view().get()`).

Each iteration runs a compiler barrier (an empty `asm volatile` with a "memory" clobber), so
the handle is reloaded every time; the floor is the same loop reading nothing. The figure
is ns per iteration, and the generated C is checked to read `__pyx_v_s->handle`: a field
load with no call.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile

from timing import measure


def loop(name: str, params: str, read: str) -> str:
    return f'''
def {name}({params}Py_ssize_t n):
    cdef Py_ssize_t i
    cdef uintptr_t acc = 0
    with nogil:
        for i in range(n):
            bench_barrier()
            acc += {read}
    return acc
'''


HEAD = '''# cython: language_level=3
from libc.stdint cimport uintptr_t
{cimport}
cdef extern from *:
    """static inline void bench_barrier(void) {{ __asm__ __volatile__("" ::: "memory"); }}"""
    void bench_barrier() nogil
'''
CUSTREAM_PYX = (HEAD.format(cimport="from custream cimport Stream") + loop("floor", "", "<uintptr_t>i")
                + loop("field", "Stream s, ", "<uintptr_t>s.handle"))
RMM_PYX = "# distutils: language = c++\n" + HEAD.format(cimport="from rmm.pylibrmm.stream cimport Stream")


def build(name: str, source: str, workdir: str, *, cplus: bool = False, include=(), cython_include=(), link=()):
    """Cythonize and compile `source` as module `name`; returns (module, generated C)."""
    pyx, csrc = os.path.join(workdir, name + ".pyx"), os.path.join(workdir, name + (".cpp" if cplus else ".c"))
    with open(pyx, "w") as f:
        f.write(source)
    so = os.path.join(workdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
    cc = [os.environ.get("CXX", "g++"), "-std=c++20"] if cplus else [os.environ.get("CC", "gcc")]  # librmm 26: concepts
    for cmd in ([sys.executable, "-m", "cython", "-3", *(["--cplus"] if cplus else []), *[f"-I{d}" for d in cython_include],
                 pyx, "-o", csrc],
                [*cc, "-O2", "-shared", "-fPIC", "-w", "-I" + sysconfig.get_paths()["include"], *[f"-I{d}" for d in include],
                 csrc, "-o", so, *link]):
        p = subprocess.run(cmd, cwd=workdir, check=False, capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            lines = (p.stdout + p.stderr).strip().splitlines()
            first = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), 0)  # the first error explains the rest
            raise RuntimeError(f"{os.path.basename(cmd[0])} failed: " + " | ".join(lines[first:first + 4]))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(csrc) as f:
        return mod, f.read()


def rmm_build_flags() -> dict:
    """Header folders an rmm cimport needs (librmm's own with the CCCL it was built against,
    before the toolkit's older one; rapids_logger's; CUDA's) and librmm to link."""
    sites = [p for p in sys.path if os.path.isdir(p)]
    roots = [r for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if r]
    def under_sites(*patterns):
        return [d for pattern in patterns for site in sites for d in glob.glob(os.path.join(site, pattern))]

    found = (under_sites("librmm/include", "librmm/include/rapids", "librmm/include/rapids/libcudacxx", "rapids_logger/include")
             + [os.path.join(r, "include") for r in roots] + under_sites("nvidia/*/include", "nvidia/cu*/include")
             + [os.path.join(r, "include", "cccl") for r in roots])
    link = []
    for lib in [x for site in sites for x in glob.glob(os.path.join(site, "librmm", "lib*", "librmm.so"))][:1]:
        link = ["-L" + os.path.dirname(lib), "-Wl,-rpath," + os.path.dirname(lib), "-lrmm"]
    return {"include": list(dict.fromkeys(d for d in found if os.path.isdir(d))), "cython_include": sites, "link": link}


N = 1 << 20  # iterations per call: the call's own cost is lost in them


def per_iteration(stmt: str, ns: dict, cfg: dict, label: str) -> dict:
    r = measure(stmt, {**ns, "N": N}, **cfg)
    return {**r, "ns": r["ns"] / N, "min_ns": r["min_ns"] / N, "max_ns": r["max_ns"] / N, "number": r["number"] * N,
            "label": label}


def cython_version() -> str | None:
    try:
        import Cython
    except ImportError:
        return None
    return Cython.__version__


def run(mode: str, cfg: dict) -> dict:
    """Build and time the loops; failures become `na` entries."""
    import custream

    workdir = tempfile.mkdtemp(prefix="custream-bench-cy-")
    try:
        mod, csrc = build("bench_custream_read", CUSTREAM_PYX, workdir, include=[custream.get_include()],
                          cython_include=[os.path.dirname(os.path.dirname(custream.__file__))])
    except Exception as e:
        return {"custream": {"na": f"build failed: {e}"}}
    s = custream.Stream() if mode == "gpu" else custream.Stream.from_handle(0x7F3A2C001230)
    ns = {"mod": mod, "s": s}
    out = {"generated_c_reads_field": "__pyx_v_s->handle" in csrc,
           "floor": per_iteration("mod.floor(N)", ns, cfg, "same loop, no load"),
           "custream": per_iteration("mod.field(s, N)", ns, cfg, "s.handle (cdef field)")}
    out["rmm"] = rmm_loop(mode, workdir, cfg)
    return out


def rmm_loop(mode: str, workdir: str, cfg: dict) -> dict:
    try:
        from rmm.pylibrmm.stream import Stream as RmmStream
    except Exception as e:
        return {"na": f"rmm not importable: {type(e).__name__}: {e}"}
    if mode != "gpu":
        return {"na": "rmm streams need a GPU"}
    failures = []
    for getter in ("get", "value"):  # rmm 26's view() is a cuda::stream_ref (.get()); older ones .value()
        try:
            mod, _ = build(f"bench_rmm_{getter}", RMM_PYX + loop("view", "Stream s, ", f"<uintptr_t>s.view().{getter}()"),
                           workdir, cplus=True, **rmm_build_flags())
        except Exception as e:
            failures.append(f"view().{getter}(): {str(e)[-600:]}")
            continue
        return per_iteration("mod.view(s, N)", {"mod": mod, "s": RmmStream()}, cfg, f"s.view().{getter}() (rmm's .pxd)")
    return {"na": "rmm's .pxd did not build: " + " || ".join(failures)[-1500:]}
