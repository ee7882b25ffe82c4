"""Cross coverage and steering (issue 39, deliverable 3): every step's outcome class, the
pairs of consecutive outcomes, the decisive situations (``radixkv_spec.cross``), and, after
the first search, runs that reach rare ones score higher (``Probe.rarity``,
``Probe.pair_rarity``, ``ConformanceMachine.teardown``)."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from radixkv_conformance.adapters import planted
from radixkv_conformance.conformance import run_conformance
from radixkv_conformance.coverage import Coverage, Probe
from radixkv_conformance.profile import RADIXKV
from radixkv_spec.cross import DECISIVE
from radixkv_spec.model import PrefixCacheModel

from tests.helpers import fixed_search


class Run:
    """A probe watching a plain spec model through steps, as the kit's machine drives it."""

    def __init__(self, counts: Counter[str] | None = None) -> None:
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.model = PrefixCacheModel(1)
        self.probe = Probe(1, (), self.counts, DECISIVE)
        self.indices = iter(range(100, 200))

    def step(self, op: str, *tokens: int, **fields: Any) -> None:
        step: dict[str, Any] = {"id": 0, "op": op, "namespace": None, "tokens": list(tokens)}
        step.update(fields)
        self.probe.close(self.model)
        self.probe.open(step, self.model)
        if op == "insert":
            self.model.insert(None, tokens, tuple(next(self.indices) for _ in tokens))
        elif op == "match":
            step["expect"] = {"indices": list(self.model.match(None, tokens).indices)}
        elif op == "evict":
            self.model.evict(fields["num_tokens"])
        self.probe.close(self.model)

    def pairs(self) -> set[str]:
        return {name for name in self.counts if name.startswith("pair:")}


def test_each_pair_names_how_both_steps_ended() -> None:
    run = Run()
    run.step("insert", 1, 2)
    run.step("match", 1, 2)
    run.step("match", 1, 3)
    run.step("match", 5)
    run.step("insert", 1, 2)
    run.step("evict", num_tokens=0)
    run.step("evict", num_tokens=1)
    run.step("evict", num_tokens=9)
    assert run.pairs() == {
        "pair:start > insert:new",
        "pair:insert:new > match:all",
        "pair:match:all > match:part",
        "pair:match:part > match:none",
        "pair:match:none > insert:cached",
        "pair:insert:cached > evict:none",
        "pair:evict:none > evict:some",
        "pair:evict:some > evict:all",
    }


def test_a_bad_call_is_an_outcome_of_its_own() -> None:
    run = Run()
    run.step("insert", 1)
    run.step("insert", bad="bad_token")
    run.step("match", 1)
    assert {"pair:insert:new > insert:bad", "pair:insert:bad > match:all"} <= run.pairs()


def test_an_eviction_whose_victim_a_refresh_changed_is_decisive() -> None:
    """The order kept between evictions, not refiled by a match (issue 39): insert [1],
    insert [2], evict(0), match [1], evict(1) must take [2]; without the match it is the
    same victim either way, and nothing is decisive."""
    refreshed, plain = Run(), Run()
    for run, refresh in ((refreshed, True), (plain, False)):
        run.step("insert", 1)
        run.step("insert", 2)
        run.step("evict", num_tokens=0)
        if refresh:
            run.step("match", 1)
        run.step("evict", num_tokens=1)
    assert refreshed.counts["decisive:evict-after-refresh"] == 1
    assert plain.counts["decisive:evict-after-refresh"] == 0


def test_an_eviction_whose_victim_a_lock_changed_is_decisive() -> None:
    run = Run()
    run.step("insert", 1)
    run.step("insert", 2)
    run.step("evict", num_tokens=0)
    run.model.lock(None, (1,))
    run.step("lock", 1)
    run.step("evict", num_tokens=1)
    assert run.counts["decisive:evict-after-lock"] == 1


def test_matches_a_split_cut_and_the_last_insert_reached_are_decisive() -> None:
    run = Run()
    run.step("insert", 1, 2, 3)
    run.step("match", 1, 2)  # ends inside a run of pages: a tree splits there
    run.step("match", 1, 2, 9)  # goes on past the split, where another page is cached
    assert run.counts["decisive:match-cut-by-split"] == 1
    assert run.counts["decisive:match-of-last-insert"] == 2


def test_a_run_scores_its_pairs_by_how_rarely_the_session_ran_them() -> None:
    counts: Counter[str] = Counter()
    common = Run(counts)
    for _ in range(2):
        common.step("insert", 1)
        common.step("match", 1)
    rare = Run(counts)
    rare.step("insert", 1)
    rare.step("evict", num_tokens=1)
    rare.step("insert", 1)
    assert rare.probe.pair_rarity() > Run(counts).probe.pair_rarity() == 0
    again = Run(counts)
    again.step("insert", 1)
    again.step("match", 1)
    assert rare.probe.pair_rarity() > again.probe.pair_rarity()


def test_a_forked_run_counts_into_the_same_tally() -> None:
    run = Run()
    run.step("insert", 1)
    fork = copy.deepcopy(run.probe)
    fork.open({"id": 1, "op": "reset"}, run.model)
    fork.close(run.model)
    assert fork.counts is run.counts and run.counts["pair:insert:new > reset:free"] == 1
    assert "pair:insert:new > reset:free" in fork.seen_pairs
    assert "pair:insert:new > reset:free" not in run.probe.seen_pairs


def test_the_report_prints_decisive_situations_and_pairs_beside_the_catalogue() -> None:
    run = Run()
    run.step("insert", 1)
    run.step("match", 1)
    coverage = Coverage(counts=run.counts, decisive=DECISIVE)
    text = "\n".join(coverage.lines())
    assert "decisive:match-of-last-insert" in text and "never reached" in text
    assert "outcome pairs: 1 of the 4 the 2 outcomes seen can form" in text
    assert "never one after the other: insert:new > insert:new" in text
    assert coverage.complete  # cross coverage steers; it never makes a pass incomplete


def test_a_near_miss_steers_only_while_its_situation_was_never_reached() -> None:
    """An eviction with two candidates, one refreshed since the last eviction, that did not
    change which goes first: near ``evict-after-refresh``; it scores until that is reached."""
    run = Run()
    run.step("insert", 1)
    run.step("insert", 2)
    run.step("evict", num_tokens=0)
    run.step("match", 2)  # refreshes the leaf that went last anyway
    run.step("evict", num_tokens=1)
    near = "near:decisive:evict-after-refresh"
    assert run.counts[near] == 1 and run.counts["decisive:evict-after-refresh"] == 0
    scored = run.probe.rarity()
    run.counts["decisive:evict-after-refresh"] += 1  # another run of the session got there
    assert run.probe.rarity() < scored


def test_a_check_reports_cross_coverage_and_passes_a_clean_cache() -> None:
    """A fixed draw, not a time budget: a busy machine got too few searches in 10 s to reach
    the near miss (the draw's 312 runs reach it 20 times)."""
    report = run_conformance(
        planted.factory, profile=RADIXKV, settings=fixed_search(300, 50), name="clean"
    )
    assert report.passed
    counts = report.coverage.counts
    assert counts["decisive:match-of-last-insert"] > 0
    assert counts["decisive:evict-after-refresh"] + counts["near:decisive:evict-after-refresh"]
    text = report.render()
    assert "decisive:evict-after-lock" in text and "outcome pairs:" in text
