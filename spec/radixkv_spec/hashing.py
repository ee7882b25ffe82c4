"""Page hashes: the published encoding other engines reproduce to name cached pages.

Encoding of one page (``encode_page``):

* If every token id in the page (bigram tuples flattened in order) is below ``2**32``:
  each id as 4-byte little-endian unsigned. Byte-compatible with pymllm and with sglang's
  legacy ``get_hash_str``.
* Otherwise the tagged form: the byte ``0xff``, then every id as 8-byte little-endian
  unsigned.

The two forms never collide: the plain form is ``4k`` bytes long, the tagged one
``8k + 1``. Within the plain form ``[(1, 2)]`` and ``[1, 2]`` encode alike; that collision
is kept on purpose, for compatibility with pymllm.

Chaining (``page_hashes``): page ``i`` of a key is hashed with the previous page's hash as
``prior_hash``; page 0 takes the namespace seed (``None`` namespace: no prior). So the
hash of a page is a pure function of the namespace and every token up to the page's end.
"""

import hashlib
from collections.abc import Iterator, Sequence
from typing import Final

from radixkv_spec.tokens import Namespace, Token, validate_tokens

# Below this bound every id fits the 4-byte plain form.
PLAIN_FORM_LIMIT: Final = 2**32
# Prefix of the tagged form; a plain-form encoding has a length divisible by 4, this one not.
TAG: Final = b"\xff"
NAMESPACE_DOMAIN: Final = b"radixkv:namespace:"


def token_ids_of(tokens: Sequence[Token]) -> Iterator[int]:
    """Every token id in ``tokens``, bigram tuples flattened in order."""
    for token in tokens:
        if isinstance(token, tuple):
            yield from token
        else:
            yield token


def encode_page(tokens: Sequence[object]) -> bytes:
    """The bytes a page hash is taken over (see the module docstring).

    raises: TypeError, ValueError
    post: len(__return__) % 4 == 0 or len(__return__) % 8 == 1
    """
    ids = list(token_ids_of(validate_tokens(tokens)))
    if all(i < PLAIN_FORM_LIMIT for i in ids):
        return b"".join(i.to_bytes(4, "little") for i in ids)
    return TAG + b"".join(i.to_bytes(8, "little") for i in ids)


def hash_token_ids(token_ids: Sequence[object], prior_hash: str | None = None) -> str:
    """SHA-256 hex digest of one page, chained after ``prior_hash`` when it is non-empty.

    ``""`` counts as no prior, as in pymllm.
    """
    digest = hashlib.sha256()
    if prior_hash:
        digest.update(bytes.fromhex(prior_hash))
    digest.update(encode_page(token_ids))
    return digest.hexdigest()


def hash_to_int64(hex_str: str) -> int:
    """The first 16 hex digits of ``hex_str`` read as a signed two's complement int64.

    pre: 0 < len(hex_str)
    pre: all(c in "0123456789abcdefABCDEF" for c in hex_str)
    post: -(2**63) <= __return__ < 2**63
    post: __return__ % 2**64 == int(hex_str[:16], 16)
    """
    unsigned = int(hex_str[:16], 16)
    return unsigned - 2**64 if unsigned >= 2**63 else unsigned


def hash_bytes(data: bytes) -> int:
    """The first 8 bytes of SHA-256(``data``) as a big-endian unsigned int64."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def namespace_seed(extra_key: str) -> str:
    """The prior hash of page 0 in namespace ``extra_key`` (the ``None`` namespace has none)."""
    return hashlib.sha256(NAMESPACE_DOMAIN + extra_key.encode("utf-8")).hexdigest()


def page_hashes(extra_key: Namespace, tokens: Sequence[object], page_size: int) -> list[str]:
    """The chained hash of every page of a page-aligned key in namespace ``extra_key``.

    Raises ``ValueError`` if ``len(tokens)`` is not a multiple of ``page_size``.
    """
    if page_size < 1 or len(tokens) % page_size:
        raise ValueError(f"{len(tokens)} tokens are not whole pages of {page_size}")
    prior = None if extra_key is None else namespace_seed(extra_key)
    hashes: list[str] = []
    for start in range(0, len(tokens), page_size):
        prior = hash_token_ids(tokens[start : start + page_size], prior)
        hashes.append(prior)
    return hashes


def chain_restarted(
    got: object, namespace: Namespace, prefix: Sequence[object], page_size: int
) -> bool:
    """Whether ``got`` are the page hashes of ``prefix`` with the chain restarted at some
    page: each page's hash is the spec's for the pages from some page at or before it, and
    at least one page's chain starts after the root (its parents were left out)."""
    pages = len(prefix) // page_size
    if not isinstance(got, list) or len(got) != pages:
        return False
    restarted = False
    for i in range(pages):
        end = (i + 1) * page_size
        starts = [
            j
            for j in range(i + 1)
            if page_hashes(namespace, prefix[j * page_size : end], page_size)[-1] == got[i]
        ]
        if not starts:
            return False
        restarted = restarted or 0 not in starts
    return restarted


def hash_mistake(
    namespace: Namespace, prefix: Sequence[object], page_size: int, got: object
) -> str:
    """Which rule page hashes ``got`` that are not the spec's break: ``namespace`` (the
    namespace ignored), ``path`` (some page hashed without some of its parents), or
    ``other`` (neither that can be told)."""
    if namespace is not None and got == page_hashes(None, prefix, page_size):
        return "namespace"
    if chain_restarted(got, namespace, prefix, page_size):
        return "path"
    if chain_restarted(got, None, prefix, page_size):  # both: the namespace is ignored too
        return "namespace"
    return "other"
