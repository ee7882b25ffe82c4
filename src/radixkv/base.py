"""The seed's shared data types: RadixKey, the three result records and BasePrefixCache."""

from __future__ import annotations

import abc
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from radixkv.errors import TokenTypeError, UsageError

if TYPE_CHECKING:  # keys.py reads RadixKeys, so it imports this module
    from radixkv.keys import Token


class RadixKey:
    """A token-id sequence plus an optional namespace tag (``extra_key``).

    Keys with different ``extra_key`` values (``None`` and ``""`` included) never share a
    node, a match or a page hash: the tag isolates LoRA adapters, multimodal contexts and
    tenants. The token list is held by reference, as given.

    ``limit`` (keyword-only, sglang's name; a superset of the seed) makes the key
    ``token_ids[:limit]`` without copying the token list: ``RadixKey(prompt,
    limit=len(prompt) - 1)`` is ``prompt[:-1]`` for the price of an int. It is read like a
    slice bound: ``None`` (the default) means every token, a limit above ``len(token_ids)``
    means every token too (clamped, as slicing does, each time the key is read: the list is
    held by reference). A negative limit is a ``UsageError`` (a ``ValueError``): it is not
    a cap, and an arithmetic slip (``len(prompt) - k`` with ``k`` too large) must not quietly
    count from the end; a bool or a non-integer is a ``TokenTypeError``.
    """

    __slots__ = ("token_ids", "extra_key", "limit")  # noqa: RUF023 (the seed's order, then limit)

    def __init__(
        self,
        token_ids: Sequence[Token],
        extra_key: str | None = None,
        *,
        limit: int | None = None,
    ) -> None:
        if extra_key is not None and not isinstance(extra_key, str):
            raise TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.limit = key_limit(limit)

    def __len__(self) -> int:
        n = len(self.token_ids)
        limit = self.limit
        return n if limit is None or limit >= n else limit

    def __iter__(self) -> Iterator[Token]:
        n = len(self)
        if n == len(self.token_ids):
            return iter(self.token_ids)
        return itertools.islice(self.token_ids, n)

    def __getitem__(self, idx: int | slice) -> RadixKey:
        """A new key in the same namespace: ``key[i]`` a one-token key, ``key[a:b]`` a
        slice of this key's tokens (the limit applied first; the result has none)."""
        n = len(self)
        whole = n == len(self.token_ids)
        if isinstance(idx, slice):
            ids = self.token_ids if whole else self.token_ids[:n]
            return RadixKey(ids[idx], self.extra_key)
        if not whole:
            at = operator.index(idx)
            if not -n <= at < n:
                raise IndexError(f"RadixKey index {at} out of range for {n} tokens")
            idx = at % n
        return RadixKey([self.token_ids[idx]], self.extra_key)

    def __repr__(self) -> str:
        """At most the first ``REPR_IDS`` ids, then ``...`` and the length: a 32k-token key
        must not flood a log. Short keys read as the call that builds them."""
        n = len(self)
        head = _first_ids(self.token_ids, min(n, REPR_IDS))
        if n <= REPR_IDS:
            return f"RadixKey(token_ids={head!r}, extra_key={self.extra_key!r})"
        shown = ", ".join(map(repr, head))
        return f"RadixKey(token_ids=[{shown}, ...], extra_key={self.extra_key!r}, len={n})"


REPR_IDS = 10  # token ids a RadixKey's repr shows (pymllm's and sglang's preview)


def key_limit(limit: object) -> int | None:
    """``limit`` checked as a RadixKey limit: ``None``, or an int >= 0 (anything with
    ``__index__`` but a bool, as a slice bound); else the usage error saying why."""
    if limit is None or (type(limit) is int and limit >= 0):
        return limit
    if isinstance(limit, bool) or not hasattr(limit, "__index__"):
        raise TokenTypeError(f"limit must be an int or None, got {type(limit).__name__}")
    value = operator.index(limit)
    if value < 0:
        raise UsageError(f"limit must be >= 0 (it caps the key at token_ids[:limit]), got {value}")
    return value


def _first_ids(token_ids: Sequence[Token], n: int) -> list[object]:
    """The first ``n`` token ids as plain Python values (a tensor's or array's as ints)."""
    if hasattr(token_ids, "tolist"):  # tensors, numpy arrays, array('q'), memoryviews
        return list(token_ids[:n].tolist())  # type: ignore[attr-defined]
    return list(itertools.islice(token_ids, n))


def empty_indices(device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=device)


class KVAllocator(Protocol):
    """What a cache needs from a KV pool: somewhere to return the indices it lets go."""

    def free(self, indices: torch.Tensor) -> None: ...


def free_indices(allocator: KVAllocator | None, indices: torch.Tensor) -> None:
    """Return ``indices`` to ``allocator`` (a cache without one just drops them)."""
    if allocator is not None and indices.numel():
        allocator.free(indices)


@dataclass
class MatchResult:
    """Returned by ``match_prefix``: the cached KV indices of the longest cached prefix.

    The seed's four fields, then ``cow_slot`` (radixkv's, for every cache so that one
    scheduler reads one result): the private state slot ``match_prefix(key, cow=True)``
    copied the matched recurrent state into, owned by the caller. ``None`` unless a
    ``MambaRadixCache`` was asked for a copy and matched a state.
    """

    indices: torch.Tensor
    last_node: Any = None
    prefix_len: int = 0
    mamba_branching_seqlen: int | None = None
    cow_slot: int | None = None


@dataclass
class InsertResult:
    """Returned by ``insert``: how many leading tokens were cached already, and the end node."""

    prefix_len: int = 0
    last_node: Any = None
    mamba_exist: bool = False


@dataclass
class EvictResult:
    """Returned by ``evict``: exact counts of what was freed."""

    full_evicted: int = 0
    swa_evicted: int = 0
    mamba_evicted: int = 0


class BasePrefixCache(abc.ABC):
    """The interface every prefix cache implements (RadixCache, ChunkCache, MambaRadixCache)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Clear all cached state."""

    @abc.abstractmethod
    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MatchResult:
        """Find the longest cached prefix of ``key``.

        ``cow=True`` (sglang's ``cow_mamba``) asks for a private copy of the matched
        recurrent state in ``MatchResult.cow_slot``; every cache takes it, and only a cache
        with states (MambaRadixCache) has anything to copy. Without it a match takes
        nothing from any pool.
        """

    @abc.abstractmethod
    def insert(
        self, key: RadixKey, value: torch.Tensor | None = None, **kwargs: Any
    ) -> InsertResult:
        """Insert ``key`` with its KV indices ``value``."""

    @abc.abstractmethod
    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Free at least ``num_tokens`` tokens of unlocked cache, or all that can be freed."""

    @abc.abstractmethod
    def inc_lock_ref(self, node: Any) -> Any | None:
        """Protect ``node`` and its ancestors from eviction; returns a token for unlocking."""

    @abc.abstractmethod
    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:
        """Undo one ``inc_lock_ref(node)``."""

    def evictable_size(self) -> int:
        return 0

    def swa_evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def swa_protected_size(self) -> int:
        return 0

    def total_size(self) -> int:
        return 0
