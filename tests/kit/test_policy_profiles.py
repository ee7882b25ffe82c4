"""Eviction policies as spec policies the kit checks (radixkv_spec.policies, SPEC.md
"Eviction policies"): each victim order admits its own victim and no other policy's on one
hand-built model, and the kit's machine passes radixkv's RadixCache under each policy's
profile and finds the cache of another policy out of order (INV-11)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import settings
from radixkv_conformance.adapters import radixkv as adapters
from radixkv_conformance.conformance import run_conformance
from radixkv_conformance.profile import RADIXKV_POLICIES
from radixkv_conformance.replay import replay
from radixkv_spec.invariants import SpecUsageError, SpecViolation
from radixkv_spec.mamba import MambaCacheModel
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.outcomes import node_frees
from radixkv_spec.policies import (
    FIFO_LEAVES,
    LFU_LEAVES,
    LRU_LEAVES,
    MRU_LEAVES,
    PRIORITY_LEAVES,
    LeafFacts,
)
from radixkv_spec.swa import SlidingWindowModel

from tests.helpers import fixed_search, play_five_leaves

ORDERS = {
    "lru": LRU_LEAVES,
    "lfu": LFU_LEAVES,
    "fifo": FIFO_LEAVES,
    "mru": MRU_LEAVES,
    "priority": PRIORITY_LEAVES,
}
# The example of tests/cache/test_eviction_policies.py, on the model: five two-page leaves, each
# policy's first victim a different one.
A, B, C, D, E = (1, 11), (2, 12), (3, 13), (4, 14), (5, 15)
FIRST_VICTIM = {"lru": C, "lfu": D, "fifo": A, "mru": B, "priority": E}


def _five_leaves(order: Any) -> PrefixCacheModel:
    model = PrefixCacheModel(1, order)
    play_five_leaves(
        (A, B, C, D, E),
        lambda key, priority: model.insert(
            None, key, (10 * key[0], 10 * key[0] + 1), priority=priority
        ),
        lambda key: model.match(None, key),
    )
    return model


@pytest.mark.parametrize("policy", sorted(ORDERS))
def test_each_victim_order_admits_its_victim_and_no_other_policys(policy: str) -> None:
    for other, victim in FIRST_VICTIM.items():
        model = _five_leaves(ORDERS[policy])
        group = [model.indices_of(None, victim)]
        if other == policy:
            model.apply_eviction(2, node_frees(group))
            assert not model.has_page(None, victim)
        else:
            with pytest.raises(SpecViolation, match=f"INV-11.*is not {policy}"):
                model.apply_eviction(2, node_frees(group))


def test_the_model_tracks_hits_births_and_priorities_per_page() -> None:
    model = _five_leaves(LRU_LEAVES)
    facts = {key: model.leaf_facts((None, key)) for key in (A, B, C, D, E)}
    assert [facts[k].hits for k in (A, B, C, D, E)] == [2, 1, 1, 0, 0]
    assert facts[A].born < facts[B].born < facts[C].born < facts[D].born < facts[E].born
    assert [facts[k].priority for k in (A, B, C, D, E)] == [0, 0, 0, 0, -1]
    model.insert(None, (1, 11, 7), (60, 61, 62), priority=3)  # covers A's pages: raised
    assert model.leaf_facts((None, (1,))).priority == 3
    model.insert(None, (1,), (60,), priority=1)  # never lowered
    assert model.leaf_facts((None, (1,))).priority == 3
    assert model.leaf_facts((None, (1, 11, 7))).priority == 3


def test_a_page_added_again_starts_with_no_hits_and_a_new_birth() -> None:
    model = PrefixCacheModel(1, LFU_LEAVES)
    model.insert(None, (1,), (10,), priority=2)
    model.match(None, (1,))
    born = model.leaf_facts((None, (1,))).born
    model.apply_eviction(1, node_frees([(10,)]))
    model.insert(None, (1,), (11,))
    assert model.leaf_facts((None, (1,)))[2:] == (0, model.clock, 0)
    assert model.leaf_facts((None, (1,))).born > born


def test_orders_that_read_more_than_recency_are_plain_model_only() -> None:
    for order in (LFU_LEAVES, FIFO_LEAVES, MRU_LEAVES, PRIORITY_LEAVES):
        with pytest.raises(SpecUsageError, match=order.name):
            SlidingWindowModel(1, 4, order)
        with pytest.raises(SpecUsageError, match=order.name):
            MambaCacheModel(1, order)


def test_mru_admits_any_most_recent_leaf_when_recency_is_widened() -> None:
    """Bounds as sglang's split policy widens them: a leaf that may be the newest goes."""
    old, maybe_new = LeafFacts(1, 5), LeafFacts(3, 3)
    assert MRU_LEAVES.admissible(old, [old, maybe_new])
    assert not MRU_LEAVES.admissible(LeafFacts(1, 1), [LeafFacts(1, 1), maybe_new])


# ---- the kit's machine on radixkv's RadixCache under each policy ----------------------------

FIND = fixed_search(200, 20, shrink=False)
FACTORIES = {name: getattr(adapters, f"policy_{name}") for name in RADIXKV_POLICIES}


@pytest.mark.parametrize("policy", sorted(RADIXKV_POLICIES))
def test_the_kit_passes_each_policy_under_its_own_profile(policy: str) -> None:
    report = run_conformance(
        FACTORIES[policy],
        profile=RADIXKV_POLICIES[policy],
        settings=settings(FIND, max_examples=100),
        max_failures=1,
    )
    report.raise_for_failures()
    assert report.stats["insert with a priority"] > 0
    assert report.stats["evicted tokens"] > 0


# Each cache judged by a profile whose victim order differs from its own.
MISMATCHES = [("lru", "mru"), ("mru", "lru"), ("lru", "lfu"), ("lru", "priority")]


@pytest.mark.parametrize(("cache_policy", "profile_policy"), MISMATCHES)
def test_the_kit_finds_a_cache_evicting_in_another_policys_order(
    cache_policy: str, profile_policy: str
) -> None:
    profile = RADIXKV_POLICIES[profile_policy]
    report = run_conformance(
        FACTORIES[cache_policy], profile=profile, settings=FIND, max_failures=1
    )
    assert [f.invariant for f in report.failures] == ["INV-11"], report.render()
    failure = report.failures[0]
    assert f"is not {profile.victims.name}" in failure.message
    trace = json.loads(json.dumps(failure.trace))  # a trace survives JSON, priorities too
    assert not replay(trace, FACTORIES[cache_policy]).passed
    assert replay(trace, FACTORIES[profile_policy]).passed


def _five_leaves_trace(profile: str) -> dict[str, Any]:
    """The five-leaf example as a trace (FORMAT.md), ending with an evict of one leaf."""
    steps: list[dict[str, Any]] = []
    inserted: list[tuple[int, int]] = []

    def insert(key: tuple[int, int], priority: int) -> None:
        indices = [2 * len(inserted), 2 * len(inserted) + 1]  # the machine allocates 0, 1, ...
        inserted.append(key)
        steps.append({"op": "insert", "tokens": list(key), "namespace": None, "indices": indices})
        steps[-1]["priority"] = priority

    def match(key: tuple[int, int]) -> None:
        steps.append({"op": "match", "tokens": list(key), "namespace": None})

    play_five_leaves((A, B, C, D, E), insert, match)
    steps.append({"op": "evict", "num_tokens": 2})
    numbered = [{"id": i, **step} for i, step in enumerate(steps)]
    semantics = RADIXKV_POLICIES[profile].name
    return {"format": "radixkv-trace/1", "semantics": semantics, "page_size": 1, "steps": numbered}


@pytest.mark.parametrize("profile_policy", sorted(RADIXKV_POLICIES))
def test_a_trace_passes_only_the_cache_of_the_policy_its_profile_names(
    profile_policy: str,
) -> None:
    """Every cache against every profile on one trace: the diagonal passes, the rest fail
    at the evict (INV-11), FIFO against LRU included (a search rarely separates those)."""
    trace = _five_leaves_trace(profile_policy)
    for cache_policy, factory in FACTORIES.items():
        result = replay(trace, factory)
        if cache_policy == profile_policy:
            assert result.passed, result
        else:
            assert result.finding == "INV-11:evict-victim-order", (cache_policy, result)
