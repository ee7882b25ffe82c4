"""``fuzz_test`` and ``--database`` (``radixkv_conformance/fuzz.py``): what a fuzz run of the
kit's machine stores in its example database, the next ``radixkv check`` replays first."""

from __future__ import annotations

import functools
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase
from radixkv_conformance import fuzz_test, run_conformance
from radixkv_conformance.cli import main
from radixkv_conformance.fuzz import cache_name, machine_name, open_database

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/ is a folder of the repository, not a package

from examples import dict_cache  # noqa: E402

BUGGY = functools.partial(dict_cache.factory, bug="1")  # eviction ignores locks
NAME = "examples.dict_cache:factory"


@pytest.fixture(autouse=True)
def _settings_profile_restored() -> Iterator[None]:
    """``fuzz_test`` loads a settings profile for HypoFuzz: the other tests keep theirs."""
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def _fuzz_once(database: DirectoryBasedExampleDatabase) -> unittest.TestResult:
    """What one HypoFuzz worker does with the test, short: run it, failures stored."""
    test = fuzz_test(BUGGY, dict_cache.PROFILE, name=NAME, database=database)
    result = unittest.TestResult()
    test("runTest").run(result)
    return result


def test_a_finding_a_fuzz_run_stored_is_replayed_first(tmp_path: Path) -> None:
    database = DirectoryBasedExampleDatabase(tmp_path / "db")
    fuzzed = _fuzz_once(database)
    assert len(fuzzed.failures) + len(fuzzed.errors) == 1
    assert list((tmp_path / "db").iterdir()), "the fuzz run stored nothing"
    said: list[str] = []
    report = run_conformance(
        BUGGY,
        profile=dict_cache.PROFILE,
        name=NAME,
        explore=None,
        max_failures=1,
        database=database,
        on_stage=said.append,
        on_failure=lambda failure: said.append(f"finding {failure.finding}"),
    )
    assert said[0].startswith("replaying the examples a fuzz run stored")
    assert said[1].startswith("finding INV-"), said  # before any search of its own
    assert report.failures[0].trace["steps"], "a replayed finding comes with its trace"


def test_another_cache_name_has_other_examples(tmp_path: Path) -> None:
    database = DirectoryBasedExampleDatabase(tmp_path / "db")
    _fuzz_once(database)
    said: list[str] = []
    run_conformance(
        BUGGY,
        profile=dict_cache.PROFILE,
        name="another cache",
        explore=None,
        max_failures=1,
        database=database,
        on_stage=said.append,
        on_failure=lambda failure: said.append(f"finding {failure.finding}"),
    )
    assert said[1].startswith("searching"), said  # nothing stored under this name


def test_the_database_becomes_the_default_hypofuzz_stores_into(tmp_path: Path) -> None:
    database = DirectoryBasedExampleDatabase(tmp_path / "db")
    test = fuzz_test(BUGGY, dict_cache.PROFILE, name=NAME, database=database)
    assert settings().database == database and not settings().derandomize
    assert test.settings.database == database  # type: ignore[attr-defined]  # set by fuzz_test


def test_names_tie_a_fuzz_test_to_the_command_line() -> None:
    assert cache_name(dict_cache.factory) == NAME
    assert machine_name(NAME) == "ExamplesDict_CacheFactoryMachine".replace("_", "")


@pytest.mark.parametrize(
    ("where", "says"),
    [("{file}", "not a directory"), ("redis://localhost:1", "redis")],
)
def test_a_database_that_cannot_be_used_is_a_usage_error(
    tmp_path: Path, capsys: Any, where: str, says: str
) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exited:
        main(["check", NAME, "--database", where.format(file=tmp_path / "file")])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in error and "accepted: a directory, or redis://HOST:PORT" in error
    with pytest.raises(LookupError):
        open_database(tmp_path / "file")
