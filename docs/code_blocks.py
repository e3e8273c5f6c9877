"""Every fenced code block of README.md and docs/*.md, and which test runs or compiles it.

A fence's info string says how its block is tested (its first word is also the language
Sphinx highlights it as):

=====================  ==================================================================
``python``             run (tests/test_readme.py); a ``print(...)  # text`` comment must
                       match what was printed
``python gpu``         run on a machine with a GPU (tests/test_readme.py)
``python setup.py``    the page's setup.py: builds the page's ``cython`` block
                       (cython_tests/test_cy_readme.py)
``cython``             compiled as the module ``mymod`` and called
                       (cython_tests/test_cy_readme.py)
``c``                  compiled as C and as C++ with -Wall -Wextra -Werror; a block defining
                       ``PyInit_mymod`` is built as that module and called
                       (cython_tests/test_cy_readme.py)
``cpp``                compiled as C++ with -Wall -Wextra -Werror
                       (cython_tests/test_cy_readme.py)
``cmake``, ``meson``   built, with the page's ``PyInit_mymod`` C block, and called
                       (cython_tests/test_cy_readme.py)
``text``               printed output: compared with what the code prints
                       (tests/test_readme.py)
``bash``               not run: shell commands (the README's two are what CI runs); on a
                       page with a ``python setup.py`` block, its ``python`` lines build
                       and call the module (cython_tests/test_cy_readme.py)
=====================  ==================================================================

A block with any other info string fails tests/test_readme.py, so no block goes untested
by accident. MyST directives (```` ```{toctree} ````) are not code blocks. A page in
ELSEWHERE is tested, every block of it, by the test named there.
"""

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TESTED_BY = {
    "python": "tests/test_readme.py",
    "python gpu": "tests/test_readme.py",
    "python setup.py": "cython_tests/test_cy_readme.py",
    "cython": "cython_tests/test_cy_readme.py",
    "c": "cython_tests/test_cy_readme.py",
    "cpp": "cython_tests/test_cy_readme.py",
    "cmake": "cython_tests/test_cy_readme.py",
    "meson": "cython_tests/test_cy_readme.py",
    "text": "tests/test_readme.py",
    "bash": None,
}

# Pages whose blocks another test runs or compiles: page -> that test.
ELSEWHERE = {
    "docs/cpp.md": "the C++ tests that come with custream.hpp (cpp_tests/)",
    # Written by scripts/generate/rust_guide.py from pyo3-custream's README and docs/, whose Rust blocks
    # are the crate's doctests; tests/test_rust_crate.py checks the page is theirs and builds
    # its two recipes, each in a folder of its own (the ```toml files, the ```rust block that
    # defines the module, the ```bash commands): the first, and the cudarc one.
    "docs/rust.md": "the doctests of pyo3-custream (cargo test) and tests/test_rust_crate.py",
}

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root, e.g. "docs/c.md"
    line: int  # of the opening fence
    tag: str  # the info string
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(tag: str | None = None, page: str | None = None) -> list[Block]:
    """The code blocks (not directives) tested here, in page order; only those of ``tag`` or
    ``page`` if given. The pages in ELSEWHERE are left out."""
    found = []
    for path in pages():
        rel = path.relative_to(ROOT).as_posix()
        if rel in ELSEWHERE or (page is not None and rel != page):
            continue
        text = path.read_text()
        for m in _FENCE.finditer(text):
            info = m.group(1).strip()
            if info.startswith("{"):
                continue  # a MyST directive
            block = Block(rel, text.count("\n", 0, m.start()) + 1, info, m.group(2))
            if tag is None or block.tag == tag:
                found.append(block)
    return found

