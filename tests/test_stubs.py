"""The type stubs agree with the running extension (mypy's stubtest) and ship in the wheel."""

import os
import subprocess
import sys

import pytest

import custream

HERE = os.path.dirname(__file__)


def test_stub_and_marker_files_are_installed():
    pkg = custream.get_include()
    assert os.path.isfile(os.path.join(pkg, "_custream.pyi"))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))


def test_stubtest_finds_no_difference(tmp_path):
    pytest.importorskip("mypy")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nignore_missing_imports = True\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "custream", "--mypy-config-file", str(config),
         "--allowlist", os.path.join(HERE, "stubtest-allowlist.txt")],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _stub_docs():
    sys.path.insert(0, os.path.join(HERE, "..", "scripts", "generate"))
    try:
        import stub_docs
    finally:
        sys.path.pop(0)
    return stub_docs


STUBS = {"installed": os.path.join(custream.get_include(), "_custream.pyi"),
         "source": os.path.join(HERE, "..", "python", "custream", "_custream.pyi")}


@pytest.mark.parametrize("which", sorted(STUBS))
def test_the_stubs_docstrings_are_the_runtimes(which):
    """One source: the Rust doc comments, which help() shows. The stub's docstrings are a copy
    that scripts/generate/stub_docs.py writes from the installed extension; every def and class of the
    stub with a runtime object has the runtime's docstring (none where the runtime has none)."""
    import custream._custream as module

    path = STUBS[which]
    if not os.path.isfile(path):
        pytest.skip(f"no {which} stub at {path}")
    found = _stub_docs().differences(module, open(path).read())
    assert not found, (f"{path} differs from the runtime's docstrings; edit the Rust doc comment (the one source), "
                       "rebuild, then run scripts/generate/stub_docs.py:\n" + "\n".join(found))


def test_the_docstring_check_sees_every_pair_and_a_difference():
    """The check compares what it should: it finds the runtime's docstrings (the classes, their
    methods and properties, the functions), and a stub docstring changed by one word fails."""
    import ast

    import custream._custream as module

    stub_docs = _stub_docs()
    text = open(STUBS["installed"]).read()
    pairs = [(name, want) for name, _, _, want in stub_docs.wanted(module, ast.parse(text)) if want]
    names = {name for name, _ in pairs}
    assert len(pairs) >= 60, len(pairs)
    assert {"Stream", "Stream.close", "Stream.from_handle", "Stream.handle", "Event.record", "GreenContext.split",
            "StreamPool.get", "Graph.launch", "device_count", "current_stream"} <= names
    assert "Stream.__new__" not in names and "Stream.__eq__" not in names  # CPython's generic text
    # A property with a setter: its one docstring, the getter's; the setter's def is not a pair.
    assert "Stream.sync_policy" in names
    assert len([n for n, _ in pairs if n == "Stream.sync_policy"]) == 1
    changed = text.replace('"""True once close() has been called."""', '"""True after close()."""', 1)
    assert changed != text
    assert any(d.startswith(("Stream.closed", "Event.closed", "GreenContext.closed", "StreamPool.closed", "Graph.closed"))
               for d in stub_docs.differences(module, changed))
    rewritten = stub_docs.rewrite(module, changed)
    assert stub_docs.differences(module, rewritten) == [] and ast.parse(rewritten)
