"""The exact checks on a key's token ids: the valid tokens, or the error naming a bad one.

A valid token is an id in [0, 2**63) (anything with ``__index__``: a bool or a numpy int
counts as the int it equals) or a non-empty tuple of ids (a bigram). The fast paths (the
packing in key_encoding.py, the compiled helpers) refuse anything unusual without saying
why; a key they refuse comes here, where the first bad token is named in the
``UsageError`` or ``TokenTypeError`` raised. Callers off the hot path (hashing, the trie,
the harness) use these checks directly."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

from radixkv.errors import TokenTypeError, UsageError
from radixkv.key_data import Token, Tokens
from radixkv.key_helpers import pack_ids, signs_clear

MAX_TOKEN_ID = 2**63


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


def key_ids(token_ids: Iterable[object], limit: int | None) -> Iterable[object]:
    """The first ``limit`` ids of ``token_ids`` (all if ``None``) for the exact checks: a
    slice of a tensor or array (read with ``tolist()``), an iterator over anything else."""
    if limit is None:
        return token_ids
    if type(token_ids) is not list and hasattr(token_ids, "tolist"):
        return cast("Sequence[object]", token_ids)[:limit]
    return itertools.islice(token_ids, limit)


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
    # isinstance, not an exact type: a tuple subclass (a namedtuple) is a bigram too.
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
