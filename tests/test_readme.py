"""The README's Python examples run as written (```python blocks everywhere, ```python gpu
blocks on a device), and its two commands are the ones CI runs."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")


def blocks(info):
    text = open(README).read()
    return [m.group(1) for m in re.finditer(r"^```" + re.escape(info) + r"\n(.*?)^```$", text, re.S | re.M)]


def run(code, capsys):
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    return capsys.readouterr().out


def test_there_are_examples_of_both_kinds():
    assert len(blocks("python")) >= 3
    assert len(blocks("python gpu")) >= 1


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_example_runs(index, capsys):
    out = run(blocks("python")[index], capsys)
    for line in blocks("python")[index].splitlines():
        # "print(...)  # expected output" comments must match what was printed.
        m = re.match(r"\s*print\(.*\)\s+# (.+)$", line)
        if m:
            assert m.group(1) in out


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(blocks("python gpu"))))
def test_gpu_example_runs(index, capsys):
    run(blocks("python gpu")[index], capsys)


def test_the_two_commands_are_there():
    text = open(README).read()
    assert "pip install . && python -m custream" in text
    assert "pip install . '.[test]' && cargo test && python -m pytest" in text
    with open(os.path.join(os.path.dirname(README), ".ci", "run")) as f:
        ci = f.read()
    assert "cargo test" in ci and "pytest" in ci
