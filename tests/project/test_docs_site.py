"""The documentation site's sources hold together without building it (``tox -e docs`` builds
it strictly): every page the nav lists exists and every page is listed, the README stays a
short page whose links resolve, every figure a page includes was written by
docs/figures.py, and that script reads the commands' real output."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]\n]+\]\(([^)\s]+)\)")
FIGURE = re.compile(r"^\[[^\]\n]+\]\(((?:\.\./)*figures/[\w-]+\.md)\)$", re.MULTILINE)


def load(name: str) -> ModuleType:
    """docs/NAME.py as a module (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ROOT_PAGES: dict[str, str] = load("hooks").ROOT_PAGES  # repository file -> site page
FIGURES = load("figures")


def nav_pages() -> list[str]:
    """Every page mkdocs.yml's nav lists, in order."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:\n") :]
    return re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", nav, flags=re.MULTILINE)


def source(page: str) -> Path:
    """The file a site page is read from: docs/PAGE, or a root document the hooks serve."""
    served = {site: root for root, site in ROOT_PAGES.items()}
    return ROOT / served[page] if page in served else DOCS / page


def test_every_page_in_the_nav_exists() -> None:
    pages = nav_pages()
    assert len(pages) == len(set(pages)) >= 15
    assert {"index.md", "spec.md", "format.md", "adapters.md", "decisions.md"} <= set(pages)
    missing = [page for page in pages if not source(page).is_file()]
    assert not missing, f"listed in mkdocs.yml's nav, but no such file: {missing}"


def test_every_page_is_in_the_nav() -> None:
    written = {
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if "figures" not in path.relative_to(DOCS).parts
    }
    unlisted = sorted(written - set(nav_pages()))
    assert not unlisted, f"pages in docs/ that mkdocs.yml's nav does not list: {unlisted}"


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    assert "python3 -m pip install -c constraints.txt ./kit '.[kit]' && radixkv check" in text
    assert "python3 -m pip install 'tox>=4.20' && python3 -m tox" in text
    local = [t.partition("#")[0] for t in LINK.findall(text) if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    broken = [t for t in local if t and not (ROOT / t).exists()]
    assert not broken, f"README links to missing files: {broken}"


def test_every_figure_a_page_includes_was_written_by_the_script() -> None:
    included = set()
    for page in nav_pages():
        path = source(page)
        for target in FIGURE.findall(path.read_text()):
            included.add((path.parent / target).resolve())
    assert {p.stem for p in included} == set(FIGURES.FIGURES), "each figure on some page"
    for figure in included:
        text = figure.read_text()
        said = re.search(
            r"^Printed by `radixkv [^`]+` on \d{4}-\d\d-\d\d [\d:]+ UTC, at commit", text, re.M
        )
        assert said, f"{figure.name}: no provenance line"
        assert re.search(r"^On \d+ CPUs .*Python 3\.\d+.*torch ", text, re.M), figure.name
        assert re.search(r"^\|---", text, re.M), f"{figure.name}: no table"


def test_each_figure_names_the_command_the_script_runs_now() -> None:
    """A figure is headed by the command that printed it; when a command is renamed
    (``radixkv replay`` became ``radixkv drive``), the script runs the new one and the
    figure must be written again by it (issue 38, item 5: policies.md kept the old name)."""
    for name, figure in FIGURES.FIGURES.items():
        text = (DOCS / "figures" / f"{name}.md").read_text()
        said = re.search(r"^Printed by `radixkv ([^`]+)` on ", text, re.M)
        assert said, f"{name}.md: no provenance line"
        printed = re.sub(r" --budget \S+", "", said[1]).split()  # the figure's one option
        runs = figure.args(argparse.Namespace(budget=None))
        assert printed == runs, f"{name}.md: printed by {printed}: python docs/figures.py {name}"


@pytest.mark.search
def test_the_check_table_reads_a_real_report() -> None:
    from radixkv_conformance import run_conformance

    from examples.dict_cache import PROFILE, factory

    short = settings(max_examples=3, stateful_step_count=5, database=None, deadline=None)
    report = run_conformance(factory, profile=PROFILE, settings=short, name="dict cache")
    rows = FIGURES.check_table(report.render()).splitlines()
    (row,) = [r for r in rows if r.startswith("| dict cache |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == f"{report.stats['runs']:,}" and cells[4] == f"{report.stats['steps']:,}"
    reached = sum(1 for s in report.coverage.declared if report.coverage.counts[s.name])
    assert cells[7] == f"{reached} of {len(report.coverage.declared)}"


@pytest.mark.search
def test_the_states_and_exhaustive_tables_read_the_commands() -> None:
    bounds = "tokens=1,length=1,locks=1,depth=2"
    states = FIGURES.run(["check", "--states", bounds, "examples.dict_cache:factory"], ROOT)
    table = FIGURES.states_table(states.stdout).splitlines()
    assert table[0].startswith("| cache | bounds |") and len(table) == 3
    assert table[2].startswith("| examples.dict_cache:factory | `")
    exhaustive = FIGURES.run(["check", "--exhaustive", "1", "examples.dict_cache:factory"], ROOT)
    (row,) = [r for r in FIGURES.exhaustive_table(exhaustive.stdout).splitlines() if "dict" in r]
    assert "| ok |" in row and "of length 1" in row
