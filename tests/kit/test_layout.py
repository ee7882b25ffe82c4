"""The kit's rooms as the architecture page lists them, and no module of the source over the
size a reader can hold (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "stateful" / "radixkv_conformance"
LIMIT = 600  # lines


def test_the_architecture_page_names_every_module_of_the_kit() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(KIT) for p in KIT.rglob("*.py") if p.name != "__init__.py")
    assert modules
    assert [str(m) for m in modules if f"`{m.name}`" not in page] == []


@pytest.mark.parametrize("tree", ["src", "spec", "stateful"])
def test_no_module_is_longer_than_a_reader_can_hold(tree: str) -> None:
    lengths = {p: len(p.read_text().splitlines()) for p in (ROOT / tree).rglob("*.py")}
    assert {str(p.relative_to(ROOT)): n for p, n in lengths.items() if n > LIMIT} == {}
