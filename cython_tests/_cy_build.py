"""Compile the test consumers against the *installed* custream, the way a downstream build does.

Cython runs as a subprocess of this Python, so it finds ``custream/__init__.pxd`` on
``sys.path`` (site-packages), and the C compiler gets ``custream.get_include()``: nothing
comes from the source tree. The compiler is called directly (no setuptools) so the same
builder works on the GPU machine; the setuptools path has its own test.

Outputs go to ``cython_tests/build/<key>/``, where the key hashes every input (sources,
the installed header and .pxd, Cython, Python, flags): a rerun with nothing changed reuses
them, and a changed wheel or source rebuilds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import custream

HERE = Path(__file__).resolve().parent
BUILD_ROOT = HERE / "build"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


@dataclasses.dataclass(frozen=True)
class Module:
    """One extension module: ``source`` is a file in cython_tests/ (.pyx, .c or .cpp) or an
    absolute path; ``sources`` are more files compiled into it (e.g. nanobind's library)."""

    name: str
    source: str
    sources: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    macros: tuple[str, ...] = ()  # "NAME" or "NAME=VALUE"
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    cplus: bool = False

    @property
    def filename(self) -> str:
        return self.name + EXT_SUFFIX


def compiler(cplus: bool) -> list[str]:
    var = "CXX" if cplus else "CC"
    for candidate in (os.environ.get(var), sysconfig.get_config_var(var), "c++" if cplus else "cc"):
        if candidate:
            argv = shlex.split(candidate)
            if shutil.which(argv[0]):
                return argv
    raise RuntimeError(f"no {'C++' if cplus else 'C'} compiler found (set {var})")


def _run(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {shlex.join(argv)}\n{proc.stdout}{proc.stderr}")


def _key(modules: list[Module]) -> str:
    h = hashlib.sha256()
    for part in (sys.version, EXT_SUFFIX, _cython_version(), repr(sorted(modules, key=lambda m: m.name))):
        h.update(part.encode())
    files = {HERE / s for m in modules for s in (m.source, *m.sources)} | {Path(__file__)}
    for d in {d for m in modules for d in m.include_dirs}:
        files |= set(Path(d).glob("*.h"))
    include = Path(custream.get_include())
    files |= {f for pattern in ("*.h", "*.hpp", "*.pxd") for f in include.rglob(pattern)}
    for f in sorted(files):
        h.update(str(f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _cython_version() -> str:
    try:
        import Cython

        return Cython.__version__
    except ImportError:
        return "none"


def _build_one(m: Module, out: Path) -> None:
    target = out / m.filename
    if target.exists():
        return
    src = HERE / m.source
    # A private folder per build, so two test sessions building the same key cannot mix.
    work = Path(tempfile.mkdtemp(prefix=f"{m.name}.", suffix=".work", dir=out))
    try:
        _compile(m, src, work)
        os.replace(work / m.filename, target)  # atomic: a half-built module is never importable
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile(m: Module, src: Path, work: Path) -> None:
    if src.suffix == ".pyx":
        # Copied under the module's name: Cython names the module after the file.
        pyx = work / f"{m.name}.pyx"
        shutil.copyfile(src, pyx)
        c_file = work / f"{m.name}.{'cpp' if m.cplus else 'c'}"
        argv = [sys.executable, "-m", "cython", "-3", "-o", str(c_file), str(pyx)]
        if m.cplus:
            argv.insert(3, "--cplus")
        _run(argv, cwd=work)
    else:
        c_file = src
    # A module's own include dirs come first, so a variant custream.h wins over the installed one.
    include = [*m.include_dirs, sysconfig.get_paths()["include"], custream.get_include()]
    argv = [*compiler(m.cplus), "-shared", "-fPIC", "-O1", "-g0", "-Wall"]
    if sys.platform == "darwin":
        argv += ["-undefined", "dynamic_lookup"]
    argv += [f"-I{d}" for d in dict.fromkeys(include)]
    argv += [f"-D{d}" for d in m.macros]
    argv += [*m.cflags, "-o", str(work / m.filename), str(c_file), *(str(HERE / s) for s in m.sources), *m.ldflags]
    _run(argv, cwd=work)


def build(modules: list[Module]) -> Path:
    """Build every module (in parallel) and return the folder holding them."""
    python_h = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not python_h.is_file():
        raise RuntimeError(f"{python_h} is missing: install this Python's development headers (e.g. python3-dev)")
    out = BUILD_ROOT / _key(modules)
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for f in [pool.submit(_build_one, m, out) for m in modules]:
            f.result()
    return out


def variant_header(dest: Path, edit: str) -> Path:
    """A copy of the installed custream.h with one deliberate change, in its own folder."""
    text = (Path(custream.get_include()) / "custream.h").read_text()
    end = "\n} CustreamStream;"
    if text.count(end) != 1:
        raise RuntimeError(f"custream.h changed: no single {end!r} to make the {edit!r} variant")
    if edit == "bigger":  # one more field: the consumer expects a larger object
        text = text.replace(end, "\n    void *added_field;" + end)
    elif edit == "smaller":  # one field fewer (the last): a header older than the object
        text = re.sub(r"\n[^\n]*;[^\n]*" + re.escape(end), end, text)
    elif edit == "abi99":
        text, n = re.subn(r"#define CUSTREAM_ABI_VERSION \d+\n", "#define CUSTREAM_ABI_VERSION 99\n", text)
        assert n == 1, "custream.h changed: no CUSTREAM_ABI_VERSION to change"
    else:
        raise ValueError(f"unknown variant {edit!r}")
    folder = dest / f"include-{edit}"
    folder.mkdir(parents=True, exist_ok=True)
    header = folder / "custream.h"
    if not header.is_file() or header.read_text() != text:
        tmp = folder / f".custream.h.{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, header)  # atomic: a concurrent build never reads half a header
    return folder


def cuda_toolkit() -> tuple[str, list[str]] | str:
    """(the folder holding cuda.h, linker flags for libcuda), or a sentence saying why not.

    Looks in CUDA_HOME / CUDA_PATH, next to nvcc, in the usual install places and in
    NVIDIA's pip wheels on sys.path; links against the toolkit's stub libcuda.so when
    there is one (the loader then finds the driver's libcuda.so.1), else names
    libcuda.so.1 directly.
    """
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots += ["/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob("cuda-*")), reverse=True), "/opt/cuda", "/usr"]
    for root in filter(None, roots):
        include = Path(root) / "include"
        if not (include / "cuda.h").is_file():
            continue
        for stubs in ("lib64/stubs", "lib/stubs", "targets/x86_64-linux/lib/stubs", "targets/sbsa-linux/lib/stubs"):
            if (Path(root) / stubs / "libcuda.so").exists():
                return str(include), [f"-L{Path(root) / stubs}", "-lcuda"]
        return str(include), ["-l:libcuda.so.1"]
    # The header alone also ships in NVIDIA's pip wheels (cuda-bindings, CuPy and torch pull them in).
    for entry in sys.path:
        for header in sorted(Path(entry or ".").glob("nvidia/*/include/cuda.h")):
            return str(header.parent), ["-l:libcuda.so.1"]
    looked = ", ".join(dict.fromkeys(filter(None, roots)))
    return f"cuda.h not found (looked in CUDA_HOME, CUDA_PATH, next to nvcc and in {looked}); set CUDA_HOME"
