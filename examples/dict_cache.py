"""A complete adapter to copy: a small prefix cache of its own and what the kit needs of it.

It needs the kit alone (``pip install ./kit``), no torch. From the repository's root::

    radixkv check examples.dict_cache:factory --budget 20   # held: exit 0
    radixkv check examples.dict_cache:factory --option bug=1   # evict takes a locked page

``DictCache`` stands for your engine's cache: a dict of pages keyed by (namespace, the tokens
up to the page's end); eviction takes the least recently used unlocked leaf page. It speaks
the kit's protocol already (tuples of ints, its keys as handles; a cache of tensors converts
them in its adapter), so ``Adapter`` adds only the rest. ``factory`` builds one per run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host, Indices, Sizes, Tokens

PROFILE = RADIXKV  # LRU leaves, whole pages, a lock count per page, the caller frees duplicates
Key = tuple[str | None, Tokens]  # (namespace, the tokens up to a page's end); () is a root


@dataclass
class Page:
    indices: Indices
    used: int = 0  # logical time of the last match or insert through this page
    locks: int = 0  # locks held at this page or at a page below it


class DictCache:
    def __init__(self, page_size: int, host: Host, bug: bool = False) -> None:
        self.page_size, self.host, self.bug = page_size, host, bug
        self.pages: dict[Key, Page] = {}
        self.held: Counter[Key] = Counter()  # locks taken at exactly this key
        self.clock = 0

    def path(self, ns: str | None, tokens: Tokens) -> list[Key]:
        """The keys of the whole pages of ``tokens``, root first."""
        p = self.page_size
        return [(ns, tokens[:end]) for end in range(p, len(tokens) // p * p + 1, p)]

    def touch(self, ns: str | None, keys: list[Key]) -> Key:
        self.clock += 1
        for key in keys:
            self.pages[key].used = self.clock
        return keys[-1] if keys else (ns, ())

    def match(self, tokens: Tokens, ns: str | None) -> tuple[Indices, Key]:
        hit = list(takewhile(self.pages.__contains__, self.path(ns, tokens)))
        return tuple(i for key in hit for i in self.pages[key].indices), self.touch(ns, hit)

    def insert(self, tokens: Tokens, ns: str | None, indices: Indices) -> tuple[int, Key]:
        """Cache the whole pages of ``tokens``; a page cached already keeps its indices (the
        caller frees its own). Returns how many tokens were cached before, and the last page."""
        p, keys = self.page_size, self.path(ns, tokens)
        cached = p * sum(key in self.pages for key in keys)
        for n, key in enumerate(keys):
            self.pages.setdefault(key, Page(indices[n * p : (n + 1) * p]))
        return cached, self.touch(ns, keys)

    def lock(self, key: Key, step: int = 1) -> None:
        if step < 0 and self.held[key] == 0:
            raise ValueError(f"unlock of {key!r}, which no lock holds")
        self.held[key] += step
        for above in self.path(*key):
            self.pages[above].locks += step

    def evict(self, num_tokens: int) -> int:
        """Free whole leaf pages, least recently used first, until ``num_tokens`` went."""
        freed = 0
        while freed < num_tokens:
            parents = {(ns, tokens[: -self.page_size]) for ns, tokens in self.pages}
            leaves = [k for k, page in self.pages.items() if k not in parents]
            candidates = leaves if self.bug else [k for k in leaves if not self.pages[k].locks]
            if not candidates:
                break
            page = self.pages.pop(min(candidates, key=lambda k: self.pages[k].used))
            self.host.free(page.indices)  # one call per page the cache lets go
            freed += len(page.indices)
        return freed

    def reset(self) -> None:
        for page in self.pages.values():
            self.host.free(page.indices)
        self.pages.clear()
        self.held.clear()


class Adapter(DictCache):
    """The kit's protocol: ``DictCache``'s match, insert, lock, evict, reset, and these."""

    capabilities = frozenset({"namespaces", "unlock_checks", "reset"})  # rules the kit adds
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)  # what a refused call raises

    def unlock(self, handle: Key, token: Any) -> None:  # token: what lock returned (None)
        self.lock(handle, -1)

    def sizes(self) -> Sizes:  # evictable + protected == total, in tokens
        p, pages = self.page_size, self.pages.values()
        protected = p * sum(page.locks > 0 for page in pages)
        return Sizes(p * len(pages) - protected, protected, p * len(pages))

    def contents(self) -> dict[Key, Indices]:  # every cached page: (ns, page path) -> indices
        return {key: page.indices for key, page in self.pages.items()}

    def snapshot(self) -> Hashable:  # the whole state: a refused call must leave it unchanged
        pages = sorted((repr(k), v.indices, v.used, v.locks) for k, v in self.pages.items())
        return tuple(pages), tuple(sorted((repr(k), n) for k, n in self.held.items() if n))

    def check(self) -> None:
        """``DictCache`` has no invariant check of its own (call yours here)."""


def factory(page_size: int, host: Host, bug: str = "0") -> Adapter:
    """``--option bug=1`` plants a bug for the kit to find: eviction ignores locks."""
    return Adapter(page_size, host, bug == "1")
