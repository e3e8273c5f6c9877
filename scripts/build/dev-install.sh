#!/usr/bin/env bash
# Build the abi3 wheel natively (quicker than the release build, tagged for this machine's
# glibc) into dist-dev/ and install it, with the test tools, into a virtual environment
# (default .venv). dist/ is left to the release wheel (scripts/build-wheel.sh), which is what
# scripts/gpu-check.sh tests; GPU_CHECK_WHEEL=dist-dev/<wheel> makes it test this one.
# Usage: scripts/build/dev-install.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${1:-.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin pytest hypothesis cython setuptools
rm -f dist-dev/custream-*.whl
"$venv/bin/maturin" build --release -o dist-dev >/dev/null
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps dist-dev/custream-*.whl
echo "installed $(ls dist-dev/custream-*.whl) into $venv"
