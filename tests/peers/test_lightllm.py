"""LightLLM's radix cache through its kit adapter: the loader (no LightLLM needed) and, with
``LIGHTLLM_SRC`` naming a checkout of ModelTC/lightllm, its findings and policies replayed
against LightLLM's own code (docs/engines.md). A test that needs the checkout skips, saying
why, without it. The findings are also JSON vectors (``tests/vectors/lightllm_*.json``);
the tests here follow each one past the step the vector stops at.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from radixkv_conformance.profile import LRU_LEAVES
from radixkv_conformance.replay import replay

from tests.helpers import RecordingHost, peer_adapter


def _lightllm() -> ModuleType:
    return peer_adapter("lightllm", "LightLLM's radix cache")


def _cache() -> tuple[RecordingHost, Any]:
    host = RecordingHost()
    return host, _lightllm().factory(1, host)


def _trace(*steps: dict[str, Any]) -> dict[str, Any]:
    numbered = [{"id": i, **step} for i, step in enumerate(steps)]
    return {"format": "radixkv-trace/1", "semantics": "lightllm", "page_size": 1, "steps": numbered}


def _insert(tokens: list[int], indices: list[int]) -> dict[str, Any]:
    return {"op": "insert", "tokens": tokens, "namespace": None, "indices": indices}


# ---- the adapter on LightLLM's code --------------------------------------------------------


def test_the_caller_frees_duplicates_and_an_eviction_frees_node_by_node() -> None:
    host, cache = _cache()
    assert cache.insert((1, 2, 3), None, (10, 11, 12)) == (0, (1, 2, 3))
    assert cache.insert((1, 2, 4), None, (20, 21, 22)) == (2, (1, 2, 4))  # 20, 21: the caller's
    assert cache.match((1, 2, 9), None) == ((10, 11), (1, 2))
    assert cache.sizes() == (4, 0, 4)
    node = cache.lock((1, 2, 4))
    assert cache.sizes() == (1, 3, 4)
    assert cache.evict(4) == 1 and host.freed == [(12,)]  # only [3] is unreferenced
    cache.unlock((1, 2, 4), node)
    assert cache.evict(4) == 3 and host.freed == [(12,), (22,), (10, 11)]


def test_a_double_release_drives_the_counts_negative_and_strands_the_node() -> None:
    """``lightllm_unmatched_unlock.json``, one step further: a request's node released twice
    (``dec_node_ref_counter``, no check) reads as referenced (-1), so the next eviction fails
    LightLLM's own assert after popping the node from its eviction set: its KV is never
    freed, while the counters still call it evictable."""
    host, cache = _cache()
    cache.insert((1,), None, (10,))
    node = cache.lock((1,))
    cache.unlock((1,), node)
    cache.unlock((1,), node)  # the second release: accepted
    assert node.ref_counter == -1 and cache.cache.root_node.ref_counter == 0
    with pytest.raises(AssertionError, match="error evict tree node state"):
        cache.evict(1)
    assert node not in cache.cache.evict_tree_set  # popped before the assert
    with pytest.raises(IndexError):  # nothing left to pop
        cache.evict(1)
    assert host.freed == [] and cache.sizes() == (1, 0, 1)


def test_a_second_reset_pops_an_empty_eviction_set() -> None:
    """``lightllm_reset_twice.json``: ``clear_tree_nodes`` leaves the root out of its
    eviction set, and stops only when it pops the root."""
    _, cache = _cache()
    cache.reset()
    assert cache.cache.root_node not in cache.cache.evict_tree_set
    with pytest.raises(IndexError):
        cache.reset()


# ---- the profile's two recency policies, each needed on LightLLM's code ---------------------

INSERT_INSIDE_A_NODE = _trace(
    _insert([1, 2], [0, 1]),
    _insert([5], [2]),
    _insert([1], [3]),  # cached whole, ending inside the node [1, 2]: LightLLM stamps all of it
    {"op": "evict", "num_tokens": 1},  # so [5] goes first
)
LOCK_THEN_EVICT = _trace(
    _insert([1], [0]),
    _insert([2], [1]),
    {"op": "lock", "node": 0},  # match_prefix(update_refs=True): [1] is now the newer
    {"op": "unlock", "node": 0, "lock": 2},
    {"op": "evict", "num_tokens": 1},  # so [2] goes first
)


def test_an_insert_inside_a_node_refreshes_the_whole_node() -> None:
    profile = _lightllm().PROFILE
    assert replay(INSERT_INSIDE_A_NODE, _lightllm().factory, profile).passed
    lru = replay(INSERT_INSIDE_A_NODE, _lightllm().factory, profile.but(victims=LRU_LEAVES))
    assert lru.finding == "INV-11:evict-victim-order", lru


def test_a_lock_refreshes_recency() -> None:
    profile = _lightllm().PROFILE
    assert replay(LOCK_THEN_EVICT, _lightllm().factory, profile).passed
    no_lock = profile.but(refresh_on=profile.refresh_on - {"lock"})
    unrefreshed = replay(LOCK_THEN_EVICT, _lightllm().factory, no_lock)
    assert unrefreshed.finding == "INV-11:evict-victim-order", unrefreshed
