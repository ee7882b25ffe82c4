"""Token validation and C-level prefix comparison.

Tree logic works on tuples: they compare, slice and hash at C speed, and a tuple stored in
a node can never be changed behind the cache's back by a caller reusing its list.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

from radixkv.errors import TokenTypeError, UsageError

Token = int | tuple[int, ...]
Tokens = tuple[Token, ...]

MAX_TOKEN_ID = 2**63
_ABOVE_ONE = bytes([0, 0] + [1] * 254)  # byte -> nonzero iff it is > 1
_PACKERS: dict[int, struct.Struct] = {}  # key length -> little-endian int64 packer


def _packer(n: int) -> struct.Struct:
    packer = _PACKERS.get(n)
    if packer is None:
        if len(_PACKERS) >= 4096:
            _PACKERS.clear()
        packer = _PACKERS[n] = struct.Struct(f"<{n}q")
    return packer


def validate_tokens(token_ids: Iterable[object]) -> Tokens:
    """Return the token ids as a tuple, or raise a usage error naming the first bad one."""
    if type(token_ids) is not list and hasattr(token_ids, "tolist"):  # tensors, numpy arrays
        token_ids = token_ids.tolist()
    tokens = tuple(token_ids)
    if not tokens:
        return ()
    if _plain_ids(tokens):
        return cast(Tokens, tokens)
    kinds = set(map(type, tokens))
    if kinds == {int}:
        _check_range(cast(tuple[int, ...], tokens))
        return cast(Tokens, tokens)
    return tuple(_validate_token(t, i) for i, t in enumerate(tokens))


def _plain_ids(tokens: tuple[object, ...]) -> bool:
    """True only if every token is an int in [0, 2**63) and none is a bool; C speed.

    ``False`` proves nothing: the exact checks then run and name the problem. The packing
    rejects non-integers and ids out of int64 range; the sum's type rejects floats and other
    numbers (packing takes anything with ``__index__``); the sign bytes reject negative
    ids; a 0 or 1 might be a bool, so keys holding one take the exact path.
    """
    try:
        packed = _packer(len(tokens)).pack(*tokens)
        total = sum(cast(Iterable[int], tokens))
    except (struct.error, TypeError):
        return False
    if type(total) is not int or not packed[7::8].isascii():  # byte 7 holds the sign bit
        return False
    # Id i is above 1 iff byte i of the OR over its byte columns (the lowest mapped through
    # _ABOVE_ONE) is nonzero. Ids below 2**24 need only the three lowest columns.
    n = len(tokens)
    above_one = int.from_bytes(packed[0::8].translate(_ABOVE_ONE), "little")
    for i in range(1, 8):
        above_one |= int.from_bytes(packed[i::8], "little")
        if i >= 2 and 0 not in above_one.to_bytes(n, "little"):
            return True
    flags = above_one.to_bytes(n, "little")  # a zero where the id is 0 or 1: a bool?
    at = flags.find(0)
    while at >= 0:
        if type(tokens[at]) is not int:
            return False
        at = flags.find(0, at + 1)
    return True


def _check_range(ids: Sequence[int]) -> None:
    lo, hi = min(ids), max(ids)
    if lo < 0:
        raise UsageError(f"token ids must be >= 0, got {lo}")
    if hi >= MAX_TOKEN_ID:
        raise UsageError(f"token ids must be < 2**63, got {hi}")


def _validate_token(token: object, position: int) -> Token:
    if isinstance(token, tuple):
        if not token:
            raise UsageError(f"token {position} is an empty tuple")
        ids = tuple(_as_int(t, position) for t in token)
        _check_range(ids)
        return ids
    value = _as_int(token, position)
    _check_range((value,))
    return value


def _as_int(value: object, position: int) -> int:
    if isinstance(value, bool):
        raise TokenTypeError(f"token {position} is a bool, not an int: {value!r}")
    try:
        return operator.index(cast(SupportsIndex, value))  # numpy ints have __index__
    except TypeError:
        raise TokenTypeError(
            f"token {position} must be an int or a tuple of ints, got {type(value).__name__}"
        ) from None


def require_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, or a usage error saying what was wrong."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TokenTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {value}")
    return value


def page_align(n: int, page_size: int) -> int:
    """The largest multiple of ``page_size`` not above ``n``."""
    return n // page_size * page_size


def common_prefix_len(stored: Tokens, key: Tokens, start: int) -> int:
    """Length of the common prefix of ``stored`` and ``key[start:]``.

    Bisects with slice comparisons, so the work per token happens in C: the number of
    Python steps is logarithmic in the length.
    """
    n = min(len(stored), len(key) - start)
    if (stored if n == len(stored) else stored[:n]) == key[start : start + n]:
        return n
    lo, hi = 0, n  # stored[:lo] matches; stored[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if stored[lo:mid] == key[start + lo : start + mid]:
            lo = mid
        else:
            hi = mid
    return lo
