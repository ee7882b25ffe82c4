"""Profiles: the legitimate differences of one engine's prefix cache, as spec policies.

A ``Profile`` groups the policies an adapter runs under; the machines and the spec models
read them instead of insisting on radixkv's own choices. What an adapter *can do* is not
here: that is its ``capabilities`` (``radixkv_conformance.protocol``). A module that
defines ``PROFILE`` next to its factory gets it used by ``radixkv check MODULE:FACTORY`` in
every mode, ``--replay`` included; ``--profile NAME`` picks a built-in one and ``--profile
MODULE:ATTR`` any other.

Not to be confused with the *Hypothesis* settings profiles in
``radixkv_conformance.search_settings`` (``ci`` / ``dev`` / ``thorough``): how long to search.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, replace
from typing import Literal

from radixkv_spec.events import HashPolicy, Layout
from radixkv_spec.mamba import StateRecency
from radixkv_spec.policies import (
    ANY_LEAF,
    DEEPEST_STATE,
    DEFAULT_REFRESH,
    FIFO_LEAVES,
    FULL_KV,
    LFU_LEAVES,
    LRU_INSERT_REFRESHES_NODE,
    LRU_LEAVES,
    LRU_SPLIT_REFRESHES_BOTH,
    MRU_LEAVES,
    PRIORITY_LEAVES,
    REFRESHES,
    TAIL_PAGES,
    WHOLE_LEAVES,
    Eviction,
    MambaMatchPolicy,
    VictimOrder,
)
from radixkv_spec.swa_window import WindowTombstones
from radixkv_spec.tokens import Namespace

Duplicates = Literal["caller", "cache", "kept"]
ResetWhileHeld = Literal["resets", "refused"]
Allocation = Literal["caller", "cache"]
UnalignedTail = Literal["caller", "block"]
EvictionReport = Literal["per-node", "flat"]
LockModel = Literal["counts", "sets"]
SwaLockTokens = Literal["exact", "optional"]
SwaDeadInsert = Literal["dropped", "tombstoned"]
SwaTombstoneLocks = Literal["refused", "accepted"]
MambaInsertState = Literal["optional", "required"]
MambaTombstoneLeaves = Literal["deleted", "kept"]
MambaTombstoneLocks = Literal["refused", "accepted"]

__all__ = [
    "ANY_LEAF",
    "DEEPEST_STATE",
    "FULL_KV",
    "LRU_INSERT_REFRESHES_NODE",
    "LRU_LEAVES",
    "LRU_SPLIT_REFRESHES_BOTH",
    "TAIL_PAGES",
    "WHOLE_LEAVES",
    "Profile",
]


@dataclass(frozen=True)
class Profile:
    """The policies one engine's cache runs under.

    Attributes:
        name: how reports and traces refer to the profile.
        victims: which leaf an eviction may take (``radixkv_spec.policies``):
            ``LRU_LEAVES``; ``LRU_SPLIT_REFRESHES_BOTH`` (sglang's Python and Rust trees: a
            split stamps both halves); ``LRU_INSERT_REFRESHES_NODE`` (LightLLM: an insert
            that ends inside a node stamps the whole node); ``ANY_LEAF``.
        eviction: ``WHOLE_LEAVES`` (delete whole leaves, overshoot by less than a node) or
            ``TAIL_PAGES`` (MAX: trim leaves page by page, never a page too many).
        duplicates: who releases the caller's indices for an already cached prefix on
            insert: ``"caller"`` (insert reports ``prefix_len``, the caller frees them),
            ``"cache"`` (the cache frees them through the allocator during insert: the
            Rust core, radixkv's SWA mode), ``"kept"`` (MAX: the cache keeps its own and
            reports no ``prefix_len``; the caller compares and frees).
        reset_frees: ``reset()`` hands every cached index to the allocator (radixkv);
            ``False``: the caller reclaims them itself (sglang drops the tree).
        lock_model: ``"counts"`` (a counter per node; every unlock answers one lock) or
            ``"sets"`` (MAX: per-sequence sets; each lock is a fresh sequence id).
        refresh_on: the operations that refresh the recency of the path they touch:
            ``insert`` always; ``match`` (radixkv, sglang: every lookup); ``lock``
            (LightLLM: a lock is a lookup, ``match_prefix(update_refs=True)``); ``unlock``
            (MAX, vLLM: a release refreshes what the request held). vLLM's and MAX's own
            caches never refresh on a lookup: ``frozenset({"insert", "unlock"})``.
        stores: ``False`` for a cache that never shares (ChunkCache): it must match
            nothing, adopt nothing and free nothing.
        match_may_split: match returns a handle ending exactly at the match (it may split
            a node for it). ``False``: match handles are not used for locking.
        mamba_match: ``DEEPEST_STATE`` (radixkv, sglang: cut the match back to the deepest
            state and copy it) or ``FULL_KV`` (pymllm: the whole KV match, no copy).
        mamba_insert_state: ``"optional"`` (radixkv: an insert of a cached key may come
            without a state) or ``"required"`` (sglang: every insert carries the request's
            state, so the kit draws none without one, the refused one with new pages aside).
        mamba_tombstone_leaves: ``"deleted"`` (radixkv: a position left without a state and
            without children goes with its last child, INV-31) or ``"kept"`` (sglang's
            unified tree: a node lives on its full KV alone).
        mamba_tombstone_locks: ``"refused"`` (radixkv: a lock where no state is is a usage
            error) or ``"accepted"`` (sglang: it holds the full KV of its path).
        mamba_state_recency: ``"path"`` (radixkv: a state's place in the order states are
            evicted in is its position's recency) or ``"own"`` (sglang: only a match or an
            insert that ends at the state refreshes it).
        swa_lock_tokens: ``"exact"``: every SWA unlock gets back exactly what the lock
            returned (``None`` is a token like any other); ``"optional"``: an unlock may
            also pass ``None`` to undo the newest lock on the node (radixkv).
        swa_insert_args: the cache takes ``prev_prefix_len`` / ``swa_evicted_seqlen``;
            ``False``: the kit passes 0 for both (it frees no SWA KV before an insert).
        swa_dead_insert: an insert whose new pages all lie before ``swa_evicted_seqlen``
            (none has SWA KV left): ``"dropped"`` (radixkv: not cached, the indices freed)
            or ``"tombstoned"`` (sglang: cached as tombstones, the handle at the last).
        swa_tombstone_locks: ``"refused"`` (radixkv: a lock of a tombstone is a usage
            error) or ``"accepted"`` (sglang: it holds the full KV of its path).
        swa_window_tombstones: what a lock's SWA window does at a tombstone on its way up:
            ``"stop"`` (radixkv: nothing above it), ``"count"`` (sglang 0.5.23: W positions,
            the tombstone's tokens counted, the walk goes on) or ``"skip"`` (pymllm: passed
            over uncounted, the walk goes on until W live tokens).
        page_sizes: the page sizes the machine draws from.
        windows: the sliding windows the SWA rules draw from.
        event_hashes: ``"radixkv"``: KV events carry SPEC.md §9's page hashes (checked);
            ``"opaque"``: the engine's own hashes, checked as names only.
        event_layout: the field layout of the engine's event records: ``"sglang"`` (radixkv,
            sglang: the namespace in ``extra_key`` / ``cache_salt``) or ``"vllm"`` (vLLM 0.33:
            slot 7 is ``lora_name``, the salt travels in ``cache_salt`` or the first block's
            ``extra_keys``); records are read by field name, as maps or tagged arrays.
        page_hashes: the same choice for capability ``hashing``: ``"radixkv"`` (each hash is
            the spec's) or ``"opaque"`` (the engine's own: checked for consistency only: one
            page path, one hash, in every call; different paths, different hashes).
        allocation: ``"caller"``: the caller allocates an insert's indices and passes them
            in; ``"cache"`` (vLLM): ``insert`` gets no indices, picks its own for the new
            pages and reports the key's in ``Inserted.indices``, and may evict to make room
            (each such free is checked as an eviction victim, the key's cached prefix held).
        unaligned_tail: for a cache that allocates its own pages from a fixed pool
            (``allocation="cache"``, capability ``capacity``), who holds the KV of an
            insert's unaligned tail (the tokens past its last full page) while the insert
            runs: ``"caller"`` (radixkv, sglang: the cache never sees it) or ``"block"``
            (vLLM: the request's last, partial block comes from the pool too, so 17 tokens
            at page size 2 need 9 blocks; never cached, it is free again after the insert).
            INV-15's room counts it.
        reset_while_held: ``"resets"`` (reset drops everything, held pages included) or
            ``"refused"`` (vLLM: a reset while any page is locked is a usage error that
            changes nothing; with nothing held it resets).
        eviction_report: ``"per-node"``: an eviction frees one group per deleted node, in
            deletion order (each group the node's pages root to leaf); ``"flat"`` (MAX's
            ``evict_blocks``): one list of every freed index; the kit regroups it by page
            into an order the victim order admits, if there is one.
        namespaces: the namespaces the machine draws (``namespaces`` capability); vLLM and
            Dynamo treat ``""`` as no namespace, so their profiles leave it out.
        bad_tokens: the token values an adapter with ``bad_input`` must refuse (by default
            negative, too large, and non-int ids; MAX's trie takes any hashable token).
        untold_tokens: token ids the cache takes but a router is not told (``2**32``: past
            u32, SPEC.md "What a router is not told"), which the machine mixes into its keys
            now and then for an adapter with ``router_events``, so the engine's filter meets
            them; ``()`` for a cache that refuses them.
        empty_keys: the machine draws keys shorter than a page (they cache nothing); an
            engine that refuses them (MAX before 2025-02-20) sets False, so a refusal it
            has acknowledged does not end every run.
        notes: free text shown in the report (documented deviations).
    """

    name: str
    victims: VictimOrder = LRU_LEAVES
    eviction: Eviction = WHOLE_LEAVES
    duplicates: Duplicates = "caller"
    reset_frees: bool = True
    lock_model: LockModel = "counts"
    refresh_on: frozenset[str] = DEFAULT_REFRESH
    stores: bool = True
    match_may_split: bool = True
    mamba_match: MambaMatchPolicy = DEEPEST_STATE
    mamba_insert_state: MambaInsertState = "optional"
    mamba_tombstone_leaves: MambaTombstoneLeaves = "deleted"
    mamba_tombstone_locks: MambaTombstoneLocks = "refused"
    mamba_state_recency: StateRecency = "path"
    swa_lock_tokens: SwaLockTokens = "exact"
    swa_insert_args: bool = True
    swa_dead_insert: SwaDeadInsert = "dropped"
    swa_tombstone_locks: SwaTombstoneLocks = "refused"
    swa_window_tombstones: WindowTombstones = "stop"
    page_sizes: tuple[int, ...] = (1, 2, 4, 16)
    windows: tuple[int, ...] = (1, 2, 4, 8)
    event_hashes: HashPolicy = "radixkv"
    event_layout: Layout = "sglang"
    page_hashes: HashPolicy = "radixkv"
    allocation: Allocation = "caller"
    unaligned_tail: UnalignedTail = "caller"
    reset_while_held: ResetWhileHeld = "resets"
    eviction_report: EvictionReport = "per-node"
    namespaces: tuple[Namespace, ...] = (None, "", "a")
    bad_tokens: tuple[object, ...] = (-1, -(2**40), 2**63, "7", 1.5, None)
    untold_tokens: tuple[int, ...] = (2**32,)
    empty_keys: bool = True
    notes: str = ""

    def __post_init__(self) -> None:
        if not self.page_sizes or min(self.page_sizes) < 1:
            raise ValueError(f"page_sizes must be positive, got {self.page_sizes}")
        if not self.windows or min(self.windows) < 1:
            raise ValueError(f"windows must be positive, got {self.windows}")
        for name, words in ONE_OF.items():
            if (value := getattr(self, name)) not in words:
                either = ", ".join(words[:-1]) + " or " + words[-1]
                raise ValueError(f"{name} must be {either}: {value!r}")
        if "insert" not in self.refresh_on or not self.refresh_on <= REFRESHES:
            raise ValueError(f"refresh_on must hold insert, within {sorted(REFRESHES)}")
        if self.unaligned_tail == "block" and self.allocation != "cache":
            raise ValueError(
                "unaligned_tail='block' is for a cache that allocates (allocation='cache'); "
                f"allocation is {self.allocation!r}"
            )
        if not self.bad_tokens:
            raise ValueError("bad_tokens must name at least one token the engine refuses")
        if not self.namespaces or not all(n is None or isinstance(n, str) for n in self.namespaces):
            raise ValueError(f"namespaces must be str or None, at least one: {self.namespaces!r}")
        if not all(type(t) is int and 0 <= t < 2**63 for t in self.untold_tokens):
            raise ValueError(f"untold_tokens must be token ids: {self.untold_tokens!r}")

    def but(self, **changes: object) -> Profile:
        """The same profile with some policies changed."""
        return replace(self, **changes)  # type: ignore[arg-type]  # dataclasses.replace is untyped per field


ONE_OF: dict[str, tuple[str, ...]] = {
    name: typing.get_args(hint)
    for name, hint in typing.get_type_hints(Profile).items()
    if typing.get_origin(hint) is Literal
}
"""Each policy that is one of a few words, with its words (read from its annotation)."""
MAMBA_CHOICES = {name: words for name, words in ONE_OF.items() if name.startswith("mamba_")}
"""The Mamba model's habits (``mamba_*``), with the words each may be."""

RADIXKV = Profile(
    "radixkv",
    swa_lock_tokens="optional",
    notes="radixkv's caches: the spec exactly (SPEC.md).",
)
RADIXKV_SWA = RADIXKV.but(
    name="radixkv-swa",
    duplicates="cache",
    page_sizes=(1, 4),
    notes="radixkv's RadixCache with a sliding window: insert frees incoming duplicates.",
)
RADIXKV_MAMBA = RADIXKV.but(
    name="radixkv-mamba", page_sizes=(1, 2, 4), notes="radixkv's MambaRadixCache."
)
VLLM_HABITS = RADIXKV.but(
    name="vllm-habits",
    refresh_on=frozenset({"insert", "unlock"}),
    reset_while_held="refused",
    allocation="cache",
    page_hashes="opaque",
    namespaces=(None, "a"),
    notes=(
        "vLLM v1's block pool: a lookup never refreshes recency, a reset is refused while "
        "a block is held, the pool allocates its own blocks, its own block hashes."
    ),
)
"""What a vLLM-shaped pool does differently from the spec (each such cache names itself)."""
CHUNK_CACHE = Profile(
    "chunk",
    stores=False,
    page_sizes=(1,),
    notes="The no-op fallback: no sharing, no locks, no page_size.",
)
MAX_RADIX_TRIE = Profile(
    "max",
    duplicates="kept",
    eviction=TAIL_PAGES,
    lock_model="sets",
    refresh_on=frozenset({"insert", "match", "unlock"}),
    notes=(
        "MAX RadixTrie: one block per page, blocks kept on overlap, per-sequence locks, "
        "tail-trimming evict_blocks, recency refreshed on release too. A trimmed node stays "
        "live, so stale handles are not detected."
    ),
)
SGLANG = Profile(
    "sglang",
    victims=LRU_SPLIT_REFRESHES_BOTH,
    reset_frees=False,
    event_hashes="opaque",
    notes=(
        "sglang's Python RadixCache (0.5.23): a split refreshes both halves; reset drops "
        "the tree without freeing; page hashes are sglang's own encoding."
    ),
)

RADIXKV_POLICIES: dict[str, Profile] = {
    "lru": RADIXKV.but(name="radixkv-lru", notes="radixkv's RadixCache, eviction_policy='lru'."),
    "lfu": RADIXKV.but(
        name="radixkv-lfu",
        victims=LFU_LEAVES,
        notes="radixkv's RadixCache, eviction_policy='lfu': fewest hits first, then LRU.",
    ),
    "fifo": RADIXKV.but(
        name="radixkv-fifo",
        victims=FIFO_LEAVES,
        notes="radixkv's RadixCache, eviction_policy='fifo': first inserted first.",
    ),
    "mru": RADIXKV.but(
        name="radixkv-mru",
        victims=MRU_LEAVES,
        notes="radixkv's RadixCache, eviction_policy='mru': most recently used first.",
    ),
    "priority": RADIXKV.but(
        name="radixkv-priority",
        victims=PRIORITY_LEAVES,
        notes="radixkv's RadixCache, eviction_policy='priority': lowest priority, then LRU.",
    ),
}
"""radixkv's RadixCache under each eviction policy (``adapters/radixkv.py``'s
``policy_lru`` ... ``policy_priority``: inserts there pass a drawn ``priority``)."""

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        RADIXKV,
        RADIXKV_SWA,
        RADIXKV_MAMBA,
        CHUNK_CACHE,
        MAX_RADIX_TRIE,
        SGLANG,
        *RADIXKV_POLICIES.values(),
    )
}
"""The built-in profiles, by name (``radixkv check --profile NAME``)."""


NEEDS = {  # a policy that only matters to an adapter with this capability
    "mamba_match": "mamba",
    **dict.fromkeys(MAMBA_CHOICES, "mamba"),
    "swa_lock_tokens": "swa",
    "swa_insert_args": "swa",
    "swa_dead_insert": "swa",
    "swa_tombstone_locks": "swa",
    "swa_window_tombstones": "swa",
    "event_hashes": "events",
    "event_layout": "events",
    "page_hashes": "hashing",
    "unaligned_tail": "capacity",
    "namespaces": "namespaces",
    "untold_tokens": "router_events",
    "reset_frees": "reset",
    "reset_while_held": "reset",
}


def policy_lines(profile: Profile, capabilities: frozenset[str] | None = None) -> list[str]:
    """One line per policy, for reports (which choices the run checked against); with
    ``capabilities``, only the policies that apply to an adapter claiming them."""
    lines = {
        "victims": profile.victims.name,
        "eviction": profile.eviction.name,
        "duplicates": profile.duplicates,
        "reset_frees": profile.reset_frees,
        "lock_model": profile.lock_model,
        "mamba_match": profile.mamba_match.name,
        **{name: getattr(profile, name) for name in MAMBA_CHOICES},
        "swa_lock_tokens": profile.swa_lock_tokens,
        "swa_insert_args": profile.swa_insert_args,
        "swa_dead_insert": profile.swa_dead_insert,
        "swa_tombstone_locks": profile.swa_tombstone_locks,
        "swa_window_tombstones": profile.swa_window_tombstones,
        "refresh_on": ",".join(sorted(profile.refresh_on)),
        "stores": profile.stores,
        "match_may_split": profile.match_may_split,
        "event_hashes": profile.event_hashes,
        "event_layout": profile.event_layout,
        "page_hashes": profile.page_hashes,
        "allocation": profile.allocation,
        "unaligned_tail": profile.unaligned_tail,
        "reset_while_held": profile.reset_while_held,
        "eviction_report": profile.eviction_report,
        "namespaces": ",".join(map(repr, profile.namespaces)),
        "untold_tokens": ",".join(map(str, profile.untold_tokens)) or "none",
        "empty_keys": profile.empty_keys,
    }
    applies = capabilities if capabilities is not None else frozenset(NEEDS.values())
    return [f"{k}={v}" for k, v in lines.items() if NEEDS.get(k, "") in applies | {""}]
