"""Trace minimization (radixkv_conformance.minimize): every step a finding does not need goes."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis.errors import UnsatisfiedAssumption
from radixkv_conformance.adapters import broken
from radixkv_conformance.adapters.radixkv import radix_cache
from radixkv_conformance.minimize import minimize, without
from radixkv_conformance.replay import replay
from radixkv_conformance.session import end_run

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


def test_a_finding_says_which_acknowledged_findings_its_run_came_past() -> None:
    """Two planted bugs of the page trie: a match that does not refresh recency (acknowledged)
    and a cascade to a locked parent. The second finding's trace and report say where the
    run went past the first: a later finding is often a consequence of an earlier one."""
    from functools import partial

    from radixkv_conformance import Failure
    from radixkv_conformance.adapters import page_trie

    order, locked = "INV-11:evict-victim-order", "INV-11:evict-locked-victim"
    steps = [
        _insert(0, at=1),
        _insert(1, at=2),
        _match(0),  # the planted bug: [0] stays the oldest
        {"op": "evict", "num_tokens": 1},  # takes [0]: the victim order, acknowledged
        _insert(2, at=3),
        _insert(2, 2, at=4),
        {"op": "lock", "node": 4},
        {"op": "evict", "num_tokens": 1 << 20},  # the cascade takes the locked [2]
    ]
    factory = partial(page_trie.factory, bugs="stale_recency,cascade_locked")
    result = replay(_trace(steps), factory, known=[order])
    assert result.finding == locked and result.trace is not None
    assert result.trace["came_past"] == [{"step": 3, "finding": order}]
    failure = Failure(locked, "evict", "", result.trace)
    assert failure.came_past() == f"came past acknowledged {order} at step 3"
    alone = [*steps[4:6], {"op": "lock", "node": 0}, steps[7]]  # the cascade alone
    plain = replay(_trace(alone), factory, known=[order])
    assert plain.trace is not None and "came_past" not in plain.trace


@pytest.mark.parametrize(
    ("tokens", "finding"),
    [([], "INV-31:insert-empty-key"), ([5], "INV-31:insert-mamba-exist")],
)
def test_a_wrong_mamba_exist_and_the_empty_key_convention_are_two_findings(
    tokens: list[int], finding: str
) -> None:
    """An engine whose ``mamba_exist`` differs for an empty key (the root) follows a
    harmless convention of its own; one whose answer for a real key differs is wrong: two
    ids, so acknowledging the first never hides the second."""
    from radixkv_conformance.adapters.radixkv import MambaAdapter
    from radixkv_conformance.protocol import Host, Inserted, as_inserted

    class SaysTheOpposite(MambaAdapter):
        def insert(self, *args: Any, **kw: Any) -> Inserted:
            got = as_inserted(super().insert(*args, **kw))
            return got._replace(mamba_exist=not got.mamba_exist)

    def factory(page_size: int, host: Host) -> MambaAdapter:
        return SaysTheOpposite(page_size, host)

    step = {"op": "insert", "tokens": tokens, "namespace": None, "indices": [7] * len(tokens)}
    trace = {**_trace([{**step, "state_slot": 3}]), "mode": "mamba", "semantics": "radixkv-mamba"}
    result = replay(trace, factory)
    assert result.finding == finding
    other = {"INV-31:insert-empty-key", "INV-31:insert-mamba-exist"} - {finding}
    assert replay(trace, factory, known=sorted(other)).finding == finding


class _ResumeMiscounts:
    """radixkv's SWA cache, but an insert that resumes a request (``prev_prefix_len``)
    reports one page too many as cached: a bug only a resumed request shows."""

    @staticmethod
    def factory(page_size: int, host: Any) -> Any:
        from radixkv_conformance.adapters.radixkv import SlidingWindowAdapter
        from radixkv_conformance.protocol import as_inserted

        class Miscounts(SlidingWindowAdapter):
            def insert(self, *args: Any, **kw: Any) -> Any:
                got = as_inserted(super().insert(*args, **kw))
                if kw.get("prev_prefix_len") and got.prefix_len is not None:
                    return got._replace(prefix_len=got.prefix_len + page_size)
                return got

        return Miscounts(page_size, host)


def _swa(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {**_trace(steps), "mode": "swa", "semantics": "radixkv-swa", "sliding_window": 2}


RESUMED = [
    {**_insert(1, 2, at=1), "prev_prefix_len": 0, "swa_evicted_seqlen": 0},
    _match(1, 2, 3),
    {**_insert(1, 2, 3, at=1), "prev_prefix_len": 2, "swa_evicted_seqlen": 2},
]


def test_a_resumed_insert_without_the_match_it_resumes_from_is_an_illegal_step() -> None:
    from radixkv_conformance.session import IllegalStep

    factory = _ResumeMiscounts.factory
    assert replay(_swa(RESUMED), factory).finding.startswith("INV-12")
    for cut in ([RESUMED[0], RESUMED[2]], [RESUMED[2]]):  # no match, or a match of nothing
        with pytest.raises(IllegalStep, match="prev_prefix_len 2 after"):
            replay(_swa(cut), factory)


def test_the_minimizer_keeps_what_makes_a_step_legal() -> None:
    """A one-step trace that resumes a request out of nowhere fails any cache: the
    minimizer must not cut the insert and the match a resumed insert needs."""
    factory = _ResumeMiscounts.factory
    padded = [RESUMED[0], _match(7), {"op": "evict", "num_tokens": 0}, *RESUMED[1:]]
    document = replay(_swa(padded), factory).trace
    assert document is not None
    small = minimize(document, factory)
    assert [(s["op"], s["tokens"]) for s in small["steps"]] == [
        ("insert", [1, 2]),
        ("match", [1, 2, 3]),
        ("insert", [1, 2, 3]),
    ]


def test_a_resumed_request_resumes_from_the_engines_match_not_the_specs() -> None:
    """An acknowledged short match: the request holds what the engine gave it, so its
    prev_prefix_len is the engine's length (the spec's would name pages it never got)."""
    from radixkv_conformance.adapters.radixkv import SlidingWindowAdapter
    from radixkv_conformance.findings import Finding
    from radixkv_conformance.profile import RADIXKV_SWA
    from radixkv_conformance.protocol import Matched, as_matched
    from radixkv_conformance.registry import machine_for

    class ShortMatch(SlidingWindowAdapter):
        def match(self, *args: Any) -> Matched:
            got = as_matched(super().match(*args))
            return got._replace(indices=tuple(got.indices)[:-1])

    def run(known: frozenset[str]) -> Any:
        machine = machine_for("Short", ShortMatch, RADIXKV_SWA, known=known)()
        machine.setup(1, 2)
        machine.do_insert((1, 2), None, (5, 6), prev_prefix_len=0, swa_evicted_seqlen=0)
        machine.do_match((1, 2), None)
        return machine

    with pytest.raises(Finding) as found:
        run(frozenset())
    machine = run(frozenset({found.value.finding_id}))
    assert machine.trace[-1]["expect"]["indices"] == [5, 6]  # the spec's
    assert machine.resumed_from() == (5,)  # the engine's
