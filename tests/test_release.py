"""Release basics: one version (Cargo.toml's, built into the extension), the license in the
installed metadata, and an import that stays cheap (no importlib.metadata, no typing)."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import custream

ROOT = Path(__file__).resolve().parent.parent


def cargo_version() -> str:
    m = re.search(r'^\[package\]\n(?:[^\[]*\n)*?version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    assert m, "Cargo.toml has no [package] version"
    return m.group(1)


def test_the_version_has_one_source():
    assert custream.__version__ == importlib.metadata.version("custream") == cargo_version()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r"^version\s*=", pyproject, re.M), "pyproject.toml must not write the version"
    assert "__version__ = " not in (ROOT / "python" / "custream" / "__init__.py").read_text()
    # custream.h names its release in custream_import()'s errors: the installed header's is this one.
    header = (Path(custream.get_include()) / "custream.h").read_text()
    assert re.findall(r'^#define CUSTREAM_HEADER_VERSION "([^"]+)"$', header, re.M) == [cargo_version()]


def test_the_changelog_has_this_version_or_unreleased():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[(Unreleased|{re.escape(cargo_version())})\]", text, re.M)


def test_license_metadata_and_file_are_installed():
    meta = importlib.metadata.metadata("custream")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    files = [f for f in importlib.metadata.files("custream") or [] if f.name == "LICENSE"]
    assert files, "LICENSE is not in the installed distribution"
    assert "Apache License" in files[0].read_text() and "Version 2.0" in files[0].read_text()
    assert files[0].read_text() == (ROOT / "LICENSE").read_text()


@pytest.mark.parametrize("module", ["importlib.metadata", "typing"])
def test_import_leaves_slow_modules_alone(module):
    code = f"import sys, custream; sys.exit({module!r} in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, (
        f"import custream imported {module}"
    )


def test_the_module_has_no_getattr_hook():
    # CPython does not specialize `module.name` lookups on a module that defines __getattr__:
    # `custream.current_stream()` cost twice a ContextVar.get() with one.
    assert "__getattr__" not in vars(custream)


def test_unknown_attributes_still_raise():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        custream.nope  # noqa: B018


def test_the_extension_unwinds_with_the_process_unwinder():
    # glibc's pthread_exit (CPython 3.10-3.13 end threads with it at exit) unwinds with
    # libgcc_s; an extension that links an unwinder of its own (zig's, in the release build
    # before issue 22) runs its personality routine against the other's frames and crashes.
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("needs readelf (binutils) to read the extension's dynamic symbols")
    ext = Path(custream._custream.__file__)
    out = subprocess.run([readelf, "--dyn-syms", "--dynamic", "-W", str(ext)], capture_output=True, text=True,
                         check=True).stdout
    assert "libgcc_s.so.1" in out, f"{ext.name} does not load libgcc_s"
    unwind = [line.split() for line in out.splitlines() if " _Unwind_RaiseException" in line]
    assert unwind, f"{ext.name} does not use _Unwind_RaiseException"
    for fields in unwind:
        assert fields[6] == "UND" and fields[7].startswith("_Unwind_RaiseException@GCC_"), fields
