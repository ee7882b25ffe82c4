"""sglang 0.5.23's ``UnifiedRadixCache`` with FULL + Mamba components, on the CPU.

    pip install --no-deps sglang==0.5.23 && pip install msgspec
    radixkv check radixkv_conformance.adapters.sglang_mamba:factory

sglang's own cache class, Mamba component and Python tree core, loaded as the SWA adapter
loads them (``_sglang_unified``: what is real, what is stubbed and why). Two stand-ins more:

- the request pool: the Mamba component asserts a ``HybridReqToTokenPool`` and takes state
  slots from its ``mamba_allocator``. ``HostMambaPool`` is sglang's class (loaded from
  ``memory_pool.py``) without its ``__init__``, which builds device buffers per layer; its
  allocator is sglang's ``MambaSlotAllocator`` with the kit's host as the free list
  (``_do_alloc`` is ``host.alloc_slot``, ``free`` is ``host.free_slot``);
- the runtime context's values: a chunk of 1 (the branching grid is the page) and no cap on
  states per path (``_sglang_unified.RUNTIME_CONTEXT``).

The adapter plays sglang's scheduler where the cache leaves it a part:

- a match is a request's (``cow_mamba=True``): the scheduler takes the request's slot first
  (``alloc_group_begin``), sglang names the source state, and the copy runs later, in the
  forward pass (schedule_batch.py:3240-3260); the adapter reports it at once, as
  ``host.copy_state``. A copy that could find no slot is a step sglang never takes
  (``_lend_ahead``);
- an insert passes as ``prev_prefix_len`` the prefix the caller's indices already hold in
  the tree, as the scheduler passes its request's (``_held_prefix``).

Without ``mamba_extra_buffer`` the component allows page size 1 only (components/mamba.py:77);
larger pages run with it on, as sglang's server does; it changes nothing in the tree.

Handles are node ids. Contents, states and lock counts are read off the Python core's nodes
(the Rust core builds with these components too, but its binding shows no lock counts, which
the kit's Mamba rules check); ``canonical_state`` gives the explorer the tree without ids.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import torch

from radixkv_conformance.adapters._calls import MambaCalls
from radixkv_conformance.adapters._sglang_picture import TreePicture
from radixkv_conformance.adapters._sglang_unified import (
    FULL,
    MAMBA,
    HostKVAllocator,
    UnifiedAdapter,
    build_cache,
    radix_key,
    sglang,
)
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Indices,
    Inserted,
    Matched,
    Namespace,
    NotAdmitted,
    PagePlace,
    Tokens,
)

NOTES = (
    "sglang 0.5.23 UnifiedRadixCache (FULL+Mamba, Python tree core) on the CPU with sglang's "
    "HybridReqToTokenPool and MambaSlotAllocator over the kit's slots; mamba chunk 1 (the "
    "branching grid is the page). A match copies the matched state into a slot of the "
    "request's (copy-on-write, reported when sglang names its source); insert passes the "
    "prefix the caller's indices already hold as prev_prefix_len, as sglang's scheduler does."
)
# Each policy with the line of sglang 0.5.23 it reflects (in sglang/srt/mem_cache/:
# unified_radix_cache.py; in its unified_cache/: unified_tree_core.py, components/mamba.py).
PROFILE = Profile(
    "sglang-mamba",
    # a split stamps the lower half (unified_tree_core.py:1517-1524); the upper is a new node
    victims=LRU_SPLIT_REFRESHES_BOTH,
    # insert frees the caller's indices past prev_prefix_len itself (unified_tree_core.py:1351)
    duplicates="cache",
    # reset drops the tree and frees nothing (unified_radix_cache.py:421)
    reset_frees=False,
    # every insert carries a state: components/mamba.py:235 asserts one, and its caller,
    # prepare_for_caching_req (components/mamba.py:604-681), always hands the request's
    mamba_insert_state="required",
    # "Only the Full (base) component decides whether a node survives"
    # (unified_tree_core.py:2276-2277): a node whose state went stays, its KV alone
    mamba_tombstone_leaves="kept",
    # "Tombstones are counted too" (components/mamba.py:476): a lock needs no state
    mamba_tombstone_locks="accepted",
    # a match or insert refreshes only the state it uses (components/mamba.py:127-151)
    mamba_state_recency="own",
    page_sizes=(1, 2, 4),
    notes=NOTES,
)


class HostMambaSlots(sglang.mamba_alloc.MambaSlotAllocator):  # type: ignore[misc,name-defined]  # sglang's class
    """sglang's slot allocator with the kit's host as its free list (``_do_alloc``, ``free``;
    sglang's own ``alloc`` and group pre-allocation run on them).

    The host lends until it says the pool is full (``None``). sglang then evicts until the
    allocator's free count grows by one: from a refusal on the count is the slots the cache
    freed since, as the kit's pool lends them (each once); before it, unbounded.
    """

    def __init__(self, host: Host) -> None:  # sglang's builds the free list on a device
        self.host, self.device = host, "cpu"
        self._alloc_iter: Iterator[torch.Tensor] | None = None  # sglang's group pre-allocation
        self.freed_since_refusal: int | None = None

    def _do_alloc(self, need_size: int) -> torch.Tensor | None:
        slots: list[int] = []
        for _ in range(need_size):
            slot = self.host.alloc_slot()
            if slot is None:
                self.freed_since_refusal = 0
                self.free(torch.tensor(slots, dtype=torch.int64))  # all or nothing
                return None
            slots.append(slot)
        self.freed_since_refusal = None
        return torch.tensor(slots, dtype=torch.int64)

    def free(self, free_index: torch.Tensor) -> None:
        for slot in free_index.flatten().tolist():
            self.host.free_slot(int(slot))
            if self.freed_since_refusal is not None:
                self.freed_since_refusal += 1

    def available_size(self) -> int:
        return 1 << 40 if self.freed_since_refusal is None else self.freed_since_refusal


class HostMambaPool(sglang.memory_pool.HybridReqToTokenPool):  # type: ignore[misc,name-defined]  # sglang's class
    """sglang's request pool for hybrid models; of it the cache uses the slot allocator."""

    def __init__(self, host: Host) -> None:  # sglang's builds state buffers per layer
        self.device = "cpu"
        self.mamba_allocator = HostMambaSlots(host)


class _RequestKV:
    """The fields of sglang's ``ReqKvInfo`` a copy-on-write match reads and sets
    (schedule_batch.py:990-1008)."""

    def __init__(self) -> None:
        self.mamba_pool_idx: torch.Tensor | None = None
        self.mamba_cow_src_index: torch.Tensor | None = None
        self.mamba_needs_clear = True

    @property
    def holds_mamba(self) -> bool:
        return self.mamba_pool_idx is not None


class _Request:
    """A fresh request, as the scheduler matches it: no streaming session, no slot yet."""

    session = None

    def __init__(self) -> None:
        self.kv = _RequestKV()


class SglangMambaAdapter(MambaCalls, UnifiedAdapter):
    capabilities = frozenset({"namespaces", "reset", "mamba"})
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        self.host = host
        pool = HostMambaPool(host)
        self.slots = pool.mamba_allocator
        cache = build_cache(
            page_size,
            "python",
            (FULL, MAMBA),
            HostKVAllocator(host, page_size),
            req_to_token_pool=pool,
            enable_mamba_extra_buffer=page_size > 1,
        )
        super().__init__(page_size, cache)

    def match(self, tokens: Tokens, namespace: Namespace) -> Matched:
        request = _Request()
        params = sglang.base.MatchPrefixParams(
            key=radix_key(tokens, namespace), cow_mamba=True, req=request
        )
        self._lend_ahead(self._copy_source(tokens, namespace))
        try:
            got = self.cache.match_prefix(params)
        finally:
            self.slots.alloc_group_end()  # a slot lent ahead that sglang did not take
        node = got.last_device_node
        indices = self._path(node)[: got.device_prefix_len]
        cow = self._copy(request.kv)
        return Matched(indices, node, int(got.device_prefix_len), got.mamba_branching_seqlen, cow)

    def _copy_source(self, tokens: Tokens, namespace: Namespace) -> Any:
        """The node whose state a match of ``tokens`` copies: the deepest node on its path
        that holds a state (read off the tree, nothing changed), or None."""
        key = tokens[: len(tokens) // self.page_size * self.page_size]
        ends = [
            (len(path), node)
            for node, path in self._nodes()
            if node.key.extra_key == namespace
            and key[: len(path)] == path
            and _slot(node) is not None
        ]
        return max(ends, key=lambda end: end[0])[1] if ends else None

    def _lend_ahead(self, source: Any) -> None:
        """The scheduler's pre-allocation (``alloc_group_begin``, scheduler.py:4199-4201): the
        request's slot for the copy of ``source``'s state, taken before the match.

        A pool with no slot makes sglang evict a state; with every other state locked it
        fails its assertion "Can not alloc mamba cache" (components/mamba.py:210-221). Its
        scheduler never gets there: the pool holds three slots per running request
        (kv_cache_configurator.py:227, 3137-3150), so the kit's smaller pool is a step it
        would not take (``NotAdmitted``), decided before anything changed."""
        if source is None:
            return
        self.slots.alloc_group_begin(1)
        if self.slots._alloc_iter is not None:
            return
        others = self.cache.mamba_evictable_size() - (0 if _locks(source)[1] else 1)
        if others <= 0:
            raise NotAdmitted("no slot for the copy and every other state is locked")

    def _copy(self, kv: _RequestKV) -> int | None:
        """The copy the forward pass makes of the state sglang named, into the request's slot."""
        if kv.mamba_cow_src_index is None:
            return None
        assert kv.mamba_pool_idx is not None  # sglang names a source only with a slot for it
        source, slot = int(kv.mamba_cow_src_index.flatten()[0]), int(kv.mamba_pool_idx)
        self.host.copy_state(source, slot)
        return slot

    def insert(
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        state_slot: int | None = None,
    ) -> Inserted:
        key = radix_key(tokens, namespace)
        state = None if state_slot is None else torch.tensor([state_slot], dtype=torch.int64)
        params = sglang.base.InsertParams(
            key=key,
            value=torch.tensor(indices, dtype=torch.int64),
            mamba_value=state,
            prev_prefix_len=self._held_prefix(key, indices),
        )
        result = self.cache.insert(params)
        return Inserted(int(result.prefix_len), result.last_device_node, bool(result.mamba_exist))

    def _held_prefix(self, key: Any, indices: Indices) -> int:
        """The prefix of the key the caller's indices already hold in the tree: its request's
        matched prefix, which sglang's scheduler passes as ``prev_prefix_len``
        (``cache_protected_len``, unified_radix_cache.py:1184) so that insert frees only the
        caller's duplicates past it, never the tree's own KV (unified_tree_core.py:1351)."""
        matched, node, _ = self.core.match_full_device_prefix(key)
        cached = self._path(node)[:matched]
        held = 0
        while held < min(len(cached), len(indices)) and cached[held] == indices[held]:
            held += 1
        return held // self.page_size * self.page_size

    def evict(self, num_tokens: int, *, mamba_slots: int = 0) -> Evicted:
        got = self.cache.evict(
            sglang.base.EvictParams(num_tokens=num_tokens, mamba_num=mamba_slots)
        )
        return Evicted(int(got.num_tokens_evicted), 0, int(got.mamba_num_evicted))

    def reset(self) -> None:
        self.cache.reset()

    def _nodes(self) -> Iterator[tuple[Any, tuple[int, ...]]]:
        """Every node below the root with its token path, parents first."""
        stack = [(self.core.root_node, ())]
        while stack:
            parent, path = stack.pop()
            for child in parent.children.values():
                below = (*path, *child.key)
                yield child, below
                stack.append((child, below))

    def mamba_contents(self) -> dict[PagePlace, tuple[Indices, int | None]]:
        """Each page's KV indices; a node's state is the state after its last token, so it
        sits at the node's last page."""
        out: dict[PagePlace, tuple[Indices, int | None]] = {}
        p = self.page_size
        for node, path in self._nodes():
            values, slot = _values(node), _slot(node)
            start = len(path) - len(values)
            for at in range(0, len(values), p):
                last = at + p == len(values)
                place = (node.key.extra_key, path[: start + at + p])
                out[place] = (values[at : at + p], slot if last else None)
        return out

    def lock_counts(self) -> list[tuple[int, int]]:
        return [_locks(node) for node, _ in self._nodes()]

    def canonical_state(self, handles: Sequence[Any]) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The cache's whole state, for the explorer, so equal futures merge
        (``TreePicture``: every node, the state list's order among every LRU list's, stamps
        as ranks, the components, the request pool's slot allocator and its count)."""
        return TreePicture(self, (self.host,), frozenset()).state(handles)

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (node.id, node.parent.id, path, *_node_state(node)) for node, path in self._nodes()
        )
        return (nodes, self.sizes(), self.mamba_sizes())


def _node_state(node: Any) -> tuple[Namespace, Indices, int | None, tuple[int, int]]:
    """What a node holds besides its place: namespace, KV indices, state slot, locks."""
    return (node.key.extra_key, _values(node), _slot(node), _locks(node))


def _values(node: Any) -> Indices:
    return tuple(int(i) for i in node.component_data[FULL].value.tolist())


def _slot(node: Any) -> int | None:
    """The state slot the node holds (sglang keeps it as a one-element tensor), if any."""
    state = node.component_data[MAMBA].value
    return None if state is None else int(state.flatten()[0])


def _locks(node: Any) -> tuple[int, int]:
    data = node.component_data
    return (int(data[FULL].lock_ref), int(data[MAMBA].lock_ref))


def factory(page_size: int, host: Host) -> SglangMambaAdapter:
    """The Python tree core (sglang's default)."""
    return SglangMambaAdapter(page_size, host)
