"""Semantic profiles: what an implementation is allowed to do differently from radixkv.

Engines agree on what a prefix cache *means* (the spec's map from namespaced page-aligned
prefixes to KV indices) and differ in observable details (research: features.md §3). A
``Semantics`` names those choices, and the conformance machine branches on them instead of
insisting on one exact oracle. Capabilities an implementation lacks switch rules off; the
report lists every such skip with its reason.

Not to be confused with the *Hypothesis* settings profiles in ``radixkv_conformance.profiles``
(``ci`` / ``dev`` / ``thorough``), which say how long to search.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Duplicates = Literal["caller", "cache", "kept"]
Eviction = Literal["leaf", "tail"]
LockModel = Literal["counts", "sets"]
VictimOrder = Literal["lru", "any"]

CAPABILITIES: dict[str, str] = {
    "namespaces": "extra_key namespaces (keys in different namespaces never share)",
    "hashing": "page hashes (a pure function of namespace and root path)",
    "reset": "reset() drops everything and frees every held index",
    "bad_input": "rejects bad tokens, bad extra_keys, short values and negative counts",
    "unlock_checks": "rejects an unlock no lock matches",
    "stale_handles": "rejects a lock or unlock on an evicted node",
    "on_node_evict": "reports every deleted node exactly once (checked by the adapter)",
    "swa": "sliding-window attention (tombstones, SWA locks)",
    "mamba": "Mamba / SSM state slots",
}


@dataclass(frozen=True)
class Semantics:
    """The allowed differences of one engine's prefix cache (research: features.md §3).

    Attributes:
        name: how reports and traces refer to the profile.
        stores: ``False`` for a cache that never shares (ChunkCache): it must match
            nothing, adopt nothing and free nothing; the caller keeps every index.
        match_may_split: match returns a handle ending exactly at the match (it may split
            a node to get one). ``False``: match handles are not used for locking.
        duplicates: who releases the caller's indices for an already cached prefix on
            insert: ``"caller"`` (insert reports ``prefix_len``, the caller frees),
            ``"cache"`` (the cache frees them through the allocator during insert),
            ``"kept"`` (MAX: the cache keeps its own and reports no ``prefix_len``; the
            caller compares and frees).
        eviction: ``"leaf"`` deletes whole unlocked leaves and may overshoot by less than
            one node; ``"tail"`` trims leaves page by page and never overshoots a page.
        lock_model: ``"counts"`` (a counter per node; every unlock answers one lock) or
            ``"sets"`` (per-sequence sets, idempotent per sequence; the adapter locks with
            a fresh sequence id and unlocks with the same one).
        victim_order: ``"lru"``: every victim is a least recently used evictable leaf
            (ties in any order); ``"any"``: any evictable leaf (for engines whose clock is
            not the spec's, such as wall-clock stamps taken node by node).
        recency_on_unlock: an unlock also makes the unlocked path the most recently used
            (MAX refreshes on release); the model follows.
        reset_frees: ``reset()`` hands every cached index to the allocator (radixkv). When
            ``False`` the caller reclaims them itself (sglang drops the tree).
        page_sizes: the page sizes the machine draws from.
        capabilities: the optional features present (keys of ``CAPABILITIES``).
        notes: free text shown in the report (documented deviations).
    """

    name: str
    stores: bool = True
    match_may_split: bool = True
    duplicates: Duplicates = "caller"
    eviction: Eviction = "leaf"
    lock_model: LockModel = "counts"
    victim_order: VictimOrder = "lru"
    recency_on_unlock: bool = False
    reset_frees: bool = True
    page_sizes: tuple[int, ...] = (1, 2, 4, 16)
    capabilities: frozenset[str] = field(default_factory=lambda: frozenset(CAPABILITIES))
    notes: str = ""

    def __post_init__(self) -> None:
        unknown = self.capabilities - set(CAPABILITIES)
        if unknown:
            raise ValueError(
                f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
            )
        if not self.page_sizes or min(self.page_sizes) < 1:
            raise ValueError(f"page_sizes must be positive, got {self.page_sizes}")

    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}")
        return capability in self.capabilities

    def without(self, *capabilities: str) -> Semantics:
        """The same profile minus some capabilities."""
        return replace(self, capabilities=self.capabilities - set(capabilities))

    def skip_reason(self, capability: str) -> str:
        return f"{self.name} declares no {capability!r} ({CAPABILITIES[capability]})"


_ALL = frozenset(CAPABILITIES)
_NO_MODES = _ALL - {"swa", "mamba"}

RADIXKV = Semantics(
    "radixkv",
    capabilities=_NO_MODES,
    notes="radixkv's RadixCache: the spec exactly (SPEC.md).",
)
CHUNK_CACHE = Semantics(
    "chunk",
    stores=False,
    page_sizes=(1,),
    capabilities=frozenset({"namespaces", "reset", "bad_input"}),
    notes="The no-op fallback: no sharing, no locks, no page_size.",
)
MAX_RADIX_TRIE = Semantics(
    "max",
    duplicates="kept",
    eviction="tail",
    lock_model="sets",
    recency_on_unlock=True,
    capabilities=frozenset({"bad_input", "unlock_checks"}),
    notes=(
        "MAX RadixTrie: one block per page, blocks kept on overlap, per-sequence locks, "
        "tail-trimming evict_blocks, recency refreshed on release too. No namespaces, "
        "hashing or reset; a trimmed node stays live, so stale handles are not detected."
    ),
)
SGLANG = Semantics(
    "sglang",
    victim_order="any",
    reset_frees=False,
    capabilities=frozenset({"namespaces", "reset", "bad_input", "unlock_checks"}),
    notes=(
        "sglang's Python RadixCache (0.5.23): wall-clock recency stamped node by node, so "
        "the victim is checked to be an unlocked leaf only. Page hashes are sglang's own "
        "lazy encoding, not radixkv's; reset drops the tree without freeing."
    ),
)

SEMANTICS: dict[str, Semantics] = {
    s.name: s for s in (RADIXKV, CHUNK_CACHE, MAX_RADIX_TRIE, SGLANG)
}
