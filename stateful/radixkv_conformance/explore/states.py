"""Every reachable state: breadth-first explicit-state exploration to a fixpoint.

``radixkv check --states BOUNDS`` explores the pair (implementation, spec model) the way
TLC or SPIN explore a model: breadth first, from every initial state (page size, window),
every enabled operation of a bounded alphabet from every state, every invariant checked and
every result compared with the spec after every step, and a visited set of *canonical
states* (``canonical``; SPEC.md "The canonical state"), until no new state appears (a
fixpoint: every state the bounds admit is reached and conforms) or the depth cap.

Operations are the kit's rules run by the sequence explorer's driver (``exhaustive``), so a
step is a FORMAT.md trace step and every finding comes with its trace; breadth-first order
makes each one a shortest sequence to its finding.

A state is expanded from a deep copy of its machine (adapter and spec model included); an
engine whose state a deepcopy refuses has each state rebuilt by replaying its shortest path
(``fork="rerun"``, said in the report).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radixkv_conformance.explore.bounds import LOW, SLOTS, Bounds, own_bounds, parse_bounds
from radixkv_conformance.explore.canonical import canonical
from radixkv_conformance.explore.driver import (
    Call,
    Driver,
    Fork,
    RuleCall,
    State,
    quiet_build_context,
)
from radixkv_conformance.explore.sequences import (
    ExhaustiveReport,
    Explorer,
    Target,
    listed,
)
from radixkv_conformance.explore.workers import Workers, tallies, why_not_fork
from radixkv_conformance.findings import Failure, finding_lines
from radixkv_conformance.trace import file_label

# ---- the exploration --------------------------------------------------------------------------


@dataclass
class StatesReport:
    """What one exploration reached: states, transitions, depth, fixpoint, findings."""

    name: str
    bounds: str
    fork: Fork
    merge: bool = True
    states: int = 0
    transitions: int = 0
    max_depth: int = 0
    fixpoint: bool = False
    budget_spent: bool = False  # stopped at its time budget, inside level ``complete + 1``
    complete: int = 0  # every state this many steps from a start was expanded
    beyond: int = 0  # successors past the lock bound: checked, not expanded
    seconds: float = 0.0
    by_depth: Counter[int] = field(default_factory=Counter)
    findings: dict[str, Failure] = field(default_factory=dict)
    outcomes: set[Hashable] = field(default_factory=set)  # what states show (``_outcome``)
    acknowledged: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def ending(self) -> str:
        if self.budget_spent:
            return (
                f"time budget spent: every state within {self.complete} steps expanded, "
                f"depth {self.complete + 1} in part"
            )
        return "fixpoint reached" if self.fixpoint else "depth cap reached, no fixpoint"

    def summary(self) -> str:
        """One line: how much, how deep, how it ended, within which bounds."""
        return (
            f"{self.states} states, {self.transitions} transitions in {self.seconds:.1f}s, "
            f"{self.ending()} ({self.bounds})"
        )

    def render(self) -> str:
        verdict = "ok" if self.passed else f"FAILED ({len(self.findings)} findings)"
        lines = [
            f"{self.name}: {verdict} — {self.states} states, {self.transitions} transitions, "
            f"deepest state at depth {self.max_depth}, {self.seconds:.1f}s, {self.ending()} "
            f"(fork={self.fork})",
            f"    bounds: {self.bounds}; {self.beyond} successors past the lock bound "
            "checked, not expanded",
        ]
        lines += [f"    note: {note}" for note in self.notes]
        if self.acknowledged:
            lines.append(f"    {self.acknowledged} transitions hit acknowledged findings")
        lines += listed(self.findings.values())
        return "\n".join(lines)


class _Breadth(Explorer):
    """The sequence explorer's steps and findings, breadth first over canonical states."""

    def __init__(self, driver: Driver, report: StatesReport, bounds: Bounds, fork: Fork):
        shim = ExhaustiveReport(report.name, 0, fork)
        super().__init__(driver, shim, fork)
        self.states, self.bounds = report, bounds
        self.visited: set[Hashable] = set()
        self.deadline = float("inf")
        self.on_finding: Callable[[Failure], None] | None = None

    def copy_failed(self, error: Exception) -> None:
        self.states.fork = "rerun"
        self.states.notes.append(f"copying a state failed ({error!r}): paths replayed")

    def rebuild(self, state: State) -> State:
        """The state again, by replaying its shortest path on a fresh machine, checked
        after each step as when it was reached (the invariants close each step's coverage
        probe); what the replay counts is taken back out: those steps were counted once."""
        counters = tallies(self.driver.machine_cls)
        kept = [Counter(counter) for counter in counters]
        new = self.driver.fresh()
        starts = len(self.driver.initializers)
        for at, (rule, picks) in enumerate(state.path):
            if at == starts:
                self._start(new)
            self.driver.call(new, rule, picks)
            if at >= starts:
                self.driver.check(new)
        if len(state.path) == starts:
            self._start(new)
        new.variant = state.variant
        for counter, before in zip(counters, kept, strict=True):
            counter.clear()
            counter.update(before)
        return new

    def _start(self, root: State) -> None:
        """A start state as ``run`` makes it: checked, then its identities offset."""
        self.driver.check(root)
        _offset(root.machine)

    def run(self, merge: bool, jobs: int = 1) -> None:
        level: list[State] = []
        for root, call in self._initialized(self.driver.fresh(), 0):
            failed = call.error or self._check(root)
            if failed is not None:
                self._found(root, [], failed)
                continue
            _offset(root.machine)
            if self._new(root, self._key(root), 0, merge):
                level.append(root)
        depth = 0
        workers = Workers(self, jobs) if jobs > 1 else None
        expand = workers.expand if workers is not None else self._expand
        try:
            while level and (self.bounds.depth is None or depth < self.bounds.depth):
                nxt: list[State] = []
                for state, successors in zip(level, expand(level, depth), strict=True):
                    nxt += self._take(state, successors, depth, merge)
                level, depth = nxt, depth + 1
                self.states.complete = depth
        except _OutOfTime:
            self.states.budget_spent = True
            return
        finally:
            if workers is not None:
                workers.close()
        self.states.fixpoint = not level

    def _expand(self, level: list[State], depth: int) -> Iterator[Iterable[Successor]]:
        """Each state's successors, in order (``Workers.expand`` is the same, in parallel)."""
        for state in level:
            yield self.successors(state)

    def successors(self, state: State) -> Iterator[Successor]:
        """What each step from ``state`` leads to: a finding, a state past the lock bound,
        or a state with its canonical key (whether it was seen before is the caller's), one
        at a time: a copy the caller does not keep is freed before the next is made."""
        steps = state.steps
        for child, call in self.children(state):
            path = [*steps, call.step]
            failed = call.error or self._check(child)
            if failed is not None:
                yield Successor(None, call.step, self._finding(child, path, failed))
            elif len(child.bundles.get("locks", ())) > self.bounds.locks:
                yield Successor(None, call.step, beyond=True)
            else:
                yield Successor(child, call.step, key=self._key(child))

    def _take(
        self, state: State, successors: Iterable[Successor], depth: int, merge: bool
    ) -> list[State]:
        """Count ``successors``, keep their findings and return the new states among them."""
        out = []
        steps = state.steps
        for successor in successors:
            self.states.transitions += 1
            self._maybe_progress()
            if depth >= self.bounds.floor and time.perf_counter() >= self.deadline:
                raise _OutOfTime
            if successor.finding is not None:
                self._keep(successor.finding)
            elif successor.beyond:
                self.states.beyond += 1
            elif (child := successor.state) is not None:
                child.steps = [*steps, successor.step]
                if self._new(child, successor.key, depth + 1, merge):
                    out.append(child)
        return out

    def _key(self, state: State) -> Hashable:
        low, memory = self.bounds.low(), bool(self.bounds.memory)
        return canonical(state, self.driver.hypothesis_owned, low, memory)

    def _new(self, state: State, key: Hashable, depth: int, merge: bool) -> bool:
        self.states.outcomes.add(_outcome(key))
        if merge and key in self.visited:
            return False
        self.visited.add(key)
        self.states.states += 1
        self.states.by_depth[depth] += 1
        self.states.max_depth = max(self.states.max_depth, depth)
        if self.fork == "rerun":
            state.machine = None  # rebuilt from its path when expanded
        return True

    def children(self, state: State, initial: bool = False) -> Iterator[tuple[State, Call]]:
        if state.machine is None:
            state = self.rebuild(state)
        return super().children(state, initial)

    def _found(self, state: State, path: list[Any], error: Exception) -> None:
        finding = self._finding(state, path, error)
        if finding is not None:
            self._keep(finding)

    def _keep(self, found: Failure) -> None:
        """Breadth first, the first sequence to a finding is a shortest one: said at once."""
        shortest = self.report.findings.get(found.finding)
        if shortest is None or len(found.calls) < len(shortest.calls):
            self.report.findings[found.finding] = found
            if shortest is None and self.on_finding is not None:
                self.on_finding(found)


@dataclass
class Successor:
    """One step from a state, as ``_Breadth.successors`` judged it."""

    state: State | None  # the state it leads to, where that state is to be kept
    step: RuleCall
    finding: Failure | None = None
    beyond: bool = False  # past the lock bound: checked, not expanded
    key: Hashable = None  # the canonical key of a state to keep (``canonical``)


class _OutOfTime(Exception):
    """The exploration's time budget is spent (the level in progress stays in part)."""


def _outcome(key: Hashable) -> Hashable:
    """What a state shows the caller: the start variant, the spec's state and the cache's
    own part of the picture (the soundness test compares these, merged or not)."""
    parts: tuple[Any, ...] = key  # type: ignore[assignment]  # canonical() builds a tuple
    return (parts[0], parts[3], parts[4])


def _offset(machine: Any) -> None:
    """Start the kit's KV indices at ``LOW`` and its state slots at ``SLOTS``: identities,
    never confused with tokens, counts or ranks, nor with each other (a trace replays the
    same with any start)."""
    machine.next_index = max(machine.next_index, LOW)
    machine.next_slot = max(machine.next_slot, SLOTS)


def explore_states(
    machine_cls: Any,
    bounds: Bounds,
    *,
    name: str | None = None,
    merge: bool = True,
    fork: Fork = "copy",
    progress: Callable[[StatesReport], None] | None = None,
    budget: float | None = None,
    on_finding: Callable[[Failure], None] | None = None,
    jobs: int = 1,
) -> StatesReport:
    """Breadth-first exploration of ``machine_cls`` within ``bounds``; never raises for a
    finding (each distinct one is in ``findings`` with a shortest sequence, and given to
    ``on_finding`` as soon as it is found: shortest first). ``budget`` seconds end it inside
    a level (the report says which levels were complete). ``merge=False`` expands every state
    reached, merged or not (the soundness test's reference; give it a depth cap). ``jobs``
    worker processes expand each level (``workers``): the same states, findings and shortest
    traces as one process."""
    if budget is not None and budget <= 0:
        raise ValueError(f"the exploration's budget must be positive seconds, got {budget}")
    if jobs < 1:
        raise ValueError(f"the exploration's jobs must be 1 or more, got {jobs}")
    started = time.perf_counter()
    report = StatesReport(name or machine_cls.__name__, bounds.text(), fork, merge)
    explorer = _Breadth(Driver(machine_cls, bounds.alphabet()), report, bounds, fork)
    explorer.on_finding = on_finding
    if budget is not None:
        explorer.deadline = started + budget
    if progress is not None:
        explorer.progress = lambda _: progress(report)
    refused = why_not_fork() if jobs > 1 else None
    if refused is not None:
        report.notes.append(f"{jobs} jobs asked for, but {refused}: one process")
        jobs = 1
    with quiet_build_context():
        explorer.run(merge, jobs)
    report.findings = explorer.report.findings
    report.acknowledged = explorer.report.acknowledged
    report.seconds = time.perf_counter() - started
    return report


# ---- what ``radixkv check --states BOUNDS`` runs --------------------------------------------


def command(
    targets: Sequence[Target],
    text: str,
    traces: Path,
    own: bool,
    budget: float | None = None,
    jobs: int = 1,
) -> int:
    """Explore each target (``budget`` seconds each at most, shared by the stages of a
    foreign cache's bounds: ``Bounds.stages``) with ``jobs`` worker processes, print each
    finding as it is found with its trace, then each exploration's row."""
    from radixkv_conformance.progress import Progress

    reports = []
    for target in targets:
        bounds = own_bounds(text, target.label) if own else parse_bounds(text)
        stages = bounds.stages() if budget is not None and not own else (bounds,)
        announce = Announce(target.label, traces / f"states-{file_label(target.label)}")
        for stage in stages:
            with Progress(target.label) as bar:

                def show(report: StatesReport, bar: Progress = bar) -> None:
                    bar.update(Counter({"runs": report.states, "steps": report.transitions}))

                report = explore_states(
                    target.machine(),
                    stage,
                    name=target.label,
                    progress=show,
                    budget=None if budget is None else budget / len(stages),
                    on_finding=announce,
                    jobs=jobs,
                )
            reports.append(report)
            print(report.render(), flush=True)
    print("\n" + table(reports))
    failed = [r.name for r in reports if not r.passed]
    print("every reachable state held" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


class Announce:
    """Prints each finding the moment it is found, and writes its trace (``PREFIX-N.json``)."""

    def __init__(self, label: str, prefix: Path) -> None:
        self.label, self.prefix, self.count = label, prefix, 0
        self.said: set[str] = set()  # a later stage finds them again: said once

    def __call__(self, found: Failure) -> None:
        from radixkv_conformance.trace import write

        if found.finding in self.said:
            return
        self.said.add(found.finding)
        self.count += 1
        print("\n".join(finding_lines(found, self.count, "found shortest", self.label)))
        if found.trace:  # the kit's machines trace every finding
            path = self.prefix.with_name(f"{self.prefix.name}-{self.count}.json")
            write(found.trace, path)
            print(f"  trace: {path}")
        print(flush=True)


def table(reports: Sequence[StatesReport]) -> str:
    """The table of docs/verification/states.md (docs/figures.py): one row per exploration."""
    rows = [
        "| cache | bounds | states | transitions | max depth | seconds | fixpoint |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        rows.append(
            f"| {r.name} | `{r.bounds}` | {r.states} | {r.transitions} | {r.max_depth} "
            f"| {r.seconds:.1f} | {'yes' if r.fixpoint else 'no'} |"
        )
    return "\n".join(rows)
