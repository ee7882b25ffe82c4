"""Key data: the forms a key's tokens take in a tree node and during a lookup.

A node holds its tokens as ``KeyData``, in one of three forms:

- ``bytes``: native-endian int64 ids, ``PACKED`` bytes a token. They compare and slice with
  ``memcmp``/``memcpy`` and cost 8 bytes a token, where a tuple of Python ints costs about 40;
- ``Ids32``: native int32 ids, ``COMPACT`` bytes a token, which the compiled path stores
  when every id of the node is below 2**31;
- a tuple of tokens, once a bigram (tuple) token reached the tree. A tree uses one form for
  all its nodes (the packed ones, or tuples): the first bigram key converts it, and it
  never converts back.

A key being looked up (``KeyView``) is read in place where it can be: a view of the
caller's ``array('q')`` (a ``memoryview``), a caller's list read by the compiled helpers
(``ListKey``), or the forms above. The functions at the bottom slice, count, widen and decode
any of these forms; turning a caller's ids into one is key_encoding.py's work, and
key_reading.py's ``read_key`` picks the form for a call.
"""

from __future__ import annotations

import struct
from typing import cast

from radixkv import native

Token = int | tuple[int, ...]
Tokens = tuple[Token, ...]
KeyData = bytes | Tokens  # what a node stores (bytes: int64 ids, or Ids32: int32 ids)

PACKED = 8  # bytes per token in packed key data
COMPACT = 4  # bytes per token in compact (Ids32) key data

_PACKERS: dict[int, struct.Struct] = {}  # key length -> native-endian int64 packer


def int64_packer(n: int) -> struct.Struct:
    """A cached ``struct`` packer of ``n`` native int64s (keys reuse a few lengths)."""
    packer = _PACKERS.get(n)
    if packer is None:
        if len(_PACKERS) >= 4096:  # a bound, so a stream of odd lengths cannot grow it
            _PACKERS.clear()
        packer = _PACKERS[n] = struct.Struct(f"={n}q")
    return packer


class Ids32(bytes):
    """Stored key data in the compact form: native int32 ids, ``COMPACT`` bytes a token.

    An insert stores a node's new tokens this way when every one is below 2**31 (the
    compiled path only: comparing it with a caller's int64 ids is done in C). Both paths
    read it; the pure one widens it to compare, which only a switch of build mid-life
    (tests) ever asks of it.
    """

    __slots__ = ()


class ListKey:
    """A caller's list (or tuple) of ids, read in place by the compiled helpers.

    It stands where packed key data would: its length and positions count bytes of the
    packed form (``PACKED`` a token), and a slice is the packed bytes of those tokens
    (``None`` if one of them is not a plain id). Only ``read_key`` makes one, before its
    ids are checked: the walk compares them with stored ids (an id that is not plain
    equals none), so only the ids after the part the tree holds need a pass of their own
    (``KeyRead.settle``): each id is read once per call.
    """

    __slots__ = ("helpers", "ids", "tokens")

    def __init__(self, helpers: native.KeyHelpers, ids: native.Ids, tokens: int) -> None:
        self.helpers = helpers
        self.ids = ids
        self.tokens = tokens  # the key is ids[:tokens]

    def __len__(self) -> int:
        return self.tokens * PACKED

    def __getitem__(self, items: slice) -> bytes | None:
        start, stop, _ = items.indices(len(self))
        return self.helpers.pack(self.ids, start // PACKED, max(start, stop) // PACKED)

    def plain_from(self, token: int) -> bool:
        """Every id from ``token`` on is a plain id (an exact int or bool in [0, 2**63))."""
        return self.helpers.plain_ids(self.ids, self.tokens, token)

    def compact(self, token: int) -> Ids32 | None:
        """The ids from ``token`` on as int32 key data, or ``None`` if one is >= 2**31."""
        slim = self.helpers.pack32(self.ids, token, self.tokens)
        return None if slim is None else Ids32(slim)

    def prefix(self, items: int) -> ListKey:
        """The first ``items`` bytes' worth of tokens, still read in place."""
        return ListKey(self.helpers, self.ids, items // PACKED)

    def shared(self, stored: bytes, at: int) -> int:
        """Bytes of ``stored`` equal to this key from byte ``at`` on (whole ids)."""
        return self.helpers.shared(stored, self.ids, at // PACKED, self.tokens) * PACKED


KeyView = bytes | memoryview | Tokens | ListKey  # a key being looked up, read in place


# ---- any form: count, slice, widen, decode ---------------------------------------------
# Hot paths tell the forms apart with ``type(data) is``: they are exact types, and Ids32 (a
# bytes subclass) must not pass for int64 bytes. ``isinstance`` is kept where mypy must
# narrow the union for the code after the test.


def width(data: KeyView) -> int:
    """Items of ``data`` per token: 8 bytes when packed (4 compact), one tuple item otherwise."""
    kind = type(data)
    return 1 if kind is tuple else COMPACT if kind is Ids32 else PACKED


def token_count(data: KeyView) -> int:
    return len(data) // width(data)


def widen(data: bytes) -> bytes:
    """Compact ids as native int64 ones (dict keys, and the pure path's comparisons)."""
    helpers = native.helpers
    if helpers is not None:
        return helpers.widen(data)
    n = len(data) // COMPACT
    return int64_packer(n).pack(*struct.unpack(f"={n}i", data))


def decode(data: KeyView) -> Tokens:
    """The tokens of ``data`` as a tuple (for display, hashing and the harness; not hot)."""
    if isinstance(data, tuple):
        return data
    if type(data) is Ids32:
        return cast(Tokens, struct.unpack(f"={len(data) // COMPACT}i", data))
    if isinstance(data, ListKey):
        data = cast(bytes, span(data, 0, data.tokens))
    return cast(Tokens, tuple(int64_packer(len(data) // PACKED).unpack(data)))


def span(data: KeyView, start: int, end: int) -> KeyData:
    """Tokens ``[start, end)`` of ``data``, as stored data (a copy of a view's bytes)."""
    if isinstance(data, tuple):
        return data[start:end]
    if type(data) is Ids32:
        return Ids32(data[start * COMPACT : end * COMPACT])
    piece = data[start * PACKED : end * PACKED]  # ListKey: packed bytes already
    assert piece is not None, "a list key's ids are checked before a part is stored"
    return piece if type(piece) is bytes else bytes(cast(memoryview, piece))


def page_at(data: KeyView, start: int, page_size: int) -> KeyData:
    """The ``page_size`` tokens of ``data`` from token ``start``: a child's dict key part
    (int64 bytes whatever the node's form, so lookups by any key find it)."""
    if type(data) is Ids32:  # widened from a plain slice: no Ids32 made in between
        return widen(data[start * COMPACT : (start + page_size) * COMPACT])
    return span(data, start, start + page_size)
