"""Reading a caller's key: the one place a key is packed, validated and held.

A cache reads a key once, at the top of ``match_prefix`` or ``insert``::

    with read_key(key, page_size, tree.packed) as read:  # checks the key, packs, drops the tail
        walk = tree.descend(read)                        # compares with ``read.shared``
        read.require_valid_from(walk.end)  # the part the tree does not hold must be valid

``read_key`` checks the ``RadixKey`` and its namespace, turns the token ids into key data
(below), truncates them to whole pages (checking the dropped tail too) and returns a
``KeyRead``: a context manager that holds the view of the caller's buffer until the
operation ends and keeps the caller's ids only to name a bad one in an error message.

**Key data.** A tree node holds its tokens as ``KeyData``: a ``bytes`` object of
native-endian int64 ids (``PACKED`` bytes a token), or, once a bigram (tuple) token reached
the tree, a tuple of tokens. Bytes compare and slice with ``memcmp``/``memcpy`` and cost 8
bytes a token; a tuple of Python ints costs about 40. A tree uses one form for all its
nodes: the first bigram key converts it, and it never converts back. A key held as an
``array('q')`` (or an int64 memoryview) is not even copied: the tree compares against a
view of the caller's buffer and copies only the part it stores.

**Validation, once.** Packing with ``struct`` rejects anything that is not an int (or has
``__index__``) in the int64 range, in C. The sign bit of every packed id catches negative
ones; that test is left for the part of the key the tree does not hold already
(``require_valid_from``, or ``new_part`` on the copy an insert stores): a part equal to
stored tokens is valid. When the fast path refuses a key, the exact checks
(``validate_tokens``) name the first bad token.

**The compiled-helper boundary.** All the per-token work on a key is done by four functions
with plain, typed arguments; the pure Python here is the reference a compiled helper must
agree with, byte for byte, and nothing else in the package touches a key's bytes:

- ``pack_ids(ids: list | tuple, end=None) -> bytes | None``: native int64s of
  ``ids[:end]``, ``None`` if some id is not an int in the int64 range (signs unchecked);
- ``signs_clear(packed: bytes, start: int = 0) -> bool``: no id from byte ``start`` on is
  negative;
- ``common_prefix_bytes(stored: bytes, key: memoryview, start: int) -> int``: how many
  bytes (whole ids) ``stored`` shares with ``key[start:]``;
- ``common_prefix_len(stored: Tokens, key: Tokens, start: int) -> int``: the same for
  token tuples (bigram trees).

**The compiled path** (native.py: ``radixkv._keys``, C, built by ``pip install .`` when a
compiler is there; off under ``RADIXKV_PURE=1``). A ``list`` or tuple is not packed at
all: it is read in place (``ListKey``), each id once per call. The walk compares its ids
in C with the stored ones (an id that is not an exact int or bool in [0, 2**63) equals
none), one C pass checks the ids after the part the tree holds (``KeyRead.settle``), and
only the parts the tree stores (straight to int32 ids when they fit) or a dict key needs
are packed. The sign test runs in C on any buffer (``no_negative_ids``: a view of the
caller's array is not copied). A list the check refuses (an odd id, a bad one, a bigram) is
read again by the reference path above, which decides and raises, and walked again; the
helpers never raise a usage error themselves, so both paths behave the same, errors
included (tests/keys/test_native_keys.py compares them).

**A limited key** (``RadixKey(token_ids, limit=n)``) is ``token_ids[:n]`` on every path,
read without a copy of the caller's sequence: a list or tuple stays in place (``ListKey``
of ``n`` tokens, whose ids the helpers check only up to ``n``), an array or memoryview is a
shorter view, a tensor a shorter view before its one copy, and the pure path packs only the
first ``n`` ids. Ids after the limit are never read, so a bad one there is no error
(tests/keys/test_key_limit.py compares every call with the one on the sliced key).
"""

from __future__ import annotations

import itertools
import operator
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import SupportsIndex, cast

import torch

from radixkv import native
from radixkv.errors import TokenTypeError, UsageError

Token = int | tuple[int, ...]
Tokens = tuple[Token, ...]
KeyData = bytes | Tokens  # what a node stores (bytes: int64 ids, or Ids32: int32 ids)


class RadixKey:
    """A token-id sequence plus an optional namespace tag (``extra_key``).

    Keys with different ``extra_key`` values (``None`` and ``""`` included) never share a
    node, a match or a page hash: the tag isolates LoRA adapters, multimodal contexts and
    tenants. The token list is held by reference, as given, and checked where a cache reads
    the key (``read_key``): ``token_ids`` is a sequence of ids (a list, tuple, array,
    memoryview, 1-D numpy array or 1-D tensor); a scalar (an int, a 0-d tensor or array) is
    a ``TokenTypeError`` saying so, from every cache call and from ``len``.

    ``limit`` (keyword-only, sglang's name; a superset of the seed) makes the key
    ``token_ids[:limit]`` without copying the token list: ``RadixKey(prompt,
    limit=len(prompt) - 1)`` is ``prompt[:-1]`` for the price of an int. It is read like a
    slice bound: ``None`` (the default) means every token, a limit above ``len(token_ids)``
    means every token too (clamped, as slicing does, each time the key is read: the list is
    held by reference). A negative limit is a ``UsageError`` (a ``ValueError``): it is not
    a cap, and an arithmetic slip (``len(prompt) - k`` with ``k`` too large) must not quietly
    count from the end; a bool or a non-integer is a ``TokenTypeError``.
    """

    __slots__ = ("token_ids", "extra_key", "limit")  # noqa: RUF023 (the seed's order, then limit)

    def __init__(
        self,
        token_ids: Sequence[Token],
        extra_key: str | None = None,
        *,
        limit: int | None = None,
    ) -> None:
        if extra_key is not None and not isinstance(extra_key, str):
            raise TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.limit = key_limit(limit)

    def __len__(self) -> int:
        try:
            n = len(self.token_ids)
        except TypeError:  # an int, a 0-d tensor: no sequence
            raise not_a_sequence(self.token_ids) from None
        limit = self.limit
        return n if limit is None or limit >= n else limit

    def __iter__(self) -> Iterator[Token]:
        n = len(self)
        if n == len(self.token_ids):
            return iter(self.token_ids)
        return itertools.islice(self.token_ids, n)

    def __getitem__(self, idx: int | slice) -> RadixKey:
        """A new key in the same namespace: ``key[i]`` a one-token key, ``key[a:b]`` a
        slice of this key's tokens (the limit applied first; the result has none)."""
        n = len(self)
        whole = n == len(self.token_ids)
        if isinstance(idx, slice):
            ids = self.token_ids if whole else self.token_ids[:n]
            return RadixKey(ids[idx], self.extra_key)
        if not whole:
            at = operator.index(idx)
            if not -n <= at < n:
                raise IndexError(f"RadixKey index {at} out of range for {n} tokens")
            idx = at % n
        return RadixKey([self.token_ids[idx]], self.extra_key)

    def __repr__(self) -> str:
        """At most the first ``REPR_IDS`` ids, then ``...`` and the length: a 32k-token key
        must not flood a log. Short keys read as the call that builds them (a key of no
        sequence, which every call refuses, as it was built)."""
        try:
            n = len(self)
        except TokenTypeError:
            return f"RadixKey(token_ids={self.token_ids!r}, extra_key={self.extra_key!r})"
        head = _first_ids(self.token_ids, min(n, REPR_IDS))
        if n <= REPR_IDS:
            return f"RadixKey(token_ids={head!r}, extra_key={self.extra_key!r})"
        shown = ", ".join(map(repr, head))
        return f"RadixKey(token_ids=[{shown}, ...], extra_key={self.extra_key!r}, len={n})"


REPR_IDS = 10  # token ids a RadixKey's repr shows (pymllm's and sglang's preview)


def key_limit(limit: object) -> int | None:
    """``limit`` checked as a RadixKey limit: ``None``, or an int >= 0 (anything with
    ``__index__`` but a bool, as a slice bound); else the usage error saying why."""
    if limit is None or (type(limit) is int and limit >= 0):
        return limit
    if isinstance(limit, bool) or not hasattr(limit, "__index__"):
        raise TokenTypeError(f"limit must be an int or None, got {type(limit).__name__}")
    value = operator.index(limit)
    if value < 0:
        raise UsageError(f"limit must be >= 0 (it caps the key at token_ids[:limit]), got {value}")
    return value


def _first_ids(token_ids: Sequence[Token], n: int) -> list[object]:
    """The first ``n`` token ids as plain Python values (a tensor's or array's as ints)."""
    if hasattr(token_ids, "tolist"):  # tensors, numpy arrays, array('q'), memoryviews
        return list(token_ids[:n].tolist())  # type: ignore[attr-defined]  # hasattr-checked
    return list(itertools.islice(token_ids, n))


PACKED = 8  # bytes per token in packed key data
MAX_TOKEN_ID = 2**63
SIGN_BYTE = 7 if sys.byteorder == "little" else 0  # of a native int64


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


class Ids32(bytes):
    """Stored key data in the compact form: native int32 ids, ``COMPACT`` bytes a token.

    An insert stores a node's new tokens this way when every one is below 2**31 (the
    compiled path only: comparing it with a caller's int64 ids is done in C). Both paths
    read it; the pure one widens it to compare, which only a switch of build mid-life
    (tests) ever asks of it.
    """

    __slots__ = ()


COMPACT = 4  # bytes per token in compact (Ids32) key data

KeyView = bytes | memoryview | Tokens | ListKey  # a key being looked up, read in place


# ---- the compiled-helper boundary -----------------------------------------------------

_PACKERS: dict[int, struct.Struct] = {}  # key length -> native-endian int64 packer


def _int64_packer(n: int) -> struct.Struct:
    """A cached ``struct`` packer of ``n`` native int64s (keys reuse a few lengths)."""
    packer = _PACKERS.get(n)
    if packer is None:
        if len(_PACKERS) >= 4096:
            _PACKERS.clear()
        packer = _PACKERS[n] = struct.Struct(f"={n}q")
    return packer


def pack_ids(ids: list[object] | tuple[object, ...], end: int | None = None) -> bytes | None:
    """``ids[:end]`` as native int64s, or ``None`` if one is not an int in the int64 range.

    Signs are not checked (``signs_clear`` does that). ``end`` (default: all) is at most
    ``len(ids)``; the ids after it are not read.
    """
    try:
        if end is None or end == len(ids):
            return _int64_packer(len(ids)).pack(*ids)
        return _int64_packer(end).pack(*itertools.islice(ids, end))
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


# ---- reading a key ---------------------------------------------------------------------


class KeyRead:
    """A caller's key, read: its whole pages as key data, and what an error message needs.

    Positions given to and returned by its methods count tokens; ``data`` and ``shared``
    count items of the key data (bytes when packed, tokens in a tuple), ``width`` a token.
    ``length`` counts the tokens read (whole pages), ``given`` those of the caller's key
    (its unaligned tail included: an insert's value may not be longer). Leaving the
    ``with`` block releases the view of the caller's buffer.
    """

    __slots__ = (
        "_limit",
        "_stored_tail",
        "_token_ids",
        "data",
        "extra_key",
        "given",
        "length",
        "packed",
        "probe",
        "stores",
        "unchecked",
        "width",
    )

    def __init__(
        self,
        data: KeyView,
        extra_key: str | None,
        token_ids: Iterable[object],
        limit: int | None = None,
    ) -> None:
        self._token_ids = token_ids  # the caller's ids, of which the key is the first ``limit``
        self._limit = limit
        self.extra_key = extra_key
        self._hold(data)
        self.given = self.length  # tokens of the caller's key, unaligned tail included
        self.unchecked = False  # True: a list read in place, ids not yet checked (``settle``)
        # True for an insert, which stores the part after the walk: ``settle`` checks it by
        # packing it (int32), and ``new_part`` takes that copy, so each id is read once.
        self.stores = False
        self._stored_tail: tuple[int, Ids32] | None = None  # (from token, its int32 copy)

    def _hold(self, data: KeyView) -> None:
        self.data = data
        self.packed = type(data) is not tuple
        self.width = PACKED if self.packed else 1
        self.length = len(data) // self.width
        # A zero-copy view of packed bytes, so the comparisons slice without copying.
        self.probe: memoryview | Tokens | ListKey = (
            memoryview(data) if type(data) is bytes else cast("memoryview | Tokens", data)
        )

    def __enter__(self) -> KeyRead:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        """Let go of the caller's buffer, so the caller may resize it again."""
        if type(self.probe) is memoryview:
            self.probe.release()

    def shared(self, stored: KeyData, at: int) -> int:
        """Items ``stored`` shares with the key from item ``at`` on (whole tokens' worth)."""
        if type(stored) is Ids32:
            helpers, probe = native.helpers, self.probe
            if helpers is not None and type(probe) is memoryview:  # most nodes, an array key
                return helpers.shared32(stored, probe, at // PACKED, self.length) * PACKED
            return self._shared_compact(stored, at)
        if type(stored) is bytes:
            if type(self.probe) is ListKey:
                return self.probe.shared(stored, at)
            if type(self.probe) is not memoryview:  # one tree holds one form; never guess
                raise AssertionError("packed key data compared with a token tuple")
            return common_prefix_bytes(stored, self.probe, at)
        if type(self.probe) is not tuple:
            raise AssertionError("token tuple compared with packed key data")
        return common_prefix_len(cast(Tokens, stored), self.probe, at)

    def _shared_compact(self, stored: Ids32, at: int) -> int:
        """``shared`` for int32 stored ids: in C on the compiled path, else widened."""
        probe = self.probe
        if type(probe) is ListKey:
            helpers: native.KeyHelpers | None = probe.helpers
            ids: native.Ids | memoryview = probe.ids
            end = probe.tokens
        else:
            helpers, ids, end = native.helpers, cast(memoryview, probe), self.length
        if type(probe) is tuple:
            raise AssertionError("token tuple compared with packed key data")
        if helpers is None:
            return common_prefix_bytes(widen(stored), cast(memoryview, probe), at)
        return helpers.shared32(stored, ids, at // PACKED, end) * PACKED

    def page(self, at: int, page_items: int) -> KeyData | None:
        """``page_items`` items from item ``at``: a child's dict key part, as stored data
        (``None`` from an unchecked list whose page holds an id that is not plain: no child
        has that key)."""
        piece = self.data[at : at + page_items]
        return bytes(piece) if type(piece) is memoryview else piece

    def settle(self, start: int) -> bool:
        """Check an unchecked list's ids from token ``start`` on, those before it having
        compared equal to stored ids; True if the key is checked now (always, for any other
        key). Else the key is read again by the reference path, which raises the usage
        error naming a bad id, or (a valid key of ids the helpers do not read: a bigram,
        numpy ints) holds its reading instead, and False: a walk made with the list must
        be made again. For an insert (``stores``) the check is the int32 copy of the part
        it stores, which ``new_part`` then returns: one pass over those ids, not two."""
        if not self.unchecked:
            return True
        self.unchecked = False
        ids = cast(ListKey, self.data)
        if self.stores:
            tail = ids.compact(start)  # None: an id is not plain, or is >= 2**31
            if tail is not None:
                self._stored_tail = (start, tail)
                return True
        if ids.plain_from(start):
            return True
        data = _key_data(self._token_ids, True, self._limit)
        self._hold(data[: self.length * width(data)])
        return False

    def require_valid_from(self, start: int) -> None:
        """Raise the usage error naming a negative id at token ``start`` or later (or any
        bad id there, in a list not checked yet: the walk checks it first, ``settle``)."""
        self.settle(start)
        if type(self.probe) is ListKey:
            return  # plain ids: none is negative
        if self.packed and not no_negative_ids(cast(memoryview, self.probe), start * PACKED):
            self._raise_exact()

    def new_part(self, start: int) -> KeyData:
        """Tokens from ``start`` on, copied out of the caller's buffer and checked (on the
        copy, which an insert stores anyway)."""
        data = self.data
        if type(data) is ListKey:  # checked by the walk: plain ids, one pass to int32
            if self._stored_tail is not None and self._stored_tail[0] == start:
                return self._stored_tail[1]  # packed by the check (``settle``)
            slim = data.compact(start)
            return slim if slim is not None else span(data, start, self.length)
        helpers = native.helpers
        if helpers is not None and type(data) is not tuple:  # packed: int32 straight from it
            narrowed = helpers.narrow(cast("bytes | memoryview", data)[start * PACKED :])
            if narrowed is not None:  # every id in [0, 2**31): none is negative
                return Ids32(narrowed)
        part = span(data, start, self.length)
        if type(part) is bytes and not no_negative_ids(part):
            self._raise_exact()
        return part

    def tokens(self) -> Tokens:
        """The aligned key as a token tuple (for ``value=None``; not hot)."""
        self.settle(0)  # before any walk: a key read again needs none redone
        return decode(self.data)

    def check_exact(self) -> None:
        """The exact checks on every id of the key: the usage error naming the first bad
        one, if any. For error paths only: a call refused for another reason (its value)
        names the key's fault first, on both builds, which otherwise check a key's ids at
        different points (a list read in place is checked by its walk)."""
        validate_tokens(key_ids(self._token_ids, self._limit))

    def _raise_exact(self) -> None:
        self.release()
        validate_tokens(key_ids(self._token_ids, self._limit))  # raises, naming the first bad id
        raise AssertionError("a negative id the exact checks accept")


def read_key(key: object, page_size: int, packed: bool, *, stores: bool = False) -> KeyRead:
    """``key``'s whole pages, read (packed if ``packed`` allows), and its namespace.

    ``stores`` says the caller (an insert) will store the part after the walk
    (``KeyRead.new_part``): a list's check then packs that part once, for both.

    Raises a usage error for a key that is not a RadixKey, a bad namespace or a bad token
    id (a negative one only if it lies in the dropped tail: see ``KeyRead``). The data is
    a tuple for a key holding a bigram token, or whenever ``packed`` is False (a tree
    holding tuples).
    """
    if not isinstance(key, RadixKey):
        raise TokenTypeError(f"key must be a RadixKey, got {type(key).__name__}")
    extra_key = key.extra_key
    if extra_key is not None and not isinstance(extra_key, str):
        raise TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
    token_ids = key.token_ids
    limit = None if key.limit is None else limit_of(key)  # no call for the common case
    in_place = _read_in_place(token_ids, limit) if packed else None
    data = _key_data(token_ids, packed, limit) if in_place is None else in_place
    n = token_count(data)
    aligned = n // page_size * page_size
    if isinstance(data, ListKey):
        if aligned == n or data.plain_from(aligned):  # the dropped tail, checked
            read = KeyRead(
                data.prefix(aligned * PACKED) if aligned < n else data, extra_key, token_ids, limit
            )
            read.unchecked = True  # the walk checks the rest (KeyRead.settle)
            read.stores = stores
            read.given = n
            return read
        data = _key_data(token_ids, packed, limit)  # the reference path decides
    if aligned < n:  # the dropped tail, checked (a tuple was validated whole)
        if type(data) is not tuple and not no_negative_ids(
            cast("bytes | memoryview", data), aligned * PACKED
        ):
            KeyRead(data, extra_key, token_ids, limit)._raise_exact()
        data = data[: aligned * width(data)]
    read = KeyRead(data, extra_key, token_ids, limit)
    read.given = n
    return read


def limit_of(key: RadixKey) -> int | None:
    """How many leading ids of ``key.token_ids`` are the key: ``None`` for all of them (no
    limit, or one at or above the length: a limit is clamped as a slice bound is)."""
    limit = key.limit
    if limit is None:
        return None
    limit = key_limit(limit)  # checked again: the attribute can be set after construction
    assert limit is not None
    try:
        n = len(key.token_ids)
    except TypeError:  # an int, a 0-d tensor: no sequence
        raise not_a_sequence(key.token_ids) from None
    return None if limit >= n else limit


def key_ids(token_ids: Iterable[object], limit: int | None) -> Iterable[object]:
    """The first ``limit`` ids of ``token_ids`` (all if ``None``) for the exact checks: a
    slice of a tensor or array (read with ``tolist()``), an iterator over anything else."""
    if limit is None:
        return token_ids
    if type(token_ids) is not list and hasattr(token_ids, "tolist"):
        return cast("Sequence[object]", token_ids)[:limit]
    return itertools.islice(token_ids, limit)


def _read_in_place(token_ids: object, limit: int | None) -> ListKey | None:
    """``token_ids[:limit]`` to be read in place (its ids not checked yet), if the compiled
    helpers are in use and it is a list or tuple; ``None`` sends it down the reference path."""
    helpers = native.helpers
    kind = type(token_ids)
    if helpers is None or (kind is not list and kind is not tuple):
        return None
    ids = cast("native.Ids", token_ids)
    return ListKey(helpers, ids, len(ids) if limit is None else limit)


def _key_data(
    token_ids: Iterable[object], packed: bool, limit: int | None = None
) -> bytes | memoryview | Tokens:
    if packed:
        data = _pack(token_ids, limit)
        if data is not None:
            return data
    tokens = validate_tokens(key_ids(token_ids, limit))
    if packed and not any(type(t) is tuple for t in tokens):
        return _int64_packer(len(tokens)).pack(*tokens)
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


# ---- key data --------------------------------------------------------------------------


def width(data: KeyView) -> int:
    """Items of ``data`` per token: 8 bytes when packed (4 compact), one tuple item otherwise."""
    kind = type(data)
    return 1 if kind is tuple else COMPACT if kind is Ids32 else PACKED


def widen(data: bytes) -> bytes:
    """Compact ids as native int64 ones (dict keys, and the pure path's comparisons)."""
    helpers = native.helpers
    if helpers is not None:
        return helpers.widen(data)
    n = len(data) // COMPACT
    return _int64_packer(n).pack(*struct.unpack(f"={n}i", data))


def token_count(data: KeyView) -> int:
    return len(data) // width(data)


def decode(data: KeyView) -> Tokens:
    """The tokens of ``data`` as a tuple (for display, hashing and the harness; not hot)."""
    if isinstance(data, tuple):
        return data
    if type(data) is Ids32:
        return cast(Tokens, struct.unpack(f"={len(data) // COMPACT}i", data))
    if isinstance(data, ListKey):
        data = cast(bytes, span(data, 0, data.tokens))
    return cast(Tokens, tuple(_int64_packer(len(data) // PACKED).unpack(data)))


def encode(token_ids: Iterable[object], packed: bool, limit: int | None = None) -> KeyData:
    """``token_ids[:limit]`` validated, as packed bytes if ``packed`` and every token is an
    int (``limit``: as RadixKey's, ``None`` for all)."""
    data = _key_data(token_ids, packed, limit)
    if isinstance(data, tuple):
        return data
    stored = bytes(data)
    if type(data) is memoryview:
        data.release()
    if not no_negative_ids(stored):
        validate_tokens(key_ids(token_ids, limit))
    return stored


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


# ---- the exact checks (error messages, and callers off the hot path) --------------------


def validate_tokens(token_ids: Iterable[object]) -> Tokens:
    """Return the token ids as a tuple, or raise a usage error naming the first bad one
    (or saying what a key's ids may be, for an int, a 0-d tensor or array, or any other
    object that is no sequence)."""
    if type(token_ids) is not list and hasattr(token_ids, "tolist"):  # tensors, numpy arrays
        ids = token_ids.tolist()
        if not isinstance(ids, list):  # a 0-d tensor or array: one number, no sequence
            raise not_a_sequence(token_ids)
        token_ids = ids
    try:
        tokens = tuple(token_ids)
    except TypeError:
        raise not_a_sequence(token_ids) from None
    if not tokens:
        return ()
    if _plain_ids(tokens):
        return cast(Tokens, tokens)
    kinds = set(map(type, tokens))
    if kinds == {int}:
        _check_range(cast(tuple[int, ...], tokens))
        return cast(Tokens, tokens)
    return tuple(_validate_token(t, i) for i, t in enumerate(tokens))


def not_a_sequence(token_ids: object) -> TokenTypeError:
    """The error for a key whose ``token_ids`` is no sequence (an int, a 0-d tensor)."""
    kind = type(token_ids).__name__
    if getattr(token_ids, "ndim", None) == 0 and hasattr(token_ids, "__len__"):
        kind = f"a 0-d {kind}"  # a tensor or array holding one number
    return TokenTypeError(
        "token_ids must be a sequence of token ids (a list, tuple, array('q'), memoryview, "
        f"1-D numpy array or 1-D tensor of ints, or of bigram tuples), got {kind}"
    )


def _plain_ids(tokens: tuple[object, ...]) -> bool:
    """True only if every token is an exact ``int`` in [0, 2**63); at C speed.

    ``False`` proves nothing: the exact checks then run and name the problem. Counting the
    exact ``int`` types rejects bools, int subclasses and other numbers; the packing rejects
    ids out of int64 range and the sign bit of each packed id catches negative ones.
    """
    if operator.countOf(map(type, tokens), int) != len(tokens):
        return False
    packed = pack_ids(tokens)
    return packed is not None and signs_clear(packed)


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
