"""The two exception families of radixkv.

A *usage error* is a call the cache refuses: it is raised before any state changes, so the
cache is exactly as it was. A usage error is a ``ValueError`` (``TypeError`` too for wrong
types, ``RuntimeError`` too for lock misuse), so callers that catch the builtin types keep
working. An *invariant violation* means the cache itself is broken; it never signals bad input.
"""

from __future__ import annotations


class RadixKVError(Exception):
    """Base class of every error radixkv raises on purpose."""


class UsageError(RadixKVError, ValueError):
    """A call the cache rejects; raised before any state changes."""


class TokenTypeError(UsageError, TypeError):
    """A token id, an extra_key or a value has the wrong type."""


class LockError(UsageError, RuntimeError):
    """An unlock that no lock matches."""


class StaleNodeError(UsageError, RuntimeError):
    """A node handle that is not live in this cache: evicted, dropped by reset, or foreign."""


class InvariantViolation(RadixKVError, AssertionError):
    """An internal invariant (an ``INV-n`` of SPEC.md) does not hold: a bug in the cache."""

    def __init__(self, inv_id: str, message: str) -> None:
        super().__init__(f"{inv_id}: {message}")
        self.inv_id = inv_id
