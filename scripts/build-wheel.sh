#!/usr/bin/env bash
# Build the release artifacts into OUTDIR: the sdist, then the abi3 wheel built *from that
# sdist* (so a broken sdist fails here), linked with zig against glibc 2.28 so that the wheel
# is tagged manylinux_2_28 and installs where rmm, cuda-core and CuPy do (RHEL/Rocky 8,
# Ubuntu 20.04 and later). Needs Python >= 3.10 and a Rust toolchain; no container, no
# CUDA toolkit, no libclang. maturin and zig come from PyPI into a private build venv.
#
# --arch aarch64 cross-builds the Linux aarch64 wheel (Grace, Graviton) on an x86_64 machine,
# from the same sdist: rustup cannot bring the aarch64 standard library here, so the build
# runs in the Debian sid root of scripts/sid/debian-root.sh (made if need be: root and Debian's
# debootstrap), with Debian's rustc and libstd-rust-dev:arm64, and zig from PyPI again
# (scripts/sid/maturin-aarch64.sh).
#   CUSTREAM_DEBIAN_ROOT  the root (default .roots/sid in the source tree)
#
# Usage: scripts/build-wheel.sh OUTDIR [--arch x86_64|aarch64]
#        (variables, and the libgcc_s link: scripts/build/zig-env.sh)
set -euo pipefail
# --arch, and the sid root for aarch64 (made before any build: a missing tool is named now,
# not after the sdist).
. "$(dirname "$0")/build/zig-env.sh" "$@"

rm -f "$out"/custream-*.tar.gz "$out"/custream-*_"$arch".whl
(cd "$root" && maturin sdist --out "$out") >/dev/null
sdist=$(ls "$out"/custream-*.tar.gz)
# -m: the sdist stamps every file 2006; with those times cargo would call a stale build fresh.
tar -xzmf "$sdist" -C "$work"
src=$(ls -d "$work"/custream-*/)
if [ "$arch" = x86_64 ]; then
    (cd "$src" && maturin build --release --zig --compatibility "$tag" --out "$out")
else
    "$root/scripts/sid/maturin-aarch64.sh" "$sid" "$src" . "$out" "$tag"
fi
wheel=$(ls "$out"/custream-*_"$arch".whl)
case "$wheel" in
    *-cp310-abi3-"$tag"_"$arch".whl) ;;
    *) echo "build-wheel.sh: $wheel is not a cp310-abi3 ${tag}_$arch wheel" >&2; exit 1 ;;
esac
# The tag is only a name: the extension itself must be code for the machine it names.
want_machine=$([ "$arch" = x86_64 ] && echo "Advanced Micro Devices X86-64" || echo AArch64)
python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.startswith("custream/_custream") and n.endswith(".so"))
open(sys.argv[2], "wb").write(z.read(name))' "$wheel" "$work/ext.so"
machine=$(LC_ALL=C readelf -h "$work/ext.so" | sed -n 's/^ *Machine: *//p')
if [ "$machine" != "$want_machine" ]; then
    echo "build-wheel.sh: the extension in $(basename "$wheel") is $machine code, not $want_machine" >&2
    exit 1
fi
echo "sdist: $sdist"
echo "wheel: $wheel ($machine)"
