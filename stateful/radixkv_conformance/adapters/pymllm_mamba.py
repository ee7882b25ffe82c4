"""pymllm's ``MambaRadixCache`` (``pymllm/mem_cache/mamba_radix_cache.py``), from a checkout.

    PYMLLM_SRC=/path/to/mllm radixkv check radixkv_conformance.adapters.pymllm_mamba:factory

Loaded like ``pymllm`` (bare parent packages, nothing stubbed). A state slot is one int:
the adapter passes ``mamba_value=tensor([slot])`` and pymllm's ``mamba_pool.free_track_slot``
goes to ``host.free_slot``. pymllm never allocates or copies a slot (no copy-on-write) and
matches the whole KV prefix whether or not a state sits at its end: the profile says
``FULL_KV``.

Adapter choices (also in ``notes``): a node's state is reported at the last page of the
node (pymllm keeps one tensor per node); a node whose ``mamba_value`` is an empty tensor
(the lower half of a split) holds no slot. ``lock`` and ``unlock`` take no token (pymllm's
``inc_lock_ref`` returns ``None``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import torch

from radixkv_conformance.adapters._calls import MambaCalls
from radixkv_conformance.adapters._pymllm_import import import_module
from radixkv_conformance.adapters.pymllm import HostPool, PymllmTreeAdapter
from radixkv_conformance.profile import FULL_KV, Profile
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Indices,
    Inserted,
    Matched,
    Namespace,
    PagePlace,
    Tokens,
)

base = import_module("base_prefix_cache")
mamba_radix_cache = import_module("mamba_radix_cache")

NOTES = (
    "pymllm MambaRadixCache (b9c30702) from PYMLLM_SRC: full-KV match (no cut back to a "
    "state, no copy-on-write); the caller frees duplicate KV and, when mamba_exist, its own "
    "slot; reset drops the tree without freeing. A node's state is reported at its last page. "
    "Page size 1 only: with larger pages insert stores the unaligned tail, the finding the "
    "pymllm profile reports on the shared insert path."
)
PROFILE = Profile(
    "pymllm-mamba",
    mamba_match=FULL_KV,
    reset_frees=False,
    page_sizes=(1,),
    notes=NOTES,
)


class _Pools(HostPool):
    """pymllm's KV allocator (``free``) and Mamba pool (``free_track_slot``), to the host."""

    def free_track_slot(self, slot: int) -> None:
        self.host.free_slot(int(slot))


class PymllmMambaAdapter(MambaCalls, PymllmTreeAdapter):
    capabilities = frozenset(
        {"namespaces", "reset", "unlock_checks", "stale_handles", "on_node_evict", "mamba"}
    )
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        self.page_size = page_size
        self.evicted_ids: list[int] = []
        pools = _Pools(host)
        self.cache = mamba_radix_cache.MambaRadixCache(
            page_size=page_size,
            token_to_kv_pool_allocator=pools,
            mamba_pool=pools,
            on_node_evict=self.evicted_ids.append,
        )

    def match(self, tokens: Tokens, namespace: Namespace) -> Matched:
        result = self.cache.match_prefix(self._key(tokens, namespace))
        indices = tuple(int(i) for i in result.indices.tolist())
        return Matched(
            indices, result.last_node, int(result.prefix_len), result.mamba_branching_seqlen
        )

    def insert(
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        state_slot: int | None = None,
    ) -> Inserted:
        value = torch.tensor(indices, dtype=torch.int64)
        state = None if state_slot is None else torch.tensor([state_slot], dtype=torch.int64)
        result = self.cache.insert(self._key(tokens, namespace), value, mamba_value=state)
        return Inserted(int(result.prefix_len), result.last_node, bool(result.mamba_exist))

    def evict(self, num_tokens: int, *, mamba_slots: int = 0) -> Evicted:
        result = self.cache.evict(num_tokens, mamba_slots)
        return Evicted(int(result.full_evicted), 0, int(result.mamba_evicted))

    def mamba_contents(self) -> Mapping[PagePlace, tuple[Indices, int | None]]:
        out: dict[PagePlace, tuple[Indices, int | None]] = {}
        p = self.page_size
        for node, path in self._paths():
            start = len(path) - len(node.key)
            values = [int(i) for i in node.value.tolist()]
            slots = [] if node.mamba_value is None else node.mamba_value.tolist()
            for at in range(0, len(values), p):
                last = at + p >= len(values)
                slot = int(slots[0]) if last and slots else None
                out[(node.key.extra_key, path[: start + at + p])] = (
                    tuple(values[at : at + p]),
                    slot,
                )
        return out

    def lock_counts(self) -> list[tuple[int, int]]:
        return [(n.full_lock_ref, n.mamba_lock_ref) for n, _ in self._paths()]

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (
                *placed,
                None if node.mamba_value is None else tuple(node.mamba_value.tolist()),
                node.full_lock_ref,
                node.mamba_lock_ref,
                node.hit_count,
            )
            for node, placed in self._placed()
        )
        lru = (len(self.cache.full_lru), len(self.cache.mamba_lru))
        return (nodes, self.sizes(), self.mamba_sizes(), lru, len(self.evicted_ids))


def factory(page_size: int, host: Host) -> PymllmMambaAdapter:
    return PymllmMambaAdapter(page_size, host)
