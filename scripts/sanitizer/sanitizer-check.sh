#!/usr/bin/env bash
# Run custream under compute-sanitizer on the GPU machine: memcheck and racecheck over a
# focused workload (scripts/sanitizer/sanitizer-workload.py, real CuPy/PyTorch kernels on custream
# streams) and, with --suite, both tools over the gpu-marked tests too. Prints one
# "<tool> <target>: ERROR SUMMARY: N errors" line per run; exits non-zero if any run
# reported an error or failed.
#
# Usage: scripts/sanitizer/sanitizer-check.sh [--suite]      (PYTHON defaults to python3; custream
#        must be importable by it, e.g. PYTHONPATH=/tmp/site; SANITIZER_RUN_S caps each
#        run, default 200 s)
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$sanitizer" ]; then
    echo "compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
    exit 2
fi
logdir=${SANITIZER_LOGS:-$(mktemp -d)}
run_limit=${SANITIZER_RUN_S:-200}
mkdir -p "$logdir"
status=0

run() {  # run TOOL NAME [TOOL OPTION...] -- COMMAND...
    local tool=$1 name=$2
    shift 2
    local opts=()
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    local log="$logdir/$tool-$name.log"
    # Each run has its own limit, so one that hangs leaves the others their time.
    timeout -k 10 "$run_limit" "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 99 \
        "${opts[@]}" "$@" >"$log" 2>&1
    local rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "    ($tool $name: killed after ${run_limit}s)" >>"$log"
    # memcheck ends with "ERROR SUMMARY: N errors"; racecheck with
    # "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
    local summary errors
    summary=$(grep -E "(ERROR|RACECHECK) SUMMARY: " "$log" | tail -1)
    errors=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p; s/.*RACECHECK SUMMARY: .*\(([0-9]+) error.*/\1/p' <<<"$summary")
    echo "$tool $name: ${summary:-no summary line} (exit $rc; log $log)"
    if [ $rc -ne 0 ] || [ "${errors:-x}" != 0 ]; then
        status=1
        tail -n 40 "$log" | sed 's/^/    /'
    fi
}

run memcheck workload -- "$python" scripts/sanitizer/sanitizer-workload.py
run racecheck workload -- "$python" scripts/sanitizer/sanitizer-workload.py
if [ "${1:-}" = "--suite" ]; then
    # The 100k-cycle, fork, exit and reset tests are left out: too slow under the tool, or
    # they run child processes of their own. memcheck does not count the driver's error
    # returns here (--report-api-errors no): the suite makes failing calls on purpose to
    # test custream's errors (an event without timing, a default-stream token with no
    # current context), and cuda.bindings probes cuGetProcAddress for entry points this
    # driver lacks; those 38 returns were memcheck's whole count on 2026-12-02. Memory
    # errors, leaks and the workload's API errors are still counted.
    tests=(-m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=100 tests/gpu
           -k "not 100k and not fork and not exit and not reset")
    run memcheck gpu-tests --report-api-errors no -- "$python" "${tests[@]}"
    run racecheck gpu-tests -- "$python" "${tests[@]}"
fi
exit $status
