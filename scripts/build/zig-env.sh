# Sourced by scripts/build-wheel.sh and scripts/build/build-rust-ext.sh: what both need to build an
# abi3 wheel linked with zig against glibc 2.28 (tagged manylinux_2_28), so that it installs
# where rmm, cuda-core and CuPy do and on the GPU machine, which has no Rust toolchain.
#
#   . scripts/build/zig-env.sh OUTDIR [--arch x86_64|aarch64]
#
# Sets arch, sid (the Debian sid root of scripts/sid/debian-root.sh, made if need be, for
# aarch64), root (the source tree), out (OUTDIR, made absolute), tag, work (a temporary
# folder, removed on exit), and exports CARGO_TARGET_DIR, PATH (maturin and zig first) and
# RUSTFLAGS. Mistakes are named with the calling script's name.
#   CUSTREAM_DEBIAN_ROOT the root for aarch64 (default .roots/sid in the source tree)
#   PYTHON               the interpreter for the build venv (default python3)
#   CUSTREAM_BUILD_VENV  reuse this venv for maturin and zig (default: a temporary one)
#   CARGO_TARGET_DIR     cargo's build folder (default: target/ in the source tree)
me=$(basename "$0")
arch=x86_64
outdir=
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) [ $# -ge 2 ] || { echo "$me: --arch needs x86_64 or aarch64" >&2; exit 2; }
                arch=$2; shift 2 ;;
        --arch=*) arch=${1#--arch=}; shift ;;
        *) [ -z "$outdir" ] || { echo "usage: $me OUTDIR [--arch x86_64|aarch64]" >&2; exit 2; }
           outdir=$1; shift ;;
    esac
done
[ -n "$outdir" ] || { echo "usage: $me OUTDIR [--arch x86_64|aarch64]" >&2; exit 2; }
case "$arch" in
    x86_64 | aarch64) ;;
    *) echo "$me: --arch $arch: the wheel is built for x86_64 or aarch64 only" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ "$arch" = aarch64 ]; then
    sid=${CUSTREAM_DEBIAN_ROOT:-$root/.roots/sid}
    "$root/scripts/sid/debian-root.sh" "$sid"
fi
set -- "$outdir"
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
    echo "$(basename "$0"): libgcc_s.so.1 not found (gcc -print-file-name, ldconfig -p)" >&2
    exit 1
fi
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=$libgcc_s"
