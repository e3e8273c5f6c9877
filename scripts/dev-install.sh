#!/usr/bin/env bash
# Build the abi3 wheel into dist/ and install it, with the test tools, into a virtual
# environment (default .venv). Usage: scripts/dev-install.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin pytest hypothesis cython setuptools
rm -f dist/custream-*.whl
"$venv/bin/maturin" build --release -o dist >/dev/null
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps dist/custream-*.whl
echo "installed $(ls dist/custream-*.whl) into $venv"
