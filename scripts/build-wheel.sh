#!/usr/bin/env bash
# Build the release artifacts into OUTDIR: the sdist, then the abi3 wheel built *from that
# sdist* (so a broken sdist fails here), linked with zig against glibc 2.28 so that the wheel
# is tagged manylinux_2_28 and installs where rmm, cuda-core and CuPy do (RHEL/Rocky 8,
# Ubuntu 20.04 and later). Needs Python >= 3.10 and a Rust toolchain; no container, no
# CUDA toolkit, no libclang. maturin and zig come from PyPI into a private build venv.
#
# Usage: scripts/build-wheel.sh OUTDIR   (variables, and the libgcc_s link: scripts/zig-env.sh)
set -euo pipefail
. "$(dirname "$0")/zig-env.sh" "$@"

rm -f "$out"/custream-*.tar.gz "$out"/custream-*.whl
(cd "$root" && maturin sdist --out "$out") >/dev/null
sdist=$(ls "$out"/custream-*.tar.gz)
# -m: the sdist stamps every file 2006; with those times cargo would call a stale build fresh.
tar -xzmf "$sdist" -C "$work"
src=$(ls -d "$work"/custream-*/)
(cd "$src" && maturin build --release --zig --compatibility "$tag" --out "$out")
wheel=$(ls "$out"/custream-*.whl)
case "$wheel" in
    *-cp310-abi3-"$tag"_*.whl) ;;
    *) echo "build-wheel.sh: $wheel is not a cp310-abi3 $tag wheel" >&2; exit 1 ;;
esac
echo "sdist: $sdist"
echo "wheel: $wheel"
