"""The page map: the vocabulary every spec model keeps its KV in.

A *page position* ``(ns, path)`` is a namespace and a non-empty page-aligned token prefix
(``radixkv_spec.tokens``: ``Namespace``, ``PagePath``, ``Position``); it stands for the last
page of ``path`` and maps to that page's ``page_size`` KV indices. One namespace's pages
are a ``PageTable``; a cached set of positions is prefix-closed. The functions here walk
a table the same way for every model (``PrefixCacheModel``, ``SlidingWindowModel``,
``MambaCacheModel``), each a pure function whose contract CrossHair checks, and ``PageMap``
answers the queries every model shares of its tables and lock handles.
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from radixkv_spec.tokens import MAX_TOKEN_ID, Namespace, PagePath, Position, Token, extends

# One namespace's cached pages: page position -> the KV indices of that page.
PageTable: TypeAlias = Mapping[PagePath, tuple[int, ...]]


def page_prefixes(path: PagePath, page_size: int) -> list[PagePath]:
    """Every non-empty page-aligned prefix of ``path``, shortest first.

    pre: page_size >= 1
    post: len(__return__) == len(path) // page_size
    post: all(len(q) == (i + 1) * page_size for i, q in enumerate(__return__))
    """
    return [path[:end] for end in range(page_size, len(path) + 1, page_size)]


def cached_len(table: PageTable, key: PagePath, page_size: int) -> int:
    """Length of the longest prefix of ``key`` whose every page is cached in ``table``.

    pre: page_size >= 1
    post: __return__ % page_size == 0 and 0 <= __return__ <= len(key)
    post: all(key[:n] in table for n in range(page_size, __return__ + 1, page_size))
    post: __return__ + page_size > len(key) or key[: __return__ + page_size] not in table
    """
    n = 0
    while n + page_size <= len(key) and key[: n + page_size] in table:
        n += page_size
    return n


def path_indices(table: PageTable, path: PagePath, page_size: int) -> tuple[int, ...]:
    """The KV indices of the cached page-aligned ``path``, in token order.

    pre: page_size >= 1
    pre: len(path) % page_size == 0 and cached_len(table, path, page_size) == len(path)
    pre: all(len(page) == page_size for page in table.values())
    post: len(__return__) == len(path)
    """
    return tuple(i for q in page_prefixes(path, page_size) for i in table[q])


def child_paths(table: PageTable, path: PagePath, page_size: int) -> list[PagePath]:
    """The cached positions exactly one page below ``path``.

    pre: page_size >= 1
    post: all(len(q) == len(path) + page_size and extends(q, path) for q in __return__)
    """
    below = len(path) + page_size
    return [q for q in table if len(q) == below and extends(q, path)]


def validate_index(value: object) -> int:
    """Return ``value`` if it is a KV index (an int in ``[0, 2**63)``); else raise.

    raises: TypeError, ValueError
    post: 0 <= __return__ < MAX_TOKEN_ID
    """
    # Indices live in int64 tensors; bool is not an index
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"KV index must be an int, got {type(value).__name__}")
    if not 0 <= value < MAX_TOKEN_ID:
        raise ValueError(f"KV index {value} is outside [0, 2**63)")
    return int(value)


class PageMap:
    """What every spec model answers the same way of its page map (``pages``: one table per
    namespace) and its lock handles (``handles``: how many at each position): the queries
    the three models share, written once."""

    page_size: int
    pages: dict[Namespace, dict[PagePath, tuple[int, ...]]]
    handles: Counter[Position]

    def positions(self) -> list[Position]:
        """Every cached page position (namespace by namespace, in insertion order)."""
        return [(ns, path) for ns, table in self.pages.items() for path in table]

    def table(self, ns: Namespace) -> PageTable:
        """The cached pages of namespace ``ns``."""
        return self.pages.get(ns, {})

    def has_page(self, ns: Namespace, path: PagePath) -> bool:
        """Whether ``path`` is a cached page position in ``ns`` (the empty path is the root)."""
        return not path or path in self.table(ns)

    def indices_of(self, ns: Namespace, path: PagePath) -> tuple[int, ...]:
        """The KV indices of the cached page-aligned ``path`` (no recency change)."""
        return path_indices(self.table(ns), path, self.page_size)

    def children(self, ns: Namespace, path: PagePath) -> list[PagePath]:
        """The cached positions one page below ``path``."""
        return child_paths(self.table(ns), path, self.page_size)

    def handle_count(self, ns: Namespace, prefix: Sequence[Token]) -> int:
        """How many lock handles are outstanding at exactly ``prefix``."""
        return self.handles[(ns, tuple(prefix))]

    def is_locked(self, ns: Namespace, prefix: Sequence[Token]) -> bool:
        """Whether some lock handle's path runs through ``prefix`` (a lock covers its path)."""
        return any(h_ns == ns and extends(h_path, prefix) for h_ns, h_path in self.handles)
