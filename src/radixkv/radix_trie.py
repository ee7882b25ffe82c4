"""RadixTrie / TrieNode: MAX's radix trie API (``max.pipelines.kv_cache.radix_trie``).

A trie of its own, not the core ``Tree``: its values are one block per page rather than one
index per token, its locks are sets of sequence ids rather than counted handles, and its
eviction trims a leaf's tail page by page. It shares the key checks and the prefix
comparison of keys.py.

The trie maps page-aligned token prefixes to *blocks*, one opaque hashable block per page
(a KV page id). It differs from RadixCache where MAX's API does (SPEC.md, "RadixTrie"):

* ``insert`` returns only the end node; along an existing path the trie keeps its own
  blocks and ignores the incoming ones, so the caller releases its duplicates.
* Locks are sets of sequence ids (``mark_in_use_by`` / ``mark_not_in_use_by``), idempotent
  per sequence; releasing a sequence that does not hold the node is a ``LockError``.
* ``evict_blocks(n)`` trims leaves from their tail at page granularity, least recently used
  leaf first, until exactly ``n`` blocks went or nothing is evictable, and *returns* the
  evicted blocks (the caller frees them): it never overshoots.

Recency is a per-trie logical clock stamped on the path of every insert, match and release,
ties broken by node id (older first), so eviction order is reproducible. Usage errors are
raised before anything changes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

from radixkv.arguments import page_align, require_int
from radixkv.errors import LockError, StaleNodeError, TokenTypeError, UsageError
from radixkv.events import EventListener, PageEvents
from radixkv.hashing import chain_page_hashes
from radixkv.keys import Tokens, common_prefix_len, validate_tokens


class TrieNode:
    """A run of tokens and one block per page of them.

    ``children`` maps the first page of each child's tokens to the child;
    ``active_seqs`` are the sequences using the node (it is evictable when empty);
    ``hash_values`` the pages' hashes when the trie has an event listener.
    """

    __slots__ = (
        "active_seqs",
        "blocks",
        "children",
        "hash_values",
        "id",
        "last_access_time",
        "parent",
        "tokens",
    )

    def __init__(
        self,
        node_id: int,
        tokens: Tokens,
        blocks: list[Any],
        parent: TrieNode | None,
        last_access_time: int,
    ) -> None:
        self.id = node_id
        self.tokens = tokens
        self.blocks = blocks
        self.parent = parent
        self.children: dict[Tokens, TrieNode] = {}
        self.active_seqs: set[Hashable] = set()
        self.last_access_time = last_access_time
        self.hash_values: list[str] | None = None  # page hashes, kept while events are on

    def is_leaf(self) -> bool:
        return not self.children

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        more = "..." if len(self.tokens) > 8 else ""
        return f"TrieNode(id={self.id}, tokens={list(self.tokens[:8])}{more}, blocks={self.blocks})"


class RadixTrie:
    """A radix trie from token prefixes to KV blocks, one block per ``page_size`` tokens."""

    def __init__(self, page_size: int = 1, *, event_listener: EventListener | None = None) -> None:
        """``event_listener`` receives a record for every page stored or evicted (the
        default namespace's page hashes, SPEC.md §9); without one nothing is hashed."""
        self.page_size = require_int("page_size", page_size, 1)
        self._events = None if event_listener is None else PageEvents(event_listener, page_size)
        self._clock = itertools.count(1)
        self._ids = itertools.count()
        self.root = TrieNode(next(self._ids), (), [], None, 0)
        self.all_blocks: set[Any] = set()
        self.evictable_blocks: set[Any] = set()

    # ---- insert and match --------------------------------------------------------------

    def insert(
        self, tokens: Iterable[object], blocks: Sequence[Any], node: TrieNode | None = None
    ) -> TrieNode:
        """Cache ``tokens`` below ``node`` (default: the root); return the node ending there.

        ``len(tokens)`` must be a multiple of ``page_size`` with one block per page. Where
        the path is cached already the trie keeps its blocks and ignores the incoming ones;
        only the blocks of new pages are adopted, and those must not be in the trie.

        Raises:
            UsageError (a ValueError): misaligned tokens, a block count that does not match,
                an adopted block the trie holds already; StaleNodeError for an evicted node.
        """
        key = validate_tokens(tokens)
        p = self.page_size
        if len(key) % p:
            raise UsageError(f"{len(key)} tokens is not a multiple of page_size {p}")
        if len(key) // p != len(blocks):
            raise UsageError(f"{len(blocks)} blocks for {len(key) // p} pages")
        start = self._require_live(node)
        matched = self._matched_len(start, key)
        new_blocks = list(blocks[matched // p :])
        self._require_fresh(new_blocks)
        now = next(self._clock)
        end, matched = self._walk(start, key, now)
        if matched < len(key):
            leaf = TrieNode(next(self._ids), key[matched:], new_blocks, end, now)
            end.children[key[matched : matched + p]] = leaf
            self.all_blocks.update(new_blocks)
            self.evictable_blocks.update(new_blocks)
            if self._events is not None:
                self._report_stored(leaf)
            end = leaf
        return end

    def match_prefix(
        self, tokens: Iterable[object], node: TrieNode | None = None
    ) -> tuple[TrieNode, list[Any]]:
        """The deepest node matching whole pages of ``tokens`` below ``node``, and the blocks.

        A partly matched node is split so that the returned node ends at the match; the
        matched path becomes the most recently used.
        """
        key = validate_tokens(tokens)
        start = self._require_live(node)
        key = key[: page_align(len(key), self.page_size)]
        end, _ = self._walk(start, key, next(self._clock))
        blocks: list[Any] = []
        for n in reversed(list(self._path(end, start))):
            blocks.extend(n.blocks)
        return end, blocks

    # ---- locks -------------------------------------------------------------------------

    def mark_in_use_by(self, node: TrieNode, seq_id: Hashable) -> None:
        """Mark ``node`` and its ancestors as used by ``seq_id`` (idempotent per sequence)."""
        self._require_live(node)
        for n in self._path(node):
            if seq_id in n.active_seqs:
                break  # a sequence holding a node holds its ancestors already
            if not n.active_seqs:
                self.evictable_blocks.difference_update(n.blocks)
            n.active_seqs.add(seq_id)

    def mark_not_in_use_by(self, node: TrieNode, seq_id: Hashable) -> None:
        """Release ``node`` and its ancestors from ``seq_id``; they become most recently used.

        Raises:
            LockError: ``seq_id`` does not hold every node on the path (nothing changes).
        """
        self._require_live(node)
        path = list(self._path(node))
        for n in path:
            if seq_id not in n.active_seqs:
                raise LockError(f"sequence {seq_id!r} does not hold {n!r}")
        now = next(self._clock)
        for n in path:
            n.active_seqs.discard(seq_id)
            n.last_access_time = now
            if not n.active_seqs:
                self.evictable_blocks.update(n.blocks)

    # ---- eviction ----------------------------------------------------------------------

    def evict_blocks(self, desired_num_evicted: int) -> list[Any]:
        """Evict up to ``desired_num_evicted`` blocks from the tails of unused leaves.

        Least recently used leaf first (older node on a tie); a leaf emptied by trimming is
        unlinked and its parent, if it became an unused leaf, joins the candidates. Returns
        exactly the evicted blocks, in eviction order (a leaf's last page first); the caller
        frees them. Stops short only when nothing is evictable.
        """
        require_int("desired_num_evicted", desired_num_evicted, 0)
        heap = [(n.last_access_time, n.id, n) for n in self._nodes() if self._evictable_leaf(n)]
        heapq.heapify(heap)
        evicted: list[Any] = []
        while len(evicted) < desired_num_evicted and heap:
            _, _, leaf = heapq.heappop(heap)
            child_key = self._first_page(leaf)
            k = min(desired_num_evicted - len(evicted), len(leaf.blocks))
            trimmed = leaf.blocks[len(leaf.blocks) - k :]
            evicted.extend(reversed(trimmed))
            self.all_blocks.difference_update(trimmed)
            self.evictable_blocks.difference_update(trimmed)
            del leaf.blocks[len(leaf.blocks) - k :]
            leaf.tokens = leaf.tokens[: len(leaf.blocks) * self.page_size]
            if self._events is not None and leaf.hash_values is not None:
                self._events.removed(leaf.hash_values[len(leaf.blocks) :])
                del leaf.hash_values[len(leaf.blocks) :]
            if not leaf.blocks:
                parent = leaf.parent
                assert parent is not None
                del parent.children[child_key]
                leaf.parent = None
                if self._evictable_leaf(parent):
                    heapq.heappush(heap, (parent.last_access_time, parent.id, parent))
        return evicted

    def get_all_blocks(self) -> set[Any]:
        """Every block the trie holds."""
        return set(self.all_blocks)

    def get_evictable_blocks(self) -> set[Any]:
        """The blocks of nodes no sequence uses."""
        return set(self.evictable_blocks)

    # ---- display -----------------------------------------------------------------------

    def pretty_format(self, print_blocks: bool = False) -> list[str]:
        """One line per node, depth-first: ``'-' * 2·depth`` then the tokens (and blocks)."""
        lines: list[str] = []
        stack = [(child, 0) for child in reversed(list(self.root.children.values()))]
        while stack:
            node, indent = stack.pop()
            line = "-" * indent + str(list(node.tokens))
            lines.append(f"{line} : {node.blocks}" if print_blocks else line)
            stack.extend((c, indent + 2) for c in reversed(list(node.children.values())))
        return lines

    def pretty_print(self, print_blocks: bool = True) -> None:
        for line in self.pretty_format(print_blocks):
            print(line)

    # ---- internals ---------------------------------------------------------------------

    def _walk(self, node: TrieNode, key: Tokens, now: int) -> tuple[TrieNode, int]:
        """Descend along ``key``, stamping each node; split where the match ends mid-node."""
        node.last_access_time = now
        matched, p = 0, self.page_size
        while matched < len(key):
            child = node.children.get(key[matched : matched + p])
            if child is None:
                break
            same = page_align(common_prefix_len(child.tokens, key, matched), p)
            ends_inside = same < len(child)
            if ends_inside:
                child = self._split(child, same)
            child.last_access_time = now
            node, matched = child, matched + same
            if ends_inside:
                break
        return node, matched

    def _matched_len(self, node: TrieNode, key: Tokens) -> int:
        """How many leading tokens of ``key`` are cached below ``node`` (changes nothing)."""
        matched, p = 0, self.page_size
        while matched < len(key):
            child = node.children.get(key[matched : matched + p])
            if child is None:
                break
            same = page_align(common_prefix_len(child.tokens, key, matched), p)
            matched += same
            if same < len(child):
                break
            node = child
        return matched

    def _split(self, node: TrieNode, split_len: int) -> TrieNode:
        """Cut ``node`` after ``split_len`` tokens; the new upper part takes its place.

        The original object stays the lower part, so a handle to it still ends where it did.
        """
        parent = node.parent
        assert parent is not None and 0 < split_len < len(node)
        pages = split_len // self.page_size
        upper = TrieNode(
            next(self._ids),
            node.tokens[:split_len],
            node.blocks[:pages],
            parent,
            node.last_access_time,
        )
        upper.active_seqs = set(node.active_seqs)
        if node.hash_values is not None:
            upper.hash_values, node.hash_values = (
                node.hash_values[:pages],
                node.hash_values[pages:],
            )
        parent.children[self._first_page(node)] = upper
        node.tokens = node.tokens[split_len:]
        node.blocks = node.blocks[pages:]
        node.parent = upper
        upper.children[self._first_page(node)] = node
        return upper

    def _report_stored(self, leaf: TrieNode) -> None:
        """Hash a new leaf's pages after its parent's (the trie has one namespace: None)."""
        assert self._events is not None and leaf.parent is not None
        parent_hashes = leaf.parent.hash_values
        prior = parent_hashes[-1] if parent_hashes else None
        leaf.hash_values = chain_page_hashes(leaf.tokens, self.page_size, prior)
        self._events.stored(leaf.tokens, None, leaf.hash_values, prior)

    def _first_page(self, node: TrieNode) -> Tokens:
        return node.tokens[: self.page_size]

    def _require_live(self, node: object) -> TrieNode:
        if node is None:
            return self.root
        if not isinstance(node, TrieNode):
            raise TokenTypeError(f"expected a TrieNode, got {type(node).__name__}")
        top = node
        while top.parent is not None:
            top = top.parent
        if top is not self.root:
            raise StaleNodeError(f"node {node.id} was evicted or belongs to another trie")
        return node

    def _require_fresh(self, blocks: list[Any]) -> None:
        for b in blocks:
            if not isinstance(b, Hashable):
                raise TokenTypeError(f"blocks must be hashable, got {type(b).__name__}")
        if len(set(blocks)) != len(blocks):
            raise UsageError("the same block is given for two pages")
        if not self.all_blocks.isdisjoint(blocks):
            raise UsageError("a new page's block is already in the trie")

    def _path(self, node: TrieNode, stop: TrieNode | None = None) -> Iterator[TrieNode]:
        """``node`` and its ancestors up to ``stop`` (default the root), both excluded."""
        stop = self.root if stop is None else stop
        while node is not stop and node.parent is not None:
            yield node
            node = node.parent

    def _nodes(self) -> Iterator[TrieNode]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _evictable_leaf(self, node: TrieNode) -> bool:
        return node is not self.root and not node.children and not node.active_seqs
