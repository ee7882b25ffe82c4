"""Reading a caller's key: the one place a key is checked, read and held during a call.

A cache reads a key once, at the top of ``match_prefix`` or ``insert``::

    with read_key(key, page_size, tree.packed) as read:  # checks the key, packs, drops the tail
        walk = tree.descend(read)                        # compares with ``read.shared``
        read.require_valid_from(walk.end)  # the part the tree does not hold must be valid

``read_key`` checks the ``RadixKey`` and its namespace, turns the token ids into key data
(key_data.py, by key_encoding.py or in place), truncates them to whole pages (checking the
dropped tail too) and returns a ``KeyRead``: a context manager that holds the view of the
caller's buffer until the operation ends and keeps the caller's ids only to name a bad one
in an error message. The checks are spread over the call so that each id is read once:
keys.py tells the whole story, both builds included.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import cast

from radixkv import native
from radixkv.errors import TokenTypeError
from radixkv.key_data import (
    PACKED,
    Ids32,
    KeyData,
    KeyView,
    ListKey,
    Tokens,
    decode,
    span,
    token_count,
    widen,
    width,
)
from radixkv.key_encoding import key_data_of
from radixkv.key_helpers import common_prefix_bytes, common_prefix_len, no_negative_ids
from radixkv.key_validation import key_ids, validate_tokens
from radixkv.radix_key import RadixKey, extra_key_error, limit_of


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
        """Items ``stored`` shares with the key from item ``at`` on (whole tokens' worth).

        Picked by the stored form, then the key's: a tree holds one form (packed or
        tuples), so a mismatch is a bug, never a guess."""
        probe = self.probe
        if type(stored) is Ids32:
            helpers = native.helpers
            if helpers is not None and type(probe) is memoryview:  # most nodes, an array key
                return helpers.shared32(stored, probe, at // PACKED, self.length) * PACKED
            return self._shared_compact(stored, at)
        if type(stored) is bytes:
            if type(probe) is ListKey:
                return probe.shared(stored, at)
            if type(probe) is not memoryview:
                raise AssertionError("packed key data compared with a token tuple")
            return common_prefix_bytes(stored, probe, at)
        if type(probe) is not tuple:
            raise AssertionError("token tuple compared with packed key data")
        return common_prefix_len(cast(Tokens, stored), probe, at)

    def _shared_compact(self, stored: Ids32, at: int) -> int:
        """``shared`` for int32 stored ids: in C on the compiled path, else widened."""
        probe = self.probe
        if isinstance(probe, tuple):
            raise AssertionError("token tuple compared with packed key data")
        if isinstance(probe, ListKey):  # read in place by the helpers that made it
            return probe.helpers.shared32(stored, probe.ids, at // PACKED, probe.tokens) * PACKED
        helpers = native.helpers
        if helpers is None:
            return common_prefix_bytes(widen(stored), probe, at)
        return helpers.shared32(stored, probe, at // PACKED, self.length) * PACKED

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
        data = key_data_of(self._token_ids, True, self._limit)
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
        raise extra_key_error(extra_key)
    token_ids = key.token_ids
    limit = None if key.limit is None else limit_of(key)  # no call for the common case
    in_place = _read_in_place(token_ids, limit) if packed else None
    data = key_data_of(token_ids, packed, limit) if in_place is None else in_place
    n = token_count(data)
    aligned = n // page_size * page_size
    if isinstance(data, ListKey):  # read in place: its ids are unchecked
        if aligned == n or data.plain_from(aligned):  # the dropped tail, checked
            whole_pages = data.prefix(aligned * PACKED) if aligned < n else data
            read = KeyRead(whole_pages, extra_key, token_ids, limit)
            read.unchecked = True  # the walk checks the rest (KeyRead.settle)
            read.stores = stores
            read.given = n
            return read
        data = key_data_of(token_ids, packed, limit)  # the reference path decides
    if aligned < n:  # the dropped tail, checked (a tuple was validated whole)
        if type(data) is not tuple and not no_negative_ids(
            cast("bytes | memoryview", data), aligned * PACKED
        ):
            KeyRead(data, extra_key, token_ids, limit)._raise_exact()
        data = data[: aligned * width(data)]
    read = KeyRead(data, extra_key, token_ids, limit)
    read.given = n
    return read


def _read_in_place(token_ids: object, limit: int | None) -> ListKey | None:
    """``token_ids[:limit]`` to be read in place (its ids not checked yet), if the compiled
    helpers are in use and it is a list or tuple; ``None`` sends it down the reference path."""
    helpers = native.helpers
    kind = type(token_ids)
    if helpers is None or (kind is not list and kind is not tuple):
        return None
    ids = cast("native.Ids", token_ids)
    return ListKey(helpers, ids, len(ids) if limit is None else limit)
