#!/usr/bin/env python3
"""docs/rust.md, the Rust guide, written from the pyo3-custream crate's own documentation.

The crate's docs are the one source: its README and the pages under pyo3-custream/docs/, which
pyo3-custream/src/lib.rs includes as the crate's documentation (their Rust blocks are the
crate's doctests). This script joins them, in lib.rs's order, into one page that reads on its
own on a code host: rustdoc's hidden lines (`# ...`) and intra-doc link targets are left out.
tests/test_rust_crate.py fails while docs/rust.md is not what this script writes.

Usage: python scripts/generate/rust_guide.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "pyo3-custream"
PAGE = ROOT / "docs" / "rust.md"

HEADER = """\
<!-- Written by scripts/generate/rust_guide.py from the pyo3-custream crate's documentation ({sources}):
edit those, then run `python scripts/generate/rust_guide.py`. Their Rust blocks are the crate's doctests
(cargo test); tests/test_rust_crate.py builds the recipe below and checks this page. -->
"""

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def sources() -> list[Path]:
    """The files lib.rs includes as the crate's documentation, in its order."""
    lib = (CRATE / "src" / "lib.rs").read_text()
    found = re.findall(r'include_str!\("\.\./([^"]+\.md)"\)', lib)
    if not found:
        raise RuntimeError("pyo3-custream/src/lib.rs includes no .md file")
    return [CRATE / name for name in found]


def _code_block(m: re.Match) -> str:
    info, code = m.group(1).strip(), m.group(2)
    if info.split(" ")[0] == "rust":
        # rustdoc's hidden lines: `# code` and a lone `#`.
        code = "".join(line for line in code.splitlines(True) if not re.match(r"\s*#( |$)", line.rstrip("\n") + " "))
        info = "rust"
    return f"```{info}\n{code}```"


def render(text: str) -> str:
    """One crate doc page as the guide shows it."""
    # Intra-doc link definitions (`[`Stream`]: crate::Stream`) resolve in rustdoc only.
    text = re.sub(r"^\[[^\]\n]+\]: crate::\S+\n", "", text, flags=re.M)
    text = re.sub(r"\[(`[^`\n]+`)\](?![(\[])", r"\1", text)
    text = _FENCE.sub(_code_block, text)
    return text.rstrip("\n") + "\n"


def page() -> str:
    files = sources()
    names = ", ".join(str(f.relative_to(ROOT)) for f in files)
    parts = [render(f.read_text()) for f in files]
    return HEADER.format(sources=names) + "\n" + "\n".join(parts)


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE} is not what scripts/generate/rust_guide.py writes: run it", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
