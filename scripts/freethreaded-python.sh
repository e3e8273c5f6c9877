#!/usr/bin/env bash
# Build a free-threaded CPython 3.14 (python3.14t, configure --disable-gil) into PREFIX from
# Debian's source package of python3.14 (sid), the one route to a free-threaded interpreter
# that this machine's registries give: PyPI has none, and Debian builds no free-threaded
# binary. 3.14, not 3.13: pyo3 0.30 supports free-threading from 3.14 on. About 5 minutes on
# 2 cores; a PREFIX that already has it is kept.
#
#   bash scripts/freethreaded-python.sh PREFIX     # then PREFIX/bin/python3.14t
#
# Needs apt-get (the source package, with a private source list: the host's apt state is not
# touched; sid's Release file is past its date on the archive reached here), a C compiler and the usual CPython build libraries (libssl-dev, libffi-dev,
# zlib1g-dev, ...), which this machine's image has.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
if "$prefix/bin/python3.14t" -c 'import sys; sys.exit(sys._is_gil_enabled())' 2>/dev/null; then
    echo "$prefix/bin/python3.14t: already built"
    exit 0
fi
command -v apt-get >/dev/null || { echo "$0: apt-get not found (Debian's apt)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/src"
echo "deb-src http://deb.debian.org/debian sid main" >"$work/sources.list"
apt=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o Dir::State::Lists="$work/lists" -o Acquire::Check-Valid-Until=false)
apt-get "${apt[@]}" -q update >/dev/null
(cd "$work/src" && apt-get "${apt[@]}" -q source --download-only python3.14 >/dev/null)
# The upstream tarball alone: Debian's patches are about its packaging, not the interpreter.
tar -xf "$(ls "$work"/src/python3.14_*.orig.tar.xz)" -C "$work/src"
cd "$(ls -d "$work"/src/Python-3.14*/)"
./configure -q --disable-gil --prefix="$prefix" --with-ensurepip=no >/dev/null
make -s -j"$(nproc)" >/dev/null 2>&1 || make -j1  # the second run shows the error
make -s altinstall >/dev/null 2>&1
# pip from PyPI (Debian's tarball may lack ensurepip's bundled wheel): run from its own wheel.
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$work/pip" pip
whl=$(ls "$work"/pip/pip-*.whl)
"$prefix/bin/python3.14t" "$whl/pip" install -q --no-index --disable-pip-version-check "$whl"
"$prefix/bin/python3.14t" -c 'import sys, ssl; assert not sys._is_gil_enabled(); print(sys.version)'
