"""The door every spec model has: one name and one signature per operation.

``PrefixCacheModel`` (full attention), ``SlidingWindowModel`` and ``MambaCacheModel`` each
implement ``CacheModel`` to the letter and answer with the records of
``radixkv_spec.outcomes``. What a part adds to a call is a keyword-only argument under the
engine's own name, and every model takes every one of them, ignoring those of parts it does
not have (so a default is always right for it):

* ``match``: ``room``, the frees that made room for a Mamba match's copy of its state, and
  ``waive``, the rules of that eviction a checker acknowledges (Mamba);
* ``insert``: ``priority`` (the plain model), ``prev_prefix_len`` and
  ``swa_evicted_seqlen`` (the window model), ``state_slot`` (Mamba);
* ``lock`` / ``unlock``: ``obtained_at``, the handle's receipt: the model's ``clock`` right
  after the match or insert that returned it, so that a stale handle is refused (the plain
  and Mamba models; the window model keeps no birth ticks);
* ``apply_eviction``: ``waive`` (every model), ``swa_num_tokens`` and the engine's
  SWA-locked pages ``swa_locked`` (the window model), ``mamba_slots`` (Mamba).

An engine's habits are the model's constructor policies (``radixkv_spec.policies``), never
arguments of an operation. So a machine calls every model the same way, and a fourth kind
of part brings one model with this door. Checked statically (mypy: ``tests/spec`` holds
each model as a ``CacheModel``).
"""

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

from radixkv_spec.invariants import Waiver, never
from radixkv_spec.outcomes import (
    EvictionOutcome,
    FreeEvent,
    InsertOutcome,
    MatchOutcome,
    ResetOutcome,
)
from radixkv_spec.tokens import Namespace, Position, Token


@runtime_checkable
class CacheModel(Protocol):
    """A spec model of one prefix cache: pages by position, lock handles, its own check."""

    page_size: int
    clock: int
    """The model's logical clock: a handle's receipt (``obtained_at``) is its value right
    after the match or insert that returned the handle."""

    def positions(self) -> list[Position]:
        """Every cached page position."""
        ...

    def match(
        self,
        ns: Namespace,
        tokens: Sequence[Token],
        /,
        *,
        room: Sequence[FreeEvent] | None = None,
        waive: Waiver = never,
    ) -> MatchOutcome:
        """The longest prefix of ``tokens`` the cache may return, as the engine matches it
        (after the eviction ``room`` that made room for a copy of its state)."""
        ...

    def insert(
        self,
        ns: Namespace,
        tokens: Sequence[Token],
        indices: Sequence[int],
        /,
        *,
        priority: int = 0,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
        state_slot: int | None = None,
    ) -> InsertOutcome:
        """Cache the whole pages of ``tokens`` with ``indices``: what the insert did."""
        ...

    def lock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Take one lock handle at the page position ``prefix`` (the root: nothing)."""
        ...

    def unlock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Give back one lock handle held at ``prefix``."""
        ...

    def apply_eviction(
        self,
        num_tokens: int,
        events: Sequence[FreeEvent],
        /,
        *,
        waive: Waiver = never,
        swa_num_tokens: int = 0,
        swa_locked: AbstractSet[Position] | None = None,
        mamba_slots: int = 0,
    ) -> EvictionOutcome:
        """Check an implementation's eviction by what it freed, in order, and apply it
        (raises ``SpecViolation`` unless ``waive`` acknowledges it): what it freed."""
        ...

    def reset(self) -> ResetOutcome:
        """Drop every page and handle: what the cache held."""
        ...

    def check(self) -> None:
        """Assert the model's own invariants (raises ``SpecViolation``)."""
        ...

    def total_size(self) -> int:
        """Cached tokens."""
        ...

    def protected_size(self) -> int:
        """Cached tokens some lock handle holds."""
        ...
