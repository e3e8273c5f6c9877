"""Sphinx configuration for custream's documentation.

Build it against the *installed* custream (the API reference is read from the running
module, as the tests read it):

    pip install '.[docs]' && sphinx-build -W --keep-going -b html docs docs/_build

Pages are Markdown (MyST) except the API reference. Every code block in them is run or
compiled by a test (see code_blocks.py here).
"""

from __future__ import annotations

import ast
from pathlib import Path

import custream

project = "custream"
author = "the custream authors"
copyright = "the custream authors; Apache-2.0"  # noqa: A001 (Sphinx's name)
release = custream.__version__  # from the installed metadata: Cargo.toml is the one source
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]
html_theme = "alabaster"
html_title = f"custream {release}"
html_theme_options = {"description": "One CUDA stream object for Python, Cython, C and C++"}

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"


# The extension module's own signatures carry no types; the stubs (_custream.pyi, checked
# against the module by stubtest) do. Use the stub's signature for every function, method
# and class the stub declares.
def _stub_signatures() -> dict[str, tuple[str, str | None]]:
    tree = ast.parse((Path(custream.__file__).parent / "_custream.pyi").read_text())
    found: dict[str, tuple[str, str | None]] = {}

    def signature(fn: ast.FunctionDef, drop_first: bool) -> tuple[str, str | None]:
        args = fn.args
        if drop_first:
            positional = args.posonlyargs or args.args
            positional.pop(0)
        returns = ast.unparse(fn.returns) if fn.returns else None
        return f"({ast.unparse(args)})", returns

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = signature(node, False)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                decorators = {ast.unparse(d) for d in item.decorator_list}
                if "property" in decorators:
                    continue
                static = "staticmethod" in decorators
                sig = signature(item, not static)
                if item.name == "__new__":
                    found[node.name] = (sig[0], None)
                else:
                    found[f"{node.name}.{item.name}"] = sig
    return found


_STUBS = _stub_signatures()


def _signature_from_stub(app, what, name, obj, options, signature, return_annotation):
    key = name.removeprefix("custream.")
    if key in _STUBS and what in ("class", "function", "method", "exception"):
        return _STUBS[key]
    return None


def setup(app):
    app.connect("autodoc-process-signature", _signature_from_stub)
