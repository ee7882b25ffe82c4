"""A small prefix cache of someone else's, with bugs that can be planted: the kit's own
check that it never passes a broken cache, and the worked example of docs/adapters.md.

``PageMapCache`` is what an engine developer might write in an afternoon: a dict from
(namespace, page path) to KV indices, lock counts per page, a logical clock per page, and
eviction of the least recently used unlocked leaf page. It knows nothing of radixkv.
``bugs`` plants any of ``BUGS`` in it; the factories below plant none (``factory``) or the
pairs the kit must report as separate findings, each with its own trace, where
acknowledging one (``--known``) never hides the other::

    radixkv check radixkv_conformance.adapters.planted:factory --option bugs=locked,order
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host, Indices, Sizes

PROFILE = RADIXKV

BUGS = {
    "locked": "eviction may take a locked page (a running request's KV is freed)",
    "order": "eviction takes the most recently used leaf, not the least",
    "count": "evict reports one token more than it freed",
    "short": "eviction stops one page before its target",
    "crash_insert": "insert asserts that a key is not exactly 3 pages long",
    "crash_evict": "evict asserts that it deletes at most one page per call",
}

Page = tuple[str | None, tuple[int, ...]]  # (namespace, the page path ending with the page)


class PageMapCache:
    """A prefix cache over whole pages; ``free`` receives every index it lets go."""

    def __init__(self, page_size: int, free: Callable[[Indices], None], bugs: frozenset[str]):
        self.page_size = page_size
        self.free = free
        self.bugs = bugs
        self.pages: dict[Page, Indices] = {}
        self.locks: dict[Page, int] = {}  # page -> locks on it or below it
        self.held: Counter[Page] = Counter()  # page -> locks taken at exactly that page
        self.used: dict[Page, int] = {}  # page -> logical time of its last use
        self.clock = 0

    def _path_pages(self, ns: str | None, tokens: tuple[int, ...]) -> list[Page]:
        p = self.page_size
        return [(ns, tokens[:end]) for end in range(p, len(tokens) // p * p + 1, p)]

    def _touch(self, pages: list[Page]) -> None:
        self.clock += 1
        for page in pages:
            self.used[page] = self.clock

    def match(self, tokens: tuple[int, ...], ns: str | None) -> tuple[Indices, Page]:
        hit = []
        for page in self._path_pages(ns, tokens):
            if page not in self.pages:
                break
            hit.append(page)
        self._touch(hit)
        indices = tuple(i for page in hit for i in self.pages[page])
        return indices, hit[-1] if hit else (ns, ())

    def insert(self, tokens: tuple[int, ...], ns: str | None, indices: Indices) -> int:
        """Cache ``tokens``; keep the indices already cached; return how many were."""
        path = self._path_pages(ns, tokens)
        if "crash_insert" in self.bugs:
            assert len(path) != 3, "a key of exactly 3 pages"
        cached = 0
        for n, page in enumerate(path):
            if page in self.pages:
                cached += self.page_size
            else:
                self.pages[page] = tuple(indices[n * self.page_size : (n + 1) * self.page_size])
                self.locks[page] = 0
        self._touch(path)
        return cached

    def lock(self, page: Page) -> None:
        self.held[page] += 1
        for above in self._path_pages(page[0], page[1]):
            self.locks[above] += 1

    def unlock(self, page: Page) -> None:
        if self.held[page] == 0:  # a lock taken below this page is not this one's
            raise ValueError(f"unlock of {page!r}, which no lock holds")
        self.held[page] -= 1
        for q in self._path_pages(page[0], page[1]):
            self.locks[q] -= 1

    def _is_leaf(self, page: Page) -> bool:
        ns, path = page
        return not any(q[0] == ns and q[1][: len(path)] == path and q != page for q in self.pages)

    def _victim(self) -> Page | None:
        leaves = [q for q in self.pages if self._is_leaf(q)]
        if "locked" not in self.bugs:
            leaves = [q for q in leaves if self.locks[q] == 0]
        if not leaves:
            return None
        pick = max if "order" in self.bugs else min
        return pick(leaves, key=lambda q: (self.used[q], q[1], str(q[0])))

    def evict(self, num_tokens: int) -> int:
        target = num_tokens - self.page_size if "short" in self.bugs else num_tokens
        freed = deleted = 0
        while freed < target and (victim := self._victim()) is not None:
            deleted += 1
            if "crash_evict" in self.bugs:
                assert deleted == 1, "evicting more than one page per call"
            self.free(self.pages.pop(victim))
            del self.locks[victim], self.used[victim]
            freed += self.page_size
        return freed + 1 if "count" in self.bugs and freed else freed

    def reset(self) -> None:
        for indices in self.pages.values():
            self.free(indices)
        self.pages.clear()
        self.locks.clear()
        self.used.clear()
        self.held.clear()


class PageMapAdapter:
    """The kit's adapter for ``PageMapCache`` (docs/adapters.md walks through it)."""

    capabilities = frozenset({"namespaces", "unlock_checks", "reset"})
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)

    def __init__(self, page_size: int, host: Host, bugs: frozenset[str]) -> None:
        self.page_size = page_size
        self.cache = PageMapCache(page_size, host.free, bugs)

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, Page]:
        return self.cache.match(tokens, namespace)

    def insert(
        self, tokens: tuple[int, ...], namespace: str | None, indices: Indices
    ) -> tuple[int, Page]:
        prefix_len = self.cache.insert(tokens, namespace, indices)
        aligned = len(tokens) // self.page_size * self.page_size
        return prefix_len, (namespace, tokens[:aligned])

    def lock(self, handle: Page) -> None:
        self.cache.lock(handle)

    def unlock(self, handle: Page, token: Any) -> None:
        self.cache.unlock(handle)

    def evict(self, num_tokens: int) -> int:
        return self.cache.evict(num_tokens)

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> Sizes:
        p, locks = self.page_size, self.cache.locks
        total = p * len(self.cache.pages)
        protected = p * sum(1 for q in self.cache.pages if locks[q] > 0)
        return Sizes(total - protected, protected, total)

    def contents(self) -> dict[Page, Indices]:
        return dict(self.cache.pages)

    def snapshot(self) -> Hashable:
        c = self.cache
        pages = sorted((repr(q), v, c.locks[q], c.held[q], c.used[q]) for q, v in c.pages.items())
        return tuple(pages)

    def check(self) -> None:
        """``PageMapCache`` has no check of its own."""


def factory(page_size: int, host: Host, bugs: str = "") -> PageMapAdapter:
    """The cache with the bugs named in ``bugs`` (comma-separated names of ``BUGS``)."""
    planted = frozenset(b for b in bugs.split(",") if b)
    unknown = planted - set(BUGS)
    if unknown:
        raise ValueError(f"unknown bugs {sorted(unknown)}; known: {sorted(BUGS)}")
    return PageMapAdapter(page_size, host, planted)
