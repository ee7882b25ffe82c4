"""Every profile policy is read somewhere, and each changes a verdict (research: peers.md).

Each test flips one policy and shows the kit's verdict on a cache change with it: a policy
that is read nowhere, or that the machine emulates by corrupting its model, fails here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from radixkv_conformance import MAX_RADIX_TRIE, RADIXKV, RADIXKV_MAMBA, RADIXKV_SWA, Profile
from radixkv_conformance.adapters import chunk, max_trie
from radixkv_conformance.adapters.radixkv import mamba, radix_cache, sliding_window
from radixkv_conformance.conformance import ConformanceReport, run_conformance
from radixkv_conformance.profile import policy_lines
from radixkv_conformance.protocol import AdapterError, Host
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay
from radixkv_spec.invariants import SpecUsageError, SpecViolation
from radixkv_spec.mamba import MambaCacheModel
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.outcomes import node_frees
from radixkv_spec.policies import (
    ANY_LEAF,
    FULL_KV,
    LRU_INSERT_REFRESHES_NODE,
    LRU_LEAVES,
    LRU_SPLIT_REFRESHES_BOTH,
    REFRESHES,
    TAIL_PAGES,
    WHOLE_LEAVES,
)

from tests.helpers import fixed_search

FIND = fixed_search(150, 20, shrink=False)  # whether it fails, not its minimal trace
RUN = settings(FIND, max_examples=30)


def _check(factory: Callable[[int, Host], Any], profile: Profile, **kw: Any) -> ConformanceReport:
    return run_conformance(factory, profile=profile, max_failures=1, **kw)


def _findings(report: ConformanceReport) -> set[str]:
    return {f.finding for f in report.failures}


def _trace(*steps: dict[str, Any]) -> dict[str, Any]:
    """A hand-written trace (FORMAT.md) on one-token pages, steps numbered in order."""
    numbered = [{"id": i, **step} for i, step in enumerate(steps)]
    return {"format": "radixkv-trace/1", "semantics": "radixkv", "page_size": 1, "steps": numbered}


# ---- victim order (spec models) ----------------------------------------------------------


def _split_then_evict(victims: Any) -> PrefixCacheModel:
    """(1,2,3) at tick 1, (5,) at tick 2, then a match of (1,) that splits (1,2,3)."""
    model = PrefixCacheModel(1, victims)
    model.insert(None, (1, 2, 3), (10, 11, 12))
    model.insert(None, (5,), (20,))
    model.match(None, (1,))
    return model


def test_lru_takes_the_older_leaf_only() -> None:
    model = _split_then_evict(LRU_LEAVES)
    with pytest.raises(SpecViolation, match="INV-11"):
        model.apply_eviction(1, node_frees([(20,)]))  # (5,) is newer than (1,2,3)'s lower half
    model.apply_eviction(1, node_frees([(11, 12)]))


def test_a_split_that_refreshes_both_halves_admits_the_other_leaf() -> None:
    """sglang stamps both halves of the split: (2,3) may be as recent as the match."""
    _split_then_evict(LRU_SPLIT_REFRESHES_BOTH).apply_eviction(1, node_frees([(20,)]))
    _split_then_evict(LRU_SPLIT_REFRESHES_BOTH).apply_eviction(1, node_frees([(11, 12)]))


def test_split_refresh_still_rejects_a_leaf_no_split_could_refresh() -> None:
    model = PrefixCacheModel(1, LRU_SPLIT_REFRESHES_BOTH)
    model.insert(None, (1,), (10,))
    model.insert(None, (5,), (20,))
    model.match(None, (5,))  # nothing below (5,): no split can refresh (1,)
    with pytest.raises(SpecViolation, match="INV-11"):
        model.apply_eviction(1, node_frees([(20,)]))


def _cached_key_then_evict(victims: Any, *, insert: bool) -> PrefixCacheModel:
    """(1,2) at tick 1, (5,) at tick 2, then (1,) again: inserted (a key cached whole, ending
    inside the node (1,2)) or matched (a match there splits the node in every engine)."""
    model = PrefixCacheModel(1, victims)
    model.insert(None, (1, 2), (10, 11))
    model.insert(None, (5,), (20,))
    if insert:
        model.insert(None, (1,), (30,))
    else:
        model.match(None, (1,))
    return model


def test_an_insert_that_stamps_its_whole_node_admits_the_other_leaf() -> None:
    """LightLLM stamps the whole node an insert ends inside: (2,) may be as recent as the
    insert of (1,), so (5,) may go first; under LRU it may not."""
    with pytest.raises(SpecViolation, match="INV-11"):
        _cached_key_then_evict(LRU_LEAVES, insert=True).apply_eviction(1, node_frees([(20,)]))
    stamped = _cached_key_then_evict(LRU_INSERT_REFRESHES_NODE, insert=True)
    stamped.apply_eviction(1, node_frees([(20,)]))
    _cached_key_then_evict(LRU_INSERT_REFRESHES_NODE, insert=True).apply_eviction(
        1, node_frees([(11,)])
    )


def test_an_insert_that_stamps_its_node_leaves_a_match_alone() -> None:
    """A match that ends inside a node splits it (LightLLM too): the lower half keeps its
    tick, so (5,) may not go first, as it may where a split refreshes both halves."""
    matched = _cached_key_then_evict(LRU_INSERT_REFRESHES_NODE, insert=False)
    with pytest.raises(SpecViolation, match="INV-11"):
        matched.apply_eviction(1, node_frees([(20,)]))
    both = _cached_key_then_evict(LRU_SPLIT_REFRESHES_BOTH, insert=False)
    both.apply_eviction(1, node_frees([(20,)]))


def test_any_leaf_admits_any_unlocked_leaf_and_keeps_recency() -> None:
    model = _split_then_evict(ANY_LEAF)
    recency = dict(model.recency)
    model.apply_eviction(1, node_frees([(20,)]))
    assert all(model.recency[pos] == tick for pos, tick in recency.items() if pos in model.recency)
    model.lock(None, (1, 2, 3))
    with pytest.raises(SpecViolation, match="locked"):
        model.apply_eviction(1, node_frees([(11, 12)]))  # any *unlocked* leaf, still


def test_the_kit_reads_the_victim_order_for_any_engine() -> None:
    """radixkv's cache is LRU, so it passes under the laxer orders too."""
    for victims in (LRU_SPLIT_REFRESHES_BOTH, ANY_LEAF):
        _check(radix_cache, RADIXKV.but(victims=victims), settings=RUN).raise_for_failures()


# ---- eviction granularity -----------------------------------------------------------------


def test_tail_pages_never_frees_a_page_more_than_asked() -> None:
    assert TAIL_PAGES.admissible(4, 3, 2) and not TAIL_PAGES.admissible(6, 3, 2)
    assert WHOLE_LEAVES.admissible(6, 3, 2)


def test_whole_leaf_eviction_fails_the_tail_policy() -> None:
    three_then_one = _trace(
        {"op": "insert", "tokens": [1, 2, 3], "namespace": None, "indices": [0, 1, 2]},
        {"op": "evict", "num_tokens": 1},
    )
    assert replay(three_then_one, radix_cache, RADIXKV).passed
    tail = replay(three_then_one, radix_cache, RADIXKV.but(eviction=TAIL_PAGES))
    assert tail.finding == "INV-11:evict-amount-freed", tail


# ---- who frees duplicates, reset, locks ----------------------------------------------------


def test_duplicates_freed_by_the_cache_is_a_different_contract() -> None:
    twice = _trace(
        {"op": "insert", "tokens": [1], "namespace": None, "indices": [0]},
        {"op": "insert", "tokens": [1], "namespace": None, "indices": [1]},
    )
    assert replay(twice, radix_cache, RADIXKV).passed
    by_cache = replay(twice, radix_cache, RADIXKV.but(duplicates="cache"))
    assert by_cache.finding == "INV-7:insert", by_cache


def test_duplicates_kept_accepts_a_cache_that_reports_no_prefix_len() -> None:
    _check(max_trie.factory, MAX_RADIX_TRIE, settings=RUN).raise_for_failures()
    report = _check(max_trie.factory, MAX_RADIX_TRIE.but(duplicates="caller"), settings=FIND)
    assert "INV-12:insert" in _findings(report), report.render()


def test_reset_that_frees_fails_a_profile_whose_reset_does_not() -> None:
    insert_reset = _trace(
        {"op": "insert", "tokens": [1], "namespace": None, "indices": [0]}, {"op": "reset"}
    )
    assert replay(insert_reset, radix_cache, RADIXKV).passed
    kept = replay(insert_reset, radix_cache, RADIXKV.but(reset_frees=False))
    assert kept.finding == "INV-7:reset", kept


LOCK_THEN_UNLOCK_BY_NOBODY = _trace(
    {"op": "insert", "tokens": [1], "namespace": None, "indices": [0]},
    {"op": "lock", "node": 0},
    {"op": "unlock", "node": 0, "lock": None},
)


def test_per_sequence_locks_reject_an_unlock_by_a_sequence_holding_nothing() -> None:
    """Under counts, the node is locked, so an unlock answers that lock; under sets, an
    unlock by a sequence that locked nothing is a usage error even there."""
    assert replay(LOCK_THEN_UNLOCK_BY_NOBODY, radix_cache, RADIXKV).passed
    counts_as_sets = replay(LOCK_THEN_UNLOCK_BY_NOBODY, radix_cache, RADIXKV.but(lock_model="sets"))
    assert counts_as_sets.finding == "INV-14:unmatched-unlock", counts_as_sets
    assert replay(LOCK_THEN_UNLOCK_BY_NOBODY, max_trie.factory, MAX_RADIX_TRIE).passed


UNLOCK_THEN_EVICT = _trace(
    {"op": "insert", "tokens": [1], "namespace": None, "indices": [0]},
    {"op": "insert", "tokens": [2], "namespace": None, "indices": [1]},
    {"op": "lock", "node": 0},
    {"op": "unlock", "node": 0, "lock": 2},
    {"op": "evict", "num_tokens": 1},
)


def test_a_refresh_on_unlock_is_read() -> None:
    """radixkv does not refresh on unlock: it evicts (1,) first, which a profile that
    refreshes on unlock (MAX) does not admit."""
    assert replay(UNLOCK_THEN_EVICT, radix_cache, RADIXKV).passed
    on_unlock = RADIXKV.but(refresh_on=frozenset({"insert", "match", "unlock"}))
    refreshed = replay(UNLOCK_THEN_EVICT, radix_cache, on_unlock)
    assert refreshed.finding == "INV-11:evict-victim-order", refreshed


def test_a_refresh_on_lock_is_read() -> None:
    """radixkv's lock refreshes nothing: it evicts (1,) first, which a profile whose lock is
    a lookup (LightLLM: ``match_prefix(update_refs=True)``) does not admit."""
    on_lock = RADIXKV.but(refresh_on=frozenset({"insert", "match", "lock"}))
    refreshed = replay(UNLOCK_THEN_EVICT, radix_cache, on_lock)
    assert refreshed.finding == "INV-11:evict-victim-order", refreshed


def test_only_the_plain_model_takes_a_lock_refresh_or_an_insert_that_stamps_its_node() -> None:
    """The SWA and Mamba models know neither: a profile asking for them is refused."""
    with pytest.raises(AdapterError, match="refreshes recency on every match and insert only"):
        machine_for("x", sliding_window, RADIXKV_SWA.but(refresh_on=REFRESHES))
    with pytest.raises(SpecUsageError, match="cannot judge lru-insert-refreshes-node"):
        MambaCacheModel(1, LRU_INSERT_REFRESHES_NODE)


MATCH_THEN_EVICT = _trace(
    {"op": "insert", "tokens": [1], "namespace": None, "indices": [0]},
    {"op": "insert", "tokens": [2], "namespace": None, "indices": [1]},
    {"op": "match", "tokens": [1], "namespace": None},
    {"op": "evict", "num_tokens": 1},
)


def test_a_profile_whose_lookups_leave_recency_alone() -> None:
    """vLLM and MAX refresh nothing on a lookup: after the match of (1,), (1,) is still the
    least recent and must go first, which radixkv (refreshing on match) does not do."""
    assert replay(MATCH_THEN_EVICT, radix_cache, RADIXKV).passed
    no_lookup_refresh = RADIXKV.but(refresh_on=frozenset({"insert", "unlock"}))
    result = replay(MATCH_THEN_EVICT, radix_cache, no_lookup_refresh)
    assert result.finding == "INV-11:evict-victim-order", result
    with pytest.raises(ValueError, match="refresh_on"):
        RADIXKV.but(refresh_on=frozenset({"match"}))


def test_a_cache_that_stores_nothing_passes_only_as_such() -> None:
    from radixkv_conformance import CHUNK_CACHE

    _check(chunk.factory, CHUNK_CACHE, settings=RUN).raise_for_failures()
    report = _check(chunk.factory, CHUNK_CACHE.but(stores=True), settings=FIND)
    assert not report.passed


def test_match_handles_that_may_end_below_the_match_are_never_locked() -> None:
    report = _check(radix_cache, RADIXKV.but(match_may_split=False), settings=RUN)
    report.raise_for_failures()
    assert report.stats["match without a handle"] > 0


# ---- Mamba match, SWA lock tokens and insert arguments ------------------------------------


def test_full_kv_mamba_match_returns_the_whole_kv_match() -> None:
    for matching, length in ((FULL_KV, 3), (RADIXKV_MAMBA.mamba_match, 1)):
        model = MambaCacheModel(1, matching=matching)
        model.insert(None, (1,), (10,), state_slot=0)
        model.insert(None, (1, 2, 3), (10, 11, 12), state_slot=1)
        model.states.pop((None, (1, 2, 3)))  # a state evicted: the KV stays (tombstone)
        model.insert(None, (1, 2, 3, 4), (10, 11, 12, 13), state_slot=2)
        assert model.match(None, (1, 2, 3)).prefix_len == length


def test_radixkv_mamba_fails_a_full_kv_profile() -> None:
    report = _check(mamba, RADIXKV_MAMBA.but(mamba_match=FULL_KV), settings=FIND)
    assert any(f.startswith("INV-34") for f in _findings(report)), report.render()


class _Draws:
    """Stands in for Hypothesis' data object: every draw gives ``value``."""

    def __init__(self, value: object) -> None:
        self.value = value

    def draw(self, strategy: object, label: str | None = None) -> object:
        return self.value


def test_swa_lock_tokens_policy_decides_whether_unlocks_may_omit_the_token() -> None:
    """Under "optional" a run may unlock without tokens (it draws whether); under "exact"
    every unlock gets back exactly what the lock returned."""
    for policy, expected in (("optional", False), ("exact", True)):
        profile = RADIXKV_SWA.but(swa_lock_tokens=policy)
        machine = machine_for("SwaTokens", sliding_window, profile)()
        machine.setup(1, 2)
        machine.choose_run_options(_Draws(False))  # type: ignore[arg-type]  # a stand-in
        assert machine.unlock_by_token is expected, policy


def test_swa_insert_args_policy_decides_whether_the_kit_passes_them() -> None:
    takes = _check(sliding_window, RADIXKV_SWA, settings=RUN)
    ignores = _check(sliding_window, RADIXKV_SWA.but(swa_insert_args=False), settings=RUN)
    ignores.raise_for_failures()
    key = "insert with prev_prefix_len or swa_evicted_seqlen"
    assert takes.stats[key] > 0 and ignores.stats[key] == 0


# ---- the search space and the report ------------------------------------------------------


def test_page_sizes_and_windows_are_what_the_cache_is_built_with() -> None:
    built: set[tuple[int, int | None]] = set()

    def recording(page_size: int, host: Host) -> Any:
        built.add((page_size, host.sliding_window))
        return sliding_window(page_size, host)

    profile = RADIXKV_SWA.but(page_sizes=(2,), windows=(3,))
    machine = machine_for("Recording", recording, profile)
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine, settings=settings(RUN, max_examples=5))
    assert built == {(2, 3)}


def test_every_policy_is_described_in_the_report() -> None:
    fields = {f.name for f in dataclasses.fields(Profile)}
    described = {line.split("=")[0] for line in policy_lines(RADIXKV)}
    search_space = {"name", "page_sizes", "windows", "bad_tokens", "notes"}
    assert described | search_space == fields
    report = _check(
        radix_cache, RADIXKV.but(notes="a note"), settings=settings(RUN, max_examples=2)
    )
    assert "profile notes: a note" in report.render()


def test_bad_policy_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicates"):
        Profile("x", duplicates="nobody")  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(ValueError, match="page_sizes"):
        Profile("x", page_sizes=())
