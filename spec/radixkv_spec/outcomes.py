"""What a spec model's operations return: one record per operation, the same in every model.

Every model (``PrefixCacheModel``, ``SlidingWindowModel``, ``MambaCacheModel``) answers an
insert with an ``InsertOutcome`` and a reset with a ``ResetOutcome``; a field a model has no
use for keeps its default. So a machine reads one shape whatever the cache's parts are.
"""

from dataclasses import dataclass


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
