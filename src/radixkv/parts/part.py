"""``Part``: what a capability adds to the one tree every cache is (SPEC.md, Architecture).

A cache is one ``Tree`` (tree.py: ids, token sizes, locks, recency, shape) plus one part.
The cache runs every operation once, for every capability: one match, one insert, one
eviction loop, one reset, one lock path, one printer (radix_cache.py). At fixed points it
asks its part: where a match may end (before anything is split), who owns the indices an
insert brings, what deleting a node frees besides its KV, what a second eviction phase
frees, what a lock protects. A part changes the tree only through its public surface and
learns of every change of shape through the tree's hooks (``on_added``, ``on_deleted``,
``on_split``, ``on_touched``); what it keeps per node lives on its own node class
(``node_class``) or in its own maps, never on every ``TreeNode``.

``Part`` itself is the part of a cache with nothing beyond the tree (full attention):
every hook is the identity or does nothing. ``SlidingWindow`` (swa.py) and
``MambaStates`` (mamba.py) are the others; the package's docstring (parts/__init__.py)
tabulates what each does at each hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar, Generic

import torch

from radixkv.arguments import require_no_boundary
from radixkv.base import EvictResult
from radixkv.keys import KeyData
from radixkv.tree import Descent, N, TreeNode

Delete = Callable[[N, EvictResult], None]  # the cache's delete-a-leaf-with-cascade
MakeRoom = Callable[[N], None]  # the cache's "free one state, keeping this node's"


class Part(Generic[N]):
    """Full attention: every cached token is usable, an insert's duplicates stay the
    caller's to free, a node holds nothing but its KV.

    Generic in the node class of its tree: a cache builds its tree with the part's
    ``node_class`` and sees every part as a ``Part[TreeNode]``.
    """

    node_class: ClassVar[type[TreeNode]] = TreeNode
    branches: ClassVar[bool] = False
    """Whether a match reports ``mamba_branching_seqlen`` (how far the KV alone matched)."""

    # ---- match ---------------------------------------------------------------------------

    def match_end(self, walk: Descent[N]) -> tuple[int, bool]:
        """Where a match may end, decided before the tree changes: whether the cache splits
        ``walk.partial`` (the node the key ends inside) and appends its upper part to the
        path, and how many nodes of that path the match keeps."""
        split = walk.partial is not None
        return len(walk.path) + split, split

    def copy_state(self, node: N, make_room: MakeRoom[N]) -> tuple[int | None, bool]:
        """``match_prefix(key, cow=True)``: a private copy of ``node``'s state for the
        caller, and whether the match is usable (a state that could not be copied is not).
        Nothing to copy here."""
        return None, True

    # ---- insert --------------------------------------------------------------------------

    def check_insert(self, prev_prefix_len: int, swa_evicted: int) -> None:
        """Reject an insert's keywords before anything changes."""

    def check_new(self, new: KeyData, slot: int | None) -> None:
        """Reject an insert of ``new`` tokens with state slot ``slot`` before anything changes."""

    def insert_overlap(
        self, path: list[N], value: torch.Tensor, prev_prefix_len: int, swa_evicted: int
    ) -> N | None:
        """Settle the cached part of an inserted key; returns the node ending it."""
        return path[-1] if path else None

    def suffix_split(self, start: int, end: int, swa_evicted: int) -> int:
        """Where the new suffix [start, end) turns live; ``end`` means: add nothing."""
        return start

    def add_tombstone(
        self, parent: N, data: KeyData, extra_key: str | None, value: torch.Tensor
    ) -> N:
        raise AssertionError("only a sliding window adds a tombstone (suffix_split)")

    def settle_end(self, node: N, slot: int | None, added: bool) -> bool:
        """The inserted key ends at ``node`` (``added``: a leaf the insert added); returns
        ``mamba_exist``. A ``mamba_value`` means nothing here and stays the caller's."""
        return False

    # ---- locks ---------------------------------------------------------------------------

    def check_lock(self, node: N) -> None:
        """Reject ``inc_lock_ref(node)`` before anything changes."""

    def lock(self, node: N) -> int | None:
        """What the part protects for one more handle on ``node`` (already counted by the
        tree); returns ``inc_lock_ref``'s value."""
        return None

    def check_unlock(self, node: N, boundary: int | None) -> None:
        require_no_boundary(boundary)

    def unlock(self, node: N, boundary: int | None) -> None:
        """Undo one ``lock(node)``, before the tree drops the handle."""

    # ---- eviction ------------------------------------------------------------------------

    def tombstone(self, node: N) -> bool:
        """Whether ``node`` is useless as a leaf (deleting a child deletes it too)."""
        return False

    def evicted(self, node: N, result: EvictResult) -> None:
        """``node`` was deleted and its KV freed: free and count what the part held."""

    def evict(self, num_tokens: int, result: EvictResult, delete: Delete[N]) -> None:
        """Phase 2 of ``evict(_, num_tokens)``: what the part frees besides whole leaves."""

    def dropped(self, node: N) -> None:
        """``reset``: ``node`` was dropped and its KV freed; free what the part held."""

    def reset(self) -> None:
        """``reset``: the tree starts over with a new root."""

    # ---- sizes and debugging ---------------------------------------------------------------

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def sizes(self) -> Iterator[str]:
        """The part's size counters for ``pretty_print``'s first line."""
        return iter(())

    def check(self) -> None:
        """The part's invariants (SPEC.md); raises InvariantViolation."""
