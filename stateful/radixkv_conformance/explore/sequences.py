"""Every operation sequence up to N steps, checked (``radixkv check --exhaustive N``).

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

import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis.errors import UnsatisfiedAssumption
from hypothesis.stateful import RuleBasedStateMachine

from radixkv_conformance.explore.alphabet import ALPHABET, Alphabet
from radixkv_conformance.explore.driver import (
    AlphabetError,
    Call,
    Driver,
    Fork,
    RuleCall,
    State,
    quiet_build_context,
)
from radixkv_conformance.findings import (
    Failure,
    Finding,
    describe,
    finding_id,
    finding_lines,
)
from radixkv_conformance.protocol import AdapterError
from radixkv_conformance.trace import file_label


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
    findings: dict[str, Failure] = field(default_factory=dict)  # by finding id, shortest
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
        lines += listed(self.findings.values())
        return "\n".join(lines)


# ---- the exploration ------------------------------------------------------------------------


def listed(findings: Iterable[Failure]) -> list[str]:
    """A report's findings, numbered, each with its steps."""
    lines: list[str] = []
    for i, finding in enumerate(findings, 1):
        lines += finding_lines(finding, i, "explorer report")
    return lines


class Explorer:
    def __init__(self, driver: Driver, report: ExhaustiveReport, fork: Fork) -> None:
        self.driver, self.report, self.fork = driver, report, fork
        self.progress: Callable[[ExhaustiveReport], None] | None = None
        self.last_progress = time.perf_counter()

    def branch(self, state: State) -> State:
        if self.fork == "copy":
            try:
                return self.driver.copy(state)
            except Exception as error:  # e.g. a native object deepcopy refuses: replay instead
                self.fork = "rerun"
                self.copy_failed(error)
        return self.rebuild(state)

    def rebuild(self, state: State) -> State:
        return self.driver.rebuild(state)

    def copy_failed(self, error: Exception) -> None:
        """Say in the report that states are rebuilt from here on, and why."""
        self.report.fork = "rerun"
        self.report.notes.append(f"copying a state failed ({error!r}): prefixes rerun")

    def children(self, state: State, initial: bool = False) -> Iterator[tuple[State, Call]]:
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

    def _initialized(self, state: State, done: int) -> Iterator[tuple[State, Call]]:
        initializers = self.driver.initializers
        if done == len(initializers):
            yield state, Call(RuleCall("start", ()), (), None)
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

    def explore(self, state: State, steps: list[RuleCall], depth: int) -> None:
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

    def _check(self, state: State) -> Exception | None:
        try:
            self.driver.check(state)
        except (AlphabetError, AdapterError):
            raise
        except Exception as failed:  # a broken invariant: a finding (or a known one)
            return failed
        return None

    def _found(self, state: State, path: list[RuleCall], error: Exception) -> None:
        """Keep the shortest sequence per finding id (ids as ``--known`` takes them)."""
        found = self._finding(state, path, error)
        if found is None:
            return
        shortest = self.report.findings.get(found.finding)
        if shortest is None or len(path) < len(shortest.calls):
            self.report.findings[found.finding] = found

    def _finding(self, state: State, path: list[RuleCall], error: Exception) -> Failure | None:
        """What ``error`` after ``path`` is: a finding, or (None) an acknowledged one."""
        if isinstance(error, UnsatisfiedAssumption):  # a known one the run cannot go past
            if not _acknowledged_now(state):
                self.report.acknowledged += 1
            return None
        calls = tuple(path)
        if isinstance(error, Finding):  # the kit's machine: id, check and trace
            return Failure(
                error.finding_id, error.check, error.message, error.trace, state.variant, calls
            )
        check = _check_name(state.machine) or (path[-1].rule if path else "start")
        no_trace: dict[str, Any] = {}  # a machine other than the kit's keeps none
        fid, message = finding_id(check, error), describe(error)
        return Failure(fid, check, message, no_trace, state.variant, calls)

    def _maybe_progress(self) -> None:
        now = time.perf_counter()
        if self.progress is not None and now - self.last_progress >= 1.0:
            self.last_progress = now
            self.progress(self.report)


_UNSET = object()


class _CopiesShareState(Exception):
    """A copied state is not independent of its original (a native object deepcopy only
    shared, say): the exploration starts over, replaying prefixes instead."""


def _check_name(machine: Any) -> str | None:
    """The check a machine says it was running (``check``), if it says."""
    name = getattr(machine, "check", None)
    return name if isinstance(name, str) and name else None


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
    explorer = Explorer(Driver(machine_cls, alphabet), report, fork)
    explorer.progress = progress
    with quiet_build_context():
        try:
            explorer.run_root(depth)
        except _CopiesShareState as leak:
            report = ExhaustiveReport(report.name, depth, "rerun", notes=[f"{leak}: rerun"])
            explorer = Explorer(Driver(machine_cls, alphabet), report, "rerun")
            explorer.progress = progress
            explorer.run_root(depth)
    report.representatives = explorer.driver.representatives
    report.seconds = time.perf_counter() - started
    return report


# ---- what ``radixkv check --exhaustive N`` runs ---------------------------------------------


@dataclass(frozen=True)
class Target:
    """One machine to explore: a label, how to build its class, and its alphabet."""

    label: str
    machine: Callable[[], type[RuleBasedStateMachine]]
    alphabet: Alphabet = ALPHABET


def _acknowledged_now(state: State) -> bool:
    """The last step (or the invariants after it) hit a known finding and went on."""
    hits: list[tuple[int, str]] = getattr(state.machine, "acknowledged", [])
    trace: list[Any] = getattr(state.machine, "trace", [])
    return bool(hits) and hits[-1][0] == len(trace) - 1


def _explored(targets: Sequence[Target], depth: int, jobs: int) -> Iterator[ExhaustiveReport]:
    """Each target's exploration, in order: here, or in ``jobs`` forked processes (an
    exploration does not depend on which process runs it)."""
    global _TARGETS
    from radixkv_conformance.explore.workers import can_fork

    if jobs > 1 and len(targets) > 1 and can_fork():
        _TARGETS = list(targets)  # what the forked workers hold
        with multiprocessing.get_context("fork").Pool(min(jobs, len(targets))) as pool:
            yield from pool.imap(_explore_one, [(at, depth) for at in range(len(targets))])
        return
    from radixkv_conformance.progress import Progress

    for target in targets:
        with Progress(target.label) as bar:

            def show(report: ExhaustiveReport, bar: Progress = bar) -> None:
                bar.update(Counter({"runs": report.sequences, "steps": report.steps}))

            yield explore(
                target.machine(), target.alphabet, depth, name=target.label, progress=show
            )


_TARGETS: list[Target] = []


def _explore_one(task: tuple[int, int]) -> ExhaustiveReport:
    at, depth = task
    target = _TARGETS[at]
    return explore(target.machine(), target.alphabet, depth, name=target.label)


def target(label: str, factory: Any, profile: Any, known: Iterable[str] = ()) -> Target:
    """The kit's machine for ``factory`` under ``profile``: the rule set of every capability
    the adapter declares (checked up front, as for the random search)."""

    def machine() -> type[RuleBasedStateMachine]:
        from radixkv_conformance.fuzz import machine_name
        from radixkv_conformance.registry import machine_for

        return machine_for(
            machine_name(label, "Exhaustive"), factory, profile, known=frozenset(known)
        )

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


def command(targets: Sequence[Target], depth: int, traces: Path, jobs: int = 1) -> int:
    """``radixkv check --exhaustive N``: explore (``jobs`` targets at once, one process
    each), print in the targets' order, write a trace per finding."""
    from radixkv_conformance.trace import write

    started = time.perf_counter()
    reports = []
    for target, report in zip(targets, _explored(targets, depth, jobs), strict=True):
        reports.append(report)
        print(report.render(), flush=True)
        for i, finding in enumerate(report.findings.values(), 1):
            if finding.trace:  # the kit's machines trace every finding
                path = traces / f"exhaustive-{file_label(target.label)}-{i}.json"
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
