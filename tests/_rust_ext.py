"""The test extension of the Rust crate pyo3-custream (tests/rust_ext, the module
custream_rust_ext), for tests/test_rust_crate.py and tests/gpu/test_gpu_rust.py.

An installed custream_rust_ext is used as it is (CI installs the wheel that
scripts/build/build-rust-ext.sh builds). Otherwise the first test that needs it builds it from the
source tree with maturin (a debug build, into target/ as `cargo test` builds) and imports it
from target/rust-ext-py/<key>/, the key hashing every input, so a rerun with nothing changed
reuses it; subprocesses of the tests find it through PYTHONPATH. Where neither works (no cargo,
no maturin, no sources: the GPU machine) the tests skip saying why, or fail where
CUSTREAM_REQUIRE_BUILD_TOOLS is set.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "tests" / "rust_ext"
BUILD = ("the test run builds it with cargo and maturin (pip install '.[test]' brings maturin); "
         "or scripts/build/build-rust-ext.sh OUTDIR builds its wheel (pip install OUTDIR/custream_rust_ext-*.whl)")

_built: "str | None" = None  # the folder this process imports it from, once built or found


def _inputs():
    """Every file the extension is built from."""
    files = [ROOT / "Cargo.toml", ROOT / "Cargo.lock"]
    for folder in (CRATE, ROOT / "pyo3-custream"):
        files += [p for p in folder.rglob("*") if p.is_file() and "target" not in p.parts]
    return sorted(files)


def _key() -> str:
    h = hashlib.sha256()
    for f in _inputs():
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def build() -> str:
    """Build the extension (or reuse the build of the same sources) and return the folder to
    import it from; raises RuntimeError saying what is missing or what failed."""
    if not (CRATE / "Cargo.toml").is_file():
        raise RuntimeError(f"no sources at {CRATE}")
    if shutil.which("cargo") is None:
        raise RuntimeError("cargo is not on PATH (a Rust toolchain, e.g. from rustup)")
    try:
        import maturin  # noqa: F401 - the build runs it as `python -m maturin`
    except ImportError:
        raise RuntimeError(f"maturin is not installed in {sys.executable}") from None
    folder = ROOT / "target" / "rust-ext-py" / _key()
    if any(folder.glob("custream_rust_ext/*.so")):
        return str(folder)
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "target"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        argv = [sys.executable, "-m", "maturin", "build", "--quiet", "-m", str(CRATE / "Cargo.toml"),
                "--interpreter", sys.executable, "--out", tmp]
        proc = subprocess.run(argv, cwd=CRATE, env=env, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("custream_rust_ext-*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as whl:
            whl.extractall(unpacked)
        try:
            os.replace(unpacked, folder)  # atomic: a half-unpacked build is never imported
        except OSError:
            if not any(folder.glob("custream_rust_ext/*.so")):  # not another session's copy
                raise
    return str(folder)


def load_ext():
    """The extension, or a skip saying how to get it; a failure where CI sets
    CUSTREAM_REQUIRE_BUILD_TOOLS (CI builds and installs it)."""
    global _built
    try:
        import custream_rust_ext

        return custream_rust_ext
    except ImportError as e:
        installed = e
    if _built is None:
        try:
            _built = build()
        except RuntimeError as e:
            _built = f"error: {e}"
        if not _built.startswith("error: "):
            sys.path.insert(0, _built)
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_built, os.environ.get("PYTHONPATH")]))
    if _built.startswith("error: "):
        message = (f"the Rust test extension custream_rust_ext is not installed ({installed}) and could not "
                   f"be built ({_built[7:]}); {BUILD}")
        if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
            pytest.fail(message + "; CUSTREAM_REQUIRE_BUILD_TOOLS is set")
        pytest.skip(message)
    import custream_rust_ext

    return custream_rust_ext
