"""radixkv's RadixTrie (MAX's API) under the machine.

A block is one page: the adapter passes each page's KV indices as one tuple-valued block,
so the machine's per-token ownership checks apply unchanged. The trie reports no
``prefix_len`` (profile ``duplicates="kept"``); locks are fresh sequence ids; evicted
blocks go to ``host.free`` one page at a time, in the order ``evict_blocks`` returns them.
The trie's KV events (``event_listener``) are checked as every cache's are: the pages a
router rebuilds from them are the pages the trie holds, before and after radixkv's
``RouterFilter`` (``router_events``).

The trie takes any hashable token (MAX's API: its callers may key it by words); the
adapter plays a MAX engine, whose tokens are its tokenizer's ids, so it checks every key
against radixkv's token-id rules before the trie sees it: a token the kit calls bad is
refused by the adapter, as the caller, not by the trie. (tests/cache/test_radix_trie.py checks
what the trie itself accepts and refuses.)
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import radixkv
from radixkv.keys import validate_tokens
from radixkv_conformance.adapters._calls import MaxTrieCalls
from radixkv_conformance.adapters._radixkv_tree import CanonicalTree
from radixkv_conformance.adapters.radixkv import EventStreams
from radixkv_conformance.profile import MAX_RADIX_TRIE
from radixkv_conformance.protocol import Host
from radixkv_conformance.protocol import TokenPlace as Slot

PROFILE = MAX_RADIX_TRIE


class RadixTrieAdapter(MaxTrieCalls, EventStreams):
    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)
    capabilities = frozenset({"bad_input", "unlock_checks", "events", "router_events", "relock"})
    notes = (
        "the adapter aligns keys itself, as MAX callers do, and hands the trie token ids: it "
        "refuses a bad token itself (the trie takes any hashable token)"
    )

    def __init__(self, page_size: int, host: Host) -> None:
        super().__init__()  # a tail trim's records name the pages it removed
        self.page_size = page_size
        self.host = host
        self.trie = radixkv.RadixTrie(page_size, event_listener=self.hear)
        self.sequences = itertools.count()

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        validate_tokens(tokens)  # the engine's token ids (the trie would take any token)
        node, blocks = self.trie.match_prefix(tokens)
        return tuple(i for block in blocks for i in block), node

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int | None, Any]:
        # MAX callers align the key themselves: the adapter plays that caller, whose tokens
        # are token ids, the tail it drops included (a bad token there is still a bad call).
        n_pages = len(tokens) // self.page_size
        aligned = tokens[: n_pages * self.page_size]
        validate_tokens(tokens)
        return None, self.trie.insert(aligned, self._blocks(indices, n_pages))

    def evict(self, num_tokens: Any) -> int:
        evicted = self._evict_blocks(num_tokens)
        for block in evicted:
            self.host.free(tuple(block))
        return len(evicted) * self.page_size

    def contents(self) -> dict[Slot, int]:
        out: dict[Slot, int] = {}
        p = self.page_size
        paths: dict[int, tuple[Any, ...]] = {id(self.trie.root): ()}
        for node in self.trie.nodes():  # parents first
            start = len(path := paths[id(node.parent)])
            paths[id(node)] = node_path = path + node.tokens
            for page, block in enumerate(node.blocks):
                end = start + (page + 1) * p
                for offset, index in enumerate(block):
                    out[(None, node_path[:end], offset)] = index
        return out

    def check(self) -> None:
        self.trie.check_invariants()  # its tree and counters, which MAX's API never shows
        all_blocks, evictable = self.trie.get_all_blocks(), self.trie.get_evictable_blocks()
        assert evictable <= all_blocks, "evictable blocks that the trie does not hold"

    def snapshot(self) -> Hashable:
        seqs = tuple(sorted(map(str, n.active_seqs)) for n in self.trie.nodes())
        return (
            tuple(self.trie.pretty_format(print_blocks=True)),
            frozenset(self.trie.get_evictable_blocks()),
            tuple(map(tuple, seqs)),
        )

    def canonical_state(self, handles: Sequence[Any]) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The trie's tree as radixkv's other caches picture theirs (``CanonicalTree``),
        with each node's blocks and the sequences using it (sequence ids are compared by
        equality only: the canonical form renames them); left out, as there: the heap's
        stale entries and the id counters (every new id is above every live one)."""
        canon = CanonicalTree(self.trie.root, reads_hits=False)
        picture = (canon.nodes(_trie_node), frozenset(self.trie.get_evictable_blocks()))
        return picture, tuple(canon.name(h) for h in handles)


def _trie_node(node: Any) -> tuple[Hashable, ...]:
    """What a trie node keeps besides the tree's own fields."""
    return (tuple(map(tuple, node.blocks)), tuple(sorted(node.active_seqs)), node.lock_ref)


def factory(page_size: int, host: Host) -> RadixTrieAdapter:
    return RadixTrieAdapter(page_size, host)
