"""With ``memory=1``, states are told apart by the engine's memory, not only by the adapter's
snapshot.

``planted`` ``stale_order`` keeps the eviction order it sorted at one eviction for the next
ones (inserts keep it up to date, a match does not), and its adapter's snapshot shows pages,
locks and stamps, not that order. Merged by the snapshot, the state after an eviction of
nothing is the state before it, the exploration never expands it, and it reports a fixpoint
with the bug inside its bounds (the random search finds it). Keyed by the memory picture
too (``explore/memory.py``), the two-leaf stage finds it in five steps: two inserts, an
eviction, a match, an eviction.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from typing import Any

import pytest
from radixkv_conformance.adapters import planted
from radixkv_conformance.explore.bounds import TREE, parse_bounds
from radixkv_conformance.explore.memory import memory_picture
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.replay import replay

pytestmark = pytest.mark.search  # kit explorations: run once, not again on the pure key path

STALE = functools.partial(planted.factory, bugs="stale_order")
VICTIM_ORDER = "INV-11:evict-victim-order"
LEAVES = dataclasses.replace(TREE.stages()[1], depth=5, memory=1)  # two leaves, one namespace


def _machine(factory: Any) -> Any:
    return target("StaleOrder", factory, RADIXKV).machine()


def test_the_two_leaf_stage_finds_an_eviction_order_a_match_did_not_refresh() -> None:
    report = explore_states(_machine(STALE), LEAVES)
    assert list(report.findings) == [VICTIM_ORDER], report.render()
    found = report.findings[VICTIM_ORDER]
    rules = [step.rule for step in found.calls]
    assert rules[-1] == "evict" and "match" in rules and rules.count("evict") == 2, rules
    assert len(rules) == 5
    assert found.trace
    assert replay(found.trace, STALE, RADIXKV).finding == VICTIM_ORDER
    assert replay(found.trace, planted.factory, RADIXKV).passed  # the cache without the bug


def test_merged_by_the_snapshot_alone_the_same_bounds_reach_a_false_fixpoint() -> None:
    report = explore_states(_machine(STALE), dataclasses.replace(LEAVES, depth=None, memory=0))
    assert report.fixpoint and report.passed, report.render()


def test_memory_is_a_bound_of_zero_or_one() -> None:
    assert parse_bounds("memory=1").memory == 1
    assert "memory=1" in LEAVES.text()
    with pytest.raises(LookupError, match="expected 0 or 1"):
        parse_bounds("memory=2")


def test_the_clean_cache_passes_the_same_bounds() -> None:
    assert explore_states(_machine(planted.factory), LEAVES).passed


class _Node:
    def __init__(self, key: int, parent: _Node | None = None) -> None:
        self.key, self.parent = key, parent
        self.children: dict[int, _Node] = {}


def _tree(order: list[int]) -> _Node:
    root = _Node(0)
    for key in order:
        root.children[key] = _Node(key, root)
    return root


def test_a_picture_shows_what_a_snapshot_might_forget() -> None:
    cache = planted.PageMapCache(1, lambda _: None, frozenset({"stale_order"}))
    before = memory_picture(cache, ())
    cache.evict(0)  # sorts an eviction order it keeps: the pages, locks and stamps are as before
    assert memory_picture(cache, ()) != before


def test_equal_memories_have_equal_pictures_wherever_they_live() -> None:
    assert memory_picture(_tree([1, 2]), ()) == memory_picture(_tree([1, 2]), ())
    # a dict's order is state (an engine may evict in it); a set's is not (it is by address)
    assert memory_picture(_tree([1, 2]), ()) != memory_picture(_tree([2, 1]), ())
    assert memory_picture({_Node(1), _Node(2)}, ()) == memory_picture({_Node(2), _Node(1)}, ())
    ordered = OrderedDict([(1, "a"), (2, "b")])
    assert memory_picture(ordered, ()) != memory_picture(OrderedDict(reversed(ordered.items())), ())


def test_shared_objects_and_cycles_are_pictured_by_reference() -> None:
    shared = _Node(7)
    aliased = [shared, shared]
    copies = [_Node(7), _Node(7)]
    assert memory_picture(aliased, ()) != memory_picture(copies, ())
    root = _tree([1])
    assert memory_picture(root, ())[1] == ("dict", (1, ("ref", 2)))  # children by number
    child = memory_picture(root, ())[2]
    assert isinstance(child, tuple) and ("parent", ("ref", 0)) in child  # the cycle back


def test_a_long_linked_list_is_walked_not_recursed() -> None:
    head = tail = _Node(0)
    for key in range(1, 5_000):
        tail.children[key] = tail = _Node(key, tail)
    assert len(memory_picture(head, ())) == 2 * 5_000  # each node and its children dict


def test_the_walk_stops_at_the_kit() -> None:
    class Kit:
        def __init__(self) -> None:
            self.ledger = [1, 2, 3]

    class Adapter:
        def __init__(self, kit: Kit) -> None:
            self.kit, self.free = kit, kit.ledger.append

    picture = memory_picture(Adapter(Kit()), (Kit,))
    assert picture == (("Adapter", ("kit", ("kit", "Kit")), ("free", ("code", "list.append"))),)
