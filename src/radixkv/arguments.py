"""Argument checks shared by the caches: counts, KV values, state slots and keywords.

Each returns the argument in the form the cache uses, or raises a usage error naming what
was wrong, so a cache can check everything before it changes anything. Keys are read by
key_reading.py (``read_key``), the one place that reads them.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import torch

from radixkv.errors import LockError, TokenTypeError, UsageError
from radixkv.keys import KeyRead


def require_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, or a usage error saying what was wrong."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")
    return value


def require_bool(name: str, value: object) -> bool:
    """``value`` as a bool (``True`` or ``False`` only), or a usage error."""
    if not isinstance(value, bool):
        raise TokenTypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def require_any_int(name: str, value: object) -> int:
    """``value`` as an int of any sign (not a bool), or a usage error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenTypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def reject_unknown(kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise UsageError(f"unexpected keyword arguments: {sorted(kwargs)}")


class InsertKeywords(NamedTuple):
    """The keywords every cache's ``insert`` takes (one calling convention, SPEC.md).

    ``prev_prefix_len`` and ``swa_evicted_seqlen`` matter only with a sliding window;
    ``mamba_slot`` (the ``mamba_value`` keyword) only to MambaRadixCache; ``priority``
    (any int, default 0) only to a tree cache built with ``eviction_policy="priority"``.
    A cache for which a keyword has no meaning still checks it, so a caller bug never hides.
    """

    prev_prefix_len: int
    swa_evicted_seqlen: int
    mamba_slot: int | None
    priority: int


def insert_keywords(kwargs: dict[str, Any]) -> InsertKeywords:
    """The family's insert keywords out of ``kwargs``, checked; any other is a usage error."""
    options = dict(kwargs)
    prev = options.pop("prev_prefix_len", 0)
    evicted = options.pop("swa_evicted_seqlen", 0)
    slot = options.pop("mamba_value", None)
    priority = options.pop("priority", 0)
    reject_unknown(options)
    return InsertKeywords(
        require_int("prev_prefix_len", prev, 0),
        require_int("swa_evicted_seqlen", evicted, 0),
        state_slot(slot),
        require_any_int("priority", priority),
    )


def unlock_boundary(kwargs: dict[str, Any]) -> int | None:
    """The ``swa_boundary_id`` keyword of ``dec_lock_ref`` (default None); any other keyword
    is a usage error."""
    options = dict(kwargs)
    boundary = options.pop("swa_boundary_id", None)
    reject_unknown(options)
    return cast("int | None", boundary)


def require_no_boundary(swa_boundary_id: object) -> None:
    """A cache without a sliding window returns ``None`` from ``inc_lock_ref``, so that is
    the only ``swa_boundary_id`` its ``dec_lock_ref`` can be given back."""
    if swa_boundary_id is not None:
        raise LockError("swa_boundary_id given, but this cache has no sliding window")


def aligned_value(key: KeyRead, value: object, device: torch.device) -> torch.Tensor:
    """The KV indices, int64 on ``device``, of which the first ``key.length`` are the key's;
    ``value`` itself if it is int64 on ``device`` (not even sliced: callers read only the
    key's part, by position). ``check_value`` says what is refused.

    Callers pass views of request rows they go on overwriting: whatever part the tree
    keeps, the cache copies when it stores it.
    """
    if value is None:
        return torch.tensor(_ids_as_indices(key), dtype=torch.int64, device=device)
    checked = check_value(key, value)
    assert checked is not None
    if checked.dtype is torch.int64 and checked.device == device:
        return checked  # the common case; ``to`` would return it too, at twice the cost
    return checked[: key.length].to(device=device, dtype=torch.int64)


def check_value(key: KeyRead, value: object) -> torch.Tensor | None:
    """``value`` checked as the KV indices of an insert of ``key``, nothing copied or moved:
    every cache's one check of it (ChunkCache, which keeps nothing, included).

    A 1-D integer tensor (not bool) with at least one index per token of the aligned key
    (``key.length``) and at most one per token of the caller's key (``key.given``): the
    indices of the unaligned tail stay the caller's to free, but an index for no token at
    all is a caller bug (SPEC.md, insert). ``None`` stands for "the token ids are the
    indices" (a test convenience), which needs int token ids.
    """
    if value is None:
        _ids_as_indices(key)
        return None
    if not isinstance(value, torch.Tensor):
        raise _after_key(
            key, TokenTypeError(f"value must be a torch.Tensor, got {type(value).__name__}")
        )
    if value.dim() != 1 or not _is_integer(value.dtype):
        raise _after_key(
            key,
            TokenTypeError(
                f"value must be a 1-D integer tensor, got {value.dtype}{tuple(value.shape)}"
            ),
        )
    given = value.numel()
    if given < key.length:
        raise _after_key(
            key, UsageError(f"value has {given} indices for {key.length} tokens (the aligned key)")
        )
    if given > key.given:
        raise _after_key(
            key,
            UsageError(
                f"value has {given} indices for a key of {key.given} tokens: at most one per "
                "token (no cache would free the extra ones)"
            ),
        )
    return value


def _after_key(key: KeyRead, error: UsageError) -> UsageError:
    """``error``, to raise once the key is known to be valid: a bad id of the key is
    reported first, whichever build read it (``KeyRead.check_exact``)."""
    key.check_exact()
    return error


def _ids_as_indices(key: KeyRead) -> tuple[int, ...]:
    """The aligned key's token ids, to serve as its indices (``value=None``)."""
    tokens = key.tokens()
    if any(isinstance(t, tuple) for t in tokens):
        raise UsageError("value=None needs int token ids; bigram keys need a value")
    return cast("tuple[int, ...]", tokens)


def state_slot(mamba_value: object) -> int | None:
    """A state slot given as an int or a one-element integer tensor (``None`` passes)."""
    if mamba_value is None:
        return None
    if isinstance(mamba_value, torch.Tensor):
        if mamba_value.numel() != 1 or not _is_integer(mamba_value.dtype):
            raise TokenTypeError(
                f"mamba_value must hold one integer slot, got "
                f"{mamba_value.dtype}{tuple(mamba_value.shape)}"
            )
        # Slot ids are host-side handles; a device tensor costs one sync here, once per insert.
        mamba_value = int(mamba_value.reshape(-1)[0])
    return require_int("mamba_value", mamba_value, 0)


def _is_integer(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
