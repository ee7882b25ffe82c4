"""The seed's shared data types: RadixKey, the three result records and BasePrefixCache."""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from radixkv.errors import TokenTypeError

if TYPE_CHECKING:  # keys.py reads RadixKeys, so it imports this module
    from radixkv.keys import Token


class RadixKey:
    """A token-id sequence plus an optional namespace tag (``extra_key``).

    Keys with different ``extra_key`` values (``None`` and ``""`` included) never share a
    node, a match or a page hash: the tag isolates LoRA adapters, multimodal contexts and
    tenants. The token list is held by reference, as given.
    """

    __slots__ = ("token_ids", "extra_key")  # noqa: RUF023 (the seed's order)

    def __init__(self, token_ids: Sequence[Token], extra_key: str | None = None) -> None:
        if extra_key is not None and not isinstance(extra_key, str):
            raise TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
        self.token_ids = token_ids
        self.extra_key = extra_key

    def __len__(self) -> int:
        return len(self.token_ids)

    def __iter__(self) -> Iterator[Token]:
        return iter(self.token_ids)

    def __getitem__(self, idx: int | slice) -> RadixKey:
        if isinstance(idx, slice):
            return RadixKey(self.token_ids[idx], self.extra_key)
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
    """Returned by ``match_prefix``: the cached KV indices of the longest cached prefix."""

    indices: torch.Tensor
    last_node: Any = None
    prefix_len: int = 0
    mamba_branching_seqlen: int | None = None


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
    def match_prefix(self, key: RadixKey) -> MatchResult:
        """Find the longest cached prefix of ``key``."""

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
