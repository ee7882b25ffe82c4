"""RadixTrie / TrieNode: MAX's radix trie API (``max.pipelines.kv_cache.radix_trie``).

A facade over the core ``Tree`` (tree.py): the tree walks, splits, adds and deletes nodes,
keeps ids, sizes, the evictable leaves and their recency. What the facade adds is MAX's
vocabulary:

* tokens are **any hashable values**, as MAX's own callers and tests use them (token ids,
  numpy integers, words, tuples): the trie compares them with ``==`` and keys children by
  them; ``RadixKey``'s token-id rules (ints in ``[0, 2**63)``) are the pymllm caches', not
  the trie's. Its tree holds them as token tuples (keys.py's tuple form), as given (an
  array's or tensor's as the plain values of ``tolist()``). An unhashable token is a
  ``TokenTypeError``. Only with an ``event_listener`` must stored tokens be token ids:
  routers recompute the page hashes (SPEC.md §9) from them, so the trie then stores (and
  publishes) them as plain ints (a numpy integer as the int it stands for);
* values are *blocks*, one per page (a KV page id), **opaque**: the trie returns them as
  given, never compares them, and does not ask that they be distinct (a caller that hands
  one block to two pages gets it back twice; ``get_all_blocks`` returns a set, so a block
  must be hashable). Each node keeps its pages' blocks in ``blocks``, cut with it through
  the tree's ``on_split`` hook; a node's ``value`` holds no KV indices (an empty tensor:
  it only marks the node live);
* ``insert`` returns only the end node; along an existing path the trie keeps its own
  blocks and ignores the incoming ones, so the caller releases its duplicates; empty
  tokens are legal (MAX's behaviour since 2025-02-20): ``insert([], [])`` returns the
  start node, ``match_prefix([])`` matches nothing;
* locks are sets of sequence ids (``mark_in_use_by`` / ``mark_not_in_use_by``), idempotent
  per sequence; a node's ``lock_ref`` is the tree's protection count, one per sequence in
  ``active_seqs``; releasing a sequence that does not hold the node is a ``LockError``;
* ``evict_blocks(n)`` trims the least recently used unused leaf from its tail, page by
  page, until exactly ``n`` blocks went or nothing is evictable, and *returns* the evicted
  blocks (the caller frees them): it never overshoots.

Recency is the tree's logical clock, stamped on the path of every insert, match and
release, ties broken by node id (older first), so eviction order is reproducible. Usage
errors are raised before anything changes. SPEC.md, "RadixTrie (MAX)", lists where this API
differs from RadixCache.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any, cast

import torch

from radixkv.arguments import require_int
from radixkv.base import RadixKey, empty_indices
from radixkv.errors import LockError, TokenTypeError, UsageError
from radixkv.events import EventListener, PageEvents
from radixkv.invariants import check_tree, require
from radixkv.keys import KeyData, KeyRead, Tokens, validate_tokens
from radixkv.tree import Descent, Tree, TreeNode, depth_first, path_to_root


class TrieNode(TreeNode):
    """A run of tokens and one block per page of them (a ``TreeNode`` of the trie's tree).

    ``tokens`` are the node's tokens (any hashable values), ``blocks`` its blocks, one per
    page; ``active_seqs`` are the sequences using the node (it is evictable when empty).
    """

    __slots__ = ("active_seqs", "blocks")

    def __init__(
        self,
        node_id: int = 1,
        key: RadixKey | KeyData | None = None,
        value: torch.Tensor | None = None,
        parent: TreeNode | None = None,
        last_access_time: float = 0.0,
        extra_key: str | None = None,
    ) -> None:
        super().__init__(node_id, key, value, parent, last_access_time, extra_key)
        self.blocks: list[Any] = []
        self.active_seqs: set[Hashable] = set()

    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        tokens = self.tokens
        more = "..." if len(tokens) > 8 else ""
        return f"TrieNode(id={self.id}, tokens={list(tokens[:8])}{more}, blocks={self.blocks})"


class RadixTrie:
    """A radix trie from token prefixes to KV blocks, one block per ``page_size`` tokens."""

    def __init__(self, page_size: int = 1, *, event_listener: EventListener | None = None) -> None:
        """``event_listener`` receives a record for every page stored or evicted (the
        default namespace's page hashes, SPEC.md §9); without one nothing is hashed."""
        self.page_size = require_int("page_size", page_size, 1)
        self.tree = Tree(TrieNode, self.page_size, torch.device("cpu"), packed=False)
        self.tree.on_split.append(self._split_blocks)
        self._events = PageEvents.on(self.tree, event_listener)
        self._live = empty_indices(self.tree.device)  # every node's value: "not evicted"
        self._block_pages: Counter[Any] = Counter()  # block -> the pages holding it

    @property
    def root(self) -> TrieNode:
        return self.tree.root

    # ---- insert and match --------------------------------------------------------------

    def insert(
        self, tokens: Iterable[object], blocks: Sequence[Any], node: TrieNode | None = None
    ) -> TrieNode:
        """Cache ``tokens`` below ``node`` (default: the root); return the node ending there.

        ``tokens`` are any hashable values; ``len(tokens)`` must be a multiple of
        ``page_size`` with one block per page (none for no tokens: an empty insert returns
        ``node``). Where the path is cached already the trie keeps its blocks and ignores
        the incoming ones; only the blocks of new pages are adopted, as given.

        Raises:
            UsageError (a ValueError): misaligned tokens, a block count that does not match;
                TokenTypeError for an unhashable token or block (or, with an event listener,
                a stored token that is not a token id); StaleNodeError for an evicted node.
        """
        key = _tokens(tokens)
        p = self.page_size
        if len(key) % p:
            raise UsageError(f"{len(key)} tokens is not a multiple of page_size {p}")
        if len(key) // p != len(blocks):
            raise UsageError(f"{len(blocks)} blocks for {len(key) // p} pages")
        start = self._start(node)
        with KeyRead(key, None, key) as found:
            walk = self.tree.descend(found, start)
            new = found.new_part(walk.end)
        new_blocks = list(blocks[walk.end // p :])
        _require_hashable(new_blocks)
        if new and self._events is not None:
            # Routers hash stored pages from their token ids (§9) and decode them as plain
            # ints: what is stored (and so published) is the ids as ints, numpy's included.
            new = validate_tokens(new)
        end = self._end_of(walk, start)
        if new:
            end = self.tree.add_leaf(end, new, None, self._live)
            end.blocks = new_blocks
            self._block_pages.update(new_blocks)
        self.tree.touch(end)
        return end

    def match_prefix(
        self, tokens: Iterable[object], node: TrieNode | None = None
    ) -> tuple[TrieNode, list[Any]]:
        """The deepest node matching whole pages of ``tokens`` below ``node``, and the blocks.

        A partial last page is not matched (no tokens match nothing: ``(node, [])``). A
        partly matched node is split so that the returned node ends at the match; the
        matched path becomes the most recently used. The blocks are those given to insert,
        in page order (a block given to two pages appears twice).
        """
        key = _tokens(tokens)
        start = self._start(node)
        aligned = key[: len(key) // self.page_size * self.page_size]
        with KeyRead(aligned, None, aligned) as found:
            walk = self.tree.descend(found, start)
        end = self._end_of(walk, start)
        self.tree.touch(end)
        return end, [block for n in walk.path for block in self._node(n).blocks]

    def _end_of(self, walk: Descent[Any], start: TrieNode) -> TrieNode:
        """The node a walk from ``start`` ends at, cutting the node the key ends inside."""
        if walk.partial is not None:
            walk.path.append(self.tree.split(self._node(walk.partial), walk.partial_len))
        return self._node(walk.path[-1]) if walk.path else start

    # ---- locks -------------------------------------------------------------------------

    def mark_in_use_by(self, node: TrieNode, seq_id: Hashable) -> None:
        """Mark ``node`` and its ancestors as used by ``seq_id`` (idempotent per sequence)."""
        for n in path_to_root(self.tree.require_live(node)):
            if seq_id in n.active_seqs:
                break  # a sequence holding a node holds its ancestors already
            n.active_seqs.add(seq_id)
            self.tree.protect(n)

    def mark_not_in_use_by(self, node: TrieNode, seq_id: Hashable) -> None:
        """Release ``node`` and its ancestors from ``seq_id``; they become most recently used.

        Raises:
            LockError: ``seq_id`` does not hold every node on the path (nothing changes).
        """
        node = self.tree.require_live(node)
        path = list(path_to_root(node))
        for n in path:
            if seq_id not in n.active_seqs:
                raise LockError(f"sequence {seq_id!r} does not hold {n!r}")
        for n in path:
            n.active_seqs.discard(seq_id)
            self.tree.unprotect(n)
        self.tree.touch(node)

    # ---- eviction ----------------------------------------------------------------------

    def evict_blocks(self, desired_num_evicted: int) -> list[Any]:
        """Evict up to ``desired_num_evicted`` blocks from the tails of unused leaves.

        Least recently used leaf first (older node on a tie); a leaf emptied by trimming is
        deleted and its parent, if it became an unused leaf, joins the candidates. Returns
        exactly the evicted blocks, in eviction order (a leaf's last page first); the caller
        frees them. Stops short only when nothing is evictable.
        """
        require_int("desired_num_evicted", desired_num_evicted, 0)
        evicted: list[Any] = []
        while len(evicted) < desired_num_evicted:
            leaf = self.tree.lru_leaf()
            if leaf is None:
                break
            kept = max(len(leaf.blocks) - (desired_num_evicted - len(evicted)), 0)
            trimmed = leaf.blocks[kept:]
            evicted.extend(reversed(trimmed))
            self._block_pages.subtract(trimmed)
            for block in trimmed:
                if not self._block_pages[block]:
                    del self._block_pages[block]  # no page holds it any more
            del leaf.blocks[kept:]
            if kept:
                if self._events is not None and leaf.hash_values is not None:
                    self._events.removed(leaf.hash_values[kept:])  # the trimmed tail pages
                self.tree.trim_leaf(leaf, kept * self.page_size)
            else:
                self.tree.delete_leaf(leaf)  # its parent may become a candidate
                leaf.value = None
        return evicted

    def get_all_blocks(self) -> set[Any]:
        """Every block the trie holds (a block held by two pages, once)."""
        return set(self._block_pages)

    def get_evictable_blocks(self) -> set[Any]:
        """The blocks of nodes no sequence uses."""
        return {b for n in self.nodes() if not n.lock_ref for b in n.blocks}

    # ---- debugging ---------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Check the trie's tree (SPEC.md INV-1..9: its nodes hold blocks, not KV indices,
        and count the sequences using them) and its blocks: one per page of each node
        (INV-2), each node's lock count its sequences', a subset of its parent's (INV-5),
        and the pages holding each block as ``get_all_blocks`` counts them (INV-7).
        O(size of the trie).

        For tests and the state machines: raises InvariantViolation naming the INV id.
        """
        check_tree(self.tree, trie=True)
        p = self.page_size
        for node in self.nodes():
            require(
                "INV-2",
                len(node.blocks) * p == node.length,
                f"node {node.id} holds {len(node.blocks)} blocks for {node.length} tokens",
            )
            require(
                "INV-5",
                node.lock_ref == len(node.active_seqs),
                f"node {node.id} lock_ref {node.lock_ref} for {len(node.active_seqs)} sequences",
            )
            above = cast(TrieNode, node.parent)  # a node below the root has a parent
            require(
                "INV-5",
                above.parent is None or node.active_seqs <= above.active_seqs,
                f"node {node.id} is used by a sequence its parent is not",
            )
        held = Counter(block for node in self.nodes() for block in node.blocks)
        require("INV-7", held == self._block_pages, "the pages counted per block are stale")

    # ---- display -----------------------------------------------------------------------

    def pretty_format(self, print_blocks: bool = False) -> list[str]:
        """One line per node, depth-first: ``'-' * 2·(depth-1)`` then the tokens (and blocks)."""
        lines: list[str] = []
        for node, depth in depth_first(self.root):
            line = "-" * (2 * depth - 2) + str(list(node.tokens))
            lines.append(f"{line} : {node.blocks}" if print_blocks else line)
        return lines

    def pretty_print(self, print_blocks: bool = True) -> None:
        for line in self.pretty_format(print_blocks):
            print(line)

    def nodes(self) -> Iterator[TrieNode]:
        """Every node below the root, parents before children."""
        return self.tree.nodes()

    # ---- internals ---------------------------------------------------------------------

    def _split_blocks(self, upper: TrieNode, lower: TrieNode) -> None:
        """``on_split``: the upper part takes the blocks of its pages and the sequences."""
        pages = upper.length // self.page_size
        upper.blocks, lower.blocks = lower.blocks[:pages], lower.blocks[pages:]
        upper.active_seqs = set(lower.active_seqs)

    def _start(self, node: object) -> TrieNode:
        return self.root if node is None else self.tree.require_live(node)

    @staticmethod
    def _node(node: TreeNode) -> TrieNode:
        assert isinstance(node, TrieNode)
        return node


def _tokens(tokens: Iterable[object]) -> Tokens:
    """The caller's tokens as a tuple of hashable values (an array's or a tensor's as the
    plain values of ``tolist()``), or the usage error naming the first unhashable one."""
    if type(tokens) is not tuple:
        if type(tokens) is not list and hasattr(tokens, "tolist"):  # numpy, torch, array
            tokens = tokens.tolist()
        try:
            tokens = tuple(tokens)
        except TypeError:
            raise TokenTypeError(
                f"tokens must be an iterable of hashable values, got {type(tokens).__name__}"
            ) from None
    try:
        hash(tokens)
    except TypeError:
        for position, token in enumerate(tokens):
            if not _hashable(token):
                raise TokenTypeError(
                    f"token {position} must be hashable, got {type(token).__name__}"
                ) from None
        raise
    return cast(Tokens, tokens)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _require_hashable(blocks: list[Any]) -> None:
    """Blocks are opaque, but ``get_all_blocks`` returns a set of them."""
    for b in blocks:
        if not _hashable(b):
            raise TokenTypeError(f"blocks must be hashable, got {type(b).__name__}")
