"""Tokens, namespaces and page alignment: the pure helpers the rest of the spec stands on.

A key is a sequence of tokens in a namespace. A token is a token id (an int in
``[0, 2**63)``; any object with ``__index__`` counts, such as a numpy integer, or a bool,
which is the int 0 or 1 as everywhere in Python) or a non-empty tuple of token ids (a
bigram / EAGLE token). A namespace is the key's
``extra_key``: a ``str``, or ``None`` for the default namespace; ``""`` is a namespace of
its own, distinct from ``None``.

Caches store whole pages only: both lookups and inserts use the longest page-aligned
prefix of a key (``len // page_size * page_size`` tokens) and ignore the tail.
"""

import operator
from collections.abc import Sequence
from typing import Final, SupportsIndex, TypeAlias, cast

Token: TypeAlias = int | tuple[int, ...]
Namespace: TypeAlias = str | None
PagePath: TypeAlias = tuple[Token, ...]
"""A cached page, named by its key's tokens from the root to the page's end."""
Position: TypeAlias = tuple[Namespace, PagePath]
"""A cached page in its namespace: what every model keys its pages, locks and recency by."""

# Token ids fit a signed 64-bit slot (torch.int64), so the largest id is 2**63 - 1.
MAX_TOKEN_ID: Final = 2**63


def validate_token_id(value: object) -> int:
    """Return ``value`` if it is a token id; raise ``TypeError`` / ``ValueError`` if not.

    raises: TypeError, ValueError
    post: 0 <= __return__ < MAX_TOKEN_ID
    """
    # bool is an int (True == 1, hash(True) == hash(1)): a key holding True is the key
    # holding 1, and telling them apart would cost the cache a type check per token
    if type(value) is int:  # the common case, without a runtime Protocol check
        token_id = value
    elif isinstance(value, SupportsIndex):
        # Integers of other libraries (numpy) count as ints through __index__
        token_id = operator.index(value)
    else:
        raise TypeError(f"token id must be an int, got {type(value).__name__}")
    # Ids index an int64 vocabulary: no negatives, nothing that overflows int64
    if not 0 <= token_id < MAX_TOKEN_ID:
        raise ValueError(f"token id {token_id} is outside [0, 2**63)")
    return token_id


def validate_token(value: object) -> Token:
    """Return ``value`` as a token: an id, or a non-empty tuple of ids (a bigram token).

    raises: TypeError, ValueError
    """
    if isinstance(value, tuple):
        # An empty tuple would encode to no bytes at all: a token nothing can tell apart
        if not value:
            raise ValueError("a bigram token must hold at least one id")
        return tuple(validate_token_id(element) for element in value)
    return validate_token_id(value)


def validate_tokens(tokens: Sequence[object]) -> tuple[Token, ...]:
    """Return ``tokens`` as a tuple of tokens; raise ``TypeError`` / ``ValueError`` if any is bad.

    raises: TypeError, ValueError
    post: len(__return__) == len(tokens)
    """
    as_tuple = tuple(tokens)
    if all(type(token) is int and 0 <= token < MAX_TOKEN_ID for token in as_tuple):
        return cast(tuple[Token, ...], as_tuple)  # plain ids, checked as validate_token would
    return tuple(validate_token(token) for token in as_tuple)


def validate_namespace(extra_key: object) -> Namespace:
    """Return ``extra_key`` if it is a namespace (``str`` or ``None``); else raise ``TypeError``.

    raises: TypeError
    post: __return__ is extra_key
    """
    # Any other hashable could alias a tuple token in a child key, so only str is allowed
    if extra_key is not None and not isinstance(extra_key, str):
        raise TypeError(f"extra_key must be str or None, got {type(extra_key).__name__}")
    return extra_key


def page_align(n: int, page_size: int) -> int:
    """The largest multiple of ``page_size`` that is at most ``n``.

    pre: n >= 0
    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: 0 <= __return__ <= n < __return__ + page_size
    """
    return n // page_size * page_size


def aligned(tokens: Sequence[Token], page_size: int) -> tuple[Token, ...]:
    """The whole pages of ``tokens``: the tail shorter than a page is dropped.

    pre: page_size >= 1
    post: len(__return__) == page_align(len(tokens), page_size)
    post: all(__return__[i] == tokens[i] for i in range(len(__return__)))
    """
    return tuple(tokens[: page_align(len(tokens), page_size)])


def common_prefix_len(a: Sequence[Token], b: Sequence[Token]) -> int:
    """How many leading tokens ``a`` and ``b`` share.

    post: 0 <= __return__ <= min(len(a), len(b))
    post: all(a[i] == b[i] for i in range(__return__))
    post: __return__ == min(len(a), len(b)) or a[__return__] != b[__return__]
    """
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def common_page_prefix_len(a: Sequence[Token], b: Sequence[Token], page_size: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, counting whole shared pages only.

    A page that ends past the shorter sequence is never shared, even if both end with
    the same partial page.

    pre: page_size >= 1
    post: __return__ % page_size == 0
    post: 0 <= __return__ <= min(len(a), len(b))
    post: all(a[i] == b[i] for i in range(__return__))
    post: common_prefix_len(a, b) < __return__ + page_size
    """
    return page_align(common_prefix_len(a, b), page_size)


def extends(seq: Sequence[Token], head: Sequence[Token]) -> bool:
    """Whether ``head`` is a prefix of ``seq`` (every sequence extends itself).

    post: __return__ == (len(head) <= len(seq) and all(seq[i] == t for i, t in enumerate(head)))
    """
    return common_prefix_len(seq, head) == len(head)
