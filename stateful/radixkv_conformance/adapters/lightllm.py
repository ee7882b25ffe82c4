"""LightLLM's ``RadixCache`` (``lightllm/server/router/dynamic_prompt/radix_cache.py``).

    LIGHTLLM_SRC=/path/to/lightllm radixkv check radixkv_conformance.adapters.lightllm:factory

``LIGHTLLM_SRC`` names a checkout of ModelTC/lightllm (checked at fc72ffab, 2025-07-11, the
last change to ``radix_cache.py``). The module is imported unmodified under bare parent
packages with two stand-ins (``_lightllm_import.STUBS``): ``lightllm.common.mem_manager``
(a type annotation only; the real one imports the GPU stack) and ``shared_arr.SharedArray``
(the cache's two counters in process memory instead of named POSIX shared memory, which
only the router's read-only client reads). Importing this module without ``LIGHTLLM_SRC``
raises ``ImportError`` saying so (the vector tests then skip). Line numbers below are
``radix_cache.py``'s at that commit.

The adapter plays LightLLM's request bookkeeping (``model_infer/infer_batch.py``), the
cache's caller: keys and values are int64 CPU tensors; ``insert`` reports ``prefix_len``
and the caller frees its duplicates (``free_a_req_mem``); a *lock* is
``match_prefix(key, update_refs=True)`` of the handle's tokens, as a request takes its
prefix (``InferReq.init_all``), and its token is the node returned (``shared_kv_node``);
``unlock`` is ``dec_node_ref_counter`` of that node. A handle is the token path itself,
because ``insert`` returns no node. ``match`` is the API's plain lookup,
``match_prefix(key, update_refs=False)`` (LightLLM's own callers always pass True; on a
miss the False form also decrements the root's count, line 199, which nothing reads: the
root is in the eviction set only when the tree is empty, and holds no tokens).
``evict(n)`` asks for at most the unreferenced tokens LightLLM counts (total minus
referenced): ``evict`` asserts that it is never asked more (line 252), and the router
counts exactly those tokens as free memory (``router/manager.py``, ``get_used_tokens``), so
no caller asks for more. ``reset`` is ``clear_tree_nodes`` (line 279), which drops the tree
without freeing.

LightLLM's habits, each a policy of ``PROFILE``:

* ``victims=LRU_INSERT_REFRESHES_NODE``: ``evict`` pops the least recent unreferenced leaf
  node (``get_compare_key``, line 35, ``evict``, line 258), and an insert whose key ends
  inside a cached node stamps that whole node without splitting it (``update_time`` of the
  child, line 147), so its pages below the key are refreshed too;
* ``refresh_on={insert, match, lock}``: every node a ``match_prefix`` walks is stamped
  (``update_time`` in its ``finally``, line 247), and a lock is a ``match_prefix``; a
  release stamps nothing (``dec_node_ref_counter``, line 297);
* ``reset_frees=False``: ``clear_tree_nodes`` calls no allocator (line 279);
* ``page_sizes=(1,)``: the tree stores tokens, not pages;
* ``empty_keys=False``: ``match_prefix`` asserts a non-empty key (line 189), and its
  caller never asks for one (``init_all`` matches a request's tokens but the last, and only
  when it has two or more).

Claimed: ``unlock_checks`` (a release of a node nobody holds must be refused; LightLLM
accepts it: ``tests/vectors/lightllm_unmatched_unlock.json``) and ``reset``. An unlock with
no lock token releases the node holding the handle's last token, the node a caller that
lost count would release. Not claimed: ``bad_input`` (nothing is validated but the key
and value lengths), ``stale_handles`` (a lock is a lookup by tokens, so no handle is ever
stale) and ``namespaces`` (the tree has none).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import torch

from radixkv_conformance.adapters._lightllm_import import radix_cache
from radixkv_conformance.profile import LRU_INSERT_REFRESHES_NODE, Profile
from radixkv_conformance.protocol import Host, Indices, Namespace, Sizes, TokenPlace, Tokens

_RC = radix_cache()  # ImportError saying how to get LightLLM when LIGHTLLM_SRC is unset

NOTES = (
    "LightLLM RadixCache (ModelTC/lightllm fc72ffab) from LIGHTLLM_SRC. A lock is "
    "match_prefix(update_refs=True) of the handle's tokens, its token the node returned; "
    "match is the update_refs=False lookup; the caller frees its duplicates; evict asks "
    "for at most the unreferenced tokens; reset is clear_tree_nodes (frees nothing)."
)
PROFILE = Profile(
    "lightllm",
    victims=LRU_INSERT_REFRESHES_NODE,  # radix_cache.py lines 35, 147, 258
    refresh_on=frozenset({"insert", "match", "lock"}),  # line 247; a lock is a match
    reset_frees=False,  # line 279
    page_sizes=(1,),
    empty_keys=False,  # line 189
    notes=NOTES,
)

Node = Any  # radix_cache.TreeNode


def _tensor(values: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _ints(values: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(v) for v in values.tolist())


class LightllmRadixCacheAdapter:
    """Tokens and indices become int64 tensors; handles are token paths, lock tokens nodes."""

    capabilities = frozenset({"unlock_checks", "reset"})
    usage_errors: tuple[type[BaseException], ...] = (AssertionError,)
    notes = NOTES

    def __init__(self, page_size: int, host: Host) -> None:
        if page_size != 1:
            raise ValueError(f"LightLLM's radix cache stores tokens: page_size 1, not {page_size}")
        self.page_size = 1
        self.host = host
        # unique_name and rank name the counters' shared memory (a stand-in here);
        # total_token_num is unused by the cache
        self.cache = _RC.RadixCache("radixkv", total_token_num=0, rank_in_node=0)

    def match(self, tokens: Tokens, namespace: Namespace) -> tuple[Indices, Tokens]:
        node, length, value = self.cache.match_prefix(_tensor(tokens), update_refs=False)
        if node is None:
            return (), ()
        return _ints(value), tokens[: int(length)]

    def insert(self, tokens: Tokens, namespace: Namespace, indices: Indices) -> tuple[int, Tokens]:
        prefix_len = self.cache.insert(_tensor(tokens), _tensor(indices))
        return int(prefix_len), tokens

    def lock(self, handle: Tokens) -> Node | None:
        if not handle:
            return None  # the root: LightLLM's caller holds no node (share_node is None)
        node, _, _ = self.cache.match_prefix(_tensor(handle), update_refs=True)
        return node

    def unlock(self, handle: Tokens, token: Node | None) -> None:
        node = token if token is not None else self._node_at(handle)
        self.cache.dec_node_ref_counter(node)  # None (the root's lock) is a no-op there

    def evict(self, num_tokens: int) -> int:
        freed: list[int] = []

        def release(indices: torch.Tensor) -> None:
            group = _ints(indices)
            freed.extend(group)
            self.host.free(group)

        total, refed = self.cache.get_tree_total_tokens_num(), self.cache.get_refed_tokens_num()
        self.cache.evict(min(num_tokens, int(total - refed)), release)  # never more (doc)
        return len(freed)

    def reset(self) -> None:
        self.cache.clear_tree_nodes()

    def sizes(self) -> Sizes:
        total = int(self.cache.get_tree_total_tokens_num())
        protected = int(self.cache.get_refed_tokens_num())
        return Sizes(total - protected, protected, total)

    def contents(self) -> dict[TokenPlace, int]:
        out: dict[TokenPlace, int] = {}
        for node, path in self._paths():
            start = len(path) - len(node.token_id_key)
            for at, index in enumerate(_ints(node.token_mem_index_value), start):
                out[(None, path[: at + 1], 0)] = index
        return out

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (path, _ints(node.token_mem_index_value), node.ref_counter, node.time_id)
            for node, path in self._paths()
        )
        evictable = tuple(self._path_of(node) for node in self.cache.evict_tree_set)
        root = self.cache.root_node
        return (nodes, evictable, root.ref_counter, root.time_id, self.sizes())

    def check(self) -> None:
        """LightLLM's own check (``assert_leafs_is_right``) reads its GPU memory manager."""

    def _paths(self) -> Iterator[tuple[Node, Tokens]]:
        """Every node below the root with the token path ending at it."""
        stack: list[tuple[Node, Tokens]] = [(self.cache.root_node, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                child_path = path + _ints(child.token_id_key)
                yield child, child_path
                stack.append((child, child_path))

    def _path_of(self, node: Node) -> Tokens:
        keys: list[Tokens] = []
        while node is not None:
            keys.append(_ints(node.token_id_key))
            node = node.parent
        return tuple(t for key in reversed(keys) for t in key)

    def _node_at(self, handle: Tokens) -> Node:
        """The node holding the handle's last token (no split, no refresh), or the root."""
        node, at = self.cache.root_node, 0
        while at < len(handle) and handle[at] in node.children:
            node = node.children[handle[at]]
            at += len(node.token_id_key)
        return node


def factory(page_size: int, host: Host) -> LightllmRadixCacheAdapter:
    return LightllmRadixCacheAdapter(page_size, host)
