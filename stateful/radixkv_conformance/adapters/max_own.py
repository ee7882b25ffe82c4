"""MAX's own ``RadixTrie`` (``max/pipelines/kv_cache/radix_trie.py``), from a checkout.

    MAX_SRC=/path/to/modular/src radixkv check radixkv_conformance.adapters.max_own:factory

The trie left modular's main repository in March 2025; ``MAX_SRC`` names a checkout of a
public mirror that keeps it (checked at ``swi/modular`` b2c688496, 2025-02-28; see
``_max_import``: one stub, ``max.profiler.traced``, tracing only). Importing this module
without ``MAX_SRC`` raises ``ImportError`` saying so (the vector tests then skip).

The adapter plays MAX's paged cache manager, the trie's caller: it aligns keys to whole
pages, hands the trie token ids as a list (the trie makes its own numpy array), gives it one
block per page (the tuple of that page's KV indices, so a freed block names its indices),
locks with a fresh sequence id per lock (``mark_in_use_by``) and hands ``evict_blocks``'s
one flat list to ``host.free`` in one call. radixkv's own facade of the same API is
``max_trie`` (profile ``max``); this module's ``PROFILE`` is MAX's real habits.

Not claimed: ``namespaces`` (the trie has none), ``bad_input`` (it validates only the
key/block lengths: any token that numpy and a dict take is a token, and ``evict_blocks``
of a negative count evicts nothing), ``unlock_checks`` (an unmatched
``mark_not_in_use_by`` is refused by an ``assert`` only, gone under ``python -O``) and
``stale_handles`` (an evicted node keeps its parent pointer and can be locked again).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator
from typing import Any

from radixkv_conformance.adapters._calls import MaxTrieCalls
from radixkv_conformance.adapters._max_import import import_module
from radixkv_conformance.profile import ANY_LEAF, TAIL_PAGES, Profile
from radixkv_conformance.protocol import Host, Indices, Namespace, TokenPlace, Tokens

radix_trie = import_module("radix_trie")

NOTES = (
    "MAX RadixTrie (swi/modular b2c688496) from MAX_SRC. One block per page (a tuple of "
    "its indices); blocks of a cached prefix are kept (the caller frees its duplicates); "
    "per-sequence locks; evict_blocks trims leaves page by page and returns one flat list; "
    "a lookup never refreshes recency, a release does. Victims: ANY_LEAF, because the trie's "
    "recency is a node's creation, split or release, not an insert's or a match's path: an "
    "insert that walks a cached node leaves it where it was, a match that splits a node "
    "moves both halves to the recent end; no profile policy says that yet."
)
PROFILE = Profile(
    "max-own",
    victims=ANY_LEAF,
    eviction=TAIL_PAGES,
    duplicates="kept",
    lock_model="sets",
    refresh_on=frozenset({"insert", "unlock"}),
    eviction_report="flat",
    namespaces=(None,),
    bad_tokens=([1], {}),
    page_sizes=(1, 2, 4),
    notes=NOTES,
)

Node = Any  # radix_trie.TrieNode


class MaxTrieAdapter(MaxTrieCalls):
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)
    capabilities: frozenset[str] = frozenset()
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        self.page_size = page_size
        self.host = host
        self.trie = radix_trie.RadixTrie(page_size)
        self.sequences = itertools.count()

    # ---- the trie's caller ---------------------------------------------------------------

    def match(self, tokens: Tokens, namespace: Namespace) -> tuple[Indices, Node]:
        node, blocks = self.trie.match_prefix(list(tokens))
        return tuple(i for block in blocks for i in block), node

    def insert(self, tokens: Tokens, namespace: Namespace, indices: Indices) -> tuple[None, Node]:
        n_pages = len(tokens) // self.page_size
        key = list(tokens[: n_pages * self.page_size])
        return None, self.trie.insert(key, self._blocks(indices, n_pages))

    def evict(self, num_tokens: int) -> int:
        evicted = self._evict_blocks(num_tokens)
        if evicted:
            self.host.free(tuple(i for block in evicted for i in block))
        return len(evicted) * self.page_size

    # ---- observation ---------------------------------------------------------------------

    def nodes(self) -> Iterator[tuple[Node, tuple[Any, ...]]]:
        """Every live node below the root with its root path, parents first."""
        stack: list[tuple[Node, tuple[Any, ...]]] = [(self.trie.root, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                child_path = path + tuple(int(t) for t in child.tokens.tolist())
                yield child, child_path
                stack.append((child, child_path))

    def contents(self) -> dict[TokenPlace, int]:
        out: dict[TokenPlace, int] = {}
        p = self.page_size
        for node, path in self.nodes():
            start = len(path) - len(node.tokens)
            for page, block in enumerate(node.blocks):
                end = start + (page + 1) * p
                for offset, index in enumerate(block):
                    out[(None, path[:end], offset)] = index
        return out

    def snapshot(self) -> Hashable:
        trie = self.trie
        nodes = tuple(
            (path, tuple(node.blocks), tuple(sorted(node.active_seqs)), node.node_id)
            for node, path in sorted(self.nodes(), key=lambda n: n[1])
        )
        order = tuple(trie.lru_cache.keys())  # MAX's recency: least recent first
        return nodes, order, frozenset(trie.evictable_blocks), frozenset(trie.all_blocks)

    def check(self) -> None:
        """MAX's own ``_check_node_valid`` on every node, then the guarantees its comments
        state: the LRU holds each evictable node, and only those, and ``evict_blocks`` pops
        a leaf ("the parent node will only be evicted after all its children"). Each is its
        own message, so each is its own finding (one ``assert`` in ``evict_blocks`` guards
        both of the last two)."""
        trie, live = self.trie, list(self.nodes())
        trie._check_node_valid(trie.root)
        for node, _ in live:
            trie._check_node_valid(node)
        held = {block for node, _ in live for block in node.blocks}
        assert trie.all_blocks == held, "all_blocks is not the blocks the nodes hold"
        assert trie.evictable_blocks <= held, "evictable blocks that no node holds"
        order = {node_id: n for n, node_id in enumerate(trie.lru_cache)}
        for node, _ in live:
            if node.is_evictable():
                assert node.node_id in order, "an evictable node is missing from the LRU"
            else:
                assert node.node_id not in order, "a locked node is in the LRU"
        for node, _ in live:
            if node.node_id in order and any(
                order.get(child.node_id, -1) > order[node.node_id]
                for child in node.children.values()
            ):
                raise AssertionError("a node precedes its child in the LRU (pops a non-leaf)")


def factory(page_size: int, host: Host) -> MaxTrieAdapter:
    return MaxTrieAdapter(page_size, host)
