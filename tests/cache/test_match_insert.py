"""match_prefix and insert: round trips, splits, page alignment, namespaces, values, recency."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import pytest
import torch

from radixkv import InsertResult, MatchResult, RadixCache, RadixKey, UsageError
from radixkv.keys import Token
from tests.conftest import CacheFactory
from tests.helpers import (
    CacheHarness,
    ids,
    live_nodes,
    node_lengths,
    path_tokens,
    snapshot,
    token_index_map,
)


def t(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def insert(
    cache: RadixCache,
    tokens: Sequence[Token],
    value: list[int] | None = None,
    extra_key: str | None = None,
) -> InsertResult:
    return cache.insert(RadixKey(tokens, extra_key), None if value is None else t(*value))


def match(cache: RadixCache, tokens: Sequence[Token], extra_key: str | None = None) -> MatchResult:
    return cache.match_prefix(RadixKey(tokens, extra_key))


# ---- empty cache and empty keys -------------------------------------------------------------


def test_match_on_an_empty_cache_returns_an_empty_int64_tensor_on_the_cache_device(
    make_cache: CacheFactory, device: torch.device
) -> None:
    h = make_cache(device=device)
    result = h.match([1, 2, 3])
    assert result.indices.dtype == torch.int64
    assert result.indices.shape == (0,)
    assert result.indices.device.type == device.type
    assert result.last_node is h.cache.root
    assert result.prefix_len == 0
    assert result.mamba_branching_seqlen is None


def test_match_of_an_empty_key_returns_the_root(harness: CacheHarness) -> None:
    harness.put([1, 2, 3])
    result = harness.match([])
    assert result.prefix_len == 0
    assert result.last_node is harness.cache.root
    assert result.indices.numel() == 0


def test_insert_of_an_empty_key_stores_nothing() -> None:
    cache = RadixCache()
    result = insert(cache, [], [])
    assert result.prefix_len == 0
    assert result.last_node is cache.root
    assert cache.total_size() == 0
    assert live_nodes(cache) == []


def test_cache_device_is_the_allocator_device_and_cpu_without_one(
    make_cache: CacheFactory, device: torch.device
) -> None:
    assert make_cache(device=device).cache.device.type == device.type
    assert RadixCache().device == torch.device("cpu")


# ---- round trips and prefix_len -------------------------------------------------------------


def test_insert_then_match_returns_the_stored_indices() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3], [10, 11, 12])
    full = match(cache, [1, 2, 3])
    assert ids(full.indices) == [10, 11, 12]
    assert full.prefix_len == 3
    longer = match(cache, [1, 2, 3, 4, 5])
    assert ids(longer.indices) == [10, 11, 12]
    assert longer.prefix_len == 3
    assert ids(match(cache, [1, 2]).indices) == [10, 11]
    assert match(cache, [2, 3]).prefix_len == 0
    assert match(cache, [9]).prefix_len == 0


def test_prefix_len_is_the_already_cached_part() -> None:
    cache = RadixCache()
    assert insert(cache, [1, 2, 3], [10, 11, 12]).prefix_len == 0
    assert insert(cache, [1, 2, 3, 4, 5], [20, 21, 22, 23, 24]).prefix_len == 3
    assert insert(cache, [1, 2, 3, 4, 5], [30, 31, 32, 33, 34]).prefix_len == 5
    assert insert(cache, [1, 2], [40, 41]).prefix_len == 2
    assert insert(cache, [1, 2, 7], [50, 51, 52]).prefix_len == 2
    assert insert(cache, [8], [60]).prefix_len == 0


def test_insert_keeps_the_tree_indices_and_adopts_only_the_new_suffix() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3], [10, 11, 12])
    insert(cache, [1, 2, 3, 4, 5], [20, 21, 22, 23, 24])
    assert ids(match(cache, [1, 2, 3, 4, 5]).indices) == [10, 11, 12, 23, 24]
    assert cache.total_size() == 5


def test_indices_are_the_concatenated_values_of_the_last_node_path() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3], [10, 11, 12])
    insert(cache, [1, 2, 3, 4, 5], [20, 21, 22, 23, 24])
    insert(cache, [1, 2, 3, 4, 5, 6, 7], [30, 31, 32, 33, 34, 35, 36])
    result = match(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    path: list[int] = []
    node = result.last_node
    while node is not cache.root:
        path[:0] = ids(node.value)
        node = node.parent
    assert ids(result.indices) == path == [10, 11, 12, 23, 24, 35, 36]
    assert result.prefix_len == len(result.indices)


def test_insert_of_a_cached_key_adds_no_node_and_returns_the_existing_end_node() -> None:
    cache = RadixCache()
    first = insert(cache, [1, 2, 3], [10, 11, 12])
    before = [n.id for n in live_nodes(cache)]
    again = insert(cache, [1, 2, 3], [20, 21, 22])
    assert again.last_node is first.last_node
    assert [n.id for n in live_nodes(cache)] == before
    assert ids(match(cache, [1, 2, 3]).indices) == [10, 11, 12]


# ---- last_node and splits -------------------------------------------------------------------


def test_insert_returns_the_node_ending_at_the_key() -> None:
    cache = RadixCache()
    a = insert(cache, [1, 2, 3], [10, 11, 12])
    assert path_tokens(a.last_node) == (1, 2, 3)
    b = insert(cache, [1, 2, 3, 4, 5], [20, 21, 22, 23, 24])
    assert path_tokens(b.last_node) == (1, 2, 3, 4, 5)
    assert b.last_node.parent is a.last_node


def test_insert_ending_mid_node_splits_and_returns_the_upper_part() -> None:
    cache = RadixCache()
    long = insert(cache, [1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15])
    short = insert(cache, [1, 2, 3], [20, 21, 22])
    assert short.prefix_len == 3
    assert path_tokens(short.last_node) == (1, 2, 3)
    assert ids(short.last_node.value) == [10, 11, 12]
    assert sorted(node_lengths(cache)) == [3, 3]
    # The original node object is the lower part and keeps its id.
    assert long.last_node.parent is short.last_node
    assert path_tokens(long.last_node) == (1, 2, 3, 4, 5, 6)


def test_insert_diverging_inside_a_node_splits_and_adds_a_sibling() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3, 4], [10, 11, 12, 13])
    result = insert(cache, [1, 2, 9, 9], [20, 21, 22, 23])
    assert result.prefix_len == 2
    assert path_tokens(result.last_node) == (1, 2, 9, 9)
    upper = result.last_node.parent
    assert path_tokens(upper) == (1, 2)
    assert sorted(tuple(c.tokens) for c in upper.children.values()) == [(3, 4), (9, 9)]
    assert ids(match(cache, [1, 2, 9, 9]).indices) == [10, 11, 22, 23]
    assert ids(match(cache, [1, 2, 3, 4]).indices) == [10, 11, 12, 13]
    cache.check_invariants()


def test_match_ending_mid_edge_splits_so_last_node_ends_at_the_match() -> None:
    cache = RadixCache()
    original = insert(cache, [1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15]).last_node
    result = match(cache, [1, 2, 3, 9])
    assert result.prefix_len == 3
    assert path_tokens(result.last_node) == (1, 2, 3)
    assert ids(result.last_node.value) == [10, 11, 12]
    assert result.last_node is not original
    assert original.parent is result.last_node
    assert ids(original.value) == [13, 14, 15]
    assert sorted(node_lengths(cache)) == [3, 3]
    cache.check_invariants()


def test_a_split_never_changes_which_index_a_cached_token_maps_to(harness: CacheHarness) -> None:
    harness.put([1, 2, 3, 4, 5, 6, 7, 8])
    harness.put([1, 2, 3, 4, 9, 9])
    harness.put([5, 6, 7])
    before = token_index_map(harness.cache)
    count = len(live_nodes(harness.cache))
    for probe in ([1, 2], [1, 2, 3, 4, 5, 6, 0], [1, 2, 3, 4, 9], [5]):
        harness.match(probe)
    assert len(live_nodes(harness.cache)) == count + 4
    assert token_index_map(harness.cache) == before
    harness.assert_conserved()


def test_match_on_a_node_boundary_does_not_split(harness: CacheHarness) -> None:
    harness.put([1, 2, 3])
    harness.put([1, 2, 3, 4, 5])
    before = snapshot(harness.cache).nodes
    harness.match([1, 2, 3])
    harness.match([1, 2, 3, 4, 5, 6])
    assert [r.id for r in snapshot(harness.cache).nodes] == [r.id for r in before]


# ---- page alignment -------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_every_length_is_a_page_multiple(make_cache: CacheFactory, page_size: int) -> None:
    h = make_cache(page_size)
    p = page_size
    base = list(range(100, 100 + 3 * p))
    first = h.put([*base, *range(1000, 1000 + p - 1)])  # p - 1 tokens past three pages
    assert first.prefix_len == 0
    assert h.cache.total_size() == 3 * p
    assert path_tokens(first.last_node) == tuple(base)
    second = h.put([*base[: 2 * p], *range(500, 500 + 2 * p - 1)])
    assert second.prefix_len == 2 * p
    assert h.cache.total_size() == 3 * p + p
    third = h.put([*base[: p + 1], 999, *range(600, 600 + p)])
    assert third.prefix_len == (p if p > 1 else 2)
    partial = h.match([*base, *range(700, 700 + p - 1)])
    assert partial.prefix_len == 3 * p
    for probe in (base[:5], base[: p + 1], [*base[: 2 * p], 500]):
        result = h.match(probe)
        assert result.prefix_len % p == 0
        assert result.prefix_len == len(result.indices) <= len(probe)
        assert result.prefix_len == len(probe) // p * p
        assert len(path_tokens(result.last_node)) == result.prefix_len
    assert all(n % p == 0 for n in node_lengths(h.cache))
    h.assert_conserved()


@pytest.mark.parametrize("page_size", [2, 4, 16])
def test_a_key_shorter_than_one_page_is_an_empty_match_and_insert(
    make_cache: CacheFactory, page_size: int
) -> None:
    h = make_cache(page_size)
    short = list(range(1, page_size))
    result = h.put(short)
    assert result.prefix_len == 0
    assert result.last_node is h.cache.root
    assert h.cache.total_size() == 0
    h.put(list(range(1, page_size + 1)))
    matched = h.match(short)
    assert matched.prefix_len == 0
    assert matched.last_node is h.cache.root
    assert matched.indices.numel() == 0
    h.assert_conserved()


def test_page_size_4_match_of_6_returns_4_and_insert_of_7_stores_4() -> None:
    cache = RadixCache(page_size=4)
    stored = insert(cache, [1, 2, 3, 4, 5, 6, 7], [10, 11, 12, 13, 14, 15, 16])
    assert stored.prefix_len == 0
    assert cache.total_size() == 4
    assert path_tokens(stored.last_node) == (1, 2, 3, 4)
    result = match(cache, [1, 2, 3, 4, 5, 6])
    assert result.prefix_len == 4
    assert ids(result.indices) == [10, 11, 12, 13]
    cache.check_invariants()


def test_page_size_4_divergence_inside_a_page_matches_only_whole_pages() -> None:
    cache = RadixCache(page_size=4)
    insert(cache, [1, 2, 3, 4, 5, 6, 7, 8], [10, 11, 12, 13, 14, 15, 16, 17])
    assert match(cache, [1, 2, 3, 9]).prefix_len == 0
    result = match(cache, [1, 2, 3, 4, 5, 6, 9, 9])
    assert result.prefix_len == 4
    assert ids(result.indices) == [10, 11, 12, 13]
    assert sorted(node_lengths(cache)) == [4, 4]
    again = insert(cache, [1, 2, 3, 4, 5, 6, 9, 9], [20, 21, 22, 23, 24, 25, 26, 27])
    assert again.prefix_len == 4
    assert ids(match(cache, [1, 2, 3, 4, 5, 6, 9, 9]).indices) == [10, 11, 12, 13, 24, 25, 26, 27]
    cache.check_invariants()


# ---- namespaces -----------------------------------------------------------------------------


def test_namespaces_get_disjoint_subtrees_and_never_cross_match() -> None:
    cache = RadixCache()
    tokens = [1, 2, 3]
    assert insert(cache, tokens, [10, 11, 12], None).prefix_len == 0
    assert insert(cache, tokens, [20, 21, 22], "").prefix_len == 0
    assert insert(cache, tokens, [30, 31, 32], "a").prefix_len == 0
    assert len(cache.root.children) == 3
    assert sorted(repr(n.extra_key) for n in live_nodes(cache)) == ["''", "'a'", "None"]
    assert ids(match(cache, tokens, None).indices) == [10, 11, 12]
    assert ids(match(cache, tokens, "").indices) == [20, 21, 22]
    assert ids(match(cache, tokens, "a").indices) == [30, 31, 32]
    assert match(cache, tokens, "b").prefix_len == 0
    assert cache.total_size() == 9
    cache.check_invariants()


def test_a_namespace_extends_only_its_own_subtree() -> None:
    cache = RadixCache()
    insert(cache, [1, 2], [10, 11], "a")
    result = insert(cache, [1, 2, 3], [20, 21, 22], "a")
    assert result.prefix_len == 2
    assert result.last_node.extra_key == "a"
    assert result.last_node.parent.extra_key == "a"
    assert match(cache, [1, 2, 3]).prefix_len == 0


# ---- values ---------------------------------------------------------------------------------


def test_value_none_uses_the_token_ids_as_indices() -> None:
    cache = RadixCache()
    insert(cache, [7, 8, 9])
    result = match(cache, [7, 8, 9])
    assert ids(result.indices) == [7, 8, 9]
    assert result.indices.dtype == torch.int64


def test_value_longer_than_the_aligned_key_uses_its_first_entries() -> None:
    """The unaligned tail's index (12) stays the caller's: it frees it (SPEC.md, insert)."""
    cache = RadixCache(page_size=2)
    insert(cache, [1, 2, 3], [10, 11, 12])
    assert ids(match(cache, [1, 2, 3, 4]).indices) == [10, 11]
    assert cache.total_size() == 2


@pytest.mark.parametrize("page_size", [1, 2, 4])
@pytest.mark.parametrize("tokens", [[1, 2, 3], [1, 2, 3, 4], []])
def test_value_longer_than_the_key_is_a_usage_error(page_size: int, tokens: list[int]) -> None:
    """More indices than tokens is a caller bug: no cache would ever free the extra ones
    (SPEC.md, insert: issue 30). Refused before any change, whatever the alignment."""
    cache = RadixCache(page_size=page_size)
    insert(cache, [7, 8, 9, 10], [70, 80, 90, 100])
    before = snapshot(cache)
    value = torch.arange(100, 101 + len(tokens))
    with pytest.raises(UsageError, match=f"{len(tokens) + 1} indices for a key of {len(tokens)}"):
        cache.insert(RadixKey(tokens), value)
    with pytest.raises(UsageError, match="indices for a key of 2 tokens"):
        cache.insert(RadixKey([7, 8, 9], limit=2), torch.arange(100, 103))  # the key is [7, 8]
    assert snapshot(cache) == before
    assert cache.insert(RadixKey(tokens), value[:-1]).last_node is not None  # one a token


def test_integer_values_of_any_width_are_stored_as_int64() -> None:
    cache = RadixCache()
    cache.insert(RadixKey([1, 2]), torch.tensor([5, 6], dtype=torch.int32))
    stored = match(cache, [1, 2]).indices
    assert stored.dtype == torch.int64
    assert ids(stored) == [5, 6]


def test_insert_copies_the_value() -> None:
    cache = RadixCache()
    value = t(10, 11, 12, 13)
    cache.insert(RadixKey([1, 2, 3]), value[1:])
    value.fill_(-1)
    assert ids(match(cache, [1, 2, 3]).indices) == [11, 12, 13]


def test_mutating_a_match_result_changes_nothing_cached() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3], [10, 11, 12])
    match(cache, [1, 2, 3]).indices.fill_(-1)
    match(cache, [1]).indices.fill_(-1)
    assert ids(match(cache, [1, 2, 3]).indices) == [10, 11, 12]


def test_reusing_the_caller_token_list_changes_nothing_cached() -> None:
    cache = RadixCache()
    tokens = [1, 2, 3]
    cache.insert(RadixKey(tokens), t(10, 11, 12))
    tokens[0] = 99
    assert match(cache, [1, 2, 3]).prefix_len == 3
    assert match(cache, [99, 2, 3]).prefix_len == 0


def test_keys_may_be_tuples_arrays_or_tensors() -> None:
    cache = RadixCache()
    insert(cache, [1, 2, 3, 4], [10, 11, 12, 13])
    keys: list[Sequence[Token]] = [(1, 2, 3), array("q", [1, 2, 3])]
    for key in keys:
        assert ids(cache.match_prefix(RadixKey(key)).indices) == [10, 11, 12]
    tensor_key = RadixKey(torch.tensor([1, 2, 3]))  # type: ignore[arg-type]
    assert ids(cache.match_prefix(tensor_key).indices) == [10, 11, 12]


def test_bigram_tuple_tokens_work_with_an_explicit_value() -> None:
    cache = RadixCache()
    bigrams: list[Token] = [(1, 2), (2, 3), (3, 4)]
    assert insert(cache, bigrams, [7, 8, 9]).prefix_len == 0
    result = match(cache, [(1, 2), (2, 3), (3, 9)])
    assert result.prefix_len == 2
    assert ids(result.indices) == [7, 8]
    assert match(cache, [1, 2]).prefix_len == 0
    cache.check_invariants()


def test_bigram_tokens_without_a_value_are_rejected() -> None:
    cache = RadixCache()
    with pytest.raises(UsageError, match="bigram"):
        insert(cache, [(1, 2), (2, 3)])
    assert cache.total_size() == 0


# ---- recency, hits and the clock ------------------------------------------------------------


def test_default_clock_is_a_per_cache_logical_counter() -> None:
    first, second = RadixCache(), RadixCache()
    a = insert(first, [1], [1]).last_node
    b = insert(first, [2], [2]).last_node
    c = insert(second, [1], [1]).last_node
    assert (a.last_access_time, b.last_access_time) == (1, 2)
    assert c.last_access_time == 1
    match(first, [1])
    assert a.last_access_time == 3
    assert b.last_access_time == 2


def test_node_ids_are_per_cache() -> None:
    first, second = RadixCache(), RadixCache()
    first_ids = [insert(first, [i], [0]).last_node.id for i in (1, 2, 3)]
    second_id = insert(second, [1], [0]).last_node.id
    assert len(set(first_ids)) == 3
    assert second_id == first_ids[0]
    assert first.root.id == second.root.id


def test_match_refreshes_the_whole_matched_path_and_nothing_else(harness: CacheHarness) -> None:
    h = harness
    a = h.put([1, 2, 3]).last_node  # t=1
    ab = h.put([1, 2, 3, 4, 5]).last_node  # t=2 on [1,2,3] and [4,5]
    other = h.put([9, 9]).last_node  # t=3
    assert (a.last_access_time, ab.last_access_time, other.last_access_time) == (2, 2, 3)
    result = h.match([1, 2, 3, 4, 5, 6])  # t=4
    assert result.last_node is ab
    assert (a.last_access_time, ab.last_access_time, other.last_access_time) == (4, 4, 3)
    assert h.cache.root.last_access_time == 4
    h.match([1, 2, 3])  # t=5: only the upper node
    assert (a.last_access_time, ab.last_access_time) == (5, 4)
    h.cache.check_invariants()


def test_split_out_matched_prefix_gets_the_fresh_timestamp(harness: CacheHarness) -> None:
    lower = harness.put([1, 2, 3, 4]).last_node  # t=1
    harness.put([7])  # t=2
    result = harness.match([1, 2])  # t=3
    assert result.last_node.last_access_time == 3
    assert lower.last_access_time == 1
    harness.cache.check_invariants()


def test_insert_stamps_its_path_with_one_tick(harness: CacheHarness) -> None:
    harness.put([1, 2])
    assert harness.clock.ticks == 1
    leaf = harness.put([1, 2, 3]).last_node
    assert harness.clock.ticks == 2
    assert leaf.last_access_time == leaf.parent.last_access_time == 2


def test_an_injected_clock_stamps_every_operation(make_cache: CacheFactory) -> None:
    stamps = iter([100.0, 250.0, 251.5])
    h = make_cache(clock=lambda: next(stamps))
    node = h.put([1, 2]).last_node
    assert node.last_access_time == 100.0
    h.match([1, 2])
    assert node.last_access_time == 250.0
    other = h.put([5]).last_node
    assert other.last_access_time == 251.5
    assert h.cache.root.last_access_time == 251.5


def test_hit_count_counts_matches_along_the_path(harness: CacheHarness) -> None:
    upper = harness.put([1, 2]).last_node
    lower = harness.put([1, 2, 3, 4]).last_node
    assert (upper.hit_count, lower.hit_count) == (0, 0)
    harness.match([1, 2, 3, 4])
    harness.match([1, 2, 3, 4, 5])
    harness.match([1, 2])
    assert (upper.hit_count, lower.hit_count) == (3, 2)
    harness.put([1, 2, 3, 4, 5, 6])
    assert (upper.hit_count, lower.hit_count) == (3, 2)
    harness.match([7])
    assert (upper.hit_count, lower.hit_count) == (3, 2)


def test_a_split_out_prefix_inherits_the_hit_count_then_counts_its_own_hit(
    harness: CacheHarness,
) -> None:
    node = harness.put([1, 2, 3, 4]).last_node
    harness.match([1, 2, 3, 4])
    harness.match([1, 2, 3, 4])
    upper = harness.match([1, 2]).last_node
    assert upper.hit_count == 3
    assert node.hit_count == 2
