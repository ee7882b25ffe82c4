"""radixkv: the radix-tree KV prefix cache of LLM serving engines, formally specified.

The public API follows the seed documents (pymllm ``mem_cache``); semantics are in SPEC.md.
"""

from radixkv import _torch  # noqa: F401  (first: torch, without its NumPy warning)
from radixkv.base import (
    BasePrefixCache,
    EvictResult,
    InsertResult,
    MatchResult,
    RadixKey,
)
from radixkv.chunk_cache import ChunkCache
from radixkv.errors import (
    InvariantViolation,
    LockError,
    RadixKVError,
    StaleNodeError,
    TokenTypeError,
    UsageError,
)
from radixkv.eviction import POLICIES, EvictionPolicy
from radixkv.hashing import hash_bytes, hash_to_int64, hash_token_ids, namespace_seed
from radixkv.mamba_radix_cache import MambaMatchResult, MambaRadixCache
from radixkv.parts import LRUList, MambaTreeNode
from radixkv.pools import DoubleFreeError, HybridKVAllocator, KVIndexAllocator, MambaStatePool
from radixkv.radix_cache import RadixCache
from radixkv.radix_trie import RadixTrie, TrieNode
from radixkv.tree import TreeNode

__all__ = [
    "POLICIES",
    "BasePrefixCache",
    "ChunkCache",
    "DoubleFreeError",
    "EvictResult",
    "EvictionPolicy",
    "HybridKVAllocator",
    "InsertResult",
    "InvariantViolation",
    "KVIndexAllocator",
    "LRUList",
    "LockError",
    "MambaMatchResult",
    "MambaRadixCache",
    "MambaStatePool",
    "MambaTreeNode",
    "MatchResult",
    "RadixCache",
    "RadixKVError",
    "RadixKey",
    "RadixTrie",
    "StaleNodeError",
    "TokenTypeError",
    "TreeNode",
    "TrieNode",
    "UsageError",
    "hash_bytes",
    "hash_to_int64",
    "hash_token_ids",
    "namespace_seed",
]
