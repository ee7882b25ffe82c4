"""Page hashes: SHA-256 chains that other engines can reproduce (SPEC.md, "Hash encoding").

A page whose ids (tuples flattened) are all below 2**32 encodes each id as 4 bytes
little-endian, byte-compatible with pymllm. A page holding a larger id is encoded as the tag
byte 0xff followed by 8 bytes little-endian per id; the two forms never collide (lengths
4k and 8k+1). A chain starts from the namespace seed, so equal pages in different
namespaces hash differently.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from radixkv.keys import Token, validate_tokens

_SMALL = 2**32
_NAMESPACE_TAG = b"radixkv:namespace:"


def _flat_ids(token_ids: Sequence[Token]) -> list[int]:
    flat: list[int] = []
    for token in token_ids:
        if isinstance(token, tuple):
            flat.extend(token)
        else:
            flat.append(token)
    return flat


def encode_page(token_ids: Sequence[Token]) -> bytes:
    """The bytes a page contributes to its hash."""
    ids = _flat_ids(validate_tokens(token_ids))
    if not ids or max(ids) < _SMALL:
        return struct.pack(f"<{len(ids)}I", *ids)
    return b"\xff" + struct.pack(f"<{len(ids)}Q", *ids)


def hash_token_ids(token_ids: Sequence[Token], prior_hash: str | None = None) -> str:
    """SHA-256 hex digest of a page, chained after ``prior_hash`` (raw bytes first)."""
    digest = hashlib.sha256()
    if prior_hash:
        digest.update(bytes.fromhex(prior_hash))
    digest.update(encode_page(token_ids))
    return digest.hexdigest()


def hash_to_int64(hex_str: str) -> int:
    """The first 16 hex digits as a signed 64-bit integer."""
    value = int(hex_str[:16], 16)
    return value - 2**64 if value >= 2**63 else value


def hash_bytes(data: bytes) -> int:
    """The first 8 bytes of SHA-256(data) as an unsigned big-endian integer."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def namespace_seed(extra_key: str | None) -> str | None:
    """The prior of a namespace's first page; the ``None`` namespace has none."""
    if extra_key is None:
        return None
    return hashlib.sha256(_NAMESPACE_TAG + extra_key.encode("utf-8")).hexdigest()


def chain_page_hashes(
    token_ids: Sequence[Token], page_size: int, prior_hash: str | None
) -> list[str]:
    """Hashes of consecutive pages of ``token_ids``, each chained after the one before."""
    hashes: list[str] = []
    for start in range(0, len(token_ids), page_size):
        prior_hash = hash_token_ids(token_ids[start : start + page_size], prior_hash)
        hashes.append(prior_hash)
    return hashes
