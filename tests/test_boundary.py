"""The unsafe boundary of docs/design.md stays true: raw CPython pointers only in src/cpython/
(at most 5 files there) and the C API (src/capi.rs), raw driver calls only in src/driver/,
and a method built by hand only through the boundary's one macro."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# What a raw CPython pointer looks like in Rust: pyo3's C API (`pyo3::ffi`, `ffi::Py...`,
# pyo3-custream's bindgen layout), a reference count, a `PyObject` pointer, and pyo3's
# conversions from and to raw pointers. `std::ffi` (C strings, c_void) is not CPython's.
RAW_CPYTHON = re.compile(
    r"(?<!std::)(?<!core::)\bffi::"
    r"|\bpyo3_custream::ffi\b"
    r"|\bfrom_owned_ptr\w*|\bfrom_borrowed_ptr\w*|\bBorrowed::from_ptr\w*|\bBound::from_ptr\w*"
    r"|\bPy_REFCNT\b|\bPyObject\b|\binto_ptr\(\)|\bas_type_ptr\(\)|\bget_type_ptr\(\)"
    r"|\bassume_attached\b"
)
# A raw driver call: an entry point of the loaded library called through its pointer
# (`(api.cuStreamQuery)(h)`), or cudarc's raw bindings.
RAW_DRIVER = re.compile(r"\bcu[A-Z]\w*\)\s*\(|\bcudarc::|\blibcuda::(?:api|boot)\b")
# A method added to a type after it is made, by setattr or a descriptor made outside the macro.
PATCHED = re.compile(r"PyDescr_NewMethod|\.setattr\(\s*name|add_fastcall|add_method")

CPYTHON_FILES_AT_MOST = 6


def code_of(path: Path) -> str:
    """The file without its comments (`//`, `//!`, `///`), so that prose naming a call is not
    taken for one. String literals stay: a docstring that names `cuStreamWriteValue32` is
    never followed by `)(`."""
    return "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in path.read_text().splitlines())


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.rs"))


def allowed_cpython(path: Path) -> bool:
    rel = path.relative_to(SRC)
    return rel.parts[0] == "cpython" or rel == Path("capi.rs")


def test_raw_cpython_pointers_only_at_the_boundary():
    found = {
        str(p.relative_to(ROOT)): sorted(set(RAW_CPYTHON.findall(code_of(p))))
        for p in sources()
        if not allowed_cpython(p) and RAW_CPYTHON.search(code_of(p))
    }
    assert not found, f"raw CPython pointers outside src/cpython/ and src/capi.rs: {found}"


def test_the_boundary_is_at_most_six_files():
    holders = sorted(str(p.relative_to(SRC)) for p in sources() if allowed_cpython(p) and RAW_CPYTHON.search(code_of(p)))
    assert "capi.rs" in holders and any(h.startswith("cpython/") for h in holders), holders
    assert len(holders) <= CPYTHON_FILES_AT_MOST, holders


def test_raw_driver_calls_only_in_the_driver_folder():
    found = {
        str(p.relative_to(ROOT)): sorted(set(RAW_DRIVER.findall(code_of(p))))
        for p in sources()
        if p.relative_to(SRC).parts[0] != "driver" and RAW_DRIVER.search(code_of(p))
    }
    assert not found, f"raw driver calls outside src/driver/: {found}"
    # The check sees the calls it is meant to: the driver folder makes them.
    assert any(RAW_DRIVER.search(code_of(p)) for p in (SRC / "driver").rglob("*.rs"))


def test_methods_built_by_hand_only_through_the_boundary_macro():
    raw_call = SRC / "cpython" / "raw_call.rs"
    patched = {
        str(p.relative_to(ROOT)) for p in sources() if p != raw_call and PATCHED.search(code_of(p))
    }
    assert not patched, f"a method added outside hand_built_method!: {patched}"
    users = [p for p in sources() if "hand_built_method!(" in code_of(p) and p != raw_call]
    for p in users:
        # Each use is the value of a #[classattr] of the class's own #[pymethods] block, or
        # a module function: never set on a type after import.
        text = code_of(p)
        for m in re.finditer(r"hand_built_method!\(\s*(\w+)", text):
            if m.group(1) == "function_o":
                continue
            before = text[: m.start()]
            assert before.rfind("#[classattr]") > before.rfind("#[pymethods]") > 0, p


def test_the_patterns_see_what_they_are_for():
    """Each pattern finds its kind of use, and passes the prose and C strings that merely name one."""
    assert RAW_CPYTHON.search("let p = unsafe { ffi::PyLong_AsLong(v.as_ptr()) };")
    assert RAW_CPYTHON.search("unsafe { Bound::from_owned_ptr(py, p) }")
    assert RAW_CPYTHON.search("pool: AtomicPtr<PyObject>,")
    assert RAW_CPYTHON.search("if unsafe { pyo3::ffi::Py_REFCNT(o) } != 1 {")
    assert not RAW_CPYTHON.search("use std::ffi::{c_void, CStr};")
    assert RAW_DRIVER.search("check(unsafe { (api.cuStreamQuery)(h) })")
    assert not RAW_DRIVER.search('c"(``cuStreamWriteValue32/64``). ``address``"')
    assert code_of(Path(__file__)) is not None
    assert "Py_REFCNT" not in code_of_text("// reads Py_REFCNT here\nlet x = 1;")


def code_of_text(text: str) -> str:
    return "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in text.splitlines())


def test_the_design_docs_unsafe_table_counts_every_block():
    """docs/design.md's "The unsafe boundary" says where every `unsafe` block is: its table's
    counts are the code's, file by file (the driver's row by its parenthesis), and its total."""
    design = (ROOT / "docs" / "design.md").read_text()
    start = design.index("#### The unsafe boundary")
    # To the next heading, or the end of the document.
    after = re.compile(r"^#{1,4} ", re.M).search(design, start + 1)
    section = design[start : after.start() if after else len(design)]
    said: dict[str, int] = {}
    for entry, count, what in re.findall(r"^\| `([\w/.]+)` \| (\d+) \| (.*) \|$", section, re.M):
        if entry == "driver/":
            parts = dict((f"driver/{f}", int(n)) for f, n in re.findall(r"`([\w.]+)` (\d+)", what))
            assert sum(parts.values()) == int(count), parts
            said.update(parts)
        else:
            said[entry] = int(count)
    blocks = {str(p.relative_to(SRC)): len(re.findall(r"unsafe\s*\{", p.read_text())) for p in sources()}
    assert said == {f: n for f, n in blocks.items() if n}
    total = int(re.search(r"Where the (\d+) `unsafe` blocks are", section).group(1))
    assert total == sum(blocks.values()) <= 175
