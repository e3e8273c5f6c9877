#!/usr/bin/env bash
# `maturin build --release --zig` for Linux aarch64, cross-compiled in the Debian sid root of
# scripts/sid/debian-root.sh (rustup cannot bring the aarch64 standard library here; sid's Rust
# and libstd-rust-dev:arm64 can). Used by scripts/build-wheel.sh and scripts/build/build-rust-ext.sh
# with --arch aarch64; the root must exist (they make it first, to name a missing tool early).
#
#   scripts/sid/maturin-aarch64.sh ROOT TREE SUBDIR OUTDIR TAG
#
# TREE (the sources, writable: cargo drops lock entries of workspace members an sdist leaves
# out, as on x86_64) is bound at the fixed path /build, so that cargo's build folder
# ($CARGO_TARGET_DIR/sid-aarch64, kept) stays fresh from one build to the next; maturin runs
# in /build/SUBDIR. The extension links the cross gcc's libgcc_s.so.1 as the x86_64 one links
# the system's (scripts/build/zig-env.sh says why). maturin and zig come from PyPI into a venv of
# the root's python3.14, kept in the root.
set -euo pipefail
if [ $# -ne 5 ]; then
    echo "usage: $0 ROOT TREE SUBDIR OUTDIR TAG" >&2
    exit 2
fi
sid=$1 tree=$2 subdir=$3 out=$4 tag=$5
mkdir -p "$CARGO_TARGET_DIR"
"$(dirname "$0")/debian-root.sh" "$sid" --bind "$tree:/build" --bind "$out:/out" \
    --bind "$CARGO_TARGET_DIR:/target" --cwd "/build/$subdir" \
    --env CARGO_TARGET_DIR=/target/sid-aarch64 --env PIP_DISABLE_PIP_VERSION_CHECK=1 \
    --env CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}" -- bash -euo pipefail -c '
        if [ ! -x /venv/build/bin/maturin ]; then
            rm -rf /venv/build
            python3.14 -m venv /venv/build
            /venv/build/bin/python -m pip install -q "maturin[zig]>=1.9,<2"
        fi
        export PATH=/venv/build/bin:$PATH
        libgcc_s=$(aarch64-linux-gnu-gcc -print-file-name=libgcc_s.so.1)
        [ -f "$libgcc_s" ] || { echo "maturin-aarch64.sh: no aarch64 libgcc_s.so.1 in the root" >&2; exit 1; }
        export RUSTFLAGS="-C link-arg=$libgcc_s"
        maturin build --release --zig --target aarch64-unknown-linux-gnu --compatibility "$1" --out /out
    ' sh "$tag"
