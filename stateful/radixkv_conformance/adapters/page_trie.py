"""A planted cache of another shape: a page trie whose eviction cascades to parents.

``PageTrie`` is written as an engine developer writes a paged prefix cache, not around the
kit's rules: one node per page, children by page tokens, a lock count on every node of a
held path, and eviction from a heap of leaves where a parent that becomes a leaf is pushed
as the next candidate. It knows nothing of radixkv. ``bugs`` plants any of ``BUGS``::

    radixkv check radixkv_conformance.adapters.page_trie:factory --option bugs=cascade_locked

Without bugs it conforms to radixkv's profile (``tests/kit/test_no_false_pass.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

from radixkv_conformance.adapters._planting import planted_bugs
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host, Indices, Inserted, Sizes

PROFILE = RADIXKV

BUGS = {
    "cascade_locked": "a parent that an eviction leaves childless is evicted without "
    "checking its lock (a running request's KV is freed)",
    "stale_recency": "a match does not refresh the recency of the pages it hit",
    "split_lock": "a lock covers the held page and its parent only (a page further up "
    "the held path stays unlocked)",
    "reset_keeps_locks": "reset keeps the lock counts of the pages it drops",
}


class PageNode:
    """One page: its tokens, KV indices, parent, children, lock count and last use."""

    def __init__(self, page: tuple[int, ...], value: Indices, parent: PageNode | None) -> None:
        self.page = page
        self.value = value
        self.parent = parent
        self.children: dict[tuple[int, ...], PageNode] = {}
        self.lock_ref = 0  # locks held on this page or below it
        self.held = 0  # locks taken at exactly this page (what an unlock answers)
        self.last_use = 0
        self.alive = True

    def path(self) -> tuple[int, ...]:
        """The tokens from the root to the end of this page."""
        pages: list[tuple[int, ...]] = []
        node: PageNode | None = self
        while node is not None and node.parent is not None:
            pages.append(node.page)
            node = node.parent
        return tuple(t for page in reversed(pages) for t in page)


class PageTrie:
    """A paged prefix cache; ``free`` receives the indices of every page it deletes."""

    def __init__(self, page_size: int, free: Callable[[Indices], None], bugs: frozenset[str]):
        self.page_size = page_size
        self.free = free
        self.bugs = bugs
        self.roots: dict[str | None, PageNode] = {}
        self.clock = 0

    def _root(self, ns: str | None) -> PageNode:
        return self.roots.setdefault(ns, PageNode((), (), None))

    def _pages(self, tokens: tuple[int, ...]) -> list[tuple[int, ...]]:
        p = self.page_size
        return [tokens[i : i + p] for i in range(0, len(tokens) // p * p, p)]

    def _walk(self, tokens: tuple[int, ...], ns: str | None) -> list[PageNode]:
        node, hit = self._root(ns), []
        for page in self._pages(tokens):
            child = node.children.get(page)
            if child is None:
                break
            hit.append(child)
            node = child
        return hit

    def _touch(self, nodes: list[PageNode]) -> None:
        self.clock += 1
        for node in nodes:
            node.last_use = self.clock

    def match(self, tokens: tuple[int, ...], ns: str | None) -> tuple[Indices, PageNode]:
        hit = self._walk(tokens, ns)
        if "stale_recency" not in self.bugs:
            self._touch(hit)
        indices = tuple(i for node in hit for i in node.value)
        return indices, hit[-1] if hit else self._root(ns)

    def insert(
        self, tokens: tuple[int, ...], ns: str | None, value: Indices
    ) -> tuple[int, PageNode]:
        node, cached, path = self._root(ns), 0, []
        for n, page in enumerate(self._pages(tokens)):
            child = node.children.get(page)
            if child is None:
                start = n * self.page_size
                child = PageNode(page, tuple(value[start : start + self.page_size]), node)
                node.children[page] = child
            else:
                cached += self.page_size
            path.append(child)
            node = child
        self._touch(path)
        return cached, node

    def lock(self, node: PageNode) -> None:
        if not node.alive:
            raise ValueError("lock of an evicted page")
        node.held += 1
        for page in self._covered(node):
            page.lock_ref += 1

    def unlock(self, node: PageNode) -> None:
        if not node.alive or node.held == 0:
            raise ValueError("unlock of a page no lock holds")
        node.held -= 1
        for page in self._covered(node):
            page.lock_ref -= 1

    def _covered(self, node: PageNode) -> list[PageNode]:
        """The pages a lock on ``node`` holds: it and its ancestors below the root."""
        out = []
        at: PageNode | None = node
        while at is not None and at.parent is not None:
            out.append(at)
            at = at.parent
        return out[:2] if "split_lock" in self.bugs else out

    def nodes(self, roots: list[PageNode] | None = None) -> list[PageNode]:
        """Every page below ``roots`` (default: every namespace's root)."""
        out, stack = [], [c for r in roots or self.roots.values() for c in r.children.values()]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            out.append(node)
        return out

    def evict(self, num_tokens: int) -> int:
        """Least recently used unlocked leaves first; a parent left childless is the next
        candidate."""
        heap: list[tuple[int, int, PageNode]] = []
        for node in self.nodes():
            if not node.children and node.lock_ref == 0:
                heap.append((node.last_use, id(node), node))
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.page]
            node.alive = False
            self.free(node.value)
            freed += len(node.value)
            cascade = parent.parent is not None and not parent.children
            if cascade and ("cascade_locked" in self.bugs or parent.lock_ref == 0):
                heapq.heappush(heap, (parent.last_use, id(parent), parent))
        return freed

    def reset(self) -> None:
        for node in self.nodes():
            self.free(node.value)
            node.alive = "reset_keeps_locks" in self.bugs and node.lock_ref > 0
        if "reset_keeps_locks" not in self.bugs:
            for root in self.roots.values():
                root.alive = False  # a handle on a dropped root is stale too
            self.roots.clear()
            return
        for root in self.roots.values():
            root.children.clear()

    def sizes(self) -> Sizes:
        nodes = self.nodes()
        total = sum(len(n.value) for n in nodes)
        protected = sum(len(n.value) for n in nodes if n.lock_ref > 0)
        return Sizes(total - protected, protected, total)


class PageTrieAdapter:
    """The kit's adapter for ``PageTrie``: handles are its nodes."""

    capabilities = frozenset({"namespaces", "unlock_checks", "stale_handles", "reset"})
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)

    def __init__(self, page_size: int, host: Host, bugs: frozenset[str]) -> None:
        self.page_size = page_size
        self.cache = PageTrie(page_size, host.free, bugs)

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, PageNode]:
        return self.cache.match(tokens, namespace)

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        prefix_len, node = self.cache.insert(tokens, namespace, indices)
        return Inserted(prefix_len, node)

    def lock(self, handle: PageNode) -> None:
        if handle.parent is not None:
            self.cache.lock(handle)
        elif not handle.alive:  # a root protects nothing, but a dropped one is stale
            raise ValueError("lock of a dropped namespace root")

    def unlock(self, handle: PageNode, token: Any) -> None:
        if handle.parent is not None:
            self.cache.unlock(handle)
        elif not handle.alive:
            raise ValueError("unlock of a dropped namespace root")

    def evict(self, num_tokens: int) -> int:
        return self.cache.evict(num_tokens)

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> Sizes:
        return self.cache.sizes()

    def contents(self) -> dict[tuple[str | None, tuple[int, ...]], Indices]:
        return {(ns, node.path()): node.value for ns, node in self._pages()}

    def _pages(self) -> list[tuple[str | None, PageNode]]:
        return [(ns, n) for ns, root in self.cache.roots.items() for n in self.cache.nodes([root])]

    def snapshot(self) -> Hashable:
        return tuple(
            sorted(
                (repr(ns), n.path(), n.value, n.lock_ref, n.held, n.last_use)
                for ns, n in self._pages()
            )
        )

    def check(self) -> None:
        """``PageTrie`` has no check of its own."""


def factory(page_size: int, host: Host, bugs: str = "") -> PageTrieAdapter:
    """The trie with the bugs named in ``bugs`` (comma-separated names of ``BUGS``)."""
    planted = planted_bugs(bugs, BUGS)
    return PageTrieAdapter(page_size, host, planted)
