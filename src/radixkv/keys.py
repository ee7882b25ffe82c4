"""Keys as the tree stores them: packed int64 bytes, validated once per call.

A tree node holds its tokens as ``KeyData``: a ``bytes`` object of native-endian int64 ids
(``PACKED`` bytes a token), or, once a bigram (tuple) token reached the tree, a tuple of
tokens. Bytes compare and slice with ``memcmp``/``memcpy`` and cost 8 bytes a token; a
tuple of Python ints costs about 40. A tree uses one form for all its nodes: the first
bigram key converts it (``recode_tree`` in tree.py), and it never converts back.

Encoding a caller's key is its validation: ``struct`` packing rejects anything that is not
an int (or has ``__index__``) in the int64 range, and the sign byte of every packed id
catches negative ones, all in C. Callers that hold an ``array('q')`` or an integer tensor
skip the packing: their bytes are taken as they are. When the fast path refuses a key, the
exact checks of tokens.py run and name the problem.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from typing import cast

import torch

from radixkv.tokens import Tokens, validate_tokens

KeyData = bytes | Tokens
Probe = memoryview | Tokens  # key data to compare with: a zero-copy view of packed bytes
PACKED = 8  # bytes per token in packed key data
_SIGN_BYTE = PACKED - 1 if sys.byteorder == "little" else 0
_PACKERS: dict[int, struct.Struct] = {}  # key length -> native int64 packer


def width(data: KeyData) -> int:
    """Items of ``data`` per token: 8 bytes when packed, one tuple item otherwise."""
    return PACKED if type(data) is bytes else 1


def token_count(data: KeyData) -> int:
    return len(data) // width(data)


def decode(data: KeyData) -> Tokens:
    """The tokens of ``data`` as a tuple (for display, hashing and the harness; not hot)."""
    if type(data) is not bytes:
        return cast(Tokens, data)
    return cast(Tokens, tuple(_packer(len(data) // PACKED).unpack(data)))


def encode(token_ids: Iterable[object], packed: bool) -> KeyData:
    """``token_ids`` validated, as packed bytes if ``packed`` and every token is an int.

    Raises a usage error naming the first bad token. Returns a tuple for a key holding a
    bigram token, or whenever ``packed`` is False (a tree already holding tuples).
    """
    if packed:
        data = _pack(token_ids)
        if data is not None:
            return data
    tokens = validate_tokens(token_ids)
    if packed and not any(type(t) is tuple for t in tokens):
        return _pack_valid(cast(tuple[int, ...], tokens))
    return tokens


def _pack(token_ids: Iterable[object]) -> bytes | None:
    """Packed bytes of a key of ints in [0, 2**63), or None to let the exact checks decide."""
    kind = type(token_ids)
    if kind is list or kind is tuple:
        ids = cast(list[object], token_ids)
        try:
            data = _packer(len(ids)).pack(*ids)
        except struct.error:
            return None  # not an int, or out of the int64 range
    elif kind is array or kind is memoryview:
        buffer = memoryview(cast("array[int] | memoryview", token_ids))
        if buffer.format not in ("q", "l", "Q", "L") or buffer.itemsize != PACKED:
            return None
        data = buffer.tobytes()  # unsigned ids >= 2**63 show up as negative ones
    elif isinstance(token_ids, torch.Tensor):
        data_or_none = _tensor_bytes(token_ids)
        if data_or_none is None:
            return None
        data = data_or_none
    else:
        return None
    return data if _non_negative(data) else None


def _non_negative(data: bytes) -> bool:
    """True if no packed id has its sign bit set."""
    return data[_SIGN_BYTE::PACKED].isascii()


def _tensor_bytes(ids: torch.Tensor) -> bytes | None:
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex:
        return None
    if ids.dtype in (torch.bool, torch.uint64):
        return None
    out = array("q", bytes(ids.numel() * PACKED))
    if ids.numel():
        # One C-level copy (a device key costs its one transfer here).
        torch.frombuffer(out, dtype=torch.int64).copy_(ids)
    return out.tobytes()


def _pack_valid(ids: tuple[int, ...]) -> bytes:
    return _packer(len(ids)).pack(*ids)


def _packer(n: int) -> struct.Struct:
    packer = _PACKERS.get(n)
    if packer is None:
        if len(_PACKERS) >= 4096:
            _PACKERS.clear()
        packer = _PACKERS[n] = struct.Struct(f"={n}q")
    return packer


def as_probe(data: KeyData) -> Probe:
    """``data`` ready for ``shared_len``: packed bytes as a view that slices without copying."""
    return memoryview(data) if type(data) is bytes else cast(Tokens, data)


def shared_items(stored: KeyData, probe: Probe, start: int) -> int:
    """Items (whole tokens' worth) ``stored`` shares with ``probe`` from item ``start`` on.

    Positions count items of the key data: bytes when packed, tokens in a tuple. A full
    match is one ``memcmp`` with no copy; a partial one bisects, so the number of Python
    steps is logarithmic in the length.
    """
    if type(stored) is bytes:
        if type(probe) is not memoryview:  # one tree holds one form; never guess
            raise AssertionError("packed key data compared with a token tuple")
        return _shared_bytes(stored, probe, start)
    tokens = cast(Tokens, stored)
    if type(probe) is not tuple:
        raise AssertionError("token tuple compared with packed key data")
    n = min(len(tokens), len(probe) - start)
    if (tokens if n == len(tokens) else tokens[:n]) == probe[start : start + n]:
        return n
    lo, hi = 0, n  # tokens[:lo] matches; tokens[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tokens[lo:mid] == probe[start + lo : start + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _shared_bytes(stored: bytes, view: memoryview, begin: int) -> int:
    n = min(len(stored), len(view) - begin)
    if stored.startswith(view[begin : begin + n]):
        return n
    lo, hi = 0, n  # whole tokens: stored[:lo] matches; stored[:hi] does not
    while hi - lo > PACKED:
        mid = (lo + hi) // (2 * PACKED) * PACKED
        if stored.startswith(view[begin + lo : begin + mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def page_at(data: KeyData, start: int, page_size: int) -> KeyData:
    """The ``page_size`` tokens of ``data`` from token ``start``: a child's dict key part."""
    w = width(data)
    return data[start * w : (start + page_size) * w]


def span(data: KeyData, start: int, end: int) -> KeyData:
    """Tokens ``[start, end)`` of ``data``, in its form."""
    w = width(data)
    return data[start * w : end * w]
