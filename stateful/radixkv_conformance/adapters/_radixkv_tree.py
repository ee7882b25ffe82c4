"""radixkv's tree read without changing it, for its adapters (``adapters/radixkv.py``,
``adapters/max_trie.py``): walks of its nodes and paths, and the tree in canonical terms
(``CanonicalTree``) for the state explorer's canonical states."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, cast

from radixkv.parts import MambaTreeNode
from radixkv.tree import TreeNode


class CanonicalTree:
    """One tree in canonical terms: each node named by its place in a walk from the root
    (children in the tree's own order, which a future may read), ids and births ranked
    together (an id orders ties; every new one is above every live one), stamps ranked
    densely (ties kept: one touch stamps a whole path)."""

    def __init__(self, root: TreeNode, reads_hits: bool) -> None:
        self.walk = [root, *walk_nodes(root)]
        self.place = {id(node): at for at, node in enumerate(self.walk)}
        self.ids = ranks({n.id for n in self.walk} | {n.birth for n in self.walk})
        self.stamps = ranks({n.last_access_time for n in self.walk})
        self.reads_hits = reads_hits

    def name(self, handle: Any) -> Hashable:
        """A node of this tree by its place; anything else (a lock token, a detached
        node) by its own plain value, never by an id the cache made up."""
        if isinstance(handle, TreeNode):
            at = self.place.get(id(handle))
            return ("node", at) if at is not None else ("detached", handle.tokens)
        return ("value", handle if isinstance(handle, (int, str, type(None))) else repr(handle))

    def nodes(self, extra: Callable[[Any], tuple[Hashable, ...]]) -> Hashable:
        return tuple(
            (
                self.place.get(id(node.parent)),
                node.extra_key,
                node.tokens,
                tuple(node.value.tolist()) if node.value is not None else None,
                self.stamps[node.last_access_time],
                self.ids[node.id],
                self.ids[node.birth],
                node.hit_count if self.reads_hits else None,
                node.priority,
                *extra(node),
            )
            for node in self.walk
        )


def walk_nodes(root: TreeNode) -> list[TreeNode]:
    """Every node below ``root``, parents first, children in the tree's order."""
    out: list[TreeNode] = []
    stack = list(reversed(root.children.values()))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children.values()))
    return out


def ranks(values: Iterable[Any]) -> dict[Any, int]:
    """Each distinct value's rank among ``values`` (equal values share one)."""
    return {value: rank for rank, value in enumerate(sorted(set(values)))}


def paths_below(root: TreeNode) -> list[tuple[TreeNode, tuple[int, ...]]]:
    """Every node below ``root`` with the full token path ending at it."""
    out: list[tuple[TreeNode, tuple[int, ...]]] = []
    stack: list[tuple[TreeNode, tuple[int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            child_path = path + cast(tuple[int, ...], child.tokens)  # the kit uses ints
            out.append((child, child_path))
            stack.append((child, child_path))
    return out


def nodes_along(
    root: TreeNode, tokens: tuple[int, ...], namespace: Any
) -> list[tuple[TreeNode, int]]:
    """The nodes on the cached path of ``tokens`` in ``namespace``, from the root's child
    down, each with the token offset it begins at (read only: no split, no stamp)."""
    out: list[tuple[TreeNode, int]] = []
    node, start = root, 0
    while start < len(tokens):
        rest = tokens[start:]
        below = [c for c in node.children.values() if c.extra_key == namespace and _on(c, rest)]
        if not below:
            break
        node = below[0]
        out.append((node, start))
        start += len(node)
    return out


def _on(node: TreeNode, tokens: tuple[int, ...]) -> bool:
    """Whether ``tokens`` go on into ``node``: its key agrees with them as far as both go."""
    edge = cast(tuple[int, ...], node.tokens)  # the kit uses ints
    return edge[: len(tokens)] == tokens[: len(edge)]


def mamba_path(node: MambaTreeNode) -> tuple[int, ...]:
    parts: list[tuple[int, ...]] = []
    current = node
    while current.parent is not None:
        parts.append(cast(tuple[int, ...], current.tokens))  # the kit uses int tokens
        current = cast(MambaTreeNode, current.parent)
    return tuple(t for part in reversed(parts) for t in part)
