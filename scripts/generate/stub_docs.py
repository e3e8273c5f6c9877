#!/usr/bin/env python3
"""The docstrings of python/custream/_custream.pyi, copied from the running extension.

The Rust doc comments (what ``help()`` shows) are the one source of the docstrings; the stub
carries a copy for editors and type checkers. Edit the Rust doc comment, rebuild and install
the wheel, then run this script: it rewrites every docstring of the stub from the installed
``custream._custream`` (adding those the stub lacks, removing those the runtime has none of).
tests/test_stubs.py fails while the two differ.

Usage: python scripts/generate/stub_docs.py [--check] [STUB]   (default: the source tree's stub)
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
from pathlib import Path

STUB = Path(__file__).resolve().parents[2] / "python" / "custream" / "_custream.pyi"

# Names whose docstring lives in the stub only, and why the runtime cannot carry it. (A stub
# name with no runtime object at all, such as the typing-only CudaStreamProducer, keeps its
# docstring too: stubtest checks that it is not meant to exist at run time.)
STUB_ONLY = {
    "current_stream": "the context variable's own get(), whose docstring is CPython's",
}


def runtime_doc(owner: object, name: str) -> str | None:
    """The docstring the runtime object ``owner.name`` carries of its own (cleaned), or None:
    also None for what CPython supplies generically (slot wrappers such as ``__eq__``, and
    ``__new__``, whose constructor is documented in its class's docstring)."""
    if name == "__new__":
        return None
    if isinstance(owner, type):
        raw = inspect.getattr_static(owner, name)
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
    else:
        raw = getattr(owner, name)
    if isinstance(raw, (types.WrapperDescriptorType, types.MethodWrapperType)):
        return None
    doc = getattr(raw, "__doc__", None)
    return inspect.cleandoc(doc) if doc else None


def _is_accessor(node: ast.FunctionDef) -> bool:
    """Whether ``node`` is decorated ``@name.setter`` or ``@name.deleter``."""
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


def definitions(tree: ast.Module):
    """(qualified name, the def or class node, its parent's qualified name) of the stub."""

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.FunctionDef) and _is_accessor(node):
                continue  # a property's setter: the property's docstring is its getter's
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                yield prefix + node.name, node
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, prefix + node.name + ".")

    yield from walk(tree.body, "")


def resolve(module: object, qualname: str) -> tuple[object, str] | None:
    """(the runtime object owning the last name, that name), or None if it is not there."""
    *path, name = qualname.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part, None)
    if owner is None or not hasattr(owner, name):
        return None
    return owner, name


def wanted(module: object, tree: ast.Module):
    """(qualified name, node, the stub's docstring, the docstring it should have)."""
    for qualname, node in definitions(tree):
        have = ast.get_docstring(node)
        if qualname in STUB_ONLY:
            yield qualname, node, have, have
            continue
        found = resolve(module, qualname)
        if found is None:
            continue  # stubtest reports a stub entry with no runtime object
        yield qualname, node, have, runtime_doc(*found)


def differences(module: object, text: str) -> list[str]:
    """One line for each definition whose stub docstring is not the runtime's."""
    out = []
    tree = ast.parse(text)
    for qualname, _, have, want in wanted(module, tree):
        if qualname in STUB_ONLY and not have:
            out.append(f"{qualname}: the stub must document it ({STUB_ONLY[qualname]})")
        elif have != want:
            out.append(f"{qualname}:\n  stub:    {have!r}\n  runtime: {want!r}")
    return out


def _quoted(doc: str, indent: str) -> str:
    assert '"""' not in doc and "\\" not in doc, doc
    lines = doc.split("\n")
    body = "\n".join([lines[0], *(indent + line if line else "" for line in lines[1:])])
    return f'{indent}"""{body}"""'


def rewrite(module: object, text: str) -> str:
    """``text`` (a stub) with every docstring set to the runtime's."""
    tree = ast.parse(text)
    lines = text.split("\n")
    edits = []  # (first line index, last line index exclusive, replacement lines)
    for qualname, node, have, want in wanted(module, tree):
        if have == want:
            continue
        indent = " " * (node.col_offset + 4)
        first = node.body[0]
        is_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        if is_doc and want is None:
            header = lines[first.lineno - 2]
            if node.body[1:]:
                edits.append((first.lineno - 1, first.end_lineno, []))
            elif header.rstrip().endswith(":"):  # `def f(...) -> T: ...` again
                edits.append((first.lineno - 2, first.end_lineno, [header.rstrip() + " ..."]))
            else:
                edits.append((first.lineno - 1, first.end_lineno, [indent + "..."]))
        elif is_doc:
            edits.append((first.lineno - 1, first.end_lineno, _quoted(want, indent).split("\n")))
        elif lines[first.lineno - 1][:first.col_offset].strip():
            # `def f(...) -> T: ...` on one line: the docstring replaces the `...`.
            line = lines[first.lineno - 1]
            head = line[:first.col_offset].rstrip()
            edits.append((first.lineno - 1, first.lineno, [head, *_quoted(want, indent).split("\n")]))
        else:
            # A body with no docstring: the docstring goes before its first statement.
            edits.append((first.lineno - 1, first.lineno - 1, _quoted(want, indent).split("\n")))
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start:end] = replacement
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    stub = Path(paths[0]) if paths else STUB
    import custream._custream as module

    text = stub.read_text()
    if check:
        found = differences(module, text)
        print("\n".join(found) or f"{stub}: every docstring is the runtime's")
        return 1 if found else 0
    new = rewrite(module, text)
    left = differences(module, new)
    assert not left, left
    if new != text:
        stub.write_text(new)
        print(f"{stub}: docstrings copied from {module.__file__}")
    else:
        print(f"{stub}: already the runtime's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
