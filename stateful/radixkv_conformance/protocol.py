"""The adapter protocol: how the conformance kit talks to any prefix cache.

An engine developer writes one adapter class and one factory, and the kit model-checks the
cache against the spec. Only plain values cross this boundary: token tuples, KV-index tuples,
state-slot ints, and *handles*, opaque objects the cache returned (its node objects,
usually) that the kit passes back unchanged. The kit never imports torch; an adapter for a
torch-based cache converts tensors to tuples itself.

The factory
-----------
``factory(page_size: int, host: Host) -> adapter``. ``host`` is the serving engine around
the cache, played by the kit: the cache's allocator must hand every index it frees to
``host.free`` (one call per freed group, e.g. per deleted node), and, with the ``swa`` or
``mamba`` capability, SWA frees to ``host.free_swa`` and state-slot traffic to
``host.alloc_slot`` / ``host.free_slot`` / ``host.copy_state``. ``host.sliding_window`` is the
window the cache must be built with (``None`` unless the run checks SWA). ``host`` is also
callable as ``host(indices)`` (the same as ``host.free``), so older factories that took a
``free_sink`` callable keep working.

The core (every adapter)
------------------------
``PrefixCacheAdapter`` below: ``match``, ``insert``, ``lock``, ``unlock``, ``evict``,
``sizes``, ``contents``, ``snapshot`` and ``check``, plus two attributes, ``page_size`` and
``usage_errors`` (the exception types the cache raises for a bad call). Arguments are
passed through unvalidated, so a cache that checks its input is seen doing it.

Capabilities (opt in)
---------------------
An adapter lists what else it supports in ``capabilities`` (a frozenset of the names in
``CAPABILITIES``); the kit runs the rule set of every capability listed and nothing else.
Some capabilities are pure behaviour (``namespaces``, ``bad_input``, ``unlock_checks``,
``stale_handles``); the others need more of the adapter, spelled out by the protocol
classes ``HashingAdapter``, ``NodeEventsAdapter``, ``ResettableAdapter``,
``CallerBuffersAdapter``, ``CapacityAdapter``, ``SwaAdapter``, ``NodeBoundariesAdapter``
and ``MambaAdapter``. ``require_capabilities``
checks every claim before the first step and raises ``AdapterError`` naming what is
missing, so a claim the adapter cannot back is a clear message, not a confusing finding
later. An optional ``notes`` string is printed in every report: say there what the adapter
chose (e.g. "hashes the deepest node first").

A cache that owns a fixed pool (capability ``capacity``, under a profile with
``allocation="cache"``) says how many pages it holds (``capacity``) and raises ``NoRoom``
from ``insert`` when it cannot find the pages the key needs; the kit checks that it refuses
exactly when the spec finds no room, and that a refusal changes nothing.

Legitimate engine differences (who frees duplicates, victim order, lock model, ...) are not
capabilities: they are policies of the *profile* the adapter runs under
(``radixkv_conformance.profile``). A module that defines ``PROFILE`` next to its factory gets
it used by ``radixkv check MODULE:FACTORY`` in every mode, ``--replay`` included.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

Namespace = str | None
Tokens = tuple[int, ...]
Indices = tuple[int, ...]
Handle = Any
"""Whatever the cache returned for a node: the kit only passes it back."""
LockToken = Any
"""Whatever ``lock`` returned: the kit passes exactly this to the matching ``unlock``."""
TokenPlace = tuple[Namespace, tuple[int, ...], int]
"""Where a cached token sits: namespace, the page-aligned path ending with its page, offset.

Per page, not per token: with page_size > 1 the cached pages [1, 2] and [1, 3] hold
different indices for the same first token.
"""
PagePlace = tuple[Namespace, tuple[int, ...]]
"""A cached page: namespace and the page-aligned path ending with it."""
Contents = Mapping[TokenPlace, int] | Mapping[PagePlace, Indices]


class Sizes(NamedTuple):
    """Token counts: evictable (unlocked) + protected (locked) == total."""

    evictable: int
    protected: int
    total: int


class Matched(NamedTuple):
    """What ``match`` returns. A core adapter may return a plain ``(indices, handle)`` pair.

    ``prefix_len``, ``branching_seqlen`` and ``cow_slot`` are for Mamba caches: the matched
    length (``len(indices)`` when None), ``mamba_branching_seqlen``, and the state slot the
    cache copied the matched state into for the request (copy-on-write), if any.
    """

    indices: Indices
    handle: Handle
    prefix_len: int | None = None
    branching_seqlen: int | None = None
    cow_slot: int | None = None


class Inserted(NamedTuple):
    """What ``insert`` returns. A core adapter may return a plain ``(prefix_len, handle)``.

    ``prefix_len``: aligned tokens that were cached before (``None`` for a cache that does
    not report it, profile ``duplicates="kept"``). ``handle``: the node ending at the
    aligned key. ``mamba_exist``: Mamba only, whether a state already sat there (the
    caller then frees its own slot). ``indices``: under a profile whose cache owns
    allocation (``allocation="cache"``, vLLM), the indices the aligned key maps to now,
    the cache's own choice for its new pages.
    """

    prefix_len: int | None
    handle: Handle
    mamba_exist: bool | None = None
    indices: Indices | None = None


class Evicted(NamedTuple):
    """What ``evict`` returns. A core adapter may return a plain int (``full``)."""

    full: int
    swa: int = 0
    mamba: int = 0


CAPABILITIES: dict[str, str] = {
    "namespaces": "extra_key namespaces (keys in different namespaces never share)",
    "hashing": "page hashes (a pure function of namespace and root path): page_hashes()",
    "reset": "reset() drops everything (whether it frees is the profile's reset policy)",
    "bad_input": "rejects bad tokens, bad extra_keys, short values and negative counts",
    "unlock_checks": "rejects an unlock no lock matches",
    "relock": "a sequence locks a path it holds again with its receipt: lock(handle, "
    "receipt=...) changes nothing (per-sequence locks are idempotent)",
    "stale_handles": "rejects a lock or unlock on an evicted node",
    "on_node_evict": "reports every deleted node exactly once: evicted_node_ids()",
    "swa": "sliding-window attention: tombstones, SWA eviction, SWA lock tokens",
    "node_boundaries": "the adapter reports where the cache's nodes along a path begin: "
    "node_starts(tokens, namespace)",
    "mamba": "Mamba / SSM state slots, copy-on-write, branching seqlen",
    "caller_buffers": "the cache keeps no view of the caller's buffers: scribble()",
    "events": "KV events for routers (BlockStored / BlockRemoved / AllBlocksCleared): "
    "take_events()",
    "router_events": "the stream as a router receives it, after the engine's filter: "
    "take_published_events()",
    "priority": "insert takes an eviction priority: insert(..., priority=)",
    "capacity": "a fixed pool of `capacity` pages (allocation='cache'): an insert it cannot "
    "find room for raises NoRoom",
}


class NotAdmitted(Exception):
    """Raised by an adapter whose engine would not take this step now, as a scheduler does
    not admit a request its pool cannot hold beside the blocks running requests hold (vLLM):
    not a finding; the run proves nothing past it and ends, in a search as in a replay. A
    cache that owns a fixed pool refuses with ``NoRoom`` instead, which the kit judges."""


class NoRoom(Exception):
    """``insert`` of a cache that owns a fixed pool (capability ``capacity``): the pages the
    key needs cannot be found now, as a scheduler's allocation that fails and leaves the
    request waiting. The cache must be exactly as it was before the call.

    Right exactly when the pages the key needs beyond its cached prefix outnumber the free
    pages and the unlocked cached pages off that prefix (which the insert holds while it
    evicts the rest): ``radixkv_spec.model.PrefixCacheModel.room`` (INV-15).
    """


class Host(Protocol):
    """The serving engine around the cache, played by the kit (see the module doc)."""

    page_size: int
    sliding_window: int | None

    def __call__(self, indices: Indices) -> None:
        """The same as ``free``."""

    def free(self, indices: Indices) -> None:
        """The cache freed these KV indices (full attention)."""

    def free_swa(self, indices: Indices) -> None:
        """The cache freed the sliding-window KV of these indices (tombstoning them)."""

    def alloc_slot(self) -> int | None:
        """A fresh state slot (Mamba copy-on-write destination), or ``None`` when the pool
        is full (as sglang's ``alloc_track_slot`` answers)."""

    def free_slot(self, slot: int) -> None:
        """The cache freed this state slot."""

    def copy_state(self, src: int, dst: int) -> None:
        """The cache copied the state in slot ``src`` into slot ``dst``."""


@runtime_checkable
class PrefixCacheAdapter(Protocol):
    """The core every adapter implements (``examples/dict_cache.py`` is a whole one)."""

    page_size: int
    usage_errors: tuple[type[BaseException], ...]

    def match(self, tokens: Tokens, namespace: Namespace) -> Matched | tuple[Indices, Handle]:
        """``match_prefix``: the matched indices and the node ending at the match."""

    def insert(
        self, tokens: Tokens, namespace: Namespace, indices: Indices
    ) -> Inserted | tuple[int | None, Handle]:
        """Insert ``tokens`` with the caller's ``indices`` (one per token, unaligned tail too).

        A cache that keeps its own indices for an already cached prefix must not adopt the
        caller's there; whether the caller or the cache frees the caller's duplicates is
        the profile's ``duplicates`` policy.
        """

    def lock(self, handle: Handle) -> LockToken:
        """Lock the path to ``handle`` (``inc_lock_ref``); return what ``unlock`` needs back."""

    def unlock(self, handle: Handle, token: LockToken) -> None:
        """Undo one lock (``dec_lock_ref``). ``token`` is what ``lock`` returned."""

    def evict(self, num_tokens: int) -> Evicted | int:
        """Evict at least ``num_tokens`` if possible; return the counts the cache reports."""

    def sizes(self) -> Sizes:
        """``(evictable_size(), protected_size(), total_size())``."""

    def contents(self) -> Contents:
        """Every cached page, as ``{(ns, page path): indices}`` or token by token as
        ``{(ns, page path, offset): index}``. A cache with no walk by keys may rebuild it
        from what was inserted, but must then still read each index from the cache."""

    def snapshot(self) -> Hashable:
        """A plain picture of the whole state (nodes, locks, recency stamps), compared
        before and after a rejected call to show it changed nothing."""

    def check(self) -> None:
        """The implementation's own invariant check, if it has one (else do nothing)."""


@runtime_checkable
class HashingAdapter(Protocol):
    """Capability ``hashing``."""

    def page_hashes(self, handle: Handle) -> list[str]:
        """The page hashes of every page on the root path ending at ``handle``, in order."""


@runtime_checkable
class NodeEventsAdapter(Protocol):
    """Capability ``on_node_evict``: the ids the cache's ``on_node_evict`` callback got."""

    def evicted_node_ids(self) -> list[Hashable]:
        """Every id reported so far, in order."""

    def live_node_ids(self) -> set[Hashable]:
        """The ids of the nodes alive now (none of them may have been reported)."""


@runtime_checkable
class CallerBuffersAdapter(Protocol):
    """Capability ``caller_buffers``: after every step the kit asks the adapter to write
    garbage into the buffers (key lists, value tensors) it handed the cache on its last
    call, as a caller reusing them would; the cache's snapshot must not change."""

    def scribble(self) -> None: ...


@runtime_checkable
class CapacityAdapter(Protocol):
    """Capability ``capacity`` (profile ``allocation="cache"``): the pool's size in pages
    (blocks), fixed for the adapter's life; ``insert`` raises ``NoRoom`` when it cannot
    find the pages a key needs."""

    capacity: int


@runtime_checkable
class ResettableAdapter(Protocol):
    """Capability ``reset``."""

    def reset(self) -> None: ...


@runtime_checkable
class SwaAdapter(Protocol):
    """Capability ``swa``: a cache built with ``host.sliding_window`` tokens of window.

    ``insert`` also takes the keywords ``prev_prefix_len`` and ``swa_evicted_seqlen`` (the
    kit passes 0 for both under a profile whose ``swa.insert_args`` is False), and ``evict``
    takes ``swa_num_tokens`` and returns ``Evicted(full, swa)``. ``lock`` returns the SWA
    lock token (``swa_boundary_id``; any value, ``None`` included, is a token); the kit
    gives it back to ``unlock`` unchanged (or ``None`` when the profile's
    ``swa.lock_tokens`` is ``"optional"`` and it chose to unlock without one).
    """

    def insert(
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
    ) -> Inserted | tuple[int | None, Handle]: ...

    def evict(self, num_tokens: int, *, swa_num_tokens: int = 0) -> Evicted | int: ...

    def swa_pages(self) -> Mapping[PagePlace, tuple[Indices, bool]]:
        """Every cached page: its indices and whether it is a tombstone."""

    def swa_sizes(self) -> tuple[int, int]:
        """``(swa_evictable_size(), swa_protected_size())``."""

    def swa_locked_pages(self) -> set[PagePlace]:
        """The pages whose SWA KV is locked now (INV-21)."""


@runtime_checkable
class NodeBoundariesAdapter(Protocol):
    """Capability ``node_boundaries`` (with ``swa``): where the cache's nodes begin, so each
    SWA lock is judged on the whole nodes it covers (its exact extent, INV-21), not on the
    range any node boundaries would allow."""

    def node_starts(self, tokens: Tokens, namespace: Namespace) -> Sequence[int]:
        """The token offsets where the cache's nodes along the cached path of ``tokens``
        begin, 0 first."""


@runtime_checkable
class MambaAdapter(Protocol):
    """Capability ``mamba``: a hybrid cache holding one state slot at some node ends.

    ``match`` returns ``Matched`` with every field; ``insert`` takes ``state_slot`` (the
    request's slot, or None: no new state) and returns ``Inserted`` with ``mamba_exist``;
    ``evict`` takes ``mamba_slots`` and returns ``Evicted(full, 0, mamba)``. Slots come from
    ``host.alloc_slot`` and go back through ``host.free_slot``; state copies are reported
    through ``host.copy_state``.
    """

    def match(self, tokens: Tokens, namespace: Namespace) -> Matched: ...

    def insert(
        self,
        tokens: Tokens,
        namespace: Namespace,
        indices: Indices,
        *,
        state_slot: int | None = None,
    ) -> Inserted: ...

    def evict(self, num_tokens: int, *, mamba_slots: int = 0) -> Evicted: ...

    def mamba_contents(self) -> Mapping[PagePlace, tuple[Indices, int | None]]:
        """Every cached page: its indices, and the state slot held at it if any."""

    def mamba_sizes(self) -> tuple[int, int]:
        """``(mamba_evictable_size(), mamba_protected_size())``, in state slots."""

    def lock_counts(self) -> list[tuple[int, int]]:
        """``(full_lock_ref, mamba_lock_ref)`` of every live node (INV-30)."""


@runtime_checkable
class EventsAdapter(Protocol):
    """Capability ``events``: the cache's KV event recorder is on.

    The stream is checked against radixkv's page hashes (SPEC.md §9) unless the profile
    says ``event_hashes="opaque"`` (the engine's own hashes: checked as names only).
    """

    def take_events(self) -> list[Any]:
        """The records emitted since the last call, oldest first, each in its wire form: a
        map tagged ``type`` (``"BlockStored"``, ``"BlockRemoved"``, ``"AllBlocksCleared"``)
        or a tagged array, read by field name in the profile's ``event_layout``
        (``radixkv_spec.events.parse_record``)."""


@runtime_checkable
class PublishedEventsAdapter(Protocol):
    """Capability ``router_events`` (needs ``events``): the engine filters its stream before
    it publishes it, leaving out the pages a router cannot be told faithfully (radixkv's
    ``RouterFilter``). The kit rebuilds a router's view from what is published and compares
    it with the cached pages less the untold ones (``radixkv_spec.events.router_told``)."""

    def take_published_events(self) -> list[Any]:
        """The records published since the last call, after the filter, oldest first, in
        the same wire form as ``take_events``."""


@runtime_checkable
class CanonicalStateAdapter(Protocol):
    """Optional, no capability: lets ``radixkv check --states`` merge equivalent states.

    Without it the explorer compares ``snapshot()``, ``contents()`` and ``sizes()`` (and,
    with ``memory=1`` in the bounds, the picture of the engine's memory:
    ``explore/memory.py``) with every large number renamed to its rank, so a cache's own
    ids and stamps keep states apart that have the same future (SPEC.md "The canonical
    state"). A hook replaces those pictures: it must leave out nothing a later answer
    reads."""

    def canonical_state(self, handles: Sequence[Any]) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The cache's whole state as plain values, and a name for each of ``handles``
        (node handles and lock tokens it returned) in the same terms.

        Two states with the same picture must have the same future: keep the tree, the
        indices, locks and whatever eviction reads; replace the cache's own identities
        (node ids, lock ids) and stamps by their ranks among the live ones (small ints),
        and leave out what the future never reads (counters of past events, a lazy heap's
        stale entries). KV indices and state slots stay as the kit gave them: the kit
        renames those together with its own ledger and the spec's.
        """


CAPABILITY_PROTOCOLS: dict[str, tuple[type[Any], dict[str, tuple[str, ...]]]] = {
    "hashing": (HashingAdapter, {}),
    "on_node_evict": (NodeEventsAdapter, {}),
    "reset": (ResettableAdapter, {}),
    "caller_buffers": (CallerBuffersAdapter, {}),
    "capacity": (CapacityAdapter, {}),
    "priority": (PrefixCacheAdapter, {"insert": ("priority",)}),
    "relock": (PrefixCacheAdapter, {"lock": ("receipt",)}),
    "swa": (
        SwaAdapter,
        {"insert": ("prev_prefix_len", "swa_evicted_seqlen"), "evict": ("swa_num_tokens",)},
    ),
    "node_boundaries": (NodeBoundariesAdapter, {}),
    "mamba": (MambaAdapter, {"insert": ("state_slot",), "evict": ("mamba_slots",)}),
    "events": (EventsAdapter, {}),
    "router_events": (PublishedEventsAdapter, {}),
}
"""For each capability that needs more than behaviour: its protocol and the keywords its
methods must accept."""


class AdapterError(TypeError):
    """An adapter does not implement what it claims (raised before any step runs)."""


class AdapterBroken(Exception):
    """An adapter whose module does not import (a syntax error, a dependency missing) or
    whose factory cannot build an adapter (a wrong signature, an exception of its own):
    not a finding of the cache, nor a mistake of the command line (``radixkv check``
    exits 4)."""


def declared_capabilities(adapter: object) -> frozenset[str]:
    """The capabilities ``adapter`` lists (none when it has no ``capabilities``)."""
    declared: frozenset[str] = frozenset(getattr(adapter, "capabilities", ()))
    return declared


def require_core(adapter: object) -> None:
    """Raise ``AdapterError`` unless ``adapter`` has every core method and attribute."""
    name = type(adapter).__name__
    missing = _missing_members(adapter, PrefixCacheAdapter)
    if missing:
        raise AdapterError(
            f"{name} is not a prefix-cache adapter: it has no {', '.join(missing)} "
            "(see radixkv_conformance.protocol.PrefixCacheAdapter)"
        )
    if not isinstance(getattr(adapter, "page_size", None), int):
        raise AdapterError(f"{name}.page_size must be an int")
    errors = getattr(adapter, "usage_errors", None)
    if not isinstance(errors, tuple) or not all(
        isinstance(e, type) and issubclass(e, BaseException) for e in errors
    ):
        raise AdapterError(f"{name}.usage_errors must be a tuple of exception types")


def require_capabilities(adapter: object) -> frozenset[str]:
    """Check the core and every capability ``adapter`` claims; return the claims.

    Raises ``AdapterError`` naming the capability and what it lacks: an unknown name, a
    missing method, or a method that does not take a keyword the capability passes.
    """
    require_core(adapter)
    name = type(adapter).__name__
    declared = declared_capabilities(adapter)
    unknown = declared - set(CAPABILITIES)
    if unknown:
        raise AdapterError(
            f"{name} claims unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
        )
    for capability in sorted(declared & set(CAPABILITY_PROTOCOLS)):
        protocol, keywords = CAPABILITY_PROTOCOLS[capability]
        missing = _missing_members(adapter, protocol)
        missing += [
            f"keyword {keyword!r} of {method}()"
            for method, wanted in keywords.items()
            for keyword in wanted
            if not _takes_keyword(getattr(adapter, method), keyword)
        ]
        if missing:
            raise AdapterError(
                f"{name} claims capability {capability!r} ({CAPABILITIES[capability]}) but "
                f"has no {', '.join(missing)} (see radixkv_conformance.protocol."
                f"{protocol.__name__})"
            )
    capacity = getattr(adapter, "capacity", None)
    if "capacity" in declared and (
        not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1
    ):
        raise AdapterError(f"{name}.capacity must be a positive int (pages), got {capacity!r}")
    return declared


def _missing_members(adapter: object, protocol: type[Any]) -> list[str]:
    members = [m for m in _protocol_members(protocol) if not hasattr(adapter, m)]
    return [f"{m}()" if callable(getattr(protocol, m, None)) else m for m in members]


def _protocol_members(protocol: type[Any]) -> list[str]:
    annotations = getattr(protocol, "__annotations__", {})
    methods = [
        m
        for m, value in vars(protocol).items()
        if not m.startswith("_") and inspect.isfunction(value)
    ]
    return [*annotations, *methods]


def _takes_keyword(method: Callable[..., Any], keyword: str) -> bool:
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return True
    return keyword in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def as_matched(result: Matched | tuple[Any, ...]) -> Matched:
    """Normalise what ``match`` returned."""
    return result if isinstance(result, Matched) else Matched(*result)


def as_inserted(result: Inserted | tuple[Any, ...]) -> Inserted:
    """Normalise what ``insert`` returned."""
    return result if isinstance(result, Inserted) else Inserted(*result)


def as_evicted(result: Evicted | int | tuple[int, ...]) -> Evicted:
    """Normalise what ``evict`` returned."""
    if isinstance(result, Evicted):
        return result
    if isinstance(result, tuple):
        return Evicted(*result)
    return Evicted(result)


def token_places(contents: Mapping[Any, Any]) -> dict[TokenPlace, int]:
    """``contents()`` in the per-token form, whichever form the adapter returned."""
    out: dict[TokenPlace, int] = {}
    for place, value in contents.items():
        if len(place) == 3:
            out[place] = value
            continue
        ns, path = place
        for offset, index in enumerate(value):
            out[(ns, path, offset)] = index
    return out


AdapterFactory = Callable[[int, Host], PrefixCacheAdapter]
