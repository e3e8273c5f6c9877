#!/usr/bin/env bash
# Build the test extension of the pyo3-custream crate (tests/rust_ext, the module
# custream_rust_ext) as a wheel into OUTDIR: abi3 (CPython 3.10 and later), release, linked
# with zig against glibc 2.28 (tagged manylinux_2_28, as scripts/build-wheel.sh tags custream),
# so that the GPU machine, which has no Rust toolchain, can install it. CI builds it once and
# installs it beside custream's wheel; scripts/gpu-check.sh installs a dist/*rust*ext*.whl.
#
# Usage: scripts/build-rust-ext.sh OUTDIR
#   PYTHON               the interpreter for the build venv (default python3)
#   CUSTREAM_BUILD_VENV  reuse this venv for maturin and zig (default: a temporary one)
#   CARGO_TARGET_DIR     cargo's build folder (default: target/ in the source tree)
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
tag=manylinux_2_28

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=${CUSTREAM_BUILD_VENV:-$work/venv}
if [ ! -x "$venv/bin/maturin" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check 'maturin[zig]>=1.9,<2'
fi
# maturin finds zig through `python -m ziglang` of the Python on PATH.
export PATH="$venv/bin:$PATH"

# As in scripts/build-wheel.sh (issue 22): zig links an unwinder of its own in place of
# libgcc_s, and a forced unwind (pthread_exit) through Rust frames then crashes; linking the
# system's libgcc_s by path makes the extension import the _Unwind_* functions from it.
libgcc_s=$(${CC:-gcc} -print-file-name=libgcc_s.so.1 2>/dev/null || true)
if [ ! -f "$libgcc_s" ]; then
    libgcc_s=$(ldconfig -p | sed -n 's/^\s*libgcc_s\.so\.1 (libc6,x86-64) => //p' | head -1)
fi
if [ ! -f "$libgcc_s" ]; then
    echo "build-rust-ext.sh: libgcc_s.so.1 not found (gcc -print-file-name, ldconfig -p)" >&2
    exit 1
fi
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=$libgcc_s"

rm -f "$out"/custream_rust_ext-*.whl
(cd "$root/tests/rust_ext" && maturin build --release --zig --compatibility "$tag" --out "$out")
wheel=$(ls "$out"/custream_rust_ext-*.whl)
case "$wheel" in
    *-cp310-abi3-"$tag"_*.whl) ;;
    *) echo "build-rust-ext.sh: $wheel is not a cp310-abi3 $tag wheel" >&2; exit 1 ;;
esac
echo "wheel: $wheel"
