"""The kit's steps on plain values: what a search's rules, a trace replay, the minimizer
and the explorers all call, with no Hypothesis in them.

Every ``do_*`` method is one step of the trace (FORMAT.md): it does the same thing to the
cache under test (through its adapter) and to the spec model, and compares what they say;
a violation becomes a finding (``verdicts.Verdicts``), and the ledger of owners
(``ledger.OwnershipLedger``) follows every index and slot. The rules of
``radixkv_conformance.machines`` draw the values and call these. A mode's rule set gives
data only: its model (``new_model``), the keywords its calls take (``insert_keywords``,
``evict_keywords``), what its model needs besides the call's own arguments
(``match_keywords``, ``before_eviction``), and its own checks of what a step returned
(``check_match_extras``, ``check_insert_extras``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from radixkv_spec.hashing import hash_mistake
from radixkv_spec.hashing import page_hashes as spec_page_hashes
from radixkv_spec.outcomes import EvictionOutcome, InsertOutcome, MatchOutcome, ResetOutcome
from radixkv_spec.tokens import Position, page_align

from radixkv_conformance.coverage import Probe
from radixkv_conformance.findings import describe, invariant_id, message_key
from radixkv_conformance.ledger import KitHost, OwnershipLedger
from radixkv_conformance.protocol import (
    CAPABILITIES,
    Evicted,
    Indices,
    Inserted,
    Matched,
    Namespace,
    as_evicted,
    as_inserted,
    as_matched,
)
from radixkv_conformance.session import Keywords, LockRef, NodeRef, Session, end_run
from radixkv_conformance.trace import Step
from radixkv_conformance.verdicts import Verdicts

CALL_FIELDS = (
    "tokens",
    "namespace",
    "indices",
    "num_tokens",
    "prev_prefix_len",
    "swa_evicted_seqlen",
    "state_slot",
    "swa_num_tokens",
    "mamba_slots",
)


class KitSteps(Verdicts, OwnershipLedger):
    """One run of the kit against one cache, step by step. ``session`` is set by
    ``machine_for``; everything else lives on the instance, one per run."""

    session: ClassVar[Session]
    mode: ClassVar[str] = "plain"
    checks: ClassVar[frozenset[str]] = frozenset(CAPABILITIES) - {
        "priority",
        "swa",
        "mamba",
        "node_boundaries",
    }
    """The capabilities this rule set has rules for; a claim outside them is refused."""
    insert_keywords: ClassVar[dict[str, Any]] = {}
    """The mode's keywords of ``insert`` and what a call that leaves one out means; every
    insert step records them (``priority`` only where an insert passes one)."""
    evict_keywords: ClassVar[tuple[str, ...]] = ()
    """The mode's amounts ``evict`` takes besides ``num_tokens`` (0 when left out)."""
    eviction_invariant: ClassVar[str] = "INV-11"
    """The invariant a wrong eviction report breaks in this mode (INV-35 for Mamba)."""
    duplicate_messages: ClassVar[tuple[str, str]] = (
        "INV-7: the cache must free duplicates",
        "INV-7: insert freed {freed}; the caller owns duplicates",
    )
    """What a wrong free of duplicates breaks: the cache's (profile ``duplicates="cache"``),
    then the caller's (``freed``: what the cache freed, ``expected``: the spec's)."""

    def setup(self, page_size: int, window: int | None = None) -> None:
        """Start from an empty cache and an empty model (also used by trace replay)."""
        if self.session.progress is not None:
            self.session.progress(self.session.stats)
        self.page_size = page_size
        self.window = window
        self.profile = self.session.profile
        self.caps = self.session.capabilities
        self.trace: list[Step] = []
        self.acknowledged: list[tuple[int, str]] = []  # (step, id) of each known hit
        self.check = "setup"
        self.start_ledger()
        # the last match: namespace, key, the engine's indices (a request resumes from them)
        self.last_match: tuple[Namespace, tuple[int, ...], tuple[int, ...]] | None = None
        self.keys_seen: list[tuple[int, ...]] = [()]
        # the newest handle on each cached position below the root, oldest first (for lock)
        self.cached_refs: dict[tuple[Namespace, tuple[int, ...]], NodeRef] = {}
        self.hash_of: dict[tuple[Namespace, tuple[int, ...]], object] = {}  # opaque hashes
        self.page_of: dict[object, tuple[Namespace, tuple[int, ...]]] = {}
        self.resets = 0
        self.epoch = 0  # evictions so far; ``deleted_at``: the one that deleted a position
        self.deleted_at: dict[Position, int] = {}
        self.unlock_by_token = True
        self.model: Any = self.new_model()
        self.probe = Probe(
            page_size, self.session.situations, self.session.coverage, self.session.decisive
        )
        with self.checking("setup"):
            self.sut: Any = self.session.factory(page_size, KitHost(page_size, window, self))
        self.count("runs")

    def new_model(self) -> Any:
        raise NotImplementedError  # each mode's rule set builds its model

    def has(self, capability: str) -> bool:
        return capability in self.caps

    def count(self, what: str) -> None:
        self.session.stats[what] += 1

    def skip(self, reason: str) -> None:
        self.session.stats[f"skipped: {reason}"] += 1

    def settle_duplicates(self, duplicates: Indices, seen: int) -> None:
        """The caller's indices for the cached prefix that the cache does not keep: the
        duplicates policy says who frees them (INV-7)."""
        by_cache = self.frees_since(seen)
        by_the_cache, by_the_caller = self.duplicate_messages
        if self.profile.duplicates == "cache":
            self.require(
                sorted(by_cache) == sorted(duplicates),
                by_the_cache.format(freed=sorted(by_cache), expected=sorted(duplicates)),
            )
        else:
            self.require(not by_cache, by_the_caller.format(freed=by_cache))
            self.release("free", duplicates, by="caller")

    def log(self, op: str, **fields: Any) -> Step:
        after = self.probe.close(self.model)  # the step before is over
        step: Step = {"id": len(self.trace), "op": op, **fields}
        self.trace.append(step)
        self.count("steps")
        self.probe.open(step, self.model, after)  # the model as the step before left it
        return step

    def note_handle(self, ref: NodeRef) -> None:
        """The handle the open step names, for the situations (a stale one, say)."""
        if ref.prefix:
            self.probe.handle = (ref.namespace, ref.prefix)
            self.probe.handle_evicted = ref.resets == self.resets and self.deleted_since(ref)

    def ref(self, handle: Any, namespace: Namespace, prefix: tuple[int, ...]) -> NodeRef:
        step = len(self.trace) - 1
        made = NodeRef(handle, namespace, prefix, self.birth(), self.resets, step)
        if prefix:
            self.cached_refs.pop((namespace, prefix), None)  # it moves to the newest end
            self.cached_refs[(namespace, prefix)] = made
        return made

    def birth(self) -> int:
        """The mode's clock, stamped on a handle when it is taken."""
        return int(self.model.clock)

    def is_stale(self, ref: NodeRef) -> bool:
        """The node was deleted since the handle was taken (evicted, or reset)."""
        if ref.resets != self.resets:
            return True
        return bool(ref.prefix) and self.deleted_since(ref)

    def deleted_since(self, ref: NodeRef) -> bool:
        return bool(self.model.handle_is_stale(ref.namespace, ref.prefix, ref.born))

    def lock_refusal(self, ref: NodeRef) -> str | None:
        """Why the cache must refuse a lock on this live node (a mode's rule), or None."""
        return None

    def expect_rejected(self, call: Callable[[], object], what: str) -> None:
        """The call must raise a usage error and change nothing (INV-14)."""
        before, events, slots = self.sut.snapshot(), len(self.events), self.next_slot
        try:
            call()
        except self.sut.usage_errors:
            self.count(f"rejected {what}")
        else:
            self.require(False, f"INV-14: {what} was accepted")
            changed = (self.sut.snapshot(), len(self.events), self.next_slot) != (
                before,
                events,
                slots,
            )
            if changed:  # acknowledged, but the cache now holds a state the spec cannot model
                self.session.stats["runs ended: an acknowledged call changed the cache"] += 1
                end_run()  # so later findings are never consequences of it
        self.require(self.sut.snapshot() == before, f"INV-14: rejected {what} changed the cache")
        self.require(len(self.events) == events, f"INV-14: rejected {what} freed something")
        self.require(self.next_slot == slots, f"INV-14: rejected {what} took a slot")

    def scribble_caller_buffers(self) -> None:
        """The caller writes into the buffers it just passed (capability ``caller_buffers``).

        Done right after the call, so the step's own checks and the invariants that follow
        see a cache that kept a view of them disagree with the spec (INV-12).
        """
        if self.has("caller_buffers"):
            self.sut.scribble()
            self.count("caller buffers overwritten")

    def call_insert(self, step: Step) -> Any:
        """``sut.insert`` with the mode's keywords (and a priority), from a step's fields."""
        keywords = {k: step.get(k, left_out) for k, left_out in self.insert_keywords.items()}
        if "priority" in step:
            keywords["priority"] = step["priority"]
        tokens, ns, indices = tuple(step["tokens"]), step["namespace"], tuple(step["indices"])
        return self.sut.insert(tokens, ns, indices, **keywords)

    def call_evict(self, step: Step) -> Evicted:
        """``sut.evict`` with the mode's amounts, from a step's fields."""
        amounts = {k: step.get(k, 0) for k in self.evict_keywords}
        return as_evicted(self.sut.evict(step["num_tokens"], **amounts))

    # ---- the steps every mode shares; a mode gives its spec's answer and its own checks --

    match_invariant: ClassVar[str] = "INV-10"
    """The invariant a wrong match breaks in this mode (INV-23 under a sliding window)."""

    def do_match(self, tokens: tuple[int, ...], namespace: Namespace) -> NodeRef:
        """A lookup: the cache's indices must be the spec's; the handle ends at the match.
        What else it returns (Mamba's copy-on-write slot) is the mode's to check and keep."""
        step = self.log("match", tokens=list(tokens), namespace=namespace)
        with self.checking("match"):
            copies = len(self.copies)
            got = as_matched(self.sut.match(tokens, namespace))
            self.last_match = (namespace, tokens, tuple(got.indices))
            self.scribble_caller_buffers()
            want = self.model.match(namespace, tokens, **self.match_keywords())
            step["expect"] = {"indices": list(want.indices)}
            self.require(
                tuple(got.indices) == want.indices,
                f"{self.match_invariant}: match gave {got.indices}, spec says {want.indices}",
            )
            self.check_match_extras(got, want, step, copies)
            self.count("match")
            return self.ref(got.handle, namespace, tokens[: want.prefix_len])

    def match_keywords(self) -> Keywords:
        """What the mode's model needs to judge this lookup besides its key (nothing)."""
        return {}

    def check_match_extras(self, got: Matched, want: MatchOutcome, step: Step, copies: int) -> None:
        """The mode's checks of what a match returns besides its indices (none here)."""

    def do_insert(
        self,
        tokens: tuple[int, ...],
        namespace: Namespace,
        indices: tuple[int, ...],
        **keywords: Any,
    ) -> NodeRef:
        """Insert with the caller's ``indices`` and the mode's ``keywords`` (``priority``:
        the insert's eviction priority, capability ``priority``).

        The caller's indices for an already cached prefix that the cache does not keep are
        its duplicates: freed by the caller, or by the cache when the profile says so.
        Indices past the aligned key are the caller's unaligned tail.
        """
        if self.profile.allocation == "cache":
            return self.do_owned_insert(tokens, namespace, keywords.get("priority"))
        keywords = {**self.insert_keywords, **keywords}
        step = self.log(
            "insert", tokens=list(tokens), namespace=namespace, indices=list(indices), **keywords
        )
        with self.checking("insert"):
            self.hand_out(indices)
            self.before_insert(indices, keywords)
            seen = len(self.events)
            got = as_inserted(self.call_insert(step))
            self.scribble_caller_buffers()
            spec = self.model.insert(namespace, tokens, indices, **keywords)
            step["expect"] = {"prefix_len": spec.prefix_len}
            if spec.state_existed is not None:
                step["expect"]["mamba_exist"] = spec.state_existed
            if self.profile.duplicates != "kept" or got.prefix_len is not None:
                self.require(
                    got.prefix_len == spec.prefix_len,
                    f"INV-12: prefix_len {got.prefix_len}, spec says {spec.prefix_len}",
                )
            self.check_insert_extras(got, spec, seen)
            self.settle_duplicates(spec.dropped, seen)
            tail = page_align(len(tokens), self.page_size) if self.profile.stores else 0
            self.release("free", indices[tail:], by="caller")  # its unaligned tail
            self.release("slot", spec.dropped_slots, by="caller")
            self.keys_seen.append(tokens)
            self.count("insert")
            return self.ref(got.handle, namespace, tokens[: spec.end])

    def do_owned_insert(
        self, tokens: tuple[int, ...], namespace: Namespace, priority: int | None
    ) -> NodeRef:
        """An insert into a cache that allocates its own indices (``allocation="cache"``):
        a policy of the plain mode only (``machine_for`` refuses it elsewhere)."""
        raise NotImplementedError(f"allocation='cache' in the {self.mode} mode")

    def before_insert(self, indices: Indices, keywords: Keywords) -> None:
        """What the caller does before it inserts, besides holding ``indices`` (nothing)."""

    def check_insert_extras(self, got: Inserted, spec: InsertOutcome, seen: int) -> None:
        """The mode's checks of an insert besides its prefix_len and duplicates (none)."""

    def do_evict(self, num_tokens: int, **amounts: int) -> None:
        """Evict ``num_tokens`` (and the mode's own ``amounts``).

        The mode's spec model takes what the cache freed, in order, checking each victim
        and where the eviction stopped; the counts evict reported are checked apart: a
        miscount must not hide a wrong victim, nor the reverse. The handles of the
        positions it deleted go stale.
        """
        given = {k: amounts.get(k, 0) for k in self.evict_keywords}
        step = self.log("evict", num_tokens=num_tokens, **given)
        with self.checking("evict"):
            context = self.before_eviction()
            seen = len(self.events)
            got = self.call_evict(step)
            frees = self.events[seen:]
            step["observed"] = {"events": [[kind, list(payload)] for kind, payload in frees]}
            freed: EvictionOutcome = self.model.apply_eviction(
                num_tokens, frees, waive=self.waive, **given, **context
            )
            if freed.deleted:  # an eviction that deleted nothing leaves every handle live
                self.epoch += 1
            for position in freed.deleted:
                self.deleted_at[position] = self.epoch
            with self.checking("evict: reported counts"):
                self.check_reported_counts(got, freed)
            self.count("evict")
            self.session.stats["evicted tokens"] += freed.full_evicted
            if freed.mamba_evicted:
                self.session.stats["evicted slots"] += freed.mamba_evicted

    def before_eviction(self) -> Keywords:
        """What the mode reads of the cache before an eviction, for its model (nothing)."""
        return {}

    def check_reported_counts(self, got: Evicted, freed: EvictionOutcome) -> None:
        """What ``evict`` reported is what it freed: full-KV tokens, SWA tokens, slots (a
        count of a part the cache does not have is 0 on both sides)."""
        spec = Evicted(freed.full_evicted, freed.swa_evicted, freed.mamba_evicted)
        self.require(got == spec, f"{self.eviction_invariant}: evict reported {got}, freed {spec}")

    def do_lock(self, ref: NodeRef) -> LockRef:
        step = self.log("lock", node=ref.step)
        self.note_handle(ref)
        with self.checking("lock"):
            if self.is_stale(ref):
                step["expect"] = {"rejected": True}
                return self._refused_lock(ref, step, "lock of an evicted node", "stale_handles")
            refusal = self.lock_refusal(ref)
            if refusal is not None:
                step["expect"] = {"rejected": True}
                return self._refused_lock(ref, step, refusal, None)
            token = self.sut.lock(ref.handle)
            if ref.prefix:
                self.model.lock(ref.namespace, ref.prefix)
            self.count("lock")
            held = LockRef(ref, token, step["id"])
            self.after_lock(held)
            return held

    def after_lock(self, held: LockRef) -> None:
        """What the mode reads of the cache right after it took ``held`` (nothing here)."""

    def after_unlock(self, held: LockRef) -> None:
        """What the mode forgets once the cache released ``held`` (or, unlocked without a
        token, the newest lock on its node) (nothing here)."""

    def _refused_lock(self, ref: NodeRef, step: Step, what: str, capability: str | None) -> LockRef:
        if capability is not None and not self.has(capability):
            self.skip(f"no {capability!r}: {what}")
        else:
            with self.checking(what):
                self.expect_rejected(lambda: self.sut.lock(ref.handle), what)
        return LockRef(ref, None, step["id"], refused=True)

    def do_unlock(self, held: LockRef) -> LockRef | None:
        """Release ``held``; the receipt, once the cache released it (None otherwise)."""
        ref = held.node
        if held.refused:
            return None
        token = held.token if self.unlock_by_token else None
        step = self.log("unlock", node=ref.step, lock=held.step)
        self.note_handle(ref)
        if not self.unlock_by_token:
            step["without_token"] = True
            self.count("unlock without a token")
        with self.checking("unlock"):
            if self.is_stale(ref):
                step["expect"] = {"rejected": True}
                if not self.has("stale_handles"):
                    self.skip("no 'stale_handles': stale unlock")
                    return None
                with self.checking("stale unlock"):
                    self.expect_rejected(lambda: self.sut.unlock(ref.handle, token), "stale unlock")
                return None
            self.sut.unlock(ref.handle, token)
            if ref.prefix:
                self.model.unlock(ref.namespace, ref.prefix)
            self.after_unlock(held)
            self.count("unlock")
            return held

    def do_lock_again(self, held: LockRef) -> None:
        """The sequence that holds ``held`` locks its node again with its receipt (capability
        ``relock``): per-sequence locks are idempotent, so nothing changes, and the one
        unlock that follows frees the path (a cache that counts the second mark keeps the
        path held for good: its KV is never evictable again)."""
        ref = held.node
        if held.refused or not ref.prefix or self.is_stale(ref):
            return  # no sequence holds it: a lock like any other, drawn by the lock rule
        step = self.log("lock", node=ref.step, again=held.step)
        self.note_handle(ref)
        with self.checking("lock again by its sequence"):
            before = self.sut.snapshot()
            self.sut.lock(ref.handle, receipt=held.token)
            self.require(
                self.sut.snapshot() == before,
                "INV-14: a second lock by the sequence that holds the path changed the cache",
                "lock-again",
            )
            self.count("lock again by its sequence")
        step["expect"] = {"unchanged": True}

    def do_unlock_foreign(self, ref: NodeRef, other: LockRef) -> None:
        """An unlock of ``ref`` with another sequence's receipt (a request releasing what a
        neighbour holds): where that sequence does not hold the node, it is rejected and
        changes nothing, whoever else holds it (per-sequence locks)."""
        theirs = other.node
        if other.refused or not ref.prefix:
            return
        covers = theirs.namespace == ref.namespace and theirs.prefix[: len(ref.prefix)] == (
            ref.prefix
        )
        if covers or self.is_stale(ref) or self.is_stale(theirs):
            return  # that sequence holds the node (or the node is gone): not this bad call
        step = self.log("unlock", node=ref.step, lock=other.step, foreign=True)
        self.note_handle(ref)
        step["expect"] = {"rejected": True}
        with self.checking("unlock with another sequence's receipt"):
            self.expect_rejected(
                lambda: self.sut.unlock(ref.handle, other.token),
                "unlock with another sequence's receipt",
            )

    def do_unlock_spent(self, receipt: LockRef) -> None:
        """A finished request's receipt handed back again (a retry, a stale reference): the
        sequence holds nothing now, so the unlock is rejected, whoever else holds the node,
        and it changes nothing (INV-14). A cache that checks a receipt's slot but not its
        generation accepts it, and an eviction then frees the KV of whoever holds it now."""
        ref = receipt.node
        if not ref.prefix:
            return  # not a bad call: the root, which no lock protects
        if self.is_stale(ref) and not self.has("stale_handles"):
            self.skip("no 'stale_handles': stale unlock")
            return
        step = self.log("unlock", node=ref.step, lock=receipt.step, spent=True)
        self.note_handle(ref)
        step["expect"] = {"rejected": True}
        with self.checking("unlock with a spent receipt"):
            self.expect_rejected(
                lambda: self.sut.unlock(ref.handle, receipt.token), "unlock with a spent receipt"
            )

    def do_unlock_without_lock(self, ref: NodeRef) -> None:
        """An unlock that no lock matches is rejected, never a silent negative count."""
        stale = self.is_stale(ref)
        if not stale and not ref.prefix:
            return  # not a bad call: a root handle
        held = not stale and self.model.handle_count(ref.namespace, ref.prefix)
        if held and self.profile.lock_model == "counts":
            return  # a counted lock is held here, so this unlock would answer it
        # Under "sets" (per-sequence locks) an unlock by a sequence that holds nothing is
        # wrong even where other sequences hold the node.
        what = "stale unlock" if stale else "unmatched unlock"
        if stale and not self.has("stale_handles"):
            self.skip("no 'stale_handles': stale unlock")
            return
        step = self.log("unlock", node=ref.step, lock=None)
        self.note_handle(ref)
        step["expect"] = {"rejected": True}
        with self.checking(what):
            self.expect_rejected(lambda: self.sut.unlock(ref.handle, None), what)

    def do_reset(self) -> None:
        step = self.log("reset")
        if self.profile.reset_while_held == "refused" and self.model.protected_size():
            step["expect"] = {"rejected": True}  # the engine refuses while pages are held
            with self.checking("reset while held"):
                self.expect_rejected(self.sut.reset, "reset while held")
            return
        with self.checking("reset"):
            seen = len(self.events)
            dropped: ResetOutcome = self.model.reset()
            cached, slots = dropped.indices, dropped.slots
            step["expect"] = {"freed": sorted(cached)}
            self.sut.reset()
            freed, freed_slots = self.frees_since(seen), self.frees_since(seen, "slot")
            if self.profile.reset_frees:
                self.require(
                    sorted(freed) == sorted(cached), "INV-7: reset must free every cached index"
                )
                self.require(
                    sorted(freed_slots) == sorted(slots), "INV-33: reset must free every slot"
                )
            else:
                self.require(
                    not freed and not freed_slots, "INV-7: this profile's reset frees nothing"
                )
                self.release("free", cached, by="caller")
                self.release("slot", slots, by="caller")
            self.resets += 1
            self.count("reset")

    def do_free_slot(self, slot: int) -> None:
        """The caller frees a slot it holds (the copy of an aborted request)."""
        self.log("free_slot", slot=slot)
        with self.checking("free_slot"):
            self.release("slot", (slot,), by="caller")

    def do_page_hashes(self, ref: NodeRef) -> None:
        """Page hashes are a pure function of namespace and root path (INV-9, INV-13).

        A mismatch is one of two findings, so one bug never hides the other: hashes that
        are the spec's for no namespace (``page_hashes: namespace``), or a page hashed as
        if it started the key, without its parents (``page_hashes: path``).
        """
        if self.is_stale(ref) or not ref.prefix:
            return
        step = self.log("page_hashes", node=ref.step)
        if self.profile.page_hashes == "opaque":
            with self.checking("page_hashes: opaque"):
                self.check_opaque_hashes(ref, self.sut.page_hashes(ref.handle))
            return
        with self.checking("page_hashes"):
            expected = spec_page_hashes(ref.namespace, ref.prefix, self.page_size)
            step["expect"] = {"hashes": expected}
            got = self.sut.page_hashes(ref.handle)
            if got != expected:
                self.check = (
                    f"page_hashes: {hash_mistake(ref.namespace, ref.prefix, self.page_size, got)}"
                )
            self.require(
                got == expected, f"INV-9: page hashes of {ref.prefix} differ from the spec"
            )
            self.count("page_hashes")

    def check_opaque_hashes(self, ref: NodeRef, got: object) -> None:
        """An engine's own page hashes (profile ``page_hashes="opaque"``): one per page, the
        same for one namespace and root path in every call, different for different ones,
        so a page's hash depends on its parents (a chain) and its namespace (INV-9)."""
        p, prefix = self.page_size, ref.prefix
        pages = [(ref.namespace, prefix[:end]) for end in range(p, len(prefix) + 1, p)]
        if not isinstance(got, list) or len(got) != len(pages):
            self.require(False, f"INV-9: {len(pages)} pages, hashes {got!r}", "count")
            return
        for page, value in zip(pages, got, strict=True):
            seen = self.hash_of.setdefault(page, value)
            self.require(
                seen == value, f"INV-9: page {page!r} hashed {seen!r}, now {value!r}", "unstable"
            )
            owner = self.page_of.setdefault(value, page)
            self.require(
                owner == page, f"INV-9: pages {owner!r} and {page!r} share {value!r}", "shared"
            )
        self.count("page_hashes")

    def do_bad_call(self, kind: str, call: Step) -> None:
        """A call the cache must reject with a usage error, changing nothing (INV-14)."""
        fields = {k: v for k, v in call.items() if k in CALL_FIELDS}
        step = self.log(call["op"], bad=kind, **fields)
        step["expect"] = {"rejected": True}
        calls: dict[str, Callable[[], object]] = {
            "insert": lambda: self.call_insert(call),
            "match": lambda: self.sut.match(tuple(call["tokens"]), call["namespace"]),
            "evict": lambda: self.call_evict(call),
        }
        with self.checking(f"bad: {kind}"):
            self.expect_rejected(calls[call["op"]], kind)

    def own_check(self) -> None:
        with self.checking("own check"):
            try:
                self.sut.check()
            except Exception as error:
                what = invariant_id(describe(error)) or type(error).__name__
                self.require(False, describe(error), message_key(error), what)
