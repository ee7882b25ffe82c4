"""A pass means every declared situation was reached: the verdict, the exit statuses, and
the options that bound or accept what a search leaves unreached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import page_trie
from radixkv_conformance.cli import INCOMPLETE, PASSED, main

from tests.helpers import fixed_search

pytestmark = pytest.mark.search

TARGET = "radixkv_conformance.adapters.page_trie:factory"
settings.register_profile("coverage-tiny", fixed_search(2, 3))


def test_a_search_too_short_to_reach_the_situations_is_not_a_pass() -> None:
    tiny = fixed_search(2, 3)
    report = run_conformance(page_trie.factory, settings=tiny, name="tiny")
    assert report.passed  # no finding ...
    assert not report.complete  # ... but not everything was reached
    assert report.verdict.startswith("held; ")
    assert "NEVER REACHED" in report.render()
    assert report.searches == 1  # without a budget: one search


def test_exit_statuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "coverage-tiny")
    args = ["check", TARGET, "--budget", "0.01", "--traces", str(tmp_path / "traces")]
    args += ["--explore", "none"]  # the exploration's floor would reach every situation
    assert main(args) == INCOMPLETE
    out = capsys.readouterr().out
    assert "held, incomplete" in out and "all invariants held" not in out
    missing = [line.split()[1] for line in out.splitlines() if "NEVER REACHED" in line]
    assert missing
    accepted = [a for name in missing for a in ("--uncovered-ok", name)]
    assert main(args + accepted) == PASSED
    assert "every declared situation reached" in capsys.readouterr().out


def test_nothing_is_written_into_the_users_folder_but_traces(tmp_path: Path) -> None:
    """Hypothesis' own storage (``.hypothesis/``) is moved to the user's cache folder. In a
    fresh process: Hypothesis picks its folder once per process."""
    folder = tmp_path / "user"
    folder.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "HYPOTHESIS_PROFILE": "dev"}
    script = (
        "from hypothesis.configuration import storage_directory\n"
        "from radixkv_conformance.cli import main\n"
        f"code = main(['check', {TARGET!r}, '--budget', '1'])\n"
        "print(storage_directory().path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.splitlines()[-1])
    assert where == tmp_path / "cache" / "radixkv" / "hypothesis"
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--uncovered-ok", "no-such-situation"], "unknown situation"),
        (["--budget", "0"], "expected seconds above zero, got 0"),
        (["--budget", "-3"], "expected seconds above zero, got -3"),
        (["--budget", "soon"], "expected seconds, got 'soon'"),
        (["--max-failures", "0"], "above 0"),
    ],
)
def test_bad_options_are_usage_errors(
    option: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", TARGET, *option])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


CI_LIKE = fixed_search(300, 50)


@pytest.mark.parametrize("bug", ["cascade_locked", "stale_recency"])
def test_each_bug_of_the_page_trie_is_found_within_the_budget(bug: str) -> None:
    """The cascade to a locked parent passed the first draw before situations steered the
    search past it (issue 28): the budget's further seeds find it."""
    factory = lambda p, host: page_trie.factory(p, host, bugs=bug)  # noqa: E731
    report = run_conformance(
        factory, settings=CI_LIKE, name=f"page_trie_{bug}", budget=90, max_failures=1
    )
    assert report.failures, report.render()
