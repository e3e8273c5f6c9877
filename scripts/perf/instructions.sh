#!/usr/bin/env bash
# Instructions per call of custream's rows beside the least binding (benches/floor_ext.c),
# counted by valgrind's callgrind against the stand-in driver (tests/standin/libcuda.c): the
# binding's own work, with the driver's taken out (docs/benchmarks.md, "Where the time goes").
# Each figure is (a loop of 20,000 calls) - (a loop of none), over 20,000, loop included
# (the `pass` row). Needs valgrind and a C compiler; uses the custream that $PYTHON imports.
# STANDIN=capture.c counts against the stand-in that models memory (for W, a device word).
# SETUP='P = custream.StreamPool(4)' runs before the loop (counted in both runs, so taken out).
#   bash scripts/perf/instructions.sh ['STATEMENT' ...]
#   STANDIN=capture.c bash scripts/perf/instructions.sh pass "s.write_value(W, 1)" "fwrite(S, W, 1)"
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
dir=$(mktemp -d)
"$PYTHON" - "$dir" "${STANDIN:-libcuda.c}" <<'PY'
import pathlib, re, subprocess, sys, sysconfig
sys.path.insert(0, "tests")
import standin
out = pathlib.Path(sys.argv[1])
raw = re.findall(r"X\((cu\w+),", pathlib.Path("benches/raw_driver.c").read_text())  # floor_ext.c's entry points
standin.build(sys.argv[2], out, also=raw)
subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], "benches/floor_ext.c",
                "-o", str(out / ("floor_ext" + sysconfig.get_config_var("EXT_SUFFIX"))), "-ldl"], check=True)
PY
cat >"$dir/loop.py" <<'PY'
import ctypes, os, sys
sys.path.insert(0, sys.argv[3])
cu, ctx = ctypes.CDLL("libcuda.so.1"), ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuCtxPushCurrent_v2(ctx) == 0
import custream
from floor_ext import fcreate, fdestroy, fpolicy, fquery, fsetpolicy, fsync, fstream, fwrite, fwait
CS, s, Hf = custream.Stream, custream.Stream(), fcreate()
S = s.handle
if hasattr(cu, "fake_mem_alloc"):  # STANDIN=capture.c: a device word W for the memory operations' rows
    cu.fake_mem_alloc.restype = ctypes.c_void_p
    W = cu.fake_mem_alloc(ctypes.c_size_t(64))
fs = fstream(Hf)
def with_(cm):
    with cm:
        pass
exec(os.environ.get("SETUP", ""))
exec(compile(f"for _ in range({sys.argv[2]}):\n    {sys.argv[1]}\n", "loop", "exec"))
PY
count() {
    LD_LIBRARY_PATH=$dir CUSTREAM_LIBCUDA=$dir/libcuda.so.1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        --error-exitcode=0 "$PYTHON" "$dir/loop.py" "$1" "$2" "$dir" >"$dir/log" 2>&1 || { cat "$dir/log" >&2; exit 1; }
    sed -n 's/.*refs: *\([0-9,]*\).*/\1/p' "$dir/log" | tr -d ,
}
[ $# -gt 0 ] || set -- pass "s.query()" "fquery(Hf)" "s.synchronize()" "fsync(Hf)" "CS().close()" \
    "fdestroy(fcreate())" "s.handle" "fs.handle" "with_(s)"
for stmt in "$@"; do
    printf '%-24s %6d instructions\n' "$stmt" $(( ($(count "$stmt" 20000) - $(count "$stmt" 0)) / 20000 ))
done
rm -rf "$dir"
