"""pymllm's ``RadixCache`` (``pymllm/mem_cache/radix_cache.py``), from a local checkout.

    PYMLLM_SRC=/path/to/mllm radixkv check radixkv_conformance.adapters.pymllm:factory

pymllm cannot be installed from the package index; ``PYMLLM_SRC`` names a checkout of
UbiquitousLearning/mllm (checked at b9c30702). Its package ``__init__`` needs CUDA, so the
cache modules are loaded under bare parent packages (``_pymllm_import``); nothing is
stubbed and pymllm's code runs unmodified. Importing this module without ``PYMLLM_SRC``
raises ``ImportError`` saying so (the vector tests then skip).

The same cache with a sliding window is ``pymllm_swa``, the Mamba cache ``pymllm_mamba``:
each has its own profile.

Adapter choices (also in ``notes``): ``page_hashes`` asks for the deepest node's hashes
first and then its ancestors', as a caller hashing a freshly inserted leaf would; pymllm's
chain is then not position-aware. pymllm validates no input, so ``bad_input`` is not
claimed; unchecked unlocks and stale handles are claimed, because a silent negative lock
count corrupts the size counters.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import torch

from radixkv_conformance.adapters._calls import RefCountedCalls
from radixkv_conformance.adapters._pymllm_import import import_module
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import Host, Indices, Namespace, TokenPlace, Tokens

base = import_module("base_prefix_cache")
radix_cache = import_module("radix_cache")

NOTES = (
    "pymllm RadixCache (b9c30702) from PYMLLM_SRC. The caller frees duplicates "
    "(prefix_len); reset drops the tree without freeing; a walk stamps each node before it "
    "splits it, so a split refreshes both halves. page_hashes hashes the deepest node first."
)
PROFILE = Profile(
    "pymllm",
    victims=LRU_SPLIT_REFRESHES_BOTH,
    reset_frees=False,
    page_sizes=(1, 2, 4),
    notes=NOTES,
)


class HostPool:
    """The KV allocator pymllm frees into (``free``; ``free_swa`` in SWA mode)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.device = torch.device("cpu")

    def free(self, indices: torch.Tensor) -> None:
        self.host(tuple(int(i) for i in indices.tolist()))

    def free_swa(self, indices: torch.Tensor) -> None:
        self.host.free_swa(tuple(int(i) for i in indices.tolist()))


class PymllmTreeAdapter(RefCountedCalls):
    """What the adapters of pymllm's caches share: keys, the walk over live nodes, sizes,
    reset and the evicted ids (``cache`` is the pymllm cache, ``evicted_ids`` its
    ``on_node_evict`` list)."""

    usage_errors: tuple[type[BaseException], ...] = (ValueError, TypeError)
    page_size: int
    evicted_ids: list[int]
    cache: Any

    def _key(self, tokens: Tokens, namespace: Namespace) -> Any:
        return base.RadixKey(list(tokens), namespace)

    def _paths(self) -> Iterator[tuple[Any, tuple[int, ...]]]:
        """Every live node below the root with the token path ending at it."""
        stack: list[tuple[Any, tuple[int, ...]]] = [(self.cache.root_node, ())]
        while stack:
            node, path = stack.pop()
            for child in list(node.children.values()):
                if child.evicted:
                    continue
                child_path = path + tuple(child.key.token_ids)
                yield child, child_path
                stack.append((child, child_path))

    def _placed(self) -> Iterator[tuple[Any, tuple[Hashable, ...]]]:
        """Every live node with where it is and what it holds (what a snapshot starts each
        node with): its id, its parent's, its namespace, its path and its indices."""
        for node, path in self._paths():
            where = (node.id, node.parent.id, node.key.extra_key, path)
            yield node, (*where, tuple(node.value.tolist()))

    def evicted_node_ids(self) -> list[Hashable]:
        return list(self.evicted_ids)

    def live_node_ids(self) -> set[Hashable]:
        return {node.id for node, _ in self._paths()}

    def check(self) -> None:
        """pymllm has no self-check."""


class PymllmRadixCacheAdapter(PymllmTreeAdapter):
    """Token tuples become ``RadixKey`` lists, indices int64 CPU tensors; handles are nodes."""

    capabilities = frozenset(
        {"namespaces", "hashing", "reset", "unlock_checks", "stale_handles", "on_node_evict"}
    )
    notes = NOTES

    def __init__(self, page_size: int, host: Host, sliding_window: int | None = None) -> None:
        self.page_size = page_size
        self.evicted_ids: list[int] = []
        self.cache = radix_cache.RadixCache(
            page_size=page_size,
            sliding_window_size=sliding_window,
            token_to_kv_pool_allocator=HostPool(host),
            on_node_evict=self.evicted_ids.append,
        )

    def match(self, tokens: Tokens, namespace: Namespace) -> tuple[Indices, Any]:
        result = self.cache.match_prefix(self._key(tokens, namespace))
        return tuple(int(i) for i in result.indices.tolist()), result.last_node

    def insert(self, tokens: Tokens, namespace: Namespace, indices: Indices) -> tuple[int, Any]:
        value = torch.tensor(indices, dtype=torch.int64)
        result = self.cache.insert(self._key(tokens, namespace), value)
        return int(result.prefix_len), result.last_node

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.dec_lock_ref(handle, token)

    def evict(self, num_tokens: int) -> int:
        return int(self.cache.evict(num_tokens).full_evicted)

    def contents(self) -> dict[TokenPlace, int]:
        out: dict[TokenPlace, int] = {}
        p = self.page_size
        for node, path in self._paths():
            start = len(path) - len(node.key)
            for at, index in enumerate(node.value.tolist(), start):
                out[(node.key.extra_key, path[: at // p * p + p], at % p)] = int(index)
        return out

    def page_hashes(self, handle: Any) -> list[str]:
        own = list(self.cache.compute_node_hash(handle))  # deepest first (module doc)
        above = []
        node = handle.parent
        while node is not None and node is not self.cache.root_node:
            above.append(node)
            node = node.parent
        return [h for n in reversed(above) for h in self.cache.compute_node_hash(n)] + own

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (
                *placed,
                node.lock_ref,
                node.swa_lock_ref,
                node.swa_tombstone,
                node.swa_boundary_id,
                node.last_access_time,
                node.hit_count,
                tuple(node.hash_values or ()),
            )
            for node, placed in self._placed()
        )
        c = self.cache
        counters = (c.swa_evictable_size(), c.swa_protected_size())
        return (nodes, self.sizes(), counters, len(self.evicted_ids))


def factory(page_size: int, host: Host) -> PymllmRadixCacheAdapter:
    return PymllmRadixCacheAdapter(page_size, host)
