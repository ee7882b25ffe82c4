"""Profiles under their former name: ``Semantics`` is ``radixkv_conformance.profile.Profile``."""

from radixkv_conformance.profile import (
    CHUNK_CACHE,
    MAX_RADIX_TRIE,
    PROFILES,
    RADIXKV,
    SGLANG,
    Profile,
)

Semantics = Profile
SEMANTICS = PROFILES

__all__ = ["CHUNK_CACHE", "MAX_RADIX_TRIE", "RADIXKV", "SEMANTICS", "SGLANG", "Semantics"]
