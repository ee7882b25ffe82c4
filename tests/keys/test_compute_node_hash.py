"""compute_node_hash: a pure function of the namespace and the full root path."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from radixkv import RadixCache, RadixKey, StaleNodeError, TreeNode, hash_token_ids, namespace_seed
from radixkv.keys import Token
from tests.conftest import CacheFactory
from tests.helpers import CacheHarness, live_nodes, path_tokens


def chained(tokens: Sequence[Token], page_size: int, extra_key: str | None) -> list[str]:
    """Page hashes of a whole root path, chained from the namespace seed."""
    prior = namespace_seed(extra_key)
    out: list[str] = []
    for start in range(0, len(tokens), page_size):
        prior = hash_token_ids(list(tokens[start : start + page_size]), prior)
        out.append(prior)
    return out


def expected_hashes(cache: RadixCache, node: TreeNode) -> list[str]:
    """The last len(node) / page_size hashes of the chain over the node's root path."""
    pages = len(node) // cache.page_size
    return chained(path_tokens(node), cache.page_size, node.extra_key)[-pages:]


def build(h: CacheHarness) -> None:
    p = h.cache.page_size
    h.put(list(range(1, 1 + 3 * p)))
    h.put([*range(1, 1 + p), *range(50, 50 + 2 * p)])
    h.put([*range(1, 1 + 3 * p), *range(80, 80 + p)])
    h.put(list(range(1, 1 + 2 * p)), "tenant")


@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_page_hashes_chain_over_the_full_root_path(
    make_cache: CacheFactory, page_size: int
) -> None:
    h = make_cache(page_size)
    build(h)
    for node in live_nodes(h.cache):
        hashes = h.cache.compute_node_hash(node)
        assert hashes == expected_hashes(h.cache, node)
        assert len(hashes) == len(node) // page_size
        assert node.hash_values == hashes
    h.cache.check_invariants()


@pytest.mark.parametrize("page_size", [1, 4])
def test_hashes_do_not_depend_on_call_order(make_cache: CacheFactory, page_size: int) -> None:
    deep_first, shallow_first = make_cache(page_size), make_cache(page_size)
    build(deep_first)
    build(shallow_first)

    def depth(node: TreeNode) -> int:
        return len(path_tokens(node))

    def by_path(cache: RadixCache, nodes: list[TreeNode]) -> dict[tuple[Token, ...], list[str]]:
        return {path_tokens(n): cache.compute_node_hash(n) for n in nodes}

    deep = by_path(deep_first.cache, sorted(live_nodes(deep_first.cache), key=depth, reverse=True))
    shallow = by_path(shallow_first.cache, sorted(live_nodes(shallow_first.cache), key=depth))
    assert deep == shallow
    for node in live_nodes(deep_first.cache):
        assert node.hash_values == expected_hashes(deep_first.cache, node)


def test_hashing_a_child_first_also_hashes_its_ancestors(harness: CacheHarness) -> None:
    parent = harness.put([1, 2]).last_node
    child = harness.put([1, 2, 3, 4]).last_node
    assert parent.hash_values is None
    assert harness.cache.compute_node_hash(child) == chained([1, 2, 3, 4], 1, None)[2:]
    assert parent.hash_values == chained([1, 2], 1, None)


def test_namespaces_hash_equal_pages_differently() -> None:
    cache = RadixCache(page_size=2)
    tokens = [1, 2, 3, 4]
    nodes = {ns: cache.insert(RadixKey(tokens, ns)).last_node for ns in (None, "", "a")}
    hashes = {ns: cache.compute_node_hash(node) for ns, node in nodes.items()}
    assert hashes[None] == chained(tokens, 2, None)
    assert hashes[""] == chained(tokens, 2, "")
    assert hashes["a"] == chained(tokens, 2, "a")
    assert hashes[""][0] != hashes[None][0]
    assert hashes["a"][0] != hashes[None][0]
    assert hashes["a"][0] != hashes[""][0]
    assert hashes[None][0] == hash_token_ids([1, 2])


@pytest.mark.parametrize("page_size", [1, 2])
def test_a_split_keeps_every_surviving_page_hash(make_cache: CacheFactory, page_size: int) -> None:
    h = make_cache(page_size)
    p = page_size
    tokens = list(range(10, 10 + 4 * p))
    node = h.put(tokens).last_node
    full = h.cache.compute_node_hash(node)
    upper = h.match(tokens[: 2 * p]).last_node
    assert node.parent is upper
    assert upper.hash_values == full[:2]  # carried over by the split, not recomputed
    assert node.hash_values == full[2:]
    assert h.cache.compute_node_hash(upper) + h.cache.compute_node_hash(node) == full
    sibling = h.put([*tokens[: 2 * p], *range(90, 90 + p)]).last_node
    assert h.cache.compute_node_hash(sibling) == expected_hashes(h.cache, sibling)
    h.cache.check_invariants()


def test_eviction_keeps_the_hashes_of_surviving_pages(harness: CacheHarness) -> None:
    h = harness
    keep = h.put([1, 2, 3]).last_node
    h.put([1, 2, 3, 4, 5])
    before = h.cache.compute_node_hash(keep)
    h.match([1, 2, 3])  # the [4, 5] leaf is now the least recent
    assert h.cache.evict(1).full_evicted == 2
    assert h.cache.compute_node_hash(keep) == before == chained([1, 2, 3], 1, None)


def test_bigram_pages_hash_their_elements() -> None:
    cache = RadixCache(page_size=2)
    bigrams: list[Token] = [(1, 2), (2, 3), (3, 4), (4, 5)]
    node = cache.insert(RadixKey(bigrams), torch.tensor([5, 6, 7, 8])).last_node
    hashes = cache.compute_node_hash(node)
    assert hashes == chained(bigrams, 2, None)
    assert hashes[0] == hash_token_ids([1, 2, 2, 3])


def test_the_root_has_no_page_hashes(harness: CacheHarness) -> None:
    assert harness.cache.compute_node_hash(harness.cache.root) == []
    harness.put([1, 2])
    assert harness.cache.compute_node_hash(harness.cache.root) == []


def test_hashing_an_evicted_node_is_rejected(harness: CacheHarness) -> None:
    node = harness.put([1, 2]).last_node
    harness.cache.evict(1)
    with pytest.raises(StaleNodeError):
        harness.cache.compute_node_hash(node)
