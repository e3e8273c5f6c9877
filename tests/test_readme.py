"""The documentation's Python examples run as written: every ```python block of README.md and
docs/*.md on any machine, ```python gpu blocks on a device. Every block has a tag some test
handles (docs/code_blocks.py says which), none uses an API its library deprecates, and the
README's two commands are the ones CI runs."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
import code_blocks  # noqa: E402 (docs/code_blocks.py: the blocks and what tests them)

PYTHON = code_blocks.blocks("python")
PYTHON_GPU = code_blocks.blocks("python gpu")

# Spellings the peers deprecate, and what replaces them.
DEPRECATED = {
    "cupy.cuda.ExternalStream": "cupy.cuda.Stream.from_external (CuPy 14 warns on ExternalStream)",
    "cp.cuda.ExternalStream": "cp.cuda.Stream.from_external (CuPy 14 warns on ExternalStream)",
    "cuda.core.experimental": "cuda.core (the experimental namespace is deprecated)",
}

README_COMMANDS = ("pip install . && python -m custream", "pip install . '.[test]' && cargo test && python -m pytest")


def run(block, capsys):
    exec(compile(block.code, block.id, "exec"), {"__name__": "__docs__"})
    return capsys.readouterr().out


def test_there_are_examples_of_both_kinds():
    assert len(PYTHON) >= 4
    assert len(PYTHON_GPU) >= 2
    assert {b.page for b in PYTHON} >= {"README.md", "docs/python.md", "docs/testing.md"}


def test_every_block_has_a_tag_a_test_handles():
    unknown = [f"{b.id}: ```{b.tag}" for b in code_blocks.blocks() if b.tag not in code_blocks.TESTED_BY]
    assert not unknown, f"code blocks no test handles (docs/code_blocks.py lists the tags): {unknown}"


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_python_example_runs(block, capsys):
    out = run(block, capsys)
    for line in block.code.splitlines():
        # "print(...)  # expected output" comments must match what was printed.
        m = re.match(r"\s*print\(.*\)\s+# (.+)$", line)
        if m:
            assert m.group(1) in out


@pytest.mark.gpu
@pytest.mark.parametrize("block", PYTHON_GPU, ids=lambda b: b.id)
def test_gpu_example_runs(block, capsys):
    run(block, capsys)


def test_printed_output_shown_is_what_is_printed():
    """The one ```text block, docs/testing.md's report, is what the kit prints for its example
    (the page's call, live=False)."""
    from custream.testing import check_stream_protocol

    (block,) = code_blocks.blocks("text")  # another one needs its own check here
    assert block.page == "docs/testing.md"

    class Legacy:
        def __cuda_stream__(self):
            return (False, 0x7F00DEAD0000)  # a bool is not the version 0

    Legacy.__module__, Legacy.__qualname__ = "mylib", "Legacy"
    assert str(check_stream_protocol(Legacy(), live=False)) == block.code.rstrip("\n")


@pytest.mark.parametrize("block", code_blocks.blocks(), ids=lambda b: b.id)
def test_no_example_uses_a_deprecated_api(block):
    for old, new in DEPRECATED.items():
        assert old not in block.code, f"{block.id} uses {old}: use {new}"


def test_the_two_commands_are_there_and_ci_runs_them():
    readme = (ROOT / "README.md").read_text()
    bash = "\n".join(b.code for b in code_blocks.blocks("bash", page="README.md"))
    ci = (ROOT / ".ci" / "run").read_text()
    for command in README_COMMANDS:
        assert command in bash, f"README.md has no ```bash block with {command!r}"
        assert command in ci, f".ci/run does not run {command!r}"
    # A fresh machine with Python and Rust runs both: what the tests need comes from PyPI.
    assert not re.search(r"\b(apt-get|apt|dnf|yum)\b", bash), "the README's commands need no system package step"
    assert "pip install custream" not in readme, "there is no release on PyPI yet"


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the rest belongs in docs/"
