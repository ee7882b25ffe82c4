"""The invariant catalogue and the two error families of the spec.

Every invariant has one id, used alike by the implementation's ``check_invariants()``,
the state machine's ``@invariant`` checks and the spec's own checks, so a failure names
the rule it broke. SPEC.md explains each one.
"""

from collections.abc import Callable
from typing import Final

INVARIANTS: Final[dict[str, str]] = {
    "INV-1": "Root: empty key, no parent, never evicted, lock_ref >= 1.",
    "INV-2": (
        "Node shape: every non-root node has a non-empty, page-aligned key and a 1-D int64 "
        "value with len(value) == len(key)."
    ),
    "INV-3": (
        "Edges: parent.children[child_key(child)] is child and child.parent is parent; "
        "no evicted node is reachable."
    ),
    "INV-4": (
        "Radix and namespace purity: siblings differ in their first page; every node on a "
        "root path has the path's extra_key."
    ),
    "INV-5": (
        "Locks: lock_ref(n) == number of outstanding lock handles taken at n or below "
        "(so >= 0 and parent >= child); unlocking where no handle is held is rejected."
    ),
    "INV-6": (
        "Sizes: evictable == tokens in unlocked nodes, protected == tokens in locked nodes, "
        "evictable + protected == total."
    ),
    "INV-7": (
        "Ownership: every KV index is owned by exactly one party (one tree node, the caller, "
        "or the free pool): none leaked, none freed twice, none in two nodes."
    ),
    "INV-8": (
        "Recency: a parent is at least as recent as each child; times come from the "
        "cache's logical clock."
    ),
    "INV-9": (
        "Hashes: a node's cached page hashes equal page_hashes of its full root path "
        "(independent of call order; splits and evictions never change a surviving "
        "page's hash)."
    ),
    "INV-10": (
        "Match: the result is the longest cached page-aligned prefix in the key's namespace; "
        "prefix_len == len(indices), a multiple of page_size, <= len(key); indices are "
        "exactly the cached indices of that prefix; a match never changes the "
        "token->index map."
    ),
    "INV-11": (
        "Eviction: victims are whole unlocked leaves taken least-recently-used first (ties: "
        "older clock value, then smaller node id); eviction stops as soon as the target is "
        "reached (so it overshoots by less than one victim) or nothing evictable is left; "
        "on_node_evict fires exactly once per deleted node."
    ),
    "INV-12": (
        "Insert: the cache keeps the indices it already holds for the cached prefix and "
        "adopts the caller's only for the new suffix; prefix_len counts the already-cached "
        "aligned tokens; last_node ends exactly at the inserted (aligned) key."
    ),
    "INV-13": (
        "Namespaces: keys with different extra_key (None and '' included) never share a "
        "node, a match or a page hash."
    ),
    "INV-14": (
        "Rejected calls: a call rejected as a usage error leaves the cache exactly as it was."
    ),
    "INV-15": (
        "Allocation (a cache that allocates from a fixed pool of pages): an insert is "
        "refused exactly when the new pages its key needs outnumber the free pages and the "
        "unlocked cached pages off the key's cached prefix; a refused insert leaves the "
        "cache exactly as it was."
    ),
    # Sliding-window attention (spec/swa.py)
    "INV-20": "SWA tombstones: the root and every leaf are live (a tombstone has children).",
    "INV-21": (
        "SWA locks: swa_lock_ref(n) == number of outstanding lock windows covering n; a "
        "window covers the live nodes from its handle upwards until W tokens, a tombstone "
        "or the root; tombstones are never SWA-locked; swa_lock_ref <= lock_ref."
    ),
    "INV-22": (
        "SWA sizes: swa_evictable == live tokens not SWA-locked, swa_protected == live tokens "
        "SWA-locked; total_size counts tombstones too."
    ),
    "INV-23": (
        "SWA match: the result is the longest cached prefix whose path has no tombstone or "
        "ends with at least W live tokens after the last one."
    ),
    "INV-24": (
        "SWA ownership: full and SWA KV of every index are each freed exactly once; the cache "
        "owns value[prev_prefix_len:] of an insert (adopts or frees it); nothing a lock "
        "needs (full KV on its path, SWA KV in its window) is ever freed."
    ),
    # Mamba / SSM hybrids (spec/mamba.py)
    "INV-30": (
        "Mamba locks: mamba_lock_ref(n) == lock handles held at exactly n, each protecting "
        "n's state (so n has one), and full_lock_ref(n) >= mamba_lock_ref(n); full locks "
        "reach the root, mamba locks only the node; an unmatched unlock is rejected."
    ),
    "INV-31": (
        "Mamba states: a state is one slot, held at the end of a node's key; the root holds "
        "the initial state (no slot); a split's upper node has none; every leaf has one "
        "(leaves are never mamba tombstones)."
    ),
    "INV-32": (
        "Mamba LRU lists: full_lru holds exactly the live non-root nodes, mamba_lru exactly "
        "the nodes holding a slot, each ordered by recency (last touch, then depth), so "
        "along a touched path a child is more recent than its parent."
    ),
    "INV-33": (
        "Mamba slots: every state slot has exactly one owner (one node, the caller, or the "
        "pool): none leaked, none freed twice, none held by two nodes, none written while "
        "the tree owns it; mamba sizes count slots (evictable: no handle at the node)."
    ),
    "INV-34": (
        "Mamba match: prefix_len is the deepest matched node end that holds a state (the "
        "root counts); mamba_branching_seqlen is the page-aligned KV-only match length when "
        "longer, else None; the request gets a fresh copy of that state, never the slot."
    ),
    "INV-35": (
        "Mamba eviction: phase 1 deletes LRU unlocked leaves (with their state) and then "
        "every ancestor left a childless tombstone, until num_tokens; phase 2 takes the LRU "
        "node whose state has no handle (inner: tombstone; leaf: delete) until the slot "
        "target; a deleted node frees its KV, then its slot."
    ),
    # KV events (spec/events.py)
    "INV-40": (
        "Events, stored: a BlockStored names pages not stored since their last removal or a "
        "clear, whole pages of the cache's page size, after a stored parent page of the "
        "same namespace (or none, for a namespace's first page)."
    ),
    "INV-41": "Events, removed: a BlockRemoved names only stored pages, each once.",
    "INV-42": (
        "Events, hashes: every stored hash's unsigned 64 bits are hash_to_int64 of the spec's "
        "page hash of its namespace and root path, so a router recomputes it from tokens and "
        "namespace."
    ),
    "INV-43": (
        "Events, replay: the pages rebuilt from the stream (AllBlocksCleared empties them) "
        "are exactly the cache's cached pages after every operation."
    ),
}


class SpecViolation(AssertionError):
    """An implementation (or the model itself) broke invariant ``inv_id``.

    ``rule`` names which rule of that invariant broke, where one invariant has rules whose
    failures mean different things (a locked victim corrupts memory; a victim out of order
    costs hit rate): the kit gives each rule its own finding id.
    """

    def __init__(self, inv_id: str, message: str, rule: str | None = None) -> None:
        super().__init__(f"{inv_id}: {message}")
        self.inv_id = inv_id
        self.rule = rule


class SpecUsageError(ValueError):
    """A call the model rejects: the caller broke the operation's precondition."""


def holds(condition: bool, inv_id: str, message: str, rule: str | None = None) -> None:
    """Raise ``SpecViolation(inv_id, rule)`` unless ``condition``; never stripped by
    ``python -O``. ``rule`` (a short slug) tells apart rules of one invariant that one
    operation checks and that mean different things."""
    if inv_id not in INVARIANTS:
        raise KeyError(inv_id)
    if not condition:
        raise SpecViolation(inv_id, message, rule)


Waiver = Callable[[SpecViolation], bool]
"""A checker's say on a violation: True when it acknowledges it, so the step goes on."""


def never(_: SpecViolation) -> bool:
    """The default waiver: every violation stops the step."""
    return False


def holds_or_waived(condition: bool, inv_id: str, message: str, rule: str, waive: Waiver) -> None:
    """``holds``, for a rule after whose violation the model can still apply the step (a
    victim out of the engine's order is still a victim it may delete): a checker that
    acknowledges the violation (``waive``) sees the step applied, and the rules checked
    after it still hold the rest of the step to the spec."""
    try:
        holds(condition, inv_id, message, rule)
    except SpecViolation as violation:
        if not waive(violation):
            raise


def require(condition: bool, message: str) -> None:
    """Raise ``SpecUsageError`` unless ``condition`` (a precondition of the caller's call)."""
    if not condition:
        raise SpecUsageError(message)
