#!/usr/bin/env bash
# Run the aarch64 wheel on this x86_64 machine, under qemu-user: Debian's arm64 python3.14
# (unpacked in the sid root of scripts/sid/debian-root.sh, beside its arm64 stdlib) in a fresh
# virtual environment with the wheel installed, and the CPU test suite (or CMD) run there.
# Made if need be: root and Debian's debootstrap on the host.
#
#   scripts/sid/test-aarch64.sh WHEEL [PYTEST-ARGS ...]   the CPU suite (default: all of it)
#   scripts/sid/test-aarch64.sh WHEEL -- CMD ...          CMD in the current directory instead, with
#                                                     the wheel installed and no driver
#                                                     (CUSTREAM_LIBCUDA unset)
#   Wheels (*.whl files) right after WHEEL are installed beside it: CI's aarch64 build of the
#   Rust test extension (scripts/build/build-rust-ext.sh OUTDIR --arch aarch64).
#   CUSTREAM_DEBIAN_ROOT  the root (default .roots/sid in the source tree)
#
# The emulator is run explicitly, never registered with the kernel (binfmt_misc is shared
# with every other process on the machine): the venv's python is a shell script that execs
# qemu-aarch64 on the arm64 interpreter with argv[0] set to itself, so that sys.executable
# is that script and the suite's subprocesses of sys.executable are emulated too. Inside,
# the amd64 tools of the root run natively: CC/CXX are Debian's aarch64 cross compilers, so
# the stand-in drivers the tests build and the Cython and C consumers are aarch64 code,
# built against the root's arm64 Python headers.
set -euo pipefail
me=$(basename "$0")
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $me WHEEL [PYTEST-ARGS ...] | WHEEL -- CMD ...   (WHEEL: a custream *_aarch64.whl)" >&2
    exit 2
fi
wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
case "$wheel" in
    *_aarch64.whl) ;;
    *) echo "$me: $(basename "$wheel") is not an aarch64 wheel" >&2; exit 2 ;;
esac
extra=()
while [ $# -gt 0 ] && [ "${1%.whl}" != "$1" ] && [ -f "$1" ]; do
    case "$1" in
        *_aarch64.whl) extra+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"); shift ;;
        *) echo "$me: $(basename "$1") is not an aarch64 wheel" >&2; exit 2 ;;
    esac
done
mode=suite
if [ "${1:-}" = -- ]; then
    shift
    [ $# -gt 0 ] || { echo "$me: -- needs a command" >&2; exit 2; }
    mode=cmd
    [ "$PWD" != / ] || { echo "$me: run -- CMD from a folder other than /" >&2; exit 2; }
fi

sid=${CUSTREAM_DEBIAN_ROOT:-$repo/.roots/sid}
"$repo/scripts/sid/debian-root.sh" "$sid"
if [ ! -x "$sid/usr/bin/qemu-aarch64" ]; then
    echo "$me: qemu-aarch64 not found in $sid: it comes with Debian's qemu-user package (scripts/sid/debian-root.sh installs it)" >&2
    exit 1
fi

# The clone and the cwd at the same paths inside as outside, so that paths in CMD, in the
# tests and in their output mean the same thing.
binds=(--bind "$repo:$repo" --ro-bind "$wheel:/dist/$(basename "$wheel")")
extra_names=""
for w in "${extra[@]}"; do
    binds+=(--ro-bind "$w:/dist/$(basename "$w")")
    extra_names+=" /dist/$(basename "$w")"
done
cwd=$repo
if [ "$mode" = cmd ]; then
    case "$PWD/" in "$repo"/*) ;; *) binds+=(--bind "$PWD:$PWD") ;; esac
    cwd=$PWD
fi
# The suite gets the test extra but cmake, ninja and meson. PyPI's cmake and ninja are
# aarch64 programs, and only python is wrapped to start: the root's amd64 ones on PATH build
# with the cross compilers instead. meson runs what it compiles (its sanity check), an
# aarch64 program the kernel cannot start without binfmt: its two tests skip. libclang and
# ziglang serve cargo test (the layout), which .ci/run runs apart, through -- CMD.
t0=$(date +%s)
"$repo/scripts/sid/debian-root.sh" "$sid" "${binds[@]}" --cwd "$cwd" \
    --env PIP_DISABLE_PIP_VERSION_CHECK=1 --env PIP_NO_INPUT=1 \
    --env CC=aarch64-linux-gnu-gcc --env CXX=aarch64-linux-gnu-g++ \
    -- bash -euo pipefail -c '
    mode=$1 wheel=/dist/$2 extra=$3; shift 3
    venv=/venv/aarch64
    rm -rf "$venv"
    # --without-pip: venv would run ensurepip with the new python, an arm64 binary the
    # kernel cannot start; the wrappers come first.
    qemu-aarch64 /opt/aarch64/usr/bin/python3.14 -m venv --without-pip "$venv"
    for py in "$venv"/bin/python*; do
        rm "$py"
        printf "%s\n" "#!/bin/sh" "exec /usr/bin/qemu-aarch64 -0 \"\$0\" /opt/aarch64/usr/bin/python3.14 \"\$@\"" >"$py"
        chmod +x "$py"
    done
    export PATH=$venv/bin:$PATH VIRTUAL_ENV=$venv
    python -m ensurepip >/dev/null
    if [ "$mode" = suite ]; then
        python -m pip install -q "$wheel" $extra "pytest>=8" "hypothesis>=6" "cython>=3.0" "setuptools>=68" \
            "mypy>=1.10" "nanobind>=2.0" "pybind11>=2.12" "nvidia-cuda-cccl>=13.3" \
            "nvidia-cuda-runtime>=13.0" "nvidia-cuda-crt>=13.0"
    else
        python -m pip install -q "$wheel" $extra
    fi
    python -c "import custream, platform, sys
assert platform.machine() == \"aarch64\", platform.machine()
print(f\"custream {custream.__version__} on Python {sys.version.split()[0]} ({platform.machine()}, emulated) from {custream.__file__}\")"
    if [ "$mode" = suite ]; then
        exec python -m pytest -p no:cacheprovider "$@"
    fi
    unset CUSTREAM_LIBCUDA
    exec "$@"
' sh "$mode" "$(basename "$wheel")" "$extra_names" "$@"
echo "$me: done in $(( $(date +%s) - t0 )) s" >&2
