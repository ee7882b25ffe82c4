"""ChunkCache: the no-op prefix cache, for models or modes that cannot share prefixes.

It matches nothing, caches nothing and frees nothing: the caller keeps every KV index it
allocated and frees it itself. Calls are still validated like RadixCache's (a bad key or a
value shorter than the key is a usage error), so switching caches never hides a caller bug.
It has no ``page_size`` attribute on purpose: callers detect it with
``hasattr(cache, "page_size")``.
"""

from __future__ import annotations

from typing import Any

import torch

from radixkv.arguments import (
    insert_keywords,
    require_bool,
    require_int,
    require_no_boundary,
    unlock_boundary,
)
from radixkv.base import (
    BasePrefixCache,
    EvictResult,
    InsertResult,
    MatchResult,
    RadixKey,
    empty_indices,
)
from radixkv.errors import TokenTypeError, UsageError
from radixkv.keys import key_ids, limit_of, validate_tokens


class ChunkCache(BasePrefixCache):
    """A prefix cache that never shares: every request computes its whole prompt.

    ``token_to_kv_pool_allocator`` is accepted for interface parity and never called.
    """

    def __init__(self, token_to_kv_pool_allocator: Any = None, device: str = "cpu") -> None:
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.device = torch.device(device)

    def reset(self) -> None:
        """Nothing is cached, so there is nothing to drop."""

    def match_prefix(self, key: RadixKey, *, cow: bool = False) -> MatchResult:
        """Always a miss: empty int64 indices on the cache's device, ``last_node=None``.

        ``cow`` is checked (a bool) and means nothing: there is no state to copy.
        """
        require_bool("cow", cow)
        _validate_key(key)
        return MatchResult(indices=empty_indices(self.device), last_node=None, prefix_len=0)

    def insert(
        self, key: RadixKey, value: torch.Tensor | None = None, **kwargs: Any
    ) -> InsertResult:
        """Caches nothing (``prefix_len=0``, ``last_node=None``); the caller keeps ``value``.

        Takes every keyword of the family (``prev_prefix_len``, ``swa_evicted_seqlen``,
        ``mamba_value``) and checks it, so a scheduler written for RadixCache runs unchanged.
        """
        insert_keywords(kwargs)
        n = len(_validate_key(key))
        if value is not None:
            if not isinstance(value, torch.Tensor):
                raise TokenTypeError(f"value must be a torch.Tensor, got {type(value).__name__}")
            if value.numel() < n:
                raise UsageError(f"value has {value.numel()} indices for {n} tokens")
        return InsertResult()

    def evict(self, num_tokens: int, swa_num_tokens: int = 0) -> EvictResult:
        """Nothing is evictable: frees nothing and reports zero."""
        require_int("num_tokens", num_tokens, 0)
        require_int("swa_num_tokens", swa_num_tokens, 0)
        return EvictResult()

    def inc_lock_ref(self, node: Any) -> None:
        """There are no nodes to protect; returns ``None``."""
        return None

    def dec_lock_ref(self, node: Any, **kwargs: Any) -> None:
        """Nothing was locked; a no-op. ``swa_boundary_id=`` must be what ``inc_lock_ref``
        returned: ``None``."""
        require_no_boundary(unlock_boundary(kwargs))


def _validate_key(key: object) -> tuple[object, ...]:
    if not isinstance(key, RadixKey):
        raise TokenTypeError(f"key must be a RadixKey, got {type(key).__name__}")
    return validate_tokens(key_ids(key.token_ids, limit_of(key)))
