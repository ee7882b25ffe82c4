"""The mutants: each one a single deliberate bug, written as an exact source replacement.

Every ``old`` text must occur exactly once in its file, so a refactor that moves the code
makes the run fail loudly instead of silently testing nothing.
"""

from __future__ import annotations

from typing import NamedTuple

RADIX_MACHINE = "tests/machines/test_radix_cache_machine.py"


class Mutant(NamedTuple):
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    suite: str = RADIX_MACHINE  # the pytest target that must catch it


CACHE = "src/radixkv/radix_cache.py"
TREE = "src/radixkv/tree.py"
HASHING = "src/radixkv/hashing.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "lock-not-propagated-to-root",
        CACHE,
        "        node.held_locks += 1\n        for n in path_to_root(node):",
        "        node.held_locks += 1\n        for n in (node,):",
    ),
    Mutant(
        "unlock-not-propagated-to-root",
        CACHE,
        "        node.held_locks -= 1\n        for n in path_to_root(node):",
        "        node.held_locks -= 1\n        for n in (node,):",
    ),
    Mutant(
        "page-truncation-off-by-one",
        CACHE,
        "tokens[: page_align(len(tokens), self.page_size)]",
        "tokens[: page_align(len(tokens) + 1, self.page_size)]",
    ),
    Mutant(
        "extra-key-ignored-in-child-keys",
        TREE,
        "    return (extra_key, tokens[start : start + page_size])",
        "    return (None, tokens[start : start + page_size])",
    ),
    Mutant(
        "lru-picks-most-recent-leaf",
        TREE,
        "        return (self.last_access_time, self.id)",
        "        return (-self.last_access_time, self.id)",
    ),
    Mutant(
        "lru-tie-order-reversed",
        TREE,
        "        return (self.last_access_time, self.id)",
        "        return (self.last_access_time, -self.id)",
    ),
    Mutant(
        "evicts-locked-leaf",
        CACHE,
        "return node is not self.root and not node.children and node.lock_ref == 0",
        "return node is not self.root and not node.children",
    ),
    Mutant(
        "split-drops-an-index",
        TREE,
        "        node.value[:split_len],\n",
        "        node.value[: split_len - 1],\n",
    ),
    Mutant(
        "split-forgets-lock-count",
        TREE,
        "    upper.lock_ref = node.lock_ref\n",
        "",
    ),
    Mutant(
        "insert-overwrites-cached-indices",
        CACHE,
        "        node = settled or self.root\n",
        "        node = settled or self.root\n"
        "        if matched:\n"
        "            node.value = value[matched - len(node) : matched].clone()\n",
    ),
    Mutant(
        "size-counter-not-moved-on-lock",
        CACHE,
        "            if n.lock_ref == 0:\n                self._evictable_size -= len(n)\n"
        "                self._protected_size += len(n)\n",
        "",
    ),
    Mutant(
        "hash-ignores-prior",
        HASHING,
        "        prior_hash = hash_token_ids(token_ids[start : start + page_size], prior_hash)",
        "        prior_hash = hash_token_ids(token_ids[start : start + page_size])",
    ),
    Mutant(
        "hash-ignores-namespace",
        CACHE,
        "            return namespace_seed(extra_key)",
        "            return None",
    ),
    Mutant(
        "unmatched-unlock-accepted",
        CACHE,
        "        if node.held_locks == 0:\n            raise LockError",
        "        if node.held_locks < 0:\n            raise LockError",
    ),
    Mutant(
        "evict-no-cascade-to-parent",
        CACHE,
        "            if self._is_evictable_leaf(parent):\n",
        "            if False:\n",
    ),
    Mutant(
        "evict-does-not-free",
        CACHE,
        "        result.swa_evicted += self._attention.deleted(leaf)\n        self._free(leaf)\n",
        "        result.swa_evicted += self._attention.deleted(leaf)\n",
    ),
    Mutant(
        "evict-overshoots-target",
        CACHE,
        "        while result.full_evicted < num_tokens and candidates:",
        "        while result.full_evicted <= num_tokens and candidates:",
    ),
    Mutant(
        "match-does-not-refresh-recency",
        CACHE,
        "        node = path[-1] if path else self.root\n        self._touch(node)\n",
        "        node = path[-1] if path else self.root\n",
    ),
    Mutant(
        "reset-does-not-free",
        CACHE,
        "        for node in doomed:\n            self._free(node)\n",
        "",
    ),
    Mutant(
        "negative-token-accepted",
        "src/radixkv/tokens.py",
        "    if lo < 0:\n",
        "    if lo < -(2**40):\n",
    ),
    Mutant(
        "short-value-accepted",
        CACHE,
        "        if value.numel() < n:\n",
        "        if value.numel() < n - 1:\n",
    ),
    Mutant(
        "rejected-insert-mutates-first",
        CACHE,
        "        tokens, extra_key = self._aligned_key(key)\n        value = self._aligned_value",
        "        self.root.last_access_time = self._clock()\n"
        "        tokens, extra_key = self._aligned_key(key)\n        value = self._aligned_value",
    ),
)
