#!/usr/bin/env bash
# The one Debian root that CI's newer CPythons (3.14, 3.15: Debian's own builds) and the
# aarch64 wheel (cross-built with Debian's Rust, tested under qemu-user) share, made from
# Debian's packages only: `debootstrap --variant=minbase sid`, then apt in it. sid because it
# alone has both interpreters and a rustc new enough for our dependencies (libloading 0.9
# needs 1.88; trixie's is 1.85), and arm64 comes in by multiarch, beside the amd64 tools.
#
#   scripts/sid/debian-root.sh ROOT                          make ROOT (kept while its package list holds)
#   scripts/sid/debian-root.sh ROOT [OPTION]... -- CMD ...   make it if needed, then run CMD in it
#     --bind HOST:DIR      HOST (a folder or file) at DIR inside the root, writable
#     --ro-bind HOST:DIR   the same, read-only
#     --cwd DIR            where CMD starts inside the root (default /)
#     --env NAME=VALUE     in CMD's environment, which is otherwise only PATH, HOME, LANG
#
# CMD runs in a mount namespace of its own (unshare): the bind mounts, /proc and /dev exist
# only there and go with it, whatever happens, and the EXIT trap unmounts them besides, so a
# later `rm -rf ROOT` can never reach through a mount into the clone or /dev. Needs root and
# Debian's debootstrap on the host.
set -euo pipefail
me=$(basename "$0")
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: $me ROOT [--bind HOST:DIR | --ro-bind HOST:DIR | --cwd DIR | --env N=V]... [-- CMD ...]" >&2
    exit 2
fi
mkdir -p "$1"
root=$(cd "$1" && pwd)
shift

# What the root holds; a change here remakes it. amd64: both CPythons with headers and venv,
# the C/C++ compilers the Cython and C consumers build with, Rust, readelf, and CMake and
# ninja for the emulated suite's downstream builds (PyPI's are aarch64 programs there). arm64: Rust's
# standard library to cross-compile against; the cross compilers for the stand-in driver and
# the consumers; the stdlib and headers of Debian's python3.14, whose interpreter
# (python3.14-minimal:arm64, not co-installable with the amd64 one) is unpacked beside, to
# /opt/aarch64; qemu-user to run it (its binfmt package is only recommended, and stays out).
PACKAGES=(
    python3.14 python3.14-venv python3.14-dev python3.15 python3.15-venv python3.15-dev
    gcc g++ binutils ca-certificates rustc cargo rustfmt cmake ninja-build
    libstd-rust-dev:arm64 gcc-aarch64-linux-gnu g++-aarch64-linux-gnu binutils-aarch64-linux-gnu
    libpython3.14-stdlib:arm64 libpython3.14-dev:arm64 libexpat1:arm64 zlib1g:arm64 qemu-user
)
AARCH64_PYTHON=python3.14-minimal:arm64
stamp="$root/.custream-root"
want=$(printf '%s\n' "sid" "${PACKAGES[@]}" "$AARCH64_PYTHON")

need() {  # need COMMAND PACKAGE
    command -v "$1" >/dev/null || { echo "$me: $1 not found: install Debian's $2 package (apt-get install $2)" >&2; exit 1; }
}

# Mounts for one command, in a private mount namespace; unmounted on exit (lazily: a
# process CMD left behind may still hold one).
if [ "${CUSTREAM_IN_NAMESPACE:-}" = 1 ]; then
    unset CUSTREAM_IN_NAMESPACE
    apt_step=${CUSTREAM_ROOT_APT:-}
    unset CUSTREAM_ROOT_APT
    mounted=()
    cleanup() {
        local i
        for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
    }
    trap cleanup EXIT
    mount --make-rprivate /
    mnt() {  # mnt TARGET MOUNT-ARGS...
        local target=$1; shift
        mount "$@" "$target"
        mounted+=("$target")
    }
    mnt "$root/proc" -t proc proc
    mnt "$root/dev" --rbind /dev
    # The host's CA bundle: pip and cargo in the root reach the registries through the same
    # TLS interception as the host does. Not while apt works on the root (its http needs
    # none, and ca-certificates writes that file).
    if [ -f /etc/ssl/certs/ca-certificates.crt ] && [ "$apt_step" != 1 ]; then
        mkdir -p "$root/etc/ssl/certs"
        [ -e "$root/etc/ssl/certs/ca-certificates.crt" ] || touch "$root/etc/ssl/certs/ca-certificates.crt"
        mnt "$root/etc/ssl/certs/ca-certificates.crt" --bind /etc/ssl/certs/ca-certificates.crt -o ro
    fi
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    cwd=/
    envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
    while [ $# -gt 0 ]; do
        case "$1" in
            --bind | --ro-bind)
                host=${2%%:*} dir=${2#*:}
                [ -e "$host" ] || { echo "$me: $1 $2: $host does not exist" >&2; exit 2; }
                if [ -d "$host" ]; then mkdir -p "$root$dir"; else mkdir -p "$(dirname "$root$dir")"; touch "$root$dir"; fi
                mnt "$root$dir" --bind "$host"
                if [ "$1" = --ro-bind ]; then mount -o remount,bind,ro "$root$dir"; fi
                shift 2 ;;
            --cwd) cwd=$2; shift 2 ;;
            --env) envs+=("$2"); shift 2 ;;
            --) shift; break ;;
            *) echo "$me: unknown option $1" >&2; exit 2 ;;
        esac
    done
    # Not exec: the trap must run after CMD.
    status=0
    chroot "$root" /usr/bin/env -i "${envs[@]}" /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$cwd" "$@" || status=$?
    exit "$status"
fi

if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    need debootstrap debootstrap
    need unshare util-linux
    [ "$(id -u)" = 0 ] || { echo "$me: making a Debian root needs root (debootstrap, chroot)" >&2; exit 1; }
    t0=$(date +%s)
    rm -f "$stamp"
    if [ ! -x "$root/usr/bin/apt-get" ]; then
        # minbase: apt and dpkg, no more; everything else is named above.
        debootstrap --variant=minbase sid "$root" http://deb.debian.org/debian >"$root.debootstrap.log" 2>&1 \
            || { tail -20 "$root.debootstrap.log" >&2; echo "$me: debootstrap failed (log: $root.debootstrap.log)" >&2; exit 1; }
        rm -f "$root.debootstrap.log"
    fi
    # sid's Release file on the archive this machine reaches is past its Valid-Until date.
    CUSTREAM_IN_NAMESPACE=1 CUSTREAM_ROOT_APT=1 unshare --mount "$0" "$root" --env DEBIAN_FRONTEND=noninteractive -- /bin/sh -euc '
        dpkg --add-architecture arm64
        apt-get -q -o Acquire::Check-Valid-Until=false update >/dev/null
        apt-get install -y -q --no-install-recommends "$@" >/var/log/custream-apt.log 2>&1 \
            || { tail -30 /var/log/custream-apt.log >&2; exit 1; }
        rm -rf /opt/aarch64 /tmp/deb && mkdir -p /opt/aarch64 /tmp/deb && chmod 777 /tmp/deb
        cd /tmp/deb && apt-get download -q '"$AARCH64_PYTHON"' >/dev/null && dpkg -x ./*.deb /opt/aarch64
        rm -rf /tmp/deb
        apt-get clean
    ' sh "${PACKAGES[@]}"
    echo "$want" >"$stamp"
    echo "$me: made $root in $(( $(date +%s) - t0 )) s" >&2
fi

if [ $# -gt 0 ]; then
    CUSTREAM_IN_NAMESPACE=1 exec unshare --mount "$0" "$root" "$@"
fi
