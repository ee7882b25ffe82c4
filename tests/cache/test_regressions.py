"""Regression tests for bugs reported against pymllm, sglang and mini-sglang (non-SWA cases).

Each docstring names the report it guards against (an issue, a PR, or pymllm's code).
"""

from __future__ import annotations

import pytest
import torch

from radixkv import LockError, RadixCache, RadixKey, hash_token_ids
from radixkv.keys import encode
from tests.conftest import CacheFactory
from tests.helpers import (
    CacheHarness,
    all_nodes,
    ids,
    live_nodes,
    node_lengths,
    path_tokens,
    refused_unchanged,
    token_index_map,
    tree_indices,
)


def assert_counters_consistent(cache: RadixCache) -> None:
    assert cache.evictable_size() >= 0
    assert cache.protected_size() >= 0
    assert cache.evictable_size() + cache.protected_size() == cache.total_size()
    assert cache.total_size() == sum(node_lengths(cache))


def test_mllm_pr_656_evictable_size_never_drifts(harness: CacheHarness) -> None:
    """mllm PR #656: `_add_leaf` subtracted the parent's length from evictable_size, so
    insert [1,2,3] then [1,2,3,4,5] gave evictable 2 and a full eviction left it at -3."""
    harness.put([1, 2, 3])
    harness.put([1, 2, 3, 4, 5])
    assert harness.cache.evictable_size() == 5
    assert_counters_consistent(harness.cache)
    assert harness.cache.evict(10**6).full_evicted == 5
    assert (harness.cache.evictable_size(), harness.cache.protected_size()) == (0, 0)
    assert harness.cache.total_size() == 0


def test_sglang_pr_10637_a_key_shorter_than_a_page_is_an_empty_match() -> None:
    """sglang PR #10637: with page_size > 1 a key truncated to length 0 must give an empty
    match (empty indices, the root, prefix 0), not a crash or a bogus partial page."""
    cache = RadixCache(page_size=4)
    cache.insert(RadixKey([1, 2, 3, 4]), torch.tensor([10, 11, 12, 13]))
    result = cache.match_prefix(RadixKey([1, 2, 3]))
    assert result.prefix_len == 0
    assert result.last_node is cache.root
    assert result.indices.numel() == 0
    assert result.indices.dtype == torch.int64
    assert cache.insert(RadixKey([5, 6, 7]), torch.tensor([1, 2, 3])).prefix_len == 0
    assert cache.total_size() == 4


@pytest.mark.parametrize("page_size", [2, 4])
def test_sglang_35270_and_38941_every_page_has_one_owner(page_size: int) -> None:
    """sglang issue #35270 (shared pages counted twice with page_size > 1, so evictable +
    available exceeded the pool) and PR #38941 (two frees sharing one page: double free).

    The caller allocates whole pages, inserts one index per token of them (as sglang passes
    ``req_to_token[req, :len(tokens)]``; more is a usage error), and frees its duplicate
    and unaligned pages itself; no page may then be held by two nodes, or by a node and
    the free list.
    """
    p = page_size
    freed: list[int] = []

    class PagePool:
        device = torch.device("cpu")

        def free(self, indices: torch.Tensor) -> None:
            freed.extend(ids(indices))

    cache = RadixCache(page_size=p, token_to_kv_pool_allocator=PagePool())
    next_page = 0
    caller_freed: list[int] = []
    requests = [
        list(range(100, 100 + 3 * p)),
        [*range(100, 100 + 2 * p), *range(300, 300 + p + 1)],
        [*range(100, 100 + p), 7, *range(400, 400 + 2 * p - 1)],
        list(range(100, 100 + 3 * p + 1)),
    ]
    for tokens in requests:
        pages = -(-len(tokens) // p)
        value = torch.arange(next_page * p, (next_page + pages) * p)  # whole pages
        next_page += pages
        prefix = cache.insert(RadixKey(tokens), value[: len(tokens)]).prefix_len
        aligned = len(tokens) // p * p
        caller_freed += ids(value[:prefix]) + ids(value[aligned:])  # the last page's padding too
        held = tree_indices(cache)
        assert len(held) == len(set(held))
        assert not set(held) & set(caller_freed)
        for node in live_nodes(cache):
            assert node.value is not None
            for start in range(0, len(node), p):
                page = ids(node.value[start : start + p])
                assert page[0] % p == 0
                assert page == list(range(page[0], page[0] + p))
        # Nothing is locked: evictable + free == everything ever handed out, exactly.
        assert cache.evictable_size() + len(caller_freed) == next_page * p
    cache.evict(10**6)
    every = freed + caller_freed
    assert len(every) == len(set(every))
    assert cache.total_size() == 0


def test_pymllm_8_7_an_unmatched_unlock_is_rejected(harness: CacheHarness) -> None:
    """pymllm: dec_lock_ref had no underflow check; an unmatched dec drove lock_ref to
    -1 silently and left the size counters inconsistent for good."""
    node = harness.put([1, 2, 3]).last_node
    with refused_unchanged(harness.cache, LockError):
        harness.cache.dec_lock_ref(node)
    assert node.lock_ref == 0
    assert_counters_consistent(harness.cache)
    harness.cache.inc_lock_ref(node)
    harness.cache.dec_lock_ref(node)
    with pytest.raises(LockError):
        harness.cache.dec_lock_ref(node)
    assert node.lock_ref == 0
    assert_counters_consistent(harness.cache)


def test_pymllm_8_8_unaligned_inserts_store_whole_pages_only() -> None:
    """pymllm: with page_size > 1 an unaligned insert created partial-page nodes, two
    siblings covering one token ([3] and [3, 4]), and prefix_len > len(key) ([3] vs [3]
    with page_size 2 returned 2)."""
    cache = RadixCache(page_size=2)
    for tokens in ([3], [3], [3, 4, 5], [3, 4], [3, 4, 5, 6, 7], [1, 2, 3]):
        result = cache.insert(RadixKey(tokens))
        assert result.prefix_len <= len(tokens)
        assert result.prefix_len % 2 == 0
        assert all(n % 2 == 0 for n in node_lengths(cache))
    assert cache.insert(RadixKey([3])).prefix_len == 0
    assert cache.insert(RadixKey([3, 4, 5])).prefix_len == 2
    assert cache.insert(RadixKey([1, 2, 3])).prefix_len == 2
    first_pages = [node.tokens[:2] for node in cache.root.children.values()]
    assert sorted(first_pages) == [(1, 2), (3, 4)]
    cache.check_invariants()


def test_pymllm_8_9_hashes_are_chained_whatever_the_call_order_and_namespaced() -> None:
    """pymllm: hashing a child before its parent cached an un-chained hash, and page
    hashes ignored extra_key (also sglang issue #24568 for KV events)."""
    cache = RadixCache()
    cache.insert(RadixKey([1, 2]))
    child = cache.insert(RadixKey([1, 2, 3])).last_node
    chained = hash_token_ids([3], hash_token_ids([2], hash_token_ids([1])))
    assert cache.compute_node_hash(child) == [chained]
    assert cache.compute_node_hash(child) != [hash_token_ids([3])]
    plain = cache.compute_node_hash(cache.insert(RadixKey([7])).last_node)
    tagged = cache.compute_node_hash(cache.insert(RadixKey([7], "lora")).last_node)
    assert plain != tagged


def test_mini_sglang_pr_124_the_split_out_prefix_gets_the_fresh_timestamp(
    harness: CacheHarness,
) -> None:
    """mini-sglang PR #124: a match ending mid-edge split the node but left the new matched
    prefix with the old timestamp, so the just-used prefix was evicted too early."""
    h = harness
    lower = h.put([1, 2, 3, 4]).last_node  # t=1
    other = h.put([9]).last_node  # t=2
    upper = h.match([1, 2]).last_node  # t=3
    assert upper.last_access_time > other.last_access_time > lower.last_access_time
    h.cache.evict(1)
    assert h.evicted_ids == [lower.id]
    h.cache.evict(1)  # upper is a leaf now, but it was used after `other`
    assert h.evicted_ids == [lower.id, other.id]


def test_sglang_pr_36696_child_keys_stay_consistent_across_splits(
    make_cache: CacheFactory,
) -> None:
    """sglang PR #36696: a split node was registered under a stale child key ("parent does
    not have child key"). Every edge must be keyed by (namespace, first page of child)."""
    for p in (1, 2, 4):
        h = make_cache(p)
        base = list(range(10, 10 + 12 * p))
        h.put(base)
        for cut in (9, 3, 6, 1, 11):
            h.match(base[: cut * p])
            h.put([*base[: cut * p], *range(1000 + cut * 10, 1000 + cut * 10 + p)])
            h.cache.check_invariants()
            for node in all_nodes(h.cache):
                for key, child in node.children.items():
                    first_page = encode(child.tokens[:p], packed=True)
                    assert key == (child.extra_key, first_page)
                    assert child.parent is node
        assert sorted(len(n) for n in live_nodes(h.cache)) == sorted(
            [p, 2 * p, 3 * p, 3 * p, 2 * p, p] + [p] * 5
        )
        h.assert_conserved()


def test_mini_sglang_pr_142_caller_indices_after_insert_are_the_tree_ones(
    harness: CacheHarness,
) -> None:
    """mini-sglang PR #142: after freeing its duplicate prefix indices the caller must use the
    tree's indices; a re-match returns only indices that are still allocated."""
    h = harness
    h.put([1, 2, 3])
    h.put([1, 2, 3, 4, 5])  # frees its own copies of [1, 2, 3]
    for index in ids(h.match([1, 2, 3, 4, 5]).indices):
        assert h.allocator.inner.is_allocated(index)
    h.assert_conserved()


# ---- minimal scenarios of the reported defects ------------------------------------------------


def test_scenario_1_insert_a_then_a_plus_b_then_evict_all(harness: CacheHarness) -> None:
    """Scenario 1: insert A, insert A+B -> prefix |A|; evict all -> counters 0, each index freed
    once."""
    h = harness
    assert h.put([1, 2, 3]).prefix_len == 0
    assert h.put([1, 2, 3, 4, 5]).prefix_len == 3
    held = sorted(tree_indices(h.cache))
    h.cache.evict(10**6)
    assert sorted(h.allocator.freed) == held
    assert (h.cache.evictable_size(), h.cache.protected_size(), h.cache.total_size()) == (0, 0, 0)
    assert h.allocator.allocated_count() == 0


def test_scenario_2_a_mid_edge_match_splits_without_remapping(harness: CacheHarness) -> None:
    """Scenario 2: match mid-edge -> split; all root paths map tokens to the same indices."""
    harness.put([1, 2, 3, 4, 5, 6])
    before = token_index_map(harness.cache)
    assert harness.match([1, 2, 3, 7]).prefix_len == 3
    assert len(live_nodes(harness.cache)) == 2
    assert token_index_map(harness.cache) == before


def test_scenario_3_a_locked_deep_node_survives_a_full_eviction(harness: CacheHarness) -> None:
    """Scenario 3: lock a deep node, evict(inf) -> only unlocked disjoint branches go; unlock ->
    its path becomes evictable."""
    h = harness
    deep = h.put([1, 2, 3, 4, 5]).last_node
    h.put([1, 2, 9])
    h.put([6, 6])
    h.cache.inc_lock_ref(deep)
    assert h.cache.evict(10**6).full_evicted == 3
    assert path_tokens(deep) == (1, 2, 3, 4, 5)
    assert h.match([1, 2, 3, 4, 5]).prefix_len == 5
    h.cache.dec_lock_ref(deep)
    assert h.cache.evictable_size() == 5
    assert h.cache.evict(10**6).full_evicted == 5


def test_scenario_4_a_double_unlock_is_rejected(harness: CacheHarness) -> None:
    """Scenario 4: double dec -> rejected."""
    node = harness.put([1, 2]).last_node
    harness.cache.inc_lock_ref(node)
    harness.cache.dec_lock_ref(node)
    with pytest.raises(LockError):
        harness.cache.dec_lock_ref(node)
    assert harness.cache.evictable_size() == 2


def test_scenario_5_namespaces_are_disjoint_subtrees(harness: CacheHarness) -> None:
    """Scenario 5: the same tokens under extra_key None / "a" / "b" -> three disjoint subtrees."""
    h = harness
    results = {ns: h.put([1, 2, 3], ns) for ns in (None, "a", "b")}
    assert all(r.prefix_len == 0 for r in results.values())
    assert len(h.cache.root.children) == 3
    for ns, result in results.items():
        assert ids(h.match([1, 2, 3], ns).indices) == ids(result.last_node.value)
        assert result.last_node.extra_key == ns
        assert result.last_node.parent is h.cache.root
    assert len(set(tree_indices(h.cache))) == 9


def test_scenario_6_page_size_4_match_6_gives_4_insert_7_stores_4(
    make_cache: CacheFactory,
) -> None:
    """Scenario 6: p=4: match of 6 tokens returns 4; insert of 7 stores 4 (the caller frees the
    unaligned tail)."""
    h = make_cache(4)
    assert h.put([1, 2, 3, 4, 5, 6, 7]).prefix_len == 0
    assert h.cache.total_size() == 4
    assert h.match([1, 2, 3, 4, 5, 6]).prefix_len == 4
    h.assert_conserved()


def test_scenario_9_an_insert_diverging_inside_an_edge_hangs_under_the_split(
    harness: CacheHarness,
) -> None:
    """Scenario 9 (pymllm, SWA misplacement): insert [1,2,3,4] then [1,2,9,9] must give
    [1,2] -> {[3,4], [9,9]}, not [1,2] -> [3,4] -> [9,9]."""
    h = harness
    h.put([1, 2, 3, 4])
    h.put([1, 2, 9, 9])
    assert h.match([1, 2, 9, 9]).prefix_len == 4
    assert h.match([1, 2, 3, 4, 9, 9]).prefix_len == 4
    upper = h.match([1, 2]).last_node
    assert sorted(tuple(c.tokens) for c in upper.children.values()) == [(3, 4), (9, 9)]
    h.assert_conserved()


def test_scenario_11_hashes_follow_the_full_path_and_bigrams_collide_as_documented() -> None:
    """Scenario 11: chained page hashes equal hashing the full root path page by page, whatever
    the order nodes are hashed in; [(1, 2)] and [1, 2] collide (documented, pymllm bytes)."""
    orders = []
    for child_first in (True, False):
        cache = RadixCache(page_size=2)
        parent = cache.insert(RadixKey([1, 2, 3, 4])).last_node
        child = cache.insert(RadixKey([1, 2, 3, 4, 5, 6])).last_node
        first, second = (child, parent) if child_first else (parent, child)
        cache.compute_node_hash(first)
        cache.compute_node_hash(second)
        orders.append(cache.compute_node_hash(parent) + cache.compute_node_hash(child))
    h1 = hash_token_ids([1, 2])
    h2 = hash_token_ids([3, 4], h1)
    h3 = hash_token_ids([5, 6], h2)
    assert orders[0] == orders[1] == [h1, h2, h3]
    assert hash_token_ids([(1, 2)]) == hash_token_ids([1, 2])
