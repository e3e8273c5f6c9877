#!/usr/bin/env python3
"""Instruction counts of custream's driver-free hot paths, with callgrind (no GPU needed).

    python3 benches/profile_cpu.py [--calls N] [--top K] [--keep DIR]

For each statement: run N executions under `valgrind --tool=callgrind`, collecting only
inside the loop (a small C helper toggles collection through callgrind's client request),
and print instructions per call, minus the empty loop's, with the K functions that cost
most (self cost, per call). The Python-level floors from ops.FLOORS run the same way.
Counts, unlike times, do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ops  # noqa: E402

TOGGLE_C = r'''
#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
'''

SCRIPT = '''
import ctypes, sys
sys.path.insert(0, {here!r})
import ops
ns = {{"__name__": "__bench__"}}
exec(ops.PRODUCER, ns)
exec({setup}, ns)
exec(ops.FLOOR_SETUP, ns)
toggle = ctypes.CDLL({helper!r}).toggle
stmt = {stmt!r}
# The names the statement uses become the loop function's locals: no dict lookups, no
# int objects for the loop counter, only the statement's own cost on top of FOR_ITER.
names = [n for n in compile(stmt, "<stmt>", "eval" if stmt != "pass" else "exec").co_names if n in ns]
from itertools import repeat
ns["_repeat"] = repeat
src = "def loop(n, _repeat=_repeat, " + "".join(f"{{x}}={{x}}, " for x in names) + "):\\n    for _ in _repeat(None, n):\\n        " + stmt
exec(src, ns)
loop = ns["loop"]
loop(1000)
import gc; gc.disable()
toggle()
loop({n})
toggle()
'''

CASES = [
    ("empty loop", "pass"),
    ("s.__cuda_stream__()", "s.__cuda_stream__()"),
    ("s.handle", "s.handle"),
    ("Stream.from_handle(H)", "CS.from_handle(H)"),
    ("as_stream(producer)", "custream.as_stream(p)"),
    ("as_stream(custream.Stream)", "custream.as_stream(s)"),
] + [(f"floor: {label}", stmt) for key in ("cuda_stream", "handle_int", "wrap_int", "wrap_protocol")
     for label, stmt in ops.FLOORS[key]]


# With --stub-driver: custream's driver-bound paths, over stub_libcuda.c (every call returns
# success at once), so the count is custream's own work around the driver calls.
STUB_CASES = [
    ("s.query()", "s.query()"),
    ("s.synchronize()", "s.synchronize()"),
    ("Stream().close()", "CS().close()"),
]

# The same calls through floor_ext.c, the least binding (ops.FLOOR_BINDING): custream's count
# less its binding's is what custream adds, in instructions, whatever the machine's speed.
STUB_FLOOR_CASES = {"s.query()": "fquery(H)", "s.synchronize()": "fsync(H)", "CS().close()": "fdestroy(fcreate())"}

LOAD_FLOOR_EXT = """
import worker as _worker
_m = _worker.load_floor_ext({path!r})
fcreate, fdestroy, fquery, fsync = _m.fcreate, _m.fdestroy, _m.fquery, _m.fsync
"""


def build_stub(workdir: str) -> dict:
    libdir = os.path.join(workdir, "stubdriver")
    os.makedirs(libdir, exist_ok=True)
    so = os.path.join(libdir, "libcuda.so.1")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", os.path.join(HERE, "stub_libcuda.c"), "-o", so], check=True)
    link = os.path.join(libdir, "libcuda.so")
    if not os.path.exists(link):
        os.symlink("libcuda.so.1", link)
    return dict(os.environ, LD_LIBRARY_PATH=libdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))


def build_helper(workdir: str) -> str:
    src = os.path.join(workdir, "toggle.c")
    so = os.path.join(workdir, "libtoggle.so")
    with open(src, "w") as f:
        f.write(TOGGLE_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", src, "-o", so], check=True)
    return so


def profile(stmt: str, n: int, helper: str, workdir: str, top: int, setup: str = "ops.CUSTREAM_CPU_SETUP",
            env: dict | None = None) -> tuple[int, list[tuple[int, str]]]:
    tag = re.sub(r"\W+", "_", stmt).strip("_") or "pass"
    script = os.path.join(workdir, f"case_{tag}.py")
    out = os.path.join(workdir, f"callgrind.{tag}.out")
    with open(script, "w") as f:
        f.write(SCRIPT.format(here=HERE, helper=helper, n=n, stmt=stmt, setup=setup))
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
                    sys.executable, script], check=True, capture_output=True, env=env)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", out],
                         check=True, capture_output=True, text=True).stdout
    total = 0
    funcs: list[tuple[int, str]] = []
    for ln in ann.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(PROGRAM TOTALS|\S.*)$", ln)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if m.group(2) == "PROGRAM TOTALS":
            total = ir
        else:
            funcs.append((ir, m.group(2)))
    funcs.sort(reverse=True)
    return total, funcs[:top]


def short(name: str) -> str:
    name = re.sub(r"^\S*?:", "", name) if "/" in name.split(" ")[0] else name
    name = re.sub(r"\s*\[[^\]]*\]$", "", name)
    return name[:110]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind output files here")
    ap.add_argument("--only", action="append", help="profile only statements containing this text")
    ap.add_argument("--stub-driver", action="store_true",
                    help="also profile query/synchronize/create+close over a do-nothing libcuda (stub_libcuda.c)")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        print("valgrind is not installed", file=sys.stderr)
        return 1
    workdir = args.keep or tempfile.mkdtemp(prefix="custream-callgrind-")
    os.makedirs(workdir, exist_ok=True)
    helper = build_helper(workdir)
    loop_per_call = None
    for title, stmt in CASES:
        if args.only and stmt != "pass" and not any(o in stmt for o in args.only):
            continue
        total, funcs = profile(stmt, args.calls, helper, workdir, args.top)
        per = total / args.calls
        if stmt == "pass":
            loop_per_call = per
            print(f"{title}: {per:.1f} instructions per iteration (subtracted below)\n")
            continue
        net = per - (loop_per_call or 0)
        print(f"{title}   [{stmt}]: {net:.0f} instructions per call")
        for ir, name in funcs:
            print(f"    {ir / args.calls:8.1f}  {short(name)}")
        print()
    if args.stub_driver:
        env = build_stub(workdir)
        import run  # noqa: E402  (benches/run.py: builds floor_ext.c for this interpreter)

        ext = run.build_raw("ext")
        floor_setup = None if isinstance(ext, dict) else "ops.CUSTREAM.setup + " + repr(LOAD_FLOOR_EXT.format(path=ext))
        print("over the stub driver (each driver call returns at once; counts are custream's own work):\n")
        for title, stmt in STUB_CASES:
            if args.only and not any(o in stmt for o in args.only):
                continue
            total, funcs = profile(stmt, args.calls, helper, workdir, args.top, "ops.CUSTREAM.setup", env)
            mine = total / args.calls - (loop_per_call or 0)
            print(f"{title}   [{stmt}]: {mine:.0f} instructions per call")
            for ir, name in funcs:
                print(f"    {ir / args.calls:8.1f}  {short(name)}")
            if floor_setup:
                floor = STUB_FLOOR_CASES[stmt]
                total, funcs = profile(floor, args.calls, helper, workdir, args.top, floor_setup, env)
                theirs = total / args.calls - (loop_per_call or 0)
                print(f"  the least binding [{floor}]: {theirs:.0f} instructions per call; custream adds {mine - theirs:.0f}")
                for ir, name in funcs:
                    print(f"    {ir / args.calls:8.1f}  {short(name)}")
            else:
                print(f"  the least binding: not built ({ext['error']})")
            print()
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
