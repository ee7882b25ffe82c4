"""The conformance boundary: a prefix cache seen through plain values.

The machines and the spec never see torch or tree nodes. An adapter turns token tuples,
index tuples and opaque handles into calls on the cache under test, and reports every
index the cache hands back to its allocator, one tuple per ``free`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol, cast

import torch

import radixkv
from radixkv.tree import TreeNode, iter_subtree, path_to_root

Namespace = str | None
Slot = tuple[Namespace, tuple[int, ...], int]
"""Where a cached token sits: namespace, the page-aligned path ending with its page, offset.

Per page, not per token: with page_size > 1 the cached pages [1, 2] and [1, 3] hold
different indices for the same first token.
"""
FreeSink = Callable[[tuple[int, ...]], None]


class Sizes(NamedTuple):
    evictable: int
    protected: int
    total: int


class PrefixCacheAdapter(Protocol):
    """What a harness needs from a prefix cache; an engine writes one in about 50 lines.

    Arguments are passed through unvalidated, so the bad-input rules reach the cache.
    """

    page_size: int
    usage_errors: tuple[type[BaseException], ...]

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        """Returns (matched indices, handle of the node ending at the match)."""

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int | None, Any]:
        """Returns (prefix_len, handle of the node ending at the aligned key).

        ``prefix_len`` is ``None`` for a cache that does not report it (profile
        ``duplicates="kept"``, like MAX's RadixTrie).
        """

    def lock(self, handle: Any) -> Any:
        """Lock the path to ``handle``; returns whatever the unlock needs back."""

    def unlock(self, handle: Any, token: Any) -> None: ...

    def evict(self, num_tokens: Any) -> int:
        """Evict; returns the count the cache reports (frees go to the sink)."""

    def reset(self) -> None: ...

    def sizes(self) -> Sizes: ...

    def contents(self) -> dict[Slot, int]:
        """Every cached token's slot and its KV index."""

    def page_hashes(self, handle: Any) -> list[str]:
        """The page hashes of every page on the root path ending at ``handle``, in order."""

    def check(self) -> None:
        """The implementation's own invariant check, if it has one."""

    def snapshot(self) -> Hashable:
        """A plain picture of the whole state, to show a rejected call changed nothing."""


AdapterFactory = Callable[[int, FreeSink], PrefixCacheAdapter]


class _SinkAllocator:
    """Forwards every ``free`` to the harness as a tuple of ints."""

    def __init__(self, sink: FreeSink, device: torch.device) -> None:
        self.sink = sink
        self.device = device

    def free(self, indices: torch.Tensor) -> None:
        self.sink(tuple(int(i) for i in indices.tolist()))


class RadixCacheAdapter:
    """radixkv's own RadixCache under the harness."""

    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)

    def __init__(self, page_size: int, sink: FreeSink, device: str = "cpu") -> None:
        self.page_size = page_size
        self.device = torch.device(device)
        self.evicted_ids: list[int] = []
        self.cache = radixkv.RadixCache(
            page_size,
            token_to_kv_pool_allocator=_SinkAllocator(sink, self.device),
            on_node_evict=self.evicted_ids.append,
        )

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> tuple[tuple[int, ...], Any]:
        result = self.cache.match_prefix(radixkv.RadixKey(list(tokens), namespace))
        return tuple(result.indices.tolist()), result.last_node

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]
    ) -> tuple[int, Any]:
        value = torch.tensor(indices, dtype=torch.int64, device=self.device)
        result = self.cache.insert(radixkv.RadixKey(list(tokens), namespace), value)
        return result.prefix_len, result.last_node

    def lock(self, handle: Any) -> Any:
        return self.cache.inc_lock_ref(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.dec_lock_ref(handle, token)

    def evict(self, num_tokens: Any) -> int:
        return self.cache.evict(num_tokens).full_evicted

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> Sizes:
        c = self.cache
        return Sizes(c.evictable_size(), c.protected_size(), c.total_size())

    def contents(self) -> dict[Slot, int]:
        out: dict[Slot, int] = {}
        p = self.page_size
        for node, path in _paths(self.cache.root):
            assert node.value is not None
            start = len(path) - len(node)
            for at, index in enumerate(node.value.tolist(), start):
                page_end = at // p * p + p
                out[(node.extra_key, path[:page_end], at % p)] = int(index)
        return out

    def page_hashes(self, handle: Any) -> list[str]:
        own = self.cache.compute_node_hash(handle)  # deepest first: order must not matter
        above = list(path_to_root(handle))[:0:-1]
        return [h for node in above for h in self.cache.compute_node_hash(node)] + own

    def check(self) -> None:
        self.cache.check_invariants()
        live = {node.id for node in iter_subtree(self.cache.root)}
        assert len(set(self.evicted_ids)) == len(self.evicted_ids), "on_node_evict fired twice"
        assert not live & set(self.evicted_ids), "on_node_evict fired for a live node"

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (
                node.id,
                node.parent.id if node.parent is not None else None,
                node.extra_key,
                node.tokens,
                tuple(node.value.tolist()) if node.value is not None else None,
                node.lock_ref,
                node.held_locks,
                node.last_access_time,
                node.hit_count,
                tuple(node.hash_values or ()),
            )
            for node in iter_subtree(self.cache.root)
        )
        return (nodes, self.sizes(), self.cache.root.last_access_time, len(self.evicted_ids))


def _paths(root: TreeNode) -> list[tuple[TreeNode, tuple[int, ...]]]:
    """Every node below ``root`` with the full token path ending at it."""
    out: list[tuple[TreeNode, tuple[int, ...]]] = []
    stack: list[tuple[TreeNode, tuple[int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        for child in node.children.values():
            child_path = path + cast(tuple[int, ...], child.tokens)  # the harness uses ints
            out.append((child, child_path))
            stack.append((child, child_path))
    return out
