"""MambaTreeNode: a core tree node plus one recurrent-state slot and two LRU list links.

Kept apart from the cache so that ``LRUList`` can link nodes without importing the cache.
"""

from __future__ import annotations

from typing import Any

import torch

from radixkv.tree import TreeNode


class MambaTreeNode(TreeNode):
    """A radix node of a hybrid (attention + SSM) model.

    ``value`` holds the KV indices of the node's tokens, as in every tree node.
    ``mamba_value`` is a 1-element int64 CPU tensor naming the state slot that holds the
    recurrent state after the node's *last* token, or ``None`` (a mamba tombstone: the KV
    is cached, the state is not). The root's ``mamba_value`` is an empty tensor: the initial
    state, which needs no slot. ``full_lock_ref`` is the core ``lock_ref`` (handles at this
    node or below); ``mamba_lock_ref`` counts the handles held at exactly this node, each of
    which protects its state: it is the core ``held_locks``, under the seed's name.
    ``prev``/``next`` link the full LRU list and ``mamba_prev``/``mamba_next`` the mamba
    one; ``lru_list`` and ``mamba_lru_list`` name the list the node belongs to (``None``:
    not a member), so no list mistakes another's member for its own.
    """

    __slots__ = (
        "lru_list",
        "mamba_lru_list",
        "mamba_next",
        "mamba_prev",
        "mamba_value",
        "next",
        "prev",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``TreeNode``'s arguments and defaults (``MambaTreeNode()``: the seed's default)."""
        super().__init__(*args, **kwargs)
        self.mamba_value: torch.Tensor | None = None
        self.prev: MambaTreeNode | None = None
        self.next: MambaTreeNode | None = None
        self.mamba_prev: MambaTreeNode | None = None
        self.mamba_next: MambaTreeNode | None = None
        self.lru_list: object = None
        self.mamba_lru_list: object = None

    @property
    def full_lock_ref(self) -> int:
        return self.lock_ref

    @full_lock_ref.setter
    def full_lock_ref(self, count: int) -> None:
        self.lock_ref = count

    @property
    def mamba_lock_ref(self) -> int:
        return self.held_locks

    @mamba_lock_ref.setter
    def mamba_lock_ref(self, count: int) -> None:
        self.held_locks = count

    @property
    def mamba_tombstone(self) -> bool:
        """The node has full KV but its mamba state was evicted (or never given)."""
        return self.value is not None and self.mamba_value is None

    @property
    def slot(self) -> int | None:
        """The state slot this node owns; ``None`` for a tombstone and for the root."""
        value = self.mamba_value
        if value is None or value.numel() == 0:
            return None
        # A CPU tensor: no device synchronisation. ``item`` makes no tensor (``value[0]``
        # would: an allocation, several µs in a busy process).
        return int(value.item()) if value.numel() == 1 else int(value[0])

    def __repr__(self) -> str:
        return (
            f"MambaTreeNode(id={self.id}, key={self.shown_key()}, extra_key={self.extra_key!r}, "
            f"slot={self.slot}, full_lock_ref={self.lock_ref}, "
            f"mamba_lock_ref={self.mamba_lock_ref}, t={self.last_access_time})"
        )
