"""The design document stays true to the code: every C entry of custream.h is in its table
and in the C guide, and src/ has no module circle and no floor used from below."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = (ROOT / "pxd" / "custream.h").read_text()
DESIGN = (ROOT / "docs" / "design.md").read_text()
C_GUIDE = (ROOT / "docs" / "c.md").read_text()

# The floors of docs/design.md's "Code layout", top to bottom.
FLOORS = {
    "lib": 0,
    **dict.fromkeys(["stream_type", "functions", "capi"], 1),
    **dict.fromkeys(
        [
            "stream",
            "event",
            "pool",
            "graph",
            "green",
            "current",
            "owner_release",
            "waits",
            "host",
            "memops",
        ],
        2,
    ),
    **dict.fromkeys(
        [
            "cpython",
            "object",
        ],
        4,
    ),
    **dict.fromkeys(["driver"], 5),
}
# Modules of one floor may use each other, as long as there is no circle.


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


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT / "src")
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def uses() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "src").rglob("*.rs"):
        text = path.read_text()
        names = set(re.findall(r"\bcrate::(\w+)", text))
        for group in re.findall(r"use crate::\{([^;]*)\};", text):
            names.update(re.findall(r"(?:^|[\s,{])(\w+)(?=::|\s*[,}]|$)", group))
        me = module_of(path)
        graph.setdefault(me, set()).update(n for n in names if n != me)
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def test_every_module_of_src_has_a_floor():
    assert set(uses()) == set(FLOORS), "docs/design.md's Code layout and FLOORS here list every module"


def test_the_code_layout_table_lists_every_module_on_its_floor():
    layout = DESIGN[DESIGN.index("### Code layout") : DESIGN.index("#### The unsafe boundary")]
    names = ["top", "face", "core", "capture", "base", "ground"]
    table = {}
    for row in re.findall(r"^\| (\w+) \| ([^|]*) \|", layout, re.M):
        if row[0] in names:
            # `driver/mod.rs` (and its other files) is the module `driver`.
            table[names.index(row[0])] = {f.split("/")[0] for f in re.findall(r"`([\w/]+)\.rs`", row[1])}
    floors = {floor: {m for m, f in FLOORS.items() if f == floor} for floor in range(len(names))}
    assert table == floors


def test_no_module_uses_a_floor_above_its_own():
    upward = sorted(
        f"{m} (floor {FLOORS[m]}) uses {d} (floor {FLOORS[d]})"
        for m, deps in uses().items()
        for d in deps
        if FLOORS[d] < FLOORS[m]
    )
    assert not upward


def test_src_has_no_module_circle():
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


def test_the_python_faces_hold_no_unsafe_block():
    faces = [m for m, floor in FLOORS.items() if floor == 1 and m != "capi"]
    found = {m: len(re.findall(r"unsafe\s*\{", (ROOT / "src" / f"{m}.rs").read_text())) for m in faces}
    assert not {m: n for m, n in found.items() if n}
