#!/usr/bin/env bash
# Download the wheels the GPU run carries (the GPU machine has no network) into DIR
# (default .whl/, which scripts/gpu-check.sh installs into /tmp/site with custream):
#
#   bash scripts/gpu-wheels.sh [DIR]
#
# - rmm-cu13, librmm-cu13, rapids-logger: rmm for tests/gpu/test_gpu_rmm.py and the Cython
#   C++ module of tests/gpu/test_gpu_cpp.py;
# - nvidia-cuda-cccl: CCCL with cuda::stream, which the CUDA 13.0 toolkit's bundled CCCL
#   predates; tests/gpu/test_gpu_cpp.py puts its headers first on nvcc's include path.
#
# For CPython 3.12 on x86-64 Linux (the GPU machine), whatever Python runs this script; the
# second --platform admits manylinux2014 wheels (nvidia-cuda-cccl is one).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
mkdir -p "$dir"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --dest "$dir" \
    rmm-cu13==26.10.0 librmm-cu13==26.10.0 rapids-logger==0.3.0 \
    nvidia-cuda-cccl==13.3.5.0.6
ls -1 "$dir"
