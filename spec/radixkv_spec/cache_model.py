"""The door every spec model has: the same names and shapes whatever the cache's parts.

``PrefixCacheModel`` (full attention), ``SlidingWindowModel`` and ``MambaCacheModel`` each
implement ``CacheModel`` and answer with the records of ``radixkv_spec.outcomes``. What a
part adds comes as keyword arguments under the engine's own names: an insert's
``priority``; ``prev_prefix_len``, ``swa_evicted_seqlen``; ``state_slot``; an eviction's
``swa_num_tokens`` and the engine's SWA-locked pages; ``mamba_slots``; a Mamba match's
``room`` (the frees that made room for its copy). An engine's habits are the model's
constructor policies (``radixkv_spec.policies``), never arguments of an operation. So a
machine calls every model the same way, and a fourth kind of part brings one model with
this door. Checked statically (mypy, ``tests/spec``).
"""

from collections.abc import Sequence
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

    def positions(self) -> list[Position]:
        """Every cached page position."""
        ...

    def match(self, ns: Namespace, tokens: Sequence[Token], /) -> MatchOutcome:
        """The longest prefix of ``tokens`` the cache may return, as the engine matches it."""
        ...

    def insert(
        self, ns: Namespace, tokens: Sequence[Token], indices: Sequence[int], /
    ) -> InsertOutcome:
        """Cache the whole pages of ``tokens`` with ``indices``: what the insert did."""
        ...

    def lock(self, ns: Namespace, prefix: Sequence[Token], /) -> None:
        """Take one lock handle at the page position ``prefix`` (the root: nothing)."""
        ...

    def unlock(self, ns: Namespace, prefix: Sequence[Token], /) -> None:
        """Give back one lock handle held at ``prefix``."""
        ...

    def apply_eviction(
        self, num_tokens: int, events: Sequence[FreeEvent], /, *, waive: Waiver = never
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
