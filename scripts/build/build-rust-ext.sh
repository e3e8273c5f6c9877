#!/usr/bin/env bash
# Build the test extension of the pyo3-custream crate (tests/rust_ext, the module
# custream_rust_ext) as a wheel into OUTDIR: abi3 (CPython 3.10 and later), release, linked
# with zig against glibc 2.28 (tagged manylinux_2_28, as scripts/build-wheel.sh tags custream),
# so that the GPU machine, which has no Rust toolchain, can install it. CI builds it once and
# installs it beside custream's wheel; scripts/gpu-check.sh installs a dist/*rust*ext*.whl.
# --arch aarch64 cross-builds it as scripts/build-wheel.sh does custream (the sid root), for
# the emulated aarch64 suite (scripts/sid/test-aarch64.sh).
#
# Usage: scripts/build/build-rust-ext.sh OUTDIR [--arch x86_64|aarch64]   (variables: scripts/build/zig-env.sh)
set -euo pipefail
. "$(dirname "$0")/zig-env.sh" "$@"

rm -f "$out"/custream_rust_ext-*_"$arch".whl
if [ "$arch" = x86_64 ]; then
    (cd "$root/tests/rust_ext" && maturin build --release --zig --compatibility "$tag" --out "$out")
else
    # The whole workspace: the extension builds pyo3-custream from ../../pyo3-custream.
    "$root/scripts/sid/maturin-aarch64.sh" "$sid" "$root" tests/rust_ext "$out" "$tag"
fi
wheel=$(ls "$out"/custream_rust_ext-*_"$arch".whl)
case "$wheel" in
    *-cp310-abi3-"$tag"_"$arch".whl) ;;
    *) echo "build-rust-ext.sh: $wheel is not a cp310-abi3 ${tag}_$arch wheel" >&2; exit 1 ;;
esac
echo "wheel: $wheel"
