"""The Rust floor the docs state is the one Cargo.toml declares.

`rust-version` in the three workspace manifests is the floor; CI (.ci/run, "the Rust floor")
fails when a package in Cargo.lock needs a newer Rust than it. Here: every page that tells a
user which Rust to install says that same version, so the floor cannot drift in the docs
either.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ("Cargo.toml", "pyo3-custream/Cargo.toml", "tests/rust_ext/Cargo.toml")
# Each page, and how many times it states the floor.
PAGES = {
    "README.md": 1,
    "docs/building.md": 2,
    "docs/index.md": 1,
    "docs/rust.md": 2,
    "pyo3-custream/README.md": 1,
    "pyo3-custream/docs/version-policy.md": 1,
}
STATED = re.compile(r"\b(1\.\d+) or newer|minimum Rust is (1\.\d+)|requires rustc (1\.\d+)")


def rust_version(manifest: str) -> str:
    m = re.search(r'^rust-version = "([0-9.]+)"$', (ROOT / manifest).read_text(), re.M)
    assert m, f"{manifest} declares no rust-version"
    return m.group(1)


def test_the_workspace_has_one_floor():
    assert {rust_version(m) for m in MANIFESTS} == {rust_version("Cargo.toml")}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_each_page_states_the_floor(page):
    floor = rust_version("Cargo.toml")
    stated = [next(g for g in m.groups() if g) for m in STATED.finditer((ROOT / page).read_text())]
    assert stated == [floor] * PAGES[page], f"{page} states {stated}, Cargo.toml's rust-version is {floor}"
