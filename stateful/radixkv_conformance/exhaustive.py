"""Bounded exhaustive exploration: every operation sequence up to N steps, checked.

Random search (Hypothesis) samples long sequences; this module enumerates *every* short one
over a small alphabet, so a bug that needs three particular calls is found for certain.
It drives the same state machines the random search runs, through a narrow interface: a
machine is a ``RuleBasedStateMachine`` whose rules take plain arguments, bundle values
(handles) and ``st.data()`` draws. A step is one rule call with its choices (rule name +
plain arguments; the kit's machine logs each call as a FORMAT.md step, so a finding comes
with a replayable trace); after every step every invariant runs, exactly as in the search.

The alphabet (``Alphabet``) names the finite set of values each draw may take, by label
(``"tail"``, ``"namespace"``, ``"num_tokens"`` ...) or by ``"rule.label"``; bundle
arguments range over every handle the sequence has produced so far; a draw the alphabet
does not name takes one representative value (the strategy's simplest), so a machine that
grows a new draw never explodes the count.

Pruning, each sound under a stated assumption:

- **symmetry**: tokens and namespaces are opaque labels to a cache, so only sequences that
  introduce them in first-appearance order run (token 1 never before token 0; namespace
  ``"a"`` never before ``None``); every other sequence is a renaming of one that runs.
- **failed prefixes**: a step that fails is a finding; nothing is run below it.
- **no-ops**: a step that returns no handle and leaves the implementation's snapshot
  unchanged (a read, a rejected bad call, an evict with nothing evictable) has the same
  futures as its prefix, which are explored anyway: it is checked, nothing runs below it.

Prefixes are shared depth-first: a state is forked (deep copy of machine, adapter and
handles) and every step branches from it, so each sequence costs one step, not its length.
``fork="rerun"`` rebuilds every state by replaying its prefix instead; a state deepcopy
refuses, or copies that turn out to share state, switch to it by themselves. ``explore``
reports which it used and how fast it ran.
"""

from __future__ import annotations

import copy
import itertools
import re
import time
import types
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from hypothesis.control import BuildContext
from hypothesis.errors import UnsatisfiedAssumption
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.stateful import Bundle, MultipleResults, RuleBasedStateMachine

Seen = tuple[tuple[str, int], ...]
"""How many labels of each symmetry class the sequence has introduced so far."""
Fork = Literal["copy", "rerun"]


class Domain(Protocol):
    """The finite values one draw may take, given what the sequence introduced so far."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        """Each allowed value with the ``seen`` that follows from choosing it.

        ``strategy`` is what the rule would have drawn from: a value it cannot produce
        (an integer outside its bounds, an element it does not sample) is never offered.
        """


def _seen_count(seen: Seen, name: str) -> int:
    return dict(seen).get(name, 0)


def _with_count(seen: Seen, name: str, count: int) -> Seen:
    return tuple(sorted({**dict(seen), name: count}.items()))


@dataclass(frozen=True)
class Fixed:
    """Every one of ``values``, no symmetry."""

    values: tuple[Any, ...]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(value, seen) for value in self.values if _admits(strategy, value)]


@dataclass(frozen=True)
class Simplest:
    """The strategy's simplest value only, on purpose (not listed as a representative)."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(_representative(strategy, "", "simplest"), seen)]


@dataclass(frozen=True)
class Every:
    """Every value the rule's own strategy can produce (a small finite one)."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(value, seen) for value in _finite_values(strategy)]


@dataclass(frozen=True)
class Labels:
    """Interchangeable labels (namespaces): a new one only in first-appearance order."""

    symmetry: str
    values: tuple[Any, ...]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        used = _seen_count(seen, self.symmetry)
        return [
            (value, _with_count(seen, self.symmetry, max(used, at + 1)))
            for at, value in enumerate(self.values[: used + 1])
        ]


@dataclass(frozen=True)
class TokenLists:
    """Token lists over ``0 .. alphabet-1`` whose length is in ``lengths(page_size)``.

    Tokens are interchangeable labels: a list may use a token never seen before only if it
    is the next unused one, so ``[1]`` never comes before some ``[0]``.
    """

    symmetry: str
    alphabet: int
    lengths: Callable[[int], Sequence[int]]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        out: list[tuple[Any, Seen]] = []
        used = _seen_count(seen, self.symmetry)
        for length in self.lengths(machine.page_size):
            for tokens in itertools.product(range(self.alphabet), repeat=length):
                after = _canonical_count(tokens, used)
                if after is not None:
                    out.append((list(tokens), _with_count(seen, self.symmetry, after)))
        return out


def _canonical_count(tokens: Sequence[int], used: int) -> int | None:
    """The count of tokens introduced after ``tokens``, or None if it skips a new one."""
    for token in tokens:
        if token > used:
            return None
        used = max(used, token + 1)
    return used


@dataclass(frozen=True)
class Alphabet:
    """What every draw may take: ``domains`` by ``"rule.label"`` or ``"label"``."""

    name: str
    domains: Mapping[str, Domain]

    def domain(self, rule: str, label: str) -> Domain | None:
        return self.domains.get(f"{rule}.{label}") or self.domains.get(label)


def _up_to(n: int) -> Callable[[int], Sequence[int]]:
    return lambda page_size: range(n + page_size)


NAMESPACES = Labels("namespaces", (None, "a"))
TOKENS = TokenLists("tokens", 2, _up_to(2))  # page 1: up to 2 tokens; page 2: up to 3
WHOLE_KEY: dict[str, Domain] = {"base": Simplest(), "cut": Simplest(), "tail": TOKENS}
"""Every key whole from ``tail``: the machines' ``base`` / ``cut`` (a cut of an earlier key,
to make random keys share prefixes) take their simplest value, the empty key."""

ALPHABET = Alphabet(
    "small",
    {
        "page_size": Fixed((1, 2)),
        "window": Fixed((1, 2)),
        "unlock by token": Fixed((True, False)),
        "namespace": NAMESPACES,
        **WHOLE_KEY,
        "matched first": Fixed((False, True)),
        "swa evicted pages": Fixed((0, 1)),
        "with_slot": Fixed((False, True)),
        "snapshot": Fixed((False, True)),
        "evict.num_tokens": Fixed((1, 2)),
        "evict.swa_num_tokens": Fixed((0, 1)),
        "evict.mamba_slots": Fixed((0, 1)),
        "free_sliding_window_kv.swa_num_tokens": Fixed((1,)),
        "inserted key": Every(),  # refresh_often: each key inserted so far
        "roll": Fixed((5,)),  # the reset rule resets on roll 5 only
        "bad call": Every(),
        # a bad call is rejected before it reads its key: one representative key each
        "bad_call.namespace": Fixed((None,)),
        "bad_call.tail": Fixed(([],)),
    },
)
"""One alphabet for every rule set: page sizes 1 and 2, tokens {0, 1}, two namespaces,
windows 1 and 2, small evict counts, every kind of bad call once."""


# ---- running one step ---------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One rule call: the rule and the value of every draw it made, in order."""

    rule: str
    choices: tuple[tuple[str, Any], ...]

    def text(self) -> str:
        shown = ", ".join(f"{label}={value!r}" for label, value in self.choices)
        return f"{self.rule}({shown})"


class AlphabetError(ValueError):
    """The alphabet cannot say what a draw may take: a configuration error, not a finding."""


class _Draws:
    """Plays ``st.data()`` and rule arguments: the i-th draw takes option ``picks[i]``.

    Past the end of ``picks`` every draw takes its first option; ``widths`` records how
    many options each draw had, so the caller can enumerate the siblings.
    """

    def __init__(self, driver: _Driver, state: _State, rule: str, picks: tuple[int, ...]):
        self.driver, self.state, self.rule, self.picks = driver, state, rule, picks
        self.widths: list[int] = []
        self.choices: list[tuple[str, Any]] = []

    def draw(self, strategy: Any, label: Any = None) -> Any:
        name = str(label) if label is not None else f"draw {len(self.widths)}"
        domain = self.driver.alphabet.domain(self.rule, name)
        if domain is None:
            return self._pick(name, [(self._representative(strategy, name), self.state.seen)])
        try:
            options = domain.options(self.state.seen, self.state.machine, strategy)
        except AlphabetError:
            raise
        except Exception as error:  # the alphabet's own mistake must not pass for a finding
            message = f"{self.rule}: the domain of {name!r} failed on {strategy!r}: {error!r}"
            raise AlphabetError(message) from error
        return self._pick(name, options)

    def _representative(self, strategy: Any, name: str) -> Any:
        self.driver.representatives.add(f"{self.rule}.{name}")
        return _representative(strategy, self.rule, name)

    def made(self) -> tuple[int, ...]:
        """The picks this call made: the prefix it was given, then first options."""
        return tuple(self.picks[i] if i < len(self.picks) else 0 for i in range(len(self.widths)))

    def pick_handle(self, bundle: Bundle[Any]) -> Any:
        held = self.state.bundles.setdefault(bundle.name, [])
        at = self._pick(bundle.name, [(i, self.state.seen) for i in range(len(held))])
        return held.pop(at) if bundle.consume else held[at]

    def _pick(self, name: str, options: Sequence[tuple[Any, Seen]]) -> Any:
        if not options:
            raise AlphabetError(f"{self.rule}: draw {name!r} has no options")
        at = len(self.widths)
        pick = self.picks[at] if at < len(self.picks) else 0
        self.widths.append(len(options))
        value, self.state.seen = options[pick]
        self.choices.append((name, value))
        return value


def _unwrap(strategy: Any) -> tuple[str, Any]:
    inner = getattr(strategy, "wrapped_strategy", strategy)
    return type(inner).__name__, inner


def _admits(strategy: Any, value: Any) -> bool:
    """Whether ``strategy`` could produce ``value`` (True where that is not knowable)."""
    kind, inner = _unwrap(strategy)
    if kind == "IntegersStrategy":
        low, high = inner.start, inner.end
        return (low is None or value >= low) and (high is None or value <= high)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return value in inner.elements
    return True


def _finite_values(strategy: Any) -> Sequence[Any]:
    kind, inner = _unwrap(strategy)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return list(inner.elements)
    if kind == "BooleansStrategy":
        return [False, True]
    bounded = kind == "IntegersStrategy" and None not in (inner.start, inner.end)
    if bounded and inner.end - inner.start < 16:
        return list(range(inner.start, inner.end + 1))
    raise AlphabetError(f"no small finite set of values in {strategy!r}")


def _representative(strategy: Any, rule: str, label: str) -> Any:
    """The simplest value of a strategy the alphabet does not name."""
    kind, inner = _unwrap(strategy)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return inner.elements[0]
    if kind == "IntegersStrategy":
        low, high = inner.start, inner.end
        return 0 if (low is None or low <= 0) and (high is None or high >= 0) else low
    if kind == "BooleansStrategy":
        return False
    if kind == "ListStrategy" and not inner.min_size:
        return []
    raise AlphabetError(f"{rule}: the alphabet needs a domain for draw {label!r} ({strategy!r})")


@dataclass(frozen=True)
class _Call:
    step: Step
    widths: tuple[int, ...]  # how many options each draw had
    error: Exception | None  # a finding; UnsatisfiedAssumption: a known finding


@dataclass
class _State:
    machine: Any
    bundles: dict[str, list[Any]]
    seen: Seen
    path: tuple[tuple[str, tuple[int, ...]], ...]  # each step's rule and picks, for rerun
    variant: tuple[tuple[str, Any], ...] = ()  # what the initialize rules drew


@dataclass
class Finding:
    """One distinct finding (the kit's id: ``INV-n:check``), with the shortest sequence that
    reached it and, from the kit's machines, its FORMAT.md trace."""

    id: str
    check: str
    message: str
    page_variant: tuple[tuple[str, Any], ...]
    steps: list[Step]
    trace: dict[str, Any] | None = None

    @property
    def invariant(self) -> str | None:
        found = re.search(r"\bINV-\d+\b", self.message)
        return found.group(0) if found else None

    def lines(self) -> list[str]:
        start = ", ".join(f"{k}={v!r}" for k, v in self.page_variant)
        return [f"start({start})"] + [step.text() for step in self.steps]


@dataclass
class ExhaustiveReport:
    """What one exploration ran: sequences (each checked after every step), time, findings."""

    name: str
    depth: int
    fork: Fork
    sequences: int = 0
    steps: int = 0
    pruned_noops: int = 0
    seconds: float = 0.0
    by_length: Counter[int] = field(default_factory=Counter)
    findings: dict[str, Finding] = field(default_factory=dict)  # by finding id
    acknowledged: int = 0  # sequences that hit a finding acknowledged with ``known``
    starts: int = 0  # initial states: what the initialize rules drew (page size, window ...)
    representatives: set[str] = field(default_factory=set)  # draws with one value
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def rate(self) -> float:
        return self.sequences / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        verdict = "ok" if self.passed else f"FAILED ({len(self.findings)} findings)"
        lengths = ", ".join(f"{n} of length {k}" for k, n in sorted(self.by_length.items()))
        lines = [
            f"{self.name}: {verdict} — {self.sequences} sequences up to {self.depth} steps "
            f"in {self.seconds:.1f}s ({self.rate:.0f}/s, {self.steps} steps run, "
            f"fork={self.fork}, {self.pruned_noops} no-op prefixes not extended)",
            f"    {lengths}",
        ]
        lines += [f"    note: {note}" for note in self.notes]
        if self.acknowledged:
            lines.append(f"    {self.acknowledged} sequences hit acknowledged findings")
        if self.representatives:
            lines.append(f"    one value each: {', '.join(sorted(self.representatives))}")
        for i, finding in enumerate(self.findings.values(), 1):
            lines.append(f"  finding {i} [{finding.id}] {finding.check}: {finding.message}")
            lines += [f"      {line}" for line in finding.lines()]
        return "\n".join(lines)


class _Driver:
    """Runs rules of one machine class on states: the only code that knows Hypothesis."""

    def __init__(self, machine_cls: type[RuleBasedStateMachine], alphabet: Alphabet) -> None:
        self.machine_cls = machine_cls
        self.alphabet = alphabet
        setup = machine_cls.setup_state()
        self.rules = sorted(setup.rules, key=lambda r: r.function.__name__)
        self.by_name = {r.function.__name__: r for r in self.rules}
        self.initializers = sorted(setup.initializers, key=lambda r: r.function.__name__)
        self.invariants = sorted(setup.invariants, key=lambda i: i.function.__name__)
        self.hypothesis_owned = _set_by_hypothesis(machine_cls)
        self.representatives: set[str] = set()  # draws the alphabet does not name

    # ---- states ------------------------------------------------------------------------

    def fresh(self) -> _State:
        return _State(self.machine_cls(), {}, (), ())

    def copy(self, state: _State) -> _State:
        """A deep copy of machine, adapter and handles; Hypothesis' own parts are shared."""
        old = state.machine
        new = object.__new__(type(old))
        own = {k: v for k, v in vars(old).items() if k not in self.hypothesis_owned}
        memo: dict[int, Any] = {id(old): new}
        memo.update({id(v): v for k, v in vars(old).items() if k in self.hypothesis_owned})
        memo.update({id(v): v for k, v in vars(old).items() if k in SHARED})
        # a trace entry is written during its own step only: the copy's list shares them
        memo.update({id(step): step for step in vars(old).get("trace", ())})
        with _bound_builtins_follow_their_owner():
            own, bundles = copy.deepcopy((own, state.bundles), memo)
        vars(new).update({k: v for k, v in vars(old).items() if k in self.hypothesis_owned})
        vars(new).update(own)
        return _State(new, bundles, state.seen, state.path, state.variant)

    def rebuild(self, state: _State) -> _State:
        """The same state by replaying its path on a fresh machine."""
        new = self.fresh()
        for rule, picks in state.path:
            self.call(new, rule, picks)
        new.variant = state.variant
        return new

    # ---- calls ---------------------------------------------------------------------------

    def applicable(self, state: _State, initial: bool) -> list[str]:
        rules = self.initializers if initial else self.rules
        return [
            r.function.__name__
            for r in rules
            if all(pre(state.machine) for pre in r.preconditions)
            and all(state.bundles.get(b.name) for b in r.bundles)
        ]

    def call(self, state: _State, name: str, picks: tuple[int, ...]) -> _Call:
        """Run rule ``name`` with ``picks`` on ``state``; a failed check is returned."""
        rule = self.by_name.get(name) or next(
            r for r in self.initializers if r.function.__name__ == name
        )
        draws = _Draws(self, state, name, picks)
        error: Exception | None = None
        kwargs: dict[str, Any] = {}
        try:
            for arg, strategy in sorted(rule.arguments.items()):
                if isinstance(strategy, Bundle):
                    kwargs[arg] = draws.pick_handle(strategy)
                elif type(strategy).__name__ == "DataStrategy":
                    kwargs[arg] = draws
                else:
                    kwargs[arg] = draws.draw(strategy, arg)
            result = rule.function(state.machine, **kwargs)
            added = list(result.values) if isinstance(result, MultipleResults) else [result]
            for target in rule.targets:  # multiple() with no values adds nothing
                state.bundles.setdefault(getattr(target, "name", target), []).extend(added)
        except AlphabetError:
            raise
        except Exception as failed:  # a finding, or an acknowledged one (UnsatisfiedAssumption)
            error = failed
        state.path = (*state.path, (name, draws.made()))
        return _Call(Step(name, tuple(draws.choices)), tuple(draws.widths), error)

    def check(self, state: _State) -> None:
        for inv in self.invariants:
            if all(pre(state.machine) for pre in inv.preconditions):
                inv.function(state.machine)

    def snapshot(self, state: _State) -> Any:
        sut = getattr(state.machine, "sut", None)
        take = getattr(sut, "snapshot", None)
        return take() if callable(take) else None

    def same_machine(self, before: _State, after: _State) -> bool:
        """The machine's own state (model, ledger, reset epoch ...) is unchanged: a reset of
        an empty cache changes no snapshot, yet every earlier handle is stale after it."""
        old, new = vars(before.machine), vars(after.machine)
        mine = [k for k in old if k not in self.hypothesis_owned | HISTORY | {"sut"}]
        return old.keys() == new.keys() and all(_same(old[k], new[k], set()) for k in mine)

    def changes_handles(self, name: str) -> bool:
        rule = self.by_name[name]
        return bool(rule.targets) or any(b.consume for b in rule.bundles)


def _set_by_hypothesis(machine_cls: type[RuleBasedStateMachine]) -> frozenset[str]:
    """The attributes ``RuleBasedStateMachine.__init__`` itself sets (rules, bundles,
    printers): copies share them. Whatever the machine's own ``__init__`` adds is copied."""
    bare = object.__new__(machine_cls)
    RuleBasedStateMachine.__init__(bare)
    return frozenset(vars(bare))


@contextmanager
def _bound_builtins_follow_their_owner() -> Iterator[None]:
    """Make deepcopy rebind ``some_list.append`` to the copied list.

    ``copy`` treats every builtin method as atomic, so a cache built with
    ``on_node_evict=ids.append`` would, once copied, still append to the original's list
    and two branches would share it. Scoped to one copy; the explorer is single-threaded.
    """
    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]  # no public hook
    atomic = dispatch[types.BuiltinMethodType]
    dispatch[types.BuiltinMethodType] = _copy_builtin_method
    try:
        yield
    finally:
        dispatch[types.BuiltinMethodType] = atomic


def _copy_builtin_method(method: Any, memo: dict[int, Any]) -> Any:
    owner = getattr(method, "__self__", None)
    if owner is None or isinstance(owner, (types.ModuleType, type)):
        return method
    return getattr(copy.deepcopy(owner, memo), method.__name__)


# ---- the exploration ------------------------------------------------------------------------


class _Explorer:
    def __init__(self, driver: _Driver, report: ExhaustiveReport, fork: Fork) -> None:
        self.driver, self.report, self.fork = driver, report, fork
        self.progress: Callable[[ExhaustiveReport], None] | None = None
        self.last_progress = time.perf_counter()

    def branch(self, state: _State) -> _State:
        if self.fork == "copy":
            try:
                return self.driver.copy(state)
            except Exception as error:  # e.g. a native object deepcopy refuses: replay instead
                self.fork = self.report.fork = "rerun"
                self.report.notes.append(f"copying a state failed ({error!r}): prefixes rerun")
        return self.driver.rebuild(state)

    def children(self, state: _State, initial: bool = False) -> Iterator[tuple[_State, _Call]]:
        """Every step from ``state``: each applicable rule with each combination of draws."""
        for name in self.driver.applicable(state, initial):
            pending: list[tuple[int, ...]] = [()]
            while pending:
                picks = pending.pop()
                child = self.branch(state)
                call = self.driver.call(child, name, picks)
                self.report.steps += 1
                made = call.widths
                # every later draw took option 0: its siblings are still to run
                for at in range(len(made) - 1, len(picks) - 1, -1):
                    base = tuple(picks) + (0,) * (at - len(picks))
                    pending.extend((*base, alt) for alt in range(made[at] - 1, 0, -1))
                yield child, call

    def run_root(self, depth: int) -> None:
        """Every variant the initialize rules draw (page size, window ...), then the steps."""
        for root, call in self._initialized(self.driver.fresh(), 0):
            self.report.starts += 1
            failed = call.error or self._check(root)
            if failed is not None:
                self._found(root, [], failed)
                continue
            self.explore(root, [], depth)

    def _initialized(self, state: _State, done: int) -> Iterator[tuple[_State, _Call]]:
        initializers = self.driver.initializers
        if done == len(initializers):
            yield state, _Call(Step("start", ()), (), None)
            return
        name = initializers[done].function.__name__
        for child, call in self.children(state, initial=True):
            if call.step.rule != name:
                continue
            child.variant = (*state.variant, *call.step.choices)
            if call.error is not None:
                yield child, call
                continue
            yield from self._initialized(child, done + 1)

    def explore(self, state: _State, steps: list[Step], depth: int) -> None:
        copying = self.fork == "copy"
        before: Any = self.driver.snapshot(state) if copying else _UNSET
        for child, call in self.children(state):
            self.report.sequences += 1
            self.report.by_length[len(steps) + 1] += 1
            self._maybe_progress()
            path = [*steps, call.step]
            failed = call.error or self._check(child)
            if _acknowledged_now(child):
                self.report.acknowledged += 1  # a known finding: recorded, explored past
            if failed is not None:
                self._found(child, path, failed)
                continue  # nothing runs below a failed step
            if len(path) >= depth:
                continue
            if not self.driver.changes_handles(call.step.rule):
                if before is _UNSET:
                    before = self.driver.snapshot(state)
                same_cache = before is not None and self.driver.snapshot(child) == before
                if same_cache and self.driver.same_machine(state, child):
                    self.report.pruned_noops += 1
                    continue
            self.explore(child, path, depth)
        if copying and before is not None and self.driver.snapshot(state) != before:
            raise _CopiesShareState(f"a step on a copy changed its original, after {steps}")

    def _check(self, state: _State) -> Exception | None:
        try:
            self.driver.check(state)
        except AlphabetError:
            raise
        except Exception as failed:  # a broken invariant: a finding (or a known one)
            return failed
        return None

    def _found(self, state: _State, path: list[Step], error: Exception) -> None:
        """Keep the shortest sequence per finding id (ids as ``--known`` takes them)."""
        from radixkv_conformance import findings

        if isinstance(error, UnsatisfiedAssumption):  # a known one the run cannot go past
            if not _acknowledged_now(state):
                self.report.acknowledged += 1
            return
        if isinstance(error, findings.Finding):  # the kit's machine: id, check and trace
            found = Finding(error.finding_id, error.check, error.message, state.variant, path)
            found.trace = error.trace
        else:
            check = _check_name(state.machine) or (path[-1].rule if path else "start")
            fid = findings.finding_id(check, error)
            found = Finding(fid, check, findings.describe(error), state.variant, path)
        shortest = self.report.findings.get(found.id)
        if shortest is None or len(path) < len(shortest.steps):
            self.report.findings[found.id] = found

    def _maybe_progress(self) -> None:
        now = time.perf_counter()
        if self.progress is not None and now - self.last_progress >= 1.0:
            self.last_progress = now
            self.progress(self.report)


_UNSET = object()
SHARED = frozenset({"profile", "caps"})
"""Machine attributes no step changes (the run's profile, the adapter's capabilities): a
copy shares them instead of copying them."""
HISTORY = frozenset({"trace", "check"})
"""Machine attributes that only record what ran (the kit's trace, the current check's name):
they differ after every step and change no future, so the no-op test ignores them."""


_OWN_METHODS: dict[type, frozenset[str]] = {}


def _own_methods(cls: type) -> frozenset[str]:
    """Names defined by ``cls`` or a base other than ``object`` (cached per class)."""
    if cls not in _OWN_METHODS:
        bases = [base for base in cls.__mro__ if base is not object]
        _OWN_METHODS[cls] = frozenset(name for base in bases for name in vars(base))
    return _OWN_METHODS[cls]


def _same(a: Any, b: Any, visited: set[tuple[int, int]]) -> bool:
    """Structural equality of two copies (objects without ``__eq__`` compared field by
    field); anything it cannot compare counts as different, which only prunes less."""
    if a is b or (id(a), id(b)) in visited:
        return True
    if type(a) is not type(b):
        return False
    visited.add((id(a), id(b)))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], visited) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y, visited) for x, y in zip(a, b, strict=True))
    try:
        if "__eq__" in _own_methods(type(a)):
            return bool(a == b)
        return hasattr(a, "__dict__") and _same(vars(a), vars(b), visited)
    except Exception:  # e.g. a tensor's ambiguous truth value: not provably the same
        return False


class _CopiesShareState(Exception):
    """A copied state is not independent of its original (a native object deepcopy only
    shared, say): the exploration starts over, replaying prefixes instead."""


def _check_name(machine: Any) -> str | None:
    """The check a machine says it was running (``check`` on the instance, or the older
    class-level ``last_check``), if it says."""
    for name in (getattr(machine, "check", None), getattr(type(machine), "last_check", None)):
        if isinstance(name, str) and name:
            return name
    return None


def explore(
    machine_cls: type[RuleBasedStateMachine],
    alphabet: Alphabet,
    depth: int,
    *,
    name: str | None = None,
    fork: Fork = "copy",
    progress: Callable[[ExhaustiveReport], None] | None = None,
) -> ExhaustiveReport:
    """Run every sequence of 1..``depth`` steps of ``machine_cls`` over ``alphabet``.

    Never raises for a finding: each distinct failed check (check name, invariant id) is in
    ``report.findings`` with the shortest sequence that reached it.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    started = time.perf_counter()
    report = ExhaustiveReport(name or machine_cls.__name__, depth, fork)
    explorer = _Explorer(_Driver(machine_cls, alphabet), report, fork)
    explorer.progress = progress
    with _quiet_build_context():
        try:
            explorer.run_root(depth)
        except _CopiesShareState as leak:
            report = ExhaustiveReport(report.name, depth, "rerun", notes=[f"{leak}: rerun"])
            explorer = _Explorer(_Driver(machine_cls, alphabet), report, "rerun")
            explorer.progress = progress
            explorer.run_root(depth)
    report.representatives = explorer.driver.representatives
    report.seconds = time.perf_counter() - started
    return report


def _quiet_build_context() -> BuildContext:
    """Rules may call ``hypothesis.note``, which needs a test context: a silent one."""
    data = ConjectureData.for_choices(())
    return BuildContext(data, wrapped_test=lambda: None)


# ---- what ``radixkv check --exhaustive N`` runs ---------------------------------------------


@dataclass(frozen=True)
class Target:
    """One machine to explore: a label, how to build its class, and its alphabet."""

    label: str
    machine: Callable[[], type[RuleBasedStateMachine]]
    alphabet: Alphabet = ALPHABET


def _acknowledged_now(state: _State) -> bool:
    """The last step (or the invariants after it) hit a known finding and went on."""
    hits: list[tuple[int, str]] = getattr(state.machine, "acknowledged", [])
    trace: list[Any] = getattr(state.machine, "trace", [])
    return bool(hits) and hits[-1][0] == len(trace) - 1


def target(label: str, factory: Any, profile: Any, known: Iterable[str] = ()) -> Target:
    """The kit's machine for ``factory`` under ``profile``: the rule set of every capability
    the adapter declares (checked up front, as for the random search)."""

    def machine() -> type[RuleBasedStateMachine]:
        from radixkv_conformance.registry import machine_for

        name = "".join(ch for ch in label.title() if ch.isalnum()) or "Cache"
        return machine_for(f"{name}Exhaustive", factory, profile, known=frozenset(known))

    return Target(label, machine)


def own_targets(known: Iterable[str] = ()) -> list[Target]:
    """radixkv's caches of distinct shapes (``targets.SHAPES``): RadixCache, its SWA mode,
    MambaRadixCache, ChunkCache, RadixTrie (the eviction policies share RadixCache's tree,
    and the random search checks each). radixkv's caches take any page size, so each is
    explored at page sizes 1 and 2 even where the random search's profile draws others."""
    from radixkv_conformance.profile import RADIXKV
    from radixkv_conformance.targets import SHAPES, load

    out = []
    for label, name in SHAPES:
        factory, declared = load(name)
        profile = declared or RADIXKV
        if name.startswith("radixkv_conformance.adapters.radixkv:"):
            profile = replace(profile, page_sizes=(1, 2))
        out.append(target(label, factory, profile, known))
    return out


def command(targets: Sequence[Target], depth: int, traces: Path) -> int:
    """``radixkv check --exhaustive N``: explore, print, write a trace per finding."""
    from radixkv_conformance.progress import Progress
    from radixkv_conformance.trace import write

    started = time.perf_counter()
    reports = []
    for target in targets:
        with Progress(target.label) as bar:

            def show(report: ExhaustiveReport, bar: Progress = bar) -> None:
                bar.update(Counter({"runs": report.sequences, "steps": report.steps}))

            report = explore(
                target.machine(), target.alphabet, depth, name=target.label, progress=show
            )
        reports.append(report)
        print(report.render(), flush=True)
        for i, finding in enumerate(report.findings.values(), 1):
            if finding.trace is not None:
                path = traces / f"exhaustive-{_slug(target.label)}-{i}.json"
                write(finding.trace, path)
                print(f"  trace of finding {i}: {path}")
    total = sum(r.sequences for r in reports)
    seconds = time.perf_counter() - started
    failed = [r.name for r in reports if not r.passed]
    print(
        f"\nexhaustive, up to {depth} steps: {total} sequences in {seconds:.1f}s"
        f" ({total / seconds if seconds else 0:.0f}/s)"
    )
    print("every sequence held" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in label.lower()).strip("-")
