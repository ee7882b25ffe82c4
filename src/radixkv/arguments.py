"""Argument checks shared by the caches: keys, KV values and state slots.

Each returns the argument in the form the tree stores, or raises a usage error naming what
was wrong, so a cache can check everything before it changes anything.
"""

from __future__ import annotations

from typing import Any

import torch

from radixkv.base import RadixKey
from radixkv.errors import TokenTypeError, UsageError
from radixkv.keys import (
    KeyData,
    KeyView,
    decode,
    read_key,
    require_non_negative,
    span,
    token_count,
    truncate,
    width,
)
from radixkv.tokens import page_align, require_int
from radixkv.tree import Descent, TreeNode, descend, recode_tree


def reject_unknown(kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise UsageError(f"unexpected keyword arguments: {sorted(kwargs)}")


def tree_key(root: TreeNode, key: object, page_size: int) -> tuple[KeyView, str | None]:
    """The key's whole pages in the key form of ``root``'s tree, and its namespace.

    Packed ids are not yet checked for signs (keys.require_non_negative). The first key
    holding a bigram (tuple) token turns the tree's packed keys into tuples.
    """
    packed = type(root.data) is bytes
    data, extra_key = aligned_key(key, page_size, packed)
    if packed and type(data) is tuple:
        recode_tree(root, page_size)
    return data, extra_key


def checked_descent(
    root: TreeNode, data: KeyView, extra_key: str | None, page_size: int, key: RadixKey
) -> Descent:
    """``descend`` with ``key`` checked: the part the tree holds is valid, the rest must be."""
    walk = descend(root, data, extra_key, page_size)
    require_non_negative(data, (walk.matched + walk.partial_len) * width(data), key.token_ids)
    return walk


def descent_and_new_part(
    root: TreeNode, data: KeyView, extra_key: str | None, page_size: int, key: RadixKey
) -> tuple[Descent, KeyData]:
    """``descend``, and the tokens the tree does not hold yet, copied out of the caller's
    buffer and checked (on the copy, which an insert stores anyway)."""
    walk = descend(root, data, extra_key, page_size)
    new = span(data, walk.matched + walk.partial_len, token_count(data))
    require_non_negative(new, 0, key.token_ids)
    return walk, new


def aligned_key(key: object, page_size: int, packed: bool) -> tuple[KeyView, str | None]:
    """The key's whole pages as key data (packed if ``packed`` allows), and its namespace."""
    if not isinstance(key, RadixKey):
        raise TokenTypeError(f"key must be a RadixKey, got {type(key).__name__}")
    extra_key = key.extra_key
    if extra_key is not None and not isinstance(extra_key, str):
        raise TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
    data = read_key(key.token_ids, packed)
    n = token_count(data)
    if n % page_size == 0:
        return data, extra_key
    aligned = page_align(n, page_size) * (len(data) // n)
    require_non_negative(data, aligned, key.token_ids)  # the tail is ignored, but checked
    return truncate(data, aligned), extra_key


def aligned_value(
    data: KeyView, value: object, device: torch.device, copy: bool = True
) -> torch.Tensor:
    """The first ``len(data)`` KV indices as int64 on ``device``; a private copy if ``copy``.

    ``None`` stands for "the token ids are the indices" (a test convenience). Callers pass
    views of request rows they go on overwriting: whatever the tree keeps must be a copy,
    made here or (``copy=False``) by the cache when it stores a part.
    """
    n = token_count(data)
    if value is None:
        tokens = decode(data)
        if any(isinstance(t, tuple) for t in tokens):
            raise UsageError("value=None needs int token ids; bigram keys need a value")
        return torch.tensor(tokens, dtype=torch.int64, device=device)
    if not isinstance(value, torch.Tensor):
        raise TokenTypeError(f"value must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() != 1 or not _is_integer(value.dtype):
        raise TokenTypeError(
            f"value must be a 1-D integer tensor, got {value.dtype}{tuple(value.shape)}"
        )
    given = value.numel()
    if given < n:
        raise UsageError(f"value has {given} indices for {n} aligned tokens")
    if given > n:
        value = value[:n]
    if value.dtype == torch.int64 and value.device == device:
        return value.clone() if copy else value
    return value.to(device=device, dtype=torch.int64, copy=copy)


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
