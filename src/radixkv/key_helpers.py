"""The per-token work on a key, in pure Python: the reference of the compiled helpers.

Packing a list of ids, testing the sign bits of packed ids and measuring how much of a key
a node holds are the loops over a key's tokens that a cache call runs. Each is one C-level
call or a bisection of them, so a key costs a logarithmic number of Python steps:

- ``pack_ids(ids, end=None) -> bytes | None``: native int64s of ``ids[:end]``, ``None`` if
  some id is not an int in the int64 range (signs unchecked);
- ``signs_clear(packed, start=0) -> bool``: no id from byte ``start`` on is negative;
- ``common_prefix_bytes(stored, key, start) -> int``: how many bytes (whole ids) ``stored``
  shares with ``key[start:]``;
- ``common_prefix_len(stored, key, start) -> int``: the same for token tuples (bigram
  trees; compared in Python on both builds).

The compiled helpers (native.py's ``KeyHelpers``, _keys.c) do the same work on a list read
in place and on int32 data; where they answer, they answer as these do, byte for byte
(keys.py pairs each helper with its function here). ``no_negative_ids`` is the one function
here that picks the build: the compiled ``signs_clear`` when it is in use, else the pure one.
"""

from __future__ import annotations

import itertools
import struct
import sys

from radixkv import native
from radixkv.key_data import PACKED, Tokens, int64_packer

SIGN_BYTE = 7 if sys.byteorder == "little" else 0  # of a native int64


def pack_ids(ids: list[object] | tuple[object, ...], end: int | None = None) -> bytes | None:
    """``ids[:end]`` as native int64s, or ``None`` if one is not an int in the int64 range.

    Signs are not checked (``signs_clear`` does that). ``end`` (default: all) is at most
    ``len(ids)``; the ids after it are not read.
    """
    try:
        if end is None or end == len(ids):
            return int64_packer(len(ids)).pack(*ids)
        return int64_packer(end).pack(*itertools.islice(ids, end))
    except struct.error:
        return None


def signs_clear(packed: bytes, start: int = 0) -> bool:
    """No native int64 in ``packed`` from byte ``start`` on has its sign bit set."""
    return packed[start + SIGN_BYTE :: PACKED].isascii()


def common_prefix_bytes(stored: bytes, key: memoryview, start: int) -> int:
    """Bytes (whole ids) ``stored`` shares with ``key`` from byte ``start`` on.

    A full match is one ``memcmp`` with no copy; a partial one bisects, so the number of
    Python steps is logarithmic in the length.
    """
    n = min(len(stored), len(key) - start)
    if stored.startswith(key[start : start + n]):
        return n
    lo, hi = 0, n  # whole ids: stored[:lo] matches; stored[:hi] does not
    while hi - lo > PACKED:
        mid = (lo + hi) // (2 * PACKED) * PACKED
        if stored.startswith(key[start + lo : start + mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


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


def no_negative_ids(data: bytes | memoryview, start: int = 0) -> bool:
    """No packed id of ``data`` from byte ``start`` on is negative: ``signs_clear`` on the
    pure path, the compiled helper (which reads a view in place) on the other."""
    helpers = native.helpers
    if helpers is not None:
        return helpers.signs_clear(data, start)
    if isinstance(data, bytes):
        return signs_clear(data, start)
    return _views_signs_clear(data, start)


_CHUNK = 1 << 15  # bytes of a view copied at a time: small copies reuse warm memory


def _views_signs_clear(view: memoryview, start: int) -> bool:
    """No packed id from byte ``start`` of ``view`` on has its sign bit set."""
    if isinstance(view.obj, bytes) and len(view) == len(view.obj):  # our own bytes, whole
        return signs_clear(view.obj, start)
    # Bytes are needed to test at C speed; copying the view whole costs a large fresh
    # allocation per call (about twice the time of these slices on 16k-token keys).
    for at in range(start, len(view), _CHUNK):
        if not signs_clear(view[at : at + _CHUNK].tobytes()):
            return False
    return True
