"""The SWA rule set (capability ``swa``): a cache with a sliding window, against
``radixkv_spec.swa.SlidingWindowModel``.

The machine plays the serving engine: it allocates indices (full and SWA KV both held),
frees the SWA KV of a request's old tokens itself before inserting (``swa_evicted_seqlen``),
hands the cache ownership of everything past ``prev_prefix_len``, and frees only its
unaligned tail (and, under ``duplicates="caller"``, what the spec says the cache drops).
Every index has a full and an SWA state; after every step each is conserved (none leaked,
none freed twice, none freed while a lock needs it) and the cache agrees with the spec.
Where the adapter shows where its nodes begin (capability ``node_boundaries``), the pages it
holds SWA-locked are exactly the whole nodes each held lock covers (``LockExtent``), not
only within the range the spec admits without them (INV-21).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from radixkv_spec.outcomes import InsertOutcome
from radixkv_spec.swa import SlidingWindowModel
from radixkv_spec.swa_window import nodes_are_whole
from radixkv_spec.tokens import Position, page_align

from radixkv_conformance.machines import BAD_CALLS, ConformanceMachine, Step
from radixkv_conformance.protocol import Indices, Inserted, Namespace
from radixkv_conformance.session import IllegalStep, Keywords, LockRef, NodeRef, end_run
from radixkv_conformance.strategies import EVICT_ALL, EVICT_AMOUNTS, up_to


class LockExtent(NamedTuple):
    """One lock's exact SWA extent (capability ``node_boundaries``): where it was taken and
    the pages it SWA-locks, fixed at lock time."""

    position: Position
    pages: frozenset[Position]


class SwaRules(ConformanceMachine):
    """RadixCache-like caches with ``sliding_window_size = W``."""

    mode: ClassVar[str] = "swa"
    checks = ConformanceMachine.checks | {"swa", "node_boundaries"}
    match_invariant = "INV-23"
    insert_keywords: ClassVar[dict[str, Any]] = {"prev_prefix_len": 0, "swa_evicted_seqlen": 0}
    evict_keywords = ("swa_num_tokens",)
    duplicate_messages = (
        "INV-24: insert freed {freed}, spec says {expected}",
        "INV-7: insert freed {freed}; the caller frees them",
    )
    bad_calls: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = {
        **BAD_CALLS,
        "evict a negative swa_num_tokens": ("_negative_swa_evict", ("bad_input",)),
        "insert with an unaligned prev_prefix_len": ("_unaligned_prev", ("bad_input",)),
        "insert with an unaligned swa_evicted_seqlen": ("_unaligned_evicted", ("bad_input",)),
    }

    invariant_names = (
        *ConformanceMachine.invariant_names,
        "agrees_with_spec",
        "full_and_swa_indices_are_conserved",
    )

    def new_model(self) -> SlidingWindowModel:
        assert self.window is not None, "an SWA run needs a window"
        profile = self.session.profile
        tombstone_locks = profile.swa_tombstone_locks == "accepted"
        return SlidingWindowModel(
            self.page_size,
            self.window,
            profile.victims,
            profile.swa_dead_insert,
            tombstone_locks,
            profile.swa_window_tombstones,
        )

    def setup(self, page_size: int, window: int | None = None) -> None:
        # each lock's exact extent, by the lock's step (capability node_boundaries)
        self.swa_extents: dict[int, LockExtent] = {}
        super().setup(page_size, window)

    def choose_run_options(self, data: st.DataObject) -> None:
        # Under "optional" lock tokens a caller names every lock it undoes or none: None
        # undoes the newest lock on the node, so mixing styles on one node is its own mix-up.
        if self.profile.swa_lock_tokens == "optional":
            self.unlock_by_token = data.draw(st.booleans(), label="unlock by token")

    def birth(self) -> int:
        return self.epoch

    def deleted_since(self, ref: NodeRef) -> bool:
        return self.deleted_at.get((ref.namespace, ref.prefix), -1) > ref.born

    def lock_refusal(self, ref: NodeRef) -> str | None:
        tombstone = (ref.namespace, ref.prefix) in self.model.tombstones
        if tombstone and self.profile.swa_tombstone_locks == "refused":
            return "lock of a tombstone"
        return None

    def before_insert(self, indices: Indices, keywords: Keywords) -> None:
        """The request freed the SWA KV of its tokens out of the window, past what it
        matched (``indices[prev_prefix_len:swa_evicted_seqlen]``), before it inserts."""
        prev = keywords["prev_prefix_len"]
        if prev:
            self.require_matched_before(prev)
        gone = indices[prev : keywords["swa_evicted_seqlen"]]
        self.release("free_swa", gone, by="caller")

    def resumed_from(self) -> tuple[int, ...]:
        """The indices the request resumes from: the engine's own match (an acknowledged
        wrong match included), not the spec's. One longer than the spec's names pages the
        spec does not hold: the run cannot go on."""
        assert self.last_match is not None  # a match was just made
        engine, spec = self.last_match[2], self.trace[-1]["expect"]["indices"]
        if len(engine) > len(spec):
            self.session.stats["runs ended: the engine matched more than the spec holds"] += 1
            end_run()
        return engine

    def require_matched_before(self, prev_prefix_len: int) -> None:
        """A request resumes from what its match found: ``prev_prefix_len`` is legal only
        right after a match of the same key that found at least that much."""
        step = self.trace[-1]
        key = (step["namespace"], tuple(step["tokens"]))
        last = self.last_match
        if last is None or last[:2] != key or len(last[2]) < prev_prefix_len:
            found = "no match of this key" if last is None or last[:2] != key else last[2]
            raise IllegalStep(
                f"step {step['id']}: insert with prev_prefix_len {prev_prefix_len} after "
                f"{found}: a caller takes prev_prefix_len from its match of the key"
            )

    def check_insert_extras(self, got: Inserted, spec: InsertOutcome, seen: int) -> None:
        """An insert frees no SWA KV: the caller freed what left the window."""
        self.require(not self.frees_since(seen, "free_swa"), "INV-24: insert freed SWA KV")

    def before_eviction(self) -> Keywords:
        """The pages the cache holds SWA-locked: at least every lock's window, and nothing
        past a tombstone above a lock or outside every lock's path (INV-21); where the
        adapter shows its nodes, exactly the whole nodes each lock covers. The model judges
        the eviction's victims among the others."""
        locked = set(self.sut.swa_locked_pages())
        self.require(
            self.model.minimum_windows() <= locked, "INV-21: a lock's window is not SWA-locked"
        )
        self.require(
            locked <= self.model.maximum_windows(),
            "INV-21: a page past a tombstone or under no lock is SWA-locked",
            "past a tombstone",
        )
        if self.has("node_boundaries"):
            self.require_exact_extents(locked)
        return {"swa_locked": locked}

    # ---- each lock's exact extent (capability node_boundaries) ---------------------------

    def require_exact_extents(self, locked: set[Position]) -> None:
        """The SWA-locked pages are the union of the held locks' exact extents: a node too
        many keeps SWA KV held for a whole request, one too few lets it be freed."""
        exact = set().union(*(extent.pages for extent in self.swa_extents.values()))
        self.require(
            locked <= exact,
            "INV-21: a lock's SWA window runs past its nodes' exact extent",
            "beyond-its-nodes",
        )
        self.require(
            exact <= locked,
            "INV-21: a page of a lock's exact extent is not SWA-locked",
            "short-of-its-nodes",
        )

    def after_lock(self, held: LockRef) -> None:
        """Where the adapter shows its nodes, the exact extent of a lock below the root, from
        the nodes along its path now (a later split moves no token: the extent stays); the
        SWA-locked pages are checked at once, where a wrong lock shows first."""
        ref = held.node
        if not (self.has("node_boundaries") and ref.prefix):
            return
        starts = self.reported_node_starts(ref)
        pages = self.model.exact_window(ref.namespace, ref.prefix, starts)
        self.swa_extents[held.step] = LockExtent((ref.namespace, ref.prefix), pages)
        self.require_exact_extents(set(self.sut.swa_locked_pages()))  # found at the lock

    def reported_node_starts(self, ref: NodeRef) -> list[int]:
        """Where the adapter says the nodes along ``ref``'s path begin. A wrong report is a
        finding (INV-21); where the spec's tombstones split a node of a right one, the
        cache's tombstones are not the spec's (INV-23, acknowledged to get here). Either
        way the lock's extent cannot be told: the run ends."""
        starts = list(self.sut.node_starts(ref.prefix, ref.namespace))
        wrong = self.wrong_node_starts(ref, starts)
        split = wrong is None and self.splits_a_node(ref, starts)
        if split and self.cache_tombstones_agree(ref):
            wrong = "a node holds tombstones and live pages"
        self.require(
            wrong is None,
            f"INV-21: node_starts of {list(ref.prefix)} gave {starts}: {wrong}",
            "node-starts",
        )
        if wrong is not None or split:
            self.session.stats["runs ended: no lock extent the spec can tell"] += 1
            end_run()
        return starts

    def wrong_node_starts(self, ref: NodeRef, starts: Sequence[Any]) -> str | None:
        """What is wrong with a report of where the nodes along ``ref``'s path begin (None:
        nothing): sorted offsets from 0, page-aligned, below the path's length."""
        p, length = self.page_size, len(ref.prefix)
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in starts):
            return "not token offsets (ints)"
        if list(starts[:1]) != [0] or list(starts) != sorted(set(starts)):
            return "not distinct sorted offsets from 0"
        if any(s % p or s >= length for s in starts):
            return f"not multiples of page_size {p} below {length}"
        return None

    def splits_a_node(self, ref: NodeRef, starts: Sequence[int]) -> bool:
        """Whether the spec's tombstones split one of the reported nodes: a cache tombstones
        whole nodes, so either the report is wrong or the cache's tombstones differ from
        the spec's (a finding already, INV-23, acknowledged to get here)."""
        tombstones, path = self.model.tombstones, ref.prefix
        return not nodes_are_whole(ref.namespace, path, starts, tombstones, self.page_size)

    def cache_tombstones_agree(self, ref: NodeRef) -> bool:
        """Whether the cache tombstones the pages along ``ref``'s path as the spec does."""
        along: set[Position] = set(self.model.path_pages(ref.namespace, ref.prefix))
        cached = {q for q, (_, tomb) in self.sut.swa_pages().items() if q in along and tomb}
        return bool(cached == along & self.model.tombstones)

    def after_unlock(self, held: LockRef) -> None:
        """Forget the extent of the lock the cache released: the one the receipt names, or,
        unlocked without one, the newest on the node (what the cache undoes then); then
        check the SWA-locked pages, where an unlock that releases too much or too little
        shows first."""
        if not self.has("node_boundaries"):
            return
        if self.unlock_by_token:
            self.swa_extents.pop(held.step, None)
        else:
            position = (held.node.namespace, held.node.prefix)
            mine = [step for step, kept in self.swa_extents.items() if kept.position == position]
            if mine:
                del self.swa_extents[max(mine)]
        self.require_exact_extents(set(self.sut.swa_locked_pages()))  # found at the unlock

    def do_reset(self) -> None:
        """A reset drops every lock with the tree: their extents go too."""
        resets = self.resets
        super().do_reset()
        if self.resets != resets:
            self.swa_extents.clear()

    # ---- rules ---------------------------------------------------------------------------

    @rule(target=ConformanceMachine.nodes, data=st.data())
    def insert(self, data: st.DataObject) -> NodeRef:
        """A request that freed its old SWA KV inserts, matching first (prev_prefix_len)."""
        ns = self.draw_namespace(data)
        tokens = self.draw_tokens(data)
        p, takes_args = self.page_size, self.profile.swa_insert_args
        use_match = takes_args and data.draw(st.booleans(), label="matched first")
        matched: tuple[int, ...] = ()
        if use_match:
            self.do_match(tokens, ns)
            matched = self.resumed_from()
        value = matched + self.allocate(len(tokens) - len(matched))
        # the request freed its matched pages' SWA KV and ``pages`` more: past a live
        # match, a tombstone under a live page (a lock's window stops at it, INV-21)
        past = (page_align(len(tokens), p) - len(matched)) // p
        pages = data.draw(up_to(past), label="swa evicted pages") if takes_args else 0
        evicted = len(matched) + pages * p
        if evicted:
            self.count("insert with prev_prefix_len or swa_evicted_seqlen")
        return self.do_insert(
            tokens, ns, value, prev_prefix_len=len(matched), swa_evicted_seqlen=evicted
        )

    @rule(swa_num_tokens=st.one_of(st.integers(1, 8), st.just(EVICT_ALL)))
    def free_sliding_window_kv(self, swa_num_tokens: int) -> None:
        """Phase 2 alone: tombstones appear under and above locked nodes, often."""
        self.do_evict(0, swa_num_tokens=swa_num_tokens)

    @rule(num_tokens=EVICT_AMOUNTS, swa_num_tokens=EVICT_AMOUNTS)
    def evict(self, num_tokens: int, swa_num_tokens: int) -> None:
        self.do_evict(num_tokens, swa_num_tokens=swa_num_tokens)

    # ---- bad calls -----------------------------------------------------------------------

    def _negative_swa_evict(self, data: st.DataObject, _: Namespace) -> Step:
        return {"op": "evict", "num_tokens": 0, "swa_num_tokens": -1}

    def _unaligned(self, data: st.DataObject, ns: Namespace, field: str) -> Step:
        tokens = list(self.draw_tokens(data) + (0,) * self.page_size)
        step = self.insert_call(tokens, ns, list(range(len(tokens))))
        # An offset inside a page would split it; with one-token pages none is unaligned
        step[field] = 1 if self.page_size > 1 else -1
        return step

    def _unaligned_prev(self, data: st.DataObject, ns: Namespace) -> Step:
        return self._unaligned(data, ns, "prev_prefix_len")

    def _unaligned_evicted(self, data: st.DataObject, ns: Namespace) -> Step:
        return self._unaligned(data, ns, "swa_evicted_seqlen")

    # ---- invariants ----------------------------------------------------------------------

    @precondition(ConformanceMachine._started)
    @invariant()
    def agrees_with_spec(self) -> None:
        with self.checking("invariant: agrees with the spec"):
            got = {q: (tuple(ix), bool(tomb)) for q, (ix, tomb) in self.sut.swa_pages().items()}
            want = {
                (ns, path): (ix, (ns, path) in self.model.tombstones)
                for ns, table in self.model.pages.items()
                for path, ix in table.items()
            }
            self.require(got == want, "INV-23: pages or tombstones differ from the spec")
            sizes, m = self.sut.sizes(), self.model
            self.require(sizes.total == m.total_size(), "INV-6: total_size differs from the spec")
            self.require(sizes.protected == m.protected_size(), "INV-6: protected_size differs")
            self.require(
                sizes.evictable + sizes.protected == sizes.total, "INV-6: sizes do not add up"
            )
            swa_evictable, swa_protected = self.sut.swa_sizes()
            self.require(swa_evictable + swa_protected == m.live_size(), "INV-22: SWA sizes")
            self.count("invariant checks")

    @precondition(ConformanceMachine._started)
    @invariant()
    def full_and_swa_indices_are_conserved(self) -> None:
        with self.checking("invariant: every index has one owner"):
            live: set[int] = set()
            dead: set[int] = set()
            for ix, tomb in self.sut.swa_pages().values():
                (dead if tomb else live).update(ix)
            self.require(
                not (live | dead) & self.freed, "INV-24: a cached index was freed", "cached-freed"
            )
            self.require(
                not live & self.swa_freed,
                "INV-24: a live page's SWA KV was freed",
                "live-swa-freed",
            )
            self.require(
                dead <= self.swa_freed, "INV-24: a tombstone's SWA KV is still held", "swa-leak"
            )
            leaked = self.given - live - dead - self.freed
            self.require(not leaked, f"INV-24: indices leaked: {sorted(leaked)}", "leak")
