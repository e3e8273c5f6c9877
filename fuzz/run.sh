#!/usr/bin/env bash
# Fuzz custream's protocol consumer and from_handle() arguments (fuzz/fuzz_protocol.py) with
# atheris for a bounded time, then print the figures. Not part of CI.
#
#   fuzz/run.sh [SECONDS=60]             uses $PYTHON (default python3), which must import
#                                        custream and atheris; coverage guides the fuzzer
#                                        through the harness only
#   NATIVE=1 fuzz/run.sh [SECONDS=60]    first builds custream with SanitizerCoverage into
#                                        its own venv ($FUZZ_VENV, default /tmp/custream-fuzz)
#                                        and preloads atheris's libFuzzer, so coverage of the
#                                        Rust code guides the fuzzer too (needs cargo, g++)
#
# Crashing inputs go to fuzz/crashes/, the corpus to fuzz/corpus/ (both git-ignored).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=${1:-60}
python=${PYTHON:-python3}
preload=

if [ "${NATIVE:-0}" = 1 ]; then
    venv=${FUZZ_VENV:-/tmp/custream-fuzz}
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check maturin atheris
    rm -rf "$venv/dist"
    # --target keeps the instrumentation off build scripts, which have no libFuzzer to link.
    (cd "$here/.." && CARGO_TARGET_DIR="$venv/target" RUSTFLAGS="-Cpasses=sancov-module \
        -Cllvm-args=-sanitizer-coverage-level=3 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
        -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
        -Cdebug-assertions -Coverflow-checks" "$venv/bin/maturin" build --release --target x86_64-unknown-linux-gnu \
        -o "$venv/dist" 2>&1 | grep -E "^error|Built wheel")
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$venv"/dist/custream-*.whl
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ ! -f "$venv/libfuzzer.so" ]; then
        g++ -shared -o "$venv/libfuzzer.so" -Wl,--whole-archive "$site/libclang_rt.fuzzer_no_main.a" \
            -Wl,--no-whole-archive -lpthread
    fi
    python="$venv/bin/python"
    preload="$venv/libfuzzer.so"
fi

cd "$here"
mkdir -p corpus crashes
log=$(mktemp)
start=$(date +%s)
set +e
LD_PRELOAD=$preload "$python" fuzz_protocol.py corpus -max_total_time="$seconds" -artifact_prefix=crashes/ \
    -print_final_stats=1 -rss_limit_mb=4096 -timeout=10 >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))
grep -E "Loaded [0-9]+ modules|INITED|DONE|ERROR|Error|crash-" "$log" | head -20 || true
runs=$(grep -oE "number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
rate=$(grep -oE "average_exec_per_sec: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1 || true)
echo "fuzz: ${runs} inputs in ${elapsed} s, ${rate} exec/s, ${cov:-cov: ?}, corpus $(ls corpus | wc -l) files," \
     "crashes $(ls crashes | wc -l), libFuzzer exit ${rc}$([ -n "$preload" ] && echo ' (native coverage)')"
rm -f "$log"
exit "$rc"
