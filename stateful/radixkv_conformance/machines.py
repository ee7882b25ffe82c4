"""The conformance machine: one core of rules, and a rule set per capability.

Every rule draws the values of one step and calls a ``do_*`` step of plain values
(``radixkv_conformance.steps``), which does the same thing to the cache under test and to a
spec model and compares what they say. The machine plays the serving engine
(``ledger.KitHost``); after every step its invariants check that the cache agrees with the
model and that every index and slot has exactly one owner.

``ConformanceMachine`` holds what every mode shares: the bundles of handles and lock
receipts, the rules for locks, reset, refreshes, matches, page hashes and bad calls, and the
invariants. The cache's *mode* adds one rule set with its spec model: ``PlainRules``
(``radixkv_spec.model``), ``SwaRules`` (``radixkv_spec.swa``, capability ``swa``) and
``MambaRules`` (``radixkv_spec.mamba``, capability ``mamba``); ``registry.machine_for``
composes it with the rule sets of capabilities that have their own (``rules/events.py``,
``rules/receipts.py``). Other capabilities (namespaces, hashing, reset, bad input, unlock
checks, stale handles, node events, caller buffers) switch rules on through
preconditions. Engine differences come from the ``Profile``; nothing here is specific to
one engine.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, ClassVar

from hypothesis import note, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from radixkv_spec.situations import children_of, view_of
from radixkv_spec.tokens import page_align

from radixkv_conformance.protocol import Namespace
from radixkv_conformance.session import LockRef, NodeRef
from radixkv_conformance.steps import KitSteps
from radixkv_conformance.strategies import BAD_NAMESPACE, one_of, tails, up_to
from radixkv_conformance.trace import Step as Step  # the rule sets take it from here

BAD_CALLS = {  # what the bad_call rule tries -> (the method that builds it, capabilities)
    "insert with a bad token": ("_bad_token_insert", ("bad_input",)),
    "match with a bad token": ("_bad_token_match", ("bad_input",)),
    "insert with a non-str extra_key": ("_bad_namespace_insert", ("bad_input", "namespaces")),
    "match with a non-str extra_key": ("_bad_namespace_match", ("bad_input", "namespaces")),
    "insert with a value shorter than the key": ("_short_value", ("bad_input",)),
    "evict a negative count": ("_negative_evict", ("bad_input",)),
}
REFRESHES = 80
"""How many times ``refresh_often`` matches one key in a row: enough for lazy structures
that rebuild after many stale entries (radixkv's eviction heap: more than twice the leaves
plus 64) to rebuild within a short run."""


class ConformanceMachine(KitSteps, RuleBasedStateMachine):
    """The rules and invariants every mode shares, over the kit's steps (``KitSteps``)."""

    bad_calls: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = BAD_CALLS

    nodes = Bundle("nodes")
    locks = Bundle("locks")

    # ---- setup ---------------------------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        profile = self.session.profile
        page_size = data.draw(one_of(profile.page_sizes), label="page_size")
        window = None
        if self.mode == "swa":
            window = data.draw(one_of(profile.windows), label="window")
        note(f"page_size={page_size} window={window}")
        self.setup(page_size, window)
        self.choose_run_options(data)

    def choose_run_options(self, data: st.DataObject) -> None:
        """Per-run choices a mode draws once (none in the core)."""

    # ---- drawing -------------------------------------------------------------------------

    def draw_tokens(self, data: st.DataObject) -> tuple[int, ...]:
        """A key that often shares a prefix with an earlier one: a cut of it plus a tail."""
        base = self.keys_seen[data.draw(up_to(len(self.keys_seen) - 1), label="base")]
        cut = data.draw(up_to(len(base)), label="cut")
        untold = self.profile.untold_tokens if self.has("router_events") else ()
        tail = data.draw(tails(3 * self.page_size, untold), label="tail")
        return self.at_least_a_page(base[:cut] + tuple(tail))

    def draw_inserted_key(self, data: st.DataObject) -> tuple[int, ...]:
        """A key exactly as inserted before (so a match of it ends at a leaf, often)."""
        key = self.keys_seen[data.draw(up_to(len(self.keys_seen) - 1), label="inserted key")]
        return self.at_least_a_page(key)  # the first is the empty key

    def at_least_a_page(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """``key``, padded to a page under a profile whose engine refuses shorter keys."""
        if not self.profile.empty_keys and len(key) < self.page_size:
            key += (0,) * (self.page_size - len(key))
        return key

    def draw_namespace(self, data: st.DataObject) -> Namespace:
        if not self.has("namespaces"):
            return None
        namespace: Namespace = data.draw(one_of(self.profile.namespaces), label="namespace")
        return namespace

    # ---- rules every mode shares ---------------------------------------------------------

    @rule(target=locks, ref=nodes, data=st.data())
    def lock(self, ref: NodeRef, data: st.DataObject) -> LockRef:
        """Lock a node, as a running request does. Most handles in ``nodes`` come from
        matches that missed, at the root, where a lock protects nothing; such a draw locks
        a node below the root instead when there is one, so the rules about locked pages
        (a locked victim) are tried as often as the others."""
        if not ref.prefix:
            live = [r for r in self.cached_refs.values() if not self.is_stale(r)]
            if live:  # the newest first: what a running request holds
                self.interior_last(live)
                ref = live[-1 - data.draw(up_to(len(live) - 1), label="cached node")]
        return self.do_lock(ref)

    def interior_last(self, refs: list[NodeRef]) -> None:
        """Order ``refs`` so the favoured draw takes a page with cached pages below it: an
        eviction must stop at a locked page whose children it takes (the situation
        ``evict-empties-a-locked-parent``), and handles left to chance rarely hold one."""
        view = view_of(self.model)
        refs.sort(key=lambda r: bool(children_of(view, (r.namespace, r.prefix), self.page_size)))

    @rule(held=consumes(locks))
    def unlock(self, held: LockRef) -> None:
        self.do_unlock(held)

    @precondition(lambda self: self.has("unlock_checks"))
    @rule(ref=nodes)
    def unlock_without_lock(self, ref: NodeRef) -> None:
        self.do_unlock_without_lock(ref)

    @precondition(lambda self: self.has("reset"))
    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        """Drop everything, on one roll in eight (Hypothesis favours 0: not that one)."""
        if roll == 5:
            self.do_reset()

    @rule(data=st.data())
    def refresh_often(self, data: st.DataObject) -> None:
        """One key matched ``REFRESHES`` times in a row: what a long run does to lazy
        recency structures (stale entries pile up, then a rebuild), in one step of a short
        one; the invariants and the next eviction check the rebuilt structure.

        On one draw in two the cache also checks itself after each match, as it would
        between the steps of a long run: a cache that coalesces its touched leaves until
        something reads its heap (radixkv) piles up one stale entry per read, not per
        match. Not on every draw: a check per match costs a third of the search's time.
        The coverage probe looks at the first match only: the others repeat it on a state
        a match does not change, so they reach what it reached."""
        tokens, namespace = self.draw_inserted_key(data), self.draw_namespace(data)
        checked = data.draw(st.booleans(), label="checked after each match")
        for repeat in range(REFRESHES):
            with self.probe.repeats() if repeat else nullcontext():
                self.refresh(tokens, namespace)
            if checked:
                self.own_check()
        self.count("refresh_often")

    def refresh(self, tokens: tuple[int, ...], namespace: Namespace) -> None:
        """One match as a request that then goes away."""
        self.do_match(tokens, namespace)
        self.drop_match()

    def drop_match(self) -> None:
        """A request that matched goes away: what it gives back (Mamba: its copy-on-write
        slot; nothing here)."""

    @precondition(lambda self: self.session.profile.match_may_split)
    @rule(target=nodes, data=st.data())
    def match(self, data: st.DataObject) -> NodeRef:
        """A match whose handle ends exactly at the match (usable for locking), by a
        request that then goes away."""
        ref = self.do_match(self.draw_tokens(data), self.draw_namespace(data))
        self.drop_match()
        return ref

    @precondition(lambda self: not self.session.profile.match_may_split)
    @rule(data=st.data())
    def match_only(self, data: st.DataObject) -> None:
        """A match whose handle may end below the match: never locked."""
        self.refresh(self.draw_tokens(data), self.draw_namespace(data))
        self.count("match without a handle")

    @precondition(lambda self: self.has("hashing"))
    @rule(ref=nodes)
    def page_hashes(self, ref: NodeRef) -> None:
        """Capability ``hashing``, in every mode: hashes depend on namespace and path only."""
        self.do_page_hashes(ref)

    @rule(data=st.data())
    def bad_call(self, data: st.DataObject) -> None:
        kinds = sorted(
            kind
            for kind, (_, needs) in self.bad_calls.items()
            if all(map(self.has, needs)) and not self.settled(kind)
        )
        if not kinds:
            return
        kind = data.draw(one_of(tuple(kinds)), label="bad call")
        method = self.bad_calls[kind][0]
        build: Callable[[st.DataObject, Namespace], Step] = getattr(self, method)
        self.do_bad_call(kind, build(data, self.draw_namespace(data)))

    def _bad_token_insert(self, data: st.DataObject, ns: Namespace) -> Step:
        tokens = self.draw_tokens(data)
        at = data.draw(up_to(len(tokens)), label="at")
        key = [*tokens[:at], data.draw(one_of(self.profile.bad_tokens), label="bad"), *tokens[at:]]
        return self.insert_call(key, ns, list(range(len(key))))  # never adopted

    def _bad_token_match(self, data: st.DataObject, ns: Namespace) -> Step:
        key = [*self.draw_tokens(data), data.draw(one_of(self.profile.bad_tokens), label="bad")]
        return {"op": "match", "tokens": key, "namespace": ns}

    def _bad_namespace_insert(self, data: st.DataObject, _: Namespace) -> Step:
        tokens = list(self.draw_tokens(data))
        bad = data.draw(BAD_NAMESPACE, label="bad")
        return self.insert_call(tokens, bad, list(range(len(tokens))))

    def _bad_namespace_match(self, data: st.DataObject, _: Namespace) -> Step:
        tokens = list(self.draw_tokens(data))
        bad = data.draw(BAD_NAMESPACE, label="bad")
        return {"op": "match", "tokens": tokens, "namespace": bad}

    def _short_value(self, data: st.DataObject, ns: Namespace) -> Step:
        tokens = self.draw_tokens(data) + (0,) * self.page_size
        aligned = page_align(len(tokens), self.page_size)
        missing = data.draw(up_to(aligned, 1), label="missing")
        return self.insert_call(list(tokens), ns, list(range(aligned - missing)))

    def _negative_evict(self, data: st.DataObject, _: Namespace) -> Step:
        return {"op": "evict", "num_tokens": data.draw(up_to(-1, -5), label="num_tokens")}

    def insert_call(self, tokens: list[Any], ns: Any, indices: list[int]) -> Step:
        """A bad insert as a step, with the mode's keywords as a call leaves them out."""
        return {
            "op": "insert",
            "tokens": tokens,
            "namespace": ns,
            "indices": indices,
            **self.insert_keywords,
        }

    # ---- invariants every mode shares ----------------------------------------------------

    own_invariants: ClassVar[tuple[str, ...]] = ()
    """A rule set beside the mode's (``rules/events.py``, ``rules/receipts.py``): the
    invariants it adds to the mode's ``invariant_names``."""
    invariant_names: ClassVar[tuple[str, ...]] = (
        "situations_reached",
        "spec_model_holds",
        "implementation_checks_itself",
        "node_events_are_exact",
    )

    def check_invariants_now(self) -> None:
        """Every invariant of this machine, in order (trace replay calls it after a step)."""
        for name in self.invariant_names:
            getattr(self, name)()

    def _started(self) -> bool:
        return hasattr(self, "sut")

    @precondition(_started)
    @invariant()
    def situations_reached(self) -> None:
        """The rule's last step is over: count the situations it reached (coverage.py)."""
        self.probe.close(self.model)

    def teardown(self) -> None:
        """Steer the search: runs that reach rarely reached situations, and rarely run
        pairs of outcomes, score higher. Only in the searches after the first:
        Hypothesis spends part of a search on a target, which a first, bug-hunting search
        should not pay."""
        if self._started() and self.session.steer:
            self.probe.close(self.model)
            if self.session.situations or self.session.decisive:
                target(self.probe.rarity(), label="rare situations")
            target(self.probe.pair_rarity(), label="rare outcome pairs")

    @precondition(_started)
    @invariant()
    def spec_model_holds(self) -> None:
        """The spec model's own ``check()``: the kit's side of the comparison is sound."""
        with self.checking("invariant: the spec model"):
            self.model.check()

    @precondition(_started)
    @invariant()
    def implementation_checks_itself(self) -> None:
        """The adapter's own ``check()``: each distinct complaint is its own finding."""
        self.own_check()

    @precondition(_started)
    @invariant()
    def node_events_are_exact(self) -> None:
        if not self.has("on_node_evict"):
            return
        with self.checking("invariant: on_node_evict"):
            fired = list(self.sut.evicted_node_ids())
            self.require(
                len(set(fired)) == len(fired), "INV-11: on_node_evict fired twice for a node"
            )
            live = self.sut.live_node_ids()
            self.require(not live & set(fired), "INV-11: on_node_evict fired for a live node")
