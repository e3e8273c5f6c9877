#!/usr/bin/env bash
# The whole GPU run in one call, from the repository root of a GPU machine:
#
#   bash scripts/gpu-check.sh [tests] [bench] [sanitizer]      (default: tests)
#
# 1. installs the release wheel carried in dist/ (scripts/build-wheel.sh dist: what users
#    get; GPU_CHECK_WHEEL=PATH for another build), the Rust crate's test extension if dist/
#    has it (scripts/build/build-rust-ext.sh dist; tests/gpu/test_gpu_rust.py skips without it) and
#    the wheels in .whl/ (rmm, librmm, rapids-logger; optional: scripts/gpu-wheels.sh fetches
#    them) into /tmp/site, offline, and puts it first on PYTHONPATH;
# 2. prints the versions of Python, the driver and every peer library;
# 3. runs `python3 -m custream` (the report; a failure there does not stop the run);
# 4. stage "tests": `pytest -m gpu tests cython_tests`, then a pass/fail table per peer
#    library with its version (also written to $OUT/peer-table.txt);
# 5. stage "bench": benches/run.py --gpu, if that script exists ("rows": three of its workers, quick);
# 6. stage "sanitizer": scripts/sanitizer/sanitizer-check.sh, if that script exists.
#
# GPU_CHECK_TESTS="tests/gpu/test_gpu_x.py ..." narrows stage "tests" to those paths.
# SANITIZER_SUITE=1 adds the gpu-marked tests under both tools to the sanitizer stage.
#
# Results go to $OUT (default ./gpu-out): gpu-tests.log, gpu-junit.xml, peer-table.txt,
# versions.txt, bench.json, sanitizer-logs/. One peer's failure never stops the
# others; every stage has a time limit and the whole script ends within about 9 minutes.
# Exit status: 0 when every stage that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
SITE=${CUSTREAM_SITE:-/tmp/site}
DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET_S:-530}))
PY=${PYTHON:-python3}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests)
for s in "${stages[@]}"; do
    case "$s" in tests | bench | rows | sanitizer) ;; *) echo "unknown stage '$s' (known: tests bench rows sanitizer)" >&2; exit 2 ;; esac
done
want() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

# Seconds a stage may take: its own cap, or what is left before the deadline less a margin.
budget() {
    local left=$((DEADLINE - SECONDS - 15))
    [ "$left" -lt "$1" ] && echo $((left > 10 ? left : 10)) || echo "$1"
}

declare -A status
banner() { printf '\n==== %s ====\n' "$*"; }

# ---- install ---------------------------------------------------------------------------
banner "install into $SITE"
# The artifact users get: the wheel scripts/build-wheel.sh makes (tagged manylinux_2_28).
# GPU_CHECK_WHEEL=PATH installs another custream wheel instead (a developer's native
# build, scripts/build/dev-install.sh's dist-dev/), and the run says so.
release_tag=manylinux_2_28_x86_64
shopt -s nullglob
if [ -n "${GPU_CHECK_WHEEL:-}" ]; then
    custream_wheel=$GPU_CHECK_WHEEL
    [ -f "$custream_wheel" ] || { echo "GPU_CHECK_WHEEL=$custream_wheel: no such file" >&2; exit 2; }
else
    release=(dist/custream-*-"$release_tag".whl)
    if [ ${#release[@]} -ne 1 ]; then
        echo "need exactly one release wheel dist/custream-*-$release_tag.whl (found ${#release[@]}):" \
            "build it with scripts/build-wheel.sh dist and carry dist/; GPU_CHECK_WHEEL=PATH tests another" >&2
        exit 2
    fi
    custream_wheel=${release[0]}
fi
wheels=("$custream_wheel" dist/*rust*ext*x86_64.whl .whl/*.whl)
shopt -u nullglob
case "$custream_wheel" in
    *"$release_tag".whl) echo "custream: the release wheel, $(basename "$custream_wheel")" ;;
    *) echo "custream: NOT the release wheel: $(basename "$custream_wheel") (GPU_CHECK_WHEEL)" ;;
esac
rm -rf "$SITE"
mkdir -p "$SITE"
printf '  %s\n' "${wheels[@]}"
if ! timeout 120 "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$SITE" "${wheels[@]}"; then
    # No pip, or pip refused: a wheel is a zip whose top level is what site-packages holds.
    echo "pip install failed; unpacking the wheels instead"
    "$PY" - "$SITE" "${wheels[@]}" <<'EOF' || { echo "could not install the wheels" >&2; exit 2; }
import sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
for w in wheels:
    zipfile.ZipFile(w).extractall(site)
    print("  unpacked", w)
EOF
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

# ---- versions ------------------------------------------------------------------------
banner "versions"
"$PY" --version
if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
else
    echo "nvidia-smi: not found"
fi
timeout 60 "$PY" - <<'EOF' | tee "$OUT/versions.txt"
import importlib, importlib.metadata as md

def dist_version(*names):
    for n in names:
        try:
            return f"{md.version(n)} ({n})"
        except md.PackageNotFoundError:
            pass
    return "not installed"

for label, names in [
    ("custream", ["custream"]),
    ("cuda-core", ["cuda-core"]),
    ("cuda-bindings", ["cuda-bindings"]),
    ("cupy", ["cupy-cuda13x", "cupy-cuda12x", "cupy"]),
    ("torch", ["torch"]),
    ("numba-cuda", ["numba-cuda"]),
    ("rmm", ["rmm-cu13", "rmm-cu12", "rmm"]),
    ("librmm", ["librmm-cu13", "librmm-cu12", "librmm"]),
    ("Cython", ["Cython", "cython"]),
    ("pytest", ["pytest"]),
    ("nanobind", ["nanobind"]),
    ("pybind11", ["pybind11"]),
    ("cccl", ["nvidia-cuda-cccl"]),
]:
    print(f"{label:14} {dist_version(*names)}")
try:
    import custream
    print(f"{'custream-file':14} {custream.__file__}")
    if custream.is_available():
        print(f"{'cuda-driver':14} {custream.driver_version()}, {custream.device_count()} device(s):",
              [custream.device_info(i)[0] for i in range(custream.device_count())])
    else:
        print(f"{'cuda-driver':14} custream sees none")
except Exception as e:  # the report must go on
    print(f"custream import failed: {type(e).__name__}: {e}")
EOF

banner "python -m custream"
timeout 60 "$PY" -m custream || echo "(python -m custream exited with $?; continuing)"

# ---- tests -----------------------------------------------------------------------------
if want tests; then
    banner "gpu tests"
    if ! "$PY" -c "import pytest" 2>/dev/null; then
        echo "pytest is not installed for $PY: cannot run the tests" | tee "$OUT/gpu-tests.log"
        status[tests]="not run (no pytest)"
    else
        dirs=()
        for d in tests cython_tests; do [ -d "$d" ] && dirs+=("$d"); done
        # GPU_CHECK_TESTS="path ..." runs only those (a warm follow-up call, or one file first).
        [ -n "${GPU_CHECK_TESTS:-}" ] && read -r -a dirs <<<"$GPU_CHECK_TESTS"
        rm -f "$OUT/gpu-junit.xml"
        t=$(budget 480)
        echo "time limit ${t}s"
        # -v: each test named as it runs, so a time-out shows where; the slowest listed at the end.
        timeout -k 10 "$t" "$PY" -m pytest -m gpu "${dirs[@]}" -v -rfEsP --durations=12 -p no:cacheprovider \
            --continue-on-collection-errors --junitxml="$OUT/gpu-junit.xml" 2>&1 | tee "$OUT/gpu-tests.log"
        rc=${PIPESTATUS[0]}
        case $rc in
            0) status[tests]="passed" ;;
            124 | 137) status[tests]="TIMED OUT after ${t}s" ;;
            *) status[tests]="FAILED (pytest exit $rc)" ;;
        esac

        banner "per-peer table"
        timeout 60 "$PY" - "$OUT/gpu-junit.xml" "$OUT/versions.txt" <<'EOF' | tee "$OUT/peer-table.txt"
import os, re, sys, xml.etree.ElementTree as ET
junit, versions_file = sys.argv[1], sys.argv[2]
if not os.path.exists(junit):
    print("no junit xml: pytest did not finish (see gpu-tests.log)")
    sys.exit(0)

versions = {}
for line in open(versions_file):
    parts = line.split(None, 1)
    if len(parts) == 2:
        versions[parts[0]] = parts[1].strip().split(" (")[0]

# tests/gpu/test_gpu_<key>.py -> (peer, version label); anything else goes by its file.
PEERS = {
    "custream": ("custream", "custream"),
    "custream_reliability": ("custream reliability", "custream"),
    "cuda_core": ("cuda.core", "cuda-core"),
    "cuda_bindings": ("cuda.bindings", "cuda-bindings"),
    "cupy": ("cupy", "cupy"),
    "torch": ("torch", "torch"),
    "numba": ("numba-cuda", "numba-cuda"),
    "rmm": ("rmm (+ Cython interop)", "rmm"),
    "cpp": ("C++ face (nvcc nanobind, rmm Cython C++)", "custream"),
    "rust": ("Rust face (pyo3-custream, cudarc)", "custream"),
    "streams_api": ("custream stream API", "custream"),
}

def module_of(case):
    # A test: classname "tests.gpu.test_gpu_cupy", name "test_x[param]". A module skipped
    # or broken at collection: classname "", name "tests.gpu.test_gpu_cupy".
    dotted = case.get("classname", "") + "." + re.sub(r"\[.*", "", case.get("name", ""))
    parts = [p for p in dotted.split(".") if p]
    top = parts[0] if parts else ""
    for p in parts:
        if p.startswith("test_"):
            return top, p
    return top, parts[-1] if parts else "?"

def skip_reason(el):
    message = el.get("message") or ""
    if message == "collection skipped":  # the reason is in the text: (file, line, 'Skipped: ...')
        m = re.search(r"Skipped: (.*)['\"]\)\s*$", el.text or "")
        message = m.group(1) if m else (el.text or message)
    return message

rows = {}
for case in ET.parse(junit).getroot().iter("testcase"):
    top, module = module_of(case)
    m = re.fullmatch(r"test_gpu_(\w+)", module)
    if m and m.group(1) in PEERS:
        peer, vkey = PEERS[m.group(1)]
    elif top == "cython_tests":
        peer, vkey = f"cython: {module}", "Cython"
    else:
        peer, vkey = module, "custream"
    row = rows.setdefault(peer, {"version": versions.get(vkey, "?"), "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "note": ""})
    kids = {child.tag: child for child in case}
    if "failure" in kids:
        row["failed"] += 1
        row["note"] = row["note"] or f"FAIL {case.get('name')}"
    elif "error" in kids:
        row["errors"] += 1
        row["note"] = row["note"] or f"ERROR {case.get('name')}: {kids['error'].get('message', '')[:80]}"
    elif "skipped" in kids:
        row["skipped"] += 1
        if not row["note"]:
            row["note"] = "skip: " + skip_reason(kids["skipped"])[:90]
    else:
        row["passed"] += 1

header = ("peer", "version", "passed", "failed", "errors", "skipped", "result", "note")
table = []
for peer, r in rows.items():
    bad = r["failed"] + r["errors"]
    result = "FAIL" if bad else ("PASS" if r["passed"] else "SKIP")
    table.append((peer, r["version"], str(r["passed"]), str(r["failed"]), str(r["errors"]), str(r["skipped"]), result, r["note"]))
widths = [max(len(str(x[i])) for x in table + [header]) for i in range(len(header) - 1)]
fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
print(fmt(header))
print("  ".join("-" * w for w in widths) + "  ----")
for row in table:
    print(fmt(row))
total = {k: sum(r[k] for r in rows.values()) for k in ("passed", "failed", "errors", "skipped")}
print(f"\ntotal: {total['passed']} passed, {total['failed']} failed, {total['errors']} errors, {total['skipped']} skipped")
EOF
    fi
fi

# ---- optional stages ---------------------------------------------------------------------
if want bench; then
    banner "benchmarks"
    if [ -f benches/run.py ]; then
        t=$(budget 300)
        timeout -k 10 "$t" "$PY" benches/run.py --gpu --budget-s $((t - 15)) --json "$OUT/bench.json"
        rc=$?
        case $rc in 0) status[bench]="passed" ;; 124 | 137) status[bench]="TIMED OUT after ${t}s" ;; *) status[bench]="FAILED (exit $rc)" ;; esac
    else
        echo "benches/run.py is not there: skipped"
        status[bench]="skipped (no benches/run.py)"
    fi
fi

# The rows of one worker each (waits.py; capture.py with the IPC rows; custream's own ops with the C floor of
# `with`), quick, when the whole bench will not fit beside the tests: JSON in $OUT/rows-*.json.
if want rows; then
    banner "bench rows"
    t=$(budget 150)
    ext=$("$PY" -c "import sys, sysconfig; sys.path.insert(0, 'benches'); import run
print(run.build('floor_ext.c', 'floor_ext' + sysconfig.get_config_var('EXT_SUFFIX'), '-I' + sysconfig.get_paths()['include']) or '')")
    raw=$("$PY" -c "import sys; sys.path.insert(0, 'benches'); import run; print(run.build('raw_driver.c', 'libraw_driver.so') or '')")
    status[rows]="passed"
    # GPU_CHECK_ROWS="waits ..." runs only those workers (each with --quick but waits).
    read -r -a workers <<<"${GPU_CHECK_ROWS:-waits capture custream}"
    for w in "${workers[@]}"; do
        [ "$w" = waits ] || w="$w --quick"
        name=${w%% *}
        # shellcheck disable=SC2086
        timeout -k 5 $((t / 3)) "$PY" benches/worker.py $w --gpu --raw "$raw" ${ext:+--floor-ext "$ext"} >"$OUT/rows-$name.json" 2>"$OUT/rows-$name.err" \
            || status[rows]="FAILED ($name)"
        echo "$name: $(tail -c 3000 "$OUT/rows-$name.json")"
    done
fi

if want sanitizer; then
    banner "compute-sanitizer"
    if [ -f scripts/sanitizer/sanitizer-check.sh ]; then
        t=$(budget 420)
        mkdir -p "$OUT/sanitizer-logs"
        OUT="$OUT" PYTHON="$PY" SANITIZER_LOGS="$OUT/sanitizer-logs" timeout -k 10 "$t" bash scripts/sanitizer/sanitizer-check.sh ${SANITIZER_SUITE:+--suite}
        rc=$?
        case $rc in 0) status[sanitizer]="passed" ;; 124 | 137) status[sanitizer]="TIMED OUT after ${t}s" ;; *) status[sanitizer]="FAILED (exit $rc)" ;; esac
    else
        echo "scripts/sanitizer/sanitizer-check.sh is not there: skipped"
        status[sanitizer]="skipped (no scripts/sanitizer/sanitizer-check.sh)"
    fi
fi

# ---- summary -----------------------------------------------------------------------------
banner "summary (${SECONDS}s)"
# The table again, so it is in the last lines of the output whatever ran after the tests.
if want tests && [ -f "$OUT/peer-table.txt" ]; then
    cat "$OUT/peer-table.txt"
    echo
fi
rc=0
for s in "${stages[@]}"; do
    printf '  %-10s %s\n' "$s" "${status[$s]:-not run}"
    case "${status[$s]:-}" in passed | skipped*) ;; *) rc=1 ;; esac
done
echo "results in $OUT"
exit $rc
