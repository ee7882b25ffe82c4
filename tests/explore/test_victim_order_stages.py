"""The tree exploration's stages reach two eviction orders a random search found on about
half its draws (issue 39, the kit-only sweep): a re-insert that lowers a page's priority
(the two-leaf stage, whose inserts carry priorities 0 and 1) and a split whose upper half
loses its first-in-first-out place (the two-namespace stage, four steps deep). Each is
planted in radixkv's own cache for the test; the clean cache passes the same bounds."""

from __future__ import annotations

import dataclasses

import pytest
from radixkv_conformance.adapters import radixkv as own
from radixkv_conformance.explore.bounds import TREE, Bounds
from radixkv_conformance.explore.sequences import target
from radixkv_conformance.explore.states import explore_states
from radixkv_conformance.findings import Failure
from radixkv_conformance.profile import RADIXKV_POLICIES

from radixkv import eviction, radix_cache

pytestmark = pytest.mark.search
VICTIM_ORDER = "INV-11:evict-victim-order"
_, LEAVES, _, TWO_NAMESPACES = TREE.stages()


def _lowering_priority(end: eviction.Ranked, cached_end: eviction.Ranked, priority: int) -> None:
    """The planted bug: every node on the key takes the insert's priority, lower or not."""
    node = end
    while node.parent is not None:
        node.priority = priority
        node = node.parent


def _explore(policy: str, stage: Bounds, depth: int) -> dict[str, Failure]:
    """The findings of one stage, to ``depth`` steps, on radixkv's cache under ``policy``."""
    factory = getattr(own, f"policy_{policy}")
    machine = target(policy, factory, RADIXKV_POLICIES[policy]).machine()
    return explore_states(machine, dataclasses.replace(stage, depth=depth)).findings


def test_the_two_leaf_stage_finds_a_reinsert_that_lowers_a_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert LEAVES.priorities == (0, 1)
    assert not _explore("priority", LEAVES, depth=4)
    monkeypatch.setattr(radix_cache, "apply_priority", _lowering_priority)
    found = _explore("priority", LEAVES, depth=4)
    assert VICTIM_ORDER in found and len(found[VICTIM_ORDER].calls) == 4


def test_the_two_namespace_stage_finds_a_split_that_loses_its_fifo_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert TWO_NAMESPACES.floor >= 4
    assert not _explore("fifo", TWO_NAMESPACES, depth=4)
    monkeypatch.setattr(eviction.Fifo, "key", lambda self, node: (node.id,))
    found = _explore("fifo", TWO_NAMESPACES, depth=4)
    assert VICTIM_ORDER in found and len(found[VICTIM_ORDER].calls) == 4
