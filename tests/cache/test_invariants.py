"""check_invariants: silent on healthy trees, names the INV id of a hand-made corruption."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from radixkv import InvariantViolation, RadixKey, TreeNode, UsageError
from radixkv.keys import encode
from radixkv.tree import edge
from tests.conftest import CacheFactory
from tests.helpers import CacheHarness, live_nodes, path_tokens


def value(node: TreeNode) -> torch.Tensor:
    assert node.value is not None
    return node.value


def by_path(h: CacheHarness, *tokens: int) -> TreeNode:
    for node in live_nodes(h.cache):
        if path_tokens(node) == tokens:
            return node
    raise LookupError(tokens)


@pytest.fixture
def healthy(make_cache: CacheFactory) -> CacheHarness:
    """[1, 2] -> {[3, 4], [5, 6]}, [7, 8] (all hashed), [9, 9] in namespace "ns"; page_size 2."""
    h = make_cache(page_size=2)
    h.put([1, 2, 3, 4])
    h.put([1, 2, 5, 6])
    h.put([7, 8])
    h.put([9, 9], "ns")
    for node in live_nodes(h.cache):
        h.cache.compute_node_hash(node)
    h.cache.check_invariants()
    return h


@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_healthy_trees_pass_after_every_operation(make_cache: CacheFactory, page_size: int) -> None:
    h = make_cache(page_size)
    p = page_size
    steps: list[Callable[[], object]] = [
        lambda: h.put(list(range(8 * p))),
        lambda: h.put([*range(3 * p), *range(100, 100 + 2 * p)]),
        lambda: h.match(list(range(2 * p))),
        lambda: h.put(list(range(8 * p)), "a"),
        lambda: h.cache.inc_lock_ref(h.match(list(range(5 * p))).last_node),
        lambda: [h.cache.compute_node_hash(n) for n in live_nodes(h.cache)],
        lambda: h.match([*range(3 * p), 100]),
        lambda: h.cache.evict(3 * p),
        lambda: h.put([*range(p), *range(200, 200 + 7)]),
        lambda: h.cache.evict(10**6),
        lambda: h.cache.reset(),
        lambda: h.put(list(range(4 * p))),
    ]
    for step in steps:
        step()
        h.assert_conserved()


Corruption = Callable[[CacheHarness], None]


def wrong_lock_ref(h: CacheHarness) -> None:
    leaf = by_path(h, 1, 2, 3, 4)
    leaf.lock_ref = 1


def negative_held_locks(h: CacheHarness) -> None:
    leaf = by_path(h, 7, 8)
    leaf.held_locks = -1
    leaf.lock_ref = -1


def wrong_evictable_counter(h: CacheHarness) -> None:
    h.cache.tree.evictable_size += 1


def wrong_protected_counter(h: CacheHarness) -> None:
    h.cache.tree.protected_size += 2
    h.cache.tree.evictable_size -= 2


def shared_index(h: CacheHarness) -> None:
    a, b = by_path(h, 1, 2, 3, 4), by_path(h, 1, 2, 5, 6)
    b.value = value(a).clone()


def child_newer_than_parent(h: CacheHarness) -> None:
    leaf = by_path(h, 1, 2, 3, 4)
    assert leaf.parent is not None
    leaf.last_access_time = leaf.parent.last_access_time + 1


def stale_hash(h: CacheHarness) -> None:
    leaf = by_path(h, 1, 2, 5, 6)
    leaf.hash_values = ["00" * 32]


def hashed_before_parent(h: CacheHarness) -> None:
    by_path(h, 1, 2).hash_values = None


def wrong_child_key(h: CacheHarness) -> None:
    leaf = by_path(h, 7, 8)
    root = h.cache.root
    del root.children[edge(leaf, h.cache.page_size)]
    root.children[(None, encode([7, 9], packed=True))] = leaf


def wrong_parent_pointer(h: CacheHarness) -> None:
    leaf = by_path(h, 1, 2, 3, 4)
    leaf.parent = h.cache.root


def reachable_evicted_node(h: CacheHarness) -> None:
    by_path(h, 7, 8).value = None


def value_length_mismatch(h: CacheHarness) -> None:
    leaf = by_path(h, 7, 8)
    leaf.value = value(leaf)[:1]


def int32_value(h: CacheHarness) -> None:
    leaf = by_path(h, 7, 8)
    leaf.value = value(leaf).to(torch.int32)


def partial_page_key(h: CacheHarness) -> None:
    leaf = by_path(h, 7, 8)
    leaf.key = RadixKey((7,))
    leaf.value = value(leaf)[:1]


def keyless_node(h: CacheHarness) -> None:
    by_path(h, 7, 8).key = None  # the seed's default: a node without a key has no place here


def foreign_namespace_child(h: CacheHarness) -> None:
    parent = by_path(h, 1, 2)
    child = by_path(h, 1, 2, 3, 4)
    del parent.children[edge(child, h.cache.page_size)]
    child.key = RadixKey((3, 4), "other")
    parent.children[edge(child, h.cache.page_size)] = child


def unlocked_root(h: CacheHarness) -> None:
    h.cache.root.lock_ref = 0


def duplicate_node_id(h: CacheHarness) -> None:
    by_path(h, 7, 8).id = by_path(h, 1, 2).id


CORRUPTIONS: list[tuple[Corruption, str]] = [
    (unlocked_root, "INV-1"),
    (duplicate_node_id, "INV-1"),
    (partial_page_key, "INV-2"),
    (keyless_node, "INV-2"),
    (value_length_mismatch, "INV-2"),
    (int32_value, "INV-2"),
    (wrong_child_key, "INV-3"),
    (wrong_parent_pointer, "INV-3"),
    (reachable_evicted_node, "INV-3"),
    (foreign_namespace_child, "INV-4"),
    (wrong_lock_ref, "INV-5"),
    (negative_held_locks, "INV-5"),
    (wrong_evictable_counter, "INV-6"),
    (wrong_protected_counter, "INV-6"),
    (shared_index, "INV-7"),
    (child_newer_than_parent, "INV-8"),
    (stale_hash, "INV-9"),
    (hashed_before_parent, "INV-9"),
]


@pytest.mark.parametrize(
    ("corrupt", "inv_id"), CORRUPTIONS, ids=[c.__name__ for c, _ in CORRUPTIONS]
)
def test_a_corruption_is_reported_with_its_invariant_id(
    healthy: CacheHarness, corrupt: Corruption, inv_id: str
) -> None:
    corrupt(healthy)
    with pytest.raises(InvariantViolation) as caught:
        healthy.cache.check_invariants()
    assert caught.value.inv_id == inv_id
    assert str(caught.value).startswith(f"{inv_id}: ")


def test_an_invariant_violation_is_not_a_usage_error() -> None:
    assert issubclass(InvariantViolation, AssertionError)
    assert not issubclass(InvariantViolation, UsageError)
    assert not issubclass(InvariantViolation, ValueError)
