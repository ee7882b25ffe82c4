"""Keys as the tree stores them: packed int64 bytes, validated once per call.

A tree node holds its tokens as ``KeyData``: a ``bytes`` object of native-endian int64 ids
(``PACKED`` bytes a token), or, once a bigram (tuple) token reached the tree, a tuple of
tokens. Bytes compare and slice with ``memcmp``/``memcpy`` and cost 8 bytes a token; a
tuple of Python ints costs about 40. A tree uses one form for all its nodes: the first
bigram key converts it (``recode_tree`` in tree.py), and it never converts back.

Reading a caller's key is its validation: ``struct`` packing rejects anything that is not
an int (or has ``__index__``) in the int64 range, and the sign byte of every packed id
catches negative ones, all in C. A key held as an ``array('q')`` (or an int64 memoryview)
is not even copied: the tree compares against a view of the caller's buffer and copies only
the part it stores. The sign check is left to the caller of ``read_key`` for the part of the
key the tree does not hold already (``require_non_negative``): a part equal to stored tokens
is valid. When the fast path refuses a key, the exact checks of tokens.py name the problem.

With the compiled helpers (native.py), a ``list`` (or tuple) of plain ids is not packed at
all: it is checked in one C pass and wrapped as a ``ListKey``, which the tree compares in
place; only the parts a node stores or a dict key needs are packed. Any other list takes
the reference path above, which raises the documented errors.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable
from typing import cast

import torch

from radixkv import native
from radixkv.tokens import (
    Tokens,
    common_prefix_len,
    int64_packer,
    signs_clear,
    validate_tokens,
)

PACKED = 8  # bytes per token in packed key data


class ListKey:
    """A caller's list (or tuple) of plain ids, read in place by the compiled helpers.

    It stands where packed key data would: its length and positions count bytes of the
    packed form (``PACKED`` a token), and a slice is the packed bytes of those tokens.
    Only ``read_key`` makes one, after the helpers checked every id.
    """

    __slots__ = ("helpers", "ids", "tokens")

    def __init__(self, ids: native.Ids, tokens: int) -> None:
        assert native.helpers is not None
        self.helpers = native.helpers
        self.ids = ids
        self.tokens = tokens  # the key is ids[:tokens]

    def __len__(self) -> int:
        return self.tokens * PACKED

    def __getitem__(self, items: slice) -> bytes:
        start, stop, _ = items.indices(len(self))
        return self.helpers.pack(self.ids, start // PACKED, max(start, stop) // PACKED)

    def shared(self, stored: bytes, begin: int) -> int:
        """Bytes of ``stored`` equal to this key from byte ``begin`` on (whole tokens)."""
        return self.helpers.shared(stored, self.ids, begin // PACKED, self.tokens) * PACKED


KeyData = bytes | Tokens  # what a node stores
KeyView = bytes | memoryview | Tokens | ListKey  # a key being looked up (read in place)
Probe = memoryview | Tokens | ListKey  # key data to compare with, without copying


def width(data: KeyView) -> int:
    """Items of ``data`` per token: 8 bytes when packed, one tuple item otherwise."""
    return 1 if type(data) is tuple else PACKED


def token_count(data: KeyView) -> int:
    return len(data) // width(data)


def decode(data: KeyView) -> Tokens:
    """The tokens of ``data`` as a tuple (for display, hashing and the harness; not hot)."""
    if isinstance(data, tuple):
        return data
    packed = data[:] if type(data) is ListKey else cast(bytes | memoryview, data)
    return cast(Tokens, tuple(int64_packer(len(packed) // PACKED).unpack(packed)))


def encode(token_ids: Iterable[object], packed: bool) -> KeyData:
    """``token_ids`` validated, as packed bytes if ``packed`` and every token is an int."""
    data = read_key(token_ids, packed)
    require_non_negative(data, 0, token_ids)
    if isinstance(data, tuple):
        return data
    stored = data[:] if type(data) is ListKey else bytes(cast(bytes | memoryview, data))
    release(data)
    return stored


def read_key(token_ids: Iterable[object], packed: bool) -> KeyView:
    """``token_ids`` as key data: packed if ``packed`` allows and every token is an int.

    Raises a usage error naming the first bad token, except that packed data is not yet
    checked for negative ids: see ``require_non_negative``. Returns a tuple for a key
    holding a bigram token, or whenever ``packed`` is False (a tree holding tuples).
    """
    helpers = native.helpers
    kind = type(token_ids)
    if packed and helpers is not None and (kind is list or kind is tuple):
        ids = cast(list[object], token_ids)
        if helpers.plain_ids(ids):
            return ListKey(ids, len(ids))
    if packed:
        data = _pack(token_ids)
        if data is not None:
            return data
    tokens = validate_tokens(token_ids)
    if packed and not any(type(t) is tuple for t in tokens):
        return int64_packer(len(tokens)).pack(*tokens)
    return tokens


def require_non_negative(data: KeyView, start: int, token_ids: Iterable[object]) -> None:
    """Raise the usage error naming a negative id at item ``start`` of ``data`` or later."""
    if isinstance(data, tuple) or type(data) is ListKey:
        return  # read_key checked every token
    if not _signs_clear(cast(bytes | memoryview, data), start):
        release(data)
        validate_tokens(token_ids)  # raises, naming the first bad id
        raise AssertionError("a negative id the exact checks accept")


_CHUNK = 1 << 15  # bytes of a view copied at a time: small copies reuse warm memory


def _signs_clear(data: bytes | memoryview, start: int) -> bool:
    """No packed id from item ``start`` on has its sign bit set."""
    if isinstance(data, bytes):
        return signs_clear(data, start)
    # Bytes are needed to test at C speed; copying the view whole costs a large fresh
    # allocation per call (about twice the time of these slices on 16k-token keys).
    for at in range(start, len(data), _CHUNK):
        if not signs_clear(data[at : at + _CHUNK].tobytes()):
            return False
    return True


def release(data: KeyView) -> None:
    """Let go of a view of the caller's buffer, so the caller may resize it again."""
    if type(data) is memoryview:
        data.release()


def _pack(token_ids: Iterable[object]) -> bytes | memoryview | None:
    """Packed int64 ids (signs unchecked), or None to let the exact checks decide."""
    kind = type(token_ids)
    if kind is list or kind is tuple:
        ids = cast(list[object], token_ids)
        try:
            return int64_packer(len(ids)).pack(*ids)
        except struct.error:
            return None  # not an int, or out of the int64 range
    if kind is array or kind is memoryview:
        buffer = memoryview(cast("array[int] | memoryview", token_ids))
        if buffer.format not in ("q", "l", "Q", "L") or buffer.itemsize != PACKED:
            return None  # unsigned ids >= 2**63 show up as negative ones
        if not buffer.c_contiguous:
            return buffer.tobytes()
        return buffer.cast("B")
    if isinstance(token_ids, torch.Tensor):
        return _tensor_bytes(token_ids)
    return None


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


def as_probe(data: KeyView) -> Probe:
    """``data`` ready for ``shared_items``: packed bytes as a view that slices without copying."""
    return memoryview(data) if type(data) is bytes else cast(Probe, data)


def shared_items(stored: KeyData, probe: Probe, start: int) -> int:
    """Items (whole tokens' worth) ``stored`` shares with ``probe`` from item ``start`` on.

    Positions count items of the key data: bytes when packed, tokens in a tuple. A full
    match is one ``memcmp`` with no copy; a partial one bisects, so the number of Python
    steps is logarithmic in the length.
    """
    if type(stored) is bytes:
        if type(probe) is ListKey:
            return probe.shared(stored, start)
        if type(probe) is not memoryview:  # one tree holds one form; never guess
            raise AssertionError("packed key data compared with a token tuple")
        return _shared_bytes(stored, probe, start)
    if type(probe) is not tuple:
        raise AssertionError("token tuple compared with packed key data")
    return common_prefix_len(cast(Tokens, stored), probe, start)


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


def truncate(data: KeyView, items: int) -> KeyView:
    """The first ``items`` items of ``data`` (a list key stays a list key: no packing)."""
    if type(data) is ListKey:
        return ListKey(data.ids, items // PACKED)
    return data[:items]


def page_at(data: KeyView, start: int, page_size: int) -> KeyData:
    """The ``page_size`` tokens of ``data`` from token ``start``: a child's dict key part."""
    return span(data, start, start + page_size)


def span(data: KeyView, start: int, end: int) -> KeyData:
    """Tokens ``[start, end)`` of ``data``, as stored data (a copy of a view's bytes)."""
    if isinstance(data, tuple):
        return data[start:end]
    return bytes(data[start * PACKED : end * PACKED])
