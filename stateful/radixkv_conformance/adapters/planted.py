"""A small prefix cache of someone else's, with bugs that can be planted: the kit's own
check that it never passes a broken cache, and the larger example of docs/adapters.md.

``PageMapCache`` is what an engine developer might write in an afternoon: a dict from
(namespace, page path) to KV indices, lock counts per page, a logical clock per page, and
eviction of the least recently used unlocked leaf page. It knows nothing of radixkv.
``bugs`` plants any of ``BUGS`` in it, e.g. pairs the kit must report as separate findings,
each with its own trace, where acknowledging one (``--known``) never hides the other::

    radixkv check radixkv_conformance.adapters.planted:factory --option bugs=locked,order

``shape`` gives it the legitimate habits of another engine, which a profile names
(``SHAPES``): ``vllm`` (lookups leave recency alone, a release refreshes it, reset is
refused while anything is held, its own page hashes, ``""`` is no namespace) and ``max``
(one flat list of evicted indices per call, a release refreshes recency)::

    radixkv check radixkv_conformance.adapters.planted:vllm_shaped
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from radixkv_conformance.adapters._planting import planted_bugs
from radixkv_conformance.profile import RADIXKV, VLLM_HABITS
from radixkv_conformance.protocol import Host, Indices, Inserted, Sizes

PROFILE = RADIXKV


@dataclass(frozen=True)
class Shape:
    """Habits of an engine that are not bugs: the profile of the same name admits them."""

    refresh_on_match: bool = True
    refresh_on_unlock: bool = False
    reset_refused_while_held: bool = False
    flat_evictions: bool = False
    own_hashes: bool = False
    pool_pages: int = 0  # > 0: the cache owns a pool of this many pages and allocates itself


SHAPES = {
    "": Shape(),
    "vllm": Shape(
        refresh_on_match=False,
        refresh_on_unlock=True,
        reset_refused_while_held=True,
        own_hashes=True,
        pool_pages=8,
    ),
    "max": Shape(refresh_on_unlock=True, flat_evictions=True),
}
PROFILES = {
    "vllm_shaped": VLLM_HABITS.but(
        name="planted-vllm",
        notes=(
            "vLLM's habits: no refresh on lookup, reset refused while held, own hashes, its "
            "own block pool (an insert evicts to make room)."
        ),
    ),
    "max_shaped": RADIXKV.but(
        name="planted-max",
        refresh_on=frozenset({"insert", "match", "unlock"}),
        eviction_report="flat",
        notes="MAX's habits: a flat list of evicted indices, a release refreshes recency.",
    ),
}

BUGS = {
    "locked": "eviction may take a locked page (a running request's KV is freed)",
    "order": "eviction takes the most recently used leaf, not the least",
    "count": "evict reports one token more than it freed",
    "short": "eviction stops one page before its target",
    "crash_insert": "insert asserts that a key is not exactly 3 pages long",
    "crash_evict": "evict asserts that it deletes at most one page per call",
    "stale_order": "the eviction order is sorted at an eviction and kept for the next ones "
    "(an insert moves its pages to the back), but a match that refreshes a page does not "
    "move it: a later eviction takes the page a request has just matched",
    "held_after_reset": "reset forgets to clear the per-page lock records, so an unlock that "
    "no lock of this run matches is accepted on a page cached again since",
}

Page = tuple[str | None, tuple[int, ...]]  # (namespace, the page path ending with the page)


class PageMapCache:
    """A prefix cache over whole pages; ``free`` receives every index it lets go."""

    def __init__(
        self,
        page_size: int,
        free: Callable[[Indices], None],
        bugs: frozenset[str],
        shape: Shape = SHAPES[""],
    ) -> None:
        self.page_size = page_size
        self.free = free
        self.bugs = bugs
        self.shape = shape
        self.pages: dict[Page, Indices] = {}
        self.locks: dict[Page, int] = {}  # page -> locks on it or below it
        self.held: Counter[Page] = Counter()  # page -> locks taken at exactly that page
        self.used: dict[Page, int] = {}  # page -> logical time of its last use
        self.clock = 0
        self.order: list[Page] | None = None  # "stale_order": the order the last eviction sorted
        self.free_pages = list(range(shape.pool_pages))  # page numbers of an owned pool
        self.pool_size = shape.pool_pages

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
        if self.shape.refresh_on_match:
            self._touch(hit)
        indices = tuple(i for page in hit for i in self.pages[page])
        return indices, hit[-1] if hit else (ns, ())

    def insert(self, tokens: tuple[int, ...], ns: str | None, indices: Indices) -> int:
        """Cache ``tokens``; keep the indices already cached; return how many were."""
        path = self._path_pages(ns, tokens)
        if "crash_insert" in self.bugs:
            assert len(path) != 3, "a key of exactly 3 pages"
        cached = 0
        held = [q for q in path if q in self.pages]
        for q in held:  # held while the rest is allocated, so making room spares them
            self.locks[q] += 1
        for n, page in enumerate(path):
            if page in self.pages:
                cached += self.page_size
            else:
                own = self.shape.pool_pages > 0
                value = self._allocate() if own else indices[n * self.page_size :][: self.page_size]
                self.pages[page] = tuple(value)
                self.locks[page] = 1  # held like the cached prefix until the key is in
                self.used[page] = self.clock
                held.append(page)
        for q in held:
            self.locks[q] -= 1
        self._touch(path)
        if self.order is not None:  # kept up to date by inserts, not by matches
            self.order = [q for q in self.order if q not in path] + path
        return cached

    def _allocate(self) -> Indices:
        """A page from the owned pool, evicting the least recent leaf to make room; the pool
        grows when every page is held (a test cache's simplification: no request waits)."""
        if not self.free_pages and self._victim() is not None:
            self.evict(self.page_size)
        if not self.free_pages:
            self.free_pages.append(self.pool_size)
            self.pool_size += 1
        block, p = self.free_pages.pop(0), self.page_size
        return tuple(range(block * p, (block + 1) * p))

    def lock(self, page: Page) -> None:
        self.held[page] += 1
        for above in self._path_pages(page[0], page[1]):
            self.locks[above] += 1

    def unlock(self, page: Page) -> None:
        if self.held[page] == 0:  # a lock taken below this page is not this one's
            raise ValueError(f"unlock of {page!r}, which no lock holds")
        self.held[page] -= 1
        path = self._path_pages(page[0], page[1])
        for q in path:
            self.locks[q] -= 1
        if self.shape.refresh_on_unlock:
            self._touch(path)

    def page_hashes(self, page: Page) -> list[str]:
        """This cache's own page ids: a digest of the namespace and the whole root path."""
        return [
            hashlib.blake2b(repr(q).encode(), digest_size=8).hexdigest()
            for q in self._path_pages(page[0], page[1])
        ]

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
        if self.order is not None:
            return next(q for q in self.order if q in leaves)
        return pick(leaves, key=self._recency)

    def _recency(self, page: Page) -> tuple[int, tuple[int, ...], str]:
        return self.used[page], page[1], str(page[0])

    def evict(self, num_tokens: int) -> int:
        target = num_tokens - self.page_size if "short" in self.bugs else num_tokens
        if "stale_order" in self.bugs and self.order is None:
            self.order = sorted(self.pages, key=self._recency)
        freed: list[int] = []
        while len(freed) < target and (victim := self._victim()) is not None:
            if "crash_evict" in self.bugs:
                assert not freed, "evicting more than one page per call"
            indices = self.pages.pop(victim)
            del self.locks[victim], self.used[victim], self.held[victim]
            if self.order is not None:
                self.order.remove(victim)
            if self.shape.pool_pages:
                self.free_pages.append(indices[0] // self.page_size)
            if self.shape.flat_evictions:
                freed += indices
            else:
                self.free(indices)
                freed += indices
        if self.shape.flat_evictions and freed:
            self.free(tuple(freed))
        return len(freed) + 1 if "count" in self.bugs and freed else len(freed)

    def reset(self) -> None:
        if self.shape.reset_refused_while_held and any(self.locks.values()):
            raise ValueError("reset while pages are held")
        for indices in self.pages.values():
            self.free(indices)
            if self.shape.pool_pages:
                self.free_pages.append(indices[0] // self.page_size)
        self.pages.clear()
        self.locks.clear()
        self.used.clear()
        self.order = None
        if "held_after_reset" not in self.bugs:
            self.held.clear()


class PageMapAdapter:
    """The kit's adapter for ``PageMapCache``."""

    capabilities = frozenset({"namespaces", "unlock_checks", "reset"})
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)

    def __init__(self, page_size: int, host: Host, bugs: frozenset[str], shape: Shape) -> None:
        self.page_size = page_size
        self.cache = PageMapCache(page_size, host.free, bugs, shape)
        if shape.own_hashes:
            self.capabilities = self.capabilities | {"hashing"}

    def page_hashes(self, handle: Page) -> list[str]:
        return self.cache.page_hashes(handle)

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, Page]:
        return self.cache.match(tokens, namespace)

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        prefix_len = self.cache.insert(tokens, namespace, indices)
        aligned = len(tokens) // self.page_size * self.page_size
        page = (namespace, tokens[:aligned])
        used = tuple(i for q in self.cache._path_pages(*page) for i in self.cache.pages[q])
        return Inserted(prefix_len, page, indices=used)

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


def factory(page_size: int, host: Host, bugs: str = "", shape: str = "") -> PageMapAdapter:
    """The cache with the bugs named in ``bugs`` (comma-separated names of ``BUGS``) and the
    habits of ``shape`` (a name in ``SHAPES``)."""
    planted = planted_bugs(bugs, BUGS)
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {sorted(SHAPES)}")
    return PageMapAdapter(page_size, host, planted, SHAPES[shape])


def vllm_shaped(page_size: int, host: Host, bugs: str = "") -> PageMapAdapter:
    """The cache with vLLM's habits, checked under ``PROFILES["vllm_shaped"]``."""
    return factory(page_size, host, bugs, "vllm")


def max_shaped(page_size: int, host: Host, bugs: str = "") -> PageMapAdapter:
    """The cache with MAX's habits, checked under ``PROFILES["max_shaped"]``."""
    return factory(page_size, host, bugs, "max")
