"""spec/ judges the implementation, so it must not import it (or torch): checked on the AST."""

import ast
import sys
from pathlib import Path

import pytest

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec" / "radixkv_spec"
SPEC_FILES = sorted(SPEC_DIR.rglob("*.py"))


def imported_roots(source: str) -> set[str]:
    """The top-level package of every absolute import in ``source``."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_spec_has_sources() -> None:
    assert SPEC_DIR / "model.py" in SPEC_FILES


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.name)
def test_spec_imports_only_the_standard_library(path: Path) -> None:
    roots = imported_roots(path.read_text(encoding="utf-8"))
    assert not roots & {"torch", "radixkv"}, path
    assert roots <= set(sys.stdlib_module_names) | {"radixkv_spec"}, path


def test_the_scanner_sees_nested_and_dotted_imports() -> None:
    source = "def f():\n    import torch.nn\n    from radixkv.tree import X\n"
    assert imported_roots(source) == {"torch", "radixkv"}
