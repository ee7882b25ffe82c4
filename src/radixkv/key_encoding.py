"""A caller's token ids as key data: packed, viewed in place, or validated into tuples.

``key_data_of`` turns any key form a caller may hand over into key data (key_data.py) at C
speed where it can: a list or tuple is packed with ``struct`` (which refuses an id that is
not an int in the int64 range), an int64 ``array`` or ``memoryview`` becomes a view of the
caller's buffer (no copy), a 1-D integer tensor is copied out once. Anything refused there
(a bigram, a numpy int, a bad id, another container) goes to the exact checks
(key_validation.py), which either name the bad token or return the tokens to pack.
``encode`` is the same with the signs checked and the result a copy a node may keep.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import cast

import torch

from radixkv.key_data import PACKED, KeyData, Tokens, int64_packer
from radixkv.key_helpers import no_negative_ids, pack_ids
from radixkv.key_validation import key_ids, validate_tokens


def encode(token_ids: Iterable[object], packed: bool, limit: int | None = None) -> KeyData:
    """``token_ids[:limit]`` validated, as packed bytes if ``packed`` and every token is an
    int (``limit``: as RadixKey's, ``None`` for all)."""
    data = key_data_of(token_ids, packed, limit)
    if isinstance(data, tuple):
        return data
    stored = bytes(data)
    if type(data) is memoryview:
        data.release()
    if not no_negative_ids(stored):
        validate_tokens(key_ids(token_ids, limit))
    return stored


def key_data_of(
    token_ids: Iterable[object], packed: bool, limit: int | None = None
) -> bytes | memoryview | Tokens:
    """``token_ids[:limit]`` (``None``: all) as key data: packed int64 ids if ``packed``
    and every token is an int, else a token tuple. A packed result's signs are unchecked
    (``no_negative_ids``; a part the tree holds is valid as it is); anything else the
    packing refuses is decided by the exact checks, which raise naming a bad id."""
    if packed:
        data = _pack(token_ids, limit)
        if data is not None:
            return data
    tokens = validate_tokens(key_ids(token_ids, limit))
    if packed and not any(type(t) is tuple for t in tokens):
        return int64_packer(len(tokens)).pack(*tokens)
    return tokens


def _pack(token_ids: Iterable[object], limit: int | None) -> bytes | memoryview | None:
    """Packed int64 ids (signs unchecked) of the first ``limit`` (``None``: all), or None to
    let the exact checks decide. A buffer's ids are a view, a limit only a shorter one."""
    kind = type(token_ids)
    if kind is list or kind is tuple:
        return pack_ids(cast("list[object]", token_ids), limit)
    if kind is array or kind is memoryview:
        buffer = memoryview(cast("array[int] | memoryview", token_ids))
        if buffer.format not in ("q", "l", "Q", "L") or buffer.itemsize != PACKED:
            return None  # unsigned ids >= 2**63 show up as negative ones
        if limit is not None:
            buffer = buffer[:limit]
        if not buffer.c_contiguous:
            return buffer.tobytes()
        return buffer.cast("B")
    if isinstance(token_ids, torch.Tensor):
        return _tensor_bytes(token_ids, limit)
    return None


def _tensor_bytes(ids: torch.Tensor, limit: int | None = None) -> bytes | None:
    """A 1-D integer tensor's first ``limit`` ids as int64 bytes (one copy), or None to let
    the exact checks decide: another shape, a float or complex dtype, bools (ids as the
    ints they equal) or uint64 (ids >= 2**63 would be copied as negative ones)."""
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex:
        return None
    if ids.dtype in (torch.bool, torch.uint64):
        return None
    if limit is not None:
        ids = ids[:limit]  # a view: only the key's ids are copied out
    out = array("q", bytes(ids.numel() * PACKED))
    if ids.numel():
        # One C-level copy (a device key costs its one transfer here).
        torch.frombuffer(out, dtype=torch.int64).copy_(ids)
    return out.tobytes()
