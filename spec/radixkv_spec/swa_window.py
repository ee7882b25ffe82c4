"""Where a sliding-window lock's window reaches (INV-21, INV-23): the pages a lock holds
SWA KV for, as a range the spec admits (``handle_window``) and, where the engine reports
where its nodes begin, exactly (``exact_window``), under each engine's way with a tombstone
on the walk up (``WindowTombstones``); and whether a path may end a match
(``window_holds``)."""

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal, TypeAlias

from radixkv_spec.pages import page_prefixes
from radixkv_spec.tokens import Namespace, PagePath, Position

WindowTombstones: TypeAlias = Literal["stop", "count", "skip"]
"""What a lock's SWA window does at a tombstone on its way up: ``"stop"`` (radixkv: nothing
above it is in the window), ``"count"`` (sglang 0.5.23: the window is W positions, the
tombstone's tokens count toward it and the walk goes on) or ``"skip"`` (pymllm: passed over
uncounted, the walk goes on until W live tokens). A tombstone itself is never SWA-locked."""


def window_holds(tombstoned: Sequence[bool], page_size: int, window: int) -> bool:
    """Whether a path of pages (True = tombstone) may end a match (INV-23).

    Valid when no page is a tombstone, or at least ``window`` live tokens follow the last.

    pre: page_size >= 1 and window >= 1
    post: True in tombstoned or __return__
    post: not (tombstoned and tombstoned[-1]) or not __return__
    post: not __return__ or True not in tombstoned or len(tombstoned) * page_size >= window
    """
    if True not in tombstoned:
        return True
    last = len(tombstoned) - 1 - tombstoned[::-1].index(True)
    return (len(tombstoned) - 1 - last) * page_size >= window


def handle_window(
    ns: Namespace,
    path: PagePath,
    tombstones: AbstractSet[Position],
    page_size: int,
    window: int | None,
    through: WindowTombstones = "stop",
) -> set[Position]:
    """The live pages one lock at ``(ns, path)`` keeps SWA KV for, page by page: from its
    last page up while fewer than ``window`` tokens are covered (``None``: no bound), a
    tombstone met as ``through`` says. Page by page, the least any cache's nodes give
    (``window``) and, without a bound, the most (INV-21).

    pre: page_size >= 1 and (window is None or window >= 1)
    post: all(q[0] == ns and extends(path, q[1]) and q not in tombstones for q in __return__)
    """
    nodes = [({(ns, q)}, page_size) for q in page_prefixes(path, page_size)]
    return _walk_up(nodes, tombstones, window, through)


def _walk_up(
    nodes: Sequence[tuple[set[Position], int]],
    tombstones: AbstractSet[Position],
    window: int | None,
    through: WindowTombstones,
) -> set[Position]:
    """The SWA window's walk: ``nodes`` (each its pages and its length in tokens, root
    first) taken whole from the last upward while fewer than ``window`` tokens are covered
    (``None``: no bound), a tombstone node met as ``through`` says."""
    kept: set[Position] = set()
    covered = 0
    for pages, length in reversed(nodes):
        if window is not None and covered >= window:
            break
        if pages & tombstones:
            if through == "stop":
                break
            covered += length if through == "count" else 0
            continue
        kept |= pages
        covered += length
    return kept


def node_spans(path: PagePath, node_starts: Sequence[int]) -> list[tuple[int, int]]:
    """The ``(start, end)`` token offsets of each node along ``path``, root first.

    pre: all(0 <= s < len(path) for s in node_starts)
    pre: list(node_starts) == sorted(set(node_starts))
    post: [start for start, _ in __return__] == list(node_starts)
    """
    ends = [*node_starts[1:], len(path)] if node_starts else []
    return list(zip(node_starts, ends, strict=True))


def nodes_are_whole(
    ns: Namespace,
    path: PagePath,
    node_starts: Sequence[int],
    tombstones: AbstractSet[Position],
    page_size: int,
) -> bool:
    """Whether each node along ``path`` is all tombstone or all live, as a cache's nodes are.

    pre: page_size >= 1
    pre: all(0 <= s < len(path) for s in node_starts)
    pre: list(node_starts) == sorted(set(node_starts))
    """
    pages = page_prefixes(path, page_size)
    return all(
        len({(ns, q) in tombstones for q in pages[start // page_size : end // page_size]}) <= 1
        for start, end in node_spans(path, node_starts)
    )


def exact_window(
    ns: Namespace,
    path: PagePath,
    node_starts: Sequence[int],
    tombstones: AbstractSet[Position],
    page_size: int,
    window: int,
    through: WindowTombstones = "stop",
) -> frozenset[Position]:
    """The pages one lock at ``(ns, path)`` SWA-locks, where the cache's nodes along ``path``
    begin at the token offsets ``node_starts`` (INV-21, exact where the engine shows them).

    Whole nodes from the locked one (the last) upward, each while fewer than ``window``
    tokens are covered below it; a tombstone node (its pages are ``tombstones``) ends the
    walk, or is passed over, as ``through`` says. Engines lock whole nodes, so a lock covers
    its last W tokens and the rest of the node they begin in, and nothing more. Fixed at
    lock time: a later split moves no token, and the unlock releases the same pages.

    pre: page_size >= 1 and window >= 1
    pre: len(path) % page_size == 0
    pre: list(node_starts) == sorted(set(node_starts))
    pre: (not path and not node_starts) or list(node_starts[:1]) == [0]
    pre: all(s % page_size == 0 and 0 <= s < len(path) for s in node_starts)
    pre: nodes_are_whole(ns, path, node_starts, tombstones, page_size)
    post: handle_window(ns, path, tombstones, page_size, window, through) <= __return__
    post: __return__ <= handle_window(ns, path, tombstones, page_size, None, through)
    """
    pages = page_prefixes(path, page_size)
    nodes = [
        ({(ns, q) for q in pages[start // page_size : end // page_size]}, end - start)
        for start, end in node_spans(path, node_starts)
    ]
    return frozenset(_walk_up(nodes, tombstones, window, through))
