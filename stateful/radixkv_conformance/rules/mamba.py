"""The Mamba rule set (capability ``mamba``): a hybrid cache with state slots, against
``radixkv_spec.mamba.MambaCacheModel``.

The machine plays the serving engine: it hands out KV indices and state slots (the cache
takes its copy-on-write slots from ``host.alloc_slot``), frees its duplicates after an
insert (and its slot when ``mamba_exist``), frees the copy-on-write slot of a request it
aborts, and receives whatever the cache frees, in order. After every step it checks the
cached pages and states against the model, the sizes, the lock counts (INV-30), the LRU
lists when the adapter shows them (INV-32), and that every KV index and every state slot
has exactly one owner (INV-7, INV-33). How a match is cut (to the deepest state, or the
whole KV match) is the profile's ``mamba_match`` policy.

The kit's state pool is finite for copies: while the tree holds ``STATE_POOL`` states or
more, the pool is full, and ``host.alloc_slot`` answers ``None`` during a match unless the
cache freed a slot in that same call (each freed slot is lent once). A match refused a slot
is a copy that makes room: what the cache freed during it is checked as ``evict(0, 1)``
with the copied state held, and the match's result against the cache that eviction left
(``MambaCacheModel.match(..., room=)``). The rule depends only on the cached states, so a
trace replays it without saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import MultipleResults, invariant, multiple, precondition, rule
from radixkv_spec.mamba import MambaCacheModel
from radixkv_spec.outcomes import InsertOutcome, MatchOutcome
from radixkv_spec.tokens import page_align

from radixkv_conformance.machines import BAD_CALLS, ConformanceMachine, Step
from radixkv_conformance.protocol import Indices, Inserted, Matched, Namespace
from radixkv_conformance.session import Keywords, NodeRef
from radixkv_conformance.strategies import EVICT_AMOUNTS, one_of

UNUSED_SLOT = 10**9  # a slot nobody holds: in a bad call only the other argument is wrong


@dataclass
class Lending:
    """What the pool lent the cache during one match."""

    seen: int  # the kit's events before the match: what the cache freed since is after
    room: int  # free slots when the match began (0: the pool was full)
    lent: int = 0
    refused: int = 0


class MambaRules(ConformanceMachine):
    """MambaRadixCache-like caches."""

    STATE_POOL: ClassVar[int] = 4
    """While the tree holds this many states or more, the pool has no slot for a copy."""

    mode: ClassVar[str] = "mamba"
    checks = ConformanceMachine.checks | {"mamba"}
    match_invariant = "INV-34"
    eviction_invariant = "INV-35"
    matched: Matched  # what the last match returned (its copy-on-write slot, ...)
    insert_keywords: ClassVar[dict[str, Any]] = {"state_slot": None}
    evict_keywords = ("mamba_slots",)
    bad_calls: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = {
        **BAD_CALLS,
        "evict a negative slot count": ("_negative_slot_evict", ("bad_input",)),
        "insert with a negative slot": ("_negative_slot", ("bad_input",)),
        "insert with a slot the tree owns": ("_owned_slot", ("bad_input",)),
    }

    invariant_names = (
        *ConformanceMachine.invariant_names,
        "agrees_with_spec",
        "lock_counts_and_lists",
        "every_index_and_slot_has_one_owner",
    )

    def new_model(self) -> MambaCacheModel:
        profile = self.session.profile
        return MambaCacheModel(
            self.page_size,
            profile.victims,
            profile.mamba_match,
            tombstone_leaves=profile.mamba_tombstone_leaves == "kept",
            tombstone_locks=profile.mamba_tombstone_locks == "accepted",
            state_recency=profile.mamba_state_recency,
        )

    def setup(self, page_size: int, window: int | None = None) -> None:
        self.lending: Lending | None = None  # set while a match runs
        self.copies_held: set[int] = set()  # copy-on-write slots the caller holds now
        super().setup(page_size, window)

    def lend_slot(self) -> int | None:
        """A slot lent to the cache (``host.alloc_slot``, whose ``None`` is a full pool, as
        ``alloc_track_slot``'s is). During a match the pool lends the room it had when the
        match began plus each slot the cache freed since, once; the rest of the time it
        never runs out (nor for the engine's own slots, ``new_slot``)."""
        lending = self.lending
        if lending is not None:
            freed = sum(1 for kind, _ in self.events[lending.seen :] if kind == "slot")
            if lending.room + freed - lending.lent <= 0:
                lending.refused += 1
                return None
            lending.lent += 1
        return self.new_slot()

    def lock_refusal(self, ref: NodeRef) -> str | None:
        stateless = bool(ref.prefix) and not self.model.has_state(ref.namespace, ref.prefix)
        if stateless and self.profile.mamba_tombstone_locks == "refused":
            return "lock of a node without a state"
        return None

    def state_copied(self, src: int, dst: int) -> None:
        # INV-33: the copy's destination is the request's, never a slot the tree holds
        self.require(
            dst not in self.model.owned_slots(), f"INV-33: copy_states wrote tree slot {dst}"
        )
        super().state_copied(src, dst)

    def insert_call(self, tokens: list[Any], ns: Any, indices: list[int]) -> Step:
        return {**super().insert_call(tokens, ns, indices), "state_slot": UNUSED_SLOT}

    # ---- steps ---------------------------------------------------------------------------

    def do_match(self, tokens: tuple[int, ...], namespace: Namespace) -> NodeRef:
        """The core's match, with the pool lending for its copy (``lend_slot``)."""
        room = max(0, self.STATE_POOL - len(self.model.owned_slots()))
        self.lending = Lending(len(self.events), room)
        try:
            return super().do_match(tokens, namespace)
        finally:
            self.lending = None

    def match_keywords(self) -> Keywords:
        """When the pool refused the copy a slot, what the cache freed meanwhile is the
        copy's room-making eviction (``room``): the spec's match answers for the cache that
        eviction left. Otherwise a match frees nothing."""
        assert self.lending is not None
        frees = [(k, g) for k, g in self.events[self.lending.seen :] if k in ("free", "slot")]
        if not self.lending.refused:
            message = f"INV-34: a match with a slot for its copy freed {frees}"
            self.require(not frees, message, "freed")
            return {}
        self.trace[-1]["observed"] = {"room": [[k, list(g)] for k, g in frees]}
        self.count("match at a full pool")
        self.session.stats["tokens evicted to make room"] += sum(
            len(g) for k, g in frees if k == "free"
        )
        return {"room": frees, "waive": self.waive}

    def check_match_extras(self, got: Matched, want: MatchOutcome, step: Step, copies: int) -> None:
        """The match's length, its branching point, and the copy of the matched state into
        a slot of the request's (copy-on-write), exactly when the spec says (INV-34). The
        request reads what the match returned in ``matched``."""
        self.matched = got
        if got.cow_slot is not None:  # the caller's until it inserts or frees it
            self.copies_held.add(got.cow_slot)
        step["expect"].update(prefix_len=want.prefix_len, branching_seqlen=want.branching_seqlen)
        prefix_len = len(got.indices) if got.prefix_len is None else got.prefix_len
        self.require(prefix_len == want.prefix_len, f"INV-34: prefix_len {prefix_len}, spec {want}")
        self.require(
            got.branching_seqlen == want.branching_seqlen,
            f"INV-34: mamba_branching_seqlen {got.branching_seqlen}, spec {want}",
        )
        if want.source_slot is None:
            self.require(got.cow_slot is None, "INV-34: a copy-on-write slot where none is due")
            self.require(len(self.copies) == copies, "INV-34: copied a state where none is due")
        else:
            self.require(got.cow_slot is not None, "INV-34: no copy-on-write slot for a state hit")
            expected = [(want.source_slot, got.cow_slot)]
            self.require(self.copies[copies:] == expected, f"INV-33: copies {self.copies[copies:]}")

    def before_insert(self, indices: Indices, keywords: Keywords) -> None:
        """The caller holds the state slot it passes, too (a copy it held goes with it)."""
        if keywords["state_slot"] is not None:
            self.hand_out_slot(keywords["state_slot"])
            self.copies_held.discard(keywords["state_slot"])

    def check_insert_extras(self, got: Inserted, spec: InsertOutcome, seen: int) -> None:
        """``mamba_exist`` is the spec's (INV-31). An empty key (the root) is its own
        finding: an engine that answers otherwise there follows a convention of its own,
        harmless beside a wrong answer for a real key."""
        exist = spec.state_existed
        rule = "empty-key" if spec.end == 0 else "mamba-exist"
        message = f"INV-31: mamba_exist {got.mamba_exist}, the spec says {exist}"
        self.require(got.mamba_exist == exist, message, rule)

    def do_free_slot(self, slot: int) -> None:
        self.copies_held.discard(slot)
        super().do_free_slot(slot)

    def drop_match(self) -> None:
        """A request that matched and went away frees its copy of the state."""
        if self.matched.cow_slot is not None:
            self.do_free_slot(self.matched.cow_slot)

    # ---- rules ---------------------------------------------------------------------------

    @rule(target=ConformanceMachine.nodes, data=st.data(), with_slot=st.booleans())
    def insert(self, data: st.DataObject, with_slot: bool) -> NodeRef | MultipleResults[NodeRef]:
        """Fresh KV for the whole key, with a fresh state slot or none."""
        ns = self.draw_namespace(data)
        tokens = self.draw_tokens(data)
        aligned = page_align(len(tokens), self.page_size)
        if not with_slot and self.model.kv_len(ns, tokens) < aligned:
            call = self.insert_call(list(tokens), ns, list(range(len(tokens))))
            self.do_bad_call("new tokens without a state", {**call, "state_slot": None})
            return multiple()  # the call was refused: no handle for the bundle
        # an engine whose every insert carries the request's state is never asked for less
        with_slot = with_slot or self.profile.mamba_insert_state == "required"
        slot = self.new_slot() if with_slot else None
        if not with_slot:
            self.count("insert without state")
        return self.do_insert(tokens, ns, self.allocate(len(tokens)), state_slot=slot)

    @rule(target=ConformanceMachine.nodes, data=st.data(), snapshot=st.booleans())
    def request(self, data: st.DataObject, snapshot: bool) -> NodeRef:
        """Match, run from the copied state, maybe cache a state at the branching point,
        then cache the whole key with the request's own slot (copy-on-write)."""
        ns = self.draw_namespace(data)
        tokens = self.draw_tokens(data)
        matched = self.do_match(tokens, ns)
        got = self.matched
        working = got.cow_slot if got.cow_slot is not None else self.new_slot()
        done = len(matched.prefix)
        row = tuple(got.indices) + self.allocate(len(tokens) - done)
        if snapshot and got.branching_seqlen is not None and got.branching_seqlen > done:
            cut = got.branching_seqlen
            self.do_insert(tokens[:cut], ns, row[:cut], state_slot=self.new_slot())
            protected = self.model.kv_len(ns, tokens[:cut])
            row = self.model.indices_of(ns, tokens[:protected]) + row[protected:]
            self.count("request with a snapshot")
        self.count("request")
        return self.do_insert(tokens, ns, row, state_slot=working)

    @rule(num_tokens=EVICT_AMOUNTS, mamba_slots=st.integers(0, 4))
    def evict(self, num_tokens: int, mamba_slots: int) -> None:
        self.do_evict(num_tokens, mamba_slots=mamba_slots)

    # ---- bad calls -----------------------------------------------------------------------

    def _negative_slot_evict(self, data: st.DataObject, _: Namespace) -> Step:
        return {"op": "evict", "num_tokens": 0, "mamba_slots": -1}

    def _slot_insert(self, data: st.DataObject, ns: Namespace, slot: int) -> Step:
        tokens = list(self.draw_tokens(data) + (0,) * self.page_size)
        return {**self.insert_call(tokens, ns, list(range(len(tokens)))), "state_slot": slot}

    def _negative_slot(self, data: st.DataObject, ns: Namespace) -> Step:
        return self._slot_insert(data, ns, -1)

    def _owned_slot(self, data: st.DataObject, ns: Namespace) -> Step:
        owned = sorted(self.model.owned_slots())
        if not owned:
            return self._negative_slot(data, ns)
        return self._slot_insert(data, ns, data.draw(one_of(tuple(owned)), label="owned"))

    # ---- invariants ----------------------------------------------------------------------

    @precondition(ConformanceMachine._started)
    @invariant()
    def agrees_with_spec(self) -> None:
        with self.checking("invariant: agrees with the spec"):
            got = {q: (tuple(ix), slot) for q, (ix, slot) in self.sut.mamba_contents().items()}
            self.require(
                got == self.model.contents(), "INV-10: cached pages or states differ from the spec"
            )
            m, sizes = self.model, self.sut.sizes()
            want = (m.evictable_size(), m.protected_size(), m.total_size())
            self.require(tuple(sizes) == want, f"INV-6: sizes {tuple(sizes)}, spec {want}")
            mamba = tuple(self.sut.mamba_sizes())
            want_mamba = (m.mamba_evictable_size(), m.mamba_protected_size())
            self.require(mamba == want_mamba, f"INV-33: mamba sizes {mamba}, spec {want_mamba}")
            self.count("invariant checks")

    @precondition(ConformanceMachine._started)
    @invariant()
    def lock_counts_and_lists(self) -> None:
        with self.checking("invariant: lock counts"):
            for full, mamba in self.sut.lock_counts():
                self.require(
                    full >= mamba >= 0, f"INV-30: full_lock_ref {full} < mamba_lock_ref {mamba}"
                )
        if hasattr(self.sut, "lru_orders"):  # optional: a cache with two LRU lists shows them
            with self.checking("invariant: LRU lists"):
                self._check_lru_lists()

    def _check_lru_lists(self) -> None:
        full_order, mamba_order = self.sut.lru_orders()
        cached = self.model.contents()
        self.require(len(set(full_order)) == len(full_order), "INV-32: a node is listed twice")
        self.require(set(full_order) <= set(cached), "INV-32: the full list holds a dead node")
        leaves = {pos for pos in cached if not self.model.children(*pos)}
        self.require(
            leaves | set(self.model.states) <= set(full_order), "INV-32: a node is unlisted"
        )
        self.require(
            sorted(mamba_order, key=repr) == sorted(self.model.states, key=repr),
            "INV-32: the mamba list is not exactly the nodes holding a state",
        )
        for order, name in ((full_order, "full"), (mamba_order, "mamba")):
            keys = [self.model.key(pos) for pos in order]
            self.require(
                keys == sorted(keys, reverse=True), f"INV-32: {name} list out of LRU order"
            )

    @precondition(ConformanceMachine._started)
    @invariant()
    def every_index_and_slot_has_one_owner(self) -> None:
        with self.checking("invariant: every index has one owner"):
            held = self.model.cached_indices()
            self.require(not held & self.freed, "INV-7: a cached index was freed", "cached-freed")
            missing = self.given - held - self.freed
            self.require(not missing, f"INV-7: indices leaked: {sorted(missing)}", "leak")
            owned = self.model.owned_slots()
            self.require(
                not owned & self.freed_slots, "INV-33: a tree-owned slot was freed", "cached-freed"
            )
            # a copy the caller holds between its match and its insert (or free) is its own
            lost = self.given_slots - owned - self.freed_slots - self.copies_held
            self.require(not lost, f"INV-33: state slots leaked: {sorted(lost)}", "leak")
