"""Token validation and C-level prefix comparison.

Tree logic works on tuples: they compare, slice and hash at C speed, and a tuple stored in
a node can never be changed behind the cache's back by a caller reusing its list.
"""

from __future__ import annotations

import operator
import struct
import sys
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

from radixkv.errors import TokenTypeError, UsageError

Token = int | tuple[int, ...]
Tokens = tuple[Token, ...]

MAX_TOKEN_ID = 2**63
SIGN_BYTE = 7 if sys.byteorder == "little" else 0  # of a native int64
_PACKERS: dict[int, struct.Struct] = {}  # key length -> native-endian int64 packer


def int64_packer(n: int) -> struct.Struct:
    """A cached ``struct`` packer of ``n`` native int64s (keys reuse a few lengths)."""
    packer = _PACKERS.get(n)
    if packer is None:
        if len(_PACKERS) >= 4096:
            _PACKERS.clear()
        packer = _PACKERS[n] = struct.Struct(f"={n}q")
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
    """True only if every token is an exact ``int`` in [0, 2**63); at C speed.

    ``False`` proves nothing: the exact checks then run and name the problem. Counting the
    exact ``int`` types rejects bools, int subclasses and other numbers; the packing rejects
    ids out of int64 range and byte 7 of each packed id holds its sign bit.
    """
    if operator.countOf(map(type, tokens), int) != len(tokens):
        return False
    try:
        packed = int64_packer(len(tokens)).pack(*tokens)
    except struct.error:
        return False
    return signs_clear(packed)


def signs_clear(packed: bytes, start: int = 0) -> bool:
    """No native int64 in ``packed`` from byte ``start`` on has its sign bit set."""
    return packed[start + SIGN_BYTE :: 8].isascii()


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
