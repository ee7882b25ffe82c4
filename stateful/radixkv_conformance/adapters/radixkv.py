"""radixkv's own caches under the kit, through the same protocol as any other engine.

    radixkv check radixkv_conformance.adapters.radixkv:radix_cache
    radixkv check radixkv_conformance.adapters.radixkv:sliding_window
    radixkv check radixkv_conformance.adapters.radixkv:mamba

Each adapter converts plain values to tensors and back, and keeps the buffers it handed the
cache on the last call so that ``scribble`` can write into them afterwards, as a caller
reusing its buffers would (capability ``caller_buffers``): the cache must not keep views.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

import radixkv
from radixkv.events import EventRecorder, KVCacheEvent, RouterFilter, to_wire
from radixkv.tree import TreeNode, iter_subtree, path_to_root
from radixkv_conformance.adapters._calls import MambaCalls, RefCountedCalls
from radixkv_conformance.adapters._radixkv_tree import (
    CanonicalTree,
    mamba_path,
    nodes_along,
    paths_below,
    ranks,
)
from radixkv_conformance.profile import RADIXKV, RADIXKV_MAMBA, RADIXKV_POLICIES, RADIXKV_SWA
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Inserted,
    Matched,
    PagePlace,
    TokenPlace,
)

PROFILE = RADIXKV
PROFILES = {
    "radix_cache": RADIXKV,
    "sliding_window": RADIXKV_SWA,
    "mamba": RADIXKV_MAMBA,
    **{f"policy_{name}": profile for name, profile in RADIXKV_POLICIES.items()},
}
"""The profile of each factory here (``radixkv check`` reads it by factory name)."""

SCRIBBLE = -7  # what the caller writes into its buffers after a call


class _Pools:
    """The allocator and state pool the caches see: every call goes to the kit's host."""

    def __init__(self, host: Host, device: torch.device) -> None:
        self.host = host
        self.device = device

    def free(self, indices: torch.Tensor) -> None:
        self.host.free(tuple(int(i) for i in indices.tolist()))

    def free_swa(self, indices: torch.Tensor) -> None:
        self.host.free_swa(tuple(int(i) for i in indices.tolist()))

    def alloc_track_slot(self) -> int | None:
        return self.host.alloc_slot()

    def free_track_slot(self, slot: int) -> None:
        self.host.free_slot(int(slot))

    def copy_states(self, src: int, dst: int) -> None:
        self.host.copy_state(int(src), int(dst))


class _CallerBuffers:
    """The key lists and value tensors handed to the cache on the last call."""

    def __init__(self) -> None:
        self.keys: list[list[Any]] = []
        self.values: list[torch.Tensor] = []

    def key(self, tokens: tuple[Any, ...], namespace: Any) -> radixkv.RadixKey:
        self.keys.clear()
        self.values.clear()
        ids = list(tokens)
        self.keys.append(ids)
        return radixkv.RadixKey(ids, namespace)

    def value(self, indices: tuple[int, ...], device: torch.device) -> torch.Tensor:
        tensor = torch.tensor(indices, dtype=torch.int64, device=device)
        self.values.append(tensor)
        return tensor

    def scribble(self) -> None:
        for ids in self.keys:
            ids[:] = [SCRIBBLE] * len(ids)
        for tensor in self.values:
            tensor.fill_(SCRIBBLE)
        self.keys.clear()
        self.values.clear()


class EventStreams:
    """A radixkv cache's KV events twice: as its listener hears them (``take_events``), and
    as radixkv's publisher sends them, after ``RouterFilter`` (``take_published_events``):
    the kit checks the cache's whole stream and a router's view (``router_events``)."""

    def __init__(self) -> None:
        self.events = EventRecorder()
        self.router_filter = RouterFilter()  # what radixkv's publisher applies before it sends
        self.published = EventRecorder()

    def hear(self, event: KVCacheEvent) -> None:
        """The cache's event listener: every record is kept as heard, and as published."""
        self.events(event)
        sent = self.router_filter(event)
        if sent is not None:
            self.published(sent)

    def take_events(self) -> list[Any]:
        """Every record as the cache's listener heard it since the last call, in its wire
        form (a map tagged ``type``)."""
        return [to_wire(event) for event in self.events.take()]

    def take_published_events(self) -> list[Any]:
        """The same records after ``RouterFilter``, as radixkv's publisher sends them."""
        return [to_wire(event) for event in self.published.take()]


class _OwnCacheAdapter(EventStreams, RefCountedCalls):
    """What the adapters of radixkv's own caches share: the kit's view of evictions, the
    caller's buffers, the cache's own invariant check and events."""

    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)
    capabilities = frozenset(
        {
            "namespaces",
            "reset",
            "bad_input",
            "unlock_checks",
            "stale_handles",
            "on_node_evict",
            "caller_buffers",
            "events",
            "router_events",
        }
    )
    cache: radixkv.RadixCache | radixkv.MambaRadixCache

    def __init__(self, page_size: int) -> None:
        super().__init__()
        self.page_size = page_size
        self.evicted_ids: list[int] = []
        self.buffers = _CallerBuffers()

    def evicted_node_ids(self) -> list[Hashable]:
        return list(self.evicted_ids)

    def scribble(self) -> None:
        self.buffers.scribble()

    def check(self) -> None:
        self.cache.check_invariants()

    def canonical_state(self, handles: Sequence[Any]) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The tree with node ids, births and stamps as ranks, nodes named by their place
        in a walk (children in the tree's own order), handles by the node they name
        (``CanonicalTree``). Left out: the evicted-id log (ids are never reused), the heap's stale
        entries, hit counts unless the eviction policy reads them."""
        canon = CanonicalTree(self.cache.root, reads_hits=self._reads_hits())
        sizes = (self.cache.evictable_size(), self.cache.protected_size())
        picture = (canon.nodes(self._node_extra), self._mode_state(canon), sizes)
        return picture, tuple(canon.name(h) for h in handles)

    def _reads_hits(self) -> bool:
        return False

    def _node_extra(self, node: Any) -> tuple[Hashable, ...]:
        """What this cache keeps on a node besides the tree's own fields."""
        return ()

    def _mode_state(self, canon: CanonicalTree) -> Hashable:
        """What this cache keeps besides its nodes (SWA's lock records, Mamba's LRU)."""
        return None


def _node_state(node: TreeNode, *extra: object) -> tuple[object, ...]:
    """What a snapshot holds of every node: where it is, its tokens, indices and recency,
    then what its cache adds (``extra``)."""
    return (
        node.id,
        node.parent.id if node.parent is not None else None,
        node.extra_key,
        node.tokens,
        tuple(node.value.tolist()) if node.value is not None else None,
        node.last_access_time,
        node.hit_count,
        *extra,
    )


class RadixCacheAdapter(_OwnCacheAdapter):
    """radixkv's RadixCache (no window)."""

    capabilities = _OwnCacheAdapter.capabilities | {"hashing"}
    notes = "page_hashes asks for the deepest node's hashes first (order must not matter)"

    cache: radixkv.RadixCache

    def __init__(self, page_size: int, host: Host, device: str = "cpu") -> None:
        super().__init__(page_size)
        self.device = torch.device(device)
        self.cache = self._build(page_size, host)

    def _build(self, page_size: int, host: Host) -> radixkv.RadixCache:
        return radixkv.RadixCache(
            page_size,
            token_to_kv_pool_allocator=_Pools(host, self.device),
            on_node_evict=self.evicted_ids.append,
            event_listener=self.hear,
            **self._options(host),
        )

    def _options(self, host: Host) -> dict[str, Any]:
        """What a variant adds to the RadixCache's constructor (a window, a policy)."""
        return {}

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> Matched:
        result = self.cache.match_prefix(self.buffers.key(tokens, namespace))
        return Matched(tuple(result.indices.tolist()), result.last_node)

    def insert(self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...]) -> Inserted:
        key = self.buffers.key(tokens, namespace)
        result = self.cache.insert(key, self.buffers.value(indices, self.device))
        return Inserted(result.prefix_len, result.last_node)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.dec_lock_ref(handle, token)

    def evict(self, num_tokens: Any) -> Evicted:
        return Evicted(self.cache.evict(num_tokens).full_evicted)

    def contents(self) -> dict[TokenPlace, int]:
        out: dict[TokenPlace, int] = {}
        p = self.page_size
        for node, path in paths_below(self.cache.root):
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

    def live_node_ids(self) -> set[Hashable]:
        return {node.id for node in iter_subtree(self.cache.root)}

    def _reads_hits(self) -> bool:
        return bool(self.cache.tree.policy.name == "lfu")

    def _node_extra(self, node: Any) -> tuple[Hashable, ...]:
        hashes = tuple(node.hash_values or ())
        return (node.lock_ref, node.held_locks, hashes, node.swa_lock_ref, node.swa_tombstone)

    def _mode_state(self, canon: CanonicalTree) -> Hashable:
        """SWA's lock records: which node each live lock id holds and where its window
        starts (lock ids are compared by equality only: ranks)."""
        records = getattr(self.cache._part, "_locks", {})  # read only: the SWA part's records
        ids = ranks(records)
        return tuple(
            (ids[lock_id], canon.name(record.node), record.top)
            for lock_id, record in sorted(records.items())
        )

    def snapshot(self) -> Hashable:
        nodes = tuple(
            _node_state(
                n,
                n.lock_ref,
                n.held_locks,
                tuple(n.hash_values or ()),
                n.swa_lock_ref,
                n.swa_tombstone,
            )
            for n in iter_subtree(self.cache.root)
        )
        return (nodes, self.sizes(), self.cache.root.last_access_time, len(self.evicted_ids))


class SlidingWindowAdapter(RadixCacheAdapter):
    """radixkv's RadixCache with ``sliding_window_size = host.sliding_window``."""

    capabilities = RadixCacheAdapter.capabilities - {"hashing"} | {"swa", "node_boundaries"}
    notes = ""

    def _options(self, host: Host) -> dict[str, Any]:
        return {"sliding_window_size": host.sliding_window}

    def insert(
        self,
        tokens: tuple[Any, ...],
        namespace: Any,
        indices: tuple[int, ...],
        *,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
    ) -> Inserted:
        key = self.buffers.key(tokens, namespace)
        result = self.cache.insert(
            key,
            self.buffers.value(indices, self.device),
            prev_prefix_len=prev_prefix_len,
            swa_evicted_seqlen=swa_evicted_seqlen,
        )
        return Inserted(result.prefix_len, result.last_node)

    def evict(self, num_tokens: Any, *, swa_num_tokens: Any = 0) -> Evicted:
        result = self.cache.evict(num_tokens, swa_num_tokens)
        return Evicted(result.full_evicted, result.swa_evicted)

    def swa_pages(self) -> dict[PagePlace, tuple[tuple[int, ...], bool]]:
        out: dict[PagePlace, tuple[tuple[int, ...], bool]] = {}
        p = self.page_size
        for node, path in paths_below(self.cache.root):
            assert node.value is not None
            values, start = node.value.tolist(), len(path) - len(node)
            for at in range(0, len(node), p):
                page = tuple(values[at : at + p])
                out[(node.extra_key, path[: start + at + p])] = (page, node.swa_tombstone)
        return out

    def swa_locked_pages(self) -> set[PagePlace]:
        p = self.page_size
        return {
            (node.extra_key, path[: len(path) - len(node) + at + p])
            for node, path in paths_below(self.cache.root)
            if node.swa_lock_ref > 0
            for at in range(0, len(node), p)
        }

    def swa_sizes(self) -> tuple[int, int]:
        return self.cache.swa_evictable_size(), self.cache.swa_protected_size()

    def node_starts(self, tokens: tuple[int, ...], namespace: Any) -> list[int]:
        return [start for _, start in nodes_along(self.cache.root, tokens, namespace)]


class MambaAdapter(MambaCalls, _OwnCacheAdapter):
    """radixkv's MambaRadixCache; state slots come from the kit's host."""

    capabilities = _OwnCacheAdapter.capabilities | {"mamba"}

    cache: radixkv.MambaRadixCache

    def __init__(self, page_size: int, host: Host) -> None:
        super().__init__(page_size)
        pools = _Pools(host, torch.device("cpu"))
        self.cache = radixkv.MambaRadixCache(
            page_size, pools, pools, self.evicted_ids.append, event_listener=self.hear
        )

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> Matched:
        # The kit plays a request that runs: it asks for its private copy of the state.
        r = self.cache.match_prefix(self.buffers.key(tokens, namespace), cow=True)
        indices = tuple(r.indices.tolist())
        return Matched(indices, r.last_node, r.prefix_len, r.mamba_branching_seqlen, r.cow_slot)

    def insert(
        self,
        tokens: tuple[Any, ...],
        namespace: Any,
        indices: tuple[int, ...],
        *,
        state_slot: Any = None,
    ) -> Inserted:
        key = self.buffers.key(tokens, namespace)
        value = self.buffers.value(indices, torch.device("cpu"))
        r = self.cache.insert(key, value, mamba_value=state_slot)
        return Inserted(r.prefix_len, r.last_node, r.mamba_exist)

    def evict(self, num_tokens: Any, *, mamba_slots: Any = 0) -> Evicted:
        r = self.cache.evict(num_tokens, mamba_slots)
        return Evicted(r.full_evicted, 0, r.mamba_evicted)

    def mamba_contents(self) -> dict[PagePlace, tuple[tuple[int, ...], int | None]]:
        out: dict[PagePlace, tuple[tuple[int, ...], int | None]] = {}
        p = self.page_size
        for node in self.cache.nodes():
            path = mamba_path(node)
            assert node.value is not None
            values = tuple(node.value.tolist())
            start = len(path) - len(node)
            for end in range(start + p, len(path) + 1, p):
                slot = node.slot if end == len(path) else None
                out[(node.extra_key, path[:end])] = (values[end - start - p : end - start], slot)
        return out

    def lru_orders(self) -> tuple[list[PagePlace], list[PagePlace]]:
        return (
            [(n.extra_key, mamba_path(n)) for n in self.cache.full_lru],
            [(n.extra_key, mamba_path(n)) for n in self.cache.mamba_lru],
        )

    def lock_counts(self) -> list[tuple[int, int]]:
        return [(n.full_lock_ref, n.mamba_lock_ref) for n in self.cache.nodes()]

    def live_node_ids(self) -> set[Hashable]:
        return {node.id for node in self.cache.nodes()}

    def _node_extra(self, node: Any) -> tuple[Hashable, ...]:
        return (node.slot, node.full_lock_ref, node.mamba_lock_ref)

    def _mode_state(self, canon: CanonicalTree) -> Hashable:
        """The mamba LRU list's order (kept by links, not stamps: it is state)."""
        return tuple(canon.name(node) for node in self.cache.mamba_lru)

    def snapshot(self) -> Hashable:
        nodes = tuple(
            _node_state(n, n.slot, n.full_lock_ref, n.mamba_lock_ref) for n in self.cache.nodes()
        )
        full, mamba = self.lru_orders()
        return (nodes, self.sizes(), tuple(full), tuple(mamba), len(self.evicted_ids))


def radix_cache(page_size: int, host: Host) -> RadixCacheAdapter:
    return RadixCacheAdapter(page_size, host)


def sliding_window(page_size: int, host: Host) -> SlidingWindowAdapter:
    return SlidingWindowAdapter(page_size, host)


def mamba(page_size: int, host: Host) -> MambaAdapter:
    return MambaAdapter(page_size, host)


class PolicyAdapter(RadixCacheAdapter):
    """radixkv's RadixCache built with ``eviction_policy``; inserts take a ``priority``."""

    capabilities = RadixCacheAdapter.capabilities | {"priority"}

    def __init__(self, page_size: int, host: Host, policy: str) -> None:
        self.policy = policy
        super().__init__(page_size, host)

    def _options(self, host: Host) -> dict[str, Any]:
        return {"eviction_policy": self.policy}

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...], priority: int = 0
    ) -> Inserted:
        key = self.buffers.key(tokens, namespace)
        value = self.buffers.value(indices, self.device)
        result = self.cache.insert(key, value, priority=priority)
        return Inserted(result.prefix_len, result.last_node)


def policy_lru(page_size: int, host: Host) -> PolicyAdapter:
    return PolicyAdapter(page_size, host, "lru")


def policy_lfu(page_size: int, host: Host) -> PolicyAdapter:
    return PolicyAdapter(page_size, host, "lfu")


def policy_fifo(page_size: int, host: Host) -> PolicyAdapter:
    return PolicyAdapter(page_size, host, "fifo")


def policy_mru(page_size: int, host: Host) -> PolicyAdapter:
    return PolicyAdapter(page_size, host, "mru")


def policy_priority(page_size: int, host: Host) -> PolicyAdapter:
    return PolicyAdapter(page_size, host, "priority")
