"""The caller's key: ``RadixKey``, a token-id sequence in a namespace, with an optional limit.

A RadixKey holds the caller's sequence by reference and checks only its own arguments
(the namespace tag, the limit); the token ids are checked where a cache reads the key
(``read_key``, key_reading.py), once per call. ``limit_of`` is how every reader applies
the limit: as a slice bound, clamped to the length of the sequence at the time of reading.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence

from radixkv.errors import TokenTypeError, UsageError
from radixkv.key_data import Token
from radixkv.key_validation import not_a_sequence


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
            raise extra_key_error(extra_key)
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


def extra_key_error(extra_key: object) -> TokenTypeError:
    """The error for a namespace tag that is neither a str nor None."""
    return TokenTypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")


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
