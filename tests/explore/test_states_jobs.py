"""``explore_states(..., jobs=N)``: worker processes expand each level, and the exploration
is the one a single process makes: the same states and transitions, the same finding ids
with the same shortest traces, the same situation counts (``explore/workers.py``)."""

from __future__ import annotations

import functools
import re
import sys
import types
from collections import Counter
from typing import Any

import pytest
from radixkv_conformance.adapters import planted, radixkv
from radixkv_conformance.explore import sequences
from radixkv_conformance.explore.bounds import Bounds, parse_bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import StatesReport, explore_states
from radixkv_conformance.explore.workers import can_fork, tallies, why_not_fork
from radixkv_conformance.profile import RADIXKV

pytestmark = [
    pytest.mark.search,
    pytest.mark.skipif(not can_fork(), reason="worker processes are forked"),
]

BOUNDS = parse_bounds("tokens=1,length=2,locks=1,depth=4")
FIVE_STEPS = parse_bounds("tokens=1,length=1,locks=1")  # a fixpoint; the bug takes five


def _explored(
    factory: Any, profile: Any, jobs: int, bounds: Bounds = BOUNDS
) -> tuple[StatesReport, Counter[str]]:
    machine = target("Jobs", factory, profile).machine()
    report = explore_states(machine, bounds, jobs=jobs)
    return report, Counter(tallies(machine)[0])


def _picture(report: StatesReport) -> tuple[Any, ...]:
    findings = {
        fid: (found.check, found.message, found.calls_text(), found.trace)
        for fid, found in report.findings.items()
    }
    return (
        report.states,
        report.transitions,
        report.beyond,
        dict(report.by_depth),
        report.outcomes,
        findings,
        report.acknowledged,
    )


@pytest.mark.parametrize("jobs", [2, 3])
def test_a_clean_cache_is_explored_the_same_by_every_number_of_workers(jobs: int) -> None:
    one, counted_one = _explored(radixkv.radix_cache, radixkv.PROFILE, 1)
    many, counted_many = _explored(radixkv.radix_cache, radixkv.PROFILE, jobs)
    assert one.passed and one.states > 100 and one.complete == 4, one.render()
    assert _picture(many) == _picture(one)
    assert counted_many == counted_one and sum(counted_one.values()) > 0


def test_findings_and_their_shortest_traces_do_not_depend_on_the_workers() -> None:
    bug = functools.partial(planted.factory, bugs="held_after_reset")
    one, _ = _explored(bug, RADIXKV, 1, FIVE_STEPS)
    many, _ = _explored(bug, RADIXKV, 2, FIVE_STEPS)
    assert list(one.findings) == ["INV-14:unmatched-unlock"], one.render()
    assert _picture(many) == _picture(one)


def test_jobs_below_one_are_refused() -> None:
    machine = target("Jobs", radixkv.radix_cache, radixkv.PROFILE).machine()
    with pytest.raises(ValueError, match="1 or more"):
        explore_states(machine, BOUNDS, jobs=0)


def test_every_short_sequence_is_run_the_same_with_a_process_per_cache() -> None:
    targets = [
        target("Jobs", radixkv.radix_cache, radixkv.PROFILE),
        target("JobsPlanted", functools.partial(planted.factory, bugs="held_after_reset"), RADIXKV),
    ]
    one = [report.render() for report in sequences._explored(targets, 2, 1)]
    many = [report.render() for report in sequences._explored(targets, 2, 2)]
    assert [_untimed(text) for text in many] == [_untimed(text) for text in one]
    assert one[0].startswith("Jobs: ok") and "sequences up to 2 steps" in one[0]


def _untimed(text: str) -> str:
    return re.sub(r"in [\d.]+s \(\d+/s", "in ?", text)


def test_a_process_holding_cuda_explores_alone_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forked child cannot use its parent's CUDA context: the engine's error would read
    as a finding, so the exploration stays in one process."""
    torch = pytest.importorskip("torch")
    holding = types.ModuleType("torch")
    holding.__dict__.update(vars(torch))
    holding.cuda = types.SimpleNamespace(is_initialized=lambda: True)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", holding)
    assert "CUDA is initialized" in (why_not_fork() or "")
    machine = target("Jobs", radixkv.radix_cache, radixkv.PROFILE).machine()
    report = explore_states(machine, parse_bounds("tokens=1,length=1,locks=1,depth=2"), jobs=2)
    assert any("CUDA is initialized" in note and "one process" in note for note in report.notes)
    assert report.fork == "copy" and report.passed, report.render()
