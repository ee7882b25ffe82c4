"""The kit's reach into Hypothesis' internals, on the Hypothesis installed.

Where Hypothesis has no public route, the kit uses its private modules (explore/driver.py:
the pool of local constants a search draws from, a silent build context; fuzz.py: HypoFuzz's
``ConjectureResult``), so kit/pyproject.toml bounds Hypothesis to the range CI tests at both
ends (``tox -e hypothesis-range``). These tests say which name or behaviour a release broke,
and hold tox.ini's two ends to that range.
"""

from __future__ import annotations

import configparser
import importlib
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from radixkv_conformance.explore.driver import (
    draws_independent_of_loaded_modules,
    quiet_build_context,
)

pytestmark = pytest.mark.search  # the key path plays no part: run once, not again pure

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = {
    "hypothesis.internal.conjecture.providers": ("_get_local_constants", "CONSTANTS_CACHE"),
    "hypothesis.internal.constants_ast": ("Constants",),
    "hypothesis.internal.conjecture.data": ("ConjectureData", "ConjectureResult"),
    "hypothesis.control": ("BuildContext",),
    # public modules, undocumented names: conformance.py's search, cli.py's cache folder
    "hypothesis.reporting": ("with_reporter",),
    "hypothesis.stateful": ("get_state_machine_test",),
    "hypothesis.configuration": ("set_hypothesis_home_dir",),
}
"""The private and undocumented names the kit uses, by module."""
ENV = "testenv:hypothesis-range"


def declared() -> SpecifierSet:
    """The Hypothesis range kit/pyproject.toml declares."""
    project = tomllib.loads((ROOT / "kit" / "pyproject.toml").read_text())["project"]
    needs = [Requirement(text) for text in project["dependencies"]]
    return next(need.specifier for need in needs if need.name == "hypothesis")


def test_the_installed_hypothesis_is_in_the_range_the_kit_declares() -> None:
    allowed = declared()
    assert allowed.contains(hypothesis.__version__), (
        f"Hypothesis {hypothesis.__version__} is outside {allowed}, the range the kit is "
        "tested on (kit/pyproject.toml): its private names may be missing or act otherwise"
    )


@pytest.mark.parametrize("module", sorted(PRIVATE))
def test_the_private_names_the_kit_uses_are_there(module: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in PRIVATE[module] if not hasattr(loaded, name)]
    assert not missing, (
        f"Hypothesis {hypothesis.__version__} has no {module}.{', '.join(missing)}: the kit "
        "reaches into it (explore/driver.py, fuzz.py, ...); bound the range in kit/pyproject.toml "
        "below this release, or port the kit"
    )


def test_tox_tests_the_two_ends_of_the_range() -> None:
    """``tox -e hypothesis-range`` installs the lowest Hypothesis the range allows, then the
    newest: its pins must move with kit/pyproject.toml."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    commands = tox[ENV]["commands"]
    lowest = re.findall(r"hypothesis==([\w.]+)", commands)
    below = re.findall(r"hypothesis<([\w.]+)", commands)
    assert len(lowest) == 1 and len(below) == 1, commands
    allowed = declared()
    floors = [Version(spec.version) for spec in allowed if spec.operator == ">="]
    ceilings = [Version(spec.version) for spec in allowed if spec.operator == "<"]
    assert floors == [Version(lowest[0])], f"tox tests {lowest[0]}, the kit allows {allowed}"
    assert ceilings == [Version(below[0])], f"tox tests <{below[0]}, the kit allows {allowed}"
    assert "hypothesis-range" in tox["tox"]["env_list"], "CI (plain tox) must run it"


MARK = 7_301_946_285_113
"""A literal of a caller's module: Hypothesis draws it now and then, outside the kit's block."""


def _drawn() -> set[int]:
    seen: set[int] = set()

    @settings(
        max_examples=300,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.integers(7 * 10**12, 8 * 10**12))
    def draw(value: int) -> None:
        seen.add(value)

    draw()
    return seen


def test_a_search_draws_no_literal_of_the_modules_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``draws_independent_of_loaded_modules`` empties the pool of local constants: were it
    patching a name Hypothesis no longer calls, the same seed would draw otherwise where
    other modules are loaded, silently."""
    source = tmp_path / "literals_of_a_caller.py"
    source.write_text(f"MARK = {MARK}\n")
    spec = importlib.util.spec_from_file_location("literals_of_a_caller", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "literals_of_a_caller", module)
    assert MARK in _drawn(), "this Hypothesis no longer draws the literals of loaded modules"
    with draws_independent_of_loaded_modules():
        assert MARK not in _drawn(), "a loaded module's literal was drawn inside the block"
    assert MARK in _drawn(), "the block left the pool emptied"


def test_rules_may_note_inside_the_quiet_build_context(capsys: pytest.CaptureFixture[str]) -> None:
    """The explorers call rules outside a Hypothesis test; a rule's ``note`` needs one."""
    assert not currently_in_test_context()
    with quiet_build_context():
        assert currently_in_test_context()
        note("page_size=1 window=None")
    assert not currently_in_test_context()
    assert capsys.readouterr() == ("", "")
