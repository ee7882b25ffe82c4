"""The default command explores trees breadth first within a time budget (issue 28).

A page trie whose eviction cascades to a locked parent needs four steps on keys of two
pages: ``--states ci`` once gave a foreign adapter one-page keys (no tree) and ran without a
bound. Now its bounds admit trees, a budget ends it inside a level (the report says how deep
it got), each finding is handed over the moment it is found (shortest first), and the
default ``radixkv check`` runs the same exploration before its random search.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import page_trie
from radixkv_conformance.cli import FAILED, main
from radixkv_conformance.explore.alphabet import Fixed
from radixkv_conformance.explore.bounds import PRESETS, TREE, parse_bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.findings import Failure
from radixkv_conformance.profile import RADIXKV

from tests.helpers import fixed_search

pytestmark = pytest.mark.search

TARGET = "radixkv_conformance.adapters.page_trie:factory"
CASCADE = functools.partial(page_trie.factory, bugs="cascade_locked")
LOCKED_VICTIM = "INV-11:evict-locked-victim"


def _machine(factory: object) -> type:
    return target("PageTrie", factory, RADIXKV).machine()


def test_the_bounds_a_foreign_cache_gets_admit_trees() -> None:
    ci = PRESETS["ci"]
    assert ci == TREE
    assert ci.length >= 2 and ci.namespaces == 2 and ci.locks >= 1  # a parent, a lock on it
    assert ci.depth is None  # a time budget ends it, not a depth cap that hides depth 5
    assert parse_bounds(ci.text()) == ci and "skip=bad_call+refresh_often" in ci.text()


def test_rules_left_out_are_never_run() -> None:
    """The tree exploration leaves out bad calls and refresh bursts (the random search runs
    them): fewer transitions to the same depth."""
    bounds = dataclasses.replace(TREE, namespaces=1, depth=2)
    kept = explore_states(_machine(page_trie.factory), dataclasses.replace(bounds, skip=()))
    left = explore_states(_machine(page_trie.factory), bounds)
    assert left.transitions < kept.transitions
    assert 0 < left.states <= kept.states


def test_a_budget_ends_the_exploration_and_says_how_deep_it_got() -> None:
    no_floor = dataclasses.replace(TREE, floor=0)
    report = explore_states(_machine(page_trie.factory), no_floor, budget=1.5)
    assert report.budget_spent and not report.fixpoint
    assert report.seconds < 15  # one transition past the deadline at most, not a level
    assert report.by_depth[report.complete] > 0  # the last complete level has states
    assert f"every state within {report.complete} steps expanded" in report.render()


def test_the_floor_is_explored_whole_whatever_the_budget() -> None:
    """What the first levels reach does not depend on the machine's speed: a budget spent
    long before they end still lets them end (a loaded CI machine once missed a situation
    within four steps that a quiet one reached)."""
    one_namespace = dataclasses.replace(TREE, namespaces=1, floor=3)
    report = explore_states(_machine(page_trie.factory), one_namespace, budget=0.001)
    assert report.budget_spent and report.complete == 3
    whole = explore_states(_machine(page_trie.factory), dataclasses.replace(one_namespace, depth=3))
    assert report.by_depth[3] == whole.by_depth[3] > 0  # every state of level 3 was reached
    assert parse_bounds("floor=3,namespaces=1", TREE) == one_namespace


def test_a_floor_is_a_step_count_zero_or_more() -> None:
    assert parse_bounds("floor=0", TREE).floor == 0
    for bad in ("floor=-1", "floor=x"):
        with pytest.raises(LookupError, match="expected a step count, 0 or more"):
            parse_bounds(bad)


def test_the_later_stages_have_lower_floors() -> None:
    narrow, leaves, deep, wide = TREE.stages()
    assert (narrow.namespaces, narrow.floor, narrow.length, narrow.windows) == (1, 5, 2, (1,))
    # two leaves in one namespace, to the same floor: an eviction chooses between them, by
    # recency or by priority (a re-insert that lowers a page's priority takes four steps)
    assert (leaves.namespaces, leaves.floor, leaves.tokens, leaves.length) == (1, 5, 2, 1)
    assert leaves.priorities == (0, 1) and narrow.priorities == deep.priorities == (0,)
    # a lock's window across a tombstone under a live page takes keys of three pages, a
    # window of two and three steps
    assert (deep.namespaces, deep.floor, deep.length, deep.windows) == (1, 3, 3, (2,))
    # a split upper half that must keep its first-in-first-out place takes four steps in two
    # namespaces (a key of two pages, one in the other namespace, the split, an eviction)
    assert (wide.namespaces, wide.floor, wide.length, wide.windows) == (2, 4, 2, (1,))
    assert not any(stage.deeper or stage.leaves for stage in (narrow, leaves, deep, wide))


def test_priorities_are_bounds_like_the_others() -> None:
    bounds = parse_bounds("priorities=0+5", TREE)
    assert bounds.priorities == (0, 5) and "priorities=0+5" in bounds.text()
    assert bounds.low() == 6  # a priority keeps its value in a canonical state
    assert "priorities" not in TREE.text()  # the default, (0,), is not spelled out
    assert bounds.alphabet().domains["priority"] == Fixed((0, 5))
    for bad in ("priorities=-1", "priorities=x", "priorities="):
        with pytest.raises(LookupError, match="expected whole numbers joined by"):
            parse_bounds(bad)


def test_each_finding_is_handed_over_when_found_and_shortest() -> None:
    found: list[Failure] = []
    one_namespace = dataclasses.replace(TREE, namespaces=1, depth=5)
    report = explore_states(_machine(CASCADE), one_namespace, on_finding=found.append)
    [finding] = found
    assert finding.finding == LOCKED_VICTIM
    assert [step.rule for step in finding.calls] == [
        "extend_request",
        "extend_request",
        "lock",
        "evict",
    ]  # the four calls: a parent, its child, a lock on the parent, evict all
    assert report.by_depth[5] > 0  # found at depth 4, and the exploration went on past it


def test_the_default_check_explores_first_and_reports_the_shortest_sequence() -> None:
    quick = fixed_search(5, 5)
    bounds = dataclasses.replace(TREE, namespaces=1, deeper=0, leaves=0, depth=4)  # fixed work
    report = run_conformance(
        CASCADE, settings=quick, name="cascade", budget=40, explore=bounds, max_failures=1
    )
    assert [stage.bounds for stage in report.explored] == [bounds.text()]
    assert all(stage.transitions > 0 for stage in report.explored)
    [failure] = report.failures
    assert failure.finding == LOCKED_VICTIM
    ops = [step["op"] for step in failure.trace["steps"]]
    assert ops.count("insert") == 2 and ops[-2:] == ["lock", "evict"], ops
    assert "explored breadth first:" in report.render()


def test_the_exploration_counts_the_situations_it_reaches() -> None:
    """A search of one short run reaches few situations; the exploration before it, the
    tree's: a childless parent after an eviction needs a parent, a child and an eviction."""
    tiny = settings(max_examples=1, stateful_step_count=1, deadline=None, database=None)
    alone = run_conformance(page_trie.factory, settings=tiny, name="alone")
    three_steps = dataclasses.replace(TREE, namespaces=1, depth=3)
    explored = run_conformance(
        page_trie.factory, settings=tiny, name="explored", budget=20, explore=three_steps
    )
    assert alone.coverage.counts["evict-empties-a-parent"] == 0
    assert explored.coverage.counts["evict-empties-a-parent"] > 0
    assert len(explored.coverage.missing) < len(alone.coverage.missing)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("length=0", "expected a positive number"),
        ("depth=-1", "expected none or a positive step count"),
        ("evict=1+x", "positive numbers joined by +"),
        ("colour=3", "KEY one of deeper, depth, evict"),
    ],
)
def test_malformed_bounds_name_what_is_accepted(text: str, said: str) -> None:
    with pytest.raises(LookupError, match=said):
        parse_bounds(text)


@pytest.mark.parametrize("option", ["--explore", "--states"])
def test_malformed_bounds_are_usage_errors(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", TARGET, option, "length=0"])
    assert exited.value.code == 2
    assert "expected a positive number" in capsys.readouterr().err


def test_states_ci_on_a_foreign_cache_finds_the_cascade_within_its_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["check", TARGET, "--option", "bugs=cascade_locked", "--states", "ci"]
    assert main([*args, "--budget", "30", "--traces", str(tmp_path)]) == FAILED
    out = capsys.readouterr().out
    said = out.index(f"finding 1 [{LOCKED_VICTIM}]")
    assert said < out.index("time budget spent")  # said when found, before the summary
    assert "(4 steps, shortest)" in out
    assert list(tmp_path.glob("states-*-1.json"))
