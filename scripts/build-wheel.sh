#!/usr/bin/env bash
# Build the release artifacts into OUTDIR: the sdist, then the abi3 wheel built *from that
# sdist* (so a broken sdist fails here), linked with zig against glibc 2.28 so that the wheel
# is tagged manylinux_2_28 and installs where rmm, cuda-core and CuPy do (RHEL/Rocky 8,
# Ubuntu 20.04 and later). Needs Python >= 3.10 and a Rust toolchain; no container, no
# CUDA toolkit, no libclang. maturin and zig come from PyPI into a private build venv.
#
# Usage: scripts/build-wheel.sh OUTDIR
#   PYTHON             the interpreter for the build venv (default python3)
#   CUSTREAM_BUILD_VENV  reuse this venv for maturin and zig (default: a temporary one)
#   CARGO_TARGET_DIR   cargo's build folder (default: target/ in the source tree)
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

rm -f "$out"/custream-*.tar.gz "$out"/custream-*.whl
(cd "$root" && maturin sdist --out "$out") >/dev/null
sdist=$(ls "$out"/custream-*.tar.gz)
# -m: the sdist stamps every file 2006; with those times cargo would call a stale build fresh.
tar -xzmf "$sdist" -C "$work"
src=$(ls -d "$work"/custream-*/)
# zig links an unwinder of its own into the extension in place of libgcc_s, the one glibc's
# pthread_exit unwinds with: a forced unwind through custream's frames then ran our
# personality routine against the other unwinder's frames and crashed (issue 22). Linking the
# system's libgcc_s by path makes the extension import the _Unwind_* functions from it, as a
# native build does (manylinux_2_28 allows libgcc_s.so.1; tests/test_release.py checks it).
libgcc_s=$(${CC:-gcc} -print-file-name=libgcc_s.so.1 2>/dev/null || true)
if [ ! -f "$libgcc_s" ]; then
    libgcc_s=$(ldconfig -p | sed -n 's/^\s*libgcc_s\.so\.1 (libc6,x86-64) => //p' | head -1)
fi
if [ ! -f "$libgcc_s" ]; then
    echo "build-wheel.sh: libgcc_s.so.1 not found (gcc -print-file-name, ldconfig -p)" >&2
    exit 1
fi
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=$libgcc_s"
(cd "$src" && maturin build --release --zig --compatibility "$tag" --out "$out")
wheel=$(ls "$out"/custream-*.whl)
case "$wheel" in
    *-cp310-abi3-"$tag"_*.whl) ;;
    *) echo "build-wheel.sh: $wheel is not a cp310-abi3 $tag wheel" >&2; exit 1 ;;
esac
echo "sdist: $sdist"
echo "wheel: $wheel"
