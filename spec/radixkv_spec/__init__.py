"""radixkv's executable spec: what the prefix caches mean, in standard-library Python.

Never imports torch or radixkv: the model must stay independent of the implementation it
judges. See SPEC.md for the prose.
"""

from radixkv_spec.cache_model import CacheModel
from radixkv_spec.hashing import (
    encode_page,
    hash_bytes,
    hash_to_int64,
    hash_token_ids,
    namespace_seed,
    page_hashes,
)
from radixkv_spec.invariants import INVARIANTS, SpecUsageError, SpecViolation
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.outcomes import (
    EvictionOutcome,
    FreeEvent,
    InsertOutcome,
    MatchOutcome,
    ResetOutcome,
    node_frees,
)
from radixkv_spec.tokens import (
    MAX_TOKEN_ID,
    Namespace,
    PagePath,
    Position,
    Token,
    aligned,
    common_page_prefix_len,
    common_prefix_len,
    page_align,
    validate_namespace,
    validate_tokens,
)

__all__ = [
    "INVARIANTS",
    "MAX_TOKEN_ID",
    "CacheModel",
    "EvictionOutcome",
    "FreeEvent",
    "InsertOutcome",
    "MatchOutcome",
    "Namespace",
    "PagePath",
    "Position",
    "PrefixCacheModel",
    "ResetOutcome",
    "SpecUsageError",
    "SpecViolation",
    "Token",
    "aligned",
    "common_page_prefix_len",
    "common_prefix_len",
    "encode_page",
    "hash_bytes",
    "hash_to_int64",
    "hash_token_ids",
    "namespace_seed",
    "node_frees",
    "page_align",
    "page_hashes",
    "validate_namespace",
    "validate_tokens",
]
