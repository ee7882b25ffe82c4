"""The conformance boundary: a prefix cache seen through plain values.

The machines and the spec never see torch or tree nodes. An adapter turns token tuples,
index tuples and opaque handles into calls on the cache under test, and reports every
index the cache hands back to its allocator, one tuple per ``free`` call.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

import torch

import radixkv
from radixkv.tree import TreeNode, iter_subtree, path_to_root
from radixkv_conformance.protocol import (  # noqa: F401  # re-exported for older imports
    AdapterFactory,
    FreeSink,
    Namespace,
    PrefixCacheAdapter,
    Sizes,
)
from radixkv_conformance.protocol import TokenPlace as Slot


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
