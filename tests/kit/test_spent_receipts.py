"""A spent lock receipt handed back (issue 39, item 1).

Under per-sequence locks (MAX's ``mark_in_use_by`` / ``mark_not_in_use_by``) a receipt is
the sequence's id: once its unlock went through, the sequence holds nothing, and an unlock
with that receipt again must be rejected whoever else holds the node. A cache that checks
only that *someone* holds the node (a lease slot without its generation) accepts it and
releases the current holder: an eviction then frees a running request's KV. The kit once
handed back only ``None`` receipts; it now keeps released ones and tries them again.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import max_trie
from radixkv_conformance.explore.bounds import parse_bounds
from radixkv_conformance.protocol import Host

import radixkv

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

QUICK = settings(max_examples=30, stateful_step_count=20, deadline=None, database=None)
# five steps: insert, lock (A), unlock (A), lock (B), unlock with A's receipt again
FIVE_STEPS = parse_bounds("tokens=1,length=1,namespaces=1,depth=5")
SPENT = "INV-14:unlock-with-a-spent-receipt"


class SlotOnlyTrie(radixkv.RadixTrie):
    """Takes a receipt it once issued as the node's current holder's: a lease slot checked
    without its generation (a receipt it never issued, ``None``, is still refused)."""

    def mark_not_in_use_by(self, node: Any, seq_id: Hashable) -> None:
        issued = isinstance(seq_id, int)
        if issued and seq_id not in node.active_seqs and node.active_seqs:
            seq_id = min(node.active_seqs)  # the slot's current holder, not the receipt's
        super().mark_not_in_use_by(node, seq_id)


def slot_only(page_size: int, host: Host) -> max_trie.RadixTrieAdapter:
    adapter = max_trie.factory(page_size, host)
    adapter.trie.__class__ = SlotOnlyTrie
    return adapter


def _findings(factory: Any) -> list[str]:
    report = run_conformance(
        factory, profile=max_trie.PROFILE, settings=QUICK, name=factory.__name__, explore=FIVE_STEPS
    )
    return [failure.finding for failure in report.failures]


def test_a_receipt_checked_by_slot_only_is_found() -> None:
    """Found by a receipt the slot's sequence no longer holds: spent, or (where the
    exploration, time-bounded, got less deep on a busy machine) another sequence's. An
    unlock with no receipt is refused as it was."""
    found = _findings(slot_only)
    assert found and set(found) <= {SPENT, FOREIGN}, found


def test_radixkv_trie_rejects_every_spent_receipt() -> None:
    assert _findings(max_trie.factory) == []


# ---- a second lock by the sequence that holds the path (capability relock) ----------------


class CountingTrie(radixkv.RadixTrie):
    """Marks a path again for a sequence that holds it already: its one release leaves the
    path held for good (the idempotence guard of ``mark_in_use_by`` removed)."""

    def mark_in_use_by(self, node: Any, seq_id: Hashable) -> None:
        for n in radixkv.tree.path_to_root(self.tree.require_live(node)):
            n.active_seqs.add(seq_id)
            self.tree.protect(n)


def counting(page_size: int, host: Host) -> max_trie.RadixTrieAdapter:
    adapter = max_trie.factory(page_size, host)
    adapter.trie.__class__ = CountingTrie
    return adapter


# insert, lock (A), lock again by A, unlock (A): the path must be free again
RELOCK = parse_bounds("tokens=1,length=1,namespaces=1,depth=4,floor=4")


def test_a_second_mark_that_counts_is_found() -> None:
    report = run_conformance(
        counting, profile=max_trie.PROFILE, settings=QUICK, name="counting", explore=RELOCK
    )
    # the trie's own check names it first: one sequence, counted twice on the path
    assert [f.finding for f in report.failures] == [
        "INV-5:own-check-node-n-lock-ref-n-for-n-sequences"
    ]
    assert any("again" in step for step in report.failures[0].trace["steps"])


def test_radixkv_trie_takes_a_second_lock_by_its_sequence_as_nothing() -> None:
    drawn = settings(QUICK, derandomize=True, max_examples=60)  # 26 second locks today
    report = run_conformance(
        max_trie.factory, profile=max_trie.PROFILE, settings=drawn, name="trie", explore=RELOCK
    )
    assert report.passed and report.stats["lock again by its sequence"] > 0, report.render()


# ---- an unlock with another sequence's receipt -------------------------------------------------

FOREIGN = "INV-14:unlock-with-another-sequence-s-receipt"


class AnyHolderTrie(radixkv.RadixTrie):
    """Releases a node for whichever sequence holds it, whatever receipt the caller gives."""

    def mark_not_in_use_by(self, node: Any, seq_id: Hashable) -> None:
        if seq_id not in node.active_seqs and node.active_seqs:
            seq_id = min(node.active_seqs)
        super().mark_not_in_use_by(node, seq_id)


def any_holder(page_size: int, host: Host) -> max_trie.RadixTrieAdapter:
    adapter = max_trie.factory(page_size, host)
    adapter.trie.__class__ = AnyHolderTrie
    return adapter


def test_an_unlock_with_another_sequences_receipt_is_found() -> None:
    two_keys = parse_bounds("tokens=2,length=1,namespaces=1,locks=2,depth=5,floor=5")
    # its other symptoms (no receipt at all, a spent one) acknowledged: this one stays
    known = ["INV-14:unmatched-unlock", SPENT]
    report = run_conformance(
        any_holder, profile=max_trie.PROFILE, settings=QUICK, explore=two_keys, known=known
    )
    assert [failure.finding for failure in report.failures] == [FOREIGN], report.render()
