#!/usr/bin/env bash
# Build a free-threaded CPython (configure --disable-gil) into PREFIX from Debian's source
# package: the one route to a free-threaded interpreter that this machine's registries give
# (PyPI has none, and Debian builds no free-threaded binary).
#
#   bash scripts/build/freethreaded-python.sh PREFIX [3.13|3.14]     # then PREFIX/bin/python3.13t
#
# 3.13 (the default) comes from trixie. 3.14 from sid, whose Sources list it, but whose
# source files the archive reached here answered 404 on 2026-12-05 (3.14.8 to 3.14.10, and
# 3.15): the script stops with apt's error there. About 5 minutes on 2 cores; a PREFIX that
# already has the interpreter is kept.
#
# Needs apt-get (with a private source list: the host's apt state is not touched), a C
# compiler and the usual CPython build libraries (libssl-dev, libffi-dev, zlib1g-dev, ...),
# which this machine's image has; pip comes from PyPI.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PREFIX [3.13|3.14]" >&2
    exit 2
fi
version=${2:-3.13}
case "$version" in
    3.13) suite=trixie ;;
    3.14) suite=sid ;;
    *) echo "$0: version $version: 3.13 or 3.14" >&2; exit 2 ;;
esac
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
python="$prefix/bin/python${version}t"
if "$python" -c 'import sys; sys.exit(sys._is_gil_enabled())' 2>/dev/null; then
    echo "$python: already built"
    exit 0
fi
command -v apt-get >/dev/null || { echo "$0: apt-get not found (Debian's apt)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/src" "$work/pip"
echo "deb-src http://deb.debian.org/debian $suite main" >"$work/sources.list"
# sid's Release file is past its date on the archive reached here.
apt=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$work/lists" -o Acquire::Check-Valid-Until=false)
apt-get "${apt[@]}" -q update >/dev/null
(cd "$work/src" && apt-get "${apt[@]}" -q source --download-only "python$version" >/dev/null)
# The upstream tarball alone: Debian's patches are about its packaging, not the interpreter.
tar -xf "$(ls "$work"/src/python"$version"_*.orig.tar.xz)" -C "$work/src"
cd "$(ls -d "$work"/src/Python-"$version"*/)"
./configure -q --disable-gil --prefix="$prefix" --with-ensurepip=no >/dev/null
make -s -j"$(nproc)" >/dev/null 2>&1 || make -j1  # the second run shows the error
make -s altinstall >/dev/null 2>&1
# pip from PyPI (Debian's tarball may lack ensurepip's bundled wheel): run from its own wheel.
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$work/pip" pip
whl=$(ls "$work"/pip/pip-*.whl)
"$python" "$whl/pip" install -q --no-index --disable-pip-version-check --root-user-action=ignore "$whl"
"$python" -c 'import sys, ssl; assert not sys._is_gil_enabled(); print(sys.version)'
