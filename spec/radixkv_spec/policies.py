"""Engine differences the spec allows, as small policy objects the spec models read.

Engines agree on what a prefix cache *means* (the page map of ``radixkv_spec.model``) and
differ in details that are choices, not bugs: which leaf an eviction may take, whether an
eviction deletes whole leaves or trims pages, how a Mamba match is cut. Each policy here is
one such choice with one decision (``admissible`` or the like); a model takes the policy and
asks it, so no choice is emulated by changing the model's own state.

The string-valued choices (who frees duplicates, whether reset frees, lock model, SWA lock
tokens) are decided by the harness, not by a model; they are listed with the profile that
groups every policy (``radixkv_conformance.profile.Profile``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

Recency = tuple[int, int]
"""A page's recency as (earliest, latest) tick it may carry: equal under a policy whose
refreshes are all known; wider when a policy allows refreshes the model cannot pin down."""


class LeafFacts(NamedTuple):
    """What a victim order may know about an evictable leaf page (the plain model's view).

    The first two fields are its ``Recency``, so an LRU order reads any of them alike.
    ``hits``: matches whose returned path covered the page since it was (last) added;
    ``born``: the tick of the insert that added it; ``priority``: the highest ``priority``
    of the inserts whose key covered it since then (the one that added it included).
    """

    earliest: int
    latest: int
    hits: int = 0
    born: int = 0
    priority: int = 0


@dataclass(frozen=True)
class LruLeaves:
    """A victim is a least recently used evictable leaf; ties in any order (radixkv)."""

    name: str = "lru"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """Whether a leaf of recency ``victim`` may go first among ``candidates`` (itself
        included).

        pre: victim in candidates
        """
        return victim[0] <= min(c[0] for c in candidates)


@dataclass(frozen=True)
class _WidenedLru:
    """LRU over recencies the model widened where a refresh it cannot pin down may have
    stamped a page: a victim is admitted if it is least recent under *some* choice of ticks
    within each leaf's (old tick, new tick) bounds."""

    name: str = "lru-widened"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        return victim[0] <= min(c[1] for c in candidates)


@dataclass(frozen=True)
class LruSplitRefreshesBoth(_WidenedLru):
    """LRU, where a match or insert that splits a node also refreshes the lower half.

    sglang's Python and Rust trees stamp both halves of a split. The model does not know
    where nodes end, so it widens the recency of the pages a split could have refreshed
    (the single-child chain below the touched path) to (old tick, new tick), and admits a
    victim that is least recent under *some* choice of ticks within those bounds.
    """

    name: str = "lru-split-refreshes-both"
    refreshes_split_remainder: bool = True


@dataclass(frozen=True)
class LruInsertRefreshesNode(_WidenedLru):
    """LRU, where an insert whose key ends inside a cached node stamps the whole node.

    LightLLM's RadixCache does not split a node for an insert that ends inside it: it
    stamps that node, so the pages it holds below the key are refreshed too (a match that
    ends inside a node splits it and leaves the lower half alone). The model does not know
    where nodes end, so after an insert of a key it held whole it widens the recency of the
    pages such a node could hold below the key (the single-child chain below it) to (old
    tick, new tick), and admits a victim that is least recent under *some* choice of ticks
    within those bounds.
    """

    name: str = "lru-insert-refreshes-node"
    refreshes_node_on_insert: bool = True


@dataclass(frozen=True)
class AnyLeaf:
    """Any evictable leaf may go (an engine whose clock is not comparable to the spec's)."""

    name: str = "any"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        return True


@dataclass(frozen=True)
class LfuLeaves:
    """A victim has the fewest hits among the evictable leaves, and among those is least
    recently used (ties in recency in any order). The model must know hit counts
    (``LeafFacts.hits``); radixkv's ``eviction_policy="lfu"``."""

    name: str = "lfu"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        return (victim.hits, victim.earliest) <= min((c.hits, c.earliest) for c in candidates)


@dataclass(frozen=True)
class FifoLeaves:
    """A victim is the evictable leaf whose pages were inserted first (``LeafFacts.born``;
    both halves of a split keep the insert's tick); radixkv's ``eviction_policy="fifo"``."""

    name: str = "fifo"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        return victim.born <= min(c.born for c in candidates)


@dataclass(frozen=True)
class MruLeaves:
    """A victim is a *most* recently used evictable leaf (ties in any order); radixkv's
    ``eviction_policy="mru"``."""

    name: str = "mru"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        return victim.latest >= max(c.earliest for c in candidates)


@dataclass(frozen=True)
class PriorityLeaves:
    """A victim has the lowest priority among the evictable leaves, and among those is
    least recently used (``LeafFacts.priority``: the highest priority of the inserts that
    covered the page); radixkv's ``eviction_policy="priority"``."""

    name: str = "priority"
    refreshes_split_remainder: bool = False
    refreshes_node_on_insert: bool = False

    def admissible(self, victim: LeafFacts, candidates: Sequence[LeafFacts]) -> bool:
        """pre: victim in candidates"""
        lowest = min((c.priority, c.earliest) for c in candidates)
        return (victim.priority, victim.earliest) <= lowest


VictimOrder = (
    LruLeaves
    | LruSplitRefreshesBoth
    | LruInsertRefreshesNode
    | AnyLeaf
    | LfuLeaves
    | FifoLeaves
    | MruLeaves
    | PriorityLeaves
)
LRU_LEAVES = LruLeaves()
LRU_SPLIT_REFRESHES_BOTH = LruSplitRefreshesBoth()
LRU_INSERT_REFRESHES_NODE = LruInsertRefreshesNode()
ANY_LEAF = AnyLeaf()
LFU_LEAVES = LfuLeaves()
FIFO_LEAVES = FifoLeaves()
MRU_LEAVES = MruLeaves()
PRIORITY_LEAVES = PriorityLeaves()
READS_LEAF_FACTS = (LFU_LEAVES, FIFO_LEAVES, MRU_LEAVES, PRIORITY_LEAVES)
"""The victim orders that read more than recency: only the plain model (``model.py``)
judges them; the SWA and Mamba models know recency alone."""
PLAIN_MODEL_ONLY = (*READS_LEAF_FACTS, LRU_INSERT_REFRESHES_NODE)
"""The victim orders the SWA and Mamba models refuse: those that read more than recency,
and ``LRU_INSERT_REFRESHES_NODE`` (only the plain model widens recency after an insert)."""


@dataclass(frozen=True)
class WholeLeaves:
    """``evict`` deletes whole unlocked leaves; it may overshoot by less than one node."""

    name: str = "leaf"

    def admissible(self, freed: int, target: int, page_size: int) -> bool:
        """Any total is fine here: the model judges each deleted node (INV-11)."""
        return True


@dataclass(frozen=True)
class TailPages:
    """``evict`` trims leaves page by page (MAX): it never frees a page more than asked.

    pre: page_size >= 1
    """

    name: str = "tail"

    def admissible(self, freed: int, target: int, page_size: int) -> bool:
        return freed <= -(-target // page_size) * page_size


Eviction = WholeLeaves | TailPages
WHOLE_LEAVES = WholeLeaves()
TAIL_PAGES = TailPages()

REFRESHES = frozenset({"insert", "match", "lock", "unlock"})
"""The operations that may refresh the recency of the path they touch (``lock``: an engine
whose lock is a lookup, LightLLM's ``match_prefix(update_refs=True)``)."""
DEFAULT_REFRESH = frozenset({"insert", "match"})
"""radixkv's and sglang's: an insert and a lookup refresh (vLLM and MAX: an insert and a
release; LightLLM: an insert, a lookup and a lock)."""


@dataclass(frozen=True)
class DeepestState:
    """A Mamba match is cut back to the deepest matched position holding a state, and the
    request gets a copy of that state (sglang's MambaRadixCache; docs/decisions.md §2)."""

    name: str = "deepest-state"
    copies_state: bool = True

    def matched_len(self, kv_len: int, state_ends: Sequence[int]) -> int:
        """The match length, given the KV-only match and where matched states sit.

        pre: kv_len >= 0
        pre: all(0 < n <= kv_len for n in state_ends)
        post: __return__ <= kv_len
        """
        return max(state_ends, default=0)


@dataclass(frozen=True)
class FullKv:
    """A Mamba match returns the whole KV match, states or not (pymllm); the request
    resumes from the deepest state itself, so no state is copied."""

    name: str = "full-kv"
    copies_state: bool = False

    def matched_len(self, kv_len: int, state_ends: Sequence[int]) -> int:
        """post: __return__ == kv_len"""
        return kv_len


MambaMatchPolicy = DeepestState | FullKv
DEEPEST_STATE = DeepestState()
FULL_KV = FullKv()
