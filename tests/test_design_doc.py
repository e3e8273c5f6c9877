"""The design document stays true to the code: every C entry of custream.h is in its table
and in the C guide, and src/'s folders have no circle and none is used from below."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = (ROOT / "pxd" / "custream.h").read_text()
DESIGN = (ROOT / "docs" / "design.md").read_text()
C_GUIDE = (ROOT / "docs" / "c.md").read_text()

# The layers of docs/design.md's "Code layout", top to bottom: the folders of src/ (and the
# single-file modules at its top). A folder uses only folders of the layers below its own.
LAYERS = [
    ["lib"],
    ["capi", "module_functions"],
    ["stream"],
    ["event", "graph", "memops", "pool"],
    ["green", "waits"],
    ["host"],
    ["object"],
    ["cpython"],
    ["driver"],
]
LAYER = {unit: layer for layer, units in enumerate(LAYERS) for unit in units}
# The Python faces: slots and methods that parse and delegate, all safe functions.
FACES = ["stream/slots.rs", "green/methods.rs", "module_functions.rs"]


def c_entries() -> set[str]:
    return set(re.findall(r"\b(Custream_[A-Z][A-Za-z]*)\s*\(", HEADER))


def test_every_c_entry_of_the_header_is_in_the_design_table_and_the_c_guide():
    entries = c_entries()
    assert len(entries) >= 13, entries
    table = DESIGN[DESIGN.index("## The C API") : DESIGN.index("## Targets")]
    assert not {e for e in entries if f"`{e}(" not in table}, "missing from docs/design.md's C API table"
    assert not {e for e in entries if e not in C_GUIDE}, "missing from docs/c.md"


def test_every_entry_of_the_c_api_struct_is_in_the_design_table():
    struct = HEADER[HEADER.index("typedef struct CustreamCAPI") :]
    struct = struct[: struct.index("} CustreamCAPI;")]
    fields = set(re.findall(r"\(\*(\w+)\)\(", struct))
    table = DESIGN[DESIGN.index("## The C API") : DESIGN.index("## Targets")]
    assert fields and not {f for f in fields if f"`{f}`" not in table}


def unit_of(path: Path) -> str:
    rel = path.relative_to(ROOT / "src")
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def uses() -> dict[str, set[str]]:
    """What each folder of src/ uses of the others, from its `use crate::` lines."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "src").rglob("*.rs"):
        text = path.read_text()
        names = set(re.findall(r"\bcrate::(\w+)", text))
        for group in re.findall(r"use crate::\{([^;]*)\};", text):
            names.update(re.findall(r"(?:^|[\s,{])(\w+)(?=::|\s*[,}]|$)", group))
        me = unit_of(path)
        graph.setdefault(me, set()).update(n for n in names if n != me)
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def test_every_folder_of_src_has_a_layer():
    assert set(uses()) == set(LAYER), "docs/design.md's Code layout and LAYERS here list every folder"


def test_the_code_layout_table_lists_every_folder_in_its_layer():
    layout = DESIGN[DESIGN.index("### Code layout") : DESIGN.index("#### The unsafe boundary")]
    table = {
        int(layer): set(re.findall(r"`(\w+)(?:/|\.rs)`", entries))
        for layer, entries in re.findall(r"^\| (\d+) \| ([^|]*) \|", layout, re.M)
    }
    assert table == {layer: set(units) for layer, units in enumerate(LAYERS)}


def test_no_folder_uses_its_own_layer_or_one_above():
    upward = sorted(
        f"{m} (layer {LAYER[m]}) uses {d} (layer {LAYER[d]})"
        for m, deps in uses().items()
        for d in deps
        if LAYER[d] <= LAYER[m]
    )
    assert not upward


def test_src_has_no_folder_circle():
    graph = uses()
    state: dict[str, int] = {}
    circles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                circles.append(path[path.index(d) :] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles


def test_each_folder_says_what_it_holds_and_which_folders_it_uses():
    graph = uses()
    wrong = {}
    for folder in sorted(p for p in (ROOT / "src").iterdir() if p.is_dir()):
        doc = "\n".join(
            line.removeprefix("//!").strip()
            for line in (folder / "mod.rs").read_text().splitlines()
            if line.startswith("//!")
        )
        assert doc, f"src/{folder.name}/mod.rs says nothing of what it holds"
        said = doc[doc.rindex("Uses") :].split("\n\n")[0]
        named = {n for n in re.findall(r"`(\w+)/?`", said) if n in LAYER}
        if named != graph[folder.name]:
            wrong[folder.name] = (sorted(named), sorted(graph[folder.name]))
    assert not wrong, "mod.rs's 'Uses' (said, actual)"


def test_the_python_faces_hold_no_unsafe_block():
    found = {f: len(re.findall(r"unsafe\s*\{", (ROOT / "src" / f).read_text())) for f in FACES}
    assert not {f: n for f, n in found.items() if n}
