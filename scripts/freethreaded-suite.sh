#!/usr/bin/env bash
# The CPU suite on a free-threaded CPython with the GIL off (PYTHON_GIL=0), where nothing
# but custream's own synchronization keeps threads apart:
#
#   bash scripts/freethreaded-suite.sh [PREFIX] [-- PYTEST_ARGS ...]
#
# 1. the interpreter: scripts/build/freethreaded-python.sh PREFIX (default target/ft-python; 3.13,
#    the one this machine's registries give);
# 2. custream and the Rust crate's test extension built for it with maturin (a free-threaded
#    interpreter loads no abi3 wheel). pyo3 0.30 supports free-threading from 3.14 on: for a
#    3.13t interpreter the build is made from a copy of the tree with pyo3 pinned to 0.28,
#    the last release that supports 3.13t, and pyo3-custream's one 0.30-only call
#    (PyCapsule::import_pointer) written as 0.28 has it. What ships is built with pyo3 0.30:
#    this run tests custream's own code free-threaded, not that pyo3 release; the tests of
#    pyo3 0.30's wording of an argument error, and of the Rust guide's recipe (built against
#    the real tree's pyo3 0.30), are left out under the pin;
# 3. a virtual environment with the test tools (mypy has no free-threaded build: the stub
#    test skips), and pytest, with PYTHON_GIL=0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$root/target/ft-python
if [ $# -gt 0 ] && [ "$1" != "--" ]; then prefix=$1; shift; fi
[ "${1:-}" = "--" ] && shift
bash "$root/scripts/build/freethreaded-python.sh" "$prefix" >/dev/null
python=$(ls "$prefix"/bin/python3.1[0-9]t | head -1)
minor=$("$python" -c 'import sys; print(sys.version_info[1])')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 cp --parents -t "$work" 2>/dev/null || true)
# CMake's FindPython looks for a free-threaded interpreter only where the fourth element of
# Python_FIND_ABI allows it (OFF by default on POSIX), and docs/cpp.md's CMake recipes, which
# this test builds as the page writes them, leave it unset: they find the GIL build instead.
deselect=(--deselect cpp_tests/test_cpp_docs.py::test_the_cmake_recipes_build_the_binding_examples)
if [ "$minor" -lt 14 ]; then
    sed -i 's/"0\.30\.1"/"0.28"/' "$work/Cargo.toml" "$work/pyo3-custream/Cargo.toml" "$work/tests/rust_ext/Cargo.toml"
    sed -i 's|PyCapsule::import_pointer(py, capsule_name())|unsafe { PyCapsule::import::<u8>(py, capsule_name()) }.map(\|r\| std::ptr::NonNull::from(r).cast::<std::ffi::c_void>())|' \
        "$work/pyo3-custream/src/capi.rs"
    # pyo3 0.30's wording of an argument error (11 cases), and the Rust guide's recipe, which
    # builds a user's crate against the real tree's pyo3 0.30: it refuses 3.13t.
    deselect+=(--deselect tests/test_rust_crate.py::test_a_producer_that_lies_gets_custreams_own_error
               --deselect tests/test_rust_crate.py::test_the_rust_guides_recipe_builds_and_runs)
fi
venv=$work/venv
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin
for manifest in Cargo.toml tests/rust_ext/Cargo.toml; do
    (cd "$work" && CARGO_TARGET_DIR="$root/target/ft-build" "$venv/bin/maturin" build -q --release \
        -i "$venv/bin/python" -m "$manifest" -o "$work/dist" >/dev/null)
done
# hypothesis's newest releases come as an sdist that needs a compiler of their own: a wheel.
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$work"/dist/*.whl pytest \
    --only-binary=hypothesis "hypothesis<6.170" "cython>=3.1" setuptools cmake meson ninja nanobind pybind11 \
    "nvidia-cuda-cccl>=13.3" "nvidia-cuda-runtime>=13.0" "nvidia-cuda-crt>=13.0" "libclang>=18.1,<19" \
    "ziglang>=0.13,<0.14"
cd "$root"
"$venv/bin/python" -c 'import sys, custream; assert not sys._is_gil_enabled(), "custream turned the GIL on"
print(f"custream {custream.__version__} on {sys.version.split()[0]} free-threaded: the GIL stays off on import")'
PYTHON_GIL=0 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${deselect[@]}" "$@"
