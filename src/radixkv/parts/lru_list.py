"""LRUList: an intrusive doubly linked list of MambaTreeNodes, most recently used first.

The links live on the nodes (``prev``/``next``, or ``mamba_prev``/``mamba_next`` for the
mamba list), so insert, remove and touch are O(1) and need no dict. A node is a member
exactly when it names the list as its own (``lru_list`` / ``mamba_lru_list``), so one list
never takes another's member for its own. Misuse (a second insert, removing or touching a
non-member) is a ``UsageError`` raised before any link changes, never a corrupted list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from radixkv.base import RadixKey
from radixkv.errors import UsageError
from radixkv.parts.mamba_node import MambaTreeNode


class LRUList:
    """Sentinel ``head`` (MRU side) and ``tail`` (LRU side) around the member nodes.

    ``mamba=False`` orders the full-KV list by ``full_lock_ref``-style locks; ``mamba=True``
    uses the mamba links and ``mamba_lock_ref``.
    """

    def __init__(self, mamba: bool = False) -> None:
        self.mamba = mamba
        links = ("mamba_prev", "mamba_next", "mamba_lru_list")
        self._prev, self._next, self._owner = links if mamba else ("prev", "next", "lru_list")
        self.head = MambaTreeNode(-1, RadixKey(()), None, None, 0)
        self.tail = MambaTreeNode(-2, RadixKey(()), None, None, 0)
        self._link(self.head, self.tail)
        self._size = 0

    # ---- links -------------------------------------------------------------------------

    def _after(self, node: MambaTreeNode) -> MambaTreeNode | None:
        return cast("MambaTreeNode | None", getattr(node, self._next))

    def _before(self, node: MambaTreeNode) -> MambaTreeNode | None:
        return cast("MambaTreeNode | None", getattr(node, self._prev))

    def _link(self, first: MambaTreeNode, second: MambaTreeNode) -> None:
        setattr(first, self._next, second)
        setattr(second, self._prev, first)

    def _unlink(self, node: MambaTreeNode) -> None:
        before, after = self._before(node), self._after(node)
        assert before is not None and after is not None
        self._link(before, after)
        setattr(node, self._prev, None)
        setattr(node, self._next, None)

    def _splice_after(self, anchor: MambaTreeNode, node: MambaTreeNode) -> None:
        after = self._after(anchor)
        assert after is not None
        self._link(anchor, node)
        self._link(node, after)

    # ---- membership --------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def __contains__(self, node: object) -> bool:
        return isinstance(node, MambaTreeNode) and getattr(node, self._owner) is self

    def __iter__(self) -> Iterator[MambaTreeNode]:
        """Members from the most to the least recently used."""
        node = self._after(self.head)
        while node is not None and node is not self.tail:
            yield node
            node = self._after(node)

    def _adopt(self, node: MambaTreeNode) -> None:
        setattr(node, self._owner, self)
        self._size += 1

    def _require_member(self, node: MambaTreeNode, what: str) -> None:
        if node not in self:
            raise UsageError(f"LRUList.{what}: node {node.id} is not in the list")

    def _require_new(self, node: MambaTreeNode) -> None:
        if node in self or node is self.head or node is self.tail:
            raise UsageError(f"LRUList.insert: node {node.id} is already in the list")

    # ---- updates (all O(1)) ------------------------------------------------------------

    def insert_mru(self, node: MambaTreeNode) -> None:
        """Insert *node* at the MRU (head) position; a member cannot be inserted again."""
        self._require_new(node)
        self._splice_after(self.head, node)
        self._adopt(node)

    def insert_after(self, anchor: MambaTreeNode, node: MambaTreeNode) -> None:
        """Insert *node* just behind *anchor*: less recent than it, more than the rest.

        A split puts its new upper node here, right behind the lower part it came from.
        """
        self._require_member(anchor, "insert_after")
        self._require_new(node)
        self._splice_after(anchor, node)
        self._adopt(node)

    def remove(self, node: MambaTreeNode) -> None:
        """Remove *node* from the list."""
        self._require_member(node, "remove")
        self._unlink(node)
        setattr(node, self._owner, None)
        self._size -= 1

    def touch_mru(self, node: MambaTreeNode) -> None:
        """Move the member *node* to the MRU position."""
        self._require_member(node, "touch_mru")
        self._unlink(node)
        self._splice_after(self.head, node)

    def touch_node_and_parents_mru(self, node: MambaTreeNode, root: MambaTreeNode) -> None:
        """Move *node* and its ancestors below *root* to the MRU end, child first.

        Ancestors that are not members (in the mamba list: nodes without state) are
        skipped. O(depth).
        """
        anchor = self.head
        current: MambaTreeNode | None = node
        while current is not None and current is not root:
            if current in self:
                if self._after(anchor) is not current:  # else it is in place already
                    self._unlink(current)
                    self._splice_after(anchor, current)
                anchor = current
            current = cast("MambaTreeNode | None", current.parent)

    # ---- eviction queries --------------------------------------------------------------

    def _lock(self, node: MambaTreeNode) -> int:
        return node.mamba_lock_ref if self.mamba else node.lock_ref

    def get_lru_leaf_unlocked(self) -> MambaTreeNode | None:
        """The least recently used member with no children and lock 0, or ``None``.

        Scans from the tail past locked nodes and inner nodes: O(members behind the answer).
        Parents sit behind their children, so inner nodes gather at the tail end.
        """
        node = self._before(self.tail)
        while node is not None and node is not self.head:
            if not node.children and self._lock(node) == 0:
                return node
            node = self._before(node)
        return None

    def get_lru_unlocked(self) -> MambaTreeNode | None:
        """The least recently used member with lock 0, or ``None``; O(locked members behind)."""
        node = self._before(self.tail)
        while node is not None and node is not self.head:
            if self._lock(node) == 0:
                return node
            node = self._before(node)
        return None
