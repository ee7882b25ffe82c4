"""Trace minimization (radixkv_conformance.minimize): every step a finding does not need goes."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis.errors import UnsatisfiedAssumption
from radixkv_conformance.adapters import broken
from radixkv_conformance.adapters.radixkv import radix_cache
from radixkv_conformance.machines import end_run
from radixkv_conformance.minimize import minimize, without
from radixkv_conformance.replay import replay

UNMATCHED_UNLOCK, EVICT_MISCOUNT = "INV-14:unmatched-unlock", "INV-11:evict-reported-counts"


def _trace(steps: list[dict[str, Any]], **header: Any) -> dict[str, Any]:
    return {
        "format": "radixkv-trace/1",
        "implementation": "broken.two_bugs",
        "semantics": "radixkv",
        "mode": "plain",
        "page_size": 1,
        "failure": {"check": "", "message": "", "step": len(steps) - 1, **header},
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }


def _insert(*tokens: int, at: int) -> dict[str, Any]:
    indices = list(range(at, at + len(tokens)))
    return {"op": "insert", "tokens": list(tokens), "namespace": None, "indices": indices}


def _match(*tokens: int) -> dict[str, Any]:
    return {"op": "match", "tokens": list(tokens), "namespace": None}


PADDED_UNLOCK = [
    _insert(1, 2, at=0),
    _match(1),
    _insert(3, at=2),
    {"op": "lock", "node": 2},
    _match(1, 2),
    {"op": "unlock", "node": 2, "lock": 3},
    _insert(1, 4, at=3),
    {"op": "unlock", "node": 0, "lock": None},  # the bug: nobody locked [1, 2]
    _match(3),
]


def test_without_takes_the_steps_that_use_a_removed_handle() -> None:
    steps = _trace(PADDED_UNLOCK)["steps"]
    kept = [s["id"] for s in without(steps, {2})]  # the insert of [3]: its lock and unlock go
    assert kept == [0, 1, 4, 6, 7, 8]
    kept = [s["id"] for s in without(steps, {0})]  # the insert whose node the bad unlock used
    assert kept == [1, 2, 3, 4, 5, 6, 8]


def test_a_padded_trace_is_cut_to_the_steps_its_finding_needs() -> None:
    padded = _trace(PADDED_UNLOCK, finding=UNMATCHED_UNLOCK)
    assert replay(padded, broken.two_bugs).finding == UNMATCHED_UNLOCK
    small = minimize(padded, broken.two_bugs)
    assert [s["op"] for s in small["steps"]] == ["insert", "unlock"], small["steps"]
    assert [s["id"] for s in small["steps"]] == [0, 1]  # renumbered
    assert small["steps"][1]["node"] == 0  # and the handle follows its step
    assert small["failure"]["finding"] == UNMATCHED_UNLOCK
    assert small["failure"]["step"] == 1
    assert small["implementation"] == padded["implementation"]  # the header is kept
    result = replay(small, broken.two_bugs)
    assert not result.passed and result.finding == UNMATCHED_UNLOCK
    assert replay(small, radix_cache).passed


def test_known_ids_are_cut_to_those_the_short_run_still_hits() -> None:
    """The bad unlock is acknowledged, and the miscounted evict does not need it."""
    steps = [*PADDED_UNLOCK[:8], {"op": "evict", "num_tokens": 1}]
    trace = _trace(steps, finding=EVICT_MISCOUNT)
    trace["known"] = [UNMATCHED_UNLOCK]
    result = replay(trace, broken.two_bugs)
    assert result.finding == EVICT_MISCOUNT and UNMATCHED_UNLOCK in result.acknowledged
    small = minimize(trace, broken.two_bugs)
    assert [s["op"] for s in small["steps"]] == ["insert", "evict"], small["steps"]
    assert small.get("known", []) == []
    assert replay(small, broken.two_bugs, known=()).finding == EVICT_MISCOUNT


def test_a_trace_that_does_not_fail_that_way_is_returned_as_it_is() -> None:
    passing = _trace(PADDED_UNLOCK[:7], finding=UNMATCHED_UNLOCK)
    assert minimize(passing, broken.two_bugs) is passing
    other = _trace(PADDED_UNLOCK, finding=EVICT_MISCOUNT)  # fails, but with another id
    assert minimize(other, broken.two_bugs) is other


def test_an_old_trace_without_a_finding_id_shrinks_to_what_it_fails_with() -> None:
    old = _trace(PADDED_UNLOCK)  # no "finding" in its failure: traces before finding ids
    small = minimize(old, broken.two_bugs)
    assert small["failure"]["finding"] == UNMATCHED_UNLOCK and len(small["steps"]) == 2


def test_the_ledger_counts_only_what_a_trace_hands_out() -> None:
    """Cutting an insert out of a trace leaves a gap in the indices handed out: the ledger
    tracks what was handed out, so the gap is never a leak, and a minimized trace fails for
    its own reason (a cache that forgets frees), never for the gap."""
    gap = _trace([_insert(5, 6, at=4), {"op": "evict", "num_tokens": 2}])
    assert replay(gap, radix_cache).passed  # indices 0..3 were never handed out
    forgets = replay(gap, broken.factory)
    assert forgets.finding == "INV-11:evict-short", forgets  # not a leak of 0..3


def test_minimizing_a_leak_keeps_the_leak_of_what_was_handed_out() -> None:
    steps = [_insert(1, at=0), _insert(2, at=1), _match(1), {"op": "reset"}]
    shortest = minimize(_trace(steps, finding="INV-7:reset"), broken.factory)
    assert [step["op"] for step in shortest["steps"]] == ["insert", "reset"]
    assert replay(shortest, broken.factory).finding == "INV-7:reset"
    assert replay(shortest, radix_cache).passed  # the minimized trace is no false leak


def test_a_run_ended_outside_a_search_calls_no_hypothesis_api() -> None:
    """A replay or a minimization runs outside any Hypothesis test: a known finding that
    ends its run raises the exception ``reject()`` would, without calling ``reject()`` there
    (a deprecation warning today, an error later)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnsatisfiedAssumption):
            end_run()
