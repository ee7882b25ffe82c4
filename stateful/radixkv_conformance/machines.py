"""The conformance machine: one core, and a rule set per capability.

Every rule does the same thing to the cache under test (through its adapter) and to a spec
model, and compares what they say. The machine plays the serving engine (``KitHost``): it
allocates KV indices and state slots, frees what the profile says the caller frees, and
receives whatever the cache frees; after every step it checks that the cache agrees with
the model and that every index and slot has exactly one owner.

``ConformanceMachine`` is the core: handles, locks, reset, bad calls, the trace, and
findings, with the ledger of owners (``radixkv_conformance.ledger``). The cache's *mode*
adds one rule set with its spec model:
``PlainRules`` (``radixkv_spec.model``), ``SwaRules`` (``radixkv_spec.swa``, capability
``swa``) and ``MambaRules`` (``radixkv_spec.mamba``, capability ``mamba``). Capabilities
without a model of their own (namespaces, hashing, reset, bad input, unlock checks, stale
handles, node events, caller buffers) switch rules on through preconditions. Engine
differences come from the ``Profile``; nothing here is specific to one engine.

The steps are written once, here, and every spec model is called through one door
(``radixkv_spec.CacheModel``): ``match``, ``insert``, ``apply_eviction`` with what the cache
freed, in the allocator's words. A mode gives data only: its model (``new_model``, built
with the engine's policies), the keywords its calls take (``insert_keywords``,
``evict_keywords``), what its model needs besides the call's own arguments
(``match_keywords``, ``before_eviction``), and its own checks of what a step returned
(``check_match_extras``, ``check_insert_extras``).

Each rule is a thin Hypothesis layer over a ``do_*`` method of plain values, and every
``do_*`` call is one step of the trace (FORMAT.md) that ``radixkv_conformance.trace``
writes and replays. A violation is raised as the ``Finding`` subclass of its id, carrying
the trace of its run (``radixkv_conformance.findings``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from hypothesis import note, target
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException, UnsatisfiedAssumption
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from radixkv_spec.cross import Decisive
from radixkv_spec.hashing import page_hashes as spec_page_hashes
from radixkv_spec.invariants import SpecViolation
from radixkv_spec.outcomes import (
    EvictionOutcome,
    InsertOutcome,
    MatchOutcome,
    ResetOutcome,
)
from radixkv_spec.situations import Situation, children_of, view_of
from radixkv_spec.tokens import Position, page_align

from radixkv_conformance.coverage import Probe
from radixkv_conformance.findings import (
    Finding,
    Violation,
    describe,
    finding_id,
    finding_type,
    invariant_id,
    message_key,
    slug,
)
from radixkv_conformance.ledger import KitHost, OwnershipLedger
from radixkv_conformance.profile import RADIXKV, Profile
from radixkv_conformance.protocol import (
    CAPABILITIES,
    AdapterError,
    AdapterFactory,
    Evicted,
    Indices,
    Inserted,
    Matched,
    Namespace,
    NotAdmitted,
    as_evicted,
    as_inserted,
    as_matched,
)
from radixkv_conformance.strategies import (
    BAD_NAMESPACE,
    one_of,
    tails,
    up_to,
)
from radixkv_conformance.trace import Step as Step  # the rule sets take it from here
from radixkv_conformance.trace import trace_document

if TYPE_CHECKING:
    from radixkv_conformance.causes import Causes

Key = tuple[int, ...]
Keywords = dict[str, Any]  # a call's keywords beyond the key and its indices


def chain_restarted(
    got: object, namespace: Namespace, prefix: tuple[int, ...], page_size: int
) -> bool:
    """Whether ``got`` are the page hashes of ``prefix`` with the chain restarted at some
    page: each page's hash is the spec's for the pages from some page at or before it, and
    at least one page's chain starts after the root (its parents were left out)."""
    pages = len(prefix) // page_size
    if not isinstance(got, list) or len(got) != pages:
        return False
    restarted = False
    for i in range(pages):
        end = (i + 1) * page_size
        starts = [
            j
            for j in range(i + 1)
            if spec_page_hashes(namespace, prefix[j * page_size : end], page_size)[-1] == got[i]
        ]
        if not starts:
            return False
        restarted = restarted or 0 not in starts
    return restarted


BAD_CALLS = {  # what the bad_call rule tries -> (the method that builds it, capabilities)
    "insert with a bad token": ("_bad_token_insert", ("bad_input",)),
    "match with a bad token": ("_bad_token_match", ("bad_input",)),
    "insert with a non-str extra_key": ("_bad_namespace_insert", ("bad_input", "namespaces")),
    "match with a non-str extra_key": ("_bad_namespace_match", ("bad_input", "namespaces")),
    "insert with a value shorter than the key": ("_short_value", ("bad_input",)),
    "evict a negative count": ("_negative_evict", ("bad_input",)),
}
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
REFRESHES = 80
"""How many times ``refresh_often`` matches one key in a row: enough for lazy structures
that rebuild after many stale entries (radixkv's eviction heap: more than twice the leaves
plus 64) to rebuild within a short run."""


@dataclass
class Session:
    """What one conformance session checks, and what its runs counted together.

    A machine class carries one session (``machine_for``); every run of that class is a
    fresh machine instance with its own state, counting into the session's ``stats``.
    """

    factory: AdapterFactory
    profile: Profile = RADIXKV
    capabilities: frozenset[str] = frozenset()
    known: frozenset[str] = frozenset()
    stats: Counter[str] = field(default_factory=Counter)
    progress: Callable[[Counter[str]], None] | None = None
    name: str = "cache"
    situations: tuple[Situation, ...] = ()  # what the runs must reach (coverage.py)
    coverage: Counter[str] = field(default_factory=Counter)  # situations, outcome pairs
    decisive: tuple[Decisive, ...] = ()  # the decisive situations the runs watch (cross.py)
    steer: bool = False  # favour runs that reach rare situations (searches after the first)
    causes: Causes | None = None  # findings acknowledged by their trace (causes.py)


class IllegalStep(Exception):
    """A trace step no correct caller makes at that point (a replayed trace cut by hand or
    by a minimizer that deleted what made it legal): not a finding of the cache."""


class RunEnded(UnsatisfiedAssumption):
    """The kit ends this run as one that proves nothing (``end_run``). Hypothesis drops it
    as it drops a ``reject()``; the kit tells the two apart: an adapter that rejects a run
    itself has it dropped uncounted, which is a usage error (``adapter_rejected``)."""


def end_run() -> NoReturn:
    """End this run as one that proves nothing (a known finding it cannot go past): inside
    a search Hypothesis drops it, as a ``reject()``; a trace replay or a minimization stops
    there, as passed up to this step."""
    raise RunEnded("the kit ended this run")


def adapter_rejected(error: UnsatisfiedAssumption) -> AdapterError:
    """An adapter ended a run with ``hypothesis.reject()`` (or ``assume``): Hypothesis would
    drop it silently, uncounted, and a pass would claim what those runs never showed."""
    return AdapterError(
        "the adapter ended a run with hypothesis.reject() or assume(): raise "
        "radixkv_conformance.NotAdmitted where the engine's scheduler would not take the "
        "step (the run ends there and is counted), or NoRoom where a pool that declares "
        f"'capacity' cannot hold an insert (judged by INV-15) ({error!r})"
    )


@dataclass(frozen=True)
class NodeRef:
    """A handle the cache returned, the position it ends at, and when it was taken."""

    handle: Any
    namespace: Namespace
    prefix: tuple[int, ...]
    born: int  # the mode's clock when the handle was taken
    resets: int  # how many resets had happened then
    step: int  # the trace step that returned it


@dataclass(frozen=True)
class LockRef:
    node: NodeRef
    token: Any
    step: int
    refused: bool = False  # the cache (rightly) rejected the lock: nothing to undo


class ConformanceMachine(OwnershipLedger, RuleBasedStateMachine):
    """The core every mode shares (see the module doc). ``session`` is set by
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
    bad_calls: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = BAD_CALLS
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

    # ---- findings ------------------------------------------------------------------------

    @contextmanager
    def checking(self, check: str) -> Iterator[None]:
        """Run one check; a violation becomes the ``Finding`` type of its id."""
        outer, self.check = self.check, check
        try:
            yield
        except UnsatisfiedAssumption as error:
            if not isinstance(error, RunEnded):
                raise adapter_rejected(error) from error
            raise
        except (Finding, HypothesisException, IllegalStep):
            raise
        except NotAdmitted:
            self.session.stats["runs ended by the adapter: NotAdmitted"] += 1
            end_run()  # the engine would not take this step: nothing past it is judged
        except Exception as error:  # a violation, or the cache crashed: both are findings
            self.found(self.check, error)  # a check may name its sub-rule
        finally:
            self.check = outer

    def require(
        self, holds: object, message: str, rule: str | None = None, what: str | None = None
    ) -> None:
        """One check of the current step: a violation is a finding, unless acknowledged.

        ``rule`` tells apart checks of one step and one invariant that mean different
        things (a cached index freed vs an index leaked): each is its own finding id.

        An acknowledged (``--known``) violation is recorded and the step goes on: the model
        keeps the spec's state (it is never bent to the cache's), so the checks after it
        still compare the cache with the spec, and a consequence of the same bug shows as
        the same acknowledged id. Every other id is checked exactly as before.
        """
        if holds:
            return
        violation = Violation(message, rule, what)
        fid = finding_id(self.check, violation)
        if fid not in self.session.known:
            raise violation
        self.acknowledge(fid)

    def settled(self, bad_call: str) -> bool:
        """The search acknowledged that the cache accepts this bad call, so the rule stops
        drawing it: trying it again only ends runs (an accepted call that changed the cache
        cannot be modelled) and keeps the search from the deeper states where other bugs
        live. A crash the same call shows with other values is found in the same search as
        the acceptance, or not looked for again."""
        return f"INV-14:{slug('bad: ' + bad_call)}" in self.session.known

    def waive(self, violation: SpecViolation) -> bool:
        """The spec model's question on a rule it can go on after (a victim out of order):
        acknowledged (``--known``) violations are recorded and the step is applied, so the
        rest of the step (a locked victim, say) is still checked."""
        fid = finding_id(self.check, violation)
        if fid not in self.session.known:
            return False
        self.acknowledge(fid)
        return True

    def run_header(self) -> dict[str, Any]:
        """The trace header of this run (FORMAT.md)."""
        header: dict[str, Any] = {
            "implementation": self.session.name,
            "profile": self.session.profile.name,
            "mode": self.mode,
            "page_size": self.page_size,
        }
        if self.window is not None:
            header["sliding_window"] = self.window
        return header

    def acknowledge(self, fid: str) -> None:
        self.session.stats[f"acknowledged: {fid}"] += 1
        causes = self.session.causes
        first = causes is not None and all(known != fid for _, known in self.acknowledged)
        self.acknowledged.append((len(self.trace) - 1, fid))
        if causes is not None and first and causes.wants(fid, len(self.trace)):
            # a run to this hit, kept to tell whether its cause is the acknowledged one
            others = self.session.known - {fid}
            past = [(self.trace[at]["id"], known) for at, known in self.acknowledged[:-1]]
            check = self.check or "step"
            document = trace_document(self.run_header(), self.trace, others, check, "", fid, past)
            causes.note(fid, document)

    def found(self, check: str, error: BaseException) -> None:
        fid = finding_id(check, error)
        if fid in self.session.known:
            # Known, but raised by the cache or mid-step (not through ``require``): the step
            # cannot be finished, so this run ends here (discarded; replay stops).
            self.acknowledge(fid)
            self.session.stats["runs ended by an acknowledged crash"] += 1
            end_run()  # trace replay stops here, as passed up to this step
        message = describe(error)
        past = [(self.trace[at]["id"], known) for at, known in self.acknowledged]
        document = trace_document(
            self.run_header(), self.trace, self.session.known, check, message, fid, past
        )
        raise finding_type(fid)(message, check, document) from error

    # ---- the ledger: who owns every index and slot ---------------------------------------

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

    # ---- steps ---------------------------------------------------------------------------

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
                self.check = f"page_hashes: {self.page_hash_mistake(ref, got)}"
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

    def page_hash_mistake(self, ref: NodeRef, got: object) -> str:
        """Which rule wrong hashes break: ``namespace`` ignored, or ``path`` (some page
        hashed without some of its parents), or neither that can be told (``other``)."""
        p, prefix = self.page_size, ref.prefix
        if ref.namespace is not None and got == spec_page_hashes(None, prefix, p):
            return "namespace"
        if chain_restarted(got, ref.namespace, prefix, p):
            return "path"
        if chain_restarted(got, None, prefix, p):  # both: the namespace is ignored too
            return "namespace"
        return "other"

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

    # ---- bad input builders: each returns the call as a trace step -----------------------

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

    def own_check(self) -> None:
        with self.checking("own check"):
            try:
                self.sut.check()
            except Exception as error:
                what = invariant_id(describe(error)) or type(error).__name__
                self.require(False, describe(error), message_key(error), what)

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
