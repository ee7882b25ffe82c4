"""pymllm's ``RadixCache`` in sliding-window mode, from a local checkout.

    PYMLLM_SRC=/path/to/mllm radixkv check radixkv_conformance.adapters.pymllm_swa:factory

The cache is ``pymllm.adapters.pymllm``'s, built with ``sliding_window_size`` =
``host.sliding_window``; SWA frees go to ``host.free_swa`` (pymllm's pool ``free_swa``).

Adapter choices (also in ``notes``): pymllm's SWA ``insert`` returns no node, so the handle
is found afterwards by a read-only walk comparing keys (the deepest node whose root path
the inserted tokens spell; no split, no stamp). ``lock`` returns pymllm's
``swa_boundary_id``, ``None`` included, and ``unlock`` passes back exactly that.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import torch

from radixkv_conformance.adapters.pymllm import PymllmRadixCacheAdapter
from radixkv_conformance.profile import LRU_SPLIT_REFRESHES_BOTH, Profile
from radixkv_conformance.protocol import (
    Evicted,
    Host,
    Indices,
    Inserted,
    Namespace,
    PagePlace,
    Tokens,
)

NOTES = (
    "pymllm RadixCache with a sliding window (b9c30702) from PYMLLM_SRC. Insert frees the "
    "caller's duplicates itself and stamps each node before it splits it (both halves "
    "refreshed); reset drops the tree without freeing; a lock's swa_boundary_id (None "
    "included) goes back to its unlock unchanged. Insert returns no node: the adapter finds "
    "it by a read-only key walk. Page size 1 only: with larger pages insert stores the "
    "unaligned tail, the finding the pymllm profile reports on the shared insert path."
)
PROFILE = Profile(
    "pymllm-swa",
    victims=LRU_SPLIT_REFRESHES_BOTH,
    duplicates="cache",
    reset_frees=False,
    swa_lock_tokens="exact",
    swa_insert_args=True,
    swa_window_tombstones="skip",  # inc_lock_ref passes a tombstone uncounted, walks on
    page_sizes=(1,),
    notes=NOTES,
)


class PymllmSwaAdapter(PymllmRadixCacheAdapter):
    capabilities = frozenset(
        {"namespaces", "reset", "unlock_checks", "stale_handles", "swa", "node_boundaries"}
    )
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        if host.sliding_window is None:
            raise ValueError("pymllm_swa needs host.sliding_window (the kit's SWA rules)")
        super().__init__(page_size, host, sliding_window=host.sliding_window)

    def insert(  # type: ignore[override]  # SWA insert takes the caller's two offsets
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
    ) -> Inserted:
        value = torch.tensor(indices, dtype=torch.int64)
        result = self.cache.insert(
            self._key(tokens, namespace),
            value,
            prev_prefix_len=prev_prefix_len,
            swa_evicted_seqlen=swa_evicted_seqlen,
        )
        return Inserted(int(result.prefix_len), self._node_spelling(tuple(tokens), namespace))

    def _node_spelling(self, tokens: tuple[int, ...], namespace: Namespace) -> Any:
        """The deepest live node whose root path is a prefix of ``tokens``: read only."""
        spelled = self._spelling(tokens, namespace)
        return spelled[-1] if spelled else self.cache.root_node

    def node_starts(self, tokens: Tokens, namespace: Namespace) -> list[int]:
        """Where the nodes the read-only key walk passes begin (capability node_boundaries)."""
        starts: list[int] = []
        at = 0
        for node in self._spelling(tuple(tokens), namespace):
            starts.append(at)
            at += len(node.key)
        return starts

    def _spelling(self, tokens: tuple[int, ...], namespace: Namespace) -> list[Any]:
        """The live nodes from the root down whose keys spell a prefix of ``tokens``."""
        node, rest, path = self.cache.root_node, tokens, []
        while rest:
            for child in list(node.children.values()):
                edge = tuple(child.key.token_ids)
                if (
                    not child.evicted
                    and child.key.extra_key == namespace
                    and edge == rest[: len(edge)]
                ):
                    node, rest = child, rest[len(edge) :]
                    path.append(node)
                    break
            else:
                break
        return path

    def evict(self, num_tokens: int, *, swa_num_tokens: int = 0) -> Evicted:  # type: ignore[override]  # plus the SWA target
        result = self.cache.evict(num_tokens, swa_num_tokens)
        return Evicted(int(result.full_evicted), int(result.swa_evicted))

    def swa_pages(self) -> Mapping[PagePlace, tuple[Indices, bool]]:
        out: dict[PagePlace, tuple[Indices, bool]] = {}
        p = self.page_size
        for node, path in self._paths():
            start = len(path) - len(node.key)
            values = [int(i) for i in node.value.tolist()]
            for at in range(0, len(values), p):
                end = start + at + p
                page = tuple(values[at : at + p])
                out[(node.key.extra_key, path[:end])] = (page, bool(node.swa_tombstone))
        return out

    def swa_sizes(self) -> tuple[int, int]:
        return (self.cache.swa_evictable_size(), self.cache.swa_protected_size())

    def swa_locked_pages(self) -> set[PagePlace]:
        p = self.page_size
        locked: set[PagePlace] = set()
        for node, path in self._paths():
            if node.swa_lock_ref > 0:
                start = len(path) - len(node.key)
                for at in range(0, len(node.key), p):
                    locked.add((node.key.extra_key, path[: start + at + p]))
        return locked

    def snapshot(self) -> Hashable:
        return (super().snapshot(), self.cache._swa_boundary_counter)


def factory(page_size: int, host: Host) -> PymllmSwaAdapter:
    return PymllmSwaAdapter(page_size, host)
