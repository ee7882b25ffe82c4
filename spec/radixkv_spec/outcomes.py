"""What a spec model's operations take and return: the same records in every model.

Every model (``PrefixCacheModel``, ``SlidingWindowModel``, ``MambaCacheModel``) answers a
match with a ``MatchOutcome``, an insert with an ``InsertOutcome``, a checked eviction with
an ``EvictionOutcome`` and a reset with a ``ResetOutcome``; a field a model has no use for
keeps its default. An eviction is told in ``FreeEvent``s, the allocator's own words. So a
machine speaks one language whatever the cache's parts are.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from radixkv_spec.tokens import Position

FreeEvent: TypeAlias = tuple[str, tuple[int, ...]]
"""One free a cache made, as its allocator saw it, in the order it made them:
``("free", indices)``, the full KV of one deleted node (or of the pages trimmed off it);
``("free_swa", indices)``, the sliding-window KV of a node it tombstoned;
``("slot", (slot,))``, one state slot. A model reads the kinds its parts free and leaves the
others to the owner ledger, which judges every free."""


def node_frees(groups: Iterable[Sequence[int]]) -> list[FreeEvent]:
    """A per-node eviction report in events: one ``free`` per deleted node, in order (what
    ``PrefixCacheModel.evict`` returns, as ``apply_eviction`` takes it).

    post: all(kind == "free" for kind, _ in __return__)
    """
    return [("free", tuple(group)) for group in groups]


@dataclass(frozen=True)
class MatchOutcome:
    """What one match returns.

    ``indices``: the KV indices of the matched prefix; ``prefix_len``: its length in tokens
    (the number of indices in every model so far). A Mamba model adds ``source_slot``, the
    slot the request's copy of the matched state comes from (``None``: the initial state,
    or a model that copies nothing), and ``branching_seqlen``, how far the KV alone matched
    where that is past the state (``None``: not past it).
    """

    indices: tuple[int, ...]
    prefix_len: int
    source_slot: int | None = None
    branching_seqlen: int | None = None

    @classmethod
    def of(cls, indices: tuple[int, ...]) -> "MatchOutcome":
        """A match that returns its indices and nothing else."""
        return cls(indices, len(indices))


@dataclass(frozen=True)
class InsertOutcome:
    """What one insert did.

    ``prefix_len``: tokens of the aligned key that were cached before (what insert returns).
    ``dropped``: the given indices the cache does not keep, in key order (the caller's
    duplicates of cached pages; under a window, a revived tombstone's old indices too).
    ``end``: the inserted path ends at ``tokens[:end]`` (short of the aligned key only where
    a window drops pages that have no KV left).
    ``state_existed``: Mamba's ``mamba_exist`` (a state sat at the key already); ``None``
    in a model without states.
    ``dropped_slots``: the given state slots the cache does not keep.
    """

    prefix_len: int
    dropped: tuple[int, ...]
    end: int
    state_existed: bool | None = None
    dropped_slots: tuple[int, ...] = ()


@dataclass(frozen=True)
class ResetOutcome:
    """What a reset dropped: every cached index, the ones whose sliding-window KV was still
    live (a window model only), and every state slot (a Mamba model only)."""

    indices: tuple[int, ...]
    swa_live: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()


@dataclass(frozen=True)
class EvictionOutcome:
    """What one checked eviction freed: full-KV tokens, sliding-window tokens (a window
    model only), state slots (a Mamba model only), and the positions it deleted."""

    full_evicted: int
    swa_evicted: int = 0
    mamba_evicted: int = 0
    deleted: tuple[Position, ...] = ()
