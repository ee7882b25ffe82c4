"""The door every spec model has: the same names and shapes whatever the cache's parts.

``PrefixCacheModel`` (full attention), ``SlidingWindowModel`` and ``MambaCacheModel`` each
implement ``CacheModel``; what a part adds comes as keyword arguments under the engine's own
names (``priority``; ``prev_prefix_len``, ``swa_evicted_seqlen``; ``state_slot``), so a
machine calls every model the same way. Checked statically (mypy, ``tests/spec``).

Not in it yet: ``match`` (a Mamba match returns a record, the others the indices) and
``apply_eviction`` (each model checks the events its part frees).
"""

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from radixkv_spec.outcomes import InsertOutcome, ResetOutcome
from radixkv_spec.tokens import Namespace, Position, Token


@runtime_checkable
class CacheModel(Protocol):
    """A spec model of one prefix cache: pages by position, lock handles, its own check."""

    page_size: int

    def positions(self) -> list[Position]:
        """Every cached page position."""
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
